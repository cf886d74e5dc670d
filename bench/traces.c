/* bench/traces: builds the traced corpus. Reads setups (ID <TAB> MODEL <TAB> ARGS, as
 * bench/traced/setups.sh prints them) on stdin, runs `vramfit trace MODEL ARGS --json` for
 * each whose id starts with PREFIX (all when none), and writes one row per setup to
 * OUT_DIR/<framework>.tsv, replacing the rows of the same ids and keeping the others:
 *
 *   id model family framework framework_version torch args allocated_bytes
 *   reserved_bytes phase seconds
 *
 * family is the model's config.json model_type (qwen2, gemma2, mistral, phi3...): the
 * catalogue's families group architectures (Qwen2.5 and Mistral are llama there).
 *
 * A setup that fails to trace is reported with the tracer's last line and left out.
 * Exit 1 when any failed.
 *
 * usage: bench_traces VRAMFIT OUT_DIR [PREFIX] < setups */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define MAX_ROWS 4096
#define HEADER "id\tmodel\tfamily\tframework\tframework_version\ttorch\targs\tallocated_bytes\treserved_bytes\tphase\tseconds"

struct row {
  char id[32], framework[32], line[2048];
};

struct table {
  char path[1024];
  struct row rows[MAX_ROWS];
  int n;
};

static void table_load(struct table *t, const char *dir, const char *framework) {
  snprintf(t->path, sizeof t->path, "%s/%s.tsv", dir, framework);
  t->n = 0;
  FILE *f = fopen(t->path, "r");
  char line[2048];
  for (int i = 0; f && fgets(line, sizeof line, f) && t->n < MAX_ROWS; i++) {
    if (i == 0) continue;
    struct row *r = &t->rows[t->n++];
    snprintf(r->line, sizeof r->line, "%s", line);
    snprintf(r->id, sizeof r->id, "%.*s", (int)strcspn(line, "\t"), line);
  }
  if (f) fclose(f);
}

static void table_put(struct table *t, const char *id, const char *line) {
  int i = 0;
  while (i < t->n && strcmp(t->rows[i].id, id) != 0) i++;
  if (i == t->n) {
    if (t->n == MAX_ROWS) return;
    t->n++;
  }
  snprintf(t->rows[i].id, sizeof t->rows[i].id, "%s", id);
  snprintf(t->rows[i].line, sizeof t->rows[i].line, "%s", line);
}

static int by_id(const void *a, const void *b) {
  return strcmp(((const struct row *)a)->id, ((const struct row *)b)->id);
}

static int table_save(struct table *t) {
  qsort(t->rows, (size_t)t->n, sizeof *t->rows, by_id);
  FILE *f = fopen(t->path, "w");
  if (!f) return -1;
  fprintf(f, "%s\n", HEADER);
  for (int i = 0; i < t->n; i++) fputs(t->rows[i].line, f);
  return fclose(f);
}

/* Runs one trace; on success fills line (a corpus row) and returns 0. */
static int trace(const char *bin, const char *id, const char *model, const char *args, char *line, size_t size,
                 char *framework, size_t fw_size) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "%s trace %s %s --json 2>/tmp/vramfit-traces.err", bin, model, args);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  json_error_t err;
  json_t *root = json_loadf(p, 0, &err);
  int status = pclose(p);
  json_t *t = json_object_get(root, "traced"), *fw = json_object_get(root, "framework");
  if (!root || status != 0 || !t) {
    json_decref(root);
    return -1;
  }
  snprintf(framework, fw_size, "%s", json_string_value(json_object_get(fw, "name")));
  snprintf(line, size, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%lld\t%lld\t%s\t%.1f\n", id, model,
           json_string_value(json_object_get(json_object_get(root, "model"), "model_type")), framework,
           json_string_value(json_object_get(fw, "version")), json_string_value(json_object_get(root, "torch")),
           args, (long long)json_integer_value(json_object_get(t, "allocated_bytes")),
           (long long)json_integer_value(json_object_get(t, "reserved_bytes")),
           json_string_value(json_object_get(t, "phase")), json_number_value(json_object_get(root, "seconds")));
  json_decref(root);
  return 0;
}

static void last_error_line(char *buf, size_t size) {
  FILE *f = fopen("/tmp/vramfit-traces.err", "r");
  char line[1024];
  buf[0] = '\0';
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "trace:", 6) != 0) snprintf(buf, size, "%.*s", (int)strcspn(line, "\n"), line);
  if (f) fclose(f);
}

int main(int argc, char **argv) {
  if (argc < 3 || argc > 4) {
    fprintf(stderr, "usage: %s VRAMFIT OUT_DIR [PREFIX] < setups\n", argv[0]);
    return 2;
  }
  const char *prefix = argc == 4 ? argv[3] : "";
  static struct table table;
  char current[32] = "", line[2048], row[2048];
  int traced = 0, failed = 0;
  while (fgets(line, sizeof line, stdin)) {
    char *id = strtok(line, "\t"), *model = strtok(NULL, "\t"), *args = strtok(NULL, "\n");
    if (!id || !model || !args || strncmp(id, prefix, strlen(prefix)) != 0) continue;
    char framework[32];
    if (trace(argv[1], id, model, args, row, sizeof row, framework, sizeof framework) != 0) {
      char why[1024];
      last_error_line(why, sizeof why);
      printf("%-12s %-24s FAILED: %s\n", id, model, why);
      failed++;
      continue;
    }
    if (strcmp(current, framework) != 0) {
      if (current[0] && table_save(&table) != 0) return perror(table.path), 2;
      table_load(&table, argv[2], framework);
      snprintf(current, sizeof current, "%s", framework);
    }
    table_put(&table, id, row);
    printf("%s", row);
    fflush(stdout);
    traced++;
  }
  if (current[0] && table_save(&table) != 0) return perror(table.path), 2;
  printf("traced %d, failed %d\n", traced, failed);
  return failed ? 1 : 0;
}

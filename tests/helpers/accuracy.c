/* See accuracy.h. */
#include "accuracy.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_FIELDS 16
#define MAX_ARGS 128

static int grow(struct acc_set *s, struct acc_case **c) {
  struct acc_case *v = realloc(s->v, (s->n + 1) * sizeof *v);
  if (!v) return -1;
  s->v = v;
  *c = memset(&v[s->n++], 0, sizeof **c);
  (*c)->estimated = -1;
  return 0;
}

/* Splits a TSV line in place, keeping empty fields; returns the count. */
static int split(char *line, char **f) {
  line[strcspn(line, "\r\n")] = '\0';
  int n = 0;
  for (char *p = line; n < MAX_FIELDS;) {
    f[n++] = p;
    char *tab = strchr(p, '\t');
    if (!tab) break;
    *tab = '\0';
    p = tab + 1;
  }
  return n;
}

/* The index of each wanted column, from the header when the file has one, else the
 * documented order. */
static void columns(char **f, int n, const char *const *names, int nnames, int *idx, bool *header) {
  *header = n > 0 && strcmp(f[0], names[0]) == 0;
  for (int i = 0; i < nnames; i++) {
    idx[i] = i;
    for (int k = 0; *header && k < n; k++)
      if (strcmp(f[k], names[i]) == 0) idx[i] = k;
  }
}

/* Fills c from a row: 0, 1 to leave the row out, -1 for a bad row. */
typedef int (*row_fn)(char **f, int n, const int *idx, struct acc_case *c);

static int read_tsv(const char *path, const char *const *names, int nnames, row_fn fill,
                    struct acc_set *s, char *err, size_t size) {
  FILE *in = fopen(path, "r");
  if (!in) return snprintf(err, size, "%s: cannot open", path), -1;
  char line[8192], *f[MAX_FIELDS];
  int idx[MAX_FIELDS], rc = 0, row = 0;
  bool header = false;
  while (!rc && fgets(line, sizeof line, in)) {
    int n = split(line, f);
    if (row++ == 0) {
      columns(f, n, names, nnames, idx, &header);
      if (header) continue;
    }
    if (n == 1 && !f[0][0]) continue;
    struct acc_case *c;
    int filled = grow(s, &c) ? -1 : fill(f, n, idx, c);
    if (filled > 0) s->n--;
    if (filled < 0) {
      snprintf(err, size, "%s:%d: expected %d tab-separated columns (%s, ...)", path, row, nnames, names[0]);
      rc = -1;
    }
  }
  fclose(in);
  return rc;
}

static int field(char **f, int n, int i, char *out, size_t size) {
  if (i >= n) return -1;
  snprintf(out, size, "%s", f[i]);
  return 0;
}

static const char *const published_cols[] = {"id", "model", "args", "measured_mib", "kind"};

static int published_row(char **f, int n, const int *idx, struct acc_case *c) {
  char mib[64];
  if (field(f, n, idx[0], c->id, sizeof c->id) || field(f, n, idx[1], c->model, sizeof c->model) ||
      field(f, n, idx[2], c->args, sizeof c->args) || field(f, n, idx[3], mib, sizeof mib) ||
      field(f, n, idx[4], c->kind, sizeof c->kind))
    return -1;
  c->measured = strtod(mib, NULL) * 1048576.0;
  return c->measured > 0 ? 0 : -1;
}

/* A case of calibration-releases.tsv: an id, or an id prefix ending in '*'. */
static bool case_matches(const char *pattern, const char *id) {
  size_t n = strlen(pattern);
  return n && pattern[n - 1] == '*' ? strncmp(pattern, id, n - 1) == 0 : strcmp(pattern, id) == 0;
}

/* Adds `--framework F@R --torch T` from the first row of the releases file matching each case
 * from `first` on: every case must have one. */
static int assign_releases(const char *path, struct acc_set *s, size_t first, char *err, size_t size) {
  FILE *in = fopen(path, "r");
  if (!in) return snprintf(err, size, "%s: cannot open", path), -1;
  char line[2048], *f[MAX_FIELDS];
  int row = 0, rc = 0;
  while (!rc && fgets(line, sizeof line, in)) {
    row++;
    if (line[0] == '#' || strncmp(line, "case\t", 5) == 0) continue;
    if (split(line, f) < 3) {
      rc = (snprintf(err, size, "%s:%d: expected case, framework, torch and evidence", path, row), -1);
      break;
    }
    for (size_t i = first; i < s->n; i++) {
      struct acc_case *c = &s->v[i];
      if (c->release[0] || !case_matches(f[0], c->id)) continue;
      snprintf(c->release, sizeof c->release, "%s", f[1]);
      size_t n = strlen(c->args);
      snprintf(c->args + n, sizeof c->args - n, " --framework %s --torch %s", f[1], f[2]);
    }
  }
  fclose(in);
  for (size_t i = first; !rc && i < s->n; i++)
    if (!s->v[i].release[0]) rc = (snprintf(err, size, "%s: no release for case %s", path, s->v[i].id), -1);
  return rc;
}

int acc_read_published(const char *path, struct acc_set *s, char *err, size_t size) {
  size_t first = s->n;
  int rc = read_tsv(path, published_cols, 5, published_row, s, err, size);
  return rc ? rc : assign_releases(ACC_RELEASES_FILE, s, first, err, size);
}

static const char *const traced_cols[] = {"id", "model", "family", "framework", "framework_version", "torch",
                                          "args", "allocated_bytes", "reserved_bytes", "phase", "seconds"};
enum { TRACED_COLS = sizeof traced_cols / sizeof *traced_cols };

static int traced_row(char **f, int n, const int *idx, struct acc_case *c) {
  char bytes[64];
  if (field(f, n, idx[0], c->id, sizeof c->id) || field(f, n, idx[1], c->model, sizeof c->model) ||
      field(f, n, idx[2], c->family, sizeof c->family) || field(f, n, idx[6], c->args, sizeof c->args) ||
      field(f, n, idx[7], bytes, sizeof bytes))
    return -1;
  snprintf(c->kind, sizeof c->kind, "allocated");
  c->measured = strtod(bytes, NULL);
  return c->measured > 0 ? 0 : -1;
}

int acc_read_traced(const char *path, struct acc_set *s, char *err, size_t size) {
  return read_tsv(path, traced_cols, TRACED_COLS, traced_row, s, err, size);
}

/* A row's reserved peak as replayed, compared with peak.reserved_bytes; rows without one
 * are left out. */
static int replayed_row(char **f, int n, const int *idx, struct acc_case *c) {
  char bytes[64];
  if (field(f, n, idx[0], c->id, sizeof c->id) || field(f, n, idx[1], c->model, sizeof c->model) ||
      field(f, n, idx[6], c->args, sizeof c->args))
    return -1;
  snprintf(c->kind, sizeof c->kind, "replayed");
  c->measured = field(f, n, idx[8], bytes, sizeof bytes) ? 0 : strtod(bytes, NULL);
  return c->measured > 0 ? 0 : 1;
}

static int read_replayed(const char *path, struct acc_set *s, char *err, size_t size) {
  return read_tsv(path, traced_cols, TRACED_COLS, replayed_row, s, err, size);
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

static int tsv_file(const struct dirent *e) {
  size_t n = strlen(e->d_name);
  return n > 4 && strcmp(e->d_name + n - 4, ".tsv") == 0;
}

typedef int (*file_fn)(const char *path, struct acc_set *s, char *err, size_t size);

static int read_dir(const char *dir, file_fn read, struct acc_set *s, char *err, size_t size) {
  struct dirent **list;
  int n = scandir(dir, &list, tsv_file, by_name), rc = 0;
  for (int i = 0; i < n; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, list[i]->d_name);
    if (!rc) rc = read(path, s, err, size);
    free(list[i]);
  }
  if (n >= 0) free(list);
  return rc;
}

int acc_read_traced_dir(const char *dir, struct acc_set *s, char *err, size_t size) {
  return read_dir(dir, acc_read_traced, s, err, size);
}

int acc_read_replayed_dir(const char *dir, struct acc_set *s, char *err, size_t size) {
  return read_dir(dir, read_replayed, s, err, size);
}

void acc_free(struct acc_set *s) {
  free(s->v);
  s->v = NULL;
  s->n = 0;
}

/* The field of `estimate --json` that matches what was measured. */
static const char *field_of(const char *kind) {
  if (strcmp(kind, "reserved") == 0 || strcmp(kind, "replayed") == 0) return "reserved_bytes";
  if (strcmp(kind, "device") == 0) return "device_bytes";
  return "allocated_bytes"; /* allocated, and active (allocated plus pending frees) */
}

/* Runs argv and returns its standard output (NULL on failure); *status gets the exit code. */
static char *capture(char **argv, int *status) {
  int fd[2];
  if (pipe(fd)) return NULL;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], STDOUT_FILENO);
    close(fd[0]);
    close(fd[1]);
    execv(argv[0], argv);
    _exit(127);
  }
  close(fd[1]);
  size_t len = 0, cap = 1 << 16;
  char *out = pid > 0 ? malloc(cap) : NULL;
  while (out) {
    if (len + 1 == cap) {
      char *grown = realloc(out, cap *= 2);
      if (!grown) free(out);
      out = grown;
      if (!out) break;
    }
    ssize_t r = read(fd[0], out + len, cap - len - 1);
    if (r <= 0) break;
    len += (size_t)r;
  }
  close(fd[0]);
  if (pid > 0) waitpid(pid, status, 0);
  if (out) out[len] = '\0';
  return out;
}

/* Splits a case's args into words (in buf, a copy) appended to argv from n; returns the new
 * count. */
static int words(const struct acc_case *c, char *buf, char **argv, int n) {
  snprintf(buf, sizeof c->args, "%s", c->args);
  for (char *save, *w = strtok_r(buf, " \t", &save); w && n < MAX_ARGS; w = strtok_r(NULL, " \t", &save))
    argv[n++] = w;
  return n;
}

const char *acc_arg(const struct acc_case *c, const char *flag, char *out, size_t size) {
  char buf[sizeof c->args], *argv[MAX_ARGS];
  int n = words(c, buf, argv, 0);
  for (int i = 0; i + 1 < n; i++)
    if (strcmp(argv[i], flag) == 0) return snprintf(out, size, "%s", argv[i + 1]), out;
  return NULL;
}

/* The estimate's reserved peak over the phases a trace runs: the tracer stops after its
 * optimizer steps and saves no checkpoint, where the estimate's save (sharded training
 * gathering each unit again) can reserve the most. */
static json_t *reserved_unsaved(json_t *root) {
  json_int_t most = -1;
  size_t i;
  json_t *phase;
  json_array_foreach(json_object_get(root, "timeline"), i, phase) {
    json_int_t r = json_integer_value(json_object_get(phase, "reserved_bytes"));
    const char *name = json_string_value(json_object_get(phase, "phase"));
    if (name && strcmp(name, "save") != 0 && r > most) most = r;
  }
  return most < 0 ? NULL : json_integer(most);
}

static double estimate_one(const char *vramfit, struct acc_case *c) {
  char args[sizeof c->args], model[sizeof c->model], *argv[MAX_ARGS + 5];
  snprintf(model, sizeof model, "%s", c->model);
  int n = 0;
  argv[n++] = (char *)vramfit;
  argv[n++] = "estimate";
  argv[n++] = model;
  n = words(c, args, argv, n);
  argv[n++] = "--json";
  argv[n] = NULL;
  int status = -1;
  char *out = capture(argv, &status);
  json_t *root = out ? json_loads(out, 0, NULL) : NULL;
  free(out);
  bool replayed = strcmp(c->kind, "replayed") == 0;
  json_t *v = replayed ? reserved_unsaved(root) : json_incref(json_object_get(json_object_get(root, "peak"), field_of(c->kind)));
  const char *lengths = json_string_value(json_object_get(json_object_get(root, "setup"), "lengths"));
  snprintf(c->lengths, sizeof c->lengths, "%s", lengths ? lengths : "");
  /* exit 1 is the "does not fit" answer: the estimate is still there */
  double est = json_is_integer(v) && WIFEXITED(status) && WEXITSTATUS(status) <= 1
                   ? (double)json_integer_value(v) : -1;
  json_decref(v);
  json_decref(root);
  return est;
}

void acc_estimate(const char *vramfit, struct acc_set *s) {
  for (size_t i = 0; i < s->n; i++) s->v[i].estimated = estimate_one(vramfit, &s->v[i]);
}

void acc_split_replayed(struct acc_set *s) {
  for (size_t i = 0; i < s->n; i++) {
    struct acc_case *c = &s->v[i];
    if (strcmp(c->kind, "replayed") != 0) continue;
    snprintf(c->kind, sizeof c->kind, "replayed %s", strncmp(c->lengths, "varied", 6) == 0 ? "varied" : "fixed");
  }
}

double acc_error(const struct acc_case *c) { return (c->estimated - c->measured) / c->measured; }

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The q-quantile of n sorted values, nearest rank. */
static double quantile(const double *v, int n, double q) {
  int i = (int)ceil(q * n) - 1;
  return n ? v[i < 0 ? 0 : i] : 0;
}

void acc_stats_of(const struct acc_set *s, const char *kind, struct acc_stats *out) {
  memset(out, 0, sizeof *out);
  double *abs_err = malloc((s->n ? s->n : 1) * sizeof *abs_err);
  if (!abs_err) return;
  for (size_t i = 0; i < s->n; i++) {
    const struct acc_case *c = &s->v[i];
    if (strcmp(c->kind, kind) != 0) continue;
    if (c->estimated < 0) {
      out->failed++;
      continue;
    }
    double e = acc_error(c);
    abs_err[out->n++] = fabs(e);
    out->under10 += e < -0.10;
    if (e < out->worst_under) out->worst_under = e, out->worst_id = c->id;
  }
  qsort(abs_err, (size_t)out->n, sizeof *abs_err, cmp_double);
  out->median = quantile(abs_err, out->n, 0.5);
  out->p90 = quantile(abs_err, out->n, 0.9);
  free(abs_err);
}

size_t acc_kinds(const struct acc_set *s, const char **out, size_t max) {
  size_t n = 0;
  for (size_t i = 0; i < s->n; i++) {
    bool seen = false;
    for (size_t k = 0; k < n; k++) seen |= strcmp(out[k], s->v[i].kind) == 0;
    if (!seen && n < max) out[n++] = s->v[i].kind;
  }
  return n;
}

bool acc_meets(const struct acc_stats *st, const struct acc_limits *lim, char *why, size_t size) {
  if (st->failed) return snprintf(why, size, "%d cases gave no estimate", st->failed), false;
  if (st->n == 0) return snprintf(why, size, "no cases"), false;
  if (st->median > lim->median)
    return snprintf(why, size, "median |error| %.1f%% > %.1f%%", 100 * st->median, 100 * lim->median), false;
  if (lim->p90 >= 0 && st->p90 > lim->p90)
    return snprintf(why, size, "p90 |error| %.1f%% > %.1f%%", 100 * st->p90, 100 * lim->p90), false;
  if (-st->worst_under > lim->under)
    return snprintf(why, size, "%s underestimated by %.1f%% (> %.1f%%)", st->worst_id,
                    -100 * st->worst_under, 100 * lim->under), false;
  why[0] = '\0';
  return true;
}

/* bench/accuracy: runs every published measurement (shared/calibration/published.tsv)
 * through `vramfit estimate ... --json` and reports the relative error of the field that
 * matches what was measured, per case and per kind (median, 90th percentile, and how many
 * cases are underestimated by more than 10%: the ones that would OOM).
 *
 * usage: bench_accuracy VRAMFIT PUBLISHED_TSV */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "timing.h"

#define MAX_CASES 512

struct kind_stats {
  const char *kind, *field;
  double err[MAX_CASES];
  int n, under10;
};

static struct kind_stats kinds[] = {{.kind = "allocated", .field = "allocated_bytes"}, {.kind = "active", .field = "allocated_bytes"},
                                    {.kind = "reserved", .field = "reserved_bytes"}, {.kind = "device", .field = "device_bytes"}};

static double percentile(double *v, int n, double q) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  int i = (int)ceil(q * n) - 1;
  return v[i < 0 ? 0 : i];
}

static int run_case(const char *bin, const char *model, const char *args, const char *field, double *bytes) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "%s estimate %s %s --json 2>&1", bin, model, args);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  json_error_t err;
  json_t *root = json_loadf(p, 0, &err);
  int status = pclose(p);
  json_t *v = json_object_get(json_object_get(root, "peak"), field);
  int ok = root && json_is_integer(v) && (status == 0 || WEXITSTATUS(status) == 1);
  if (ok) *bytes = (double)json_integer_value(v);
  json_decref(root);
  return ok ? 0 : -1;
}

static struct kind_stats *kind_of(const char *k) {
  for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
    if (strcmp(kinds[i].kind, k) == 0) return &kinds[i];
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s VRAMFIT PUBLISHED_TSV\n", argv[0]);
    return 2;
  }
  FILE *f = fopen(argv[2], "r");
  if (!f) {
    perror(argv[2]);
    return 2;
  }
  char line[8192];
  int failures = 0;
  printf("%-14s %-24s %-9s %10s %10s %8s\n", "case", "model", "kind", "est MiB", "meas MiB", "error");
  for (int row = 0; fgets(line, sizeof line, f); row++) {
    if (row == 0) continue;
    char *fields[8] = {0};
    char *save = NULL, *tok = strtok_r(line, "\t\n", &save);
    for (int i = 0; tok && i < 8; i++, tok = strtok_r(NULL, "\t\n", &save)) fields[i] = tok;
    if (!fields[4]) continue;
    struct kind_stats *k = kind_of(fields[4]);
    if (!k) continue;
    double meas = strtod(fields[3], NULL) * 1048576.0, est;
    if (run_case(argv[1], fields[1], fields[2], k->field, &est) != 0) {
      printf("%-14s %-24s %-9s %10s\n", fields[0], fields[1], fields[4], "FAILED");
      failures++;
      continue;
    }
    double e = (est - meas) / meas;
    printf("%-14s %-24s %-9s %10.0f %10.0f %+7.1f%%\n", fields[0], fields[1], fields[4], est / 1048576.0,
           meas / 1048576.0, 100 * e);
    if (k->n < MAX_CASES) k->err[k->n++] = fabs(e);
    if (e < -0.10) k->under10++;
  }
  fclose(f);
  printf("\n%-10s %5s %12s %12s %14s\n", "kind", "cases", "median |err|", "p90 |err|", "under by >10%");
  for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
    struct kind_stats *k = &kinds[i];
    if (!k->n) continue;
    double med = percentile(k->err, k->n, 0.5), p90 = percentile(k->err, k->n, 0.9);
    printf("%-10s %5d %11.1f%% %11.1f%% %14d\n", k->kind, k->n, 100 * med, 100 * p90, k->under10);
  }
  if (failures) printf("\n%d cases failed to run\n", failures);
  return failures ? 1 : 0;
}

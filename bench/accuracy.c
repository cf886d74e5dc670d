/* bench/accuracy: runs every published measurement (shared/calibration/published.tsv) and,
 * when given, the traced corpus (bench/traced/NAME.tsv) through `vramfit estimate ... --json`
 * and reports the relative error of the field that matches what was measured, per case and
 * per kind (median, 90th percentile, and how many cases are underestimated by more than
 * 10%: the ones that would OOM). tests/unit/test_accuracy holds the same figures to the
 * estimator's targets (tests/helpers/accuracy.c is shared).
 *
 * usage: bench_accuracy VRAMFIT PUBLISHED_TSV [TRACED_DIR] */
#include <stdio.h>

#include "accuracy.h"

static void print_cases(const struct acc_set *s) {
  printf("%-14s %-24s %-9s %10s %10s %8s\n", "case", "model", "kind", "est MiB", "meas MiB", "error");
  for (size_t i = 0; i < s->n; i++) {
    const struct acc_case *c = &s->v[i];
    if (c->estimated < 0) {
      printf("%-14s %-24s %-9s %10s\n", c->id, c->model, c->kind, "FAILED");
      continue;
    }
    printf("%-14s %-24s %-9s %10.0f %10.0f %+7.1f%%\n", c->id, c->model, c->kind, c->estimated / 1048576.0,
           c->measured / 1048576.0, 100 * acc_error(c));
  }
}

/* Returns the cases that gave no estimate. */
static int print_kinds(const struct acc_set *s, const char *title) {
  const char *kinds[16];
  size_t nk = acc_kinds(s, kinds, 16);
  int failed = 0;
  printf("\n%-22s %5s %12s %12s %14s\n", title, "cases", "median |err|", "p90 |err|", "under by >10%");
  for (size_t k = 0; k < nk; k++) {
    struct acc_stats st;
    acc_stats_of(s, kinds[k], &st);
    failed += st.failed;
    printf("%-22s %5d %11.1f%% %11.1f%% %14d\n", kinds[k], st.n, 100 * st.median, 100 * st.p90, st.under10);
  }
  return failed;
}

static int run(const char *vramfit, struct acc_set *s, const char *title) {
  acc_estimate(vramfit, s);
  print_cases(s);
  int failed = print_kinds(s, title);
  if (failed) printf("\n%d cases failed to run\n", failed);
  return failed;
}

int main(int argc, char **argv) {
  if (argc != 3 && argc != 4) {
    fprintf(stderr, "usage: %s VRAMFIT PUBLISHED_TSV [TRACED_DIR]\n", argv[0]);
    return 2;
  }
  struct acc_set published = {0}, traced = {0};
  char err[512];
  if (acc_read_published(argv[2], &published, err, sizeof err) ||
      (argc == 4 && acc_read_traced_dir(argv[3], &traced, err, sizeof err))) {
    fprintf(stderr, "%s\n", err);
    return 2;
  }
  int failed = run(argv[1], &published, "published: kind");
  if (traced.n) {
    printf("\n");
    failed += run(argv[1], &traced, "traced corpus: kind");
  }
  acc_free(&published);
  acc_free(&traced);
  return failed ? 1 : 0;
}

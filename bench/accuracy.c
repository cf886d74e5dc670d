/* bench/accuracy: runs every published measurement (shared/calibration/published.tsv, and
 * each further file of them named after it, comma-separated: published-2.tsv) and, when
 * given, the traced corpus (bench/traced/NAME.tsv) through `vramfit estimate ... --json`
 * and reports the relative error of the field that matches what was measured, per case and
 * per kind (median, 90th percentile, and how many cases are underestimated by more than
 * 10%: the ones that would OOM), each file on its own. tests/unit/test_accuracy holds the
 * same figures to the estimator's targets (tests/helpers/accuracy.c is shared).
 *
 * The traced corpus is also broken down by framework, model family (model_type) and
 * method, with each group's deepest under-estimate, and its reserved peaks as the tracer
 * replayed them are compared too, apart for fixed and varied batch lengths.
 *
 * REPORTED_DIR (bench/traced/multi-gpu) holds the multi-GPU traced rows: they are listed
 * and broken down by method the same way, and their replayed reserved peaks compared too.
 *
 * usage: bench_accuracy VRAMFIT PUBLISHED_TSV[,PUBLISHED_TSV...] [TRACED_DIR [REPORTED_DIR]] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* A case's value of one grouping, into out. */
typedef void (*group_fn)(const struct acc_case *c, char *out, size_t size);

static void by_framework(const struct acc_case *c, char *out, size_t size) {
  if (!acc_arg(c, "--framework", out, size)) snprintf(out, size, "hf");
  out[strcspn(out, "@")] = '\0';
}

static void by_family(const struct acc_case *c, char *out, size_t size) { snprintf(out, size, "%s", c->family); }

static void by_method(const struct acc_case *c, char *out, size_t size) {
  if (!acc_arg(c, "--method", out, size)) snprintf(out, size, "full");
}

/* One line per value of the grouping: the allocated peaks' figures of its cases. */
static void print_groups(const struct acc_set *s, const char *title, group_fn group) {
  printf("\n%-22s %5s %12s %12s %14s  %s\n", title, "cases", "median |err|", "p90 |err|", "under by >10%",
         "deepest under");
  struct acc_set sub = {.v = malloc(s->n * sizeof *s->v)};
  char seen[64][32];
  size_t nseen = 0;
  for (size_t i = 0; sub.v && i < s->n && nseen < 64; i++) {
    char value[32], other[32];
    group(&s->v[i], value, sizeof value);
    size_t k = 0;
    while (k < nseen && strcmp(seen[k], value) != 0) k++;
    if (k < nseen) continue;
    snprintf(seen[nseen++], sizeof seen[0], "%s", value);
    sub.n = 0;
    for (size_t j = i; j < s->n; j++) {
      group(&s->v[j], other, sizeof other);
      if (strcmp(other, value) == 0) sub.v[sub.n++] = s->v[j];
    }
    struct acc_stats st;
    acc_stats_of(&sub, "allocated", &st);
    printf("%-22s %5d %11.1f%% %11.1f%% %14d  %+.1f%% %s\n", value, st.n, 100 * st.median, 100 * st.p90, st.under10,
           100 * st.worst_under, st.worst_id ? st.worst_id : "");
  }
  free(sub.v);
}

static int run(const char *vramfit, struct acc_set *s, const char *title) {
  acc_estimate(vramfit, s);
  print_cases(s);
  int failed = print_kinds(s, title);
  if (failed) printf("\n%d cases failed to run\n", failed);
  return failed;
}

/* Each published file of the comma-separated list, as a set of its own titled by its name
 * ("published-2: kind"). Returns the cases that gave no estimate, or -1 with err filled. */
static int run_published(const char *vramfit, const char *list, char *err, size_t size) {
  char paths[4096];
  snprintf(paths, sizeof paths, "%s", list);
  int failed = 0;
  for (char *save, *path = strtok_r(paths, ",", &save); path; path = strtok_r(NULL, ",", &save)) {
    struct acc_set s = {0};
    char title[64];
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    snprintf(title, sizeof title, "%.*s: kind", (int)strcspn(base, "."), base);
    if (acc_read_published(path, &s, err, size)) return -1;
    if (path != paths) printf("\n");
    failed += run(vramfit, &s, title);
    acc_free(&s);
  }
  return failed;
}

/* The traced corpus's reserved peaks as the tracer replayed them against the estimate's,
 * by the lengths replayed (acc_split_replayed: only fixed lengths replay the same batches).
 * Returns the cases that gave no estimate. */
static int run_replayed(const char *vramfit, const char *dir, const char *title) {
  struct acc_set s = {0};
  char err[512];
  if (acc_read_replayed_dir(dir, &s, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  acc_estimate(vramfit, &s);
  acc_split_replayed(&s);
  int failed = print_kinds(&s, title);
  acc_free(&s);
  return failed;
}

int main(int argc, char **argv) {
  if (argc < 3 || argc > 5) {
    fprintf(stderr, "usage: %s VRAMFIT PUBLISHED_TSV[,PUBLISHED_TSV...] [TRACED_DIR [REPORTED_DIR]]\n", argv[0]);
    return 2;
  }
  struct acc_set traced = {0}, reported = {0};
  char err[512];
  if ((argc >= 4 && acc_read_traced_dir(argv[3], &traced, err, sizeof err)) ||
      (argc == 5 && acc_read_traced_dir(argv[4], &reported, err, sizeof err))) {
    fprintf(stderr, "%s\n", err);
    return 2;
  }
  int failed = run_published(argv[1], argv[2], err, sizeof err);
  if (failed < 0) {
    fprintf(stderr, "%s\n", err);
    return 2;
  }
  if (traced.n) {
    printf("\n");
    failed += run(argv[1], &traced, "traced corpus: kind");
    print_groups(&traced, "traced: framework", by_framework);
    print_groups(&traced, "traced: family", by_family);
    print_groups(&traced, "traced: method", by_method);
  }
  if (traced.n) failed += run_replayed(argv[1], argv[3], "traced corpus: reserved");
  if (reported.n) {
    printf("\nmulti-GPU traced corpus:\n");
    failed += run(argv[1], &reported, "multi-GPU: kind");
    print_groups(&reported, "multi-GPU: method", by_method);
    failed += run_replayed(argv[1], argv[4], "multi-GPU: reserved");
  }
  acc_free(&traced);
  acc_free(&reported);
  return failed ? 1 : 0;
}

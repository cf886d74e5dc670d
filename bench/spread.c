/* bench/spread: the estimator's measured spread per group of similar setups, written as
 * data/uncertainty.json (what every estimate's range comes from) and printed as a table.
 * Runs the published cases (../shared/calibration/published.tsv) and the traced corpus
 * (bench/traced/NAME.tsv: allocated, and reserved as replayed) through `vramfit estimate
 * ... --json` (tests/helpers/accuracy.c) and groups the errors by framework and method
 * class (src/core/spread.c says how they combine). Deterministic: the same corpora give
 * the same file. `make uncertainty` runs it.
 *
 * usage: bench_spread VRAMFIT PUBLISHED_TSV TRACED_DIR OUT_JSON */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accuracy.h"
#include "core/spread.h"

static int source_of(const char *kind, enum spread_source *out) {
  static const struct { const char *kind; enum spread_source source; } map[] = {
      {"allocated", SOURCE_ALLOCATED}, {"active", SOURCE_ALLOCATED}, {"replayed", SOURCE_REPLAYED},
      {"reserved", SOURCE_RESERVED},   {"device", SOURCE_DEVICE}};
  for (size_t i = 0; i < sizeof map / sizeof *map; i++)
    if (strcmp(kind, map[i].kind) == 0) return *out = map[i].source, 0;
  return -1;
}

/* The case's framework (no release) and method class, from its estimate options. */
static int group_of(const struct acc_case *c, struct spread_case *out) {
  char word[64];
  struct vf_setup s;
  vf_setup_default(&s);
  int v;
  if (acc_arg(c, "--method", word, sizeof word)) {
    if (vf_enum_parse(VF_ENUM_METHOD, word, &v)) return -1;
    s.method = (enum vf_method)v;
  }
  if (acc_arg(c, "--quant", word, sizeof word)) {
    if (vf_enum_parse(VF_ENUM_QUANT, word, &v)) return -1;
    s.quant = (enum vf_quant)v;
  }
  const char *fw = acc_arg(c, "--framework", word, sizeof word);
  snprintf(out->framework, sizeof out->framework, "%.*s", (int)strcspn(fw ? fw : "hf", "@"), fw ? fw : "hf");
  out->cls = vf_setup_class(&s);
  return 0;
}

/* Every estimated case of the sets as a spread case; returns how many, or -1. */
static long to_cases(struct acc_set *const *sets, size_t nsets, struct spread_case *out) {
  long n = 0;
  for (size_t k = 0; k < nsets; k++)
    for (size_t i = 0; i < sets[k]->n; i++) {
      const struct acc_case *c = &sets[k]->v[i];
      if (c->estimated < 0) {
        fprintf(stderr, "bench_spread: %s (%s) gave no estimate: left out\n", c->id, c->kind);
        continue;
      }
      if (source_of(c->kind, &out[n].source) || group_of(c, &out[n])) {
        fprintf(stderr, "bench_spread: %s: kind '%s' or its --method/--quant unknown\n", c->id, c->kind);
        return -1;
      }
      out[n++].error = acc_error(c);
    }
  return n;
}

static void print_groups(const struct spread_group *g, size_t n) {
  printf("%-16s %-18s %-18s %-18s  %s\n", "group", "allocated", "reserved", "device",
         "sources: cases (the group they come from)");
  for (size_t i = 0; i < n; i++) {
    printf("%-16s", g[i].u.group);
    for (int k = 0; k < VF_PEAK_COUNT; k++)
      printf(" %+6.1f%% .. %+6.1f%%", 100 * g[i].u.kind[k].low, 100 * g[i].u.kind[k].high);
    printf(" ");
    for (int s = 0; s < SOURCE_COUNT; s++) {
      const struct spread_part *p = &g[i].part[s];
      printf(" %s %zu", spread_source_name((enum spread_source)s), p->cases);
      if (p->cases && strcmp(p->from, g[i].u.group) != 0) printf(" (%s)", p->from);
    }
    printf("\n");
  }
}

static int write_file(const char *path, const struct spread_group *g, size_t n) {
  FILE *f = fopen(path, "w");
  int rc = f ? uncertainty_write(f, g, n) : VF_EIO;
  if (f && fclose(f)) rc = VF_EIO;
  if (rc) fprintf(stderr, "bench_spread: %s: cannot write it\n", path);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s VRAMFIT PUBLISHED_TSV TRACED_DIR OUT_JSON\n", argv[0]);
    return 2;
  }
  struct acc_set published = {0}, traced = {0}, replayed = {0};
  struct acc_set *sets[] = {&traced, &replayed, &published};
  size_t nsets = sizeof sets / sizeof *sets, total = 0;
  char err[512];
  if (acc_read_published(argv[2], &published, err, sizeof err) || acc_read_traced_dir(argv[3], &traced, err, sizeof err) ||
      acc_read_replayed_dir(argv[3], &replayed, err, sizeof err)) {
    fprintf(stderr, "bench_spread: %s\n", err);
    return 2;
  }
  for (size_t k = 0; k < nsets; k++) acc_estimate(argv[1], sets[k]), total += sets[k]->n;
  struct spread_case *cases = malloc((total ? total : 1) * sizeof *cases);
  long n = cases ? to_cases(sets, nsets, cases) : -1;
  struct spread_group *groups = NULL;
  size_t ngroups = 0;
  int rc = n < 0 ? 2 : spread_groups(cases, (size_t)n, &groups, &ngroups) ? 4 : 0;
  if (!rc) {
    printf("%ld cases: %zu traced allocated, %zu traced replayed reserved, %zu published\n\n", n, traced.n,
           replayed.n, published.n);
    print_groups(groups, ngroups);
    if (write_file(argv[4], groups, ngroups)) rc = 2;
  }
  free(groups);
  free(cases);
  for (size_t k = 0; k < nsets; k++) acc_free(sets[k]);
  return rc;
}

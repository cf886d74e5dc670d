/* The estimator's spread per group of setups, from its errors on measured cases
 * (core/spread.h says how). */
#include "core/spread.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const source_names[SOURCE_COUNT] = {"allocated", "replayed", "reserved", "device"};

const char *spread_source_name(enum spread_source s) { return s < SOURCE_COUNT ? source_names[s] : "unknown"; }

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

struct vf_spread spread_of(double *errors, size_t n) {
  if (!n) return (struct vf_spread){0, 0};
  qsort(errors, n, sizeof *errors, by_value);
  size_t rank = (n * VF_SPREAD_PERCENTILE + 99) / 100; /* nearest rank, counted in integers */
  return (struct vf_spread){errors[rank - 1], errors[n - rank]};
}

static bool in_group(const struct spread_case *c, const char *framework, int cls) {
  return (strcmp(framework, VF_SPREAD_ALL) == 0 || strcmp(c->framework, framework) == 0) &&
         (cls == VF_SPREAD_ALL_CLASSES || (int)c->cls == cls);
}

static void group_name(const char *framework, int cls, char *buf, size_t size) {
  snprintf(buf, size, "%s/%s", framework,
           cls == VF_SPREAD_ALL_CLASSES ? VF_SPREAD_ALL : vf_method_class_name((enum vf_method_class)cls));
}

/* The errors of one source in a group, into buf; returns how many. */
static size_t collect(const struct spread_case *cases, size_t n, const char *framework, int cls,
                      enum spread_source source, double *buf) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (cases[i].source == source && in_group(&cases[i], framework, cls)) buf[k++] = cases[i].error;
  return k;
}

/* One source's part in a group: its own cases when there are enough, else the framework's,
 * else every setup's (however few). */
static void part_of(const struct spread_case *cases, size_t n, const struct spread_group *g,
                    enum spread_source source, double *buf, struct spread_part *out) {
  const struct { const char *framework; int cls; } levels[] = {
      {g->framework, g->cls}, {g->framework, VF_SPREAD_ALL_CLASSES}, {VF_SPREAD_ALL, VF_SPREAD_ALL_CLASSES}};
  size_t count = sizeof levels / sizeof *levels;
  memset(out, 0, sizeof *out);
  for (size_t l = 0; l < count; l++) {
    size_t k = collect(cases, n, levels[l].framework, levels[l].cls, source, buf);
    if (k >= VF_SPREAD_MIN_CASES || (l + 1 == count && k > 0)) {
      out->spread = spread_of(buf, k);
      out->cases = k;
      group_name(levels[l].framework, levels[l].cls, out->from, sizeof out->from);
      return;
    }
  }
}

static struct vf_spread envelope(struct vf_spread a, struct vf_spread b) {
  return (struct vf_spread){fmin(a.low, b.low), fmax(a.high, b.high)};
}

/* Two independent relative errors in a row. */
static struct vf_spread compound(struct vf_spread a, struct vf_spread b) {
  return (struct vf_spread){(1 + a.low) * (1 + b.low) - 1, (1 + a.high) * (1 + b.high) - 1};
}

/* Fills g, the group of framework's cls, from the cases. */
static void fill_group(const struct spread_case *cases, size_t n, double *buf, const char *framework, int cls,
                       struct spread_group *g) {
  memset(g, 0, sizeof *g);
  snprintf(g->framework, sizeof g->framework, "%s", framework);
  g->cls = cls;
  for (int s = 0; s < SOURCE_COUNT; s++) part_of(cases, n, g, (enum spread_source)s, buf, &g->part[s]);
  struct vf_spread *k = g->u.kind;
  const struct spread_part *p = g->part;
  k[VF_PEAK_ALLOCATED] = p[SOURCE_ALLOCATED].spread;
  k[VF_PEAK_RESERVED] = compound(envelope(p[SOURCE_ALLOCATED].spread, p[SOURCE_REPLAYED].spread),
                                 p[SOURCE_RESERVED].spread);
  k[VF_PEAK_DEVICE] = envelope(k[VF_PEAK_RESERVED], p[SOURCE_DEVICE].spread);
  group_name(framework, cls, g->u.group, sizeof g->u.group);
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The distinct framework names of the cases, sorted; returns how many. */
static size_t frameworks(const struct spread_case *cases, size_t n, const char **out) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    size_t j = 0;
    while (j < k && strcmp(out[j], cases[i].framework) != 0) j++;
    if (j == k) out[k++] = cases[i].framework;
  }
  qsort(out, k, sizeof *out, by_name);
  return k;
}

static bool has_class(const struct spread_case *cases, size_t n, const char *framework, int cls) {
  for (size_t i = 0; i < n; i++)
    if (in_group(&cases[i], framework, cls)) return true;
  return false;
}

int spread_groups(const struct spread_case *cases, size_t n, struct spread_group **out, size_t *n_out) {
  const char **names = malloc((n ? n : 1) * sizeof *names);
  double *buf = malloc((n ? n : 1) * sizeof *buf);
  struct spread_group *g = malloc((1 + n * (1 + VF_CLASS_COUNT)) * sizeof *g);
  if (!names || !buf || !g) {
    free(names), free(buf), free(g);
    return VF_ENOMEM;
  }
  size_t nf = frameworks(cases, n, names), k = 0;
  fill_group(cases, n, buf, VF_SPREAD_ALL, VF_SPREAD_ALL_CLASSES, &g[k++]);
  for (size_t f = 0; f < nf; f++) {
    fill_group(cases, n, buf, names[f], VF_SPREAD_ALL_CLASSES, &g[k++]);
    for (int cls = 0; cls < VF_CLASS_COUNT; cls++)
      if (has_class(cases, n, names[f], cls)) fill_group(cases, n, buf, names[f], cls, &g[k++]);
  }
  free(names);
  free(buf);
  *out = g;
  *n_out = k;
  return 0;
}

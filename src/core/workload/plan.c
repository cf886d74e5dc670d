/* Planning a workload's stages: the knobs raised in priority order while every stage fits,
 * a fit judged as a model plan judges its balanced tier (the high end of the device peak's
 * range against the budget). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "vramfit/workload.h"

#define DEFAULT_SAFETY 0.90 /* a model plan's */

struct search {
  const struct vf_wl_plan_request *r;
  struct vf_wl_plan *out;
  struct vf_diag *d;
  struct vf_spread spread; /* of the device peak: the widest over the encoders' methods */
};

static int estimate(struct search *s, const struct vf_wl_point *pt, struct vf_estimate *e) {
  s->out->estimates++;
  return vf_workload_estimate(s->r->w, pt, &s->r->env, e, s->d);
}

/* The range of a peak: the measured spread of the encoders' kinds of method (the widest
 * high end of them), the point alone without a spread. */
static struct vf_range range_of(const struct search *s, uint64_t peak) {
  return s->r->uncertainty ? vf_range_of(peak, &s->spread) : (struct vf_range){peak, peak};
}

static void find_spread(struct search *s) {
  const struct vf_workload *w = s->r->w;
  struct vf_setup setup;
  vf_setup_default(&setup);
  for (size_t i = 0; s->r->uncertainty && i < (w->n_encoders ? w->n_encoders : 1); i++) {
    setup.method = w->n_encoders ? w->encoders[i].method : VF_METHOD_FULL;
    const struct vf_spread *k = &vf_uncertainty_for(s->r->uncertainty, &setup)->kind[VF_PEAK_DEVICE];
    if (!i || k->low < s->spread.low) s->spread = *k;
  }
}

/* Whether the step fits the budget at pt; rc carries an estimator error. */
static bool fits(struct search *s, const struct vf_wl_point *pt, int *rc) {
  struct vf_estimate e;
  *rc = estimate(s, pt, &e);
  return !*rc && range_of(s, e.device_peak).high <= s->out->budget_bytes;
}

static bool kept(const struct vf_wl_plan_request *r, size_t k) { return r->keep & (1u << k); }

/* The largest value of knob k in [lo, hi] at which every stage in [first, last) fits, the
 * others as they are; lo fits. Peaks grow with every knob, so a bisection finds it. */
static int largest(struct search *s, size_t k, int64_t lo, int64_t hi, size_t first, size_t last, int64_t *out) {
  int rc = 0;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo + 1) / 2;
    bool ok = true;
    for (size_t st = first; st < last && ok && !rc; st++) {
      struct vf_wl_point pt = s->out->stages[st].point;
      pt.values[k] = mid;
      ok = fits(s, &pt, &rc);
    }
    if (rc) return rc;
    if (ok) lo = mid;
    else hi = mid - 1;
  }
  *out = lo;
  return 0;
}

static void set_all(struct vf_wl_plan *p, size_t k, int64_t v) {
  for (size_t st = 0; st < p->n_stages; st++) p->stages[st].point.values[k] = v;
}

/* The accumulation that brings a micro batch of at most b nearest to the target, and the
 * micro batch for it: the accumulation below the target's quotient with b itself (3 x 21 = 63
 * for 64), or the one above with the smallest micro batch that still reaches the target
 * (2 x 128 = 256 from 243, not 1 x 243), whichever comes nearer; above on a tie. */
static void snap(const struct vf_workload *w, uint64_t target, int64_t b, int64_t *batch, int64_t *accum) {
  int64_t amin = w->accumulation >= 0 ? w->knobs[w->accumulation].min : 1;
  int64_t amax = w->accumulation >= 0 ? w->knobs[w->accumulation].max : INT64_MAX;
  int64_t t = (int64_t)target;
  int64_t up = t ? (t + b - 1) / b : amin, down = t / b;
  up = up < amin ? amin : up > amax ? amax : up;
  *accum = up;
  *batch = t && t <= up * b ? (t + up - 1) / up : b;
  if (down >= amin && down <= amax && down < up && t - down * b < *batch * up - t) *accum = down, *batch = b;
  if (*batch < w->knobs[w->batch].min) *batch = w->knobs[w->batch].min;
}

/* The target's share of one data-parallel GPU (0: no target). */
static uint64_t target_share(const struct vf_wl_plan *p) {
  return p->target_effective_batch ? (p->target_effective_batch + p->gpus / 2) / p->gpus : 0;
}

static int raise_batch(struct search *s) {
  const struct vf_workload *w = s->r->w;
  struct vf_wl_plan *p = s->out;
  int64_t hi = w->knobs[w->batch].max, b, share = (int64_t)target_share(p);
  if (share && share < hi) hi = share;
  int64_t lo = p->stages[0].point.values[w->batch];
  int rc = kept(s->r, (size_t)w->batch) ? (b = lo, 0) : largest(s, (size_t)w->batch, lo, hi < lo ? lo : hi, 0, p->n_stages, &b);
  if (rc) return rc;
  int64_t batch, accum;
  snap(w, (uint64_t)share, b, &batch, &accum);
  if (kept(s->r, (size_t)w->batch)) batch = b;
  if (w->accumulation >= 0 && kept(s->r, (size_t)w->accumulation)) accum = p->stages[0].point.values[w->accumulation];
  set_all(p, (size_t)w->batch, batch);
  if (w->accumulation >= 0) set_all(p, (size_t)w->accumulation, accum);
  p->batch = (uint64_t)batch, p->accumulation = (uint64_t)accum;
  return 0;
}

static int raise_knob(struct search *s, size_t k) {
  const struct vf_workload *w = s->r->w;
  struct vf_wl_plan *p = s->out;
  for (size_t st = 0; st < p->n_stages && !kept(s->r, k); st++) {
    int64_t lo = p->stages[st].point.values[k], min, max, v;
    vf_workload_bounds(w, st, k, &min, &max);
    int rc = largest(s, k, lo, max, st, st + 1, &v);
    if (rc) return rc;
    p->stages[st].point.values[k] = v;
  }
  return 0;
}

/* Knob indices in the order they are raised: priority, then as listed. */
static size_t raise_order(const struct vf_workload *w, size_t order[VF_WL_MAX_KNOBS]) {
  size_t n = 0;
  for (size_t k = 0; k < w->n_knobs; k++)
    if (w->knobs[k].role != VF_WL_ACCUMULATION) order[n++] = k;
  for (size_t i = 1; i < n; i++)
    for (size_t j = i; j > 0 && w->knobs[order[j]].priority < w->knobs[order[j - 1]].priority; j--) {
      size_t t = order[j];
      order[j] = order[j - 1], order[j - 1] = t;
    }
  return n;
}

/* Every knob at its minimum, or at its given value where it is kept. */
static void start_at_minimums(const struct vf_wl_plan_request *r, struct vf_wl_plan *p) {
  const struct vf_workload *w = r->w;
  for (size_t st = 0; st < p->n_stages; st++)
    for (size_t k = 0; k < w->n_knobs; k++) {
      int64_t max, *v = &p->stages[st].point.values[k];
      vf_workload_bounds(w, st, k, v, &max);
      if (kept(r, k) && r->given && r->given[st].values[k] >= 0) *v = r->given[st].values[k];
    }
  p->batch = (uint64_t)p->stages[0].point.values[w->batch];
  p->accumulation = w->accumulation >= 0 ? (uint64_t)p->stages[0].point.values[w->accumulation] : 1;
}

static int final_estimates(struct search *s) {
  struct vf_wl_plan *p = s->out;
  uint64_t worst = 0;
  for (size_t st = 0; st < p->n_stages; st++) {
    struct vf_wl_stage_plan *sp = &p->stages[st];
    int rc = estimate(s, &sp->point, &sp->est);
    if (!rc) rc = vf_workload_shape(s->r->w, &sp->point, &sp->shape, s->d);
    if (rc) return rc;
    sp->device_range = range_of(s, sp->est.device_peak);
    if (sp->device_range.high >= worst) worst = sp->device_range.high, p->tightest = st;
  }
  return 0;
}

/* The target: asked for, else the workload's, else what the main config gives now. */
static uint64_t target_of(const struct vf_wl_plan_request *r) {
  const struct vf_workload *w = r->w;
  if (r->target_effective_batch) return r->target_effective_batch;
  if (w->target_effective_batch) return w->target_effective_batch;
  if (!r->given) return 0;
  int64_t b = r->given[0].values[w->batch];
  int64_t a = w->accumulation >= 0 ? r->given[0].values[w->accumulation] : 1;
  return b > 0 && a > 0 ? (uint64_t)(b * a) * (r->env.gpus ? r->env.gpus : 1) : 0;
}

static void note(struct vf_wl_plan *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(struct vf_wl_plan *p, const char *fmt, ...) {
  if (p->n_changes == VF_WL_MAX_CHANGES) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->changes[p->n_changes++], sizeof p->changes[0], fmt, ap);
  va_end(ap);
}

static void shared_change(const struct vf_wl_plan_request *r, struct vf_wl_plan *p) {
  const struct vf_workload *w = r->w;
  int64_t gb = r->given ? r->given[0].values[w->batch] : -1;
  int64_t ga = r->given && w->accumulation >= 0 ? r->given[0].values[w->accumulation] : -1;
  char target[96] = "";
  if (p->target_effective_batch && p->effective_batch != p->target_effective_batch)
    snprintf(target, sizeof target, " (the nearest to %llu that a micro batch of %llu reaches)",
             (unsigned long long)p->target_effective_batch, (unsigned long long)p->batch);
  /* Nothing to change (the header line still reports the effective batch against the target). */
  if (gb == (int64_t)p->batch && ga == (int64_t)p->accumulation) return;
  if (gb > 0 && ga > 0)
    note(p, "micro batch %lld -> %llu with accumulation %lld -> %llu: effective batch %lld -> %llu%s", (long long)gb,
         (unsigned long long)p->batch, (long long)ga, (unsigned long long)p->accumulation,
         (long long)(gb * ga) * (long long)p->gpus, (unsigned long long)p->effective_batch, target);
  else
    note(p, "micro batch %llu with accumulation %llu: effective batch %llu%s", (unsigned long long)p->batch,
         (unsigned long long)p->accumulation, (unsigned long long)p->effective_batch, target);
}

static void stage_changes(const struct vf_wl_plan_request *r, struct vf_wl_plan *p) {
  const struct vf_workload *w = r->w;
  for (size_t st = 0; st < p->n_stages; st++) {
    char line[200] = "", name[64];
    snprintf(name, sizeof name, "%s", st < w->n_stages ? w->stages[st].name : "the run");
    for (size_t k = 0; k < w->n_knobs; k++) {
      if (w->knobs[k].role != VF_WL_KNOB) continue;
      int64_t now = p->stages[st].point.values[k], was = r->given ? r->given[st].values[k] : -1;
      size_t len = strlen(line);
      if (was >= 0 && was != now)
        snprintf(line + len, sizeof line - len, "%s%s %lld -> %lld", len ? ", " : "", w->knobs[k].name, (long long)was,
                 (long long)now);
      else if (was < 0)
        snprintf(line + len, sizeof line - len, "%s%s %lld", len ? ", " : "", w->knobs[k].name, (long long)now);
    }
    if (line[0]) note(p, "stage %s: %s", name, line);
  }
}

int vf_workload_plan(const struct vf_wl_plan_request *r, struct vf_wl_plan *out, struct vf_diag *d) {
  const struct vf_workload *w = r->w;
  memset(out, 0, sizeof *out);
  out->n_stages = w->n_stages ? w->n_stages : 1;
  out->safety = r->safety > 0 ? r->safety : w->safety > 0 ? w->safety : DEFAULT_SAFETY;
  out->budget_bytes = (uint64_t)((double)r->capacity_bytes * out->safety);
  out->gpus = r->env.gpus ? r->env.gpus : 1;
  out->target_effective_batch = target_of(r);
  struct search s = {r, out, d, {0, 0}};
  find_spread(&s);
  start_at_minimums(r, out);
  int rc = final_estimates(&s);
  if (rc) return rc;
  for (size_t st = 0; st < out->n_stages; st++)
    if (out->stages[st].device_range.high > out->budget_bytes) return 0; /* nothing fits: the minimums, as found */
  size_t order[VF_WL_MAX_KNOBS], n = raise_order(w, order);
  for (size_t i = 0; i < n && !rc; i++) rc = (int)order[i] == w->batch ? raise_batch(&s) : raise_knob(&s, order[i]);
  if (!rc) rc = final_estimates(&s);
  if (rc) return rc;
  out->found = true;
  out->effective_batch = out->batch * out->accumulation * out->gpus;
  shared_change(r, out);
  stage_changes(r, out);
  return 0;
}

/* How the peak of a traced factory grows with the micro batch and the knobs: a linear fit
 * over the shape of the micro batch (sequences through the encoders, elements of the loss's
 * tensors), which is where the knobs enter through the workload's own expressions. */
#include <math.h>
#include <string.h>

#include "vramfit/workload.h"

static void terms_of(const struct vf_wl_shape *s, double x[VF_WL_TERMS]) {
  x[0] = 1;
  x[1] = (double)s->sequences;
  x[2] = (double)s->loss_elems;
}

/* Solves the normal equations of the terms in use by Gaussian elimination; a term the
 * points cannot tell apart from the others makes it fail. */
static int solve(const struct vf_wl_measure *m, size_t n, const bool *use, const double *y,
                 double coef[VF_WL_TERMS]) {
  double a[VF_WL_TERMS][VF_WL_TERMS + 1] = {{0}};
  size_t idx[VF_WL_TERMS], k = 0;
  for (size_t t = 0; t < VF_WL_TERMS; t++)
    if (use[t]) idx[k++] = t;
  for (size_t p = 0; p < n; p++) {
    double x[VF_WL_TERMS], v = y[p];
    terms_of(&m[p].shape, x);
    for (size_t i = 0; i < k; i++) {
      for (size_t j = 0; j < k; j++) a[i][j] += x[idx[i]] * x[idx[j]];
      a[i][k] += x[idx[i]] * v;
    }
  }
  for (size_t c = 0; c < k; c++) {
    size_t piv = c;
    for (size_t r = c + 1; r < k; r++)
      if (fabs(a[r][c]) > fabs(a[piv][c])) piv = r;
    if (fabs(a[piv][c]) < 1e-9 * (fabs(a[c][c]) + 1)) return VF_EINVAL;
    for (size_t j = 0; j <= k; j++) {
      double tmp = a[c][j];
      a[c][j] = a[piv][j], a[piv][j] = tmp;
    }
    for (size_t r = 0; r < k; r++) {
      if (r == c) continue;
      double f = a[r][c] / a[c][c];
      for (size_t j = c; j <= k; j++) a[r][j] -= f * a[c][j];
    }
  }
  memset(coef, 0, VF_WL_TERMS * sizeof *coef);
  for (size_t i = 0; i < k; i++) coef[idx[i]] = a[i][k] / a[i][i];
  return 0;
}

static double at(const double coef[VF_WL_TERMS], const struct vf_wl_shape *s) {
  double x[VF_WL_TERMS], v = 0;
  terms_of(s, x);
  for (size_t t = 0; t < VF_WL_TERMS; t++) v += coef[t] * x[t];
  return v;
}

/* The terms of the allocated peak: all that the points determine and that come out
 * non-negative (a negative one is noise that would shrink the peak at large batches). */
static int choose_terms(const struct vf_wl_measure *m, size_t n, const double *y, bool use[VF_WL_TERMS]) {
  for (size_t t = 0; t < VF_WL_TERMS; t++) use[t] = true;
  for (;;) {
    double coef[VF_WL_TERMS];
    int rc = solve(m, n, use, y, coef);
    size_t worst = 0;
    for (size_t t = 1; !rc && t < VF_WL_TERMS; t++)
      if (use[t] && coef[t] < 0 && (!worst || coef[t] < coef[worst])) worst = t;
    if (rc) {
      /* The last term in use that the points cannot determine goes first. */
      for (size_t t = VF_WL_TERMS - 1; t > 0 && !worst; t--)
        if (use[t]) worst = t;
    }
    if (!worst) return rc;
    use[worst] = false;
  }
}

static void quality(const struct vf_wl_measure *m, size_t n, const double *y, struct vf_wl_fit *f) {
  double mean = 0, ss_tot = 0, ss_res = 0;
  for (size_t p = 0; p < n; p++) mean += y[p] / (double)n;
  f->max_error = 0;
  for (size_t p = 0; p < n; p++) {
    double r = at(f->allocated, &m[p].shape) - y[p];
    ss_res += r * r;
    ss_tot += (y[p] - mean) * (y[p] - mean);
    if (y[p] > 0) f->max_error = fmax(f->max_error, fabs(r) / y[p]);
  }
  f->r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : 1;
}

int vf_workload_fit(const struct vf_wl_measure *m, size_t n, struct vf_wl_fit *out) {
  memset(out, 0, sizeof *out);
  if (n < VF_WL_TERMS || n > 64) return VF_EINVAL;
  double y[64], reserved[64], cat[64];
  size_t largest = 0;
  for (size_t p = 0; p < n; p++) {
    y[p] = (double)m[p].allocated;
    reserved[p] = (double)m[p].reserved;
    if (m[p].allocated > m[largest].allocated) largest = p;
  }
  bool use[VF_WL_TERMS];
  int rc = choose_terms(m, n, y, use);
  /* Without the sequences term the fit says nothing of how the batch moves the peak. */
  if (!rc && !use[1]) rc = VF_EINVAL;
  if (!rc) rc = solve(m, n, use, y, out->allocated);
  if (!rc) rc = solve(m, n, use, reserved, out->reserved);
  /* The same terms for every category, so that the categories sum to the allocated fit. */
  for (int c = 0; !rc && c < VF_CAT_COUNT; c++) {
    for (size_t p = 0; p < n; p++) cat[p] = (double)m[p].by_category[c];
    rc = solve(m, n, use, cat, out->by_category[c]);
  }
  if (rc) return memset(out, 0, sizeof *out), rc;
  out->n_points = n;
  out->phase = m[largest].phase;
  quality(m, n, y, out);
  return 0;
}

/* A petabyte is past any GPU: beyond it a fit (a file anyone may edit) is clamped, so that
 * sums of its terms cannot overflow. */
#define FIT_MAX_BYTES 1e15

static uint64_t bytes_at(const double coef[VF_WL_TERMS], const struct vf_wl_shape *s) {
  double v = at(coef, s);
  return v > 0 ? (uint64_t)llround(fmin(v, FIT_MAX_BYTES)) : 0;
}

void vf_workload_fit_eval(const struct vf_wl_fit *f, const struct vf_wl_shape *s, const struct vf_wl_env *env,
                          struct vf_estimate *out) {
  memset(out, 0, sizeof *out);
  uint64_t sum = 0;
  for (int c = 0; c < VF_CAT_COUNT; c++) sum += out->by_category[c] = bytes_at(f->by_category[c], s);
  /* Rounding each category apart may leave the sum a few bytes off the allocated fit: the
   * breakdown is what the peak is made of, so the sum is the peak. */
  out->allocated_peak = sum;
  uint64_t reserved = bytes_at(f->reserved, s);
  out->reserved_peak = reserved > sum ? reserved : sum;
  out->allocator_slack = out->reserved_peak - sum;
  out->context = env->context_bytes;
  out->device_peak = out->reserved_peak + env->context_bytes;
  out->peak_phase = f->phase;
  out->phase_allocated[f->phase] = out->allocated_peak;
  out->phase_reserved[f->phase] = out->reserved_peak;
  out->accumulation = 1;
  out->lengths = VF_LENGTHS_FIXED;
  out->eval = VF_EVAL_NO;
}

static bool known(const struct vf_wl_point *pts, size_t n, size_t nk, const struct vf_wl_point *p) {
  for (size_t i = 0; i < n; i++)
    if (memcmp(pts[i].values, p->values, nk * sizeof *p->values) == 0) return true;
  return false;
}

static void add_point(const struct vf_workload *w, struct vf_wl_point *out, size_t *n, const struct vf_wl_point *base,
                      size_t k, int64_t v) {
  struct vf_wl_point p = *base;
  p.values[k] = v < w->knobs[k].max ? v : w->knobs[k].max;
  if (*n < VF_WL_MAX_POINTS && !known(out, *n, w->n_knobs, &p)) out[(*n)++] = p;
}

size_t vf_workload_trace_points(const struct vf_workload *w, struct vf_wl_point out[VF_WL_MAX_POINTS]) {
  if (w->n_points) return memcpy(out, w->points, w->n_points * sizeof *out), w->n_points;
  struct vf_wl_point base = {{0}};
  for (size_t k = 0; k < w->n_knobs; k++) {
    int64_t max;
    vf_workload_bounds(w, 0, k, &base.values[k], &max);
  }
  /* Tiny batches are all fixed cost: the growth shows from a few anchors on. */
  int64_t b = base.values[w->batch] < 4 ? 4 : base.values[w->batch];
  size_t n = 0;
  add_point(w, out, &n, &base, (size_t)w->batch, b);
  base = out[0];
  add_point(w, out, &n, &base, (size_t)w->batch, 2 * b);
  add_point(w, out, &n, &base, (size_t)w->batch, 4 * b);
  for (size_t k = 0; k < w->n_knobs; k++)
    if (w->knobs[k].role == VF_WL_KNOB) add_point(w, out, &n, &base, k, 2 * base.values[k] > base.values[k] + 1
                                                                               ? 2 * base.values[k] : base.values[k] + 1);
  return n;
}

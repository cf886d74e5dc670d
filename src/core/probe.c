/* The batch search of 'vramfit probe'. Each launch of a training run costs minutes, so the
 * search spends launches where the answer is likely: where the peaks measured so far put the
 * GPU's ceiling, else at the estimator's figure first, in small steps around it, and only
 * then further out. */
#include "core/bisect.h"
#include "vramfit/probe.h"

#include <math.h>

#include "base/diag.h"
#include "core/profile.h"

const char *vf_probe_outcome_name(enum vf_probe_outcome o) {
  static const char *const names[] = {"ok", "oom", "error", "timeout"};
  return o <= VF_PROBE_TIMEOUT ? names[o] : "unknown";
}

const char *vf_probe_move_name(enum vf_probe_move m) {
  static const char *const names[] = {"start", "predicted", "approach", "confirm", "bisect", "step"};
  return m <= VF_PROBE_STEP ? names[m] : "unknown";
}

int vf_probe_init(struct vf_probe *p, uint64_t min, uint64_t max, uint64_t hint) {
  if (min < 1 || min > max) return VF_EINVAL;
  uint64_t start = hint < min ? min : hint > max ? max : hint;
  /* An estimate is usually right within ~10%: a first step of an eighth brackets it in two
   * launches. Without one, doubling from min is the best that can be done. */
  uint64_t step = hint ? start / 8 : start;
  *p = (struct vf_probe){.min = min, .max = max, .start = start, .step = step ? step : 1};
  return 0;
}

void vf_probe_steer(struct vf_probe *p, uint64_t ceiling_bytes, const struct vf_probe_prior *prior) {
  p->ceiling = ceiling_bytes;
  p->prior = prior && prior->slope > 0 ? *prior : (struct vf_probe_prior){0};
  if (p->prior.fixed < 0) p->prior.fixed = 0;
  if (p->prior.bend < 0) p->prior.bend = 0;
}

/* ---- the estimate's curve ---- */

unsigned vf_probe_prior_batches(uint64_t hint, uint64_t batches[3]) {
  /* Estimates spread over half the hint: the allocator model rounds blocks, so estimates a
   * batch apart can step; a curve through the upper half follows the estimate where the
   * search looks (near the hint), and its value at no samples is the estimate's fixed part. */
  if (hint >= 4) {
    batches[0] = hint / 2, batches[1] = hint - hint / 4, batches[2] = hint;
    return 3;
  }
  batches[0] = hint / 2 ? hint / 2 : 1;
  batches[1] = batches[0] < hint ? hint : hint + 1;
  return 2;
}

void vf_probe_prior_fit(const uint64_t batches[3], const uint64_t peaks[3], unsigned n, struct vf_probe_prior *out) {
  double x[3] = {0}, y[3] = {0};
  for (unsigned i = 0; i < n; i++) x[i] = (double)batches[i], y[i] = (double)peaks[i];
  double chord = (y[n - 1] - y[0]) / (x[n - 1] - x[0]);
  *out = (struct vf_probe_prior){y[0] - chord * x[0], chord, 0};
  if (chord <= 0) *out = (struct vf_probe_prior){0};
  if (n < 3 || chord <= 0) return;
  /* Divided differences: the parabola through the three. */
  double d01 = (y[1] - y[0]) / (x[1] - x[0]), d12 = (y[2] - y[1]) / (x[2] - x[1]);
  double bend = (d12 - d01) / (x[2] - x[0]), slope = d01 - bend * (x[0] + x[1]);
  /* A parabola falling at first is the allocator's steps, not a growth: the chord it is. */
  if (bend <= 0 || slope <= 0) return;
  *out = (struct vf_probe_prior){y[0] - x[0] * (slope + x[0] * bend), slope, bend};
}

/* ---- the fit of peak(batch) ---- */

/* NVML peaks of one setup move between runs by an allocator segment (PyTorch reserves large
 * blocks in 20 MiB segments) and by what the driver adds: no measured peak is taken to be
 * closer to the truth than this. */
#define PEAK_NOISE (20.0 * 1048576)
/* How far an estimate's growth per sample may be off: an eighth, as the steps taken from an
 * estimate without peaks. */
#define PRIOR_ERROR 0.125
/* An out-of-memory launch stops at the request that failed, so it reached less than the most
 * the GPU gives by up to one large activation: the ceiling is looked for within this much
 * above what it reached first, and further only when the top of that fits. */
#define OOM_SHORTFALL (256.0 * 1048576)

enum curve_kind {
  PIVOTED,        /* one point and the estimate's fixed bytes */
  FROM_PRIOR,     /* one point with the estimate's slope */
  THROUGH_ORIGIN, /* the steepest line the points allow: all of the memory grows per sample */
  LEAST_SQUARES,  /* a line, or a parabola */
};

/* peak = a + b x + c x^2 (c = 0: a line), in bytes; resid: the largest residual; noise: how
 * far a measured peak may be off (NVML's noise, or more where the points scatter more). */
struct curve {
  enum curve_kind kind;
  int degree;
  double a, b, c, resid, noise;
};

static double at(const struct curve *f, double x) { return f->a + x * (f->b + x * f->c); }

static double largest_residual(const struct vf_probe *p, const struct curve *f) {
  double most = 0;
  for (unsigned i = 0; i < p->npoints; i++)
    most = fmax(most, fabs((double)p->points[i].peak_bytes - at(f, (double)p->points[i].batch)));
  return most;
}

static const struct vf_probe_point *largest(const struct vf_probe *p) {
  const struct vf_probe_point *top = &p->points[0];
  for (unsigned i = 1; i < p->npoints; i++)
    if (p->points[i].batch > top->batch) top = &p->points[i];
  return top;
}

/* The estimate's bytes at x above its fixed part: what grows with the batch. */
static double growth(const struct vf_probe_prior *e, double x) { return x * (e->slope + x * e->bend); }

/* Through the largest point: the estimate's curve with its growth scaled to pass through the
 * point from the estimate's fixed bytes, where the scale is within PRIOR_ERROR of 1 (an
 * estimate errs mostly in what grows with the batch: weights and optimizer states are
 * counted, activations modelled); else the estimate's curve moved to pass through it; else
 * the line through the origin, which takes all of its memory for per-sample memory: too
 * steep, so the prediction falls short of the ceiling and fits, and the next point lies far
 * from this one. */
static struct curve through_largest(const struct vf_probe *p, bool prior) {
  const struct vf_probe_prior *e = &p->prior;
  double x = (double)largest(p)->batch, y = (double)largest(p)->peak_bytes;
  bool from_prior = prior && e->slope > 0;
  double scale = from_prior && e->fixed > 0 ? (y - e->fixed) / growth(e, x) : 0;
  bool pivoted = from_prior && fabs(scale - 1) <= PRIOR_ERROR;
  struct curve f = {THROUGH_ORIGIN, 1, 0, y / x, 0, 0, 0};
  if (pivoted) f = (struct curve){PIVOTED, 2, e->fixed, scale * e->slope, scale * e->bend, 0, 0};
  else if (from_prior) f = (struct curve){FROM_PRIOR, 2, y - growth(e, x), e->slope, e->bend, 0, 0};
  f.resid = largest_residual(p, &f);
  f.noise = fmax(PEAK_NOISE, f.resid);
  return f;
}

/* x's powers up to the fourth. */
static void powers(double x, double pw[5]) {
  pw[0] = 1;
  for (int k = 1; k < 5; k++) pw[k] = pw[k - 1] * x;
}

/* x is scaled by the largest batch to keep the normal equations well conditioned. */
static double batch_scale(const struct vf_probe *p) { return (double)largest(p)->batch; }

/* The normal equations of a fit with n terms (1, x, x^2) over the points; column n is left
 * for the right-hand side. */
static void normal_equations(const struct vf_probe *p, int n, double m[3][4]) {
  double scale = batch_scale(p), pw[5];
  for (int r = 0; r < n; r++)
    for (int c = 0; c <= n; c++) m[r][c] = 0;
  for (unsigned i = 0; i < p->npoints; i++) {
    powers((double)p->points[i].batch / scale, pw);
    for (int r = 0; r < n; r++)
      for (int c = 0; c < n; c++) m[r][c] += pw[r + c];
  }
}

/* Gauss-Jordan elimination with partial pivoting of n equations (column n: the right-hand
 * side) into out; false when they are singular. */
static bool solve(int n, double m[3][4], double out[3]) {
  for (int c = 0; c < n; c++) {
    int pivot = c;
    for (int r = c + 1; r < n; r++)
      if (fabs(m[r][c]) > fabs(m[pivot][c])) pivot = r;
    if (fabs(m[pivot][c]) < 1e-12) return false;
    for (int k = 0; k <= n; k++) {
      double t = m[c][k];
      m[c][k] = m[pivot][k];
      m[pivot][k] = t;
    }
    for (int r = 0; r < n; r++) {
      if (r == c) continue;
      double factor = m[r][c] / m[c][c];
      for (int k = c; k <= n; k++) m[r][k] -= factor * m[c][k];
    }
  }
  for (int r = 0; r < n; r++) out[r] = m[r][n] / m[r][r];
  return true;
}

/* Least squares over the points with polynomial terms up to degree (1 or 2). */
static bool least_squares(const struct vf_probe *p, int degree, struct curve *f) {
  int n = degree + 1;
  double m[3][4], coef[3] = {0}, scale = batch_scale(p), pw[5];
  normal_equations(p, n, m);
  for (unsigned i = 0; i < p->npoints; i++) {
    powers((double)p->points[i].batch / scale, pw);
    for (int r = 0; r < n; r++) m[r][n] += pw[r] * (double)p->points[i].peak_bytes;
  }
  if (!solve(n, m, coef)) return false;
  *f = (struct curve){LEAST_SQUARES, degree, coef[0], coef[1] / scale, coef[2] / (scale * scale), 0, 0};
  f->resid = largest_residual(p, f);
  f->noise = fmax(PEAK_NOISE, f->resid);
  return true;
}

/* How far the curve may be off at x, in bytes, when every point may be off by its noise:
 * the fitted value is a weighted sum of the measured peaks (least squares is linear in
 * them), so it may be off by the noise times the sum of the weights' sizes. Near the points
 * that is about the noise; extrapolated far past points close together, many times it. */
static double band(const struct vf_probe *p, const struct curve *f, double x) {
  if (f->kind == FROM_PRIOR || f->kind == PIVOTED)
    return f->noise + PRIOR_ERROR * fabs(at(f, x) - at(f, (double)largest(p)->batch));
  if (f->kind == THROUGH_ORIGIN) return f->noise;
  int n = f->degree + 1;
  double m[3][4], v[3], scale = batch_scale(p), pw[5], weights = 0;
  normal_equations(p, n, m);
  powers(x / scale, pw);
  for (int r = 0; r < n; r++) m[r][n] = pw[r];
  if (!solve(n, m, v)) return INFINITY;
  for (unsigned i = 0; i < p->npoints; i++) {
    powers((double)p->points[i].batch / scale, pw);
    double w = 0;
    for (int r = 0; r < n; r++) w += v[r] * pw[r];
    weights += fabs(w);
  }
  return f->noise * weights;
}

/* Whether a bend can be seen at all over the points and up to batch: some point well inside
 * that span (points bunched at its ends show a slope, and noise, but no bend). */
static bool spread_to(const struct vf_probe *p, double batch) {
  double lo = batch, hi = batch;
  for (unsigned i = 0; i < p->npoints; i++) {
    lo = fmin(lo, (double)p->points[i].batch);
    hi = fmax(hi, (double)p->points[i].batch);
  }
  for (unsigned i = 0; i < p->npoints; i++) {
    double at_share = ((double)p->points[i].batch - lo) / (hi - lo);
    if (at_share >= 0.2 && at_share <= 0.8) return true;
  }
  return false;
}

static bool spread_out(const struct vf_probe *p) { return spread_to(p, (double)largest(p)->batch); }

/* A line's misfit, as a share of the largest peak, that is more than NVML's noise (peaks
 * move by allocator segments of 2 to 20 MiB, and by what the driver adds): with three points
 * a parabola fits exactly, so the line must miss by clearly more; with more, the parabola
 * must also halve the misfit. */
#define BEND_OF_THREE 0.005
#define BEND_OF_MORE 0.001

static bool bends(const struct vf_probe *p, const struct curve *line, const struct curve *q) {
  double top = 0;
  for (unsigned i = 0; i < p->npoints; i++) top = fmax(top, (double)p->points[i].peak_bytes);
  if (q->c <= 0 || !spread_out(p)) return false;
  if (p->npoints == 3) return line->resid > BEND_OF_THREE * top;
  return line->resid > BEND_OF_MORE * top && q->resid < line->resid / 2;
}

/* The curve the points support: one point with the estimate's slope (or its own), a line,
 * or a parabola where the points bend upwards. When noise tilts the line down, the steep
 * line through the largest point stands in. False without points or a ceiling. */
static bool fit_curve(const struct vf_probe *p, struct curve *f) {
  if (!p->npoints || !p->ceiling) return false;
  if (p->npoints == 1) return *f = through_largest(p, true), f->b > 0;
  struct curve q;
  if (!least_squares(p, 1, f) || f->b <= 0) return *f = through_largest(p, false), true;
  if (p->npoints >= 3 && least_squares(p, 2, &q) && bends(p, f, &q)) *f = q;
  return true;
}

/* The curve's bytes at batch, never below 0. */
static uint64_t peak_at(const struct curve *f, uint64_t batch) {
  double v = at(f, (double)batch);
  return v > 0 ? (uint64_t)llround(v) : 0;
}

uint64_t vf_probe_predict(const struct vf_probe *p, uint64_t batch) {
  struct curve f;
  return fit_curve(p, &f) ? peak_at(&f, batch) : 0;
}

/* ---- the next launch ---- */

static uint64_t step_up(const struct vf_probe *p) {
  return p->step > p->max - p->fit ? p->max : p->fit + p->step;
}

/* Down by the step, but at least halving, so that a hint far too high costs only a
 * logarithm of launches. */
static uint64_t step_down(const struct vf_probe *p) {
  uint64_t step = p->step < p->oom / 2 ? p->step : p->oom / 2;
  uint64_t next = p->oom - step;
  return next < p->min ? p->min : next;
}

static uint64_t move(enum vf_probe_move *out, enum vf_probe_move m, uint64_t batch) {
  if (out) *out = m;
  return batch;
}

static uint64_t without_peaks(const struct vf_probe *p, enum vf_probe_move *m) {
  if (p->fit && p->oom) return move(m, VF_PROBE_BISECT, p->fit + (p->oom - p->fit) / 2);
  return move(m, VF_PROBE_STEP, p->fit ? step_up(p) : step_down(p));
}

/* The bracket's ends as open bounds: lo fits (min - 1 when nothing has), hi does not (max + 1,
 * saturated, while nothing has run out of memory). */
static void bracket(const struct vf_probe *p, uint64_t *lo, uint64_t *hi) {
  *lo = p->fit ? p->fit : p->min - 1;
  *hi = p->oom ? p->oom : p->max < UINT64_MAX ? p->max + 1 : UINT64_MAX;
}

static uint64_t highest_peak(const struct vf_probe *p) {
  uint64_t most = 0;
  for (unsigned i = 0; i < p->npoints; i++)
    if (p->points[i].peak_bytes > most) most = p->points[i].peak_bytes;
  return most;
}

/* The least the GPU certainly gives a launch: what the launches reached, out-of-memory ones
 * included (those got that far before the GPU said no). */
static double reached(const struct vf_probe *p) {
  return (double)(p->revealed > highest_peak(p) ? p->revealed : highest_peak(p));
}

/* Where the most a launch can hold lies: the GPU's free memory, until a launch runs out of
 * memory short of it by more than OOM_SHORTFALL, or where the curve, even at the top of its
 * band, puts it under it (fragmentation); from then on between what the launches reached and
 * up to OOM_SHORTFALL above it (never above what the curve puts at that launch). */
struct ceiling {
  double low, high;
};

/* A line through points that show no bend: its band leaves out how far the peak may bend. */
static bool unbent(const struct vf_probe *p, const struct curve *f) {
  return f->kind == LEAST_SQUARES && f->degree == 1 && !spread_out(p);
}

static struct ceiling ceiling_of(const struct vf_probe *p, const struct curve *f) {
  double capacity = (double)p->ceiling, x = (double)p->oom;
  bool short_of_it = p->revealed && (double)p->revealed + OOM_SHORTFALL < capacity;
  bool under_it = !unbent(p, f) && at(f, x) + band(p, f, x) <= capacity;
  if (!p->oom || !(short_of_it || under_it)) return (struct ceiling){capacity, capacity};
  double low = reached(p);
  /* Every out-of-memory launch fell short of the ceiling by at most OOM_SHORTFALL. */
  double least = p->revealed_least ? (double)p->revealed_least : low;
  return (struct ceiling){low, fmax(low, fmin(at(f, x) + band(p, f, x), least + OOM_SHORTFALL))};
}

struct under_arg {
  const struct vf_probe *p;
  const struct curve *f;
  double ceiling, side; /* +1: the top of the curve's band, -1: its bottom */
};

static bool under(uint64_t batch, void *arg) {
  const struct under_arg *u = arg;
  double x = (double)batch;
  return at(u->f, x) + u->side * band(u->p, u->f, x) <= u->ceiling;
}

/* The largest batch in [lo, hi] the curve's band, on one side, puts under ceiling (lo when
 * none). */
static uint64_t last_under(const struct vf_probe *p, const struct curve *f, uint64_t lo, uint64_t hi,
                           double ceiling, double side) {
  struct under_arg u = {p, f, ceiling, side};
  return last_fitting(lo, hi, under, &u);
}

/* Just past the largest fit, where the curve says that is the answer; further after
 * confirmations that fitted; inside a bracket never further than its middle (bisection's
 * own step). */
static uint64_t confirm(const struct vf_probe *p, uint64_t lo, uint64_t hi, enum vf_probe_move *m) {
  uint64_t ahead = p->reach > 1 ? p->reach : 1;
  if (p->oom && ahead > (hi - lo) / 2) ahead = (hi - lo) / 2 ? (hi - lo) / 2 : 1;
  return move(m, VF_PROBE_CONFIRM, ahead >= hi - lo ? hi - 1 : lo + ahead);
}

static uint64_t points_span(const struct vf_probe *p) {
  uint64_t first = largest(p)->batch;
  for (unsigned i = 0; i < p->npoints; i++)
    if (p->points[i].batch < first) first = p->points[i].batch;
  return largest(p)->batch - first;
}

/* A region much wider than the points are spread is the band of a line extrapolated far
 * past them: a launch at its bottom (likely to fit) spreads the points and narrows the band
 * more than splitting the region would. */
static bool extrapolated(const struct vf_probe *p, const struct curve *f, uint64_t low, uint64_t high) {
  return (f->kind == LEAST_SQUARES || f->kind == FROM_PRIOR) && high - low > points_span(p);
}

/* A line through points that, with the target, would still show no bend is extrapolated
 * so far that it overshoots a peak that bends upwards: the next launch goes halfway, for a
 * point that spreads the fit. */
static uint64_t approach(const struct vf_probe *p, const struct curve *f, uint64_t lo, uint64_t target) {
  bool guess = f->kind == LEAST_SQUARES && !spread_to(p, (double)target) && target - lo > points_span(p) + 1;
  return guess ? lo + (target - lo + 1) / 2 : target;
}

/* After twice the launches bisection needs, the peaks are not helping: bisection ends it. */
static bool peaks_not_helping(const struct vf_probe *p) {
  unsigned bits = 0;
  for (uint64_t width = p->max - p->min; width; width >>= 1) bits++;
  return p->launches > 2 * bits + 2;
}

/* The answer lies where the bottom and the top of the curve's band cross the ceiling:
 * between the batches below which it certainly fits and above which it certainly does not.
 * One batch there is predicted and launched; where it may be one of several, the launch
 * splits them in half (and a fit near the top adds a point that narrows the band). */
static uint64_t steered(const struct vf_probe *p, const struct curve *f, enum vf_probe_move *m) {
  uint64_t lo, hi;
  bracket(p, &lo, &hi);
  /* Out of memory where the curve says it fits even under what was reached: the curve
   * cannot find this boundary. */
  bool contradicted = p->oom && at(f, (double)p->oom) + band(p, f, (double)p->oom) < reached(p);
  if (contradicted || peaks_not_helping(p)) return without_peaks(p, m);
  struct ceiling k = ceiling_of(p, f);
  uint64_t low = last_under(p, f, lo, hi - 1, k.low, 1), high = last_under(p, f, lo, hi - 1, k.high, -1);
  if (high < low) high = low;
  if (high <= lo) return confirm(p, lo, hi, m);
  /* A prediction that just ran out of memory under the GPU's memory, from a line through
   * points that show no bend: the line may overshoot a peak that bends upwards by far more
   * than its band, so bisect for a point between. */
  bool guessed = unbent(p, f) && k.low >= (double)p->ceiling;
  if (p->overshot && guessed) return move(m, VF_PROBE_BISECT, lo + (hi - lo) / 2);
  /* Where the curve itself crosses the middle of the ceiling's range: the likeliest answer.
   * When that is the top of the region (the curve puts the answer at or past the batch that
   * last ran out), or a prediction did not end the search (the curve is off by more than
   * its noise, one way), the region's middle; but after a prediction that fitted, the curve
   * now passes through its peak, measured where the answer is near: where it puts the
   * answer above the middle, it is believed (a curve that fell short rises to the answer). */
  uint64_t center = last_under(p, f, lo, hi - 1, (k.low + k.high) / 2, 0), middle = low + (high - low + 1) / 2;
  bool fell_short = p->predicted && !p->overshot;
  bool likeliest = fell_short ? center > middle && center <= high : !p->predicted && center < high;
  if (!likeliest) center = middle;
  if (center <= lo) center = lo + 1;
  bool bottom = low > lo && (low == high || extrapolated(p, f, low, high));
  uint64_t target = bottom ? low : center, at_x = approach(p, f, lo, target);
  return move(m, at_x != target || (bottom && low != high) ? VF_PROBE_APPROACH : VF_PROBE_PREDICTED, at_x);
}

/* The most a launch can surely hold: the GPU's free memory, and less than the curve's top at
 * a batch that ran out of memory (that batch needed no more). Not OOM_SHORTFALL's guess. */
static double surely_held(const struct vf_probe *p, const struct curve *f) {
  double capacity = (double)p->ceiling, x = (double)p->oom;
  return p->oom ? fmin(capacity, at(f, x) + band(p, f, x)) : capacity;
}

/* Launching the batch past the largest fit where the peaks settle that it runs out of memory
 * would only confirm a crash, and each launch costs minutes. The estimate's curve alone never
 * settles it: measured peaks do. */
static bool settled(const struct vf_probe *p, const struct curve *f) {
  if (!p->fit || p->fit == p->max || f->kind != LEAST_SQUARES) return false;
  double x = (double)p->fit + 1;
  return at(f, x) - band(p, f, x) > surely_held(p, f);
}

bool vf_probe_settled(const struct vf_probe *p, uint64_t *batch, uint64_t *predicted, uint64_t *limit) {
  struct curve f;
  if (p->stopped || !p->fit || (p->oom && p->oom - p->fit <= 1) || !fit_curve(p, &f) || !settled(p, &f))
    return false;
  *batch = p->fit + 1;
  *predicted = (uint64_t)llround(at(&f, (double)*batch));
  *limit = (uint64_t)llround(surely_held(p, &f));
  return true;
}

uint64_t vf_probe_next(const struct vf_probe *p, enum vf_probe_move *m) {
  if (p->stopped) return 0;
  if (!p->launches) return move(m, VF_PROBE_START, p->start);
  if (p->fit && p->oom && p->oom - p->fit <= 1) return 0;
  if ((p->fit && p->fit == p->max) || (p->oom && p->oom == p->min)) return 0;
  struct curve f;
  if (!fit_curve(p, &f)) return without_peaks(p, m);
  return settled(p, &f) ? 0 : steered(p, &f, m);
}

int vf_probe_record(struct vf_probe *p, uint64_t batch, enum vf_probe_outcome o, uint64_t peak_bytes) {
  enum vf_probe_move m;
  if (!batch || batch != vf_probe_next(p, &m)) return VF_EINVAL;
  uint64_t lo = p->fit;
  p->launches++;
  if (o == VF_PROBE_ERROR) p->stopped = true;
  else if (o == VF_PROBE_OOM) p->oom = batch;
  else p->fit = batch;
  /* An out-of-memory launch got at least as far as its peak before the GPU said no. */
  if (o == VF_PROBE_OOM && peak_bytes > p->revealed) p->revealed = peak_bytes;
  if (o == VF_PROBE_OOM && peak_bytes && (!p->revealed_least || peak_bytes < p->revealed_least))
    p->revealed_least = peak_bytes;
  bool fitted = o == VF_PROBE_OK || o == VF_PROBE_TIMEOUT;
  if (fitted && peak_bytes && p->ceiling && p->npoints < VF_PROBE_MAX_POINTS)
    p->points[p->npoints++] = (struct vf_probe_point){batch, peak_bytes};
  if (m == VF_PROBE_STEP && p->step <= UINT64_MAX / 2) p->step *= 2;
  p->predicted = m == VF_PROBE_PREDICTED;
  p->overshot = p->predicted && o == VF_PROBE_OOM;
  /* A confirmation that fitted: the curve falls short, so the next one reaches twice as far. */
  p->reach = m == VF_PROBE_CONFIRM && fitted && batch - lo <= UINT64_MAX / 4 ? 2 * (batch - lo) : 0;
  return 0;
}

/* ---- once the search is over ---- */

struct margin_arg {
  const struct curve *f;
  double grown, limit; /* 1 + margin; what a launch can hold */
};

static bool leaves_margin(uint64_t batch, void *arg) {
  const struct margin_arg *m = arg;
  return at(m->f, (double)batch) * m->grown <= m->limit;
}

/* By the measured peaks: the largest batch up to the largest fit that leaves the margin
 * under what a launch can hold (the ceiling, or what the launches reached where the GPU gave
 * less: fragmentation). */
static void advise_by_peaks(const struct vf_probe *p, const struct curve *f, double grown, struct vf_probe_advice *out) {
  struct margin_arg m = {f, grown, ceiling_of(p, f).low};
  out->within_margin = leaves_margin(1, &m);
  out->batch = out->within_margin ? last_fitting(1, p->fit, leaves_margin, &m) : 1;
  out->limit_bytes = (uint64_t)llround(m.limit);
}

void vf_probe_advise(const struct vf_probe *p, double margin, uint64_t target, struct vf_probe_advice *out) {
  *out = (struct vf_probe_advice){.accumulation = 1, .within_margin = true};
  if (!p->fit) return;
  double grown = 1 + fmax(margin, 0);
  struct curve f;
  bool peaks = fit_curve(p, &f);
  if (peaks) advise_by_peaks(p, &f, grown, out);
  else out->batch = (uint64_t)fmax(1, floor((double)p->fit / grown));
  if (target) {
    out->accumulation = (target + out->batch - 1) / out->batch;
    out->batch = (target + out->accumulation - 1) / out->accumulation;
  }
  if (peaks) out->peak_bytes = peak_at(&f, out->batch);
}

bool vf_probe_flat(const struct vf_probe *p, struct vf_probe_point *low, struct vf_probe_point *high) {
  if (p->npoints < 2) return false;
  *low = *high = p->points[0];
  uint64_t least = p->points[0].peak_bytes, most = least;
  for (unsigned i = 1; i < p->npoints; i++) {
    const struct vf_probe_point *q = &p->points[i];
    if (q->batch < low->batch) *low = *q;
    if (q->batch > high->batch) *high = *q;
    least = q->peak_bytes < least ? q->peak_bytes : least;
    most = q->peak_bytes > most ? q->peak_bytes : most;
  }
  return high->batch >= 4 * low->batch && (double)(most - least) < PEAK_NOISE;
}

/* Whether batch's estimated device peak fits. A batch the estimator refuses as implausibly
 * large does not; any other refusal already shows at the smallest batch. */
static int fits(const struct vf_model *m, struct vf_setup *s, const struct vf_profile *prof,
                const struct vf_alloc_conf *alloc, uint64_t batch, bool *ok, struct vf_diag *d) {
  s->batch = batch;
  struct vf_estimate e;
  int rc = vf_estimate(m, s, prof, alloc, &e, d);
  *ok = !rc && !e.out_of_memory && e.device_peak <= s->capacity_bytes;
  return rc;
}

struct fit_arg {
  const struct vf_model *m;
  struct vf_setup *s;
  const struct vf_profile *prof;
  const struct vf_alloc_conf *alloc;
};

static bool batch_fits(uint64_t batch, void *arg) {
  struct fit_arg *f = arg;
  bool ok;
  fits(f->m, f->s, f->prof, f->alloc, batch, &ok, NULL);
  return ok;
}

int vf_estimate_max_batch(const struct vf_model *m, const struct vf_setup *s,
                          const struct vf_profile *prof, const struct vf_alloc_conf *alloc,
                          uint64_t min, uint64_t max, uint64_t *out, struct vf_diag *d) {
  if (!s->capacity_bytes || min < 1 || min > max)
    return diag_at(d, VF_EINVAL, NULL, UINT64_MAX, "the largest batch needs a GPU and a range");
  struct vf_setup t = *s;
  bool ok;
  int rc = fits(m, &t, prof, alloc, min, &ok, d);
  *out = 0;
  if (rc || !ok) return rc;
  struct fit_arg f = {m, &t, prof, alloc};
  *out = last_fitting(min, max, batch_fits, &f);
  return 0;
}

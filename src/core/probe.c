/* The batch search of 'vramfit probe'. Each launch of a training run costs minutes, so the
 * search spends launches where the answer is likely: where the peaks measured so far put the
 * GPU's ceiling, else at the estimator's figure first, in small steps around it, and only
 * then further out. */
#include "core/bisect.h"
#include "vramfit/probe.h"

#include <math.h>

#include "core/diag.h"

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

void vf_probe_steer(struct vf_probe *p, uint64_t ceiling_bytes, double slope_bytes_per_sample) {
  p->ceiling = ceiling_bytes;
  p->prior_slope = slope_bytes_per_sample > 0 ? slope_bytes_per_sample : 0;
}

/* ---- the fit of peak(batch) ---- */

/* peak = a + b x + c x^2 (c = 0: a line), in bytes; resid: the largest residual. */
struct curve {
  double a, b, c, resid;
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

/* Through the largest point with the estimate's slope, else through the origin as well,
 * which takes all of its memory for per-sample memory: too steep, so the prediction falls
 * short of the ceiling and fits, and the next point lies far from this one. */
static struct curve through_largest(const struct vf_probe *p, bool prior) {
  double x = (double)largest(p)->batch, y = (double)largest(p)->peak_bytes;
  double slope = prior && p->prior_slope > 0 ? p->prior_slope : y / x;
  return (struct curve){.a = y - slope * x, .b = slope};
}

/* Least squares over the points with polynomial terms up to degree (1 or 2), solved by
 * Gaussian elimination on the normal equations; x is scaled to keep them well conditioned. */
static bool least_squares(const struct vf_probe *p, int degree, struct curve *f) {
  double scale = 0;
  for (unsigned i = 0; i < p->npoints; i++) scale = fmax(scale, (double)p->points[i].batch);
  int n = degree + 1;
  double m[3][4] = {{0}};
  for (unsigned i = 0; i < p->npoints; i++) {
    double x = (double)p->points[i].batch / scale, y = (double)p->points[i].peak_bytes, pw[5] = {1};
    for (int k = 1; k < 5; k++) pw[k] = pw[k - 1] * x;
    for (int r = 0; r < n; r++) {
      for (int c = 0; c < n; c++) m[r][c] += pw[r + c];
      m[r][n] += pw[r] * y;
    }
  }
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
  double coef[3] = {0};
  for (int r = 0; r < n; r++) coef[r] = m[r][n] / m[r][r];
  *f = (struct curve){.a = coef[0], .b = coef[1] / scale, .c = coef[2] / (scale * scale)};
  f->resid = largest_residual(p, f);
  return true;
}

/* Whether a bend can be seen at all: some point well inside the span of the points (points
 * bunched at the ends show a slope, and noise, but no bend). */
static bool spread_out(const struct vf_probe *p) {
  double lo = (double)p->points[0].batch, hi = lo;
  for (unsigned i = 1; i < p->npoints; i++) {
    lo = fmin(lo, (double)p->points[i].batch);
    hi = fmax(hi, (double)p->points[i].batch);
  }
  for (unsigned i = 0; i < p->npoints; i++) {
    double at_share = ((double)p->points[i].batch - lo) / (hi - lo);
    if (at_share > 0.2 && at_share < 0.8) return true;
  }
  return false;
}

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
  if (!least_squares(p, 1, f) || f->b <= 0) {
    *f = through_largest(p, false);
    f->resid = largest_residual(p, f);
    return true;
  }
  if (p->npoints >= 3 && least_squares(p, 2, &q) && bends(p, f, &q)) *f = q;
  return true;
}

/* The largest batch (real) the curve puts at or under the ceiling; +inf when it never
 * reaches it, 0 when even batch 0 would not fit. */
static double batch_at_ceiling(const struct curve *f, double ceiling) {
  double room = ceiling - f->a;
  if (room < 0) return 0;
  if (f->c <= 0) return f->b > 0 ? room / f->b : INFINITY;
  return (-f->b + sqrt(f->b * f->b + 4 * f->c * room)) / (2 * f->c);
}

uint64_t vf_probe_predict(const struct vf_probe *p, uint64_t batch) {
  struct curve f;
  if (!fit_curve(p, &f)) return 0;
  double v = at(&f, (double)batch);
  return v > 0 ? (uint64_t)llround(v) : 0;
}

/* How many batches the curve's misfit spans at batch x: how far past a prediction the
 * answer may lie. At least 1. */
static uint64_t spread(const struct curve *f, double x) {
  double slope = f->b + 2 * f->c * x;
  double n = slope > 0 ? ceil(2 * f->resid / slope) : 1;
  return n < 1 ? 1 : n > 1e9 ? 1000000000 : (uint64_t)n;
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

/* A fit resting on points close together, extrapolated much further than they span, is a
 * guess: the next launch goes halfway, for a point that spreads the fit. */
static bool far_reach(const struct vf_probe *p, uint64_t lo, double x) {
  if (p->npoints >= 3 || (p->npoints == 1 && p->prior_slope > 0)) return false;
  uint64_t first = largest(p)->batch;
  for (unsigned i = 0; i < p->npoints; i++)
    if (p->points[i].batch < first) first = p->points[i].batch;
  return x - (double)lo > 4.0 * (double)(lo - first + 1);
}

/* Just past the largest fit, by the fit's spread or further after confirmations that
 * fitted; inside a bracket never further than its middle (bisection's own step). */
static uint64_t confirm(const struct vf_probe *p, const struct curve *f, uint64_t lo, uint64_t hi,
                        enum vf_probe_move *m) {
  uint64_t ahead = spread(f, (double)lo + 1);
  if (p->reach > ahead) ahead = p->reach;
  if (p->oom && ahead > (hi - lo) / 2) ahead = (hi - lo) / 2 ? (hi - lo) / 2 : 1;
  return move(m, VF_PROBE_CONFIRM, ahead >= hi - lo ? hi - 1 : lo + ahead);
}

/* The ceiling is the GPU's memory until a launch runs out below where the fit reaches it;
 * then it lies between what the launches reached and that launch's fitted peak. */
static uint64_t steered(const struct vf_probe *p, const struct curve *f, enum vf_probe_move *m) {
  uint64_t lo, hi;
  bracket(p, &lo, &hi);
  /* A bracket the fit did not close in one step is closed faster by halving it. */
  if (p->fit && p->oom && p->slow) return move(m, VF_PROBE_BISECT, p->fit + (p->oom - p->fit) / 2);
  double x = floor(batch_at_ceiling(f, (double)p->ceiling));
  if (p->oom && x >= (double)hi) {
    /* Out of memory where the fit says it fits even under what was reached (beyond its
     * misfit): the fit cannot find this boundary. */
    if (at(f, (double)p->oom) + f->resid < reached(p)) return without_peaks(p, m);
    x = floor(batch_at_ceiling(f, reached(p)));
    /* A prediction that just ran out of memory, when what it reached hardly moves the next
     * one: the fit overshoots (it bends more than it knows), so bisect for a point between. */
    if (p->overshot && ((double)hi - x) * 20 < (double)(hi - lo))
      return move(m, VF_PROBE_BISECT, lo + (hi - lo) / 2);
  }
  if (x <= (double)lo) return confirm(p, f, lo, hi, m);
  uint64_t at_x = x >= (double)hi ? hi - 1 : (uint64_t)x;
  /* Below a batch that ran out of memory, a prediction within the fit's spread of it would
   * most likely run out too: aim that much lower, to fit. */
  uint64_t margin = spread(f, x);
  if (p->oom && at_x + margin > hi - 1) at_x = hi - lo > 2 * margin ? hi - margin : lo + (hi - lo) / 2;
  if (far_reach(p, lo, x)) return move(m, VF_PROBE_APPROACH, lo + (at_x - lo + 1) / 2);
  return move(m, VF_PROBE_PREDICTED, at_x);
}

uint64_t vf_probe_next(const struct vf_probe *p, enum vf_probe_move *m) {
  if (p->stopped) return 0;
  if (!p->launches) return move(m, VF_PROBE_START, p->start);
  if (p->fit && p->oom && p->oom - p->fit <= 1) return 0;
  if ((p->fit && p->fit == p->max) || (p->oom && p->oom == p->min)) return 0;
  struct curve f;
  return fit_curve(p, &f) ? steered(p, &f, m) : without_peaks(p, m);
}

int vf_probe_record(struct vf_probe *p, uint64_t batch, enum vf_probe_outcome o, uint64_t peak_bytes) {
  enum vf_probe_move m;
  if (!batch || batch != vf_probe_next(p, &m)) return VF_EINVAL;
  bool closed = p->fit && p->oom;
  uint64_t width = closed ? p->oom - p->fit : 0, lo = p->fit;
  p->launches++;
  if (o == VF_PROBE_ERROR) p->stopped = true;
  else if (o == VF_PROBE_OOM) p->oom = batch;
  else p->fit = batch;
  /* An out-of-memory launch got at least as far as its peak before the GPU said no. */
  if (o == VF_PROBE_OOM && peak_bytes > p->revealed) p->revealed = peak_bytes;
  bool fitted = o == VF_PROBE_OK || o == VF_PROBE_TIMEOUT;
  p->overshot = m == VF_PROBE_PREDICTED && o == VF_PROBE_OOM;
  if (fitted && peak_bytes && p->ceiling && p->npoints < VF_PROBE_MAX_POINTS)
    p->points[p->npoints++] = (struct vf_probe_point){batch, peak_bytes};
  if (m == VF_PROBE_STEP && p->step <= UINT64_MAX / 2) p->step *= 2;
  /* A confirmation that fitted: the curve falls short, so the next one reaches twice as far. */
  p->reach = m == VF_PROBE_CONFIRM && fitted && batch - lo <= UINT64_MAX / 4 ? 2 * (batch - lo) : 0;
  /* A steered launch that did not halve the bracket leaves the next one to bisection. */
  p->slow = closed && (m == VF_PROBE_PREDICTED || m == VF_PROBE_APPROACH) && (p->oom - p->fit) * 2 > width;
  return 0;
}

/* Whether batch's estimated device peak fits. A batch the estimator refuses as implausibly
 * large does not; any other refusal already shows at the smallest batch. */
static int fits(const struct vf_model *m, struct vf_setup *s, const struct vf_profile *prof,
                const struct vf_alloc_conf *alloc, uint64_t batch, bool *ok, struct vf_diag *d) {
  s->batch = batch;
  struct vf_estimate e;
  int rc = vf_estimate(m, s, prof, alloc, &e, d);
  *ok = !rc && e.device_peak <= s->capacity_bytes;
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
    return vf_diag_at(d, VF_EINVAL, NULL, UINT64_MAX, "the largest batch needs a GPU and a range");
  struct vf_setup t = *s;
  bool ok;
  int rc = fits(m, &t, prof, alloc, min, &ok, d);
  *out = 0;
  if (rc || !ok) return rc;
  struct fit_arg f = {m, &t, prof, alloc};
  *out = vf_last_fitting(min, max, batch_fits, &f);
  return 0;
}

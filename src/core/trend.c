/* Memory trends of a watched process, GPU under-use and unused memory. PyTorch's caching allocator makes
 * a process's memory a staircase: steps while segments are first reserved, then a plateau;
 * a late step (the first evaluation, a longer batch) is normal too. A leak is growth that
 * goes on: a robust (Theil-Sen) slope over a recent window, and a rise in each third of
 * that window, so that one or two steps never count as a leak however recent. */
#include <math.h>
#include <stdlib.h>

#include "vramfit/monitor.h"

#define BUCKETS 48
#define MIB 1048576.0
#define FLAT_BYTES (2 * MIB)    /* NVML's per-process figure moves in 2 MiB pages */
#define LOW_UTIL_PERCENT 30.0
#define LOW_POWER_RATIO 0.40
#define LOW_MEMORY_SHARE 0.5 /* the guides' "under-used": 14%, 30-50% of the GPU */

void vf_trend_config_default(struct vf_trend_config *c) {
  c->warmup_s = 120;
  c->window_s = 600;
  c->min_slope_bps = MIB / 60;
}

struct points {
  size_t n;
  double t[BUCKETS], v[BUCKETS];
};

/* Averages the samples in [from, to] into at most BUCKETS equal-time points, which keeps
 * the pairwise slopes cheap however fast the sampling. */
static void bucket(const double *t, const double *v, size_t n, double from, double to,
                   struct points *p) {
  double sum_t[BUCKETS] = {0}, sum_v[BUCKETS] = {0};
  size_t count[BUCKETS] = {0};
  double width = (to - from) / BUCKETS;
  for (size_t i = 0; i < n; i++) {
    if (t[i] < from) continue;
    size_t b = width > 0 ? (size_t)((t[i] - from) / width) : 0;
    if (b >= BUCKETS) b = BUCKETS - 1;
    sum_t[b] += t[i];
    sum_v[b] += v[i];
    count[b]++;
  }
  p->n = 0;
  for (size_t b = 0; b < BUCKETS; b++)
    if (count[b]) {
      p->t[p->n] = sum_t[b] / (double)count[b];
      p->v[p->n++] = sum_v[b] / (double)count[b];
    }
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of the slopes between every pair of points. */
static double theil_sen(const struct points *p) {
  double slopes[BUCKETS * (BUCKETS - 1) / 2];
  size_t k = 0;
  for (size_t i = 0; i < p->n; i++)
    for (size_t j = i + 1; j < p->n; j++)
      if (p->t[j] > p->t[i]) slopes[k++] = (p->v[j] - p->v[i]) / (p->t[j] - p->t[i]);
  if (k == 0) return 0;
  qsort(slopes, k, sizeof *slopes, by_value);
  return k % 2 ? slopes[k / 2] : (slopes[k / 2 - 1] + slopes[k / 2]) / 2;
}

/* Each third of the window ends higher than it starts (thirds share their end points). */
static bool rises_throughout(const struct points *p) {
  for (size_t k = 0; k < 3; k++) {
    size_t from = k * (p->n - 1) / 3, to = (k + 1) * (p->n - 1) / 3;
    if (p->v[to] - p->v[from] <= FLAT_BYTES) return false;
  }
  return true;
}

void vf_trend_analyze(const double *t, const double *v, size_t n, double headroom_bytes,
                      const struct vf_trend_config *c, struct vf_trend *out) {
  *out = (struct vf_trend){.state = VF_TREND_WARMUP, .seconds_to_full = -1};
  if (n < 2) return;
  double end = t[n - 1], from = fmax(t[0] + c->warmup_s, end - c->window_s);
  if (end - from < c->window_s / 2) return;
  struct points p;
  bucket(t, v, n, from, end, &p);
  if (p.n < 8) return;
  out->state = VF_TREND_STEADY;
  out->slope_bps = theil_sen(&p);
  if (out->slope_bps < c->min_slope_bps) return;
  if (!rises_throughout(&p)) return;
  out->state = VF_TREND_GROWING;
  out->seconds_to_full = headroom_bytes > 0 ? headroom_bytes / out->slope_bps : 0;
}

void vf_underuse_analyze(const double *t, const double *util, const double *power_ratio,
                         size_t n, double window_s, struct vf_underuse *out) {
  *out = (struct vf_underuse){.power_ratio = -1};
  if (n == 0) return;
  double from = t[n - 1] - window_s, util_sum = 0, power_sum = 0;
  size_t count = 0, power_count = 0;
  for (size_t i = 0; i < n; i++) {
    if (t[i] < from) continue;
    util_sum += util[i];
    count++;
    if (power_ratio[i] >= 0) {
      power_sum += power_ratio[i];
      power_count++;
    }
  }
  out->util_mean = util_sum / (double)count;
  if (power_count) out->power_ratio = power_sum / (double)power_count;
  bool covered = t[0] <= from;
  bool low_power = out->power_ratio < 0 || out->power_ratio < LOW_POWER_RATIO;
  out->flagged = covered && out->util_mean < LOW_UTIL_PERCENT && low_power;
}

void vf_headroom_analyze(const double *t, const double *held, size_t n, double total_bytes, double warmup_s,
                         double window_s, struct vf_headroom *out) {
  *out = (struct vf_headroom){0};
  if (n == 0 || total_bytes <= 0) return;
  double from = t[n - 1] - window_s;
  for (size_t i = 0; i < n; i++)
    if (t[i] >= from) out->held_bytes = fmax(out->held_bytes, held[i]);
  out->share = out->held_bytes / total_bytes;
  out->growth = out->held_bytes > 0 ? VF_HEADROOM_USE * total_bytes / out->held_bytes : 0;
  /* The allocator reserves its segments during the first steps: judged after warm-up only. */
  bool after_warmup = from >= t[0] + warmup_s;
  out->flagged = after_warmup && out->held_bytes > 0 && out->share < LOW_MEMORY_SHARE;
}

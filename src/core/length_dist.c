/* Sample-length distributions (--lengths varied:MEAN,MAX, or a dataset's histogram,
 * src/io/length_dist.c) and the padded length of each micro batch a replay draws from one:
 * a batch padded to its longest sample (DataCollatorWithPadding, litgpt's and torchtune's
 * collate functions) is as long as the longest of `batch` draws. */
#include <math.h>

#include "vramfit/estimate.h"

/* The mean of a density proportional to exp(t x) on [0, 1]: 1/2 at t = 0, rising with t. */
static double scaled_mean(double t) {
  if (fabs(t) < 1e-9) return 0.5;
  if (t < 0) return 1.0 - scaled_mean(-t);
  return 1.0 / -expm1(-t) - 1.0 / t;
}

/* The share of that density below x in [0, 1]. */
static double scaled_cdf(double t, double x) {
  if (fabs(t) < 1e-9) return x;
  return t > 0 ? (exp(t * (x - 1)) - exp(-t)) / -expm1(-t) : expm1(t * x) / expm1(t);
}

int vf_length_dist_mean_max(uint64_t mean, uint64_t max, struct vf_length_dist *out) {
  if (mean < 1 || mean > max) return VF_EINVAL;
  /* Lengths 1..max as the continuous range [0.5, max + 0.5]; find the rate whose mean is
   * `mean` by bisection (the mean rises with the rate). */
  double lo = -1e4, hi = 1e4, want = ((double)mean - 0.5) / (double)max;
  for (int i = 0; i < 200; i++) {
    double mid = (lo + hi) / 2;
    if (scaled_mean(mid) < want) lo = mid;
    else hi = mid;
  }
  double t = (lo + hi) / 2, below = 0;
  uint32_t bins = max < VF_LENGTH_BINS ? (uint32_t)max : VF_LENGTH_BINS;
  out->n = 0;
  for (uint32_t i = 0; i < bins; i++) {
    uint64_t top = (max * (i + 1) + bins - 1) / bins; /* each bin at its longest length */
    double share = scaled_cdf(t, (double)top / (double)max);
    uint64_t count = (uint64_t)llround((share - below) * 1e9);
    below = share;
    /* The longest sample is there, however rare: a long run meets it. */
    if (!count && i + 1 == bins) count = 1;
    if (!count) continue;
    out->length[out->n] = top;
    out->count[out->n++] = count;
  }
  return 0;
}

/* The radical inverse of k in base 2: 1/2, 1/4, 3/4, 1/8, ... */
static double van_der_corput(uint64_t k) {
  double v = 0, f = 0.5;
  for (; k; k >>= 1, f /= 2)
    if (k & 1) v += f;
  return v;
}

uint64_t vf_length_dist_batch(const struct vf_length_dist *d, uint64_t batch, uint64_t seq, uint64_t k,
                              uint64_t n) {
  if (!d->n) return seq;
  uint64_t longest = d->length[d->n - 1] < seq ? d->length[d->n - 1] : seq;
  if (k + 1 >= n) return longest;
  /* The longest of `batch` draws is below x with probability F(x)^batch. */
  double p = pow(van_der_corput(k + 1), 1.0 / (double)(batch ? batch : 1)), total = 0, below = 0;
  for (uint32_t i = 0; i < d->n; i++) total += (double)d->count[i];
  for (uint32_t i = 0; i < d->n; i++) {
    below += (double)d->count[i];
    if (below >= p * total) return d->length[i] < seq ? d->length[i] : seq;
  }
  return longest;
}

void vf_setup_assume_lengths(struct vf_setup *s) {
  if (s->lengths == VF_LENGTHS_VARIED && !s->length_dist.n && s->seq)
    vf_length_dist_mean_max((s->seq + 1) / 2, s->seq, &s->length_dist);
}

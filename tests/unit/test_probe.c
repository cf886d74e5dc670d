/* The batch search of 'vramfit probe' against a threshold oracle (batch <= T fits): it finds
 * exactly T, never repeats or leaves [min, max], and with a good estimate needs a few
 * launches where doubling from 1 and bisecting needs many; steered by measured peaks it finds
 * T in a few launches, and whatever the peaks say (noise, nonsense) it still finds T; plus
 * the estimator's own largest fitting batch. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "io/profile.h"
#include "vramfit.h"

#define MAX_LAUNCHES 128
#define GIB 1073741824.0

/* What a launch reports as its peak: 0 (no NVML), or a made-up figure. */
typedef uint64_t (*peak_fn)(uint64_t batch, uint64_t t, void *arg);

/* Runs the search against "batch <= t fits" with peaks from peak (NULL: none) under ceiling
 * (0: no steering) and checks every proposal; returns the result and the number of launches. */
static uint64_t steered_search(uint64_t min, uint64_t max, uint64_t hint, uint64_t t, uint64_t ceiling,
                               peak_fn peak, void *arg, unsigned *launches) {
  struct vf_probe p;
  assert_int_equal(vf_probe_init(&p, min, max, hint), 0);
  if (ceiling) vf_probe_steer(&p, ceiling, NULL);
  uint64_t tried[MAX_LAUNCHES];
  unsigned n = 0;
  for (uint64_t b; (b = vf_probe_next(&p, NULL));) {
    if (n == MAX_LAUNCHES) fail_msg("no end: T %llu hint %llu", (unsigned long long)t, (unsigned long long)hint);
    if (b < min || b > max) fail_msg("batch %llu outside [%llu, %llu]", (unsigned long long)b,
                                     (unsigned long long)min, (unsigned long long)max);
    for (unsigned i = 0; i < n; i++)
      if (tried[i] == b) fail_msg("batch %llu launched twice (T %llu)", (unsigned long long)b, (unsigned long long)t);
    tried[n++] = b;
    assert_int_equal(vf_probe_record(&p, b, b <= t ? VF_PROBE_OK : VF_PROBE_OOM, peak ? peak(b, t, arg) : 0), 0);
  }
  assert_int_equal(p.launches, n);
  *launches = n;
  return vf_probe_result(&p);
}

static uint64_t search(uint64_t min, uint64_t max, uint64_t hint, uint64_t t, unsigned *launches) {
  return steered_search(min, max, hint, t, 0, NULL, NULL, launches);
}

static uint64_t want(uint64_t min, uint64_t max, uint64_t t) { return t < min ? 0 : t > max ? max : t; }

static void finds_every_threshold(void **state) {
  (void)state;
  static const uint64_t ranges[][2] = {{1, 4096}, {1, 1}, {3, 50}, {16, 16}, {7, 8}};
  for (size_t r = 0; r < sizeof ranges / sizeof *ranges; r++) {
    uint64_t min = ranges[r][0], max = ranges[r][1];
    for (uint64_t t = 0; t <= max + 10; t += t < 300 ? 1 : 37) {
      const uint64_t hints[] = {0, t, t * 3 / 4, t * 5 / 4, t / 10, t * 10, 1, max};
      for (size_t h = 0; h < sizeof hints / sizeof *hints; h++) {
        unsigned n;
        uint64_t got = search(min, max, hints[h], t, &n);
        if (got != want(min, max, t))
          fail_msg("[%llu, %llu] T %llu hint %llu: found %llu", (unsigned long long)min,
                   (unsigned long long)max, (unsigned long long)t, (unsigned long long)hints[h],
                   (unsigned long long)got);
      }
    }
  }
}

/* The most launches over T in [lo, hi] with the hint at T x num / den. */
static unsigned worst(uint64_t lo, uint64_t hi, uint64_t num, uint64_t den, bool hinted) {
  unsigned most = 0, n;
  for (uint64_t t = lo; t <= hi; t++) {
    search(1, 4096, hinted ? (t * num + den / 2) / den : 0, t, &n);
    if (n > most) most = n;
  }
  return most;
}

/* Typical micro batches (8 to 63), measured: doubling from 1 then bisecting takes 11 launches
 * on average and up to 12; from an exact estimate 3.4 and up to 4; within 10% 3.9 to 5.2 and
 * up to 6; within 25% 6.1 to 6.7 and up to 8. */
static void few_launches_from_a_good_estimate(void **state) {
  (void)state;
  assert_int_equal(worst(8, 63, 1, 1, false), 12);
  assert_int_equal(worst(8, 63, 1, 1, true), 4);
  assert_true(worst(8, 63, 9, 10, true) <= 6);
  assert_true(worst(8, 63, 11, 10, true) <= 5);
  assert_true(worst(8, 63, 3, 4, true) <= 8);
  assert_true(worst(8, 63, 5, 4, true) <= 7);
}

static void far_off_estimate_still_converges(void **state) {
  (void)state;
  unsigned n;
  assert_int_equal(search(1, 4096, 4096, 3, &n), 3);
  assert_true(n <= 16);
  assert_int_equal(search(1, 4096, 1, 3000, &n), 3000);
  assert_true(n <= 26);
}

static void min_out_of_memory_means_no_fit(void **state) {
  (void)state;
  unsigned n;
  assert_int_equal(search(4, 64, 0, 3, &n), 0);
  assert_int_equal(n, 1);
  assert_int_equal(search(4, 64, 32, 3, &n), 0);
  assert_int_equal(search(4, 64, 64, 64, &n), 64); /* max fits: nothing above is tried */
  assert_int_equal(n, 1);
}

static void error_stops_and_bad_calls_refused(void **state) {
  (void)state;
  struct vf_probe p;
  assert_int_equal(vf_probe_init(&p, 0, 8, 0), VF_EINVAL);
  assert_int_equal(vf_probe_init(&p, 9, 8, 0), VF_EINVAL);
  assert_int_equal(vf_probe_init(&p, 2, 64, 10), 0);
  assert_int_equal(vf_probe_next(&p, NULL), 10);
  assert_int_equal(vf_probe_record(&p, 11, VF_PROBE_OK, 0), VF_EINVAL);
  assert_int_equal(vf_probe_record(&p, 10, VF_PROBE_TIMEOUT, 0), 0); /* a timeout fits */
  assert_int_equal(vf_probe_result(&p), 10);
  assert_int_equal(vf_probe_next(&p, NULL), 11);
  assert_int_equal(vf_probe_record(&p, 11, VF_PROBE_ERROR, 0), 0);
  assert_int_equal(vf_probe_next(&p, NULL), 0);
  assert_int_equal(p.launches, 2);
  assert_string_equal(vf_probe_outcome_name(VF_PROBE_TIMEOUT), "timeout");
  assert_string_equal(vf_probe_outcome_name(VF_PROBE_OOM), "oom");
}

/* ---- steering by measured peaks ---- */

/* 16 GiB of weights and the like, and per-sample memory that reaches 80 GiB half a batch
 * past t; out-of-memory launches report what filled the GPU. */
static uint64_t linear_peak(uint64_t batch, uint64_t t, void *arg) {
  (void)arg;
  double b = batch > t ? (double)t + 0.5 : (double)batch;
  return (uint64_t)(16 * GIB + 64 * GIB * b / ((double)t + 0.5));
}

static void linear_peaks_find_it_in_five(void **state) {
  (void)state;
  unsigned n, most = 0;
  for (uint64_t t = 1; t <= 4096; t++) {
    uint64_t got = steered_search(1, 4096, 0, t, (uint64_t)(80 * GIB), linear_peak, NULL, &n);
    if (got != t) fail_msg("T %llu: found %llu", (unsigned long long)t, (unsigned long long)got);
    if (n > most) most = n;
  }
  /* Doubling and bisecting takes up to 24: here 1, the batch the line through the origin
   * allows, one far point, the prediction and the batch past it (6 at 4096 while a fitting
   * prediction was followed by the band's middle, not the line through it). */
  assert_true(most <= 5);
}

/* The same peaks, reported up to 20 MiB off (an allocator segment) by a fixed pattern. */
static uint64_t noisy_linear_peak(uint64_t batch, uint64_t t, void *arg) {
  uint32_t *seed = arg;
  *seed = *seed * 1664525u + 1013904223u;
  return linear_peak(batch, t, NULL) + (*seed >> 8) % (40u << 20) - (20u << 20);
}

/* The fit's band covers the noise: the largest batch is still found exactly, in at most 8
 * launches over every boundary to 4096, where a sample adds as little as 16 MiB (splitting
 * the band's region instead of confirming upwards from the prediction: 12 in bench_probe's
 * noisy row before). */
static void noisy_peaks_find_it_in_eight(void **state) {
  (void)state;
  unsigned n, most = 0;
  for (uint64_t t = 1; t <= 4096; t++) {
    uint32_t seed = (uint32_t)t;
    uint64_t got = steered_search(1, 4096, 0, t, (uint64_t)(80 * GIB), noisy_linear_peak, &seed, &n);
    if (got != t) fail_msg("T %llu: found %llu", (unsigned long long)t, (unsigned long long)got);
    if (n > most) most = n;
  }
  assert_true(most <= 8);
}

/* 16 GiB + 16 MiB per sample, 8 MiB under the 80 GiB ceiling at 4096: every batch fits. */
static uint64_t mib_per_sample(uint64_t batch) { return (uint64_t)((16384.0 + 16.0 * (double)batch - 8) * 1048576); }

/* A prediction that fits short of the answer moves the line through its own peak, measured
 * near the answer: where that line puts the answer above the middle of the band's region, the
 * next launch goes there. After 1, 4 and 1120 the launch at 4092 (the middle of the region
 * 4088..4096) fits at 81848 MiB, 72 MiB under the ceiling: the band (NVML's 20 MiB) leaves
 * 4094..4096, whose middle is 4095, and the line puts 4096 at 81912 MiB, under the ceiling. */
static void fitting_prediction_moves_the_line(void **state) {
  (void)state;
  struct vf_probe p;
  enum vf_probe_move m;
  assert_int_equal(vf_probe_init(&p, 1, 4096, 0), 0);
  vf_probe_steer(&p, (uint64_t)(80 * GIB), NULL);
  static const uint64_t launches[] = {1, 4, 1120, 4092};
  for (size_t i = 0; i < sizeof launches / sizeof *launches; i++) {
    assert_int_equal(vf_probe_next(&p, NULL), launches[i]);
    assert_int_equal(vf_probe_record(&p, launches[i], VF_PROBE_OK, mib_per_sample(launches[i])), 0);
  }
  assert_int_equal(vf_probe_next(&p, &m), 4096);
  assert_int_equal(m, VF_PROBE_PREDICTED);
  assert_int_equal(vf_probe_record(&p, 4096, VF_PROBE_OK, mib_per_sample(4096)), 0);
  assert_int_equal(vf_probe_next(&p, NULL), 0);
  assert_int_equal(p.launches, 5);
}

/* Where a sample adds less than NVML's noise spans, the peaks cannot tell the answer from
 * the batch past it, so that batch is launched. 16 GiB + 16 MiB per sample (mib_per_sample):
 * 4096 is 8 MiB under the 80 GiB ceiling; with --max 8192 the search ends on its prediction
 * 4097 running out of memory, which reveals what it reached. */
static void batch_past_the_answer_launched_within_the_noise(void **state) {
  (void)state;
  struct vf_probe p;
  assert_int_equal(vf_probe_init(&p, 1, 8192, 0), 0);
  vf_probe_steer(&p, (uint64_t)(80 * GIB), NULL);
  uint64_t last = 0;
  enum vf_probe_move m, last_move = VF_PROBE_START;
  for (uint64_t b; (b = vf_probe_next(&p, &m)); last = b, last_move = m) {
    bool fits = b <= 4096;
    uint64_t peak = fits ? mib_per_sample(b) : (uint64_t)(79.9 * GIB);
    assert_int_equal(vf_probe_record(&p, b, fits ? VF_PROBE_OK : VF_PROBE_OOM, peak), 0);
  }
  assert_int_equal(vf_probe_result(&p), 4096);
  assert_int_equal(last, 4097);
  assert_string_equal(vf_probe_move_name(last_move), "predicted");
  assert_int_equal(p.revealed, (uint64_t)(79.9 * GIB));
  uint64_t batch, predicted, limit;
  assert_false(vf_probe_settled(&p, &batch, &predicted, &limit));
}

/* Peaks that say nothing useful cannot make the search wrong or endless. */
static uint64_t nonsense_peak(uint64_t batch, uint64_t t, void *arg) {
  uint32_t *seed = arg;
  *seed = *seed * 1664525u + 1013904223u;
  (void)batch;
  (void)t;
  return (uint64_t)(*seed >> 4) * 64;
}

static uint64_t falling_peak(uint64_t batch, uint64_t t, void *arg) {
  (void)t;
  (void)arg;
  return (uint64_t)(90 * GIB) - batch * 1048576;
}

static uint64_t flat_peak(uint64_t batch, uint64_t t, void *arg) {
  (void)batch;
  (void)t;
  (void)arg;
  return (uint64_t)(40 * GIB);
}

static void any_peaks_still_find_it(void **state) {
  (void)state;
  static const peak_fn peaks[] = {nonsense_peak, falling_peak, flat_peak, linear_peak};
  uint32_t seed = 7;
  for (size_t k = 0; k < sizeof peaks / sizeof *peaks; k++)
    for (uint64_t t = 0; t <= 300; t += t < 40 ? 1 : 13) {
      const uint64_t hints[] = {0, t, t * 2, t / 3 + 1};
      for (size_t h = 0; h < sizeof hints / sizeof *hints; h++) {
        unsigned n;
        uint64_t got = steered_search(1, 256, hints[h], t, (uint64_t)(80 * GIB), peaks[k], &seed, &n);
        if (got != want(1, 256, t))
          fail_msg("peaks %zu T %llu hint %llu: found %llu", k, (unsigned long long)t,
                   (unsigned long long)hints[h], (unsigned long long)got);
      }
    }
}

/* One fit with the estimate's slope (65.5 MiB per sample, 100.5 samples of room left): the
 * slope may be off by an eighth and the peak by 20 MiB, so batch 900 + 89 certainly fits
 * ((100.5 s - 20 MiB) / 1.125 s = 89.06); from two points the line predicts the answer. Its
 * peak lies half a sample (32.75 MiB) under the GPU's memory, and the line through the three
 * measured peaks puts 1001 half a sample over it, more than the band (NVML's 20 MiB times the
 * fit's weights): settled without launching 1001. */
static void estimate_slope_and_one_fit(void **state) {
  (void)state;
  struct vf_probe p;
  assert_int_equal(vf_probe_init(&p, 1, 4096, 900), 0);
  vf_probe_steer(&p, (uint64_t)(80 * GIB), &(struct vf_probe_prior){0, 64 * GIB / 1000.5, 0});
  enum vf_probe_move m;
  assert_int_equal(vf_probe_next(&p, &m), 900);
  assert_int_equal(m, VF_PROBE_START);
  assert_int_equal(vf_probe_record(&p, 900, VF_PROBE_OK, linear_peak(900, 1000, NULL)), 0);
  assert_int_equal(vf_probe_next(&p, &m), 989);
  assert_int_equal(m, VF_PROBE_APPROACH);
  assert_int_equal(vf_probe_record(&p, 989, VF_PROBE_OK, linear_peak(989, 1000, NULL)), 0);
  assert_int_equal(vf_probe_next(&p, &m), 1000);
  assert_int_equal(m, VF_PROBE_PREDICTED);
  assert_true(vf_probe_predict(&p, 1000) <= (uint64_t)(80 * GIB));
  assert_true(vf_probe_predict(&p, 1001) > (uint64_t)(80 * GIB));
  uint64_t batch, predicted, limit;
  assert_false(vf_probe_settled(&p, &batch, &predicted, &limit));
  assert_int_equal(vf_probe_record(&p, 1000, VF_PROBE_TIMEOUT, linear_peak(1000, 1000, NULL)), 0);
  assert_int_equal(vf_probe_next(&p, NULL), 0);
  assert_int_equal(vf_probe_result(&p), 1000);
  assert_int_equal(p.launches, 3);
  assert_true(vf_probe_settled(&p, &batch, &predicted, &limit));
  assert_int_equal(batch, 1001);
  assert_int_equal(limit, (uint64_t)(80 * GIB));
  assert_true(predicted > limit + (20u << 20) && predicted < limit + (40u << 20));
}

/* Peaks 16 GiB + 1 GiB per sample under 80 GiB: 64 fits. The estimate says 16 GiB + 1.05 GiB
 * per sample (5% high in what grows), so its largest batch is 60. */
static uint64_t gib_per_sample(uint64_t batch) { return (uint64_t)((16.0 + (double)batch) * GIB); }

/* Starts at the estimate's 60 with its slope and fixed bytes; returns the next batch. */
static uint64_t after_the_hint(struct vf_probe *p, double fixed, enum vf_probe_move *m) {
  assert_int_equal(vf_probe_init(p, 1, 4096, 60), 0);
  vf_probe_steer(p, (uint64_t)(80 * GIB), &(struct vf_probe_prior){fixed, 1.05 * GIB, 0});
  assert_int_equal(vf_probe_record(p, 60, VF_PROBE_OK, gib_per_sample(60)), 0);
  return vf_probe_next(p, m);
}

/* One point and the estimate's fixed bytes: (76 - 16) / 60 = 1 GiB per sample, within an
 * eighth of the estimate's 1.05, so the line through them predicts 64 exactly; the line
 * through the two measured peaks puts 65 a whole GiB over the GPU's memory: settled. */
static void estimate_fixed_bytes_pivot_one_point(void **state) {
  (void)state;
  struct vf_probe p;
  enum vf_probe_move m;
  assert_int_equal(after_the_hint(&p, 16 * GIB, &m), 64);
  assert_int_equal(m, VF_PROBE_PREDICTED);
  assert_int_equal(vf_probe_predict(&p, 64), (uint64_t)(80 * GIB));
  assert_int_equal(vf_probe_record(&p, 64, VF_PROBE_OK, gib_per_sample(64)), 0);
  assert_int_equal(vf_probe_next(&p, NULL), 0);
  assert_int_equal(vf_probe_result(&p), 64);
  assert_int_equal(p.launches, 2);
}

/* Fixed bytes that disagree (40 GiB: 0.6 GiB per sample, 43% off) are not used: the
 * estimate's slope through the point, off by up to an eighth, puts the answer in 63 to 64
 * (76 + 1.05 d + 20 MiB + 0.125 x 1.05 d <= 80: d <= 3.37; 76 + 1.05 d - ... <= 80: d <= 4.37),
 * and the launch goes to the bottom of that band, which certainly fits. */
static void disagreeing_fixed_bytes_are_ignored(void **state) {
  (void)state;
  struct vf_probe p;
  enum vf_probe_move m;
  assert_int_equal(after_the_hint(&p, 40 * GIB, &m), 63);
  assert_int_equal(m, VF_PROBE_APPROACH);
}

/* The estimate's curve from estimates at a half, three quarters and all of the hint: a
 * parabola where they bend upwards, the line through the ends where they do not, where the
 * parabola would fall at first, or where the hint is too small for three batches; nothing
 * where they do not grow. */
static void estimate_curve_from_three_estimates(void **state) {
  (void)state;
  uint64_t b[3];
  assert_int_equal(vf_probe_prior_batches(68, b), 3);
  assert_true(b[0] == 34 && b[1] == 51 && b[2] == 68);
  assert_int_equal(vf_probe_prior_batches(3, b), 2);
  assert_true(b[0] == 1 && b[1] == 3);
  assert_int_equal(vf_probe_prior_batches(1, b), 2);
  assert_true(b[0] == 1 && b[1] == 2);
  struct vf_probe_prior e;
  const uint64_t at[3] = {10, 20, 40};
  const uint64_t bent[3] = {1000 + 10 * 7 + 100 * 3, 1000 + 20 * 7 + 400 * 3, 1000 + 40 * 7 + 1600 * 3};
  vf_probe_prior_fit(at, bent, 3, &e);
  assert_float_equal(e.fixed, 1000, 1e-6);
  assert_float_equal(e.slope, 7, 1e-9);
  assert_float_equal(e.bend, 3, 1e-9);
  const uint64_t flattening[3] = {100, 300, 400};
  vf_probe_prior_fit(at, flattening, 3, &e);
  assert_float_equal(e.slope, 10, 1e-9);
  assert_float_equal(e.fixed, 0, 1e-9);
  assert_float_equal(e.bend, 0, 0);
  const uint64_t dipping[3] = {1000 - 50 + 300, 1000 - 100 + 1200, 1000 - 200 + 4800}; /* -5 x + 3 x^2 */
  vf_probe_prior_fit(at, dipping, 3, &e);
  assert_float_equal(e.slope, 145, 1e-9);
  assert_float_equal(e.bend, 0, 0);
  const uint64_t falling[3] = {400, 300, 100};
  vf_probe_prior_fit(at, falling, 3, &e);
  assert_float_equal(e.slope, 0, 0);
}

/* Peaks 16 GiB + 64 GiB (3/4 x + 1/4 x^2), x = batch / 1000.5 (bench_probe's quadratic
 * trainer): 1000 fits. The estimate is 10% low in what grows, so its largest batch is 1087,
 * which runs out of memory. */
static double quadratic_growth(double batch) {
  double x = batch / 1000.5;
  return 64 * GIB * (0.75 * x + 0.25 * x * x);
}

/* The whole search from the estimate's start with prior; returns the launches. */
static unsigned from_a_low_estimate(const struct vf_probe_prior *prior) {
  struct vf_probe p;
  assert_int_equal(vf_probe_init(&p, 1, 4096, 1087), 0);
  vf_probe_steer(&p, (uint64_t)(80 * GIB), prior);
  for (uint64_t b; (b = vf_probe_next(&p, NULL));) {
    bool fits = b <= 1000;
    uint64_t peak = fits ? (uint64_t)(16 * GIB + quadratic_growth((double)b)) : (uint64_t)(79.9 * GIB);
    assert_int_equal(vf_probe_record(&p, b, fits ? VF_PROBE_OK : VF_PROBE_OOM, peak), 0);
  }
  assert_int_equal(vf_probe_result(&p), 1000);
  return p.launches;
}

/* The estimate's curve, its growth scaled through the one fit (by 1.11, within an eighth),
 * is the true curve: after the start (out of memory) and the step down that fits, it
 * predicts 1000, and the two measured peaks settle that 1001 does not fit: 3 launches, the
 * least there can be. The line the probe took before (through the estimates at 543 and
 * 1087) bends less: its predictions creep down from 1005, 5 launches. */
static void estimate_curve_scaled_through_one_point(void **state) {
  (void)state;
  uint64_t b[3], est[3];
  unsigned n = vf_probe_prior_batches(1087, b);
  for (unsigned i = 0; i < n; i++) est[i] = (uint64_t)(16 * GIB + 0.9 * quadratic_growth((double)b[i]));
  struct vf_probe_prior curve, line;
  vf_probe_prior_fit(b, est, n, &curve);
  uint64_t ends[3] = {b[0], b[2]}, ends_est[3] = {est[0], est[2]};
  vf_probe_prior_fit(ends, ends_est, 2, &line);
  assert_true(curve.bend > 0 && line.bend == 0);
  assert_float_equal(curve.fixed, 16 * GIB, 1e3);
  assert_int_equal(from_a_low_estimate(&curve), 3);
  assert_int_equal(from_a_low_estimate(&line), 5);
}

/* An out-of-memory launch that reached far less than the GPU's memory (fragmentation)
 * reveals where the memory ended: the next launch aims under that instead of the GPU's
 * capacity. Peaks are 16 GiB + 1 GiB per sample, the GPU has 100 GiB. */
static void out_of_memory_reveals_the_ceiling(void **state) {
  (void)state;
  struct vf_probe p;
  assert_int_equal(vf_probe_init(&p, 1, 4096, 0), 0);
  vf_probe_steer(&p, (uint64_t)(100 * GIB), NULL);
  assert_int_equal(vf_probe_record(&p, 1, VF_PROBE_OK, (uint64_t)(17 * GIB)), 0);
  /* Through the origin: 100/17 GiB, so 5; then the line through both points reaches 100 GiB
   * at 84, but two points close together show no bend: halfway first. */
  assert_int_equal(vf_probe_next(&p, NULL), 5);
  assert_int_equal(vf_probe_record(&p, 5, VF_PROBE_OK, (uint64_t)(21 * GIB)), 0);
  enum vf_probe_move m;
  assert_int_equal(vf_probe_next(&p, &m), 45);
  assert_int_equal(m, VF_PROBE_APPROACH);
  assert_int_equal(vf_probe_record(&p, 45, VF_PROBE_OK, (uint64_t)(61 * GIB)), 0);
  assert_int_equal(vf_probe_next(&p, &m), 84);
  assert_int_equal(m, VF_PROBE_PREDICTED);
  /* Out of memory at 84 having reached 70 GiB, 30 GiB short of the GPU's memory: the
   * ceiling lies in 70 to 70.25 GiB, where the line is at 54 (53 with NVML's noise). */
  assert_int_equal(vf_probe_record(&p, 84, VF_PROBE_OOM, (uint64_t)(70 * GIB)), 0);
  assert_int_equal(vf_probe_next(&p, &m), 54);
  assert_int_equal(m, VF_PROBE_PREDICTED);
  assert_int_equal(vf_probe_record(&p, 54, VF_PROBE_OK, (uint64_t)(70 * GIB)), 0);
  assert_int_equal(vf_probe_next(&p, &m), 55);
  assert_int_equal(m, VF_PROBE_CONFIRM);
  assert_string_equal(vf_probe_move_name(m), "confirm");
}

/* hidden 256, 4 layers, vocab 1024: small enough for many estimates. */
static const char config[] =
    "{\"model_type\": \"llama\", \"hidden_size\": 256, \"num_hidden_layers\": 4,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 4, \"intermediate_size\": 512,"
    " \"vocab_size\": 1024, \"max_position_embeddings\": 512, \"torch_dtype\": \"float32\"}";

struct fixture {
  struct vf_model m;
  struct vf_setup s;
  struct vf_profile p;
  struct vf_alloc_conf c;
};

static uint64_t peak(struct fixture *f, uint64_t batch) {
  struct vf_setup s = f->s;
  s.batch = batch;
  struct vf_estimate e;
  assert_int_equal(vf_estimate(&f->m, &s, &f->p, &f->c, &e, NULL), 0);
  return e.device_peak;
}

/* The estimate on the fixture's GPU at batch. */
static struct vf_estimate replay_on_gpu(struct fixture *f, uint64_t batch) {
  struct vf_setup s = f->s;
  s.batch = batch;
  struct vf_estimate e;
  assert_int_equal(vf_estimate(&f->m, &s, &f->p, &f->c, &e, NULL), 0);
  return e;
}

static void estimate_max_batch(void **state) {
  (void)state;
  struct fixture f;
  struct vf_diag d;
  vf_model_init(&f.m);
  assert_int_equal(vf_model_from_config_json(&f.m, config, strlen(config), "toy.json", &d), 0);
  vf_setup_default(&f.s);
  f.s.seq = 256;
  assert_int_equal(profile_read("hf", NULL, &f.p, &d), 0);
  vf_alloc_conf_default(&f.c);
  uint64_t b;
  assert_int_equal(vf_estimate_max_batch(&f.m, &f.s, &f.p, &f.c, 1, 4096, &b, &d), VF_EINVAL);
  /* On a GPU between the peaks a larger one reserves at batches 37 and 38 the allocator
   * frees its cache and goes on a few batches further, until the tensors themselves no
   * longer fit: the largest batch is the last the replay runs without running out. */
  f.s.capacity_bytes = (peak(&f, 37) + peak(&f, 38)) / 2;
  assert_int_equal(vf_estimate_max_batch(&f.m, &f.s, &f.p, &f.c, 1, 4096, &b, &d), 0);
  assert_true(b >= 37);
  assert_false(replay_on_gpu(&f, b).out_of_memory);
  assert_true(replay_on_gpu(&f, b + 1).out_of_memory);
  assert_int_equal(vf_estimate_max_batch(&f.m, &f.s, &f.p, &f.c, 1, 20, &b, &d), 0);
  assert_int_equal(b, 20);
  uint64_t most = b;
  assert_int_equal(vf_estimate_max_batch(&f.m, &f.s, &f.p, &f.c, 1, 4096, &most, &d), 0);
  assert_int_equal(vf_estimate_max_batch(&f.m, &f.s, &f.p, &f.c, most + 1, 100, &b, &d), 0);
  assert_int_equal(b, 0);
  f.s.capacity_bytes = UINT64_MAX; /* the estimator's own limit on tokens caps the answer */
  assert_int_equal(vf_estimate_max_batch(&f.m, &f.s, &f.p, &f.c, 1, UINT64_MAX, &b, &d), 0);
  assert_true(b >= 1 && b <= (1u << 20));
  vf_model_cleanup(&f.m);
}

/* Runs a search to its end against peak(batch) = fixed + per x batch, which fits up to limit
 * bytes; steered by the peaks when steer is set. */
static void search_to_end(struct vf_probe *p, double fixed, double per, double limit, bool steer) {
  assert_int_equal(vf_probe_init(p, 1, 4096, 0), 0);
  if (steer) vf_probe_steer(p, (uint64_t)limit, NULL);
  for (uint64_t b; (b = vf_probe_next(p, NULL));) {
    double peak = fixed + per * (double)b;
    assert_int_equal(vf_probe_record(p, b, peak <= limit ? VF_PROBE_OK : VF_PROBE_OOM, steer ? (uint64_t)peak : 0), 0);
  }
}

/* The batch to train with leaves the margin of its peak under the ceiling; without peaks it
 * is the boundary divided by 1 + margin; a target gets the fewest micro batches that reach
 * it, each as small as still reaches it. */
static void advice_keeps_the_margin(void **state) {
  (void)state;
  struct vf_probe p;
  struct vf_probe_advice a;
  /* 2 GiB + 0.5 GiB a sample on 24 GiB: the boundary is 44. */
  search_to_end(&p, 2 * GIB, 0.5 * GIB, 24 * GIB, true);
  assert_int_equal(vf_probe_result(&p), 44);
  vf_probe_advise(&p, 0.10, 0, &a);
  assert_int_equal(a.batch, 39); /* (2 + 0.5 x 39) x 1.1 = 23.65 GiB */
  assert_int_equal(a.accumulation, 1);
  assert_true(a.within_margin);
  assert_true(llabs((long long)a.peak_bytes - (long long)(21.5 * GIB)) < (1 << 20));
  assert_int_equal(a.limit_bytes, (uint64_t)(24 * GIB));
  vf_probe_advise(&p, 0, 0, &a);
  assert_int_equal(a.batch, 44);
  vf_probe_advise(&p, 0.10, 100, &a); /* 3 micro batches of 34 reach 100 */
  assert_int_equal(a.accumulation, 3);
  assert_int_equal(a.batch, 34);
  assert_true(llabs((long long)a.peak_bytes - (long long)(19 * GIB)) < (1 << 20));
  vf_probe_advise(&p, 0.10, 78, &a); /* exactly: 2 x 39 */
  assert_int_equal(a.batch * a.accumulation, 78);
  assert_int_equal(a.accumulation, 2);
  /* Even batch 1 leaves no margin: batch 1, said so. */
  search_to_end(&p, 23 * GIB, 0.01 * GIB, 24 * GIB, true);
  vf_probe_advise(&p, 0.10, 0, &a);
  assert_int_equal(a.batch, 1);
  assert_false(a.within_margin);
  /* No peaks: in proportion to the batch. */
  search_to_end(&p, 0, 1, 37, false);
  vf_probe_advise(&p, 0.10, 0, &a);
  assert_int_equal(a.batch, 33);
  assert_int_equal(a.peak_bytes, 0);
  /* Nothing fitted: nothing to advise. */
  search_to_end(&p, 30 * GIB, 1, 24 * GIB, true);
  vf_probe_advise(&p, 0.10, 64, &a);
  assert_int_equal(a.batch, 0);
}

/* Peaks that stay where they are while the batch grows fourfold or more are a command that
 * ignores its batch; peaks that grow, or too few points, are not. */
static void flat_peaks_are_told(void **state) {
  (void)state;
  struct vf_probe p;
  struct vf_probe_point low, high;
  search_to_end(&p, 3 * GIB, 0, 80 * GIB, true);
  assert_int_equal(vf_probe_result(&p), 4096);
  assert_true(vf_probe_flat(&p, &low, &high));
  assert_int_equal(low.batch, 1);
  assert_int_equal(high.batch, 4096);
  search_to_end(&p, 3 * GIB, 0.001 * GIB, 80 * GIB, true);
  assert_false(vf_probe_flat(&p, &low, &high));
  search_to_end(&p, 0, 1, 37, false);
  assert_false(vf_probe_flat(&p, &low, &high));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(finds_every_threshold),
      cmocka_unit_test(few_launches_from_a_good_estimate),
      cmocka_unit_test(far_off_estimate_still_converges),
      cmocka_unit_test(min_out_of_memory_means_no_fit),
      cmocka_unit_test(error_stops_and_bad_calls_refused),
      cmocka_unit_test(linear_peaks_find_it_in_five),
      cmocka_unit_test(noisy_peaks_find_it_in_eight),
      cmocka_unit_test(fitting_prediction_moves_the_line),
      cmocka_unit_test(batch_past_the_answer_launched_within_the_noise),
      cmocka_unit_test(any_peaks_still_find_it),
      cmocka_unit_test(estimate_slope_and_one_fit),
      cmocka_unit_test(estimate_fixed_bytes_pivot_one_point),
      cmocka_unit_test(disagreeing_fixed_bytes_are_ignored),
      cmocka_unit_test(estimate_curve_from_three_estimates),
      cmocka_unit_test(estimate_curve_scaled_through_one_point),
      cmocka_unit_test(out_of_memory_reveals_the_ceiling),
      cmocka_unit_test(estimate_max_batch),
      cmocka_unit_test(advice_keeps_the_margin),
      cmocka_unit_test(flat_peaks_are_told),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

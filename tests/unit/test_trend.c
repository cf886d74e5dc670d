/* Leak, under-use and memory headroom judgements on synthetic series. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>

#include "vramfit.h"

#define MiB (1024.0 * 1024.0)
#define GiB (1024.0 * MiB)
#define N 6000 /* 10 minutes at 10 Hz */

static double t[N], v[N];

static struct vf_trend judge(size_t n, double headroom) {
  struct vf_trend_config c;
  vf_trend_config_default(&c);
  struct vf_trend out;
  vf_trend_analyze(t, v, n, headroom, &c, &out);
  return out;
}

/* Small deterministic jitter, as NVML's 2 MiB pages give. */
static double jitter(size_t i) { return (double)((i * 7919) % 3) * 2 * MiB; }

static void steady_growth_is_a_leak_with_forecast(void **state) {
  (void)state;
  double rate = 8 * MiB; /* per second */
  for (size_t i = 0; i < N; i++) {
    t[i] = (double)i * 0.1;
    v[i] = 10 * GiB + rate * t[i] + jitter(i);
  }
  double headroom = 20 * GiB;
  struct vf_trend r = judge(N, headroom);
  assert_int_equal(r.state, VF_TREND_GROWING);
  assert_true(fabs(r.slope_bps - rate) < 0.02 * rate);
  double truth = headroom / rate;
  assert_true(fabs(r.seconds_to_full - truth) < 0.1 * truth);
}

static void steps_then_plateau_is_not(void **state) {
  (void)state;
  /* The caching allocator: a few big steps after warm-up, then flat for good. */
  for (size_t i = 0; i < N; i++) {
    t[i] = (double)i * 0.1;
    double steps = fmin(floor((t[i] - 100) / 40), 6);
    v[i] = 4 * GiB + (steps > 0 ? steps : 0) * 1.5 * GiB + jitter(i);
  }
  for (size_t n = 200; n <= N; n += 50) {
    struct vf_trend r = judge(n, 10 * GiB);
    if (t[n - 1] > 460) assert_int_not_equal(r.state, VF_TREND_GROWING);
  }
  assert_int_equal(judge(N, 10 * GiB).state, VF_TREND_STEADY);
}

static void late_steps_are_not(void **state) {
  (void)state;
  /* Flat for minutes, then the first evaluation reserves 2 GiB, later 1 GiB more. */
  for (size_t i = 0; i < N; i++) {
    t[i] = (double)i * 0.1;
    v[i] = 5 * GiB + (t[i] >= 400 ? 2 * GiB : 0) + (t[i] >= 520 ? 1 * GiB : 0) + jitter(i);
  }
  for (size_t n = 200; n <= N; n += 10) assert_int_not_equal(judge(n, 10 * GiB).state, VF_TREND_GROWING);
}

static void staircase_that_keeps_climbing_is(void **state) {
  (void)state;
  /* 20 MiB more every 5 s, forever: a leak in steps. */
  for (size_t i = 0; i < N; i++) {
    t[i] = (double)i * 0.1;
    v[i] = 2 * GiB + floor(t[i] / 5) * 20 * MiB;
  }
  struct vf_trend r = judge(N, 4 * GiB);
  assert_int_equal(r.state, VF_TREND_GROWING);
  assert_true(fabs(r.slope_bps - 4 * MiB) < 0.1 * 4 * MiB);
}

static void noise_and_sawtooth_are_not(void **state) {
  (void)state;
  for (size_t i = 0; i < N; i++) {
    t[i] = (double)i * 0.1;
    v[i] = 6 * GiB + fmod(t[i], 30) * 10 * MiB; /* grows 300 MiB, then frees it */
  }
  assert_int_equal(judge(N, 10 * GiB).state, VF_TREND_STEADY);
  for (size_t i = 0; i < N; i++) v[i] = 6 * GiB - t[i] * MiB; /* shrinking */
  assert_int_equal(judge(N, 10 * GiB).state, VF_TREND_STEADY);
}

static void warmup_and_short_series(void **state) {
  (void)state;
  for (size_t i = 0; i < N; i++) {
    t[i] = (double)i * 0.1;
    v[i] = 1 * GiB + t[i] * 100 * MiB;
  }
  assert_int_equal(judge(0, 1).state, VF_TREND_WARMUP);
  assert_int_equal(judge(1, 1).state, VF_TREND_WARMUP);
  assert_int_equal(judge(1500, 1).state, VF_TREND_WARMUP); /* 150 s: 120 s warm-up + 30 s */
  struct vf_trend r = judge(N, 0);
  assert_int_equal(r.state, VF_TREND_GROWING);
  assert_true(r.seconds_to_full == 0); /* already full */
}

static void slow_growth_below_threshold(void **state) {
  (void)state;
  for (size_t i = 0; i < N; i++) {
    t[i] = (double)i * 0.1;
    v[i] = 3 * GiB + t[i] * (0.5 * MiB / 60);
  }
  assert_int_equal(judge(N, 10 * GiB).state, VF_TREND_STEADY);
}

static void underuse(void **state) {
  (void)state;
  static double util[N], power[N];
  for (size_t i = 0; i < N; i++) {
    t[i] = (double)i * 0.1;
    util[i] = i % 10 == 0 ? 100 : 5; /* a data-loader stall: brief spikes */
    power[i] = 0.2;
  }
  struct vf_underuse u;
  vf_underuse_analyze(t, util, power, N, 300, &u);
  assert_true(u.flagged);
  assert_true(fabs(u.util_mean - 14.5) < 0.5);
  assert_true(fabs(u.power_ratio - 0.2) < 1e-9);
  vf_underuse_analyze(t, util, power, 2000, 300, &u); /* 200 s: not yet sustained */
  assert_false(u.flagged);
  for (size_t i = 0; i < N; i++) power[i] = 0.9; /* busy tensor cores, coarse util */
  vf_underuse_analyze(t, util, power, N, 300, &u);
  assert_false(u.flagged);
  for (size_t i = 0; i < N; i++) power[i] = -1; /* power unknown: util decides */
  vf_underuse_analyze(t, util, power, N, 300, &u);
  assert_true(u.flagged);
  assert_true(u.power_ratio < 0);
  for (size_t i = 0; i < N; i++) util[i] = 95;
  vf_underuse_analyze(t, util, power, N, 300, &u);
  assert_false(u.flagged);
  vf_underuse_analyze(t, util, power, 0, 300, &u);
  assert_false(u.flagged);
}

/* 3.4 GiB of 24 (the guide's 14%) for the window after warm-up is headroom; a step above
 * half of the GPU in the window is not; the warm-up (the allocator's first steps) and a
 * run shorter than warm-up and window are never judged. */
static void headroom(void **state) {
  (void)state;
  for (size_t i = 0; i < N; i++) {
    t[i] = (double)i * 0.1; /* 10 minutes */
    v[i] = i < 300 ? 20 * GiB : 3.4 * GiB; /* 30 s of warm-up hold 20 GiB */
  }
  struct vf_headroom h;
  vf_headroom_analyze(t, v, N, 24 * GiB, 120, 300, &h);
  assert_true(h.flagged);
  assert_true(fabs(h.held_bytes - 3.4 * GiB) < 1);
  assert_true(fabs(h.share - 3.4 / 24) < 1e-9);
  assert_true(fabs(h.growth - 0.9 * 24 / 3.4) < 1e-9);
  vf_headroom_analyze(t, v, 4201, 24 * GiB, 120, 300, &h); /* 420 s: warm-up, then the window */
  assert_true(h.flagged);
  vf_headroom_analyze(t, v, 4190, 24 * GiB, 120, 300, &h); /* 419 s: the window begins in warm-up */
  assert_false(h.flagged);
  v[N - 100] = 12.5 * GiB; /* over half, once, in the window */
  vf_headroom_analyze(t, v, N, 24 * GiB, 120, 300, &h);
  assert_false(h.flagged);
  assert_true(h.share > 0.5);
  vf_headroom_analyze(t, v, N, 0, 120, 300, &h); /* no total */
  assert_false(h.flagged);
  vf_headroom_analyze(t, v, 0, 24 * GiB, 120, 300, &h);
  assert_false(h.flagged);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(steady_growth_is_a_leak_with_forecast),
      cmocka_unit_test(steps_then_plateau_is_not),
      cmocka_unit_test(late_steps_are_not),
      cmocka_unit_test(staircase_that_keeps_climbing_is),
      cmocka_unit_test(noise_and_sawtooth_are_not),
      cmocka_unit_test(warmup_and_short_series),
      cmocka_unit_test(slow_growth_below_threshold),
      cmocka_unit_test(underuse),
      cmocka_unit_test(headroom),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Distributions of sample lengths (--lengths varied:MEAN,MAX and histogram files) and the
 * padded lengths a replay draws from them. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "vramfit.h"

static double mean_of(const struct vf_length_dist *d) {
  double n = 0, sum = 0;
  for (uint32_t i = 0; i < d->n; i++) n += (double)d->count[i], sum += (double)d->count[i] * (double)d->length[i];
  return sum / n;
}

/* Bins at their longest length: the mean lies at most a bin's width above the one asked. */
static void mean_and_max_make_a_distribution(void **state) {
  (void)state;
  struct vf_length_dist d;
  const uint64_t means[] = {20, 128, 256, 400, 500};
  for (size_t i = 0; i < sizeof means / sizeof *means; i++) {
    assert_int_equal(vf_length_dist_mean_max(means[i], 512, &d), 0);
    assert_true(d.n > 0 && d.n <= VF_LENGTH_BINS);
    assert_int_equal(d.length[d.n - 1], 512);
    double m = mean_of(&d);
    assert_true(m >= (double)means[i] - 1 && m <= (double)means[i] + 512.0 / VF_LENGTH_BINS + 1);
    for (uint32_t b = 1; b < d.n; b++) assert_true(d.length[b] > d.length[b - 1]);
  }
  assert_int_equal(vf_length_dist_mean_max(10, 10, &d), 0);
  assert_int_equal(vf_length_dist_mean_max(0, 10, &d), VF_EINVAL);
  assert_int_equal(vf_length_dist_mean_max(11, 10, &d), VF_EINVAL);
  assert_int_equal(vf_length_dist_mean_max(3, 5, &d), 0);
  assert_int_equal(d.n, 5); /* a bin per length below VF_LENGTH_BINS */
}

/* A batch padded to the longest of its samples: with many samples, nearly always near the
 * longest; the last draw is the longest; lengths past --seq are cut to it. */
static void batches_are_padded_to_their_longest_draw(void **state) {
  (void)state;
  struct vf_length_dist d;
  assert_int_equal(vf_length_dist_mean_max(100, 1000, &d), 0);
  uint64_t one_low = 1000, many_low = 1000;
  for (uint64_t k = 0; k + 1 < 16; k++) {
    uint64_t one = vf_length_dist_batch(&d, 1, 2048, k, 16), many = vf_length_dist_batch(&d, 64, 2048, k, 16);
    assert_true(one <= many);
    if (one < one_low) one_low = one;
    if (many < many_low) many_low = many;
  }
  assert_true(one_low < 100 && many_low > 300);
  assert_int_equal(vf_length_dist_batch(&d, 8, 2048, 15, 16), 1000);
  assert_int_equal(vf_length_dist_batch(&d, 8, 512, 15, 16), 512);
  struct vf_length_dist none = {0};
  assert_int_equal(vf_length_dist_batch(&none, 8, 512, 3, 16), 512);
}

static int parse(const char *text, struct vf_length_dist *d, struct vf_diag *e) {
  vf_diag_clear(e);
  return vf_length_dist_parse(text, strlen(text), d, e);
}

static void histograms_are_read_and_binned(void **state) {
  (void)state;
  struct vf_length_dist d;
  struct vf_diag e;
  assert_int_equal(parse("# lengths of the train split\n128 10\n\n64\t5   # short ones\n128 2\n512 0\n", &d, &e), 0);
  assert_int_equal(d.n, 2);
  assert_int_equal(d.length[0], 64);
  assert_int_equal(d.count[0], 5);
  assert_int_equal(d.length[1], 128);
  assert_int_equal(d.count[1], 12);
  /* 1000 distinct lengths of one sample each: VF_LENGTH_BINS bins, the last at 1000. */
  char text[16384];
  size_t n = 0;
  for (int i = 1; i <= 1000; i++) n += (size_t)snprintf(text + n, sizeof text - n, "%d 1\n", i);
  assert_int_equal(parse(text, &d, &e), 0);
  assert_int_equal(d.n, VF_LENGTH_BINS);
  assert_int_equal(d.length[d.n - 1], 1000);
  uint64_t total = 0;
  for (uint32_t i = 0; i < d.n; i++) total += d.count[i];
  assert_int_equal(total, 1000);
}

static void bad_histograms_say_where(void **state) {
  (void)state;
  static const struct {
    const char *text;
    int line, col;
  } cases[] = {
      {"12\n", 1, 3}, {"0 4\n", 1, 1}, {"12 x\n", 1, 4}, {"12 3 4\n", 2 - 1, 6}, {"# nothing\n\n", 2, 1},
      {"5 0\n", 1, 1}, {"-3 2\n", 1, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    struct vf_length_dist d;
    struct vf_diag e;
    assert_int_equal(parse(cases[i].text, &d, &e), VF_EFORMAT);
    assert_int_equal(e.line, cases[i].line);
    assert_int_equal(e.col, cases[i].col);
  }
}

/* llama-3.2-1b, LoRA, 32 samples of mean 150 and at most 256 tokens padded per batch:
 * traced (hf, 8 steps of the lengths the estimate draws) at 31,033,655,296 B reserved.
 * Replaying those batches puts the estimate within 1% of it. */
static void replayed_lengths_match_the_trace(void **state) {
  (void)state;
  struct vf_model m;
  struct vf_profile *p = NULL;
  struct vf_diag d;
  struct vf_alloc_conf c;
  struct vf_estimate e;
  struct vf_setup s;
  vf_model_init(&m);
  assert_int_equal(vf_model_load(&m, "llama-3.2-1b", &d), 0);
  assert_int_equal(vf_profile_load("hf", NULL, &p, &d), 0);
  vf_alloc_conf_default(&c);
  vf_setup_default(&s);
  s.weights = VF_PREC_BF16, s.method = VF_METHOD_LORA, s.batch = 32, s.seq = 256;
  s.lengths = VF_LENGTHS_VARIED;
  assert_int_equal(vf_length_dist_mean_max(150, 256, &s.length_dist), 0);
  assert_int_equal(vf_estimate(&m, &s, p, &c, &e, &d), 0);
  const double traced = 31033655296.0;
  assert_true(fabs((double)e.reserved_peak - traced) / traced < 0.01);
  assert_true(e.reserved_worst >= e.reserved_peak);
  /* Without the lengths, samples are assumed spread evenly up to --seq: plain varied
   * replays the batches of varied:128,256. */
  s.length_dist.n = 0;
  assert_int_equal(vf_estimate(&m, &s, p, &c, &e, &d), 0);
  uint64_t plain = e.reserved_peak;
  assert_int_equal(vf_length_dist_mean_max(128, 256, &s.length_dist), 0);
  assert_int_equal(vf_estimate(&m, &s, p, &c, &e, &d), 0);
  assert_int_equal(plain, e.reserved_peak);
  vf_profile_free(p);
  vf_model_cleanup(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(mean_and_max_make_a_distribution),
      cmocka_unit_test(batches_are_padded_to_their_longest_draw),
      cmocka_unit_test(histograms_are_read_and_binned),
      cmocka_unit_test(bad_histograms_say_where),
      cmocka_unit_test(replayed_lengths_match_the_trace),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

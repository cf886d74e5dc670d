/* Honest uncertainty: the spread per group (quantiles, fallbacks, how the kinds combine),
 * the range of an estimate (floor, point inside), the data file's reader (groups picked,
 * malformed files refused with one line) and its writer (read back the same). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/spread.h"
#include "diag_check.h"
#include "io/profile.h"
#include "tmpdir.h"
#include "vramfit.h"

#define EPS 1e-9

/* ---- the spread of a set of errors ---- */

static void quantiles_are_nearest_rank(void **state) {
  (void)state;
  double three[] = {0.02, -0.10, 0.30};
  struct vf_spread s = spread_of(three, 3);
  /* below 20 cases: the minimum and the maximum */
  assert_float_equal(s.low, -0.10, EPS);
  assert_float_equal(s.high, 0.30, EPS);
  double forty[40];
  for (int i = 0; i < 40; i++) forty[i] = (double)(39 - i) / 100; /* 0.00 .. 0.39, unsorted */
  s = spread_of(forty, 40);
  /* 5% of 40 is 2: the second smallest and the second largest */
  assert_float_equal(s.low, 0.01, EPS);
  assert_float_equal(s.high, 0.38, EPS);
  s = spread_of(NULL, 0);
  assert_float_equal(s.low, 0, EPS);
  assert_float_equal(s.high, 0, EPS);
}

static void add(struct spread_case *c, size_t *n, const char *fw, enum vf_method_class cls,
                enum spread_source src, double error) {
  snprintf(c[*n].framework, sizeof c[*n].framework, "%s", fw);
  c[*n].cls = cls;
  c[*n].source = src;
  c[*n].error = error;
  (*n)++;
}

static const struct spread_group *find(const struct spread_group *g, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(g[i].u.group, name) == 0) return &g[i];
  fail_msg("no group %s", name);
  return NULL;
}

static void groups_fall_back_when_they_have_few_cases(void **state) {
  (void)state;
  struct spread_case c[64];
  size_t n = 0;
  for (int i = 0; i < 6; i++) add(c, &n, "hf", VF_CLASS_FULL, SOURCE_ALLOCATED, 0.01 * i); /* 0 .. 0.05 */
  for (int i = 0; i < 3; i++) add(c, &n, "hf", VF_CLASS_LORA, SOURCE_ALLOCATED, -0.10);
  add(c, &n, "litgpt", VF_CLASS_QLORA, SOURCE_ALLOCATED, 0.50);
  struct spread_group *g;
  size_t ng;
  assert_int_equal(spread_groups(c, n, &g, &ng), 0);
  /* all/all, hf/all, hf/full, hf/lora, litgpt/all, litgpt/qlora: in that order */
  assert_int_equal(ng, 6);
  const char *order[] = {"all/all", "hf/all", "hf/full", "hf/lora", "litgpt/all", "litgpt/qlora"};
  for (size_t i = 0; i < ng; i++) assert_string_equal(g[i].u.group, order[i]);
  const struct spread_part *own = &find(g, ng, "hf/full")->part[SOURCE_ALLOCATED];
  assert_string_equal(own->from, "hf/full");
  assert_int_equal(own->cases, 6);
  assert_float_equal(own->spread.low, 0, EPS);
  assert_float_equal(own->spread.high, 0.05, EPS);
  /* 3 LoRA cases are too few: the framework's 9 */
  const struct spread_part *lora = &find(g, ng, "hf/lora")->part[SOURCE_ALLOCATED];
  assert_string_equal(lora->from, "hf/all");
  assert_float_equal(lora->spread.low, -0.10, EPS);
  assert_float_equal(lora->spread.high, 0.05, EPS);
  /* litgpt has 1 case: every setup's 10 */
  const struct spread_part *q = &find(g, ng, "litgpt/qlora")->part[SOURCE_ALLOCATED];
  assert_string_equal(q->from, "all/all");
  assert_int_equal(q->cases, 10);
  assert_float_equal(q->spread.high, 0.50, EPS);
  /* no device case anywhere: no error from that source */
  const struct spread_part *dev = &find(g, ng, "hf/full")->part[SOURCE_DEVICE];
  assert_string_equal(dev->from, "");
  assert_int_equal(dev->cases, 0);
  free(g);
}

static void kinds_combine_the_sources(void **state) {
  (void)state;
  struct spread_case c[32];
  size_t n = 0;
  double alloc[] = {-0.02, 0, 0.01, 0.02, 0.03}, replay[] = {-0.05, 0, 0, 0, 0.10},
         reserved[] = {-0.10, 0, 0, 0, 0.20}, device[] = {-0.30, 0, 0, 0, 0.05};
  for (int i = 0; i < 5; i++) {
    add(c, &n, "hf", VF_CLASS_FULL, SOURCE_ALLOCATED, alloc[i]);
    add(c, &n, "hf", VF_CLASS_FULL, SOURCE_REPLAYED, replay[i]);
    add(c, &n, "hf", VF_CLASS_FULL, SOURCE_RESERVED, reserved[i]);
    add(c, &n, "hf", VF_CLASS_FULL, SOURCE_DEVICE, device[i]);
  }
  struct spread_group *g;
  size_t ng;
  assert_int_equal(spread_groups(c, n, &g, &ng), 0);
  const struct vf_uncertainty *u = &find(g, ng, "hf/full")->u;
  assert_float_equal(u->kind[VF_PEAK_ALLOCATED].low, -0.02, EPS);
  assert_float_equal(u->kind[VF_PEAK_ALLOCATED].high, 0.03, EPS);
  /* reserved: the envelope of allocated and replayed (-0.05, 0.10), compounded with reserved */
  assert_float_equal(u->kind[VF_PEAK_RESERVED].low, 0.95 * 0.90 - 1, EPS);
  assert_float_equal(u->kind[VF_PEAK_RESERVED].high, 1.10 * 1.20 - 1, EPS);
  /* device: the envelope of reserved and device */
  assert_float_equal(u->kind[VF_PEAK_DEVICE].low, -0.30, EPS);
  assert_float_equal(u->kind[VF_PEAK_DEVICE].high, 1.10 * 1.20 - 1, EPS);
  free(g);
}

/* ---- the range of an estimate ---- */

static void range_inverts_the_spread(void **state) {
  (void)state;
  struct vf_spread s = {-0.20, 0.50};
  struct vf_range r = vf_range_of(1200, &s);
  assert_int_equal(r.low, 800);   /* 1200 / 1.5: the estimate 50% over */
  assert_int_equal(r.high, 1500); /* 1200 / 0.8: the estimate 20% under */
}

static void range_is_never_narrower_than_the_floor(void **state) {
  (void)state;
  struct vf_spread none = {0, 0}, all_over = {0.10, 0.30}, all_under = {-0.30, -0.10};
  struct vf_range r = vf_range_of(10000, &none);
  assert_int_equal(r.low, 9900);   /* floor(10000 / 1.01) */
  assert_int_equal(r.high, 10102); /* ceil(10000 / 0.99) */
  /* a group the estimator always over-estimates still reaches above the point, and one it
   * always under-estimates below it */
  r = vf_range_of(10000, &all_over);
  assert_true(r.low < 10000 && r.high == 10102);
  r = vf_range_of(10000, &all_under);
  assert_true(r.low == 9900 && r.high > 10000);
}

static void range_keeps_the_point_inside_at_the_extremes(void **state) {
  (void)state;
  struct vf_spread wide = {-0.999999, 1e6}, absurd = {-1, 0};
  uint64_t big = UINT64_MAX - 5;
  struct vf_range r = vf_range_of(big, &wide);
  assert_true(r.low <= big && r.high == UINT64_MAX);
  r = vf_range_of(12345, &absurd); /* a 100% miss: no upper bound */
  assert_true(r.low <= 12345 && r.high == UINT64_MAX);
  r = vf_range_of(0, &wide);
  assert_true(r.low == 0 && r.high == 0);
}

static void estimate_ranges_cover_the_three_peaks(void **state) {
  (void)state;
  struct vf_estimate e = {.allocated_peak = 1000, .reserved_peak = 2000, .device_peak = 3000};
  struct vf_uncertainty u = {{{-0.5, 0}, {-0.2, 0.25}, {0, 1}}, "hf/full"};
  struct vf_ranges r;
  vf_estimate_ranges(&e, &u, &r);
  assert_int_equal(r.kind[VF_PEAK_ALLOCATED].high, 2000);
  assert_int_equal(r.kind[VF_PEAK_RESERVED].low, 1600);
  assert_int_equal(r.kind[VF_PEAK_RESERVED].high, 2500);
  assert_int_equal(r.kind[VF_PEAK_DEVICE].low, 1500);
}

/* A replay that filled the GPU and went on by freeing the allocator's cache (2,200 bytes the
 * allocator may take, 500 of context): reserved cannot pass 2,200, nor the device 2,700,
 * while the tensors' own high end (2,000) fits in it; once they may not, nothing is cut. */
static void ranges_stop_at_the_gpu_the_cache_was_freed_on(void **state) {
  (void)state;
  struct vf_estimate e = {.allocated_peak = 1000, .reserved_peak = 2000, .device_peak = 2500, .context = 500,
                          .allocator_capacity = 2200, .cache_releases = 3};
  struct vf_uncertainty u = {{{-0.5, 0}, {-0.2, 0.25}, {-0.5, 0}}, "hf/full"};
  struct vf_ranges r;
  vf_estimate_ranges(&e, &u, &r);
  assert_int_equal(r.kind[VF_PEAK_RESERVED].high, 2200);
  assert_int_equal(r.kind[VF_PEAK_DEVICE].high, 2700);
  e.allocator_capacity = 1900;
  vf_estimate_ranges(&e, &u, &r);
  assert_int_equal(r.kind[VF_PEAK_RESERVED].high, 2500);
  assert_int_equal(r.kind[VF_PEAK_DEVICE].high, 5000);
}

static void methods_fall_into_classes(void **state) {
  (void)state;
  struct vf_setup s;
  vf_setup_default(&s);
  assert_int_equal(vf_setup_class(&s), VF_CLASS_FULL);
  s.method = VF_METHOD_DORA;
  assert_int_equal(vf_setup_class(&s), VF_CLASS_LORA);
  s.method = VF_METHOD_QLORA;
  assert_int_equal(vf_setup_class(&s), VF_CLASS_QLORA);
  s.method = VF_METHOD_LORA;
  s.quant = VF_QUANT_NF4; /* LoRA on quantized weights is QLoRA whatever it is called */
  assert_int_equal(vf_setup_class(&s), VF_CLASS_QLORA);
  s.method = VF_METHOD_ADAPTER_V2;
  assert_int_equal(vf_setup_class(&s), VF_CLASS_ADAPTER);
  enum vf_method_class c;
  assert_int_equal(vf_method_class_parse("qlora", &c), 0);
  assert_int_equal(c, VF_CLASS_QLORA);
  assert_int_equal(vf_method_class_parse("dora", &c), VF_ENOTFOUND);
}

/* ---- the data file ---- */

static const char good[] =
    "{\"groups\": ["
    "{\"framework\": \"all\", \"method\": \"all\", \"allocated\": {\"low\": -0.1, \"high\": 0.1},"
    " \"reserved\": {\"low\": -0.1, \"high\": 0.1}, \"device\": {\"low\": -0.1, \"high\": 0.1}},"
    "{\"framework\": \"hf\", \"method\": \"all\", \"allocated\": {\"low\": -0.2, \"high\": 0.2},"
    " \"reserved\": {\"low\": -0.2, \"high\": 0.2}, \"device\": {\"low\": -0.2, \"high\": 0.2}},"
    "{\"framework\": \"hf\", \"method\": \"lora\", \"allocated\": {\"low\": -0.3, \"high\": 0.3},"
    " \"reserved\": {\"low\": -0.3, \"high\": 0.3}, \"device\": {\"low\": -0.3, \"high\": 0.4},"
    " \"sources\": {\"notes\": \"read by people only\"}}]}";

static void reader_picks_the_closest_group(void **state) {
  (void)state;
  struct vf_uncertainty_table t;
  struct vf_diag d;
  assert_int_equal(vf_uncertainty_parse(good, strlen(good), "u.json", "hf@4.46", &t, &d), 0);
  assert_string_equal(t.by_class[VF_CLASS_LORA].group, "hf/lora");
  assert_float_equal(t.by_class[VF_CLASS_LORA].kind[VF_PEAK_DEVICE].high, 0.4, EPS);
  assert_string_equal(t.by_class[VF_CLASS_FULL].group, "hf/all");
  assert_float_equal(t.by_class[VF_CLASS_FULL].kind[VF_PEAK_ALLOCATED].low, -0.2, EPS);
  assert_int_equal(vf_uncertainty_parse(good, strlen(good), "u.json", "torchtune", &t, &d), 0);
  for (int c = 0; c < VF_CLASS_COUNT; c++) assert_string_equal(t.by_class[c].group, "all/all");
  struct vf_setup s;
  vf_setup_default(&s);
  s.method = VF_METHOD_QLORA;
  assert_ptr_equal(vf_uncertainty_for(&t, &s), &t.by_class[VF_CLASS_QLORA]);
}

static void expect_bad(const char *text, const char *needle) {
  struct vf_uncertainty_table t;
  struct vf_diag d;
  char why[256];
  vf_diag_clear(&d);
  int rc = vf_uncertainty_parse(text, strlen(text), "uncertainty.json", "hf", &t, &d);
  const char *m = vf_test_diag_mismatch(rc, &d, VF_EFORMAT, needle, UINT64_MAX, "uncertainty.json", why, sizeof why);
  if (m) fail_msg("%s: %s", text, m);
}

#define KINDS(a, r, dv)                                                                               \
  "\"allocated\": {\"low\": " a "}, \"reserved\": {\"low\": " r "}, \"device\": {\"low\": " dv "}"

static void reader_refuses_malformed_files(void **state) {
  (void)state;
  expect_bad("{\"groups\": [", "invalid JSON");
  expect_bad("[]", "expected an object with a \"groups\" list");
  expect_bad("{\"groups\": {}}", "expected an object with a \"groups\" list");
  expect_bad("{\"groups\": []}", "no group for every setup");
  expect_bad("{\"groups\": [{\"method\": \"all\"}]}", "groups[0].framework: expected a name");
  expect_bad("{\"groups\": [{\"framework\": \"hf\", \"method\": \"dora\"}]}", "groups[0].method");
  expect_bad("{\"groups\": [{\"framework\": \"all\", \"method\": \"all\", " KINDS("0, \"high\": 0", "0, \"high\": 0",
             "0.2, \"high\": 0.1") "}]}", "groups[0].device: expected");
  expect_bad("{\"groups\": [{\"framework\": \"all\", \"method\": \"all\", " KINDS("-1, \"high\": 0", "0, \"high\": 0",
             "0, \"high\": 0") "}]}", "-1 < low <= high");
  expect_bad("{\"groups\": [{\"framework\": \"all\", \"method\": \"all\", " KINDS("\"x\", \"high\": 0",
             "0, \"high\": 0", "0, \"high\": 0") "}]}", "groups[0].allocated");
  expect_bad("{\"groups\": [{\"framework\": \"all\", \"method\": \"all\", \"allocated\": {\"low\": 0, \"high\": 0}}]}",
             "groups[0].reserved");
  /* only a framework's own groups: the file must still say what every other setup gets */
  expect_bad("{\"groups\": [{\"framework\": \"hf\", \"method\": \"all\", " KINDS("0, \"high\": 0", "0, \"high\": 0",
             "0, \"high\": 0") "}]}", "no group for every setup");
}

static void loader_reads_the_data_folder(void **state) {
  (void)state;
  struct vf_uncertainty_table t;
  struct vf_diag d;
  unsetenv("VRAMFIT_DATA_DIR");
  assert_int_equal(vf_uncertainty_load("hf", &t, &d), 0); /* the embedded file */
  assert_non_null(strstr(t.by_class[VF_CLASS_FULL].group, "/"));
  char dir[512], path[1024], why[256];
  vf_test_tmpdir("uncertainty", dir, sizeof dir);
  setenv("VRAMFIT_DATA_DIR", dir, 1);
  int rc = vf_uncertainty_load("hf", &t, &d);
  assert_null(vf_test_diag_mismatch(rc, &d, VF_ENOTFOUND, "missing from the data folder", UINT64_MAX,
                                    "uncertainty.json", why, sizeof why));
  vf_test_write(dir, "uncertainty.json", "{\"groups\": 3}", 13, path, sizeof path);
  rc = vf_uncertainty_load("hf", &t, &d);
  assert_null(vf_test_diag_mismatch(rc, &d, VF_EFORMAT, "\"groups\" list", UINT64_MAX, "uncertainty.json", why,
                                    sizeof why));
  vf_test_write(dir, "uncertainty.json", good, strlen(good), path, sizeof path);
  assert_int_equal(vf_uncertainty_load("hf", &t, &d), 0);
  assert_string_equal(t.by_class[VF_CLASS_LORA].group, "hf/lora");
  unsetenv("VRAMFIT_DATA_DIR");
}

static void writer_output_reads_back(void **state) {
  (void)state;
  struct spread_case c[16];
  size_t n = 0;
  for (int i = 0; i < 5; i++) add(c, &n, "litgpt", VF_CLASS_QLORA, SOURCE_ALLOCATED, -0.123456 + 0.05 * i);
  struct spread_group *g;
  size_t ng;
  assert_int_equal(spread_groups(c, n, &g, &ng), 0);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_int_equal(uncertainty_write(f, g, ng), 0);
  fclose(f);
  struct vf_uncertainty_table t;
  struct vf_diag d;
  assert_int_equal(vf_uncertainty_parse(text, len, "out.json", "litgpt", &t, &d), 0);
  const struct vf_uncertainty *u = &t.by_class[VF_CLASS_QLORA];
  assert_string_equal(u->group, "litgpt/qlora");
  assert_float_equal(u->kind[VF_PEAK_ALLOCATED].low, -0.1235, EPS); /* four decimals */
  assert_float_equal(u->kind[VF_PEAK_ALLOCATED].high, 0.0765, EPS);
  assert_non_null(strstr(text, "\"notes\""));
  assert_non_null(strstr(text, "\"from\": \"litgpt/qlora\""));
  free(text);
  free(g);
}

/* ---- the planner judges safe and balanced on the high end ---- */

static void plan_tiers_judge_the_high_end(void **state) {
  (void)state;
  struct vf_model m;
  struct vf_profile p;
  struct vf_alloc_conf conf;
  struct vf_gpu_spec gpu;
  struct vf_diag d;
  vf_model_init(&m);
  assert_int_equal(vf_model_load(&m, "gpt2", &d), 0);
  assert_int_equal(profile_read("hf", NULL, &p, &d), 0);
  vf_alloc_conf_default(&conf);
  assert_int_equal(vf_gpu_lookup("rtx-4090", &gpu), 0);
  struct vf_uncertainty_table t;
  for (int c = 0; c < VF_CLASS_COUNT; c++)
    t.by_class[c] = (struct vf_uncertainty){{{-0.2, 0.2}, {-0.2, 0.2}, {-0.2, 0.2}}, "all/all"};
  /* the micro batch is the one knob: 48 samples a step have many divisors */
  uint32_t keep = VF_KEEP_CAPACITY | VF_KEEP_SEQ | VF_KEEP_GRAD_CKPT | VF_KEEP_OPTIMIZER | VF_KEEP_PRECISION |
                  VF_KEEP_OFFLOAD | VF_KEEP_ALLOC_CONF | VF_KEEP_LOSS;
  struct vf_plan_request r = {&m, &p, &conf, &gpu, {0}, 0.90, 48, keep, 0, &t, 0, 0, NULL};
  vf_setup_default(&r.base);
  r.base.seq = 1024; /* GPT-2's positions */
  r.base.capacity_bytes = 28ull << 30;
  struct vf_plan_result *judged = malloc(sizeof *judged), *point = malloc(sizeof *point);
  assert_int_equal(vf_plan_search(&r, judged, &d), 0);
  r.uncertainty = NULL;
  assert_int_equal(vf_plan_search(&r, point, &d), 0);
  for (int k = 0; k < VF_TIER_COUNT; k++) {
    const struct vf_plan_choice *c = &judged->tiers[k];
    assert_true(c->found);
    assert_true(c->device_range.low <= c->peak_device_bytes && c->peak_device_bytes <= c->device_range.high);
    /* safe and balanced: the high end (1 / 0.8 of the point) within the budget */
    uint64_t held = k == VF_TIER_AGGRESSIVE ? c->peak_device_bytes : c->device_range.high;
    assert_true(held <= c->budget_bytes);
    assert_true(k == VF_TIER_AGGRESSIVE || c->device_range.high >= c->peak_device_bytes + c->peak_device_bytes / 5);
  }
  /* the high end costs the balanced tier micro batch; aggressive bets on the point as before */
  assert_true(judged->tiers[VF_TIER_BALANCED].setup.batch < point->tiers[VF_TIER_BALANCED].setup.batch);
  assert_int_equal(judged->tiers[VF_TIER_AGGRESSIVE].setup.batch, point->tiers[VF_TIER_AGGRESSIVE].setup.batch);
  free(judged);
  free(point);
  vf_model_cleanup(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(quantiles_are_nearest_rank),
      cmocka_unit_test(groups_fall_back_when_they_have_few_cases),
      cmocka_unit_test(kinds_combine_the_sources),
      cmocka_unit_test(range_inverts_the_spread),
      cmocka_unit_test(range_is_never_narrower_than_the_floor),
      cmocka_unit_test(range_keeps_the_point_inside_at_the_extremes),
      cmocka_unit_test(estimate_ranges_cover_the_three_peaks),
      cmocka_unit_test(ranges_stop_at_the_gpu_the_cache_was_freed_on),
      cmocka_unit_test(methods_fall_into_classes),
      cmocka_unit_test(reader_picks_the_closest_group),
      cmocka_unit_test(reader_refuses_malformed_files),
      cmocka_unit_test(loader_reads_the_data_folder),
      cmocka_unit_test(writer_output_reads_back),
      cmocka_unit_test(plan_tiers_judge_the_high_end),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

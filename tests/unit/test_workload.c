/* Workload specs: the reader on specs written inline (every error names file:line:col),
 * expressions (precedence, min/max, rounding, overflow), the example's spec loaded from
 * disk, and the estimate of a workload against its encoders estimated alone. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "io/profile.h"
#include "vramfit.h"

#define FILE_NAME "dir/workload.yaml"

static const char base[] =
    "name: t\n"                                                  /* 1 */
    "model:\n"                                                   /* 2 */
    "  encoders:\n"                                              /* 3 */
    "    - {name: a, model: bert-base-uncased, method: lora, grad_ckpt: full}\n" /* 4 */
    "sample:\n"                                                  /* 5 */
    "  sequences: 1 + n_pos + n_neg\n"                           /* 6 */
    "  tokens: 32\n"                                             /* 7 */
    "define:\n"                                                  /* 8 */
    "  cands: n_pos + n_neg\n"                                   /* 9 */
    "loss:\n"                                                    /* 10 */
    "  tensors:\n"                                               /* 11 */
    "    - {name: sim, shape: [batch, batch * cands], dtype: fp32}\n" /* 12 */
    "knobs:\n"                                                   /* 13 */
    "  batch: {path: data.batch_size, min: 1, max: 512}\n"       /* 14 */
    "  n_pos: {path: n_pos, min: 1, max: 32}\n"                  /* 15 */
    "  n_neg: {path: n_neg, min: 0, max: 32, priority: 1}\n"     /* 16 */
    "stages:\n"                                                  /* 17 */
    "  - {name: one, knobs: {n_pos: {min: 4, max: 8}, n_neg: 2}}\n"; /* 18 */

static struct vf_workload *parse(const char *text, int *rc, struct vf_diag *d) {
  struct vf_workload *w = test_malloc(sizeof *w);
  vf_workload_init(w);
  vf_diag_clear(d);
  *rc = vf_workload_parse(w, text, strlen(text), FILE_NAME, "dir", d);
  return w;
}

/* text parsed, or the test fails with where and why. */
static struct vf_workload *parses(const char *text, struct vf_diag *d) {
  int rc;
  struct vf_workload *w = parse(text, &rc, d);
  if (rc) fail_msg("%d:%d: %s", d->line, d->col, d->msg);
  return w;
}

static void release(struct vf_workload *w) {
  vf_workload_cleanup(w);
  test_free(w);
}

/* base with the first occurrence of from replaced by to. */
static char *variant(const char *from, const char *to) {
  const char *at = strstr(base, from);
  if (!at) fail_msg("'%s' not in the base spec", from);
  size_t n = strlen(base) - strlen(from) + strlen(to) + 1;
  char *out = test_malloc(n);
  snprintf(out, n, "%.*s%s%s", (int)(at - base), base, to, at + strlen(from));
  return out;
}

static void fails_at(const char *from, const char *to, int line, int col, const char *fragment) {
  char *text = variant(from, to);
  struct vf_diag d;
  int rc;
  struct vf_workload *w = parse(text, &rc, &d);
  if (rc == 0) fail_msg("accepted: %s", text);
  assert_string_equal(d.file, FILE_NAME);
  if (d.line != line || (col && d.col != col)) fail_msg("at %d:%d, want %d:%d (%s)", d.line, d.col, line, col, d.msg);
  if (!strstr(d.msg, fragment)) fail_msg("'%s' lacks '%s'", d.msg, fragment);
  assert_null(strchr(d.msg, '\n'));
  release(w);
  test_free(text);
}

static void test_base_parses(void **state) {
  (void)state;
  struct vf_diag d;
  struct vf_workload *w = parses(base, &d);
  assert_int_equal(w->n_knobs, 3);
  assert_int_equal(w->n_encoders, 1);
  assert_int_equal(w->encoders[0].method, VF_METHOD_LORA);
  assert_int_equal(w->n_stages, 1);
  int pos = vf_workload_knob(w, "n_pos"), neg = vf_workload_knob(w, "n_neg");
  assert_true(w->knobs[pos].in_stage);
  assert_false(w->knobs[w->batch].in_stage);
  int64_t min, max;
  vf_workload_bounds(w, 0, (size_t)pos, &min, &max);
  assert_int_equal(min, 4);
  assert_int_equal(max, 8);
  vf_workload_bounds(w, 0, (size_t)neg, &min, &max);
  assert_int_equal(min, 2);
  assert_int_equal(max, 2);
  struct vf_wl_point pt = {{0}};
  pt.values[w->batch] = 3, pt.values[pos] = 4, pt.values[neg] = 2;
  struct vf_wl_shape shape;
  assert_int_equal(vf_workload_shape(w, &pt, &shape, &d), 0);
  assert_int_equal(shape.sequences, 3 * 7);
  assert_int_equal(shape.loss_elems, 3 * 3 * 6);
  release(w);
}

static void test_expressions(void **state) {
  (void)state;
  struct vf_diag d;
  struct vf_workload *w = parses(base, &d);
  struct vf_wl_point pt = {{0}};
  pt.values[w->batch] = 10, pt.values[vf_workload_knob(w, "n_pos")] = 3, pt.values[vf_workload_knob(w, "n_neg")] = 4;
  static const struct { const char *text; int64_t want; } cases[] = {
      {"1 + 2 * 3", 7}, {"(1 + 2) * 3", 9}, {"batch / 3", 3}, {"batch - n_pos - n_neg", 3},
      {"min(n_pos, n_neg) * max(batch, 2)", 30}, {"cands * 2", 14}, {"  batch*batch  ", 100},
      {"(0 - 7) / 2 + 10", 6}, {"max(min(1, 2), (3))", 3}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    struct vf_wl_expr e;
    if (vf_wl_expr_compile(w, cases[i].text, &e, &d)) fail_msg("'%s': %s", cases[i].text, d.msg);
    int64_t v;
    assert_int_equal(vf_wl_expr_eval(w, &e, &pt, &v), 0);
    if (v != cases[i].want) fail_msg("'%s' = %lld, want %lld", cases[i].text, (long long)v, (long long)cases[i].want);
  }
  static const struct { const char *text; int col; const char *why; } bad[] = {
      {"1 + x", 5, "unknown knob 'x'"}, {"(1 + 2", 7, "')' expected"}, {"1 +", 4, "ends too early"},
      {"2 3", 3, "an operator expected"}, {"1.5", 1, "whole numbers"}, {"99999999999999999999", 1, "too large"},
      {"min(1)", 6, "','"}, {"", 1, "ends too early"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    struct vf_wl_expr e;
    vf_diag_clear(&d);
    assert_int_equal(vf_wl_expr_compile(w, bad[i].text, &e, &d), VF_EINVAL);
    if (d.col != bad[i].col || !strstr(d.msg, bad[i].why))
      fail_msg("'%s': col %d '%s', want col %d '%s'", bad[i].text, d.col, d.msg, bad[i].col, bad[i].why);
  }
  /* Deep nesting is refused, not recursed into. */
  char deep[VF_WL_EXPR_TEXT];
  memset(deep, '(', 60);
  strcpy(deep + 60, "1");
  struct vf_wl_expr e;
  assert_int_equal(vf_wl_expr_compile(w, deep, &e, &d), VF_EINVAL);
  /* Overflow and division by zero at evaluation time. */
  int64_t v;
  assert_int_equal(vf_wl_expr_compile(w, "batch * 999999999999 * 999999999", &e, &d), 0);
  assert_int_equal(vf_wl_expr_eval(w, &e, &pt, &v), VF_ERANGE);
  assert_int_equal(vf_wl_expr_compile(w, "1 / (batch - 10)", &e, &d), 0);
  assert_int_equal(vf_wl_expr_eval(w, &e, &pt, &v), VF_ERANGE);
  assert_int_equal(vf_wl_expr_compile(w, "n_pos - batch", &e, &d), 0);
  assert_int_equal(vf_wl_expr_eval(w, &e, &pt, &v), VF_ERANGE); /* negative */
  release(w);
  /* What a micro batch holds cannot depend on the accumulation. */
  char *text = variant("  n_neg: {path: n_neg", "  accumulation: {min: 1, max: 8}\n  n_neg: {path: n_neg");
  w = parses(text, &d);
  assert_int_equal(vf_wl_expr_compile(w, "1 + accumulation", &e, &d), VF_EINVAL);
  assert_non_null(strstr(d.msg, "does not depend on accumulation"));
  release(w);
  test_free(text);
}

static void test_errors_name_the_line(void **state) {
  (void)state;
  fails_at("1 + n_pos + n_neg", "1 + n_pos + n_negs", 6, 26, "unknown knob 'n_negs'");
  fails_at("  cands: n_pos + n_neg\n", "  cands: n_pos + more\n  more: cands + 1\n", 9, 10, "cycle: cands -> more -> cands");
  fails_at("  cands: n_pos + n_neg\n", "  cands: cands\n", 9, 10, "cycle: cands -> cands");
  fails_at("min: 0, max: 32, priority: 1", "min: 40, max: 32, priority: 1", 16, 10, "min 40 is above max 32");
  fails_at("n_pos: {min: 4, max: 8}", "n_pos: {min: 4, max: 80}", 18, 32, "cannot be met within the knob's 1..32");
  fails_at("n_pos: {min: 4, max: 8}", "n_pos: {min: 9, max: 8}", 18, 32, "range 9..8 is empty");
  fails_at("n_neg: 2}", "n_nag: 2}", 18, 0, "unknown knob 'n_nag'");
  fails_at("n_neg: 2}", "batch: 2}", 18, 0, "shared by every stage");
  fails_at("  tokens: 32\n", "  tokens: 32\n  sequencez: 3\n", 8, 3, "unknown key 'sequencez'");
  fails_at("n_pos: {path: n_pos, min: 1, max: 32}", "n_pos: {path: n_pos, max: 32}", 15, 10, "needs its range");
  fails_at("method: lora", "method: qlora", 4, 0, "full, lora or dora");
  fails_at("dtype: fp32", "dtype: fp33", 12, 0, "not a dtype");
  fails_at("name: t\n", "name: t\nsafety: 1.5\n", 2, 9, "above 0 and at most 1");
  fails_at("  encoders:\n    - {name: a, model: bert-base-uncased, method: lora, grad_ckpt: full}\n",
           "  factory: model.py\n", 3, 12, "not FILE.py:FUNCTION");
  fails_at("  n_neg: {path: n_neg", "  accumulation: {min: 1, max: 8, in: stage}\n  n_neg: {path: n_neg", 16, 0,
           "shared by every stage");
  fails_at("name: t\n", "name: t\n  bad: [\n", 2, 0, "invalid YAML");
}

static void test_stage_file_needs_config(void **state) {
  (void)state;
  struct vf_diag d;
  int rc;
  struct vf_workload *w = parse("- a list\n- not a mapping\n", &rc, &d);
  assert_int_equal(rc, VF_EFORMAT);
  assert_non_null(strstr(d.msg, "a workload is a mapping"));
  release(w);
  fails_at("{name: one,", "{name: one, file: s1.yaml,", 18, 1, "needs its main config");
}

/* The example's workload: every file it names exists and its encoders load. */
/* examples/contrastive-embedder/workload.yaml, loaded (release() frees it); the test is
 * skipped outside CTest, which names the source folder. */
static struct vf_workload *load_example(void) {
  const char *src = getenv("VF_SOURCE_DIR");
  if (!src) skip();
  char path[1024];
  snprintf(path, sizeof path, "%s/examples/contrastive-embedder/workload.yaml", src);
  struct vf_workload *w = test_malloc(sizeof *w);
  vf_workload_init(w);
  struct vf_diag d;
  if (vf_workload_load(w, path, &d)) fail_msg("%s:%d:%d: %s", d.file, d.line, d.col, d.msg);
  return w;
}

static void test_example_loads(void **state) {
  (void)state;
  struct vf_workload *w = load_example();
  assert_true(w->models_loaded);
  assert_int_equal(w->n_encoders, 4);
  assert_int_equal(w->n_stages, 5);
  assert_true(w->factory[0]);
  /* The stage files hold their knobs now: given values are read from them. */
  struct vf_wl_point given[VF_WL_MAX_STAGES];
  vf_workload_given(w, given);
  assert_int_equal(given[0].values[vf_workload_knob(w, "n_positives")], 32);
  assert_int_equal(given[1].values[vf_workload_knob(w, "n_negatives")], 8);
  assert_int_equal(given[0].values[w->batch], 32);
  release(w);
}

static struct vf_wl_measure measured(uint64_t seqs, uint64_t loss, double fixed, double per_seq, double per_loss) {
  struct vf_wl_measure m = {.shape = {seqs, loss}, .phase = VF_PHASE_BACKWARD};
  m.allocated = (uint64_t)(fixed + per_seq * (double)seqs + per_loss * (double)loss);
  m.reserved = m.allocated + (1u << 20);
  m.by_category[VF_CAT_WEIGHTS] = (uint64_t)fixed;
  m.by_category[VF_CAT_ACTIVATIONS] = m.allocated - (uint64_t)fixed;
  return m;
}

/* Points that lie on a line give its terms back; the fit evaluates to the measured peak,
 * its categories summing to it; a term that would shrink the peak is dropped. */
static void test_fit(void **state) {
  (void)state;
  struct vf_wl_measure m[4] = {measured(36, 128, 1e9, 7e6, 16), measured(72, 512, 1e9, 7e6, 16),
                               measured(144, 2048, 1e9, 7e6, 16), measured(68, 256, 1e9, 7e6, 16)};
  struct vf_wl_fit f;
  assert_int_equal(vf_workload_fit(m, 4, &f), 0);
  assert_true(fabs(f.allocated[0] - 1e9) < 1e3 && fabs(f.allocated[1] - 7e6) < 10 && fabs(f.allocated[2] - 16) < 0.1);
  assert_true(f.r2 > 0.999999 && f.max_error < 1e-6);
  assert_int_equal(f.n_points, 4);
  struct vf_wl_env env = {.context_bytes = 500u << 20};
  struct vf_estimate e;
  vf_workload_fit_eval(&f, &m[2].shape, &env, &e);
  assert_true(llabs((long long)e.allocated_peak - (long long)m[2].allocated) < 16);
  assert_int_equal(e.by_category[VF_CAT_WEIGHTS] + e.by_category[VF_CAT_ACTIVATIONS], e.allocated_peak);
  assert_int_equal(e.device_peak, e.reserved_peak + env.context_bytes);
  assert_int_equal(e.allocator_slack + e.allocated_peak, e.reserved_peak);
  assert_int_equal(e.peak_phase, VF_PHASE_BACKWARD);
  /* A loss term that comes out negative goes; the rest still fit the points closely. */
  for (int i = 0; i < 4; i++) m[i] = measured(m[i].shape.sequences, m[i].shape.loss_elems, 1e9, 7e6, -8);
  assert_int_equal(vf_workload_fit(m, 4, &f), 0);
  assert_true(f.allocated[2] == 0 && f.allocated[1] > 0);
  /* Too few points, or points alike in shape, cannot determine the fit. */
  assert_int_equal(vf_workload_fit(m, 2, &f), VF_EINVAL);
  struct vf_wl_measure same[3] = {m[0], m[0], m[0]};
  assert_int_equal(vf_workload_fit(same, 3, &f), VF_EINVAL);
}

/* Without trace.points: one around the first stage's minimums, the micro batch doubled and
 * quadrupled, each knob doubled. */
static void test_default_trace_points(void **state) {
  (void)state;
  struct vf_workload *w = load_example();
  struct vf_wl_point pts[VF_WL_MAX_POINTS];
  size_t n = vf_workload_trace_points(w, pts);
  int b = w->batch, neg = vf_workload_knob(w, "n_negatives"), pos = vf_workload_knob(w, "n_positives");
  assert_int_equal(n, 5);
  int64_t want[5][3] = {{4, 16, 16}, {8, 16, 16}, {16, 16, 16}, {4, 32, 16}, {4, 16, 32}};
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(pts[i].values[b], want[i][0]);
    assert_int_equal(pts[i].values[neg], want[i][1]);
    assert_int_equal(pts[i].values[pos], want[i][2]);
  }
  release(w);
}

/* Plans the example on 24 GiB under the hf profile, with a spread of +-20% when spread. */
static void plan_example(const struct vf_workload *w, bool spread, uint64_t gpus, uint32_t keep,
                         const struct vf_wl_point *given, struct vf_wl_plan *out) {
  struct vf_profile p;
  struct vf_alloc_conf c;
  struct vf_diag d;
  assert_int_equal(profile_read("hf", NULL, &p, &d), 0);
  vf_alloc_conf_default(&c);
  struct vf_uncertainty_table t;
  for (int k = 0; k < VF_CLASS_COUNT; k++)
    t.by_class[k] = (struct vf_uncertainty){{{-0.2, 0.2}, {-0.2, 0.2}, {-0.2, 0.2}}, "all/all"};
  struct vf_wl_env env = {&p, &c, 9, 0, 500u << 20, gpus};
  struct vf_wl_plan_request r = {w, env, 24ull << 30, 0.90, 256, given, spread ? &t : NULL, keep};
  assert_int_equal(vf_workload_plan(&r, out, &d), 0);
  assert_true(out->found);
}

/* A workload plan judges a fit as a model plan judges its balanced tier: the high end of the
 * range (here the point / 0.8) within the budget, which leaves less work per step than the
 * point alone would. */
static void test_plan_judges_the_high_end(void **state) {
  (void)state;
  struct vf_workload *w = load_example();
  struct vf_wl_plan *judged = test_malloc(sizeof *judged), *point = test_malloc(sizeof *point);
  plan_example(w, true, 1, 0, NULL, judged);
  plan_example(w, false, 1, 0, NULL, point);
  uint64_t work[2] = {0, 0};
  for (size_t st = 0; st < judged->n_stages; st++) {
    const struct vf_wl_stage_plan *sp = &judged->stages[st];
    assert_true(sp->device_range.high <= judged->budget_bytes);
    assert_true(sp->device_range.high >= sp->est.device_peak + sp->est.device_peak / 5);
    work[0] += judged->batch * sp->shape.sequences;
    work[1] += point->batch * point->stages[st].shape.sequences;
  }
  assert_true(work[0] < work[1]);
  test_free(judged);
  test_free(point);
  release(w);
}

/* --gpus 2: each GPU takes half the target, the effective batch counts both; a kept knob
 * stays at its given value in every stage. */
static void test_plan_gpus_and_keep(void **state) {
  (void)state;
  struct vf_workload *w = load_example();
  struct vf_wl_plan *p = test_malloc(sizeof *p);
  plan_example(w, true, 2, 0, NULL, p);
  assert_int_equal(p->gpus, 2);
  assert_int_equal(p->effective_batch, p->batch * p->accumulation * 2);
  long long over = (long long)p->effective_batch - 256;
  assert_true(over >= 0 ? over < 2 * (long long)p->accumulation : -over <= (long long)p->batch);
  struct vf_wl_point given[VF_WL_MAX_STAGES];
  int neg = vf_workload_knob(w, "n_negatives");
  for (size_t st = 0; st < VF_WL_MAX_STAGES; st++) {
    for (size_t k = 0; k < VF_WL_MAX_KNOBS; k++) given[st].values[k] = -1;
    given[st].values[neg] = st == 0 ? 20 : 5;
  }
  plan_example(w, true, 1, 1u << neg, given, p);
  for (size_t st = 0; st < p->n_stages; st++) assert_int_equal(p->stages[st].point.values[neg], st == 0 ? 20 : 5);
  test_free(p);
  release(w);
}

/* The effective batch is the nearest to the target that the micro batch reaches, from below
 * too: micro batch at most 3 on 4 GPUs for 256 is 3 x 21 x 4 = 252, not 3 x 22 x 4 = 264. */
static void test_plan_reaches_the_nearest(void **state) {
  (void)state;
  struct vf_workload *w = load_example();
  w->knobs[w->batch].max = 3;
  struct vf_wl_plan *p = test_malloc(sizeof *p);
  plan_example(w, true, 4, 0, NULL, p);
  assert_int_equal(p->batch, 3);
  assert_int_equal(p->accumulation, 21);
  assert_int_equal(p->effective_batch, 252);
  test_free(p);
  release(w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_base_parses),        cmocka_unit_test(test_expressions),
      cmocka_unit_test(test_errors_name_the_line), cmocka_unit_test(test_stage_file_needs_config),
      cmocka_unit_test(test_example_loads),      cmocka_unit_test(test_fit),
      cmocka_unit_test(test_default_trace_points), cmocka_unit_test(test_plan_judges_the_high_end),
      cmocka_unit_test(test_plan_gpus_and_keep), cmocka_unit_test(test_plan_reaches_the_nearest),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

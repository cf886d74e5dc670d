/* The planner against the estimator it searches with: what it picks fits its tier's
 * budget and the next micro batch does not, the effective batch holds, --keep holds, and
 * nothing-fits reports the smallest peak. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <string.h>

#include "io/profile.h"
#include "vramfit.h"

#define GIB (1ull << 30)

struct fixture {
  struct vf_model m;
  struct vf_profile p;
  struct vf_uncertainty_table u;
  struct vf_alloc_conf c;
  struct vf_gpu_spec gpu;
  struct vf_plan_request r;
  struct vf_plan_result out;
};

static struct fixture *setup_for(const char *model, const char *gpu) {
  struct fixture *f = test_calloc(1, sizeof *f);
  struct vf_diag d;
  vf_model_init(&f->m);
  assert_int_equal(vf_model_load(&f->m, model, &d), 0);
  assert_int_equal(profile_read("hf", NULL, &f->p, &d), 0);
  vf_alloc_conf_default(&f->c);
  assert_int_equal(vf_gpu_lookup(gpu, &f->gpu), 0);
  f->r = (struct vf_plan_request){&f->m, &f->p, &f->c, &f->gpu, {0}, 0.90, 0, VF_KEEP_CAPACITY, 0, NULL, 0, 0, NULL};
  vf_setup_default(&f->r.base);
  f->r.base.capacity_bytes = f->gpu.capacity_bytes;
  f->r.base.gpu_cc_major = (uint32_t)f->gpu.cc_major;
  return f;
}

static void done(struct fixture *f) {
  vf_model_cleanup(&f->m);
  test_free(f);
}

/* The device peak of s, under expandable segments where alloc_conf asks for them. */
static uint64_t peak_under(const struct fixture *f, const struct vf_setup *s, const char *alloc_conf) {
  struct vf_estimate e;
  struct vf_diag d;
  struct vf_alloc_conf c = f->c;
  c.expandable_segments |= alloc_conf && strstr(alloc_conf, "expandable_segments:True");
  if (vf_estimate(&f->m, s, &f->p, &c, &e, &d)) return UINT64_MAX;
  return e.device_peak;
}

static uint64_t peak_of(const struct fixture *f, const struct vf_setup *s) { return peak_under(f, s, NULL); }

static uint64_t choice_peak(const struct fixture *f, const struct vf_plan_choice *c) {
  return peak_under(f, &c->setup, c->alloc_conf);
}

static void plan(struct fixture *f) {
  struct vf_diag d;
  assert_int_equal(vf_plan_search(&f->r, &f->out, &d), 0);
}

/* Full fp32 AdamW of a 7B model: 16 bytes a parameter cannot fit 24 GiB with the capacity
 * kept; the smallest peak is reported and no tier is found. */
static void test_nothing_fits(void **state) {
  (void)state;
  struct fixture *f = setup_for("llama-2-7b", "rtx-4090");
  plan(f);
  for (int t = 0; t < VF_TIER_COUNT; t++) assert_false(f->out.tiers[t].found);
  assert_true(f->out.smallest.found);
  assert_true(f->out.smallest.peak_device_bytes > f->gpu.capacity_bytes);
  assert_true(f->out.smallest.peak_device_bytes == choice_peak(f, &f->out.smallest));
  assert_int_equal(f->out.n_changes, 0);
  done(f);
}

/* The method free to change: adapters fit, each tier under its budget, ordered by peak. */
static void test_method_may_change(void **state) {
  (void)state;
  struct fixture *f = setup_for("llama-2-7b", "rtx-4090");
  f->r.keep = VF_KEEP_SEQ;
  f->r.base.batch = 4;
  f->r.base.accumulation = 8;
  plan(f);
  const struct vf_plan_choice *b = &f->out.tiers[VF_TIER_BALANCED];
  assert_true(b->found);
  assert_true(b->setup.method == VF_METHOD_LORA || b->setup.method == VF_METHOD_QLORA);
  uint64_t last = 0;
  for (int t = 0; t < VF_TIER_COUNT; t++) {
    const struct vf_plan_choice *c = &f->out.tiers[t];
    assert_true(c->found);
    assert_true(c->peak_device_bytes <= c->budget_bytes);
    assert_true(c->peak_device_bytes >= last);
    assert_int_equal(c->setup.batch * c->setup.accumulation, 32);
    assert_int_equal(c->setup.seq, 2048);
    assert_true(c->tokens_per_second > 0);
    last = c->peak_device_bytes;
  }
  assert_true(b->peak_device_bytes == choice_peak(f, b));
  assert_true(f->out.n_changes >= 2);
  done(f);
}

/* The micro batch is the largest divisor of the per-GPU batch that fits: the next one up
 * does not. The effective batch (micro batch x accumulation x GPUs) stays at 64. */
static void test_largest_micro_batch(void **state) {
  (void)state;
  struct fixture *f = setup_for("llama-3.2-1b", "a100-80gb");
  f->r.base.weights = VF_PREC_BF16;
  f->r.base.amp = VF_PREC_BF16;
  f->r.base.batch = 4;
  f->r.base.accumulation = 8;
  f->r.base.gpus = 2;
  f->r.keep = VF_KEEP_CAPACITY | VF_KEEP_SEQ | VF_KEEP_OPTIMIZER | VF_KEEP_GRAD_CKPT | VF_KEEP_SHARD |
              VF_KEEP_OFFLOAD;
  plan(f);
  for (int t = 0; t < VF_TIER_COUNT; t++) {
    const struct vf_plan_choice *c = &f->out.tiers[t];
    assert_true(c->found);
    assert_int_equal(c->effective_batch, 64);
    assert_int_equal(c->setup.batch * c->setup.accumulation * 2, 64);
    /* --keep: nothing but the micro batch moved. */
    assert_int_equal(c->setup.optimizer, VF_OPT_ADAMW);
    assert_int_equal(c->setup.grad_ckpt, VF_CKPT_NONE);
    assert_int_equal(c->setup.shard, VF_SHARD_NONE);
    assert_int_equal(c->setup.offload, 0);
    assert_int_equal(c->setup.seq, 2048);
    if (c->setup.batch == 32) continue;
    struct vf_setup next = c->setup;
    next.batch *= 2;
    next.accumulation /= 2;
    assert_true(peak_of(f, &next) > c->budget_bytes);
  }
  done(f);
}

/* An effective batch the GPUs cannot share evenly becomes the nearest one they can. */
static void test_nearest_effective_batch(void **state) {
  (void)state;
  struct fixture *f = setup_for("llama-3.2-1b", "a100-80gb");
  f->r.base.weights = VF_PREC_BF16;
  f->r.base.gpus = 4;
  f->r.target_effective_batch = 30;
  plan(f);
  assert_int_equal(f->out.target_effective_batch, 30);
  assert_int_equal(f->out.tiers[VF_TIER_BALANCED].effective_batch, 32);
  assert_non_null(strstr(f->out.changes[f->out.n_changes - 1], "off the 30 asked"));
  done(f);
}

/* A layout over 512 GPUs in nodes of 8 for Llama 3.1 405B under torchtitan: the world
 * split whole, tp within a node and dividing the heads, the effective batch about kept, every
 * tier under its budget by its exact estimate, where the given layout (tp 1) fits at no
 * micro batch; in a few hundred estimates. */
static void test_layout_search(void **state) {
  (void)state;
  struct fixture *f = setup_for("llama-3.1-405b", "h100-96gb");
  struct vf_diag d;
  assert_int_equal(profile_read("torchtitan", NULL, &f->p, &d), 0);
  struct vf_setup *b = &f->r.base;
  b->weights = VF_PREC_FP32, b->amp = VF_PREC_BF16, b->seq = 8192, b->accumulation = 32;
  b->grad_ckpt = VF_CKPT_FULL, b->gpus = 512, b->shard = VF_SHARD_FSDP;
  f->r.gpus_per_node = 8;
  plan(f);
  for (int t = 0; t < VF_TIER_COUNT; t++) {
    const struct vf_plan_choice *c = &f->out.tiers[t];
    assert_true(c->found);
    const struct vf_setup *s = &c->setup;
    assert_true(s->tp <= 8 && f->m.arch.heads % s->tp == 0 && f->m.arch.kv_heads % s->tp == 0);
    assert_int_equal(s->gpus % (s->tp * s->pp * s->cp), 0);
    /* Any split of the samples: the effective batch within 2% of the one asked, as reported. */
    uint64_t effective = s->batch * s->accumulation * (s->gpus / (s->tp * s->pp * s->cp));
    assert_int_equal(c->effective_batch, effective);
    assert_true(effective * 50 >= 16384 * 49 && effective * 50 <= 16384 * 51);
    assert_true(peak_of(f, s) <= c->budget_bytes);
  }
  const struct vf_setup *best = &f->out.tiers[VF_TIER_BALANCED].setup;
  assert_true(f->out.estimates < 400);
  /* The given layout (tp 1) does not fit at any micro batch. */
  struct vf_setup one = *best;
  one.tp = 1, one.pp = 1, one.cp = 1, one.batch = 1, one.accumulation = 32;
  assert_true(peak_of(f, &one) > f->out.tiers[VF_TIER_AGGRESSIVE].budget_bytes);
  done(f);
}

/* More FLOP/s or a larger micro batch never predicts fewer tokens per second; recomputation
 * and offload cost time. */
static void test_throughput_model(void **state) {
  (void)state;
  struct fixture *f = setup_for("llama-3.2-1b", "rtx-4090");
  struct vf_gpu_spec h100;
  assert_int_equal(vf_gpu_lookup("h100-80gb", &h100), 0);
  struct vf_setup s = f->r.base;
  s.weights = VF_PREC_BF16;
  struct vf_estimate e = {.params = 1000000000, .trainable_params = 1000000000};
  double base = vf_plan_tokens_per_second(&f->m, &s, &e, &f->gpu);
  assert_true(base > 0);
  assert_true(vf_plan_tokens_per_second(&f->m, &s, &e, &h100) > base);
  s.batch = 4;
  double bigger = vf_plan_tokens_per_second(&f->m, &s, &e, &f->gpu);
  assert_true(bigger > base);
  s.grad_ckpt = VF_CKPT_SELECTIVE;
  double selective = vf_plan_tokens_per_second(&f->m, &s, &e, &f->gpu);
  s.grad_ckpt = VF_CKPT_FULL;
  double full = vf_plan_tokens_per_second(&f->m, &s, &e, &f->gpu);
  assert_true(full < selective && selective < bigger);
  s.offload = VF_OFFLOAD_OPTIMIZER;
  assert_true(vf_plan_tokens_per_second(&f->m, &s, &e, &f->gpu) < full);
  s.gpus = 2;
  s.offload = 0;
  /* Two GPUs nearly double it; the gradients' all-reduce over PCIe costs a little. */
  double two = vf_plan_tokens_per_second(&f->m, &s, &e, &f->gpu);
  assert_true(two > 1.8 * full && two < 2 * full);
  done(f);
}

/* What each kind of parallelism costs: ZeRO-3 gathers the weights on top of ZeRO-2's
 * gradient traffic, tensor parallelism all-reduces per block, a pipeline idles in its bubble
 * ((p - 1) / (m + p - 1) of the time), less with more micro batches or interleaving. */
static void test_parallel_costs(void **state) {
  (void)state;
  struct fixture *f = setup_for("llama-3.1-8b", "h100-80gb");
  struct vf_setup s = f->r.base;
  s.weights = VF_PREC_BF16, s.gpus = 16, s.seq = 4096, s.accumulation = 4;
  struct vf_estimate e = {.params = 8000000000, .trainable_params = 8000000000};
  s.shard = VF_SHARD_ZERO2;
  double zero2 = vf_plan_tokens_per_second(&f->m, &s, &e, &f->gpu);
  s.shard = VF_SHARD_ZERO3;
  assert_true(vf_plan_tokens_per_second(&f->m, &s, &e, &f->gpu) < zero2);
  s.shard = VF_SHARD_NONE;
  double ddp = vf_plan_tokens_per_second(&f->m, &s, &e, &f->gpu);
  assert_true(ddp == zero2);
  s.tp = 8;
  double tp8 = vf_plan_tokens_per_second(&f->m, &s, &e, &f->gpu);
  assert_true(tp8 < ddp);
  s.tp = 1, s.pp = 4, s.pp_schedule = VF_PP_1F1B;
  double pp4 = vf_plan_tokens_per_second(&f->m, &s, &e, &f->gpu);
  /* 4 micro batches over 4 stages: 3 of 7 slots idle, more than the gradient traffic a
   * quarter of the weights saves. */
  assert_true(pp4 < ddp);
  s.accumulation = 16;
  assert_true(vf_plan_tokens_per_second(&f->m, &s, &e, &f->gpu) > pp4);
  s.accumulation = 4, s.pp_schedule = VF_PP_INTERLEAVED;
  assert_true(vf_plan_tokens_per_second(&f->m, &s, &e, &f->gpu) > pp4);
  done(f);
  /* Expert parallelism's all-to-all costs time too. */
  f = setup_for("mixtral-8x7b", "h100-80gb");
  s = f->r.base;
  s.weights = VF_PREC_BF16, s.gpus = 16, s.seq = 4096, s.accumulation = 4;
  double no_ep = vf_plan_tokens_per_second(&f->m, &s, &e, &f->gpu);
  s.ep = 8;
  assert_true(vf_plan_tokens_per_second(&f->m, &s, &e, &f->gpu) < no_ep);
  done(f);
}

static void test_keep_parse(void **state) {
  (void)state;
  uint32_t bits = 0;
  assert_int_equal(vf_keep_parse("seq,optimizer", &bits), 0);
  assert_int_equal(bits, VF_KEEP_SEQ | VF_KEEP_OPTIMIZER);
  assert_int_equal(vf_keep_parse("capacity", &bits), 0);
  assert_int_equal(bits, VF_KEEP_METHOD | VF_KEEP_LORA_R | VF_KEEP_QUANT);
  assert_int_equal(vf_keep_parse("none", &bits), 0);
  assert_int_equal(bits, 0);
  assert_int_equal(vf_keep_parse("seq,", &bits), 0);
  assert_int_equal(vf_keep_parse("", &bits), VF_EINVAL);
  assert_int_equal(vf_keep_parse("seqq", &bits), VF_EINVAL);
}

/* --keep adds to capacity; none lifts it. */
static void test_keep_list(void **state) {
  (void)state;
  uint32_t bits = 0;
  assert_int_equal(vf_keep_list("optimizer", &bits), 0);
  assert_int_equal(bits, VF_KEEP_CAPACITY | VF_KEEP_OPTIMIZER);
  assert_int_equal(vf_keep_list("none,seq", &bits), 0);
  assert_int_equal(bits, VF_KEEP_SEQ);
  assert_int_equal(vf_keep_list("alloc-conf,loss", &bits), 0);
  assert_int_equal(bits, VF_KEEP_CAPACITY | VF_KEEP_ALLOC_CONF | VF_KEEP_LOSS);
  assert_int_equal(vf_keep_list("nonesuch", &bits), VF_EINVAL);
}

/* Guide 003: Qwen2.5-7B, LoRA r128 on every linear layer, 2 x 2048, accumulation 8,
 * checkpointed, 24 GiB, measured spread as the CLI loads it. */
static struct fixture *guide_003(uint32_t keep) {
  struct fixture *f = setup_for("qwen2.5-7b", "rtx-4090");
  struct vf_diag d;
  struct vf_setup *b = &f->r.base;
  b->weights = VF_PREC_BF16, b->method = VF_METHOD_LORA, b->lora_r = 128, b->batch = 2, b->accumulation = 8;
  b->grad_ckpt = VF_CKPT_FULL;
  assert_int_equal(vf_lora_targets_parse("all-linear", &b->lora_targets), 0);
  b->capacity_bytes = 24ull << 30;
  f->r.keep = keep;
  assert_int_equal(vf_uncertainty_load("hf", &f->u, &d), 0);
  f->r.uncertainty = &f->u;
  return f;
}

/* The knobs that leave the trained model as it is come first: the fused loss fits seq 2048
 * with the rank and the method kept, and its peak is the one estimate gives that setting. */
static void test_loss_knob(void **state) {
  (void)state;
  struct fixture *f = guide_003(VF_KEEP_CAPACITY | VF_KEEP_SEQ | VF_KEEP_OPTIMIZER);
  plan(f);
  const struct vf_plan_choice *b = &f->out.tiers[VF_TIER_BALANCED];
  assert_true(b->found);
  assert_int_equal(b->setup.seq, 2048);
  assert_int_equal(b->setup.lora_r, 128);
  assert_int_equal(b->setup.method, VF_METHOD_LORA);
  assert_int_equal(b->setup.optimizer, VF_OPT_ADAMW);
  assert_int_equal(b->setup.loss, VF_LOSS_FUSED);
  assert_true(b->peak_device_bytes == choice_peak(f, b));
  /* The given row is the exact estimate of the given setting. */
  assert_true(f->out.given.peak_device_bytes == peak_of(f, &f->r.base));
  done(f);
}

/* Whether any tier checkpoints selectively: full fine-tuning of llama-3.2-1b at 8192
 * tokens on an RTX 4090. */
static bool selective_chosen(bool policy) {
  struct fixture *f = setup_for("llama-3.2-1b", "rtx-4090");
  struct vf_diag d;
  f->p.selective_policy = policy;
  f->r.base.seq = 8192, f->r.base.weights = VF_PREC_BF16;
  assert_int_equal(vf_uncertainty_load("hf", &f->u, &d), 0);
  f->r.uncertainty = &f->u;
  plan(f);
  bool chosen = false;
  for (int t = 0; t < VF_TIER_COUNT; t++)
    chosen |= f->out.tiers[t].found && f->out.tiers[t].setup.grad_ckpt == VF_CKPT_SELECTIVE;
  done(f);
  return chosen;
}

/* Selective checkpointing is offered only where the framework has a policy of its own
 * (profile field selective_policy): with one, the safer tiers keep some of each layer's
 * tensors; the Trainer checkpoints whole layers, and its tiers never checkpoint selectively. */
static void test_selective_needs_policy(void **state) {
  (void)state;
  struct vf_profile p;
  struct vf_diag d;
  assert_int_equal(profile_read("hf", NULL, &p, &d), 0);
  assert_false(p.selective_policy);
  assert_int_equal(profile_read("torchtitan", NULL, &p, &d), 0);
  assert_true(p.selective_policy);
  assert_true(selective_chosen(true));
  assert_false(selective_chosen(false));
}

/* With the loss and the offload kept, seq is searched for the longest that fits each tier
 * (steps of 128, not halving), and the allocator's expandable segments are chosen where
 * they lower the peak; one step longer does not fit. */
static void test_seq_and_allocator(void **state) {
  (void)state;
  struct fixture *f = guide_003(VF_KEEP_CAPACITY | VF_KEEP_OPTIMIZER | VF_KEEP_OFFLOAD | VF_KEEP_LOSS);
  plan(f);
  const struct vf_plan_choice *b = &f->out.tiers[VF_TIER_BALANCED], *a = &f->out.tiers[VF_TIER_AGGRESSIVE];
  assert_true(b->found && a->found);
  assert_string_equal(b->alloc_conf, "expandable_segments:True");
  assert_true(b->setup.seq < 2048 && b->setup.seq % 128 == 0);
  assert_true(a->setup.seq % 128 == 0 && (a->setup.seq & (a->setup.seq - 1)) != 0);
  struct vf_setup longer = a->setup;
  longer.seq += 128, longer.batch = 1, longer.accumulation = 16;
  assert_true(peak_under(f, &longer, a->alloc_conf) > a->budget_bytes);
  bool said = false;
  for (size_t i = 0; i < f->out.n_changes; i++) said |= strstr(f->out.changes[i], "the largest that fits") != NULL;
  assert_true(said);
  done(f);
}

/* The check: guide 003 with seq and the capacity kept plans seq 2048 with the
 * allocator's expandable segments chosen (they lower the peak of the setting chosen) and
 * said; --keep optimizer keeps the capacity too: LoRA at r 128, no QLoRA. */
static void test_guide_003_allocator(void **state) {
  (void)state;
  struct fixture *f = guide_003(VF_KEEP_CAPACITY | VF_KEEP_SEQ);
  plan(f);
  const struct vf_plan_choice *b = &f->out.tiers[VF_TIER_BALANCED];
  assert_true(b->found);
  assert_int_equal(b->setup.seq, 2048);
  assert_string_equal(b->alloc_conf, "expandable_segments:True");
  assert_true(b->peak_device_bytes == choice_peak(f, b));
  assert_true(choice_peak(f, b) < peak_of(f, &b->setup));
  bool said = false;
  for (size_t i = 0; i < f->out.n_changes; i++)
    said |= strstr(f->out.changes[i], "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True") != NULL;
  assert_true(said);
  done(f);
  f = guide_003(VF_KEEP_CAPACITY | VF_KEEP_OPTIMIZER);
  plan(f);
  for (int t = 0; t < VF_TIER_COUNT; t++) {
    const struct vf_plan_choice *c = &f->out.tiers[t];
    assert_true(!c->found || (c->setup.method == VF_METHOD_LORA && vf_setup_quant(&c->setup) == VF_QUANT_NONE &&
                              c->setup.lora_r == 128));
  }
  done(f);
}

/* The planner's ranking of choice c: its rate less 1% for each knob changed from the given
 * setting (the allocator's costs nothing). */
static double ranked(const struct fixture *f, const struct vf_plan_choice *c) {
  const struct vf_setup *a = &f->r.base, *s = &c->setup;
  int changed = (s->optimizer != a->optimizer) + (s->offload != a->offload) + (s->loss != a->loss) +
                (s->grad_ckpt != a->grad_ckpt) + (s->shard != a->shard) + (s->amp != a->amp) +
                (s->weights != a->weights) + (s->seq != a->seq) + (s->method != a->method) +
                (s->lora_r != a->lora_r);
  return c->tokens_per_second * (1 - 0.01 * changed);
}

/* --keep only narrows the search, so a tier ranks at least as high without it. The quick
 * estimates the search ranks with put guide 003's micro batch 2 over the balanced budget
 * whatever the optimizer, where the exact ones let it fit with the optimizer offloaded (or
 * adafactor) but not with adamw-8bit, the search's best: the tier settles its few best on
 * exact estimates and takes the best of them, not micro batch 1 of adamw-8bit. */
/* Guide 003 as `--gpu 24GiB` plans it: a GPU known by its size alone, the CUDA context counted. */
static struct fixture *guide_003_sized(uint32_t keep) {
  struct fixture *f = guide_003(keep);
  struct vf_diag d;
  assert_int_equal(vf_gpu_parse("24GiB", &f->gpu, &d), 0);
  f->r.base.gpu_cc_major = (uint32_t)f->gpu.cc_major;
  assert_int_equal(vf_runtime_context_bytes(f->r.base.gpu_cc_major, false, &f->r.base.context_bytes), 0);
  return f;
}

static void test_best_settled_exactly(void **state) {
  (void)state;
  struct fixture *f = guide_003_sized(VF_KEEP_CAPACITY | VF_KEEP_SEQ | VF_KEEP_OPTIMIZER);
  plan(f);
  struct vf_plan_choice kept = f->out.tiers[VF_TIER_BALANCED];
  assert_true(kept.found && kept.setup.batch == 2);
  done(f);
  f = guide_003_sized(VF_KEEP_CAPACITY | VF_KEEP_SEQ);
  plan(f);
  const struct vf_plan_choice *b = &f->out.tiers[VF_TIER_BALANCED];
  assert_true(b->found && b->device_range.high <= b->budget_bytes);
  assert_true(b->peak_device_bytes == choice_peak(f, b));
  assert_int_equal(b->effective_batch, kept.effective_batch);
  assert_true(ranked(f, b) >= ranked(f, &kept));
  done(f);
}

/* Optimizers that keep AdamW's update (8-bit states, offload) come before one that changes it:
 * guide 003 fits AdamW with its states offloaded, so balanced keeps AdamW's update where
 * Adafactor (no first moment) ranked as high. */
static void test_update_kept_first(void **state) {
  (void)state;
  struct fixture *f = guide_003_sized(VF_KEEP_CAPACITY | VF_KEEP_SEQ);
  plan(f);
  for (int t = 0; t < VF_TIER_COUNT; t++)
    if (f->out.tiers[t].found) assert_int_not_equal(f->out.tiers[t].setup.optimizer, VF_OPT_ADAFACTOR);
  done(f);
}

/* max_split_size_mb is weighed on the settings chosen beside expandable segments and taken
 * only where it lowers the peak. The allocator model replays a run without a GPU limit, so
 * the release of cached blocks above the size that it allows before the whole cache goes
 * never runs, and large blocks left whole only strand more: guide 003 over varied lengths
 * tries 128 and 512 MB and takes neither (each peak at least the chosen one's). Beside
 * expandable segments given, which split every block, it is not tried. */
static void test_max_split_tried(void **state) {
  (void)state;
  struct fixture *f = guide_003(VF_KEEP_CAPACITY | VF_KEEP_SEQ);
  assert_int_equal(vf_length_dist_mean_max(600, 2048, &f->r.base.length_dist), 0);
  f->r.base.lengths = VF_LENGTHS_VARIED;
  plan(f);
  const struct vf_plan_choice *b = &f->out.tiers[VF_TIER_BALANCED];
  assert_true(b->found);
  assert_null(strstr(b->alloc_conf, "max_split_size_mb"));
  int split = 0;
  for (size_t i = 0; i < f->out.n_alloc_tried; i++) {
    const struct vf_plan_alloc_tried *a = &f->out.alloc_tried[i];
    if (!strstr(a->alloc_conf, "max_split_size_mb:")) continue;
    split++;
    assert_true(a->peak_device_bytes >= b->peak_device_bytes);
  }
  assert_int_equal(split, 2);
  done(f);
  f = guide_003(VF_KEEP_CAPACITY | VF_KEEP_SEQ);
  f->c.expandable_segments = true;
  f->r.alloc_conf_text = "expandable_segments:True";
  plan(f);
  assert_int_equal(f->out.n_alloc_tried, 0);
  done(f);
}

/* Where the quick estimates let a longer seq fit than the exact ones do, a tier settles at
 * the longest the exact ones let fit, not at a tighter tier's shorter one: guide 003 with
 * the loss kept, one step of 128 longer does not fit the balanced budget. */
static void test_seq_settles_exactly(void **state) {
  (void)state;
  struct fixture *f = guide_003(VF_KEEP_CAPACITY | VF_KEEP_LOSS);
  plan(f);
  const struct vf_plan_choice *b = &f->out.tiers[VF_TIER_BALANCED];
  assert_true(b->found && b->setup.seq < 2048);
  assert_true(b->setup.seq >= 1024);
  struct vf_setup longer = b->setup;
  longer.seq += 128, longer.batch = 1, longer.accumulation = 16;
  double widen = (double)b->device_range.high / (double)b->peak_device_bytes;
  assert_true((double)peak_under(f, &longer, b->alloc_conf) * widen > (double)b->budget_bytes);
  done(f);
}

/* torchtune offloads activations (with checkpointing on): a long-sequence LoRA whose saved
 * activations weigh gets its smallest setting with them offloaded; the Hugging Face Trainer
 * has no such switch and never does. */
static void test_activation_offload(void **state) {
  (void)state;
  const char *frameworks[] = {"torchtune", "hf"};
  for (int i = 0; i < 2; i++) {
    struct fixture *f = setup_for("llama-3.2-1b", "rtx-4090");
    struct vf_diag d;
    assert_int_equal(profile_read(frameworks[i], NULL, &f->p, &d), 0);
    struct vf_setup *b = &f->r.base;
    b->weights = VF_PREC_BF16, b->method = VF_METHOD_LORA, b->batch = 4, b->accumulation = 8, b->seq = 16384;
    b->grad_ckpt = VF_CKPT_FULL;
    f->r.keep = VF_KEEP_CAPACITY | VF_KEEP_SEQ | VF_KEEP_OPTIMIZER | VF_KEEP_LOSS | VF_KEEP_ALLOC_CONF;
    plan(f);
    bool offloaded = false;
    for (int t = 0; t <= VF_TIER_COUNT; t++) {
      const struct vf_plan_choice *c = t < VF_TIER_COUNT ? &f->out.tiers[t] : &f->out.smallest;
      offloaded |= c->found && (c->setup.offload & VF_OFFLOAD_ACTIVATIONS);
      assert_true(!(c->found && (c->setup.offload & VF_OFFLOAD_ACTIVATIONS)) || c->setup.grad_ckpt != VF_CKPT_NONE);
    }
    assert_true(offloaded == (i == 0));
    /* The smallest row too is the estimate `estimate` makes of its setting. */
    assert_true(f->out.smallest.peak_device_bytes == choice_peak(f, &f->out.smallest));
    done(f);
  }
}

/* torchtune's optimizer_in_bwd keeps the trained model and frees the gradients as they come:
 * full bf16 fine-tuning of Qwen2.5 7B (AdamW kept, 60 GiB) fits only with it, said in the
 * changes; --keep optimizer-in-bwd holds it off and nothing fits. Asked for an effective
 * batch of 4 on 80 GiB, a tier that steps in the backward does so at accumulation 1. */
static void test_optimizer_in_bwd(void **state) {
  (void)state;
  for (int k = 0; k < 3; k++) {
    struct fixture *f = setup_for("qwen2.5-7b", "h100-80gb");
    struct vf_diag d;
    if (k < 2) f->r.base.capacity_bytes = f->gpu.capacity_bytes = 60 * GIB;
    assert_int_equal(profile_read("torchtune", NULL, &f->p, &d), 0);
    struct vf_setup *b = &f->r.base;
    b->weights = VF_PREC_BF16, b->grad_ckpt = VF_CKPT_FULL, b->accumulation = k < 2 ? 1 : 4;
    f->r.keep = VF_KEEP_CAPACITY | VF_KEEP_SEQ | VF_KEEP_OPTIMIZER | VF_KEEP_PRECISION | VF_KEEP_OFFLOAD |
                VF_KEEP_GRAD_CKPT | (k == 1 ? VF_KEEP_IN_BWD : 0);
    plan(f);
    const struct vf_plan_choice *c = &f->out.tiers[VF_TIER_BALANCED];
    assert_true(c->found == (k != 1));
    bool said = false;
    for (size_t i = 0; i < f->out.n_changes; i++) said |= strstr(f->out.changes[i], "optimizer_in_bwd") != NULL;
    assert_true(said == (k == 0));
    for (int t = 0; t < VF_TIER_COUNT && k != 1; t++) {
      c = &f->out.tiers[t];
      assert_true(!c->found || c->setup.optimizer_in_bwd == VF_IN_BWD_NO || c->setup.accumulation == 1);
      assert_true(!c->found || c->peak_device_bytes == choice_peak(f, c));
    }
    if (k == 0) assert_int_equal(f->out.tiers[VF_TIER_BALANCED].setup.optimizer_in_bwd, VF_IN_BWD_YES);
    done(f);
  }
}

/* Guide 002: about 500M parameters on 4 GPUs of 44 GiB, global batch 256. Micro batch 4
 * does not fit, 3 does: 3 x 21 x 4 = 252, the nearest 3 reaches, ranks above 2 x 32 x 4. */
static void test_any_split(void **state) {
  (void)state;
  struct fixture *f = setup_for("qwen2.5-0.5b", "a100-80gb");
  struct vf_diag d;
  struct vf_setup *b = &f->r.base;
  b->weights = VF_PREC_FP32, b->amp = VF_PREC_BF16, b->batch = 2, b->accumulation = 32, b->gpus = 4;
  b->capacity_bytes = 44ull << 30;
  assert_int_equal(vf_uncertainty_load("hf", &f->u, &d), 0);
  f->r.uncertainty = &f->u;
  f->r.keep = VF_KEEP_CAPACITY | VF_KEEP_GRAD_CKPT | VF_KEEP_OPTIMIZER | VF_KEEP_LOSS | VF_KEEP_OFFLOAD |
              VF_KEEP_ALLOC_CONF | VF_KEEP_SHARD;
  plan(f);
  const struct vf_plan_choice *c = &f->out.tiers[VF_TIER_BALANCED];
  assert_int_equal(c->setup.batch, 3);
  assert_int_equal(c->setup.accumulation, 21);
  assert_int_equal(c->effective_batch, 252);
  struct vf_setup four = c->setup;
  four.batch = 4, four.accumulation = 16;
  double widen = (double)c->device_range.high / (double)c->peak_device_bytes; /* the high end's */
  assert_true((double)peak_of(f, &four) * widen > (double)c->budget_bytes);
  done(f);
}

/* A GPU without bf16 gets fp16 autocast: frozen bf16 weights become fp16, trained ones fp32. */
static void test_no_bf16(void **state) {
  (void)state;
  struct fixture *f = setup_for("qwen2.5-1.5b", "v100-32gb");
  f->r.base.method = VF_METHOD_LORA;
  f->r.base.batch = 4;
  plan(f);
  for (int t = 0; t < VF_TIER_COUNT; t++) {
    assert_int_equal(f->out.tiers[t].setup.amp, VF_PREC_FP16);
    assert_int_equal(f->out.tiers[t].setup.weights, VF_PREC_FP16);
  }
  bool said = false;
  for (size_t i = 0; i < f->out.n_changes; i++) said |= strstr(f->out.changes[i], "has no bf16") != NULL;
  assert_true(said);
  done(f);
  f = setup_for("qwen2.5-1.5b", "t4");
  f->r.keep = VF_KEEP_SEQ | VF_KEEP_LOSS;
  f->r.base.weights = VF_PREC_BF16;
  plan(f);
  const struct vf_plan_choice *c = &f->out.tiers[VF_TIER_BALANCED];
  assert_true(c->found && c->setup.amp == VF_PREC_FP16);
  assert_int_equal(c->setup.weights, c->setup.method == VF_METHOD_FULL ? VF_PREC_FP32 : VF_PREC_FP16);
  done(f);
}

static void test_bad_requests(void **state) {
  (void)state;
  struct fixture *f = setup_for("gpt2", "rtx-4090");
  struct vf_diag d;
  f->r.safety = 1.5;
  assert_int_equal(vf_plan_search(&f->r, &f->out, &d), VF_EINVAL);
  f->r.safety = 0.9;
  f->r.base.capacity_bytes = 0;
  assert_int_equal(vf_plan_search(&f->r, &f->out, &d), VF_EINVAL);
  f->r.base.capacity_bytes = 24 * GIB;
  f->r.base.seq = 0;
  assert_int_equal(vf_plan_search(&f->r, &f->out, &d), VF_EINVAL);
  done(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nothing_fits),        cmocka_unit_test(test_method_may_change),
      cmocka_unit_test(test_largest_micro_batch), cmocka_unit_test(test_nearest_effective_batch),
      cmocka_unit_test(test_throughput_model),
      cmocka_unit_test(test_parallel_costs),
      cmocka_unit_test(test_layout_search),    cmocka_unit_test(test_keep_parse),
      cmocka_unit_test(test_bad_requests),     cmocka_unit_test(test_keep_list),
      cmocka_unit_test(test_loss_knob),        cmocka_unit_test(test_selective_needs_policy),        cmocka_unit_test(test_seq_and_allocator),
      cmocka_unit_test(test_any_split),        cmocka_unit_test(test_no_bf16),
      cmocka_unit_test(test_guide_003_allocator), cmocka_unit_test(test_seq_settles_exactly),
      cmocka_unit_test(test_activation_offload), cmocka_unit_test(test_optimizer_in_bwd),
      cmocka_unit_test(test_max_split_tried),  cmocka_unit_test(test_best_settled_exactly),
      cmocka_unit_test(test_update_kept_first),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

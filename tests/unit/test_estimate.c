/* The estimator against hand-computed bytes: optimizer states, quantized storage, ZeRO
 * model states (the ZeRO paper's formulas), a toy model's replay, and bad setups. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/estimate_internal.h"
#include "core/params.h"
#include "vramfit.h"

/* hidden 64, 2 layers, 4 heads, MLP 128, vocab 256, untied, fp32: 115,008 parameters. */
static const char toy_config[] =
    "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 4, \"intermediate_size\": 128,"
    " \"vocab_size\": 256, \"max_position_embeddings\": 128, \"tie_word_embeddings\": false,"
    " \"torch_dtype\": \"float32\"}";

#define TOY_PARAMS 115008ull
/* Per-tensor 512-byte blocks: embedding and head 65,536 each, per layer two norms (512
 * each), q/k/v/o 16,384 each and gate/up/down 32,768 each (x4 bytes), final norm 512. */
#define TOY_WEIGHT_BLOCKS 461312ull
/* Two cuBLAS workspaces (forward and autograd threads) of 32 MiB: with no GPU named, the
 * estimator takes a current (Hopper or newer) one. */
#define CUBLAS_WORKSPACES (2ull * 32 * 1024 * 1024)

static void load(struct vf_model *m, const char *name) {
  struct vf_diag d;
  vf_model_init(m);
  int rc = name ? vf_model_load(m, name, &d)
                : vf_model_from_config_json(m, toy_config, strlen(toy_config), "toy.json", &d);
  assert_int_equal(rc, 0);
}

static struct vf_estimate run(const struct vf_model *m, const struct vf_setup *s, const char *framework) {
  struct vf_profile p;
  struct vf_alloc_conf c;
  struct vf_diag d;
  struct vf_estimate e;
  assert_int_equal(vf_profile_load(framework, NULL, &p, &d), 0);
  vf_alloc_conf_default(&c);
  assert_int_equal(vf_estimate(m, s, &p, &c, &e, &d), 0);
  return e;
}

/* At the start of the second optimizer step everything persistent is live and no
 * activation is: weights, gradients, states and the cuBLAS workspaces. */
static uint64_t optimizer_phase(const struct vf_model *m, enum vf_optimizer o) {
  struct vf_setup s;
  vf_setup_default(&s);
  s.seq = 8;
  s.optimizer = o;
  return run(m, &s, "hf").phase_allocated[VF_PHASE_OPTIMIZER];
}

static void test_toy_params(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, NULL);
  assert_int_equal(vf_model_params(&m), TOY_PARAMS);
  vf_model_cleanup(&m);
}

static void test_optimizer_state_sizes(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, NULL);
  uint64_t base = 2 * TOY_WEIGHT_BLOCKS + CUBLAS_WORKSPACES; /* weights + gradients */
  assert_int_equal(optimizer_phase(&m, VF_OPT_SGD), base);
  assert_int_equal(optimizer_phase(&m, VF_OPT_PAGED_ADAMW_8BIT), base); /* unified memory */
  /* States are created per tensor, like the weights: 461,312 bytes of blocks per fp32 copy. */
  assert_int_equal(optimizer_phase(&m, VF_OPT_ADAMW), base + 2 * TOY_WEIGHT_BLOCKS);
  assert_int_equal(optimizer_phase(&m, VF_OPT_SGD_MOMENTUM), base + TOY_WEIGHT_BLOCKS);
  assert_int_equal(optimizer_phase(&m, VF_OPT_LION), base + TOY_WEIGHT_BLOCKS);
  /* 8-bit: norms (64 < 4096 elements) stay fp32 (512-byte blocks); others one byte per
   * element plus an fp32 absmax per 2048: embedding and head 16,416 -> 16,896, q/k/v/o
   * 4,104 -> 4,608, gate/up/down 8,208 -> 8,704; two states. */
  assert_int_equal(optimizer_phase(&m, VF_OPT_ADAMW_8BIT),
                   base + 2 * (2 * 16896 + 5 * 512 + 8 * 4608 + 6 * 8704));
  /* Adafactor: a row and a column statistic per matrix (each under 512 bytes but the head's
   * 256 rows: 1,024), the embedding and norms whole; plus the step's temporary: the largest
   * matrix (the head, 16,384) squared and updated in fp32. */
  assert_int_equal(optimizer_phase(&m, VF_OPT_ADAFACTOR),
                   base + 65536 + 5 * 512 + 14 * 1024 + 1024 + 512 + 16384 * 8);
  vf_model_cleanup(&m);
}

static uint64_t frozen_bytes(const char *model, enum vf_quant q) {
  struct vf_model m;
  struct vf_setup s;
  struct vf_profile p;
  struct vf_params ps;
  struct vf_diag d;
  load(&m, model);
  vf_setup_default(&s);
  s.weights = VF_PREC_BF16;
  s.method = VF_METHOD_QLORA;
  s.quant = q;
  assert_int_equal(vf_profile_load("hf", NULL, &p, &d), 0);
  assert_int_equal(vf_params_build(&ps, &m, &s, &p, VF_TASK_CAUSAL_LM), 0);
  uint64_t bytes = 0;
  for (size_t i = 0; i < ps.n; i++)
    if (!ps.v[i].trainable) bytes += ps.v[i].bytes;
  vf_params_cleanup(&ps);
  vf_model_cleanup(&m);
  return bytes;
}

static void test_qlora_storage(void **state) {
  (void)state;
  /* llama-2-7b: per layer four 4096x4096 and three 11008x4096 projections; embedding,
   * head and norms (262,410,240 parameters) stay bf16: 524,820,480 bytes.
   * NF4: n/2 + an fp32 absmax per 64 = 9,437,184 and 25,362,432 bytes (0.5625 B/param). */
  assert_int_equal(frozen_bytes("llama-2-7b", VF_QUANT_NF4), 32ull * (4 * 9437184 + 3 * 25362432) + 524820480);
  /* Double quantization: an 8-bit absmax per 64, an fp32 scale per 16,384 and a 256-entry
   * fp32 code: 8,655,872 and 23,260,928 bytes (about 0.516 B/param). */
  assert_int_equal(frozen_bytes("llama-2-7b", VF_QUANT_NF4_DQ), 32ull * (4 * 8655872 + 3 * 23260928) + 524820480);
}

/* Per-GPU weights + gradients + optimizer states at the optimizer step. */
static uint64_t model_states(const struct vf_model *m, enum vf_shard shard, uint64_t gpus) {
  struct vf_setup s;
  vf_setup_default(&s);
  s.seq = 16;
  s.weights = VF_PREC_BF16;
  s.shard = shard;
  s.gpus = gpus;
  return run(m, &s, "deepspeed").phase_allocated[VF_PHASE_OPTIMIZER] - CUBLAS_WORKSPACES;
}

static void assert_close(uint64_t got, double want, double tolerance) {
  double diff = (double)got - want;
  if (diff < 0) diff = -diff;
  if (diff > tolerance) fail_msg("got %llu, want %.0f", (unsigned long long)got, want);
}

static void test_zero_model_states(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, "llama-2-7b");
  double psi = (double)vf_model_params(&m), n = 64, k = 12; /* fp32 master + Adam: 12 B */
  /* Blocks are 512-byte rounded, and a cached block reused unsplit counts whole (up to
   * 1 MiB over the request), as in PyTorch's allocated figure. */
  double blocks = 4 * 1024 * 1024;
  assert_close(model_states(&m, VF_SHARD_ZERO1, 64), 4 * psi + k * psi / n, blocks);
  assert_close(model_states(&m, VF_SHARD_ZERO2, 64), 2 * psi + (2 + k) * psi / n, blocks);
  assert_close(model_states(&m, VF_SHARD_ZERO3, 64), (2 + 2 + k) * psi / n, blocks);
  vf_model_cleanup(&m);
}

static void test_peaks_are_ordered(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, "llama-3.1-8b");
  struct vf_setup s;
  vf_setup_default(&s);
  s.weights = VF_PREC_BF16;
  s.method = VF_METHOD_LORA;
  struct vf_estimate e = run(&m, &s, "hf");
  assert_true(e.allocated_peak <= e.reserved_peak);
  assert_true(e.reserved_peak <= e.device_peak);
  uint64_t sum = e.allocator_slack + e.context;
  for (int c = 0; c < VF_CAT_COUNT; c++) sum += e.by_category[c];
  assert_int_equal(sum, e.device_peak);
  /* LoRA r=8 on q (4096 -> 4096) and v (4096 -> 1024) in each of 32 layers. */
  assert_int_equal(e.trainable_params, 32ull * (8 * (4096 + 4096) + 8 * (4096 + 1024)));
  vf_model_cleanup(&m);
}

static struct vf_estimate toy_run(void (*tweak)(struct vf_setup *), const char *framework) {
  struct vf_model m;
  load(&m, NULL);
  struct vf_setup s;
  vf_setup_default(&s);
  s.seq = 8;
  if (tweak) tweak(&s);
  struct vf_estimate e = run(&m, &s, framework);
  vf_model_cleanup(&m);
  return e;
}

static void two_gpus(struct vf_setup *s) { s->gpus = 2; }
static void paged(struct vf_setup *s) { s->optimizer = VF_OPT_PAGED_ADAMW_8BIT; }
static void sgd(struct vf_setup *s) { s->optimizer = VF_OPT_SGD; }
static void accumulate(struct vf_setup *s) { s->accumulation = 2; }
static void one_micro(struct vf_setup *s) { s->accumulation = 1; }

/* DDP keeps a flat gradient bucket of every trainable element besides the gradients. */
static void test_ddp_buckets(void **state) {
  (void)state;
  uint64_t one = toy_run(NULL, "hf").phase_allocated[VF_PHASE_LOAD];
  uint64_t two = toy_run(two_gpus, "hf").phase_allocated[VF_PHASE_LOAD];
  assert_int_equal(two - one, 460288); /* 115,008 x 4 bytes in one 512-byte-rounded block */
}

/* Paged 8-bit states live in unified memory: the device holds them, PyTorch's counters
 * do not. */
static void test_paged_states(void **state) {
  (void)state;
  struct vf_estimate p = toy_run(paged, "hf"), s = toy_run(sgd, "hf");
  assert_int_equal(p.allocated_peak, s.allocated_peak);
  assert_int_equal(p.reserved_peak, s.reserved_peak);
  assert_int_equal(p.device_peak - s.device_peak, 2 * TOY_PARAMS);
}

/* Accumulating, the previous micro batch's gradients are there during the forward. */
static void test_gradients_kept(void **state) {
  (void)state;
  uint64_t freed = toy_run(one_micro, "torchtune").phase_allocated[VF_PHASE_FORWARD];
  uint64_t kept = toy_run(accumulate, "torchtune").phase_allocated[VF_PHASE_FORWARD];
  assert_int_equal(kept - freed, TOY_WEIGHT_BLOCKS);
}

static struct vf_estimate llama_run(void (*tweak)(struct vf_setup *)) {
  struct vf_model m;
  load(&m, "llama-3.2-1b");
  struct vf_setup s;
  vf_setup_default(&s);
  s.weights = VF_PREC_BF16;
  s.batch = 4;
  tweak(&s);
  struct vf_estimate e = run(&m, &s, "torchtune");
  vf_model_cleanup(&m);
  return e;
}

static void plain(struct vf_setup *s) { (void)s; }
static void offloaded(struct vf_setup *s) { s->offload = VF_OFFLOAD_ACTIVATIONS; }
static void fsdp8(struct vf_setup *s) { s->shard = VF_SHARD_FSDP, s->gpus = 8; }
static void full_ckpt(struct vf_setup *s) { s->grad_ckpt = VF_CKPT_FULL; }
static void selective_ckpt(struct vf_setup *s) { s->grad_ckpt = VF_CKPT_SELECTIVE; }

/* Each memory-saving switch saves what it should, at the phase it should. */
static void test_memory_savers(void **state) {
  (void)state;
  struct vf_estimate base = llama_run(plain);
  /* Offloading keeps one layer's saved tensors on the GPU instead of 16. */
  struct vf_estimate off = llama_run(offloaded);
  assert_true(off.phase_allocated[VF_PHASE_LOSS] < base.phase_allocated[VF_PHASE_LOSS]);
  assert_int_equal(off.by_category[VF_CAT_WEIGHTS], base.by_category[VF_CAT_WEIGHTS]);
  /* Checkpointing: full keeps less than selective keeps less than none. */
  struct vf_estimate full = llama_run(full_ckpt), sel = llama_run(selective_ckpt);
  assert_true(full.phase_allocated[VF_PHASE_LOSS] < sel.phase_allocated[VF_PHASE_LOSS]);
  assert_true(sel.phase_allocated[VF_PHASE_LOSS] < base.phase_allocated[VF_PHASE_LOSS]);
  /* FSDP over 8 GPUs: an eighth of the weights stay, plus the gathered layers. */
  struct vf_estimate fsdp = llama_run(fsdp8);
  assert_true(fsdp.phase_allocated[VF_PHASE_LOAD] * 6 < base.phase_allocated[VF_PHASE_LOAD]);
}

/* "auto" and "default" stand for "not given": named, but nobody's spelling. */
static void test_enum_names(void **state) {
  (void)state;
  int v;
  char buf[256];
  assert_int_equal(vf_enum_parse(VF_ENUM_QUANT, "nf4-dq", &v), 0);
  assert_int_equal(v, VF_QUANT_NF4_DQ);
  assert_int_equal(vf_enum_parse(VF_ENUM_QUANT, "default", &v), VF_ENOTFOUND);
  assert_int_equal(vf_enum_parse(VF_ENUM_TASK, "auto", &v), VF_ENOTFOUND);
  assert_string_equal(vf_enum_name(VF_ENUM_ATTENTION, VF_ATTN_DEFAULT), "default");
  vf_enum_choices(VF_ENUM_QUANT, buf, sizeof buf);
  assert_string_equal(buf, "none, nf4, nf4-dq, int8");
  vf_enum_choices(VF_ENUM_SHARD, buf, sizeof buf);
  assert_string_equal(buf, "none, zero1, zero2, zero3, fsdp, hsdp");
  vf_enum_choices(VF_ENUM_ATTENTION, buf, 8); /* truncated, still terminated */
  assert_string_equal(buf, "eager, ");
}


/* The toy with 2 K/V heads instead of 4: K and V are expanded for attention. */
static const char toy_gqa_config[] =
    "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"intermediate_size\": 128,"
    " \"vocab_size\": 256, \"max_position_embeddings\": 128, \"tie_word_embeddings\": false,"
    " \"torch_dtype\": \"float32\"}";

/* The toy model (or its grouped-query twin) under a framework profile with one behaviour
 * switched by flip; setup by tweak. */
static struct vf_estimate flipped_run(bool gqa, const char *framework, void (*flip)(struct vf_profile *, bool),
                                      bool on, void (*tweak)(struct vf_setup *)) {
  const char *cfg = gqa ? toy_gqa_config : toy_config;
  struct vf_model m;
  struct vf_profile p;
  struct vf_alloc_conf c;
  struct vf_diag d;
  struct vf_estimate e;
  vf_model_init(&m);
  assert_int_equal(vf_model_from_config_json(&m, cfg, strlen(cfg), "toy.json", &d), 0);
  assert_int_equal(vf_profile_load(framework, NULL, &p, &d), 0);
  flip(&p, on);
  struct vf_setup s;
  vf_setup_default(&s);
  s.seq = 8;
  tweak(&s);
  vf_alloc_conf_default(&c);
  assert_int_equal(vf_estimate(&m, &s, &p, &c, &e, &d), 0);
  vf_model_cleanup(&m);
  return e;
}

static void zero_pad(struct vf_profile *p, bool on) { p->lora_zero_pad = on; }
static void view_kept(struct vf_profile *p, bool on) { p->qkv_view_kept = on; }
static void no_sync_flag(struct vf_profile *p, bool on) { p->fsdp_no_sync = on; }
static void lora_qv(struct vf_setup *s) { s->method = VF_METHOD_LORA; }
static void lora_qkv(struct vf_setup *s) {
  s->method = VF_METHOD_LORA;
  s->lora_targets |= 1u << VF_KIND_K;
}
static void fsdp_synced(struct vf_setup *s) { s->shard = VF_SHARD_FSDP, s->gpus = 2, s->accumulation = 1; }
static void fsdp_accumulating(struct vf_setup *s) { s->shard = VF_SHARD_FSDP, s->gpus = 2, s->accumulation = 2; }

/* What switching the behaviour on adds to one phase's allocated peak. */
static int64_t phase_gain(bool gqa, const char *fw, void (*flip)(struct vf_profile *, bool),
                          void (*tweak)(struct vf_setup *), enum vf_phase ph) {
  return (int64_t)flipped_run(gqa, fw, flip, true, tweak).phase_allocated[ph] -
         (int64_t)flipped_run(gqa, fw, flip, false, tweak).phase_allocated[ph];
}

/* litgpt's fused q,k,v LoRA on q and v zero-pads the adapters' output (8 positions x
 * (64 + 64) x 4 bytes per layer, kept for the padding's backward); adapting all three
 * needs no padding. */
static void test_lora_zero_pad(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "litgpt", zero_pad, lora_qv, VF_PHASE_LOSS), 2 * 4096);
  assert_int_equal(phase_gain(false, "litgpt", zero_pad, lora_qkv, VF_PHASE_LOSS), 0);
}

/* Without K/V expansion V is a view of the fused output, keeping q and k's share of it
 * (8 x 128 x 4 bytes per layer); expanded, V is a copy and the output is freed. */
static void test_qkv_view(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "litgpt", view_kept, lora_qv, VF_PHASE_LOSS), 2 * 4096);
  assert_int_equal(phase_gain(true, "litgpt", view_kept, lora_qv, VF_PHASE_LOSS), 0);
}

/* FSDP accumulating under no_sync keeps whole gradients through the next micro batch:
 * per unit the full block instead of the half shard (root 131,584 for 65,536 bytes after
 * 512-byte rounding, each layer 164,352 for 82,432). */
static void test_fsdp_no_sync(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "litgpt", no_sync_flag, fsdp_accumulating, VF_PHASE_FORWARD),
                   (131584 - 66048) + 2 * (164352 - 82432));
}

static void softmax_input(struct vf_profile *p, bool on) { p->eager_softmax_saves_input = on; }
static void eager(struct vf_setup *s) { s->attention = VF_ATTN_EAGER; }

/* Under torch < 1.11 eager attention's softmax keeps its input as well as its output: one
 * more fp32 score tensor per layer (4 heads x 8 x 8 keys x 4 bytes), alive into the loss. */
static void test_softmax_saves_input(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "hf", softmax_input, eager, VF_PHASE_LOSS), 2 * 1024);
}

static void zero_in_place(struct vf_profile *p, bool on) { p->zero_grad_frees = !on; }

/* So they are when zero_grad zeroes them in place instead of freeing them (the Trainer's
 * model.zero_grad() under torch < 2.0), even without accumulation. */
static void test_zero_grad_in_place(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "hf", zero_in_place, one_micro, VF_PHASE_FORWARD), TOY_WEIGHT_BLOCKS);
}

static void flat_flag(struct vf_profile *p, bool on) { p->fsdp_flat_params = on; }

/* FSDP1's flat units: at a layer's gradient reduction its parts (164,352 bytes) are alive
 * next to their concatenation, and the root unit holds only its head's part (head and
 * final norm, 66,048 after rounding) until the embedding's arrives, instead of its whole
 * unsharded gradient and shard (131,584 + 66,048) from the head's backward on. */
static void test_flat_params(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "litgpt", flat_flag, fsdp_synced, VF_PHASE_BACKWARD),
                   164352 + 66048 - (131584 + 66048));
}

/* Allocated peaks of each phase, from the estimate and from a replay of every layer. */
static void assert_extension_exact(const struct vf_model *m, const struct vf_setup *s, const char *framework) {
  struct vf_profile p;
  struct vf_alloc_conf c;
  struct vf_diag d;
  struct vf_estimate extended, replayed;
  assert_int_equal(vf_profile_load(framework, NULL, &p, &d), 0);
  vf_alloc_conf_default(&c);
  assert_int_equal(vf_estimate(m, s, &p, &c, &extended, &d), 0);
  assert_int_equal(vf_estimate_replaying(m, s, &p, &c, UINT64_MAX, NULL, NULL, &replayed, &d), 0);
  /* Not linear in the layer count: the 512-byte rounding of tensors summed over all layers
   * (a flat shard, the optimizer's foreach temporary), and what the allocator counts beyond
   * the live tensors: a cached block reused whole when its remainder would be under 1 MiB. */
  const uint64_t slop = 65536 + 1048576;
  for (int ph = 0; ph < VF_PHASE_COUNT; ph++)
    assert_in_range(extended.phase_allocated[ph], replayed.phase_allocated[ph] - slop,
                    replayed.phase_allocated[ph] + slop);
  assert_int_equal(extended.peak_phase, replayed.peak_phase);
}

/* The toy with a 16,384-token vocabulary, so that the root unit's gradients (two
 * 4 MiB tensors) outweigh a layer's, and `layers` layers; trained with FSDP on two GPUs,
 * accumulating two micro batches of seq tokens. */
static void big_vocab_fsdp(struct vf_model *m, struct vf_setup *s, unsigned layers, uint64_t seq) {
  char cfg[400];
  snprintf(cfg, sizeof cfg,
           "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": %u,"
           " \"num_attention_heads\": 4, \"num_key_value_heads\": 4, \"intermediate_size\": 128,"
           " \"vocab_size\": 16384, \"tie_word_embeddings\": false, \"torch_dtype\": \"float32\"}",
           layers);
  struct vf_diag d;
  vf_model_init(m);
  assert_int_equal(vf_model_from_config_json(m, cfg, strlen(cfg), "big-vocab.json", &d), 0);
  vf_setup_default(s);
  s->seq = seq;
  fsdp_accumulating(s);
}

/* Models deeper than six layers are extended from replays of three and six. The highest
 * moment of a phase can move as layers are added: here the big-vocabulary toy with 40
 * layers under litgpt's FSDP, accumulating, whose backward peaks at the root's gradient
 * assembly at its end with few layers, and at the top layer's backward (everything the
 * forward saved) with many. The extension still matches the full replay. */
static void test_layer_extension(void **state) {
  (void)state;
  struct vf_model m;
  struct vf_setup s;
  big_vocab_fsdp(&m, &s, 40, 64);
  assert_extension_exact(&m, &s, "litgpt");
  vf_model_cleanup(&m);
  /* Calibration case litgpt-ch-03: gemma-2b, bf16, full checkpointing, FSDP on 4 GPUs. */
  load(&m, "gemma-2b");
  vf_setup_default(&s);
  s.weights = VF_PREC_BF16, s.seq = 512, s.grad_ckpt = VF_CKPT_FULL, s.shard = VF_SHARD_FSDP, s.gpus = 4;
  assert_extension_exact(&m, &s, "litgpt");
  vf_model_cleanup(&m);
}

/* A middle micro batch under no_sync adds into whole gradients and keeps them: when the
 * big-vocabulary toy's root unit assembles its gradient at the end of the backward, both
 * layers still hold theirs whole (164,352 bytes each), where the last micro batch has
 * reduce-scattered them to half shards (82,432 each). */
static void test_no_sync_middle_micro(void **state) {
  (void)state;
  struct vf_model m;
  struct vf_setup s;
  big_vocab_fsdp(&m, &s, 2, 8);
  uint64_t two = run(&m, &s, "litgpt").phase_allocated[VF_PHASE_BACKWARD];
  s.accumulation = 3;
  uint64_t three = run(&m, &s, "litgpt").phase_allocated[VF_PHASE_BACKWARD];
  assert_int_equal(three - two, 2 * (164352 - 82432));
  vf_model_cleanup(&m);
}

static struct vf_estimate toy_lengths(enum vf_lengths lengths, enum vf_precision amp, const char *framework) {
  struct vf_model m;
  load(&m, NULL);
  struct vf_setup s;
  vf_setup_default(&s);
  s.batch = 4, s.seq = 2048, s.amp = amp, s.lengths = lengths;
  struct vf_estimate e = run(&m, &s, framework);
  vf_model_cleanup(&m);
  return e;
}

/* Batches of varied lengths leave the cache holding one more set of the tensors sized by
 * the batch's tokens: reserved reaches the allocated peak plus the activations and
 * temporaries live there, less the temporaries sized by the weights (under autocast the
 * two layers' bf16 weight copies, 81,920 bytes each). Fixed lengths reserve less here. */
static void test_varied_lengths(void **state) {
  (void)state;
  struct vf_estimate fixed = toy_lengths(VF_LENGTHS_FIXED, VF_PREC_NONE, "hf");
  struct vf_estimate varied = toy_lengths(VF_LENGTHS_VARIED, VF_PREC_NONE, "hf");
  uint64_t tokens = varied.by_category[VF_CAT_ACTIVATIONS] + varied.by_category[VF_CAT_TEMPORARIES];
  assert_int_equal(varied.lengths, VF_LENGTHS_VARIED);
  assert_int_equal(varied.allocated_peak, fixed.allocated_peak);
  assert_int_equal(varied.reserved_peak, varied.allocated_peak + tokens);
  assert_true(fixed.reserved_peak < varied.reserved_peak);
  varied = toy_lengths(VF_LENGTHS_VARIED, VF_PREC_BF16, "hf");
  tokens = varied.by_category[VF_CAT_ACTIVATIONS] + varied.by_category[VF_CAT_TEMPORARIES] - 2 * 81920;
  assert_int_equal(varied.reserved_peak, varied.allocated_peak + tokens);
  /* The framework's recipes decide when the setup does not: torchtune pads, hf does not. */
  assert_int_equal(toy_lengths(VF_LENGTHS_DEFAULT, VF_PREC_NONE, "hf").lengths, VF_LENGTHS_FIXED);
  assert_int_equal(toy_lengths(VF_LENGTHS_DEFAULT, VF_PREC_NONE, "torchtune").lengths, VF_LENGTHS_VARIED);
}

static void qlora_nf4(struct vf_setup *s) {
  s->weights = VF_PREC_BF16;
  s->method = VF_METHOD_QLORA;
  s->quant = VF_QUANT_NF4;
}

/* Quantizing at load: the last down projection (n = 4096 x 1024) is quantized next to
 * every other weight, as a bf16 copy (2n) plus 66n of search temporaries, before its nf4
 * form (n/2 + n/16 bytes) exists (the cuBLAS workspaces come with the first matmul). */
static void test_quantize_at_load(void **state) {
  (void)state;
  static const char wide_mlp[] =
      "{\"model_type\": \"llama\", \"hidden_size\": 1024, \"num_hidden_layers\": 4,"
      " \"num_attention_heads\": 8, \"intermediate_size\": 4096, \"vocab_size\": 256,"
      " \"max_position_embeddings\": 128, \"torch_dtype\": \"bfloat16\"}";
  struct vf_model m;
  struct vf_diag d;
  vf_model_init(&m);
  assert_int_equal(vf_model_from_config_json(&m, wide_mlp, strlen(wide_mlp), "wide.json", &d), 0);
  struct vf_setup s;
  vf_setup_default(&s);
  s.seq = 8;
  qlora_nf4(&s);
  struct vf_profile p;
  struct vf_alloc_conf c;
  struct vf_estimate with, without;
  assert_int_equal(vf_profile_load("torchtune", NULL, &p, &d), 0);
  assert_int_equal(p.quant_load_bytes, 66);
  vf_alloc_conf_default(&c);
  assert_int_equal(vf_estimate(&m, &s, &p, &c, &with, &d), 0);
  p.quant_load_bytes = 0;
  assert_int_equal(vf_estimate(&m, &s, &p, &c, &without, &d), 0);
  uint64_t n = 4096 * 1024, gain = with.phase_allocated[VF_PHASE_LOAD] - without.phase_allocated[VF_PHASE_LOAD];
  /* A block is not split when less than 1 MiB would remain: allocated may count that. */
  assert_in_range(gain, 68 * n - (n / 2 + n / 16), 68 * n - (n / 2 + n / 16) + (1u << 20));
  vf_model_cleanup(&m);
}

static void dequant_extra(struct vf_profile *p, bool on) { p->dequant_extra_bytes = on ? 12 : 0; }

/* torchao's pure-PyTorch NF4 dequantization of 2024 holds 14 bytes per element (int64
 * codes, looked-up values, scaled halves, the stacked result) where bitsandbytes' kernel
 * writes only the 2-byte weight: the toy's largest weight (64 x 128) costs 8,192 x 12
 * bytes more at the forward's peak, and its backward dequantizes again. */
static void test_dequant_temporaries(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "torchtune", dequant_extra, qlora_nf4, VF_PHASE_FORWARD), 8192 * 12);
  assert_true(phase_gain(false, "torchtune", dequant_extra, qlora_nf4, VF_PHASE_BACKWARD) > 0);
}

static void expect_invalid(struct vf_setup *s, const char *model, const char *why) {
  struct vf_model m;
  struct vf_profile p;
  struct vf_alloc_conf c;
  struct vf_diag d;
  struct vf_estimate e;
  load(&m, model);
  assert_int_equal(vf_profile_load("hf", NULL, &p, &d), 0);
  vf_alloc_conf_default(&c);
  vf_diag_clear(&d);
  assert_int_equal(vf_estimate(&m, s, &p, &c, &e, &d), VF_EINVAL);
  if (!strstr(d.msg, why)) fail_msg("message '%s' lacks '%s'", d.msg, why);
  vf_model_cleanup(&m);
}

static void held_logits(struct vf_profile *p, bool on) { p->logits_held_bytes = on ? 4 : 0; }

/* Fabric converts the head's output to fp32 after the forward and litgpt's loop variable
 * holds it until the next micro batch's forward has converted its own: 8 tokens x 256
 * logits x 4 bytes stay through the optimizer and into the next forward. */
static void test_held_logits(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "litgpt", held_logits, qlora_nf4, VF_PHASE_OPTIMIZER), 8 * 256 * 4);
  assert_int_equal(phase_gain(false, "litgpt", held_logits, qlora_nf4, VF_PHASE_FORWARD), 8 * 256 * 4);
}

static void quant_inputs(struct vf_profile *p, bool on) { p->quant_input_bytes = on ? 2 : 0; }
static void graph_held(struct vf_profile *p, bool on) { p->graph_held = on; }

/* A 4-bit projection keeps its bf16 input once per input tensor, however many projections
 * read it: per layer the q/k/v input, the o input, the gate/up input (64 wide each) and the
 * down input (128 wide), 8 tokens x 320 x 2 bytes, and the head's input (1,024 bytes) when
 * the head is quantized; under litgpt the previous micro batch's are there too (below). */
static void test_quantized_inputs(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "hf", quant_inputs, qlora_nf4, VF_PHASE_LOSS), 2 * 5120);
  assert_int_equal(phase_gain(false, "litgpt", quant_inputs, qlora_nf4, VF_PHASE_LOSS), 2 * (2 * 5120 + 1024));
}

/* Those inputs are attributes of their autograd nodes: while litgpt's loop holds the last
 * micro batch's graph, they stay through the next forward until its loss is computed. */
static void test_graph_held(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "litgpt", graph_held, qlora_nf4, VF_PHASE_FORWARD), 2 * 5120 + 1024);
  assert_int_equal(phase_gain(false, "litgpt", graph_held, qlora_nf4, VF_PHASE_OPTIMIZER), 2 * 5120 + 1024);
}

static void gelu_new(struct vf_profile *p, bool on) { p->gelu_new_saves = on ? 4 : 1; }
static void full_load(struct vf_profile *p, bool on) { p->fsdp_full_load = on; }
static void lora_fsdp8(struct vf_setup *s) { s->method = VF_METHOD_LORA, s->shard = VF_SHARD_FSDP, s->gpus = 8; }

/* The toy model as GPT-2 (gelu_new MLP, 256 wide) under hf with one behaviour flipped. */
static int64_t gpt2_gain(void (*flip)(struct vf_profile *, bool), enum vf_phase ph) {
  static const char cfg[] = "{\"model_type\": \"gpt2\", \"n_embd\": 64, \"n_layer\": 2, \"n_head\": 4,"
                            " \"vocab_size\": 256, \"n_positions\": 128}";
  struct vf_model m;
  struct vf_profile p;
  struct vf_alloc_conf c;
  struct vf_diag d;
  struct vf_estimate on, off;
  struct vf_setup s;
  vf_model_init(&m);
  assert_int_equal(vf_model_from_config_json(&m, cfg, strlen(cfg), "gpt2.json", &d), 0);
  assert_string_equal(m.arch.activation, "gelu_new");
  assert_int_equal(vf_profile_load("hf", NULL, &p, &d), 0);
  vf_setup_default(&s);
  s.seq = 8;
  vf_alloc_conf_default(&c);
  flip(&p, true);
  assert_int_equal(vf_estimate(&m, &s, &p, &c, &on, &d), 0);
  flip(&p, false);
  assert_int_equal(vf_estimate(&m, &s, &p, &c, &off, &d), 0);
  vf_model_cleanup(&m);
  return (int64_t)on.phase_allocated[ph] - (int64_t)off.phase_allocated[ph];
}

/* transformers' gelu_new is a formula of separate ops: it keeps its input, 0.5 x, the tanh
 * and 1 + tanh, three MLP-wide tensors (8 tokens x 256 x 4 bytes) per layer more than a
 * fused GELU. */
static void test_gelu_new(void **state) {
  (void)state;
  assert_int_equal(gpt2_gain(gelu_new, VF_PHASE_LOSS), 2 * 3 * 8 * 256 * 4);
}

/* Lightning's FSDP loads a full checkpoint with every unit gathered at once: the whole
 * model next to the shards, in fp32 the toy's parameters and its LoRA adapters (rank 8 on
 * q and v: 2 layers x 2 x 2 x 8 x 64), one allocation per unit. */
static void test_full_load(void **state) {
  (void)state;
  int64_t gain = phase_gain(false, "litgpt", full_load, lora_fsdp8, VF_PHASE_LOAD);
  uint64_t whole = (TOY_PARAMS + 2 * 2 * 2 * 8 * 64) * 4;
  assert_in_range(gain, whole, whole + 3 * 512);
}

static void zero_grad_late(struct vf_profile *p, bool on) { p->zero_grad_before_backward = on; }
static void full(struct vf_setup *s) { s->method = VF_METHOD_FULL; }

/* Lightning's closure zeroes the gradients between training_step and backward: the first
 * step's gradients (every weight's, fp32) are still there through the second step's forward
 * and loss, and gone before its backward makes new ones. */
static void test_zero_grad_before_backward(void **state) {
  (void)state;
  int64_t gain = phase_gain(false, "hf", zero_grad_late, full, VF_PHASE_LOSS);
  assert_in_range(gain, TOY_PARAMS * 4, TOY_PARAMS * 4 + 32 * 512);
  assert_int_equal(phase_gain(false, "hf", zero_grad_late, full, VF_PHASE_BACKWARD), 0);
}

/* Validation after the steps: the optimizer's states are there and no gradient is
 * (zero_grad freed them), one layer's tensors at a time, and the loss over all the logits
 * at once (8 positions x 256 logits x the profile's peak bytes per logit), so it lies
 * between the optimizer phase's start and that plus a layer and the loss. Off, the phase
 * is empty. Saving unsharded weights adds nothing to what lives after the steps. */
static void test_eval_and_save(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, NULL);
  struct vf_setup s;
  vf_setup_default(&s);
  s.seq = 8;
  s.eval = VF_EVAL_NO;
  struct vf_estimate off = run(&m, &s, "hf");
  assert_int_equal(off.phase_allocated[VF_PHASE_EVAL], 0);
  s.eval = VF_EVAL_YES;
  struct vf_estimate on = run(&m, &s, "hf");
  struct vf_profile p;
  struct vf_diag d;
  assert_int_equal(vf_profile_load("hf", NULL, &p, &d), 0);
  uint64_t states = 2 * TOY_PARAMS * 4, loss = 8 * 256 * (uint64_t)p.logits_peak_bytes;
  uint64_t eval = on.phase_allocated[VF_PHASE_EVAL], save = on.phase_allocated[VF_PHASE_SAVE];
  assert_true(eval >= TOY_PARAMS * 4 + states + loss);
  assert_true(eval < on.phase_allocated[VF_PHASE_LOSS]);
  assert_int_equal(save, off.phase_allocated[VF_PHASE_SAVE]);
  assert_true(save >= TOY_PARAMS * 4 + states && save < eval);
  vf_model_cleanup(&m);
}

/* transformers 5.23 runs Mixtral's experts as grouped matmuls that autocast does not cast:
 * under fp32 weights and bf16 autocast no expert weight is copied to bf16 (2 layers x 4
 * experts x 3 projections of 64 x 128, 2 bytes each, kept for backward), and the experts
 * compute in fp32 instead (their few kept activations grow). */
static void test_moe_grouped_mm(void **state) {
  (void)state;
  static const char cfg[] = "{\"model_type\": \"mixtral\", \"hidden_size\": 64, \"num_hidden_layers\": 2,"
                            " \"num_attention_heads\": 4, \"num_key_value_heads\": 4, \"intermediate_size\": 128,"
                            " \"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"vocab_size\": 256,"
                            " \"max_position_embeddings\": 128, \"tie_word_embeddings\": false}";
  struct vf_model m;
  struct vf_diag d;
  vf_model_init(&m);
  assert_int_equal(vf_model_from_config_json(&m, cfg, strlen(cfg), "moe.json", &d), 0);
  assert_int_equal(m.arch.experts, 4);
  struct vf_setup s;
  vf_setup_default(&s);
  s.seq = 8;
  s.amp = VF_PREC_BF16;
  s.method = VF_METHOD_LORA;
  struct vf_profile p;
  struct vf_alloc_conf c;
  struct vf_estimate grouped, linear;
  vf_alloc_conf_default(&c);
  assert_int_equal(vf_profile_load("hf", NULL, &p, &d), 0);
  p.moe_grouped_mm = true;
  assert_int_equal(vf_estimate(&m, &s, &p, &c, &grouped, &d), 0);
  p.moe_grouped_mm = false;
  assert_int_equal(vf_estimate(&m, &s, &p, &c, &linear, &d), 0);
  int64_t copies = 2 * 4 * 3 * 64 * 128 * 2;
  int64_t saved = (int64_t)linear.phase_allocated[VF_PHASE_LOSS] - (int64_t)grouped.phase_allocated[VF_PHASE_LOSS];
  assert_in_range(saved, copies - 64 * 512, copies);
  vf_model_cleanup(&m);
}

/* DoRA keeps, per adapted projection (q and v, 64 x 64), the base weight's copy in the
 * adapter's dtype and two outputs (8 x 64 x 4 bytes each) more than LoRA does; its
 * magnitude vectors (64 each, a 512-byte block) and their AdamW states come on top. */
static void test_dora(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, NULL);
  struct vf_setup s;
  vf_setup_default(&s);
  s.seq = 8;
  s.method = VF_METHOD_LORA;
  uint64_t lora = run(&m, &s, "hf").phase_allocated[VF_PHASE_LOSS];
  s.method = VF_METHOD_DORA;
  uint64_t dora = run(&m, &s, "hf").phase_allocated[VF_PHASE_LOSS];
  struct vf_profile p;
  struct vf_diag d;
  assert_int_equal(vf_profile_load("hf", NULL, &p, &d), 0);
  /* weights and AdamW's two states, and the gradients while zero_grad keeps them */
  uint64_t kept = 2 * 2 * (64 * 64 * 4 + 2 * 8 * 64 * 4), magnitudes = 4 * 512 * (p.zero_grad_frees ? 3 : 4);
  assert_int_equal(dora - lora, kept + magnitudes);
  vf_model_cleanup(&m);
}

static void test_impossible_setups(void **state) {
  (void)state;
  struct vf_setup s;
  vf_setup_default(&s);
  s.method = VF_METHOD_QLORA;
  s.quant = VF_QUANT_NONE;
  expect_invalid(&s, "llama-2-7b", "contradicts --quant none");
  vf_setup_default(&s);
  s.tp = 3;
  s.gpus = 3;
  expect_invalid(&s, "llama-2-7b", "does not divide the 32 attention heads");
  vf_setup_default(&s);
  s.seq = 0;
  expect_invalid(&s, "gpt2", "--seq");
  vf_setup_default(&s);
  s.gpus = 0;
  expect_invalid(&s, "gpt2", "--gpus");
  vf_setup_default(&s);
  s.shard = VF_SHARD_ZERO3;
  s.tp = 8;
  s.gpus = 4;
  expect_invalid(&s, "llama-2-7b", "--tp larger than --gpus");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_toy_params),       cmocka_unit_test(test_optimizer_state_sizes),
      cmocka_unit_test(test_qlora_storage),    cmocka_unit_test(test_zero_model_states),
      cmocka_unit_test(test_peaks_are_ordered), cmocka_unit_test(test_impossible_setups),
      cmocka_unit_test(test_ddp_buckets),      cmocka_unit_test(test_paged_states),
      cmocka_unit_test(test_gradients_kept),   cmocka_unit_test(test_memory_savers),
      cmocka_unit_test(test_enum_names),       cmocka_unit_test(test_lora_zero_pad),
      cmocka_unit_test(test_qkv_view),         cmocka_unit_test(test_fsdp_no_sync),
      cmocka_unit_test(test_quantize_at_load), cmocka_unit_test(test_softmax_saves_input),
      cmocka_unit_test(test_zero_grad_in_place),
      cmocka_unit_test(test_flat_params),      cmocka_unit_test(test_dequant_temporaries),
      cmocka_unit_test(test_layer_extension),  cmocka_unit_test(test_no_sync_middle_micro),
      cmocka_unit_test(test_varied_lengths),   cmocka_unit_test(test_held_logits),
      cmocka_unit_test(test_quantized_inputs), cmocka_unit_test(test_graph_held),
      cmocka_unit_test(test_gelu_new),         cmocka_unit_test(test_full_load),
      cmocka_unit_test(test_dora),             cmocka_unit_test(test_zero_grad_before_backward),
      cmocka_unit_test(test_eval_and_save),    cmocka_unit_test(test_moe_grouped_mm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

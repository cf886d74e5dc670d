/* The estimator against hand-computed bytes: optimizer states, quantized storage, ZeRO
 * model states (the ZeRO paper's formulas), a toy model's replay, and bad setups. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/estimate/estimate.h"
#include "core/params.h"
#include "io/profile.h"
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

/* A model from a config.json text. */
static void load_config(struct vf_model *m, const char *cfg) {
  struct vf_diag d;
  vf_model_init(m);
  assert_int_equal(vf_model_from_config_json(m, cfg, strlen(cfg), "config.json", &d), 0);
}

static struct vf_estimate run(const struct vf_model *m, const struct vf_setup *s, const char *framework) {
  struct vf_profile p;
  struct vf_alloc_conf c;
  struct vf_diag d;
  struct vf_estimate e;
  assert_int_equal(profile_read(framework, NULL, &p, &d), 0);
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
  /* States are created per tensor, like the weights: 461,312 bytes of blocks per fp32 copy. */
  assert_int_equal(optimizer_phase(&m, VF_OPT_ADAMW), base + 2 * TOY_WEIGHT_BLOCKS);
  assert_int_equal(optimizer_phase(&m, VF_OPT_SGD_MOMENTUM), base + TOY_WEIGHT_BLOCKS);
  assert_int_equal(optimizer_phase(&m, VF_OPT_LION), base + TOY_WEIGHT_BLOCKS);
  /* bitsandbytes' 8-bit AdamW under the HF Trainer, two states per tensor: norms (64 <
   * 4096 elements) and the embedding (registered to 32 bits) fp32; the others one byte per
   * element (head 16,384, q/k/v/o 4,096, gate/up/down 8,192) and an fp32 absmax per 256
   * elements in a tensor of its own (one 512-byte block each). None reaches the 1e5
   * elements from which the paged one pages its states. */
  uint64_t eight_bit = base + 2 * (65536 + 5 * 512 + 16384 + 512 + 8 * (4096 + 512) + 6 * (8192 + 512));
  assert_int_equal(optimizer_phase(&m, VF_OPT_ADAMW_8BIT), eight_bit);
  assert_int_equal(optimizer_phase(&m, VF_OPT_PAGED_ADAMW_8BIT), eight_bit);
  /* Adafactor: a row and a column statistic per matrix (each under 512 bytes but the 256
   * rows of the head and the embedding: 1,024), the norms whole; plus the step's temporary:
   * the largest tensor (16,384) squared and updated in fp32. */
  assert_int_equal(optimizer_phase(&m, VF_OPT_ADAFACTOR),
                   base + 2 * (1024 + 512) + 5 * 512 + 14 * 1024 + 16384 * 8);
  vf_model_cleanup(&m);
}

/* Adafactor updates one tensor at a time, with two fp32 temporaries of its size: on the toy
 * with a tied 1,024-token embedding, the embedding's (65,536 elements) rather than the
 * largest linear's. Its states: the embedding's 1,024 rows and 64 columns, the 14 block
 * matrices' two statistics (1,024 each) and the norms (5 x 512). */
static void test_adafactor_largest_tensor(void **state) {
  (void)state;
  static const char cfg[] = "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2,"
                            " \"num_attention_heads\": 4, \"num_key_value_heads\": 4, \"intermediate_size\": 128,"
                            " \"vocab_size\": 1024, \"max_position_embeddings\": 128, \"tie_word_embeddings\": true,"
                            " \"torch_dtype\": \"float32\"}";
  struct vf_model m;
  load_config(&m, cfg);
  uint64_t states = 4096 + 512 + 14 * 1024 + 5 * 512;
  assert_int_equal(optimizer_phase(&m, VF_OPT_ADAFACTOR) - optimizer_phase(&m, VF_OPT_SGD), states + 65536 * 8);
  vf_model_cleanup(&m);
}

static uint64_t frozen_bytes(const char *model, enum vf_quant q, enum vf_shard shard) {
  struct vf_model m;
  struct vf_setup s;
  struct vf_profile p;
  struct params ps;
  struct vf_diag d;
  load(&m, model);
  vf_setup_default(&s);
  s.weights = VF_PREC_BF16;
  s.method = VF_METHOD_QLORA;
  s.quant = q;
  s.shard = shard;
  s.gpus = shard == VF_SHARD_NONE ? 1 : 2;
  assert_int_equal(profile_read("hf", NULL, &p, &d), 0);
  assert_int_equal(params_build(&ps, &m, &s, &p, VF_TASK_CAUSAL_LM), 0);
  uint64_t bytes = 0;
  for (size_t i = 0; i < ps.n; i++)
    if (!ps.v[i].trainable) bytes += ps.v[i].bytes;
  params_cleanup(&ps);
  vf_model_cleanup(&m);
  return bytes;
}

static void test_qlora_storage(void **state) {
  (void)state;
  /* llama-2-7b: per layer four 4096x4096 and three 11008x4096 projections; embedding,
   * head and norms (262,410,240 parameters) up-cast to fp32 by PEFT's
   * prepare_model_for_kbit_training: 1,049,640,960 bytes.
   * NF4: n/2 + an fp32 absmax per 64 = 9,437,184 and 25,362,432 bytes (0.5625 B/param). */
  uint64_t nf4 = 32ull * (4 * 9437184 + 3 * 25362432);
  assert_int_equal(frozen_bytes("llama-2-7b", VF_QUANT_NF4, VF_SHARD_NONE), nf4 + 1049640960);
  /* Double quantization: an 8-bit absmax per 64, an fp32 scale per 16,384 and a 256-entry
   * fp32 code: 8,655,872 and 23,260,928 bytes (about 0.516 B/param). */
  uint64_t nf4_dq = 32ull * (4 * 8655872 + 3 * 23260928);
  assert_int_equal(frozen_bytes("llama-2-7b", VF_QUANT_NF4_DQ, VF_SHARD_NONE), nf4_dq + 1049640960);
  /* Sharded QLoRA skips the up-cast: the rest stays bf16, 524,820,480 bytes. */
  assert_int_equal(frozen_bytes("llama-2-7b", VF_QUANT_NF4_DQ, VF_SHARD_FSDP), nf4_dq + 524820480);
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
  /* ZeRO-1 and 2 keep the last backward's two reduce buckets, 4096 x 4096 bf16 each. */
  double buckets = 2.0 * 4096 * 4096 * 2;
  assert_close(model_states(&m, VF_SHARD_ZERO1, 64), 4 * psi + k * psi / n + buckets, blocks);
  assert_close(model_states(&m, VF_SHARD_ZERO2, 64), 2 * psi + (2 + k) * psi / n + buckets, blocks);
  /* ZeRO-3 keeps one IPG buffer of as many elements, and its 65 norms of 4096 (under
   * 10 x hidden) gathered; its step flattens the gradient partitions of its one sub group
   * (under 1e9 elements) and converts them to fp32: 2 + 4 bytes an element at once. */
  double ipg = 4096.0 * 4096 * 2, persistent = 65.0 * 4096 * 2;
  assert_close(model_states(&m, VF_SHARD_ZERO3, 64), (2 + 2 + k + 2 + 4) * psi / n + ipg + persistent, blocks);
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
static void accumulate(struct vf_setup *s) { s->accumulation = 2; }
static void one_micro(struct vf_setup *s) { s->accumulation = 1; }

/* DDP keeps a flat gradient bucket of every trainable element besides the gradients. */
static void test_ddp_buckets(void **state) {
  (void)state;
  uint64_t one = toy_run(NULL, "hf").phase_allocated[VF_PHASE_LOAD];
  uint64_t two = toy_run(two_gpus, "hf").phase_allocated[VF_PHASE_LOAD];
  assert_int_equal(two - one, 460288); /* 115,008 x 4 bytes in one 512-byte-rounded block */
}

/* Paged 8-bit states of tensors from 1e5 elements on live in unified memory: the device
 * holds them, PyTorch's counters do not. In Llama 3.2 1B that is every matrix (two uint8
 * states each, the tied embedding's two fp32 under the HF Trainer), not the norms, and no
 * absmax. */
static void test_paged_states(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, "llama-3.2-1b");
  struct vf_setup s;
  vf_setup_default(&s);
  s.weights = VF_PREC_BF16;
  s.seq = 64;
  s.optimizer = VF_OPT_ADAMW_8BIT;
  struct vf_estimate unpaged = run(&m, &s, "hf");
  s.optimizer = VF_OPT_PAGED_ADAMW_8BIT;
  struct vf_estimate pages = run(&m, &s, "hf");
  uint64_t embedding = 128256ull * 2048, norms = (16 * 2 + 1) * 2048;
  uint64_t paged_bytes = 2 * (4 * embedding + (vf_model_params(&m) - embedding - norms));
  assert_int_equal(unpaged.phase_allocated[VF_PHASE_OPTIMIZER] - pages.phase_allocated[VF_PHASE_OPTIMIZER],
                   paged_bytes);
  /* The breakdown counts them as optimizer states all the same. */
  assert_int_equal(pages.by_category[VF_CAT_OPTIMIZER], unpaged.by_category[VF_CAT_OPTIMIZER]);
  vf_model_cleanup(&m);
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
  if (tweak) tweak(&s);
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

/* The default setup over 8 positions, changed by tweak. */
static struct vf_setup toy_setup(void (*tweak)(struct vf_setup *)) {
  struct vf_setup s;
  vf_setup_default(&s);
  s.seq = 8, s.lengths = VF_LENGTHS_FIXED;
  if (tweak) tweak(&s);
  return s;
}

/* A model of cfg under a framework profile with one behaviour switched by flip; setup by
 * tweak. */
static struct vf_estimate config_run(const char *cfg, const char *framework, void (*flip)(struct vf_profile *, bool),
                                     bool on, void (*tweak)(struct vf_setup *)) {
  struct vf_model m;
  struct vf_profile p;
  struct vf_alloc_conf c;
  struct vf_diag d;
  struct vf_estimate e;
  load_config(&m, cfg);
  assert_int_equal(profile_read(framework, NULL, &p, &d), 0);
  flip(&p, on);
  struct vf_setup s = toy_setup(tweak);
  vf_alloc_conf_default(&c);
  assert_int_equal(vf_estimate(&m, &s, &p, &c, &e, &d), 0);
  vf_model_cleanup(&m);
  return e;
}

static void unchanged(struct vf_profile *p, bool on) { (void)p, (void)on; }
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

/* What switching the behaviour on adds to one phase's allocated peak, for a model of cfg. */
static int64_t config_gain(const char *cfg, const char *fw, void (*flip)(struct vf_profile *, bool),
                           void (*tweak)(struct vf_setup *), enum vf_phase ph) {
  return (int64_t)config_run(cfg, fw, flip, true, tweak).phase_allocated[ph] -
         (int64_t)config_run(cfg, fw, flip, false, tweak).phase_allocated[ph];
}

/* The same for the toy model (or its grouped-query twin). */
static int64_t phase_gain(bool gqa, const char *fw, void (*flip)(struct vf_profile *, bool),
                          void (*tweak)(struct vf_setup *), enum vf_phase ph) {
  return config_gain(gqa ? toy_gqa_config : toy_config, fw, flip, tweak, ph);
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

static void compute_dtype_grads(struct vf_profile *p, bool on) { p->fsdp_grads_in_compute_dtype = on; }
static void fsdp_accumulating_bf16(struct vf_setup *s) {
  fsdp_accumulating(s);
  s->weights = VF_PREC_FP32, s->amp = VF_PREC_BF16;
}

/* With FSDP's mixed precision reducing in bf16 (accelerate's plugin) the whole gradients
 * no_sync keeps are bf16, half the fp32 ones: root 66,048 for 131,584 bytes after 512-byte
 * rounding, each layer 82,432 for 164,352. Without autocast there is no narrower dtype. */
static void test_fsdp_grads_in_compute_dtype(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "hf", compute_dtype_grads, fsdp_accumulating_bf16, VF_PHASE_FORWARD),
                   -((131584 - 66048) + 2 * (164352 - 82432)));
  assert_int_equal(phase_gain(false, "hf", compute_dtype_grads, fsdp_accumulating, VF_PHASE_FORWARD), 0);
}

static void adapter_units_train(struct vf_profile *p, bool on) { p->fsdp_adapter_units_train = on; }
static void lora_fsdp(struct vf_setup *s) {
  lora_qv(s);
  fsdp_synced(s);
}

/* An FSDP1 unit holding a LoRA adapter requires grad as a whole (Lightning's FSDPStrategy):
 * after the backward each of the toy's 2 layers keeps a gradient shard of all its 43,136
 * elements (41,088 frozen, 2 x 1,024 of q's and v's adapters), 86,272 bytes fp32 over 2
 * GPUs (86,528 after 512-byte rounding), instead of its adapters' 4,096: 82,432 bytes more
 * a layer. The root unit (embedding, norm, head) holds no adapter and takes none. */
static void test_fsdp_adapter_units_train(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "lightning", adapter_units_train, lora_fsdp, VF_PHASE_OPTIMIZER), 2 * 82432);
  assert_int_equal(phase_gain(false, "lightning", adapter_units_train, fsdp_synced, VF_PHASE_OPTIMIZER), 0);
}

static void root_reshards_flag(struct vf_profile *p, bool on) { p->fsdp_root_reshards = on; }
static void fsdp_long(struct vf_setup *s) { fsdp_synced(s), s->batch = 8, s->seq = 128; }

/* FSDP2's root resharded after the forward (torchtune's explicit reshard_after_forward):
 * the root unit (the toy's embedding, untied head and final norm, 131,584 bytes gathered)
 * is let go after the head's projection, so the loss's logit tensors (8 x 128 positions x
 * 256 in fp32, which top the loss phase) come without it and its high point falls by the
 * root's size; it is gathered again for the backward, whose high point is as before. */
static void test_fsdp_root_reshards(void **state) {
  (void)state;
  int64_t loss = phase_gain(false, "torchtune", root_reshards_flag, fsdp_long, VF_PHASE_LOSS);
  assert_int_equal(loss, -131584);
  assert_int_equal(phase_gain(false, "torchtune", root_reshards_flag, fsdp_long, VF_PHASE_BACKWARD), 0);
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

/* FSDP1's flat units against FSDP2's per-parameter units, at each one's backward peak:
 * both at layer 1's gradient reduction, with layer 1 gathered and layer 0 gathered ahead
 * (FSDP1's BACKWARD_PRE prefetch, torch 2.13 _runtime_utils.py _pre_backward_hook; FSDP2's
 * _backward_prefetch buffer), and the root's head-and-norm gradient (FSDP1's head part
 * waiting for the embedding's, FSDP2's whole gradient, reduce-scattered at the pass's
 * end: 66,048 either way). FSDP1 holds its flat parts (164,352 bytes) next to their
 * concatenation (164,352); FSDP2 its whole gradient (164,352) and its shard (82,432). And
 * FSDP2's AdamW states are one block a parameter, each norm's (32 fp32 elements a GPU)
 * rounded up to 512 bytes: 4 x 384 bytes more a layer, and 2 x 384 less the 256 a flat
 * root shard rounds up, than FSDP1's one flat shard a unit. */
static void test_flat_params(void **state) {
  (void)state;
  int64_t parts = 164352, concatenation = 164352, whole = 164352, shard = 82432;
  int64_t norm_states = 2 * 4 * 384 + (2 * 384 - 256);
  assert_int_equal(phase_gain(false, "litgpt", flat_flag, fsdp_synced, VF_PHASE_BACKWARD),
                   parts + concatenation - (whole + shard + norm_states));
}

/* The toy's 8 positions with validation under profile p, its events to fn. */
static void toy_eval_timeline(const struct vf_profile *p, vf_timeline_fn fn, void *arg) {
  struct vf_model m;
  struct vf_alloc_conf c;
  struct vf_diag d;
  struct vf_estimate e;
  load_config(&m, toy_config);
  vf_alloc_conf_default(&c);
  struct vf_setup s = toy_setup(NULL);
  s.eval = VF_EVAL_YES;
  assert_int_equal(vf_estimate_timeline(&m, &s, p, &c, fn, arg, &e, &d), 0);
  vf_model_cleanup(&m);
}

/* Where the first validation falls: the index of the first event of the eval phase, and
 * of the forward. */
struct first_events {
  long n, eval, forward;
};

static void note_first(void *arg, const struct vf_timeline_event *e) {
  struct first_events *f = arg;
  f->n++;
  if (e->phase == VF_PHASE_EVAL && !f->eval) f->eval = f->n;
  if (e->phase == VF_PHASE_FORWARD && !f->forward) f->forward = f->n;
}

/* litgpt's fit() validates before its first step (the 2-batch sanity check, or the whole
 * validation set: finetune/lora.py@v0.5.13), and after the steps: with validates_first the
 * replay's first validation comes before its first forward. */
static void test_validates_first(void **state) {
  (void)state;
  struct vf_profile p;
  struct vf_diag d;
  assert_int_equal(profile_read("litgpt", NULL, &p, &d), 0);
  assert_true(p.validates_first);
  struct first_events on = {0}, off = {0};
  toy_eval_timeline(&p, note_first, &on);
  p.validates_first = false;
  toy_eval_timeline(&p, note_first, &off);
  assert_true(on.eval && on.eval < on.forward);
  assert_true(off.eval > off.forward);
}

/* Allocated peaks of each phase, from the estimate and from a replay of every layer. */
static void assert_extension_exact(const struct vf_model *m, const struct vf_setup *s, const char *framework) {
  struct vf_profile p;
  struct vf_alloc_conf c;
  struct vf_diag d;
  struct vf_estimate extended, replayed;
  assert_int_equal(profile_read(framework, NULL, &p, &d), 0);
  vf_alloc_conf_default(&c);
  assert_int_equal(vf_estimate(m, s, &p, &c, &extended, &d), 0);
  assert_int_equal(estimate_replaying(m, s, &p, &c, UINT64_MAX, NULL, NULL, &replayed, &d), 0);
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
  s->seq = seq, s->lengths = VF_LENGTHS_FIXED;
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

/* Batches padded to lengths nobody gave are assumed drawn from samples spread evenly up to
 * --seq: the replay is that of varied:1024,2048, whose last micro batch is the longest, so
 * the allocated peak is the fixed-length one but for the padding mask, which the
 * memory-efficient kernel keeps per layer in the query's dtype (4 x 2048 x 2048 fp32). The
 * shorter batches before it leave the cache more than fixed lengths do. */
static void test_varied_lengths(void **state) {
  (void)state;
  struct vf_estimate fixed = toy_lengths(VF_LENGTHS_FIXED, VF_PREC_NONE, "hf");
  struct vf_estimate varied = toy_lengths(VF_LENGTHS_VARIED, VF_PREC_NONE, "hf");
  assert_int_equal(varied.lengths, VF_LENGTHS_VARIED);
  assert_int_equal(varied.allocated_peak, fixed.allocated_peak + 2ull * 4 * 2048 * 2048 * 4);
  assert_true(varied.reserved_peak - varied.allocated_peak > fixed.reserved_peak - fixed.allocated_peak);
  struct vf_model m;
  load(&m, NULL);
  struct vf_setup s;
  vf_setup_default(&s);
  s.batch = 4, s.seq = 2048, s.lengths = VF_LENGTHS_VARIED;
  assert_int_equal(vf_length_dist_mean_max(1024, 2048, &s.length_dist), 0);
  struct vf_estimate given = run(&m, &s, "hf");
  vf_model_cleanup(&m);
  assert_int_equal(varied.reserved_peak, given.reserved_peak);
  assert_int_equal(varied.reserved_worst, given.reserved_worst);
  /* The framework's recipes decide when the setup does not: torchtune pads, hf does not. */
  assert_int_equal(toy_lengths(VF_LENGTHS_DEFAULT, VF_PREC_NONE, "hf").lengths, VF_LENGTHS_FIXED);
  assert_int_equal(toy_lengths(VF_LENGTHS_DEFAULT, VF_PREC_NONE, "torchtune").lengths, VF_LENGTHS_VARIED);
}

static void qlora_nf4(struct vf_setup *s) {
  s->weights = VF_PREC_BF16;
  s->method = VF_METHOD_QLORA;
  s->quant = VF_QUANT_NF4;
}

/* lit-gpt's loops of 2023 put the training set's longest sample into the first micro batch
 * (finetune/lora.py@8641822), so the inputs bitsandbytes' matmuls of an earlier micro batch
 * keep (graph_held) are alive only next to later, drawn batches. With samples 256 tokens
 * long on average, the QLoRA toy's allocated peak is then its longest batch's with no
 * earlier graph (and no optimizer states yet: at most those below), where drawn last the
 * longest meets the graph of a batch nearly as long. */
static void test_longest_first(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, NULL);
  struct vf_setup s;
  vf_setup_default(&s);
  s.batch = 1, s.seq = 2048, s.lengths = VF_LENGTHS_VARIED;
  qlora_nf4(&s);
  assert_int_equal(vf_length_dist_mean_max(256, 2048, &s.length_dist), 0);
  struct vf_profile p;
  struct vf_alloc_conf c;
  struct vf_diag d;
  struct vf_estimate first, last, no_graph;
  assert_int_equal(profile_read("litgpt@2023-10", NULL, &p, &d), 0);
  assert_true(p.longest_first && p.graph_held && p.quant_input_bytes);
  vf_alloc_conf_default(&c);
  assert_int_equal(vf_estimate(&m, &s, &p, &c, &first, &d), 0);
  p.longest_first = false;
  assert_int_equal(vf_estimate(&m, &s, &p, &c, &last, &d), 0);
  p.graph_held = false;
  assert_int_equal(vf_estimate(&m, &s, &p, &c, &no_graph, &d), 0);
  vf_model_cleanup(&m);
  assert_true(last.allocated_peak > no_graph.allocated_peak);
  assert_in_range(first.allocated_peak, no_graph.allocated_peak - (1u << 20), no_graph.allocated_peak);
}

/* Quantizing at load (torchao 0.1, unchunked): the last down projection (n = 4096 x 1024)
 * is quantized next to every other weight, as a bf16 copy (2n) plus 66n of search
 * temporaries, before its nf4
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
  assert_int_equal(profile_read("torchtune@0.1", NULL, &p, &d), 0);
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
static void dequant_forward_extra(struct vf_profile *p, bool on) { p->dequant_forward_extra_bytes = on ? 12 : 0; }

/* torchao's pure-PyTorch NF4 dequantization of 2024 holds 14 bytes per element (int64
 * codes, looked-up values, scaled halves, the stacked result) where bitsandbytes' kernel
 * writes only the 2-byte weight: the toy's largest weight (64 x 128) costs 8,192 x 12
 * bytes more at the forward's peak, and its backward dequantizes again, each as its own
 * field says (bitsandbytes 0.49 dequantizes differently for the two). */
static void test_dequant_temporaries(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "torchtune", dequant_forward_extra, qlora_nf4, VF_PHASE_FORWARD), 8192 * 12);
  assert_int_equal(phase_gain(false, "torchtune", dequant_extra, qlora_nf4, VF_PHASE_FORWARD), 0);
  assert_true(phase_gain(false, "torchtune", dequant_extra, qlora_nf4, VF_PHASE_BACKWARD) > 0);
}

static void expect_invalid(struct vf_setup *s, const char *model, const char *why) {
  struct vf_model m;
  struct vf_profile p;
  struct vf_alloc_conf c;
  struct vf_diag d;
  struct vf_estimate e;
  load(&m, model);
  assert_int_equal(profile_read("hf", NULL, &p, &d), 0);
  vf_alloc_conf_default(&c);
  vf_diag_clear(&d);
  assert_int_equal(vf_estimate(&m, s, &p, &c, &e, &d), VF_EINVAL);
  if (!strstr(d.msg, why)) fail_msg("message '%s' lacks '%s'", d.msg, why);
  vf_model_cleanup(&m);
}

/* The toy's varied batches on a GPU that holds their tensors but not the cache they leave
 * (halfway between the two): reaching the GPU's size, the allocator frees its cached
 * blocks and goes on, as PyTorch's does before it raises out of memory, so reserved stays
 * within what the GPU leaves it (its capacity less the CUDA context). On a GPU smaller
 * than the tensors a request fails even so, and the replay goes on past the GPU to
 * measure the peak. */
static void test_gpu_capacity(void **state) {
  (void)state;
  struct vf_estimate larger = toy_lengths(VF_LENGTHS_VARIED, VF_PREC_NONE, "hf");
  assert_int_equal(larger.cache_releases, 0);
  struct vf_model m;
  load(&m, NULL);
  struct vf_setup s;
  vf_setup_default(&s);
  s.batch = 4, s.seq = 2048, s.lengths = VF_LENGTHS_VARIED;
  s.context_bytes = 1 << 20;
  s.capacity_bytes = (larger.allocated_peak + larger.reserved_peak) / 2 + s.context_bytes;
  struct vf_estimate e = run(&m, &s, "hf");
  assert_int_equal(e.allocator_capacity, s.capacity_bytes - s.context_bytes);
  assert_true(e.cache_releases > 0);
  assert_false(e.out_of_memory);
  assert_true(e.reserved_peak <= e.allocator_capacity);
  assert_int_equal(e.allocated_peak, larger.allocated_peak);
  s.capacity_bytes = larger.allocated_peak / 2;
  e = run(&m, &s, "hf");
  vf_model_cleanup(&m);
  assert_true(e.out_of_memory);
  assert_int_equal(e.allocated_peak, larger.allocated_peak);
  assert_true(e.reserved_peak > s.capacity_bytes);
}

static void held_logits(struct vf_profile *p, bool on) { p->logits_held_bytes = on ? 4 : 0; }

/* Fabric converts the head's output to fp32 after the forward and litgpt's loop variable
 * holds it until the next micro batch's forward has converted its own: 8 tokens x 256
 * logits x 4 bytes stay through the optimizer and into the next forward. */
static void compiled_loss(struct vf_profile *p, bool on) { p->compiled_loss = on; }
static void compiled_bf16(struct vf_setup *s) { s->compile = VF_COMPILE_YES, s->amp = VF_PREC_BF16; }
static void fp32_amp(struct vf_setup *s) { s->amp = VF_PREC_BF16; }

/* torchtitan's loss over the toy's 8 x 256 bf16 logits, compiled (compiled_loss, with
 * --compile yes): its backward holds the logits and their bf16 gradient, 4 bytes a logit,
 * where eager's holds the fp32 log-softmax and two fp32 gradients, 12 (the logits went with
 * the training step's del pred): 8 x 2,048 bytes less at the loss's peak
 * (bench/compiled_loss.py). Without --compile yes the profile's switch changes nothing. */
static void test_compiled_loss(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "torchtitan", compiled_loss, compiled_bf16, VF_PHASE_LOSS), -8 * 2048);
  assert_int_equal(phase_gain(false, "torchtitan", compiled_loss, fp32_amp, VF_PHASE_LOSS), 0);
  /* torchtune's loss is compiled chunk by chunk (its 8 output chunks): eager keeps every
   * chunk's fp32 log-softmax (4 bytes a logit, 8,192) to the backward, compiled none. */
  assert_true(phase_gain(false, "torchtune", compiled_loss, compiled_bf16, VF_PHASE_LOSS) < -4 * 2048);
}

static void compiled_keeps_less(struct vf_profile *p, bool on) { p->selective_keep_compiled = on ? 0.1 : p->selective_keep; }
static void selective_compiled(struct vf_setup *s) { s->grad_ckpt = VF_CKPT_SELECTIVE, s->compile = VF_COMPILE_YES; }

/* Compiled layers under selective checkpointing keep the profile's compiled share of their
 * saved tensors (AOTAutograd saves only what the backward reads): less kept at the forward's
 * end; eager layers keep selective_keep whatever the compiled share. */
static void test_compiled_selective_share(void **state) {
  (void)state;
  assert_true(phase_gain(false, "torchtitan", compiled_keeps_less, selective_compiled, VF_PHASE_LOSS) < 0);
  assert_int_equal(phase_gain(false, "torchtitan", compiled_keeps_less, selective_ckpt, VF_PHASE_LOSS), 0);
}

static void compiled_layers(struct vf_profile *p, bool on) { p->compiled_layers = on; }
static void compiled_bf16_weights(struct vf_setup *s) { s->compile = VF_COMPILE_YES, s->weights = VF_PREC_BF16; }

/* Compiled layers (compiled_layers, with --compile yes) keep what AOTAutograd's partitioner
 * saves: each RMSNorm its bf16 input (2 bytes an element) where torchtune's eager one keeps
 * an fp32 input and an fp32 normalized product (4 + 4), and the gated MLP no SiLU output.
 * Per layer and token of the toy: 2 norms x 64 x 6 bytes and 128 x 2 bytes, 1,024 bytes;
 * over 8 tokens and 2 layers, 16,384 bytes less when the forward ends. */
static void test_compiled_layers(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "torchtune", compiled_layers, compiled_bf16_weights, VF_PHASE_FORWARD),
                   -16384);
}

static void test_held_logits(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "litgpt", held_logits, qlora_nf4, VF_PHASE_OPTIMIZER), 8 * 256 * 4);
  assert_int_equal(phase_gain(false, "litgpt", held_logits, qlora_nf4, VF_PHASE_FORWARD), 8 * 256 * 4);
}

static void quant_inputs(struct vf_profile *p, bool on) { p->quant_input_bytes = on ? 2 : 0; }
static void graph_held(struct vf_profile *p, bool on) { p->graph_held = on; }

/* A 4-bit projection keeps its input cast to bf16, once per input tensor however many
 * projections read it where the input is bf16 already: per layer the q/k/v input, the o
 * input, the gate/up input (64 wide each) and the down input (128 wide), 8 tokens x 320 x
 * 2 bytes, and the head's input (1,024 bytes) when the head is quantized (litgpt; the
 * previous micro batch's are there too, below). From hf's fp32 stream (quant_rest_fp32)
 * each projection casts its own: q, k, v, o, gate, up (64 wide) and down (128), 8 x 512 x 2. */
static void test_quantized_inputs(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "litgpt", quant_inputs, qlora_nf4, VF_PHASE_LOSS), 2 * (2 * 5120 + 1024));
  assert_int_equal(phase_gain(false, "hf", quant_inputs, qlora_nf4, VF_PHASE_LOSS), 2 * 8192);
}

static void rest_fp32(struct vf_profile *p, bool on) { p->quant_rest_fp32 = on; }
static void qlora_nf4_bf16_autocast(struct vf_setup *s) {
  qlora_nf4(s);
  s->amp = VF_PREC_BF16;
}
static void qlora_nf4_sharded(struct vf_setup *s) {
  qlora_nf4(s);
  s->shard = VF_SHARD_FSDP, s->gpus = 2;
}

/* PEFT's prepare_model_for_kbit_training up-casts what QLoRA leaves in bf16: the toy's
 * embedding and head (16,384 elements each) take 2 x 32,768 bytes more (the norms' blocks
 * stay 512 bytes); sharded QLoRA skips it. PEFT before 0.12 (hf 4.41) gives adapters the
 * base weight's dtype only where it is a floating one, not over a uint8 Params4bit: the q
 * and v adapters (4 x 512 elements per layer) stay fp32 as made, 1,024 bytes more each. Under bf16 autocast the residual stream is
 * then fp32, and so is what the 4-bit projections return (Linear4bit casts the product
 * back to its input's dtype): per layer the MLP's gate and up outputs and the activation
 * (8 x 128 each) are kept in 4 bytes, not 2; and the head's fp32 weight is cast to bf16
 * for its matmul, which keeps the copy (256 x 64 x 2). */
static void test_quant_rest_fp32(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "hf", rest_fp32, qlora_nf4, VF_PHASE_LOAD), 65536);
  assert_int_equal(phase_gain(false, "hf", rest_fp32, qlora_nf4_sharded, VF_PHASE_LOAD), 0);
  assert_int_equal(phase_gain(false, "hf@4.41", rest_fp32, qlora_nf4, VF_PHASE_LOAD), 65536 + 2 * 4 * 1024);
  assert_int_equal(phase_gain(false, "hf", rest_fp32, qlora_nf4_bf16_autocast, VF_PHASE_LOSS),
                   65536 + 2 * 3 * 8 * 128 * 2 + 32768);
}

/* Those inputs are attributes of their autograd nodes: while litgpt's loop holds the last
 * micro batch's graph, they stay through the next forward until its loss is computed
 * (litgpt 0.4.x, with bitsandbytes 0.42: 0.50 keeps no input). */
static void test_graph_held(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "litgpt@0.4.6", graph_held, qlora_nf4, VF_PHASE_FORWARD), 2 * 5120 + 1024);
  assert_int_equal(phase_gain(false, "litgpt@0.4.6", graph_held, qlora_nf4, VF_PHASE_OPTIMIZER), 2 * 5120 + 1024);
  assert_int_equal(phase_gain(false, "litgpt", graph_held, qlora_nf4, VF_PHASE_FORWARD), 0);
}

static void bf16_lora(struct vf_setup *s) { s->weights = VF_PREC_BF16, s->method = VF_METHOD_LORA; }

/* The toy as Phi-3 lays it out: one fused q,k,v projection, one gate_up projection. */
static const char toy_phi3_config[] =
    "{\"model_type\": \"phi3\", \"hidden_size\": 64, \"num_hidden_layers\": 2,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 4, \"intermediate_size\": 128,"
    " \"vocab_size\": 256, \"max_position_embeddings\": 128, \"tie_word_embeddings\": false,"
    " \"torch_dtype\": \"bfloat16\"}";

static void view_of_every_model(struct vf_profile *p, bool on) {
  p->qkv_view_kept = on;
  p->n_qkv_view_models = 0;
}

/* V, a view of the fused q,k,v output, keeps all of it (8 x (64 + 64) x 2 bytes per layer of
 * q and k) where SDPA is given V itself; from a 4-bit projection in the fp32 stream,
 * autocast hands SDPA a bf16 copy instead, and the fp32 output goes with the layer. */
static void test_cast_qkv_keeps_no_view(void **state) {
  (void)state;
  assert_int_equal(config_gain(toy_phi3_config, "hf", view_of_every_model, bf16_lora, VF_PHASE_LOSS), 2 * 2048);
  assert_int_equal(config_gain(toy_phi3_config, "hf", view_of_every_model, qlora_nf4_bf16_autocast, VF_PHASE_LOSS), 0);
}

/* Gemma-2's soft-capped logits: the tanh output is made with the head's output and kept
 * for its backward, so it is there when litgpt's loop converts the logits to fp32 next to
 * the last micro batch's, which it still holds: holding them (8 x 256 x 4 bytes) adds the
 * tanh output (8 x 256 x 2) to the loss's peak, beyond what the loss would keep instead. */
static void test_softcap_before_conversion(void **state) {
  (void)state;
  static const char cfg[] =
      "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
      " \"num_key_value_heads\": 4, \"intermediate_size\": 128, \"vocab_size\": 256, \"max_position_embeddings\": 128,"
      " \"tie_word_embeddings\": false, \"final_logit_softcapping\": 30.0}";
  assert_int_equal(config_gain(cfg, "litgpt", held_logits, bf16_lora, VF_PHASE_LOSS), 8 * 256 * 2);
}

/* GPT-NeoX's parallel block normalizes one input twice, for attention and for the MLP:
 * the two LayerNorms keep that one input (8 tokens x 64 x 4 bytes per layer), once. */
static void layer_norm_input(struct vf_profile *p, bool on) {
  p->n_layer_norm_saves = on;
  p->layer_norm_saves[0] = 0;
}

static void test_parallel_norms_share_input(void **state) {
  (void)state;
  static const char cfg[] = "{\"model_type\": \"gpt_neox\", \"hidden_size\": 64, \"num_hidden_layers\": 2,"
                            " \"num_attention_heads\": 4, \"intermediate_size\": 256, \"vocab_size\": 256,"
                            " \"max_position_embeddings\": 128, \"use_parallel_residual\": true}";
  /* the two layers' inputs, and the final norm's */
  assert_int_equal(config_gain(cfg, "litgpt", layer_norm_input, lora_qv, VF_PHASE_LOSS), 3 * 8 * 64 * 4);
}

/* A toy of model type `type` (hidden 64, 2 layers, 4 heads of 16, 2 KV heads), with extra keys. */
#define TOY_TYPE(type, extra)                                                                         \
  "{\"model_type\": \"" type "\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4," \
  " \"num_key_value_heads\": 2, \"head_dim\": 16, \"intermediate_size\": 128, \"vocab_size\": 256,"          \
  " \"max_position_embeddings\": 128, \"tie_word_embeddings\": false" extra "}"

static void rms_input(struct vf_profile *p, bool on) { p->n_rms_norm_saves = on; }

/* qwen3's q_norm and k_norm are RMSNorms of the q and k projections' outputs: they keep
 * the fp32 input the residual stream's norms keep, over q and k (8 positions x (64 + 32) x 4
 * bytes a layer) besides those (8 x 64 x 4 for each of a layer's two norms and the final
 * norm), where llama has none. */
static void test_qk_norms(void **state) {
  (void)state;
  int64_t norms = 5 * 8 * 64 * 4, qk = 2 * 8 * (64 + 32) * 4;
  assert_int_equal(config_gain(TOY_TYPE("llama", ""), "hf", rms_input, NULL, VF_PHASE_LOSS), norms);
  assert_int_equal(config_gain(TOY_TYPE("qwen3", ""), "hf", rms_input, NULL, VF_PHASE_LOSS), norms + qk);
}

/* OLMo 2's norms follow its sublayers: its projections keep the block's input and the
 * residual after attention where a pre-norm layer's keep the norms' outputs, the same bytes
 * (in fp32, where the norms' weight products keep fp32 in both). The backward and the step
 * are the same too. */
static void test_post_norms(void **state) {
  (void)state;
  struct vf_estimate pre = config_run(TOY_TYPE("qwen3", ""), "hf", unchanged, false, NULL);
  struct vf_estimate post = config_run(TOY_TYPE("olmo2", ""), "hf", unchanged, false, NULL);
  assert_int_equal(post.phase_allocated[VF_PHASE_LOSS], pre.phase_allocated[VF_PHASE_LOSS]);
  assert_int_equal(post.phase_allocated[VF_PHASE_BACKWARD], pre.phase_allocated[VF_PHASE_BACKWARD]);
}

static void weight_fp32(struct vf_profile *p, bool on) {
  snprintf(p->rms_norm_weight_fp32[0], sizeof p->rms_norm_weight_fp32[0], "olmo2");
  p->n_rms_norm_weight_fp32 = on;
}
static void bf16_full(struct vf_setup *s) { s->weights = VF_PREC_BF16; }

/* OLMo 2's RMSNorm multiplies its trainable weight before casting back: the product keeps
 * the fp32 normalized input, 2 bytes an element more than the bf16 cast llama's keeps, on
 * the two norms of each layer and the final one (8 x 64 elements) and on q_norm and k_norm
 * (8 x 96). Allocations are of 512-byte blocks: 1,024 more a norm, 1,536 more for q and k. */
static void test_rms_norm_weight_fp32(void **state) {
  (void)state;
  assert_int_equal(config_gain(TOY_TYPE("olmo2", ""), "hf", weight_fp32, bf16_full, VF_PHASE_LOSS),
                   5 * 1024 + 2 * 1536);
}

static void window_mask(struct vf_profile *p, bool on) {
  snprintf(p->sdpa_window_mask[0], sizeof p->sdpa_window_mask[0], "gemma3_text");
  p->n_sdpa_window_mask = on;
}

/* Gemma 3's sliding-window layers give SDPA their window as a mask once the sequence
 * reaches it: the memory-efficient kernel runs instead of flash and keeps the mask made
 * additive (1 x 8 x 8 bf16, one 512-byte block) on layer 0; layer 1, every second here,
 * attends globally. With 2 KV heads for 4 query heads, the mask also stops enable_gqa: K
 * and V are repeated to every head first (8 x 64 x 2 bytes each, for 8 x 32 x 2); a single
 * KV head repeated stays a view (repeat_kv's expand and reshape). A window wider than the
 * sequence changes nothing. */
static void test_sliding_window_mask(void **state) {
  (void)state;
  static const char one_kv_head[] =
      "{\"model_type\": \"gemma3_text\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
      " \"num_key_value_heads\": 1, \"head_dim\": 16, \"intermediate_size\": 128, \"vocab_size\": 256,"
      " \"sliding_window\": 4, \"sliding_window_pattern\": 2}";
  int64_t mask = 512, repeated = 2 * (8 * 64 * 2 - 512);
  assert_int_equal(config_gain(one_kv_head, "hf", window_mask, bf16_lora, VF_PHASE_LOSS), mask);
  assert_int_equal(config_gain(TOY_TYPE("gemma3_text", ", \"sliding_window\": 4, \"sliding_window_pattern\": 2"), "hf",
                               window_mask, bf16_lora, VF_PHASE_LOSS),
                   mask + repeated);
  assert_int_equal(config_gain(TOY_TYPE("gemma3_text", ", \"sliding_window\": 8192"), "hf", window_mask, bf16_lora,
                               VF_PHASE_LOSS),
                   0);
}

/* deepseek_v2's latent attention and shared experts are refused with the reason. */
static void test_unmodelled_refused(void **state) {
  (void)state;
  struct vf_model m;
  struct vf_profile p;
  struct vf_alloc_conf c;
  struct vf_diag d;
  struct vf_estimate e;
  struct vf_setup s;
  load_config(&m, TOY_TYPE("deepseek_v2", ", \"moe_intermediate_size\": 16, \"n_routed_experts\": 4"));
  assert_int_equal(profile_read("hf", NULL, &p, &d), 0);
  vf_setup_default(&s);
  vf_alloc_conf_default(&c);
  assert_int_equal(vf_estimate(&m, &s, &p, &c, &e, &d), VF_EUNSUPPORTED);
  assert_non_null(strstr(d.msg, "multi-head latent attention"));
  vf_model_cleanup(&m);
}

static void head_chunks(struct vf_profile *p, bool on) { p->loss_chunk_tokens = on ? 128 : 0; }
static void lora_autocast(struct vf_setup *s) {
  s->method = VF_METHOD_LORA;
  s->amp = VF_PREC_BF16;
  s->seq = 256;
}

/* Autocast caches its cast of a weight only when the weight trains: litgpt's LoRA head,
 * run over two 128-position chunks, casts the frozen fp32 head (256 x 64) to bf16 twice
 * and keeps both copies for the backward. */
static void test_autocast_head_per_chunk(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "litgpt", head_chunks, lora_autocast, VF_PHASE_LOSS), 256 * 64 * 2);
}

/* The toy with n layers, under litgpt, with the method given: its loss phase's peak. */
static uint64_t adapter_loss_peak(uint32_t layers, enum vf_method method) {
  char cfg[400];
  snprintf(cfg, sizeof cfg,
           "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": %u, \"num_attention_heads\": 4,"
           " \"num_key_value_heads\": 4, \"intermediate_size\": 128, \"vocab_size\": 256,"
           " \"max_position_embeddings\": 128, \"tie_word_embeddings\": false}", layers);
  struct vf_model m;
  load_config(&m, cfg);
  struct vf_setup s;
  vf_setup_default(&s);
  s.seq = 8;
  s.method = method;
  uint64_t peak = run(&m, &s, "litgpt").phase_allocated[VF_PHASE_LOSS];
  vf_model_cleanup(&m);
  return peak;
}

/* litgpt's adapter trains nothing below its first prompted layer (the third): a second
 * layer adds only its weights (4 x 16,384 + 3 x 32,768 + 2 norms of 512), nothing kept. */
static void test_adapter_layers_below_the_prompt(void **state) {
  (void)state;
  uint64_t weights = 4 * 16384 + 3 * 32768 + 2 * 512;
  assert_int_equal(adapter_loss_peak(2, VF_METHOD_ADAPTER) - adapter_loss_peak(1, VF_METHOD_ADAPTER), weights);
}

/* Adapter v2 trains every layer's norms and a scale and bias of every linear, whose product
 * keeps the linear's shifted output. On a one-layer toy (below the prompt) over adapter v1,
 * which keeps nothing there: the layer's norm inputs and fp32 products (4 x 2,048), q,k,v's
 * output and its q and k share (6,144 + 4,096), q, k, v (3 x 2,048), the attention's output
 * and log-sum-exp (2,048 + 512), o's output (2,048), gate's and up's outputs, the gated
 * MLP's three (5 x 4,096) and down's output (2,048); the final norm's product and the
 * head's output (2,048 + 8,192); the scales and biases (1,280 x 4), their gradients (the
 * micro batches accumulate into them) and AdamW states. */
static void test_adapter_v2_keeps_scaled_outputs(void **state) {
  (void)state;
  uint64_t layer = 4 * 2048 + 6144 + 4096 + 3 * 2048 + 2048 + 512 + 2048 + 5 * 4096 + 2048;
  uint64_t head = 2048 + 8192, params = 4 * 1280 * 4;
  assert_int_equal(adapter_loss_peak(1, VF_METHOD_ADAPTER_V2) - adapter_loss_peak(1, VF_METHOD_ADAPTER),
                   layer + head + params);
}

static void whole_head(struct vf_profile *p, bool on) { p->full_head_whole = on; }
static void full_bf16_long(struct vf_setup *s) {
  s->weights = VF_PREC_BF16;
  s->batch = 2;
  s->seq = 1024;
}

/* litgpt's full.py runs the head whole and the loss over 128-row slices of its fp32
 * logits (2 x 1,024 x 256 of them): the backward joins the slices' fp32 gradients (the
 * split's cat) and pads that into the whole logits (the slice's backward), three fp32
 * gradients at once where the chunked head's loss holds what it kept (4 bytes a logit)
 * and one chunk's gradients (8 bytes a logit of one eighth). The forward copies the
 * batch's sliced logits for the reshape, next to them and the log-softmax (12 bytes a
 * logit): 2 above the conversion's peak (the last micro batch's logits, the bf16 ones and
 * their fp32 copy). */
static void test_full_head_whole(void **state) {
  (void)state;
  int64_t n = 2 * 1024 * 256;
  assert_int_equal(phase_gain(false, "litgpt", whole_head, full_bf16_long, VF_PHASE_BACKWARD), 3 * n);
  assert_int_equal(phase_gain(false, "litgpt", whole_head, full_bf16_long, VF_PHASE_LOSS), 2 * n);
}

static void stable(struct vf_profile *p, bool on) { p->stable_embedding = on; }

/* litgpt 0.5 swaps a quantized model's embedding (256 x 64, bf16: 32,768 bytes) for
 * bitsandbytes' StableEmbedding after making the optimizer: the old one stays from the
 * load on, and the new one's gradient, outside the optimizer, is never freed. */
static void test_stable_embedding(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "litgpt", stable, qlora_nf4, VF_PHASE_LOAD), 32768);
  assert_int_equal(phase_gain(false, "litgpt", stable, qlora_nf4, VF_PHASE_OPTIMIZER), 2 * 32768);
}

static void chunked(struct vf_profile *p, bool on) {
  p->loss_chunk_tokens = on ? 128 : 0;
  p->dequant_extra_bytes = 64;
}
static void qlora_long(struct vf_setup *s) {
  qlora_nf4(s);
  s->seq = 1024;
}

/* A chunked loss's nodes all run before the head's chunks (autograd runs the latest
 * recorded node first): what the loss kept (fp32 log-softmax, 4 bytes per logit) is gone
 * when the head's backward dequantizes its weight, and the bf16 gradients of every chunk
 * (2 per logit) wait for it. Unchunked, the backward peaks at the loss's whole fp32
 * gradients (8 per logit) next to what it kept; chunked, at the head: its cast gradients,
 * its input gradient (1,024 x 64 x 2) and its weight dequantized (256 x 64 x (2 + 64)). */
static void test_chunked_loss_backward(void **state) {
  (void)state;
  int64_t n = 1024 * 256, head = 2 * n + 1024 * 64 * 2 + 256 * 64 * 66, loss = 4 * n + 8 * n;
  assert_int_equal(phase_gain(false, "litgpt", chunked, qlora_long, VF_PHASE_BACKWARD), head - loss);
}

static void gelu_new(struct vf_profile *p, bool on) { p->gelu_new_saves = on ? 4 : 1; }
static void full_load(struct vf_profile *p, bool on) { p->fsdp_full_load = on; }
static void lora_fsdp8(struct vf_setup *s) { s->method = VF_METHOD_LORA, s->shard = VF_SHARD_FSDP, s->gpus = 8; }

/* The toy as GPT-2: gelu_new MLP 256 wide, 4 heads of 16. */
static const char gpt2_config[] = "{\"model_type\": \"gpt2\", \"n_embd\": 64, \"n_layer\": 2, \"n_head\": 4,"
                                  " \"vocab_size\": 256, \"n_positions\": 128}";

static int64_t gpt2_gain(void (*flip)(struct vf_profile *, bool), enum vf_phase ph) {
  return config_gain(gpt2_config, "hf", flip, NULL, ph);
}

/* transformers' gelu_new is a formula of separate ops: it keeps its input, 0.5 x, the tanh
 * and 1 + tanh, three MLP-wide tensors (8 tokens x 256 x 4 bytes) per layer more than a
 * fused GELU. */
static void test_gelu_new(void **state) {
  (void)state;
  assert_int_equal(gpt2_gain(gelu_new, VF_PHASE_LOSS), 2 * 3 * 8 * 256 * 4);
}

/* Lightning's FSDP loads a full checkpoint with every unit gathered at once: the whole
 * model next to the shards (an eighth of it), in fp32 the toy's parameters and its LoRA
 * adapters (rank 8 on q and v: 2 layers x 2 x 2 x 8 x 64), one allocation per unit, each
 * rounded up to 512 B, and litgpt's rope tables. Its peak tops FSDP1's wrap
 * (test_parallel.c test_fsdp1_wrap). */
static void test_full_load(void **state) {
  (void)state;
  uint64_t whole = (TOY_PARAMS + 2 * 2 * 2 * 8 * 64) * 4;
  uint64_t peak = config_run(toy_config, "litgpt", full_load, true, lora_fsdp8).phase_allocated[VF_PHASE_LOAD];
  assert_in_range(peak, whole + whole / 8, whole + whole / 8 + 6 * 512);
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
  assert_int_equal(profile_read("hf", NULL, &p, &d), 0);
  uint64_t states = 2 * TOY_PARAMS * 4, loss = 8 * 256 * (uint64_t)p.logits_peak_bytes;
  uint64_t eval = on.phase_allocated[VF_PHASE_EVAL], save = on.phase_allocated[VF_PHASE_SAVE];
  assert_true(eval >= TOY_PARAMS * 4 + states + loss);
  assert_true(eval < on.phase_allocated[VF_PHASE_LOSS]);
  assert_int_equal(save, off.phase_allocated[VF_PHASE_SAVE]);
  assert_true(save >= TOY_PARAMS * 4 + states && save < eval);
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
  assert_int_equal(profile_read("hf", NULL, &p, &d), 0);
  /* weights and AdamW's two states, and the gradients while zero_grad keeps them */
  uint64_t kept = 2 * 2 * (64 * 64 * 4 + 2 * 8 * 64 * 4), magnitudes = 4 * 512 * (p.zero_grad_frees ? 3 : 4);
  assert_int_equal(dora - lora, kept + magnitudes);
  vf_model_cleanup(&m);
}

static void lion_fp32(struct vf_profile *p, bool on) { p->lion_fp32_states = on; }
static void embedding_fp32(struct vf_profile *p, bool on) { p->embedding_states_fp32 = on; }
static void tiny_blocks(struct vf_profile *p, bool on) { p->optim8bit_block = on ? 16 : 2048; }
static void lion_bf16(struct vf_setup *s) { s->weights = VF_PREC_BF16, s->optimizer = VF_OPT_LION; }
static void adamw_8bit(struct vf_setup *s) { s->optimizer = VF_OPT_ADAMW_8BIT; }

/* bitsandbytes' Lion keeps its momentum in fp32 under bf16 weights: 2 bytes more per
 * element of every tensor but the norms, whose 64 elements fit one 512-byte block either
 * way. */
static void test_lion_fp32_states(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "hf", lion_fp32, lion_bf16, VF_PHASE_OPTIMIZER), 2 * (TOY_PARAMS - 5 * 64));
}

/* The HF Trainer registers nn.Embedding weights to 32-bit states: the toy's embedding (256
 * x 64) gets two fp32 states instead of two uint8 ones with their absmax blocks. */
static void test_embedding_states_fp32(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "hf", embedding_fp32, adamw_8bit, VF_PHASE_OPTIMIZER),
                   2 * (65536 - 16384 - 512));
}

/* One fp32 absmax per block of an 8-bit state: with 16-element blocks the head's (16,384
 * elements) take 4,096 bytes, q/k/v/o's 1,024 and gate/up/down's 2,048, where 2048-element
 * blocks fit each in one 512-byte block; two states. */
static void test_optim8bit_block(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "hf", tiny_blocks, adamw_8bit, VF_PHASE_OPTIMIZER),
                   2 * ((4096 - 512) + 8 * (1024 - 512) + 6 * (2048 - 512)));
}

static void bf16(struct vf_setup *s) { s->weights = VF_PREC_BF16; }
static void bf16_amp(struct vf_setup *s) { s->weights = VF_PREC_BF16, s->amp = VF_PREC_BF16; }
static void bf16_eager(struct vf_setup *s) {
  s->weights = VF_PREC_BF16, s->attention = VF_ATTN_EAGER, s->seq = 64;
}
static void set_names(char (*names)[VF_MODEL_TYPE_LEN], uint32_t *n, const char *name, bool on) {
  *n = on;
  if (on) snprintf(names[0], VF_MODEL_TYPE_LEN, "%s", name);
}
static void gpt2_in_dtype(struct vf_profile *p, bool on) {
  set_names(p->eager_softmax_in_dtype, &p->n_eager_softmax_in_dtype, "gpt2", on);
}
static void falcon_unexpanded(struct vf_profile *p, bool on) {
  set_names(p->sdpa_mqa_unexpanded, &p->n_sdpa_mqa_unexpanded, "falcon", on);
}
static void math_fp32(struct vf_profile *p, bool on) {
  falcon_unexpanded(p, true);
  p->sdpa_math_fp32 = on;
}
static void neox_out_copied(struct vf_profile *p, bool on) {
  set_names(p->sdpa_out_copied, &p->n_sdpa_out_copied, "gpt_neox", on);
}
static void neox_view(struct vf_profile *p, bool on) {
  set_names(p->qkv_view_models, &p->n_qkv_view_models, "gpt_neox", on);
}

/* GPT-2's eager attention takes the softmax in the scores' dtype: of each layer's 64 x 4 x
 * 64 scores it keeps a bf16 softmax (with the dropout's mask and output) where the llama
 * way keeps it in fp32: 2 bytes less per score. */
static void test_eager_softmax_in_dtype(void **state) {
  (void)state;
  assert_int_equal(config_gain(gpt2_config, "hf", gpt2_in_dtype, bf16_eager, VF_PHASE_LOSS), -2 * 64 * 4 * 64 * 2);
}

/* Falcon-7b's layout: 4 query heads of 16 and one multi-query K/V head. */
static const char falcon_config[] =
    "{\"model_type\": \"falcon\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
    " \"multi_query\": true, \"parallel_attn\": true, \"vocab_size\": 256}";

/* Its K/V head reaches SDPA unexpanded, without enable_gqa: neither flash nor the
 * memory-efficient kernel takes it, and the math backend runs. Per layer (8 positions,
 * bf16, full fine-tuning) flash keeps q (1,024 bytes), k, v and the log-sum-exp (a 512-byte
 * block each) and its output (1,024); math keeps q, k and v expanded to all heads in fp32
 * (2,048 each), the fp32 softmax of 8 x 4 x 8 scores (1,024) and o_proj's copy of the
 * output (1,024). */
static void test_sdpa_math_backend(void **state) {
  (void)state;
  int64_t flash = 1024 + 3 * 512 + 1024, math = 3 * 2048 + 1024 + 1024;
  assert_int_equal(config_gain(falcon_config, "hf", falcon_unexpanded, bf16, VF_PHASE_LOSS), 2 * (math - flash));
}

/* PyTorch's math backend computes 16-bit inputs in fp32 from 2.5 on: q, k, v (1,024 bytes
 * in bf16 each) and the scores (a 512-byte block) double. */
static void test_sdpa_math_fp32(void **state) {
  (void)state;
  assert_int_equal(config_gain(falcon_config, "hf", math_fp32, bf16, VF_PHASE_LOSS), 2 * (3 * 1024 + 512));
}

/* GPT-NeoX: fused q,k,v, a quarter of each head rotated, a parallel block of two norms. */
static const char neox_config[] =
    "{\"model_type\": \"gpt_neox\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
    " \"intermediate_size\": 256, \"vocab_size\": 256, \"rotary_pct\": 0.25, \"use_parallel_residual\": true,"
    " \"max_position_embeddings\": 128}";

/* Its rotated query is concatenated into a new tensor, so SDPA's output needs a copy for
 * o_proj, which full fine-tuning keeps: 8 x 64 fp32 per layer. */
static void test_sdpa_out_copied(void **state) {
  (void)state;
  assert_int_equal(config_gain(neox_config, "hf", neox_out_copied, NULL, VF_PHASE_LOSS), 2 * 8 * 64 * 4);
}

/* Its V is a view of the fused q,k,v output, which attention so keeps whole: q's and k's
 * share of it (8 x 128 fp32) per layer beyond V. */
static void test_qkv_view_models(void **state) {
  (void)state;
  assert_int_equal(config_gain(neox_config, "hf", neox_view, NULL, VF_PHASE_LOSS), 2 * 8 * 128 * 4);
}

/* A LayerNorm keeps its input, the residual stream: fp32 under autocast with fp32 weights
 * (8 x 64 x 4 bytes per norm: GPT-2's two per layer and the final one). The two norms of a
 * parallel block read the same input: GPT-NeoX keeps one per layer. */
static void test_layer_norm_input(void **state) {
  (void)state;
  assert_int_equal(config_gain(gpt2_config, "hf", layer_norm_input, fp32_amp, VF_PHASE_LOSS), 5 * 8 * 64 * 4);
  assert_int_equal(config_gain(neox_config, "hf", layer_norm_input, NULL, VF_PHASE_LOSS), 3 * 8 * 64 * 4);
}

/* Under autocast gelu_new's x ** 3 runs in fp32: x's fp32 copy, the tanh and 1 + tanh
 * (8 x 256 each) are kept in fp32 beside the bf16 0.5 x. */
static void test_gelu_new_autocast(void **state) {
  (void)state;
  assert_int_equal(config_gain(gpt2_config, "hf", gelu_new, bf16_amp, VF_PHASE_LOSS), 2 * 3 * 8 * 256 * 4);
}

static void experts_uncast(struct vf_profile *p, bool on) { p->experts_in_weight_dtype = on; }
static void lora_fp32_amp(struct vf_setup *s) { s->amp = VF_PREC_BF16, s->method = VF_METHOD_LORA; }

/* Mixtral's layout: 4 experts of 128, 2 per token. */
static const char moe_config[] =
    "{\"model_type\": \"mixtral\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
    " \"num_key_value_heads\": 4, \"intermediate_size\": 128, \"num_local_experts\": 4,"
    " \"num_experts_per_tok\": 2, \"vocab_size\": 256, \"tie_word_embeddings\": false}";

/* transformers 5's grouped experts escape autocast: fp32 weights, no bf16 copies of the 12
 * expert matrices (64 x 128, 16,384 bytes each) per layer, but their gate, up and activation
 * (16 routed tokens x 128) and output (16 x 64) kept in fp32, not bf16. */
static void test_experts_in_weight_dtype(void **state) {
  (void)state;
  int64_t per_layer = 3 * (8192 - 4096) + (4096 - 2048) - 12 * 16384;
  assert_int_equal(config_gain(moe_config, "hf", experts_uncast, lora_fp32_amp, VF_PHASE_LOSS), 2 * per_layer);
}

static void adafactor_copies(struct vf_profile *p, bool on) { p->adafactor_fp32_copies = on; }
static void adafactor_bf16(struct vf_setup *s) { s->weights = VF_PREC_BF16, s->optimizer = VF_OPT_ADAFACTOR; }
static void adafactor_lora(struct vf_setup *s) { s->method = VF_METHOD_LORA, s->optimizer = VF_OPT_ADAFACTOR; }

/* transformers' Adafactor copies a bf16 gradient and parameter to fp32 for its step: two
 * more fp32 tensors of the largest one (the toy's embedding and head, 16,384 elements). */
static void test_adafactor_fp32_copies(void **state) {
  (void)state;
  assert_int_equal(config_gain(toy_config, "hf", adafactor_copies, adafactor_bf16, VF_PHASE_OPTIMIZER), 2 * 16384 * 4);
}

/* Adafactor steps only what trains: under LoRA its temporaries are an adapter's (8 x 64 fp32
 * adapters), not the largest frozen matrix's. */
static void test_adafactor_trainable_only(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, NULL);
  struct vf_setup s;
  vf_setup_default(&s);
  s.seq = 8;
  adafactor_lora(&s);
  uint64_t adafactor = run(&m, &s, "hf").phase_allocated[VF_PHASE_OPTIMIZER];
  s.optimizer = VF_OPT_SGD;
  uint64_t sgd = run(&m, &s, "hf").phase_allocated[VF_PHASE_OPTIMIZER];
  /* the statistics of 8 adapters (2 x 512 bytes each), the temporary of 512 elements */
  assert_int_equal(adafactor - sgd, 8 * 2 * 512 + 512 * 4 * 2);
  vf_model_cleanup(&m);
}

/* Live bytes of the temporaries the forward made, at the first event of the loss and of the
 * backward (of the last micro batch replayed). */
struct forward_casts {
  uint64_t bytes[4096];
  bool from_forward[4096];
  uint64_t live, at_loss, at_backward;
  int phase;
};

static void count_forward_casts(void *arg, const struct vf_timeline_event *e) {
  struct forward_casts *f = arg;
  if (e->phase != f->phase && e->phase == VF_PHASE_LOSS) f->at_loss = f->live;
  if (e->phase != f->phase && e->phase == VF_PHASE_BACKWARD) f->at_backward = f->live;
  f->phase = e->phase;
  if (e->id >= 4096) fail_msg("more events than the toy should make");
  if (e->op == VF_TIMELINE_ALLOC) {
    f->from_forward[e->id] = e->phase == VF_PHASE_FORWARD && e->category == VF_CAT_TEMPORARIES;
    f->bytes[e->id] = e->bytes;
    if (f->from_forward[e->id]) f->live += e->bytes;
  } else if (f->from_forward[e->id]) {
    f->live -= f->bytes[e->id];
    f->from_forward[e->id] = false;
  }
}

/* The setup's hf run of the model, its events to fn. */
static void hf_timeline(const struct vf_model *m, const struct vf_setup *s, vf_timeline_fn fn, void *arg) {
  struct vf_profile p;
  struct vf_alloc_conf c;
  struct vf_diag d;
  struct vf_estimate e;
  assert_int_equal(profile_read("hf", NULL, &p, &d), 0);
  vf_alloc_conf_default(&c);
  assert_int_equal(vf_estimate_timeline(m, s, &p, &c, fn, arg, &e, &d), 0);
}

/* The validation's logit-sized tensors, by bytes per logit. */
struct eval_logits {
  uint64_t logit_bytes[16];
};

static void count_eval_logits(void *arg, const struct vf_timeline_event *e) {
  struct eval_logits *l = arg;
  uint64_t logits = 8 * 256; /* the toy's 8 positions x 256 logits */
  if (e->op == VF_TIMELINE_ALLOC && e->phase == VF_PHASE_EVAL && e->bytes % logits == 0 && e->bytes / logits < 16)
    l->logit_bytes[e->bytes / logits]++;
}

/* litgpt's validation holds 8 bytes per logit at its peak, as separate tensors: the fp32
 * logits Fabric converts the head's output to and their fp32 log-softmax (traced:
 * litgpt/utils.py chunked_cross_entropy with chunk_size 0 under validate()), each cut
 * from the cache on its own, never one block of both. */
static void test_eval_logits_apart(void **state) {
  (void)state;
  struct vf_profile p;
  struct vf_diag d;
  assert_int_equal(profile_read("litgpt", NULL, &p, &d), 0);
  struct eval_logits l = {{0}};
  toy_eval_timeline(&p, count_eval_logits, &l);
  assert_true(l.logit_bytes[4] >= 2);
  assert_int_equal(l.logit_bytes[8], 0);
}

/* Full checkpointing under autocast (fp32 weights, full fine-tuning): the casts of the
 * trainable weights stay in autocast's cache through the forward and the loss (per layer
 * q, k, v, o of 4,096 elements and gate, up, down of 8,192, in bf16), and are gone when the
 * backward starts; the recomputation makes its own. */
static void test_autocast_cache(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, NULL);
  struct vf_setup s;
  vf_setup_default(&s);
  s.seq = 8;
  s.amp = VF_PREC_BF16;
  s.grad_ckpt = VF_CKPT_FULL;
  static struct forward_casts f;
  memset(&f, 0, sizeof f);
  hf_timeline(&m, &s, count_forward_casts, &f);
  assert_int_equal(f.at_loss, 2 * (4 * 4096 * 2 + 3 * 8192 * 2));
  assert_int_equal(f.at_backward, 0);
  vf_model_cleanup(&m);
}

/* Temporaries of one size live at once, at most, and whether any block came in sizes
 * given. */
struct sized_blocks {
  uint64_t size, live, most, other[2];
  bool other_seen;
};

static void count_sized_blocks(void *arg, const struct vf_timeline_event *e) {
  struct sized_blocks *z = arg;
  if (e->category != VF_CAT_TEMPORARIES) return;
  z->other_seen |= e->bytes == z->other[0] || e->bytes == z->other[1];
  if (e->bytes != z->size) return;
  z->live = e->op == VF_TIMELINE_ALLOC ? z->live + 1 : z->live - 1;
  if (z->live > z->most) z->most = z->live;
}

/* The allocator's 512-byte rounding. */
#define ROUNDED(bytes) (((bytes) + 511) / 512 * 512)

/* hf's loss over 8 positions x 1,000 logits (an fp32 toy with that vocabulary): the
 * up-cast and the log-softmax in the forward, the two fp32 gradients of the backward
 * (nll_loss's, _log_softmax's) are tensors of 32,000 bytes each, never one block of their
 * sum (6 bytes a logit for the forward's rest, 8 for the backward's). In the backward the
 * kept log-softmax and both gradients are live at once: 3. */
static void test_loss_tensors_apart(void **state) {
  (void)state;
  static const char cfg[] =
      "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2,"
      " \"num_attention_heads\": 4, \"num_key_value_heads\": 4, \"intermediate_size\": 128,"
      " \"vocab_size\": 1000, \"max_position_embeddings\": 2048, \"tie_word_embeddings\": false,"
      " \"torch_dtype\": \"float32\"}";
  struct vf_model m;
  load_config(&m, cfg);
  struct sized_blocks z = {.size = ROUNDED(8 * 1000 * 4), .other = {ROUNDED(8 * 1000 * 6), ROUNDED(8 * 1000 * 8)}};
  struct vf_setup s;
  vf_setup_default(&s);
  s.seq = 8;
  hf_timeline(&m, &s, count_sized_blocks, &z);
  assert_int_equal(z.most, 3);
  assert_false(z.other_seen);
  vf_model_cleanup(&m);
}

/* Whether the forward gathered weights of a size, or of another. */
struct gathered_sizes {
  uint64_t size, other;
  bool seen, other_seen;
};

static void see_gathered(void *arg, const struct vf_timeline_event *e) {
  struct gathered_sizes *g = arg;
  if (e->op != VF_TIMELINE_ALLOC || e->phase != VF_PHASE_FORWARD || e->category != VF_CAT_WEIGHTS) return;
  g->seen |= e->bytes == g->size;
  g->other_seen |= e->bytes == g->other;
}

/* FSDP gathers a 4-bit weight as it is stored and sharded: the toy's layer under QLoRA on
 * two GPUs is its packed NF4 (n / 2 + an fp32 absmax per 64: 2,304 bytes for each of q, k,
 * v, o, 4,608 for each of gate, up, down), its two bf16 norms (128 bytes each, not up-cast
 * when sharded) and the q and v adapters (four 8 x 64 matrices, in bf16), never its 40,960
 * projection elements in bf16. */
static void test_fsdp_gathers_quantized_storage(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, NULL);
  struct vf_setup s = toy_setup(qlora_nf4_sharded);
  uint64_t rest = 2 * 128 + 4 * 512 * 2;
  struct gathered_sizes g = {.size = ROUNDED(4 * 2304 + 3 * 4608 + rest), .other = ROUNDED(40960 * 2 + rest)};
  hf_timeline(&m, &s, see_gathered, &g);
  assert_true(g.seen);
  assert_false(g.other_seen);
  vf_model_cleanup(&m);
}

static void padding_mask(struct vf_profile *p, bool on) { p->padding_mask = on; }
static void varied_bf16(struct vf_setup *s) { s->weights = VF_PREC_BF16, s->lengths = VF_LENGTHS_VARIED; }

/* The grouped-query toy's loss phase under hf in bf16, with the setup tweak. */
static int64_t gqa_loss_phase(void (*tweak)(struct vf_setup *)) {
  return (int64_t)config_run(toy_gqa_config, "hf", unchanged, true, tweak).phase_allocated[VF_PHASE_LOSS];
}

/* Padded batches bring a mask: transformers repeats the 2 K/V heads to all 4 (no
 * enable_gqa with a mask) and SDPA runs the memory-efficient kernel, which keeps the mask
 * made additive. Per layer: K and V of 8 x 64 bf16 (1,024 bytes each) instead of 8 x 32
 * (512), and the 8 x 8 mask (a 512-byte block). */
static void test_padded_attention(void **state) {
  (void)state;
  int64_t gain = gqa_loss_phase(varied_bf16) - gqa_loss_phase(bf16);
  assert_int_equal(gain, 2 * (2 * (1024 - 512) + 512));
  /* A framework that pads without a mask (litgpt, torchtune) keeps attention as it is. */
  assert_int_equal(phase_gain(true, "hf", padding_mask, varied_bf16, VF_PHASE_LOSS), gain);
}

/* The sizes of the gradients the last backward replayed allocates, in order. */
struct grad_order {
  uint64_t bytes[256];
  size_t n;
  int phase;
};

static void record_grads(void *arg, const struct vf_timeline_event *e) {
  struct grad_order *o = arg;
  if (e->phase == VF_PHASE_BACKWARD && o->phase != VF_PHASE_BACKWARD) o->n = 0;
  o->phase = e->phase;
  if (e->phase == VF_PHASE_BACKWARD && e->op == VF_TIMELINE_ALLOC && e->category == VF_CAT_GRADIENTS && o->n < 256)
    o->bytes[o->n++] = e->bytes;
}

/* An untied embedding's gradient comes from its own backward, last in the pass; the head's
 * (both 256 x 64 fp32 in the toy) from the first. */
static void test_embedding_gradient_last(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, NULL);
  struct grad_order o = {.n = 0};
  struct vf_setup s;
  vf_setup_default(&s);
  s.seq = 8;
  hf_timeline(&m, &s, record_grads, &o);
  /* the root's first: the final norm's (a 512-byte block) and the head's; then the blocks',
   * and the embedding's last */
  assert_int_equal(o.n, 2 + 2 * 9 + 1);
  assert_int_equal(o.bytes[0] + o.bytes[1], 512 + 65536);
  for (size_t i = 2; i + 1 < o.n; i++) assert_true(o.bytes[i] < 65536);
  assert_int_equal(o.bytes[o.n - 1], 65536);
  vf_model_cleanup(&m);
}

/* The toy model's shape with another model type, K/V head count, vocabulary, tying and
 * dtype, and further config.json keys (extra: "" or ", \"key\": value"); layers 0 is the
 * toy's 2. */
struct toy_shape {
  const char *type;
  int kv_heads, vocab, layers;
  bool tied;
  const char *dtype, *extra;
  char json[512];
};

static const char *toy_json(struct toy_shape *t) {
  snprintf(t->json, sizeof t->json,
           "{\"model_type\": \"%s\", \"hidden_size\": 64, \"num_hidden_layers\": %d, \"num_attention_heads\": 4,"
           " \"num_key_value_heads\": %d, \"head_dim\": 16, \"intermediate_size\": 128, \"vocab_size\": %d,"
           " \"max_position_embeddings\": 128, \"tie_word_embeddings\": %s, \"torch_dtype\": \"%s\"%s}",
           t->type, t->layers ? t->layers : 2, t->kv_heads, t->vocab, t->tied ? "true" : "false", t->dtype, t->extra);
  return t->json;
}

static void output_chunked(struct vf_profile *p, bool on) { p->output_chunks = on ? 8 : 1; }
static void bf16_full_one_micro(struct vf_setup *s) { s->weights = VF_PREC_BF16, s->accumulation = 1; }


/* torchtune's chunked output: the model makes all 8 chunks of bf16 logits (2 bytes each of
 * the 8 x 256 = 2048 logits) before the loss up-casts them one chunk at a time next to every
 * chunk's fp32 log-softmax: 2 + 4 + 4 / 8 bytes per logit at the loss's peak instead of
 * the unchunked 2 + 4 + 4. A trainable head gets its weight's gradient in 8 pieces, summed
 * out of place: two more head-sized tensors (4096 x 64 x 2 bytes) at the head's backward,
 * the backward's peak then; unchunked, the peak comes at the end of the backward, with the
 * layers' gradients (2 x 40,960 x 2 bytes) and the untied embedding's, made last (as large
 * as the head's), but without the layers' saved tensors and the logits' gradient. */
static void test_chunked_output(void **state) {
  (void)state;
  uint64_t n = 8 * 256;
  assert_int_equal(phase_gain(false, "torchtune", output_chunked, bf16_lora, VF_PHASE_LOSS),
                   -(int64_t)(n * 4 - n * 4 / 8));
  struct toy_shape wide = {.type = "llama", .kv_heads = 4, .vocab = 4096, .tied = false,
                           .dtype = "bfloat16", .extra = ""};
  int64_t gain = config_gain(toy_json(&wide), "torchtune", output_chunked, bf16_full_one_micro,
                             VF_PHASE_BACKWARD);
  int64_t head = 4096 * 64 * 2, layer_grads = 2 * 40960 * 2;
  assert_in_range(gain, head - layer_grads, head);
}

static void dropout_flag(struct vf_profile *p, bool on) { p->lora_dropout = on; }
static void dora(struct vf_setup *s) { s->method = VF_METHOD_DORA; }

/* LoRA dropout gives each adapted projection (q and v) a mask (8 x 64 bytes) and a dropped
 * copy of its input (8 x 64 x 4); without it the two branches keep their one shared input
 * (8 x 64 x 4) per layer. DoRA under dropout also keeps each base weight's copy
 * (64 x 64 x 4). */
static void test_adapter_input(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "torchtune", dropout_flag, lora_qv, VF_PHASE_LOSS),
                   2 * (2 * (512 + 2048) - 2048));
  assert_int_equal(phase_gain(false, "torchtune", dropout_flag, dora, VF_PHASE_LOSS),
                   2 * (2 * (512 + 2048 + 16384) - 2048));
}


static void rope_tables(struct vf_profile *p, bool on) {
  if (!on) p->rope_table_bytes.n = 0;
}
static void full_ft(struct vf_setup *s) { s->method = VF_METHOD_FULL; }

/* torchtune keeps RoPE tables of 128 positions x 16 head dimensions: 4 bytes each for
 * llama's, one for the model, and 8 for qwen2's, one per layer under LoRA. */
static void test_rope_tables(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "torchtune", rope_tables, full_ft, VF_PHASE_LOAD), 4 * 128 * 16);
  assert_int_equal(phase_gain(false, "torchtune", rope_tables, lora_qv, VF_PHASE_LOAD), 4 * 128 * 16);
  struct toy_shape qwen2 = {.type = "qwen2", .kv_heads = 4, .vocab = 256, .tied = false,
                            .dtype = "float32", .extra = ""};
  assert_int_equal(config_gain(toy_json(&qwen2), "torchtune", rope_tables, full_ft, VF_PHASE_LOAD), 8 * 128 * 16);
  assert_int_equal(config_gain(toy_json(&qwen2), "torchtune", rope_tables, lora_qv, VF_PHASE_LOAD),
                   2 * 8 * 128 * 16);
  assert_int_equal(phase_gain(false, "hf", rope_tables, full_ft, VF_PHASE_LOAD), 0);
}


static void softcap_logits(struct vf_profile *p, bool on) { p->final_softcap_logits = on; }

/* Capping the logits keeps their tanh (2 bytes per logit), which leaves the chunked loss
 * less room under its peak (4 - 2 bytes per logit over 8 chunks); capping the final norm's
 * output keeps its tanh instead (8 x 64 x 2 bytes). */
static void test_final_softcap(void **state) {
  (void)state;
  int64_t n = 8 * 256;
  struct toy_shape gemma2 = {.type = "gemma2", .kv_heads = 4, .vocab = 256, .tied = true,
                             .dtype = "bfloat16",
                             .extra = ", \"final_logit_softcapping\": 30.0, \"attn_logit_softcapping\": 50.0"};
  assert_int_equal(config_gain(toy_json(&gemma2), "torchtune", softcap_logits, bf16_lora, VF_PHASE_LOSS),
                   2 * n - (4 - 2) * n / 8 - 8 * 64 * 2);
}


static void input_grads_flag(struct vf_profile *p, bool on) { p->ckpt_input_grads = on; }
static void lora_ckpt(struct vf_setup *s) { s->method = VF_METHOD_LORA, s->grad_ckpt = VF_CKPT_FULL; }

/* Checkpointing makes the embeddings' output require grad (transformers'
 * enable_input_require_grads): GPT-2's embedding dropout then keeps its mask, 8 x 64 bools
 * (a 512-byte block), through the forward and the loss, and the looked-up rows, now a leaf
 * its AccumulateGrad node holds, 8 x 64 fp32 values; full fine-tuning has the dropout in
 * the graph either way, and no such leaf. */
static void test_checkpointed_input_grads(void **state) {
  (void)state;
  assert_int_equal(config_gain(gpt2_config, "hf", input_grads_flag, lora_ckpt, VF_PHASE_LOSS), 512 + 8 * 64 * 4);
  assert_int_equal(config_gain(gpt2_config, "hf", input_grads_flag, full_ft, VF_PHASE_LOSS), 0);
}

struct graph_frees {
  int n;
  uint64_t bytes;
};

static void count_graph_frees(void *arg, const struct vf_timeline_event *e) {
  struct graph_frees *g = arg;
  if (e->op == VF_TIMELINE_FREE && e->with_graph) g->n++, g->bytes += e->bytes;
}

/* What waits for the autograd graph rather than for the backward's end: GPT-2's looked-up
 * rows, made a leaf by enable_input_require_grads under checkpointing, and the gradient its
 * AccumulateGrad keeps, 8 x 64 fp32 values each, once per step; nothing under full
 * fine-tuning, where the rows are no leaf. */
static void test_leaf_freed_with_graph(void **state) {
  (void)state;
  struct vf_model m;
  load_config(&m, gpt2_config);
  struct vf_setup s;
  vf_setup_default(&s);
  s.seq = 8;
  lora_ckpt(&s);
  struct graph_frees g = {0};
  hf_timeline(&m, &s, count_graph_frees, &g);
  assert_int_equal(g.n, 2 * 2); /* two steps */
  assert_int_equal(g.bytes, 2 * 2 * 8 * 64 * 4);
  full_ft(&s);
  g = (struct graph_frees){0};
  hf_timeline(&m, &s, count_graph_frees, &g);
  assert_int_equal(g.n, 0);
  vf_model_cleanup(&m);
}

static void generates_flag(struct vf_profile *p, bool on) { p->generates = on; }
static void lora_seq64(struct vf_setup *s) { s->method = VF_METHOD_LORA, s->seq = 64; }

/* litgpt generates a sample after validating: a KV cache of batch 1 over the 64 positions,
 * K and V of each of the 64 layers (64 x 64 x 4 bytes each: 2 MiB in all), next to the
 * causal mask (64 x 64 bools). A deep model with a small vocabulary, so that the cache
 * outgrows what validation adds (about 0.3 MiB here) by far. */
static void test_generated_sample(void **state) {
  (void)state;
  struct toy_shape deep = {.type = "llama", .kv_heads = 4, .vocab = 64, .layers = 64, .tied = false,
                           .dtype = "float32", .extra = ""};
  int64_t kv = 2 * 64 * 64 * 64 * 4, mask = 64 * 64;
  int64_t gain = config_gain(toy_json(&deep), "litgpt", generates_flag, lora_seq64, VF_PHASE_EVAL);
  assert_in_range(gain, kv - kv / 5, kv + 2 * mask + 512);
}

static void foreach_flag(struct vf_profile *p, bool on) { p->foreach_optimizer = on; }

/* foreach AdamW's sqrt(exp_avg_sq) list: one temporary per trainable tensor, each rounded
 * to its own 512-byte blocks like the weights (461,312 bytes for the fp32 toy), not one
 * block of their sum (460,032 rounded to 460,288). */
static void test_foreach_temporaries(void **state) {
  (void)state;
  assert_int_equal(phase_gain(false, "hf", foreach_flag, full_ft, VF_PHASE_OPTIMIZER), TOY_WEIGHT_BLOCKS);
}

static void gqa_expand(struct vf_profile *p, bool on) { p->gqa_expand = on; }
static void interleaved(struct vf_profile *p, bool on) { p->kv_repeat_interleave = on; }

/* Expanding 2 K/V heads to 4 copies K and V (bf16: 8 x 64 x 2 bytes each per layer, for
 * the unexpanded 8 x 32 x 2 in a 512-byte block); expanding a single head stays a view,
 * unless repeat_interleave makes the copies. Unexpanded, grouped K/V go to SDPA with
 * enable_gqa and flash takes them. */
static void test_kv_expansion(void **state) {
  (void)state;
  assert_int_equal(phase_gain(true, "torchtune", gqa_expand, bf16_lora, VF_PHASE_LOSS), 2 * 2 * (1024 - 512));
  struct toy_shape mqa = {.type = "llama", .kv_heads = 1, .vocab = 256, .tied = false,
                          .dtype = "bfloat16", .extra = ""};
  assert_int_equal(config_gain(toy_json(&mqa), "torchtune", gqa_expand, bf16_lora, VF_PHASE_LOSS), 0);
  assert_int_equal(config_gain(toy_json(&mqa), "torchtune", interleaved, bf16_lora, VF_PHASE_LOSS),
                   2 * 2 * (1024 - 512));
}


static void bf16_full_two_micro(struct vf_setup *s) { s->weights = VF_PREC_BF16, s->accumulation = 2; }

/* Accumulating into kept gradients, a tied head's new gradient (4096 x 64 x 2 bytes) waits
 * for the embedding's, and both are summed beside the kept one: one more than when the
 * first micro batch makes them, at the embedding's backward (hf: unchunked). */
static void test_accumulating_tied_grads(void **state) {
  (void)state;
  struct toy_shape tied = {.type = "llama", .kv_heads = 4, .vocab = 4096, .tied = true,
                           .dtype = "bfloat16", .extra = ""};
  const char *cfg = toy_json(&tied);
  uint64_t one = config_run(cfg, "hf", unchanged, true, bf16_full_one_micro).phase_allocated[VF_PHASE_BACKWARD];
  uint64_t two = config_run(cfg, "hf", unchanged, true, bf16_full_two_micro).phase_allocated[VF_PHASE_BACKWARD];
  assert_int_equal(two - one, 4096 * 64 * 2);
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
  s.seq = 1025; /* one past GPT-2's position table */
  expect_invalid(&s, "gpt2", "longer than the model's 1024 learned positions");
  vf_setup_default(&s);
  s.seq = 1024;
  s.gpus = 0;
  expect_invalid(&s, "gpt2", "--gpus");
  vf_setup_default(&s);
  s.shard = VF_SHARD_ZERO3;
  s.tp = 8;
  s.gpus = 4;
  expect_invalid(&s, "llama-2-7b", "--tp larger than --gpus");
}

/* llama-3.1-8b LoRA, batch 4 x 2048 (8,192 tokens), checkpointed: its peak is the loss's. */
static struct vf_estimate big_vocab_lora(const char *framework, enum vf_loss loss) {
  struct vf_model m;
  struct vf_setup s;
  load(&m, "llama-3.1-8b");
  vf_setup_default(&s);
  s.weights = VF_PREC_BF16, s.method = VF_METHOD_LORA, s.batch = 4, s.seq = 2048, s.grad_ckpt = VF_CKPT_FULL;
  s.loss = loss;
  struct vf_estimate e = run(&m, &s, framework);
  vf_model_cleanup(&m);
  return e;
}

/* --loss fused: Liger's kernel never makes the 128,256-wide logits whole, so the loss holds
 * the 10 bytes a logit the Trainer's loss does at once (bf16 logits, their fp32 up-cast and
 * log-softmax) no more, and keeps instead the gradient of the head's input (8,192 x 4,096 x
 * 2), one chunk of 256 positions' logits (8,192 / ceil(128,256 / 4,096), to a power of two)
 * and the fp32 per-token losses. Cut Cross-Entropy's forward keeps less still. */
static void test_fused_loss(void **state) {
  (void)state;
  const uint64_t T = 8192, V = 128256, h = 4096;
  struct vf_estimate plain = big_vocab_lora("hf", VF_LOSS_DEFAULT), fused = big_vocab_lora("hf", VF_LOSS_FUSED);
  struct vf_estimate cce = big_vocab_lora("hf", VF_LOSS_CCE);
  uint64_t logits = T * V * 10, kernel = T * h * 2 + 256 * V * 2 + T * 4;
  uint64_t drop = plain.phase_allocated[VF_PHASE_LOSS] - fused.phase_allocated[VF_PHASE_LOSS];
  assert_true(drop <= logits - kernel && drop + (4u << 20) >= logits - kernel);
  assert_true(plain.allocated_peak - fused.allocated_peak >= logits);
  assert_true(cce.phase_allocated[VF_PHASE_LOSS] < fused.phase_allocated[VF_PHASE_LOSS]);
}

/* A loss the framework cannot run is refused; where its own loss is chunked, --loss chunked
 * is that loss. */
static void test_loss_offered(void **state) {
  (void)state;
  struct vf_estimate own = big_vocab_lora("torchtune", VF_LOSS_DEFAULT);
  struct vf_estimate chunked = big_vocab_lora("torchtune", VF_LOSS_CHUNKED);
  assert_int_equal(own.device_peak, chunked.device_peak);
  struct vf_model m;
  struct vf_profile p;
  struct vf_alloc_conf c;
  struct vf_diag d;
  struct vf_estimate e;
  struct vf_setup s;
  load(&m, "llama-3.1-8b");
  vf_setup_default(&s);
  s.loss = VF_LOSS_FUSED;
  assert_int_equal(profile_read("litgpt", NULL, &p, &d), 0);
  vf_alloc_conf_default(&c);
  assert_int_equal(vf_estimate(&m, &s, &p, &c, &e, &d), VF_EINVAL);
  assert_non_null(strstr(d.msg, "--loss fused: litgpt 0.5 has no such loss (it runs: default, chunked)"));
  vf_model_cleanup(&m);
  s.task = VF_TASK_SEQ_CLS;
  expect_invalid(&s, "llama-3.1-8b", "replaces a causal LM's head and loss");
}

/* fp16 autocast trains with a GradScaler: its scale (fp32) and growth tracker (int32) are
 * made at the first loss and kept, a 512-byte block each, on top of what bf16 autocast
 * holds with the same tensors. */
static void test_grad_scaler(void **state) {
  (void)state;
  struct vf_model m;
  struct vf_setup s;
  load(&m, "gpt2");
  vf_setup_default(&s);
  s.seq = 1024; /* GPT-2's positions */
  s.amp = VF_PREC_BF16;
  struct vf_estimate bf16 = run(&m, &s, "hf");
  s.amp = VF_PREC_FP16;
  struct vf_estimate fp16 = run(&m, &s, "hf");
  assert_int_equal(fp16.allocated_peak - bf16.allocated_peak, 1024);
  assert_int_equal(fp16.by_category[VF_CAT_OPTIMIZER] - bf16.by_category[VF_CAT_OPTIMIZER], 1024);
  vf_model_cleanup(&m);
}

/* torchtune's optimizer_in_bwd: each parameter steps in a hook as its gradient arrives, which
 * then goes, so the whole model's gradients never exist: full fine-tuning of Llama 3.2 1B in
 * bf16 peaks at the end of its backward with every gradient alive without it; with it, the
 * peak holds one gradient at most (the tied embedding's, summed last) and is lower; the
 * states are the same. Refused where torchtune cannot run it. */
static void test_optimizer_in_bwd(void **state) {
  (void)state;
  struct vf_model m;
  struct vf_setup s;
  load(&m, "llama-3.2-1b");
  vf_setup_default(&s);
  s.weights = VF_PREC_BF16, s.seq = 256, s.accumulation = 1;
  struct vf_estimate after = run(&m, &s, "torchtune");
  s.optimizer_in_bwd = VF_IN_BWD_YES;
  struct vf_estimate inside = run(&m, &s, "torchtune");
  uint64_t grads = after.trainable_params * 2, largest = 128256ull * 2048 * 2 + (1u << 20); /* the embedding's, a norm's */
  assert_true(after.by_category[VF_CAT_GRADIENTS] >= grads);
  assert_true(inside.by_category[VF_CAT_GRADIENTS] <= largest);
  assert_true(inside.allocated_peak + (1ull << 30) < after.allocated_peak);
  assert_int_equal(inside.by_category[VF_CAT_OPTIMIZER], after.by_category[VF_CAT_OPTIMIZER]);
  vf_model_cleanup(&m);
  expect_invalid(&s, "llama-3.2-1b", "hf 5.23 steps its optimizer after the backward");
  struct vf_profile p;
  struct vf_alloc_conf c;
  struct vf_diag d;
  struct vf_estimate e;
  load(&m, "llama-3.2-1b");
  assert_int_equal(profile_read("torchtune", NULL, &p, &d), 0);
  vf_alloc_conf_default(&c);
  s.accumulation = 2;
  assert_int_equal(vf_estimate(&m, &s, &p, &c, &e, &d), VF_EINVAL);
  assert_non_null(strstr(d.msg, "needs --accumulation 1"));
  s.accumulation = 1, s.method = VF_METHOD_LORA;
  assert_int_equal(vf_estimate(&m, &s, &p, &c, &e, &d), VF_EINVAL);
  assert_non_null(strstr(d.msg, "full fine-tuning only"));
  vf_model_cleanup(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_toy_params),       cmocka_unit_test(test_optimizer_state_sizes),
      cmocka_unit_test(test_qlora_storage),    cmocka_unit_test(test_zero_model_states),
      cmocka_unit_test(test_peaks_are_ordered), cmocka_unit_test(test_impossible_setups),
      cmocka_unit_test(test_ddp_buckets),      cmocka_unit_test(test_paged_states),
      cmocka_unit_test(test_gradients_kept),   cmocka_unit_test(test_memory_savers),
      cmocka_unit_test(test_enum_names),       cmocka_unit_test(test_lora_zero_pad),
      cmocka_unit_test(test_qkv_view),         cmocka_unit_test(test_fsdp_no_sync), cmocka_unit_test(test_fsdp_grads_in_compute_dtype), cmocka_unit_test(test_fsdp_adapter_units_train), cmocka_unit_test(test_fsdp_root_reshards), cmocka_unit_test(test_leaf_freed_with_graph),
      cmocka_unit_test(test_quantize_at_load), cmocka_unit_test(test_softmax_saves_input),
      cmocka_unit_test(test_zero_grad_in_place),
      cmocka_unit_test(test_flat_params),      cmocka_unit_test(test_validates_first),      cmocka_unit_test(test_longest_first),      cmocka_unit_test(test_dequant_temporaries),
      cmocka_unit_test(test_layer_extension),  cmocka_unit_test(test_no_sync_middle_micro),
      cmocka_unit_test(test_varied_lengths),
      cmocka_unit_test(test_gpu_capacity),   cmocka_unit_test(test_held_logits),
      cmocka_unit_test(test_compiled_loss),
      cmocka_unit_test(test_compiled_selective_share),
      cmocka_unit_test(test_compiled_layers),
      cmocka_unit_test(test_quantized_inputs),
      cmocka_unit_test(test_quant_rest_fp32),
      cmocka_unit_test(test_cast_qkv_keeps_no_view),
      cmocka_unit_test(test_fsdp_gathers_quantized_storage), cmocka_unit_test(test_graph_held),
      cmocka_unit_test(test_gelu_new),         cmocka_unit_test(test_full_load),
      cmocka_unit_test(test_eval_logits_apart),
      cmocka_unit_test(test_dora),             cmocka_unit_test(test_zero_grad_before_backward),
      cmocka_unit_test(test_eval_and_save),
      cmocka_unit_test(test_lion_fp32_states), cmocka_unit_test(test_embedding_states_fp32),
      cmocka_unit_test(test_optim8bit_block),  cmocka_unit_test(test_eager_softmax_in_dtype),
      cmocka_unit_test(test_sdpa_math_backend), cmocka_unit_test(test_sdpa_math_fp32),
      cmocka_unit_test(test_sdpa_out_copied),  cmocka_unit_test(test_qkv_view_models),
      cmocka_unit_test(test_layer_norm_input), cmocka_unit_test(test_gelu_new_autocast),
      cmocka_unit_test(test_experts_in_weight_dtype), cmocka_unit_test(test_adafactor_fp32_copies),
      cmocka_unit_test(test_adafactor_trainable_only), cmocka_unit_test(test_autocast_cache),
      cmocka_unit_test(test_loss_tensors_apart),
      cmocka_unit_test(test_padded_attention), cmocka_unit_test(test_embedding_gradient_last),
      cmocka_unit_test(test_stable_embedding), cmocka_unit_test(test_chunked_loss_backward),
      cmocka_unit_test(test_softcap_before_conversion), cmocka_unit_test(test_parallel_norms_share_input),
      cmocka_unit_test(test_qk_norms),          cmocka_unit_test(test_post_norms),
      cmocka_unit_test(test_rms_norm_weight_fp32),
      cmocka_unit_test(test_sliding_window_mask), cmocka_unit_test(test_unmodelled_refused),
      cmocka_unit_test(test_autocast_head_per_chunk), cmocka_unit_test(test_adapter_layers_below_the_prompt),
      cmocka_unit_test(test_adapter_v2_keeps_scaled_outputs), cmocka_unit_test(test_full_head_whole),
      cmocka_unit_test(test_adafactor_largest_tensor),
      cmocka_unit_test(test_chunked_output),   cmocka_unit_test(test_adapter_input),
      cmocka_unit_test(test_rope_tables),      cmocka_unit_test(test_final_softcap),
      cmocka_unit_test(test_kv_expansion),     cmocka_unit_test(test_foreach_temporaries), cmocka_unit_test(test_generated_sample), cmocka_unit_test(test_checkpointed_input_grads),     cmocka_unit_test(test_accumulating_tied_grads),
      cmocka_unit_test(test_fused_loss),       cmocka_unit_test(test_loss_offered),
      cmocka_unit_test(test_grad_scaler),      cmocka_unit_test(test_optimizer_in_bwd),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

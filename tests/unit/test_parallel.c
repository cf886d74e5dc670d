/* Parallel layouts: how pipeline schedules split the layers and hold micro batches (hand
 * computed per schedule), what a pipeline rank keeps, tensor and sequence parallelism,
 * Megatron's fp32 gradient buffer, and the layouts a framework refuses. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/pipeline.h"
#include "io/profile.h"
#include "vramfit.h"

/* The toy model of test_estimate.c with 8 layers: hidden 64, 4 heads, MLP 128, vocab 256. */
static const char toy8_config[] =
    "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 8,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 4, \"intermediate_size\": 128,"
    " \"vocab_size\": 256, \"max_position_embeddings\": 2048, \"tie_word_embeddings\": false,"
    " \"torch_dtype\": \"float32\"}";

/* The same with 4 experts in each MLP, 2 of them per token. */
static const char toy_moe_config[] =
    "{\"model_type\": \"mixtral\", \"hidden_size\": 64, \"num_hidden_layers\": 8,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 4, \"intermediate_size\": 128,"
    " \"num_local_experts\": 4, \"num_experts_per_tok\": 2,"
    " \"vocab_size\": 256, \"max_position_embeddings\": 2048, \"tie_word_embeddings\": false,"
    " \"torch_dtype\": \"float32\"}";

/* One micro batch of 1 x 1024 tokens through the 64-wide residual stream in fp32. */
#define STREAM (1024ull * 64 * 4)

static void load(struct vf_model *m, const char *name) {
  struct vf_diag d;
  vf_model_init(m);
  const char *config = name && !strcmp(name, "toy-moe") ? toy_moe_config : toy8_config;
  int rc = name && strcmp(name, "toy-moe") ? vf_model_load(m, name, &d)
                                           : vf_model_from_config_json(m, config, strlen(config), "toy.json", &d);
  assert_int_equal(rc, 0);
}

static int estimate_with(const char *model, const struct vf_setup *s, const struct vf_profile *p,
                         vf_timeline_fn fn, void *arg, struct vf_estimate *e, struct vf_diag *d) {
  struct vf_model m;
  struct vf_alloc_conf c;
  load(&m, model);
  vf_alloc_conf_default(&c);
  vf_diag_clear(d);
  int rc = fn ? vf_estimate_timeline(&m, s, p, &c, fn, arg, e, d) : vf_estimate(&m, s, p, &c, e, d);
  vf_model_cleanup(&m);
  return rc;
}

static int estimate(const char *model, const struct vf_setup *s, const char *framework, vf_timeline_fn fn,
                    void *arg, struct vf_estimate *e, struct vf_diag *d) {
  struct vf_profile p;
  assert_int_equal(profile_read(framework, NULL, &p, d), 0);
  return estimate_with(model, s, &p, fn, arg, e, d);
}

static struct vf_estimate run(const char *model, const struct vf_setup *s, const char *framework) {
  struct vf_estimate e;
  struct vf_diag d;
  if (estimate(model, s, framework, NULL, NULL, &e, &d)) fail_msg("%s", d.msg);
  return e;
}

static struct vf_estimate run_with(const char *model, const struct vf_setup *s, const struct vf_profile *p) {
  struct vf_estimate e;
  struct vf_diag d;
  if (estimate_with(model, s, p, NULL, NULL, &e, &d)) fail_msg("%s", d.msg);
  return e;
}

/* torchtitan@9dec370 splits 126 layers over 8 stages as 15, 16 x 6, 15, and over 16 as
 * 7, 8 x 14, 7; Megatron gives every stage the quotient. */
static void test_stage_layers(void **state) {
  (void)state;
  assert_int_equal(pipeline_stage_layers(126, 8, 0, false), 15);
  for (uint64_t s = 1; s < 7; s++) assert_int_equal(pipeline_stage_layers(126, 8, s, false), 16);
  assert_int_equal(pipeline_stage_layers(126, 8, 7, false), 15);
  assert_int_equal(pipeline_stage_layers(126, 16, 0, false), 7);
  assert_int_equal(pipeline_stage_layers(126, 16, 15, false), 7);
  /* Rank 1 of 8 with two chunks holds stages 1 and 9: 8 + 8. */
  assert_int_equal(pipeline_rank_layers(126, 8, 2, 1, false), 16);
  assert_int_equal(pipeline_rank_layers(126, 8, 2, 0, false), 15);
  /* A remainder larger than the middle stages goes to the last: 5 over 3 is 1, 2, 2. */
  assert_int_equal(pipeline_stage_layers(5, 3, 2, false), 2);
  assert_int_equal(pipeline_stage_layers(32, 4, 3, true), 8);
}

/* Model-chunk forwards held at once, by hand from each schedule's definition. */
static void test_in_flight_counts(void **state) {
  (void)state;
  /* GPipe: all forwards before any backward. */
  assert_int_equal(pipeline_chunks_in_flight(VF_PP_GPIPE, 4, 1, 8, 0), 8);
  assert_int_equal(pipeline_chunks_in_flight(VF_PP_GPIPE, 4, 1, 8, 3), 8);
  /* 1F1B over 4 ranks, 8 micro batches: rank r warms up with 4 - r forwards. */
  assert_int_equal(pipeline_chunks_in_flight(VF_PP_1F1B, 4, 1, 8, 0), 4);
  assert_int_equal(pipeline_chunks_in_flight(VF_PP_1F1B, 4, 1, 8, 1), 3);
  assert_int_equal(pipeline_chunks_in_flight(VF_PP_1F1B, 4, 1, 8, 3), 1);
  /* With fewer micro batches than ranks, all of them. */
  assert_int_equal(pipeline_chunks_in_flight(VF_PP_1F1B, 4, 1, 2, 0), 2);
  /* Interleaved, 4 ranks x 2 chunks, 8 micro batches in rounds of 4: rank 0 warms up with
   * one round of the first chunk (4) plus 2 per rank after it (6), then one more: 11 of the
   * 16 chunk forwards; the last rank 4 + 0 + 1. */
  assert_int_equal(pipeline_chunks_in_flight(VF_PP_INTERLEAVED, 4, 2, 8, 0), 11);
  assert_int_equal(pipeline_chunks_in_flight(VF_PP_INTERLEAVED, 4, 2, 8, 3), 5);
  /* Capped at every chunk forward: 4 micro batches x 2 chunks. */
  assert_int_equal(pipeline_chunks_in_flight(VF_PP_INTERLEAVED, 4, 2, 4, 0), 8);
  /* 6 micro batches over 4 ranks are one round of 6: rank 3 warms up with the first
   * chunk's 6, then one more (7); rank 2 with 6 + 2 (9); rank 0 would warm up with
   * 6 + 6 but holds at most the 12 chunk forwards there are. */
  assert_int_equal(pipeline_chunks_in_flight(VF_PP_INTERLEAVED, 4, 2, 6, 3), 7);
  assert_int_equal(pipeline_chunks_in_flight(VF_PP_INTERLEAVED, 4, 2, 6, 2), 9);
  assert_int_equal(pipeline_chunks_in_flight(VF_PP_INTERLEAVED, 4, 2, 6, 0), 12);
}

/* PyTorch's interleaved schedule runs a rank's backwards chunk by chunk (all m of the last
 * chunk, then all m of the one before) only in one round, fewer than 2 pp micro batches;
 * in more rounds the chunks alternate round by round. */
static void test_chunk_backwards_apart(void **state) {
  (void)state;
  assert_true(pipeline_chunk_backwards_apart(VF_PP_INTERLEAVED, 4, 2, 4));
  assert_true(pipeline_chunk_backwards_apart(VF_PP_INTERLEAVED, 4, 2, 7));
  assert_true(pipeline_chunk_backwards_apart(VF_PP_INTERLEAVED, 8, 2, 8));
  assert_false(pipeline_chunk_backwards_apart(VF_PP_INTERLEAVED, 4, 2, 8));
  assert_false(pipeline_chunk_backwards_apart(VF_PP_INTERLEAVED, 4, 1, 4));
  assert_false(pipeline_chunk_backwards_apart(VF_PP_1F1B, 4, 1, 4));
}

/* Sums the live activations of the replayed rank until the first event of phase `until`;
 * at its first micro batch's loss: the checkpointed inputs of the micro batches in flight,
 * the stage's input, the receive buffers. */
struct kept {
  int64_t live, at;
  enum vf_phase until;
  bool done;
};

static void count_kept(void *arg, const struct vf_timeline_event *e) {
  struct kept *k = arg;
  if (k->done) return;
  if (e->phase == k->until) {
    k->done = true;
    k->at = k->live;
  } else if (e->category == VF_CAT_ACTIVATIONS) {
    k->live += e->op == VF_TIMELINE_ALLOC ? (int64_t)e->bytes : -(int64_t)e->bytes;
  }
}

static void pipeline_setup(struct vf_setup *s, enum vf_pp_schedule schedule, uint64_t pp, uint64_t micro) {
  vf_setup_default(s);
  s->seq = 1024;
  s->grad_ckpt = VF_CKPT_FULL;
  s->optimizer = VF_OPT_SGD;
  s->pp = s->gpus = pp;
  s->pp_schedule = schedule;
  s->accumulation = micro;
}

static struct kept kept_at_loss(const char *framework, const struct vf_setup *s, struct vf_estimate *e) {
  struct kept k = {.until = VF_PHASE_LOSS};
  struct vf_diag d;
  if (estimate(NULL, s, framework, count_kept, &k, e, &d)) fail_msg("%s", d.msg);
  assert_true(k.done);
  return k;
}

/* Full checkpointing keeps each block's input (one STREAM per micro batch in flight), and
 * the stage's input is alive: a rank holding F chunk forwards of its L blocks in c chunks
 * keeps F / c x L + 1 streams when its first micro batch reaches the loss. */
static void test_kept_per_schedule(void **state) {
  (void)state;
  struct vf_setup s;
  struct vf_estimate e;
  /* Megatron 1F1B, 2 ranks of 4 blocks, 4 micro batches: rank 0 holds 2 (the most). */
  pipeline_setup(&s, VF_PP_1F1B, 2, 4);
  struct kept k = kept_at_loss("megatron", &s, &e);
  assert_int_equal(e.pp_rank, 0);
  assert_int_equal(k.at, (2 * 4 + 1) * STREAM);
  /* Megatron interleaved, 2 chunks of 2 blocks per rank: rank 0 warms up with one round of
   * 2 micro batches plus 2 for the rank after it, then one more: 5 chunk forwards of the
   * 8, 2.5 of its 4 blocks' worth. */
  pipeline_setup(&s, VF_PP_INTERLEAVED, 2, 4);
  k = kept_at_loss("megatron", &s, &e);
  assert_int_equal(e.pp_rank, 0);
  assert_int_equal(k.at, (uint64_t)(2.5 * 4 + 1) * STREAM);
  /* torchtitan GPipe: every rank holds all 4; torch.distributed.pipelining adds a receive
   * buffer per micro batch (activations on the last rank, gradients on the first). */
  pipeline_setup(&s, VF_PP_GPIPE, 2, 4);
  k = kept_at_loss("torchtitan", &s, &e);
  assert_int_equal(k.at, (4 * 4 + 1 + 4) * STREAM);
  /* torchtitan 1F1B: the first rank holds 2, the last one. On this toy the last rank peaks
   * at the step's end, as under GPipe: every micro batch's logits and, under torch 2.6,
   * input gradient (test_input_grads_kept), with one micro batch in flight. */
  pipeline_setup(&s, VF_PP_1F1B, 2, 4);
  k = kept_at_loss("torchtitan", &s, &e);
  assert_int_equal(e.pp_rank, 1);
  assert_int_equal(k.at, (1 * 4 + 1 + 4) * STREAM);
}

/* Activations alive when the optimizer step begins. */
static int64_t activations_at_step(const char *torch, const struct vf_setup *s) {
  struct vf_profile p;
  struct vf_diag d;
  struct vf_estimate e;
  struct kept k = {.until = VF_PHASE_OPTIMIZER};
  assert_int_equal(profile_read("torchtitan", torch, &p, &d), 0);
  if (estimate_with(NULL, s, &p, count_kept, &k, &e, &d)) fail_msg("%s", d.msg);
  assert_true(k.done);
  assert_int_equal(e.pp_rank, 1);
  return k.at;
}

/* torch.distributed.pipelining of torch 2.6 leaves each micro batch's stage-input gradient
 * on its receive buffer until the next step; from 2.10 (pytorch#164329) it goes once taken.
 * The toy's last rank of 2 (GPipe, 4 micro batches, the peak rank under both) has received
 * 4 fp32 streams, so 4 gradients of a stream each are still alive when the optimizer steps. */
static void test_input_grads_kept(void **state) {
  (void)state;
  struct vf_setup s;
  pipeline_setup(&s, VF_PP_GPIPE, 2, 4);
  assert_int_equal(activations_at_step("2.6", &s) - activations_at_step("2.13", &s), (int64_t)(4 * STREAM));
}

/* The most whole (unsharded) gradients of the toy blocks' projections live at once: FSDP2
 * keeps each parameter's own, fp32, 4 of 64 x 64 and 3 of 64 x 128 a block. */
#define TOY_PROJ_GRAD(out) (64ull * (out) * 4)
#define TOY_BLOCK_GRAD (4 * TOY_PROJ_GRAD(64) + 3 * TOY_PROJ_GRAD(128))
struct whole_grads {
  uint64_t live, most;
};

static void count_whole_grads(void *arg, const struct vf_timeline_event *e) {
  struct whole_grads *w = arg;
  bool projection = e->bytes == TOY_PROJ_GRAD(64) || e->bytes == TOY_PROJ_GRAD(128);
  if (e->category != VF_CAT_GRADIENTS || !projection || e->op > VF_TIMELINE_FREE) return;
  w->live = e->op == VF_TIMELINE_ALLOC ? w->live + e->bytes : w->live - e->bytes;
  if (w->live > w->most) w->most = w->live;
}

static uint64_t most_whole_grads(enum vf_pp_schedule schedule, uint64_t micro) {
  struct vf_setup s;
  pipeline_setup(&s, schedule, 2, micro);
  s.gpus = 4; /* 2 data-parallel ranks for FSDP to shard over */
  s.shard = VF_SHARD_FSDP;
  struct whole_grads w = {0};
  struct vf_estimate e;
  struct vf_diag d;
  if (estimate(NULL, &s, "torchtitan", count_whole_grads, &w, &e, &d)) fail_msg("%s", d.msg);
  return w.most;
}

/* torch.distributed.pipelining reduces and reshards each stage after its own last
 * backward. Over 2 ranks the toy's 8 blocks make 4 stages of 2 (2 chunks a rank): with 2
 * micro batches (one round) a rank's last chunk is done and reduced before its first
 * chunk's backwards begin, so it holds 2 blocks' whole gradients at most; with 4 (two
 * rounds) the chunks alternate and all 4 blocks' stay whole, as under 1F1B (one stage of 4). */
static void test_interleaved_chunks_reduced_apart(void **state) {
  (void)state;
  /* Whole blocks: a later micro batch's gradient of one projection comes beside them while
   * it is added in. */
  assert_int_equal(most_whole_grads(VF_PP_INTERLEAVED, 2) / TOY_BLOCK_GRAD, 2);
  assert_int_equal(most_whole_grads(VF_PP_INTERLEAVED, 4) / TOY_BLOCK_GRAD, 4);
  assert_int_equal(most_whole_grads(VF_PP_1F1B, 2) / TOY_BLOCK_GRAD, 4);
}

/* Finds an allocation of exactly `bytes` (rounded as the allocator rounds) in a phase and
 * category. */
struct sized {
  uint64_t bytes;
  enum vf_phase phase;
  enum vf_category category;
  bool seen;
};

static void find_block(void *arg, const struct vf_timeline_event *e) {
  struct sized *z = arg;
  z->seen |= e->op == VF_TIMELINE_ALLOC && e->phase == z->phase && e->category == z->category && e->bytes == z->bytes;
}

static bool has_block(const char *model, const struct vf_setup *s, const struct vf_profile *p, enum vf_phase phase,
                      enum vf_category category, uint64_t bytes) {
  struct sized z = {(bytes + 511) / 512 * 512, phase, category, false};
  struct vf_estimate e;
  struct vf_diag d;
  if (estimate_with(model, s, p, find_block, &z, &e, &d)) fail_msg("%s", d.msg);
  return z.seen;
}

static struct vf_profile profile(const char *framework) {
  struct vf_profile p;
  struct vf_diag d;
  assert_int_equal(profile_read(framework, NULL, &p, &d), 0);
  return p;
}

static bool forward_temporary(const char *model, const char *framework, const struct vf_setup *s, uint64_t bytes) {
  struct vf_profile p = profile(framework);
  return has_block(model, s, &p, VF_PHASE_FORWARD, VF_CAT_TEMPORARIES, bytes);
}

/* Ring attention over cp 2, by hand for the toy model (512 of the 1024 tokens per GPU, 64
 * query and 64 key/value channels, fp32): this rank's keys and values (512 x 2 x 64 x 4 =
 * 256 KiB) next to those received and the fp32 partial outputs being merged (512 x 64 x 4
 * x 2 = 256 KiB). torchtitan (torch's context_parallel) gathers both ranks' (512 KiB):
 * 1 MiB; Megatron passes one rank's at a time (256 KiB): 768 KiB. */
static void test_ring_attention_buffers(void **state) {
  (void)state;
  struct vf_setup s;
  pipeline_setup(&s, VF_PP_DEFAULT, 1, 1);
  s.cp = s.gpus = 2;
  assert_true(forward_temporary(NULL, "torchtitan", &s, 1024 * 1024));
  assert_false(forward_temporary(NULL, "torchtitan", &s, 768 * 1024));
  assert_true(forward_temporary(NULL, "megatron", &s, 768 * 1024));
  s.cp = 1;
  assert_false(forward_temporary(NULL, "torchtitan", &s, 1024 * 1024));
}

/* DeepSpeed's ZeRO-2 backward makes two reduce buckets of hidden x hidden bf16 elements
 * (the HF integration's "auto", overlap_comm): 2 x 4096 x 4096 x 2 bytes = 64 MiB for
 * Llama 2 7B, in one block; FSDP has none. */
static void test_zero_reduce_buckets(void **state) {
  (void)state;
  struct vf_setup s;
  vf_setup_default(&s);
  s.seq = 128, s.weights = VF_PREC_BF16, s.gpus = 2, s.shard = VF_SHARD_ZERO2, s.optimizer = VF_OPT_SGD;
  struct vf_profile p = profile("deepspeed");
  assert_true(has_block("llama-2-7b", &s, &p, VF_PHASE_BACKWARD, VF_CAT_GRADIENTS, 64ull << 20));
  s.shard = VF_SHARD_FSDP;
  assert_false(has_block("llama-2-7b", &s, &p, VF_PHASE_BACKWARD, VF_CAT_GRADIENTS, 64ull << 20));
}

/* What sharded training gathers for the forward. */
static bool gathered(const char *model, const struct vf_setup *s, const struct vf_profile *p, uint64_t bytes) {
  return has_block(model, s, p, VF_PHASE_FORWARD, VF_CAT_WEIGHTS, bytes);
}

/* The toy model in fp32 under DeepSpeed's ZeRO-3 on 2 GPUs. */
static void zero3_setup(struct vf_setup *s, struct vf_profile *p) {
  pipeline_setup(s, VF_PP_DEFAULT, 1, 1);
  s->gpus = 2;
  s->shard = VF_SHARD_ZERO3;
  *p = profile("deepspeed");
}

/* ZeRO-3 keeps parameters of at most 10 x hidden elements (the HF integration's "auto")
 * gathered for the run, next to their shards: the toy's two norms of 64 fp32 elements in
 * each of 8 layers, 512 bytes a layer, and the final one, whose 256 bytes take a block of
 * the allocator's 512; and one IPG buffer of hidden x hidden fp32 elements, 16 KiB. A
 * threshold of 63 keeps no norm. */
static void test_zero3_persistent_parameters(void **state) {
  (void)state;
  struct vf_setup s;
  struct vf_profile p;
  zero3_setup(&s, &p);
  uint64_t coordinated = run_with(NULL, &s, &p).phase_allocated[VF_PHASE_LOAD];
  p.zero3_persistence_elems = 63;
  uint64_t no_norms = run_with(NULL, &s, &p).phase_allocated[VF_PHASE_LOAD];
  assert_int_equal(coordinated - no_norms, 9 * 512);
  p.zero3_persistence_elems = 0;
  p.zero3_max_live_millions = 0;
  p.zero3_ipg_buckets = 0;
  uint64_t layer_at_a_time = run_with(NULL, &s, &p).phase_allocated[VF_PHASE_LOAD];
  assert_int_equal(coordinated - layer_at_a_time, 9 * 512 + 64 * 64 * 4);
}

/* What ZeRO-3's prefetching holds gathered. The toy is smaller than max_live_parameters
 * (1e9): all its matrices end up gathered, 8 layers x (4 x 64 x 64 + 3 x 64 x 128) plus
 * the embedding and head, 2 x 256 x 64: 360448 fp32 elements. Without the coordinator a
 * layer is gathered at a time, its norms too (41088 elements). Llama 2 7B's are capped at
 * max_live plus one whole parameter, the largest (the embedding or the head, 32000 x 4096),
 * in bf16. */
static void test_zero3_live_parameters(void **state) {
  (void)state;
  struct vf_setup s;
  struct vf_profile p;
  zero3_setup(&s, &p);
  assert_true(gathered(NULL, &s, &p, 360448 * 4));
  assert_false(gathered(NULL, &s, &p, 41088 * 4));
  p.zero3_max_live_millions = 0;
  assert_true(gathered(NULL, &s, &p, 41088 * 4));
  assert_false(gathered(NULL, &s, &p, 360448 * 4));
  zero3_setup(&s, &p);
  s.seq = 128, s.weights = VF_PREC_BF16, s.optimizer = VF_OPT_SGD;
  assert_true(gathered("llama-2-7b", &s, &p, (1000000000ull + 32000 * 4096) * 2));
}

static bool step_temporary(const char *model, const struct vf_setup *s, const struct vf_profile *p, uint64_t bytes) {
  return has_block(model, s, p, VF_PHASE_OPTIMIZER, VF_CAT_TEMPORARIES, bytes);
}

/* ZeRO-3's step converts a sub group's gradient partitions to fp32 at once. The toy in bf16
 * over 2 GPUs is one sub group: 8 x 41088 + 2 x 256 x 64 + 64 = 361536 trainable elements,
 * 180768 a GPU, flattened (2 bytes each) and converted (4). Llama 2 7B's 3.37e9 a GPU are
 * cut into sub groups of 1e9 elements, one parameter's partition past it at most, the
 * largest: the embedding's or the head's, 32000 x 4096 / 2. */
static void test_zero3_step_sub_group(void **state) {
  (void)state;
  struct vf_setup s;
  struct vf_profile p;
  zero3_setup(&s, &p);
  s.weights = VF_PREC_BF16;
  assert_true(step_temporary(NULL, &s, &p, 180768 * 2));
  assert_true(step_temporary(NULL, &s, &p, 180768 * 4));
  p.zero3_sub_group_millions = 0;
  assert_false(step_temporary(NULL, &s, &p, 180768 * 4));
  zero3_setup(&s, &p);
  s.seq = 128, s.weights = VF_PREC_BF16, s.optimizer = VF_OPT_SGD;
  assert_true(step_temporary("llama-2-7b", &s, &p, (1000000000ull + 32000 * 4096 / 2) * 4));
}

/* Expert parallelism over 2 of the toy MoE's 4 experts: without sharding each GPU loads 2
 * experts of 3 x 64 x 128 fp32 weights in each of 8 layers fewer (1.5 MiB), and Megatron's
 * fp32 gradient buffer made at load is as much smaller (3 MiB in all); sharded over
 * 4 GPUs, each expert over the 2 of its expert-data-parallel group, the shards weigh the
 * same. The all-to-all sends the 1024 tokens x 2 experts x 64 channels x 4 bytes (512 KiB)
 * next to those it receives: 1 MiB. */
static void test_expert_parallelism(void **state) {
  (void)state;
  struct vf_setup s;
  pipeline_setup(&s, VF_PP_DEFAULT, 1, 1);
  s.gpus = 4;
  uint64_t whole = run("toy-moe", &s, "megatron").phase_allocated[VF_PHASE_LOAD];
  assert_false(forward_temporary("toy-moe", "megatron", &s, 1024 * 1024));
  s.ep = 2;
  uint64_t half = run("toy-moe", &s, "megatron").phase_allocated[VF_PHASE_LOAD];
  assert_int_equal(whole - half, 2 * 8ull * 2 * 3 * 64 * 128 * 4);
  assert_true(forward_temporary("toy-moe", "megatron", &s, 1024 * 1024));
  s.shard = VF_SHARD_FSDP;
  uint64_t sharded_ep = run("toy-moe", &s, "torchtitan").phase_allocated[VF_PHASE_LOAD];
  s.ep = 1;
  assert_int_equal(run("toy-moe", &s, "torchtitan").phase_allocated[VF_PHASE_LOAD], sharded_ep);
}

/* Llama 3.1 8B under torchtitan, FSDP over 2 replicas, 8 micro batches of 1 x 4096. */
static void titan_setup(struct vf_setup *s, uint64_t tp, uint64_t pp, uint64_t cp) {
  vf_setup_default(s);
  s->seq = 4096;
  s->accumulation = 8;
  s->weights = VF_PREC_FP32;
  s->amp = VF_PREC_BF16;
  s->grad_ckpt = VF_CKPT_FULL;
  s->shard = VF_SHARD_FSDP;
  s->tp = tp;
  s->pp = pp;
  s->cp = cp;
  s->gpus = 2 * tp * pp * cp;
}

/* Ring attention exchanges the keys and values the SDPA call gets. torchtitan repeats Llama
 * 3.1 8B's 8 key/value heads to its 32 query heads first, so over cp 2 (2048 of 4096 tokens
 * per GPU, bf16) this rank's are 2048 x 2 x 4096 x 2 = 32 MiB, both ranks' gathered 64 MiB
 * and the fp32 outputs merged 2048 x 4096 x 4 x 2 = 64 MiB: 160 MiB, not the 88 MiB of the
 * unrepeated 1024 channels. */
static void test_ring_attention_repeated_heads(void **state) {
  (void)state;
  struct vf_setup s;
  titan_setup(&s, 1, 1, 2);
  assert_true(forward_temporary("llama-3.1-8b", "torchtitan", &s, 160ull << 20));
  assert_false(forward_temporary("llama-3.1-8b", "torchtitan", &s, 88ull << 20));
}

/* torch's loss_parallel, which torchtitan enters under TP, holds one fp32 tensor a logit
 * more than aten's fused kernels, in the loss's forward and in its backward: Llama 3.1 8B
 * over tp 2 (4096 tokens, 128256 / 2 = 64128 logits each), 4096 x 64128 x 4 bytes =
 * 1002 MiB more at both peaks; without TP the loss is aten's. */
static void test_loss_parallel(void **state) {
  (void)state;
  struct vf_setup s;
  titan_setup(&s, 2, 1, 1);
  struct vf_profile p = profile("torchtitan");
  struct vf_estimate parallel = run_with("llama-3.1-8b", &s, &p);
  p.loss_parallel = false;
  struct vf_estimate fused = run_with("llama-3.1-8b", &s, &p);
  uint64_t more = 4096ull * 64128 * 4;
  assert_int_equal(parallel.phase_allocated[VF_PHASE_LOSS] - fused.phase_allocated[VF_PHASE_LOSS], more);
  assert_int_equal(parallel.phase_allocated[VF_PHASE_BACKWARD] - fused.phase_allocated[VF_PHASE_BACKWARD], more);
  titan_setup(&s, 1, 1, 1);
  uint64_t unsharded = run_with("llama-3.1-8b", &s, &p).phase_allocated[VF_PHASE_LOSS];
  p.loss_parallel = true;
  assert_int_equal(run_with("llama-3.1-8b", &s, &p).phase_allocated[VF_PHASE_LOSS], unsharded);
}

/* DistributedDataParallel's constructor broadcasts the parameters from rank 0 through flat
 * buckets of up to 250 MiB: the toy model's 361,536 fp32 elements (embedding and head 256 x
 * 64 each, 8 layers of 41,088, the final norm's 64) make one bucket of 1,446,144 bytes at
 * load. Sharded data parallelism, or a framework without it, makes none. */
static void test_ddp_init_broadcast(void **state) {
  (void)state;
  struct vf_setup s;
  vf_setup_default(&s);
  s.seq = 1024, s.gpus = 2;
  struct vf_profile p = profile("hf");
  assert_true(has_block(NULL, &s, &p, VF_PHASE_LOAD, VF_CAT_TEMPORARIES, 1446144));
  p.ddp_init_broadcast = false;
  assert_false(has_block(NULL, &s, &p, VF_PHASE_LOAD, VF_CAT_TEMPORARIES, 1446144));
  p.ddp_init_broadcast = true;
  s.shard = VF_SHARD_FSDP;
  assert_false(has_block(NULL, &s, &p, VF_PHASE_LOAD, VF_CAT_TEMPORARIES, 1446144));
}

/* 1024 tokens of the default setup, sharded with FSDP over 2 GPUs. */
static void fsdp_on_two(struct vf_setup *s) {
  vf_setup_default(s);
  s->seq = 1024, s->gpus = 2, s->shard = VF_SHARD_FSDP;
}

/* Accelerate's FSDP2 runs no autocast beside FSDP's mixed precision (fsdp_autocast false in
 * hf 5.23): gpt2's gelu_new keeps its tensors in bf16. Under autocast torch.pow up-casts, so
 * all but the first of the gelu_new_saves tensors are fp32: (saves - 1) x T x ffn x 2 more
 * bytes a layer, 12 layers of T 1024 x ffn 3072 at the peak. */
static void test_fsdp_autocast(void **state) {
  (void)state;
  struct vf_setup s;
  fsdp_on_two(&s);
  s.weights = VF_PREC_FP32, s.amp = VF_PREC_BF16;
  struct vf_profile p = profile("hf");
  assert_false(p.fsdp_autocast);
  uint64_t without = run_with("gpt2", &s, &p).by_category[VF_CAT_ACTIVATIONS];
  p.fsdp_autocast = true;
  uint64_t with = run_with("gpt2", &s, &p).by_category[VF_CAT_ACTIVATIONS];
  assert_int_equal(with - without, (uint64_t)(p.gelu_new_saves - 1) * 1024 * 3072 * 2 * 12);
}

/* The most weight bytes live during the forward. */
struct weights_live {
  uint64_t live, most;
  uint64_t sizes[4096], ids[4096];
  size_t n;
};

static void weights_in_forward(void *arg, const struct vf_timeline_event *e) {
  struct weights_live *w = arg;
  if (e->op == VF_TIMELINE_ALLOC && e->category == VF_CAT_WEIGHTS && w->n < 4096) {
    w->ids[w->n] = e->id, w->sizes[w->n++] = e->bytes;
    w->live += e->bytes;
  } else if (e->op == VF_TIMELINE_FREE) {
    for (size_t i = 0; i < w->n; i++)
      if (w->ids[i] == e->id) w->live -= w->sizes[i], w->ids[i] = 0;
  }
  if (e->phase == VF_PHASE_FORWARD && w->live > w->most) w->most = w->live;
}

static uint64_t most_weights_in_forward(const struct vf_setup *s, const struct vf_profile *p) {
  struct weights_live *w = calloc(1, sizeof *w);
  struct vf_estimate e;
  struct vf_diag d;
  if (estimate_with(NULL, s, p, weights_in_forward, w, &e, &d)) fail_msg("%s", d.msg);
  uint64_t most = w->most;
  free(w);
  return most;
}

/* FSDP2 all-gathers a unit into a buffer and copies the parameters out of it; in the
 * forward the buffer stays until the next unit's copy-out is done (torch 2.13
 * _fsdp_param_group.py wait_for_unshard). As layer l is copied out, layer l - 1's buffer,
 * layer l's and its parameters are all there: two of the toy's layers (41,088 fp32
 * elements, 164,352 B) more than FSDP1, which gathers into its flat parameters (at layer 0
 * the root's buffer stands for layer - 1's: 131,584 B, less). */
static void test_fsdp2_gather_buffers(void **state) {
  (void)state;
  struct vf_setup s;
  fsdp_on_two(&s);
  struct vf_profile p = profile("torchtune");
  assert_false(p.fsdp_flat_params);
  uint64_t fsdp2 = most_weights_in_forward(&s, &p);
  p.fsdp_flat_params = true;
  uint64_t fsdp1 = most_weights_in_forward(&s, &p);
  assert_int_equal(fsdp2 - fsdp1, 2 * 164352);
}

/* Accelerate's FSDP2 shards the toy's untied embedding alone (resharded after its forward)
 * and its final norm with the head as another unit, gathered at the norm: through the
 * layers' forward none of the root (embedding, head and norm: 131,584 B as allocated) is
 * gathered, where one root unit is gathered from the start. */
static void test_fsdp_embedding_unit(void **state) {
  (void)state;
  struct vf_setup s;
  fsdp_on_two(&s);
  struct vf_profile p = profile("hf");
  assert_true(p.fsdp_embedding_unit);
  uint64_t apart = most_weights_in_forward(&s, &p);
  p.fsdp_embedding_unit = false;
  assert_int_equal(most_weights_in_forward(&s, &p) - apart, 131584);
}

/* The Trainer's model computes the loss inside its forward, so FSDP2's root post-forward,
 * which frees the last all-gather buffer (the norm-and-head unit's: 16,448 fp32 elements,
 * 66,048 B as allocated), comes after the loss: its 1024 x 256 fp32 logits top the loss
 * phase with the buffer still there. */
static void test_loss_in_forward(void **state) {
  (void)state;
  struct vf_setup s;
  fsdp_on_two(&s);
  struct vf_profile p = profile("hf");
  assert_true(p.loss_in_forward);
  uint64_t inside = run_with(NULL, &s, &p).phase_allocated[VF_PHASE_LOSS];
  p.loss_in_forward = false;
  assert_int_equal(inside - run_with(NULL, &s, &p).phase_allocated[VF_PHASE_LOSS], 66048);
}

/* GPipe holds every micro batch where 1F1B holds at most pp of them. */
static void test_gpipe_above_1f1b(void **state) {
  (void)state;
  struct vf_setup s;
  titan_setup(&s, 1, 4, 1);
  s.pp_schedule = VF_PP_1F1B;
  struct vf_estimate one_f_one_b = run("llama-3.1-8b", &s, "torchtitan");
  s.pp_schedule = VF_PP_GPIPE;
  struct vf_estimate gpipe = run("llama-3.1-8b", &s, "torchtitan");
  assert_true(gpipe.device_peak > one_f_one_b.device_peak);
  assert_true(gpipe.pp_in_flight == 8.0 && one_f_one_b.pp_in_flight <= 4.0);
}

/* The same work over more GPUs: per GPU, memory never rises as tp, pp or cp grows. */
static void test_more_parallel_never_more_memory(void **state) {
  (void)state;
  static const char *const names[] = {"tp", "pp", "cp"};
  struct vf_setup s;
  for (int axis = 0; axis < 3; axis++) {
    uint64_t last = UINT64_MAX;
    for (uint64_t n = 1; n <= 8; n *= 2) {
      titan_setup(&s, axis == 0 ? n : 1, axis == 1 ? n : 1, axis == 2 ? n : 1);
      uint64_t peak = run("llama-3.1-8b", &s, "torchtitan").device_peak;
      if (peak > last)
        fail_msg("%s %llu: %llu bytes, above %s %llu's %llu", names[axis], (unsigned long long)n,
                 (unsigned long long)peak, names[axis], (unsigned long long)n / 2, (unsigned long long)last);
      last = peak;
    }
  }
}

/* Published layouts that ran come out as fitting their GPUs. */
struct published {
  const char *what, *model, *framework;
  uint64_t batch, seq, accumulation, gpus, tp, pp, cp;
  enum vf_shard shard;
  enum vf_precision weights;
  enum vf_pp_schedule schedule;
  enum vf_ckpt ckpt;
  const char *gpu; /* catalogue name */
};

static const struct published published[] = {
    /* pytorch/torchtitan docs/performance.md, its 2024 version (before eaea6f6 rewrote it):
     * Llama 3.1 405B on 128 H100s of 95 GB, FSDP 16 x TP 8, local batch 2 of 8192 tokens,
     * full activation checkpointing. */
    {"torchtitan 405B", "llama-3.1-405b", "torchtitan", 2, 8192, 1, 128, 8, 1, 1, VF_SHARD_FSDP, VF_PREC_FP32,
     VF_PP_DEFAULT, VF_CKPT_FULL, "h100-96gb"},
    /* The same page at d4c86e3 (2025-01-30), Table 5, run at torchtitan 9dec370: Llama 3.1
     * 405B on 512 H100s of 96 GB, FSDP 8 x TP 8 x PP 8, local batch 32 of 8192 tokens in 8
     * micro batches (pipeline_parallel_microbatches defaults to pp), full checkpointing:
     * 82.5 GiB reserved under 1F1B, 72.7 GiB under the interleaved schedule. */
    {"torchtitan 405B 1F1B", "llama-3.1-405b", "torchtitan", 4, 8192, 8, 512, 8, 8, 1, VF_SHARD_FSDP,
     VF_PREC_FP32, VF_PP_1F1B, VF_CKPT_FULL, "h100-96gb"},
    {"torchtitan 405B interleaved", "llama-3.1-405b", "torchtitan", 4, 8192, 8, 512, 8, 8, 1, VF_SHARD_FSDP,
     VF_PREC_FP32, VF_PP_INTERLEAVED, VF_CKPT_FULL, "h100-96gb"},
    /* Table 6 of the same page: the 405B under 1F1B over 512 H100s, TP 8 x PP 8 x FSDP x CP
     * 64, local batch 8 (8 micro batches of 1), full checkpointing, 32768 tokens a GPU:
     * 75.3, 75.9, 77.1 and 84.9 GiB reserved at CP 1, 2, 4 and 8. */
    {"torchtitan 405B CP 1", "llama-3.1-405b", "torchtitan", 1, 32768, 8, 512, 8, 8, 1, VF_SHARD_FSDP,
     VF_PREC_FP32, VF_PP_1F1B, VF_CKPT_FULL, "h100-96gb"},
    {"torchtitan 405B CP 2", "llama-3.1-405b", "torchtitan", 1, 65536, 8, 512, 8, 8, 2, VF_SHARD_FSDP,
     VF_PREC_FP32, VF_PP_1F1B, VF_CKPT_FULL, "h100-96gb"},
    {"torchtitan 405B CP 4", "llama-3.1-405b", "torchtitan", 1, 131072, 8, 512, 8, 8, 4, VF_SHARD_FSDP,
     VF_PREC_FP32, VF_PP_1F1B, VF_CKPT_FULL, "h100-96gb"},
    {"torchtitan 405B CP 8", "llama-3.1-405b", "torchtitan", 1, 262144, 8, 512, 8, 8, 8, VF_SHARD_FSDP,
     VF_PREC_FP32, VF_PP_1F1B, VF_CKPT_FULL, "h100-96gb"},
    /* Table 4 of the same page: Llama 3.1 70B over 256 H100s, FSDP 32 x TP 8, local batch
     * 16, full checkpointing: 71.9 GiB reserved (67.6 with asynchronous TP). */
    {"torchtitan 70B 2D", "llama-3.1-70b", "torchtitan", 16, 8192, 1, 256, 8, 1, 1, VF_SHARD_FSDP, VF_PREC_FP32,
     VF_PP_DEFAULT, VF_CKPT_FULL, "h100-96gb"},
    /* The same page (and at 0413364): Llama 3 70B with FSDP over 64 A100s of 80 GB, local
     * batch 1. */
    {"torchtitan 70B", "llama-3.1-70b", "torchtitan", 1, 8192, 1, 64, 1, 1, 1, VF_SHARD_FSDP, VF_PREC_FP32,
     VF_PP_DEFAULT, VF_CKPT_FULL, "a100-80gb"},
    /* NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/llama/llama3_workload_base_configs.py:
     * LLAMA3_70B_PRETRAIN_CONFIG_H100_BF16, 64 H100s of 80 GB, TP 4 x PP 4 (interleaved) x CP 2,
     * micro batch 1, global batch 128 (64 micro batches per replica), distributed optimizer. */
    {"Megatron 70B", "llama-3.1-70b", "megatron", 1, 8192, 64, 64, 4, 4, 2, VF_SHARD_ZERO1, VF_PREC_BF16,
     VF_PP_INTERLEAVED, VF_CKPT_NONE, "h100-80gb"},
};

static void test_published_layouts_fit(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof published / sizeof *published; i++) {
    const struct published *c = &published[i];
    struct vf_setup s;
    vf_setup_default(&s);
    s.batch = c->batch, s.seq = c->seq, s.accumulation = c->accumulation;
    s.gpus = c->gpus, s.tp = c->tp, s.pp = c->pp, s.cp = c->cp, s.shard = c->shard;
    s.weights = c->weights, s.amp = VF_PREC_BF16, s.pp_schedule = c->schedule, s.grad_ckpt = c->ckpt;
    s.sequence_parallel = VF_SP_YES;
    struct vf_gpu_spec gpu;
    assert_int_equal(vf_gpu_lookup(c->gpu, &gpu), 0);
    uint64_t peak = run(c->model, &s, c->framework).device_peak;
    if (peak > gpu.capacity_bytes)
      fail_msg("%s: %.2f GiB, more than %s's %.2f GiB", c->what, (double)peak / 1073741824.0, c->gpu,
               (double)gpu.capacity_bytes / 1073741824.0);
  }
}

/* Sequence parallelism splits what full checkpointing keeps (each block's input) by tp;
 * without it every GPU keeps the whole sequence. */
static void test_checkpoint_split_by_sequence_parallelism(void **state) {
  (void)state;
  struct vf_setup s;
  struct vf_estimate e;
  pipeline_setup(&s, VF_PP_DEFAULT, 1, 1);
  s.tp = s.gpus = 2;
  s.sequence_parallel = VF_SP_YES;
  struct kept sp = kept_at_loss("megatron", &s, &e);
  assert_true(e.sequence_parallel);
  assert_int_equal(sp.at, (8 + 1) * STREAM / 2);
  s.sequence_parallel = VF_SP_NO;
  struct kept whole = kept_at_loss("megatron", &s, &e);
  assert_false(e.sequence_parallel);
  assert_int_equal(whole.at, (8 + 1) * STREAM);
  /* Megatron's default is without; torchtitan has no tensor parallelism without it. */
  s.sequence_parallel = VF_SP_DEFAULT;
  assert_false(run(NULL, &s, "megatron").sequence_parallel);
  assert_true(run(NULL, &s, "torchtitan").sequence_parallel);
}

/* Megatron keeps every gradient in one fp32 buffer made at the start, whatever the
 * weights' dtype. */
static void test_megatron_fp32_gradients(void **state) {
  (void)state;
  struct vf_setup s;
  vf_setup_default(&s);
  s.seq = 16;
  s.weights = VF_PREC_BF16;
  s.optimizer = VF_OPT_SGD;
  struct vf_estimate e = run(NULL, &s, "megatron");
  /* 8 layers of 2 norms (64), q, k, v, o (64 x 64), gate, up, down (64 x 128), plus the
   * embedding and head (256 x 64) and the final norm: 361,536 parameters, x 4 bytes in
   * one 512-byte rounded block. */
  assert_int_equal(e.by_category[VF_CAT_GRADIENTS], 1446400);
  struct vf_estimate hf = run(NULL, &s, "hf");
  assert_true(hf.phase_allocated[VF_PHASE_LOAD] < e.phase_allocated[VF_PHASE_LOAD]);
}

/* HSDP over 8 GPUs in 2 replicas shards each model state over 4: as FSDP over 4 GPUs. */
static void test_hsdp_shards_within_a_replica(void **state) {
  (void)state;
  struct vf_setup s;
  titan_setup(&s, 1, 1, 1);
  s.gpus = 4;
  uint64_t fsdp4 = run("llama-3.1-8b", &s, "torchtitan").device_peak;
  s.gpus = 8;
  uint64_t fsdp8 = run("llama-3.1-8b", &s, "torchtitan").device_peak;
  s.shard = VF_SHARD_HSDP;
  s.dp_replicate = 2;
  uint64_t hsdp = run("llama-3.1-8b", &s, "torchtitan").device_peak;
  assert_int_equal(hsdp, fsdp4);
  assert_true(fsdp8 < hsdp);
}

static void expect_refused(const char *model, const struct vf_setup *s, const char *framework, const char *why) {
  struct vf_estimate e;
  struct vf_diag d;
  assert_int_equal(estimate(model, s, framework, NULL, NULL, &e, &d), VF_EINVAL);
  if (!strstr(d.msg, why)) fail_msg("message '%s' lacks '%s'", d.msg, why);
}

static void test_bad_layouts(void **state) {
  (void)state;
  struct vf_setup s;
  vf_setup_default(&s);
  s.tp = s.gpus = 3;
  expect_refused("llama-2-7b", &s, "megatron", "--tp 3 does not divide the 32 attention heads");
  vf_setup_default(&s);
  s.pp = s.gpus = 5;
  expect_refused("llama-2-7b", &s, "megatron", "--pp 5 does not divide the 32 layers: megatron gives every stage");
  s.pp = s.gpus = 4;
  s.pp_schedule = VF_PP_GPIPE;
  expect_refused("llama-2-7b", &s, "megatron", "--pp-schedule gpipe: megatron runs 1f1b, interleaved-1f1b");
  s.pp_schedule = VF_PP_DEFAULT;
  expect_refused("llama-2-7b", &s, "hf", "--pp 4: hf has no pipeline parallelism");
  s.gpus = 6;
  expect_refused("llama-2-7b", &s, "megatron", "--gpus 6 is not a multiple of --tp 1 x --pp 4 x --cp 1");
  vf_setup_default(&s);
  s.pp_schedule = VF_PP_1F1B;
  expect_refused("llama-2-7b", &s, "torchtitan", "--pp-schedule needs --pp 2 or more");
  vf_setup_default(&s);
  s.pp = s.gpus = 8;
  s.pp_schedule = VF_PP_INTERLEAVED;
  s.accumulation = 12;
  expect_refused("llama-2-7b", &s, "megatron", "in whole groups of --pp 8");
  s.pp = s.gpus = 32;
  expect_refused("llama-2-7b", &s, "torchtitan", "--pp 32 x 2 model chunks makes 64 stages, more than the 32 layers");
  vf_setup_default(&s);
  s.gpus = 8;
  s.shard = VF_SHARD_HSDP;
  expect_refused("llama-2-7b", &s, "torchtitan", "--shard hsdp needs --dp-replicate N");
  s.dp_replicate = 3;
  expect_refused("llama-2-7b", &s, "torchtitan", "--dp-replicate 3 does not split the 8 data-parallel GPUs");
  s.shard = VF_SHARD_FSDP;
  expect_refused("llama-2-7b", &s, "torchtitan", "--dp-replicate needs --shard hsdp");
  vf_setup_default(&s);
  s.gpus = 8;
  s.ep = 2;
  expect_refused("llama-2-7b", &s, "megatron", "--ep needs a mixture-of-experts model");
  s.ep = 3;
  expect_refused("mixtral-8x7b", &s, "megatron", "--ep 3 does not divide the 8 experts");
  s.ep = 4, s.tp = 2, s.pp = 2;
  expect_refused("mixtral-8x7b", &s, "megatron", "--ep 4 does not divide the 2 data- and context-parallel GPUs");
}

/* accelerate upcasts FSDP's trainable 16-bit weights to fp32 under mixed precision (0.30 on):
 * a bf16-loaded model trains as an fp32 one, shards, gradients and AdamW states alike; before
 * 0.30 (hf@4.36) it stayed bf16, and LoRA's frozen base is never upcast. */
static void test_fsdp_upcast(void **state) {
  (void)state;
  struct vf_setup s;
  vf_setup_default(&s);
  s.gpus = 4;
  s.shard = VF_SHARD_FSDP;
  s.batch = 2;
  s.seq = 256;
  s.amp = VF_PREC_BF16;
  s.weights = VF_PREC_BF16;
  struct vf_estimate loaded_bf16 = run("llama-3.2-1b", &s, "hf");
  s.weights = VF_PREC_FP32;
  struct vf_estimate loaded_fp32 = run("llama-3.2-1b", &s, "hf");
  assert_int_equal(loaded_bf16.allocated_peak, loaded_fp32.allocated_peak);
  s.weights = VF_PREC_BF16;
  struct vf_estimate before = run("llama-3.2-1b", &s, "hf@4.36");
  s.weights = VF_PREC_FP32;
  assert_true(before.allocated_peak < run("llama-3.2-1b", &s, "hf@4.36").allocated_peak);
  s.method = VF_METHOD_LORA;
  struct vf_estimate lora_fp32 = run("llama-3.2-1b", &s, "hf");
  s.weights = VF_PREC_BF16;
  assert_true(run("llama-3.2-1b", &s, "hf").allocated_peak < lora_fp32.allocated_peak);
}

/* llama-3.2-1b as the FSDP1 checks below run it: bf16, a micro batch of 256 tokens, 2 GPUs. */
static void llama_1b_fsdp_on_two(struct vf_setup *s) {
  vf_setup_default(s);
  s->gpus = 2, s->shard = VF_SHARD_FSDP, s->batch = 1, s->seq = 256, s->weights = VF_PREC_BF16;
}

/* Profile p's estimates of setting s with a switch of it (the one field picks) on, p's own
 * value, which must be true, and off. */
static void switch_both_ways(const struct vf_setup *s, struct vf_profile p, bool *(*field)(struct vf_profile *),
                             struct vf_estimate *on, struct vf_estimate *off) {
  bool *value = field(&p);
  assert_true(*value);
  *on = run_with("llama-3.2-1b", s, &p);
  *value = false;
  *off = run_with("llama-3.2-1b", s, &p);
}

/* Counts the forward's all-gathers of a whole unit (bytes: unit) that took new memory. */
struct unit_gathers {
  uint64_t unit, reserved, first_step_new;
  int step;
};

static void new_unit_segments(void *arg, const struct vf_timeline_event *e) {
  struct unit_gathers *u = arg;
  if (e->phase == VF_PHASE_OPTIMIZER) u->step = 1;
  if (e->op == VF_TIMELINE_ALLOC && e->phase == VF_PHASE_FORWARD && e->bytes == u->unit && !u->step &&
      e->reserved > u->reserved)
    u->first_step_new++;
  u->reserved = e->reserved;
}

/* FSDP1 gathers a unit on its unshard stream and, resharding, records its use on the
 * computation stream: the block returns to the cache only when the host learns that work
 * is done, at the rate limiter's wait for the event two reshards back (torch 2.13
 * _runtime_utils.py _unshard/_reshard, _limiter_utils.py). So layer 1's all-gather cannot
 * reuse layer 0's block and takes a segment of its own, and from layer 2 on each reuses
 * the one two units back: two new segments in the first forward, where an allocator that
 * reused a freed block at once would take one. */
static void test_fsdp1_units_held_until_the_limiter(void **state) {
  (void)state;
  struct vf_setup s;
  llama_1b_fsdp_on_two(&s);
  s.eval = VF_EVAL_NO; /* litgpt's validation before the first step gathers every unit too */
  struct unit_gathers u = {.unit = 121643008}; /* 60,821,504 bf16 elements a llama-3.2-1b layer */
  struct vf_estimate e;
  struct vf_diag d;
  if (estimate("llama-3.2-1b", &s, "litgpt", new_unit_segments, &u, &e, &d)) fail_msg("%s", d.msg);
  assert_int_equal(u.first_step_new, 2);
}

/* FSDP1 wraps a model on the host unit by unit, the layers before the root: each unit's
 * tensors reach the GPU one by one, are concatenated into a flat parameter, and this rank's
 * half is cloned before both go (torch 2.13 distributed/fsdp/_init_utils.py,
 * _flat_param.py). The load peaks at the root: the 8 layers' halves (164,352 B each in
 * fp32, 82,176 B as half, 82,432 as allocated) next to the root's embedding and head
 * (65,536 B each) and final norm (256 B, 512 as allocated), its flat parameter (131,328 B,
 * 131,584 allocated) and its half (65,664 B, 66,048 allocated). Sharding alone would peak
 * at the halves of the whole model. */
static void test_fsdp1_wrap(void **state) {
  (void)state;
  struct vf_setup s;
  fsdp_on_two(&s);
  struct vf_estimate e = run(NULL, &s, "hf@4.36");
  uint64_t wrap = 8 * 82432 + (65536 + 65536 + 512) + 131584 + 66048;
  assert_in_range(e.phase_allocated[VF_PHASE_LOAD], wrap, wrap + 2 * 512);
}

static bool *sync_module_states(struct vf_profile *p) { return &p->fsdp_sync_module_states; }
static bool *host_waits(struct vf_profile *p) { return &p->host_waits_each_step; }

/* With sync_module_states (hf's, fsdp_sync_module_states) rank 0 broadcasts each unit in
 * buckets (c10d broadcast_coalesced) whose blocks are still in use on NCCL's stream when
 * the flat parameter is made, so it cannot reuse them. llama-3.2-1b in bf16 over 2 GPUs:
 * a layer's bucket (121,643,008 B, a segment of 118 MiB: above 10 MiB segments round to
 * 2 MiB) costs one more segment, which the next unit's copy from the host, waiting for
 * the stream, returns for the later units to reuse; the root's embedding (525,336,576 B,
 * over 250 MiB, a bucket of its own) one more of 502 MiB. */
static void test_fsdp1_wrap_broadcast(void **state) {
  (void)state;
  struct vf_setup s;
  llama_1b_fsdp_on_two(&s);
  struct vf_estimate synced, plain;
  switch_both_ways(&s, profile("hf@4.36"), sync_module_states, &synced, &plain);
  assert_int_equal(synced.phase_allocated[VF_PHASE_LOAD], plain.phase_allocated[VF_PHASE_LOAD]);
  assert_int_equal(synced.phase_reserved[VF_PHASE_LOAD] - plain.phase_reserved[VF_PHASE_LOAD], (118u + 502u) << 20);
}

/* From torch 2.8 ProcessGroupNCCL records no stream (nccl_records_streams false): the
 * broadcast's work.wait() orders the computation stream after it before its buckets go, so
 * the flat parameter reuses their blocks and the broadcast reserves nothing more. */
static void test_fsdp1_wrap_broadcast_waited(void **state) {
  (void)state;
  struct vf_setup s;
  llama_1b_fsdp_on_two(&s);
  struct vf_profile p = profile("hf@4.36");
  assert_true(p.nccl_records_streams);
  p.nccl_records_streams = false;
  struct vf_estimate synced, plain;
  switch_both_ways(&s, p, sync_module_states, &synced, &plain);
  assert_int_equal(synced.phase_reserved[VF_PHASE_LOAD], plain.phase_reserved[VF_PHASE_LOAD]);
}

/* FSDP1 flattens each parameter's data: a 4-bit weight's packed values, not its
 * quantization state (bitsandbytes' quant_state, an attribute of Params4bit), which every
 * GPU keeps whole. llama-3.2-1b's 16 layers under QLoRA on 2 GPUs: the state is an fp32
 * absmax per 64 elements (nf4), or an 8-bit one plus an fp32 scale per 16,384 elements
 * and a 1 KiB code table (nf4-dq). Per layer, allocated in 512-byte blocks: q and o
 * (4,194,304 elements) 262,144 or 67,584 B; k and v (1,048,576) 65,536 or 17,920 B; gate,
 * up and down (16,777,216) 1,048,576 or 267,264 B. The packed data being the same, the
 * wrap's peaks differ by the states' whole difference: 16 x 2,828,288 B. */
static void test_fsdp1_quant_state_whole(void **state) {
  (void)state;
  struct vf_setup s;
  llama_1b_fsdp_on_two(&s);
  s.method = VF_METHOD_QLORA, s.quant = VF_QUANT_NF4;
  struct vf_estimate nf4 = run("llama-3.2-1b", &s, "hf@4.36");
  s.quant = VF_QUANT_NF4_DQ;
  struct vf_estimate dq = run("llama-3.2-1b", &s, "hf@4.36");
  assert_int_equal(nf4.phase_allocated[VF_PHASE_LOAD] - dq.phase_allocated[VF_PHASE_LOAD], 16 * 2828288u);
}

/* The Trainer reads each step's loss on the host (host_waits_each_step): the host then
 * knows the GPU's work done, and the blocks FSDP1's last all-gathers left waiting for the
 * computation stream return to their stream's cache. Saving, which gathers every unit again
 * on that stream, reuses them: it reserves nothing the training did not. Without the wait
 * it needs a unit's segment more (llama-3.2-1b's layer in bf16, 121,643,008 B: 118 MiB). */
static void test_host_wait_each_step(void **state) {
  (void)state;
  struct vf_setup s;
  llama_1b_fsdp_on_two(&s);
  struct vf_estimate waits, not;
  switch_both_ways(&s, profile("hf@4.36"), host_waits, &waits, &not);
  assert_int_equal(waits.phase_reserved[VF_PHASE_SAVE], waits.phase_reserved[VF_PHASE_BACKWARD]);
  assert_int_equal(not.phase_reserved[VF_PHASE_SAVE] - not.phase_reserved[VF_PHASE_BACKWARD], 118u << 20);
}

struct sized_allocs {
  uint64_t bytes;
  int forward, step;
};

static void count_first_forward(void *arg, const struct vf_timeline_event *e) {
  struct sized_allocs *c = arg;
  if (e->phase == VF_PHASE_OPTIMIZER) c->step = 1;
  /* On a stream of its own: the lazy initialization's shard of the same size (default stream) is not one. */
  if (e->op == VF_TIMELINE_ALLOC && e->phase == VF_PHASE_FORWARD && !c->step && e->bytes == c->bytes && e->stream)
    c->forward++;
}

static int halves_in_first_forward(const struct vf_setup *s) {
  struct sized_allocs c = {.bytes = 121643008 / 2};
  struct vf_estimate e;
  struct vf_diag d;
  if (estimate("llama-3.2-1b", s, "hf@4.36", count_first_forward, &c, &e, &d)) fail_msg("%s", d.msg);
  return c.forward;
}

/* FSDP1's pre-unshard copies a shard kept on the host (CPUOffload) to the GPU, or casts
 * one kept in fp32 to the bf16 it gathers in, into a new tensor before each all-gather
 * (torch 2.13 _flat_param.py pre_unshard): in the first forward, one half of a layer
 * (60,821,504 B for llama-3.2-1b in 16-bit) per layer, 16; a bf16 shard gathered as it is
 * needs none. */
static void test_fsdp1_pre_unshard(void **state) {
  (void)state;
  struct vf_setup s;
  llama_1b_fsdp_on_two(&s);
  assert_int_equal(halves_in_first_forward(&s), 0);
  s.offload = VF_OFFLOAD_PARAMS;
  assert_int_equal(halves_in_first_forward(&s), 16);
  s.offload = 0, s.weights = VF_PREC_FP32, s.amp = VF_PREC_BF16;
  assert_int_equal(halves_in_first_forward(&s), 16);
}

/* Layer inputs (one stream each, STREAM bytes) alive at once in the forward, at most. */
struct inputs_live {
  bool input[1 << 14];
  int live, most;
};

static void count_inputs(void *arg, const struct vf_timeline_event *e) {
  struct inputs_live *w = arg;
  if (e->id >= sizeof w->input) fail_msg("more events than the toy should make");
  if (e->op == VF_TIMELINE_ALLOC && e->phase == VF_PHASE_FORWARD && e->category == VF_CAT_ACTIVATIONS &&
      e->bytes == STREAM) {
    w->input[e->id] = true;
    if (++w->live > w->most) w->most = w->live;
  } else if (e->op == VF_TIMELINE_FREE && w->input[e->id]) {
    w->input[e->id] = false;
    w->live--;
  }
}

static int most_inputs_in_forward(const struct vf_profile *p) {
  struct vf_setup s;
  vf_setup_default(&s);
  s.seq = 1024, s.lengths = VF_LENGTHS_FIXED, s.grad_ckpt = VF_CKPT_FULL, s.offload = VF_OFFLOAD_ACTIVATIONS;
  struct inputs_live *w = calloc(1, sizeof *w);
  struct vf_estimate e;
  struct vf_diag d;
  if (estimate_with(NULL, &s, p, count_inputs, w, &e, &d)) fail_msg("%s", d.msg);
  int most = w->most;
  free(w);
  return most;
}

/* torchtune's offloader copies each checkpointed layer's input to the host and keeps it on
 * the GPU until five more tensors are packed (max_fwd_stash_size), the empty tensor torch's
 * checkpoint saves beside each input counting too: layer l's input (the l-th pair's second)
 * goes when layer l + 3 packs its first. So as a layer's forward runs, before it packs, the
 * inputs of the three layers before it are still there: three more than an offloader that
 * frees each at once. */
static void test_offload_stash(void **state) {
  (void)state;
  struct vf_profile p = profile("torchtune");
  assert_int_equal(p.offload_stash, 5);
  int stashed = most_inputs_in_forward(&p);
  p.offload_stash = 0;
  int freed = most_inputs_in_forward(&p);
  assert_int_equal(stashed - freed, 3);
}

/* A tied embedding under FSDP2 (llama-3.2-1b, fp32 weights under bf16 mixed precision on
 * 2 GPUs): the head's and the embedding's gradients of the gathered weight are bf16 (FSDP2
 * _fsdp_param.py: the unsharded parameter in param_dtype), summed out of place at the end
 * of the backward, and the root is reduce-scattered only after that sum (its post-backward
 * is the pass's last). Traced: 11,658,733,056 B allocated at the peak (the sum, in the
 * backward); the estimate had 13,109,829,632 (fp32 gradients, the root's shard made at the
 * head's backward). */
static void test_fsdp2_tied_root_gradients(void **state) {
  (void)state;
  struct vf_setup s;
  vf_setup_default(&s);
  s.gpus = 2, s.shard = VF_SHARD_FSDP, s.batch = 2, s.seq = 256;
  s.weights = VF_PREC_FP32, s.amp = VF_PREC_BF16;
  struct vf_estimate e = run("llama-3.2-1b", &s, "hf");
  const double traced = 11658733056.0;
  assert_int_equal(e.peak_phase, VF_PHASE_BACKWARD);
  assert_true(fabs((double)e.allocated_peak - traced) / traced < 0.02);
}

/* The unsharded gradients FSDP2 keeps under no_sync (the Trainer's micro batches before the
 * last) are its parameters' own, one tensor each (torch 2.13 _fsdp_param.py,
 * accumulate_grad.h), not one a layer; a tied weight's is the sum autograd makes once the
 * embedding's backward is done, not the head's, which goes (input_buffer.cpp). Found on
 * bench/traced/multi-gpu fsdp-hf-02: with one block a layer and the head's gradient kept, a
 * 259 MiB block stayed in one of the loss's 4.6 GiB segments and the next micro batch's loss
 * took a new one (+25% reserved). */
struct kept_grads {
  uint64_t mlp, tied;   /* bytes of one MLP weight's gradient and of the tied weight's */
  int losses, tied_made; /* losses begun; tied-weight gradients made in the first backward */
  int live_mlp, tied_live_ordinal, mlp_at_loss, tied_at_loss;
  int ordinal[1 << 16];
};

static void watch_kept_grads(void *arg, const struct vf_timeline_event *e) {
  struct kept_grads *k = arg;
  if (e->phase == VF_PHASE_LOSS && k->losses % 2 == 0) {
    if (++k->losses == 3) k->mlp_at_loss = k->live_mlp, k->tied_at_loss = k->tied_live_ordinal;
  } else if (e->phase != VF_PHASE_LOSS && k->losses % 2 == 1) {
    k->losses++;
  }
  if (e->category != VF_CAT_GRADIENTS || e->op > VF_TIMELINE_FREE || e->id >= (1 << 16)) return;
  bool alloc = e->op == VF_TIMELINE_ALLOC;
  if (e->bytes == k->mlp) k->live_mlp += alloc ? 1 : -1;
  if (e->bytes != k->tied) return;
  if (alloc && k->losses == 2) k->ordinal[e->id] = ++k->tied_made;
  k->tied_live_ordinal = alloc ? k->ordinal[e->id] : k->tied_live_ordinal == k->ordinal[e->id] ? 0 : k->tied_live_ordinal;
}

static void test_fsdp2_no_sync_keeps_parameter_gradients(void **state) {
  (void)state;
  struct vf_setup s;
  vf_setup_default(&s);
  s.gpus = 4, s.shard = VF_SHARD_FSDP, s.batch = 1, s.seq = 256, s.accumulation = 2;
  s.weights = VF_PREC_BF16, s.grad_ckpt = VF_CKPT_FULL;
  struct kept_grads *k = calloc(1, sizeof *k);
  k->mlp = 896 * 4864 * 2, k->tied = (151936ull * 896 * 2 + 511) / 512 * 512;
  struct vf_estimate e;
  struct vf_diag d;
  if (estimate("qwen2.5-0.5b", &s, "hf", watch_kept_grads, k, &e, &d)) fail_msg("%s", d.msg);
  assert_int_equal(k->tied_made, 3);   /* the head's, the embedding's, their sum */
  assert_int_equal(k->tied_at_loss, 3); /* the sum is kept */
  assert_int_equal(k->mlp_at_loss, 24 * 3);
  free(k);
}

/* The timeline tells every event the estimate's replay runs, the streams' part too (a
 * block's stream, record_stream, CUDA events, the host's waits): written in the tracer's
 * event format (what 'estimate --events' writes) and replayed as a trace is, it gives the
 * estimate's reserved peak. Lightning's FSDP1 over 8 GPUs records its gathered units on
 * the computation stream and waits on events (the rate limiter): without them the replay
 * reserves 4,884 MiB where the estimate says 5,398. */
struct event_text {
  char *text;
  size_t len, cap;
};

static void write_timeline(void *arg, const struct vf_timeline_event *e) {
  struct event_text *w = arg;
  if (w->cap - w->len < 128) {
    w->cap = w->cap ? 2 * w->cap : 1 << 20;
    w->text = realloc(w->text, w->cap);
    assert_non_null(w->text);
  }
  unsigned long long id = e->id, bytes = e->bytes;
  unsigned stream = e->stream;
  const char *line[] = {"a %llu %llu %u\n", "f %llu\n", "r %llu %u\n", "m %llu %u\n", "w %llu\n", "e\n"};
  int n = e->op == VF_TIMELINE_ALLOC ? snprintf(w->text + w->len, w->cap - w->len, line[0], id, bytes, stream)
          : e->op == VF_TIMELINE_EMPTY_CACHE ? snprintf(w->text + w->len, w->cap - w->len, "%s", line[e->op])
          : e->op == VF_TIMELINE_FREE || e->op == VF_TIMELINE_WAIT
              ? snprintf(w->text + w->len, w->cap - w->len, line[e->op], id)
              : snprintf(w->text + w->len, w->cap - w->len, line[e->op], id, stream);
  w->len += (size_t)n;
}

static void test_timeline_replays_as_estimated(void **state) {
  (void)state;
  struct vf_setup s;
  vf_setup_default(&s);
  s.gpus = 8, s.shard = VF_SHARD_FSDP, s.batch = 1, s.seq = 2048, s.weights = VF_PREC_BF16;
  s.grad_ckpt = VF_CKPT_FULL;
  struct event_text w = {0};
  struct vf_estimate e;
  struct vf_diag d;
  if (estimate("qwen2.5-0.5b", &s, "lightning", write_timeline, &w, &e, &d)) fail_msg("%s", d.msg);
  static const char header[] = "vramfit-trace-events 1\n";
  char *text = malloc(sizeof header + w.len);
  memcpy(text, header, sizeof header - 1);
  memcpy(text + sizeof header - 1, w.text, w.len);
  struct vf_trace t;
  vf_trace_init(&t);
  assert_int_equal(vf_trace_parse(text, sizeof header - 1 + w.len, &t, &d), 0);
  assert_true(t.max_event > 0); /* the rate limiter's events */
  struct vf_alloc_conf c;
  vf_alloc_conf_default(&c);
  struct vf_trace_result r;
  assert_int_equal(vf_trace_replay(&t, &c, &r), 0);
  assert_int_equal(r.reserved_peak, e.reserved_peak);
  vf_trace_cleanup(&t);
  free(text);
  free(w.text);
}

/* The replay's events in order, as the timeline tells them. */
struct logged {
  struct vf_timeline_event *v;
  size_t n, cap;
};

static void log_event(void *arg, const struct vf_timeline_event *e) {
  struct logged *l = arg;
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 4096;
    l->v = realloc(l->v, l->cap * sizeof *l->v);
    assert_non_null(l->v);
  }
  l->v[l->n++] = *e;
}

static struct logged log_run(const char *model, const struct vf_setup *s, const struct vf_profile *p) {
  struct logged l = {0};
  struct vf_estimate e;
  struct vf_diag d;
  if (estimate_with(model, s, p, log_event, &l, &e, &d)) fail_msg("%s", d.msg);
  return l;
}

static size_t count_op(const struct logged *l, enum vf_timeline_op op) {
  size_t n = 0;
  for (size_t i = 0; i < l->n; i++) n += l->v[i].op == op;
  return n;
}

static void fsdp_setup(struct vf_setup *s, uint32_t gpus) {
  vf_setup_default(s);
  s->gpus = gpus, s->shard = gpus > 1 ? VF_SHARD_FSDP : VF_SHARD_NONE, s->batch = 1, s->seq = 256;
  s->weights = VF_PREC_FP32, s->amp = VF_PREC_BF16;
}

/* qwen2.5-0.5b, fp32 kept under bf16 mixed precision, sharded by the framework over gpus. */
static struct logged qwen_fsdp_run(const char *framework, uint32_t gpus) {
  struct vf_setup s;
  fsdp_setup(&s, gpus);
  struct vf_profile p = profile(framework);
  return log_run("qwen2.5-0.5b", &s, &p);
}

/* Its root unit gathered, bf16: the tied embedding and the final norm. */
#define QWEN_ROOT_BYTES ((151936ull * 896 + 896) * 2)
static uint64_t rounded(uint64_t bytes) { return (bytes + 511) / 512 * 512; }

/* Lightning's Trainer empties the cache once the strategy has set the model up
 * (checkpoint_connector.py resume_end), on any number of GPUs; torchtune's distributed
 * recipes as training begins (cleanup_before_training), its single-device ones never: once,
 * before the first forward. */
static void test_empty_cache_before_training(void **state) {
  (void)state;
  const struct {
    const char *framework;
    uint32_t gpus;
    size_t emptied;
  } cases[] = {{"lightning", 4, 1}, {"lightning", 1, 1}, {"torchtune", 2, 1}, {"torchtune", 1, 0}, {"hf", 4, 0}};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    struct logged l = qwen_fsdp_run(cases[k].framework, cases[k].gpus);
    assert_int_equal(count_op(&l, VF_TIMELINE_EMPTY_CACHE), cases[k].emptied);
    for (size_t i = 0; i < l.n; i++)
      if (l.v[i].op == VF_TIMELINE_EMPTY_CACHE) assert_int_equal(l.v[i].phase, VF_PHASE_LOAD);
    free(l.v);
  }
}

/* The save's blocks: allocations in the save phase, the largest, and whether each is
 * freed before the next is made. */
struct save_blocks {
  size_t n;
  uint64_t largest;
  bool one_at_a_time;
};

static struct save_blocks save_blocks_of(enum vf_save_gathers gathers, enum vf_shard shard) {
  struct vf_setup s;
  fsdp_setup(&s, 2);
  s.shard = shard;
  struct vf_profile p = profile("torchtune");
  p.save_gathers = gathers;
  struct logged l = log_run("qwen2.5-0.5b", &s, &p);
  struct save_blocks b = {0, 0, true};
  long live = 0;
  for (size_t i = 0; i < l.n; i++) {
    if (l.v[i].phase != VF_PHASE_SAVE) continue;
    if (l.v[i].op == VF_TIMELINE_ALLOC) {
      b.n++, live++;
      if (l.v[i].bytes > b.largest) b.largest = l.v[i].bytes;
      if (live > 1) b.one_at_a_time = false;
    } else if (l.v[i].op == VF_TIMELINE_FREE) {
      live--;
    }
  }
  free(l.v);
  return b;
}

/* What the save of sharded weights gathers (profile field save_gathers), qwen2.5-0.5b over
 * 2 GPUs, fp32 kept under bf16 mixed precision: each unit whole in bf16 inside the root's
 * (FSDP1's full state dict; the root's tied embedding and final norm the largest); one
 * parameter at a time in its stored fp32 (FSDP2's full_tensor() in torchtune's
 * gather_cpu_state_dict; the embedding the largest); nothing for a sharded checkpoint
 * (accelerate's default under FSDP2). */
static void test_save_gathers(void **state) {
  (void)state;
  assert_int_equal(profile("hf").save_gathers, VF_SAVE_NONE);
  assert_int_equal(profile("torchtune").save_gathers, VF_SAVE_TENSORS);
  assert_int_equal(profile("lightning").save_gathers, VF_SAVE_UNITS);
  struct save_blocks units = save_blocks_of(VF_SAVE_UNITS, VF_SHARD_FSDP),
                     tensors = save_blocks_of(VF_SAVE_TENSORS, VF_SHARD_FSDP),
                     none = save_blocks_of(VF_SAVE_NONE, VF_SHARD_FSDP);
  assert_int_equal(units.n, 1 + 24);
  assert_int_equal(units.largest, rounded(QWEN_ROOT_BYTES));
  assert_false(units.one_at_a_time);
  assert_true(tensors.n > units.n);
  assert_int_equal(tensors.largest, rounded(151936ull * 896 * 4));
  assert_true(tensors.one_at_a_time);
  assert_int_equal(none.n, 0);
  /* ZeRO-3's 16-bit save gathers module by module whatever the field says. */
  assert_int_equal(save_blocks_of(VF_SAVE_NONE, VF_SHARD_ZERO3).n, units.n);
}

/* FSDP1's lazy initialization (_flat_param.py init_flat_param_attributes) as the first
 * forward begins: the root unit (qwen2.5-0.5b's tied embedding and final norm, fp32 kept,
 * bf16 gathered over 2 GPUs) makes and frees its bf16 shard, its bf16 padded unsharded
 * parameter and an fp32 one, before anything else of the forward. */
static void test_fsdp1_lazy_init(void **state) {
  (void)state;
  struct logged l = qwen_fsdp_run("lightning", 2);
  uint64_t want[3] = {QWEN_ROOT_BYTES / 2, QWEN_ROOT_BYTES, 2 * QWEN_ROOT_BYTES};
  size_t i = 0;
  while (i < l.n && l.v[i].phase != VF_PHASE_FORWARD) i++;
  for (int k = 0; k < 3; k++, i += 2) {
    assert_true(i + 1 < l.n);
    assert_int_equal(l.v[i].op, VF_TIMELINE_ALLOC);
    assert_int_equal(l.v[i].bytes, rounded(want[k]));
    assert_int_equal(l.v[i + 1].op, VF_TIMELINE_FREE);
    assert_int_equal(l.v[i + 1].id, l.v[i].id);
  }
  free(l.v);
}

/* FSDP1 reshards its root unit as any other (_runtime_utils.py _reshard): its use recorded
 * on the computation stream before it is freed, and a free event for the rate limiter; so
 * its block waits for that stream before the next step's gather may take it. */
static void test_fsdp1_root_reshard_recorded(void **state) {
  (void)state;
  struct logged l = qwen_fsdp_run("lightning", 2);
  size_t gathers = 0, recorded = 0;
  for (size_t i = 0; i < l.n; i++) {
    const struct vf_timeline_event *e = &l.v[i];
    bool root = e->bytes == rounded(QWEN_ROOT_BYTES);
    if (e->op != VF_TIMELINE_ALLOC || !root || e->stream == 0 || e->phase != VF_PHASE_FORWARD) continue;
    gathers++;
    for (size_t j = i + 1; j < l.n && !(l.v[j].op == VF_TIMELINE_FREE && l.v[j].id == e->id); j++)
      if (l.v[j].op == VF_TIMELINE_RECORD && l.v[j].id == e->id && l.v[j].stream == 0) {
        recorded++;
        assert_true(j + 2 < l.n && l.v[j + 1].op == VF_TIMELINE_FREE && l.v[j + 2].op == VF_TIMELINE_EVENT);
        break;
      }
  }
  assert_true(gathers >= 2); /* a step's forward, the next step's */
  assert_int_equal(recorded, gathers);
  free(l.v);
}

/* FSDP2 shards each parameter on its own, and torch.optim makes each state like its
 * parameter (torch 2.13 _fsdp_param.py): AdamW's two states of every MLP weight of
 * qwen2.5-0.5b (896 x 4864, bf16) are tensors of their shard over 2 GPUs, 144 of them;
 * FSDP1's flat parameters and ZeRO keep one flat shard a unit instead. */
static void test_fsdp2_states_per_parameter(void **state) {
  (void)state;
  struct vf_setup s;
  vf_setup_default(&s);
  s.gpus = 2, s.shard = VF_SHARD_FSDP, s.batch = 1, s.seq = 256, s.weights = VF_PREC_BF16;
  uint64_t shard = 896ull * 4864 * 2 / 2;
  const char *framework[] = {"hf", "lightning"};
  size_t want[] = {144, 0};
  for (int k = 0; k < 2; k++) {
    struct vf_profile p = profile(framework[k]);
    struct logged l = log_run("qwen2.5-0.5b", &s, &p);
    size_t n = 0;
    for (size_t i = 0; i < l.n; i++)
      n += l.v[i].op == VF_TIMELINE_ALLOC && l.v[i].category == VF_CAT_OPTIMIZER && l.v[i].bytes == shard;
    assert_int_equal(n, want[k]);
    free(l.v);
  }
}

/* FSDP2's reduce-scatter input, a unit's whole gradient (qwen2.5-0.5b's layer: 28.5 MiB in
 * bf16), is made on the computation stream from torch 2.5 (pytorch#129721), on the
 * reduce-scatter stream before, beside the shards (half as much over 2 GPUs). Blocks above
 * 20 MiB made in the backward off the computation stream, under either rule. */
static size_t big_blocks_off_compute(bool compute_stream) {
  struct vf_setup s;
  vf_setup_default(&s);
  s.gpus = 2, s.shard = VF_SHARD_FSDP, s.batch = 1, s.seq = 256, s.weights = VF_PREC_BF16;
  struct vf_profile p = profile("hf");
  p.fsdp2_reduce_input_compute_stream = compute_stream;
  struct logged l = log_run("qwen2.5-0.5b", &s, &p);
  size_t n = 0;
  for (size_t i = 0; i < l.n; i++)
    n += l.v[i].op == VF_TIMELINE_ALLOC && l.v[i].phase == VF_PHASE_BACKWARD && l.v[i].stream != 0 &&
         l.v[i].bytes > (20u << 20);
  free(l.v);
  return n;
}

static void test_fsdp2_reduce_input_stream(void **state) {
  (void)state;
  /* Off it either way: the all-gathers' buffers; before 2.5 each unit's input too. */
  assert_true(big_blocks_off_compute(false) - big_blocks_off_compute(true) >= 24);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stage_layers),
      cmocka_unit_test(test_in_flight_counts),
      cmocka_unit_test(test_kept_per_schedule),
      cmocka_unit_test(test_input_grads_kept),
      cmocka_unit_test(test_chunk_backwards_apart),
      cmocka_unit_test(test_interleaved_chunks_reduced_apart),
      cmocka_unit_test(test_fsdp2_no_sync_keeps_parameter_gradients),
      cmocka_unit_test(test_timeline_replays_as_estimated),
      cmocka_unit_test(test_empty_cache_before_training),
      cmocka_unit_test(test_save_gathers),
      cmocka_unit_test(test_fsdp1_lazy_init),
      cmocka_unit_test(test_fsdp1_root_reshard_recorded),
      cmocka_unit_test(test_fsdp2_states_per_parameter),
      cmocka_unit_test(test_fsdp2_reduce_input_stream),
      cmocka_unit_test(test_gpipe_above_1f1b),
      cmocka_unit_test(test_more_parallel_never_more_memory),
      cmocka_unit_test(test_published_layouts_fit),
      cmocka_unit_test(test_checkpoint_split_by_sequence_parallelism),
      cmocka_unit_test(test_ring_attention_buffers),
      cmocka_unit_test(test_ring_attention_repeated_heads),
      cmocka_unit_test(test_loss_parallel),
      cmocka_unit_test(test_ddp_init_broadcast),
      cmocka_unit_test(test_fsdp_autocast),
      cmocka_unit_test(test_fsdp2_gather_buffers),
      cmocka_unit_test(test_fsdp_embedding_unit),
      cmocka_unit_test(test_loss_in_forward),
      cmocka_unit_test(test_expert_parallelism),
      cmocka_unit_test(test_zero_reduce_buckets),
      cmocka_unit_test(test_zero3_persistent_parameters),
      cmocka_unit_test(test_zero3_live_parameters),
      cmocka_unit_test(test_zero3_step_sub_group),
      cmocka_unit_test(test_megatron_fp32_gradients),
      cmocka_unit_test(test_hsdp_shards_within_a_replica),
      cmocka_unit_test(test_bad_layouts),
      cmocka_unit_test(test_fsdp_upcast),
      cmocka_unit_test(test_fsdp1_units_held_until_the_limiter),
      cmocka_unit_test(test_fsdp1_wrap),
      cmocka_unit_test(test_fsdp1_wrap_broadcast),
      cmocka_unit_test(test_fsdp1_wrap_broadcast_waited),
      cmocka_unit_test(test_fsdp1_pre_unshard),
      cmocka_unit_test(test_fsdp1_quant_state_whole),
      cmocka_unit_test(test_host_wait_each_step),
      cmocka_unit_test(test_offload_stash),
      cmocka_unit_test(test_fsdp2_tied_root_gradients),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The estimator's room: what the files of src/core/estimate/ share, and nothing the rest of
 * the library sees (it calls estimate.h; tests may include this too).
 *
 * Peak memory of a training step: the step is written as the sequence of allocations and
 * frees PyTorch makes (forward layer by layer, loss, backward layer by layer, optimizer),
 * and replayed through the caching-allocator model. Layers are identical, so a model is
 * replayed with REPLAY_A and REPLAY_B layers and each stretch's peaks are extended to all.
 *
 * The files, from the entry points down:
 *   estimate.c   the entry points; each pipeline rank worth replaying; the estimate filled in
 *   replay.c     a replay through the allocator model; the extension to all layers
 *   schedule.c   the step: loading, micro batches, optimizer step, evaluation, save
 *   layer.c      a layer's forward and backward, recomputation, offloading, its parameters
 *   attention.c  the q, k, v projections, SDPA's kernels and eager attention, RoPE tables
 *   mlp.c        the MLP and mixture of experts
 *   embedding.c  the embeddings' forward and backward, bitsandbytes' StableEmbedding
 *   head.c       the output head, the loss, the logits the training loop holds
 *   adapters.c   LoRA, DoRA, litgpt's adapters
 *   dtypes.c     autocast and 4-bit quantization
 *   grads.c      the gradients: made, accumulated, reduced to shards, zeroed
 *   optimizer.c  the optimizer's states and its step's temporaries
 *   ddp.c        DistributedDataParallel's broadcast and gradient buckets
 *   zero.c       DeepSpeed ZeRO's coordinator, buffers and sub groups
 *   fsdp.c       the weights FSDP (and ZeRO-3) gathers and reshards
 *   pipeline.c   pipeline parallelism: the rank replayed, what its schedule keeps
 *   parallel.c   tensor, sequence, context and expert parallelism: one GPU's sizes
 *   tape.c       the tape's lists and the tensors a layer saves for its backward
 *
 * struct ctx holds one estimate, in parts. Each part's comment names the file that owns it,
 * the only one that writes it unless the comment says who else does; any file reads any
 * part. Besides, replay.c's rewind clears what one replay leaves in the parts before the
 * next, and estimate.c allocates and frees the parts' tables. A function another file calls
 * is named for its mechanism (fsdp_gather, tape_take) and declared here; all others are
 * static. */
#ifndef VF_CORE_ESTIMATE_INTERNAL_H
#define VF_CORE_ESTIMATE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/grow.h"
#include "core/params.h"
#include "core/profile.h"
#include "vramfit.h"

/* ---- The tape: the step's allocations and frees, in order ---- */

/* OP_RECORD: a block used on another stream too (record_stream); OP_EVENT: a CUDA event
 * the host may wait for; OP_WAIT: the host waits for one, and every stream's work queued
 * before it is done (the GPU taken to run the streams in the order the host queued);
 * OP_EMPTY_CACHE: torch.cuda.empty_cache(). */
enum {
  OP_ALLOC = 1,
  OP_FREE = 2,
  OP_UNIT = 3,
  OP_GRAPH_FREE = 4,
  OP_RECORD = 5,
  OP_EVENT = 6,
  OP_WAIT = 7,
  OP_EMPTY_CACHE = 8
};

/* Live bytes are counted per category, with the temporaries sized by the weights (casts,
 * dequantizations, optimizer scratch, unsharded gradients) apart from those sized by the
 * batch's tokens: only the latter change with a batch's length. Both are reported as
 * temporaries. */
#define WEIGHT_TEMPORARIES ((enum vf_category)VF_CAT_COUNT)
#define CAT_SLOTS (VF_CAT_COUNT + 1)

struct ev {
  uint64_t bytes;
  uint32_t id;
  uint8_t op, cat, unit, stream;
};

/* CUDA streams the caching allocator keeps apart (a block freed on one serves only its own
 * stream): sharded training gathers weights and reduces gradients on streams of their own
 * (FSDP2 fully_shard/_fsdp_collectives.py foreach_all_gather / foreach_reduce: the buffers
 * are made under the all-gather and reduce-scatter streams; FSDP1 _runtime_utils.py
 * _unshard / _reduce_grad: its unshard and post-backward streams, and its pre-unshard
 * stream for shards cast or brought from the host); activation offloading brings tensors
 * back on its own (profile field offload_stash); a collective's inputs are used on the
 * stream it runs on (STREAM_NCCL: the process group's own, where ProcessGroupNCCL records
 * them before torch 2.8; from 2.8 a synchronous collective runs on its caller's). */
enum { STREAM_COMPUTE, STREAM_ALL_GATHER, STREAM_REDUCE_SCATTER, STREAM_OFFLOAD, STREAM_PRE_UNSHARD, STREAM_NCCL };

/* Lists of allocation ids, freed together (ids_give). */
struct ids {
  uint32_t *id;
  size_t n, cap;
};

/* tape.c, and the inline writers below, which every file calls; rc is set by whoever fails
 * to allocate (fsdp.c too). */
struct tape {
  struct ev *ev;
  size_t n, cap;
  uint32_t next_id;
  int rc;
  struct ids graph; /* tensors the last micro batch's autograd graph still references */
};

/* Tensors a layer keeps for backward: with selective checkpointing, LoRA on every
 * projection, quantized inputs and four norms, a layer stays under 150. */
#define MAX_SAVED 192
struct saved {
  uint32_t id[MAX_SAVED]; /* 0 while offloaded to the host */
  uint64_t bytes[MAX_SAVED];
  uint8_t cat[MAX_SAVED];
  bool on_graph[MAX_SAVED]; /* an attribute of its autograd node: lives as long as the graph */
  size_t n;
};

/* The replay's stretches, finer than the public phases: the extension to all layers is
 * linear only where a stretch's high point falls at the same moment whatever the layer
 * count. The highest live bytes of the layers' backward, for one, sit at the top layer or at
 * the bottom one depending on what each layer saves and what its gradients add, and the
 * root's gradient assembly can top either. So the first and last layer of each pass are
 * stretches of their own (the middle ones peak at one end, always the same), and so is each
 * micro batch of the replay. */
enum stretch {
  ST_FORWARD_BOTTOM, ST_FORWARD_MIDDLE, ST_FORWARD_TOP, ST_LOSS, ST_HEAD_BACKWARD,
  ST_BACKWARD_BOTTOM, ST_BACKWARD_MIDDLE, ST_BACKWARD_TOP, ST_ROOT_BACKWARD, ST_OPTIMIZER,
  ST_COUNT
};

/* The replay runs two optimizer steps of at most three micro batches each. */
#define MICRO_MAX 6
/* A unit of the extension: the setup, each micro batch's stretches, the evaluation and
 * the checkpoint's save. */
#define UNIT_SETUP 0
#define UNIT_EVAL (1 + MICRO_MAX * ST_COUNT)
#define UNIT_SAVE (UNIT_EVAL + 1)
#define UNITS (UNIT_SAVE + 1)

/* ---- The context of one estimate ---- */

/* Sizes that shape one layer's activations on one GPU. */
struct dims {
  uint64_t T;       /* tokens in the micro batch on this GPU */
  uint64_t Ts;      /* of them, those of the norms and residual adds: T / tp under sequence parallelism */
  bool sp;          /* sequence parallelism: projections read all-gathered inputs */
  uint64_t s_kv;    /* keys each query attends to (eager scores) */
  uint64_t h, q, kv, ffn, heads, vocab, labels;
  uint32_t c;       /* bytes of the compute dtype */
  uint32_t w, g;    /* bytes per weight and per gradient element of trainable tensors */
  uint64_t dsize;   /* data-parallel shards of model states */
};

/* How much of what a layer saves counts (tape_keep). schedule.c sets in_flight for each
 * micro batch, replay.c keep_share for each replay; layer.c narrows both while a layer
 * recomputes or keeps nothing. */
struct saving {
  double in_flight;  /* micro batches whose activations this pipeline rank holds at once */
  double keep_share; /* share of saved tensors actually kept (selective checkpointing) */
  bool compiled;     /* the layer being replayed runs compiled (layers_compiled) */
};

enum sdpa_backend { SDPA_FLASH, SDPA_EFFICIENT, SDPA_MATH };

/* What SDPA is given and runs in a layer. */
struct attention_kernel {
  enum sdpa_backend sdpa; /* the kernel SDPA runs, when kind is VF_ATTN_SDPA */
  bool masked;            /* a mask reaches it: padded batches, or a sliding window */
  bool kv_repeated;       /* K/V repeated to every query head before SDPA */
};

/* attention.c: the kernels once per estimate (attention_choose), the one of the layer
 * replayed (attention_layer). */
struct attention_state {
  enum vf_attention kind;
  struct attention_kernel full;     /* layers attending to every position */
  struct attention_kernel windowed; /* sliding-window layers given their window as a mask */
  struct attention_kernel at;       /* the layer's being replayed */
};

/* dtypes.c */
struct autocast_state {
  struct ids cache; /* autocast's cached weight casts, until the autocast region ends */
};

/* embedding.c */
struct embedding_state {
  uint32_t stable_grad; /* the swapped-in embedding's gradient, made once and never freed */
};

/* head.c */
struct head_state {
  uint32_t held_logits; /* the last micro batch's logits, still held by the training loop */
};

/* grads.c. layer.c and embedding.c add the gradients they make to list; schedule.c begins
 * each micro batch's list, keeps it while accumulating and lets the stale ones go after
 * the loss. */
struct grads_state {
  struct ids list;     /* the gradients of the step */
  bool kept;           /* gradients of the previous micro batch are still there */
  struct ids stale;    /* the last step's gradients, until a zero_grad before this backward */
  struct ids *unsharded; /* per replayed layer and the root: gradients held under no_sync */
  struct ids embedding_unit; /* held apart for accelerate's embedding unit (fsdp_embedding_unit) */
};

/* fsdp.c */
#define FSDP1_IN_FLIGHT 2 /* _FreeEventQueue._max_num_inflight_all_gathers */
struct fsdp_state {
  uint32_t free_events[FSDP1_IN_FLIGHT]; /* FSDP1's last reshards' events, oldest first */
  uint32_t root;          /* the root FSDP unit, gathered through the step */
  bool forwarding;        /* in the step's forward, before the root's post-forward */
  uint32_t gather_buffer; /* FSDP2's last forward all-gather buffer, kept (fsdp2_buffers) */
  uint32_t prefetched;    /* FSDP2's buffer for the next unit of the backward, gathered early */
  uint32_t *held_gather;  /* per replayed layer and the root: FSDP units a pipeline leaves gathered */
};

/* zero.c, ZeRO-3's figures for each pipeline rank (zero_rank). */
struct zero_state {
  uint32_t reduce_buckets;  /* ZeRO's reduce buckets, made by the last backward */
  uint64_t zero3_live;      /* elements ZeRO-3's coordinator keeps gathered at most (zero3_coordinator) */
  uint64_t zero3_sub_group; /* gradient elements ZeRO-3's step converts to fp32 at once (0: none) */
};

/* optimizer.c */
struct optim_state {
  bool states_made;       /* the optimizer has created its states */
  struct ids foreach_tmp; /* foreach AdamW's per-tensor temporaries, for one step */
};

/* pipeline.c: chunks once per estimate (pipe_setup), the rest for each rank (pipe_rank). */
struct pipe_state {
  uint64_t chunks;           /* model chunks per pipeline rank */
  int stage;                 /* the pipeline rank replayed */
  bool has_head;             /* this pipeline stage computes the logits and the loss */
  bool has_embedding;        /* this pipeline stage holds the embedding */
  uint64_t chunks_in_flight; /* chunk forwards held at most */
  bool chunks_apart;         /* the chunks' backwards run one chunk after the other */
  struct ids outputs;        /* the last stage's outputs torch.distributed.pipelining keeps */
  bool receive_buffers;      /* torch.distributed.pipelining's receive buffers exist */
};

/* schedule.c. The mechanisms that save fill sv through tape_keep; head.c has the backward's
 * cuBLAS workspace made (schedule_workspace), its matmul being the backward's first. */
/* layer.c: the offloaded activations still on the GPU, oldest first (offload_stash), and
 * the tensors packed so far, offloaded or not (the stash counts them all). */
#define MAX_STASH 16
struct offload_stash {
  struct stashed {
    struct saved *sv;
    uint32_t at;     /* index in sv */
    uint64_t packed; /* its place among the packed tensors */
  } v[MAX_STASH];
  uint32_t n;
  uint64_t packs;
};

struct sched_state {
  struct saved *sv; /* per replayed layer, plus the head */
  struct offload_stash stash;
  int micro;        /* index of the micro batch replayed, from 0 */
  bool lengths_reversed; /* a distribution's lengths drawn in the other order */
  bool last_micro;  /* this micro batch ends an accumulation cycle */
  uint32_t forward_workspace, backward_workspace; /* the cuBLAS workspaces, once made */
};

/* estimate.c sets it, replay.c reads it. */
struct replay_state {
  uint64_t max;            /* models of more layers are extended from shorter replays */
  vf_timeline_fn listener; /* told of every replayed event (vf_estimate_timeline), or NULL */
  void *listener_arg;
  uint64_t capacity; /* what the allocator may reserve: the GPU's less the CUDA context (0: no GPU) */
  size_t tables;     /* rows of the per-layer tables (estimate.c make_tables) */
};

struct ctx {
  /* The estimate's inputs, set by estimate.c. */
  const struct vf_model *m;
  const struct vf_setup *s; /* resolved (vf_setup_resolve) */
  const struct vf_profile *p;
  const struct params *ps; /* the pipeline rank's, while it is replayed */
  enum vf_task task;
  uint64_t accumulation; /* micro batches per optimizer step */
  bool eval;             /* the run validates after its steps */
  bool base_trainable;   /* the model's own weights train (full fine-tuning) */
  bool layers_train;     /* the layers' own weights take gradients (grads_layers_train) */
  struct dims d;         /* parallel.c, once per estimate (parallel_dims) */
  uint64_t layers;       /* layers replayed: replay.c, for each replay */
  struct tape tape;
  struct saving saving;
  struct attention_state attn;
  struct autocast_state autocast;
  struct embedding_state embedding;
  struct head_state head;
  struct grads_state grads;
  struct fsdp_state fsdp;
  struct zero_state zero;
  struct optim_state opt;
  struct pipe_state pp;
  struct sched_state sched;
  struct replay_state replay;
};

/* ---- What one file hands another ---- */

/* A LoRA target kind's bit in lora_targets. */
#define BIT(k) (1u << (k))

/* Tensors over the logits: a profile gives their bytes per logit summed, but the loss
 * makes them one by one, none wider than fp32: the 16-bit logits, their fp32 up-cast and
 * log-softmax; in the backward the fp32 gradients nll_loss's and _log_softmax's backward
 * formulas each return (tools/autograd/derivatives.yaml@v2.13.0). Each is its own block:
 * a block of their sum fits none of the cached blocks the tensors reuse (the up-cast's,
 * freed after the forward), and the allocator model would reserve it anew. */
#define LOGIT_TENSORS 5
struct logit_tensors {
  uint32_t id[LOGIT_TENSORS];
};

/* What the loss keeps from its forward for its backward: the logits' up-cast and
 * log-softmax (loss), and the soft-capped logits' tanh output (capped); a fused loss's
 * gradients of the head's input and weight, made in the forward (Liger), or what Cut
 * Cross-Entropy keeps to make them in the backward (its log-sum-exp and the vocabulary's
 * average logits, and the head weight cast to the compute dtype). */
struct loss_kept {
  struct logit_tensors loss;
  uint32_t capped;
  uint32_t grad_input, grad_weight;
  uint32_t lse, logit_avg, weight_cast;
};

/* What the embeddings' own post-processing keeps (embedding_forward). */
struct embedding_kept {
  uint32_t leaf, norm_input, mask;
};

/* The highest points of one unit: allocated bytes with their categories, and reserved bytes. */
struct unit_peak {
  uint64_t allocated, reserved;
  uint64_t cat[CAT_SLOTS];
};

struct result {
  struct unit_peak unit[UNITS];
  uint64_t cache_releases; /* cudaMalloc retried after the cache was freed (a GPU given) */
  bool out_of_memory;      /* a request failed even so */
};

/* Layer counts replayed: past the first and last layers, whose neighbours differ. */
#define REPLAY_A 3
#define REPLAY_B 6

/* Bytes of a parameter's own tensor: a quantized weight's state (bitsandbytes' quant_state,
 * an attribute of Params4bit) is none of it, so what moves a module's parameters as tensors,
 * FSDP1's flat parameter (torch _flat_param.py flattens each parameter's data) or a
 * broadcast of them, leaves it where it is. */
static inline uint64_t param_tensor_bytes(const struct param *p) { return p->bytes - p->quant_state_bytes; }

/* ---- The tape's writers, inline: every mechanism calls them for every tensor ---- */

static inline void tape_push(struct tape *t, uint8_t op, uint32_t id, uint64_t bytes, uint8_t cat, uint8_t unit) {
  if (t->rc) return;
  struct ev *grown = array_grow(t->ev, &t->cap, t->n + 1, sizeof *grown);
  if (!grown) {
    t->rc = VF_ENOMEM;
    return;
  }
  t->ev = grown;
  t->ev[t->n++] = (struct ev){.bytes = bytes, .id = id, .op = op, .cat = cat, .unit = unit};
}

static inline uint32_t tape_take_on(struct ctx *x, uint64_t bytes, enum vf_category cat, uint8_t stream) {
  if (!bytes) return 0;
  uint32_t id = ++x->tape.next_id;
  tape_push(&x->tape, OP_ALLOC, id, bytes, (uint8_t)cat, 0);
  x->tape.ev[x->tape.n - 1].stream = stream;
  return id;
}

static inline uint32_t tape_take(struct ctx *x, uint64_t bytes, enum vf_category cat) {
  return tape_take_on(x, bytes, cat, STREAM_COMPUTE);
}

static inline void tape_give(struct ctx *x, uint32_t id) {
  if (id) tape_push(&x->tape, OP_FREE, id, 0, 0, 0);
}

/* Tensor.record_stream: block id is used on `stream` too. */
static inline void tape_record(struct ctx *x, uint32_t id, uint8_t stream) {
  if (!id) return;
  tape_push(&x->tape, OP_RECORD, id, 0, 0, 0);
  if (!x->tape.rc) x->tape.ev[x->tape.n - 1].stream = stream;
}

/* A CUDA event recorded now; its id is the host's to wait for (tape_wait). */
static inline uint32_t tape_event(struct ctx *x) {
  uint32_t id = ++x->tape.next_id;
  tape_push(&x->tape, OP_EVENT, id, 0, 0, 0);
  return id;
}

static inline void tape_wait(struct ctx *x, uint32_t event) {
  if (event) tape_push(&x->tape, OP_WAIT, event, 0, 0, 0);
}

static inline void tape_empty_cache(struct ctx *x) { tape_push(&x->tape, OP_EMPTY_CACHE, 0, 0, 0, 0); }

/* A free that waits for the autograd graph: a leaf's AccumulateGrad node holds the leaf and
 * the gradient it keeps as .grad (torch 2.13 torch/csrc/autograd/functions/
 * accumulate_grad.h) until the graph goes with the loss that roots it. Alone, a model's
 * graph goes as its backward ends, as here; a workload composing several models frees it
 * after all of their backwards (src/core/workload/estimate.c). */
static inline void tape_give_with_graph(struct ctx *x, uint32_t id) {
  if (id) tape_push(&x->tape, OP_GRAPH_FREE, id, 0, 0, 0);
}

/* A tensor made and let go at once: its bytes count only where they top what is live. */
static inline void tape_transient(struct ctx *x, uint64_t bytes, enum vf_category cat) {
  tape_give(x, tape_take(x, bytes, cat));
}

/* Records an allocation a layer keeps for its backward. */
static inline void tape_hold(struct ctx *x, struct saved *sv, uint32_t id, uint64_t bytes,
                             enum vf_category cat) {
  if (!id) return;
  if (sv->n == MAX_SAVED) {
    tape_give(x, id);
    return;
  }
  sv->id[sv->n] = id;
  sv->bytes[sv->n] = bytes;
  sv->on_graph[sv->n] = false;
  sv->cat[sv->n++] = (uint8_t)cat;
}

/* A tensor saved for backward, as many times as micro batches are in flight and in the
 * share checkpointing keeps (struct saving). */
static inline void tape_keep(struct ctx *x, struct saved *sv, uint64_t bytes) {
  uint64_t kept = (uint64_t)((double)bytes * x->saving.in_flight * x->saving.keep_share);
  tape_hold(x, sv, tape_take(x, kept, VF_CAT_ACTIVATIONS), kept, VF_CAT_ACTIVATIONS);
}

/* Whether a profile's list of model types (config.json model_type) names the model's. */
static inline bool model_listed(const char (*names)[VF_MODEL_TYPE_LEN], uint32_t n, const char *model_type) {
  for (uint32_t i = 0; i < n; i++)
    if (strcmp(names[i], model_type) == 0) return true;
  return false;
}

/* ---- The functions one file calls of another, by file ---- */

/* schedule.c */
uint64_t schedule_micro_index(const struct ctx *x);
void schedule_workspace(struct ctx *x, uint32_t *made);
void schedule_write(struct ctx *x);

/* layer.c */
uint64_t layer_param_sum(const struct ctx *x, size_t begin, size_t end, bool trainable, bool bytes,
                         bool sharded);
uint64_t layer_sum(const struct ctx *x, int32_t layer, bool trainable, bool bytes, bool sharded);
void layer_params(struct ctx *x, int32_t layer, struct ids *g);
void layer_norm_keeps(struct ctx *x, struct saved *sv, uint64_t elems, uint64_t in_bytes, bool trains);
void layer_norm_saves(struct ctx *x, struct saved *sv, uint32_t readers, bool trains);
void layer_forward_keeping_nothing(struct ctx *x, int32_t layer);
void layer_forward(struct ctx *x, struct saved *sv, int32_t layer);
void layer_offload(struct ctx *x, struct saved *sv);
void layer_offload_flush(struct ctx *x);
void layer_backward(struct ctx *x, int32_t layer, struct saved *sv, struct ids *g);

/* attention.c */
uint32_t attention_readers(const struct ctx *x);
void attention_choose(struct ctx *x);
void attention_layer(struct ctx *x, int32_t layer);
uint64_t attention_kv_width(const struct ctx *x);
void attention_forward(struct ctx *x, struct saved *sv, int32_t layer);
uint64_t attention_backward_bytes(const struct ctx *x);
uint64_t attention_rope_tables(const struct ctx *x, int32_t layer);

/* mlp.c */
bool mlp_experts_uncast(const struct ctx *x);
uint64_t mlp_bytes(const struct ctx *x);
uint32_t mlp_readers(const struct ctx *x);
void mlp_forward(struct ctx *x, struct saved *sv);
uint64_t mlp_backward_bytes(const struct ctx *x);

/* embedding.c */
bool embedding_stable(const struct ctx *x);
uint64_t embedding_bytes(const struct ctx *x);
struct embedding_kept embedding_forward(struct ctx *x);
uint32_t embedding_post_backward(struct ctx *x, uint32_t grad_stream, struct embedding_kept k);
bool embedding_grads_late(const struct ctx *x);
uint32_t embedding_backward(struct ctx *x, uint32_t first);
void embedding_stable_backward(struct ctx *x, uint32_t grad_stream, uint32_t embedded);

/* head.c */
bool head_loss_differs(const struct vf_profile *p, enum vf_loss loss);
int head_loss_offered(const struct vf_setup *s, const struct vf_profile *p, struct vf_diag *d);
bool head_tied(const struct ctx *x);
uint64_t head_loss_outputs(const struct ctx *x);
bool head_loss_compiled(const struct ctx *x);
struct loss_kept head_forward(struct ctx *x, struct saved *sv);
uint32_t head_backward(struct ctx *x, struct saved *sv, struct loss_kept k, struct ids *g);
void head_eval_loss(struct ctx *x);

/* fused_loss.c */
struct loss_kept fused_loss_forward(struct ctx *x, struct saved *sv);
uint32_t fused_loss_backward(struct ctx *x, struct loss_kept *k);

/* adapters.c */
bool adapter_lora_method(enum vf_method m);
bool adapter_prompted(const struct ctx *x, int32_t layer);
bool adapter_outside_graph(const struct ctx *x, int32_t layer);
bool adapter_norm_weights_train(const struct ctx *x, bool trains);
void adapter_projection(struct ctx *x, struct saved *sv, uint64_t in, uint64_t out, uint32_t kind_bits);
void adapter_input(struct ctx *x, struct saved *sv, uint64_t in, uint32_t kind_bits);

/* dtypes.c */
bool autocast_runs(const struct ctx *x);
bool autocast_casts(const struct ctx *x);
uint32_t autocast_stream_bytes(const struct ctx *x);
void autocast_copies(struct ctx *x, int32_t layer, struct saved *sv, bool recomputing);
void autocast_region_ends(struct ctx *x);
bool quant_model(const struct vf_setup *s);
bool quant_weight(const struct ctx *x, bool head);
uint64_t dequant_bytes(const struct ctx *x, bool forward);
uint32_t quant_output_bytes(const struct ctx *x);
void quant_input(struct ctx *x, struct saved *sv, uint64_t in, uint32_t readers, bool head);
void quant_load_weight(struct ctx *x, const struct param *p);
void quant_backward(struct ctx *x, int32_t layer);

/* grads.c */
bool grads_sharded(const struct vf_setup *s);
bool grads_no_sync(const struct ctx *x);
bool grads_layers_train(const struct ctx *x);
void grads_reduce_unsharded(struct ctx *x, int32_t layer, struct ids *g);
void grads_layer(struct ctx *x, int32_t layer, struct ids *g);
uint32_t grads_head(struct ctx *x, struct ids *g);
bool grads_accumulating_in_place(const struct ctx *x);
uint64_t grads_autograd_bytes(const struct ctx *x);
uint32_t grads_finish_root(struct ctx *x, struct ids *g, uint32_t early);
void grads_zero(struct ctx *x);

/* optimizer.c */
uint64_t optim_largest_trainable(const struct ctx *x);
void optim_scaler_scale(struct ctx *x);
void optim_step(struct ctx *x);
void optim_layer_in_backward(struct ctx *x, int32_t layer, struct ids *g);
void optim_root_in_backward(struct ctx *x, bool at_head, struct ids *g);
int optim_in_backward_offered(const struct vf_setup *s, const struct vf_profile *p, struct vf_diag *d);
uint64_t optim_paged_bytes(const struct ctx *x);

/* ddp.c */
void ddp_init(struct ctx *x);
void broadcast_coalesced(struct ctx *x, size_t begin, size_t end, bool on_nccl);

/* zero.c */
bool zero3_coordinator(const struct ctx *x);
bool zero3_persists(const struct ctx *x, const struct param *p);
uint64_t zero3_gathered_elems(const struct ctx *x, int32_t layer, bool persisting);
void zero_rank(struct ctx *x, uint64_t layers);
void zero3_step_grads(struct ctx *x);
void zero3_ipg_buffers(struct ctx *x);
void zero_reduce_buckets(struct ctx *x);

/* fsdp.c */
bool fsdp_per_tensor(const struct ctx *x);
uint64_t fsdp_gather_bytes(const struct ctx *x, int32_t layer);
bool fsdp_embedding_unit(const struct ctx *x);
void fsdp_backward_prefetch(struct ctx *x, int32_t layer);
uint32_t fsdp_gather(struct ctx *x, int32_t layer);
void fsdp_forward_begins(struct ctx *x);
void fsdp_gather_root_part(struct ctx *x, bool embedding);
void fsdp_reshard_root(struct ctx *x);
void fsdp_forward_returned(struct ctx *x);
void fsdp_before_loss(struct ctx *x);
void fsdp_regather_root(struct ctx *x);
void fsdp_drop_prefetched(struct ctx *x);
void fsdp_post_backward(struct ctx *x, int32_t begin, int32_t end, struct ids *g);
void fsdp_reshard(struct ctx *x, uint32_t gathered);
bool fsdp1_streams(const struct ctx *x);
bool fsdp1_wrap(struct ctx *x);
void fsdp_load_full_state_dict(struct ctx *x);

/* pipeline.c */
void pipe_setup(struct ctx *x);
void pipe_rank(struct ctx *x, uint64_t rank);
double pipe_in_flight(const struct ctx *x);
bool pipe_fsdp(const struct ctx *x);
void pipe_post_backward(struct ctx *x, struct ids *g);
bool pipe_grads_deferred(const struct ctx *x, int32_t layer);
void pipe_chunk_post_backward(struct ctx *x, uint64_t layer, struct ids *g);
bool pipe_hold_output(struct ctx *x, uint64_t bytes);
void pipe_hold_input_grads(struct ctx *x, uint64_t stream);
uint32_t pipe_keep_logits(struct ctx *x, uint64_t n);
void pipe_merge_outputs(struct ctx *x);
void pipe_micro_begins(struct ctx *x);

/* parallel.c */
void parallel_dims(struct ctx *x);
void parallel_length(struct ctx *x, uint64_t seq);
void parallel_row_output(struct ctx *x);
uint64_t parallel_sequence_bytes(const struct ctx *x);
void parallel_ring_exchange(struct ctx *x, bool backward);
void parallel_token_exchange(struct ctx *x);

/* replay.c */
int replay_layers(struct ctx *x, uint64_t layers, const struct vf_alloc_conf *alloc, struct result *out);
uint64_t replay_reserved(const struct result *r);
void replay_fill(struct vf_estimate *out, const struct result *r, const struct vf_setup *s);

/* tape.c */
void ids_push(struct ctx *x, struct ids *g, uint32_t id);
void ids_give(struct ctx *x, struct ids *g);
void tape_release(struct ctx *x, struct saved *sv);
void tape_drop_graph(struct ctx *x);

#endif

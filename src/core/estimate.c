/* Peak memory of a training step: the step is written as the sequence of allocations and
 * frees PyTorch makes (forward layer by layer, loss, backward layer by layer, optimizer),
 * and replayed through the caching-allocator model. Layers are identical, so a model is
 * replayed with REPLAY_A and REPLAY_B layers and each stretch's peaks are extended to all. */
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "base/diag.h"
#include "core/estimate_internal.h"
#include "core/params.h"
#include "core/pipeline.h"
#include "vramfit.h"

enum { OP_ALLOC = 1, OP_FREE = 2, OP_UNIT = 3, OP_GRAPH_FREE = 4 };

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
 * _unshard / _reduce_grad: its unshard and post-backward streams). */
enum { STREAM_COMPUTE, STREAM_ALL_GATHER, STREAM_REDUCE_SCATTER };

/* Lists of allocation ids, freed together. */
struct ids {
  uint32_t *id;
  size_t n, cap;
};

/* tape.c: the events of one replay, and what autograd keeps beyond the backward. */
struct tape {
  struct ev *ev;
  size_t n, cap;
  uint32_t next_id;
  int rc;
  struct ids graph; /* tensors the last micro batch's autograd graph still references */
};

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

/* How much of what a layer saves is kept (tape_keep). */
struct saving {
  double in_flight;  /* micro batches whose activations this pipeline rank holds at once */
  double keep_share; /* share of saved tensors actually kept (selective checkpointing) */
};

struct saved;

enum sdpa_backend { SDPA_FLASH, SDPA_EFFICIENT, SDPA_MATH };

/* attention.c: the attention the setup runs, chosen once per estimate. */
struct attention_state {
  enum vf_attention kind;
  enum sdpa_backend sdpa; /* the kernel SDPA runs, when kind is VF_ATTN_SDPA */
  bool padded;            /* batches padded to their longest sample bring attention a mask */
  bool kv_repeated;       /* K/V repeated to every query head before SDPA */
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

/* grads.c: the step's gradients. */
struct grads_state {
  struct ids list;
  bool kept;           /* gradients of the previous micro batch are still there */
  struct ids stale;    /* the last step's gradients, until a zero_grad before this backward */
  uint32_t *unsharded; /* per replayed layer and the root: gradients held under no_sync */
};

/* fsdp.c: gathered weights. */
struct fsdp_state {
  uint32_t root;          /* the root FSDP unit, gathered through the step */
  bool forwarding;        /* in the step's forward, before the root's post-forward */
  uint32_t gather_buffer; /* FSDP2's last forward all-gather buffer, kept (fsdp2_buffers) */
  uint32_t prefetched;    /* FSDP2's buffer for the next unit of the backward, gathered early */
  uint32_t *held_gather;  /* per replayed layer and the root: FSDP units a pipeline leaves gathered */
};

/* zero.c */
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

/* pipeline.c: the pipeline rank replayed. */
struct pipe_state {
  int stage;                         /* the pipeline rank replayed */
  bool has_head;                     /* this pipeline stage computes the logits and the loss */
  bool has_embedding;                /* this pipeline stage holds the embedding */
  uint64_t chunks, chunks_in_flight; /* model chunks per pipeline rank; chunk forwards held at most */
  bool chunks_apart;                 /* the chunks' backwards run one chunk after the other */
  struct ids outputs;                /* the last stage's outputs torch.distributed.pipelining keeps */
  bool receive_buffers;              /* torch.distributed.pipelining's receive buffers exist */
};

/* schedule.c: the micro batch replayed. */
struct sched_state {
  struct saved *sv; /* per replayed layer, plus the head */
  int micro;        /* index of the micro batch replayed, from 0 */
  bool last_micro;  /* this micro batch ends an accumulation cycle */
  uint32_t forward_workspace, backward_workspace; /* the cuBLAS workspaces, once made */
};

/* replay.c */
struct replay_state {
  uint64_t max;            /* models of more layers are extended from shorter replays */
  vf_timeline_fn listener; /* told of every replayed event (vf_estimate_timeline), or NULL */
  void *listener_arg;
};

struct ctx {
  const struct vf_model *m;
  const struct vf_setup *s;
  const struct vf_profile *p;
  const struct vf_params *ps;
  enum vf_task task;
  uint64_t accumulation; /* micro batches per optimizer step */
  bool eval;             /* the run validates after its steps */
  bool base_trainable;   /* the model's own weights train (full fine-tuning) */
  bool layers_train;     /* the layers' own weights take gradients (grads_layers_train) */
  struct dims d;
  uint64_t layers; /* layers replayed */
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

static void tape_push(struct tape *b, uint8_t op, uint32_t id, uint64_t bytes, uint8_t cat, uint8_t unit) {
  if (b->rc) return;
  struct ev *grown = array_grow(b->ev, &b->cap, b->n + 1, sizeof *grown);
  if (!grown) {
    b->rc = VF_ENOMEM;
    return;
  }
  b->ev = grown;
  b->ev[b->n++] = (struct ev){.bytes = bytes, .id = id, .op = op, .cat = cat, .unit = unit};
}

static uint32_t tape_take_on(struct ctx *x, uint64_t bytes, enum vf_category cat, uint8_t stream) {
  if (!bytes) return 0;
  uint32_t id = ++x->tape.next_id;
  tape_push(&x->tape, OP_ALLOC, id, bytes, (uint8_t)cat, 0);
  x->tape.ev[x->tape.n - 1].stream = stream;
  return id;
}

static uint32_t tape_take(struct ctx *x, uint64_t bytes, enum vf_category cat) {
  return tape_take_on(x, bytes, cat, STREAM_COMPUTE);
}

static void tape_give(struct ctx *x, uint32_t id) {
  if (id) tape_push(&x->tape, OP_FREE, id, 0, 0, 0);
}

/* A free that waits for the autograd graph: a leaf's AccumulateGrad node holds the leaf and
 * the gradient it keeps as .grad (torch 2.13 torch/csrc/autograd/functions/
 * accumulate_grad.h) until the graph goes with the loss that roots it. Alone, a model's
 * graph goes as its backward ends, as here; a workload composing several models frees it
 * after all of their backwards (workload_estimate.c). */
static void tape_give_with_graph(struct ctx *x, uint32_t id) {
  if (id) tape_push(&x->tape, OP_GRAPH_FREE, id, 0, 0, 0);
}

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
static const enum vf_phase stretch_phase[ST_COUNT] = {
    VF_PHASE_FORWARD,  VF_PHASE_FORWARD,  VF_PHASE_FORWARD,  VF_PHASE_LOSS,     VF_PHASE_BACKWARD,
    VF_PHASE_BACKWARD, VF_PHASE_BACKWARD, VF_PHASE_BACKWARD, VF_PHASE_BACKWARD, VF_PHASE_OPTIMIZER};

/* The replay runs two optimizer steps of at most three micro batches each. */
#define MICRO_MAX 6
/* A unit of the extension: the setup, each micro batch's stretches, the evaluation and
 * the checkpoint's save. */
#define UNIT_SETUP 0
#define UNIT_EVAL (1 + MICRO_MAX * ST_COUNT)
#define UNIT_SAVE (UNIT_EVAL + 1)
#define UNITS (UNIT_SAVE + 1)

static enum vf_phase unit_phase(int unit) {
  if (unit == UNIT_SETUP) return VF_PHASE_LOAD;
  if (unit == UNIT_EVAL) return VF_PHASE_EVAL;
  if (unit == UNIT_SAVE) return VF_PHASE_SAVE;
  return stretch_phase[(unit - 1) % ST_COUNT];
}

static void mark(struct ctx *x, enum stretch st) {
  tape_push(&x->tape, OP_UNIT, 0, 0, 0, (uint8_t)(1 + x->sched.micro * ST_COUNT + st));
}

/* The stretch of a layer in a pass: its bottom, middle or top one. */
static enum stretch layer_stretch(const struct ctx *x, uint64_t layer, enum stretch bottom) {
  if (!layer) return bottom;
  return (enum stretch)(bottom + (layer + 1 == x->layers ? 2 : 1));
}

static void tape_transient(struct ctx *x, uint64_t bytes, enum vf_category cat) { tape_give(x, tape_take(x, bytes, cat)); }

static void ids_push(struct ctx *x, struct ids *g, uint32_t id) {
  uint32_t *grown = array_grow(g->id, &g->cap, g->n + 1, sizeof *grown);
  if (!grown) {
    x->tape.rc = VF_ENOMEM;
    return;
  }
  g->id = grown;
  g->id[g->n++] = id;
}

static void ids_give(struct ctx *x, struct ids *g) {
  for (size_t i = 0; i < g->n; i++) tape_give(x, g->id[i]);
  g->n = 0;
}

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

/* Records an allocation a layer keeps for its backward. */
static void tape_hold(struct ctx *x, struct saved *sv, uint32_t id, uint64_t bytes, enum vf_category cat) {
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

static void tape_keep(struct ctx *x, struct saved *sv, uint64_t bytes) {
  uint64_t kept = (uint64_t)((double)bytes * x->saving.in_flight * x->saving.keep_share);
  tape_hold(x, sv, tape_take(x, kept, VF_CAT_ACTIVATIONS), kept, VF_CAT_ACTIVATIONS);
}

/* A tensor kept on its autograd node rather than saved for backward is not released by
 * the backward: it lives until the graph is freed (tape_drop_graph). */
static void tape_release(struct ctx *x, struct saved *sv) {
  for (size_t i = 0; i < sv->n; i++) {
    if (sv->on_graph[i]) ids_push(x, &x->tape.graph, sv->id[i]);
    else tape_give(x, sv->id[i]);
  }
  sv->n = 0;
}

/* The index in its optimizer step of the micro batch replayed: the replay's first, middle
 * and last micro batches stand for the first, every middle one and the last. */
static uint64_t schedule_micro_index(const struct ctx *x) {
  uint64_t m = x->accumulation, per = m < 3 ? m : 3, j = (uint64_t)x->sched.micro % per;
  return j + 1 == per ? m - 1 : j;
}

/* The micro batches whose activations the rank holds while the replayed one runs: the
 * schedule's most, fewer once the pipeline drains (k micro batches from the step's end,
 * only those k are left). */
static double pipe_in_flight(const struct ctx *x) {
  uint64_t left = (x->accumulation - schedule_micro_index(x)) * x->pp.chunks;
  uint64_t held = x->pp.chunks_in_flight < left ? x->pp.chunks_in_flight : left;
  return (double)held / (double)x->pp.chunks;
}

/* The training loop's variables (litgpt's loss and logits) hold the last micro batch's
 * graph until the next micro batch's loss replaces it. */
static void tape_drop_graph(struct ctx *x) { ids_give(x, &x->tape.graph); }

/* Activation offloading moves a layer's saved tensors to the host after its forward and
 * brings them back for its backward. */
static void layer_offload(struct ctx *x, struct saved *sv) {
  if (!(x->s->offload & VF_OFFLOAD_ACTIVATIONS)) return;
  for (size_t i = 0; i < sv->n; i++)
    if (sv->cat[i] == VF_CAT_ACTIVATIONS && !sv->on_graph[i]) {
      tape_give(x, sv->id[i]);
      sv->id[i] = 0;
    }
}

static void reload(struct ctx *x, struct saved *sv) {
  for (size_t i = 0; i < sv->n; i++)
    if (!sv->id[i]) sv->id[i] = tape_take(x, sv->bytes[i], (enum vf_category)sv->cat[i]);
}

/* Whether the forward runs under autocast: mixed precision is asked for, and under FSDP only
 * where the framework enters autocast besides FSDP's own mixed precision (accelerate's FSDP2
 * does not: fsdp_autocast). */
static bool autocast_runs(const struct ctx *x) {
  return x->s->amp != VF_PREC_NONE && (!vf_shard_fsdp(x->s->shard) || x->p->fsdp_autocast);
}

/* Autocast computes in a narrower dtype than the weights are stored in. Sharded mixed
 * precision gathers the weights already in the compute dtype (FSDP MixedPrecision
 * param_dtype, ZeRO-3's 16-bit partitions): nothing is cast and the residual stream is in
 * the compute dtype. */
static bool autocast_casts(const struct ctx *x) {
  bool gathered = vf_shard_weights(x->s->shard);
  return autocast_runs(x) && x->d.c < vf_precision_bytes(x->s->weights) && !gathered;
}

/* Whether a profile's list of model types (config.json model_type) names the model's. */
static bool model_listed(const char (*names)[VF_MODEL_TYPE_LEN], uint32_t n, const char *model_type) {
  for (uint32_t i = 0; i < n; i++)
    if (strcmp(names[i], model_type) == 0) return true;
  return false;
}

/* One q,k,v projection per layer: by the framework's modeling code or the model's own. */
static bool fused_qkv(const struct ctx *x) { return x->p->fused_qkv || x->m->arch.fused_qkv; }

/* 0 stands for the compute dtype's size. */
static void keep_list(struct ctx *x, struct saved *sv, const uint32_t *bytes, uint32_t n, uint64_t elems) {
  for (uint32_t i = 0; i < n; i++) tape_keep(x, sv, elems * (bytes[i] ? bytes[i] : x->d.c));
}

/* Bytes per element of the residual stream: the weights' dtype under autocast (the
 * embedding's output and every residual add stay in it), else the compute dtype. */
static uint32_t autocast_stream_bytes(const struct ctx *x) {
  return autocast_casts(x) ? vf_precision_bytes(x->s->weights) : x->d.c;
}

/* keep_list, with 0 meaning the residual stream's dtype (a norm's output before it is
 * cast for the next matmul). */
static void keep_stream_list(struct ctx *x, struct saved *sv, const uint32_t *bytes, uint32_t n, uint64_t elems) {
  for (uint32_t i = 0; i < n; i++) tape_keep(x, sv, elems * (bytes[i] ? bytes[i] : autocast_stream_bytes(x)));
}

/* Trainable projections reading a norm's output keep it as their input. Autocast casts it
 * for each of them apart (a cast is cached only for leaf weights, autocast_mode.cpp
 * cached_cast), so each keeps a copy of its own. */
static void norm_output_saves(struct ctx *x, struct saved *sv, uint32_t readers, bool trains) {
  /* Under sequence parallelism the projections read the output all-gathered over the
   * tensor-parallel group, the whole sequence: kept as their input where the framework keeps
   * the gathered tensor, else a buffer for the matmul (gathered again in the backward). */
  bool gathered_kept = x->d.sp && x->p->sp_gathered_input && trains;
  if (x->d.sp && readers && !gathered_kept) tape_transient(x, x->d.T * x->d.h * x->d.c, VF_CAT_TEMPORARIES);
  if (!trains) return;
  uint32_t copies = autocast_casts(x) ? readers : readers > 0;
  uint64_t read = x->d.sp && !gathered_kept ? x->d.Ts : x->d.T;
  for (uint32_t i = 0; i < copies; i++) tape_keep(x, sv, read * x->d.h * x->d.c);
}

/* The norms' weights train: where the weights around them do (`trains`), and under
 * litgpt's adapter v2 (adapter_v2.py adapter_filter: norm_1, norm_2, ln_f). */
static bool adapter_norm_weights_train(const struct ctx *x, bool trains) {
  return trains || x->s->method == VF_METHOD_ADAPTER_V2;
}

/* A norm keeps what its backward needs; a trainable weight needs more, and trainable
 * projections after it (`trains`: the weights of its layer, or of the head) keep its
 * output. */
static void layer_norm_saves(struct ctx *x, struct saved *sv, uint32_t readers, bool trains) {
  const struct vf_profile *p = x->p;
  uint64_t elems = x->d.Ts * x->d.h;
  if (x->m->arch.norm == VF_NORM_RMS) {
    keep_list(x, sv, p->rms_norm_saves, p->n_rms_norm_saves, elems);
    if (adapter_norm_weights_train(x, trains))
      keep_stream_list(x, sv, p->rms_norm_weight_saves, p->n_rms_norm_weight_saves, elems);
  } else {
    keep_stream_list(x, sv, p->layer_norm_saves, p->n_layer_norm_saves, elems);
  }
  norm_output_saves(x, sv, readers, trains);
}

/* Projections reading a block's attention input, and its MLP input. */
static uint32_t attention_readers(const struct ctx *x) { return fused_qkv(x) ? 1 : 3; }
static uint32_t mlp_readers(const struct ctx *x) {
  return x->m->arch.glu && !x->m->arch.fused_gate_up ? 2 : 1;
}

#define BIT(k) (1u << (k))

static bool adapter_lora_method(enum vf_method m) {
  return m == VF_METHOD_LORA || m == VF_METHOD_QLORA || m == VF_METHOD_DORA;
}

static bool quant_model(const struct vf_setup *s) { return vf_setup_quant(s) != VF_QUANT_NONE; }

static bool adapter_method(enum vf_method m) { return m == VF_METHOD_ADAPTER || m == VF_METHOD_ADAPTER_V2; }

/* A layer litgpt's adapters prompt (adapter.py Block: adapter_wte and gating_factor). */
static bool adapter_prompted(const struct ctx *x, int32_t layer) {
  return adapter_method(x->s->method) && layer >= VF_ADAPTER_START_LAYER;
}

/* Adapter v1 trains nothing below its first prompted layer, whose input needs no gradient:
 * autograd records none of those layers' ops, which keep nothing and have no backward. */
static bool adapter_outside_graph(const struct ctx *x, int32_t layer) {
  return x->s->method == VF_METHOD_ADAPTER && layer < VF_ADAPTER_START_LAYER;
}

/* The quantized model's embedding is swapped for a normalizing one that trains. */
static bool embedding_stable(const struct ctx *x) {
  return x->p->stable_embedding && quant_model(x->s) && x->task == VF_TASK_CAUSAL_LM;
}

/* Bytes per element alive while a 4-bit weight is dequantized for a matmul: the
 * compute-dtype weight, and what the dequantizer allocates on the way, which may differ
 * between the forward's matmul and the backward's input gradient. */
static uint64_t dequant_bytes(const struct ctx *x, bool forward) {
  return x->d.c + (forward ? x->p->dequant_forward_extra_bytes : x->p->dequant_extra_bytes);
}

/* The weight of a projection (or of the output head) is stored in 4 bits. */
static bool quant_weight(const struct ctx *x, bool head) {
  return quant_model(x->s) && (!head || x->p->quantize_head);
}

/* bitsandbytes' 4-bit matmul keeps its input for the input gradient, once per input tensor
 * however many projections read it, as an attribute of its autograd node (ctx.tensors),
 * which the backward does not release and checkpointing does not see. */
static void quant_input(struct ctx *x, struct saved *sv, uint64_t in, bool head) {
  if (!quant_weight(x, head) || !x->p->quant_input_bytes) return;
  size_t before = sv->n;
  tape_keep(x, sv, x->d.T * in * x->p->quant_input_bytes);
  if (sv->n > before) sv->on_graph[before] = x->p->graph_held && x->s->grad_ckpt == VF_CKPT_NONE;
}

/* Bytes per element of what an adapter computes: PEFT casts the input to the adapter's
 * dtype (peft/tuners/lora/layer.py Linear.forward, _cast_input_dtype), so fp32 adapters
 * compute in fp32, unless autocast casts their matmuls down again. */
static uint32_t adapter_bytes(const struct ctx *x) {
  return x->s->amp != VF_PREC_NONE ? x->d.c : x->d.w;
}

/* DoRA (peft/tuners/lora/dora.py DoraLinearLayer.forward @ peft 0.21): the LoRA weight
 * is built as lora_B(lora_A(eye)), added to a copy of the base weight in the adapter's
 * dtype to take the column norm; with dropout active the base output is computed again
 * from that weight copy (F.linear keeps it for the input gradient) and the LoRA output is
 * kept by the magnitude's products, both in the adapter's dtype. */
static void dora_forward(struct ctx *x, struct saved *sv, uint64_t in, uint64_t out) {
  uint64_t a = adapter_bytes(x), T = x->d.T;
  uint32_t eye = tape_take(x, in * in * a, WEIGHT_TEMPORARIES);
  uint32_t merged = tape_take(x, in * out * a, WEIGHT_TEMPORARIES);
  /* Without dropout PEFT reuses the base layer's output (variants.py DoraLinearVariant),
   * and torchtune's DoRALinear always does (torchtune/modules/peft/dora.py @ 0.6.1). */
  if (x->p->lora_dropout) tape_keep(x, sv, in * out * a); /* the base weight's copy */
  tape_transient(x, 2 * in * out * a, WEIGHT_TEMPORARIES); /* scaling * lora weight, and the sum */
  tape_give(x, merged);
  tape_give(x, eye);
  tape_keep(x, sv, T * out * a); /* lora_B's output */
  tape_keep(x, sv, T * out * a); /* the base output (computed again under dropout) */
  tape_transient(x, 3 * T * out * a, VF_CAT_TEMPORARIES);
}

/* The extras around one frozen or adapted projection (in -> out; kind_bits are the LoRA
 * target kinds it implements, several for a fused one): 4-bit weights are dequantized for
 * every matmul (the input a quantized matmul keeps is its caller's, quant_input); a
 * LoRA branch keeps a dropout mask and copy of its input and its rank-r intermediate, in
 * the adapter's dtype, and adds its output to the base output in that dtype. */
static void adapter_projection(struct ctx *x, struct saved *sv, uint64_t in, uint64_t out, uint32_t kind_bits) {
  const struct vf_setup *s = x->s;
  const struct dims *d = &x->d;
  if (quant_weight(x, kind_bits == BIT(VF_KIND_HEAD)))
    tape_transient(x, in * out * dequant_bytes(x, true), WEIGHT_TEMPORARIES);
  /* litgpt's adapter v2 scales and shifts every linear's output (adapter_v2.py
   * AdapterV2Linear: adapter_scale * (linear(x) + adapter_bias)): the product keeps the
   * shifted output for the scale's gradient. */
  if (s->method == VF_METHOD_ADAPTER_V2) tape_keep(x, sv, d->T * out * d->c);
  uint32_t hit = s->lora_targets & kind_bits;
  if (!adapter_lora_method(s->method) || !hit) return;
  uint64_t a = adapter_bytes(x);
  if (x->p->lora_dropout) {
    tape_keep(x, sv, d->T * in);
    tape_keep(x, sv, d->T * in * a);
  }
  tape_keep(x, sv, d->T * s->lora_r * (uint64_t)__builtin_popcount(hit) * a);
  if (s->method == VF_METHOD_DORA) dora_forward(x, sv, in, out);
  else tape_transient(x, 2 * d->T * out * a, VF_CAT_TEMPORARIES); /* lora_B's output, scaled */
}

/* Without dropout a LoRA branch reads its projection's input as it is, and lora_A keeps
 * it for its weight gradient: once per input tensor however many branches read it
 * (torchtune/modules/peft/lora.py @ 0.6.1: nn.Identity in place of a 0.0 dropout). */
static void adapter_input(struct ctx *x, struct saved *sv, uint64_t in, uint32_t kind_bits) {
  if (x->p->lora_dropout || !adapter_lora_method(x->s->method) || !(x->s->lora_targets & kind_bits)) return;
  tape_keep(x, sv, x->d.T * in * x->d.c);
}

static void qkv_projections(struct ctx *x, struct saved *sv) {
  const struct dims *d = &x->d;
  quant_input(x, sv, d->h, false);
  adapter_input(x, sv, d->h, BIT(VF_KIND_Q) | BIT(VF_KIND_K) | BIT(VF_KIND_V));
  if (fused_qkv(x)) {
    adapter_projection(x, sv, d->h, d->q + 2 * d->kv, BIT(VF_KIND_Q) | BIT(VF_KIND_K) | BIT(VF_KIND_V));
    return;
  }
  adapter_projection(x, sv, d->h, d->q, BIT(VF_KIND_Q));
  adapter_projection(x, sv, d->h, d->kv, BIT(VF_KIND_K));
  adapter_projection(x, sv, d->h, d->kv, BIT(VF_KIND_V));
}

/* What a fused q,k,v projection leaves alive beyond q, k and v: when V is not copied for
 * expansion it stays a view of the whole output, which attention keeps; and a LoRA branch
 * adapting only some of q, k, v zero-pads its output into place, and the padding's
 * backward keeps the unpadded output. */
static void fused_qkv_extras(struct ctx *x, struct saved *sv, bool expand) {
  const struct dims *d = &x->d;
  if (!fused_qkv(x)) return;
  bool view_kept = x->p->qkv_view_kept ||
                   model_listed(x->p->qkv_view_models, x->p->n_qkv_view_models, x->m->arch.model_type);
  if (view_kept && !expand) tape_keep(x, sv, d->T * (d->q + d->kv) * d->c);
  uint32_t qkv = BIT(VF_KIND_Q) | BIT(VF_KIND_K) | BIT(VF_KIND_V), hit = x->s->lora_targets & qkv;
  if (!x->p->lora_zero_pad || !adapter_lora_method(x->s->method) || !hit || hit == qkv) return;
  uint64_t width = (hit & BIT(VF_KIND_Q) ? d->q : 0) + (hit & BIT(VF_KIND_K) ? d->kv : 0) +
                   (hit & BIT(VF_KIND_V) ? d->kv : 0);
  tape_keep(x, sv, d->T * width * d->c);
}

/* The kernel PyTorch's SDPA picks (sdp_utils.cpp select_sdp_backend, as of 2.13): flash for
 * fp16/bf16 from sm80 on, without a mask, head dims up to 256, and K/V of fewer heads only
 * under enable_gqa; else memory-efficient (sm50 on) for head dims a multiple of 8 (16-bit)
 * or 4 (fp32) and K/V of every head (no grouped-query attention through 2.13); else math.
 * What reaches it is the framework's: padded batches bring a mask; grouped K/V heads come
 * with enable_gqa when there is no mask and head dims fit (transformers' use_gqa_in_sdpa),
 * else repeated to every head first, unless the model passes its one multi-query head as
 * it is (sdpa_mqa_unexpanded). */
static bool raw_mqa(const struct ctx *x) {
  const struct vf_arch *a = &x->m->arch;
  return a->kv_heads == 1 && a->heads > 1 &&
         model_listed(x->p->sdpa_mqa_unexpanded, x->p->n_sdpa_mqa_unexpanded, a->model_type);
}

/* Grouped K/V heads reach SDPA as they are, with enable_gqa. */
static bool sdpa_grouped(const struct ctx *x) {
  const struct vf_arch *a = &x->m->arch;
  return a->kv_heads < a->heads && !raw_mqa(x) && !x->p->gqa_expand && !x->attn.padded && a->head_dim <= 256;
}

static enum sdpa_backend sdpa_backend(const struct ctx *x) {
  const struct vf_arch *a = &x->m->arch;
  bool half = x->d.c < 4, fits = a->head_dim <= 256, grouped = sdpa_grouped(x);
  bool every_head = a->kv_heads == a->heads || (!raw_mqa(x) && !grouped);
  uint32_t cc = x->s->gpu_cc_major ? x->s->gpu_cc_major : 9; /* unnamed: a current GPU */
  if (cc >= 8 && half && !x->attn.padded && fits && (every_head || grouped)) return SDPA_FLASH;
  if (cc >= 5 && a->head_dim % (half ? 8 : 4) == 0 && every_head) return SDPA_EFFICIENT;
  return SDPA_MATH;
}

/* Bytes per element the math backend computes in: fp32 for 16-bit inputs from the PyTorch
 * release that up-casts them (sdpa_math_fp32), else the inputs' own. */
static uint64_t math_bytes(const struct ctx *x) { return x->p->sdpa_math_fp32 ? 4 : x->d.c; }

/* The width of the keys and values the attention kernel is given: every query head's
 * where they were repeated before it (kv_repeated), the key/value heads' otherwise. */
static uint64_t attention_kv_width(const struct ctx *x) {
  return x->attn.kv_repeated ? x->d.q : x->d.kv;
}

/* SDPA's math backend (attention.cpp _scaled_dot_product_attention_math): q, k and v
 * up-cast, q and k scaled into new tensors, K and V expanded to every query head (the
 * broadcasting matmul's copy, or repeat_interleave under enable_gqa), the scores (the
 * causal mask added in place), their softmax, kept, and the output; the probabilities are
 * also cast back for a second result SDPA drops. The matmuls keep q, k and v as their
 * reshaped copies (q, k, v are transposed views of the projections' outputs). The output
 * is laid out [batch, heads, positions, dim], so transformers' transpose(1, 2).contiguous()
 * copies it for o_proj. */
static void math_attention_forward(struct ctx *x, struct saved *sv) {
  const struct dims *d = &x->d;
  uint64_t T = d->T, c = d->c, a = math_bytes(x), scores = T * d->heads * d->s_kv;
  uint64_t kv_width = attention_kv_width(x);
  uint32_t q = tape_take(x, T * d->q * c, VF_CAT_ACTIVATIONS), kv = tape_take(x, 2 * T * kv_width * c, VF_CAT_ACTIVATIONS);
  uint32_t mask = tape_take(x, (x->attn.padded ? x->s->batch : 1) * d->s_kv * d->s_kv * a, VF_CAT_TEMPORARIES);
  uint32_t up = a > c ? tape_take(x, T * (d->q + 2 * kv_width) * a, VF_CAT_TEMPORARIES) : 0;
  uint32_t scaled = tape_take(x, T * d->q * a, VF_CAT_TEMPORARIES), scaled_k = tape_take(x, T * d->kv * a, VF_CAT_TEMPORARIES);
  tape_keep(x, sv, T * d->q * a);
  tape_keep(x, sv, T * d->q * a);
  uint32_t raw = tape_take(x, scores * a, VF_CAT_TEMPORARIES);
  tape_give(x, scaled_k);
  tape_keep(x, sv, scores * a);
  tape_give(x, raw);
  uint32_t probs = a > c ? tape_take(x, scores * c, VF_CAT_TEMPORARIES) : 0;
  tape_keep(x, sv, T * d->q * a);
  uint32_t out = tape_take(x, T * d->q * a, VF_CAT_TEMPORARIES);
  if (a > c) {
    uint32_t cast = tape_take(x, T * d->q * c, VF_CAT_TEMPORARIES);
    tape_give(x, out);
    out = cast;
  }
  tape_give(x, scaled);
  tape_give(x, up);
  tape_give(x, probs);
  tape_give(x, mask);
  tape_give(x, q);
  tape_give(x, kv);
  if (x->layers_train) tape_keep(x, sv, T * d->q * c);
  else tape_transient(x, T * d->q * c, VF_CAT_TEMPORARIES);
  tape_give(x, out);
}

/* The output projection, and the dropout after it (BERT, GPT-2). */
static void attention_output(struct ctx *x, struct saved *sv) {
  enum vf_family f = x->m->arch.family;
  quant_input(x, sv, x->d.q, false);
  /* Over SDPA, output_proj reads the attention's own saved output unless it is copied. */
  if (x->attn.kind == VF_ATTN_EAGER || x->p->attn_out_copies > 1) adapter_input(x, sv, x->d.q, BIT(VF_KIND_O));
  adapter_projection(x, sv, x->d.q, x->d.h, BIT(VF_KIND_O));
  if (f == VF_FAMILY_BERT || f == VF_FAMILY_GPT2) tape_keep(x, sv, x->d.Ts * x->d.h);
}

/* Whether eager attention's softmax runs in fp32 with 16-bit scores: the modeling code asks
 * for it (softmax(..., dtype=torch.float32)) unless the model type takes it in the scores'
 * dtype; autocast runs softmax in fp32 either way (autocast_mode.cpp: softmax is on its fp32
 * list, when no dtype is given). */
static bool eager_softmax_fp32(const struct ctx *x) {
  const struct vf_profile *p = x->p;
  if (x->d.c >= 4) return false;
  if (autocast_runs(x)) return true;
  return p->eager_softmax_fp32 && !model_listed(p->eager_softmax_in_dtype, p->n_eager_softmax_in_dtype,
                                                x->m->arch.model_type);
}

/* A single K/V head (per GPU) expanded to every query head stays a view when flattened
 * or reshaped (torchtune's expand().flatten(1, 2)): merging a dimension of size 1 needs no
 * copy. repeat_interleave (litgpt) copies whatever the heads. */
static bool single_head_view(const struct ctx *x) {
  return x->p->gqa_expand && !x->p->kv_repeat_interleave && x->d.kv <= x->m->arch.head_dim;
}

static void attention_forward(struct ctx *x, struct saved *sv, int32_t layer) {
  const struct dims *d = &x->d;
  const struct vf_arch *a = &x->m->arch;
  uint64_t T = d->T, c = d->c;
  qkv_projections(x, sv);
  /* Eager attention multiplies whole heads: K and V are repeated to every query head
   * first (transformers' eager_attention_forward, repeat_kv), whatever SDPA would do. */
  bool expand = (x->attn.kv_repeated && !single_head_view(x)) || (x->attn.kind == VF_ATTN_EAGER && d->kv < d->q);
  fused_qkv_extras(x, sv, expand);
  if (x->p->rope_copies && a->rotary_fraction > 0) tape_transient(x, T * (d->q + d->kv) * c, VF_CAT_TEMPORARIES);
  if (x->attn.kind == VF_ATTN_SDPA && x->attn.sdpa == SDPA_MATH) {
    math_attention_forward(x, sv);
    attention_output(x, sv);
    return;
  }
  tape_keep(x, sv, T * d->q * c);
  uint32_t k = tape_take(x, T * d->kv * c, VF_CAT_ACTIVATIONS), v = tape_take(x, T * d->kv * c, VF_CAT_ACTIVATIONS);
  if (expand) {
    tape_keep(x, sv, T * d->q * c);
    tape_keep(x, sv, T * d->q * c);
    tape_give(x, k);
    tape_give(x, v);
  } else {
    tape_hold(x, sv, k, T * d->kv * c, VF_CAT_ACTIVATIONS);
    tape_hold(x, sv, v, T * d->kv * c, VF_CAT_ACTIVATIONS);
  }
  bool dropout = a->family == VF_FAMILY_BERT || a->family == VF_FAMILY_GPT2;
  uint32_t out_copies = x->layers_train ? x->p->attn_out_copies : 1;
  if (x->attn.kind == VF_ATTN_EAGER) {
    uint64_t scores = T * d->heads * d->s_kv;
    bool fp32 = eager_softmax_fp32(x);
    uint64_t raw_bytes = scores * (fp32 ? 4 : c);
    uint32_t raw = tape_take(x, raw_bytes, VF_CAT_TEMPORARIES);
    /* The softmax's output, kept by its backward, and the next matmul's input: that same
     * output, or its cast to the compute dtype (which dropout, when active, replaces). */
    if (fp32) tape_keep(x, sv, scores * 4);
    uint32_t cast = 0;
    if (!fp32 || !dropout) tape_keep(x, sv, scores * c);
    else cast = tape_take(x, scores * c, VF_CAT_TEMPORARIES);
    /* Soft-capping the scores (Gemma-2: tanh(s / cap) * cap, modeling_gemma2.py
     * eager_attention_forward) keeps the tanh's output. */
    if (a->attn_logit_softcap > 0) tape_keep(x, sv, scores * c);
    tape_give(x, raw);
    /* Freed and kept again rather than held, so pipeline and selective scaling apply. */
    if (x->p->eager_softmax_saves_input) tape_keep(x, sv, raw_bytes);
    if (dropout) {
      tape_keep(x, sv, scores);
      tape_keep(x, sv, scores * c);
    }
    tape_give(x, cast);
    tape_transient(x, T * d->q * c, VF_CAT_TEMPORARIES);
    if (x->layers_train) tape_keep(x, sv, T * d->q * c);
  } else {
    tape_keep(x, sv, T * d->heads * 4); /* log-sum-exp */
    /* The padding mask made additive in the query's dtype (attention.cpp
     * convert_boolean_attn_mask), which the memory-efficient kernel keeps. */
    if (x->attn.padded && x->attn.sdpa == SDPA_EFFICIENT) tape_keep(x, sv, x->s->batch * d->s_kv * d->s_kv * c);
    for (uint32_t i = 0; i < out_copies; i++) tape_keep(x, sv, T * d->q * c);
    /* The output's contiguous copy, o_proj's input. */
    if (model_listed(x->p->sdpa_out_copied, x->p->n_sdpa_out_copied, a->model_type)) {
      if (x->layers_train) tape_keep(x, sv, T * d->q * c);
      else tape_transient(x, T * d->q * c, VF_CAT_TEMPORARIES);
    }
  }
  /* A prompted layer also attends to its adapter prompt (adapter.py
   * CausalSelfAttention.scaled_dot_product_attention: q over the prompt's keys, masked),
   * which keeps its output, the gate's product keeping it too, and its log-sum-exp. */
  if (adapter_prompted(x, layer)) {
    tape_keep(x, sv, T * d->q * c);
    tape_keep(x, sv, T * d->heads * 4);
  }
  attention_output(x, sv);
}

/* Tensors of the MLP's width the activation keeps for its backward: its input for a fused
 * kernel; transformers' gelu_new (activations.py NewGELUActivation) is a formula of
 * separate ops whose products keep the input, 0.5 x, tanh(...) and 1 + tanh(...). */
static uint32_t activation_saves(const struct ctx *x) {
  return strcmp(x->m->arch.activation, "gelu_new") == 0 ? x->p->gelu_new_saves : 1;
}

/* Whether autocast leaves the experts alone: they run in their weights' dtype, with no cast
 * copies of those weights (experts_in_weight_dtype). */
static bool mlp_experts_uncast(const struct ctx *x) {
  return x->m->arch.experts && x->p->experts_in_weight_dtype && autocast_casts(x);
}

/* Bytes per element of what the MLP computes: the compute dtype, or for experts autocast
 * leaves alone their weights' dtype. */
static uint64_t mlp_bytes(const struct ctx *x) {
  return mlp_experts_uncast(x) ? vf_precision_bytes(x->s->weights) : x->d.c;
}

/* Expert parallelism's all-to-all, once to send the routed tokens to their experts' GPUs
 * and once to bring the outputs back (and the same for their gradients in the backward):
 * the tokens to send and those received alive at once, padded to the capacity where the
 * framework caps it (Megatron-Core token_dispatcher.py MoEAlltoAllTokenDispatcher). */
static void parallel_token_exchange(struct ctx *x) {
  const struct vf_arch *a = &x->m->arch;
  if (!a->experts || x->s->ep == 1) return;
  double cf = x->p->moe_capacity_factor > 0 ? x->p->moe_capacity_factor : 1;
  uint64_t routed = (uint64_t)((double)(x->d.T * a->experts_per_token) * cf);
  tape_transient(x, 2 * routed * x->d.h * mlp_bytes(x), VF_CAT_TEMPORARIES);
}

static void mlp_forward(struct ctx *x, struct saved *sv) {
  const struct dims *d = &x->d;
  const struct vf_arch *a = &x->m->arch;
  uint64_t routed = a->experts_per_token ? a->experts_per_token : 1, T = d->T * routed, c = mlp_bytes(x);
  if (a->experts) {
    tape_keep(x, sv, d->T * a->experts * 4);
    tape_keep(x, sv, T * d->h * c);
  }
  parallel_token_exchange(x);
  quant_input(x, sv, d->h, false);
  adapter_input(x, sv, d->h, BIT(VF_KIND_GATE) | BIT(VF_KIND_UP));
  if (a->glu) adapter_projection(x, sv, d->h, d->ffn, BIT(VF_KIND_GATE));
  adapter_projection(x, sv, d->h, d->ffn, BIT(VF_KIND_UP));
  /* What the activation keeps, and for a gated MLP its output and the up projection.
   * Under autocast gelu_new's x ** 3 runs in fp32 (torch.pow is on autocast's fp32 list),
   * so pow keeps an fp32 copy of x, and the tanh and 1 + tanh after it are fp32: of its
   * tensors only 0.5 x stays in the compute dtype. */
  uint32_t kept = activation_saves(x) + (a->glu ? 2 : 0);
  bool gelu_new_fp32 = strcmp(a->activation, "gelu_new") == 0 && autocast_runs(x);
  for (uint32_t i = 0; i < kept; i++) tape_keep(x, sv, T * d->ffn * (gelu_new_fp32 && i ? 4 : c));
  if (x->layers_train) tape_keep(x, sv, T * d->ffn * c); /* the down projection's input */
  quant_input(x, sv, d->ffn, false);
  adapter_input(x, sv, d->ffn, BIT(VF_KIND_DOWN));
  adapter_projection(x, sv, d->ffn, d->h, BIT(VF_KIND_DOWN));
  parallel_token_exchange(x);
  if (a->family == VF_FAMILY_BERT || a->family == VF_FAMILY_GPT2) tape_keep(x, sv, d->Ts * d->h);
}

/* Context parallelism's ring attention, around the attention kernel of each block: this
 * rank's keys and values concatenated to be sent, and the other ranks' received, all at
 * once (cp_kv_all_gather: torch's context_parallel, _AllGatherRotater) or one rank's at a
 * time into a second buffer; the partial outputs merged in fp32 (_SDPAMerger with
 * convert_to_f32). The backward accumulates the gradients of q, k and v in fp32 and passes
 * those of k and v on through two more buffers (_templated_ring_attention_backward). The
 * keys and values are those the SDPA call is given (context_parallel replaces the
 * aten._scaled_dot_product_*_attention ops): repeated to every query head where the model
 * repeats them first (torchtitan/models/llama/model.py@9dec370 repeat_kv before
 * F.scaled_dot_product_attention). */
static void parallel_ring_exchange(struct ctx *x, bool backward) {
  if (x->s->cp == 1) return;
  const struct dims *d = &x->d;
  uint64_t width = attention_kv_width(x);
  uint64_t kv = d->T * 2 * width * d->c, received = x->p->cp_kv_all_gather ? x->s->cp * kv : kv;
  uint64_t merged = backward ? d->T * (d->q + 2 * width) * 4 + 2 * d->T * 2 * width * 4 : 2 * d->T * d->q * 4;
  tape_transient(x, kv + received + merged, VF_CAT_TEMPORARIES);
}

/* A row-parallel projection (o, down) makes partial sums of the whole sequence before they
 * are reduce-scattered to this GPU's part of it under sequence parallelism. */
static void parallel_row_output(struct ctx *x) {
  if (x->d.sp) tape_transient(x, x->d.T * x->d.h * x->d.c, VF_CAT_TEMPORARIES);
}

/* Non-reentrant checkpointing stops recomputing a layer once the last tensor its forward
 * saved is saved again (torch 2.13 torch/utils/checkpoint.py: the pack hook raises
 * _StopRecomputationError). A post-norm layer's last saved tensors are its final
 * LayerNorm's mean and rstd, outputs of that op, so the recomputation stops inside
 * BertOutput.forward (transformers 5.23 modeling_bert.py) with the norm's output made (in
 * the stream's dtype) and what the Python frames still name: the dropped-out dense output
 * (`hidden_states`, while `self.LayerNorm(hidden_states + input_tensor)` runs) and the
 * activation's output (`intermediate_output` in BertLayer.feed_forward_chunk, kept anyway
 * when the down projection's weight trains). They go as the recomputation unwinds. A
 * pre-norm layer without dropout stops at its last projection's saved input, before that
 * projection's output exists. (GPT-2's residual dropout saves its mask once its output
 * exists, so that output is alive at the stop too: not counted, a compute-dtype stream.) */
static bool post_norm(const struct ctx *x) {
  return x->m->arch.family == VF_FAMILY_BERT;
}

static void recomputation_stop(struct ctx *x) {
  const struct dims *d = &x->d;
  if (!post_norm(x)) return;
  uint32_t activation = x->layers_train ? 0 : tape_take(x, d->T * d->ffn * mlp_bytes(x), VF_CAT_TEMPORARIES);
  uint32_t dropped = tape_take(x, d->Ts * d->h * d->c, VF_CAT_TEMPORARIES);
  tape_transient(x, d->Ts * d->h * autocast_stream_bytes(x), VF_CAT_TEMPORARIES);
  tape_give(x, dropped);
  tape_give(x, activation);
}

/* One block's forward; returns in sv what it keeps for backward. A parallel block feeds
 * attention and MLP from the same input: through one norm (Falcon, Phi) or two (GPT-NeoX),
 * both keeping that input. Recomputing, it ends where checkpointing stops it. */
static void block_forward(struct ctx *x, struct saved *sv, int32_t layer, bool recomputing) {
  const struct vf_arch *a = &x->m->arch;
  uint64_t stream = x->d.Ts * x->d.h * x->d.c;
  bool one_norm = a->parallel_residual && a->norms_per_layer == 1; /* read by attention and MLP */
  layer_norm_saves(x, sv, attention_readers(x) + (one_norm ? mlp_readers(x) : 0), x->layers_train);
  attention_forward(x, sv, layer);
  parallel_ring_exchange(x, false);
  parallel_row_output(x);
  uint32_t mid = tape_take(x, stream, VF_CAT_ACTIVATIONS);
  if (a->parallel_residual) {
    /* A parallel block's second norm (GPT-NeoX's post_attention_layernorm, modeling_gpt_neox.py
     * GPTNeoXLayer) reads the block input too: the input its LayerNorm keeps is the one the
     * first keeps; only its output is its own. */
    if (!one_norm) norm_output_saves(x, sv, mlp_readers(x), x->layers_train);
  } else {
    /* The norms after attention: the one before the MLP, and Gemma-2's around the outputs
     * (read by no projection). */
    for (uint32_t i = 2; i <= a->norms_per_layer; i++)
      layer_norm_saves(x, sv, i == (a->norms_per_layer == 4 ? 3u : 2u) ? mlp_readers(x) : 0, x->layers_train);
  }
  mlp_forward(x, sv);
  parallel_row_output(x);
  if (recomputing) recomputation_stop(x);
  tape_give(x, mid);
}

/* A weight quantized while the model loads exists first in 16 bits on the GPU, next to
 * whatever its quantizer allocates, before its quantized form replaces it. */
static void quant_load_weight(struct ctx *x, const struct vf_param *p) {
  uint32_t temp = x->p->quant_load_bytes;
  if (!p->quantized || !temp) {
    tape_take(x, p->bytes, VF_CAT_WEIGHTS);
    return;
  }
  uint32_t wide = tape_take(x, p->numel * 2, WEIGHT_TEMPORARIES);
  tape_transient(x, p->numel * temp, WEIGHT_TEMPORARIES);
  tape_take(x, p->bytes, VF_CAT_WEIGHTS);
  tape_give(x, wide);
}

/* Allocates a layer's weights, or the gradients of its trainable tensors (into g). */
static bool grads_sharded(const struct vf_setup *s) {
  return s->shard == VF_SHARD_ZERO2 || vf_shard_weights(s->shard);
}

/* Under a pipeline, torch.distributed.pipelining runs an FSDP2 stage's backwards with
 * set_reshard_after_backward(False) and set_requires_gradient_sync(False) until the last
 * micro batch's, after which _post_backward reshards and reduces (torch/distributed/
 * pipelining/stage.py backward_maybe_with_nosync); torchtitan does not reshard after the
 * forward under a pipeline either (torchtitan/parallelisms/parallelize_llama.py@9dec370
 * apply_fsdp). The stage's weights stay gathered and its gradients whole through the step. */
static bool pipe_fsdp(const struct ctx *x) {
  return x->s->pp > 1 && x->p->pp_torch_pipelining && vf_shard_fsdp(x->s->shard);
}

/* FSDP under no_sync(): the micro batches that accumulate keep whole, unsharded
 * gradients; the last one adds into them and reduce-scatters them to the shard. */
static bool grads_no_sync(const struct ctx *x) {
  return (x->p->fsdp_no_sync && vf_shard_fsdp(x->s->shard) && x->accumulation > 1) || pipe_fsdp(x);
}

/* The output head is the input embedding's weight (tied). */
static bool head_tied(const struct ctx *x) {
  return x->m->arch.tied_embeddings && !x->p->untie_embeddings && x->task == VF_TASK_CAUSAL_LM && x->pp.has_head;
}

/* Embedding weights the head does not share get their gradients from their own backward,
 * the pass's last (embedding_dense_backward allocates the gradient), not with the head's
 * gradients; where the root's gradients are whole tensors made fresh. */
static bool embedding_grads_late(const struct ctx *x) {
  return x->pp.has_head && !head_tied(x) && !x->grads.kept && !grads_no_sync(x) && !grads_sharded(x->s);
}

static void layer_params(struct ctx *x, int32_t layer, struct ids *g) {
  size_t begin, end;
  vf_params_layer(x->ps, layer, &begin, &end);
  for (size_t i = begin; i < end; i++) {
    const struct vf_param *p = &x->ps->v[i];
    bool late = layer < 0 && p->embedding && embedding_grads_late(x);
    if (!g) quant_load_weight(x, p);
    else if (p->trainable && !late) ids_push(x, g, tape_take(x, p->numel * x->d.g, VF_CAT_GRADIENTS));
  }
}

/* The gradients embedding_grads_late leaves to the embeddings' backward. */
static void late_embedding_grads(struct ctx *x) {
  if (!embedding_grads_late(x)) return;
  size_t begin, end;
  vf_params_layer(x->ps, -1, &begin, &end);
  for (size_t i = begin; i < end; i++) {
    const struct vf_param *p = &x->ps->v[i];
    if (p->trainable && p->embedding) ids_push(x, &x->grads.list, tape_take(x, p->numel * x->d.g, VF_CAT_GRADIENTS));
  }
}

/* ZeRO-3 gathers through DeepSpeed's parameter coordinator, which prefetches and keeps
 * small parameters gathered (profile field zero3_max_live_millions). */
static bool zero3_coordinator(const struct ctx *x) {
  return x->s->shard == VF_SHARD_ZERO3 && x->p->zero3_max_live_millions;
}

/* A parameter the coordinator never releases once gathered: at most
 * stage3_param_persistence_threshold elements (parameter_offload.py
 * mark_persistent_parameters). */
static bool zero3_persists(const struct ctx *x, const struct vf_param *p) {
  if (!zero3_coordinator(x)) return false;
  uint64_t threshold = x->p->zero3_persistence_elems ? x->p->zero3_persistence_elems : 10 * x->m->arch.hidden;
  return p->numel <= threshold;
}

/* The elements of a layer's parameters that persist, or of those gathered for each use. */
static uint64_t zero3_gathered_elems(const struct ctx *x, int32_t layer, bool persisting) {
  uint64_t n = 0;
  size_t begin, end;
  vf_params_layer(x->ps, layer, &begin, &end);
  for (size_t i = begin; i < end; i++)
    if (zero3_persists(x, &x->ps->v[i]) == persisting) n += x->ps->v[i].numel;
  return n;
}

/* Sharded training gathers a layer's full weights for its forward and backward. */
static uint64_t fsdp_gather_bytes(const struct ctx *x, int32_t layer) {
  return vf_shard_weights(x->s->shard) ? zero3_gathered_elems(x, layer, false) * x->d.c : 0;
}

/* Accelerate's FSDP2 units outside the layers (profile field fsdp_embedding_unit): an
 * untied input embedding alone, resharded after its forward and gathered again for its
 * backward; the final norm and head together, gathered at the norm, reduced and resharded
 * once the head's backward is done. */
static bool fsdp_embedding_unit(const struct ctx *x) {
  return x->p->fsdp_embedding_unit && vf_shard_fsdp(x->s->shard) && !x->p->fsdp_flat_params && !head_tied(x) &&
         x->pp.has_embedding && x->pp.has_head && !pipe_fsdp(x);
}

/* Bytes gathered of the root's embedding weights, or of its others. */
static uint64_t root_part_bytes(const struct ctx *x, bool embedding) {
  uint64_t n = 0;
  size_t begin, end;
  vf_params_layer(x->ps, -1, &begin, &end);
  for (size_t i = begin; i < end; i++)
    if (x->ps->v[i].embedding == embedding && !zero3_persists(x, &x->ps->v[i])) n += x->ps->v[i].numel;
  return n * x->d.c;
}

/* The most ZeRO-3's coordinator holds gathered, for a stage of `layers` blocks: every
 * module's hooks prefetch the parameters the recorded trace uses next, up to
 * min(max_live - gathered, prefetch bucket) elements and at least one whole parameter a
 * call, kept until their module has run (partitioned_param_coordinator.py
 * _fetch_sub_module_impl). A module consumes at most its own parameters while every
 * module, containers and norms too, prefetches a bucket more: the lead grows until
 * max_live stops it, one parameter past it at most, or until the whole stage is gathered
 * (a model smaller than max_reuse_distance keeps all it gathered until its backward). */
static uint64_t zero3_live_elems(const struct ctx *x, uint64_t layers) {
  uint64_t largest = 0;
  for (int32_t l = -1; l < 1; l++) { /* the root and a block: the blocks are alike */
    size_t begin, end;
    vf_params_layer(x->ps, l, &begin, &end);
    for (size_t i = begin; i < end; i++)
      if (!zero3_persists(x, &x->ps->v[i]) && x->ps->v[i].numel > largest) largest = x->ps->v[i].numel;
  }
  uint64_t stage = zero3_gathered_elems(x, -1, false) + layers * zero3_gathered_elems(x, 0, false);
  uint64_t cap = x->p->zero3_max_live_millions * UINT64_C(1000000) + largest;
  return stage < cap ? stage : cap;
}

/* FSDP2 all-gathers a unit into one buffer and copies each parameter out of it (torch 2.13
 * _fsdp_collectives.py foreach_all_gather_copy_out): both exist until the copy-out ends. In
 * the forward, wait_for_unshard (_fsdp_param_group.py) keeps the buffer (all_gather_state)
 * to overlap its copy-out with the next all-gather, and frees it as the next unit's
 * wait_for_unshard returns (its local prev_all_gather_state holds it through that
 * copy-out); the root's post-forward frees the last (_fsdp_state.py _post_forward). In the
 * backward and checkpointed recomputation it goes once its copy-out is done. FSDP1 gathers
 * into the flat parameter itself; over one GPU FSDP2 copies without a buffer. */
static bool fsdp2_buffers(const struct ctx *x) {
  return vf_shard_fsdp(x->s->shard) && !x->p->fsdp_flat_params && x->d.dsize > 1;
}

/* In the backward each unit's pre-backward, its copy-out done, all-gathers the unit that ran
 * its forward before it (_fsdp_param_group.py _backward_prefetch, the default): that buffer
 * waits for its unit's own pre-backward. The root's pre-backward prefetches the last layer,
 * the first layer's an embedding unit (-1). */
static void fsdp_backward_prefetch(struct ctx *x, int32_t layer) {
  uint64_t bytes = layer >= 0 ? fsdp_gather_bytes(x, layer) : fsdp_embedding_unit(x) ? root_part_bytes(x, true) : 0;
  if (fsdp2_buffers(x) && !pipe_fsdp(x))
    x->fsdp.prefetched = tape_take_on(x, bytes, VF_CAT_WEIGHTS, STREAM_ALL_GATHER);
}

static uint32_t fsdp2_gather(struct ctx *x, int32_t layer, uint64_t bytes) {
  uint32_t buffer = x->fsdp.prefetched;
  if (!buffer && fsdp2_buffers(x)) buffer = tape_take_on(x, bytes, VF_CAT_WEIGHTS, STREAM_ALL_GATHER);
  x->fsdp.prefetched = 0;
  uint32_t params = tape_take_on(x, bytes, VF_CAT_WEIGHTS, buffer ? STREAM_COMPUTE : STREAM_ALL_GATHER);
  if (!x->fsdp.forwarding) {
    tape_give(x, buffer);
    if (layer >= 0) fsdp_backward_prefetch(x, layer - 1);
    return params;
  }
  tape_give(x, x->fsdp.gather_buffer);
  x->fsdp.gather_buffer = buffer;
  return params;
}

/* The root's weights, or one of the units outside the layers (fsdp_embedding_unit), resharded. */
static void fsdp_reshard_root(struct ctx *x) {
  tape_give(x, x->fsdp.root);
  x->fsdp.root = 0;
}

/* The root's post-forward: the model's forward has returned. */
static void fsdp_forward_returned(struct ctx *x) {
  tape_give(x, x->fsdp.gather_buffer);
  x->fsdp.gather_buffer = 0;
  x->fsdp.forwarding = false;
}

/* A unit's weights gathered for its forward or backward: the id the caller frees after it,
 * or 0 when the step keeps them gathered (pipe_fsdp). ZeRO-3's coordinator holds its
 * most through the whole forward and backward, counted once as the root's. */
static uint32_t fsdp_gather(struct ctx *x, int32_t layer) {
  if (zero3_coordinator(x))
    return layer < 0 ? tape_take_on(x, x->zero.zero3_live * x->d.c, VF_CAT_WEIGHTS, STREAM_ALL_GATHER) : 0;
  uint64_t bytes = fsdp_gather_bytes(x, layer);
  if (!pipe_fsdp(x)) return fsdp2_gather(x, layer, bytes);
  uint32_t *held = &x->fsdp.held_gather[layer + 1];
  if (!*held) *held = tape_take_on(x, bytes, VF_CAT_WEIGHTS, STREAM_ALL_GATHER);
  return 0;
}

/* What is sharded of parameters [begin, end): their elements (or bytes), of the trainable
 * ones only where asked. An expert is sharded over its expert-data-parallel group of
 * dsize / ep GPUs (Megatron-Core's expert data parallel group, torchtitan's dp_mod_ep
 * mesh): counted ep times against the dsize every other parameter is divided by. */
static uint64_t layer_param_sum(const struct ctx *x, size_t begin, size_t end, bool trainable, bool bytes, bool sharded) {
  uint64_t n = 0;
  for (size_t i = begin; i < end; i++) {
    const struct vf_param *p = &x->ps->v[i];
    if (trainable && !p->trainable) continue;
    n += (bytes ? p->bytes : p->numel) * (sharded && p->expert ? x->s->ep : 1);
  }
  return n;
}

static uint64_t layer_sum(const struct ctx *x, int32_t layer, bool trainable, bool bytes, bool sharded) {
  size_t begin, end;
  vf_params_layer(x->ps, layer, &begin, &end);
  return layer_param_sum(x, begin, end, trainable, bytes, sharded);
}

/* FSDP1 keeps a unit's parameters as views of one flat tensor: autograd holds each view's
 * gradient until the unit's last one arrives, then concatenates them into one whole flat
 * gradient, the parts still alive. The root unit's head gradient comes first and its
 * embedding gradient last, so the head's part waits through the whole backward. */
static bool grads_flat(const struct ctx *x) { return x->p->fsdp_flat_params && vf_shard_fsdp(x->s->shard); }

/* The layers' own weights take gradients: in full fine-tuning, and in FSDP1 units that
 * hold a layer's adapters with its frozen weights (profile field fsdp_adapter_units_train).
 * Such a FlatParameter requires grad when any of its tensors does
 * (torch/distributed/fsdp/_flat_param.py@2.13.0 _validate_tensors_to_flatten, under
 * use_orig_params=True) and the forward runs on views of it (_use_unsharded_views), so the
 * frozen weights take gradients too: the layer keeps what full fine-tuning keeps and
 * reduces a gradient for all its parameters. The root unit (embedding, final norm, head)
 * holds no adapter and stays frozen. */
static bool grads_layers_train(const struct ctx *x) {
  bool adapted = x->s->method == VF_METHOD_LORA || x->s->method == VF_METHOD_DORA;
  return x->base_trainable || (adapted && x->p->fsdp_adapter_units_train && grads_flat(x));
}

/* The parameters of a layer that take gradients: all of them where its weights train;
 * the root unit's trainable ones only (it holds no adapter to make it train). */
static uint64_t layer_grad_sum(const struct ctx *x, int32_t layer, bool sharded) {
  return layer_sum(x, layer, !x->layers_train || layer < 0, false, sharded);
}

static uint64_t layer_grad_elems(const struct ctx *x, int32_t layer) { return layer_grad_sum(x, layer, false); }

/* Gradient elements of the root unit's trainable tensors: the embedding, or all the others. */
static uint64_t root_grad_elems(const struct ctx *x, bool embedding) {
  uint64_t n = 0;
  size_t begin, end;
  vf_params_layer(x->ps, -1, &begin, &end);
  for (size_t i = begin; i < end; i++)
    if (x->ps->v[i].trainable && x->ps->v[i].embedding == embedding) n += x->ps->v[i].numel;
  return n;
}

/* A sharded root's unsharded gradients: an untied embedding's is made only by its own
 * backward, the pass's last, not with the head's (FSDP2's root reduces both at the pass's
 * end, its post-backward; FSDP1's flat root is grads_flat's own case). */
static bool sharded_embedding_grad_late(const struct ctx *x) {
  return x->pp.has_head && x->pp.has_embedding && !head_tied(x) && grads_sharded(x->s) && !grads_flat(x) && !grads_no_sync(x);
}

/* The bytes per element of a unit's unsharded gradients, before their reduce-scatter and
 * while no_sync() holds them: the dtype the gathered weights compute in when FSDP's mixed
 * precision reduces in it too (FSDP2 then drops the reduce dtype, _fsdp_param.py
 * init_dtype_attrs, and adds each micro batch's gradient into the last in place; FSDP1's
 * autograd computes the flat gradient in param_dtype and _reduce_grad casts only the
 * shard to the weights' dtype, _runtime_utils.py), else the weights'. */
static uint64_t unsharded_grad_bytes(const struct ctx *x) {
  return x->p->fsdp_grads_in_compute_dtype && x->s->amp != VF_PREC_NONE ? x->d.c : x->d.g;
}

/* The gradient parts of `elems` elements a flat unit holds until its concatenation (0
 * when not flat). */
static uint32_t flat_parts(struct ctx *x, uint64_t elems) {
  return grads_flat(x) ? tape_take(x, elems * unsharded_grad_bytes(x), VF_CAT_GRADIENTS) : 0;
}

/* Reduce-scatters a unit's whole gradient to its shard. */
static void grads_reduce_unsharded(struct ctx *x, int32_t layer, struct ids *g) {
  uint32_t *held = &x->grads.unsharded[layer + 1];
  if (!*held) return;
  ids_push(x, g, tape_take(x, layer_grad_sum(x, layer, true) * x->d.g / x->d.dsize, VF_CAT_GRADIENTS));
  tape_give(x, *held);
  *held = 0;
}

/* Units [begin, end) of the replay reduced, then resharded. */
static void fsdp_post_backward(struct ctx *x, int32_t begin, int32_t end, struct ids *g) {
  for (int32_t l = begin; l < end; l++) {
    grads_reduce_unsharded(x, l, g);
    tape_give(x, x->fsdp.held_gather[l + 1]);
    x->fsdp.held_gather[l + 1] = 0;
  }
}

/* The end of a pipeline's last backward under FSDP: every unit reduced, then resharded. */
static void pipe_post_backward(struct ctx *x, struct ids *g) {
  if (pipe_fsdp(x)) fsdp_post_backward(x, -1, (int32_t)x->layers, g);
}

/* The replayed layer where this rank's model chunk c begins: the blocks of the chunks
 * before it, scaled to the layers replayed. */
static uint64_t chunk_start(const struct ctx *x, uint64_t c) {
  uint64_t layers = x->m->arch.layers, pp = x->s->pp, stages = pp * x->pp.chunks, rank = (uint64_t)x->pp.stage;
  uint64_t before = 0;
  for (uint64_t i = 0; i < c; i++) before += vf_pp_stage_layers(layers, stages, rank + i * pp, x->p->pp_even_layers);
  return before * x->layers / vf_pp_rank_layers(layers, pp, x->pp.chunks, rank, x->p->pp_even_layers);
}

/* The model chunk a unit belongs to: the root's embedding to the first, its head to the last. */
static uint64_t unit_chunk(const struct ctx *x, int32_t layer) {
  if (layer < 0) return x->pp.has_head ? x->pp.chunks - 1 : 0;
  uint64_t c = x->pp.chunks - 1;
  while (c && chunk_start(x, c) > (uint64_t)layer) c--;
  return c;
}

/* Each stage runs its FSDP post-backward (reduce-scatter, reshard) after its own last
 * micro batch's backward: torch/distributed/pipelining/schedules.py of the 2.6 era,
 * PipelineScheduleMulti._step_microbatches, passes last_backward = backward_counter
 * [stage_idx] == n_microbatches to stage.py backward_maybe_with_nosync; later releases
 * keep the timing with a REDUCE_GRAD action _add_reduce_grad puts right after a stage's
 * last backward. When a rank's chunks run their
 * backwards one after the other, a chunk is reduced and resharded before the chunk below
 * it makes its first gradient: the replay's micro batches but the last make the whole
 * gradients of the last chunk only, and the last one's backward ends each chunk in turn. */
static bool pipe_grads_deferred(const struct ctx *x, int32_t layer) {
  return x->pp.chunks_apart && !x->sched.last_micro && unit_chunk(x, layer) + 1 < x->pp.chunks;
}

/* After the backward of `layer`, the last micro batch's: the chunk it starts is done. */
static void pipe_chunk_post_backward(struct ctx *x, uint64_t layer, struct ids *g) {
  if (!x->pp.chunks_apart || !x->sched.last_micro || !pipe_fsdp(x)) return;
  uint64_t c = unit_chunk(x, (int32_t)layer);
  if (!c || chunk_start(x, c) != layer) return;
  uint64_t end = c + 1 < x->pp.chunks ? chunk_start(x, c + 1) : x->layers;
  fsdp_post_backward(x, (int32_t)layer, (int32_t)end, g);
  if (c + 1 == x->pp.chunks && x->pp.has_head) fsdp_post_backward(x, -1, 0, g);
}

static void no_sync_grads(struct ctx *x, int32_t layer, struct ids *g) {
  if (pipe_grads_deferred(x, layer)) return;
  uint32_t *held = &x->grads.unsharded[layer + 1];
  uint64_t elems = layer_grad_elems(x, layer), full = elems * unsharded_grad_bytes(x);
  /* FSDP2 accumulates in the reduce dtype: the gathered weights' gradients arrive in the
   * compute dtype and are added into it (_fsdp_param.py accumulate_unsharded_grad_if_needed). */
  uint32_t fresh = pipe_fsdp(x) && x->d.c < x->d.g ? tape_take(x, elems * x->d.c, VF_CAT_GRADIENTS) : 0;
  if (!*held) *held = tape_take(x, full, VF_CAT_GRADIENTS);
  else if (grads_flat(x)) tape_transient(x, full, VF_CAT_GRADIENTS); /* the new whole, added in */
  tape_give(x, fresh);
  if (x->sched.last_micro && !pipe_fsdp(x)) grads_reduce_unsharded(x, layer, g);
}

static void give_parts(struct ctx *x, uint32_t parts[2]) {
  tape_give(x, parts[0]);
  tape_give(x, parts[1]);
  parts[0] = parts[1] = 0;
}

/* The gradients of a layer's trainable tensors: whole, or reduce-scattered to a shard.
 * Returns the unsharded buffer when the caller frees it later (the root unit's gradients
 * are reduced only when the whole backward is done); 0 otherwise. `parts` are the flat
 * unit's gradient parts (flat_parts: 0 where there are none) its whole gradient is
 * concatenated from. Autograd frees them once the concatenating node has run, and FSDP1's
 * post-backward hook, which reduce-scatters, runs after the flat parameter's
 * AccumulateGrad (torch 2.13 distributed/fsdp/_runtime_utils.py _post_backward_hook): they
 * go before the shard is made (layer_grads_from frees them in the other cases). */
static uint32_t unsharded_layer_grads(struct ctx *x, int32_t layer, struct ids *g, bool keep_unsharded,
                                      uint32_t parts[2]) {
  if (x->p->grad_buffer_fp32) return 0; /* accumulated into the persistent buffer (persistent) */
  if (grads_no_sync(x)) {
    no_sync_grads(x, layer, g);
    return 0;
  }
  if (!grads_sharded(x->s)) {
    if (!x->grads.kept) layer_params(x, layer, g); /* else added into the last micro batch's */
    return 0;
  }
  uint64_t late = layer < 0 && sharded_embedding_grad_late(x) ? root_grad_elems(x, true) : 0;
  uint64_t full = (layer_grad_elems(x, layer) - late) * unsharded_grad_bytes(x);
  uint32_t unsharded = tape_take_on(x, full, WEIGHT_TEMPORARIES, STREAM_REDUCE_SCATTER);
  give_parts(x, parts);
  uint64_t shard = layer_grad_sum(x, layer, true) * x->d.g / x->d.dsize;
  /* Each micro batch is reduce-scattered anew; accumulating, its shard is added into the
   * kept one (torch 2.13 _fsdp_collectives.py foreach_reduce: sharded_param.grad._local_tensor
   * += new_sharded_grad) and goes. */
  uint32_t reduced = tape_take_on(x, shard, VF_CAT_GRADIENTS, STREAM_REDUCE_SCATTER);
  if (x->grads.kept) tape_give(x, reduced);
  else ids_push(x, g, reduced);
  if (keep_unsharded) return unsharded;
  tape_give(x, unsharded);
  return 0;
}

static uint32_t layer_grads_from(struct ctx *x, int32_t layer, struct ids *g, bool keep_unsharded,
                                 uint32_t parts[2]) {
  uint32_t whole = unsharded_layer_grads(x, layer, g, keep_unsharded, parts);
  give_parts(x, parts);
  return whole;
}

static uint32_t layer_grads(struct ctx *x, int32_t layer, struct ids *g, bool keep_unsharded) {
  uint32_t none[2] = {0, 0};
  return layer_grads_from(x, layer, g, keep_unsharded, none);
}

/* Autocast casts each fp32 weight to the compute dtype once per forward; the copies are
 * kept for backward (the matmuls saved them) until the layer's backward is done. A fully
 * checkpointed forward saves none: autocast's cache keeps the casts of trainable weights
 * (autocast_mode.cpp cached_cast: leaf tensors that require grad) until the autocast region
 * ends after the loss, the others go at once; the recomputation casts again for the
 * layer's backward. */
static void autocast_copies(struct ctx *x, int32_t layer, struct saved *sv, bool recomputing) {
  if (!autocast_casts(x)) return;
  bool saved = x->s->grad_ckpt != VF_CKPT_FULL || recomputing;
  size_t begin, end;
  vf_params_layer(x->ps, layer, &begin, &end);
  for (size_t i = begin; i < end; i++) {
    const struct vf_param *p = &x->ps->v[i];
    if (!p->linear || (p->expert && mlp_experts_uncast(x))) continue;
    uint32_t id = tape_take(x, p->numel * x->d.c, WEIGHT_TEMPORARIES);
    if (saved) tape_hold(x, sv, id, p->numel * x->d.c, WEIGHT_TEMPORARIES);
    else if (p->trainable) ids_push(x, &x->autocast.cache, id);
    else tape_give(x, id);
  }
}

/* Checkpointed layers run their forward again before their backward: all of it (full) or
 * what selective checkpointing did not keep. */
static void recompute(struct ctx *x, struct saved *sv, int32_t layer) {
  double kept = x->saving.keep_share, in_flight = x->saving.in_flight;
  x->saving.in_flight = 1; /* the micro batch in its backward only */
  if (x->s->grad_ckpt == VF_CKPT_FULL) {
    /* The checkpoint holds the layer's input until the layer's backward is done. A
     * pre-norm layer's first norm saves that very tensor again as it recomputes (the
     * recomputation runs on the inputs the checkpoint kept), which the replay counts
     * there; no op of a post-norm layer saves its input. */
    if (!post_norm(x)) tape_release(x, sv);
    x->saving.keep_share = 1.0;
    autocast_copies(x, layer, sv, true);
    block_forward(x, sv, layer, true);
  } else if (x->s->grad_ckpt == VF_CKPT_SELECTIVE) {
    x->saving.keep_share = 1.0 - kept;
    block_forward(x, sv, layer, true);
  }
  x->saving.keep_share = kept;
  x->saving.in_flight = in_flight;
}

static uint64_t largest_quantized(const struct ctx *x, int32_t layer) {
  uint64_t n = 0;
  size_t begin, end;
  vf_params_layer(x->ps, layer, &begin, &end);
  for (size_t i = begin; i < end; i++)
    if (x->ps->v[i].quantized && x->ps->v[i].numel > n) n = x->ps->v[i].numel;
  return n;
}

/* The math backend's backward at its highest: the gradient of the scores and the
 * softmax's backward (both in its dtype) next to the reduced gradient of the expanded K. */
static uint64_t math_backward_bytes(const struct ctx *x) {
  uint64_t a = math_bytes(x);
  return 2 * x->d.T * x->d.heads * x->d.s_kv * a + x->d.T * x->d.kv * a;
}

static void layer_backward(struct ctx *x, int32_t layer, struct saved *sv, struct ids *g) {
  const struct dims *d = &x->d;
  const struct vf_arch *a = &x->m->arch;
  uint64_t T = d->T, c = d->c;
  uint32_t gathered = fsdp_gather(x, layer);
  reload(x, sv);
  recompute(x, sv, layer);
  uint64_t routed = a->experts_per_token ? a->experts_per_token : 1;
  /* Under sequence parallelism the input gradient of the whole sequence, before its
   * reduce-scatter, and the input gathered again for the weight gradient where the forward
   * kept only its shard. */
  uint64_t wholes = d->sp ? (x->p->sp_gathered_input ? 1 : 2) : 0;
  uint32_t whole = tape_take(x, wholes * T * d->h * c, VF_CAT_TEMPORARIES);
  uint32_t mlp = tape_take(x, T * routed * d->ffn * mlp_bytes(x) * (a->glu ? 3 : 2), VF_CAT_TEMPORARIES);
  /* The input gradient of a quantized projection dequantizes its weight again. */
  tape_transient(x, largest_quantized(x, layer) * dequant_bytes(x, false), WEIGHT_TEMPORARIES);
  parallel_token_exchange(x);
  tape_give(x, mlp);
  tape_give(x, whole);
  uint32_t attn;
  if (x->attn.kind == VF_ATTN_EAGER)
    attn = tape_take(x, T * d->heads * d->s_kv * (c + 4), VF_CAT_TEMPORARIES);
  else if (x->attn.kind == VF_ATTN_SDPA && x->attn.sdpa == SDPA_MATH)
    attn = tape_take(x, math_backward_bytes(x), VF_CAT_TEMPORARIES);
  else
    attn = tape_take(x, T * ((d->q + 2 * d->kv) * c + d->q * 4), VF_CAT_TEMPORARIES);
  parallel_ring_exchange(x, true);
  uint32_t parts[2] = {flat_parts(x, layer_grad_elems(x, layer)), 0};
  layer_grads_from(x, layer, g, false, parts);
  tape_give(x, attn);
  tape_release(x, sv);
  tape_give(x, gathered);
}

/* torch's loss_parallel (torch/distributed/tensor/parallel/loss.py) computes the
 * log-softmax of the sharded logits by its decomposition (_log_softmax): x - max and its
 * exp are new fp32 tensors beside the up-cast, where aten's kernel makes only its output;
 * its fused backward (_nll_loss_and_log_softmax_backward) makes zeros_like(x), exp(x),
 * their sum and the product beside the kept log-softmax, where nll_loss's and
 * _log_softmax's backward kernels make one gradient each: 4 bytes a logit more in both. */
static uint32_t loss_parallel_bytes(const struct ctx *x) {
  return x->s->tp > 1 && x->p->loss_parallel && x->task == VF_TASK_CAUSAL_LM ? 4 : 0;
}

/* The most the loss's forward holds per logit (per label for classification). */
static uint32_t logits_peak_bytes(const struct ctx *x) {
  return x->task == VF_TASK_SEQ_CLS ? 12 : x->p->logits_peak_bytes + loss_parallel_bytes(x);
}

static uint64_t head_loss_outputs(const struct ctx *x) {
  return x->task == VF_TASK_SEQ_CLS ? x->d.labels * x->s->batch : x->d.T * x->d.vocab;
}

/* A chunked head splits each sequence into pieces of loss_chunk_tokens positions, or into
 * output_chunks pieces as torch.chunk cuts them (ceil(len / n) positions each). */
static uint64_t loss_chunks(const struct ctx *x) {
  uint64_t len = x->d.s_kv, per = x->p->loss_chunk_tokens, pieces = x->p->output_chunks;
  if (pieces) per = (len + pieces - 1) / pieces;
  if (!per || x->task == VF_TASK_SEQ_CLS || len <= per) return 1;
  return (len + per - 1) / per;
}

/* The head runs whole and only its loss in chunks, over slices of the logits the loop
 * converted (litgpt's full.py). */
static bool head_whole(const struct ctx *x) {
  return x->base_trainable && x->p->full_head_whole && loss_chunks(x) > 1;
}

/* Bytes per logit of a chunked output the model makes whole before the loss (0: none). */
static uint32_t whole_output_bytes(const struct ctx *x) {
  return x->p->output_chunks && x->task == VF_TASK_CAUSAL_LM ? x->d.c : 0;
}

/* Logits the training loop holds past the backward: converted from the head's output, in
 * full, after the forward; the previous micro batch's are released only then. With batch
 * lengths that vary the previous batch may be shorter, but a long run also meets two of
 * its longest batches in a row. */
static uint32_t hold_logits(struct ctx *x, uint64_t n) {
  uint32_t per = x->task == VF_TASK_SEQ_CLS ? 0 : x->p->logits_held_bytes;
  if (!per) return 0;
  /* Converting to the dtype it already has returns the same tensor. */
  uint32_t raw = per != x->d.c ? tape_take(x, n * x->d.c, VF_CAT_TEMPORARIES) : 0;
  uint32_t held = tape_take(x, n * per, VF_CAT_TEMPORARIES);
  tape_give(x, raw);
  tape_give(x, x->head.held_logits);
  x->head.held_logits = held;
  return per;
}

/* A stage's outputs stay in torch.distributed.pipelining's output_chunks until the next
 * step clears them (stage.py forward_one_chunk, clear_runtime_states): every stage's under
 * the profile's torch (pytorch#153383, in 2.8, keeps the last stage's only), the logits on
 * the last. This micro batch's, or for the replay's middle one those of every micro batch it
 * stands for. Returns whether they are kept. */
static bool pipe_hold_output(struct ctx *x, uint64_t bytes) {
  if (!x->p->pp_torch_pipelining || x->s->pp == 1) return false;
  uint64_t m = x->accumulation, k = schedule_micro_index(x), count = k == 0 || k == m - 1 ? 1 : m - 2;
  /* The middle ones as one block, as the receive buffers are: thousands of micro batches
   * would otherwise cost the replay a block each. */
  ids_push(x, &x->pp.outputs, tape_take(x, count * bytes, VF_CAT_ACTIVATIONS));
  return true;
}

/* torch.distributed.pipelining hands a stage its receive buffer itself as input, and its
 * backward (torch.autograd.backward) leaves the input's gradient on the buffer's .grad: under
 * the profile's torch that stays, for every micro batch and model chunk that received, until
 * the next step's clear_runtime_states (pipelining/_backward.py stage_backward, stage.py). */
static void pipe_hold_input_grads(struct ctx *x, uint64_t stream) {
  if (x->p->pp_input_grads_kept) pipe_hold_output(x, (x->pp.chunks - x->pp.has_embedding) * stream);
}

/* The last stage's logits kept (pipe_hold_output): the bytes per logit they take of the loss's. */
static uint32_t pipe_keep_logits(struct ctx *x, uint64_t n) {
  if (x->task == VF_TASK_SEQ_CLS) return 0;
  return pipe_hold_output(x, n * x->d.c) ? x->d.c : 0;
}

/* At the step's end the schedule concatenates the last stage's into the output it returns
 * (_merge_outputs), which torchtitan drops at once (train.py@9dec370). */
static void pipe_merge_outputs(struct ctx *x) {
  if (x->pp.outputs.n && x->pp.has_head) tape_transient(x, x->accumulation * head_loss_outputs(x) * x->d.c, VF_CAT_TEMPORARIES);
}

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

/* Makes `per` bytes a logit over n logits, one of `parts` chunks of them: a narrower
 * tensor first (the 16-bit logits the fp32 ones are made from), then fp32 tensors. */
static struct logit_tensors take_logit_tensors(struct ctx *x, uint64_t n, uint32_t per, uint64_t parts) {
  struct logit_tensors t = {{0}};
  uint32_t wide = per / 4 < LOGIT_TENSORS - 1 ? per / 4 : LOGIT_TENSORS - 1, narrow = per - 4 * wide;
  if (narrow) t.id[0] = tape_take(x, n * narrow / parts, VF_CAT_TEMPORARIES);
  for (uint32_t i = 1; i <= wide; i++) t.id[i] = tape_take(x, n * 4 / parts, VF_CAT_TEMPORARIES);
  return t;
}

/* The tensor a chain of backward nodes ends with; each of the others goes once the node
 * that reads it has run. */
static uint32_t last_logit_tensor(struct logit_tensors *t) {
  uint32_t last = 0;
  for (int i = 0; i < LOGIT_TENSORS; i++)
    if (t->id[i]) last = t->id[i];
  return last;
}

static void give_logit_tensors(struct ctx *x, struct logit_tensors *t) {
  for (int i = 0; i < LOGIT_TENSORS; i++) tape_give(x, t->id[i]);
  *t = (struct logit_tensors){{0}};
}

/* What the loss keeps from its forward for its backward: the logits' up-cast and
 * log-softmax (loss), and the soft-capped logits' tanh output (capped). */
struct loss_kept {
  struct logit_tensors loss;
  uint32_t capped;
};

/* The logits and the loss: the forward's peak holds logits, their fp32 up-cast and the
 * log-softmax at once (one chunk at a time when the loss is chunked); what backward needs
 * stays. Gemma-2 soft-capping keeps one more copy (the tanh output), made with the logits,
 * before the training loop converts them. */
/* FSDP2 keeps its root unit (embedding, final norm, head) gathered from the forward into
 * the backward only when fully_shard was left to choose (reshard_after_forward=None: torch
 * 2.13 _fully_shard.py auto_reshard_after_forward, _fsdp_state.py _lazy_init); where the
 * framework asks for resharding (profile field fsdp_root_reshards) the root reshards as the
 * model's forward returns, before the loss, and gathers again when the backward reaches
 * the model's outputs. */
static bool root_reshards(const struct ctx *x) {
  return x->p->fsdp_root_reshards && vf_shard_fsdp(x->s->shard) && !pipe_fsdp(x);
}

static struct loss_kept head_forward(struct ctx *x, struct saved *sv) {
  const struct dims *d = &x->d;
  layer_norm_saves(x, sv, x->task == VF_TASK_SEQ_CLS ? 0 : 1, x->base_trainable);
  if (x->task == VF_TASK_CAUSAL_LM) {
    quant_input(x, sv, d->h, true);
    adapter_input(x, sv, d->h, BIT(VF_KIND_HEAD));
    adapter_projection(x, sv, d->h, d->vocab, BIT(VF_KIND_HEAD));
    /* Autocast casts the head's weight like any matmul's (autocast_mode.cpp lower-precision
     * list), and the matmul keeps the copy for its backward. It caches the cast only for a
     * weight that trains (cached_cast: a leaf requiring grad): a frozen head run chunk by
     * chunk is cast, and its copy kept, once per chunk. */
    uint64_t casts = x->base_trainable ? 1 : loss_chunks(x);
    for (uint64_t i = 0; autocast_casts(x) && !quant_weight(x, true) && i < casts; i++)
      tape_keep(x, sv, d->vocab * d->h * d->c);
  }
  if (x->task == VF_TASK_MASKED_LM) tape_keep(x, sv, d->T * d->h * d->c * 3);
  if (!x->p->loss_in_forward) fsdp_forward_returned(x);
  if (root_reshards(x)) fsdp_reshard_root(x);
  uint64_t n = head_loss_outputs(x);
  uint32_t kept = x->task == VF_TASK_SEQ_CLS ? 12 : x->p->logits_kept_bytes;
  uint32_t peak = logits_peak_bytes(x);
  uint32_t cap = 0;
  /* Final soft-capping keeps the tanh's output: of the logits, or of the final norm's. */
  if (x->m->arch.final_logit_softcap > 0 && x->task != VF_TASK_SEQ_CLS) {
    if (x->p->final_softcap_logits) cap = d->c;
    else tape_keep(x, sv, d->T * d->h * d->c);
  }
  struct loss_kept k = {.capped = tape_take(x, n * cap, VF_CAT_TEMPORARIES)};
  /* A chunked output is alive whole through the loss's forward, which up-casts one chunk at
   * a time; the training loop lets go of it once the loss is computed. */
  uint32_t whole_bytes = whole_output_bytes(x), whole = tape_take(x, n * whole_bytes, VF_CAT_TEMPORARIES);
  uint32_t held = hold_logits(x, n), output = pipe_keep_logits(x, n);
  /* Slicing off the last position of a batch's whole logits leaves a tensor reshape has to
   * copy before it can split the rows into chunks. */
  uint32_t sliced = head_whole(x) && x->s->batch > 1 ? tape_take(x, n * held, VF_CAT_TEMPORARIES) : 0;
  /* The logits and their up-cast come first, the log-softmax the backward keeps last. */
  uint32_t made = kept + cap + whole_bytes + output;
  struct logit_tensors rest = take_logit_tensors(x, n, peak > made ? peak - made : 0, loss_chunks(x));
  k.loss = take_logit_tensors(x, n, kept > held ? kept - held : 0, 1);
  tape_give(x, sliced);
  give_logit_tensors(x, &rest);
  tape_give(x, whole);
  return k;
}

/* Accumulating into whole gradients kept from the last micro batch: each new gradient is
 * made beside its kept one, which AccumulateGrad then adds it into in place
 * (torch/csrc/autograd/functions/accumulate_grad.h). */
static bool grads_accumulating_in_place(const struct ctx *x) {
  return x->grads.kept && !grads_sharded(x->s) && !grads_flat(x) && !grads_no_sync(x);
}

/* Each chunk of a chunked output gives its own piece of the head weight's gradient, which
 * autograd sums in the weight's input buffer out of place (torch/csrc/autograd/
 * input_buffer.cpp accumulate, as traced under torch 2.13): the sum so far, the new piece
 * and their sum at once. */
static void chunked_head_grad(struct ctx *x) {
  if (!whole_output_bytes(x) || loss_chunks(x) < 2 || !x->base_trainable) return;
  tape_transient(x, 2 * x->d.vocab * x->d.h * x->d.g, VF_CAT_TEMPORARIES);
}

/* The head weight's new gradient while accumulating: a tied head's waits in the embedding
 * weight's input buffer for the embedding's own (returned, for embedding_backward); an
 * untied one's is added in at once. */
static uint32_t accumulating_head_grad(struct ctx *x) {
  if (!grads_accumulating_in_place(x) || !x->base_trainable || x->task != VF_TASK_CAUSAL_LM || !x->pp.has_head) return 0;
  uint32_t grad = tape_take(x, x->d.vocab * x->d.h * x->d.g, VF_CAT_GRADIENTS);
  chunked_head_grad(x);
  if (head_tied(x)) return grad;
  tape_give(x, grad);
  return 0;
}

/* The embedding's backward (embedding_dense_backward_cuda, EmbeddingBackwardKernel.cu)
 * sorts more than 3072 token ids: sorted and original ids, a range and segment offsets
 * (int64 each), then sums the rows of each partial segment in fp32:
 * [n / 10 + min(n, V), h]. */
static uint64_t embedding_sort_bytes(const struct ctx *x) {
  uint64_t n = x->d.T, seg = n < x->d.vocab ? n : x->d.vocab, partial = n / 10 + seg;
  return n <= 3072 ? 0 : 4 * n * 8 + 2 * seg * 8 + partial * 8 + partial * x->d.h * 4;
}

/* The embedding's backward, last in the pass. A tied embedding's weight has two
 * gradients: the head's matmul gave the first (in first), the embedding's backward makes
 * the second, and autograd sums them into a new tensor while both are alive
 * (torch/csrc/autograd/input_buffer.cpp accumulate: out of place while the first is still
 * referenced). Returns what replaces first. */
static uint32_t embedding_backward(struct ctx *x, uint32_t first) {
  if (!x->base_trainable || !x->pp.has_embedding) return first;
  bool tied = head_tied(x);
  uint64_t bytes = x->d.vocab * x->d.h * x->d.g;
  late_embedding_grads(x);
  /* Accumulating, an untied embedding's gradient too is made before it is added in. */
  uint32_t second = tied || grads_accumulating_in_place(x) ? tape_take(x, bytes, VF_CAT_GRADIENTS) : 0;
  tape_transient(x, embedding_sort_bytes(x), VF_CAT_TEMPORARIES);
  if (!tied) {
    tape_give(x, second);
    return first;
  }
  uint32_t sum = tape_take(x, bytes, VF_CAT_GRADIENTS);
  tape_give(x, second);
  tape_give(x, first);
  return sum;
}

/* Bytes of the token embedding's weight. */
static uint64_t embedding_bytes(const struct ctx *x) {
  uint64_t bytes = 0;
  size_t begin, end;
  vf_params_layer(x->ps, -1, &begin, &end);
  for (size_t i = begin; i < end; i++)
    if (x->ps->v[i].embedding) bytes += x->ps->v[i].bytes;
  return bytes;
}

/* Whether the embeddings' output is in autograd's graph: the embeddings train, or the
 * framework makes it require grad for checkpointing (transformers' modeling_utils.py
 * gradient_checkpointing_enable calls enable_input_require_grads for text models: profile
 * field ckpt_input_grads). */
static bool embeddings_in_graph(const struct ctx *x) {
  return x->base_trainable || (x->p->ckpt_input_grads && x->s->grad_ckpt != VF_CKPT_NONE);
}

/* What the embeddings' own post-processing keeps: BERT and RoBERTa normalize the summed
 * embeddings, the LayerNorm keeping its input in the stream's dtype, then drop out (a bool
 * mask), as modeling_bert.py BertEmbeddings.forward does; GPT-2 drops out the sum
 * (modeling_gpt2.py GPT2Model.forward, self.drop). Nothing when outside the graph.
 * With the weights frozen, the graph starts at the looked-up rows themselves, made a leaf
 * that requires grad by the hook enable_input_require_grads registers
 * (transformers 5.23 modeling_utils.py, `output.requires_grad_(True)`); its AccumulateGrad
 * node holds the leaf (torch 2.13 torch/csrc/autograd/functions/accumulate_grad.h,
 * `Variable variable`) until the backward ends. Where that leaf is the stream (every
 * other family: the first layer's input, Gemma's scaled rows included) it costs nothing
 * more; BERT's and GPT-2's sum it with the positions' rows into a new tensor. */
struct embedding_kept {
  uint32_t leaf, norm_input, mask;
};

static struct embedding_kept embedding_forward(struct ctx *x) {
  struct embedding_kept k = {0, 0, 0};
  enum vf_family f = x->m->arch.family;
  uint64_t elems = x->d.Ts * x->d.h;
  if (!embeddings_in_graph(x) || (f != VF_FAMILY_BERT && f != VF_FAMILY_GPT2)) return k;
  if (!x->base_trainable) k.leaf = tape_take(x, elems * x->d.w, VF_CAT_ACTIVATIONS);
  if (f == VF_FAMILY_BERT) k.norm_input = tape_take(x, elems * autocast_stream_bytes(x), VF_CAT_ACTIVATIONS);
  k.mask = tape_take(x, elems, VF_CAT_ACTIVATIONS);
  return k;
}

/* Their backward, the pass's last: the dropout's input gradient replaces the stream's, and
 * the LayerNorm's is made beside it. Returns the gradient left for the embeddings. */
static uint32_t embedding_post_backward(struct ctx *x, uint32_t grad_stream, struct embedding_kept k) {
  if (!k.mask) return grad_stream;
  uint64_t bytes = x->d.Ts * x->d.h * autocast_stream_bytes(x);
  uint32_t grad = tape_take(x, bytes, VF_CAT_TEMPORARIES);
  tape_give(x, grad_stream);
  tape_give(x, k.mask);
  if (k.norm_input) {
    uint32_t norm_grad = tape_take(x, bytes, VF_CAT_TEMPORARIES);
    tape_give(x, grad);
    tape_give(x, k.norm_input);
    grad = norm_grad;
  }
  if (!k.leaf) return grad;
  /* The gradient reaching the leaf is the one AccumulateGrad keeps as its .grad. */
  tape_give_with_graph(x, grad);
  tape_give_with_graph(x, k.leaf);
  return 0;
}

/* The swapped-in embedding's backward (bitsandbytes nn/modules.py StableEmbedding: a
 * LayerNorm over the looked-up rows, which it keeps): the norm's input gradient, then the
 * embedding's own, which the first backward leaves as the weight's gradient and every
 * later one adds into it (the optimizer does not know the weight, so zero_grad never
 * frees it). Ends what the forward kept and the gradient of the stream. */
static void embedding_stable_backward(struct ctx *x, uint32_t grad_stream, uint32_t embedded) {
  uint64_t stream = x->d.T * x->d.h * x->d.c;
  uint32_t norm_grad = tape_take(x, stream, VF_CAT_TEMPORARIES);
  tape_give(x, grad_stream);
  tape_give(x, embedded);
  tape_transient(x, embedding_sort_bytes(x), VF_CAT_TEMPORARIES);
  if (!x->embedding.stable_grad) x->embedding.stable_grad = tape_take(x, embedding_bytes(x), VF_CAT_GRADIENTS);
  else tape_transient(x, embedding_bytes(x), WEIGHT_TEMPORARIES);
  tape_give(x, norm_grad);
}

/* The root unit's gradients once the embedding's has arrived (early: what the head's
 * backward made of them). Returns what the caller frees when the backward is done. */
static uint32_t grads_finish_root(struct ctx *x, struct ids *g, uint32_t early) {
  if (!grads_flat(x) && x->pp.has_head) {
    uint64_t late = sharded_embedding_grad_late(x) ? root_grad_elems(x, true) * unsharded_grad_bytes(x) : 0;
    uint32_t embedding = tape_take_on(x, late, WEIGHT_TEMPORARIES, STREAM_REDUCE_SCATTER);
    uint32_t root = embedding_backward(x, early);
    tape_give(x, embedding);
    return root;
  }
  if (!grads_flat(x)) {
    uint32_t whole = layer_grads(x, -1, g, true);
    embedding_backward(x, 0); /* a first pipeline stage's: the sort buffers, nothing tied */
    return whole;
  }
  uint32_t parts[2] = {flat_parts(x, root_grad_elems(x, true) + (x->pp.has_head ? 0 : root_grad_elems(x, false))), early};
  return layer_grads_from(x, -1, g, true, parts);
}

/* A whole head's loss chunks each leave the gradient of their slice of the converted
 * logits: the split's backward concatenates them into one (SplitBackward0's cat), and the
 * slice's backward copies that into zeros of the whole logits (slice_backward), before
 * the cast. Returns the whole gradient; frees the chunk's, chunk_grad. */
static uint32_t assemble_grads(struct ctx *x, uint32_t chunk_grad) {
  uint64_t bytes = head_loss_outputs(x) * x->p->logits_held_bytes;
  uint32_t parts = tape_take(x, bytes, VF_CAT_TEMPORARIES);
  tape_give(x, chunk_grad);
  uint32_t joined = tape_take(x, bytes, VF_CAT_TEMPORARIES);
  tape_give(x, parts);
  uint32_t padded = tape_take(x, bytes, VF_CAT_TEMPORARIES);
  tape_give(x, joined);
  return padded;
}

/* The loss's backward: its gradients of the logits, next to what it kept. The loss's
 * nodes have all run and let go of what they kept (autograd releases a node's saved
 * tensors once it has run) before the head's matmul gets the gradient, cast to its dtype
 * (the up-cast's ToCopyBackward), and makes its weight and input gradients. A chunked
 * loss's (or a chunked output's) nodes run one chunk at a time, but all of them before any chunk of the head's
 * matmul: autograd's engine runs the most recently recorded ready node first
 * (torch/csrc/autograd/engine.cpp CompareNodeTaskTime), and the head made every chunk
 * before the loss began; so the cast gradients of all chunks wait for the head. A tanh
 * output goes with its chunk's matmul: all at once unchunked, chunk by chunk from the
 * head's first backward on, when chunked. Returns the gradient the head's matmul reads. */
static uint32_t loss_backward(struct ctx *x, struct loss_kept *k) {
  uint64_t n = head_loss_outputs(x), chunks = loss_chunks(x);
  if (x->task == VF_TASK_SEQ_CLS) return tape_take(x, n * 8 / chunks, VF_CAT_TEMPORARIES);
  /* nll_loss's gradient goes once _log_softmax's backward has read it, with the
   * log-softmax that node kept; the cast reads the last. */
  struct logit_tensors grad_logits = take_logit_tensors(x, n, x->p->logits_backward_bytes + loss_parallel_bytes(x), chunks);
  uint32_t last = last_logit_tensor(&grad_logits);
  for (int i = 0; i < LOGIT_TENSORS; i++)
    if (grad_logits.id[i] != last) tape_give(x, grad_logits.id[i]);
  give_logit_tensors(x, &k->loss);
  if (chunks == 1) {
    tape_give(x, k->capped);
    k->capped = 0;
  }
  uint32_t from = head_whole(x) ? assemble_grads(x, last) : last;
  uint32_t cast = tape_take(x, n * x->d.c, VF_CAT_TEMPORARIES);
  tape_give(x, from);
  return cast;
}

/* cuBLAS keeps one workspace per handle and stream, made at the handle's first matmul and
 * kept: the forward's thread and the autograd engine's each have one
 * (CublasHandlePool.cpp getChosenWorkspaceSize: 32 MiB from Hopper on, 8 MiB + 128 KiB
 * before). A GPU not named is taken for a current one, as the tracer takes it. */
static void schedule_workspace(struct ctx *x, uint32_t *made) {
  if (*made) return;
  bool hopper = x->s->gpu_cc_major >= 9 || x->s->gpu_cc_major == 0;
  *made = tape_take(x, hopper ? 32u << 20 : 4096 * 1024 * 2 + 16 * 1024 * 8, VF_CAT_RUNTIME);
}

static uint32_t head_backward(struct ctx *x, struct saved *sv, struct loss_kept k, struct ids *g) {
  const struct dims *d = &x->d;
  uint32_t grad_logits = loss_backward(x, &k);
  if (root_reshards(x) && !x->fsdp.root) x->fsdp.root = fsdp_gather(x, -1);
  fsdp_backward_prefetch(x, (int32_t)x->layers - 1);
  /* The backward's first matmul is the head's: the loss's nodes call no cuBLAS. */
  schedule_workspace(x, &x->sched.backward_workspace);
  uint32_t grad_hidden = tape_take(x, d->T * d->h * d->c, VF_CAT_TEMPORARIES);
  /* A quantized head is dequantized again for the input gradient. */
  if (quant_weight(x, true) && x->task == VF_TASK_CAUSAL_LM)
    tape_transient(x, d->h * d->vocab * dequant_bytes(x, false), WEIGHT_TEMPORARIES);
  uint32_t root_grads = grads_flat(x) ? flat_parts(x, root_grad_elems(x, false)) : layer_grads(x, -1, g, true);
  /* Accumulating, layer_grads made nothing: the head's new gradient comes beside the kept one. */
  if (grads_accumulating_in_place(x)) root_grads = accumulating_head_grad(x);
  else chunked_head_grad(x);
  tape_give(x, grad_logits);
  give_logit_tensors(x, &k.loss);
  tape_give(x, k.capped);
  tape_release(x, sv);
  tape_give(x, grad_hidden);
  if (!fsdp_embedding_unit(x)) return root_grads;
  /* The norm-and-head unit's post-backward: reduced (its shard is made) and resharded. */
  tape_give(x, root_grads);
  fsdp_reshard_root(x);
  return 0;
}

static uint64_t trainable_elems(const struct ctx *x, uint64_t layers) {
  size_t end, unused;
  vf_params_layer(x->ps, (int32_t)layers, &end, &unused);
  return layer_param_sum(x, 0, end, true, false, false);
}

/* Bytes of one state element: the parameter's dtype, or fp32 next to an fp32 master. */
static uint32_t state_elem_bytes(const struct ctx *x) {
  return x->p->master_weights && x->d.w < 4 ? 4 : x->d.w;
}

/* One optimizer state tensor: its bytes, and whether bitsandbytes pages it into CUDA
 * managed memory, outside PyTorch's allocator. */
struct state {
  uint64_t bytes;
  bool paged;
};

/* bitsandbytes' 8-bit AdamW (optim/optimizer.py Optimizer2State.init_state): two uint8
 * states, each with an fp32 absmax per block, or two fp32 states for tensors under
 * min_8bit_size (4096 elements) and for those registered to 32 bits. A paged optimizer
 * pages the states of tensors from 1e5 elements on (get_state_buffer), never the absmax. */
static int bnb_adamw_states(const struct ctx *x, const struct vf_param *p, struct state *out) {
  uint64_t n = p->numel, block = x->p->optim8bit_block;
  bool wide = n < 4096 || (p->embedding && x->p->embedding_states_fp32);
  bool paged = x->s->optimizer == VF_OPT_PAGED_ADAMW_8BIT && n >= 100000;
  int k = 0;
  for (int i = 0; i < 2; i++) out[k++] = (struct state){wide ? n * 4 : n, paged};
  if (!wide && block)
    for (int i = 0; i < 2; i++) out[k++] = (struct state){(n + block - 1) / block * 4, false};
  return k;
}

/* The state tensors the optimizer creates for one trainable tensor, as PyTorch creates them
 * at the first step: zeros_like(param) per moment. Returns the count written to out (at
 * most 5). */
static int tensor_states(const struct ctx *x, const struct vf_param *p, struct state out[5]) {
  uint64_t n = p->numel, sb = state_elem_bytes(x);
  int k = 0;
  switch (x->s->optimizer) {
  case VF_OPT_ADAMW:
    out[k++] = (struct state){n * sb, false};
    out[k++] = out[0];
    break;
  case VF_OPT_ADAMW_8BIT:
  case VF_OPT_PAGED_ADAMW_8BIT:
    k = bnb_adamw_states(x, p, out);
    break;
  case VF_OPT_SGD_MOMENTUM:
    out[k++] = (struct state){n * sb, false};
    break;
  case VF_OPT_LION:
    out[k++] = (struct state){n * (x->p->lion_fp32_states ? 4 : sb), false};
    break;
  case VF_OPT_ADAFACTOR: /* factored second moment of every matrix (torch.optim.Adafactor,
                          * transformers' Adafactor): a row and a column statistic */
    if (p->in && p->out) {
      out[k++] = (struct state){p->out * 4, false};
      out[k++] = (struct state){p->in * 4, false};
    } else {
      out[k++] = (struct state){n * 4, false};
    }
    break;
  default:
    break;
  }
  if (x->p->master_weights && x->d.w < 4) out[k++] = (struct state){n * 4, false};
  return k;
}

static bool states_on_gpu(const struct vf_setup *s) {
  return s->optimizer != VF_OPT_NONE && !(s->offload & VF_OFFLOAD_OPTIMIZER);
}

/* The bytes of what a trainable tensor gets, one tensor each; returns how many. */
typedef int (*tensor_bytes_fn)(const struct ctx *x, const struct vf_param *p, uint64_t out[5]);

/* Takes what bytes_of gives every trainable tensor, unit by unit: a tensor each, or when
 * partitioned (ZeRO, FSDP flat parameters) one flat shard of the unit's sum, experts
 * counted once per expert-parallel group as layer_param_sum counts them. The ids go to ids when
 * given. */
static void take_per_tensor(struct ctx *x, tensor_bytes_fn bytes_of, enum vf_category cat, struct ids *ids) {
  for (int32_t l = -1; l < (int32_t)x->layers; l++) {
    size_t begin, end;
    vf_params_layer(x->ps, l, &begin, &end);
    uint64_t shard = 0;
    for (size_t i = begin; i < end; i++) {
      const struct vf_param *p = &x->ps->v[i];
      uint64_t bytes[5];
      int k = p->trainable ? bytes_of(x, p, bytes) : 0;
      for (int j = 0; j < k; j++) {
        if (x->s->shard != VF_SHARD_NONE) {
          shard += bytes[j] * (p->expert ? x->s->ep : 1);
          continue;
        }
        uint32_t id = tape_take(x, bytes[j], cat);
        if (ids) ids_push(x, ids, id);
      }
    }
    if (!shard) continue;
    uint32_t id = tape_take(x, shard / x->d.dsize, cat);
    if (ids) ids_push(x, ids, id);
  }
}

/* A tensor's optimizer states on the GPU (paged ones live in host memory until used). */
static int gpu_state_bytes(const struct ctx *x, const struct vf_param *p, uint64_t out[5]) {
  struct state st[5];
  int k = tensor_states(x, p, st), n = 0;
  for (int j = 0; j < k; j++)
    if (!st[j].paged) out[n++] = st[j].bytes;
  return n;
}

/* Created once, in the first step, and kept. */
static void create_states(struct ctx *x) { take_per_tensor(x, gpu_state_bytes, VF_CAT_OPTIMIZER, NULL); }

/* Adafactor updates one tensor at a time: the largest trainable tensor sets the step's
 * peak (the embedding's, often). */
static uint64_t optim_largest_trainable(const struct ctx *x) {
  uint64_t n = 0;
  for (size_t i = 0; i < x->ps->n; i++)
    if (x->ps->v[i].trainable && x->ps->v[i].numel > n) n = x->ps->v[i].numel;
  return n;
}

/* Bytes per element of one tensor that Adafactor's step holds at once: the squared gradient
 * and the update in fp32, and with adafactor_fp32_copies the fp32 copies of a 16-bit
 * gradient and parameter. */
static uint64_t adafactor_step_bytes(const struct ctx *x) {
  return 2 * 4 + (x->p->adafactor_fp32_copies && x->d.w < 4 ? 2 * 4 : 0);
}

static int sqrt_bytes(const struct ctx *x, const struct vf_param *p, uint64_t out[5]) {
  out[0] = p->numel * state_elem_bytes(x);
  return 1;
}

/* foreach AdamW (torch/optim/adam.py@v2.13.0 _multi_tensor_adam, which AdamW runs) takes
 * sqrt(exp_avg_sq) of every tensor of the group at once (torch._foreach_sqrt): a list of
 * tensors, one per trainable tensor and each of its size, made in parameter order and freed after the update. Made
 * apart, they fit into cached blocks one block of their sum could not. Sharded states are
 * flat: one per unit. */
static void foreach_temporaries(struct ctx *x) {
  take_per_tensor(x, sqrt_bytes, WEIGHT_TEMPORARIES, &x->opt.foreach_tmp);
  ids_give(x, &x->opt.foreach_tmp);
}

/* The gradient partition elements of the largest sub group ZeRO-3's step updates at once,
 * for a stage of `layers` blocks: its trainable partitions, split into sub groups closed
 * once they reach sub_group_size elements, one parameter's partition past it at most
 * (stage3.py _create_fp16_sub_groups). */
static uint64_t zero3_sub_group_elems(const struct ctx *x, uint64_t layers) {
  size_t end, unused;
  vf_params_layer(x->ps, (int32_t)layers, &end, &unused);
  uint64_t partition = layer_param_sum(x, 0, end, true, false, true) / x->d.dsize;
  uint64_t cap = x->p->zero3_sub_group_millions * UINT64_C(1000000) + optim_largest_trainable(x) / x->d.dsize;
  return partition < cap ? partition : cap;
}

/* ZeRO-3 updates a sub group at a time: its gradient partitions flattened, converted to
 * the fp32 master's dtype, and freed after its update (stage3.py
 * _prepare_fp32_grad_for_sub_group, _release_sub_group). */
static void zero3_step_grads(struct ctx *x) {
  uint64_t n = x->zero.zero3_sub_group;
  uint32_t flat = tape_take(x, n * x->d.g, WEIGHT_TEMPORARIES);
  uint32_t fp32 = x->d.g < 4 ? tape_take(x, n * 4, WEIGHT_TEMPORARIES) : 0;
  tape_give(x, flat);
  tape_give(x, fp32);
}

static void optim_step(struct ctx *x, bool first) {
  if (!states_on_gpu(x->s)) return;
  if (first) create_states(x);
  zero3_step_grads(x);
  if (x->p->foreach_optimizer && x->s->optimizer == VF_OPT_ADAMW)
    foreach_temporaries(x);
  else if (x->s->optimizer == VF_OPT_ADAFACTOR)
    tape_transient(x, optim_largest_trainable(x) * adafactor_step_bytes(x), WEIGHT_TEMPORARIES);
}

/* Everything that persists across steps: weights, DDP buckets, cuBLAS workspaces. */
static uint64_t unit_bytes(const struct ctx *x, int32_t layer) { return layer_sum(x, layer, false, true, false); }

/* Loading a full state dict into a model FSDP has already sharded gathers every unit at
 * once: Lightning's FSDPStrategy loads it under FSDP's FULL_STATE_DICT context
 * (lightning/fabric/strategies/fsdp.py _load_raw_module_state: "gathering all weights
 * first"), whose pre-load hook unshards each unit while Module.load_state_dict runs every
 * post-load hook, which reshards, only after the whole recursive load
 * (torch/nn/modules/module.py). Each GPU holds the whole model next to its shard. */
static void fsdp_load_full_state_dict(struct ctx *x) {
  if (!x->p->fsdp_full_load || !vf_shard_fsdp(x->s->shard) || (x->s->offload & VF_OFFLOAD_PARAMS)) return;
  uint32_t *ids = malloc((x->layers + 1) * sizeof *ids);
  if (!ids) {
    x->tape.rc = VF_ENOMEM;
    return;
  }
  for (int32_t l = -1; l < (int32_t)x->layers; l++) ids[l + 1] = tape_take(x, unit_bytes(x, l), VF_CAT_WEIGHTS);
  for (uint64_t i = 0; i <= x->layers; i++) tape_give(x, ids[i]);
  free(ids);
}

static uint32_t type_value(const struct vf_type_values *v, const char *type) {
  uint32_t others = 0;
  for (uint32_t i = 0; i < v->n; i++) {
    if (strcmp(v->type[i], type) == 0) return v->value[i];
    if (strcmp(v->type[i], "*") == 0) others = v->value[i];
  }
  return others;
}

/* The RoPE table (cosines and sines for every position the model takes) is a buffer made
 * with the model: one for it, or one per layer where the LoRA builders make a rotary
 * module per layer. The bytes to take with a layer's weights (-1: the root's). */
static uint64_t attention_rope_tables(const struct ctx *x, int32_t layer) {
  const struct vf_arch *a = &x->m->arch;
  uint64_t rotated = (uint64_t)((double)a->head_dim * a->rotary_fraction);
  uint64_t bytes = type_value(&x->p->rope_table_bytes, a->model_type) * a->max_positions * rotated;
  bool per_layer = adapter_lora_method(x->s->method) && type_value(&x->p->lora_rope_table_per_layer, a->model_type);
  return (layer < 0) != per_layer ? bytes : 0;
}

/* Elements of each ZeRO reduce bucket: reduce_bucket_size. */
static uint64_t zero_bucket_elems(const struct ctx *x) {
  return x->p->zero_reduce_bucket_elems ? x->p->zero_reduce_bucket_elems : x->d.h * x->d.h;
}

/* Data parallelism without sharding: torch's DistributedDataParallel, or a framework's own. */
static bool data_parallel_unsharded(const struct ctx *x) {
  const struct vf_setup *s = x->s;
  return s->shard == VF_SHARD_NONE && s->gpus / (s->tp * s->pp * s->cp) > 1;
}

/* DistributedDataParallel's constructor broadcasts every parameter from rank 0 before it
 * makes its gradient buckets (torch 2.13 nn/parallel/distributed.py _sync_module_states,
 * broadcast_bucket_size 250 MiB). c10d's broadcast_coalesced (csrc/distributed/c10d/
 * comm.cpp) flattens each bucket of tensors into one new tensor, copies it back when its
 * broadcast is done and keeps at most two in flight; a bucket closes once it holds 250 MiB
 * (reducer.cpp compute_bucket_assignment_by_size), so it passes that by up to a tensor.
 * Buckets are per dtype; the weights share one, and adapters in another dtype (a few MiB)
 * are counted among them. */
static void ddp_init_broadcast(struct ctx *x) {
  if (!x->p->ddp_init_broadcast || !data_parallel_unsharded(x)) return;
  const uint64_t limit = 250ull << 20;
  uint32_t in_flight[2] = {0, 0};
  uint64_t bucket = 0, made = 0;
  for (size_t i = 0; i < x->ps->n; i++) {
    bucket += x->ps->v[i].bytes;
    if (bucket < limit && i + 1 < x->ps->n) continue;
    tape_give(x, in_flight[made % 2]);
    in_flight[made++ % 2] = tape_take(x, bucket, VF_CAT_TEMPORARIES);
    bucket = 0;
  }
  tape_give(x, in_flight[0]);
  tape_give(x, in_flight[1]);
}

static void persistent(struct ctx *x) {
  bool sharded_w = vf_shard_weights(x->s->shard);
  for (int32_t l = -1; l < (int32_t)x->layers; l++) {
    if (!sharded_w) layer_params(x, l, NULL);
    else if (!(x->s->offload & VF_OFFLOAD_PARAMS))
      tape_take(x, layer_sum(x, l, false, true, true) / x->d.dsize, VF_CAT_WEIGHTS);
    /* ZeRO-3's persistent parameters, gathered next to their partition. */
    tape_take(x, zero3_gathered_elems(x, l, true) * x->d.c, VF_CAT_WEIGHTS);
    tape_take(x, attention_rope_tables(x, l), VF_CAT_WEIGHTS);
  }
  /* ZeRO-3's IPG buffers, made with its optimizer (stage3.py, contiguous_gradients). */
  if (x->s->shard == VF_SHARD_ZERO3)
    tape_take(x, x->p->zero3_ipg_buckets * zero_bucket_elems(x) * x->d.w, VF_CAT_GRADIENTS);
  fsdp_load_full_state_dict(x);
  /* The swapped-out embedding stays referenced (litgpt's main() keeps it in a variable and
   * the optimizer holds its weight): a second embedding-sized weight. */
  if (embedding_stable(x)) tape_take(x, embedding_bytes(x), VF_CAT_WEIGHTS);
  ddp_init_broadcast(x);
  /* DDP's flat gradient buckets, when there is data parallelism to reduce over; a
   * framework with a gradient buffer of its own keeps every gradient there. */
  if (x->p->grad_buffer_fp32) tape_take(x, trainable_elems(x, x->layers) * 4, VF_CAT_GRADIENTS);
  else if (data_parallel_unsharded(x)) tape_take(x, trainable_elems(x, x->layers) * x->d.g, VF_CAT_GRADIENTS);
}

/* torch.distributed.pipelining makes a stage's receive buffers for every micro batch when
 * the schedule first runs, and keeps them: for the activations from the stage before
 * (_prepare_forward_infra) and for their gradients from the stage after
 * (_prepare_backward_infra) (stage.py). A rank runs a stage per model chunk. */
static void receive_buffers(struct ctx *x) {
  if (!x->p->pp_torch_pipelining || x->s->pp == 1 || x->pp.receive_buffers) return;
  x->pp.receive_buffers = true;
  uint64_t per = x->accumulation * x->d.Ts * x->d.h * x->d.c;
  tape_take(x, (x->pp.chunks - x->pp.has_embedding) * per, VF_CAT_ACTIVATIONS);
  tape_take(x, (x->pp.chunks - x->pp.has_head) * per, VF_CAT_ACTIVATIONS);
}

/* A layer's forward whose tensors all go when it is done: checkpointed, evaluated under
 * no_grad, or outside autograd's graph. What it makes is this micro batch's alone. */
static void layer_forward_keeping_nothing(struct ctx *x, int32_t layer) {
  double in_flight = x->saving.in_flight;
  struct saved scratch = {0};
  x->saving.in_flight = 1;
  block_forward(x, &scratch, layer, false);
  tape_release(x, &scratch);
  x->saving.in_flight = in_flight;
}

/* ZeRO-1/2 with contiguous gradients: each backward replaces the reduce buckets, one or two
 * (overlap_comm) of reduce_bucket_size elements in the weights' dtype, kept until the next
 * (deepspeed/runtime/zero/stage_1_and_2.py backward: self.ipg_buffer = [] then torch.empty
 * for each). */
static void zero_reduce_buckets(struct ctx *x) {
  const struct vf_profile *p = x->p;
  if (!p->zero_reduce_buckets || (x->s->shard != VF_SHARD_ZERO1 && x->s->shard != VF_SHARD_ZERO2)) return;
  tape_give(x, x->zero.reduce_buckets);
  x->zero.reduce_buckets = tape_take(x, p->zero_reduce_buckets * zero_bucket_elems(x) * x->d.w, VF_CAT_GRADIENTS);
}

/* One micro batch: forward, loss, backward, and when it ends an accumulation cycle
 * (last_micro) the optimizer step and zero_grad. */
static void one_step(struct ctx *x, bool last_micro) {
  struct saved *sv = x->sched.sv;
  struct ids *g = &x->grads.list;
  x->sched.last_micro = last_micro;
  x->saving.in_flight = pipe_in_flight(x);
  for (uint64_t l = 0; l <= x->layers; l++) sv[l].n = 0;
  if (!x->grads.kept) g->n = 0;
  mark(x, ST_FORWARD_BOTTOM);
  if (schedule_micro_index(x) == 0) ids_give(x, &x->pp.outputs); /* the schedule's clear_runtime_states */
  receive_buffers(x);
  /* Sharded training keeps the root unit (embedding, final norm, head) gathered from the
   * start of the forward to the end of the backward. */
  x->fsdp.forwarding = true;
  x->fsdp.root = fsdp_embedding_unit(x) ? fsdp2_gather(x, -1, root_part_bytes(x, true)) : fsdp_gather(x, -1);
  uint64_t stream = x->d.Ts * x->d.h * x->d.c;
  /* A normalizing embedding's norm keeps the looked-up rows; its output is the stream. */
  uint32_t embedded = embedding_stable(x) ? tape_take(x, stream, VF_CAT_ACTIVATIONS) : 0;
  struct embedding_kept emb = embedding_forward(x);
  if (fsdp_embedding_unit(x)) fsdp_reshard_root(x);
  uint32_t input = tape_take(x, stream, VF_CAT_ACTIVATIONS);
  schedule_workspace(x, &x->sched.forward_workspace);
  for (uint64_t l = 0; l < x->layers; l++) {
    mark(x, layer_stretch(x, l, ST_FORWARD_BOTTOM));
    uint32_t gathered = fsdp_gather(x, (int32_t)l);
    if (adapter_outside_graph(x, (int32_t)l)) {
      layer_forward_keeping_nothing(x, (int32_t)l);
    } else if (x->s->grad_ckpt == VF_CKPT_FULL) {
      autocast_copies(x, (int32_t)l, &sv[l], false);
      /* The checkpoint keeps the layer's input: the residual stream, in the weights' dtype
       * under autocast (transformers 5.23 modeling_llama.py `residual + hidden_states`
       * promotes a 16-bit output to the fp32 stream; modeling_bert.py's post-norm
       * LayerNorm(hidden_states + input_tensor) is on autocast's fp32 list,
       * aten/src/ATen/autocast_mode.cpp in torch 2.13). */
      tape_keep(x, &sv[l], x->d.Ts * x->d.h * autocast_stream_bytes(x));
      layer_forward_keeping_nothing(x, (int32_t)l);
    } else {
      autocast_copies(x, (int32_t)l, &sv[l], false);
      block_forward(x, &sv[l], (int32_t)l, false);
    }
    tape_give(x, gathered);
    layer_offload(x, &sv[l]);
    uint32_t out = tape_take(x, stream, VF_CAT_ACTIVATIONS);
    tape_give(x, input);
    input = out;
  }
  mark(x, ST_LOSS);
  if (fsdp_embedding_unit(x)) x->fsdp.root = fsdp2_gather(x, -1, root_part_bytes(x, false));
  struct loss_kept loss = {0};
  uint32_t root_grads = 0;
  if (x->pp.has_head) loss = head_forward(x, &sv[x->layers]);
  fsdp_forward_returned(x);
  /* The rank's other model chunks send theirs on too. */
  pipe_hold_output(x, (x->pp.chunks - x->pp.has_head) * stream);
  ids_give(x, &x->autocast.cache);
  tape_drop_graph(x);
  tape_give(x, input);
  ids_give(x, &x->grads.stale);
  mark(x, ST_HEAD_BACKWARD);
  zero_reduce_buckets(x);
  if (x->pp.has_head) root_grads = head_backward(x, &sv[x->layers], loss, g);
  schedule_workspace(x, &x->sched.backward_workspace);
  /* The gradient of the stream has its dtype, the weights' under autocast (autograd casts
   * each gradient to its input's metadata: torch 2.13 torch/csrc/autograd/engine.cpp
   * validate_outputs). */
  uint32_t grad_stream = tape_take(x, x->d.Ts * x->d.h * autocast_stream_bytes(x), VF_CAT_TEMPORARIES);
  for (uint64_t l = x->layers; l-- > 0;) {
    mark(x, layer_stretch(x, l, ST_BACKWARD_BOTTOM));
    if (!adapter_outside_graph(x, (int32_t)l)) layer_backward(x, (int32_t)l, &sv[l], g);
    pipe_chunk_post_backward(x, l, g);
  }
  mark(x, ST_ROOT_BACKWARD);
  if (fsdp_embedding_unit(x)) x->fsdp.root = fsdp2_gather(x, -1, root_part_bytes(x, true));
  tape_give(x, x->fsdp.prefetched); /* for a layer outside the graph */
  x->fsdp.prefetched = 0;
  grad_stream = embedding_post_backward(x, grad_stream, emb);
  if (embedded) embedding_stable_backward(x, grad_stream, embedded);
  else tape_give(x, grad_stream);
  pipe_hold_input_grads(x, stream);
  /* The embedding's gradient is the stage's last. */
  root_grads = grads_finish_root(x, g, root_grads);
  tape_give(x, root_grads);
  fsdp_reshard_root(x);
  if (last_micro) {
    pipe_post_backward(x, g);
    pipe_merge_outputs(x);
  }
  mark(x, ST_OPTIMIZER);
  /* Accumulating, the next micro batch adds into these gradients: the optimizer runs, and
   * zero_grad(set_to_none=True) frees them, only after the last one. */
  if (!last_micro) {
    x->grads.kept = true;
    return;
  }
  optim_step(x, !x->opt.states_made);
  x->opt.states_made = true;
  /* zero_grad(set_to_none=False), torch's default before 2.0, zeroes them in place. */
  x->grads.kept = !x->p->zero_grad_frees;
  if (x->grads.kept) return;
  if (!x->p->zero_grad_before_backward) {
    ids_give(x, g);
    return;
  }
  /* Lightning's closure frees them only after the next forward and loss. */
  for (size_t i = 0; i < g->n; i++) ids_push(x, &x->grads.stale, g->id[i]);
  g->n = 0;
}

/* Validation after the steps (litgpt's validate(), the Trainer's evaluate()): the model in
 * eval mode under no_grad, so each layer's tensors go as soon as the layer is done, and the
 * loss over the whole logits at once (litgpt calls chunked_cross_entropy with chunk_size 0);
 * the optimizer's states, and gradients a late zero_grad has not freed, are still there. */
/* A sample generated after validation (litgpt's generate_example, profile field
 * generates): a KV cache of batch 1 over the training's longest sequence, K and V of every
 * layer (model.py set_kv_cache, build_kv_cache), and the causal mask it needs, made as ones
 * and kept as their lower triangle (build_mask_cache: bool, positions squared). The prompt's
 * forward is the dataset's; one position's logits stand for the tokens made one by one. */
static void generate_sample(struct ctx *x) {
  if (!x->p->generates || x->task != VF_TASK_CAUSAL_LM || !x->pp.has_head) return;
  const struct dims *d = &x->d;
  uint32_t cache = tape_take(x, 2 * x->layers * d->kv * d->s_kv * d->c, VF_CAT_ACTIVATIONS);
  uint32_t ones = tape_take(x, d->s_kv * d->s_kv, VF_CAT_TEMPORARIES);
  uint32_t mask = tape_take(x, d->s_kv * d->s_kv, VF_CAT_ACTIVATIONS);
  tape_give(x, ones);
  tape_transient(x, d->vocab * 4, VF_CAT_TEMPORARIES);
  tape_give(x, mask);
  tape_give(x, cache);
}

static void eval_pass(struct ctx *x) {
  tape_push(&x->tape, OP_UNIT, 0, 0, 0, UNIT_EVAL);
  x->saving.in_flight = 1;
  uint64_t stream = x->d.Ts * x->d.h * x->d.c;
  uint32_t root = tape_take_on(x, fsdp_gather_bytes(x, -1), VF_CAT_WEIGHTS, STREAM_ALL_GATHER);
  uint32_t input = tape_take(x, stream, VF_CAT_ACTIVATIONS);
  for (uint64_t l = 0; l < x->layers; l++) {
    uint32_t gathered = tape_take_on(x, fsdp_gather_bytes(x, (int32_t)l), VF_CAT_WEIGHTS, STREAM_ALL_GATHER);
    layer_forward_keeping_nothing(x, (int32_t)l);
    tape_give(x, gathered);
    uint32_t out = tape_take(x, stream, VF_CAT_ACTIVATIONS);
    tape_give(x, input);
    input = out;
  }
  if (x->pp.has_head) {
    tape_transient(x, head_loss_outputs(x) * logits_peak_bytes(x), VF_CAT_TEMPORARIES);
  }
  tape_drop_graph(x);
  tape_give(x, input);
  tape_give(x, root);
  generate_sample(x);
}

/* Saving a checkpoint reads the weights where they are; only sharded weights are gathered
 * to be saved whole, one unit at a time inside the root's (FSDP's full state dict: each
 * unit unshards in its own state-dict pre-hook and reshards in its post-hook,
 * torch/distributed/fsdp/_state_dict_utils.py; ZeRO-3's 16-bit save gathers module by
 * module). */
static void save_pass(struct ctx *x) {
  tape_push(&x->tape, OP_UNIT, 0, 0, 0, UNIT_SAVE);
  uint32_t root = tape_take_on(x, fsdp_gather_bytes(x, -1), VF_CAT_WEIGHTS, STREAM_ALL_GATHER);
  for (uint64_t l = 0; l < x->layers; l++)
    tape_give(x, tape_take_on(x, fsdp_gather_bytes(x, (int32_t)l), VF_CAT_WEIGHTS, STREAM_ALL_GATHER));
  tape_give(x, root);
}

/* ---- Replay ---- */

/* The highest points of one unit: allocated bytes with their categories, and reserved bytes. */
struct unit_peak {
  uint64_t allocated, reserved;
  uint64_t cat[CAT_SLOTS];
};

struct result {
  struct unit_peak unit[UNITS];
};

struct live {
  uint64_t block, bytes;
  uint8_t cat;
};

static void observe(struct unit_peak *pk, const struct vf_alloc_stats *st, const uint64_t *cat) {
  if (st->allocated > pk->allocated) {
    pk->allocated = st->allocated;
    memcpy(pk->cat, cat, sizeof pk->cat);
  }
  if (st->reserved > pk->reserved) pk->reserved = st->reserved;
}

/* Tells the timeline's listener about one replayed event. */
static void report(const struct ctx *x, const struct ev *e, const struct live *l, int unit,
                   const struct vf_allocator *a) {
  struct vf_alloc_stats st;
  vf_allocator_stats(a, &st);
  bool freed = e->op == OP_FREE || e->op == OP_GRAPH_FREE;
  struct vf_timeline_event te = {.op = freed ? VF_TIMELINE_FREE : VF_TIMELINE_ALLOC,
                                 .phase = (uint8_t)unit_phase(unit),
                                 .category = l->cat == WEIGHT_TEMPORARIES ? VF_CAT_TEMPORARIES : l->cat,
                                 .stage = (uint8_t)x->pp.stage,
                                 .with_graph = e->op == OP_GRAPH_FREE,
                                 .id = e->id,
                                 .bytes = l->bytes,
                                 .allocated = st.allocated,
                                 .reserved = st.reserved};
  x->replay.listener(x->replay.listener_arg, &te);
}

/* Every id is written by its allocation before its free reads it: no zeroing needed. */
static int replay(const struct ctx *x, const struct tape *b, const struct vf_alloc_conf *conf,
                  struct vf_allocator *a, struct result *r) {
  struct live *lv = malloc((b->next_id + 1) * sizeof *lv);
  if (!lv) return VF_ENOMEM;
  memset(r, 0, sizeof *r);
  uint64_t cat[CAT_SLOTS] = {0};
  int unit = UNIT_SETUP;
  struct vf_alloc_stats st;
  int rc = 0;
  for (size_t i = 0; i < b->n && !rc; i++) {
    const struct ev *e = &b->ev[i];
    struct live *l = &lv[e->id];
    if (e->op == OP_UNIT) {
      /* What is live when a unit begins counts for it, even if it allocates nothing. */
      unit = e->unit;
      vf_allocator_stats(a, &st);
      observe(&r->unit[unit], &st, cat);
    } else if (e->op == OP_FREE || e->op == OP_GRAPH_FREE) {
      cat[l->cat] -= l->bytes;
      rc = vf_allocator_free(a, l->block);
      if (x->replay.listener) report(x, e, l, unit, a);
    } else {
      rc = vf_allocator_malloc(a, e->bytes, e->stream, &l->block);
      l->bytes = vf_alloc_round_size(conf, e->bytes);
      l->cat = e->cat;
      cat[e->cat] += l->bytes;
      vf_allocator_stats(a, &st);
      observe(&r->unit[unit], &st, cat);
      if (x->replay.listener) report(x, e, l, unit, a);
    }
  }
  free(lv);
  return rc;
}

static void parallel_dims(struct ctx *x) {
  const struct vf_arch *a = &x->m->arch;
  const struct vf_setup *s = x->s;
  struct dims *d = &x->d;
  d->T = s->batch * (s->seq / s->cp);
  d->sp = s->sequence_parallel == VF_SP_YES && s->tp > 1;
  d->Ts = d->sp ? d->T / s->tp : d->T;
  d->s_kv = s->seq / s->cp;
  d->h = a->hidden;
  d->q = a->heads * a->head_dim / s->tp;
  d->kv = a->kv_heads * a->head_dim / s->tp;
  d->ffn = a->intermediate / s->tp;
  d->heads = a->heads / s->tp;
  d->vocab = a->vocab / s->tp;
  d->labels = a->num_labels;
  d->c = vf_precision_bytes(s->amp != VF_PREC_NONE ? s->amp : s->weights);
  d->w = s->method == VF_METHOD_FULL || !x->p->adapter_fp32 ? vf_precision_bytes(s->weights) : 4;
  d->g = d->w;
  /* FSDP and ZeRO shard over the data-parallel and context-parallel GPUs (torchtitan's
   * dp_shard_cp mesh, Megatron's data-parallel group with context parallelism); HSDP over
   * one replica's group of them (FSDP2 fully_shard on a 2-D mesh: replicate x shard). */
  d->dsize = s->gpus / (s->tp * s->pp) / s->dp_replicate;
  if (!d->dsize) d->dsize = 1;
}

static int run(struct ctx *x, uint64_t layers, const struct vf_alloc_conf *conf, struct vf_allocator *a,
               struct result *r) {
  x->layers = layers;
  x->grads.kept = x->opt.states_made = false;
  x->head.held_logits = x->embedding.stable_grad = 0;
  x->tape.graph.n = x->grads.stale.n = x->autocast.cache.n = x->pp.outputs.n = 0;
  x->pp.receive_buffers = false;
  memset(x->fsdp.held_gather, 0, (layers + 1) * sizeof *x->fsdp.held_gather);
  memset(x->grads.unsharded, 0, (layers + 1) * sizeof *x->grads.unsharded);
  x->saving.keep_share = x->s->grad_ckpt == VF_CKPT_SELECTIVE ? x->p->selective_keep : 1.0;
  x->tape.n = 0;
  x->tape.next_id = 0;
  x->tape.rc = 0;
  tape_push(&x->tape, OP_UNIT, 0, 0, 0, UNIT_SETUP);
  persistent(x);
  x->sched.forward_workspace = x->sched.backward_workspace = x->zero.reduce_buckets = x->fsdp.root = x->fsdp.prefetched = 0;
  /* Two optimizer steps: states appear in the first, the second has everything. With
   * accumulation each step is up to three micro batches: the first makes the gradients, a
   * middle one adds into them still accumulating (under FSDP's no_sync every unit's whole
   * gradient is alive then, next to the one being added), the last adds and ends the step.
   * All further micro batches look like the middle one. */
  int micro = x->accumulation < 3 ? (int)x->accumulation : 3;
  for (x->sched.micro = 0; x->sched.micro < 2 * micro; x->sched.micro++) one_step(x, x->sched.micro % micro == micro - 1);
  if (x->eval) eval_pass(x);
  save_pass(x);
  if (x->tape.rc) return x->tape.rc;
  vf_allocator_reset(a, conf, 0);
  return replay(x, &x->tape, conf, a, r);
}

/* Within a unit everything grows by the same bytes per layer, so x(L) = xb + k (xb - xa)
 * where k counts the further layers per layer step. */
static uint64_t extend(uint64_t xa, uint64_t xb, double k) {
  return xb >= xa ? xb + (uint64_t)(k * (double)(xb - xa)) : xb;
}

/* Live bytes extend linearly, and so, on average, does the allocator's cached and
 * fragmented memory: each layer's backward strands about the same bytes in split blocks.
 * But a few replayed layers see the allocator's jumps (a segment more or less). Slack
 * that shrank between the replays was being filled by the added layers and will jump
 * again: the shorter replay's, higher, figure stands. One that grew is extended, but a linear
 * extension multiplies a jump; static-shape training reserves 5-30% above what it
 * allocates (shared/research/allocator.md §11), so the extended slack is capped there. */
#define SLACK_CAP_PCT 30
static void extend_result(const struct result *ra, struct result *rb, double k) {
  for (int u = 0; u < UNITS; u++) {
    const struct unit_peak *a = &ra->unit[u];
    struct unit_peak *b = &rb->unit[u];
    uint64_t sa = a->reserved - a->allocated, sb = b->reserved - b->allocated;
    uint64_t slack = sb >= sa ? extend(sa, sb, k) : sa;
    b->allocated = extend(a->allocated, b->allocated, k);
    if (slack > b->allocated * SLACK_CAP_PCT / 100) slack = b->allocated * SLACK_CAP_PCT / 100;
    for (int c = 0; c < CAT_SLOTS; c++) b->cat[c] = extend(a->cat[c], b->cat[c], k);
    b->reserved = b->allocated + slack;
  }
}

/* Layer counts replayed: past the first and last layers, whose neighbours differ. */
#define REPLAY_A 3
#define REPLAY_B 6

/* Replays the step with all layers, or with REPLAY_A and REPLAY_B layers extended to all. */
static int replay_layers(struct ctx *x, uint64_t layers, const struct vf_alloc_conf *alloc, struct result *out) {
  struct vf_allocator a;
  int rc = vf_allocator_init(&a, alloc, 0);
  if (rc) return rc;
  if (layers <= x->replay.max) {
    rc = run(x, layers, alloc, &a, out);
  } else {
    struct result ra;
    rc = run(x, REPLAY_A, alloc, &a, &ra);
    if (!rc) rc = run(x, REPLAY_B, alloc, &a, out);
    if (!rc) extend_result(&ra, out, (double)(layers - REPLAY_B) / (REPLAY_B - REPLAY_A));
  }
  vf_allocator_cleanup(&a);
  return rc;
}

/* Batches padded to their longest sample change length from step to step. The caching
 * allocator keeps the blocks it cut for earlier, shorter batches: the longest batch's
 * tensors do not fit in them and take new segments, while smaller requests keep the old
 * blocks split, so they seldom merge back into whole segments. At the longest batch's
 * peak the cache holds up to one more set of the tensors sized by the batch's tokens
 * (shared/research/allocator.md §11: variable shapes reserve more). */
static void replay_strand_shorter_batches(struct result *r) {
  for (int u = 0; u < UNITS; u++) {
    struct unit_peak *pk = &r->unit[u];
    uint64_t stranded = pk->allocated + pk->cat[VF_CAT_ACTIVATIONS] + pk->cat[VF_CAT_TEMPORARIES];
    if (pk->reserved < stranded) pk->reserved = stranded;
  }
}

static uint64_t replay_reserved(const struct result *r) {
  uint64_t top = 0;
  for (int u = 0; u < UNITS; u++)
    if (r->unit[u].reserved > top) top = r->unit[u].reserved;
  return top;
}

/* Paged optimizers keep their states in CUDA unified memory: on the GPU when it has room,
 * so nvidia-smi counts them, but outside PyTorch's allocator and its counters. */
static uint64_t optim_paged_bytes(const struct ctx *x) {
  if (!states_on_gpu(x->s)) return 0;
  uint64_t n = 0;
  for (size_t i = 0; i < x->ps->n; i++) {
    struct state st[5];
    int k = x->ps->v[i].trainable ? tensor_states(x, &x->ps->v[i], st) : 0;
    for (int j = 0; j < k; j++)
      if (st[j].paged) n += st[j].bytes;
  }
  return n;
}

/* The peak falls where live memory is highest: that is where an allocation fails. Reserved
 * memory never shrinks within a step, so its maximum is carried into later phases; the
 * slack is what the allocator holds beyond the live bytes at the peak. */
static void replay_fill(struct vf_estimate *out, const struct result *r, const struct vf_setup *s) {
  int top = UNIT_SETUP;
  out->reserved_peak = replay_reserved(r);
  for (int u = 0; u < UNITS; u++) {
    const struct unit_peak *pk = &r->unit[u];
    enum vf_phase p = unit_phase(u);
    if (pk->allocated > r->unit[top].allocated) top = u;
    if (pk->allocated > out->phase_allocated[p]) out->phase_allocated[p] = pk->allocated;
    if (pk->reserved > out->phase_reserved[p]) out->phase_reserved[p] = pk->reserved;
  }
  const struct unit_peak *pk = &r->unit[top];
  out->allocated_peak = pk->allocated;
  out->peak_phase = unit_phase(top);
  uint64_t live = 0;
  for (int c = 0; c < VF_CAT_COUNT; c++) out->by_category[c] = pk->cat[c];
  out->by_category[VF_CAT_TEMPORARIES] += pk->cat[WEIGHT_TEMPORARIES];
  for (int c = 0; c < VF_CAT_COUNT; c++) live += out->by_category[c];
  out->allocator_slack = out->reserved_peak > live ? out->reserved_peak - live : 0;
  out->context = s->context_bytes;
  out->device_peak = live + out->allocator_slack + out->context;
}

/* Every layer replayed: the allocator's figures are its own, not extrapolated. */
int vf_estimate(const struct vf_model *m, const struct vf_setup *s, const struct vf_profile *p,
                const struct vf_alloc_conf *alloc, struct vf_estimate *out, struct vf_diag *d) {
  return vf_estimate_replaying(m, s, p, alloc, UINT64_MAX, NULL, NULL, out, d);
}

int vf_estimate_quick(const struct vf_model *m, const struct vf_setup *s, const struct vf_profile *p,
                      const struct vf_alloc_conf *alloc, struct vf_estimate *out, struct vf_diag *d) {
  return vf_estimate_replaying(m, s, p, alloc, REPLAY_B, NULL, NULL, out, d);
}

int vf_estimate_timeline(const struct vf_model *m, const struct vf_setup *s, const struct vf_profile *p,
                         const struct vf_alloc_conf *alloc, vf_timeline_fn fn, void *arg,
                         struct vf_estimate *out, struct vf_diag *d) {
  return vf_estimate_replaying(m, s, p, alloc, UINT64_MAX, fn, arg, out, d);
}

/* What a pipeline rank's replay leaves to report. */
struct rank_result {
  struct result r;
  uint64_t rank, layers, paged;
  uint64_t params, trainable_params; /* the whole model's */
};

/* One pipeline rank replayed: its blocks, its share of the parts outside them (the
 * embedding on the first, the head and loss on the last), the micro batches it holds. */
static int replay_rank(struct ctx *x, uint64_t rank, enum vf_lengths lengths, const struct vf_alloc_conf *alloc,
                       struct rank_result *out) {
  const struct vf_setup *s = x->s;
  struct vf_params ps;
  int rc = vf_params_build(&ps, x->m, s, x->p, x->task);
  if (rc) return rc;
  x->pp.has_embedding = rank == 0;
  x->pp.has_head = rank + 1 == s->pp;
  if (s->pp > 1) vf_params_keep_root(&ps, x->pp.has_embedding, x->pp.has_head);
  x->ps = &ps;
  x->pp.stage = (int)rank;
  x->pp.chunks_in_flight = vf_pp_chunks_in_flight(s->pp_schedule, s->pp, x->pp.chunks, x->accumulation, rank);
  x->pp.chunks_apart =
      x->p->pp_torch_pipelining && vf_pp_chunk_backwards_apart(s->pp_schedule, s->pp, x->pp.chunks, x->accumulation);
  out->rank = rank;
  out->layers = vf_pp_rank_layers(x->m->arch.layers, s->pp, x->pp.chunks, rank, x->p->pp_even_layers);
  x->zero.zero3_live = zero3_coordinator(x) ? zero3_live_elems(x, out->layers) : 0;
  x->zero.zero3_sub_group = s->shard == VF_SHARD_ZERO3 && x->p->zero3_sub_group_millions
                           ? zero3_sub_group_elems(x, out->layers) : 0;
  rc = replay_layers(x, out->layers, alloc, &out->r);
  if (!rc && lengths == VF_LENGTHS_VARIED) replay_strand_shorter_batches(&out->r);
  out->paged = optim_paged_bytes(x);
  out->params = ps.total;
  out->trainable_params = ps.trainable;
  x->ps = NULL;
  vf_params_cleanup(&ps);
  return rc;
}

/* The blocks of the rank holding the most, to size the replay's per-layer tables. */
static uint64_t most_layers(const struct ctx *x, const uint64_t *ranks, size_t n) {
  uint64_t most = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t l = vf_pp_rank_layers(x->m->arch.layers, x->s->pp, x->pp.chunks, ranks[i], x->p->pp_even_layers);
    if (l > most) most = l;
  }
  return most;
}

/* Replays the ranks worth replaying and keeps the most loaded (the highest reserved peak);
 * a timeline's listener then hears that rank's replay alone. */
static int replay_ranks(struct ctx *x, enum vf_lengths lengths, const struct vf_alloc_conf *alloc,
                        struct rank_result *best) {
  uint64_t ranks[3];
  size_t n = vf_pp_ranks_to_replay(x->s->pp, ranks);
  vf_timeline_fn listener = x->replay.listener;
  if (n > 1) x->replay.listener = NULL;
  int rc = 0;
  struct rank_result *r = malloc(sizeof *r);
  if (!r) return VF_ENOMEM;
  for (size_t i = 0; i < n && !rc; i++) {
    rc = replay_rank(x, ranks[i], lengths, alloc, r);
    if (!rc && (!i || replay_reserved(&r->r) > replay_reserved(&best->r))) *best = *r;
  }
  x->replay.listener = listener;
  if (!rc && listener && n > 1) rc = replay_rank(x, best->rank, lengths, alloc, r);
  free(r);
  return rc;
}

static void describe_layout(struct vf_estimate *out, const struct ctx *x, const struct rank_result *best) {
  out->pp_schedule = x->s->pp_schedule;
  out->pp_rank = best->rank;
  out->pp_rank_layers = best->layers;
  out->pp_in_flight =
      (double)vf_pp_chunks_in_flight(x->s->pp_schedule, x->s->pp, x->pp.chunks, x->accumulation, best->rank) /
      (double)x->pp.chunks;
  out->sequence_parallel = x->d.sp;
}

int vf_estimate_replaying(const struct vf_model *m, const struct vf_setup *s, const struct vf_profile *p,
                          const struct vf_alloc_conf *alloc, uint64_t replay_max, vf_timeline_fn fn,
                          void *arg, struct vf_estimate *out, struct vf_diag *d) {
  int rc = vf_setup_validate(s, m, d);
  if (rc) return rc;
  memset(out, 0, sizeof *out);
  struct vf_setup resolved = *s;
  vf_setup_resolve(&resolved, m, p);
  if ((rc = vf_layout_validate(&resolved, m, p, d))) return rc;
  if (replay_max < REPLAY_B) replay_max = REPLAY_B;
  struct ctx x = {.m = m, .s = &resolved, .p = p, .task = resolved.task,
                  .replay = {.max = replay_max, .listener = fn, .listener_arg = arg}};
  x.attn.kind = resolved.attention;
  if (p->softcap_eager && m->arch.attn_logit_softcap > 0) x.attn.kind = VF_ATTN_EAGER;
  x.base_trainable = s->method == VF_METHOD_FULL;
  x.layers_train = grads_layers_train(&x);
  x.accumulation = resolved.accumulation;
  x.eval = resolved.eval == VF_EVAL_YES;
  x.pp.chunks = vf_pp_chunks(resolved.pp_schedule, p);
  parallel_dims(&x);
  x.attn.padded = resolved.lengths == VF_LENGTHS_VARIED && p->padding_mask;
  x.attn.sdpa = sdpa_backend(&x);
  x.attn.kv_repeated = m->arch.kv_heads < m->arch.heads && (p->gqa_expand || (!sdpa_grouped(&x) && !raw_mqa(&x)));
  uint64_t ranks[3];
  uint64_t layers = most_layers(&x, ranks, vf_pp_ranks_to_replay(s->pp, ranks));
  size_t replayed = (layers <= replay_max ? layers : REPLAY_B) + 1;
  x.sched.sv = malloc(replayed * sizeof *x.sched.sv);
  x.grads.unsharded = calloc(replayed, sizeof *x.grads.unsharded);
  x.fsdp.held_gather = calloc(replayed, sizeof *x.fsdp.held_gather);
  /* Sized once for a typical replay (a few thousand events), grown if needed. */
  x.tape.ev = array_grow(NULL, &x.tape.cap, 4096, sizeof *x.tape.ev);
  struct rank_result *best = malloc(sizeof *best);
  if (!x.sched.sv || !x.grads.unsharded || !x.fsdp.held_gather || !x.tape.ev || !best) rc = VF_ENOMEM;
  if (!rc) rc = replay_ranks(&x, resolved.lengths, alloc, best);
  free(x.tape.ev);
  free(x.sched.sv);
  free(x.grads.unsharded);
  free(x.fsdp.held_gather);
  free(x.grads.list.id);
  free(x.tape.graph.id);
  free(x.grads.stale.id);
  free(x.pp.outputs.id);
  free(x.autocast.cache.id);
  free(x.opt.foreach_tmp.id);
  if (!rc) {
    replay_fill(out, &best->r, s);
    describe_layout(out, &x, best);
    out->by_category[VF_CAT_OPTIMIZER] += best->paged;
    out->device_peak += best->paged;
    out->params = best->params;
    out->trainable_params = best->trainable_params;
  }
  free(best);
  if (rc) return rc;
  out->attention = x.attn.kind;
  out->accumulation = x.accumulation;
  out->lengths = resolved.lengths;
  out->eval = resolved.eval;
  return 0;
}

static const char *const category_names[VF_CAT_COUNT] = {
    "weights", "gradients", "optimizer", "activations", "temporaries", "runtime"};
static const char *const phase_names[VF_PHASE_COUNT] = {"load", "forward", "loss", "backward",
                                                        "optimizer", "eval", "save"};

const char *vf_category_name(enum vf_category c) {
  return c >= 0 && c < VF_CAT_COUNT ? category_names[c] : "unknown";
}

const char *vf_phase_name(enum vf_phase ph) {
  return ph >= 0 && ph < VF_PHASE_COUNT ? phase_names[ph] : "unknown";
}

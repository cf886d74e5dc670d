/* The optimizer: its states, created at the first step and kept (AdamW, bitsandbytes' 8-bit
 * and paged AdamW, SGD with momentum, Lion, Adafactor; an fp32 master copy; one flat shard
 * per unit where ZeRO or FSDP partitions them), what its step holds at once (foreach
 * AdamW's temporaries, Adafactor's, ZeRO-3's sub groups), and fp16's loss scaler. Sources:
 * bitsandbytes optim/optimizer.py Optimizer2State.init_state and get_state_buffer;
 * torch.optim.Adafactor and transformers' Adafactor; torch/optim/adam.py@v2.13.0
 * _multi_tensor_adam; torch/amp/grad_scaler.py@v2.13.0; torchtune's optimizer_in_bwd:
 * pytorch/torchtune recipes/full_finetune_single_device.py and torchtune/training/memory.py
 * (register_optim_in_bwd_hooks) at v0.6.1. */
#include "base/diag.h"
#include "core/estimate/internal.h"

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
static int bnb_adamw_states(const struct ctx *x, const struct param *p, struct state *out) {
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
static int tensor_states(const struct ctx *x, const struct param *p, struct state out[5]) {
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
typedef int (*tensor_bytes_fn)(const struct ctx *x, const struct param *p, uint64_t out[5]);

/* Which of a unit's trainable tensors a take is for: all, or the root unit's embedding alone,
 * or its other tensors (the head, the final norm). */
enum pick { PICK_ALL, PICK_EMBEDDING, PICK_OTHERS };

static bool picked(const struct param *p, enum pick pick) {
  return p->trainable && (pick == PICK_ALL || p->embedding == (pick == PICK_EMBEDDING));
}

/* Takes what bytes_of gives the picked trainable tensors of unit l: a tensor each (under
 * FSDP2, which shards each tensor, a tensor of each one's shard: torch.optim makes a state
 * like its parameter, torch 2.13 _fsdp_param.py), or when partitioned flat (ZeRO, FSDP1's
 * flat parameters) one shard of the unit's sum, experts counted once per expert-parallel
 * group as layer_param_sum counts them. The ids go to ids when given. */
static void take_unit(struct ctx *x, int32_t l, enum pick pick, tensor_bytes_fn bytes_of, enum vf_category cat,
                      struct ids *ids) {
  size_t begin, end;
  params_layer(x->ps, l, &begin, &end);
  bool flat = x->s->shard != VF_SHARD_NONE && !fsdp_per_tensor(x);
  uint64_t shard = 0, parts = x->s->shard != VF_SHARD_NONE ? x->d.dsize : 1;
  for (size_t i = begin; i < end; i++) {
    const struct param *p = &x->ps->v[i];
    uint64_t bytes[5];
    int k = picked(p, pick) ? bytes_of(x, p, bytes) : 0;
    for (int j = 0; j < k; j++) {
      uint64_t b = bytes[j] * (x->s->shard != VF_SHARD_NONE && p->expert ? x->s->ep : 1);
      if (flat) {
        shard += b;
        continue;
      }
      uint32_t id = tape_take(x, b / parts, cat);
      if (ids) ids_push(x, ids, id);
    }
  }
  if (!shard) return;
  uint32_t id = tape_take(x, shard / x->d.dsize, cat);
  if (ids) ids_push(x, ids, id);
}

/* The same for every unit. */
static void take_per_tensor(struct ctx *x, tensor_bytes_fn bytes_of, enum vf_category cat, struct ids *ids) {
  for (int32_t l = -1; l < (int32_t)x->layers; l++) take_unit(x, l, PICK_ALL, bytes_of, cat, ids);
}

/* A tensor's optimizer states on the GPU (paged ones live in host memory until used). */
static int gpu_state_bytes(const struct ctx *x, const struct param *p, uint64_t out[5]) {
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
uint64_t optim_largest_trainable(const struct ctx *x) {
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

static int sqrt_bytes(const struct ctx *x, const struct param *p, uint64_t out[5]) {
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

static void step_states(struct ctx *x, bool first) {
  if (!states_on_gpu(x->s)) return;
  if (first) create_states(x);
  zero3_step_grads(x);
  if (x->p->foreach_optimizer && x->s->optimizer == VF_OPT_ADAMW)
    foreach_temporaries(x);
  else if (x->s->optimizer == VF_OPT_ADAFACTOR)
    tape_transient(x, optim_largest_trainable(x) * adafactor_step_bytes(x), WEIGHT_TEMPORARIES);
}

/* fp16 autocast trains with a loss scaler (torch/amp/grad_scaler.py@v2.13.0 GradScaler):
 * its first scale(), at the run's first loss, makes the scale (fp32) and the growth
 * tracker (int32) on the GPU, kept for the run; each step's unscale_ makes the inverse
 * scale (a double, its reciprocal, their float) and a found-inf flag, which update() lets
 * go; the gradients are unscaled in place. Scalars, a 512-byte block each. */
static bool scaler_runs(const struct ctx *x) { return x->s->amp == VF_PREC_FP16 && autocast_runs(x); }

void optim_scaler_scale(struct ctx *x) {
  if (!scaler_runs(x) || x->sched.micro != 0) return;
  tape_take(x, 4, VF_CAT_OPTIMIZER);
  tape_take(x, 4, VF_CAT_OPTIMIZER);
}

/* torchtune's optimizer_in_bwd: one optimizer per parameter, stepped by a hook once the
 * parameter's gradient is accumulated, then zero_grad(set_to_none=True) lets the gradient go
 * (memory.py@v0.6.1 register_optim_in_bwd_hooks). The first step creates each tensor's states
 * there, in the backward; the step after the backward has nothing left to do. */
static bool steps_in_backward(const struct ctx *x) { return x->s->optimizer_in_bwd == VF_IN_BWD_YES; }

static void step_in_backward(struct ctx *x, int32_t layer, enum pick pick, struct ids *g) {
  if (!steps_in_backward(x)) return;
  if (!x->opt.states_made && states_on_gpu(x->s)) take_unit(x, layer, pick, gpu_state_bytes, VF_CAT_OPTIMIZER, NULL);
  ids_give(x, g);
}

void optim_layer_in_backward(struct ctx *x, int32_t layer, struct ids *g) { step_in_backward(x, layer, PICK_ALL, g); }

/* The root unit's tensors step as their gradients are complete: with an untied embedding,
 * the head's and the final norm's after the head's backward (at_head), the embedding's last;
 * a tied embedding's only once its second gradient is added in, with the others. */
void optim_root_in_backward(struct ctx *x, bool at_head, struct ids *g) {
  bool split = embedding_grads_late(x);
  if (at_head) {
    if (split) step_in_backward(x, -1, PICK_OTHERS, g);
    return;
  }
  step_in_backward(x, -1, split ? PICK_EMBEDDING : PICK_ALL, g);
}

/* What the step in the backward cannot run with, refused with the reason: a framework
 * without it, adapters (torchtune's LoRA recipes have no optimizer_in_bwd), accumulation
 * (the recipes raise on it: each micro batch would step), and the sharding, pipelines and
 * offload not modelled with it. */
int optim_in_backward_offered(const struct vf_setup *s, const struct vf_profile *p, struct vf_diag *d) {
  const char *why = NULL;
  if (s->optimizer_in_bwd != VF_IN_BWD_YES) return 0;
  if (!p->optimizer_in_bwd)
    return diag_at(d, VF_EINVAL, NULL, UINT64_MAX, "--optimizer-in-bwd yes: %s %s steps its optimizer after the "
                   "backward (torchtune's full fine-tuning recipes step it inside)", p->name, p->release);
  if (s->method != VF_METHOD_FULL) why = "it runs in full fine-tuning only (torchtune's LoRA recipes have no optimizer_in_bwd)";
  else if (s->accumulation > 1) why = "it needs --accumulation 1 (torchtune raises 'Gradient accumulation is not supported with optimizer in bwd')";
  else if (s->amp == VF_PREC_FP16) why = "fp16's GradScaler unscales the gradients before the step, which the hooks run before";
  else if ((s->shard != VF_SHARD_NONE && s->shard != VF_SHARD_FSDP) || s->pp > 1 || (s->offload & VF_OFFLOAD_OPTIMIZER))
    why = "it is modelled on one GPU or under FSDP, without a pipeline or optimizer offload";
  if (!why) return 0;
  return diag_at(d, VF_EINVAL, NULL, UINT64_MAX, "--optimizer-in-bwd yes: %s", why);
}

void optim_step(struct ctx *x) {
  bool first = !x->opt.states_made, scaler = scaler_runs(x);
  x->opt.states_made = true;
  if (steps_in_backward(x)) return;
  uint32_t wide = scaler ? tape_take(x, 8, VF_CAT_TEMPORARIES) : 0;
  uint32_t inverse = scaler ? tape_take(x, 8, VF_CAT_TEMPORARIES) : 0;
  tape_give(x, wide);
  uint32_t scale = scaler ? tape_take(x, 4, VF_CAT_TEMPORARIES) : 0;
  tape_give(x, inverse);
  uint32_t found_inf = scaler ? tape_take(x, 4, VF_CAT_TEMPORARIES) : 0;
  step_states(x, first);
  tape_give(x, scale);
  tape_give(x, found_inf);
}

/* Paged optimizers keep their states in CUDA unified memory: on the GPU when it has room,
 * so nvidia-smi counts them, but outside PyTorch's allocator and its counters. */
uint64_t optim_paged_bytes(const struct ctx *x) {
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

/* The training loop as the replay writes it: the model loaded, each micro batch's forward,
 * loss and backward, the optimizer step and zero_grad once an accumulation cycle ends, the
 * validation after the steps with litgpt's sample generation, and the checkpoint's save.
 * Each micro batch is marked into the stretches the extension to all layers works on.
 * Sources: litgpt's validate(), generate_example (model.py set_kv_cache, build_kv_cache,
 * build_mask_cache) and main(); the Trainer's evaluate(); torch 2.13
 * torch/csrc/autograd/engine.cpp validate_outputs; CublasHandlePool.cpp
 * getChosenWorkspaceSize; torch/distributed/fsdp/_state_dict_utils.py; ZeRO-3's 16-bit save. */
#include "core/estimate/internal.h"

/* The index in its optimizer step of the micro batch replayed: the replay's first, middle
 * and last micro batches stand for the first, every middle one and the last. */
uint64_t schedule_micro_index(const struct ctx *x) {
  uint64_t m = x->accumulation, per = m < 3 ? m : 3, j = (uint64_t)x->sched.micro % per;
  return j + 1 == per ? m - 1 : j;
}

/* Micro batches past the second optimizer step are marked as the second step's, which
 * keeps the highest of them. */
static void mark(struct ctx *x, enum stretch st) {
  int per = x->accumulation < 3 ? (int)x->accumulation : 3;
  int slot = x->sched.micro < per ? x->sched.micro : per + x->sched.micro % per;
  tape_push(&x->tape, OP_UNIT, 0, 0, 0, (uint8_t)(1 + slot * ST_COUNT + st));
}

/* The stretch of a layer in a pass: its bottom, middle or top one. */
static enum stretch layer_stretch(const struct ctx *x, uint64_t layer, enum stretch bottom) {
  if (!layer) return bottom;
  return (enum stretch)(bottom + (layer + 1 == x->layers ? 2 : 1));
}

/* cuBLAS keeps one workspace per handle and stream, made at the handle's first matmul and
 * kept: the forward's thread and the autograd engine's each have one
 * (CublasHandlePool.cpp getChosenWorkspaceSize: 32 MiB from Hopper on, 8 MiB + 128 KiB
 * before). A GPU not named is taken for a current one, as the tracer takes it. */
void schedule_workspace(struct ctx *x, uint32_t *made) {
  if (*made) return;
  bool hopper = x->s->gpu_cc_major >= 9 || x->s->gpu_cc_major == 0;
  *made = tape_take(x, hopper ? 32u << 20 : 4096 * 1024 * 2 + 16 * 1024 * 8, VF_CAT_RUNTIME);
}

/* Everything that persists across steps, made before the first: weights, DDP buckets
 * (the cuBLAS workspaces come with the first matmuls, schedule_workspace). */
static void persistent(struct ctx *x) {
  bool sharded_w = vf_shard_weights(x->s->shard), wrapped = fsdp1_wrap(x);
  for (int32_t l = -1; l < (int32_t)x->layers; l++) {
    if (!sharded_w) layer_params(x, l, NULL);
    else if (!wrapped && !(x->s->offload & VF_OFFLOAD_PARAMS))
      tape_take(x, layer_sum(x, l, false, true, true) / x->d.dsize, VF_CAT_WEIGHTS);
    /* ZeRO-3's persistent parameters, gathered next to their partition. */
    tape_take(x, zero3_gathered_elems(x, l, true) * x->d.c, VF_CAT_WEIGHTS);
    tape_take(x, attention_rope_tables(x, l), VF_CAT_WEIGHTS);
  }
  zero3_ipg_buffers(x);
  fsdp_load_full_state_dict(x);
  /* The swapped-out embedding stays referenced (litgpt's main() keeps it in a variable and
   * the optimizer holds its weight): a second embedding-sized weight. */
  if (embedding_stable(x)) tape_take(x, embedding_bytes(x), VF_CAT_WEIGHTS);
  ddp_init(x);
}

/* The layers' forward, from the embeddings' output (input); returns the last layer's. */
static uint32_t forward_layers(struct ctx *x, uint32_t input) {
  struct saved *sv = x->sched.sv;
  uint64_t stream = x->d.Ts * x->d.h * x->d.c;
  for (uint64_t l = 0; l < x->layers; l++) {
    mark(x, layer_stretch(x, l, ST_FORWARD_BOTTOM));
    uint32_t gathered = fsdp_gather(x, (int32_t)l);
    layer_forward(x, &sv[l], (int32_t)l);
    fsdp_reshard(x, gathered);
    layer_offload(x, &sv[l]);
    uint32_t out = tape_take(x, stream, VF_CAT_ACTIVATIONS);
    tape_give(x, input);
    input = out;
  }
  return input;
}

static void backward_layers(struct ctx *x, struct ids *g) {
  for (uint64_t l = x->layers; l-- > 0;) {
    mark(x, layer_stretch(x, l, ST_BACKWARD_BOTTOM));
    if (!adapter_outside_graph(x, (int32_t)l)) layer_backward(x, (int32_t)l, &x->sched.sv[l], g);
    pipe_chunk_post_backward(x, l, g);
  }
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
  pipe_micro_begins(x);
  fsdp_forward_begins(x);
  uint64_t stream = x->d.Ts * x->d.h * x->d.c;
  /* A normalizing embedding's norm keeps the looked-up rows; its output is the stream. */
  uint32_t embedded = embedding_stable(x) ? tape_take(x, stream, VF_CAT_ACTIVATIONS) : 0;
  struct embedding_kept emb = embedding_forward(x);
  if (fsdp_embedding_unit(x)) fsdp_reshard_root(x);
  uint32_t input = tape_take(x, stream, VF_CAT_ACTIVATIONS);
  schedule_workspace(x, &x->sched.forward_workspace);
  input = forward_layers(x, input);
  layer_offload_flush(x);
  mark(x, ST_LOSS);
  fsdp_gather_root_part(x, false);
  struct loss_kept loss = {0};
  uint32_t root_grads = 0;
  if (x->pp.has_head) loss = head_forward(x, &sv[x->layers]);
  optim_scaler_scale(x);
  fsdp_forward_returned(x);
  /* The rank's other model chunks send theirs on too. */
  pipe_hold_output(x, (x->pp.chunks - x->pp.has_head) * stream);
  autocast_region_ends(x);
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
  backward_layers(x, g);
  mark(x, ST_ROOT_BACKWARD);
  fsdp_gather_root_part(x, true);
  fsdp_drop_prefetched(x);
  grad_stream = embedding_post_backward(x, grad_stream, emb);
  if (embedded) embedding_stable_backward(x, grad_stream, embedded);
  else tape_give(x, grad_stream);
  pipe_hold_input_grads(x, stream);
  /* The embedding's gradient is the stage's last. */
  root_grads = grads_finish_root(x, g, root_grads);
  optim_root_in_backward(x, false, g);
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
  optim_step(x);
  grads_zero(x);
  /* The loop reads the loss on the host (profile field host_waits_each_step). */
  if (x->p->host_waits_each_step) tape_wait(x, tape_event(x));
}

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

/* Validation after the steps (litgpt's validate(), the Trainer's evaluate()): the model in
 * eval mode under no_grad, so each layer's tensors go as soon as the layer is done, and the
 * loss over the whole logits at once (litgpt calls chunked_cross_entropy with chunk_size 0);
 * the optimizer's states, and gradients a late zero_grad has not freed, are still there. */
static void eval_pass(struct ctx *x, bool then_generate) {
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
  head_eval_loss(x);
  tape_drop_graph(x);
  tape_give(x, input);
  tape_give(x, root);
  if (then_generate) generate_sample(x);
}

/* Saving a checkpoint reads the weights where they are; only sharded weights are gathered.
 * ZeRO-3's 16-bit save gathers module by module; FSDP's as the loop saves (profile field
 * save_gathers). Whole units, one at a time inside the root's: FSDP1's full state dict
 * unshards each unit in its own state-dict pre-hook and reshards it in its post-hook
 * (torch/distributed/fsdp/_state_dict_utils.py). One tensor at a time: FSDP2's full state
 * dict makes each parameter whole in its stored dtype (DTensor.full_tensor; torchtune
 * up-casts a gathered NF4 weight to bf16 next to it) and moves it to the CPU before the
 * next. A sharded checkpoint gathers nothing. */
static void save_units(struct ctx *x) {
  uint32_t root = tape_take_on(x, fsdp_gather_bytes(x, -1), VF_CAT_WEIGHTS, STREAM_ALL_GATHER);
  for (uint64_t l = 0; l < x->layers; l++)
    tape_give(x, tape_take_on(x, fsdp_gather_bytes(x, (int32_t)l), VF_CAT_WEIGHTS, STREAM_ALL_GATHER));
  tape_give(x, root);
}

static void save_tensors(struct ctx *x) {
  for (int32_t l = -1; l < (int32_t)x->layers; l++) {
    size_t begin, end;
    params_layer(x->ps, l, &begin, &end);
    for (size_t i = begin; i < end; i++) {
      const struct param *p = &x->ps->v[i];
      tape_transient(x, p->bytes + (p->quantized ? p->numel * 2 : 0), VF_CAT_WEIGHTS);
    }
  }
}

static void save_pass(struct ctx *x) {
  tape_push(&x->tape, OP_UNIT, 0, 0, 0, UNIT_SAVE);
  if (!vf_shard_weights(x->s->shard)) return;
  enum vf_save_gathers how = vf_shard_fsdp(x->s->shard) ? x->p->save_gathers : VF_SAVE_UNITS;
  if (how == VF_SAVE_UNITS) save_units(x);
  else if (how == VF_SAVE_TENSORS) save_tensors(x);
}

/* The steps replayed: two (states appear in the first, the second has everything), or
 * VF_LENGTH_STEPS where batches are padded to lengths drawn from a distribution. */
static int steps(const struct ctx *x) {
  return x->s->lengths == VF_LENGTHS_VARIED ? VF_LENGTH_STEPS : 2;
}

/* Which of the n drawn lengths a micro batch is padded to. Drawn, the longest comes last,
 * after a batch of another drawn length; the range's second replay takes the others in the
 * other order. A loop that puts the longest sample first (profile field longest_first)
 * runs it before any other micro batch, and the drawn ones after it. */
static uint64_t drawn_index(const struct ctx *x, int micro, int n) {
  int longest = n - 1, rest = micro;
  if (x->p->longest_first) {
    if (!micro) return (uint64_t)longest;
    rest = micro - 1;
  } else if (micro == longest) {
    return (uint64_t)longest;
  }
  return (uint64_t)(x->sched.lengths_reversed ? n - 2 - rest : rest);
}

/* A replay's tape: the model loaded, the optimizer steps, the evaluation and the save. */
void schedule_write(struct ctx *x) {
  tape_push(&x->tape, OP_UNIT, 0, 0, 0, UNIT_SETUP);
  persistent(x);
  uint32_t from = x->p->empty_cache_before_training;
  if (from && x->s->gpus >= from) tape_empty_cache(x);
  /* A loop that validates before its first step (profile field validates_first) cuts the
   * cache for a validation batch of the longest length first. */
  if (x->eval && x->p->validates_first) eval_pass(x, false); /* litgpt generates after its later ones only */
  /* With accumulation each step is up to three micro batches: the first makes the
   * gradients, a middle one adds into them still accumulating (under FSDP's no_sync every
   * unit's whole gradient is alive then, next to the one being added), the last adds and
   * ends the step. All further micro batches look like the middle one. Each micro batch is
   * padded to its own length (drawn_index). */
  int micro = x->accumulation < 3 ? (int)x->accumulation : 3, n = steps(x) * micro;
  const struct vf_setup *s = x->s;
  for (x->sched.micro = 0; x->sched.micro < n; x->sched.micro++) {
    uint64_t k = drawn_index(x, x->sched.micro, n);
    parallel_length(x, vf_length_dist_batch(&s->length_dist, s->batch, s->seq, k, (uint64_t)n));
    one_step(x, x->sched.micro % micro == micro - 1);
  }
  if (x->eval) eval_pass(x, true);
  save_pass(x);
}

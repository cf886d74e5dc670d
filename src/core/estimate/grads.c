/* The gradients: made whole, added into while micro batches accumulate, reduce-scattered
 * to a shard (ZeRO-2, ZeRO-3, FSDP), held whole under FSDP's no_sync, concatenated from
 * FSDP1's flat parts, and let go or zeroed by zero_grad. Sources: torch 2.13
 * distributed/fsdp/_runtime_utils.py (_post_backward_hook, _reduce_grad) and
 * _flat_param.py (_validate_tensors_to_flatten, _use_unsharded_views); FSDP2 _fsdp_param.py
 * (init_dtype_attrs, accumulate_unsharded_grad_if_needed) and _fsdp_collectives.py
 * (foreach_reduce); torch/csrc/autograd/functions/accumulate_grad.h; Lightning's closure. */
#include "core/estimate/internal.h"

/* Gradients reduce-scattered to a shard: under ZeRO-2 and wherever the weights are sharded. */
bool grads_sharded(const struct vf_setup *s) {
  return s->shard == VF_SHARD_ZERO2 || vf_shard_weights(s->shard);
}

/* FSDP under no_sync(): the micro batches that accumulate keep whole, unsharded
 * gradients; the last one adds into them and reduce-scatters them to the shard. */
bool grads_no_sync(const struct ctx *x) {
  return (x->p->fsdp_no_sync && vf_shard_fsdp(x->s->shard) && x->accumulation > 1) || pipe_fsdp(x);
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
bool grads_layers_train(const struct ctx *x) {
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
  params_layer(x->ps, -1, &begin, &end);
  for (size_t i = begin; i < end; i++)
    if (x->ps->v[i].trainable && x->ps->v[i].embedding == embedding) n += x->ps->v[i].numel;
  return n;
}

/* A sharded root's unsharded gradients: an untied embedding's is made only by its own
 * backward, the pass's last, not with the head's (FSDP2's root reduces both at the pass's
 * end, its post-backward; FSDP1's flat root is grads_flat's own case). */
static bool sharded_embedding_grad_late(const struct ctx *x) {
  return x->pp.has_head && x->pp.has_embedding && !head_tied(x) && grads_sharded(x->s) && !grads_flat(x) &&
         !grads_no_sync(x);
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

/* The bytes per element of the gradients autograd makes for a weight: a sharded unit's
 * gathered weights' (unsharded_grad_bytes), else the weight's own. */
uint64_t grads_autograd_bytes(const struct ctx *x) {
  return vf_shard_weights(x->s->shard) ? unsharded_grad_bytes(x) : x->d.g;
}

/* The gradient parts of `elems` elements a flat unit holds until its concatenation (0
 * when not flat). */
static uint32_t flat_parts(struct ctx *x, uint64_t elems) {
  return grads_flat(x) ? tape_take(x, elems * unsharded_grad_bytes(x), VF_CAT_GRADIENTS) : 0;
}

/* The stream FSDP2 makes a unit's reduce-scatter input on: the computation stream's from
 * torch 2.5 (profile field fsdp2_reduce_input_compute_stream), the reduce-scatter's before. */
static uint8_t fsdp2_input_stream(const struct ctx *x) {
  return x->p->fsdp2_reduce_input_compute_stream ? STREAM_COMPUTE : STREAM_REDUCE_SCATTER;
}

/* Where the gradients of a layer (of the root's part, as hold_unsharded) are held. */
static struct ids *held_list(struct ctx *x, int32_t layer, int part) {
  return part == 1 && fsdp_embedding_unit(x) ? &x->grads.embedding_unit : &x->grads.unsharded[layer + 1];
}

/* Reduce-scatters the gradients held of a layer (of the root's part: the embedding's or the
 * others', 1 or 0; -1: all) to its shard. FSDP2 first copies them into one reduce-scatter
 * input and lets them go (torch 2.13 _fsdp_collectives.py foreach_reduce,
 * foreach_reduce_scatter_copy_in); FSDP1's flat gradient is that input. */
static void reduce_held(struct ctx *x, int32_t layer, int part, struct ids *g) {
  struct ids *held = held_list(x, layer, part);
  if (!held->n) return;
  uint64_t elems = part < 0 ? layer_grad_sum(x, layer, true) : root_grad_elems(x, part == 1);
  uint64_t whole = elems * unsharded_grad_bytes(x);
  uint32_t input = grads_flat(x) ? 0 : tape_take_on(x, whole, WEIGHT_TEMPORARIES, fsdp2_input_stream(x));
  if (input) ids_give(x, held);
  ids_push(x, g, tape_take(x, elems * x->d.g / x->d.dsize, VF_CAT_GRADIENTS));
  ids_give(x, held); /* FSDP1's flat gradient goes once reduced (_runtime_utils.py _reduce_grad) */
  tape_give(x, input);
}

void grads_reduce_unsharded(struct ctx *x, int32_t layer, struct ids *g) { reduce_held(x, layer, -1, g); }

/* FSDP2's unsharded gradients are its parameters' own, one tensor each, which autograd
 * makes and AccumulateGrad keeps, or adds the next micro batch's into in place and lets it
 * go (torch 2.13 _fsdp_param.py leaves them on unsharded_param.grad; accumulate_grad.h);
 * FSDP1's are its flat parameter's, one tensor for the unit (grads_flat). Those of a
 * layer's parameters (of the root's: the embedding's or the others', part 1 or 0; -1: all)
 * held, or added in where the last micro batch's are. */
static void hold_unsharded(struct ctx *x, int32_t layer, int part, bool first) {
  struct ids *held = held_list(x, layer, part);
  uint64_t bytes_per_elem = unsharded_grad_bytes(x);
  if (grads_flat(x)) {
    uint64_t full = layer_grad_elems(x, layer) * bytes_per_elem;
    if (first) ids_push(x, held, tape_take(x, full, VF_CAT_GRADIENTS));
    else tape_transient(x, full, VF_CAT_GRADIENTS); /* the new whole, added in */
    return;
  }
  size_t begin, end;
  params_layer(x->ps, layer, &begin, &end);
  for (size_t i = end; i-- > begin;) { /* the backward reaches the last one used first */
    const struct param *p = &x->ps->v[i];
    if (!p->trainable && (!x->layers_train || layer < 0)) continue;
    if (part >= 0 && p->embedding != (part == 1)) continue;
    if (first) ids_push(x, held, tape_take(x, p->numel * bytes_per_elem, VF_CAT_GRADIENTS));
    else tape_transient(x, p->numel * bytes_per_elem, VF_CAT_GRADIENTS);
  }
}

/* Under no_sync a root unit with the head is FSDP2's to reduce once the embedding's
 * gradient is in too (_fsdp_state.py _root_post_backward_final_callback): the embedding's
 * gradient is held then (no_sync_root_finish), the others' at the head's backward. */
static bool no_sync_root_late(const struct ctx *x, int32_t layer) {
  return layer < 0 && x->pp.has_head && grads_no_sync(x) && !grads_flat(x) && !pipe_fsdp(x);
}

static void no_sync_grads(struct ctx *x, int32_t layer, struct ids *g) {
  if (pipe_grads_deferred(x, layer)) return;
  uint64_t elems = layer_grad_elems(x, layer);
  /* FSDP2 accumulates in the reduce dtype: the gathered weights' gradients arrive in the
   * compute dtype and are added into it (_fsdp_param.py accumulate_unsharded_grad_if_needed). */
  uint32_t fresh = pipe_fsdp(x) && x->d.c < x->d.g ? tape_take(x, elems * x->d.c, VF_CAT_GRADIENTS) : 0;
  bool late = no_sync_root_late(x, layer);
  int part = late ? 0 : -1;
  bool first = late ? !x->grads.kept : !x->grads.unsharded[layer + 1].n;
  /* A later micro batch's compute-dtype gradient is added into the kept one as it is. */
  if (first || !fresh) hold_unsharded(x, layer, part, first);
  tape_give(x, fresh);
  /* Accelerate's norm-and-head unit (fsdp_embedding_unit) is reduced at its post-backward. */
  if (x->sched.last_micro && !pipe_fsdp(x) && (!late || fsdp_embedding_unit(x))) reduce_held(x, layer, part, g);
}

/* The root's gradients under no_sync once the embedding's backward is done (root: what it
 * returned). A tied weight's gradient is the sum autograd made of the head's and the
 * embedding's, which AccumulateGrad keeps, or adds into the kept one. Returns what the
 * caller lets go. */
static uint32_t no_sync_root_finish(struct ctx *x, struct ids *g, uint32_t root) {
  bool first = !x->grads.kept;
  if (!head_tied(x)) {
    hold_unsharded(x, -1, 1, first);
  } else if (first) {
    ids_push(x, held_list(x, -1, -1), root);
    root = 0;
  }
  if (x->sched.last_micro) reduce_held(x, -1, fsdp_embedding_unit(x) ? 1 : -1, g);
  return root;
}

/* A unit's gradients reduce-scattered to its shard. Each micro batch is reduce-scattered
 * anew; accumulating, its shard is added into the kept one (torch 2.13
 * _fsdp_collectives.py foreach_reduce: sharded_param.grad._local_tensor +=
 * new_sharded_grad) and goes. */
static void reduce_to_shard(struct ctx *x, int32_t layer, struct ids *g) {
  uint64_t shard = layer_grad_sum(x, layer, true) * x->d.g / x->d.dsize;
  uint32_t reduced = tape_take_on(x, shard, VF_CAT_GRADIENTS, STREAM_REDUCE_SCATTER);
  if (x->grads.kept) tape_give(x, reduced);
  else ids_push(x, g, reduced);
}

/* FSDP2's root unit is reduce-scattered by its post-backward, once every gradient of the
 * pass has arrived (torch 2.13 _fsdp_state.py _root_post_backward_final_callback runs the
 * post-backward of every group not yet reduced), after the embedding's: the head's and a
 * tied embedding's gradients are summed first, and the shard is made after. */
static bool root_reduced_last(const struct ctx *x) {
  return vf_shard_fsdp(x->s->shard) && !grads_flat(x) && x->pp.has_head && !grads_no_sync(x);
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
  if (x->p->grad_buffer_fp32) return 0; /* accumulated into the persistent buffer (ddp_init) */
  if (grads_no_sync(x)) {
    no_sync_grads(x, layer, g);
    /* A tied weight's first gradient, the head's, waits for the embedding's to be summed. */
    bool head_part = no_sync_root_late(x, layer) && head_tied(x);
    return head_part ? tape_take(x, root_grad_elems(x, true) * unsharded_grad_bytes(x), VF_CAT_GRADIENTS) : 0;
  }
  if (!grads_sharded(x->s)) {
    if (!x->grads.kept) layer_params(x, layer, g); /* else added into the last micro batch's */
    return 0;
  }
  uint64_t late = layer < 0 && sharded_embedding_grad_late(x) ? root_grad_elems(x, true) : 0;
  uint64_t full = (layer_grad_elems(x, layer) - late) * unsharded_grad_bytes(x);
  /* FSDP1's flat gradient is autograd's, made on the computation stream; its
   * post-backward hook records its use on the post-backward stream, which reduce-scatters
   * it, before letting it go (torch 2.13 _runtime_utils.py _post_backward_hook:
   * _no_dispatch_record_stream(autograd_computed_grad, state._post_backward_stream)).
   * FSDP2's is its reduce-scatter input, made on fsdp2_input_stream. */
  bool recorded = fsdp1_streams(x);
  uint8_t stream = recorded ? STREAM_COMPUTE : fsdp_per_tensor(x) ? fsdp2_input_stream(x) : STREAM_REDUCE_SCATTER;
  uint32_t unsharded = tape_take_on(x, full, WEIGHT_TEMPORARIES, stream);
  give_parts(x, parts);
  if (layer < 0 && root_reduced_last(x)) return unsharded;
  reduce_to_shard(x, layer, g);
  if (keep_unsharded) return unsharded;
  if (recorded) tape_record(x, unsharded, STREAM_REDUCE_SCATTER);
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

/* A layer's gradients, at the end of its backward. */
void grads_layer(struct ctx *x, int32_t layer, struct ids *g) {
  uint32_t parts[2] = {flat_parts(x, layer_grad_elems(x, layer)), 0};
  layer_grads_from(x, layer, g, false, parts);
}

/* The root unit's gradients the head's backward makes: a flat unit's head part, which waits
 * for the embedding's (grads_finish_root); else its gradients, with the unsharded buffer
 * returned to be freed once the backward is done. */
uint32_t grads_head(struct ctx *x, struct ids *g) {
  return grads_flat(x) ? flat_parts(x, root_grad_elems(x, false)) : layer_grads(x, -1, g, true);
}

/* Accumulating into whole gradients kept from the last micro batch: each new gradient is
 * made beside its kept one, which AccumulateGrad then adds it into in place
 * (torch/csrc/autograd/functions/accumulate_grad.h). */
bool grads_accumulating_in_place(const struct ctx *x) {
  return x->grads.kept && !grads_sharded(x->s) && !grads_flat(x) && !grads_no_sync(x);
}

/* The root unit's gradients once the embedding's has arrived (early: what the head's
 * backward made of them). Returns what the caller frees when the backward is done. */
uint32_t grads_finish_root(struct ctx *x, struct ids *g, uint32_t early) {
  if (!grads_flat(x) && x->pp.has_head) {
    uint64_t late = sharded_embedding_grad_late(x) ? root_grad_elems(x, true) * unsharded_grad_bytes(x) : 0;
    uint32_t embedding = tape_take_on(x, late, WEIGHT_TEMPORARIES, STREAM_REDUCE_SCATTER);
    uint32_t root = embedding_backward(x, early);
    if (no_sync_root_late(x, -1)) root = no_sync_root_finish(x, g, root);
    if (root_reduced_last(x)) reduce_to_shard(x, -1, g);
    tape_give(x, embedding);
    return root;
  }
  if (!grads_flat(x)) {
    uint32_t whole = layer_grads(x, -1, g, true);
    embedding_backward(x, 0); /* a first pipeline stage's: the sort buffers, nothing tied */
    return whole;
  }
  uint64_t elems = root_grad_elems(x, true) + (x->pp.has_head ? 0 : root_grad_elems(x, false));
  uint32_t parts[2] = {flat_parts(x, elems), early};
  return layer_grads_from(x, -1, g, true, parts);
}

/* After the optimizer step. */
void grads_zero(struct ctx *x) {
  struct ids *g = &x->grads.list;
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

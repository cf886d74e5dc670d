/* The weights sharded training gathers: FSDP's units (FSDP1's flat parameters, FSDP2's
 * all-gather buffers and backward prefetch, the root unit and accelerate's units outside
 * the layers), resharded after their forward or backward or kept gathered, each unit's
 * post-backward, and the full state dict Lightning loads into a sharded model; ZeRO-3's
 * coordinator gathers through the same calls (its figures are zero.c's). The gradients
 * FSDP reduces are grads.c's. Sources: torch 2.13 _fsdp_collectives.py
 * (foreach_all_gather_copy_out), _fsdp_param_group.py (wait_for_unshard,
 * _backward_prefetch), _fsdp_state.py (_post_forward, _lazy_init), _fully_shard.py
 * (auto_reshard_after_forward); lightning/fabric/strategies/fsdp.py _load_raw_module_state;
 * torch/nn/modules/module.py. */
#include <stdlib.h>

#include "core/estimate/internal.h"

/* Whether torch's FSDP1 shards the weights: flat parameters (profile field fsdp_flat_params)
 * wrapped by FSDP itself, not a pipeline's or ZeRO-3's own gatherer. */
static bool fsdp1(const struct ctx *x) {
  return vf_shard_fsdp(x->s->shard) && x->p->fsdp_flat_params && !pipe_fsdp(x) && !zero3_coordinator(x);
}

/* FSDP2 shards each tensor apart (torch 2.13 fully_shard, _fsdp_param.py), where FSDP1
 * flattens a unit's (profile field fsdp_flat_params). */
bool fsdp_per_tensor(const struct ctx *x) { return vf_shard_fsdp(x->s->shard) && !x->p->fsdp_flat_params; }

/* Bytes of one parameter gathered: its elements in the compute dtype (FSDP's param_dtype,
 * ZeRO-3's 16-bit partitions); a 4-bit weight in the form it is stored and sharded in:
 * bitsandbytes' packed data in a 16-bit quant_storage, which FSDP1 flattens without the
 * quantization state (param_tensor_bytes); torchao's NF4Tensor all-gathers its packed data
 * and scalers (nf4tensor.py fsdp_pre_all_gather). */
static uint64_t gathered_bytes(const struct ctx *x, const struct param *p) {
  if (!p->quantized) return p->numel * x->d.c;
  return fsdp1(x) ? param_tensor_bytes(p) : p->bytes;
}

/* Bytes gathered of a layer's weights (-1: the root's), or of the root's embedding weights
 * or its others (part 1 or 0; -1: all). */
static uint64_t gather_sum(const struct ctx *x, int32_t layer, int part) {
  uint64_t n = 0;
  size_t begin, end;
  params_layer(x->ps, layer, &begin, &end);
  for (size_t i = begin; i < end; i++) {
    const struct param *p = &x->ps->v[i];
    if (!zero3_persists(x, p) && (part < 0 || p->embedding == (part == 1))) n += gathered_bytes(x, p);
  }
  return n;
}

/* Sharded training gathers a layer's full weights for its forward and backward. */
uint64_t fsdp_gather_bytes(const struct ctx *x, int32_t layer) {
  return vf_shard_weights(x->s->shard) ? gather_sum(x, layer, -1) : 0;
}

/* Accelerate's FSDP2 units outside the layers (profile field fsdp_embedding_unit): an
 * untied input embedding alone, resharded after its forward and gathered again for its
 * backward; the final norm and head together, gathered at the norm, reduced and resharded
 * once the head's backward is done. */
bool fsdp_embedding_unit(const struct ctx *x) {
  return x->p->fsdp_embedding_unit && fsdp_per_tensor(x) && !head_tied(x) &&
         x->pp.has_embedding && x->pp.has_head && !pipe_fsdp(x);
}

/* Bytes gathered of the root's embedding weights, or of its others. */
static uint64_t root_part_bytes(const struct ctx *x, bool embedding) { return gather_sum(x, -1, embedding); }

/* FSDP2 all-gathers a unit into one buffer and copies each parameter out of it (torch 2.13
 * _fsdp_collectives.py foreach_all_gather_copy_out): both exist until the copy-out ends. In
 * the forward, wait_for_unshard (_fsdp_param_group.py) keeps the buffer (all_gather_state)
 * to overlap its copy-out with the next all-gather, and frees it as the next unit's
 * wait_for_unshard returns (its local prev_all_gather_state holds it through that
 * copy-out); the root's post-forward frees the last (_fsdp_state.py _post_forward). In the
 * backward and checkpointed recomputation it goes once its copy-out is done. FSDP1 gathers
 * into the flat parameter itself; over one GPU FSDP2 copies without a buffer. */
static bool fsdp2_buffers(const struct ctx *x) {
  return fsdp_per_tensor(x) && x->d.dsize > 1;
}

static uint32_t fsdp1_unshard(struct ctx *x, int32_t layer);

/* In the backward each unit's pre-backward, its copy-out done, all-gathers the unit that ran
 * its forward before it (_fsdp_param_group.py _backward_prefetch, the default): that buffer
 * waits for its unit's own pre-backward. The root's pre-backward prefetches the last layer,
 * the first layer's an embedding unit (-1). */
void fsdp_backward_prefetch(struct ctx *x, int32_t layer) {
  if (fsdp1_streams(x) && layer >= 0) {
    x->fsdp.prefetched = fsdp1_unshard(x, layer);
    return;
  }
  uint64_t bytes = layer >= 0 ? fsdp_gather_bytes(x, layer) : fsdp_embedding_unit(x) ? root_part_bytes(x, true) : 0;
  if (fsdp2_buffers(x) && !pipe_fsdp(x))
    x->fsdp.prefetched = tape_take_on(x, bytes, VF_CAT_WEIGHTS, STREAM_ALL_GATHER);
}

/* FSDP1 on its streams (torch 2.13 distributed/fsdp/_runtime_utils.py _unshard, _reshard,
 * _pre_backward_hook; _flat_param.py _free_unsharded_flat_param; _limiter_utils.py): a
 * unit is all-gathered on the unshard stream; resharding records its use on the
 * computation stream and frees it, so its block returns to the cache only once the
 * computation stream's work up to there is done. With limit_all_gathers (True by default
 * since torch 2.1, and left so by accelerate, Lightning and Fabric) each reshard records an
 * event and each unshard first waits for the one two reshards back (_FreeEventQueue, two
 * all-gathers in flight): that wait is where the host learns the work is done. In the
 * backward a unit's pre-backward prefetches the next unit of the backward as soon as its
 * own is gathered (backward_prefetch BACKWARD_PRE, the default). */
bool fsdp1_streams(const struct ctx *x) { return fsdp1(x) && x->d.dsize > 1; }

/* Bytes of a layer's quantization state (-1: the root's): FSDP1 leaves it whole on each GPU. */
static uint64_t quant_state_sum(const struct ctx *x, int32_t layer) {
  size_t begin, end;
  params_layer(x->ps, layer, &begin, &end);
  uint64_t n = 0;
  for (size_t i = begin; i < end; i++) n += x->ps->v[i].quant_state_bytes;
  return n;
}

/* Bytes of an FSDP1 unit's flat parameter, unsharded, or as the GPU's share holds its
 * experts (sharded). */
static uint64_t unit_bytes(const struct ctx *x, int32_t layer, bool sharded) {
  return layer_sum(x, layer, false, true, sharded) - quant_state_sum(x, layer);
}

/* FSDP1's pre-unshard (torch 2.13 _flat_param.py pre_unshard, _use_low_precision_shard;
 * _runtime_utils.py _init_streams, _unshard): a shard kept in another dtype than the one
 * gathered (MixedPrecision's param_dtype) is cast, or else one kept on the host
 * (CPUOffload(offload_params)) copied, into a new tensor on a stream of its own, the
 * pre-unshard stream. The all-gather reads it on another stream (the process group's
 * before torch 2.8, the unshard stream after) and it is freed once gathered. Bytes of
 * that copy, 0 where the shard is gathered as it is. */
static uint64_t pre_unshard_bytes(const struct ctx *x, int32_t layer, uint64_t gathered) {
  uint64_t kept = unit_bytes(x, layer, false);
  if (gathered != kept) return gathered / x->d.dsize;
  return x->s->offload & VF_OFFLOAD_PARAMS ? kept / x->d.dsize : 0;
}

static uint32_t fsdp1_unshard(struct ctx *x, int32_t layer) {
  uint64_t bytes = fsdp_gather_bytes(x, layer);
  uint32_t copy = tape_take_on(x, pre_unshard_bytes(x, layer, bytes), VF_CAT_WEIGHTS, STREAM_PRE_UNSHARD);
  uint32_t *q = x->fsdp.free_events;
  if (layer >= 0 && q[FSDP1_IN_FLIGHT - 1]) {
    tape_wait(x, q[0]);
    for (int i = 0; i + 1 < FSDP1_IN_FLIGHT; i++) q[i] = q[i + 1];
    q[FSDP1_IN_FLIGHT - 1] = 0;
  }
  uint32_t gathered = tape_take_on(x, bytes, VF_CAT_WEIGHTS, STREAM_ALL_GATHER);
  tape_record(x, copy, STREAM_NCCL);
  tape_give(x, copy);
  return gathered;
}

void fsdp_reshard(struct ctx *x, uint32_t gathered) {
  if (!gathered || !fsdp1_streams(x)) {
    tape_give(x, gathered);
    return;
  }
  tape_record(x, gathered, STREAM_COMPUTE);
  tape_give(x, gathered);
  uint32_t *q = x->fsdp.free_events;
  int n = 0;
  while (n < FSDP1_IN_FLIGHT && q[n]) n++;
  q[n < FSDP1_IN_FLIGHT ? n : FSDP1_IN_FLIGHT - 1] = tape_event(x);
}

static uint32_t fsdp1_gather(struct ctx *x, int32_t layer) {
  uint32_t params = x->fsdp.prefetched;
  x->fsdp.prefetched = 0;
  if (!params) params = fsdp1_unshard(x, layer);
  if (!x->fsdp.forwarding && layer > 0) x->fsdp.prefetched = fsdp1_unshard(x, layer - 1);
  return params;
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

/* A unit's weights gathered for its forward or backward: the id the caller frees after it,
 * or 0 when the step keeps them gathered (pipe_fsdp). ZeRO-3's coordinator holds its
 * most through the whole forward and backward, counted once as the root's. */
uint32_t fsdp_gather(struct ctx *x, int32_t layer) {
  if (zero3_coordinator(x))
    return layer < 0 ? tape_take_on(x, x->zero.zero3_live * x->d.c, VF_CAT_WEIGHTS, STREAM_ALL_GATHER) : 0;
  uint64_t bytes = fsdp_gather_bytes(x, layer);
  if (fsdp1_streams(x)) return layer >= 0 ? fsdp1_gather(x, layer) : fsdp1_unshard(x, -1);
  if (!pipe_fsdp(x)) return fsdp2_gather(x, layer, bytes);
  uint32_t *held = &x->fsdp.held_gather[layer + 1];
  if (!*held) *held = tape_take_on(x, bytes, VF_CAT_WEIGHTS, STREAM_ALL_GATHER);
  return 0;
}

/* FSDP1's lazy initialization as the root's first forward begins (torch 2.13
 * _runtime_utils.py _lazy_init, _share_state_and_init_handle_attrs; _flat_param.py
 * init_flat_param_attributes): each unit, the root first, makes and frees at once its shard
 * in the compute dtype under parameter mixed precision, then, sharded, its padded
 * unsharded parameter and under mixed precision a full-precision one. Their blocks stay
 * cached: after a loop's empty_cache (empty_cache_before_training) they are what the first
 * step finds. */
static void fsdp1_lazy_init(struct ctx *x) {
  for (int32_t layer = -1; layer < (int32_t)x->layers; layer++) {
    uint64_t gathered = fsdp_gather_bytes(x, layer), kept = unit_bytes(x, layer, false);
    bool mixed = gathered != kept, sharded = x->d.dsize > 1;
    if (mixed) tape_transient(x, gathered / x->d.dsize, VF_CAT_WEIGHTS);
    if (sharded) tape_transient(x, gathered, VF_CAT_WEIGHTS);
    if (sharded && mixed) tape_transient(x, kept, VF_CAT_WEIGHTS);
  }
}

/* Sharded training keeps the root unit (embedding, final norm, head) gathered from the
 * start of the forward to the end of the backward. */
void fsdp_forward_begins(struct ctx *x) {
  if (fsdp1(x) && x->sched.micro == 0) fsdp1_lazy_init(x);
  x->fsdp.forwarding = true;
  x->fsdp.root = fsdp_embedding_unit(x) ? fsdp2_gather(x, -1, root_part_bytes(x, true)) : fsdp_gather(x, -1);
}

/* One of the units outside the layers (fsdp_embedding_unit) gathered: the final norm's and
 * head's for the loss, the embedding's for its backward. */
void fsdp_gather_root_part(struct ctx *x, bool embedding) {
  if (fsdp_embedding_unit(x)) x->fsdp.root = fsdp2_gather(x, -1, root_part_bytes(x, embedding));
}

/* The root's weights, or one of the units outside the layers (fsdp_embedding_unit),
 * resharded: FSDP1's root as any unit (_reshard: its use recorded on the computation stream,
 * a free event for the rate limiter). */
void fsdp_reshard_root(struct ctx *x) {
  fsdp_reshard(x, x->fsdp.root);
  x->fsdp.root = 0;
}

/* The root's post-forward: the model's forward has returned. */
void fsdp_forward_returned(struct ctx *x) {
  tape_give(x, x->fsdp.gather_buffer);
  x->fsdp.gather_buffer = 0;
  x->fsdp.forwarding = false;
}

/* FSDP2 keeps its root unit (embedding, final norm, head) gathered from the forward into
 * the backward only when fully_shard was left to choose (reshard_after_forward=None: torch
 * 2.13 _fully_shard.py auto_reshard_after_forward, _fsdp_state.py _lazy_init); where the
 * framework asks for resharding (profile field fsdp_root_reshards) the root reshards as the
 * model's forward returns, before the loss, and gathers again when the backward reaches
 * the model's outputs. */
static bool root_reshards(const struct ctx *x) {
  return x->p->fsdp_root_reshards && vf_shard_fsdp(x->s->shard) && !pipe_fsdp(x);
}

/* Before the loss: the model's forward has returned unless it computes the loss itself
 * (loss_in_forward). */
void fsdp_before_loss(struct ctx *x) {
  if (!x->p->loss_in_forward) fsdp_forward_returned(x);
  if (root_reshards(x)) fsdp_reshard_root(x);
}

void fsdp_regather_root(struct ctx *x) {
  if (root_reshards(x) && !x->fsdp.root) x->fsdp.root = fsdp_gather(x, -1);
}

void fsdp_drop_prefetched(struct ctx *x) {
  tape_give(x, x->fsdp.prefetched); /* for a layer outside the graph */
  x->fsdp.prefetched = 0;
}

/* Units [begin, end) of the replay reduced, then resharded. */
void fsdp_post_backward(struct ctx *x, int32_t begin, int32_t end, struct ids *g) {
  for (int32_t l = begin; l < end; l++) {
    grads_reduce_unsharded(x, l, g);
    tape_give(x, x->fsdp.held_gather[l + 1]);
    x->fsdp.held_gather[l + 1] = 0;
  }
}

/* FSDP1 wraps one unit of a model that sits on the host or the meta device (accelerate's
 * FSDP1 model, which the Trainer leaves on the host; Lightning's and Fabric's, made on the
 * meta device). Sources, torch 2.2 and 2.13 alike, distributed/fsdp/_init_utils.py
 * _init_param_handle_from_module: the unit's parameters reach the GPU one tensor at a time
 * (_move_states_to_device, param.data = param.to(device); a meta module is materialized
 * there by param_init_fn or _materialize_meta_module); with sync_module_states (profile
 * field fsdp_sync_module_states) rank 0 broadcasts them (_sync_module_params_and_buffers:
 * broadcast_coalesced in buckets of PARAM_BROADCAST_BUCKET_SIZE, 250 MiB);
 * _init_param_handle_from_params makes a FlatParamHandle, whose flat parameter is a new
 * tensor of them all (_flat_param.py flatten_tensors: torch.cat), and shard() clones this
 * rank's chunk (_get_shard: chunk.clone()) before freeing the flat storage;
 * CPUOffload(offload_params) then moves the shard to the host (flat_param_to); the moved
 * tensors go when the function returns. Their blocks stay cached: a loop that resets only
 * the peak counters before training (torch.cuda.reset_peak_memory_stats) starts its
 * reserved peak from them. Where ProcessGroupNCCL records the buckets on its stream
 * (nccl_records_streams: before torch 2.8) they are still in use there when the flat
 * parameter is made, microseconds later on the host; the next unit's first copy from the
 * host's pageable memory waits for the stream first (CUDA runtime API, "API
 * synchronization behavior"), and so for the broadcast: *done is that point. From 2.8 the
 * broadcast's work.wait() orders the computation stream after it before the buckets go,
 * so their blocks are free to reuse at once. */
static void fsdp1_wrap_unit(struct ctx *x, int32_t layer, uint32_t *done) {
  size_t begin, end;
  params_layer(x->ps, layer, &begin, &end);
  struct ids moved = {0};
  tape_wait(x, *done);
  for (size_t i = begin; i < end; i++) {
    const struct param *p = &x->ps->v[i];
    ids_push(x, &moved, tape_take(x, param_tensor_bytes(p), VF_CAT_WEIGHTS));
    tape_take(x, p->quant_state_bytes, VF_CAT_WEIGHTS);
  }
  if (x->p->fsdp_sync_module_states) broadcast_coalesced(x, begin, end, x->p->nccl_records_streams);
  uint32_t flat = tape_take(x, unit_bytes(x, layer, false), VF_CAT_WEIGHTS);
  uint32_t shard = tape_take(x, unit_bytes(x, layer, true) / x->d.dsize, VF_CAT_WEIGHTS);
  tape_give(x, flat);
  if (x->s->offload & VF_OFFLOAD_PARAMS) tape_give(x, shard);
  ids_give(x, &moved);
  free(moved.id);
  *done = tape_event(x);
}

/* FSDP1's wrap, children before their parent (distributed/fsdp/wrap.py _recursive_wrap):
 * each layer, then the root with what lies outside the layers. The shards stay. Returns
 * false where FSDP1 does not shard the weights, and the caller takes them itself. */
bool fsdp1_wrap(struct ctx *x) {
  if (!fsdp1(x)) return false;
  uint32_t done = 0;
  for (int32_t l = 0; l < (int32_t)x->layers; l++) fsdp1_wrap_unit(x, l, &done);
  fsdp1_wrap_unit(x, -1, &done);
  return true;
}

/* Loading a full state dict into a model FSDP has already sharded gathers every unit at
 * once: Lightning's FSDPStrategy loads it under FSDP's FULL_STATE_DICT context
 * (lightning/fabric/strategies/fsdp.py _load_raw_module_state: "gathering all weights
 * first"), whose pre-load hook unshards each unit while Module.load_state_dict runs every
 * post-load hook, which reshards, only after the whole recursive load
 * (torch/nn/modules/module.py). Each GPU holds the whole model next to its shard. */
void fsdp_load_full_state_dict(struct ctx *x) {
  if (!x->p->fsdp_full_load || !vf_shard_fsdp(x->s->shard) || (x->s->offload & VF_OFFLOAD_PARAMS)) return;
  uint32_t *ids = malloc((x->layers + 1) * sizeof *ids);
  if (!ids) {
    x->tape.rc = VF_ENOMEM;
    return;
  }
  for (int32_t l = -1; l < (int32_t)x->layers; l++) ids[l + 1] = tape_take(x, unit_bytes(x, l, false), VF_CAT_WEIGHTS);
  for (uint64_t i = 0; i <= x->layers; i++) tape_give(x, ids[i]);
  free(ids);
}

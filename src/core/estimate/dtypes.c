/* The dtypes tensors take: autocast, which computes in a narrower dtype than the weights
 * are stored in and casts them for every matmul, and 4-bit quantization (bitsandbytes),
 * which dequantizes a weight for every matmul. Sources: aten/src/ATen/autocast_mode.cpp
 * (cached_cast); bitsandbytes' 4-bit matmul (its autograd node's ctx.tensors); FSDP
 * MixedPrecision param_dtype and ZeRO-3's 16-bit partitions; accelerate's FSDP2
 * (fsdp_autocast). */
#include "core/estimate/internal.h"

/* Whether the forward runs under autocast: mixed precision is asked for, and under FSDP only
 * where the framework enters autocast besides FSDP's own mixed precision (accelerate's FSDP2
 * does not: fsdp_autocast). */
bool autocast_runs(const struct ctx *x) {
  return x->s->amp != VF_PREC_NONE && (!vf_shard_fsdp(x->s->shard) || x->p->fsdp_autocast);
}

/* Autocast computes in a narrower dtype than the weights are stored in. Sharded mixed
 * precision gathers the weights already in the compute dtype (FSDP MixedPrecision
 * param_dtype, ZeRO-3's 16-bit partitions): nothing is cast and the residual stream is in
 * the compute dtype. */
bool autocast_casts(const struct ctx *x) {
  bool gathered = vf_shard_weights(x->s->shard);
  return autocast_runs(x) && x->d.c < precision_bytes(x->s->weights) && !gathered;
}

/* Bytes per element of the residual stream: the weights' dtype under autocast (the
 * embedding's output and every residual add stay in it), else the compute dtype. */
uint32_t autocast_stream_bytes(const struct ctx *x) {
  return autocast_casts(x) ? precision_bytes(x->s->weights) : x->d.c;
}

/* Autocast casts each fp32 weight to the compute dtype once per forward; the copies are
 * kept for backward (the matmuls saved them) until the layer's backward is done. A fully
 * checkpointed forward saves none: autocast's cache keeps the casts of trainable weights
 * (autocast_mode.cpp cached_cast: leaf tensors that require grad) until the autocast region
 * ends after the loss, the others go at once; the recomputation casts again for the
 * layer's backward. */
void autocast_copies(struct ctx *x, int32_t layer, struct saved *sv, bool recomputing) {
  if (!autocast_casts(x)) return;
  bool saved = x->s->grad_ckpt != VF_CKPT_FULL || recomputing;
  size_t begin, end;
  params_layer(x->ps, layer, &begin, &end);
  for (size_t i = begin; i < end; i++) {
    const struct param *p = &x->ps->v[i];
    if (!p->linear || (p->expert && mlp_experts_uncast(x))) continue;
    uint32_t id = tape_take(x, p->numel * x->d.c, WEIGHT_TEMPORARIES);
    if (saved) tape_hold(x, sv, id, p->numel * x->d.c, WEIGHT_TEMPORARIES);
    else if (p->trainable) ids_push(x, &x->autocast.cache, id);
    else tape_give(x, id);
  }
}

/* The autocast region ends after the loss: the casts its cache kept go. */
void autocast_region_ends(struct ctx *x) { ids_give(x, &x->autocast.cache); }

bool quant_model(const struct vf_setup *s) { return vf_setup_quant(s) != VF_QUANT_NONE; }

/* The weight of a projection (or of the output head) is stored in 4 bits. */
bool quant_weight(const struct ctx *x, bool head) {
  return quant_model(x->s) && (!head || x->p->quantize_head);
}

/* Bytes per element alive while a 4-bit weight is dequantized for a matmul: the
 * compute-dtype weight, and what the dequantizer allocates on the way, which may differ
 * between the forward's matmul and the backward's input gradient. */
uint64_t dequant_bytes(const struct ctx *x, bool forward) {
  return x->d.c + (forward ? x->p->dequant_forward_extra_bytes : x->p->dequant_extra_bytes);
}

/* bitsandbytes' 4-bit matmul keeps its input for the input gradient, once per input tensor
 * however many projections read it, as an attribute of its autograd node (ctx.tensors),
 * which the backward does not release and checkpointing does not see. */
void quant_input(struct ctx *x, struct saved *sv, uint64_t in, bool head) {
  if (!quant_weight(x, head) || !x->p->quant_input_bytes) return;
  size_t before = sv->n;
  tape_keep(x, sv, x->d.T * in * x->p->quant_input_bytes);
  if (sv->n > before) sv->on_graph[before] = x->p->graph_held && x->s->grad_ckpt == VF_CKPT_NONE;
}

/* A weight quantized while the model loads exists first in 16 bits on the GPU, next to
 * whatever its quantizer allocates, before its quantized form replaces it. */
void quant_load_weight(struct ctx *x, const struct param *p) {
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

static uint64_t largest_quantized(const struct ctx *x, int32_t layer) {
  uint64_t n = 0;
  size_t begin, end;
  params_layer(x->ps, layer, &begin, &end);
  for (size_t i = begin; i < end; i++)
    if (x->ps->v[i].quantized && x->ps->v[i].numel > n) n = x->ps->v[i].numel;
  return n;
}

/* The input gradient of a quantized projection dequantizes its weight again. */
void quant_backward(struct ctx *x, int32_t layer) {
  tape_transient(x, largest_quantized(x, layer) * dequant_bytes(x, false), WEIGHT_TEMPORARIES);
}

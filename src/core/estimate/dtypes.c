/* The dtypes tensors take: autocast, which computes in a narrower dtype than the weights
 * are stored in and casts them for every matmul, and 4-bit quantization (bitsandbytes),
 * which dequantizes a weight for every matmul, in the dtype the model was loaded in, and
 * returns its input's dtype. Sources: aten/src/ATen/autocast_mode.cpp (cached_cast);
 * bitsandbytes nn/modules.py Linear4bit.forward and its 4-bit matmul (its autograd node's
 * ctx.tensors); PEFT's prepare_model_for_kbit_training (quant_rest_fp32); FSDP
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
  return autocast_runs(x) && x->d.c < params_rest_bytes(x->s, x->p) && !gathered;
}

/* Bytes per element of the residual stream: the weights' dtype under autocast (the
 * embedding's output and every residual add stay in it), else the compute dtype. */
uint32_t autocast_stream_bytes(const struct ctx *x) {
  return autocast_casts(x) ? params_rest_bytes(x->s, x->p) : x->d.c;
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
    /* A 4-bit weight is no floating-point tensor autocast could cast: it is dequantized. */
    if (!p->linear || p->quantized || (p->expert && mlp_experts_uncast(x))) continue;
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

/* Bytes per element a 4-bit matmul computes in: the dtype the model was loaded in, which
 * the QLoRA recipes give bitsandbytes as its compute dtype (BitsAndBytesConfig
 * bnb_4bit_compute_dtype, Fabric's BitsandbytesPrecision dtype), whatever dtype the
 * parameters left unquantized or autocast take. */
static uint32_t quant_compute_bytes(const struct ctx *x) { return precision_bytes(x->s->weights); }

/* Bytes per element of a quantized projection's output: bitsandbytes' Linear4bit casts its
 * input to the compute dtype and the product back to the input's dtype (nn/modules.py
 * Linear4bit.forward `.to(inp_dtype)`), so the output is in the residual stream's dtype. */
uint32_t quant_output_bytes(const struct ctx *x) { return autocast_stream_bytes(x); }

/* Bytes per element alive while a 4-bit weight is dequantized for a matmul: the weight in
 * the compute dtype, and what the dequantizer allocates on the way, which may differ
 * between the forward's matmul and the backward's input gradient. */
uint64_t dequant_bytes(const struct ctx *x, bool forward) {
  return quant_compute_bytes(x) + (forward ? x->p->dequant_forward_extra_bytes : x->p->dequant_extra_bytes);
}

/* bitsandbytes' 4-bit matmul keeps its input, cast to the compute dtype, for the input
 * gradient as an attribute of its autograd node (ctx.tensors), which the backward does not
 * release and checkpointing does not see. The `readers` projections of one input share it
 * where the input is in the compute dtype already (the cast returns the tensor itself);
 * from a stream of another dtype each casts its own copy. */
void quant_input(struct ctx *x, struct saved *sv, uint64_t in, uint32_t readers, bool head) {
  if (!quant_weight(x, head) || !x->p->quant_input_bytes) return;
  uint32_t copies = autocast_stream_bytes(x) == quant_compute_bytes(x) ? 1 : readers;
  for (uint32_t i = 0; i < copies; i++) {
    size_t before = sv->n;
    tape_keep(x, sv, x->d.T * in * x->p->quant_input_bytes);
    if (sv->n > before) sv->on_graph[before] = x->p->graph_held && x->s->grad_ckpt == VF_CKPT_NONE;
  }
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

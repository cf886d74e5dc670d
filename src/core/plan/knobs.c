/* The values each knob may take, the given one first. */
#include "core/estimate/estimate.h"
#include "core/plan/internal.h"
#include "core/profile.h"

bool plan_lacks_bf16(const struct vf_gpu_spec *g) {
  return g && ((g->cc_major > 0 && g->cc_major < 8) || (g->bf16_tflops <= 0 && g->fp16_tflops > 0));
}

/* The weights and autocast dtype a setting gets: as given, and autocast for fp32 weights
 * without it. A GPU without bf16 runs neither bf16 weights nor bf16 autocast, so there bf16
 * becomes fp16 autocast with a GradScaler, whose gradients must be fp32: weights that train
 * are stored in fp32, frozen ones in fp16. */
static size_t precisions(const struct vf_plan_request *r, const struct vf_setup *level, enum vf_precision out[][2]) {
  size_t n = 0;
  enum vf_precision w = level->weights, a = level->amp;
  bool keep = r->keep & VF_KEEP_PRECISION;
  if (!keep && plan_lacks_bf16(r->gpu) && (w == VF_PREC_BF16 || a == VF_PREC_BF16)) {
    out[n][0] = w == VF_PREC_BF16 ? level->method == VF_METHOD_FULL ? VF_PREC_FP32 : VF_PREC_FP16 : w;
    out[n++][1] = VF_PREC_FP16;
    return n;
  }
  out[n][0] = w, out[n++][1] = a;
  if (!keep && a == VF_PREC_NONE && w == VF_PREC_FP32) out[n][0] = w, out[n++][1] = plan_lacks_bf16(r->gpu) ? VF_PREC_FP16 : VF_PREC_BF16;
  return n;
}

/* Each optimizer after the given one keeps less state. AdamW's storage (8-bit states, paged)
 * keeps its update, and so the trained model; Adafactor (no first moment, factored second)
 * changes the update, so it is tried only where the storage alone fits nothing
 * (S->algorithms), as the method and seq are. */
static size_t optimizers(const struct search *S, enum vf_optimizer *out) {
  static const enum vf_optimizer chain[] = {VF_OPT_ADAMW, VF_OPT_ADAMW_8BIT, VF_OPT_PAGED_ADAMW_8BIT,
                                            VF_OPT_ADAFACTOR};
  size_t n = 0, i = 0, count = sizeof chain / sizeof *chain - !S->algorithms;
  out[n++] = S->r->base.optimizer;
  if (S->r->keep & VF_KEEP_OPTIMIZER) return n;
  while (i < count && chain[i] != S->r->base.optimizer) i++;
  while (++i < count) out[n++] = chain[i];
  return n;
}

/* Selective checkpointing only where the framework has a policy to switch on (profile field
 * selective_policy): elsewhere apply could write only full checkpointing. */
static size_t ckpts(const struct vf_plan_request *r, enum vf_ckpt *out) {
  static const enum vf_ckpt all[] = {VF_CKPT_NONE, VF_CKPT_SELECTIVE, VF_CKPT_FULL};
  size_t n = 0;
  out[n++] = r->base.grad_ckpt;
  for (size_t i = 0; i < 3 && !(r->keep & VF_KEEP_GRAD_CKPT); i++)
    if (all[i] != r->base.grad_ckpt && (all[i] != VF_CKPT_SELECTIVE || r->profile->selective_policy)) out[n++] = all[i];
  return n;
}

/* Stronger ZeRO stages only: with communication ignored a weaker one never helps. FSDP is
 * ZeRO-3's memory and is not offered, as apply cannot write it. */
static size_t shards(const struct vf_plan_request *r, enum vf_shard *out) {
  size_t n = 0;
  out[n++] = r->base.shard;
  if ((r->keep & VF_KEEP_SHARD) || plan_data_parallel(&r->base) < 2) return n;
  for (int z = (int)r->base.shard + 1; r->base.shard != VF_SHARD_FSDP && z <= VF_SHARD_ZERO3; z++)
    out[n++] = (enum vf_shard)z;
  return n;
}

/* Optimizer offload, and parameters with it (valid under ZeRO-3 only), each with or without
 * the activations where the framework offloads them. */
static size_t offloads(const struct vf_plan_request *r, uint32_t *out) {
  uint32_t states = VF_OFFLOAD_OPTIMIZER | VF_OFFLOAD_PARAMS, rest = r->base.offload & ~states;
  uint32_t acts = r->profile->offloads_activations ? VF_OFFLOAD_ACTIVATIONS : 0;
  const uint32_t all[] = {rest, rest | VF_OFFLOAD_OPTIMIZER, rest | states, rest | acts,
                          rest | acts | VF_OFFLOAD_OPTIMIZER, rest | acts | states};
  size_t n = 0;
  out[n++] = r->base.offload;
  for (size_t i = 0; i < 6 && !(r->keep & VF_KEEP_OFFLOAD); i++) {
    bool seen = false;
    for (size_t k = 0; k < n; k++) seen |= out[k] == all[i];
    if (!seen) out[n++] = all[i];
  }
  return n;
}

/* The given loss, and the framework's lighter ones: Liger's fused kernel (the switch its
 * configs spell: use_liger_kernel, enable_liger_kernel, liger_fused_linear_cross_entropy),
 * else its chunked loss. Cut Cross-Entropy, axolotl's alone, is planned only as given. */
static size_t losses(const struct vf_plan_request *r, enum vf_loss *out) {
  size_t n = 0;
  out[n++] = r->base.loss;
  if (r->keep & VF_KEEP_LOSS || r->base.loss == VF_LOSS_FUSED || r->base.loss == VF_LOSS_CCE) return n;
  if (estimate_loss_differs(r->profile, VF_LOSS_FUSED)) out[n++] = VF_LOSS_FUSED;
  else if (r->base.loss == VF_LOSS_DEFAULT && estimate_loss_differs(r->profile, VF_LOSS_CHUNKED))
    out[n++] = VF_LOSS_CHUNKED;
  return n;
}

/* The given optimizer timing, and torchtune's step in the backward where the framework has
 * it for full fine-tuning (it trains the same model: the same update, made as each gradient
 * arrives) and --keep optimizer-in-bwd lets it; the micro batches searched then keep accumulation 1
 * (in_bwd_lowest). */
static size_t in_bwds(const struct vf_plan_request *r, const struct vf_setup *level, enum vf_in_bwd *out) {
  size_t n = 0;
  out[n++] = r->base.optimizer_in_bwd;
  if (!(r->keep & VF_KEEP_IN_BWD) && r->profile->optimizer_in_bwd && level->method == VF_METHOD_FULL &&
      r->base.optimizer_in_bwd == VF_IN_BWD_NO)
    out[n++] = VF_IN_BWD_YES;
  return n;
}

/* Frozen-base methods after the given one, each lighter: LoRA, then QLoRA (quantized). */
size_t plan_methods(const struct vf_plan_request *r, struct vf_setup *out) {
  size_t n = 0;
  out[n++] = r->base;
  if (r->keep & VF_KEEP_METHOD) return n;
  if (r->base.method == VF_METHOD_FULL) {
    out[n] = r->base;
    out[n++].method = VF_METHOD_LORA;
  }
  bool plain = r->base.quant == VF_QUANT_NONE || r->base.quant == VF_QUANT_DEFAULT;
  if (!(r->keep & VF_KEEP_QUANT) && plain && r->base.method != VF_METHOD_QLORA &&
      (r->base.method == VF_METHOD_FULL || r->base.method == VF_METHOD_LORA)) {
    out[n] = r->base;
    out[n].method = VF_METHOD_QLORA;
    out[n++].quant = VF_QUANT_DEFAULT;
  }
  return n;
}

void plan_knobs_of(const struct search *S, const struct vf_setup *level, struct knobs *k) {
  k->np = precisions(S->r, level, k->prec), k->no = optimizers(S, k->opt), k->nc = ckpts(S->r, k->ck);
  k->ns = shards(S->r, k->sh), k->nf = offloads(S->r, k->off), k->nl = losses(S->r, k->loss);
  k->nb = in_bwds(S->r, level, k->in_bwd);
}

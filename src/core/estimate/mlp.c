/* The MLP, gated or not, and mixture of experts: what the activation keeps (transformers'
 * gelu_new is a formula of separate ops), the router's and experts' inputs, the
 * projections around the activation. Sources: transformers activations.py
 * NewGELUActivation; autocast's fp32 list (torch.pow). */
#include <string.h>

#include "core/estimate/internal.h"

/* Tensors of the MLP's width the activation keeps for its backward: its input for a fused
 * kernel; transformers' gelu_new (activations.py NewGELUActivation) is a formula of
 * separate ops whose products keep the input, 0.5 x, tanh(...) and 1 + tanh(...). */
static uint32_t activation_saves(const struct ctx *x) {
  return strcmp(x->m->arch.activation, "gelu_new") == 0 ? x->p->gelu_new_saves : 1;
}

/* Whether autocast leaves the experts alone: they run in their weights' dtype, with no cast
 * copies of those weights (experts_in_weight_dtype). */
bool mlp_experts_uncast(const struct ctx *x) {
  return x->m->arch.experts && x->p->experts_in_weight_dtype && autocast_casts(x);
}

/* Bytes per element of what the MLP computes: the compute dtype, for experts autocast
 * leaves alone their weights' dtype, and for 4-bit projections the dtype they return. */
uint64_t mlp_bytes(const struct ctx *x) {
  if (quant_weight(x, false)) return quant_output_bytes(x);
  return mlp_experts_uncast(x) ? precision_bytes(x->s->weights) : x->d.c;
}

/* Projections reading a block's MLP input. */
uint32_t mlp_readers(const struct ctx *x) {
  return x->m->arch.glu && !x->m->arch.fused_gate_up ? 2 : 1;
}

void mlp_forward(struct ctx *x, struct saved *sv) {
  const struct dims *d = &x->d;
  const struct vf_arch *a = &x->m->arch;
  uint64_t routed = a->experts_per_token ? a->experts_per_token : 1, T = d->T * routed, c = mlp_bytes(x);
  if (a->experts) {
    tape_keep(x, sv, d->T * a->experts * 4);
    tape_keep(x, sv, T * d->h * c);
  }
  parallel_token_exchange(x);
  quant_input(x, sv, d->h, mlp_readers(x), false);
  adapter_input(x, sv, d->h, BIT(VF_KIND_GATE) | BIT(VF_KIND_UP));
  if (a->glu) adapter_projection(x, sv, d->h, d->ffn, BIT(VF_KIND_GATE));
  adapter_projection(x, sv, d->h, d->ffn, BIT(VF_KIND_UP));
  /* What the activation keeps, and for a gated MLP its output (recomputed from its input
   * when the layer runs compiled, layers_compiled) and the up projection.
   * Under autocast gelu_new's x ** 3 runs in fp32 (torch.pow is on autocast's fp32 list),
   * so pow keeps an fp32 copy of x, and the tanh and 1 + tanh after it are fp32: of its
   * tensors only 0.5 x stays in the compute dtype. */
  uint32_t kept = activation_saves(x) + (a->glu ? 2 : 0) - (a->glu && x->saving.compiled);
  bool gelu_new_fp32 = strcmp(a->activation, "gelu_new") == 0 && autocast_runs(x);
  for (uint32_t i = 0; i < kept; i++) tape_keep(x, sv, T * d->ffn * (gelu_new_fp32 && i ? 4 : c));
  if (x->layers_train) tape_keep(x, sv, T * d->ffn * c); /* the down projection's input */
  quant_input(x, sv, d->ffn, 1, false);
  adapter_input(x, sv, d->ffn, BIT(VF_KIND_DOWN));
  adapter_projection(x, sv, d->ffn, d->h, BIT(VF_KIND_DOWN));
  parallel_token_exchange(x);
  if (a->family == VF_FAMILY_BERT || a->family == VF_FAMILY_GPT2) tape_keep(x, sv, d->Ts * d->h);
}

/* The temporaries of the MLP's backward at its highest: tensors of its width for every
 * routed token, one more for a gated MLP. */
uint64_t mlp_backward_bytes(const struct ctx *x) {
  const struct vf_arch *a = &x->m->arch;
  uint64_t routed = a->experts_per_token ? a->experts_per_token : 1;
  return x->d.T * routed * x->d.ffn * mlp_bytes(x) * (a->glu ? 3 : 2);
}

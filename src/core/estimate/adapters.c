/* The adapters fine-tuning trains in place of the model's weights: LoRA and QLoRA (PEFT,
 * torchtune), DoRA, and litgpt's adapters (v1 prompts the upper layers' attention; v2 scales
 * and shifts every linear's output and trains the norms). What they keep around each
 * projection, in their own dtype. Sources: peft/tuners/lora/layer.py Linear.forward,
 * peft/tuners/lora/dora.py DoraLinearLayer.forward and variants.py DoraLinearVariant
 * @ peft 0.21; torchtune/modules/peft/lora.py and dora.py @ 0.6.1; litgpt adapter.py and
 * adapter_v2.py. */
#include "core/estimate/internal.h"

bool adapter_lora_method(enum vf_method m) {
  return m == VF_METHOD_LORA || m == VF_METHOD_QLORA || m == VF_METHOD_DORA;
}

static bool adapter_method(enum vf_method m) { return m == VF_METHOD_ADAPTER || m == VF_METHOD_ADAPTER_V2; }

/* A layer litgpt's adapters prompt (adapter.py Block: adapter_wte and gating_factor). */
bool adapter_prompted(const struct ctx *x, int32_t layer) {
  return adapter_method(x->s->method) && layer >= VF_ADAPTER_START_LAYER;
}

/* Adapter v1 trains nothing below its first prompted layer, whose input needs no gradient:
 * autograd records none of those layers' ops, which keep nothing and have no backward. */
bool adapter_outside_graph(const struct ctx *x, int32_t layer) {
  return x->s->method == VF_METHOD_ADAPTER && layer < VF_ADAPTER_START_LAYER;
}

/* The norms' weights train: where the weights around them do (`trains`), and under
 * litgpt's adapter v2 (adapter_v2.py adapter_filter: norm_1, norm_2, ln_f). */
bool adapter_norm_weights_train(const struct ctx *x, bool trains) {
  return trains || x->s->method == VF_METHOD_ADAPTER_V2;
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
void adapter_projection(struct ctx *x, struct saved *sv, uint64_t in, uint64_t out, uint32_t kind_bits) {
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
void adapter_input(struct ctx *x, struct saved *sv, uint64_t in, uint32_t kind_bits) {
  if (x->p->lora_dropout || !adapter_lora_method(x->s->method) || !(x->s->lora_targets & kind_bits)) return;
  tape_keep(x, sv, x->d.T * in * x->d.c);
}

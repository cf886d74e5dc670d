/* Attention: the q, k, v projections, the kernel that runs (SDPA's flash, memory-efficient
 * or math backend, or eager attention), what each keeps for the backward and holds in it,
 * the output projection; and the RoPE tables made with the model. Sources: PyTorch's
 * sdp_utils.cpp select_sdp_backend (as of 2.13), attention.cpp
 * _scaled_dot_product_attention_math and convert_boolean_attn_mask, autocast_mode.cpp
 * (softmax on the fp32 list); transformers' eager_attention_forward and repeat_kv,
 * use_gqa_in_sdpa, modeling_gemma2.py eager_attention_forward; torchtune's and litgpt's
 * K/V expansion; litgpt adapter.py CausalSelfAttention.scaled_dot_product_attention. */
#include <string.h>

#include "core/estimate/internal.h"

/* One q,k,v projection per layer: by the framework's modeling code or the model's own. */
static bool fused_qkv(const struct ctx *x) { return x->p->fused_qkv || x->m->arch.fused_qkv; }

/* Projections reading a block's attention input. */
uint32_t attention_readers(const struct ctx *x) { return fused_qkv(x) ? 1 : 3; }

static void qkv_projections(struct ctx *x, struct saved *sv) {
  const struct dims *d = &x->d;
  quant_input(x, sv, d->h, attention_readers(x), false);
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
 * expansion, nor cast (autocast casts a 4-bit projection's output, in the stream's dtype,
 * for SDPA), it stays a view of the whole output, which attention keeps; and a LoRA branch
 * adapting only some of q, k, v zero-pads its output into place, and the padding's
 * backward keeps the unpadded output. */
static void fused_qkv_extras(struct ctx *x, struct saved *sv, bool expand) {
  const struct dims *d = &x->d;
  if (!fused_qkv(x)) return;
  bool view_kept = x->p->qkv_view_kept ||
                   model_listed(x->p->qkv_view_models, x->p->n_qkv_view_models, x->m->arch.model_type);
  bool cast = quant_weight(x, false) && quant_output_bytes(x) != d->c;
  if (view_kept && !expand && !cast) tape_keep(x, sv, d->T * (d->q + d->kv) * d->c);
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
 * What reaches it is the framework's: padded batches and sliding windows bring a mask;
 * grouped K/V heads come with enable_gqa when there is no mask and head dims fit
 * (transformers' use_gqa_in_sdpa), else repeated to every head first, unless the model
 * passes its one multi-query head as it is (sdpa_mqa_unexpanded). */
static bool raw_mqa(const struct ctx *x) {
  const struct vf_arch *a = &x->m->arch;
  return a->kv_heads == 1 && a->heads > 1 &&
         model_listed(x->p->sdpa_mqa_unexpanded, x->p->n_sdpa_mqa_unexpanded, a->model_type);
}

/* Grouped K/V heads reach SDPA as they are, with enable_gqa. */
static bool sdpa_grouped(const struct ctx *x) {
  const struct vf_arch *a = &x->m->arch;
  return a->kv_heads < a->heads && !raw_mqa(x) && !x->p->gqa_expand && !x->attn.at.masked && a->head_dim <= 256;
}

static enum sdpa_backend sdpa_backend(const struct ctx *x) {
  const struct vf_arch *a = &x->m->arch;
  bool half = x->d.c < 4, fits = a->head_dim <= 256, grouped = sdpa_grouped(x);
  bool every_head = a->kv_heads == a->heads || (!raw_mqa(x) && !grouped);
  uint32_t cc = x->s->gpu_cc_major ? x->s->gpu_cc_major : 9; /* unnamed: a current GPU */
  if (cc >= 8 && half && !x->attn.at.masked && fits && (every_head || grouped)) return SDPA_FLASH;
  if (cc >= 5 && a->head_dim % (half ? 8 : 4) == 0 && every_head) return SDPA_EFFICIENT;
  return SDPA_MATH;
}

/* Under SDPA the kernel it picks for a mask or none, and whether K/V reach it repeated to
 * every query head. */
static struct attention_kernel kernel_choose(struct ctx *x, bool masked) {
  const struct vf_arch *a = &x->m->arch;
  x->attn.at.masked = masked;
  x->attn.at.sdpa = sdpa_backend(x);
  x->attn.at.kv_repeated = a->kv_heads < a->heads && (x->p->gqa_expand || (!sdpa_grouped(x) && !raw_mqa(x)));
  return x->attn.at;
}

/* The attention the setup runs, for the whole estimate: the resolved one (eager where the
 * profile computes soft-capped scores eagerly, setup.c); under SDPA the kernels of the layers
 * attending to every position (masked for padded batches) and of the sliding-window layers. */
void attention_choose(struct ctx *x) {
  x->attn.kind = x->s->attention;
  x->attn.windowed = kernel_choose(x, true);
  x->attn.full = kernel_choose(x, x->s->lengths == VF_LENGTHS_VARIED && x->p->padding_mask);
}

/* A sliding-window layer gives SDPA its window as a mask once the keys reach it
 * (transformers 5.23 masking_utils.py _ignore_causal_mask_sdpa: no is_causal shortcut when
 * kv_length >= the local attention size), for the model types the profile names
 * (sdpa_window_mask); gemma3_text's every window_period-th layer attends globally. */
static bool window_masked(const struct ctx *x, int32_t layer) {
  const struct vf_arch *a = &x->m->arch;
  if (!a->sliding_window || x->d.s_kv < a->sliding_window ||
      !model_listed(x->p->sdpa_window_mask, x->p->n_sdpa_window_mask, a->model_type))
    return false;
  return !a->window_period || (uint64_t)(layer + 1) % a->window_period != 0;
}

/* The kernel of the layer about to run its forward or backward. */
void attention_layer(struct ctx *x, int32_t layer) {
  x->attn.at = window_masked(x, layer) ? x->attn.windowed : x->attn.full;
}

/* Bytes per element the math backend computes in: fp32 for 16-bit inputs from the PyTorch
 * release that up-casts them (sdpa_math_fp32), else the inputs' own. */
static uint64_t math_bytes(const struct ctx *x) { return x->p->sdpa_math_fp32 ? 4 : x->d.c; }

/* The width of the keys and values the attention kernel is given: every query head's
 * where they were repeated before it (kv_repeated), the key/value heads' otherwise. */
uint64_t attention_kv_width(const struct ctx *x) {
  return x->attn.at.kv_repeated ? x->d.q : x->d.kv;
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
  uint32_t q = tape_take(x, T * d->q * c, VF_CAT_ACTIVATIONS);
  uint32_t kv = tape_take(x, 2 * T * kv_width * c, VF_CAT_ACTIVATIONS);
  uint32_t mask = tape_take(x, (x->attn.at.masked ? x->s->batch : 1) * d->s_kv * d->s_kv * a, VF_CAT_TEMPORARIES);
  uint32_t up = a > c ? tape_take(x, T * (d->q + 2 * kv_width) * a, VF_CAT_TEMPORARIES) : 0;
  uint32_t scaled = tape_take(x, T * d->q * a, VF_CAT_TEMPORARIES);
  uint32_t scaled_k = tape_take(x, T * d->kv * a, VF_CAT_TEMPORARIES);
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
  quant_input(x, sv, x->d.q, 1, false);
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
 * or reshaped (torchtune's expand().flatten(1, 2), transformers' repeat_kv before a masked
 * SDPA): merging a dimension of size 1 needs no copy. repeat_interleave (litgpt) copies
 * whatever the heads. */
static bool single_head_view(const struct ctx *x) {
  return !x->p->kv_repeat_interleave && x->d.kv <= x->m->arch.head_dim;
}

void attention_forward(struct ctx *x, struct saved *sv, int32_t layer) {
  const struct dims *d = &x->d;
  const struct vf_arch *a = &x->m->arch;
  uint64_t T = d->T, c = d->c;
  attention_layer(x, layer);
  qkv_projections(x, sv);
  /* q_norm and k_norm, RMSNorms of the q and k projections' outputs (in the compute dtype)
   * before RoPE (transformers 5.23 modeling_qwen3.py and modeling_gemma3.py over each head,
   * modeling_olmo2.py over the whole projection: the same elements), keep what the
   * framework's RMSNorm keeps; their outputs are rotated into new tensors, kept below. */
  if (a->qk_norm != VF_QK_NORM_NONE) layer_norm_keeps(x, sv, T * (d->q + d->kv), c, x->layers_train);
  /* Eager attention multiplies whole heads: K and V are repeated to every query head
   * first (transformers' eager_attention_forward, repeat_kv), whatever SDPA would do. */
  bool expand = (x->attn.at.kv_repeated && !single_head_view(x)) || (x->attn.kind == VF_ATTN_EAGER && d->kv < d->q);
  fused_qkv_extras(x, sv, expand);
  if (x->p->rope_copies && a->rotary_fraction > 0) tape_transient(x, T * (d->q + d->kv) * c, VF_CAT_TEMPORARIES);
  if (x->attn.kind == VF_ATTN_SDPA && x->attn.at.sdpa == SDPA_MATH) {
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
    if (x->attn.at.masked && x->attn.at.sdpa == SDPA_EFFICIENT) tape_keep(x, sv, x->s->batch * d->s_kv * d->s_kv * c);
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

/* The math backend's backward at its highest: the gradient of the scores and the
 * softmax's backward (both in its dtype) next to the reduced gradient of the expanded K. */
static uint64_t math_backward_bytes(const struct ctx *x) {
  uint64_t a = math_bytes(x);
  return 2 * x->d.T * x->d.heads * x->d.s_kv * a + x->d.T * x->d.kv * a;
}

/* The temporaries of attention's backward at its highest, by the kernel that runs. */
uint64_t attention_backward_bytes(const struct ctx *x) {
  const struct dims *d = &x->d;
  uint64_t T = d->T, c = d->c;
  if (x->attn.kind == VF_ATTN_EAGER) return T * d->heads * d->s_kv * (c + 4);
  if (x->attn.kind == VF_ATTN_SDPA && x->attn.at.sdpa == SDPA_MATH) return math_backward_bytes(x);
  return T * ((d->q + 2 * d->kv) * c + d->q * 4);
}

static uint32_t type_value(const struct type_values *v, const char *type) {
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
uint64_t attention_rope_tables(const struct ctx *x, int32_t layer) {
  const struct vf_arch *a = &x->m->arch;
  uint64_t rotated = (uint64_t)((double)a->head_dim * a->rotary_fraction);
  uint64_t bytes = type_value(&x->p->rope_table_bytes, a->model_type) * a->max_positions * rotated;
  bool per_layer = adapter_lora_method(x->s->method) && type_value(&x->p->lora_rope_table_per_layer, a->model_type);
  return (layer < 0) != per_layer ? bytes : 0;
}

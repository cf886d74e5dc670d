/* From an architecture to its parameter tensors, named as Hugging Face checkpoints name
 * them, so a checkpoint's real tensor list can be compared name by name. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "vramfit.h"

struct emitter {
  struct vf_model *m;
  int rc;
};

/* Adds one tensor of 1 or 2 dimensions (cols == 0: a vector). */
static void emit(struct emitter *e, enum vf_kind kind, int32_t layer, int32_t expert,
                 uint64_t rows, uint64_t cols, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

static void emit(struct emitter *e, enum vf_kind kind, int32_t layer, int32_t expert,
                 uint64_t rows, uint64_t cols, const char *fmt, ...) {
  if (e->rc) return;
  char name[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  struct vf_tensor t = {.name = name, .ndim = cols ? 2 : 1, .shape = {rows, cols},
                        .dtype = e->m->arch.dtype, .kind = kind, .layer = layer,
                        .expert = expert};
  e->rc = vf_model_add_tensor(e->m, &t);
}

/* A Linear layer: weight [out, in] and optionally bias [out]. */
static void linear(struct emitter *e, enum vf_kind kind, int32_t layer, int32_t expert,
                   uint64_t in, uint64_t out, bool bias, const char *prefix) {
  emit(e, kind, layer, expert, out, in, "%s.weight", prefix);
  if (bias) emit(e, kind, layer, expert, out, 0, "%s.bias", prefix);
}

/* GPT-2's Conv1D stores the transpose: weight [in, out]. */
static void conv1d(struct emitter *e, enum vf_kind kind, int32_t layer, uint64_t in,
                   uint64_t out, const char *prefix) {
  emit(e, kind, layer, -1, in, out, "%s.weight", prefix);
  emit(e, kind, layer, -1, out, 0, "%s.bias", prefix);
}

static void norm(struct emitter *e, int32_t layer, bool bias, const char *prefix) {
  emit(e, VF_KIND_NORM, layer, -1, e->m->arch.hidden, 0, "%s.weight", prefix);
  if (bias) emit(e, VF_KIND_NORM, layer, -1, e->m->arch.hidden, 0, "%s.bias", prefix);
}

/* The RMSNorms on q and k (transformers 5.23 modeling_qwen3.py, modeling_gemma3.py: over
 * head_dim; modeling_olmo2.py: over the whole projection). */
static void qk_norms(struct emitter *e, int32_t l, const char *p) {
  const struct vf_arch *a = &e->m->arch;
  if (a->qk_norm == VF_QK_NORM_NONE) return;
  bool head = a->qk_norm == VF_QK_NORM_HEAD;
  emit(e, VF_KIND_NORM, l, -1, head ? a->head_dim : a->heads * a->head_dim, 0, "%s.q_norm.weight", p);
  emit(e, VF_KIND_NORM, l, -1, head ? a->head_dim : a->kv_heads * a->head_dim, 0, "%s.k_norm.weight", p);
}

static void attention_qkvo(struct emitter *e, int32_t l, const char *p) {
  const struct vf_arch *a = &e->m->arch;
  char name[128];
  uint64_t qw = a->heads * a->head_dim, kvw = a->kv_heads * a->head_dim;
  if (a->fused_qkv) {
    snprintf(name, sizeof name, "%s.qkv_proj", p);
    linear(e, VF_KIND_QKV, l, -1, a->hidden, qw + 2 * kvw, a->qkv_bias, name);
  } else {
    snprintf(name, sizeof name, "%s.q_proj", p);
    linear(e, VF_KIND_Q, l, -1, a->hidden, qw, a->qkv_bias, name);
    snprintf(name, sizeof name, "%s.k_proj", p);
    linear(e, VF_KIND_K, l, -1, a->hidden, kvw, a->qkv_bias, name);
    snprintf(name, sizeof name, "%s.v_proj", p);
    linear(e, VF_KIND_V, l, -1, a->hidden, kvw, a->qkv_bias, name);
  }
  qk_norms(e, l, p);
  snprintf(name, sizeof name, "%s.%s", p, a->family == VF_FAMILY_PHI ? "dense" : "o_proj");
  linear(e, VF_KIND_O, l, -1, qw, a->hidden, a->o_bias, name);
}

/* Multi-head latent attention (transformers 5.23 modeling_deepseek_v2.py
 * DeepseekV2Attention): Q projected directly or through a q_lora_rank bottleneck with its
 * norm; K and V from one kv_lora_rank latent (plus the shared rotated key part) that is
 * normed and expanded to every head's key and value. The kv projections produce keys and
 * values together: kind "other". */
static void attention_mla(struct emitter *e, int32_t l, const char *p) {
  const struct vf_arch *a = &e->m->arch;
  char name[128];
  uint64_t qw = a->heads * a->head_dim, nope = a->head_dim - a->qk_rope_head_dim;
  if (a->q_lora_rank) {
    snprintf(name, sizeof name, "%s.q_a_proj", p);
    linear(e, VF_KIND_Q, l, -1, a->hidden, a->q_lora_rank, a->qkv_bias, name);
    emit(e, VF_KIND_NORM, l, -1, a->q_lora_rank, 0, "%s.q_a_layernorm.weight", p);
    snprintf(name, sizeof name, "%s.q_b_proj", p);
    linear(e, VF_KIND_Q, l, -1, a->q_lora_rank, qw, false, name);
  } else {
    snprintf(name, sizeof name, "%s.q_proj", p);
    linear(e, VF_KIND_Q, l, -1, a->hidden, qw, false, name);
  }
  snprintf(name, sizeof name, "%s.kv_a_proj_with_mqa", p);
  linear(e, VF_KIND_OTHER, l, -1, a->hidden, a->kv_lora_rank + a->qk_rope_head_dim, a->qkv_bias, name);
  emit(e, VF_KIND_NORM, l, -1, a->kv_lora_rank, 0, "%s.kv_a_layernorm.weight", p);
  snprintf(name, sizeof name, "%s.kv_b_proj", p);
  linear(e, VF_KIND_OTHER, l, -1, a->kv_lora_rank, a->heads * (nope + a->v_head_dim), false, name);
  snprintf(name, sizeof name, "%s.o_proj", p);
  linear(e, VF_KIND_O, l, -1, a->heads * a->v_head_dim, a->hidden, a->o_bias, name);
}

static void llama_mlp(struct emitter *e, int32_t l, uint64_t width, const char *p) {
  const struct vf_arch *a = &e->m->arch;
  char name[128];
  if (a->fused_gate_up) {
    snprintf(name, sizeof name, "%s.gate_up_proj", p);
    linear(e, VF_KIND_GATE_UP, l, -1, a->hidden, 2 * width, a->mlp_bias, name);
  } else {
    snprintf(name, sizeof name, "%s.gate_proj", p);
    linear(e, VF_KIND_GATE, l, -1, a->hidden, width, a->mlp_bias, name);
    snprintf(name, sizeof name, "%s.up_proj", p);
    linear(e, VF_KIND_UP, l, -1, a->hidden, width, a->mlp_bias, name);
  }
  snprintf(name, sizeof name, "%s.down_proj", p);
  linear(e, VF_KIND_DOWN, l, -1, width, a->hidden, a->mlp_bias, name);
}

/* An expert's projections as checkpoints name and order them: mixtral's w1, w2, w3, and
 * the gate, up and down projections of qwen3_moe and deepseek_v2. */
struct expert_part {
  enum vf_kind kind;
  const char *name;
};
static const struct expert_part mixtral_parts[3] = {{VF_KIND_GATE, "w1"}, {VF_KIND_DOWN, "w2"}, {VF_KIND_UP, "w3"}};
static const struct expert_part mlp_parts[3] = {
    {VF_KIND_GATE, "gate_proj"}, {VF_KIND_UP, "up_proj"}, {VF_KIND_DOWN, "down_proj"}};

/* The router (p.gate), each expert's MLP, and deepseek_v2's shared experts beside them. */
static void experts(struct emitter *e, int32_t l, const char *p, const struct expert_part *parts) {
  const struct vf_arch *a = &e->m->arch;
  char name[160];
  snprintf(name, sizeof name, "%s.gate", p);
  linear(e, VF_KIND_ROUTER, l, -1, a->hidden, a->experts, false, name);
  for (uint64_t x = 0; x < a->experts; x++)
    for (int j = 0; j < 3; j++) {
      bool down = parts[j].kind == VF_KIND_DOWN;
      snprintf(name, sizeof name, "%s.experts.%d.%s", p, (int32_t)x, parts[j].name);
      linear(e, parts[j].kind, l, (int32_t)x, down ? a->intermediate : a->hidden, down ? a->hidden : a->intermediate,
             false, name);
    }
  snprintf(name, sizeof name, "%s.shared_experts", p);
  if (a->shared_intermediate) llama_mlp(e, l, a->shared_intermediate, name);
}

/* A layer's MLP: phi's, a dense one (deepseek_v2's first layers too), or experts, named as
 * mixtral's checkpoints name them unless qwen3_moe's or deepseek_v2's. */
static void layer_mlp(struct emitter *e, int32_t l) {
  const struct vf_arch *a = &e->m->arch;
  bool mlp_experts = a->family == VF_FAMILY_DEEPSEEK || strcmp(a->model_type, "qwen3_moe") == 0;
  char p[96];
  if (a->family == VF_FAMILY_PHI) {
    snprintf(p, sizeof p, "model.layers.%d.mlp.fc1", l);
    linear(e, VF_KIND_UP, l, -1, a->hidden, a->intermediate, true, p);
    snprintf(p, sizeof p, "model.layers.%d.mlp.fc2", l);
    linear(e, VF_KIND_DOWN, l, -1, a->intermediate, a->hidden, true, p);
  } else if (a->experts && !mlp_experts) {
    snprintf(p, sizeof p, "model.layers.%d.block_sparse_moe", l);
    experts(e, l, p, mixtral_parts);
  } else {
    snprintf(p, sizeof p, "model.layers.%d.mlp", l);
    if (!a->experts) llama_mlp(e, l, a->intermediate, p);
    else if ((uint64_t)l < a->dense_layers) llama_mlp(e, l, a->dense_intermediate, p);
    else experts(e, l, p, mlp_parts);
  }
}

/* A layer's norms by where they sit: before attention, between attention and the MLP,
 * and (gemma2, gemma3) around each sublayer's output. olmo2 has only the two after the
 * sublayers. */
static void layer_norm(struct emitter *e, int32_t l, const char *which) {
  char p[96];
  snprintf(p, sizeof p, "model.layers.%d.%s", l, which);
  norm(e, l, e->m->arch.norm == VF_NORM_LAYER, p);
}

/* llama, mistral, qwen2, qwen3, qwen3_moe, gemma, gemma2, gemma3_text, olmo2, smollm3,
 * phi3, mixtral, deepseek_v2, and phi (which differs in names, LayerNorm biases, parallel
 * attention and MLP with one shared norm, and an lm_head bias). */
static void llama_like(struct emitter *e) {
  const struct vf_arch *a = &e->m->arch;
  bool phi = a->family == VF_FAMILY_PHI, ln_bias = a->norm == VF_NORM_LAYER;
  char p[96];
  emit(e, VF_KIND_EMBEDDING, -1, -1, a->vocab, a->hidden, "model.embed_tokens.weight");
  for (uint64_t i = 0; i < a->layers; i++) {
    int32_t l = (int32_t)i;
    if (!a->post_norms) layer_norm(e, l, "input_layernorm");
    snprintf(p, sizeof p, "model.layers.%d.self_attn", l);
    if (a->kv_lora_rank) attention_mla(e, l, p);
    else attention_qkvo(e, l, p);
    if (a->norms_per_layer >= 2) layer_norm(e, l, "post_attention_layernorm");
    if (a->norms_per_layer >= 4) layer_norm(e, l, "pre_feedforward_layernorm");
    if (a->norms_per_layer >= 4 || a->post_norms) layer_norm(e, l, "post_feedforward_layernorm");
    layer_mlp(e, l);
  }
  norm(e, -1, ln_bias, phi ? "model.final_layernorm" : "model.norm");
  if (!a->tied_embeddings) linear(e, VF_KIND_HEAD, -1, -1, a->hidden, a->vocab, a->lm_head_bias, "lm_head");
}

static void gpt2(struct emitter *e) {
  const struct vf_arch *a = &e->m->arch;
  uint64_t h = a->hidden;
  char p[96];
  emit(e, VF_KIND_EMBEDDING, -1, -1, a->vocab, h, "transformer.wte.weight");
  emit(e, VF_KIND_EMBEDDING, -1, -1, a->max_positions, h, "transformer.wpe.weight");
  for (uint64_t i = 0; i < a->layers; i++) {
    int32_t l = (int32_t)i;
    snprintf(p, sizeof p, "transformer.h.%d.ln_1", l);
    norm(e, l, true, p);
    snprintf(p, sizeof p, "transformer.h.%d.attn.c_attn", l);
    conv1d(e, VF_KIND_QKV, l, h, 3 * h, p);
    snprintf(p, sizeof p, "transformer.h.%d.attn.c_proj", l);
    conv1d(e, VF_KIND_O, l, h, h, p);
    snprintf(p, sizeof p, "transformer.h.%d.ln_2", l);
    norm(e, l, true, p);
    snprintf(p, sizeof p, "transformer.h.%d.mlp.c_fc", l);
    conv1d(e, VF_KIND_UP, l, h, a->intermediate, p);
    snprintf(p, sizeof p, "transformer.h.%d.mlp.c_proj", l);
    conv1d(e, VF_KIND_DOWN, l, a->intermediate, h, p);
  }
  norm(e, -1, true, "transformer.ln_f");
  if (!a->tied_embeddings) linear(e, VF_KIND_HEAD, -1, -1, h, a->vocab, false, "lm_head");
}

static void gptneox(struct emitter *e) {
  const struct vf_arch *a = &e->m->arch;
  uint64_t h = a->hidden;
  char p[96];
  emit(e, VF_KIND_EMBEDDING, -1, -1, a->vocab, h, "gpt_neox.embed_in.weight");
  for (uint64_t i = 0; i < a->layers; i++) {
    int32_t l = (int32_t)i;
    snprintf(p, sizeof p, "gpt_neox.layers.%d.input_layernorm", l);
    norm(e, l, true, p);
    snprintf(p, sizeof p, "gpt_neox.layers.%d.post_attention_layernorm", l);
    norm(e, l, true, p);
    snprintf(p, sizeof p, "gpt_neox.layers.%d.attention.query_key_value", l);
    linear(e, VF_KIND_QKV, l, -1, h, 3 * a->heads * a->head_dim, a->qkv_bias, p);
    snprintf(p, sizeof p, "gpt_neox.layers.%d.attention.dense", l);
    linear(e, VF_KIND_O, l, -1, a->heads * a->head_dim, h, a->o_bias, p); /* attention_bias */
    snprintf(p, sizeof p, "gpt_neox.layers.%d.mlp.dense_h_to_4h", l);
    linear(e, VF_KIND_UP, l, -1, h, a->intermediate, true, p);
    snprintf(p, sizeof p, "gpt_neox.layers.%d.mlp.dense_4h_to_h", l);
    linear(e, VF_KIND_DOWN, l, -1, a->intermediate, h, true, p);
  }
  norm(e, -1, true, "gpt_neox.final_layer_norm");
  if (!a->tied_embeddings) linear(e, VF_KIND_HEAD, -1, -1, h, a->vocab, false, "embed_out");
}

static void falcon(struct emitter *e) {
  const struct vf_arch *a = &e->m->arch;
  uint64_t h = a->hidden, d = a->head_dim;
  char p[96];
  emit(e, VF_KIND_EMBEDDING, -1, -1, a->vocab, h, "transformer.word_embeddings.weight");
  for (uint64_t i = 0; i < a->layers; i++) {
    int32_t l = (int32_t)i;
    if (a->norms_per_layer >= 2) {
      snprintf(p, sizeof p, "transformer.h.%d.ln_attn", l);
      norm(e, l, true, p);
      snprintf(p, sizeof p, "transformer.h.%d.ln_mlp", l);
      norm(e, l, true, p);
    } else {
      snprintf(p, sizeof p, "transformer.h.%d.input_layernorm", l);
      norm(e, l, true, p);
    }
    snprintf(p, sizeof p, "transformer.h.%d.self_attention.query_key_value", l);
    linear(e, VF_KIND_QKV, l, -1, h, (a->heads + 2 * a->kv_heads) * d, a->qkv_bias, p);
    snprintf(p, sizeof p, "transformer.h.%d.self_attention.dense", l);
    linear(e, VF_KIND_O, l, -1, a->heads * d, h, a->o_bias, p);
    snprintf(p, sizeof p, "transformer.h.%d.mlp.dense_h_to_4h", l);
    linear(e, VF_KIND_UP, l, -1, h, a->intermediate, a->mlp_bias, p);
    snprintf(p, sizeof p, "transformer.h.%d.mlp.dense_4h_to_h", l);
    linear(e, VF_KIND_DOWN, l, -1, a->intermediate, h, a->mlp_bias, p);
  }
  norm(e, -1, true, "transformer.ln_f");
  if (!a->tied_embeddings) linear(e, VF_KIND_HEAD, -1, -1, h, a->vocab, false, "lm_head");
}

/* BERT and RoBERTa: the base encoder with its pooler; task heads belong to the setup. */
static void bert(struct emitter *e) {
  const struct vf_arch *a = &e->m->arch;
  uint64_t h = a->hidden;
  const char *root = a->model_type[0] == 'r' ? "roberta" : "bert";
  char p[128];
  emit(e, VF_KIND_EMBEDDING, -1, -1, a->vocab, h, "%s.embeddings.word_embeddings.weight", root);
  emit(e, VF_KIND_EMBEDDING, -1, -1, a->max_positions, h,
       "%s.embeddings.position_embeddings.weight", root);
  emit(e, VF_KIND_EMBEDDING, -1, -1, a->type_vocab, h,
       "%s.embeddings.token_type_embeddings.weight", root);
  snprintf(p, sizeof p, "%s.embeddings.LayerNorm", root);
  norm(e, -1, true, p);
  for (uint64_t i = 0; i < a->layers; i++) {
    int32_t l = (int32_t)i;
    static const struct {
      const char *part;
      enum vf_kind kind;
    } proj[] = {{"attention.self.query", VF_KIND_Q}, {"attention.self.key", VF_KIND_K},
                {"attention.self.value", VF_KIND_V}, {"attention.output.dense", VF_KIND_O}};
    for (size_t j = 0; j < 4; j++) {
      snprintf(p, sizeof p, "%s.encoder.layer.%d.%s", root, l, proj[j].part);
      linear(e, proj[j].kind, l, -1, h, h, true, p);
    }
    snprintf(p, sizeof p, "%s.encoder.layer.%d.attention.output.LayerNorm", root, l);
    norm(e, l, true, p);
    snprintf(p, sizeof p, "%s.encoder.layer.%d.intermediate.dense", root, l);
    linear(e, VF_KIND_UP, l, -1, h, a->intermediate, true, p);
    snprintf(p, sizeof p, "%s.encoder.layer.%d.output.dense", root, l);
    linear(e, VF_KIND_DOWN, l, -1, a->intermediate, h, true, p);
    snprintf(p, sizeof p, "%s.encoder.layer.%d.output.LayerNorm", root, l);
    norm(e, l, true, p);
  }
  snprintf(p, sizeof p, "%s.pooler.dense", root);
  linear(e, VF_KIND_OTHER, -1, -1, h, h, true, p);
}

int vf_model_expand(struct vf_model *m) {
  int rc = vf_arch_validate(&m->arch, NULL);
  if (rc) return rc;
  for (size_t i = 0; i < m->n_tensors; i++) vf_free(m->tensors[i].name);
  m->n_tensors = 0;
  struct emitter e = {.m = m, .rc = 0};
  switch (m->arch.family) {
  case VF_FAMILY_LLAMA:
  case VF_FAMILY_MIXTRAL:
  case VF_FAMILY_DEEPSEEK:
  case VF_FAMILY_PHI:
    llama_like(&e);
    break;
  case VF_FAMILY_GPT2:
    gpt2(&e);
    break;
  case VF_FAMILY_GPTNEOX:
    gptneox(&e);
    break;
  case VF_FAMILY_FALCON:
    falcon(&e);
    break;
  case VF_FAMILY_BERT:
    bert(&e);
    break;
  default:
    return VF_EUNSUPPORTED;
  }
  m->has_arch = true;
  return e.rc;
}

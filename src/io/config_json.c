/* Hugging Face config.json → struct vf_arch. Each model_type's fixed layout facts sit in
 * one table; the dimensions come from the file under the key names each family uses. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "base/diag.h"
#include "base/json_util.h"
#include "vramfit.h"

struct type_layout {
  const char *model_type;
  enum vf_family family;
  enum vf_norm norm;
  uint32_t norms_per_layer;
  bool glu, qkv_bias, o_bias, mlp_bias, lm_head_bias, fused_qkv, fused_gate_up;
  bool parallel_residual, learned_positions, tied_default;
  double rotary_fraction;
};

static const struct type_layout layouts[] = {
    /* type        family              norm           n glu  qkvb  ob    mlpb  headb fqkv  fgu   par   pos   tied  rope */
    {"llama",      VF_FAMILY_LLAMA,   VF_NORM_RMS,   2, true, false, false, false, false, false, false, false, false, false, 1.0},
    {"mistral",    VF_FAMILY_LLAMA,   VF_NORM_RMS,   2, true, false, false, false, false, false, false, false, false, false, 1.0},
    {"qwen2",      VF_FAMILY_LLAMA,   VF_NORM_RMS,   2, true, true,  false, false, false, false, false, false, false, false, 1.0},
    {"gemma",      VF_FAMILY_LLAMA,   VF_NORM_RMS,   2, true, false, false, false, false, false, false, false, false, true,  1.0},
    {"gemma2",     VF_FAMILY_LLAMA,   VF_NORM_RMS,   4, true, false, false, false, false, false, false, false, false, true,  1.0},
    {"phi3",       VF_FAMILY_LLAMA,   VF_NORM_RMS,   2, true, false, false, false, false, true,  true,  false, false, false, 1.0},
    {"mixtral",    VF_FAMILY_MIXTRAL, VF_NORM_RMS,   2, true, false, false, false, false, false, false, false, false, false, 1.0},
    {"gpt2",       VF_FAMILY_GPT2,    VF_NORM_LAYER, 2, false, true, true,  true,  false, true,  false, false, true,  true,  0.0},
    {"gpt_neox",   VF_FAMILY_GPTNEOX, VF_NORM_LAYER, 2, false, true, true,  true,  false, true,  false, true,  false, false, 0.25},
    {"falcon",     VF_FAMILY_FALCON,  VF_NORM_LAYER, 1, false, false, false, false, false, true, false, true,  false, true,  1.0},
    {"phi",        VF_FAMILY_PHI,     VF_NORM_LAYER, 1, false, true, true,  true,  true,  false, false, true,  false, false, 0.5},
    {"bert",       VF_FAMILY_BERT,    VF_NORM_LAYER, 2, false, true, true,  true,  false, false, false, false, true,  true,  0.0},
    {"roberta",    VF_FAMILY_BERT,    VF_NORM_LAYER, 2, false, true, true,  true,  false, false, false, false, true,  true,  0.0},
};

static const struct type_layout *find_layout(const char *type) {
  for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++)
    if (strcmp(layouts[i].model_type, type) == 0) return &layouts[i];
  return NULL;
}

static void supported_list(char *buf, size_t size) {
  size_t o = 0;
  for (size_t i = 0; i < sizeof layouts / sizeof *layouts && o < size; i++)
    o += snprintf(buf + o, size - o, "%s%s", i ? ", " : "", layouts[i].model_type);
}

/* Key names per dimension, first present wins (GPT-2 and Falcon spell them differently). */
static const char *const k_hidden[] = {"hidden_size", "n_embd", "d_model", NULL};
static const char *const k_layers[] = {"num_hidden_layers", "n_layer", "num_layers", NULL};
static const char *const k_heads[] = {"num_attention_heads", "n_head", NULL};
static const char *const k_kv[] = {"num_key_value_heads", "num_kv_heads", NULL};
static const char *const k_inter[] = {"intermediate_size", "n_inner", "ffn_hidden_size", NULL};
static const char *const k_vocab[] = {"vocab_size", NULL};
static const char *const k_pos[] = {"max_position_embeddings", "n_positions", "n_ctx", NULL};
static const char *const k_head_dim[] = {"head_dim", NULL};
static const char *const k_experts[] = {"num_local_experts", NULL};
static const char *const k_topk[] = {"num_experts_per_tok", NULL};
static const char *const k_types[] = {"type_vocab_size", NULL};
static const char *const k_window[] = {"sliding_window", NULL};

struct reader {
  json_t *root;
  const char *file;
  struct vf_diag *d;
  int rc;
};

/* Reads an optional whole number; null counts as absent. */
static bool read_u64(struct reader *r, const char *const *keys, uint64_t *out) {
  if (r->rc) return false;
  for (size_t i = 0; keys[i]; i++) {
    json_t *v = json_object_get(r->root, keys[i]);
    if (!v || json_is_null(v)) continue;
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
      *out = (uint64_t)json_integer_value(v);
      return true;
    }
    r->rc = diag_at(r->d, VF_EFORMAT, r->file, UINT64_MAX,
                    "'%s' must be a non-negative whole number", keys[i]);
    return false;
  }
  return false;
}

/* The message lists every spelling: a GPT-2 config lacks "hidden_size" but has "n_embd". */
static void require_u64(struct reader *r, const char *const *keys, uint64_t *out) {
  if (read_u64(r, keys, out) || r->rc) return;
  char also[128] = "";
  for (size_t i = 1, o = 0; keys[i] && o < sizeof also; i++)
    o += snprintf(also + o, sizeof also - o, "%s'%s'", i > 1 ? ", " : " (or ", keys[i]);
  r->rc = diag_at(r->d, VF_EFORMAT, r->file, UINT64_MAX, "missing '%s'%s%s", keys[0], also,
                  keys[1] ? ")" : "");
}

static bool read_bool(struct reader *r, const char *key, bool fallback) {
  json_t *v = json_object_get(r->root, key);
  if (!v || json_is_null(v)) return fallback;
  if (json_is_boolean(v)) return json_is_true(v);
  if (!r->rc)
    r->rc = diag_at(r->d, VF_EFORMAT, r->file, UINT64_MAX, "'%s' must be true or false", key);
  return fallback;
}

static double read_real(struct reader *r, const char *key, double fallback) {
  json_t *v = json_object_get(r->root, key);
  if (!v || json_is_null(v)) return fallback;
  if (json_is_number(v)) return json_number_value(v);
  if (!r->rc) r->rc = diag_at(r->d, VF_EFORMAT, r->file, UINT64_MAX, "'%s' must be a number", key);
  return fallback;
}

/* The MLP activation when the config names none: transformers' configuration classes'
 * defaults (hidden_act / activation_function / hidden_activation). */
static const struct {
  const char *model_type, *activation;
} default_activation[] = {
    {"gpt2", "gelu_new"}, {"gpt_neox", "gelu"}, {"falcon", "gelu"}, {"phi", "gelu_new"},
    {"bert", "gelu"},     {"roberta", "gelu"},  {"gemma", "gelu_pytorch_tanh"},
    {"gemma2", "gelu_pytorch_tanh"},
};
static const char *const k_act[] = {"hidden_act", "activation_function", "hidden_activation", NULL};

static void read_activation(struct reader *r, struct vf_arch *a) {
  snprintf(a->activation, sizeof a->activation, "silu");
  for (size_t i = 0; i < sizeof default_activation / sizeof *default_activation; i++)
    if (strcmp(default_activation[i].model_type, a->model_type) == 0)
      snprintf(a->activation, sizeof a->activation, "%s", default_activation[i].activation);
  for (size_t i = 0; k_act[i]; i++) {
    json_t *v = json_object_get(r->root, k_act[i]);
    if (json_is_string(v) && strlen(json_string_value(v)) < sizeof a->activation) {
      snprintf(a->activation, sizeof a->activation, "%s", json_string_value(v));
      return;
    }
  }
}

static void apply_layout(struct vf_arch *a, const struct type_layout *t) {
  snprintf(a->model_type, sizeof a->model_type, "%s", t->model_type);
  a->family = t->family;
  a->norm = t->norm;
  a->norms_per_layer = t->norms_per_layer;
  a->glu = t->glu;
  a->qkv_bias = t->qkv_bias;
  a->o_bias = t->o_bias;
  a->mlp_bias = t->mlp_bias;
  a->lm_head_bias = t->lm_head_bias;
  a->fused_qkv = t->fused_qkv;
  a->fused_gate_up = t->fused_gate_up;
  a->parallel_residual = t->parallel_residual;
  a->learned_positions = t->learned_positions;
  a->rotary_fraction = t->rotary_fraction;
}

/* Falcon's config names its variants with switches instead of dimensions. */
static void falcon_variant(struct reader *r, struct vf_arch *a) {
  bool new_arch = read_bool(r, "new_decoder_architecture", false);
  bool multi_query = read_bool(r, "multi_query", true);
  bool bias = read_bool(r, "bias", false);
  a->qkv_bias = a->o_bias = a->mlp_bias = bias;
  a->parallel_residual = read_bool(r, "parallel_attn", true) || new_arch;
  if (new_arch) a->norms_per_layer = 2;
  /* As in transformers' FalconAttention: num_kv_heads counts only with the new decoder
   * architecture; otherwise multi_query means one KV head, and its absence one per head
   * (newer transformers write num_kv_heads = heads into falcon-7b's config). */
  bool has_kv = read_u64(r, k_kv, &a->kv_heads);
  if (!new_arch || !has_kv) a->kv_heads = (multi_query && !new_arch) ? 1 : a->heads;
}

static void read_dims(struct reader *r, struct vf_arch *a, const struct type_layout *t) {
  require_u64(r, k_hidden, &a->hidden);
  require_u64(r, k_layers, &a->layers);
  require_u64(r, k_heads, &a->heads);
  require_u64(r, k_vocab, &a->vocab);
  if (!read_u64(r, k_inter, &a->intermediate)) a->intermediate = 4 * a->hidden;
  /* A learned position table is as long as max_positions: without it the size is unknown. */
  if (t->learned_positions) require_u64(r, k_pos, &a->max_positions);
  else if (!read_u64(r, k_pos, &a->max_positions)) a->max_positions = 0;
  if (t->family == VF_FAMILY_FALCON) falcon_variant(r, a);
  else if (!read_u64(r, k_kv, &a->kv_heads)) a->kv_heads = a->heads;
  if (!read_u64(r, k_head_dim, &a->head_dim) && a->heads) {
    if (a->hidden % a->heads && !r->rc)
      r->rc = diag_at(r->d, VF_EFORMAT, r->file, UINT64_MAX,
                      "hidden size %llu is not a multiple of %llu heads",
                      (unsigned long long)a->hidden, (unsigned long long)a->heads);
    a->head_dim = a->hidden / a->heads;
  }
  read_u64(r, k_experts, &a->experts);
  read_u64(r, k_topk, &a->experts_per_token);
  if (t->family == VF_FAMILY_BERT && !read_u64(r, k_types, &a->type_vocab)) a->type_vocab = 2;
  if (read_bool(r, "use_sliding_window", true)) read_u64(r, k_window, &a->sliding_window);
  a->num_labels = 2;
}

static void read_switches(struct reader *r, struct vf_arch *a, const struct type_layout *t) {
  a->tied_embeddings = read_bool(r, "tie_word_embeddings", t->tied_default);
  /* Llama's attention_bias puts biases on all four projections. */
  bool attention_bias = read_bool(r, "attention_bias", a->qkv_bias && a->o_bias);
  if (attention_bias != (a->qkv_bias && a->o_bias)) a->qkv_bias = a->o_bias = attention_bias;
  a->mlp_bias = read_bool(r, "mlp_bias", a->mlp_bias);
  if (t->family == VF_FAMILY_GPTNEOX) {
    a->parallel_residual = read_bool(r, "use_parallel_residual", true);
    a->rotary_fraction = read_real(r, "rotary_pct", a->rotary_fraction);
  }
  a->rotary_fraction = read_real(r, "partial_rotary_factor", a->rotary_fraction);
  a->final_logit_softcap = read_real(r, "final_logit_softcapping", 0.0);
  a->attn_logit_softcap = read_real(r, "attn_logit_softcapping", 0.0);
  json_t *dt = json_object_get(r->root, "torch_dtype");
  if (!dt) dt = json_object_get(r->root, "dtype");
  enum vf_dtype parsed;
  if (json_is_string(dt) && vf_dtype_from_name(json_string_value(dt), &parsed) == 0)
    a->dtype = parsed;
  else
    a->dtype = VF_DTYPE_F32;
}

int vf_model_from_config_json(struct vf_model *m, const char *json, size_t len,
                              const char *file, struct vf_diag *d) {
  json_t *root;
  int rc = parse_json_text(json, len, file, &root, d);
  if (rc) return rc;
  struct reader r = {.root = root, .file = file, .d = d, .rc = 0};
  json_t *type = json_object_get(root, "model_type");
  const struct type_layout *t = NULL;
  if (!json_is_string(type)) {
    r.rc = diag_at(d, VF_EFORMAT, file, UINT64_MAX, "missing 'model_type'");
  } else if (!(t = find_layout(json_string_value(type)))) {
    char list[512];
    supported_list(list, sizeof list);
    r.rc = diag_at(d, VF_EUNSUPPORTED, file, UINT64_MAX,
                   "model_type '%s' is not supported; supported: %s",
                   json_string_value(type), list);
  }
  struct vf_arch a = {0};
  if (!r.rc) {
    apply_layout(&a, t);
    read_dims(&r, &a, t);
    read_switches(&r, &a, t);
    read_activation(&r, &a);
  }
  json_decref(root);
  if (r.rc) return r.rc;
  if ((rc = vf_arch_validate(&a, d))) {
    if (d) snprintf(d->file, sizeof d->file, "%s", file);
    return rc;
  }
  m->arch = a;
  m->has_arch = true;
  return vf_model_expand(m);
}

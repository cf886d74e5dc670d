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
  enum vf_qk_norm qk_norm;
  bool post_norms;
};

/* Each type's layout as its modeling code in transformers 5.23 builds it
 * (models/<type>/modeling_<type>.py): qwen3's and gemma3's q_norm and k_norm span head_dim,
 * olmo2's the whole projection, and its two norms follow the sublayers. smollm3's NoPE
 * layers (every fourth skips RoPE) differ only by RoPE's transient copies, which the
 * estimator counts on every layer. */
#define NONE VF_QK_NORM_NONE
#define HEAD VF_QK_NORM_HEAD
#define PROJ VF_QK_NORM_PROJECTION
static const struct type_layout layouts[] = {
    /* type         family              norm           n  glu    qkvb   ob     mlpb   headb  fqkv   fgu    par    pos    tied   rope   qk     post */
    {"llama",       VF_FAMILY_LLAMA,    VF_NORM_RMS,   2, true,  false, false, false, false, false, false, false, false, false, 1.0,   NONE,  false},
    {"mistral",     VF_FAMILY_LLAMA,    VF_NORM_RMS,   2, true,  false, false, false, false, false, false, false, false, false, 1.0,   NONE,  false},
    {"qwen2",       VF_FAMILY_LLAMA,    VF_NORM_RMS,   2, true,  true,  false, false, false, false, false, false, false, false, 1.0,   NONE,  false},
    {"qwen3",       VF_FAMILY_LLAMA,    VF_NORM_RMS,   2, true,  false, false, false, false, false, false, false, false, false, 1.0,   HEAD,  false},
    {"qwen3_moe",   VF_FAMILY_MIXTRAL,  VF_NORM_RMS,   2, true,  false, false, false, false, false, false, false, false, false, 1.0,   HEAD,  false},
    {"gemma",       VF_FAMILY_LLAMA,    VF_NORM_RMS,   2, true,  false, false, false, false, false, false, false, false, true,  1.0,   NONE,  false},
    {"gemma2",      VF_FAMILY_LLAMA,    VF_NORM_RMS,   4, true,  false, false, false, false, false, false, false, false, true,  1.0,   NONE,  false},
    {"gemma3_text", VF_FAMILY_LLAMA,    VF_NORM_RMS,   4, true,  false, false, false, false, false, false, false, false, true,  1.0,   HEAD,  false},
    {"olmo2",       VF_FAMILY_LLAMA,    VF_NORM_RMS,   2, true,  false, false, false, false, false, false, false, false, false, 1.0,   PROJ,  true},
    {"smollm3",     VF_FAMILY_LLAMA,    VF_NORM_RMS,   2, true,  false, false, false, false, false, false, false, false, true,  1.0,   NONE,  false},
    {"phi3",        VF_FAMILY_LLAMA,    VF_NORM_RMS,   2, true,  false, false, false, false, true,  true,  false, false, false, 1.0,   NONE,  false},
    {"mixtral",     VF_FAMILY_MIXTRAL,  VF_NORM_RMS,   2, true,  false, false, false, false, false, false, false, false, false, 1.0,   NONE,  false},
    {"deepseek_v2", VF_FAMILY_DEEPSEEK, VF_NORM_RMS,   2, true,  false, false, false, false, false, false, false, false, false, 1.0,   NONE,  false},
    {"gpt2",        VF_FAMILY_GPT2,     VF_NORM_LAYER, 2, false, true,  true,  true,  false, true,  false, false, true,  true,  0.0,   NONE,  false},
    {"gpt_neox",    VF_FAMILY_GPTNEOX,  VF_NORM_LAYER, 2, false, true,  true,  true,  false, true,  false, true,  false, false, 0.25,  NONE,  false},
    {"falcon",      VF_FAMILY_FALCON,   VF_NORM_LAYER, 1, false, false, false, false, false, true,  false, true,  false, true,  1.0,   NONE,  false},
    {"phi",         VF_FAMILY_PHI,      VF_NORM_LAYER, 1, false, true,  true,  true,  true,  false, false, true,  false, false, 0.5,   NONE,  false},
    {"bert",        VF_FAMILY_BERT,     VF_NORM_LAYER, 2, false, true,  true,  true,  false, false, false, false, true,  true,  0.0,   NONE,  false},
    {"roberta",     VF_FAMILY_BERT,     VF_NORM_LAYER, 2, false, true,  true,  true,  false, false, false, false, true,  true,  0.0,   NONE,  false},
};
#undef NONE
#undef HEAD
#undef PROJ

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
/* transformers 5.23.0 writes qwen3_moe's num_experts as num_local_experts (a live model's
 * config as vramfit.estimate hands it over, Qwen3MoeConfig.to_json_string). */
static const char *const k_routed_experts[] = {"num_experts", "n_routed_experts", "num_local_experts", NULL};
static const char *const k_expert_inter[] = {"moe_intermediate_size", NULL};
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
    {"gemma2", "gelu_pytorch_tanh"}, {"gemma3_text", "gelu_pytorch_tanh"},
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
  a->qk_norm = t->qk_norm;
  a->post_norms = t->post_norms;
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

/* A whole number with the configuration class's default when the key is absent; null means
 * none (0), as DeepseekV2Config's q_lora_rank: null projects the queries directly. */
static uint64_t read_default(struct reader *r, const char *key, uint64_t fallback) {
  const char *const keys[] = {key, NULL};
  json_t *v = json_object_get(r->root, key);
  uint64_t n = 0;
  if (!v) return fallback;
  read_u64(r, keys, &n);
  return n;
}

static void unsupported(struct reader *r, const char *why) {
  if (!r->rc) r->rc = diag_at(r->d, VF_EUNSUPPORTED, r->file, UINT64_MAX, "%s", why);
}

/* qwen3_moe: Qwen3MoeDecoderLayer (modeling_qwen3_moe.py@v5.23.0) puts a dense MLP of
 * intermediate_size on the layers of mlp_only_layers and those off decoder_sparse_step;
 * the published models have none, and the layouts here hold experts on every layer. */
static void qwen3_moe_layers(struct reader *r) {
  json_t *dense = json_object_get(r->root, "mlp_only_layers");
  if (read_default(r, "decoder_sparse_step", 1) != 1 || (json_is_array(dense) && json_array_size(dense)))
    unsupported(r, "qwen3_moe with dense layers among the sparse ones (decoder_sparse_step, mlp_only_layers) "
                   "is not supported");
}

/* deepseek_v2 (configuration_deepseek_v2.py and modeling_deepseek_v2.py@v5.23.0): the first
 * first_k_dense_replace layers have a dense MLP of intermediate_size, the others
 * n_routed_experts experts and n_shared_experts shared ones of moe_intermediate_size; the
 * attention compresses K and V (and Q, unless q_lora_rank is null) through low-rank
 * projections, its heads qk_nope_head_dim + qk_rope_head_dim wide for q and k and v_head_dim
 * for v. Absent keys take DeepseekV2Config's defaults, as transformers reads the file. */
static void deepseek_v2_layout(struct reader *r, struct vf_arch *a) {
  a->dense_layers = read_default(r, "first_k_dense_replace", 0);
  uint64_t shared = read_default(r, "n_shared_experts", 2), nope = read_default(r, "qk_nope_head_dim", 128);
  /* Saturated, so that absurd values fail vf_arch_validate instead of wrapping around. */
  a->shared_intermediate = shared && a->intermediate > UINT64_MAX / shared ? UINT64_MAX : shared * a->intermediate;
  a->kv_lora_rank = read_default(r, "kv_lora_rank", 512);
  a->q_lora_rank = read_default(r, "q_lora_rank", 1536);
  a->qk_rope_head_dim = read_default(r, "qk_rope_head_dim", 64);
  a->v_head_dim = read_default(r, "v_head_dim", 128);
  a->head_dim = nope > UINT64_MAX - a->qk_rope_head_dim ? UINT64_MAX : nope + a->qk_rope_head_dim;
  if (a->head_dim) a->rotary_fraction = (double)a->qk_rope_head_dim / (double)a->head_dim;
}

/* Experts moe_intermediate_size wide (qwen3_moe, deepseek_v2) make intermediate_size the
 * dense layers' width; mixtral's intermediate_size is its experts'. */
static void read_experts(struct reader *r, struct vf_arch *a, const struct type_layout *t) {
  bool expert_width = strcmp(t->model_type, "qwen3_moe") == 0 || t->family == VF_FAMILY_DEEPSEEK;
  read_u64(r, k_topk, &a->experts_per_token);
  if (!expert_width) {
    read_u64(r, k_experts, &a->experts);
    return;
  }
  require_u64(r, k_routed_experts, &a->experts);
  a->dense_intermediate = a->intermediate;
  require_u64(r, k_expert_inter, &a->intermediate);
  if (t->family == VF_FAMILY_DEEPSEEK) deepseek_v2_layout(r, a);
  else qwen3_moe_layers(r);
  if (!a->dense_layers) a->dense_intermediate = 0;
}

/* head_dim when the config names none: the configuration class's default where it has one
 * (configuration_<type>.py@v5.23.0), else hidden_size / num_attention_heads as the modeling
 * code derives it. */
static const struct {
  const char *model_type;
  uint64_t head_dim;
} default_head_dim[] = {{"gemma", 256}, {"gemma2", 256}, {"gemma3_text", 256}, {"qwen3", 128}};

static void read_head_dim(struct reader *r, struct vf_arch *a) {
  if (read_u64(r, k_head_dim, &a->head_dim) || !a->heads) return;
  for (size_t i = 0; i < sizeof default_head_dim / sizeof *default_head_dim; i++)
    if (strcmp(default_head_dim[i].model_type, a->model_type) == 0) {
      a->head_dim = default_head_dim[i].head_dim;
      return;
    }
  if (a->hidden % a->heads && !r->rc)
    r->rc = diag_at(r->d, VF_EFORMAT, r->file, UINT64_MAX, "hidden size %llu is not a multiple of %llu heads",
                    (unsigned long long)a->hidden, (unsigned long long)a->heads);
  a->head_dim = a->hidden / a->heads;
}

/* Which layers slide: gemma2 and gemma3_text alternate sliding-window layers with a global
 * one, every second (Gemma2Config's layer_types) or every sliding_window_pattern-th
 * (configuration_gemma3.py@v5.23.0, default 6), or as layer_types lists them when it repeats
 * such a period; the others slide on every layer. */
static const char *layer_type(json_t *types, size_t i) {
  const char *type = json_string_value(json_array_get(types, i));
  return type ? type : "";
}

static void read_layer_types(struct reader *r, struct vf_arch *a, json_t *types) {
  size_t n = json_array_size(types), i = 0;
  while (i < n && strcmp(layer_type(types, i), "full_attention")) i++;
  a->window_period = i < n ? i + 1 : 0;
  for (i = 0; i < n; i++) {
    bool full = a->window_period && (i + 1) % a->window_period == 0;
    if (strcmp(layer_type(types, i), full ? "full_attention" : "sliding_attention"))
      unsupported(r, "layer_types without a repeating period of sliding layers and one global layer are not supported");
  }
}

static void read_window_period(struct reader *r, struct vf_arch *a) {
  json_t *types = json_object_get(r->root, "layer_types");
  if (json_is_array(types)) read_layer_types(r, a, types);
  else if (strcmp(a->model_type, "gemma3_text") == 0) a->window_period = read_default(r, "sliding_window_pattern", 6);
  else if (strcmp(a->model_type, "gemma2") == 0) a->window_period = 2;
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
  if (t->family != VF_FAMILY_DEEPSEEK) read_head_dim(r, a); /* deepseek_v2's comes from its MLA keys */
  read_experts(r, a, t);
  if (t->family == VF_FAMILY_BERT && !read_u64(r, k_types, &a->type_vocab)) a->type_vocab = 2;
  if (read_bool(r, "use_sliding_window", true)) read_u64(r, k_window, &a->sliding_window);
  if (a->sliding_window) read_window_period(r, a);
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

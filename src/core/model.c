/* The model description: parameter tensors and the counts derived from them. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "base/grow.h"
#include "vramfit.h"

static const char *const family_names[VF_FAMILY_COUNT] = {
    [VF_FAMILY_LLAMA] = "llama",   [VF_FAMILY_MIXTRAL] = "mixtral", [VF_FAMILY_GPT2] = "gpt2",
    [VF_FAMILY_GPTNEOX] = "gpt-neox", [VF_FAMILY_FALCON] = "falcon", [VF_FAMILY_PHI] = "phi",
    [VF_FAMILY_BERT] = "bert",     [VF_FAMILY_DEEPSEEK] = "deepseek",
};

static const char *const kind_names[VF_KIND_COUNT] = {
    [VF_KIND_Q] = "q",         [VF_KIND_K] = "k",       [VF_KIND_V] = "v",
    [VF_KIND_O] = "o",         [VF_KIND_GATE] = "gate", [VF_KIND_UP] = "up",
    [VF_KIND_DOWN] = "down",   [VF_KIND_HEAD] = "head", [VF_KIND_EMBEDDING] = "embedding",
    [VF_KIND_NORM] = "norm",   [VF_KIND_OTHER] = "other", [VF_KIND_QKV] = "qkv",
    [VF_KIND_GATE_UP] = "gate_up", [VF_KIND_ROUTER] = "router",
};

const char *vf_family_name(enum vf_family f) {
  return (f >= 0 && f < VF_FAMILY_COUNT) ? family_names[f] : "unknown";
}

const char *vf_kind_name(enum vf_kind k) {
  return (k >= 0 && k < VF_KIND_COUNT) ? kind_names[k] : "unknown";
}

void vf_model_init(struct vf_model *m) {
  memset(m, 0, sizeof *m);
  m->arch.dtype = VF_DTYPE_F32;
}

static void free_tensors(struct vf_model *m) {
  for (size_t i = 0; i < m->n_tensors; i++) free(m->tensors[i].name);
  free(m->tensors);
  m->tensors = NULL;
  m->n_tensors = m->cap_tensors = 0;
}

void vf_model_cleanup(struct vf_model *m) {
  if (!m) return;
  free_tensors(m);
  for (size_t i = 0; i < m->n_notes; i++) free(m->notes[i]);
  free(m->notes);
  free(m->name);
  free(m->source);
  vf_model_init(m);
}

int vf_model_add_tensor(struct vf_model *m, const struct vf_tensor *t) {
  struct vf_tensor *grown = array_grow(m->tensors, &m->cap_tensors, m->n_tensors + 1, sizeof *grown);
  if (!grown) return VF_ENOMEM;
  m->tensors = grown;
  char *name = strdup(t->name);
  if (!name) return VF_ENOMEM;
  m->tensors[m->n_tensors] = *t;
  m->tensors[m->n_tensors].name = name;
  m->n_tensors++;
  return 0;
}

int vf_model_add_note(struct vf_model *m, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  char **grown = realloc(m->notes, (m->n_notes + 1) * sizeof *grown);
  if (!grown) return VF_ENOMEM;
  m->notes = grown;
  if (!(m->notes[m->n_notes] = strdup(buf))) return VF_ENOMEM;
  m->n_notes++;
  return 0;
}

/* Each dimension can be plausible alone while their product is not: a config multiplying
 * them into trillions of tensors or an overflowing parameter count must be refused before
 * vf_model_expand tries to list them. Real models stay far below both bounds (DeepSeek-V3:
 * 61 layers x 256 experts, 0.7e12 parameters). */
#define MAX_LAYER_EXPERTS (1ull << 18)
#define MAX_PARAMS (1ull << 50)

static bool too_many(const struct vf_arch *a) {
  typedef unsigned __int128 u128;
  uint64_t experts = a->experts ? a->experts : 1;
  if ((u128)a->layers * experts > MAX_LAYER_EXPERTS) return true;
  u128 attn = (u128)a->hidden * a->head_dim * (2 * a->heads + 2 * a->kv_heads);
  u128 mla = (u128)(a->hidden + a->heads * (a->head_dim + a->v_head_dim)) * (a->kv_lora_rank + a->q_lora_rank);
  u128 mlp = (u128)3 * a->hidden * (a->intermediate * experts + a->shared_intermediate + a->dense_intermediate);
  u128 tables = ((u128)a->vocab + a->max_positions + a->type_vocab) * a->hidden * 2;
  return (attn + mla + mlp) * a->layers + tables > MAX_PARAMS;
}

int vf_arch_validate(const struct vf_arch *a, struct vf_diag *d) {
  const char *why = NULL;
  if (!a->hidden) why = "hidden_size must be positive";
  else if (!a->layers) why = "num_hidden_layers must be positive";
  else if (!a->heads) why = "num_attention_heads must be positive";
  else if (!a->kv_heads || a->heads % a->kv_heads)
    why = "num_key_value_heads must divide num_attention_heads";
  else if (!a->head_dim) why = "head_dim must be positive";
  else if (!a->vocab) why = "vocab_size must be positive";
  else if (!a->intermediate) why = "intermediate_size must be positive";
  else if (a->experts_per_token > a->experts) why = "more experts per token than experts";
  else if (a->dense_layers > a->layers) why = "more dense layers than layers";
  else if (a->dense_layers && !a->dense_intermediate) why = "dense layers need an intermediate size";
  else if (a->kv_lora_rank && (a->qk_rope_head_dim > a->head_dim || !a->v_head_dim))
    why = "latent attention needs a rotated part within head_dim and a value head";
  else if (a->hidden > (1ull << 24) || a->intermediate > (1ull << 26) || a->vocab > (1ull << 28) ||
           a->layers > 100000 || a->heads > 100000 || a->experts > 100000 ||
           a->head_dim > (1ull << 20) || a->max_positions > (1ull << 32) || a->type_vocab > (1ull << 20) ||
           a->shared_intermediate > (1ull << 26) || a->dense_intermediate > (1ull << 26) ||
           a->kv_lora_rank > (1ull << 20) || a->q_lora_rank > (1ull << 20) || a->v_head_dim > (1ull << 20))
    why = "a dimension is implausibly large";
  else if (too_many(a))
    why = "the dimensions together imply an implausibly large model";
  if (!why) return 0;
  return diag_at(d, VF_EFORMAT, NULL, UINT64_MAX, "%s", why);
}

uint64_t vf_tensor_numel(const struct vf_tensor *t) {
  uint64_t n = 1;
  for (uint32_t i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

uint64_t vf_model_params(const struct vf_model *m) {
  uint64_t n = 0;
  for (size_t i = 0; i < m->n_tensors; i++) n += vf_tensor_numel(&m->tensors[i]);
  return n;
}

uint64_t vf_model_embedding_params(const struct vf_model *m) {
  uint64_t n = 0;
  for (size_t i = 0; i < m->n_tensors; i++)
    if (m->tensors[i].kind == VF_KIND_EMBEDDING) n += vf_tensor_numel(&m->tensors[i]);
  return n;
}

/* numel * part / whole without overflowing for any realistic tensor. */
static uint64_t share(uint64_t numel, uint64_t part, uint64_t whole) {
  return (uint64_t)((unsigned __int128)numel * part / whole);
}

void vf_model_by_kind(const struct vf_model *m, uint64_t out[VF_KIND_PUBLIC_COUNT]) {
  memset(out, 0, VF_KIND_PUBLIC_COUNT * sizeof *out);
  const struct vf_arch *a = &m->arch;
  /* Without a config, assume multi-head attention: q, k and v equally wide. */
  uint64_t q = m->has_arch ? a->heads : 1, kv = m->has_arch ? a->kv_heads : 1;
  for (size_t i = 0; i < m->n_tensors; i++) {
    const struct vf_tensor *t = &m->tensors[i];
    uint64_t n = vf_tensor_numel(t);
    if (t->kind == VF_KIND_QKV) {
      uint64_t qn = share(n, q, q + 2 * kv), kn = share(n, kv, q + 2 * kv);
      out[VF_KIND_Q] += qn;
      out[VF_KIND_K] += kn;
      out[VF_KIND_V] += n - qn - kn;
    } else if (t->kind == VF_KIND_GATE_UP) {
      out[VF_KIND_GATE] += n / 2;
      out[VF_KIND_UP] += n - n / 2;
    } else if (t->kind == VF_KIND_ROUTER) {
      out[VF_KIND_OTHER] += n;
    } else {
      out[t->kind] += n;
    }
  }
}

int vf_model_bytes(const struct vf_model *m, uint64_t *out) {
  uint64_t total = 0;
  for (size_t i = 0; i < m->n_tensors; i++) {
    uint64_t b;
    int rc = vf_dtype_bytes(m->tensors[i].dtype, vf_tensor_numel(&m->tensors[i]), &b);
    if (rc) return rc;
    total += b;
  }
  *out = total;
  return 0;
}

enum vf_dtype vf_model_main_dtype(const struct vf_model *m) {
  uint64_t per[VF_DTYPE_COUNT] = {0};
  for (size_t i = 0; i < m->n_tensors; i++)
    per[m->tensors[i].dtype] += vf_tensor_numel(&m->tensors[i]);
  enum vf_dtype best = m->n_tensors ? m->tensors[0].dtype : m->arch.dtype;
  for (int t = 0; t < VF_DTYPE_COUNT; t++)
    if (per[t] > per[best]) best = (enum vf_dtype)t;
  return best;
}

/* Name fragments, most specific first: the first that occurs in a name decides its kind.
 * Covers Hugging Face (llama, gpt2, gpt-neox, falcon, phi, bert, qwen3_moe's and deepseek_v2's
 * routers, the latter's compressed query projections), litgpt and GGUF names. */
static const struct {
  const char *fragment;
  enum vf_kind kind;
} kind_patterns[] = {
    {"norm", VF_KIND_NORM},          {"ln_", VF_KIND_NORM},
    {"LayerNorm", VF_KIND_NORM},     {"moe.gate.", VF_KIND_ROUTER},
    {"mlp.gate.", VF_KIND_ROUTER},   {"q_a_proj", VF_KIND_Q},
    {"q_b_proj", VF_KIND_Q},
    {"ffn_gate_inp", VF_KIND_ROUTER}, {"router", VF_KIND_ROUTER},
    {"qkv", VF_KIND_QKV},            {"query_key_value", VF_KIND_QKV},
    {"c_attn", VF_KIND_QKV},         {"attn.attn.", VF_KIND_QKV},
    {"gate_up", VF_KIND_GATE_UP},    {"q_proj", VF_KIND_Q},
    {"attn_q.", VF_KIND_Q},          {".query.", VF_KIND_Q},
    {"k_proj", VF_KIND_K},           {"attn_k.", VF_KIND_K},
    {".key.", VF_KIND_K},            {"v_proj", VF_KIND_V},
    {"attn_v.", VF_KIND_V},          {".value.", VF_KIND_V},
    {"o_proj", VF_KIND_O},           {"attn_output", VF_KIND_O},
    {"attention.output.dense", VF_KIND_O}, {"attn.c_proj", VF_KIND_O},
    {"self_attn.dense", VF_KIND_O},  {"attention.dense", VF_KIND_O},
    {"attn.proj", VF_KIND_O},        {"out_proj", VF_KIND_O},
    {"gate_proj", VF_KIND_GATE},     {"ffn_gate", VF_KIND_GATE},
    {".w1.", VF_KIND_GATE},          {"fc_1", VF_KIND_GATE},
    {"up_proj", VF_KIND_UP},         {"ffn_up", VF_KIND_UP},
    {".w3.", VF_KIND_UP},            {"fc_2", VF_KIND_UP},
    {"dense_h_to_4h", VF_KIND_UP},   {"c_fc", VF_KIND_UP},
    {"fc1", VF_KIND_UP},             {"intermediate.dense", VF_KIND_UP},
    {"mlp.fc.", VF_KIND_UP},         {"down_proj", VF_KIND_DOWN},
    {"ffn_down", VF_KIND_DOWN},      {".w2.", VF_KIND_DOWN},
    {"dense_4h_to_h", VF_KIND_DOWN}, {"mlp.c_proj", VF_KIND_DOWN},
    {"fc2", VF_KIND_DOWN},           {"output.dense", VF_KIND_DOWN},
    {"mlp.proj", VF_KIND_DOWN},      {"lm_head", VF_KIND_HEAD},
    {"embed_out", VF_KIND_HEAD},     {"classifier", VF_KIND_HEAD},
    {"cls.", VF_KIND_HEAD},          {"score.", VF_KIND_HEAD},
    {"embed", VF_KIND_EMBEDDING},    {"wte", VF_KIND_EMBEDDING},
    {"wpe", VF_KIND_EMBEDDING},      {"token_embd", VF_KIND_EMBEDDING},
    {"position_embd", VF_KIND_EMBEDDING}, {"token_types", VF_KIND_EMBEDDING},
};

/* The number after the first of the markers in name, or -1. */
static int32_t index_after(const char *name, const char *const *markers, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const char *p = strstr(name, markers[i]);
    if (p && (p == name || p[-1] == '.')) {
      p += strlen(markers[i]);
      if (*p < '0' || *p > '9') continue;
      long v = strtol(p, NULL, 10);
      return v > INT32_MAX ? -1 : (int32_t)v;
    }
  }
  return -1;
}

enum vf_kind vf_kind_from_name(const char *name, int32_t *layer, int32_t *expert) {
  static const char *const layer_markers[] = {"layers.", "layer.", "h.", "blk."};
  static const char *const expert_markers[] = {"experts."};
  if (layer) *layer = index_after(name, layer_markers, 4);
  if (expert) *expert = index_after(name, expert_markers, 1);
  /* GGUF's output head is plainly "output.weight". */
  if (strcmp(name, "output.weight") == 0 || strcmp(name, "output.bias") == 0) return VF_KIND_HEAD;
  for (size_t i = 0; i < sizeof kind_patterns / sizeof *kind_patterns; i++)
    if (strstr(name, kind_patterns[i].fragment)) return kind_patterns[i].kind;
  return VF_KIND_OTHER;
}

/* A model's tensors sorted by name, so matching a checkpoint against a layout (over a
 * thousand tensors each for a 405B model) is binary searches, not a quadratic scan. */
struct name_index {
  const struct vf_tensor **v;
  size_t n;
};

static int by_name_then_position(const void *pa, const void *pb) {
  const struct vf_tensor *a = *(const struct vf_tensor *const *)pa;
  const struct vf_tensor *b = *(const struct vf_tensor *const *)pb;
  int c = strcmp(a->name, b->name);
  return c ? c : (a > b) - (a < b);
}

static int index_build(struct name_index *ix, const struct vf_model *m) {
  ix->n = m->n_tensors;
  if (!(ix->v = malloc((ix->n + 1) * sizeof *ix->v))) return VF_ENOMEM;
  for (size_t i = 0; i < ix->n; i++) ix->v[i] = &m->tensors[i];
  qsort(ix->v, ix->n, sizeof *ix->v, by_name_then_position);
  return 0;
}

/* The first tensor in model order with this name, or NULL. */
static const struct vf_tensor *index_find(const struct name_index *ix, const char *name) {
  size_t lo = 0, hi = ix->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (strcmp(ix->v[mid]->name, name) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo < ix->n && strcmp(ix->v[lo]->name, name) == 0 ? ix->v[lo] : NULL;
}

static void shape_text(const struct vf_tensor *t, char *buf, size_t size) {
  size_t o = snprintf(buf, size, "[");
  for (uint32_t i = 0; i < t->ndim && o < size; i++)
    o += snprintf(buf + o, size - o, "%s%llu", i ? ", " : "", (unsigned long long)t->shape[i]);
  if (o < size) snprintf(buf + o, size - o, "]");
}

/* Notes are capped so a checkpoint of a different model does not print thousands of lines. */
#define MAX_DISAGREEMENTS 20

/* Notes every tensor missing on either side or shaped differently, at most
 * MAX_DISAGREEMENTS of them and then a count of the rest. */
static int note_differences(struct vf_model *m, const struct vf_model *ckpt,
                            const struct name_index *in_m, const struct name_index *in_ckpt) {
  size_t total = 0;
  char a[96], b[96];
  for (size_t i = 0; i < m->n_tensors; i++) {
    const struct vf_tensor *want = &m->tensors[i];
    const struct vf_tensor *got = index_find(in_ckpt, want->name);
    int rc = 0;
    if (!got) {
      if (++total <= MAX_DISAGREEMENTS)
        rc = vf_model_add_note(m, "%s: in the config's layout, not in the checkpoint", want->name);
    } else if (got->ndim != want->ndim ||
               memcmp(got->shape, want->shape, want->ndim * sizeof *want->shape)) {
      shape_text(want, a, sizeof a);
      shape_text(got, b, sizeof b);
      if (++total <= MAX_DISAGREEMENTS)
        rc = vf_model_add_note(m, "%s: config implies %s, checkpoint has %s", want->name, a, b);
    }
    if (rc) return rc;
  }
  for (size_t i = 0; i < ckpt->n_tensors; i++) {
    if (index_find(in_m, ckpt->tensors[i].name)) continue;
    if (++total <= MAX_DISAGREEMENTS) {
      int rc = vf_model_add_note(m, "%s: in the checkpoint, not in the config's layout",
                                 ckpt->tensors[i].name);
      if (rc) return rc;
    }
  }
  if (total > MAX_DISAGREEMENTS)
    return vf_model_add_note(m, "... and %zu more differences", total - MAX_DISAGREEMENTS);
  return 0;
}

int vf_model_adopt_checkpoint(struct vf_model *m, struct vf_model *ckpt) {
  struct name_index in_m = {0}, in_ckpt = {0};
  int rc = index_build(&in_m, m);
  if (!rc) rc = index_build(&in_ckpt, ckpt);
  /* Adding notes to m leaves its tensors in place, so the indexes stay valid. */
  if (!rc) rc = note_differences(m, ckpt, &in_m, &in_ckpt);
  free(in_m.v);
  free(in_ckpt.v);
  if (rc) return rc;
  free_tensors(m);
  m->tensors = ckpt->tensors;
  m->n_tensors = ckpt->n_tensors;
  m->cap_tensors = ckpt->cap_tensors;
  ckpt->tensors = NULL;
  ckpt->n_tensors = ckpt->cap_tensors = 0;
  free(m->source);
  m->source = ckpt->source;
  ckpt->source = NULL;
  return 0;
}

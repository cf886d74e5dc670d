#ifndef VRAMFIT_MODEL_H
#define VRAMFIT_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vramfit/api.h"
#include "vramfit/error.h"

#define VF_MAX_DIMS 4
#define VF_MODEL_TYPE_LEN 32 /* a config.json model_type, with its terminator */

/* Storage types: safetensors dtypes and ggml's block-quantized types. */
enum vf_dtype {
  VF_DTYPE_UNKNOWN = 0,
  VF_DTYPE_F32, VF_DTYPE_F16, VF_DTYPE_BF16, VF_DTYPE_F64,
  VF_DTYPE_F8_E4M3, VF_DTYPE_F8_E5M2, VF_DTYPE_F8_E8M0, VF_DTYPE_F8_E4M3FNUZ,
  VF_DTYPE_F8_E5M2FNUZ, VF_DTYPE_F6_E2M3, VF_DTYPE_F6_E3M2, VF_DTYPE_F4,
  VF_DTYPE_BOOL, VF_DTYPE_I8, VF_DTYPE_U8, VF_DTYPE_I16, VF_DTYPE_U16, VF_DTYPE_I32,
  VF_DTYPE_U32, VF_DTYPE_I64, VF_DTYPE_U64, VF_DTYPE_C64,
  VF_DTYPE_Q4_0, VF_DTYPE_Q4_1, VF_DTYPE_Q5_0, VF_DTYPE_Q5_1, VF_DTYPE_Q8_0, VF_DTYPE_Q8_1,
  VF_DTYPE_Q2_K, VF_DTYPE_Q3_K, VF_DTYPE_Q4_K, VF_DTYPE_Q5_K, VF_DTYPE_Q6_K, VF_DTYPE_Q8_K,
  VF_DTYPE_IQ2_XXS, VF_DTYPE_IQ2_XS, VF_DTYPE_IQ3_XXS, VF_DTYPE_IQ1_S, VF_DTYPE_IQ4_NL,
  VF_DTYPE_IQ3_S, VF_DTYPE_IQ2_S, VF_DTYPE_IQ4_XS, VF_DTYPE_IQ1_M, VF_DTYPE_TQ1_0,
  VF_DTYPE_TQ2_0, VF_DTYPE_MXFP4, VF_DTYPE_NVFP4, VF_DTYPE_Q1_0, VF_DTYPE_Q2_0,
  VF_DTYPE_COUNT
};

/* Canonical upper-case name ("BF16", "Q4_K"); "unknown" for VF_DTYPE_UNKNOWN. */
VF_API const char *vf_dtype_name(enum vf_dtype t);
/* Accepts canonical names and the torch/config spellings ("bfloat16", "float32", "fp16"),
 * case-insensitively. VF_ENOTFOUND when the name is unknown. */
VF_API int vf_dtype_from_name(const char *name, enum vf_dtype *out);
/* Bytes taken by n elements. VF_EUNSUPPORTED for an unknown dtype, VF_EINVAL when n is not
 * a whole number of blocks, VF_ERANGE on overflow. */
VF_API int vf_dtype_bytes(enum vf_dtype t, uint64_t n, uint64_t *out);

/* Architecture families: they decide tensor layout and naming. */
enum vf_family {
  VF_FAMILY_LLAMA,   /* llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text, phi3, olmo2, smollm3 */
  VF_FAMILY_MIXTRAL, /* llama-style attention, mixture-of-experts MLP (mixtral, qwen3_moe) */
  VF_FAMILY_GPT2,
  VF_FAMILY_GPTNEOX, /* pythia, stablelm-alpha */
  VF_FAMILY_FALCON,
  VF_FAMILY_PHI,     /* phi-1, phi-1.5, phi-2 */
  VF_FAMILY_BERT,    /* bert, roberta */
  VF_FAMILY_DEEPSEEK, /* multi-head latent attention, experts with shared ones (deepseek_v2) */
  VF_FAMILY_COUNT
};
VF_API const char *vf_family_name(enum vf_family f);

enum vf_norm { VF_NORM_RMS, VF_NORM_LAYER };

/* RMSNorms on the queries and keys before RoPE: over each head's head_dim (qwen3, gemma3)
 * or over the whole projection's output (olmo2). */
enum vf_qk_norm { VF_QK_NORM_NONE, VF_QK_NORM_HEAD, VF_QK_NORM_PROJECTION };

/* Which linear (or other role) a tensor plays. The first VF_KIND_PUBLIC_COUNT are the
 * contract's by_kind keys; QKV and GATE_UP are fused projections split by vf_model_by_kind. */
enum vf_kind {
  VF_KIND_Q, VF_KIND_K, VF_KIND_V, VF_KIND_O, VF_KIND_GATE, VF_KIND_UP, VF_KIND_DOWN,
  VF_KIND_HEAD, VF_KIND_EMBEDDING, VF_KIND_NORM, VF_KIND_OTHER,
  VF_KIND_PUBLIC_COUNT,
  VF_KIND_QKV = VF_KIND_PUBLIC_COUNT, VF_KIND_GATE_UP, VF_KIND_ROUTER,
  VF_KIND_COUNT
};
VF_API const char *vf_kind_name(enum vf_kind k);

/* Dimensions and layout switches of a transformer, as a Hugging Face config.json gives them. */
struct vf_arch {
  char model_type[VF_MODEL_TYPE_LEN];
  enum vf_family family;
  uint64_t hidden, layers, heads, kv_heads, head_dim, intermediate, vocab;
  uint64_t max_positions;
  uint64_t experts, experts_per_token; /* 0 for dense models; intermediate is then an expert's */
  uint64_t shared_intermediate;        /* the shared experts' MLP width (deepseek_v2); 0 without */
  uint64_t dense_layers;               /* leading layers of a MoE model whose MLP is dense... */
  uint64_t dense_intermediate;         /* ...this wide (deepseek_v2's first_k_dense_replace) */
  uint64_t type_vocab;                 /* BERT token-type vocabulary */
  uint64_t num_labels;                 /* classification head outputs */
  bool tied_embeddings;
  bool qkv_bias, o_bias, mlp_bias, lm_head_bias;
  bool fused_qkv, fused_gate_up; /* one Linear for q,k,v / gate,up in the checkpoint */
  bool glu;                      /* gated MLP (SwiGLU, GeGLU): gate, up and down */
  char activation[24];           /* the MLP activation as the config names it ("gelu_new") */
  bool parallel_residual;        /* attention and MLP read the same block input */
  bool learned_positions;        /* absolute position embedding table */
  enum vf_norm norm;
  uint32_t norms_per_layer;      /* 1 (falcon-7b, phi), 2, or 4 (gemma2) */
  bool post_norms;               /* the norms follow attention and the MLP, none precedes them (olmo2) */
  enum vf_qk_norm qk_norm;
  double rotary_fraction;        /* share of head_dim that is rotated; 0 without RoPE */
  uint64_t sliding_window;       /* 0 when attention is global */
  uint64_t window_period;        /* every window_period-th layer attends globally, the others
                                    slide (gemma3_text: 6); 0: every layer slides */
  double final_logit_softcap;    /* 0 when off (gemma2 caps logits) */
  double attn_logit_softcap;     /* 0 when off (gemma2 caps attention scores) */
  /* Multi-head latent attention (deepseek_v2): K and V come from a compressed projection of
   * kv_lora_rank (0 without MLA), Q from one of q_lora_rank (0: Q projected directly);
   * head_dim is then the query/key head's width, of which qk_rope_head_dim is rotated, and
   * v_head_dim the value head's. */
  uint64_t kv_lora_rank, q_lora_rank, qk_rope_head_dim, v_head_dim;
  enum vf_dtype dtype;           /* torch_dtype of the released weights */
};

struct vf_tensor {
  char *name; /* owned */
  uint32_t ndim;
  uint64_t shape[VF_MAX_DIMS]; /* PyTorch order: outermost dimension first */
  enum vf_dtype dtype;
  enum vf_kind kind;
  int32_t layer;  /* block index, -1 outside the blocks */
  int32_t expert; /* expert index, -1 unless an expert's weight */
};

/* A model: its architecture and every parameter tensor. Caller-allocated;
 * vf_model_init() before use, vf_model_cleanup() after. */
struct vf_model {
  char *name;       /* owned: catalogue name or the path given */
  char *source;     /* owned: "catalogue", or the file the tensors came from */
  bool has_arch;    /* false for a checkpoint read without any config */
  struct vf_arch arch;
  struct vf_tensor *tensors; /* owned */
  size_t n_tensors, cap_tensors;
  char **notes; /* owned: where config and checkpoint disagree, one sentence each */
  size_t n_notes;
};

VF_API void vf_model_init(struct vf_model *m);
VF_API void vf_model_cleanup(struct vf_model *m);

/* Appends a copy of t (its name is copied). */
VF_API int vf_model_add_tensor(struct vf_model *m, const struct vf_tensor *t);
/* Appends a printf-formatted note. */
VF_API int vf_model_add_note(struct vf_model *m, const char *fmt, ...)
           __attribute__((format(printf, 2, 3)));

/* Checks that an architecture is consistent (heads divide hidden, kv heads divide heads, ...).
 * On failure fills d->msg with the reason (d may be NULL). */
VF_API int vf_arch_validate(const struct vf_arch *a, struct vf_diag *d);

/* Replaces m->tensors with the tensors the architecture implies, with Hugging Face names,
 * stored in m->arch.dtype. */
VF_API int vf_model_expand(struct vf_model *m);

/* Takes the checkpoint's tensors as the truth: moves ckpt's tensors into m and records a
 * note for every tensor missing on either side or whose shape differs. */
VF_API int vf_model_adopt_checkpoint(struct vf_model *m, struct vf_model *ckpt);

/* Classifies a checkpoint tensor by its name (HF, GGUF and litgpt spellings) and finds its
 * block and expert index (-1 when none). */
VF_API enum vf_kind vf_kind_from_name(const char *name, int32_t *layer, int32_t *expert);

VF_API uint64_t vf_tensor_numel(const struct vf_tensor *t);
VF_API uint64_t vf_model_params(const struct vf_model *m);
/* Token, position and token-type embedding tables (not the output head). */
VF_API uint64_t vf_model_embedding_params(const struct vf_model *m);
/* Parameters per public kind; fused projections are split by their output rows. */
VF_API void vf_model_by_kind(const struct vf_model *m, uint64_t out[VF_KIND_PUBLIC_COUNT]);
/* Stored bytes of all tensors. VF_EUNSUPPORTED if a tensor's dtype has no known size. */
VF_API int vf_model_bytes(const struct vf_model *m, uint64_t *out);
/* The dtype most of the parameters are stored in. */
VF_API enum vf_dtype vf_model_main_dtype(const struct vf_model *m);

/* ---- Readers (src/io). Each fills a vf_model; on failure d names file and position. ---- */

/* MODEL as the contract defines it: a config.json, model folder, .safetensors,
 * model.safetensors.index.json or .gguf; a Hugging Face Hub id found in the local Hub cache;
 * a catalogue name, Hub id or alias. Never the network. */
VF_API int vf_model_load(struct vf_model *m, const char *arg, struct vf_diag *d);

/* A Hugging Face config.json held in memory; file is used in messages only. */
VF_API int vf_model_from_config_json(struct vf_model *m, const char *json, size_t len,
                                     const char *file, struct vf_diag *d);

/* Appends the tensors of one safetensors file (headers only are read). */
VF_API int vf_safetensors_read(struct vf_model *m, const char *path, struct vf_diag *d);
/* Validates a safetensors header held in memory (the first 8 + N bytes of a file of
 * file_size bytes; 0 when unknown, which skips the check that the data fills the file) and
 * appends its tensors in data-offset order. */
VF_API int vf_safetensors_parse(struct vf_model *m, const uint8_t *buf, size_t len,
                                uint64_t file_size, const char *file, struct vf_diag *d);
/* Reads model.safetensors.index.json and the header of every shard it names. */
VF_API int vf_safetensors_index_read(struct vf_model *m, const char *path, struct vf_diag *d);

/* Reads a GGUF v2/v3 header (and the other parts of a split file): tensors and, from the
 * metadata, the architecture (m->has_arch). */
VF_API int vf_gguf_read(struct vf_model *m, const char *path, struct vf_diag *d);
/* The same for a file held in memory: buf is taken as the whole file, so tensor data must
 * lie within its len bytes. Split parts are not followed. */
VF_API int vf_gguf_parse(struct vf_model *m, const uint8_t *buf, size_t len, const char *file,
                         struct vf_diag *d);

/* One entry of the built-in model catalogue (data/models/<name>.json): the name it is listed
 * under, the Hugging Face Hub id its config.json was taken from, and its aliases: the Hub
 * ids and plain names of the variants with the same architecture (instruct, chat, base,
 * dated releases). */
struct vf_catalog_entry {
  char *name;     /* owned */
  char *hub_id;   /* owned */
  char **aliases; /* owned */
  size_t n_aliases;
};

/* The catalogue, in name order. Caller-allocated; vf_catalog_init() before use,
 * vf_catalog_cleanup() after. */
struct vf_catalog {
  struct vf_catalog_entry *entries; /* owned */
  size_t n;
};

VF_API void vf_catalog_init(struct vf_catalog *c);
VF_API void vf_catalog_cleanup(struct vf_catalog *c);
/* Reads every entry. VF_EFORMAT, with d naming the file, when an entry lacks its Hub id or
 * its list of aliases, or when two entries (or one, twice) claim one name, Hub id or alias,
 * ignoring case. */
VF_API int vf_catalog_load(struct vf_catalog *c, struct vf_diag *d);
/* Whether the entry's name, Hub id or one of its aliases contains word, ignoring case. */
VF_API bool vf_catalog_entry_matches(const struct vf_catalog_entry *e, const char *word);
/* The config.json of catalogue model name (lower case), NUL-terminated, freed with
 * vf_free(). VF_ENOTFOUND, VF_ENOMEM. */
VF_API int vf_catalog_config(const char *name, char **json, size_t *len);

#endif

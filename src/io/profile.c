/* Framework profiles (data/frameworks/<name>.json), the PyTorch releases (data/torch.json) and
 * the CUDA context table (data/runtime.json): what differs between frameworks, between their
 * releases and between PyTorch releases is data, not code.
 *
 * A profile or torch.json is a list of releases, newest first. The newest gives every field,
 * each older one only the fields whose value differs from the release above it, and every
 * value carries a one-line source. A framework's field may be "torch": the value then follows
 * the PyTorch release of the run (torch.json). */
#include "io/profile.h"

#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "base/json_util.h"
#include "core/version.h"
#include "io/data.h"

enum field_type { F_BOOL, F_U32, F_DOUBLE, F_U32_LIST, F_NAME_LIST, F_ATTENTION, F_TYPE_VALUES, F_PP_SCHEDULES, F_SAVE };

struct field {
  const char *key;
  enum field_type type;
  size_t offset, size, count_offset;
};

#define MEMBER_SIZE(member) sizeof(((struct vf_profile *)0)->member)
#define FIELD(k, t, member) {k, t, offsetof(struct vf_profile, member), MEMBER_SIZE(member), 0}
#define LIST(k, member, count)                                                                \
  {k, F_U32_LIST, offsetof(struct vf_profile, member), MEMBER_SIZE(member),                   \
   offsetof(struct vf_profile, count)}
/* A list of pipeline schedules: a bit per schedule, and the first listed as the default. */
#define SCHEDULES(k, bits, first)                                                             \
  {k, F_PP_SCHEDULES, offsetof(struct vf_profile, bits), MEMBER_SIZE(bits),                   \
   offsetof(struct vf_profile, first)}
_Static_assert(sizeof(enum vf_pp_schedule) == sizeof(uint32_t), "a list's second member is copied as 32 bits");

#define NAMES(k, member, count)                                                               \
  {k, F_NAME_LIST, offsetof(struct vf_profile, member), MEMBER_SIZE(member),                  \
   offsetof(struct vf_profile, count)}

/* Every struct vf_profile member a profile sets. A new field is one line here, its member in
 * struct vf_profile, and a value with its source in the newest release of every profile. */
static const struct field fields[] = {
    FIELD("default_attention", F_ATTENTION, default_attention),
    LIST("rms_norm_saves", rms_norm_saves, n_rms_norm_saves),
    LIST("rms_norm_weight_saves", rms_norm_weight_saves, n_rms_norm_weight_saves),
    NAMES("rms_norm_weight_fp32", rms_norm_weight_fp32, n_rms_norm_weight_fp32),
    LIST("layer_norm_saves", layer_norm_saves, n_layer_norm_saves),
    FIELD("gqa_expand", F_BOOL, gqa_expand),
    FIELD("kv_repeat_interleave", F_BOOL, kv_repeat_interleave),
    FIELD("attn_out_copies", F_U32, attn_out_copies),
    FIELD("rope_copies", F_BOOL, rope_copies),
    FIELD("gelu_new_saves", F_U32, gelu_new_saves),
    FIELD("eager_softmax_fp32", F_BOOL, eager_softmax_fp32),
    FIELD("eager_softmax_saves_input", F_BOOL, eager_softmax_saves_input),
    FIELD("logits_peak_bytes", F_U32, logits_peak_bytes),
    FIELD("logits_kept_bytes", F_U32, logits_kept_bytes),
    FIELD("logits_backward_bytes", F_U32, logits_backward_bytes),
    FIELD("logits_held_bytes", F_U32, logits_held_bytes),
    FIELD("loss_chunk_tokens", F_U32, loss_chunk_tokens),
    FIELD("full_head_whole", F_BOOL, full_head_whole),
    FIELD("output_chunks", F_U32, output_chunks),
    FIELD("chunked_output_chunks", F_U32, chunked_output_chunks),
    FIELD("liger_loss", F_BOOL, liger_loss),
    FIELD("cce_loss", F_BOOL, cce_loss),
    FIELD("offloads_activations", F_BOOL, offloads_activations),
    FIELD("activation_offload_needs_ckpt", F_BOOL, activation_offload_needs_ckpt),
    FIELD("offload_stash", F_U32, offload_stash),
    FIELD("optimizer_in_bwd", F_BOOL, optimizer_in_bwd),
    FIELD("quant_load_bytes", F_U32, quant_load_bytes),
    FIELD("adapter_fp32", F_BOOL, adapter_fp32),
    FIELD("lora_dropout", F_BOOL, lora_dropout),
    FIELD("foreach_optimizer", F_BOOL, foreach_optimizer),
    FIELD("master_weights", F_BOOL, master_weights),
    FIELD("selective_policy", F_BOOL, selective_policy),
    FIELD("selective_keep", F_DOUBLE, selective_keep),
    FIELD("selective_keep_compiled", F_DOUBLE, selective_keep_compiled),
    FIELD("fused_qkv", F_BOOL, fused_qkv),
    FIELD("qkv_view_kept", F_BOOL, qkv_view_kept),
    FIELD("lora_zero_pad", F_BOOL, lora_zero_pad),
    FIELD("softcap_eager", F_BOOL, softcap_eager),
    FIELD("final_softcap_logits", F_BOOL, final_softcap_logits),
    FIELD("untie_embeddings", F_BOOL, untie_embeddings),
    FIELD("quant_input_bytes", F_U32, quant_input_bytes),
    FIELD("graph_held", F_BOOL, graph_held),
    FIELD("dequant_extra_bytes", F_U32, dequant_extra_bytes),
    FIELD("dequant_forward_extra_bytes", F_U32, dequant_forward_extra_bytes),
    FIELD("stable_embedding", F_BOOL, stable_embedding),
    FIELD("quantize_head", F_BOOL, quantize_head),
    FIELD("quant_rest_fp32", F_BOOL, quant_rest_fp32),
    FIELD("default_accumulation", F_U32, default_accumulation),
    FIELD("zero_grad_frees", F_BOOL, zero_grad_frees),
    FIELD("zero_grad_before_backward", F_BOOL, zero_grad_before_backward),
    FIELD("fsdp_no_sync", F_BOOL, fsdp_no_sync),
    FIELD("fsdp_flat_params", F_BOOL, fsdp_flat_params),
    FIELD("fsdp_adapter_units_train", F_BOOL, fsdp_adapter_units_train),
    FIELD("fsdp_full_load", F_BOOL, fsdp_full_load),
    FIELD("fsdp_sync_module_states", F_BOOL, fsdp_sync_module_states),
    FIELD("nccl_records_streams", F_BOOL, nccl_records_streams),
    FIELD("fsdp2_reduce_input_compute_stream", F_BOOL, fsdp2_reduce_input_compute_stream),
    FIELD("empty_cache_before_training", F_U32, empty_cache_before_training),
    FIELD("fsdp_root_reshards", F_BOOL, fsdp_root_reshards),
    FIELD("fsdp_embedding_unit", F_BOOL, fsdp_embedding_unit),
    FIELD("loss_in_forward", F_BOOL, loss_in_forward),
    FIELD("fsdp_grads_in_compute_dtype", F_BOOL, fsdp_grads_in_compute_dtype),
    FIELD("fsdp_autocast", F_BOOL, fsdp_autocast),
    FIELD("checkpoint_dtype_weights", F_BOOL, checkpoint_dtype_weights),
    FIELD("fsdp_upcast_trainable", F_BOOL, fsdp_upcast_trainable),
    FIELD("ddp_init_broadcast", F_BOOL, ddp_init_broadcast),
    FIELD("host_waits_each_step", F_BOOL, host_waits_each_step),
    FIELD("compiled_loss", F_BOOL, compiled_loss),
    FIELD("compiled_layers", F_BOOL, compiled_layers),
    FIELD("varied_lengths", F_BOOL, varied_lengths),
    FIELD("longest_first", F_BOOL, longest_first),
    FIELD("save_gathers", F_SAVE, save_gathers),
    FIELD("validates", F_BOOL, validates),
    FIELD("validates_first", F_BOOL, validates_first),
    FIELD("generates", F_BOOL, generates),
    FIELD("ckpt_input_grads", F_BOOL, ckpt_input_grads),
    FIELD("lion_fp32_states", F_BOOL, lion_fp32_states),
    FIELD("embedding_states_fp32", F_BOOL, embedding_states_fp32),
    FIELD("optim8bit_block", F_U32, optim8bit_block),
    NAMES("eager_softmax_in_dtype", eager_softmax_in_dtype, n_eager_softmax_in_dtype),
    NAMES("sdpa_mqa_unexpanded", sdpa_mqa_unexpanded, n_sdpa_mqa_unexpanded),
    NAMES("sdpa_out_copied", sdpa_out_copied, n_sdpa_out_copied),
    NAMES("qkv_view_models", qkv_view_models, n_qkv_view_models),
    NAMES("sdpa_window_mask", sdpa_window_mask, n_sdpa_window_mask),
    FIELD("sdpa_math_fp32", F_BOOL, sdpa_math_fp32),
    FIELD("experts_in_weight_dtype", F_BOOL, experts_in_weight_dtype),
    FIELD("adafactor_fp32_copies", F_BOOL, adafactor_fp32_copies),
    FIELD("padding_mask", F_BOOL, padding_mask),
    FIELD("rope_table_bytes", F_TYPE_VALUES, rope_table_bytes),
    FIELD("lora_rope_table_per_layer", F_TYPE_VALUES, lora_rope_table_per_layer),
    SCHEDULES("pp_schedules", pp_schedules, pp_default_schedule),
    FIELD("pp_stages_per_rank", F_U32, pp_stages_per_rank),
    FIELD("pp_even_layers", F_BOOL, pp_even_layers),
    FIELD("pp_torch_pipelining", F_BOOL, pp_torch_pipelining),
    FIELD("pp_input_grads_kept", F_BOOL, pp_input_grads_kept),
    FIELD("sequence_parallel", F_BOOL, sequence_parallel),
    FIELD("sp_gathered_input", F_BOOL, sp_gathered_input),
    FIELD("grad_buffer_fp32", F_BOOL, grad_buffer_fp32),
    FIELD("cp_kv_all_gather", F_BOOL, cp_kv_all_gather),
    FIELD("loss_parallel", F_BOOL, loss_parallel),
    FIELD("moe_capacity_factor", F_DOUBLE, moe_capacity_factor),
    FIELD("zero_reduce_buckets", F_U32, zero_reduce_buckets),
    FIELD("zero_reduce_bucket_elems", F_U32, zero_reduce_bucket_elems),
    FIELD("zero3_max_live_millions", F_U32, zero3_max_live_millions),
    FIELD("zero3_persistence_elems", F_U32, zero3_persistence_elems),
    FIELD("zero3_ipg_buckets", F_U32, zero3_ipg_buckets),
    FIELD("zero3_sub_group_millions", F_U32, zero3_sub_group_millions),
};
enum { NFIELDS = sizeof fields / sizeof *fields };

/* A value that defers to the PyTorch release. */
static const char follow_torch[] = "torch";

static const struct field *field_named(const char *key) {
  for (size_t i = 0; i < NFIELDS; i++)
    if (strcmp(fields[i].key, key) == 0) return &fields[i];
  return NULL;
}

/* ["1f1b", "gpipe"]: each a schedule (not "none" or "default"), none twice; [] for none. */
static bool set_schedules(struct vf_profile *p, const struct field *f, json_t *v) {
  if (!json_is_array(v)) return false;
  uint32_t bits = 0;
  int first = VF_PP_NONE, k;
  size_t i;
  json_t *e;
  json_array_foreach(v, i, e) {
    if (!json_is_string(e) || vf_enum_parse(VF_ENUM_PP_SCHEDULE, json_string_value(e), &k) || k == VF_PP_NONE ||
        (bits & (1u << k)))
      return false;
    bits |= 1u << k;
    if (!i) first = k;
  }
  char *base = (char *)p;
  *(uint32_t *)(base + f->offset) = bits;
  *(enum vf_pp_schedule *)(base + f->count_offset) = (enum vf_pp_schedule)first;
  return true;
}

/* A list of model types (config.json model_type names). */
static bool set_names(char *base, const struct field *f, json_t *v) {
  if (!json_is_array(v) || json_array_size(v) * VF_MODEL_TYPE_LEN > f->size) return false;
  char(*names)[VF_MODEL_TYPE_LEN] = (char(*)[VF_MODEL_TYPE_LEN])(base + f->offset);
  size_t i;
  json_t *e;
  json_array_foreach(v, i, e) {
    const char *name = json_string_value(e);
    if (!name || !*name || strlen(name) >= VF_MODEL_TYPE_LEN) return false;
    snprintf(names[i], VF_MODEL_TYPE_LEN, "%s", name);
  }
  *(uint32_t *)(base + f->count_offset) = (uint32_t)json_array_size(v);
  return true;
}

static bool u32_of(json_t *v, uint32_t *out) {
  if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000) return false;
  *out = (uint32_t)json_integer_value(v);
  return true;
}

/* {"qwen2": 8, "*": 4}: a value per model type. */
static bool set_type_values(struct type_values *m, json_t *v) {
  if (!json_is_object(v) || json_object_size(v) > TYPE_VALUES_MAX) return false;
  memset(m, 0, sizeof *m);
  const char *type;
  json_t *e;
  json_object_foreach(v, type, e) {
    if (!*type || strlen(type) >= sizeof m->type[0] || !u32_of(e, &m->value[m->n])) return false;
    snprintf(m->type[m->n++], sizeof m->type[0], "%s", type);
  }
  return true;
}

static bool set_value(struct vf_profile *p, const struct field *f, json_t *v) {
  char *base = (char *)p;
  switch (f->type) {
  case F_BOOL:
    if (!json_is_boolean(v)) return false;
    *(bool *)(base + f->offset) = json_is_true(v);
    return true;
  case F_U32:
    return u32_of(v, (uint32_t *)(base + f->offset));
  case F_TYPE_VALUES:
    return set_type_values((struct type_values *)(base + f->offset), v);
  case F_DOUBLE:
    if (!json_is_number(v)) return false;
    *(double *)(base + f->offset) = json_number_value(v);
    return true;
  case F_SAVE: {
    static const char *const names[] = {"units", "tensors", "none"};
    for (size_t i = 0; json_is_string(v) && i < sizeof names / sizeof *names; i++)
      if (strcmp(json_string_value(v), names[i]) == 0) {
        *(enum vf_save_gathers *)(base + f->offset) = (enum vf_save_gathers)i;
        return true;
      }
    return false;
  }
  case F_ATTENTION: {
    int a;
    if (!json_is_string(v) || vf_enum_parse(VF_ENUM_ATTENTION, json_string_value(v), &a)) return false;
    *(enum vf_attention *)(base + f->offset) = (enum vf_attention)a;
    return true;
  }
  case F_U32_LIST: {
    if (!json_is_array(v) || json_array_size(v) * sizeof(uint32_t) > f->size) return false;
    uint32_t *list = (uint32_t *)(base + f->offset);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
      if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > 8) return false;
      list[i] = (uint32_t)json_integer_value(e);
    }
    *(uint32_t *)(base + f->count_offset) = (uint32_t)json_array_size(v);
    return true;
  }
  case F_PP_SCHEDULES:
    return set_schedules(p, f, v);
  case F_NAME_LIST:
    return set_names(base, f, v);
  }
  return false;
}

static void copy_value(struct vf_profile *to, const struct vf_profile *from, const struct field *f) {
  memcpy((char *)to + f->offset, (const char *)from + f->offset, f->size);
  if (f->type == F_U32_LIST || f->type == F_NAME_LIST || f->type == F_PP_SCHEDULES)
    memcpy((char *)to + f->count_offset, (const char *)from + f->count_offset, sizeof(uint32_t));
}

/* A source is one line: "<owner>/<repo>:<file>@<release or commit>: what the code does", or
 * "n/a: why the field does not apply", or "[U] " and an explanation for one not confirmed in
 * the source code. */
static bool source_ok(const char *s) {
  if (strchr(s, '\n') || strchr(s, '\r')) return false;
  if (strncmp(s, "[U] ", 4) == 0) return s[4] != '\0';
  const char *end = strstr(s, ": ");
  if (!end || !end[2]) return false;
  size_t n = (size_t)(end - s);
  if (n == 3 && strncmp(s, "n/a", 3) == 0) return true;
  const char *slash = memchr(s, '/', n), *colon = memchr(s, ':', n), *at = memchr(s, '@', n);
  return !memchr(s, ' ', n) && slash && colon && at && slash < colon && colon < at && at + 1 < end;
}

/* Reading one file's list of releases. */
struct chain {
  const char *file;
  bool framework;                /* a framework's file (else torch.json) */
  const struct version *want; /* the version asked for; NULL: the newest */
  struct vf_profile *out;        /* the fields, applied from the newest down to the chosen release */
  json_t *value[NFIELDS];        /* each field's value as of the release read last */
  bool follows_torch[NFIELDS];   /* the chosen release's value is "torch" */
  const char *torch_in[NFIELDS]; /* a release saying "torch" for the field, to name in errors */
  json_t *chosen;                /* the chosen release entry */
  bool predates;                 /* want is older than every release: the oldest is chosen */
};

static const char *text_of(json_t *e, const char *key) { return json_string_value(json_object_get(e, key)); }

/* An error in one release of c's file: "release 4.16: ...". */
__attribute__((format(printf, 4, 5))) static int bad(const struct chain *c, struct vf_diag *d, const char *release,
                                                     const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return diag_at(d, VF_EFORMAT, c->file, UINT64_MAX, "release %s: %s", release, msg);
}

static bool is_meta(const struct chain *c, const char *key) {
  return strcmp(key, "release") == 0 || strcmp(key, "date") == 0 || strcmp(key, "describes") == 0 ||
         strcmp(key, "sources") == 0 || (c->framework && strcmp(key, "torch") == 0);
}

/* Newest first: a release below another is older and not dated after it. */
static int check_order(const struct chain *c, json_t *e, json_t *above, struct vf_diag *d) {
  struct version v, av, date, above_date;
  const char *rel = text_of(e, "release");
  version_release_parse(rel, &v);
  version_release_parse(text_of(above, "release"), &av);
  version_month_parse(text_of(e, "date"), &date);
  version_month_parse(text_of(above, "date"), &above_date);
  if (version_compare(&v, &av) >= 0)
    return bad(c, d, rel, "listed below release %s: releases go newest first", text_of(above, "release"));
  if (version_compare(&date, &above_date) > 0)
    return bad(c, d, rel, "dated after release %s above it", text_of(above, "release"));
  return 0;
}

/* release, date, describes, sources (and a framework's torch): present and well formed. */
static int check_meta(const struct chain *c, json_t *e, json_t *above, size_t i, struct vf_diag *d) {
  struct version v;
  const char *rel = text_of(e, "release"), *date = text_of(e, "date"), *torch = text_of(e, "torch"),
             *describes = text_of(e, "describes");
  if (!rel || strlen(rel) >= MEMBER_SIZE(release) || version_release_parse(rel, &v))
    return diag_at(d, VF_EFORMAT, c->file, UINT64_MAX, "releases[%zu]: 'release' must be a version like 2.1", i);
  if (!date || version_month_parse(date, &v)) return bad(c, d, rel, "'date' must be a month like 2024-04");
  if (!describes || !*describes || strchr(describes, '\n'))
    return bad(c, d, rel, "'describes' must be one line saying what the release stands for");
  if (c->framework && (!torch || strlen(torch) >= MEMBER_SIZE(torch) || version_release_parse(torch, &v)))
    return bad(c, d, rel, "'torch' must be the PyTorch release used with it, like 2.1");
  if (!json_is_object(json_object_get(e, "sources")))
    return bad(c, d, rel, "'sources' must be an object giving each field's source");
  return above ? check_order(c, e, above, d) : 0;
}

/* One field of a release: its value checked, compared with the release above, and applied
 * to c->out when apply. */
static int read_field(struct chain *c, const struct field *f, json_t *v, const char *rel, bool newest, bool apply,
                      struct vf_diag *d) {
  size_t i = (size_t)(f - fields);
  struct vf_profile scratch;
  bool torch = c->framework && json_is_string(v) && strcmp(json_string_value(v), follow_torch) == 0;
  if (!torch && !set_value(apply ? c->out : &scratch, f, v))
    return bad(c, d, rel, "'%s' has a value of the wrong type", f->key);
  if (!newest && !c->value[i])
    return bad(c, d, rel, "'%s' is not set by the newest release, which gives every field", f->key);
  if (!newest && json_equal(c->value[i], v))
    return bad(c, d, rel, "'%s' repeats the value of the release above: an older release gives only what differs",
               f->key);
  c->value[i] = v;
  if (torch && !c->torch_in[i]) c->torch_in[i] = rel;
  if (apply) c->follows_torch[i] = torch;
  return 0;
}

static int read_sources(const struct chain *c, json_t *e, const char *rel, struct vf_diag *d) {
  json_t *sources = json_object_get(e, "sources"), *v;
  const char *key;
  json_object_foreach(sources, key, v) {
    if (is_meta(c, key) || !json_object_get(e, key))
      return bad(c, d, rel, "a source for '%s', which this release does not set", key);
    if (!json_is_string(v) || !source_ok(json_string_value(v)))
      return bad(c, d, rel,
                 "the source of '%s' is not one line '<owner>/<repo>:<file>@<release or commit>: what the code "
                 "does' (or 'n/a: why', or '[U] ' and why it is unconfirmed)", key);
  }
  json_object_foreach(e, key, v)
    if (!is_meta(c, key) && !json_object_get(sources, key)) return bad(c, d, rel, "'%s' has no source", key);
  return 0;
}

static int read_fields(struct chain *c, json_t *e, bool newest, bool apply, struct vf_diag *d) {
  const char *rel = text_of(e, "release"), *key;
  json_t *v;
  json_object_foreach(e, key, v) {
    if (is_meta(c, key)) continue;
    const struct field *f = field_named(key);
    if (!f) return bad(c, d, rel, "unknown key '%s'", key);
    int rc = read_field(c, f, v, rel, newest, apply, d);
    if (rc) return rc;
  }
  for (size_t i = 0; newest && c->framework && i < NFIELDS; i++)
    if (!c->value[i]) return bad(c, d, rel, "'%s' is missing: the newest release gives every field", fields[i].key);
  return read_sources(c, e, rel, d);
}

/* Whether a release is the newest one not after the version asked for. */
static bool matches(const struct chain *c, json_t *e) {
  struct version v;
  if (!c->want) return true;
  if (c->want->month) version_month_parse(text_of(e, "date"), &v);
  else version_release_parse(text_of(e, "release"), &v);
  return version_compare(&v, c->want) <= 0;
}

static int read_releases(struct chain *c, json_t *list, struct vf_diag *d) {
  if (!json_is_array(list) || json_array_size(list) == 0)
    return diag_at(d, VF_EFORMAT, c->file, UINT64_MAX, "'releases' must be a list of releases, newest first");
  size_t i;
  json_t *e, *above = NULL;
  json_array_foreach(list, i, e) {
    if (!json_is_object(e)) return diag_at(d, VF_EFORMAT, c->file, UINT64_MAX, "releases[%zu] is not an object", i);
    int rc = check_meta(c, e, above, i, d);
    if (!rc) rc = read_fields(c, e, i == 0, !c->chosen, d);
    if (rc) return rc;
    if (!c->chosen && matches(c, e)) c->chosen = e;
    above = e;
  }
  c->predates = !c->chosen;
  if (!c->chosen) c->chosen = above;
  return 0;
}

/* The whole file: {"name", "notes" (optional prose), "releases"}. */
static int read_root(struct chain *c, json_t *root, const char *name, struct vf_diag *d) {
  if (!json_is_object(root)) return diag_at(d, VF_EFORMAT, c->file, UINT64_MAX, "not a JSON object");
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    bool known = ((strcmp(key, "name") == 0 || strcmp(key, "notes") == 0) && json_is_string(v)) ||
                 strcmp(key, "releases") == 0;
    if (!known) return diag_at(d, VF_EFORMAT, c->file, UINT64_MAX, "unknown key '%s' (or not a string)", key);
  }
  const char *named = text_of(root, "name");
  if (!named || strcmp(named, name) != 0)
    return diag_at(d, VF_EFORMAT, c->file, UINT64_MAX, "'name' must be \"%s\"", name);
  int rc = read_releases(c, json_object_get(root, "releases"), d);
  if (rc) return rc;
  snprintf(c->out->release, sizeof c->out->release, "%s", text_of(c->chosen, "release"));
  snprintf(c->out->date, sizeof c->out->date, "%s", text_of(c->chosen, "date"));
  return 0;
}

/* The fields that say "torch" take their values from the run's PyTorch release. */
static int apply_torch(const struct chain *fw, json_t *torch_root, const char *file, struct vf_profile *p,
                       struct vf_diag *d) {
  struct version want;
  version_release_parse(p->torch, &want);
  struct vf_profile tp;
  memset(&tp, 0, sizeof tp);
  struct chain c = {.file = file, .want = &want, .out = &tp};
  int rc = read_root(&c, torch_root, "torch", d);
  if (rc) return rc;
  for (size_t i = 0; i < NFIELDS; i++) {
    /* Older releases set only what the newest sets, so a value anywhere means described. */
    if (fw->torch_in[i] && !c.value[i])
      return diag_at(d, VF_EFORMAT, fw->file, UINT64_MAX, "release %s: '%s' is \"torch\", but %s does not describe it",
                     fw->torch_in[i], fields[i].key, c.file);
    if (fw->follows_torch[i]) copy_value(p, &tp, &fields[i]);
  }
  p->torch_predates = c.predates;
  return 0;
}

static int parse_roots(const struct vf_framework_spec *spec, const char *torch, json_t *fw_root, json_t *torch_root,
                       const struct profile_texts *t, struct vf_profile *p, struct vf_diag *d) {
  struct version want;
  bool versioned = spec->version[0] != '\0';
  if (versioned) version_parse(spec->version, &want);
  struct chain fw = {.file = t->framework_file, .framework = true, .want = versioned ? &want : NULL, .out = p};
  int rc = read_root(&fw, fw_root, spec->name, d);
  if (rc) return rc;
  p->release_predates = fw.predates;
  /* --torch, or the PyTorch release the chosen framework release was used with. */
  snprintf(p->torch, sizeof p->torch, "%s", torch && *torch ? torch : text_of(fw.chosen, "torch"));
  return apply_torch(&fw, torch_root, t->torch_file, p, d);
}

int profile_parse(const struct vf_framework_spec *spec, const char *torch, const struct profile_texts *t,
                  struct vf_profile *p, struct vf_diag *d) {
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", spec->name);
  if (torch && *torch) {
    int rc = vf_torch_release_check(torch, d);
    if (rc) return rc;
  }
  json_t *fw_root = NULL, *torch_root = NULL;
  int rc = parse_json_text(t->framework, t->framework_len, t->framework_file, &fw_root, d);
  if (!rc) rc = parse_json_text(t->torch, t->torch_len, t->torch_file, &torch_root, d);
  if (!rc) rc = parse_roots(spec, torch, fw_root, torch_root, t, p, d);
  json_decref(fw_root);
  json_decref(torch_root);
  return rc;
}

int profile_read(const char *framework, const char *torch, struct vf_profile *p, struct vf_diag *d) {
  struct vf_framework_spec spec;
  int rc = vf_framework_spec_parse(framework, &spec, d);
  if (rc) return rc;
  char path[96];
  snprintf(path, sizeof path, "frameworks/%s.json", spec.name);
  struct profile_texts t = {.framework_file = path, .torch_file = "torch.json"};
  if (data_get(path, &t.framework, &t.framework_len))
    return diag_at(d, VF_ENOTFOUND, NULL, UINT64_MAX,
                   "unknown framework '%s' (hf, litgpt, torchtune, lightning, deepspeed, megatron, torchtitan)",
                   spec.name);
  if ((rc = data_get(t.torch_file, &t.torch, &t.torch_len))) {
    data_release(t.framework);
    return diag_at(d, rc, t.torch_file, UINT64_MAX, "cannot read the PyTorch releases");
  }
  rc = profile_parse(&spec, torch, &t, p, d);
  data_release(t.framework);
  data_release(t.torch);
  return rc;
}

int vf_profile_load(const char *framework, const char *torch, struct vf_profile **out, struct vf_diag *d) {
  *out = malloc(sizeof **out);
  int rc = *out ? profile_read(framework, torch, *out, d) : diag_at(d, VF_ENOMEM, NULL, UINT64_MAX, "out of memory");
  if (rc) {
    free(*out);
    *out = NULL;
  }
  return rc;
}

void vf_profile_free(struct vf_profile *p) { free(p); }

void vf_profile_describe(const struct vf_profile *p, struct vf_profile_info *out) {
  *out = (struct vf_profile_info){.name = p->name, .release = p->release, .date = p->date, .torch = p->torch,
                                  .release_predates = p->release_predates, .torch_predates = p->torch_predates,
                                  .fsdp_full_load = p->fsdp_full_load,
                                  .checkpoint_dtype_weights = p->checkpoint_dtype_weights,
                                  .compiled_loss = p->compiled_loss,
                                  .compiled_layers = p->compiled_layers};
}

int vf_runtime_context_bytes(uint32_t cc_major, bool distributed, uint64_t *out) {
  const char *text;
  size_t len;
  int rc = data_get("runtime.json", &text, &len);
  if (rc) return rc;
  json_t *root;
  rc = parse_json_text(text, len, "runtime.json", &root, NULL);
  data_release(text);
  if (rc) return rc;
  char key[16];
  snprintf(key, sizeof key, "%u", cc_major);
  json_t *table = json_object_get(root, "context_mib_by_cc_major");
  json_t *v = json_object_get(table, key);
  if (!json_is_integer(v)) v = json_object_get(table, "unknown");
  json_t *nccl = json_object_get(root, "nccl_mib");
  rc = json_is_integer(v) && json_is_integer(nccl) ? 0 : VF_EFORMAT;
  if (!rc) *out = (uint64_t)(json_integer_value(v) + (distributed ? json_integer_value(nccl) : 0)) << 20;
  json_decref(root);
  return rc;
}

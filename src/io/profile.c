/* Framework profiles (data/frameworks/<name>.json) and the CUDA context table
 * (data/runtime.json): what differs between frameworks is data, not code. */
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/diag.h"
#include "io/data.h"
#include "io/json_util.h"
#include "vramfit.h"

enum field_type { F_BOOL, F_U32, F_DOUBLE, F_U32_LIST, F_ATTENTION };

struct field {
  const char *key;
  enum field_type type;
  size_t offset, count_offset;
};

#define FIELD(k, t, member) {k, t, offsetof(struct vf_profile, member), 0}
#define LIST(k, member, count) \
  {k, F_U32_LIST, offsetof(struct vf_profile, member), offsetof(struct vf_profile, count)}

static const struct field fields[] = {
    FIELD("default_attention", F_ATTENTION, default_attention),
    LIST("rms_norm_saves", rms_norm_saves, n_rms_norm_saves),
    LIST("rms_norm_weight_saves", rms_norm_weight_saves, n_rms_norm_weight_saves),
    LIST("layer_norm_saves", layer_norm_saves, n_layer_norm_saves),
    FIELD("gqa_expand", F_BOOL, gqa_expand),
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
    FIELD("quant_load_bytes", F_U32, quant_load_bytes),
    FIELD("adapter_fp32", F_BOOL, adapter_fp32),
    FIELD("lora_dropout", F_BOOL, lora_dropout),
    FIELD("foreach_optimizer", F_BOOL, foreach_optimizer),
    FIELD("master_weights", F_BOOL, master_weights),
    FIELD("selective_keep", F_DOUBLE, selective_keep),
    FIELD("fused_qkv", F_BOOL, fused_qkv),
    FIELD("qkv_view_kept", F_BOOL, qkv_view_kept),
    FIELD("lora_zero_pad", F_BOOL, lora_zero_pad),
    FIELD("softcap_eager", F_BOOL, softcap_eager),
    FIELD("untie_embeddings", F_BOOL, untie_embeddings),
    FIELD("quant_input_bytes", F_U32, quant_input_bytes),
    FIELD("graph_held", F_BOOL, graph_held),
    FIELD("dequant_extra_bytes", F_U32, dequant_extra_bytes),
    FIELD("quantize_head", F_BOOL, quantize_head),
    FIELD("default_accumulation", F_U32, default_accumulation),
    FIELD("zero_grad_frees", F_BOOL, zero_grad_frees),
    FIELD("fsdp_no_sync", F_BOOL, fsdp_no_sync),
    FIELD("fsdp_flat_params", F_BOOL, fsdp_flat_params),
    FIELD("fsdp_full_load", F_BOOL, fsdp_full_load),
    FIELD("varied_lengths", F_BOOL, varied_lengths),
};

static int set_field(struct vf_profile *p, const struct field *f, json_t *v, const char *file,
                     struct vf_diag *d) {
  char *base = (char *)p;
  switch (f->type) {
  case F_BOOL:
    if (!json_is_boolean(v)) break;
    *(bool *)(base + f->offset) = json_is_true(v);
    return 0;
  case F_U32:
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000) break;
    *(uint32_t *)(base + f->offset) = (uint32_t)json_integer_value(v);
    return 0;
  case F_DOUBLE:
    if (!json_is_number(v)) break;
    *(double *)(base + f->offset) = json_number_value(v);
    return 0;
  case F_ATTENTION: {
    int a;
    if (!json_is_string(v) || vf_enum_parse(VF_ENUM_ATTENTION, json_string_value(v), &a)) break;
    *(enum vf_attention *)(base + f->offset) = (enum vf_attention)a;
    return 0;
  }
  case F_U32_LIST: {
    if (!json_is_array(v) || json_array_size(v) > 4) break;
    uint32_t *list = (uint32_t *)(base + f->offset);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
      if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > 8) goto bad;
      list[i] = (uint32_t)json_integer_value(e);
    }
    *(uint32_t *)(base + f->count_offset) = (uint32_t)json_array_size(v);
    return 0;
  }
  }
bad:
  return vf_diag_at(d, VF_EFORMAT, file, UINT64_MAX, "'%s' has a value of the wrong type", f->key);
}

static int parse_profile(json_t *root, const char *file, struct vf_profile *p, struct vf_diag *d) {
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (strcmp(key, "name") == 0 || strcmp(key, "notes") == 0) continue;
    const struct field *f = NULL;
    for (size_t i = 0; i < sizeof fields / sizeof *fields && !f; i++)
      if (strcmp(fields[i].key, key) == 0) f = &fields[i];
    if (!f) return vf_diag_at(d, VF_EFORMAT, file, UINT64_MAX, "unknown profile key '%s'", key);
    int rc = set_field(p, f, v, file, d);
    if (rc) return rc;
  }
  for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
    if (!json_object_get(root, fields[i].key))
      return vf_diag_at(d, VF_EFORMAT, file, UINT64_MAX, "missing profile key '%s'", fields[i].key);
  return 0;
}

int vf_profile_load(const char *name, struct vf_profile *p, struct vf_diag *d) {
  char path[96];
  if (strlen(name) >= sizeof p->name || strchr(name, '/'))
    return vf_diag_at(d, VF_ENOTFOUND, NULL, UINT64_MAX, "unknown framework '%s'", name);
  snprintf(path, sizeof path, "frameworks/%s.json", name);
  const char *text;
  size_t len;
  if (vf_data_get(path, &text, &len))
    return vf_diag_at(d, VF_ENOTFOUND, NULL, UINT64_MAX,
                      "unknown framework '%s' (hf, litgpt, torchtune, lightning, deepspeed, "
                      "megatron, torchtitan)", name);
  json_t *root;
  int rc = vf_json_parse(text, len, path, &root, d);
  vf_data_release(text);
  if (rc) return rc;
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  rc = json_is_object(root) ? parse_profile(root, path, p, d)
                            : vf_diag_at(d, VF_EFORMAT, path, UINT64_MAX, "not a JSON object");
  json_decref(root);
  return rc;
}

int vf_runtime_context_bytes(uint32_t cc_major, bool distributed, uint64_t *out) {
  const char *text;
  size_t len;
  int rc = vf_data_get("runtime.json", &text, &len);
  if (rc) return rc;
  json_t *root;
  rc = vf_json_parse(text, len, "runtime.json", &root, NULL);
  vf_data_release(text);
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

/* torchtune names the model and the method in one: model._component_ is a builder such
 * as torchtune.models.llama3_1.lora_llama3_1_8b (torchtune/models/llama3_1/_model_builders.py),
 * whose prefix is the method (lora_, qlora_; none: full fine-tuning) and whose rest the
 * model, looked up in the map's "builders" (builder: catalogue name). DoRA is a LoRA
 * builder with use_dora: True (torchtune/modules/peft/dora.py). optimizer_in_bwd is read by
 * the full fine-tuning recipes alone (recipes/full_finetune_single_device.py@v0.6.1; the
 * LoRA recipes never read it). */
#include <stdio.h>
#include <string.h>

#include "io/config_internal.h"

static int method_of(struct creader *r, struct cfile *f, const char **builder, const struct place *at) {
  static const char *const prefixes[][2] = {{"qlora_", "qlora"}, {"lora_", "lora"}};
  const char *method = "full";
  for (size_t i = 0; i < 2; i++) {
    size_t n = strlen(prefixes[i][0]);
    if (strncmp(*builder, prefixes[i][0], n) != 0) continue;
    *builder += n;
    method = prefixes[i][1];
    break;
  }
  struct place dora;
  int rc = view_find(f, "model.use_dora", &dora, r->d);
  if (rc) return rc;
  struct vf_value v;
  if (strcmp(method, "lora") == 0 && dora.node && ynode_value(dora.node, &v) && v.kind == VF_VALUE_BOOL && v.b)
    return config_set(r, "method", "dora", &dora);
  return config_set(r, "method", method, at);
}

static int in_bwd_unread(struct creader *r, struct cfile *f) {
  const char *in_bwd = config_value(r, "optimizer_in_bwd"), *method = config_value(r, "method");
  if (!in_bwd || strcmp(in_bwd, "yes") != 0 || !method || strcmp(method, "full") == 0) return 0;
  struct place at;
  int rc = view_find(f, "optimizer_in_bwd", &at, r->d);
  if (rc || !at.node) return rc;
  config_drop(r, "optimizer_in_bwd");
  return config_warn(r, "optimizer_in_bwd", &at, NULL,
                     "is read by torchtune's full fine-tuning recipes alone: its %s recipes step the optimizer after the "
                     "backward", method);
}

int torchtune_read(struct creader *r, struct cfile *f) {
  struct place at;
  int rc = view_find(f, "model._component_", &at, r->d);
  if (rc || !at.node || at.node->kind != YN_SCALAR) return rc;
  const char *dot = strrchr(at.node->value, '.'), *builder = dot ? dot + 1 : at.node->value;
  if ((rc = method_of(r, f, &builder, &at)) || (rc = in_bwd_unread(r, f))) return rc;
  const char *model = json_string_value(json_object_get(json_object_get(f->fmt->map, "builders"), builder));
  if (model) return config_set(r, "model", model, &at);
  return config_warn(r, "model", &at, NULL, "is not a torchtune model builder vramfit knows (the map's \"builders\")");
}

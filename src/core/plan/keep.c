/* The --keep list: the knobs a plan leaves as given. */
#include <string.h>

#include "vramfit.h"

int vf_keep_parse(const char *list, uint32_t *bits) {
  static const struct { const char *name; uint32_t bits; } names[] = {
      {"seq", VF_KEEP_SEQ},         {"precision", VF_KEEP_PRECISION}, {"optimizer", VF_KEEP_OPTIMIZER},
      {"method", VF_KEEP_METHOD},   {"lora-r", VF_KEEP_LORA_R},       {"quant", VF_KEEP_QUANT},
      {"grad-ckpt", VF_KEEP_GRAD_CKPT}, {"shard", VF_KEEP_SHARD},     {"offload", VF_KEEP_OFFLOAD},
      {"alloc-conf", VF_KEEP_ALLOC_CONF}, {"loss", VF_KEEP_LOSS},     {"optimizer-in-bwd", VF_KEEP_IN_BWD},
      {"capacity", VF_KEEP_CAPACITY},
      {"none", 0}};
  uint32_t out = 0;
  if (!*list) return VF_EINVAL;
  for (const char *p = list; *p;) {
    size_t n = strcspn(p, ","), i, count = sizeof names / sizeof *names;
    for (i = 0; i < count; i++)
      if (strlen(names[i].name) == n && strncmp(p, names[i].name, n) == 0) break;
    if (i == count) return VF_EINVAL;
    out |= names[i].bits;
    p += n + (p[n] == ',');
  }
  *bits = out;
  return 0;
}

int vf_keep_list(const char *list, uint32_t *bits) {
  int rc = vf_keep_parse(list, bits);
  if (rc) return rc;
  bool none = false;
  for (const char *p = list; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ','))
    none |= strncmp(p, "none", 4) == 0 && (p[4] == ',' || !p[4]);
  if (!none) *bits |= VF_KEEP_CAPACITY;
  return 0;
}

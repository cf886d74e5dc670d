/* Placeholder: the GGUF reader is being written; this keeps the build linking. */
#include "core/diag.h"
#include "vramfit.h"

int vf_gguf_read(struct vf_model *m, const char *path, struct vf_diag *d) {
  (void)m;
  return vf_diag_at(d, VF_EUNSUPPORTED, path, UINT64_MAX, "GGUF reader not built yet");
}

int vf_gguf_parse(struct vf_model *m, const uint8_t *buf, size_t len, const char *file,
                  struct vf_diag *d) {
  (void)m, (void)buf, (void)len;
  return vf_diag_at(d, VF_EUNSUPPORTED, file, UINT64_MAX, "GGUF reader not built yet");
}

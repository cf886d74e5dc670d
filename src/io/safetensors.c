/* Placeholder: the safetensors reader is being written; this keeps the build linking. */
#include "core/diag.h"
#include "vramfit.h"

int vf_safetensors_read(struct vf_model *m, const char *path, struct vf_diag *d) {
  (void)m;
  return vf_diag_at(d, VF_EUNSUPPORTED, path, UINT64_MAX, "safetensors reader not built yet");
}

int vf_safetensors_parse(struct vf_model *m, const uint8_t *buf, size_t len, uint64_t file_size,
                         const char *file, struct vf_diag *d) {
  (void)m, (void)buf, (void)len, (void)file_size;
  return vf_diag_at(d, VF_EUNSUPPORTED, file, UINT64_MAX, "safetensors reader not built yet");
}

int vf_safetensors_index_read(struct vf_model *m, const char *path, struct vf_diag *d) {
  (void)m;
  return vf_diag_at(d, VF_EUNSUPPORTED, path, UINT64_MAX, "safetensors reader not built yet");
}

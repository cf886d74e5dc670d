/* --gpu auto: the GPU a training run started here would get, as a catalogue-style spec. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/diag.h"
#include "vramfit/monitor.h"

/* CUDA reads CUDA_VISIBLE_DEVICES up to its first invalid entry; the run gets the first. */
int vf_nvml_visible(struct vf_nvml *n, unsigned *index, struct vf_diag *d) {
  const char *env = getenv("CUDA_VISIBLE_DEVICES");
  *index = 0;
  if (!env) return vf_nvml_count(n) ? 0 : diag_at(d, VF_ENOTFOUND, "", UINT64_MAX,
                                                       "NVML reports no GPU");
  char first[128];
  snprintf(first, sizeof first, "%.*s", (int)strcspn(env, ","), env);
  if (vf_nvml_find(n, first, index) == 0) return 0;
  if (!first[0] || strcmp(first, "-1") == 0)
    return diag_at(d, VF_ENOTFOUND, "", UINT64_MAX,
                   "CUDA_VISIBLE_DEVICES='%s' hides every GPU", env);
  return diag_at(d, VF_ENOTFOUND, "", UINT64_MAX,
                 "CUDA_VISIBLE_DEVICES='%s': no GPU has index or UUID '%s' (%u GPUs)", env,
                 first, vf_nvml_count(n));
}

/* Catalogue rates for a driver name ("NVIDIA GeForce RTX 4090" is rtx-4090). */
static int catalogue_match(const char *driver_name, struct vf_gpu_spec *out) {
  static const char *const brands[] = {"NVIDIA ", "GeForce ", "Tesla "};
  const char *name = driver_name;
  for (size_t i = 0; i < sizeof brands / sizeof *brands; i++)
    if (strncasecmp(name, brands[i], strlen(brands[i])) == 0) name += strlen(brands[i]);
  return vf_gpu_lookup(name, out);
}

static int spec_from_sample(const struct vf_gpu_sample *s, struct vf_gpu_spec *out,
                            struct vf_diag *d) {
  if (!(s->fields & VF_FIELD_MEMORY))
    return diag_at(d, VF_EUNSUPPORTED, "", UINT64_MAX,
                   "GPU %u (%s) does not report its memory", s->index, s->name);
  if (catalogue_match(s->name, out) != 0) memset(out, 0, sizeof *out);
  snprintf(out->full_name, sizeof out->full_name, "%s", s->name);
  snprintf(out->uuid, sizeof out->uuid, "%s", s->uuid);
  if (s->cc_major) {
    out->cc_major = s->cc_major;
    out->cc_minor = s->cc_minor;
  }
  out->capacity_bytes = s->total_bytes;
  out->free_bytes = s->free_bytes;
  out->index = (int)s->index;
  out->detected = true;
  return 0;
}

int vf_gpu_detect(struct vf_gpu_spec *out, struct vf_diag *d) {
  struct vf_nvml *n;
  int rc = vf_nvml_open(&n, d);
  if (rc) return rc;
  unsigned index;
  rc = vf_nvml_visible(n, &index, d);
  struct vf_gpu_sample *s = rc ? NULL : malloc(sizeof *s);
  if (!rc && !s) rc = diag_at(d, VF_ENOMEM, "", UINT64_MAX, "out of memory");
  if (!rc && vf_nvml_sample(n, index, s) != 0)
    rc = diag_at(d, VF_EIO, "", UINT64_MAX, "GPU %u does not answer", index);
  if (!rc) rc = spec_from_sample(s, out, d);
  free(s);
  vf_nvml_close(n);
  return rc;
}

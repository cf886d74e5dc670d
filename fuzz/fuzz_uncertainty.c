/* libFuzzer target: data/uncertainty.json's reader, picking a framework's groups. */
#include <stddef.h>
#include <stdint.h>

#include "vramfit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct vf_uncertainty_table t;
  struct vf_estimate e = {.allocated_peak = 1u << 30, .reserved_peak = 2u << 30, .device_peak = 3u << 30};
  struct vf_ranges r;
  static const char *const frameworks[] = {"hf", "litgpt@0.4", "all"};
  for (size_t i = 0; i < sizeof frameworks / sizeof *frameworks; i++)
    if (vf_uncertainty_parse((const char *)data, size, "fuzz.json", frameworks[i], &t, NULL) == 0)
      for (int c = 0; c < VF_CLASS_COUNT; c++) vf_estimate_ranges(&e, &t.by_class[c], &r);
  return 0;
}

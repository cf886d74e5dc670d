/* libFuzzer target: config.json to architecture and its expanded tensor list. */
#include <stddef.h>
#include <stdint.h>

#include "vramfit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct vf_model m;
  struct vf_diag d;
  vf_model_init(&m);
  vf_model_from_config_json(&m, (const char *)data, size, "fuzz.json", &d);
  vf_model_cleanup(&m);
  return 0;
}

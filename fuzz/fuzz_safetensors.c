/* libFuzzer target: the safetensors header parser, the input being a whole file. */
#include <stddef.h>
#include <stdint.h>

#include "vramfit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct vf_model m;
  struct vf_diag d;
  vf_model_init(&m);
  vf_safetensors_parse(&m, data, size, size, "fuzz.safetensors", &d);
  vf_model_cleanup(&m);
  return 0;
}

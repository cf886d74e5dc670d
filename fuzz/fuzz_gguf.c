/* libFuzzer target: the GGUF header parser (metadata, tensor infos, architecture), the
 * input being a whole file. */
#include <stddef.h>
#include <stdint.h>

#include "vramfit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct vf_model m;
  struct vf_diag d;
  vf_model_init(&m);
  vf_gguf_parse(&m, data, size, "fuzz.gguf", &d);
  vf_model_cleanup(&m);
  return 0;
}

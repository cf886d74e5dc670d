/* libFuzzer target: a histogram of sample lengths, parsed and drawn from. */
#include <stddef.h>
#include <stdint.h>

#include "vramfit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct vf_length_dist d;
  if (vf_length_dist_parse((const char *)data, size, &d, NULL) == 0)
    for (uint64_t k = 0; k < 16; k++) (void)vf_length_dist_batch(&d, 1 + k, 4096, k, 16);
  return 0;
}

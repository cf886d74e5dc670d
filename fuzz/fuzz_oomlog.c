/* libFuzzer target: out-of-memory reports in a log, their numbers and their cause. */
#include <stddef.h>
#include <stdint.h>

#include "vramfit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct vf_oom_report r;
  vf_oom_parse((const char *)data, size, &r);
  vf_oom_cause(&r);
  return 0;
}

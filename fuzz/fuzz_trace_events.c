/* libFuzzer target: the tracer's event file, parsed and replayed. */
#include <stddef.h>
#include <stdint.h>

#include "vramfit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct vf_trace t;
  struct vf_alloc_conf c;
  struct vf_trace_result r;
  vf_trace_init(&t);
  vf_alloc_conf_default(&c);
  if (vf_trace_parse((const char *)data, size, &t, NULL) == 0) vf_trace_replay(&t, &c, &r);
  vf_trace_cleanup(&t);
  return 0;
}

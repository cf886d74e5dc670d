/* libFuzzer target: the fit `vramfit trace --workload` writes beside a workload
 * (NAME.trace.json, read by src/io/workload_load.c through workload_fit_from_json), on
 * any bytes. A file is read or refused, never a crash; an accepted fit evaluates at any shape
 * to an estimate whose breakdown sums to its device peak. */
#include <stdint.h>
#include <stdlib.h>

#include "base/json_util.h"
#include "io/workload_trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  json_t *o = NULL;
  struct vf_diag d;
  vf_diag_clear(&d);
  if (parse_json_text((const char *)data, size, "workload.trace.json", &o, &d) != 0) return 0;
  struct vf_wl_fit f;
  if (workload_fit_from_json(json_object_get(o, "fit"), &f) == 0) {
    if (!f.n_points) abort();
    struct vf_wl_env env = {.context_bytes = 500u << 20};
    const struct vf_wl_shape shapes[] = {{0, 0}, {1, 1}, {4096, 1u << 20}, {UINT32_MAX, UINT32_MAX}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
      struct vf_estimate e;
      vf_workload_fit_eval(&f, &shapes[i], &env, &e);
      uint64_t sum = e.allocator_slack + e.context;
      for (int c = 0; c < VF_CAT_COUNT; c++) sum += e.by_category[c];
      if (sum != e.device_peak || e.reserved_peak < e.allocated_peak) abort();
    }
  }
  json_decref(o);
  return 0;
}

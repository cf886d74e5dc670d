/* Why a run ran out of memory, from the numbers its report gave (allocator.md §4, §8). */
#include "vramfit/monitor.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
#define KNOWN(x) ((x) != VF_BYTES_UNKNOWN)
#define PROGRESS_BEFORE_LEAK 20 /* steps that fitted before the failure */

/* Memory on the device that is not this process's: what other processes list, else the
 * capacity less free and this process's total. */
static double others(const struct vf_oom_report *r) {
  if (KNOWN(r->other_process_bytes)) return (double)r->other_process_bytes;
  if (!KNOWN(r->capacity_bytes) || !KNOWN(r->free_bytes) || !KNOWN(r->process_bytes)) return 0;
  return (double)r->capacity_bytes - (double)r->free_bytes - (double)r->process_bytes;
}

/* At OOM time PyTorch has already released every cached block it could, so what is still
 * reserved but unallocated sits in split segments: fragmentation, when it could have held
 * the request. */
static bool fragmented(const struct vf_oom_report *r) {
  if (!KNOWN(r->reserved_unallocated_bytes) || !KNOWN(r->tried_bytes)) return false;
  double spare = (double)r->reserved_unallocated_bytes;
  double floor = KNOWN(r->capacity_bytes) ? 0.05 * (double)r->capacity_bytes : 0.5 * GIB;
  return spare >= (double)r->tried_bytes && spare >= floor;
}

/* Many steps fitted, then a small request failed: memory crept up during the run. */
static bool crept(const struct vf_oom_report *r) {
  return r->progress_lines >= PROGRESS_BEFORE_LEAK && KNOWN(r->tried_bytes) &&
         KNOWN(r->capacity_bytes) && (double)r->tried_bytes < 0.05 * (double)r->capacity_bytes;
}

enum vf_oom_cause vf_oom_cause(const struct vf_oom_report *r) {
  if (r->source == VF_OOM_NONE || r->source == VF_OOM_HOST) return VF_OOM_CAUSE_UNKNOWN;
  if (r->leak_warning) return VF_OOM_CAUSE_LEAK;
  double cap = KNOWN(r->capacity_bytes) ? (double)r->capacity_bytes : 0;
  double other = others(r);
  if (other >= 1 * GIB && other >= 0.1 * cap) return VF_OOM_CAUSE_OTHER_PROCESS;
  if (fragmented(r)) return VF_OOM_CAUSE_FRAGMENTATION;
  if (crept(r)) return VF_OOM_CAUSE_LEAK;
  return VF_OOM_CAUSE_TOO_LARGE;
}

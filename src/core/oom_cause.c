/* Why a run ran out of memory, from the numbers its report gave (allocator.md §4, §8). */
#include "vramfit/monitor.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
#define MIB (1024.0 * 1024.0)
#define KNOWN(x) ((x) != VF_BYTES_UNKNOWN)
#define PROGRESS_BEFORE_LEAK 20 /* steps that fitted before the failure */
/* The caching allocator asks the driver for a whole segment (up to 20 MiB for a small
 * request), so a report is "not full" only when free memory beats the request by more. */
#define SEGMENT_SLACK (20.0 * MIB)

const char *vf_oom_cause_name(enum vf_oom_cause c) {
  static const char *const names[] = {"unknown", "fragmentation", "other_process", "leak",
                                      "too_large", "limit", "not_full"};
  return c <= VF_OOM_CAUSE_NOT_FULL ? names[c] : "unknown";
}

/* What PyTorch itself held on the device: allocated plus reserved but unallocated. */
static double pytorch_reserved(const struct vf_oom_report *r) {
  if (!KNOWN(r->allocated_bytes)) return 0;
  return (double)r->allocated_bytes +
         (KNOWN(r->reserved_unallocated_bytes) ? (double)r->reserved_unallocated_bytes : 0);
}

/* A run in a container sees its own process under a pid it cannot match, so PyTorch lists it
 * as "Process N" and reports "this process has 0 bytes". The numbers give it away: what
 * PyTorch holds would not fit on the device beside the processes listed. The run is then the
 * listed entry that holds at least that much, the closest one. */
static int self_listed(const struct vf_oom_report *r) {
  if (r->n_procs == 0 || !KNOWN(r->capacity_bytes) || !KNOWN(r->free_bytes)) return -1;
  double own = pytorch_reserved(r), listed = 0;
  if (KNOWN(r->process_bytes) && (double)r->process_bytes > own) own = (double)r->process_bytes;
  for (unsigned i = 0; i < r->n_procs; i++) listed += (double)r->procs[i].bytes;
  double used = (double)r->capacity_bytes - (double)r->free_bytes;
  double tolerance = 0.01 * (double)r->capacity_bytes + 64 * MIB;
  bool blind = KNOWN(r->process_bytes) && r->process_bytes == 0;
  if (own <= 0 || (!blind && own + listed <= used + tolerance)) return -1;
  int best = -1;
  for (unsigned i = 0; i < r->n_procs; i++)
    if ((double)r->procs[i].bytes >= pytorch_reserved(r) &&
        (best < 0 || r->procs[i].bytes < r->procs[best].bytes))
      best = (int)i;
  return best;
}

/* Memory on the device that is not this process's: what other processes listed hold (less
 * the run itself when it is among them), else the capacity less free and this process. */
static uint64_t others(const struct vf_oom_report *r, int self) {
  if (KNOWN(r->other_process_bytes))
    return r->other_process_bytes - (self >= 0 ? r->procs[self].bytes : 0);
  if (!KNOWN(r->capacity_bytes) || !KNOWN(r->free_bytes) || !KNOWN(r->process_bytes) ||
      r->process_bytes == 0 || r->free_bytes + r->process_bytes > r->capacity_bytes)
    return VF_BYTES_UNKNOWN;
  return r->capacity_bytes - r->free_bytes - r->process_bytes;
}

/* PyTorch <= 2.0 names no processes: what is neither free nor PyTorch's was held outside it. */
static uint64_t outside(const struct vf_oom_report *r) {
  double reserved = pytorch_reserved(r);
  if (KNOWN(r->process_bytes) || !KNOWN(r->capacity_bytes) || !KNOWN(r->free_bytes) || reserved <= 0)
    return VF_BYTES_UNKNOWN;
  double held = (double)r->capacity_bytes - (double)r->free_bytes - reserved;
  return held > 0 ? (uint64_t)held : 0;
}

static bool sizeable(uint64_t b, const struct vf_oom_report *r) {
  double cap = KNOWN(r->capacity_bytes) ? (double)r->capacity_bytes : 0;
  return KNOWN(b) && (double)b >= 1 * GIB && (double)b >= 0.1 * cap;
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

/* A memory fraction below the whole GPU was set, and the run reached it. */
static bool limited(const struct vf_oom_report *r) {
  return KNOWN(r->allowed_bytes) && KNOWN(r->capacity_bytes) &&
         (double)r->allowed_bytes < 0.99 * (double)r->capacity_bytes;
}

/* The device had room for the request: the failure was not this GPU being full. */
static bool not_full(const struct vf_oom_report *r) {
  return KNOWN(r->free_bytes) && KNOWN(r->tried_bytes) &&
         (double)r->free_bytes > (double)r->tried_bytes + SEGMENT_SLACK;
}

static enum vf_oom_cause cause_of(const struct vf_oom_report *r, const struct vf_oom_analysis *a) {
  if (r->source == VF_OOM_NONE || r->source == VF_OOM_HOST) return VF_OOM_CAUSE_UNKNOWN;
  if (r->leak_warning) return VF_OOM_CAUSE_LEAK;
  if (limited(r)) return VF_OOM_CAUSE_LIMIT;
  if (not_full(r)) return VF_OOM_CAUSE_NOT_FULL;
  if (sizeable(a->others_bytes, r) || sizeable(a->outside_bytes, r)) return VF_OOM_CAUSE_OTHER_PROCESS;
  if (fragmented(r)) return VF_OOM_CAUSE_FRAGMENTATION;
  if (crept(r)) return VF_OOM_CAUSE_LEAK;
  return VF_OOM_CAUSE_TOO_LARGE;
}

void vf_oom_analyze(const struct vf_oom_report *r, struct vf_oom_analysis *out) {
  out->self_listed = self_listed(r);
  out->others_bytes = others(r, out->self_listed);
  out->outside_bytes = outside(r);
  out->limit_bytes = limited(r) ? r->allowed_bytes : r->capacity_bytes;
  out->cause = cause_of(r, out);
}

enum vf_oom_cause vf_oom_cause(const struct vf_oom_report *r) {
  struct vf_oom_analysis a;
  vf_oom_analyze(r, &a);
  return a.cause;
}

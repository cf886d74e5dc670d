/* Traced runs: the allocation events `python -m vramfit.trace` records while a framework's
 * own training code runs on a fake CUDA device, and their replay through the caching
 * allocator model (alloc.h), which gives what torch.cuda.max_memory_allocated() and
 * max_memory_reserved() would have said. */
#ifndef VRAMFIT_TRACE_H
#define VRAMFIT_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "vramfit/alloc.h"
#include "vramfit/api.h"
#include "vramfit/error.h"
#include "vramfit/estimate.h"

#define VF_TRACE_MAX_PHASES 16
#define VF_TRACE_PHASE_NAME 24

enum vf_trace_kind {
  VF_TRACE_ALLOC,       /* a storage of `bytes` appears as `id` */
  VF_TRACE_FREE,        /* storage `id` dies */
  VF_TRACE_PHASE,       /* phase `phase` begins */
  VF_TRACE_EMPTY_CACHE, /* torch.cuda.empty_cache() */
  VF_TRACE_RECORD,      /* storage `id` is used on `stream` too (Tensor.record_stream) */
  VF_TRACE_SYNC,        /* the work queued on `stream` is done (VF_ALLOC_ALL_STREAMS: all) */
  VF_TRACE_EVENT,       /* CUDA event `id` is recorded on `stream` */
  VF_TRACE_WAIT,        /* the host waits for CUDA event `id` (Event.synchronize) */
};

struct vf_trace_event {
  uint8_t kind;  /* enum vf_trace_kind */
  uint8_t phase; /* VF_TRACE_PHASE: index into vf_trace.phases */
  uint32_t stream; /* where it is made, used or recorded (0: the default stream) */
  uint64_t id, bytes; /* id: a storage, or a CUDA event for VF_TRACE_EVENT and _WAIT */
};

/* A parsed event stream. Storage ids run from 1 to max_id; category[id] is the
 * vf_category the tracer labelled the storage with (weights, gradients, optimizer), or
 * VF_CAT_ACTIVATIONS for everything else. */
struct vf_trace {
  struct vf_trace_event *events;
  size_t n, cap;
  char phases[VF_TRACE_MAX_PHASES][VF_TRACE_PHASE_NAME];
  size_t nphases;
  uint8_t *category;
  size_t category_cap;
  uint64_t max_id;
  uint64_t max_event; /* CUDA events run from 1 to max_event */
};

VF_API void vf_trace_init(struct vf_trace *t);
VF_API void vf_trace_cleanup(struct vf_trace *t);

/* Parses the tracer's event file (text, one event per line after the header
 * "vramfit-trace-events 1"): "a ID BYTES [STREAM]", "f ID", "p PHASE", "e",
 * "c ID CATEGORY", "r ID STREAM" (record_stream), "s [STREAM]" (a synchronization: of
 * one stream, or without one of the device), "m EVENT STREAM" (a CUDA event recorded),
 * "w EVENT" (the host waits for it). Streams are small numbers, 0 the default; events are
 * numbered from 1 as storages are.
 * VF_EFORMAT with d's line:col on a malformed line, VF_ERANGE beyond VF_TRACE_MAX_PHASES
 * phases, VF_ENOMEM. */
VF_API int vf_trace_parse(const char *text, size_t len, struct vf_trace *t, struct vf_diag *d);

struct vf_trace_peaks {
  uint64_t allocated, reserved;
};

struct vf_trace_result {
  uint64_t allocated_peak, reserved_peak;
  size_t peak_phase; /* the phase (index into the trace's phases) at the allocated peak */
  struct vf_trace_peaks phase_peak[VF_TRACE_MAX_PHASES];
  /* Live block bytes per category at the allocated peak (weights, gradients, optimizer,
   * activations; the others stay 0). */
  uint64_t by_category[VF_CAT_COUNT];
  uint64_t events;
};

/* Replays the events through a caching allocator with configuration c and no capacity
 * limit. Pure. VF_EFORMAT when the stream allocates a live id again or frees one that is
 * not live; VF_ENOMEM (host memory). */
VF_API int vf_trace_replay(const struct vf_trace *t, const struct vf_alloc_conf *c,
                           struct vf_trace_result *r);

#endif

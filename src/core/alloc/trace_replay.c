/* Replays a traced run through the caching allocator model: the traced sizes are what the
 * ops asked for, and what max_memory_allocated() counts is the blocks the allocator hands
 * out for them (rounded, and charged whole when a block is not split). */
#include <stdlib.h>
#include <string.h>

#include "vramfit/trace.h"

/* A live storage of zero bytes holds no block (vf_allocator_malloc gives it id 0). */
#define NO_BLOCK UINT64_MAX

struct replay {
  struct vf_allocator alloc;
  uint64_t *block;    /* block id per storage id; 0 when not live, NO_BLOCK when empty */
  uint64_t *charged;  /* bytes the block added to allocated, per storage id */
  uint64_t *marks;    /* per CUDA event: how far the clock was when recorded (0: never) */
  uint64_t live_by_category[VF_CAT_COUNT];
};

static int replay_init(struct replay *p, const struct vf_trace *t, const struct vf_alloc_conf *c) {
  memset(p, 0, sizeof *p);
  p->block = calloc(t->max_id + 1, sizeof *p->block);
  p->charged = calloc(t->max_id + 1, sizeof *p->charged);
  p->marks = calloc(t->max_event + 1, sizeof *p->marks);
  if (!p->block || !p->charged || !p->marks || vf_allocator_init(&p->alloc, c, 0)) {
    free(p->block);
    free(p->charged);
    free(p->marks);
    return VF_ENOMEM;
  }
  return 0;
}

static void replay_cleanup(struct replay *p) {
  vf_allocator_cleanup(&p->alloc);
  free(p->block);
  free(p->charged);
  free(p->marks);
}

static uint64_t allocated_now(const struct replay *p) {
  struct vf_alloc_stats s;
  vf_allocator_stats(&p->alloc, &s);
  return s.allocated;
}

static int step(struct replay *p, const struct vf_trace *t, const struct vf_trace_event *e) {
  bool storage = e->kind == VF_TRACE_ALLOC || e->kind == VF_TRACE_FREE || e->kind == VF_TRACE_RECORD;
  uint8_t cat = storage ? t->category[e->id] : 0;
  switch (e->kind) {
  case VF_TRACE_ALLOC: {
    if (p->block[e->id]) return VF_EFORMAT;
    uint64_t before = allocated_now(p);
    int rc = vf_allocator_malloc(&p->alloc, e->bytes, e->stream, &p->block[e->id]);
    if (rc) return rc;
    if (!p->block[e->id]) p->block[e->id] = NO_BLOCK;
    p->charged[e->id] = allocated_now(p) - before;
    p->live_by_category[cat] += p->charged[e->id];
    return 0;
  }
  case VF_TRACE_FREE:
    if (!p->block[e->id]) return VF_EFORMAT;
    if (p->block[e->id] != NO_BLOCK) vf_allocator_free(&p->alloc, p->block[e->id]);
    p->block[e->id] = 0;
    p->live_by_category[cat] -= p->charged[e->id];
    return 0;
  case VF_TRACE_RECORD:
    if (!p->block[e->id]) return VF_EFORMAT;
    return p->block[e->id] == NO_BLOCK ? 0 : vf_allocator_record_stream(&p->alloc, p->block[e->id], e->stream);
  case VF_TRACE_SYNC: vf_allocator_sync(&p->alloc, e->stream, VF_ALLOC_ALL_WORK); return 0;
  case VF_TRACE_EVENT:
    return vf_allocator_record_event(&p->alloc, e->stream, &p->marks[e->id]);
  case VF_TRACE_WAIT:
    /* An event never recorded is complete (cudaEventSynchronize). The fake device runs
     * nothing, so when other streams' work is done is the replay's to say: as the
     * estimator's replay does, the GPU is taken to run every stream's work in the order the
     * host queued it, so the host that has waited for an event knows the work of every
     * stream queued before it done (FSDP1's rate limiter waits on the computation stream's
     * events, while its reduce-scatters run on the post-backward stream: taken strictly,
     * no gradient block that stream used would return to the cache before the optimizer). */
    if (p->marks[e->id]) vf_allocator_sync(&p->alloc, VF_ALLOC_ALL_STREAMS, p->marks[e->id]);
    return 0;
  case VF_TRACE_EMPTY_CACHE: return vf_allocator_empty_cache(&p->alloc);
  default: return 0;
  }
}

int vf_trace_replay(const struct vf_trace *t, const struct vf_alloc_conf *c,
                    struct vf_trace_result *r) {
  struct replay p;
  memset(r, 0, sizeof *r);
  if (replay_init(&p, t, c)) return VF_ENOMEM;
  size_t phase = 0;
  int rc = 0;
  for (size_t i = 0; i < t->n && !rc; i++) {
    const struct vf_trace_event *e = &t->events[i];
    if (e->kind == VF_TRACE_PHASE) phase = e->phase;
    if ((rc = step(&p, t, e))) break;
    struct vf_alloc_stats s;
    vf_allocator_stats(&p.alloc, &s);
    struct vf_trace_peaks *pp = &r->phase_peak[phase];
    if (s.allocated > pp->allocated) pp->allocated = s.allocated;
    if (s.reserved > pp->reserved) pp->reserved = s.reserved;
    if (s.allocated > r->allocated_peak) {
      r->allocated_peak = s.allocated;
      r->peak_phase = phase;
      memcpy(r->by_category, p.live_by_category, sizeof r->by_category);
    }
    if (s.reserved > r->reserved_peak) r->reserved_peak = s.reserved;
  }
  r->events = t->n;
  replay_cleanup(&p);
  return rc;
}

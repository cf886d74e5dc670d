/* A replay: the tape schedule.c writes, run through the caching-allocator model
 * (src/core/alloc/sim.c), its highest points kept per stretch; and the extension of replays
 * of REPLAY_A and REPLAY_B layers to all of a model's, with the allocator's slack capped as
 * static-shape training shows it (shared/research/allocator.md §11). */
#include <stdlib.h>
#include <string.h>

#include "core/estimate/internal.h"

/* The public phase of each stretch. */
static const enum vf_phase stretch_phase[ST_COUNT] = {
    VF_PHASE_FORWARD,  VF_PHASE_FORWARD,  VF_PHASE_FORWARD,  VF_PHASE_LOSS,     VF_PHASE_BACKWARD,
    VF_PHASE_BACKWARD, VF_PHASE_BACKWARD, VF_PHASE_BACKWARD, VF_PHASE_BACKWARD, VF_PHASE_OPTIMIZER};

static enum vf_phase unit_phase(int unit) {
  if (unit == UNIT_SETUP) return VF_PHASE_LOAD;
  if (unit == UNIT_EVAL) return VF_PHASE_EVAL;
  if (unit == UNIT_SAVE) return VF_PHASE_SAVE;
  return stretch_phase[(unit - 1) % ST_COUNT];
}

struct live {
  uint64_t block, bytes; /* block: the allocator's, or an event's mark (OP_EVENT) */
  uint8_t cat;
};

static void observe(struct unit_peak *pk, const struct vf_alloc_stats *st, const uint64_t *cat) {
  if (st->allocated > pk->allocated) {
    pk->allocated = st->allocated;
    memcpy(pk->cat, cat, sizeof pk->cat);
  }
  if (st->reserved > pk->reserved) pk->reserved = st->reserved;
}

/* The timeline's name for a tape's event. */
static uint8_t timeline_op(const struct ev *e) {
  switch (e->op) {
  case OP_FREE:
  case OP_GRAPH_FREE: return VF_TIMELINE_FREE;
  case OP_RECORD: return VF_TIMELINE_RECORD;
  case OP_EVENT: return VF_TIMELINE_EVENT;
  case OP_WAIT: return VF_TIMELINE_WAIT;
  case OP_EMPTY_CACHE: return VF_TIMELINE_EMPTY_CACHE;
  default: return VF_TIMELINE_ALLOC;
  }
}

/* Tells the timeline's listener about one replayed event. */
static void report(const struct ctx *x, const struct ev *e, const struct live *l, int unit,
                   const struct vf_allocator *a) {
  struct vf_alloc_stats st;
  vf_allocator_stats(a, &st);
  uint8_t op = timeline_op(e);
  bool block = op == VF_TIMELINE_ALLOC || op == VF_TIMELINE_FREE;
  struct vf_timeline_event te = {.op = op,
                                 .phase = (uint8_t)unit_phase(unit),
                                 .category = op > VF_TIMELINE_RECORD ? VF_CAT_RUNTIME  /* an event holds no block */
                                             : l->cat == WEIGHT_TEMPORARIES ? VF_CAT_TEMPORARIES : l->cat,
                                 .stage = (uint8_t)x->pp.stage,
                                 .with_graph = e->op == OP_GRAPH_FREE,
                                 .stream = op == VF_TIMELINE_EVENT ? STREAM_COMPUTE : e->stream,
                                 .id = e->id,
                                 .bytes = block ? l->bytes : 0,
                                 .allocated = st.allocated,
                                 .reserved = st.reserved};
  x->replay.listener(x->replay.listener_arg, &te);
}

/* Every id is written by its allocation before its free reads it: no zeroing needed. */
static int replay(const struct ctx *x, const struct tape *t, const struct vf_alloc_conf *conf,
                  struct vf_allocator *a, struct result *r) {
  struct live *lv = malloc((t->next_id + 1) * sizeof *lv);
  if (!lv) return VF_ENOMEM;
  memset(r, 0, sizeof *r);
  uint64_t cat[CAT_SLOTS] = {0};
  int unit = UNIT_SETUP;
  struct vf_alloc_stats st;
  int rc = 0;
  for (size_t i = 0; i < t->n && !rc; i++) {
    const struct ev *e = &t->ev[i];
    struct live *l = &lv[e->id];
    if (e->op == OP_UNIT) {
      /* What is live when a unit begins counts for it, even if it allocates nothing. */
      unit = e->unit;
      vf_allocator_stats(a, &st);
      observe(&r->unit[unit], &st, cat);
    } else if (e->op == OP_RECORD || e->op == OP_EVENT || e->op == OP_WAIT || e->op == OP_EMPTY_CACHE) {
      if (e->op == OP_RECORD) rc = vf_allocator_record_stream(a, l->block, e->stream);
      else if (e->op == OP_EVENT) rc = vf_allocator_record_event(a, STREAM_COMPUTE, &l->block);
      else if (e->op == OP_WAIT) vf_allocator_sync(a, VF_ALLOC_ALL_STREAMS, l->block);
      else rc = vf_allocator_empty_cache(a);
      if (x->replay.listener) report(x, e, l, unit, a);
    } else if (e->op == OP_FREE || e->op == OP_GRAPH_FREE) {
      cat[l->cat] -= l->bytes;
      rc = vf_allocator_free(a, l->block);
      if (x->replay.listener) report(x, e, l, unit, a);
    } else {
      rc = vf_allocator_malloc(a, e->bytes, e->stream, &l->block);
      if (rc == VF_ERANGE && x->replay.capacity) {
        /* Out of memory on the GPU: the replay goes on past its size to measure the peak. */
        r->out_of_memory = true;
        vf_allocator_set_capacity(a, 0);
        rc = vf_allocator_malloc(a, e->bytes, e->stream, &l->block);
      }
      l->bytes = vf_alloc_round_size(conf, e->bytes);
      l->cat = e->cat;
      cat[e->cat] += l->bytes;
      vf_allocator_stats(a, &st);
      observe(&r->unit[unit], &st, cat);
      if (x->replay.listener) report(x, e, l, unit, a);
    }
  }
  free(lv);
  vf_allocator_stats(a, &st);
  r->cache_releases = st.num_alloc_retries;
  return rc;
}

/* What one replay leaves in the parts, cleared for the next: its ids mean nothing to it. */
static void rewind(struct ctx *x, uint64_t layers) {
  x->layers = layers;
  x->grads.kept = x->opt.states_made = false;
  x->head.held_logits = x->embedding.stable_grad = 0;
  x->tape.graph.n = x->grads.stale.n = x->autocast.cache.n = x->pp.outputs.n = 0;
  x->pp.receive_buffers = false;
  memset(x->fsdp.held_gather, 0, (layers + 1) * sizeof *x->fsdp.held_gather);
  for (uint64_t i = 0; i <= layers; i++) x->grads.unsharded[i].n = 0;
  x->grads.embedding_unit.n = 0;
  x->saving.keep_share = x->s->grad_ckpt != VF_CKPT_SELECTIVE ? 1.0
                         : x->s->compile == VF_COMPILE_YES ? x->p->selective_keep_compiled
                                                           : x->p->selective_keep;
  x->tape.n = 0;
  x->tape.next_id = 0;
  x->tape.rc = 0;
  x->sched.forward_workspace = x->sched.backward_workspace = 0;
  x->zero.reduce_buckets = x->fsdp.root = x->fsdp.prefetched = 0;
  x->sched.stash.n = 0, x->sched.stash.packs = 0;
  memset(x->fsdp.free_events, 0, sizeof x->fsdp.free_events);
}

static int run(struct ctx *x, uint64_t layers, const struct vf_alloc_conf *conf, struct vf_allocator *a,
               struct result *r) {
  rewind(x, layers);
  schedule_write(x);
  if (x->tape.rc) return x->tape.rc;
  vf_allocator_reset(a, conf, x->replay.capacity);
  return replay(x, &x->tape, conf, a, r);
}

/* Within a unit everything grows by the same bytes per layer, so x(L) = xb + k (xb - xa)
 * where k counts the further layers per layer step. */
static uint64_t extend(uint64_t xa, uint64_t xb, double k) {
  return xb >= xa ? xb + (uint64_t)(k * (double)(xb - xa)) : xb;
}

/* Live bytes extend linearly, and so, on average, does the allocator's cached and
 * fragmented memory: each layer's backward strands about the same bytes in split blocks.
 * But a few replayed layers see the allocator's jumps (a segment more or less). Slack
 * that shrank between the replays was being filled by the added layers and will jump
 * again: the shorter replay's, higher, figure stands. One that grew is extended, but a linear
 * extension multiplies a jump; static-shape training reserves 5-30% above what it
 * allocates (shared/research/allocator.md §11), so the extended slack is capped there. */
#define SLACK_CAP_PCT 30
static void extend_result(const struct ctx *x, const struct result *ra, struct result *rb, double k) {
  for (int u = 0; u < UNITS; u++) {
    const struct unit_peak *a = &ra->unit[u];
    struct unit_peak *b = &rb->unit[u];
    uint64_t sa = a->reserved - a->allocated, sb = b->reserved - b->allocated;
    uint64_t slack = sb >= sa ? extend(sa, sb, k) : sa;
    b->allocated = extend(a->allocated, b->allocated, k);
    if (slack > b->allocated * SLACK_CAP_PCT / 100) slack = b->allocated * SLACK_CAP_PCT / 100;
    for (int c = 0; c < CAT_SLOTS; c++) b->cat[c] = extend(a->cat[c], b->cat[c], k);
    b->reserved = b->allocated + slack;
    /* Past the GPU's size the allocator frees its cache and retries: only what is live
     * stays out of reach (the exact replay says whether fragmentation fails it, and how
     * often the cache goes; extended, it went at least once). */
    if (x->replay.capacity && b->reserved > x->replay.capacity) {
      if (b->allocated > x->replay.capacity) rb->out_of_memory = true;
      else b->reserved = x->replay.capacity, rb->cache_releases += !rb->cache_releases;
    }
  }
}

/* Replays the step with all layers, or with REPLAY_A and REPLAY_B layers extended to all. */
int replay_layers(struct ctx *x, uint64_t layers, const struct vf_alloc_conf *alloc, struct result *out) {
  struct vf_allocator a;
  int rc = vf_allocator_init(&a, alloc, 0);
  if (rc) return rc;
  if (layers <= x->replay.max) {
    rc = run(x, layers, alloc, &a, out);
  } else {
    struct result ra;
    rc = run(x, REPLAY_A, alloc, &a, &ra);
    if (!rc) rc = run(x, REPLAY_B, alloc, &a, out);
    if (!rc) extend_result(x, &ra, out, (double)(layers - REPLAY_B) / (REPLAY_B - REPLAY_A));
  }
  vf_allocator_cleanup(&a);
  return rc;
}

uint64_t replay_reserved(const struct result *r) {
  uint64_t top = 0;
  for (int u = 0; u < UNITS; u++)
    if (r->unit[u].reserved > top) top = r->unit[u].reserved;
  return top;
}

/* The peak falls where live memory is highest: that is where an allocation fails. Reserved
 * memory never shrinks within a step, so its maximum is carried into later phases; the
 * slack is what the allocator holds beyond the live bytes at the peak. */
void replay_fill(struct vf_estimate *out, const struct result *r, const struct vf_setup *s) {
  int top = UNIT_SETUP;
  out->reserved_peak = replay_reserved(r);
  for (int u = 0; u < UNITS; u++) {
    const struct unit_peak *pk = &r->unit[u];
    enum vf_phase p = unit_phase(u);
    if (pk->allocated > r->unit[top].allocated) top = u;
    if (pk->allocated > out->phase_allocated[p]) out->phase_allocated[p] = pk->allocated;
    if (pk->reserved > out->phase_reserved[p]) out->phase_reserved[p] = pk->reserved;
  }
  const struct unit_peak *pk = &r->unit[top];
  out->allocated_peak = pk->allocated;
  out->peak_phase = unit_phase(top);
  uint64_t live = 0;
  for (int c = 0; c < VF_CAT_COUNT; c++) out->by_category[c] = pk->cat[c];
  out->by_category[VF_CAT_TEMPORARIES] += pk->cat[WEIGHT_TEMPORARIES];
  for (int c = 0; c < VF_CAT_COUNT; c++) live += out->by_category[c];
  out->allocator_slack = out->reserved_peak > live ? out->reserved_peak - live : 0;
  out->context = s->context_bytes;
  out->device_peak = live + out->allocator_slack + out->context;
}

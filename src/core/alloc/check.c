/* vf_allocator_check: recomputes everything the simulator keeps incrementally (free sets,
 * segment chains, statistics) from the block records, so random event sequences in tests
 * and fuzzing catch a bookkeeping slip at the event that causes it. */
#include <stdlib.h>

#include "core/alloc/internal.h"

enum { UNSEEN, IN_SET, DEAD };

/* Sorted by its key (set_key) and address, each entry a free block of the right kind. */
static bool set_ok(const struct vf_alloc_state *s, const struct set *t, int pool, bool mapped,
                   uint8_t *mark) {
  for (uint32_t at = 0; at < t->n; at++) {
    const struct key *k = &t->k[at];
    if (k->blk >= s->nblk || mark[k->blk] != UNSEEN) return false;
    const struct blk *b = &s->blk[k->blk];
    if (b->allocated || b->pool != pool || b->mapped != mapped || b->sid >= s->nstreams ||
        k->hi != set_key(b))
      return false;
    const struct key *p = at ? &t->k[at - 1] : NULL;
    if (p && (p->hi > k->hi || (p->hi == k->hi && s->blk[p->blk].addr >= b->addr)))
      return false;
    mark[k->blk] = IN_SET;
  }
  return true;
}

static bool links_ok(const struct vf_alloc_state *s, uint32_t i, const uint8_t *mark) {
  const struct blk *b = &s->blk[i];
  if (b->prev != NIL && (b->prev >= s->nblk || mark[b->prev] == DEAD ||
                         s->blk[b->prev].next != i ||
                         s->blk[b->prev].addr + s->blk[b->prev].size != b->addr))
    return false;
  if (b->next == NIL) return true;
  const struct blk *n = &s->blk[b->next];
  if (b->next >= s->nblk || mark[b->next] == DEAD || n->prev != i) return false;
  /* Free neighbours of the same kind are always merged. */
  return b->allocated || n->allocated || b->mapped != n->mapped;
}

struct totals {
  uint64_t allocated, requested, reserved, segments, inactive;
};

static bool block_ok(const struct vf_alloc_state *s, uint32_t i, const uint8_t *mark,
                     struct totals *t) {
  const struct blk *b = &s->blk[i];
  /* Every free block is cached: mapped ones for reuse, unmapped ranges for growth. */
  if (!links_ok(s, i, mark) || (mark[i] == IN_SET) == b->allocated) return false;
  if (b->allocated) {
    /* A freed block waiting for other streams' events counts as free in the statistics. */
    t->allocated += b->events ? 0 : b->size;
    t->requested += b->events ? 0 : b->requested;
  } else if (b->xseg == NIL && is_split(b)) {
    t->inactive += b->size;
  }
  if (b->xseg == NIL) {
    t->reserved += b->size;
    t->segments += b->prev == NIL;
  }
  return b->xseg == NIL || b->xseg < s->nxseg;
}

static bool xsegs_ok(const struct vf_alloc_state *s, const uint8_t *mark, struct totals *t) {
  for (uint32_t x = 0; x < s->nxseg; x++) {
    uint64_t mapped = 0;
    for (uint32_t i = 0; i < s->nblk; i++)
      if (mark[i] != DEAD && s->blk[i].xseg == x && s->blk[i].mapped) mapped += s->blk[i].size;
    if (mapped != s->xseg[x].mapped) return false;
    t->reserved += mapped;
  }
  return true;
}

int vf_allocator_check(const struct vf_allocator *a) {
  const struct vf_alloc_state *s = a->state;
  uint8_t *mark = calloc(s->nblk ? s->nblk : 1, 1);
  if (!mark) return VF_ENOMEM;
  bool ok = true;
  uint32_t dead = 0;
  for (uint32_t i = s->free_head; ok && i != NIL; i = s->blk[i].next, dead++) {
    ok = i < s->nblk && mark[i] == UNSEEN && dead < s->nfree;
    if (ok) mark[i] = DEAD;
  }
  ok = ok && dead == s->nfree;
  for (int p = 0; ok && p < NPOOLS; p++)
    ok = set_ok(s, &s->blocks[p], p, true, mark) && set_ok(s, &s->unmapped[p], p, false, mark);
  struct totals t = {0};
  for (uint32_t i = 0; ok && i < s->nblk; i++) ok = mark[i] == DEAD || block_ok(s, i, mark, &t);
  ok = ok && xsegs_ok(s, mark, &t);
  const struct vf_alloc_stats *st = &s->st;
  ok = ok && t.allocated == st->allocated && t.requested == st->requested &&
       t.reserved == st->reserved && t.segments == st->segments &&
       t.inactive == st->inactive_split_bytes && st->allocated <= st->reserved &&
       st->peak_allocated >= st->allocated && st->peak_reserved >= st->reserved;
  free(mark);
  return ok ? 0 : VF_EINTERNAL;
}

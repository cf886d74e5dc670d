/* The caching-allocator simulator. It mirrors DeviceCachingAllocator's data model: blocks
 * chained per segment (prev/next), free mapped blocks kept per pool in one set ordered by
 * (stream, size, address) so a lower bound is PyTorch's best fit, and for expandable
 * segments a second set of unmapped address ranges.
 *
 * Speed: a replay is a few thousand events and an estimate may run many replays, so block
 * records live in one array recycled through a free list, the sets are sorted arrays of
 * inline keys (binary search, memmove of a few hundred entries at most), and no host memory
 * is allocated once the arrays have grown to the replay's working set. Every step that
 * needs new records reserves them first, so a host allocation failure never leaves the
 * model half-updated. */
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "core/alloc/internal.h"
#include "vramfit/alloc.h"

/* ---- block records ---- */

static int grow(struct vf_alloc_state *s, uint32_t need) {
  uint32_t cap = s->cap ? s->cap : 128;
  while (cap - s->nblk + s->nfree < need) {
    if (cap > UINT32_MAX / 4) return VF_ENOMEM;
    cap *= 2;
  }
  void *p = realloc(s->blk, cap * sizeof *s->blk);
  if (!p) return VF_ENOMEM;
  s->blk = p;
  p = realloc(s->scratch, cap * sizeof *s->scratch);
  if (!p) return VF_ENOMEM;
  s->scratch = p;
  for (int i = 0; i < NPOOLS; i++) {
    struct set *sets[2] = {&s->blocks[i], &s->unmapped[i]};
    for (int j = 0; j < 2; j++) {
      if (!(p = realloc(sets[j]->k, cap * sizeof *sets[j]->k))) return VF_ENOMEM;
      sets[j]->k = p;
    }
  }
  s->cap = cap;
  return 0;
}

/* Makes sure `need` records can be taken without touching host memory. */
static int reserve(struct vf_alloc_state *s, uint32_t need) {
  return s->cap - s->nblk + s->nfree >= need ? 0 : grow(s, need);
}

static uint32_t new_blk(struct vf_alloc_state *s, uint64_t addr, uint64_t size, int pool,
                        uint32_t sid, uint32_t xseg) {
  uint32_t i;
  if (s->free_head != NIL) {
    i = s->free_head;
    s->free_head = s->blk[i].next;
    s->nfree--;
  } else {
    i = s->nblk++;
    s->blk[i].gen = 1;
  }
  struct blk *b = &s->blk[i];
  uint32_t gen = b->gen;
  *b = (struct blk){.addr = addr, .size = size, .prev = NIL, .next = NIL, .sid = sid,
                    .gen = gen, .xseg = xseg, .pool = (uint8_t)pool, .mapped = 1};
  return i;
}

static void drop_blk(struct vf_alloc_state *s, uint32_t i) {
  s->blk[i].gen++;
  s->blk[i].next = s->free_head;
  s->free_head = i;
  s->nfree++;
}


/* ---- ordered sets: (stream, size, address) ---- */

enum { EQUAL_KEYS_WALKED = 8 };


/* First entry whose (stream, size) is not below hi; branch-free, as the outcome of each
 * comparison is unpredictable. */
static uint32_t lower_bound(const struct set *t, uint64_t hi) {
  if (t->n == 0) return 0;
  const struct key *base = t->k;
  uint32_t n = t->n;
  while (n > 1) {
    uint32_t half = n / 2;
    /* In this form gcc 12 -O2 makes the choice a conditional move; written as
     * `base[half - 1].hi < hi ? base + half : base` it became a branch, mispredicted every
     * other step (a quarter of the planner's time). */
    const struct key *mid = base + half;
    base = mid[-1].hi < hi ? mid : base;
    n -= half;
  }
  return (uint32_t)(base - t->k) + (base->hi < hi);
}

/* Where block i belongs: after the equal keys of lower addresses. A few equal keys are
 * walked; past them the rest is searched: a mixture of experts frees thousands of
 * same-sized blocks, and a walk over them made a 128-expert model's estimate take seconds. */
static uint32_t insert_pos(const struct vf_alloc_state *s, const struct set *t, uint32_t i) {
  const struct blk *b = &s->blk[i];
  uint64_t hi = set_key(b);
  uint32_t lo = lower_bound(t, hi);
  for (uint32_t walked = 0; lo < t->n && t->k[lo].hi == hi && s->blk[t->k[lo].blk].addr < b->addr; lo++)
    if (++walked == EQUAL_KEYS_WALKED) break;
  if (lo == t->n || t->k[lo].hi != hi || s->blk[t->k[lo].blk].addr >= b->addr) return lo;
  uint32_t end = hi == UINT64_MAX ? t->n : lower_bound(t, hi + 1);
  while (lo < end) {
    uint32_t mid = lo + (end - lo) / 2;
    if (s->blk[t->k[mid].blk].addr < b->addr) lo = mid + 1;
    else end = mid;
  }
  return lo;
}

/* The entry of block i: among a few equal keys walked, else where its address puts it
 * (blocks of a set have distinct addresses). */
static uint32_t find_pos(const struct vf_alloc_state *s, const struct set *t, uint32_t i) {
  uint32_t at = lower_bound(t, set_key(&s->blk[i]));
  for (uint32_t walked = 0; walked < EQUAL_KEYS_WALKED; walked++, at++)
    if (t->k[at].blk == i) return at;
  return insert_pos(s, t, i);
}

static void set_insert(const struct vf_alloc_state *s, struct set *t, uint32_t i) {
  uint32_t at = insert_pos(s, t, i);
  memmove(&t->k[at + 1], &t->k[at], (t->n - at) * sizeof *t->k);
  t->k[at] = (struct key){.hi = set_key(&s->blk[i]), .blk = i};
  t->n++;
}

static void set_remove_at(struct set *t, uint32_t at) {
  memmove(&t->k[at], &t->k[at + 1], (t->n - at - 1) * sizeof *t->k);
  t->n--;
}

static void set_remove(const struct vf_alloc_state *s, struct set *t, uint32_t i) {
  set_remove_at(t, find_pos(s, t, i));
}

/* Whether entry k sorts before block i: by key, equal keys by address. */
static bool before(const struct vf_alloc_state *s, const struct key *k, uint64_t hi, uint32_t i) {
  return k->hi < hi || (k->hi == hi && s->blk[k->blk].addr < s->blk[i].addr);
}

/* Replaces the entry at `from` by block i's key, which is smaller (a split's rest) or larger
 * (a block merged with its neighbours) than the entry's, and slides it down or up to its
 * place, shifting only the entries it passes: a few at most, most often none, which a walk
 * finds sooner than a search of the whole set. */
static void set_move(const struct vf_alloc_state *s, struct set *t, uint32_t from, uint32_t i) {
  struct key *k = t->k;
  uint64_t hi = set_key(&s->blk[i]);
  uint32_t to = from;
  if (hi < k[from].hi)
    for (; to > 0 && !before(s, &k[to - 1], hi, i); to--) k[to] = k[to - 1];
  else
    for (; to + 1 < t->n && before(s, &k[to + 1], hi, i); to++) k[to] = k[to + 1];
  k[to] = (struct key){.hi = hi, .blk = i};
}

static struct set *home(struct vf_alloc_state *s, const struct blk *b) {
  return b->mapped ? &s->blocks[b->pool] : &s->unmapped[b->pool];
}

/* insert_into_blocks: caching a block also starts its garbage-collection age. */
static void cache_blk(struct vf_alloc_state *s, uint32_t i) {
  s->blk[i].gc_base = s->gc_calls[s->blk[i].pool];
  set_insert(s, &s->blocks[s->blk[i].pool], i);
}

/* ---- statistics ---- */

static void add_reserved(struct vf_alloc_state *s, uint64_t bytes) {
  s->st.reserved += bytes;
  if (s->st.reserved > s->st.peak_reserved) s->st.peak_reserved = s->st.reserved;
  s->st.num_device_alloc++;
}

static void sub_reserved(struct vf_alloc_state *s, uint64_t bytes) {
  s->st.reserved -= bytes;
  s->st.num_device_free++;
}

static void add_allocated(struct vf_alloc_state *s, uint64_t size, uint64_t requested) {
  struct vf_alloc_stats *st = &s->st;
  st->allocated += size;
  st->requested += requested;
  if (st->allocated > st->peak_allocated) st->peak_allocated = st->allocated;
  if (st->requested > st->peak_requested) st->peak_requested = st->requested;
}

/* cudaMalloc (or mapping pages) fails when the device or the process fraction is full. */
static bool device_fits(const struct vf_alloc_state *s, uint64_t bytes, uint64_t limit) {
  return bytes <= limit && s->st.reserved <= limit - bytes;
}

static uint64_t bump_addr(struct vf_alloc_state *s, uint64_t span, uint64_t align) {
  uint64_t at = alloc_round_up(s->next_addr, align);
  s->next_addr = at + span;
  return at;
}

/* ---- merging and releasing ---- */

static bool mergeable(const struct vf_alloc_state *s, uint32_t dst, uint32_t src) {
  return src != NIL && !s->blk[src].allocated && s->blk[src].mapped == s->blk[dst].mapped;
}

/* Joins neighbour src (already out of its set) to dst; returns the bytes gained. */
static uint64_t absorb(struct vf_alloc_state *s, uint32_t dst, uint32_t src) {
  struct blk *d = &s->blk[dst], *b = &s->blk[src];
  if (d->prev == src) {
    d->addr = b->addr;
    d->prev = b->prev;
    if (d->prev != NIL) s->blk[d->prev].next = dst;
  } else {
    d->next = b->next;
    if (d->next != NIL) s->blk[d->next].prev = dst;
  }
  uint64_t subsumed = b->size;
  d->size += subsumed;
  drop_blk(s, src);
  return subsumed;
}

/* Absorbs a free neighbour with the same mapping state into dst (not in any set). */
static uint64_t try_merge(struct vf_alloc_state *s, uint32_t dst, uint32_t src) {
  if (!mergeable(s, dst, src)) return 0;
  set_remove(s, home(s, &s->blk[src]), src);
  return absorb(s, dst, src);
}

/* cudaFree of a whole cached segment. */
static void release_block(struct vf_alloc_state *s, uint32_t i) {
  set_remove(s, &s->blocks[s->blk[i].pool], i);
  sub_reserved(s, s->blk[i].size);
  s->st.segments--;
  drop_blk(s, i);
}

/* Splices a new record for [addr, addr+size) between blocks prev and next. */
static uint32_t splice_new(struct vf_alloc_state *s, uint32_t like, uint64_t addr,
                           uint64_t size, uint32_t prev, uint32_t next, bool mapped) {
  const struct blk *l = &s->blk[like];
  uint32_t n = new_blk(s, addr, size, l->pool, l->sid, l->xseg);
  s->blk[n].mapped = mapped;
  s->blk[n].prev = prev;
  s->blk[n].next = next;
  if (prev != NIL) s->blk[prev].next = n;
  if (next != NIL) s->blk[next].prev = n;
  return n;
}

/* Mapping pages adds to reserved memory but no segment: memory_stats()'s "segment" counts
 * cudaMalloc'd segments alone (torch 2.13's libc10_cuda.so on bench/alloc_check: 0 all
 * through a replay under expandable segments). */
static void xseg_mapped(struct vf_alloc_state *s, uint32_t x, uint64_t bytes, bool map) {
  struct xseg *g = &s->xseg[x];
  g->mapped = map ? g->mapped + bytes : g->mapped - bytes;
  if (map) add_reserved(s, bytes);
  else sub_reserved(s, bytes);
}

/* Unmaps the whole pages inside a free expandable block; partial pages stay mapped as
 * free blocks on either side. */
static int unmap_block(struct vf_alloc_state *s, uint32_t i) {
  int rc = reserve(s, 2);
  if (rc) return rc;
  struct blk *b = &s->blk[i];
  const struct xseg *g = &s->xseg[b->xseg];
  uint64_t begin = g->base + alloc_round_up(b->addr - g->base, g->page);
  uint64_t end = g->base + (b->addr + b->size - g->base) / g->page * g->page;
  if (begin >= end) return 0;
  set_remove(s, &s->blocks[b->pool], i);
  if (begin > b->addr) cache_blk(s, splice_new(s, i, b->addr, begin - b->addr, b->prev, i, 1));
  b = &s->blk[i];
  if (b->addr + b->size > end)
    cache_blk(s, splice_new(s, i, end, b->addr + b->size - end, i, b->next, 1));
  b = &s->blk[i];
  b->addr = begin;
  b->size = end - begin;
  b->mapped = 0;
  try_merge(s, i, s->blk[i].prev);
  try_merge(s, i, s->blk[i].next);
  set_insert(s, &s->unmapped[s->blk[i].pool], i);
  xseg_mapped(s, s->blk[i].xseg, end - begin, false);
  return 0;
}

/* release_blocks: frees every unsplit cached segment of a pool and unmaps the free pages
 * of its expandable segments (gathered first: unmapping changes the set). */
static int release_pool(struct vf_alloc_state *s, int pool) {
  struct set *t = &s->blocks[pool];
  uint32_t ngather = 0;
  for (uint32_t at = 0; at < t->n;) {
    uint32_t i = t->k[at].blk;
    if (s->blk[i].xseg != NIL) s->scratch[ngather++] = i;
    if (s->blk[i].xseg == NIL && !is_split(&s->blk[i])) release_block(s, i);
    else at++;
  }
  for (uint32_t j = 0; j < ngather; j++) {
    int rc = unmap_block(s, s->scratch[j]);
    if (rc) return rc;
  }
  return 0;
}

static void process_events(struct vf_alloc_state *s);

/* release_cached_blocks first waits for every stream (synchronize_and_free_events), so
 * that blocks other streams kept are cached and can go too. */
static int release_cached_blocks(struct vf_alloc_state *s) {
  for (uint32_t i = 0; i < s->nstreams; i++) s->work[i].completed = s->work[i].recorded;
  process_events(s);
  int rc = release_pool(s, POOL_LARGE);
  return rc ? rc : release_pool(s, POOL_SMALL);
}

/* Frees oversize (>= max_split_size) cached segments of the stream: the smallest one that
 * covers the request, else the largest ones until enough is freed. */
static bool release_available_cached_blocks(struct vf_alloc_state *s, int pool, uint32_t sid,
                                            uint64_t size) {
  uint64_t max_split = s->conf.max_split_size;
  if (max_split == UINT64_MAX) return false;
  struct set *t = &s->blocks[pool];
  uint64_t want = size < max_split ? max_split : size;
  uint32_t at = lower_bound(t, pack(sid, want));
  if (at < t->n && key_sid(&t->k[at]) == sid && s->blk[t->k[at].blk].xseg == NIL &&
      !is_split(&s->blk[t->k[at].blk])) {
    release_block(s, t->k[at].blk);
    return true;
  }
  uint64_t freed = 0;
  while (at > 0 && freed < want) {
    const struct key *k = &t->k[--at];
    if (key_sid(k) != sid || key_size(k) < max_split) break;
    uint32_t i = k->blk;
    if (s->blk[i].xseg == NIL && !is_split(&s->blk[i])) {
      freed += s->blk[i].size;
      release_block(s, i);
    }
  }
  return freed >= want;
}

/* garbage_collect_cached_blocks: above threshold x allowed, frees unsplit large cached
 * segments at least as old (in get_free_block calls) as the average, until enough. */
static void garbage_collect(struct vf_alloc_state *s) {
  uint64_t threshold = (uint64_t)(s->conf.garbage_collection_threshold * (double)s->allowed);
  if (s->st.reserved <= threshold) return;
  uint64_t target = s->st.reserved - threshold, reclaimed = 0, total_age = 0, count = 0;
  struct set *t = &s->blocks[POOL_LARGE];
  uint64_t now = s->gc_calls[POOL_LARGE];
  for (uint32_t at = 0; at < t->n; at++) {
    const struct blk *b = &s->blk[t->k[at].blk];
    if (!is_split(b)) {
      total_age += now - b->gc_base;
      count++;
    }
  }
  bool freed = true;
  while (reclaimed < target && freed && count > 0) {
    double age_threshold = (double)total_age / (double)count;
    freed = false;
    for (uint32_t at = 0; at < t->n;) {
      uint32_t i = t->k[at].blk;
      uint64_t age = now - s->blk[i].gc_base;
      if (is_split(&s->blk[i]) || s->blk[i].xseg != NIL || (double)age < age_threshold) {
        at++;
        continue;
      }
      freed = true;
      reclaimed += s->blk[i].size;
      total_age -= age;
      count--;
      release_block(s, i);
    }
  }
}

/* ---- expandable segments ---- */

static bool allocatable(const struct vf_alloc_state *s, uint32_t i) {
  return i != NIL && !s->blk[i].allocated;
}

static bool has_room(const struct vf_alloc_state *s, uint32_t i, uint64_t size) {
  uint64_t bytes = 0;
  for (; bytes < size && allocatable(s, i); i = s->blk[i].next) bytes += s->blk[i].size;
  return bytes >= size;
}

static int new_xseg(struct vf_alloc_state *s, int pool, uint32_t sid, uint32_t *out) {
  if (s->nxseg == s->capxseg) {
    uint32_t cap = s->capxseg ? s->capxseg * 2 : 8;
    void *p = realloc(s->xseg, cap * sizeof *s->xseg);
    if (!p) return VF_ENOMEM;
    s->xseg = p;
    s->capxseg = cap;
  }
  int rc = reserve(s, 1);
  if (rc) return rc;
  uint64_t page = pool == POOL_SMALL ? VF_ALLOC_SMALL_BUFFER : s->conf.large_segment_size;
  /* PyTorch reserves 1 1/8 of the device's memory as address space per segment. */
  uint64_t span = s->capacity == UINT64_MAX ? XSEG_UNLIMITED_SPAN
                                            : s->capacity + s->capacity / 8;
  span = alloc_round_up(span, page);
  uint32_t x = s->nxseg++;
  s->xseg[x] = (struct xseg){.base = bump_addr(s, span, page), .span = span, .page = page};
  uint32_t i = new_blk(s, s->xseg[x].base, span, pool, sid, x);
  s->blk[i].mapped = 0;
  set_insert(s, &s->unmapped[pool], i);
  *out = i;
  return 0;
}

/* find_expandable_block: the first unmapped range of the stream, by address, that starts a
 * run of free or unmapped blocks (from the free block just before it, if any) with room for
 * size; else a new segment. */
static int find_expandable(struct vf_alloc_state *s, int pool, uint32_t sid, uint64_t size,
                           uint32_t *out) {
  const struct set *t = &s->unmapped[pool];
  for (uint32_t at = lower_bound(t, pack(sid, 0)); at < t->n && key_sid(&t->k[at]) == sid;
       at++) {
    uint32_t c = t->k[at].blk;
    if (allocatable(s, s->blk[c].prev)) c = s->blk[c].prev;
    if (has_room(s, c, size)) {
      *out = c;
      return 0;
    }
  }
  return new_xseg(s, pool, sid, out);
}

/* Maps whole pages at the start of an unmapped block and merges them with free
 * neighbours; the block stays in the free set. VF_ERANGE when the device is full. */
static int map_block(struct vf_alloc_state *s, uint32_t i, uint64_t size) {
  struct blk *b = &s->blk[i];
  uint64_t bytes = alloc_round_up(size, s->xseg[b->xseg].page);
  if (!device_fits(s, bytes, s->capacity)) return VF_ERANGE;
  int rc = reserve(s, 1);
  if (rc) return rc;
  b = &s->blk[i];
  set_remove(s, &s->unmapped[b->pool], i);
  b->mapped = 1;
  if (bytes < b->size) {
    uint32_t rest = splice_new(s, i, b->addr + bytes, b->size - bytes, i, b->next, 0);
    set_insert(s, &s->unmapped[s->blk[rest].pool], rest);
    s->blk[i].size = bytes;
  }
  try_merge(s, i, s->blk[i].prev);
  try_merge(s, i, s->blk[i].next);
  cache_blk(s, i);
  xseg_mapped(s, s->blk[i].xseg, bytes, true);
  return 0;
}

static int alloc_expandable(struct vf_alloc_state *s, int pool, uint32_t sid, uint64_t size,
                            uint32_t *out) {
  uint32_t c;
  int rc = find_expandable(s, pool, sid, size, &c);
  if (!rc && !s->blk[c].mapped) {
    uint64_t first = s->blk[c].size < size ? s->blk[c].size : size;
    rc = map_block(s, c, first);
  }
  /* After a mapping, c absorbed its free neighbours; what follows it is unmapped. */
  while (!rc && s->blk[c].size < size) {
    uint32_t next = s->blk[c].next;
    if (next == NIL || s->blk[next].mapped) return VF_EINTERNAL;
    uint64_t rest = size - s->blk[c].size;
    rc = map_block(s, next, rest < s->blk[next].size ? rest : s->blk[next].size);
    c = next;
  }
  if (rc) return rc;
  set_remove(s, &s->blocks[pool], c);
  *out = c;
  return 0;
}

/* ---- malloc ---- */

struct request {
  uint64_t size;       /* rounded */
  uint64_t alloc_size; /* segment cudaMalloc would get */
  uint32_t sid;
  int pool;
};

/* get_free_block: the set position of the best-fitting cached block, or NIL. The block
 * stays in the set for take_block to move or remove in one step. */
static uint32_t get_free_block(struct vf_alloc_state *s, const struct request *r) {
  struct set *t = &s->blocks[r->pool];
  if (s->set_fraction && s->conf.garbage_collection_threshold > 0) s->gc_calls[r->pool]++;
  uint32_t at = lower_bound(t, pack(r->sid, r->size));
  if (at == t->n || key_sid(&t->k[at]) != r->sid) return NIL;
  /* An expandable block counts as the size it could grow to over the unmapped range
   * behind it, so a smaller neighbour that can grow is preferred over a larger one. */
  while (s->expandable && s->blk[t->k[at].blk].xseg != NIL && at + 1 < t->n &&
         key_sid(&t->k[at + 1]) == r->sid) {
    const struct blk *cur = &s->blk[t->k[at].blk], *nx = &s->blk[t->k[at + 1].blk];
    uint64_t grow_cur = cur->size + (cur->next != NIL && !s->blk[cur->next].mapped
                                         ? s->blk[cur->next].size : 0);
    uint64_t grow_nx = nx->size + (nx->next != NIL && !s->blk[nx->next].mapped
                                       ? s->blk[nx->next].size : 0);
    if (grow_nx >= grow_cur) break;
    at++;
  }
  uint64_t bsize = key_size(&t->k[at]), max_split = s->conf.max_split_size;
  /* An oversize block never serves a small request, and serves an oversize one only
   * within max_non_split_rounding: it cannot be split, so the slack is wasted. */
  if (r->size < max_split && bsize >= max_split) return NIL;
  if (r->size >= max_split && bsize - r->size >= s->conf.max_non_split_rounding) return NIL;
  return at;
}

/* cudaMalloc of a new segment, or growing an expandable one. */
static int alloc_block(struct vf_alloc_state *s, const struct request *r, bool retry,
                       uint32_t *out) {
  if (retry) s->st.num_alloc_retries++;
  if (s->set_fraction && !device_fits(s, r->alloc_size, s->allowed)) return VF_ERANGE;
  if (s->expandable) return alloc_expandable(s, r->pool, r->sid, r->size, out);
  if (!device_fits(s, r->alloc_size, s->capacity)) return VF_ERANGE;
  int rc = reserve(s, 1);
  if (rc) return rc;
  uint64_t addr = bump_addr(s, r->alloc_size, VF_ALLOC_SMALL_BUFFER);
  *out = new_blk(s, addr, r->alloc_size, r->pool, r->sid, NIL);
  s->st.segments++;
  add_reserved(s, r->alloc_size);
  return 0;
}

/* malloc's fallback chain once no cached block fits. */
static int new_block(struct vf_alloc_state *s, struct request *r, uint32_t *out) {
  r->alloc_size = vf_alloc_segment_size(&s->conf, r->size);
  if (s->set_fraction && s->conf.garbage_collection_threshold > 0) garbage_collect(s);
  int rc = alloc_block(s, r, false, out);
  if (rc == VF_ERANGE && release_available_cached_blocks(s, r->pool, r->sid, r->size))
    rc = alloc_block(s, r, false, out);
  if (rc == VF_ERANGE && !(rc = release_cached_blocks(s))) rc = alloc_block(s, r, true, out);
  if (rc == VF_ERANGE) s->st.num_ooms++;
  return rc;
}

static bool should_split(const struct vf_alloc_state *s, const struct blk *b, uint64_t size) {
  uint64_t remaining = b->size - size;
  if (b->pool == POOL_SMALL || s->expandable) return remaining >= VF_ALLOC_MIN_BLOCK;
  return size < s->conf.max_split_size && remaining > VF_ALLOC_SMALL_SIZE;
}

/* alloc_found_block: the block's front serves the request, a split-off rest is cached.
 * at: the block's position in its free set, NIL when it is in none. */
static uint32_t take_block(struct vf_alloc_state *s, uint32_t i, uint32_t at, uint64_t size,
                           uint64_t requested) {
  struct blk *b = &s->blk[i];
  struct set *t = &s->blocks[b->pool];
  bool was_split = is_split(b), counts = b->xseg == NIL;
  if (should_split(s, b, size)) {
    uint32_t front = splice_new(s, i, b->addr, size, b->prev, i, 1);
    b = &s->blk[i];
    b->addr += size;
    b->size -= size;
    b->gc_base = s->gc_calls[b->pool];
    if (at == NIL) set_insert(s, t, i);
    else set_move(s, t, at, i);
    if (counts) {
      if (was_split) s->st.inactive_split_bytes -= size;
      else s->st.inactive_split_bytes += b->size;
    }
    i = front;
  } else {
    if (at != NIL) set_remove_at(t, at);
    if (was_split && counts) s->st.inactive_split_bytes -= b->size;
  }
  b = &s->blk[i];
  b->allocated = 1;
  b->requested = requested;
  add_allocated(s, b->size, requested);
  return i;
}

static uint64_t block_id(const struct vf_alloc_state *s, uint32_t i) {
  return (uint64_t)s->blk[i].gen << 32 | i;
}

/* Without caching every tensor is its own cudaMalloc, returned on free. */
static int malloc_uncached(struct vf_alloc_state *s, uint64_t size, uint64_t bytes,
                           uint32_t sid, uint32_t *out) {
  if (!device_fits(s, size, s->capacity)) {
    s->st.num_ooms++;
    return VF_ERANGE;
  }
  int rc = reserve(s, 1);
  if (rc) return rc;
  int pool = size <= VF_ALLOC_SMALL_SIZE ? POOL_SMALL : POOL_LARGE;
  *out = new_blk(s, bump_addr(s, size, VF_ALLOC_MIN_BLOCK), size, pool, sid, NIL);
  s->blk[*out].allocated = 1;
  s->blk[*out].requested = bytes;
  s->st.segments++;
  add_reserved(s, size);
  add_allocated(s, size, bytes);
  return 0;
}

/* Streams are numbered densely in order of first use, so keys can hold them. */
static int stream_index(struct vf_alloc_state *s, uint32_t stream, uint32_t *sid) {
  if (s->nstreams && s->streams[s->last_sid] == stream) {
    *sid = s->last_sid;
    return 0;
  }
  uint32_t i = 0;
  while (i < s->nstreams && s->streams[i] != stream) i++;
  if (i == MAX_STREAMS) return VF_ERANGE;
  if (i == s->nstreams) s->streams[s->nstreams++] = stream;
  *sid = s->last_sid = i;
  return 0;
}

static int malloc_cached(struct vf_alloc_state *s, struct request *r, uint64_t bytes,
                         uint32_t *out) {
  process_events(s);
  r->pool = r->size <= VF_ALLOC_SMALL_SIZE ? POOL_SMALL : POOL_LARGE;
  /* take_block may split: reserve its record before anything changes. */
  int rc = reserve(s, 1);
  if (rc) return rc;
  uint32_t i, at = get_free_block(s, r);
  if (at != NIL) {
    i = s->blocks[r->pool].k[at].blk;
  } else {
    if ((rc = new_block(s, r, &i)) != 0) return rc;
    if ((rc = reserve(s, 1)) != 0) {
      cache_blk(s, i);
      return rc;
    }
  }
  *out = take_block(s, i, at, r->size, bytes);
  return 0;
}

int vf_allocator_malloc(struct vf_allocator *a, uint64_t bytes, uint32_t stream,
                        uint64_t *block_id_out) {
  struct vf_alloc_state *s = a->state;
  struct request r = {0};
  *block_id_out = 0;
  if (bytes == 0) return 0;
  int rc = stream_index(s, stream, &r.sid);
  if (rc) return rc;
  if (bytes > VF_ALLOC_MAX_REQUEST) {
    s->st.num_ooms++;
    return VF_ERANGE;
  }
  uint32_t i;
  if (s->conf.caching_disabled) {
    rc = malloc_uncached(s, alloc_round_up(bytes, VF_ALLOC_MIN_BLOCK), bytes, r.sid, &i);
  } else {
    r.size = s->plain_rounding ? alloc_round_up(bytes, VF_ALLOC_MIN_BLOCK)
                               : vf_alloc_round_size(&s->conf, bytes);
    rc = malloc_cached(s, &r, bytes, &i);
  }
  if (!rc) *block_id_out = block_id(s, i);
  return rc;
}

/* ---- free ---- */

/* free_block: merge with free neighbours, cache, and keep the fragmentation count. The
 * merged block takes over a neighbour's set entry, so the set shifts once. */
static void cache_freed(struct vf_alloc_state *s, uint32_t i) {
  struct set *t = &s->blocks[s->blk[i].pool];
  uint32_t prev = s->blk[i].prev, next = s->blk[i].next, slot = NIL;
  uint64_t subsumed = 0;
  if (mergeable(s, i, next)) {
    slot = find_pos(s, t, next);
    subsumed += absorb(s, i, next);
  }
  if (mergeable(s, i, prev)) {
    if (slot != NIL) set_remove_at(t, slot);
    slot = find_pos(s, t, prev);
    subsumed += absorb(s, i, prev);
  }
  struct blk *b = &s->blk[i];
  if (b->xseg == NIL)
    s->st.inactive_split_bytes += (is_split(b) ? b->size : 0) - subsumed;
  b->gc_base = s->gc_calls[b->pool];
  if (slot == NIL) set_insert(s, t, i);
  else set_move(s, t, slot, i);
}

/* The live block an id names, or NIL. */
static uint32_t live_block(const struct vf_alloc_state *s, uint64_t id) {
  uint32_t i = (uint32_t)id, gen = (uint32_t)(id >> 32);
  if (id == 0 || i >= s->nblk || s->blk[i].gen != gen || !s->blk[i].allocated || s->blk[i].events) return NIL;
  return i;
}

int vf_allocator_record_stream(struct vf_allocator *a, uint64_t id, uint32_t stream) {
  struct vf_alloc_state *s = a->state;
  uint32_t i = live_block(s, id), sid;
  if (i == NIL) return VF_EINVAL;
  int rc = stream_index(s, stream, &sid);
  if (rc || sid == s->blk[i].sid) return rc;
  for (size_t u = 0; u < s->nuses; u++)
    if (s->uses[u].blk == i && s->uses[u].sid == sid) return 0;
  struct use *grown = array_grow(s->uses, &s->capuses, s->nuses + 1, sizeof *grown);
  if (!grown) return VF_ENOMEM;
  s->uses = grown;
  s->uses[s->nuses++] = (struct use){.blk = i, .sid = sid};
  return 0;
}

int vf_allocator_record_event(struct vf_allocator *a, uint32_t stream, uint64_t *mark) {
  struct vf_alloc_state *s = a->state;
  uint32_t sid;
  int rc = stream_index(s, stream, &sid);
  if (!rc) *mark = s->work[sid].recorded = ++s->clock;
  return rc;
}

void vf_allocator_sync(struct vf_allocator *a, uint32_t stream, uint64_t mark) {
  struct vf_alloc_state *s = a->state;
  for (uint32_t i = 0; i < s->nstreams; i++) {
    struct stream_work *w = &s->work[i];
    uint64_t upto = mark < w->recorded ? mark : w->recorded;
    if ((stream == VF_ALLOC_ALL_STREAMS || s->streams[i] == stream) && upto > w->completed) w->completed = upto;
  }
}

/* insert_events: an event on each stream that used the block, recorded as it is freed. */
static bool insert_events(struct vf_alloc_state *s, uint32_t i) {
  for (size_t u = 0; u < s->nuses; u++)
    if (s->uses[u].blk == i) {
      s->uses[u].seq = s->work[s->uses[u].sid].recorded = ++s->clock;
      s->blk[i].events++;
    }
  return s->blk[i].events > 0;
}

/* process_events: blocks whose every event is complete return to the cache. */
static void process_events(struct vf_alloc_state *s) {
  for (size_t u = 0; u < s->nuses;) {
    struct use *e = &s->uses[u];
    if (!e->seq || s->work[e->sid].completed < e->seq) {
      u++;
      continue;
    }
    uint32_t i = e->blk;
    *e = s->uses[--s->nuses];
    if (--s->blk[i].events == 0) {
      s->blk[i].allocated = 0;
      cache_freed(s, i);
    }
  }
}

int vf_allocator_free(struct vf_allocator *a, uint64_t id) {
  struct vf_alloc_state *s = a->state;
  if (id == 0) return 0;
  uint32_t i = live_block(s, id);
  if (i == NIL) return VF_EINVAL;
  struct blk *b = &s->blk[i];
  s->st.allocated -= b->size;
  s->st.requested -= b->requested;
  if (!s->conf.caching_disabled) {
    if (!insert_events(s, i)) {
      s->blk[i].allocated = 0;
      cache_freed(s, i);
    }
    return 0;
  }
  /* Without caching, cudaFree waits for the device: no use outlives the free. */
  for (size_t u = s->nuses; u-- > 0;)
    if (s->uses[u].blk == i) s->uses[u] = s->uses[--s->nuses];
  b->allocated = 0;
  sub_reserved(s, b->size);
  s->st.segments--;
  drop_blk(s, i);
  return 0;
}

int vf_allocator_empty_cache(struct vf_allocator *a) { return release_cached_blocks(a->state); }

/* ---- lifetime and stats ---- */

/* A configuration filled by hand may hold values the parser refuses: keep them from
 * dividing by zero or overflowing. */
static void sanitize(struct vf_alloc_conf *c) {
  if (c->large_segment_size < VF_ALLOC_SMALL_BUFFER || c->large_segment_size > MAX_CAPACITY)
    c->large_segment_size = VF_ALLOC_LARGE_BUFFER;
  if (!(c->per_process_memory_fraction >= 0.0 && c->per_process_memory_fraction <= 1.0))
    c->per_process_memory_fraction = 1.0;
  if (!(c->garbage_collection_threshold > 0.0 && c->garbage_collection_threshold < 1.0))
    c->garbage_collection_threshold = 0;
}

void vf_allocator_reset(struct vf_allocator *a, const struct vf_alloc_conf *c,
                        uint64_t capacity_bytes) {
  struct vf_alloc_state *s = a->state;
  s->conf = *c;
  sanitize(&s->conf);
  if (c->backend_async) {
    /* cudaMallocAsync grows its pool on demand and ignores the native splitting options. */
    s->conf.max_split_size = UINT64_MAX;
    s->conf.garbage_collection_threshold = 0;
  }
  s->expandable = c->expandable_segments || c->backend_async;
  s->plain_rounding = true;
  for (int i = 0; i < VF_ALLOC_DIVISION_INTERVALS; i++)
    if (s->conf.roundup_power2_divisions[i] > 1 && !c->backend_async) s->plain_rounding = false;
  vf_allocator_set_capacity(a, capacity_bytes);
  s->nblk = 0;
  s->nfree = 0;
  s->free_head = NIL;
  for (int p = 0; p < NPOOLS; p++) {
    s->blocks[p].n = 0;
    s->unmapped[p].n = 0;
    s->gc_calls[p] = 0;
  }
  s->nxseg = 0;
  memset(s->work, 0, s->nstreams * sizeof *s->work);
  s->clock = 0;
  s->nuses = 0;
  s->nstreams = 0;
  s->last_sid = 0;
  s->next_addr = UINT64_C(1) << 32;
  memset(&s->st, 0, sizeof s->st);
}

int vf_allocator_init(struct vf_allocator *a, const struct vf_alloc_conf *c,
                      uint64_t capacity_bytes) {
  a->state = calloc(1, sizeof *a->state);
  if (!a->state || grow(a->state, 1) != 0) {
    vf_allocator_cleanup(a);
    return VF_ENOMEM;
  }
  vf_allocator_reset(a, c, capacity_bytes);
  return 0;
}

void vf_allocator_cleanup(struct vf_allocator *a) {
  struct vf_alloc_state *s = a->state;
  if (!s) return;
  for (int p = 0; p < NPOOLS; p++) {
    free(s->blocks[p].k);
    free(s->unmapped[p].k);
  }
  free(s->blk);
  free(s->uses);
  free(s->scratch);
  free(s->xseg);
  free(s);
  a->state = NULL;
}

void vf_allocator_stats(const struct vf_allocator *a, struct vf_alloc_stats *out) {
  *out = a->state->st;
}

void vf_allocator_set_capacity(struct vf_allocator *a, uint64_t capacity_bytes) {
  struct vf_alloc_state *s = a->state;
  if (capacity_bytes > MAX_CAPACITY) capacity_bytes = MAX_CAPACITY;
  s->capacity = capacity_bytes ? capacity_bytes : UINT64_MAX;
  double fraction = s->conf.per_process_memory_fraction;
  s->set_fraction = capacity_bytes && fraction < 1.0;
  s->allowed = s->set_fraction ? (uint64_t)(fraction * (double)capacity_bytes) : s->capacity;
}

void vf_allocator_reset_peaks(struct vf_allocator *a) {
  struct vf_alloc_stats *st = &a->state->st;
  st->peak_allocated = st->allocated;
  st->peak_reserved = st->reserved;
  st->peak_requested = st->requested;
}

/* The allocator model's room: what its files share. First the constants of PyTorch's CUDA
 * caching allocator that the configuration parser (conf.c) and the simulator (sim.c) both use
 * (c10/cuda/CUDACachingAllocator.cpp, c10/core/AllocatorConfig.h); then the simulator's
 * state, which the invariant checker (check.c) recomputes from scratch. trace_replay.c runs
 * a traced event stream through the public allocator API. */
#ifndef VF_CORE_ALLOC_INTERNAL_H
#define VF_CORE_ALLOC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vramfit/alloc.h"

#define VF_MIB (UINT64_C(1) << 20)
#define VF_ALLOC_MIN_BLOCK UINT64_C(512)         /* kMinBlockSize */
#define VF_ALLOC_SMALL_SIZE VF_MIB               /* kSmallSize: largest small block */
#define VF_ALLOC_SMALL_BUFFER (2 * VF_MIB)       /* kSmallBuffer: small segment, page */
#define VF_ALLOC_LARGE_BUFFER (20 * VF_MIB)      /* kLargeBuffer: default large segment */
#define VF_ALLOC_MIN_LARGE_ALLOC (10 * VF_MIB)   /* kMinLargeAlloc */
#define VF_ALLOC_ROUND_LARGE (2 * VF_MIB)        /* kRoundLarge */
/* Requests above 1 PiB are refused: no device has that, and no rounding can overflow. */
#define VF_ALLOC_MAX_REQUEST (UINT64_C(1) << 50)

static inline uint64_t alloc_round_up(uint64_t v, uint64_t step) {
  return (v + step - 1) / step * step;
}

/* ---- the simulator's state (sim.c; check.c recomputes it) ---- */

#define NIL UINT32_MAX
#define NPOOLS 2
enum { POOL_SMALL, POOL_LARGE };

/* Address space reserved per expandable segment when the capacity is unlimited. */
#define XSEG_UNLIMITED_SPAN (UINT64_C(1) << 46)
/* Set keys pack (stream index, size) into one word so best fit is one integer search:
 * sizes stay below 2^51 (requests and capacity are capped at 2^50), 4096 streams fit. */
#define SIZE_BITS 52
#define SIZE_MASK ((UINT64_C(1) << SIZE_BITS) - 1)
#define MAX_STREAMS 1024
#define MAX_CAPACITY (UINT64_C(1) << 50)

struct blk {
  uint64_t addr, size, requested;
  uint64_t gc_base; /* pool's get_free_block count when the block was cached */
  uint32_t prev, next; /* neighbours in the segment; next doubles as free-list link */
  uint32_t sid;      /* dense index of the stream (see stream_index) */
  uint32_t gen;      /* bumped when the record is recycled, so stale ids are refused */
  uint32_t xseg;     /* expandable segment index, NIL for a cudaMalloc'd segment */
  uint16_t events;   /* freed, but other streams' events pending: still out of the cache */
  uint8_t pool, allocated, mapped;
};

/* A stream's use of a block: recorded on a live block (seq 0), or the event recorded on
 * that stream when the block was freed (its sequence number on the stream). */
struct use {
  uint32_t blk, sid;
  uint64_t seq;
};

/* What each stream has been asked to run and what is known done: the times (one clock
 * for every stream, ticking at each event recorded) of its last event and of the last one
 * known complete. */
struct stream_work {
  uint64_t recorded, completed;
};

struct key {
  uint64_t hi; /* stream index << SIZE_BITS | size; equal keys are ordered by address */
  uint32_t blk;
};

struct set {
  struct key *k;
  uint32_t n;
};

struct xseg {
  uint64_t base, span, page, mapped;
};

struct vf_alloc_state {
  struct vf_alloc_conf conf;
  uint64_t capacity;   /* UINT64_MAX when unlimited */
  uint64_t allowed;    /* the per-process fraction of capacity */
  bool set_fraction;   /* a fraction below 1 is in force: enables garbage collection */
  bool expandable;     /* expandable segments (or the async backend they stand for) */
  bool plain_rounding; /* no power-of-two divisions: sizes are 512-byte multiples */
  struct blk *blk;
  uint32_t nblk, cap, free_head, nfree;
  struct set blocks[NPOOLS], unmapped[NPOOLS];
  uint32_t *scratch;   /* cap entries: blocks gathered while a set is being changed */
  struct xseg *xseg;
  uint32_t nxseg, capxseg;
  uint64_t next_addr;
  uint64_t gc_calls[NPOOLS];
  uint32_t streams[MAX_STREAMS]; /* stream ids by dense index */
  uint32_t nstreams, last_sid;
  struct stream_work work[MAX_STREAMS];
  uint64_t clock;                /* events recorded on any stream */
  struct use *uses;              /* record_stream uses and pending events, unordered */
  size_t nuses, capuses;
  struct vf_alloc_stats st;
};

static inline uint64_t pack(uint32_t sid, uint64_t size) {
  return (uint64_t)sid << SIZE_BITS | size;
}
/* A block's key in its set: free mapped blocks by (stream, size, address), best fit's
 * order (BlockComparatorSize); unmapped ranges by (stream, address) alone
 * (BlockComparatorAddress, the order find_expandable_block walks them in), the address
 * being the tie-break of equal keys. */
static inline uint64_t set_key(const struct blk *b) { return pack(b->sid, b->mapped ? b->size : 0); }
static inline uint32_t key_sid(const struct key *k) { return (uint32_t)(k->hi >> SIZE_BITS); }
static inline uint64_t key_size(const struct key *k) { return k->hi & SIZE_MASK; }
static inline bool is_split(const struct blk *b) { return b->prev != NIL || b->next != NIL; }

#endif

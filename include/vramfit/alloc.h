/* A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp): its
 * configuration string, its size rounding, and a simulator that replays malloc/free events
 * to give the reserved-memory peak that nvidia-smi sees, not just the sum of tensor sizes.
 *
 * Simplifications (the model is single-device, and its streams run as the caller says):
 *  - a block freed with no use on another stream is reusable at once; one that another
 *    stream uses (record_stream) returns to the cache only after that stream's work queued
 *    before the free is done, which the caller says (vf_allocator_sync), as the real
 *    allocator learns it from the CUDA events it records at the free (insert_events) and
 *    queries at the next malloc (process_events);
 *  - no CUDA-graph private pools, no free-memory callbacks, no IPC;
 *  - "capacity" is the memory the allocator may reserve (device total minus the CUDA context
 *    and other processes); cudaMalloc fails exactly when reserved + size would exceed it;
 *  - backend:cudaMallocAsync is approximated by expandable segments without the options that
 *    backend ignores (max_split_size_mb, roundup_power2_divisions, garbage collection);
 *  - caching disabled (PYTORCH_NO_CUDA_MEMORY_CACHING=1): each tensor gets its own segment of
 *    its 512-byte-rounded size, released on free;
 *  - device addresses are synthetic and increase with each new segment, so among free
 *    blocks of equal size (best fit's last tie-break) the oldest segment wins;
 *  - an expandable segment whose pages are all unmapped is kept and regrown rather than
 *    destroyed and recreated: the same memory either way.
 * Statistics follow memory_stats(): inactive_split_bytes leaves out expandable segments as
 * PyTorch does, and so does "segments" (cudaMalloc'd segments alone). */
#ifndef VRAMFIT_ALLOC_H
#define VRAMFIT_ALLOC_H

#include <stdbool.h>
#include <stdint.h>

#include "vramfit/api.h"
#include "vramfit/error.h"

#define VF_ALLOC_DIVISION_INTERVALS 16 /* power-of-two intervals from 1 MiB to 64 GiB */

struct vf_alloc_conf {
  uint64_t max_split_size;         /* bytes; UINT64_MAX: every block may be split */
  uint64_t max_non_split_rounding; /* bytes an oversize block may exceed a request by */
  uint32_t roundup_power2_divisions[VF_ALLOC_DIVISION_INTERVALS]; /* 0 or 1: off */
  uint64_t large_segment_size;     /* segment for 1-10 MiB requests; expandable page */
  double garbage_collection_threshold; /* 0: off; needs a fraction below 1 */
  double per_process_memory_fraction;  /* share of capacity the process may reserve;
                                          below 1 it also lets garbage collection run */
  bool expandable_segments;
  bool backend_async;    /* backend:cudaMallocAsync */
  bool caching_disabled; /* PYTORCH_NO_CUDA_MEMORY_CACHING=1 */
};

/* PyTorch's defaults: no split limit, 20 MiB rounding slack and large segments, no
 * divisions, no garbage collection, fraction 1, native backend with caching. */
VF_API void vf_alloc_conf_default(struct vf_alloc_conf *c);

/* Parses a PYTORCH_ALLOC_CONF value ("k:v,k2:[a:b,>:c]") over the defaults into *c, with
 * PyTorch's checks and messages; d->offset is the byte where the fault lies. Every key
 * PyTorch accepts is accepted, even those that do not change device memory. An empty
 * string is the default configuration. Stricter than c10 in one way: an integer value
 * must be all digits (std::stoull would read "20.5" as 20 and wrap "-1").
 * VF_EINVAL on any fault (c is then unspecified). */
VF_API int vf_alloc_conf_parse(const char *text, struct vf_alloc_conf *c, struct vf_diag *d);

/* The configuration a PyTorch process gets from its environment, the values passed in
 * (NULL: unset). PYTORCH_ALLOC_CONF wins whenever it is set, even to the empty string;
 * PYTORCH_CUDA_ALLOC_CONF, the deprecated alias, is read only when it is unset (c10
 * AllocatorConfig::instance()). no_caching is PYTORCH_NO_CUDA_MEMORY_CACHING: any value,
 * even "0", disables caching, as c10 only asks whether it is set. d->file names the
 * variable that was parsed. */
VF_API int vf_alloc_conf_from_env(const char *alloc_conf, const char *cuda_alloc_conf,
                                  const char *no_caching, struct vf_alloc_conf *c, struct vf_diag *d);

/* The block size a request occupies (what memory_allocated() counts): at least 512 bytes,
 * a multiple of 512, or the next power-of-two division when divisions apply. */
VF_API uint64_t vf_alloc_round_size(const struct vf_alloc_conf *c, uint64_t request);

/* The segment cudaMalloc gets for a rounded size when no cached block fits: 2 MiB for
 * small blocks (<= 1 MiB), the large segment size below 10 MiB, else a 2 MiB multiple. */
VF_API uint64_t vf_alloc_segment_size(const struct vf_alloc_conf *c, uint64_t rounded);

struct vf_alloc_stats {
  uint64_t allocated, reserved, requested; /* block bytes, segment bytes, asked bytes */
  uint64_t peak_allocated, peak_reserved, peak_requested;
  uint64_t segments;             /* cudaMalloc'd segments (not expandable ones) */
  uint64_t inactive_split_bytes; /* free bytes in split segments: fragmentation */
  uint64_t num_alloc_retries;    /* cudaMalloc retried after freeing the whole cache */
  uint64_t num_ooms;
  uint64_t num_device_alloc, num_device_free; /* cudaMalloc/map and cudaFree/unmap calls */
};

struct vf_alloc_state;

/* Caller-allocated; everything behind state is private. One allocator models one device. */
struct vf_allocator {
  struct vf_alloc_state *state;
};

/* capacity_bytes: what the allocator may reserve; 0 is unlimited (above 1 PiB counts as
 * 1 PiB). Hand-filled values the parser would refuse (a large segment size outside 2 MiB
 * to 1 PiB, a fraction or threshold outside its range) fall back to the defaults.
 * VF_ENOMEM. */
VF_API int vf_allocator_init(struct vf_allocator *a, const struct vf_alloc_conf *c,
                             uint64_t capacity_bytes);
/* Empties the allocator for a new replay, keeping its buffers (no host allocation). */
VF_API void vf_allocator_reset(struct vf_allocator *a, const struct vf_alloc_conf *c,
                               uint64_t capacity_bytes);
VF_API void vf_allocator_cleanup(struct vf_allocator *a);

/* Allocates bytes on a stream (any id; cached blocks serve only their own stream) as
 * PyTorch would, setting *block_id (never 0; 0 for a 0-byte request, which takes no
 * memory). When nothing fits it retries as PyTorch does
 * (free oversize cached blocks, then every unsplit cached block) and then returns
 * VF_ERANGE, counting an OOM and leaving live blocks untouched; so does a request above
 * 1 PiB. VF_ERANGE also when a 1025th distinct stream is used. VF_ENOMEM: host memory. */
VF_API int vf_allocator_malloc(struct vf_allocator *a, uint64_t bytes, uint32_t stream,
                               uint64_t *block_id);
/* Frees a live block (0 is a no-op); VF_EINVAL for an unknown or already freed id. A
 * block used on other streams (vf_allocator_record_stream) leaves allocated at once but
 * stays out of the cache until those streams' work is done (vf_allocator_sync). */
VF_API int vf_allocator_free(struct vf_allocator *a, uint64_t block_id);
/* Tensor.record_stream(): a live block is also used on `stream` (recordStream; a use on
 * the block's own stream needs nothing). VF_EINVAL for an unknown or freed id; VF_ERANGE
 * past 1024 streams; VF_ENOMEM. */
VF_API int vf_allocator_record_stream(struct vf_allocator *a, uint64_t block_id, uint32_t stream);
/* A CUDA event recorded on `stream` now (torch.cuda.Event.record): *mark says how far the
 * stream's work has got, for vf_allocator_sync. VF_ERANGE past 1024 streams. */
VF_API int vf_allocator_record_event(struct vf_allocator *a, uint32_t stream, uint64_t *mark);
#define VF_ALLOC_ALL_STREAMS UINT32_MAX
#define VF_ALLOC_ALL_WORK UINT64_MAX
/* The work queued on `stream` up to `mark` (an event's synchronize) or all of it
 * (VF_ALLOC_ALL_WORK: the stream's synchronize; with VF_ALLOC_ALL_STREAMS, the device's) is
 * done. Marks are times on one clock for every stream, so a mark of one stream also says
 * what was queued on another before it: VF_ALLOC_ALL_STREAMS with a mark completes every
 * stream's work queued before it (a GPU taken to run all streams in the order the host
 * queued their work). Blocks it kept from the cache return there at the next malloc, where PyTorch's
 * process_events finds their events complete. */
VF_API void vf_allocator_sync(struct vf_allocator *a, uint32_t stream, uint64_t mark);
/* torch.cuda.empty_cache(): waits for every stream (synchronize_and_free_events), then
 * releases every cached segment nothing lives in, and the free pages of expandable
 * segments. VF_ENOMEM (host memory) leaves part of the cache held. */
VF_API int vf_allocator_empty_cache(struct vf_allocator *a);

VF_API void vf_allocator_stats(const struct vf_allocator *a, struct vf_alloc_stats *s);
/* Recomputes the model's bookkeeping from scratch (for tests and fuzzing): 0, or
 * VF_EINTERNAL when an invariant is broken; VF_ENOMEM. O(blocks x segments). */
VF_API int vf_allocator_check(const struct vf_allocator *a);
/* torch.cuda.reset_peak_memory_stats(): peaks become the current values. */
VF_API void vf_allocator_reset_peaks(struct vf_allocator *a);
/* Changes what the allocator may reserve from now on (0: unlimited), keeping its blocks: a
 * replay that ran out of memory goes on past the GPU's size to measure how far it needs. */
VF_API void vf_allocator_set_capacity(struct vf_allocator *a, uint64_t capacity_bytes);

#endif

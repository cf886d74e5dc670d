/* Constants of PyTorch's CUDA caching allocator shared by the configuration parser and the
 * simulator (c10/cuda/CUDACachingAllocator.cpp, c10/core/AllocatorConfig.h). */
#ifndef VF_CORE_ALLOC_INTERNAL_H
#define VF_CORE_ALLOC_INTERNAL_H

#include <stdint.h>

#define VF_MIB (UINT64_C(1) << 20)
#define VF_ALLOC_MIN_BLOCK UINT64_C(512)         /* kMinBlockSize */
#define VF_ALLOC_SMALL_SIZE VF_MIB               /* kSmallSize: largest small block */
#define VF_ALLOC_SMALL_BUFFER (2 * VF_MIB)       /* kSmallBuffer: small segment, page */
#define VF_ALLOC_LARGE_BUFFER (20 * VF_MIB)      /* kLargeBuffer: default large segment */
#define VF_ALLOC_MIN_LARGE_ALLOC (10 * VF_MIB)   /* kMinLargeAlloc */
#define VF_ALLOC_ROUND_LARGE (2 * VF_MIB)        /* kRoundLarge */
/* Requests above 1 PiB are refused: no device has that, and no rounding can overflow. */
#define VF_ALLOC_MAX_REQUEST (UINT64_C(1) << 50)

static inline uint64_t vf_alloc_round_up(uint64_t v, uint64_t step) {
  return (v + step - 1) / step * step;
}

#endif

/* The one binary search the planner and the probe share. */
#ifndef VF_CORE_BISECT_H
#define VF_CORE_BISECT_H

#include <stdbool.h>
#include <stdint.h>

/* The largest x in [lo, hi] for which fits(x, arg) holds, given that it holds at lo and
 * that it holds for every value below one where it holds (peaks grow with the batch). */
static inline uint64_t last_fitting(uint64_t lo, uint64_t hi, bool (*fits)(uint64_t, void *),
                                    void *arg) {
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid, arg)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

#endif

/* Growing arrays: one amortised-doubling helper instead of a realloc dance per array. */
#ifndef VF_BASE_GROW_H
#define VF_BASE_GROW_H

#include <stddef.h>

void *array_grow_slow(void *items, size_t *cap, size_t need, size_t size);

/* Returns items, reallocated if needed so that it holds at least `need` elements of `size`
 * bytes (capacity doubles, starting at 16); *cap is updated. NULL when out of memory, with
 * items and *cap left as they were. Inline: it sits on the estimator's per-event path. */
static inline void *array_grow(void *items, size_t *cap, size_t need, size_t size) {
  return need <= *cap ? items : array_grow_slow(items, cap, need, size);
}

#endif

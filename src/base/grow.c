#include "base/grow.h"

#include <stdint.h>
#include <stdlib.h>

void *array_grow_slow(void *items, size_t *cap, size_t need, size_t size) {
  size_t next = *cap ? *cap : 16;
  while (next < need) {
    if (next > SIZE_MAX / 2) return NULL;
    next *= 2;
  }
  if (next > SIZE_MAX / size) return NULL;
  void *grown = realloc(items, next * size);
  if (grown) *cap = next;
  return grown;
}

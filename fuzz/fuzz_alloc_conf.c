/* libFuzzer target: the PYTORCH_ALLOC_CONF parser. Any text either parses into a
 * configuration the allocator accepts, or fails with a position inside the text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vramfit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  struct vf_alloc_conf c;
  struct vf_diag d;
  vf_diag_clear(&d);
  if (vf_alloc_conf_parse(text, &c, &d) == 0) {
    struct vf_allocator a;
    uint64_t id;
    if (vf_allocator_init(&a, &c, 1ull << 32) == 0) {
      /* A parsed configuration must drive the simulator without faults. */
      if (vf_allocator_malloc(&a, 3u << 20, 0, &id) == 0) vf_allocator_free(&a, id);
      vf_allocator_cleanup(&a);
    }
  } else if (d.offset != UINT64_MAX && d.offset > strlen(text)) {
    abort(); /* the reported position must lie within the text */
  }
  free(text);
  return 0;
}

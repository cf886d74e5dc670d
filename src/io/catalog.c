/* The model catalogue: data/models/<name>.json, Hugging Face config.json files. */
#include <stdio.h>
#include <string.h>

#include "io/data.h"
#include "vramfit.h"

#define MODELS_DIR "models/"

struct nth {
  size_t want, seen;
  const char *path;
};

static int visit(const char *path, void *arg) {
  struct nth *n = arg;
  if (n->seen++ == n->want) {
    n->path = path;
    return 1;
  }
  return 0;
}

size_t vf_catalog_count(void) {
  struct nth n = {.want = SIZE_MAX};
  vf_data_each(MODELS_DIR, visit, &n);
  return n.seen;
}

int vf_catalog_name(size_t i, char *buf, size_t size) {
  struct nth n = {.want = i};
  vf_data_each(MODELS_DIR, visit, &n);
  if (!n.path) return VF_ENOTFOUND;
  const char *base = n.path + strlen(MODELS_DIR);
  int len = (int)strlen(base) - (int)strlen(".json");
  snprintf(buf, size, "%.*s", len > 0 ? len : 0, base);
  return 0;
}

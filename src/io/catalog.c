/* The model catalogue: data/models/<name>.json, Hugging Face config.json files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "io/data.h"
#include "vramfit.h"

#define MODELS_DIR "models/"

struct paths {
  const char **path;
  size_t n, cap;
  int rc;
};

static int collect(const char *path, void *arg) {
  struct paths *p = arg;
  const char **grown = array_grow(p->path, &p->cap, p->n + 1, sizeof *grown);
  if (!grown) return p->rc = VF_ENOMEM;
  p->path = grown;
  p->path[p->n++] = path;
  return 0;
}

static size_t stem_len(const char *path) {
  size_t n = strlen(path);
  return n > 5 && strcmp(path + n - 5, ".json") == 0 ? n - 5 : n;
}

/* By model name, not by file name: "gpt2" before "gpt2-large", although "gpt2.json"
 * sorts after "gpt2-large.json" ('.' > '-'). */
static int by_name(const void *a, const void *b) {
  const char *x = *(const char *const *)a, *y = *(const char *const *)b;
  size_t lx = stem_len(x), ly = stem_len(y);
  int c = strncmp(x, y, lx < ly ? lx : ly);
  return c ? c : (lx > ly) - (lx < ly);
}

static int count(const char *path, void *arg) {
  (void)path;
  ++*(size_t *)arg;
  return 0;
}

size_t vf_catalog_count(void) {
  size_t n = 0;
  data_each(MODELS_DIR, count, &n);
  return n;
}

int vf_catalog_name(size_t i, char *buf, size_t size) {
  struct paths p = {0};
  data_each(MODELS_DIR, collect, &p);
  int rc = p.rc ? p.rc : i < p.n ? 0 : VF_ENOTFOUND;
  if (!rc) {
    qsort(p.path, p.n, sizeof *p.path, by_name);
    const char *base = p.path[i] + strlen(MODELS_DIR);
    snprintf(buf, size, "%.*s", (int)stem_len(base), base);
  }
  free(p.path);
  return rc;
}

int vf_catalog_config(const char *name, char **json, size_t *len) {
  char path[160];
  const char *text;
  if (snprintf(path, sizeof path, MODELS_DIR "%s.json", name) >= (int)sizeof path) return VF_ENOTFOUND;
  int rc = data_get(path, &text, len);
  if (rc) return rc;
  *json = malloc(*len + 1);
  if (*json) {
    memcpy(*json, text, *len);
    (*json)[*len] = '\0';
  }
  data_release(text);
  return *json ? 0 : VF_ENOMEM;
}

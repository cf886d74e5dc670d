#include "io/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "vramfit/error.h"

static const struct data_file *embedded(const char *path) {
  for (const struct data_file *f = data_files; f->path; f++)
    if (strcmp(f->path, path) == 0) return f;
  return NULL;
}

int data_get(const char *path, const char **bytes, size_t *len) {
  const char *dir = getenv("VRAMFIT_DATA_DIR");
  if (dir && *dir) {
    char full[4096];
    snprintf(full, sizeof full, "%s/%s", dir, path);
    char *buf;
    int rc = file_read(full, 64u << 20, &buf, len, NULL);
    if (rc) return rc == VF_EIO ? VF_ENOTFOUND : rc;
    *bytes = buf;
    return 0;
  }
  const struct data_file *f = embedded(path);
  if (!f) return VF_ENOTFOUND;
  *bytes = (const char *)f->bytes;
  *len = f->len;
  return 0;
}

void data_release(const char *bytes) {
  const char *dir = getenv("VRAMFIT_DATA_DIR");
  if (dir && *dir) free((char *)bytes);
}

int data_each(const char *dir, int (*fn)(const char *path, void *arg), void *arg) {
  size_t n = strlen(dir);
  for (const struct data_file *f = data_files; f->path; f++) {
    if (strncmp(f->path, dir, n) != 0) continue;
    int rc = fn(f->path, arg);
    if (rc) return rc;
  }
  return 0;
}

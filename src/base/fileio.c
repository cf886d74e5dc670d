#include "base/fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base/diag.h"

int file_read(const char *path, size_t max, char **out, size_t *len, struct vf_diag *d) {
  FILE *f = fopen(path, "rb");
  if (!f) return diag_at(d, VF_EIO, path, UINT64_MAX, "cannot open: %s", strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return diag_at(d, VF_EIO, path, UINT64_MAX, "not a regular file");
  }
  if ((uint64_t)st.st_size > max) {
    fclose(f);
    return diag_at(d, VF_ERANGE, path, UINT64_MAX, "file is larger than %zu bytes", max);
  }
  char *buf = malloc((size_t)st.st_size + 1);
  if (!buf) {
    fclose(f);
    return VF_ENOMEM;
  }
  size_t n = fread(buf, 1, (size_t)st.st_size, f);
  int failed = ferror(f);
  fclose(f);
  if (failed) {
    free(buf);
    return diag_at(d, VF_EIO, path, UINT64_MAX, "read error");
  }
  buf[n] = '\0';
  *out = buf;
  *len = n;
  return 0;
}

int path_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int path_is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

const char *path_base(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

void path_folder(const char *path, char *out, size_t size) {
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(out, size, ".");
  else snprintf(out, size, "%.*s", slash == path ? 1 : (int)(slash - path), path);
}

int str_ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

int file_write(const char *path, const char *bytes, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f) return VF_EIO;
  int failed = fwrite(bytes, 1, len, f) != len;
  return (fclose(f) || failed) ? VF_EIO : 0;
}

#include "tmpdir.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

void vf_test_tmpdir(const char *name, char *out, size_t size) {
  const char *base = getenv("VF_TEST_TMP");
  char cmd[4200];
  if (base && *base) snprintf(out, size, "%s/%s", base, name);
  else snprintf(out, size, "/tmp/vramfit-test-%s", name);
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", out, out);
  if (system(cmd) != 0) {
    fprintf(stderr, "cannot create %s\n", out);
    abort();
  }
}

void vf_test_write(const char *dir, const char *file, const void *bytes, size_t len, char *out,
                   size_t size) {
  snprintf(out, size, "%s/%s", dir, file);
  FILE *f = fopen(out, "wb");
  if (!f || fwrite(bytes, 1, len, f) != len || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", out);
    abort();
  }
}

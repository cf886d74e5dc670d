#include "diag_check.h"

#include <stdio.h>
#include <string.h>

const char *vf_test_diag_mismatch(int rc, const struct vf_diag *d, int code, const char *needle,
                                  uint64_t byte, const char *named, char *buf, size_t size) {
  char line[1200];
  vf_diag_format(d, line, sizeof line);
  if (rc != code || !strstr(d->msg, needle))
    snprintf(buf, size, "got %d '%s', want %d with '%s'", rc, line, code, needle);
  else if (byte != UINT64_MAX && d->offset != byte)
    snprintf(buf, size, "'%s' at byte %llu, want byte %llu", line, (unsigned long long)d->offset,
             (unsigned long long)byte);
  else if (byte != UINT64_MAX && !strstr(line, ": byte "))
    snprintf(buf, size, "'%s' has no byte position", line);
  else if (!strstr(line, named))
    snprintf(buf, size, "'%s' does not name %s", line, named);
  else if (strchr(line, '\n'))
    snprintf(buf, size, "'%s' is not one line", line);
  else
    return NULL;
  return buf;
}

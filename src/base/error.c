#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vramfit.h"

const char *vf_strerror(int err) {
  switch (err) {
  case 0:
    return "success";
#define XX(name, val, msg) \
  case VF_##name:          \
    return msg;
    VF_ERRNO_MAP(XX)
#undef XX
  }
  return "unknown error";
}

void vf_diag_clear(struct vf_diag *d) {
  if (!d) return;
  memset(d, 0, sizeof *d);
  d->offset = UINT64_MAX;
}

void vf_diag_format(const struct vf_diag *d, char *buf, size_t size) {
  const char *msg = d->msg[0] ? d->msg : vf_strerror(d->code);
  if (!d->file[0])
    snprintf(buf, size, "%s", msg);
  else if (d->line > 0)
    snprintf(buf, size, "%s:%d:%d: %s", d->file, d->line, d->col, msg);
  else if (d->offset != UINT64_MAX)
    snprintf(buf, size, "%s: byte %llu: %s", d->file, (unsigned long long)d->offset, msg);
  else
    snprintf(buf, size, "%s: %s", d->file, msg);
}

void vf_free(void *p) { free(p); }

#include "base/diag.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void fill(struct vf_diag *d, int code, const char *file, const char *fmt, va_list ap) {
  vf_diag_clear(d);
  d->code = code;
  if (file) snprintf(d->file, sizeof d->file, "%s", file);
  vsnprintf(d->msg, sizeof d->msg, fmt, ap);
  /* Errors are one line, whatever bytes of the input a message quotes (a key holding a
   * newline). */
  for (char *c = d->msg; *c; c++)
    if ((unsigned char)*c < 0x20) *c = '?';
}

int diag_at(struct vf_diag *d, int code, const char *file, uint64_t offset, const char *fmt,
            ...) {
  if (!d) return code;
  va_list ap;
  va_start(ap, fmt);
  fill(d, code, file, fmt, ap);
  va_end(ap);
  d->offset = offset;
  return code;
}

int diag_line(struct vf_diag *d, int code, const char *file, int line, int col,
              const char *fmt, ...) {
  if (!d) return code;
  va_list ap;
  va_start(ap, fmt);
  fill(d, code, file, fmt, ap);
  va_end(ap);
  d->line = line;
  d->col = col;
  return code;
}

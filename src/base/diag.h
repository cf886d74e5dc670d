/* Internal helpers to fill a struct vf_diag (which may be NULL) and return its code. */
#ifndef VF_BASE_DIAG_H
#define VF_BASE_DIAG_H

#include <stdint.h>

#include "vramfit/error.h"

/* Sets code, file and byte offset (UINT64_MAX: none) and a printf message; returns code. */
int diag_at(struct vf_diag *d, int code, const char *file, uint64_t offset, const char *fmt,
            ...) __attribute__((format(printf, 5, 6)));
/* The same with a 1-based line and column. */
int diag_line(struct vf_diag *d, int code, const char *file, int line, int col,
              const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#endif

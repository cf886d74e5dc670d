#ifndef VRAMFIT_ERROR_H
#define VRAMFIT_ERROR_H

#include <stddef.h>
#include <stdint.h>

#include "vramfit/api.h"

#define VF_ERRNO_MAP(XX)                                                         \
  XX(EINVAL, -1, "invalid argument")                                             \
  XX(ENOMEM, -2, "out of memory")                                                \
  XX(EIO, -3, "input/output error")                                              \
  XX(EFORMAT, -4, "malformed input")                                             \
  XX(ENOTFOUND, -5, "not found")                                                 \
  XX(EUNSUPPORTED, -6, "not supported")                                          \
  XX(ERANGE, -7, "value out of range")                                           \
  XX(ENODRIVER, -8, "no NVIDIA driver")                                          \
  XX(ECHANGED, -9, "file changed on disk")                                       \
  XX(ENOCMD, -10, "command not found")                                           \
  XX(EINTERNAL, -11, "internal error")

enum {
#define XX(name, val, msg) VF_##name = val,
  VF_ERRNO_MAP(XX)
#undef XX
};

/* A short description of a VF_E* code; never NULL. */
VF_API const char *vf_strerror(int err);

/* Where and why a parse or validation failed. Caller-owned; any field may be empty:
 * offset is UINT64_MAX and line/col are 0 when the position is unknown. */
struct vf_diag {
  int code;
  char file[512];
  uint64_t offset; /* byte position in the file */
  int line, col;   /* 1-based position in a text file */
  char msg[512];
};

VF_API void vf_diag_clear(struct vf_diag *d);

/* Formats "FILE: byte N: MSG", "FILE:LINE:COL: MSG" or "FILE: MSG" into buf. */
VF_API void vf_diag_format(const struct vf_diag *d, char *buf, size_t size);

/* Frees anything the library returned as owned (strings, arrays). */
VF_API void vf_free(void *p);

#endif

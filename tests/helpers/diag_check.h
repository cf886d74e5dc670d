/* Checks the failure a reader reports, for the reader tests. */
#ifndef VF_TEST_DIAG_CHECK_H
#define VF_TEST_DIAG_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "vramfit/error.h"

/* NULL when rc is code, d's message contains needle, d points at byte (UINT64_MAX: any
 * position) and its one-line formatted form names the file `named`; otherwise what
 * differs, written into buf. */
const char *vf_test_diag_mismatch(int rc, const struct vf_diag *d, int code, const char *needle,
                                  uint64_t byte, const char *named, char *buf, size_t size);

#endif

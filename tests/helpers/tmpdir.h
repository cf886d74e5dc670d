/* Scratch directories for tests: one fresh folder per test under $VF_TEST_TMP. */
#ifndef VF_TEST_TMPDIR_H
#define VF_TEST_TMPDIR_H

#include <stddef.h>

/* Creates (emptied) $VF_TEST_TMP/<name> or /tmp/vramfit-test-<name>; writes its path. */
void vf_test_tmpdir(const char *name, char *out, size_t size);

/* Writes len bytes to dir/file; returns the full path in out. Aborts the test on failure. */
void vf_test_write(const char *dir, const char *file, const void *bytes, size_t len, char *out,
                   size_t size);

#endif

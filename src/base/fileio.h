/* Small file helpers shared by the readers and writers. */
#ifndef VF_BASE_FILEIO_H
#define VF_BASE_FILEIO_H

#include <stddef.h>

#include "vramfit/error.h"

/* Reads a whole file (at most max bytes) into a NUL-terminated buffer the caller frees.
 * VF_EIO when it cannot be opened or read, VF_ERANGE when larger than max; d names it. */
int file_read(const char *path, size_t max, char **out, size_t *len, struct vf_diag *d);

/* Creates or truncates path and writes len bytes to it: scratch files only (no backup,
 * not atomic). VF_EIO. */
int file_write(const char *path, const char *bytes, size_t len);

/* True when path names a directory / a regular file. */
int path_is_dir(const char *path);
int path_is_file(const char *path);

/* The last component of a path ("c.yaml" of "conf/c.yaml"). */
const char *path_base(const char *path);
/* The folder of a path into out: "." for a bare name, "/" for one at the root. */
void path_folder(const char *path, char *out, size_t size);

/* Whether s ends with suffix, ignoring case. */
int str_ends_with(const char *s, const char *suffix);

#endif

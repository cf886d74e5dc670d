/* Synthetic safetensors files: real headers over a sparse, all-zero data region, so a
 * checkpoint shaped like a 405B model costs only its headers on disk. */
#ifndef VF_TEST_ST_WRITER_H
#define VF_TEST_ST_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "vramfit.h"

/* The header JSON for tensors laid out back to back in the given order (name, shape and
 * dtype are used); *data_bytes gets the size of the data region. Caller frees; NULL on
 * failure. */
char *vf_st_header(const struct vf_tensor *t, size_t n, uint64_t *data_bytes);

/* Writes u64le(strlen(header)), header, then data_bytes of zeros (a hole). 0 or -1. */
int vf_st_write_raw(const char *path, const char *header, uint64_t data_bytes);

/* Writes a valid file holding tensors t[0..n). 0 or -1. */
int vf_st_write(const char *path, const struct vf_tensor *t, size_t n);

/* Splits t into `shards` consecutive runs written as model-0000i-of-0000n.safetensors in
 * dir, plus the model.safetensors.index.json that maps them. 0 or -1. */
int vf_st_write_sharded(const char *dir, const struct vf_tensor *t, size_t n, unsigned shards);

#endif

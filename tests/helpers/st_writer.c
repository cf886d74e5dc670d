#include "st_writer.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static json_t *entry(const struct vf_tensor *t, uint64_t begin, uint64_t *end) {
  uint64_t bytes = 0;
  if (vf_dtype_bytes(t->dtype, vf_tensor_numel(t), &bytes) != 0) return NULL;
  json_t *shape = json_array();
  for (uint32_t i = 0; i < t->ndim; i++) json_array_append_new(shape, json_integer((json_int_t)t->shape[i]));
  *end = begin + bytes;
  return json_pack("{s:s, s:o, s:[I, I]}", "dtype", vf_dtype_name(t->dtype), "shape", shape,
                   "data_offsets", (json_int_t)begin, (json_int_t)*end);
}

char *vf_st_header(const struct vf_tensor *t, size_t n, uint64_t *data_bytes) {
  json_t *root = json_pack("{s:{s:s}}", "__metadata__", "format", "pt");
  uint64_t at = 0;
  for (size_t i = 0; i < n && root; i++) {
    json_t *e = entry(&t[i], at, &at);
    if (!e || json_object_set_new(root, t[i].name, e) != 0) {
      json_decref(root);
      root = NULL;
    }
  }
  char *text = root ? json_dumps(root, JSON_PRESERVE_ORDER | JSON_COMPACT) : NULL;
  json_decref(root);
  *data_bytes = at;
  return text;
}

int vf_st_write_raw(const char *path, const char *header, uint64_t data_bytes) {
  size_t n = strlen(header);
  uint8_t len[8];
  for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)n >> (8 * i));
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return -1;
  bool ok = write(fd, len, 8) == 8 && write(fd, header, n) == (ssize_t)n &&
            ftruncate(fd, (off_t)(8 + n + data_bytes)) == 0;
  return close(fd) == 0 && ok ? 0 : -1;
}

int vf_st_write(const char *path, const struct vf_tensor *t, size_t n) {
  uint64_t data = 0;
  char *header = vf_st_header(t, n, &data);
  int rc = header ? vf_st_write_raw(path, header, data) : -1;
  free(header);
  return rc;
}

int vf_st_write_sharded(const char *dir, const struct vf_tensor *t, size_t n, unsigned shards) {
  json_t *map = json_object();
  char name[64], path[4096];
  int rc = 0;
  for (unsigned s = 0; s < shards && !rc; s++) {
    size_t from = n * s / shards, to = n * (s + 1) / shards;
    snprintf(name, sizeof name, "model-%05u-of-%05u.safetensors", s + 1, shards);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    rc = vf_st_write(path, t + from, to - from);
    for (size_t i = from; i < to; i++) json_object_set_new(map, t[i].name, json_string(name));
  }
  json_t *index = json_pack("{s:{s:I}, s:o}", "metadata", "total_size", (json_int_t)0,
                            "weight_map", map);
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
  if (!rc && (!index || json_dump_file(index, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0))
    rc = -1;
  json_decref(index);
  return rc;
}

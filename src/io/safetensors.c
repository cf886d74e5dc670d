/* safetensors headers: the 8-byte length, the JSON header and the checks the reference
 * reader (huggingface/safetensors, tensor.rs) makes. The weights are never read, so a
 * checkpoint of any size costs two small reads per file. */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/diag.h"
#include "base/fileio.h"
#include "base/json_util.h"
#include "vramfit.h"

/* The reference reader's MAX_HEADER_SIZE. */
#define ST_MAX_HEADER 100000000ull
#define ST_MAX_INDEX_BYTES (64u << 20)

struct st_entry {
  const char *name; /* borrowed from the parsed JSON */
  struct vf_tensor t;
  uint64_t begin, end;
};

struct st_header {
  const char *text; /* the JSON, which starts at byte 8 of the file */
  size_t len;
  uint64_t file_size; /* 0: unknown */
  const char *file;
  struct vf_diag *d;
};

static uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static int too_short(const char *file, uint64_t size, struct vf_diag *d) {
  return diag_at(d, VF_EFORMAT, file, 0,
                 "file is %llu bytes, too short for the 8-byte header length",
                 (unsigned long long)size);
}

/* n is the header length read from the first 8 bytes; avail the bytes that follow them. */
static int check_length(uint64_t n, uint64_t avail, const char *file, struct vf_diag *d) {
  if (n > ST_MAX_HEADER)
    return diag_at(d, VF_EFORMAT, file, 0, "header length %llu exceeds the %llu-byte limit",
                   (unsigned long long)n, ST_MAX_HEADER);
  if (n > avail)
    return diag_at(d, VF_EFORMAT, file, 0,
                   "header length %llu runs past the end of the file (%llu bytes)",
                   (unsigned long long)n, (unsigned long long)avail + 8);
  return 0;
}

/* Byte in the file where a tensor's key sits in the header, so a message points at the
 * entry; the header start when the key is not spelled verbatim (escapes). */
static uint64_t key_offset(const struct st_header *h, const char *name) {
  size_t n = strlen(name);
  const char *end = h->text + h->len;
  for (const char *q = h->text; (q = memchr(q, '"', (size_t)(end - q))); q++) {
    if ((size_t)(end - q) < n + 2 || memcmp(q + 1, name, n) != 0 || q[n + 1] != '"') continue;
    const char *after = q + n + 2;
    while (after < end && (*after == ' ' || *after == '\n' || *after == '\r' || *after == '\t'))
      after++;
    if (after < end && *after == ':') return 8 + (uint64_t)(q - h->text);
  }
  return 8;
}

/* jansson reports a syntax error by line and column (in characters); the message gives the
 * byte in the file instead, since the header shares its first line with binary bytes. */
static uint64_t text_offset(const char *s, size_t len, int line, int col) {
  size_t i = 0;
  for (int l = 1; l < line && i < len; i++)
    if (s[i] == '\n') l++;
  for (int c = 1; c < col && i < len; c++)
    for (i++; i < len && ((unsigned char)s[i] & 0xC0) == 0x80; i++) {}
  return 8 + (uint64_t)i;
}

static int parse_json(const struct st_header *h, json_t **root) {
  struct vf_diag jd;
  vf_diag_clear(&jd);
  int rc = parse_json_text(h->text, h->len, h->file, root, &jd);
  if (!rc) return 0;
  const char *why = strncmp(jd.msg, "invalid JSON: ", 14) == 0 ? jd.msg + 14 : jd.msg;
  return diag_at(h->d, rc, h->file, text_offset(h->text, h->len, jd.line, jd.col),
                 "invalid JSON in the header (line %d, column %d): %s", jd.line, jd.col, why);
}

/* An error about one header entry, placed at its key. */
static int entry_error(const struct st_header *h, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int entry_error(const struct st_header *h, const char *name, const char *fmt, ...) {
  char why[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  const char *what = strcmp(name, "__metadata__") == 0 ? "" : "tensor '";
  return diag_at(h->d, VF_EFORMAT, h->file, key_offset(h, name), "%s%s%s: %s", what, name,
                 *what ? "'" : "", why);
}

static int check_metadata(const struct st_header *h, json_t *meta) {
  if (!json_is_object(meta)) return entry_error(h, "__metadata__", "must be an object");
  const char *k;
  json_t *v;
  json_object_foreach(meta, k, v) {
    if (!json_is_string(v))
      return entry_error(h, "__metadata__", "must map names to strings; '%s' is not a string", k);
  }
  return 0;
}

static bool whole_number(json_t *v, uint64_t *out) {
  if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
  *out = (uint64_t)json_integer_value(v);
  return true;
}

/* Reads "shape": dimensions beyond VF_MAX_DIMS are folded into the first so the element
 * count stays exact. */
static int read_shape(const struct st_header *h, struct st_entry *e, json_t *shape,
                      uint64_t *numel) {
  if (!json_is_array(shape)) return entry_error(h, e->name, "shape must be an array");
  size_t n = json_array_size(shape), fold = n > VF_MAX_DIMS ? n - VF_MAX_DIMS : 0;
  uint64_t product = 1;
  e->t.ndim = (uint32_t)(n - fold);
  for (size_t i = 0; i < n; i++) {
    uint64_t dim;
    if (!whole_number(json_array_get(shape, i), &dim))
      return entry_error(h, e->name, "shape entry %zu is not a non-negative whole number", i);
    if (__builtin_mul_overflow(product, dim, &product))
      return entry_error(h, e->name, "shape product overflows 64 bits");
    if (i <= fold) e->t.shape[0] = product;
    else e->t.shape[i - fold] = dim;
  }
  *numel = product;
  return 0;
}

static int read_offsets(const struct st_header *h, struct st_entry *e, json_t *offs) {
  if (!json_is_array(offs) || json_array_size(offs) != 2 ||
      !whole_number(json_array_get(offs, 0), &e->begin) ||
      !whole_number(json_array_get(offs, 1), &e->end))
    return entry_error(h, e->name, "data_offsets must be two non-negative whole numbers");
  if (e->begin > e->end)
    return entry_error(h, e->name, "data_offsets [%llu, %llu] end before they begin",
                       (unsigned long long)e->begin, (unsigned long long)e->end);
  return 0;
}

/* The stored size must be exactly what shape and dtype need. */
static int check_size(const struct st_header *h, const struct st_entry *e, uint64_t numel) {
  uint64_t bytes;
  const char *dt = vf_dtype_name(e->t.dtype);
  int rc = vf_dtype_bytes(e->t.dtype, numel, &bytes);
  if (rc == VF_EINVAL)
    return entry_error(h, e->name, "%llu elements of %s do not fill whole bytes",
                       (unsigned long long)numel, dt);
  if (rc) return entry_error(h, e->name, "byte size overflows 64 bits");
  if (e->end - e->begin != bytes)
    return entry_error(h, e->name, "data_offsets [%llu, %llu] hold %llu bytes, but %llu elements "
                       "of %s take %llu", (unsigned long long)e->begin, (unsigned long long)e->end,
                       (unsigned long long)(e->end - e->begin), (unsigned long long)numel, dt,
                       (unsigned long long)bytes);
  return 0;
}

static int read_entry(const struct st_header *h, const char *name, json_t *v, struct st_entry *e) {
  memset(e, 0, sizeof *e);
  e->name = name;
  if (!json_is_object(v))
    return entry_error(h, name, "expected an object with dtype, shape and data_offsets");
  json_t *dtype = json_object_get(v, "dtype");
  if (!json_is_string(dtype)) return entry_error(h, name, "dtype must be a string");
  if (vf_dtype_from_name(json_string_value(dtype), &e->t.dtype) != 0)
    return entry_error(h, name, "unknown dtype '%s'", json_string_value(dtype));
  uint64_t numel = 0;
  int rc = read_shape(h, e, json_object_get(v, "shape"), &numel);
  if (!rc) rc = read_offsets(h, e, json_object_get(v, "data_offsets"));
  if (!rc) rc = check_size(h, e, numel);
  return rc;
}

static int by_offset(const void *pa, const void *pb) {
  const struct st_entry *a = pa, *b = pb;
  if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
  if (a->end != b->end) return a->end < b->end ? -1 : 1;
  return strcmp(a->name, b->name);
}

/* "The byte buffer needs to be entirely indexed, and cannot contain holes": sorted by
 * offset, each tensor starts where the previous one ended. */
static int check_layout(const struct st_header *h, struct st_entry *e, size_t n) {
  qsort(e, n, sizeof *e, by_offset);
  uint64_t end = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned long long b = e[i].begin, x = e[i].end;
    if (i == 0 && b != 0)
      return entry_error(h, e[i].name, "data_offsets [%llu, %llu] leave a hole: the data "
                         "starts at 0", b, x);
    if (b < end)
      return entry_error(h, e[i].name, "data_offsets [%llu, %llu] overlap the previous tensor "
                         "'%s' ending at %llu", b, x, e[i - 1].name, (unsigned long long)end);
    if (b > end)
      return entry_error(h, e[i].name, "data_offsets [%llu, %llu] leave a hole after the "
                         "previous tensor '%s' ending at %llu", b, x, e[i - 1].name,
                         (unsigned long long)end);
    end = e[i].end;
  }
  uint64_t data_end = 8 + h->len + end;
  if (h->file_size && data_end != h->file_size)
    return diag_at(h->d, VF_EFORMAT, h->file, data_end < h->file_size ? data_end : h->file_size,
                   "tensor data ends at byte %llu but the file has %llu bytes",
                   (unsigned long long)data_end, (unsigned long long)h->file_size);
  return 0;
}

static int collect(const struct st_header *h, json_t *root, struct st_entry *entries, size_t *n) {
  const char *key;
  json_t *v;
  *n = 0;
  json_object_foreach(root, key, v) {
    int rc = strcmp(key, "__metadata__") == 0 ? check_metadata(h, v)
                                              : read_entry(h, key, v, &entries[(*n)++]);
    if (rc) return rc;
  }
  return 0;
}

static int append(struct vf_model *m, struct st_entry *e, size_t n) {
  for (size_t i = 0; i < n; i++) {
    e[i].t.name = (char *)e[i].name;
    e[i].t.kind = vf_kind_from_name(e[i].name, &e[i].t.layer, &e[i].t.expert);
    int rc = vf_model_add_tensor(m, &e[i].t);
    if (rc) return rc;
  }
  return 0;
}

int vf_safetensors_parse(struct vf_model *m, const uint8_t *buf, size_t len, uint64_t file_size,
                         const char *file, struct vf_diag *d) {
  if (len < 8) return too_short(file, file_size ? file_size : len, d);
  uint64_t n = le64(buf), avail = len - 8;
  if (file_size) avail = file_size < 8 ? 0 : file_size - 8 < avail ? file_size - 8 : avail;
  int rc = check_length(n, avail, file, d);
  if (rc) return rc;
  struct st_header h = {.text = (const char *)buf + 8, .len = (size_t)n,
                        .file_size = file_size, .file = file, .d = d};
  if (n == 0 || h.text[0] != '{')
    return diag_at(d, VF_EFORMAT, file, 8, "header does not start with '{'");
  json_t *root;
  if ((rc = parse_json(&h, &root))) return rc;
  struct st_entry *entries = malloc((json_object_size(root) + 1) * sizeof *entries);
  size_t count = 0;
  if (!entries) rc = VF_ENOMEM;
  if (!rc) rc = collect(&h, root, entries, &count);
  if (!rc) rc = check_layout(&h, entries, count);
  if (!rc) rc = append(m, entries, count);
  free(entries);
  json_decref(root);
  return rc;
}

static int pread_full(int fd, uint8_t *buf, size_t n, uint64_t at) {
  while (n) {
    ssize_t got = pread(fd, buf, n, (off_t)at);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return VF_EIO;
    buf += got, n -= (size_t)got, at += (uint64_t)got;
  }
  return 0;
}

/* Reads the first 8 + N bytes: the length, checked before anything is allocated, then the
 * header. */
static int read_head(int fd, const char *path, uint8_t **out, size_t *len, uint64_t *size,
                     struct vf_diag *d) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return diag_at(d, VF_EIO, path, UINT64_MAX, "not a regular file");
  *size = (uint64_t)st.st_size;
  if (*size < 8) return too_short(path, *size, d);
  uint8_t head[8];
  if (pread_full(fd, head, 8, 0)) return diag_at(d, VF_EIO, path, 0, "read error");
  uint64_t n = le64(head);
  int rc = check_length(n, *size - 8, path, d);
  if (rc) return rc;
  uint8_t *buf = malloc((size_t)n + 8);
  if (!buf) return VF_ENOMEM;
  memcpy(buf, head, 8);
  if (pread_full(fd, buf + 8, (size_t)n, 8)) {
    free(buf);
    return diag_at(d, VF_EIO, path, 8, "read error");
  }
  *out = buf;
  *len = (size_t)n + 8;
  return 0;
}

int vf_safetensors_read(struct vf_model *m, const char *path, struct vf_diag *d) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return diag_at(d, VF_EIO, path, UINT64_MAX, "cannot open: %s", strerror(errno));
  uint8_t *buf = NULL;
  size_t len = 0;
  uint64_t size = 0;
  int rc = read_head(fd, path, &buf, &len, &size, d);
  close(fd);
  if (!rc) rc = vf_safetensors_parse(m, buf, len, size, path, d);
  free(buf);
  return rc;
}

/* ---- model.safetensors.index.json ---- */

struct shard_ref {
  const char *tensor, *shard; /* borrowed from the parsed index */
};

static int by_shard(const void *pa, const void *pb) {
  const struct shard_ref *a = pa, *b = pb;
  int c = strcmp(a->shard, b->shard);
  return c ? c : strcmp(a->tensor, b->tensor);
}

static int by_name_ptr(const void *pa, const void *pb) {
  return strcmp(*(const char *const *)pa, *(const char *const *)pb);
}

/* A shard must be a plain file name: the index may not point outside its folder. */
static bool plain_file_name(const char *s) {
  return *s && !strchr(s, '/') && !strchr(s, '\\') && strcmp(s, ".") && strcmp(s, "..");
}

static int collect_refs(json_t *map, const char *path, struct shard_ref **out, size_t *n,
                        struct vf_diag *d) {
  if (!json_is_object(map) || json_object_size(map) == 0)
    return diag_at(d, VF_EFORMAT, path, UINT64_MAX, "'weight_map' must be a non-empty object");
  struct shard_ref *refs = malloc((json_object_size(map) + 1) * sizeof *refs);
  if (!refs) return VF_ENOMEM;
  size_t k = 0;
  const char *name;
  json_t *v;
  json_object_foreach(map, name, v) {
    const char *shard = json_string_value(v);
    if (!shard || !plain_file_name(shard)) {
      free(refs);
      return diag_at(d, VF_EFORMAT, path, UINT64_MAX,
                     "weight_map: tensor '%s' must name a shard file in the index's folder",
                     name);
    }
    refs[k++] = (struct shard_ref){name, shard};
  }
  qsort(refs, k, sizeof *refs, by_shard);
  *out = refs;
  *n = k;
  return 0;
}

/* The shard's own tensors (appended to m from index first) must be exactly the ones the
 * weight map assigns to it (refs, sorted by name). */
static int match_shard(const struct vf_model *m, size_t first, const struct shard_ref *refs,
                       size_t n, const char *index, const char *shard, struct vf_diag *d) {
  size_t have = m->n_tensors - first;
  const char **names = malloc((have + 1) * sizeof *names);
  if (!names) return VF_ENOMEM;
  for (size_t i = 0; i < have; i++) names[i] = m->tensors[first + i].name;
  qsort(names, have, sizeof *names, by_name_ptr);
  size_t i = 0, j = 0;
  int rc = 0;
  while (!rc && (i < n || j < have)) {
    int c = i == n ? 1 : j == have ? -1 : strcmp(refs[i].tensor, names[j]);
    if (c < 0)
      rc = diag_at(d, VF_EFORMAT, index, UINT64_MAX,
                   "tensor '%s': weight_map puts it in '%s', which does not hold it",
                   refs[i].tensor, shard);
    else if (c > 0)
      rc = diag_at(d, VF_EFORMAT, index, UINT64_MAX,
                   "tensor '%s': shard '%s' holds it, but weight_map does not map it there",
                   names[j], shard);
    i += c <= 0, j += c >= 0;
  }
  free(names);
  return rc;
}

static int read_shards(struct vf_model *m, const char *index, const struct shard_ref *refs,
                       size_t n, struct vf_diag *d) {
  const char *slash = strrchr(index, '/');
  int dirlen = slash ? (int)(slash - index + 1) : 0;
  char path[4096];
  for (size_t i = 0, next; i < n; i = next) {
    for (next = i + 1; next < n && strcmp(refs[next].shard, refs[i].shard) == 0; next++) {}
    if (snprintf(path, sizeof path, "%.*s%s", dirlen, index, refs[i].shard) >= (int)sizeof path)
      return diag_at(d, VF_EINVAL, index, UINT64_MAX, "shard path too long");
    size_t first = m->n_tensors;
    int rc = vf_safetensors_read(m, path, d);
    if (!rc) rc = match_shard(m, first, refs + i, next - i, index, refs[i].shard, d);
    if (rc) return rc;
  }
  return 0;
}

int vf_safetensors_index_read(struct vf_model *m, const char *path, struct vf_diag *d) {
  char *text;
  size_t len;
  int rc = file_read(path, ST_MAX_INDEX_BYTES, &text, &len, d);
  if (rc) return rc;
  json_t *root = NULL;
  rc = parse_json_text(text, len, path, &root, d);
  free(text);
  if (rc) return rc;
  struct shard_ref *refs = NULL;
  size_t n = 0;
  rc = collect_refs(json_object_get(root, "weight_map"), path, &refs, &n, d);
  if (!rc) rc = read_shards(m, path, refs, n, d);
  free(refs);
  json_decref(root);
  return rc;
}

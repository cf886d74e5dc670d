/* GGUF v2/v3 headers (ggml docs/gguf.md): metadata, tensor infos, and the checks ggml's
 * own reader (src/gguf.cpp) makes. A buffered cursor reads the header in large chunks, so
 * a multi-megabyte tokenizer array costs a few reads; tensor data is never read. Split
 * models (gguf-split) are read part by part. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "base/diag.h"
#include "base/fileio.h"
#include "vramfit.h"

#define GGUF_CHUNK (1u << 20)
#define GGUF_MAX_NAME 65535u /* keys and tensor names */
#define GGUF_MAX_DEPTH 8     /* nested arrays */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_CAPTURES 64
/* Real files hold a few thousand tensors and a few dozen keys; a garbled count in a large
 * file would otherwise make the reader walk (and keep) millions of bogus entries. */
#define GGUF_MAX_COUNT (1u << 20)

enum gguf_type {
  GT_U8, GT_I8, GT_U16, GT_I16, GT_U32, GT_I32, GT_F32, GT_BOOL, GT_STRING, GT_ARRAY,
  GT_U64, GT_I64, GT_F64, GT_COUNT
};

/* Bytes of a scalar value; 0 for strings and arrays. */
static const uint8_t type_size[GT_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

static bool is_int(uint32_t t) {
  return t <= GT_I32 || t == GT_U64 || t == GT_I64;
}

/* ggml_type ids (include/ggml.h); ids 4, 5, 31-33 and 36-38 were removed from ggml. */
static const enum vf_dtype ggml_types[] = {
    [0] = VF_DTYPE_F32,      [1] = VF_DTYPE_F16,      [2] = VF_DTYPE_Q4_0,
    [3] = VF_DTYPE_Q4_1,     [6] = VF_DTYPE_Q5_0,     [7] = VF_DTYPE_Q5_1,
    [8] = VF_DTYPE_Q8_0,     [9] = VF_DTYPE_Q8_1,     [10] = VF_DTYPE_Q2_K,
    [11] = VF_DTYPE_Q3_K,    [12] = VF_DTYPE_Q4_K,    [13] = VF_DTYPE_Q5_K,
    [14] = VF_DTYPE_Q6_K,    [15] = VF_DTYPE_Q8_K,    [16] = VF_DTYPE_IQ2_XXS,
    [17] = VF_DTYPE_IQ2_XS,  [18] = VF_DTYPE_IQ3_XXS, [19] = VF_DTYPE_IQ1_S,
    [20] = VF_DTYPE_IQ4_NL,  [21] = VF_DTYPE_IQ3_S,   [22] = VF_DTYPE_IQ2_S,
    [23] = VF_DTYPE_IQ4_XS,  [24] = VF_DTYPE_I8,      [25] = VF_DTYPE_I16,
    [26] = VF_DTYPE_I32,     [27] = VF_DTYPE_I64,     [28] = VF_DTYPE_F64,
    [29] = VF_DTYPE_IQ1_M,   [30] = VF_DTYPE_BF16,    [34] = VF_DTYPE_TQ1_0,
    [35] = VF_DTYPE_TQ2_0,   [39] = VF_DTYPE_MXFP4,   [40] = VF_DTYPE_NVFP4,
    [41] = VF_DTYPE_Q1_0,    [42] = VF_DTYPE_Q2_0,
};

/* "<arch>.<suffix>" keys that carry dimensions, and their config.json names. */
enum arch_key {
  K_HIDDEN, K_LAYERS, K_FFN, K_HEADS, K_KV_HEADS, K_HEAD_DIM, K_CONTEXT, K_EXPERTS,
  K_EXPERTS_USED, K_VOCAB, N_ARCH_KEYS
};

static const struct {
  const char *suffix, *config_key;
} arch_keys[N_ARCH_KEYS] = {
    [K_HIDDEN] = {"embedding_length", "hidden_size"},
    [K_LAYERS] = {"block_count", "num_hidden_layers"},
    [K_FFN] = {"feed_forward_length", "intermediate_size"},
    [K_HEADS] = {"attention.head_count", "num_attention_heads"},
    [K_KV_HEADS] = {"attention.head_count_kv", "num_key_value_heads"},
    [K_HEAD_DIM] = {"attention.key_length", "head_dim"},
    [K_CONTEXT] = {"context_length", "max_position_embeddings"},
    [K_EXPERTS] = {"expert_count", "num_local_experts"},
    [K_EXPERTS_USED] = {"expert_used_count", "num_experts_per_tok"},
    [K_VOCAB] = {"vocab_size", "vocab_size"},
};

/* general.architecture → config.json model_type. */
static const struct {
  const char *gguf, *model_type;
} arch_types[] = {
    {"llama", "llama"}, {"qwen2", "qwen2"},     {"gemma", "gemma"},   {"gemma2", "gemma2"},
    {"phi3", "phi3"},   {"gpt2", "gpt2"},       {"gptneox", "gpt_neox"}, {"falcon", "falcon"},
    {"phi2", "phi"},    {"bert", "bert"},
};

/* An integer metadata value; for an array of integers the largest element (per-layer
 * head counts), and the element count. */
struct num {
  bool set;
  uint64_t v, count;
};

struct capture {
  char prefix[32]; /* the architecture part of the key */
  enum arch_key key;
  struct num n;
};

/* Bytes [base, base + len) of the file are in buf; pos is the next byte to read. */
struct cursor {
  int fd; /* -1: the whole file is in buf */
  const uint8_t *buf;
  uint8_t *own;
  size_t cap;
  uint64_t base, len, pos, size;
};

/* Where a tensor's data lies, checked once the data section's start is known. */
struct tinfo {
  uint64_t at, offset, bytes;
  size_t tensor;
};

struct gguf {
  struct cursor c;
  struct vf_model *m;
  const char *file;
  struct vf_diag *d;
  char where[128]; /* what is being read, for truncation messages */
  uint64_t alignment;
  char arch[32];
  struct num tokens, split_no, split_count, split_tensors;
  struct capture caps[GGUF_MAX_CAPTURES];
  size_t n_caps;
};

static int fail(struct gguf *g, uint64_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct gguf *g, uint64_t at, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return diag_at(g->d, VF_EFORMAT, g->file, at, "%s", msg);
}

static uint64_t remaining(const struct gguf *g) {
  return g->c.size - g->c.pos;
}

static int refill(struct gguf *g, size_t n) {
  struct cursor *c = &g->c;
  uint64_t want = n > GGUF_CHUNK ? n : GGUF_CHUNK;
  if (want > c->size - c->pos) want = c->size - c->pos;
  if (want > c->cap) {
    uint8_t *grown = realloc(c->own, (size_t)want);
    if (!grown) return VF_ENOMEM;
    c->own = grown;
    c->cap = (size_t)want;
  }
  for (uint64_t got = 0; got < want;) {
    ssize_t r = pread(c->fd, c->own + got, (size_t)(want - got), (off_t)(c->pos + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return diag_at(g->d, VF_EIO, g->file, c->pos + got, "read error");
    got += (uint64_t)r;
  }
  c->buf = c->own;
  c->base = c->pos;
  c->len = want;
  return 0;
}

/* Points *p at the next n bytes and moves past them. */
static int take(struct gguf *g, size_t n, const uint8_t **p) {
  struct cursor *c = &g->c;
  if (n > remaining(g))
    return fail(g, c->pos, "file ends inside %s (%zu more bytes needed, %llu left)", g->where,
                n, (unsigned long long)remaining(g));
  if (c->pos < c->base || c->pos + n > c->base + c->len) {
    int rc = refill(g, n);
    if (rc) return rc;
  }
  *p = c->buf + (c->pos - c->base);
  c->pos += n;
  return 0;
}

static int skip(struct gguf *g, uint64_t n) {
  if (n > remaining(g))
    return fail(g, g->c.pos, "file ends inside %s (%llu more bytes needed, %llu left)", g->where,
                (unsigned long long)n, (unsigned long long)remaining(g));
  g->c.pos += n;
  return 0;
}

static uint64_t le(const uint8_t *p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = v << 8 | p[i];
  return v;
}

static int get_u32(struct gguf *g, uint32_t *out) {
  const uint8_t *p;
  int rc = take(g, 4, &p);
  if (!rc) *out = (uint32_t)le(p, 4);
  return rc;
}

static int get_u64(struct gguf *g, uint64_t *out) {
  const uint8_t *p;
  int rc = take(g, 8, &p);
  if (!rc) *out = le(p, 8);
  return rc;
}

/* A string's length, checked against the bytes left in the file. */
static int string_length(struct gguf *g, uint64_t *len) {
  uint64_t at = g->c.pos;
  int rc = get_u64(g, len);
  if (!rc && *len > remaining(g))
    return fail(g, at, "string length %llu in %s runs past the end of the file (%llu bytes left)",
                (unsigned long long)*len, g->where, (unsigned long long)remaining(g));
  return rc;
}

/* Reads a key or tensor name into a new NUL-terminated string. */
static int read_name(struct gguf *g, char **out) {
  uint64_t at = g->c.pos, len;
  const uint8_t *p;
  int rc = string_length(g, &len);
  if (rc) return rc;
  if (len > GGUF_MAX_NAME)
    return fail(g, at, "name of %llu bytes in %s is longer than %u bytes", (unsigned long long)len,
                g->where, GGUF_MAX_NAME);
  if ((rc = take(g, (size_t)len, &p))) return rc;
  if (memchr(p, '\0', (size_t)len)) return fail(g, at, "name in %s contains a NUL byte", g->where);
  if (!(*out = malloc((size_t)len + 1))) return VF_ENOMEM;
  memcpy(*out, p, (size_t)len);
  (*out)[len] = '\0';
  return 0;
}

static void note_int(uint32_t type, const uint8_t *p, struct num *n) {
  size_t size = type_size[type];
  uint64_t v = le(p, size);
  bool is_signed = type == GT_I8 || type == GT_I16 || type == GT_I32 || type == GT_I64;
  if (is_signed && size < 8 && (v >> (8 * size - 1))) return; /* negative */
  if (is_signed && size == 8 && v > INT64_MAX) return;
  if (!n->set || v > n->v) n->v = v;
  n->set = true;
}

static int read_value(struct gguf *g, uint32_t type, int depth, struct num *out);

static int read_array(struct gguf *g, int depth, struct num *out) {
  uint64_t at = g->c.pos, count;
  uint32_t et;
  int rc = get_u32(g, &et);
  if (!rc) rc = get_u64(g, &count);
  if (rc) return rc;
  if (et >= GT_COUNT) return fail(g, at, "%s is an array of unknown value type %u", g->where, et);
  if (et == GT_ARRAY && depth >= GGUF_MAX_DEPTH)
    return fail(g, at, "%s nests arrays more than %d deep", g->where, GGUF_MAX_DEPTH);
  /* The smallest encoding of one element bounds the count before anything is walked. */
  uint64_t least = et == GT_STRING ? 8 : et == GT_ARRAY ? 12 : type_size[et];
  if (count > remaining(g) / least)
    return fail(g, at, "array of %llu elements in %s cannot fit in the %llu bytes left",
                (unsigned long long)count, g->where, (unsigned long long)remaining(g));
  if (out && depth == 0) out->count = count;
  if (type_size[et] && !(out && is_int(et))) return skip(g, count * type_size[et]);
  for (uint64_t i = 0; i < count && !rc; i++) rc = read_value(g, et, depth + 1, out);
  return rc;
}

/* Walks one value; integers (and arrays of them) are recorded in out when given. */
static int read_value(struct gguf *g, uint32_t type, int depth, struct num *out) {
  if (type == GT_STRING) {
    uint64_t len;
    int rc = string_length(g, &len);
    return rc ? rc : skip(g, len);
  }
  if (type == GT_ARRAY) return read_array(g, depth, out);
  const uint8_t *p;
  int rc = take(g, type_size[type], &p);
  if (!rc && out && is_int(type)) note_int(type, p, out);
  return rc;
}

/* Where an interesting key's value goes; NULL for the rest. */
static struct num *target(struct gguf *g, const char *key) {
  static const char *const general[] = {"tokenizer.ggml.tokens", "split.no", "split.count",
                                        "split.tensors.count"};
  struct num *slots[] = {&g->tokens, &g->split_no, &g->split_count, &g->split_tensors};
  for (size_t i = 0; i < sizeof general / sizeof *general; i++)
    if (strcmp(key, general[i]) == 0) return slots[i];
  const char *dot = strchr(key, '.');
  if (!dot || (size_t)(dot - key) >= sizeof g->caps[0].prefix || g->n_caps == GGUF_MAX_CAPTURES)
    return NULL;
  for (int k = 0; k < N_ARCH_KEYS; k++) {
    if (strcmp(dot + 1, arch_keys[k].suffix) != 0) continue;
    struct capture *c = &g->caps[g->n_caps++];
    memset(c, 0, sizeof *c);
    memcpy(c->prefix, key, (size_t)(dot - key));
    c->key = (enum arch_key)k;
    return &c->n;
  }
  return NULL;
}

static int read_architecture(struct gguf *g, uint64_t at) {
  uint64_t len;
  const uint8_t *p;
  int rc = string_length(g, &len);
  if (rc) return rc;
  if (len >= sizeof g->arch) return skip(g, len); /* no architecture we know is this long */
  if ((rc = take(g, (size_t)len, &p))) return rc;
  memcpy(g->arch, p, (size_t)len);
  g->arch[len] = '\0';
  if (strlen(g->arch) != len) return fail(g, at, "general.architecture contains a NUL byte");
  return 0;
}

static int read_alignment(struct gguf *g, uint32_t type, uint64_t at) {
  struct num n = {0};
  int rc = is_int(type) ? read_value(g, type, 0, &n) : 0;
  if (rc) return rc;
  if (!n.set || n.v == 0 || (n.v & (n.v - 1)) || n.v > UINT32_MAX)
    return fail(g, at, "general.alignment must be a power of two integer up to 2^31");
  g->alignment = n.v;
  return 0;
}

struct key_at {
  char *key;
  uint64_t at;
};

static int read_kv(struct gguf *g, uint64_t i, struct key_at *k) {
  k->at = g->c.pos;
  snprintf(g->where, sizeof g->where, "metadata entry %llu", (unsigned long long)i);
  int rc = read_name(g, &k->key);
  if (rc) return rc;
  snprintf(g->where, sizeof g->where, "metadata entry %llu ('%.64s')", (unsigned long long)i,
           k->key);
  uint64_t type_at = g->c.pos;
  uint32_t type;
  if ((rc = get_u32(g, &type))) return rc;
  if (type >= GT_COUNT) return fail(g, type_at, "%s has unknown value type %u", g->where, type);
  if (strcmp(k->key, "general.architecture") == 0 && type == GT_STRING)
    return read_architecture(g, k->at);
  if (strcmp(k->key, "general.alignment") == 0) return read_alignment(g, type, k->at);
  return read_value(g, type, 0, target(g, k->key));
}

static int by_key(const void *pa, const void *pb) {
  const struct key_at *a = pa, *b = pb;
  int c = strcmp(a->key, b->key);
  return c ? c : (a->at > b->at) - (a->at < b->at);
}

/* Grows *v to hold n + 1 items of size bytes. Arrays grow as entries are read rather than
 * to the count in the header, so memory follows the bytes actually present. */
static int reserve(void **v, size_t *cap, size_t n, size_t size) {
  if (n < *cap) return 0;
  size_t grown = *cap ? *cap * 2 : 16;
  void *p = realloc(*v, grown * size);
  if (!p) return VF_ENOMEM;
  memset((char *)p + *cap * size, 0, (grown - *cap) * size);
  *v = p;
  *cap = grown;
  return 0;
}

static int read_metadata(struct gguf *g, uint64_t n) {
  struct key_at *keys = NULL;
  size_t cap = 0;
  int rc = 0;
  uint64_t done = 0;
  for (; done < n && !rc; done++) {
    if ((rc = reserve((void **)&keys, &cap, (size_t)done, sizeof *keys))) break;
    rc = read_kv(g, done, &keys[done]);
  }
  if (!rc && n > 1) {
    qsort(keys, (size_t)n, sizeof *keys, by_key);
    for (uint64_t i = 1; i < n && !rc; i++)
      if (strcmp(keys[i].key, keys[i - 1].key) == 0)
        rc = fail(g, keys[i].at, "duplicate metadata key '%s'", keys[i].key);
  }
  for (uint64_t i = 0; i < done; i++) free(keys[i].key);
  free(keys);
  return rc;
}

static int read_dims(struct gguf *g, const char *name, uint32_t nd, uint64_t ne[VF_MAX_DIMS],
                     uint64_t *numel) {
  *numel = 1;
  for (uint32_t j = 0; j < nd; j++) {
    uint64_t at = g->c.pos;
    int rc = get_u64(g, &ne[j]);
    if (rc) return rc;
    if (ne[j] > INT64_MAX)
      return fail(g, at, "tensor '%s': dimension %u is %llu, over INT64_MAX", name, j,
                  (unsigned long long)ne[j]);
    if (__builtin_mul_overflow(*numel, ne[j], numel) || *numel > INT64_MAX)
      return fail(g, at, "tensor '%s': element count overflows 64 bits", name);
  }
  return 0;
}

static int read_type(struct gguf *g, const char *name, uint64_t ne0, enum vf_dtype *out) {
  uint64_t at = g->c.pos, scratch;
  uint32_t id;
  int rc = get_u32(g, &id);
  if (rc) return rc;
  *out = id < sizeof ggml_types / sizeof *ggml_types ? ggml_types[id] : VF_DTYPE_UNKNOWN;
  if (*out == VF_DTYPE_UNKNOWN) return fail(g, at, "tensor '%s': unknown ggml type id %u", name, id);
  /* ggml stores rows as whole blocks. */
  if (vf_dtype_bytes(*out, ne0, &scratch) == VF_EINVAL)
    return fail(g, at, "tensor '%s': row of %llu elements is not a whole number of %s blocks",
                name, (unsigned long long)ne0, vf_dtype_name(*out));
  return 0;
}

/* One tensor info: name, dimensions (ne[0] innermost, reversed here into PyTorch order),
 * type and data offset. */
static int read_tensor_info(struct gguf *g, uint64_t i, struct tinfo *ti, char **name) {
  ti->at = g->c.pos;
  snprintf(g->where, sizeof g->where, "tensor info %llu", (unsigned long long)i);
  int rc = read_name(g, name);
  if (rc) return rc;
  snprintf(g->where, sizeof g->where, "tensor info %llu ('%.64s')", (unsigned long long)i, *name);
  uint32_t nd;
  uint64_t ne[VF_MAX_DIMS] = {1, 1, 1, 1}, numel, at = g->c.pos;
  if ((rc = get_u32(g, &nd))) return rc;
  if (nd > VF_MAX_DIMS)
    return fail(g, at, "tensor '%s' has %u dimensions; at most %d are allowed", *name, nd,
                VF_MAX_DIMS);
  struct vf_tensor t = {.name = *name, .ndim = nd};
  if ((rc = read_dims(g, *name, nd, ne, &numel)) || (rc = read_type(g, *name, ne[0], &t.dtype)))
    return rc;
  if (vf_dtype_bytes(t.dtype, numel, &ti->bytes) != 0)
    return fail(g, ti->at, "tensor '%s': byte size overflows 64 bits", *name);
  at = g->c.pos;
  if ((rc = get_u64(g, &ti->offset))) return rc;
  if (ti->offset % g->alignment)
    return fail(g, at, "tensor '%s': data offset %llu is not a multiple of the alignment %llu",
                *name, (unsigned long long)ti->offset, (unsigned long long)g->alignment);
  for (uint32_t j = 0; j < nd; j++) t.shape[j] = ne[nd - 1 - j];
  t.kind = vf_kind_from_name(*name, &t.layer, &t.expert);
  ti->tensor = g->m->n_tensors;
  return vf_model_add_tensor(g->m, &t);
}

static int by_name(const void *pa, const void *pb) {
  const struct vf_tensor *a = *(const struct vf_tensor *const *)pa;
  const struct vf_tensor *b = *(const struct vf_tensor *const *)pb;
  int c = strcmp(a->name, b->name);
  return c ? c : (a > b) - (a < b);
}

/* Index of a tensor from first on whose name an earlier one already has; SIZE_MAX if none. */
static size_t find_duplicate(const struct vf_model *m, size_t first, int *rc) {
  size_t n = m->n_tensors - first, dup = SIZE_MAX;
  const struct vf_tensor **v = malloc((n + 1) * sizeof *v);
  if (!v) {
    *rc = VF_ENOMEM;
    return SIZE_MAX;
  }
  for (size_t i = 0; i < n; i++) v[i] = &m->tensors[first + i];
  qsort(v, n, sizeof *v, by_name);
  for (size_t i = 1; i < n && dup == SIZE_MAX; i++)
    if (strcmp(v[i]->name, v[i - 1]->name) == 0) dup = (size_t)(v[i] - m->tensors);
  free(v);
  return dup;
}

/* Every tensor's bytes must lie inside the file, after the aligned end of the header. */
static int check_data(struct gguf *g, const struct tinfo *ti, uint64_t n, size_t first) {
  uint64_t start = g->c.pos + (g->alignment - g->c.pos % g->alignment) % g->alignment;
  uint64_t room = start <= g->c.size ? g->c.size - start : 0;
  for (uint64_t i = 0; i < n; i++)
    if (ti[i].offset > room || ti[i].bytes > room - ti[i].offset)
      return fail(g, ti[i].at, "tensor '%s': data [%llu, %llu) runs past the end of the file "
                  "(the data section holds %llu bytes)", g->m->tensors[ti[i].tensor].name,
                  (unsigned long long)ti[i].offset,
                  (unsigned long long)(ti[i].offset + ti[i].bytes), (unsigned long long)room);
  int rc = 0;
  size_t dup = find_duplicate(g->m, first, &rc);
  if (dup != SIZE_MAX)
    return fail(g, ti[dup - first].at, "duplicate tensor name '%s'", g->m->tensors[dup].name);
  return rc;
}

static int read_tensors(struct gguf *g, uint64_t n) {
  struct tinfo *ti = NULL;
  size_t cap = 0, first = g->m->n_tensors;
  int rc = 0;
  for (uint64_t i = 0; i < n && !rc; i++) {
    char *name = NULL;
    if (!(rc = reserve((void **)&ti, &cap, (size_t)i, sizeof *ti)))
      rc = read_tensor_info(g, i, &ti[i], &name);
    free(name);
  }
  if (!rc) rc = check_data(g, ti, n, first);
  free(ti);
  return rc;
}

static int read_preamble(struct gguf *g, uint64_t *n_tensors, uint64_t *n_kv) {
  const uint8_t *p;
  snprintf(g->where, sizeof g->where, "the header");
  int rc = take(g, 4, &p);
  if (rc) return rc;
  if (memcmp(p, "GGUF", 4) != 0)
    return fail(g, 0, "not a GGUF file: magic is %02x %02x %02x %02x, expected 'GGUF'", p[0],
                p[1], p[2], p[3]);
  uint32_t version;
  if ((rc = get_u32(g, &version))) return rc;
  if (version && (version & 0xFFFF) == 0)
    return fail(g, 4, "version 0x%08x looks byte-swapped: big-endian GGUF files are not "
                "supported", version);
  if (version == 1) return fail(g, 4, "GGUF v1 is not supported (it is obsolete); re-convert "
                                "the model with a current llama.cpp");
  if (version != 2 && version != 3)
    return fail(g, 4, "unsupported GGUF version %u (expected 2 or 3)", version);
  if ((rc = get_u64(g, n_tensors)) || (rc = get_u64(g, n_kv))) return rc;
  if (*n_tensors > GGUF_MAX_COUNT)
    return fail(g, 8, "tensor count %llu is implausibly large (over %u)",
                (unsigned long long)*n_tensors, GGUF_MAX_COUNT);
  if (*n_kv > GGUF_MAX_COUNT)
    return fail(g, 16, "metadata count %llu is implausibly large (over %u)",
                (unsigned long long)*n_kv, GGUF_MAX_COUNT);
  /* Counts are bounded by the bytes that could hold them (24 per tensor info, 13 per key)
   * before anything is allocated for them. */
  if (*n_tensors > remaining(g) / 24)
    return fail(g, 8, "tensor count %llu cannot fit in the %llu bytes left",
                (unsigned long long)*n_tensors, (unsigned long long)remaining(g));
  if (*n_kv > (remaining(g) - *n_tensors * 24) / 13)
    return fail(g, 16, "metadata count %llu cannot fit in the %llu bytes left",
                (unsigned long long)*n_kv, (unsigned long long)remaining(g));
  return 0;
}

static int parse(struct gguf *g) {
  uint64_t n_tensors = 0, n_kv = 0;
  int rc = read_preamble(g, &n_tensors, &n_kv);
  if (!rc) rc = read_metadata(g, n_kv);
  if (!rc) rc = read_tensors(g, n_tensors);
  return rc;
}

/* ---- architecture from metadata ---- */

static const struct vf_tensor *find(const struct vf_model *m, const char *name) {
  for (size_t i = 0; i < m->n_tensors; i++)
    if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
  return NULL;
}

static const char *model_type(const struct gguf *g, uint64_t experts) {
  for (size_t i = 0; i < sizeof arch_types / sizeof *arch_types; i++)
    if (strcmp(g->arch, arch_types[i].gguf) == 0)
      return strcmp(g->arch, "llama") == 0 && experts ? "mixtral" : arch_types[i].model_type;
  return NULL;
}

static uint64_t vocab_size(const struct gguf *g, const struct num *from_key) {
  const struct vf_tensor *emb = find(g->m, "token_embd.weight");
  if (emb && emb->ndim == 2) return emb->shape[0];
  if (g->tokens.count) return g->tokens.count;
  return from_key->set ? from_key->v : 0;
}

/* The metadata spelled as the config.json it corresponds to, so config_json.c alone
 * decides each model_type's layout. */
static json_t *as_config(const struct gguf *g) {
  struct num dims[N_ARCH_KEYS] = {{0}};
  for (size_t i = 0; i < g->n_caps; i++)
    if (strcmp(g->caps[i].prefix, g->arch) == 0) dims[g->caps[i].key] = g->caps[i].n;
  const char *type = model_type(g, dims[K_EXPERTS].v);
  if (!type) return NULL;
  json_t *cfg = json_object();
  json_object_set_new(cfg, "model_type", json_string(type));
  for (int k = 0; k < N_ARCH_KEYS; k++)
    if (dims[k].set)
      json_object_set_new(cfg, arch_keys[k].config_key, json_integer((json_int_t)dims[k].v));
  uint64_t vocab = vocab_size(g, &dims[K_VOCAB]);
  if (vocab) json_object_set_new(cfg, "vocab_size", json_integer((json_int_t)vocab));
  json_object_set_new(cfg, "tie_word_embeddings", json_boolean(!find(g->m, "output.weight")));
  /* Falcon's config states its variant with switches: falcon-40b's second layer norm marks
   * the new decoder architecture, one KV head multi-query attention. */
  if (strcmp(type, "falcon") == 0) {
    json_object_set_new(cfg, "new_decoder_architecture",
                        json_boolean(find(g->m, "blk.0.attn_norm_2.weight") != NULL));
    json_object_set_new(cfg, "multi_query",
                        json_boolean(!dims[K_KV_HEADS].set || dims[K_KV_HEADS].v == 1));
  }
  enum vf_dtype main = vf_model_main_dtype(g->m);
  if (main == VF_DTYPE_F32 || main == VF_DTYPE_F16 || main == VF_DTYPE_BF16)
    json_object_set_new(cfg, "torch_dtype", json_string(vf_dtype_name(main)));
  return cfg;
}

/* A GGUF ffn_up that is twice the intermediate size holds gate and up fused (phi3). */
static void mark_fused_gate_up(struct vf_model *m) {
  if (!m->arch.glu) return;
  for (size_t i = 0; i < m->n_tensors; i++) {
    struct vf_tensor *t = &m->tensors[i];
    if (t->kind == VF_KIND_UP && t->ndim == 2 && t->shape[0] == 2 * m->arch.intermediate)
      t->kind = VF_KIND_GATE_UP;
  }
}

/* Fills m->arch when the metadata names a known architecture and its dimensions; a GGUF
 * without them still gives its tensors. */
static int fill_arch(struct gguf *g) {
  json_t *cfg = as_config(g);
  if (!cfg) return 0;
  char *text = json_dumps(cfg, JSON_COMPACT);
  json_decref(cfg);
  if (!text) return VF_ENOMEM;
  struct vf_model tmp;
  vf_model_init(&tmp);
  int rc = vf_model_from_config_json(&tmp, text, strlen(text), g->file, NULL);
  free(text);
  if (rc == 0) {
    g->m->arch = tmp.arch;
    g->m->has_arch = true;
    mark_fused_gate_up(g->m);
  }
  vf_model_cleanup(&tmp);
  return rc == VF_ENOMEM ? rc : 0;
}

/* ---- files and split parts ---- */

static void gguf_init(struct gguf *g, struct vf_model *m, const char *file, struct vf_diag *d) {
  memset(g, 0, sizeof *g);
  g->c.fd = -1;
  g->m = m;
  g->file = file;
  g->d = d;
  g->alignment = GGUF_DEFAULT_ALIGNMENT;
}

int vf_gguf_parse(struct vf_model *m, const uint8_t *buf, size_t len, const char *file,
                  struct vf_diag *d) {
  struct gguf g;
  gguf_init(&g, m, file, d);
  g.c.buf = buf;
  g.c.len = g.c.size = len;
  int rc = parse(&g);
  return rc ? rc : fill_arch(&g);
}

/* Opens path and reads its header; the caller closes g->c.fd and frees g->c.own. */
static int read_file(struct gguf *g, const char *path) {
  g->c.fd = open(path, O_RDONLY | O_CLOEXEC);
  if (g->c.fd < 0)
    return diag_at(g->d, VF_EIO, path, UINT64_MAX, "cannot open: %s", strerror(errno));
  struct stat st;
  if (fstat(g->c.fd, &st) != 0 || !S_ISREG(st.st_mode))
    return diag_at(g->d, VF_EIO, path, UINT64_MAX, "not a regular file");
  g->c.size = (uint64_t)st.st_size;
  return parse(g);
}

static void gguf_close(struct gguf *g) {
  if (g->c.fd >= 0) close(g->c.fd);
  free(g->c.own);
}

/* gguf-split names parts "<prefix>-%05d-of-%05d.gguf" (llama.cpp llama_split_path). */
#define SPLIT_SUFFIX_LEN 20

static int split_prefix(const struct gguf *g, const char *path, uint64_t no, uint64_t count,
                        int *prefix_len) {
  char want[64];
  snprintf(want, sizeof want, "-%05llu-of-%05llu.gguf", (unsigned long long)no + 1,
           (unsigned long long)count);
  size_t n = strlen(path), k = strlen(want);
  if (n < k || strcmp(path + n - k, want) != 0)
    return diag_at(g->d, VF_EFORMAT, path, UINT64_MAX,
                   "part %llu of a %llu-part split model, but the file name does not end "
                   "in '%s'", (unsigned long long)no + 1, (unsigned long long)count, want);
  *prefix_len = (int)(n - k);
  return 0;
}

static int read_part(struct vf_model *m, const char *path, uint64_t no, uint64_t count,
                     struct vf_diag *d) {
  if (!path_is_file(path))
    return diag_at(d, VF_ENOTFOUND, path, UINT64_MAX,
                   "part %llu of %llu of the split model is missing",
                   (unsigned long long)no + 1, (unsigned long long)count);
  struct gguf g;
  gguf_init(&g, m, path, d);
  int rc = read_file(&g, path);
  if (!rc && (g.split_no.v != no || g.split_count.v != count))
    rc = diag_at(d, VF_EFORMAT, path, UINT64_MAX,
                 "split.no/split.count say part %llu of %llu, expected part %llu of %llu",
                 (unsigned long long)g.split_no.v + 1, (unsigned long long)g.split_count.v,
                 (unsigned long long)no + 1, (unsigned long long)count);
  gguf_close(&g);
  return rc;
}

static int read_other_parts(struct gguf *first, const char *path) {
  uint64_t count = first->split_count.v, no = first->split_no.set ? first->split_no.v : 0;
  int prefix = 0, rc = split_prefix(first, path, no, count, &prefix);
  if (rc) return rc;
  if (no != 0)
    return diag_at(first->d, VF_EINVAL, path, UINT64_MAX,
                   "this is part %llu of %llu of a split model; give the first part, "
                   "%.*s-00001-of-%05llu.gguf", (unsigned long long)no + 1,
                   (unsigned long long)count, prefix, path, (unsigned long long)count);
  char part[4096];
  for (uint64_t i = 1; i < count && !rc; i++) {
    snprintf(part, sizeof part, "%.*s-%05llu-of-%05llu.gguf", prefix, path,
             (unsigned long long)i + 1, (unsigned long long)count);
    rc = read_part(first->m, part, i, count, first->d);
  }
  if (rc) return rc;
  size_t dup = find_duplicate(first->m, 0, &rc);
  if (dup != SIZE_MAX)
    return diag_at(first->d, VF_EFORMAT, path, UINT64_MAX,
                   "tensor '%s' appears in more than one part of the split model",
                   first->m->tensors[dup].name);
  if (!rc && first->split_tensors.set && first->split_tensors.v != first->m->n_tensors)
    rc = diag_at(first->d, VF_EFORMAT, path, UINT64_MAX,
                 "split.tensors.count says %llu tensors, the parts hold %zu",
                 (unsigned long long)first->split_tensors.v, first->m->n_tensors);
  return rc;
}

int vf_gguf_read(struct vf_model *m, const char *path, struct vf_diag *d) {
  struct gguf g;
  gguf_init(&g, m, path, d);
  int rc = read_file(&g, path);
  if (!rc && g.split_count.v > 1) rc = read_other_parts(&g, path);
  if (!rc) rc = fill_arch(&g);
  gguf_close(&g);
  return rc;
}

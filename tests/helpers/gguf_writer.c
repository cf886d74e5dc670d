#include "gguf_writer.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void vf_gw_bytes(struct vf_gw *w, const void *p, size_t n) {
  if (w->len + n > w->cap) {
    size_t cap = w->cap ? w->cap : 256;
    while (cap < w->len + n) cap *= 2;
    uint8_t *grown = realloc(w->buf, cap);
    if (!grown) abort();
    w->buf = grown;
    w->cap = cap;
  }
  if (n) memcpy(w->buf + w->len, p, n);
  w->len += n;
}

static void put_le(struct vf_gw *w, uint64_t v, size_t n) {
  uint8_t b[8];
  for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
  vf_gw_bytes(w, b, n);
}

void vf_gw_u32(struct vf_gw *w, uint32_t v) { put_le(w, v, 4); }
void vf_gw_u64(struct vf_gw *w, uint64_t v) { put_le(w, v, 8); }

void vf_gw_str(struct vf_gw *w, const char *s) {
  vf_gw_u64(w, strlen(s));
  vf_gw_bytes(w, s, strlen(s));
}

void vf_gw_header(struct vf_gw *w, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
  vf_gw_bytes(w, "GGUF", 4);
  vf_gw_u32(w, version);
  vf_gw_u64(w, n_tensors);
  vf_gw_u64(w, n_kv);
}

void vf_gw_kv_u32(struct vf_gw *w, const char *key, uint32_t v) {
  vf_gw_str(w, key);
  vf_gw_u32(w, VF_GW_U32);
  vf_gw_u32(w, v);
}

void vf_gw_kv_str(struct vf_gw *w, const char *key, const char *v) {
  vf_gw_str(w, key);
  vf_gw_u32(w, VF_GW_STRING);
  vf_gw_str(w, v);
}

void vf_gw_kv_u32s(struct vf_gw *w, const char *key, const uint32_t *v, size_t n) {
  vf_gw_str(w, key);
  vf_gw_u32(w, VF_GW_ARRAY);
  vf_gw_u32(w, VF_GW_U32);
  vf_gw_u64(w, n);
  for (size_t i = 0; i < n; i++) vf_gw_u32(w, v[i]);
}

void vf_gw_kv_tokens(struct vf_gw *w, const char *key, size_t n) {
  char tok[32];
  vf_gw_str(w, key);
  vf_gw_u32(w, VF_GW_ARRAY);
  vf_gw_u32(w, VF_GW_STRING);
  vf_gw_u64(w, n);
  for (size_t i = 0; i < n; i++) {
    snprintf(tok, sizeof tok, "tok%zu", i);
    vf_gw_str(w, tok);
  }
}

void vf_gw_tensor(struct vf_gw *w, const char *name, uint32_t n_dims, const uint64_t *ne,
                  uint32_t ggml_type, uint64_t offset) {
  vf_gw_str(w, name);
  vf_gw_u32(w, n_dims);
  for (uint32_t i = 0; i < n_dims; i++) vf_gw_u64(w, ne[i]);
  vf_gw_u32(w, ggml_type);
  vf_gw_u64(w, offset);
}

void vf_gw_align(struct vf_gw *w, size_t alignment) {
  static const uint8_t zero[64];
  while (w->len % alignment) vf_gw_bytes(w, zero, 1);
}

int vf_gw_save(const struct vf_gw *w, const char *path, uint64_t data_bytes) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return -1;
  bool ok = write(fd, w->buf, w->len) == (ssize_t)w->len &&
            ftruncate(fd, (off_t)(w->len + data_bytes)) == 0;
  return close(fd) == 0 && ok ? 0 : -1;
}

void vf_gw_free(struct vf_gw *w) {
  free(w->buf);
  memset(w, 0, sizeof *w);
}

/* ---- a small llama model ---- */

struct plan {
  char name[64];
  uint32_t n_dims, type;
  uint64_t ne[2];
};

/* Bytes of a tensor in the few ggml types the tests use (F32, F16, Q8_0). */
static uint64_t type_bytes(uint32_t type, uint64_t numel) {
  if (type == 0) return numel * 4;
  if (type == 1) return numel * 2;
  return numel / 32 * 34;
}

static void add(struct plan *p, size_t *n, uint32_t n_dims, uint64_t ne0, uint64_t ne1,
                uint32_t type, const char *fmt, ...) __attribute__((format(printf, 7, 8)));

static void add(struct plan *p, size_t *n, uint32_t n_dims, uint64_t ne0, uint64_t ne1,
                uint32_t type, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p[*n].name, sizeof p[*n].name, fmt, ap);
  va_end(ap);
  p[*n].n_dims = n_dims;
  p[*n].ne[0] = ne0;
  p[*n].ne[1] = ne1;
  p[*n].type = type;
  (*n)++;
}

/* The tensors of part `part` of `parts`: embeddings first, head last, layers between. */
static size_t plan_llama(const struct vf_gw_llama *m, int part, int parts, struct plan *p) {
  size_t n = 0;
  uint64_t h = m->hidden, f = m->ffn, kv = h / m->heads * m->kv_heads;
  uint32_t t = m->ggml_type;
  if (part == 0) add(p, &n, 2, h, m->vocab, t, "token_embd.weight");
  for (uint32_t l = 0; l < m->layers; l++) {
    if ((int)(l * (uint32_t)parts / m->layers) != part) continue;
    add(p, &n, 1, h, 1, 0, "blk.%u.attn_norm.weight", l);
    add(p, &n, 2, h, h, t, "blk.%u.attn_q.weight", l);
    add(p, &n, 2, h, kv, t, "blk.%u.attn_k.weight", l);
    add(p, &n, 2, h, kv, t, "blk.%u.attn_v.weight", l);
    add(p, &n, 2, h, h, t, "blk.%u.attn_output.weight", l);
    add(p, &n, 1, h, 1, 0, "blk.%u.ffn_norm.weight", l);
    add(p, &n, 2, h, f, t, "blk.%u.ffn_gate.weight", l);
    add(p, &n, 2, h, f, t, "blk.%u.ffn_up.weight", l);
    add(p, &n, 2, f, h, t, "blk.%u.ffn_down.weight", l);
  }
  if (part == parts - 1) {
    add(p, &n, 1, h, 1, 0, "output_norm.weight");
    add(p, &n, 2, h, m->vocab, t, "output.weight");
  }
  return n;
}

static void llama_metadata(struct vf_gw *w, const struct vf_gw_llama *m, size_t n_tensors) {
  bool split = m->split_count > 1, first = !split || m->split_no == 0;
  vf_gw_header(w, 3, n_tensors, (first ? 9 : 0) + (split ? 3 : 0));
  if (first) {
    vf_gw_kv_str(w, "general.architecture", "llama");
    vf_gw_kv_str(w, "general.name", "tiny");
    vf_gw_kv_u32(w, "llama.embedding_length", m->hidden);
    vf_gw_kv_u32(w, "llama.block_count", m->layers);
    vf_gw_kv_u32(w, "llama.feed_forward_length", m->ffn);
    vf_gw_kv_u32(w, "llama.attention.head_count", m->heads);
    vf_gw_kv_u32(w, "llama.attention.head_count_kv", m->kv_heads);
    vf_gw_kv_u32(w, "llama.context_length", m->context);
    vf_gw_kv_tokens(w, "tokenizer.ggml.tokens", m->vocab);
  }
  if (split) {
    vf_gw_kv_u32(w, "split.no", (uint32_t)m->split_no);
    vf_gw_kv_u32(w, "split.count", (uint32_t)m->split_count);
    vf_gw_kv_u32(w, "split.tensors.count", 3 + 9 * m->layers);
  }
}

size_t vf_gw_llama(struct vf_gw *w, const struct vf_gw_llama *m, uint64_t *data_bytes) {
  struct plan *p = calloc(4 + 9 * (size_t)m->layers, sizeof *p);
  if (!p) abort();
  bool split = m->split_count > 1;
  size_t n = plan_llama(m, split ? m->split_no : 0, split ? m->split_count : 1, p);
  llama_metadata(w, m, n);
  uint64_t at = 0;
  for (size_t i = 0; i < n; i++) {
    vf_gw_tensor(w, p[i].name, p[i].n_dims, p[i].ne, p[i].type, at);
    at += type_bytes(p[i].type, p[i].ne[0] * (p[i].n_dims > 1 ? p[i].ne[1] : 1));
    at = (at + 31) / 32 * 32;
  }
  vf_gw_align(w, 32);
  *data_bytes = at;
  free(p);
  return n;
}

/* Synthetic GGUF files, built field by field so tests can also build broken ones. The
 * data region is left as a hole. */
#ifndef VF_TEST_GGUF_WRITER_H
#define VF_TEST_GGUF_WRITER_H

#include <stddef.h>
#include <stdint.h>

/* A growing byte buffer; zero-initialise it. Allocation failures abort. */
struct vf_gw {
  uint8_t *buf;
  size_t len, cap;
};

/* GGUF metadata value types. */
enum {
  VF_GW_U8, VF_GW_I8, VF_GW_U16, VF_GW_I16, VF_GW_U32, VF_GW_I32, VF_GW_F32, VF_GW_BOOL,
  VF_GW_STRING, VF_GW_ARRAY, VF_GW_U64, VF_GW_I64, VF_GW_F64
};

void vf_gw_bytes(struct vf_gw *w, const void *p, size_t n);
void vf_gw_u32(struct vf_gw *w, uint32_t v);
void vf_gw_u64(struct vf_gw *w, uint64_t v);
void vf_gw_str(struct vf_gw *w, const char *s);

/* Magic, version and the two counts. */
void vf_gw_header(struct vf_gw *w, uint32_t version, uint64_t n_tensors, uint64_t n_kv);
void vf_gw_kv_u32(struct vf_gw *w, const char *key, uint32_t v);
void vf_gw_kv_str(struct vf_gw *w, const char *key, const char *v);
/* An array of n uint32 values. */
void vf_gw_kv_u32s(struct vf_gw *w, const char *key, const uint32_t *v, size_t n);
/* A tokenizer-like array of n strings "tok0", "tok1", ... */
void vf_gw_kv_tokens(struct vf_gw *w, const char *key, size_t n);
/* A tensor info; ne[0] is the innermost dimension, as GGUF stores it. */
void vf_gw_tensor(struct vf_gw *w, const char *name, uint32_t n_dims, const uint64_t *ne,
                  uint32_t ggml_type, uint64_t offset);
/* Pads with zeros to a multiple of alignment. */
void vf_gw_align(struct vf_gw *w, size_t alignment);

/* Writes the buffer, then data_bytes of zeros as a hole. 0 or -1. */
int vf_gw_save(const struct vf_gw *w, const char *path, uint64_t data_bytes);
void vf_gw_free(struct vf_gw *w);

/* Dimensions of a small llama-architecture model written by vf_gw_llama. */
struct vf_gw_llama {
  uint32_t hidden, layers, heads, kv_heads, ffn, vocab, context;
  uint32_t ggml_type;   /* of the 2-D weights; norms are F32 */
  int split_no, split_count; /* 0, 0 for a single file; parts hold whole layers */
};

/* A complete llama GGUF (header and tensor infos; *data_bytes: the data region size). With
 * split_count > 1, the part split_no of it: metadata in part 0 only, layers spread over
 * the parts. Returns the number of tensors written. */
size_t vf_gw_llama(struct vf_gw *w, const struct vf_gw_llama *m, uint64_t *data_bytes);

#endif

/* The GGUF reader: tensors in PyTorch order, the architecture from metadata, every value
 * type, split models, GGUF tensor names, and malformed headers with code and byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "diag_check.h"
#include "gguf_writer.h"
#include "tmpdir.h"
#include "vramfit.h"

enum { T_F32 = 0, T_F16 = 1, T_Q8_0 = 8, T_Q4_K = 12 };

static const struct vf_gw_llama tiny = {.hidden = 64, .layers = 2, .heads = 4, .kv_heads = 2,
                                        .ffn = 128, .vocab = 100, .context = 256,
                                        .ggml_type = T_F16};

static const struct vf_tensor *find(const struct vf_model *m, const char *name) {
  for (size_t i = 0; i < m->n_tensors; i++)
    if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
  fail_msg("no tensor %s", name);
  return NULL;
}

/* Saves w (plus a data hole) as dir/name. */
static void save(const struct vf_gw *w, const char *dir, const char *name, uint64_t data,
                 char *path, size_t size) {
  snprintf(path, size, "%s/%s", dir, name);
  assert_int_equal(vf_gw_save(w, path, data), 0);
}

static void read_ok(struct vf_model *m, const char *path) {
  struct vf_diag d;
  vf_diag_clear(&d);
  vf_model_init(m);
  int rc = vf_gguf_read(m, path, &d);
  if (rc) fail_msg("%s: %d %s (byte %llu)", path, rc, d.msg, (unsigned long long)d.offset);
}

/* Reads path expecting failure with code, a message containing needle, at byte
 * (UINT64_MAX: any), naming the file `named`. */
static void read_fails_in(const char *path, const char *named, int code, const char *needle,
                          uint64_t byte) {
  struct vf_model m;
  struct vf_diag d;
  vf_model_init(&m);
  int rc = vf_gguf_read(&m, path, &d);
  vf_model_cleanup(&m);
  char why[1600];
  if (vf_test_diag_mismatch(rc, &d, code, needle, byte, named, why, sizeof why))
    fail_msg("%s: %s", path, why);
}

static void read_fails(const char *path, int code, const char *needle, uint64_t byte) {
  read_fails_in(path, path, code, needle, byte);
}

/* Writes w as a file and expects it to fail at byte. */
static void gguf_fails(const struct vf_gw *w, uint64_t data, const char *needle, uint64_t byte) {
  char dir[4096], path[4200];
  vf_test_tmpdir("gguf_bad", dir, sizeof dir);
  save(w, dir, "bad.gguf", data, path, sizeof path);
  read_fails(path, VF_EFORMAT, needle, byte);
}

/* ---- valid files -------------------------------------------------------------------- */

static void test_llama(void **state) {
  (void)state;
  struct vf_gw w = {0};
  uint64_t data;
  size_t n = vf_gw_llama(&w, &tiny, &data);
  char dir[4096], path[4200];
  vf_test_tmpdir("gguf_llama", dir, sizeof dir);
  save(&w, dir, "tiny.gguf", data, path, sizeof path);
  struct vf_model m;
  read_ok(&m, path);
  assert_int_equal(m.n_tensors, n);
  assert_int_equal(n, 3 + 9 * 2);
  /* GGUF ne = [64, 100] is PyTorch [100, 64]. */
  const struct vf_tensor *emb = find(&m, "token_embd.weight");
  assert_int_equal(emb->ndim, 2);
  assert_int_equal(emb->shape[0], 100);
  assert_int_equal(emb->shape[1], 64);
  assert_int_equal(emb->kind, VF_KIND_EMBEDDING);
  assert_int_equal(emb->dtype, VF_DTYPE_F16);
  const struct vf_tensor *k = find(&m, "blk.1.attn_k.weight");
  assert_int_equal(k->shape[0], 32);
  assert_int_equal(k->shape[1], 64);
  assert_int_equal(k->kind, VF_KIND_K);
  assert_int_equal(k->layer, 1);
  assert_int_equal(find(&m, "blk.0.ffn_down.weight")->shape[0], 64);
  assert_int_equal(find(&m, "blk.0.ffn_norm.weight")->dtype, VF_DTYPE_F32);
  assert_int_equal(find(&m, "output.weight")->kind, VF_KIND_HEAD);

  assert_true(m.has_arch);
  assert_string_equal(m.arch.model_type, "llama");
  assert_int_equal(m.arch.family, VF_FAMILY_LLAMA);
  assert_int_equal(m.arch.hidden, 64);
  assert_int_equal(m.arch.layers, 2);
  assert_int_equal(m.arch.heads, 4);
  assert_int_equal(m.arch.kv_heads, 2);
  assert_int_equal(m.arch.head_dim, 16);
  assert_int_equal(m.arch.intermediate, 128);
  assert_int_equal(m.arch.vocab, 100);
  assert_int_equal(m.arch.max_positions, 256);
  assert_false(m.arch.tied_embeddings);
  assert_int_equal(m.arch.dtype, VF_DTYPE_F16);
  uint64_t layer = 64 * 64 * 2 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64;
  assert_int_equal(vf_model_params(&m), 2 * 100 * 64 + 64 + 2 * layer);
  vf_model_cleanup(&m);

  /* vf_model_load takes a .gguf and keeps its own architecture. */
  struct vf_diag d;
  vf_model_init(&m);
  assert_int_equal(vf_model_load(&m, path, &d), 0);
  assert_true(m.has_arch);
  assert_int_equal(m.n_tensors, n);
  assert_string_equal(m.source, path);
  vf_model_cleanup(&m);
  vf_gw_free(&w);
}

static void test_parse_in_memory(void **state) {
  (void)state;
  struct vf_gw w = {0};
  uint64_t data;
  struct vf_gw_llama q = tiny;
  q.ggml_type = T_Q8_0;
  size_t n = vf_gw_llama(&w, &q, &data);
  size_t len = w.len;
  uint8_t *buf = calloc(1, len + data);
  memcpy(buf, w.buf, len);
  struct vf_model m;
  struct vf_diag d;
  vf_model_init(&m);
  assert_int_equal(vf_gguf_parse(&m, buf, len + data, "mem.gguf", &d), 0);
  assert_int_equal(m.n_tensors, n);
  assert_true(m.has_arch);
  assert_int_equal(m.arch.dtype, VF_DTYPE_F32); /* quantized: the released dtype is unknown */
  uint64_t bytes;
  assert_int_equal(vf_model_bytes(&m, &bytes), 0);
  uint64_t q8 = (2 * 100 * 64 + 2 * (64 * 64 * 2 + 2 * 64 * 32 + 3 * 64 * 128)) / 32 * 34;
  assert_int_equal(bytes, q8 + (1 + 2 * 2) * 64 * 4);
  vf_model_cleanup(&m);
  /* Without the data region the tensors lie past the end. */
  vf_model_init(&m);
  assert_int_equal(vf_gguf_parse(&m, buf, len, "mem.gguf", &d), VF_EFORMAT);
  assert_non_null(strstr(d.msg, "runs past the end of the file"));
  vf_model_cleanup(&m);
  free(buf);
  vf_gw_free(&w);
}

/* Writes one key of every value type, arrays nested, then one tensor: the reader walks
 * them all and still finds the tensor. */
static void test_all_value_types(void **state) {
  (void)state;
  struct vf_gw w = {0};
  vf_gw_header(&w, 2, 1, 14);
  for (uint32_t t = 0; t <= 12; t++) {
    char key[32];
    snprintf(key, sizeof key, "test.type%u", t);
    vf_gw_str(&w, key);
    vf_gw_u32(&w, t);
    static const uint64_t zero = 0;
    static const size_t size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (t == VF_GW_STRING) {
      vf_gw_str(&w, "a string value");
    } else if (t == VF_GW_ARRAY) { /* [[s, s], [s]] */
      vf_gw_u32(&w, VF_GW_ARRAY);
      vf_gw_u64(&w, 2);
      vf_gw_u32(&w, VF_GW_STRING);
      vf_gw_u64(&w, 2);
      vf_gw_str(&w, "x");
      vf_gw_str(&w, "yy");
      vf_gw_u32(&w, VF_GW_STRING);
      vf_gw_u64(&w, 1);
      vf_gw_str(&w, "");
    } else {
      vf_gw_bytes(&w, &zero, size[t]);
    }
  }
  static const float floats[] = {1.0f, 2.0f};
  vf_gw_str(&w, "test.floats");
  vf_gw_u32(&w, VF_GW_ARRAY);
  vf_gw_u32(&w, VF_GW_F32);
  vf_gw_u64(&w, 2);
  vf_gw_bytes(&w, floats, sizeof floats);
  const uint64_t ne[] = {8, 3};
  vf_gw_tensor(&w, "weird.tensor", 2, ne, T_F32, 0);
  vf_gw_align(&w, 32);
  char dir[4096], path[4200];
  vf_test_tmpdir("gguf_types", dir, sizeof dir);
  save(&w, dir, "types.gguf", 96, path, sizeof path);
  struct vf_model m;
  read_ok(&m, path);
  assert_int_equal(m.n_tensors, 1);
  assert_int_equal(m.tensors[0].shape[0], 3);
  assert_int_equal(m.tensors[0].shape[1], 8);
  assert_int_equal(m.tensors[0].kind, VF_KIND_OTHER);
  assert_false(m.has_arch); /* no general.architecture */
  vf_model_cleanup(&m);
  vf_gw_free(&w);
}

/* Metadata as llama.cpp writes it for some models: counts as other integer types, per-layer
 * arrays of KV heads, a custom alignment, no output head (tied), vocabulary from the tokens
 * array, a big tokenizer that spans several read chunks. */
static void test_metadata_variants(void **state) {
  (void)state;
  struct vf_gw w = {0};
  vf_gw_header(&w, 3, 2, 9);
  vf_gw_kv_str(&w, "general.architecture", "qwen2");
  vf_gw_kv_u32(&w, "general.alignment", 64);
  vf_gw_str(&w, "qwen2.embedding_length");
  vf_gw_u32(&w, VF_GW_U64);
  vf_gw_u64(&w, 64);
  vf_gw_str(&w, "qwen2.block_count");
  vf_gw_u32(&w, VF_GW_U16);
  vf_gw_bytes(&w, "\x03\x00", 2);
  vf_gw_str(&w, "qwen2.attention.head_count");
  vf_gw_u32(&w, VF_GW_I32);
  vf_gw_u32(&w, 8);
  static const uint32_t kv[] = {2, 4, 2};
  vf_gw_kv_u32s(&w, "qwen2.attention.head_count_kv", kv, 3);
  vf_gw_kv_u32(&w, "qwen2.feed_forward_length", 96);
  vf_gw_kv_u32(&w, "other.embedding_length", 4096); /* another prefix: ignored */
  vf_gw_kv_tokens(&w, "tokenizer.ggml.tokens", 150000);
  const uint64_t norm[] = {64}, q[] = {64, 64};
  vf_gw_tensor(&w, "blk.0.attn_norm.weight", 1, norm, T_F32, 0);
  vf_gw_tensor(&w, "blk.0.attn_q.weight", 2, q, T_F16, 256);
  vf_gw_align(&w, 64);
  char dir[4096], path[4200];
  vf_test_tmpdir("gguf_variants", dir, sizeof dir);
  save(&w, dir, "q.gguf", 256 + 64 * 64 * 2, path, sizeof path);
  assert_true(w.len > (2u << 20));
  struct vf_model m;
  read_ok(&m, path);
  assert_int_equal(m.n_tensors, 2);
  assert_true(m.has_arch);
  assert_string_equal(m.arch.model_type, "qwen2");
  assert_int_equal(m.arch.hidden, 64);
  assert_int_equal(m.arch.layers, 3);
  assert_int_equal(m.arch.heads, 8);
  assert_int_equal(m.arch.kv_heads, 4);
  assert_int_equal(m.arch.intermediate, 96);
  assert_int_equal(m.arch.vocab, 150000);
  assert_true(m.arch.tied_embeddings);
  assert_true(m.arch.qkv_bias); /* qwen2's layout */
  vf_model_cleanup(&m);
  vf_gw_free(&w);
}

/* An unknown architecture, or one without its dimensions, still gives its tensors. */
static void test_unknown_architecture(void **state) {
  (void)state;
  struct vf_gw w = {0};
  vf_gw_header(&w, 3, 1, 2);
  vf_gw_kv_str(&w, "general.architecture", "mamba");
  vf_gw_kv_u32(&w, "mamba.embedding_length", 64);
  const uint64_t ne[] = {64};
  vf_gw_tensor(&w, "blk.0.ssm_d", 1, ne, T_F32, 0);
  vf_gw_align(&w, 32);
  char dir[4096], path[4200];
  vf_test_tmpdir("gguf_mamba", dir, sizeof dir);
  save(&w, dir, "m.gguf", 256, path, sizeof path);
  struct vf_model m;
  read_ok(&m, path);
  assert_false(m.has_arch);
  assert_int_equal(m.n_tensors, 1);
  vf_model_cleanup(&m);
  vf_gw_free(&w);
}

/* Mixtral is llama with experts; phi3 fuses gate and up into ffn_up. */
static void test_moe_and_fused(void **state) {
  (void)state;
  struct vf_gw w = {0};
  vf_gw_header(&w, 3, 3, 8);
  vf_gw_kv_str(&w, "general.architecture", "llama");
  vf_gw_kv_u32(&w, "llama.embedding_length", 64);
  vf_gw_kv_u32(&w, "llama.block_count", 1);
  vf_gw_kv_u32(&w, "llama.attention.head_count", 4);
  vf_gw_kv_u32(&w, "llama.feed_forward_length", 32);
  vf_gw_kv_u32(&w, "llama.expert_count", 8);
  vf_gw_kv_u32(&w, "llama.expert_used_count", 2);
  vf_gw_kv_u32(&w, "llama.vocab_size", 50);
  const uint64_t exps[] = {64, 32, 8}, inp[] = {64, 8}, emb[] = {64, 50};
  vf_gw_tensor(&w, "blk.0.ffn_gate_exps.weight", 3, exps, T_F16, 0);
  vf_gw_tensor(&w, "blk.0.ffn_gate_inp.weight", 2, inp, T_F32, 32768);
  vf_gw_tensor(&w, "token_embd.weight", 2, emb, T_F16, 32768 + 2048);
  vf_gw_align(&w, 32);
  char dir[4096], path[4200];
  vf_test_tmpdir("gguf_moe", dir, sizeof dir);
  save(&w, dir, "moe.gguf", 32768 + 2048 + 6400, path, sizeof path);
  struct vf_model m;
  read_ok(&m, path);
  assert_string_equal(m.arch.model_type, "mixtral");
  assert_int_equal(m.arch.experts, 8);
  assert_int_equal(m.arch.experts_per_token, 2);
  assert_int_equal(m.arch.vocab, 50);
  const struct vf_tensor *g = find(&m, "blk.0.ffn_gate_exps.weight");
  assert_int_equal(g->ndim, 3);
  assert_int_equal(g->shape[0], 8);
  assert_int_equal(g->shape[2], 64);
  assert_int_equal(g->kind, VF_KIND_GATE);
  assert_int_equal(find(&m, "blk.0.ffn_gate_inp.weight")->kind, VF_KIND_ROUTER);
  vf_model_cleanup(&m);
  vf_gw_free(&w);

  struct vf_gw p = {0};
  vf_gw_header(&p, 3, 2, 6);
  vf_gw_kv_str(&p, "general.architecture", "phi3");
  vf_gw_kv_u32(&p, "phi3.embedding_length", 64);
  vf_gw_kv_u32(&p, "phi3.block_count", 1);
  vf_gw_kv_u32(&p, "phi3.attention.head_count", 4);
  vf_gw_kv_u32(&p, "phi3.feed_forward_length", 32);
  vf_gw_kv_u32(&p, "phi3.vocab_size", 50);
  const uint64_t up[] = {64, 64}, down[] = {32, 64};
  vf_gw_tensor(&p, "blk.0.ffn_up.weight", 2, up, T_F16, 0);
  vf_gw_tensor(&p, "blk.0.ffn_down.weight", 2, down, T_F16, 8192);
  vf_gw_align(&p, 32);
  save(&p, dir, "phi3.gguf", 8192 + 4096, path, sizeof path);
  read_ok(&m, path);
  assert_string_equal(m.arch.model_type, "phi3");
  assert_int_equal(find(&m, "blk.0.ffn_up.weight")->kind, VF_KIND_GATE_UP);
  uint64_t by_kind[VF_KIND_PUBLIC_COUNT];
  vf_model_by_kind(&m, by_kind);
  assert_int_equal(by_kind[VF_KIND_GATE], 2048);
  assert_int_equal(by_kind[VF_KIND_UP], 2048);
  vf_model_cleanup(&m);
  vf_gw_free(&p);
}

/* ---- split models ------------------------------------------------------------------- */

static void write_split(const char *dir, int parts, char paths[][4200]) {
  for (int i = 0; i < parts; i++) {
    struct vf_gw w = {0};
    struct vf_gw_llama part = tiny;
    part.layers = 4;
    part.split_no = i;
    part.split_count = parts;
    uint64_t data;
    vf_gw_llama(&w, &part, &data);
    char name[64];
    snprintf(name, sizeof name, "tiny-%05d-of-%05d.gguf", i + 1, parts);
    save(&w, dir, name, data, paths[i], 4200);
    vf_gw_free(&w);
  }
}

static void test_split(void **state) {
  (void)state;
  char dir[4096], paths[3][4200];
  vf_test_tmpdir("gguf_split", dir, sizeof dir);
  write_split(dir, 3, paths);
  struct vf_model m;
  read_ok(&m, paths[0]);
  assert_int_equal(m.n_tensors, 3 + 9 * 4);
  assert_true(m.has_arch);
  assert_int_equal(m.arch.layers, 4);
  assert_false(m.arch.tied_embeddings); /* output.weight is in the last part */
  assert_string_equal(m.tensors[0].name, "token_embd.weight");
  assert_string_equal(m.tensors[m.n_tensors - 1].name, "output.weight");
  vf_model_cleanup(&m);

  read_fails(paths[1], VF_EINVAL, "this is part 2 of 3 of a split model; give the first part",
             UINT64_MAX);
  remove(paths[2]);
  read_fails_in(paths[0], paths[2], VF_ENOTFOUND, "part 3 of 3 of the split model is missing",
                UINT64_MAX);
}

static void test_split_bad_name(void **state) {
  (void)state;
  char dir[4096], paths[2][4200], renamed[4200];
  vf_test_tmpdir("gguf_split_name", dir, sizeof dir);
  write_split(dir, 2, paths);
  snprintf(renamed, sizeof renamed, "%s/first.gguf", dir);
  assert_int_equal(rename(paths[0], renamed), 0);
  read_fails(renamed, VF_EFORMAT, "does not end in '-00001-of-00002.gguf'", UINT64_MAX);
  /* A part that claims another position. */
  assert_int_equal(rename(renamed, paths[0]), 0);
  char third[2][4200], dir3[4096];
  vf_test_tmpdir("gguf_split_swap", dir3, sizeof dir3);
  write_split(dir3, 2, third);
  char wrong[4200];
  snprintf(wrong, sizeof wrong, "%s/tiny-00002-of-00002.gguf", dir);
  assert_int_equal(rename(third[0], wrong), 0);
  read_fails_in(paths[0], wrong, VF_EFORMAT,
                "split.no/split.count say part 1 of 2, expected part 2 of 2", UINT64_MAX);
}

/* ---- GGUF tensor names -------------------------------------------------------------- */

static void test_gguf_names(void **state) {
  (void)state;
  static const struct {
    const char *name;
    enum vf_kind kind;
    int32_t layer;
  } cases[] = {
      {"token_embd.weight", VF_KIND_EMBEDDING, -1},
      {"position_embd.weight", VF_KIND_EMBEDDING, -1},
      {"token_types.weight", VF_KIND_EMBEDDING, -1},
      {"token_embd_norm.weight", VF_KIND_NORM, -1},
      {"output_norm.weight", VF_KIND_NORM, -1},
      {"output.weight", VF_KIND_HEAD, -1},
      {"blk.3.attn_norm.weight", VF_KIND_NORM, 3},
      {"blk.3.attn_q.weight", VF_KIND_Q, 3},
      {"blk.3.attn_k.weight", VF_KIND_K, 3},
      {"blk.3.attn_v.bias", VF_KIND_V, 3},
      {"blk.3.attn_qkv.weight", VF_KIND_QKV, 3},
      {"blk.3.attn_output.weight", VF_KIND_O, 3},
      {"blk.3.attn_q_norm.weight", VF_KIND_NORM, 3},
      {"blk.12.ffn_gate.weight", VF_KIND_GATE, 12},
      {"blk.12.ffn_up.weight", VF_KIND_UP, 12},
      {"blk.12.ffn_down.weight", VF_KIND_DOWN, 12},
      {"blk.12.ffn_gate_inp.weight", VF_KIND_ROUTER, 12},
      {"blk.12.ffn_gate_exps.weight", VF_KIND_GATE, 12},
      {"blk.12.ffn_up_exps.weight", VF_KIND_UP, 12},
      {"blk.12.ffn_down_exps.weight", VF_KIND_DOWN, 12},
      {"blk.12.ffn_up_shexp.weight", VF_KIND_UP, 12},
      {"blk.0.layer_output_norm.weight", VF_KIND_NORM, 0},
      {"rope_freqs.weight", VF_KIND_OTHER, -1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int32_t layer, expert;
    enum vf_kind k = vf_kind_from_name(cases[i].name, &layer, &expert);
    if (k != cases[i].kind || layer != cases[i].layer)
      fail_msg("%s: kind %s layer %d, want %s layer %d", cases[i].name, vf_kind_name(k), layer,
               vf_kind_name(cases[i].kind), cases[i].layer);
  }
}

/* ---- malformed files ---------------------------------------------------------------- */

static void test_bad_magic_and_version(void **state) {
  (void)state;
  struct vf_gw w = {0};
  vf_gw_bytes(&w, "GGML", 4);
  vf_gw_u32(&w, 3);
  vf_gw_u64(&w, 0);
  vf_gw_u64(&w, 0);
  gguf_fails(&w, 0, "not a GGUF file: magic is 47 47 4d 4c, expected 'GGUF'", 0);
  vf_gw_free(&w);

  static const struct {
    uint32_t version;
    const char *needle;
  } versions[] = {
      {1, "GGUF v1 is not supported"},
      {4, "unsupported GGUF version 4 (expected 2 or 3)"},
      {0, "unsupported GGUF version 0"},
      {0x03000000, "version 0x03000000 looks byte-swapped: big-endian GGUF files are not supported"},
  };
  for (size_t i = 0; i < sizeof versions / sizeof *versions; i++) {
    vf_gw_header(&w, versions[i].version, 0, 0);
    gguf_fails(&w, 0, versions[i].needle, 4);
    vf_gw_free(&w);
  }
  vf_gw_bytes(&w, "GGU", 3);
  gguf_fails(&w, 0, "file ends inside the header (4 more bytes needed, 3 left)", 0);
  vf_gw_free(&w);
}

static void test_absurd_counts(void **state) {
  (void)state;
  struct vf_gw w = {0};
  vf_gw_header(&w, 3, UINT64_MAX, 0);
  gguf_fails(&w, 0, "tensor count 18446744073709551615 is implausibly large", 8);
  vf_gw_free(&w);
  vf_gw_header(&w, 3, 1000, 0);
  gguf_fails(&w, 0, "tensor count 1000 cannot fit in the 0 bytes left", 8);
  vf_gw_free(&w);
  vf_gw_header(&w, 3, 0, 1ull << 40);
  gguf_fails(&w, 0, "metadata count 1099511627776 is implausibly large", 16);
  vf_gw_free(&w);
  vf_gw_header(&w, 3, 0, 2);
  vf_gw_kv_u32(&w, "a", 1);
  gguf_fails(&w, 0, "metadata count 2 cannot fit in the 17 bytes left", 16);
  vf_gw_free(&w);
  /* Counts that fit in a large zero-filled (sparse) file: the zeros read as empty names,
   * and the second one is a duplicate. */
  vf_gw_header(&w, 3, 1000, 0);
  gguf_fails(&w, 1ull << 36, "duplicate tensor name ''", 24 + 24);
  vf_gw_free(&w);
  /* An array count that the file cannot hold. */
  vf_gw_header(&w, 3, 0, 1);
  vf_gw_str(&w, "tokenizer.ggml.tokens");
  vf_gw_u32(&w, VF_GW_ARRAY);
  size_t at = w.len;
  vf_gw_u32(&w, VF_GW_STRING);
  vf_gw_u64(&w, 1ull << 60);
  gguf_fails(&w, 0, "array of 1152921504606846976 elements in metadata entry 0 "
             "('tokenizer.ggml.tokens') cannot fit", at);
  vf_gw_free(&w);
}

static void test_string_past_end(void **state) {
  (void)state;
  struct vf_gw w = {0};
  vf_gw_header(&w, 3, 0, 1);
  size_t at = w.len;
  vf_gw_u64(&w, 1000);
  vf_gw_bytes(&w, "general.name", 12);
  gguf_fails(&w, 0, "string length 1000 in metadata entry 0 runs past the end of the file "
             "(12 bytes left)", at);
  vf_gw_free(&w);
  vf_gw_header(&w, 3, 0, 1);
  vf_gw_str(&w, "general.name");
  vf_gw_u32(&w, VF_GW_STRING);
  at = w.len;
  vf_gw_u64(&w, UINT64_MAX);
  gguf_fails(&w, 0, "string length 18446744073709551615 in metadata entry 0 ('general.name') "
             "runs past the end", at);
  vf_gw_free(&w);
  vf_gw_header(&w, 3, 0, 1);
  vf_gw_str(&w, "general.name");
  vf_gw_u32(&w, VF_GW_STRING);
  vf_gw_u64(&w, 4);
  vf_gw_bytes(&w, "ab", 2);
  gguf_fails(&w, 0, "runs past the end of the file (2 bytes left)", UINT64_MAX);
  vf_gw_free(&w);
}

static void test_bad_metadata(void **state) {
  (void)state;
  struct vf_gw w = {0};
  vf_gw_header(&w, 3, 0, 1);
  vf_gw_str(&w, "x");
  size_t at = w.len;
  vf_gw_u32(&w, 13);
  gguf_fails(&w, 0, "metadata entry 0 ('x') has unknown value type 13", at);
  vf_gw_free(&w);

  vf_gw_header(&w, 3, 0, 2);
  vf_gw_kv_u32(&w, "a.b", 1);
  at = w.len;
  vf_gw_kv_u32(&w, "a.b", 2);
  gguf_fails(&w, 0, "duplicate metadata key 'a.b'", at);
  vf_gw_free(&w);

  vf_gw_header(&w, 3, 0, 1);
  at = w.len;
  vf_gw_kv_u32(&w, "general.alignment", 48);
  gguf_fails(&w, 0, "general.alignment must be a power of two", at);
  vf_gw_free(&w);

  vf_gw_header(&w, 3, 0, 1);
  vf_gw_str(&w, "deep");
  vf_gw_u32(&w, VF_GW_ARRAY);
  for (int i = 0; i < 9; i++) {
    vf_gw_u32(&w, VF_GW_ARRAY);
    vf_gw_u64(&w, 1);
  }
  vf_gw_u32(&w, VF_GW_U8);
  vf_gw_u64(&w, 0);
  gguf_fails(&w, 0, "nests arrays more than 8 deep", UINT64_MAX);
  vf_gw_free(&w);

  vf_gw_header(&w, 3, 0, 1);
  vf_gw_str(&w, "x");
  vf_gw_u32(&w, VF_GW_ARRAY);
  vf_gw_u32(&w, 99);
  vf_gw_u64(&w, 0);
  gguf_fails(&w, 0, "is an array of unknown value type 99", UINT64_MAX);
  vf_gw_free(&w);
}

/* One tensor info after an empty metadata section. */
static void one_tensor(struct vf_gw *w, const char *name, uint32_t nd, const uint64_t *ne,
                       uint32_t type, uint64_t offset, size_t *at) {
  vf_gw_header(w, 3, 1, 0);
  *at = w->len;
  vf_gw_tensor(w, name, nd, ne, type, offset);
  vf_gw_align(w, 32);
}

static void test_bad_tensor_infos(void **state) {
  (void)state;
  struct vf_gw w = {0};
  size_t at;
  const uint64_t five[] = {1, 1, 1, 1, 1}, big[] = {1ull << 32, 1ull << 32}, row[] = {48, 2};
  const uint64_t ok[] = {32};
  one_tensor(&w, "t", 5, five, T_F32, 0, &at);
  gguf_fails(&w, 64, "tensor 't' has 5 dimensions; at most 4 are allowed", at + 9);
  vf_gw_free(&w);
  one_tensor(&w, "t", 2, big, T_F32, 0, &at);
  gguf_fails(&w, 0, "tensor 't': element count overflows 64 bits", at + 9 + 4 + 8);
  vf_gw_free(&w);
  one_tensor(&w, "t", 1, ok, 4, 0, &at);
  gguf_fails(&w, 128, "tensor 't': unknown ggml type id 4", at + 9 + 4 + 8);
  vf_gw_free(&w);
  one_tensor(&w, "t", 1, ok, 1000, 0, &at);
  gguf_fails(&w, 128, "unknown ggml type id 1000", UINT64_MAX);
  vf_gw_free(&w);
  one_tensor(&w, "t", 2, row, T_Q8_0, 0, &at);
  gguf_fails(&w, 128, "tensor 't': row of 48 elements is not a whole number of Q8_0 blocks",
             UINT64_MAX);
  vf_gw_free(&w);
  one_tensor(&w, "t", 1, ok, T_F32, 16, &at);
  gguf_fails(&w, 256, "tensor 't': data offset 16 is not a multiple of the alignment 32",
             at + 9 + 4 + 8 + 4);
  vf_gw_free(&w);
  one_tensor(&w, "t", 1, ok, T_F32, 0, &at);
  gguf_fails(&w, 127, "tensor 't': data [0, 128) runs past the end of the file (the data "
             "section holds 127 bytes)", at);
  vf_gw_free(&w);
  one_tensor(&w, "", 1, ok, T_Q4_K, 0, &at);
  gguf_fails(&w, 0, "row of 32 elements is not a whole number of Q4_K blocks", UINT64_MAX);
  vf_gw_free(&w);

  vf_gw_header(&w, 3, 2, 0);
  vf_gw_tensor(&w, "same", 1, ok, T_F32, 0);
  at = w.len;
  vf_gw_tensor(&w, "same", 1, ok, T_F32, 128);
  vf_gw_align(&w, 32);
  gguf_fails(&w, 256, "duplicate tensor name 'same'", at);
  vf_gw_free(&w);

  vf_gw_header(&w, 3, 1, 0);
  vf_gw_str(&w, "cut_tensor");
  vf_gw_u32(&w, 2);
  vf_gw_u64(&w, 4);
  gguf_fails(&w, 0, "file ends inside tensor info 0 ('cut_tensor') (8 more bytes needed, 0 left)",
             w.len);
  vf_gw_free(&w);
}

/* A CLI-sized failure: vf_model_load's message names the file and the byte. */
static void test_load_reports_position(void **state) {
  (void)state;
  struct vf_gw w = {0};
  vf_gw_header(&w, 1, 0, 0);
  char dir[4096], path[4200];
  vf_test_tmpdir("gguf_load_bad", dir, sizeof dir);
  save(&w, dir, "old.gguf", 0, path, sizeof path);
  struct vf_model m;
  struct vf_diag d;
  vf_model_init(&m);
  assert_int_equal(vf_model_load(&m, path, &d), VF_EFORMAT);
  char line[1200], want[4400];
  vf_diag_format(&d, line, sizeof line);
  snprintf(want, sizeof want, "%s: byte 4: GGUF v1 is not supported", path);
  assert_non_null(strstr(line, want));
  vf_model_cleanup(&m);
  vf_gw_free(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_llama),
      cmocka_unit_test(test_parse_in_memory),
      cmocka_unit_test(test_all_value_types),
      cmocka_unit_test(test_metadata_variants),
      cmocka_unit_test(test_unknown_architecture),
      cmocka_unit_test(test_moe_and_fused),
      cmocka_unit_test(test_split),
      cmocka_unit_test(test_split_bad_name),
      cmocka_unit_test(test_gguf_names),
      cmocka_unit_test(test_bad_magic_and_version),
      cmocka_unit_test(test_absurd_counts),
      cmocka_unit_test(test_string_past_end),
      cmocka_unit_test(test_bad_metadata),
      cmocka_unit_test(test_bad_tensor_infos),
      cmocka_unit_test(test_load_reports_position),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

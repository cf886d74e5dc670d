/* The safetensors reader: single files, sharded indexes, checkpoint adoption, and every
 * malformed header the reference reader rejects, each with its code, file and byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "diag_check.h"
#include "st_writer.h"
#include "tmpdir.h"
#include "vramfit.h"

static const struct vf_tensor small[] = {
    {.name = "model.embed_tokens.weight", .ndim = 2, .shape = {16, 8}, .dtype = VF_DTYPE_BF16},
    {.name = "model.layers.0.self_attn.q_proj.weight", .ndim = 2, .shape = {8, 8},
     .dtype = VF_DTYPE_BF16},
    {.name = "model.layers.0.input_layernorm.weight", .ndim = 1, .shape = {8},
     .dtype = VF_DTYPE_F32},
    {.name = "model.norm.weight", .ndim = 1, .shape = {8}, .dtype = VF_DTYPE_F32},
};
#define N_SMALL (sizeof small / sizeof *small)

static const struct vf_tensor *find(const struct vf_model *m, const char *name) {
  for (size_t i = 0; i < m->n_tensors; i++)
    if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
  fail_msg("no tensor %s", name);
  return NULL;
}

static void read_ok(struct vf_model *m, const char *path,
                    int (*reader)(struct vf_model *, const char *, struct vf_diag *)) {
  struct vf_diag d;
  vf_diag_clear(&d);
  vf_model_init(m);
  int rc = reader(m, path, &d);
  if (rc) fail_msg("%s: %d %s (byte %llu)", path, rc, d.msg, (unsigned long long)d.offset);
}

/* Reads path expecting failure with code, a message containing needle, at byte
 * (UINT64_MAX: any), naming path. */
static void read_fails(const char *path, int (*reader)(struct vf_model *, const char *, struct vf_diag *),
                       int code, const char *needle, uint64_t byte) {
  struct vf_model m;
  struct vf_diag d;
  vf_model_init(&m);
  int rc = reader(&m, path, &d);
  vf_model_cleanup(&m);
  char why[1600];
  if (vf_test_diag_mismatch(rc, &d, code, needle, byte, path, why, sizeof why))
    fail_msg("%s: %s", path, why);
}

/* Writes header over data_bytes of zeros as <test>/x.safetensors; its path in path. */
static void raw_file(const char *test, const char *header, uint64_t data_bytes, char *path,
                     size_t size) {
  char dir[4096];
  vf_test_tmpdir(test, dir, sizeof dir);
  snprintf(path, size, "%s/x.safetensors", dir);
  assert_int_equal(vf_st_write_raw(path, header, data_bytes), 0);
}

/* ---- valid files -------------------------------------------------------------------- */

static void test_single_file(void **state) {
  (void)state;
  char dir[4096], path[4200];
  vf_test_tmpdir("st_single", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  assert_int_equal(vf_st_write(path, small, N_SMALL), 0);
  struct vf_model m;
  read_ok(&m, path, vf_safetensors_read);
  assert_int_equal(m.n_tensors, N_SMALL);
  for (size_t i = 0; i < N_SMALL; i++) assert_string_equal(m.tensors[i].name, small[i].name);
  const struct vf_tensor *q = find(&m, "model.layers.0.self_attn.q_proj.weight");
  assert_int_equal(q->kind, VF_KIND_Q);
  assert_int_equal(q->layer, 0);
  assert_int_equal(q->expert, -1);
  assert_int_equal(q->dtype, VF_DTYPE_BF16);
  assert_int_equal(find(&m, "model.embed_tokens.weight")->kind, VF_KIND_EMBEDDING);
  assert_int_equal(find(&m, "model.norm.weight")->layer, -1);
  assert_int_equal(vf_model_params(&m), 16 * 8 + 64 + 8 + 8);
  uint64_t bytes;
  assert_int_equal(vf_model_bytes(&m, &bytes), 0);
  assert_int_equal(bytes, (16 * 8 + 64) * 2 + 16 * 4);
  assert_false(m.has_arch);
  vf_model_cleanup(&m);
}

/* Tensors come out in data-offset order whatever the key order in the header. */
static void test_offset_order(void **state) {
  (void)state;
  const char *header =
      "{\"z\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[16,24]},"
      "\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[8,16]},"
      "\"__metadata__\":{\"format\":\"pt\"}}";
  char path[4200];
  raw_file("st_order", header, 24, path, sizeof path);
  struct vf_model m;
  read_ok(&m, path, vf_safetensors_read);
  assert_int_equal(m.n_tensors, 3);
  assert_string_equal(m.tensors[0].name, "z");
  assert_string_equal(m.tensors[1].name, "a");
  assert_string_equal(m.tensors[2].name, "b");
  vf_model_cleanup(&m);
}

/* Scalars, empty tensors, padding and more than four dimensions. */
static void test_shapes(void **state) {
  (void)state;
  const char *header =
      "{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
      "\"e\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[4,4]},"
      "\"c\":{\"dtype\":\"BOOL\",\"shape\":[2,3,1,2,5],\"data_offsets\":[4,64]},"
      "\"f\":{\"dtype\":\"F4\",\"shape\":[4],\"data_offsets\":[64,66]}}        ";
  char path[4200];
  raw_file("st_shapes", header, 66, path, sizeof path);
  struct vf_model m;
  read_ok(&m, path, vf_safetensors_read);
  assert_int_equal(m.n_tensors, 4);
  const struct vf_tensor *s = find(&m, "s"), *e = find(&m, "e"), *c = find(&m, "c");
  assert_int_equal(s->ndim, 0);
  assert_int_equal(vf_tensor_numel(s), 1);
  assert_int_equal(vf_tensor_numel(e), 0);
  assert_int_equal(c->ndim, 4);
  assert_int_equal(c->shape[0], 6);
  assert_int_equal(c->shape[3], 5);
  assert_int_equal(vf_tensor_numel(c), 60);
  assert_int_equal(find(&m, "f")->dtype, VF_DTYPE_F4);
  vf_model_cleanup(&m);
}

/* The in-memory parser, with the file size unknown (0) and known. */
static void test_parse_in_memory(void **state) {
  (void)state;
  uint64_t data;
  char *header = vf_st_header(small, N_SMALL, &data);
  size_t n = strlen(header);
  uint8_t *buf = malloc(8 + n);
  for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
  memcpy(buf + 8, header, n);
  struct vf_model m;
  struct vf_diag d;
  vf_model_init(&m);
  assert_int_equal(vf_safetensors_parse(&m, buf, 8 + n, 0, "mem", &d), 0);
  assert_int_equal(m.n_tensors, N_SMALL);
  vf_model_cleanup(&m);
  vf_model_init(&m);
  assert_int_equal(vf_safetensors_parse(&m, buf, 8 + n, 8 + n + data, "mem", &d), 0);
  vf_model_cleanup(&m);
  vf_model_init(&m);
  assert_int_equal(vf_safetensors_parse(&m, buf, 8 + n, 8 + n + data + 1, "mem", &d), VF_EFORMAT);
  assert_non_null(strstr(d.msg, "tensor data ends at byte"));
  vf_model_cleanup(&m);
  free(buf);
  free(header);
}

/* ---- malformed files ---------------------------------------------------------------- */

/* Writes header over data_bytes of zeros, expects the error at the key `at` names (the
 * header start for NULL). */
static void header_fails(const char *header, uint64_t data_bytes, const char *needle,
                         const char *at) {
  char path[4200];
  raw_file("st_bad", header, data_bytes, path, sizeof path);
  uint64_t byte = 8;
  if (at) {
    char key[64];
    snprintf(key, sizeof key, "\"%s\"", at);
    byte = 8 + (uint64_t)(strstr(header, key) - header);
  }
  read_fails(path, vf_safetensors_read, VF_EFORMAT, needle, byte);
}

static void bytes_fail(const void *bytes, size_t len, const char *needle, uint64_t byte) {
  char dir[4096], path[4200];
  vf_test_tmpdir("st_bytes", dir, sizeof dir);
  vf_test_write(dir, "bad.safetensors", bytes, len, path, sizeof path);
  read_fails(path, vf_safetensors_read, VF_EFORMAT, needle, byte);
}

static void test_truncated(void **state) {
  (void)state;
  bytes_fail("\x10\0\0\0\0", 5, "too short for the 8-byte header length", 0);
  bytes_fail("", 0, "too short", 0);
}

static void test_length_past_end(void **state) {
  (void)state;
  static const char file[] = "\xe8\x03\0\0\0\0\0\0{\"a\":1}";
  bytes_fail(file, sizeof file - 1, "header length 1000 runs past the end of the file (15 bytes)", 0);
}

static void test_length_over_limit(void **state) {
  (void)state;
  /* 100,000,001 = 0x05F5E101 */
  static const char file[] = "\x01\xe1\xf5\x05\0\0\0\0{}";
  bytes_fail(file, sizeof file - 1, "header length 100000001 exceeds the 100000000-byte limit", 0);
  static const char huge[] = "\xff\xff\xff\xff\xff\xff\xff\xff{}";
  bytes_fail(huge, sizeof huge - 1, "exceeds", 0);
}

static void test_not_an_object(void **state) {
  (void)state;
  header_fails("[1, 2]", 0, "does not start with '{'", NULL);
  header_fails(" {}", 0, "does not start with '{'", NULL);
}

static void test_invalid_json(void **state) {
  (void)state;
  /* A comma is missing before "b": jansson stops at the end of that token, on line 2. */
  const char *header = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}\n \"b\":{}}";
  char path[4200];
  raw_file("st_json", header, 4, path, sizeof path);
  uint64_t at_b = 8 + (uint64_t)(strchr(header, '\n') - header) + 4;
  read_fails(path, vf_safetensors_read, VF_EFORMAT, "invalid JSON in the header (line 2", at_b);
  assert_int_equal(vf_st_write_raw(path, "{\"a\":{}, \"a\":{}}", 0), 0);
  read_fails(path, vf_safetensors_read, VF_EFORMAT, "duplicate object key", UINT64_MAX);
}

static void test_overlap(void **state) {
  (void)state;
  header_fails("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               12, "tensor 'b': data_offsets [4, 12] overlap the previous tensor 'a' ending at 8",
               "b");
}

static void test_hole(void **state) {
  (void)state;
  header_fails("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
               20, "tensor 'b': data_offsets [12, 20] leave a hole after the previous tensor 'a' "
               "ending at 8", "b");
  header_fails("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
               "data_offsets [4, 12] leave a hole: the data starts at 0", "a");
}

static void test_unknown_dtype(void **state) {
  (void)state;
  header_fails("{\"__metadata__\":{},\"w\":{\"dtype\":\"F7\",\"shape\":[2],\"data_offsets\":[0,8]}}",
               8, "tensor 'w': unknown dtype 'F7'", "w");
}

static void test_shape_overflow(void **state) {
  (void)state;
  header_fails("{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],"
               "\"data_offsets\":[0,0]}}", 0, "tensor 'w': shape product overflows 64 bits", "w");
  header_fails("{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],"
               "\"data_offsets\":[0,0]}}", 0, "byte size overflows 64 bits", "w");
}

static void test_bad_entries(void **state) {
  (void)state;
  header_fails("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
               "data_offsets [0, 4] hold 4 bytes, but 2 elements of F32 take 8", "w");
  header_fails("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 0,
               "end before they begin", "w");
  header_fails("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0.0,8.0]}}", 8,
               "data_offsets must be two non-negative whole numbers", "w");
  header_fails("{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
               "shape entry 0 is not a non-negative whole number", "w");
  header_fails("{\"w\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2,
               "3 elements of F4 do not fill whole bytes", "w");
  header_fails("{\"w\":[1,2]}", 0, "expected an object", "w");
  header_fails("{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "dtype must be a string", "w");
  header_fails("{\"__metadata__\":{\"format\":1}}", 0,
               "__metadata__: must map names to strings; 'format' is not a string", "__metadata__");
  header_fails("{\"__metadata__\":[]}", 0, "__metadata__: must be an object", "__metadata__");
}

static void test_trailing_bytes(void **state) {
  (void)state;
  const char *header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  char path[4200];
  raw_file("st_trailing", header, 9, path, sizeof path);
  uint64_t end = 8 + strlen(header) + 8;
  read_fails(path, vf_safetensors_read, VF_EFORMAT, "tensor data ends at byte", end);
}

/* ---- sharded indexes ---------------------------------------------------------------- */

/* n tensors named layers.i.mlp.up_proj.weight, each [4, 8] BF16. */
static struct vf_tensor *many(size_t n) {
  struct vf_tensor *t = calloc(n, sizeof *t);
  for (size_t i = 0; i < n; i++) {
    char name[64];
    snprintf(name, sizeof name, "model.layers.%zu.mlp.up_proj.weight", i);
    t[i] = (struct vf_tensor){.name = strdup(name), .ndim = 2, .shape = {4, 8},
                              .dtype = VF_DTYPE_BF16};
  }
  return t;
}

static void free_many(struct vf_tensor *t, size_t n) {
  for (size_t i = 0; i < n; i++) free(t[i].name);
  free(t);
}

static void test_index(void **state) {
  (void)state;
  char dir[4096], path[4200];
  vf_test_tmpdir("st_index", dir, sizeof dir);
  assert_int_equal(vf_st_write_sharded(dir, small, N_SMALL, 3), 0);
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
  struct vf_model m;
  read_ok(&m, path, vf_safetensors_index_read);
  assert_int_equal(m.n_tensors, N_SMALL);
  /* Shards in name order, tensors in offset order: the writer's order. */
  for (size_t i = 0; i < N_SMALL; i++) assert_string_equal(m.tensors[i].name, small[i].name);
  vf_model_cleanup(&m);
}

static void test_index_30_shards(void **state) {
  (void)state;
  const size_t n = 900;
  struct vf_tensor *t = many(n);
  char dir[4096], path[4200];
  vf_test_tmpdir("st_index30", dir, sizeof dir);
  assert_int_equal(vf_st_write_sharded(dir, t, n, 30), 0);
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
  struct vf_model m;
  read_ok(&m, path, vf_safetensors_index_read);
  assert_int_equal(m.n_tensors, n);
  assert_int_equal(vf_model_params(&m), n * 32);
  for (size_t i = 0; i < n; i++) assert_string_equal(m.tensors[i].name, t[i].name);
  vf_model_cleanup(&m);
  /* The index file itself is also a MODEL: vf_model_load reads it. */
  vf_model_init(&m);
  struct vf_diag d;
  assert_int_equal(vf_model_load(&m, dir, &d), 0);
  assert_int_equal(m.n_tensors, n);
  vf_model_cleanup(&m);
  free_many(t, n);
}

static void write_index(const char *dir, const char *json, char *path, size_t size) {
  vf_test_write(dir, "model.safetensors.index.json", json, strlen(json), path, size);
}

static void test_index_mismatch(void **state) {
  (void)state;
  char dir[4096], shard[4200], path[4200];
  vf_test_tmpdir("st_index_bad", dir, sizeof dir);
  snprintf(shard, sizeof shard, "%s/a.safetensors", dir);
  assert_int_equal(vf_st_write(shard, small, 2), 0);
  write_index(dir, "{\"weight_map\":{\"model.embed_tokens.weight\":\"a.safetensors\"}}", path,
              sizeof path);
  read_fails(path, vf_safetensors_index_read, VF_EFORMAT,
             "tensor 'model.layers.0.self_attn.q_proj.weight': shard 'a.safetensors' holds it, "
             "but weight_map does not map it there", UINT64_MAX);
  write_index(dir, "{\"weight_map\":{\"model.embed_tokens.weight\":\"a.safetensors\","
              "\"model.layers.0.self_attn.q_proj.weight\":\"a.safetensors\","
              "\"lm_head.weight\":\"a.safetensors\"}}", path, sizeof path);
  read_fails(path, vf_safetensors_index_read, VF_EFORMAT,
             "tensor 'lm_head.weight': weight_map puts it in 'a.safetensors', which does not "
             "hold it", UINT64_MAX);
}

static void test_index_bad_paths(void **state) {
  (void)state;
  char dir[4096], path[4200];
  vf_test_tmpdir("st_index_paths", dir, sizeof dir);
  write_index(dir, "{\"weight_map\":{\"w\":\"../a.safetensors\"}}", path, sizeof path);
  read_fails(path, vf_safetensors_index_read, VF_EFORMAT,
             "tensor 'w' must name a shard file in the index's folder", UINT64_MAX);
  write_index(dir, "{\"weight_map\":{\"w\":\"/etc/passwd\"}}", path, sizeof path);
  read_fails(path, vf_safetensors_index_read, VF_EFORMAT, "shard file", UINT64_MAX);
  write_index(dir, "{\"weight_map\":{\"w\":\"..\"}}", path, sizeof path);
  read_fails(path, vf_safetensors_index_read, VF_EFORMAT, "shard file", UINT64_MAX);
  write_index(dir, "{\"weight_map\":{\"w\":3}}", path, sizeof path);
  read_fails(path, vf_safetensors_index_read, VF_EFORMAT, "shard file", UINT64_MAX);
  write_index(dir, "{\"metadata\":{}}", path, sizeof path);
  read_fails(path, vf_safetensors_index_read, VF_EFORMAT, "'weight_map' must be", UINT64_MAX);
  write_index(dir, "{\"weight_map\":{\"w\":\"missing.safetensors\"}}", path, sizeof path);
  /* The message names the missing shard. */
  char shard[4200];
  snprintf(shard, sizeof shard, "%s/missing.safetensors", dir);
  struct vf_model m;
  struct vf_diag d;
  vf_model_init(&m);
  assert_int_equal(vf_safetensors_index_read(&m, path, &d), VF_EIO);
  assert_string_equal(d.file, shard);
  assert_non_null(strstr(d.msg, "cannot open"));
  vf_model_cleanup(&m);
  write_index(dir, "{\"weight_map\":", path, sizeof path);
  read_fails(path, vf_safetensors_index_read, VF_EFORMAT, "invalid JSON", UINT64_MAX);
}

/* ---- adoption by vf_model_load ------------------------------------------------------ */

static const char tiny_config[] =
    "{\"model_type\":\"llama\",\"hidden_size\":8,\"num_hidden_layers\":1,"
    "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"intermediate_size\":16,"
    "\"vocab_size\":32,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\"}";

/* The config's layout, with lm_head missing, the q projection reshaped and one extra
 * tensor: the checkpoint's tensors win and each difference is noted. */
static void test_folder_adoption_notes(void **state) {
  (void)state;
  struct vf_model cfg;
  struct vf_diag d;
  vf_model_init(&cfg);
  assert_int_equal(vf_model_from_config_json(&cfg, tiny_config, strlen(tiny_config), "c", &d), 0);
  struct vf_tensor *t = calloc(cfg.n_tensors + 1, sizeof *t);
  size_t n = 0;
  for (size_t i = 0; i < cfg.n_tensors; i++) {
    if (strcmp(cfg.tensors[i].name, "lm_head.weight") == 0) continue;
    t[n] = cfg.tensors[i];
    if (strcmp(t[n].name, "model.layers.0.self_attn.q_proj.weight") == 0) t[n].shape[0] = 4;
    n++;
  }
  t[n++] = (struct vf_tensor){.name = "model.rotary.inv_freq", .ndim = 1, .shape = {4},
                              .dtype = VF_DTYPE_F32};
  char dir[4096], path[4200];
  vf_test_tmpdir("st_adopt", dir, sizeof dir);
  vf_test_write(dir, "config.json", tiny_config, strlen(tiny_config), path, sizeof path);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  assert_int_equal(vf_st_write(path, t, n), 0);

  struct vf_model m;
  vf_model_init(&m);
  assert_int_equal(vf_model_load(&m, dir, &d), 0);
  assert_true(m.has_arch);
  assert_int_equal(m.arch.hidden, 8);
  assert_int_equal(m.n_tensors, n);
  assert_int_equal(m.n_notes, 3);
  assert_string_equal(m.notes[0], "model.layers.0.self_attn.q_proj.weight: config implies "
                                  "[8, 8], checkpoint has [4, 8]");
  assert_string_equal(m.notes[1], "lm_head.weight: in the config's layout, not in the checkpoint");
  assert_string_equal(m.notes[2], "model.rotary.inv_freq: in the checkpoint, not in the "
                                  "config's layout");
  assert_string_equal(m.source, dir);
  vf_model_cleanup(&m);

  /* The file alone, next to its config.json, is adopted the same way. */
  vf_model_init(&m);
  assert_int_equal(vf_model_load(&m, path, &d), 0);
  assert_int_equal(m.n_notes, 3);
  assert_string_equal(m.source, path);
  vf_model_cleanup(&m);
  vf_model_cleanup(&cfg);
  free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_single_file),
      cmocka_unit_test(test_offset_order),
      cmocka_unit_test(test_shapes),
      cmocka_unit_test(test_parse_in_memory),
      cmocka_unit_test(test_truncated),
      cmocka_unit_test(test_length_past_end),
      cmocka_unit_test(test_length_over_limit),
      cmocka_unit_test(test_not_an_object),
      cmocka_unit_test(test_invalid_json),
      cmocka_unit_test(test_overlap),
      cmocka_unit_test(test_hole),
      cmocka_unit_test(test_unknown_dtype),
      cmocka_unit_test(test_shape_overflow),
      cmocka_unit_test(test_bad_entries),
      cmocka_unit_test(test_trailing_bytes),
      cmocka_unit_test(test_index),
      cmocka_unit_test(test_index_30_shards),
      cmocka_unit_test(test_index_mismatch),
      cmocka_unit_test(test_index_bad_paths),
      cmocka_unit_test(test_folder_adoption_notes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

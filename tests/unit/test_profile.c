/* Framework profiles with releases: the override chain, choosing a release by version or by
 * month, fields that follow the PyTorch release ("torch") and --torch, every refusal of a
 * malformed file (one message naming the file and the key), and the profiles shipped in
 * data/. The test files are built from the embedded hf profile's newest release, so they
 * carry every field however many there are. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "io/data.h"
#include "io/profile.h"
#include "tmpdir.h"
#include "vramfit.h"

#define FW_FILE "frameworks/x.json"
#define TORCH_FILE "torch.json"

static const char torch_text[] =
    "{\"name\": \"torch\", \"releases\": ["
    " {\"release\": \"2.0\", \"date\": \"2023-03\", \"describes\": \"2.0 on\", \"zero_grad_frees\": true,"
    "  \"eager_softmax_saves_input\": false, \"sdpa_math_fp32\": true, \"nccl_records_streams\": true,"
    "  \"fsdp2_reduce_input_compute_stream\": true,"
    "  \"sources\": {\"zero_grad_frees\": \"o/r:a.py@v2.0.0: frees\","
    "  \"nccl_records_streams\": \"o/r:pg.cpp@v2.0.0: records\","
    "  \"fsdp2_reduce_input_compute_stream\": \"o/r:fsdp.py@v2.5.0: copies in on the current stream\","
    "  \"eager_softmax_saves_input\": \"o/r:b.yaml@v1.11.0: keeps the result\","
    "  \"sdpa_math_fp32\": \"o/r:attention.cpp@v2.0.0: up-casts\"}},"
    " {\"release\": \"1.11\", \"date\": \"2022-03\", \"describes\": \"1.11 to 1.13\", \"zero_grad_frees\": false,"
    "  \"sources\": {\"zero_grad_frees\": \"o/r:a.py@v1.13.1: zeroes in place\"}},"
    " {\"release\": \"1.10\", \"date\": \"2021-10\", \"describes\": \"1.10\", \"eager_softmax_saves_input\": true,"
    "  \"sources\": {\"eager_softmax_saves_input\": \"[U] kept the input\"}}]}";

/* The newest release of the embedded hf profile: every field with its source. */
static json_t *every_field(void) {
  const char *text;
  size_t len;
  assert_int_equal(data_get("frameworks/hf.json", &text, &len), 0);
  json_t *root = json_loadb(text, len, 0, NULL);
  data_release(text);
  assert_non_null(root);
  json_t *e = json_deep_copy(json_array_get(json_object_get(root, "releases"), 0));
  json_decref(root);
  return e;
}

static void set(json_t *entry, const char *key, json_t *value, const char *source) {
  json_object_set_new(entry, key, value);
  if (source) json_object_set_new(json_object_get(entry, "sources"), key, json_string(source));
}

static json_t *release(const char *rel, const char *date, const char *torch) {
  json_t *e = json_pack("{s:s, s:s, s:s, s:s, s:{}}", "release", rel, "date", date, "torch", torch, "describes",
                        "a release", "sources");
  assert_non_null(e);
  return e;
}

/* x 3.0 (2024-06, torch 2.1): every field, zero_grad_frees "torch", attn_out_copies 2;
 * 2.0 (2023-06, torch 1.13): attn_out_copies 1; 1.0 (2022-01, torch 1.10): eager. */
static json_t *doc(void) {
  json_t *newest = every_field();
  json_object_set_new(newest, "release", json_string("3.0"));
  json_object_set_new(newest, "date", json_string("2024-06"));
  json_object_set_new(newest, "torch", json_string("2.1"));
  set(newest, "default_attention", json_string("sdpa"), NULL);
  set(newest, "attn_out_copies", json_integer(2), NULL);
  set(newest, "zero_grad_frees", json_string("torch"), NULL);
  json_t *mid = release("2.0", "2023-06", "1.13"), *old = release("1.0", "2022-01", "1.10");
  set(mid, "attn_out_copies", json_integer(1), "o/r:attn.py@v2.0: one copy");
  set(old, "default_attention", json_string("eager"), "o/r:attn.py@v1.0: no SDPA");
  return json_pack("{s:s, s:[o, o, o]}", "name", "x", "releases", newest, mid, old);
}

static json_t *entry_of(json_t *d, size_t i) { return json_array_get(json_object_get(d, "releases"), i); }

static int load_doc(json_t *d, const char *spec_text, const char *torch, struct vf_profile *p, struct vf_diag *diag) {
  char *fw = json_dumps(d, 0);
  struct profile_texts t = {fw, torch_text, strlen(fw), strlen(torch_text), FW_FILE, TORCH_FILE};
  struct vf_framework_spec spec;
  vf_diag_clear(diag);
  int rc = vf_framework_spec_parse(spec_text, &spec, diag);
  if (!rc) rc = profile_parse(&spec, torch, &t, p, diag);
  free(fw);
  return rc;
}

static struct vf_profile load_ok(const char *spec, const char *torch) {
  json_t *d = doc();
  struct vf_profile p;
  struct vf_diag diag;
  if (load_doc(d, spec, torch, &p, &diag)) fail_msg("%s: %s: %s", spec, diag.file, diag.msg);
  json_decref(d);
  return p;
}

static void test_override_chain(void **state) {
  (void)state;
  struct vf_profile p = load_ok("x", NULL);
  assert_string_equal(p.name, "x");
  assert_string_equal(p.release, "3.0");
  assert_string_equal(p.date, "2024-06");
  assert_int_equal(p.attn_out_copies, 2);
  assert_int_equal(p.default_attention, VF_ATTN_SDPA);
  assert_false(p.release_predates);
  p = load_ok("x@2.5", NULL); /* the newest release not after 2.5 */
  assert_string_equal(p.release, "2.0");
  assert_int_equal(p.attn_out_copies, 1);
  assert_int_equal(p.default_attention, VF_ATTN_SDPA);
  p = load_ok("x@1.0.3", NULL); /* 1.0.3 is after 1.0: both overrides apply */
  assert_string_equal(p.release, "1.0");
  assert_int_equal(p.attn_out_copies, 1);
  assert_int_equal(p.default_attention, VF_ATTN_EAGER);
  p = load_ok("x@3", NULL); /* 3 == 3.0 */
  assert_string_equal(p.release, "3.0");
  p = load_ok("x@9.1", NULL);
  assert_string_equal(p.release, "3.0");
}

static void test_by_month(void **state) {
  (void)state;
  struct vf_profile p = load_ok("x@2023-12", NULL);
  assert_string_equal(p.release, "2.0");
  p = load_ok("x@2023-06", NULL);
  assert_string_equal(p.release, "2.0");
  p = load_ok("x@2023-05", NULL);
  assert_string_equal(p.release, "1.0");
  assert_false(p.release_predates);
}

static void test_older_than_every_release(void **state) {
  (void)state;
  struct vf_profile p = load_ok("x@0.9", NULL);
  assert_string_equal(p.release, "1.0");
  assert_true(p.release_predates);
  assert_int_equal(p.default_attention, VF_ATTN_EAGER);
  p = load_ok("x@2019-01", NULL);
  assert_true(p.release_predates);
}

/* zero_grad_frees is "torch": the release's own PyTorch decides, or --torch. */
static void test_torch_indirection(void **state) {
  (void)state;
  struct vf_profile p = load_ok("x", NULL);
  assert_string_equal(p.torch, "2.1");
  assert_true(p.zero_grad_frees);
  p = load_ok("x@2.0", NULL); /* torch 1.13 */
  assert_string_equal(p.torch, "1.13");
  assert_false(p.zero_grad_frees);
  p = load_ok("x", "1.12");
  assert_string_equal(p.torch, "1.12");
  assert_false(p.zero_grad_frees);
  p = load_ok("x@1.0", "2.5");
  assert_true(p.zero_grad_frees);
  assert_false(p.torch_predates);
  p = load_ok("x", "1.9");
  assert_true(p.torch_predates);
  assert_false(p.zero_grad_frees);
  /* A field not "torch" keeps its own value whatever the PyTorch release. */
  json_t *d = doc();
  json_object_set_new(entry_of(d, 0), "eager_softmax_saves_input", json_false());
  struct vf_diag diag;
  assert_int_equal(load_doc(d, "x", "1.10", &p, &diag), 0);
  assert_false(p.eager_softmax_saves_input);
  /* An older release's own value replaces "torch". */
  set(entry_of(d, 1), "zero_grad_frees", json_false(), "o/r:loop.py@v2.0: zeroes in place");
  assert_int_equal(load_doc(d, "x@2.0", "2.5", &p, &diag), 0);
  assert_false(p.zero_grad_frees);
  json_decref(d);
}

typedef void (*spoil_fn)(json_t *d);

/* The spoiled file is refused with one message naming the file and containing want. */
static void refused(spoil_fn spoil, const char *want) {
  json_t *d = doc();
  spoil(d);
  struct vf_profile p;
  struct vf_diag diag;
  int rc = load_doc(d, "x", NULL, &p, &diag);
  json_decref(d);
  if (rc != VF_EFORMAT) fail_msg("rc %d, want VF_EFORMAT (msg '%s', want '%s')", rc, diag.msg, want);
  assert_string_equal(diag.file, FW_FILE);
  if (!strstr(diag.msg, want)) fail_msg("'%s' lacks '%s'", diag.msg, want);
  assert_null(strchr(diag.msg, '\n'));
}

static void no_source(json_t *d) { json_object_del(json_object_get(entry_of(d, 1), "sources"), "attn_out_copies"); }
static void unknown_key(json_t *d) { set(entry_of(d, 1), "gqa_expands", json_true(), "o/r:a.py@v1: x"); }
static void out_of_order(json_t *d) { json_object_set_new(entry_of(d, 1), "release", json_string("3.1")); }
static void same_release(json_t *d) { json_object_set_new(entry_of(d, 2), "release", json_string("2.0")); }
static void date_after(json_t *d) { json_object_set_new(entry_of(d, 2), "date", json_string("2024-01")); }
static void repeats(json_t *d) { set(entry_of(d, 2), "attn_out_copies", json_integer(1), "o/r:a.py@v1: one"); }
static void missing_field(json_t *d) { json_object_del(entry_of(d, 0), "gqa_expand"); }
static void stray_source(json_t *d) {
  json_object_set_new(json_object_get(entry_of(d, 1), "sources"), "gqa_expand", json_string("o/r:a.py@v1: x"));
}
static void two_lines(json_t *d) {
  json_object_set_new(json_object_get(entry_of(d, 1), "sources"), "attn_out_copies", json_string("o/r:a.py@v1: a\nb"));
}
static void no_file(json_t *d) {
  json_object_set_new(json_object_get(entry_of(d, 1), "sources"), "attn_out_copies", json_string("it is so"));
}
static void wrong_type(json_t *d) { json_object_set_new(entry_of(d, 1), "attn_out_copies", json_string("two")); }
static void bad_type_value(json_t *d) {
  set(entry_of(d, 1), "rope_table_bytes", json_pack("{s:i, s:s}", "*", 4, "qwen2", "eight"), "o/r:a.py@v2: x");
}
static void long_type_name(json_t *d) {
  set(entry_of(d, 1), "rope_table_bytes", json_pack("{s:i}", "a_model_type_too_long", 4), "o/r:a.py@v2: x");
}
static void bad_release(json_t *d) { json_object_set_new(entry_of(d, 1), "release", json_string("2.x")); }
static void bad_date(json_t *d) { json_object_set_new(entry_of(d, 1), "date", json_string("2023-13")); }
static void bad_torch(json_t *d) { json_object_set_new(entry_of(d, 1), "torch", json_string("latest")); }
static void no_describes(json_t *d) { json_object_del(entry_of(d, 1), "describes"); }
static void undescribed_torch(json_t *d) { set(entry_of(d, 1), "gqa_expand", json_string("torch"), "o/r:a.py@v2: x"); }
static void wrong_name(json_t *d) { json_object_set_new(d, "name", json_string("y")); }
static void top_level_key(json_t *d) { json_object_set_new(d, "release", json_string("1.0")); }
static void no_releases(json_t *d) { json_object_set_new(d, "releases", json_array()); }

static void test_refusals(void **state) {
  (void)state;
  refused(no_source, "'attn_out_copies' has no source");
  refused(unknown_key, "unknown key 'gqa_expands'");
  refused(out_of_order, "newest first");
  refused(same_release, "newest first");
  refused(date_after, "dated after release 2.0");
  refused(repeats, "'attn_out_copies' repeats the value");
  refused(missing_field, "'gqa_expand' is missing");
  refused(stray_source, "a source for 'gqa_expand'");
  refused(two_lines, "the source of 'attn_out_copies'");
  refused(no_file, "the source of 'attn_out_copies'");
  refused(wrong_type, "'attn_out_copies' has a value of the wrong type");
  refused(bad_type_value, "'rope_table_bytes' has a value of the wrong type");
  refused(long_type_name, "'rope_table_bytes' has a value of the wrong type");
  refused(bad_release, "'release' must be a version");
  refused(bad_date, "'date' must be a month");
  refused(bad_torch, "'torch' must be the PyTorch release");
  refused(no_describes, "'describes'");
  refused(undescribed_torch, "'gqa_expand' is \"torch\", but torch.json does not describe it");
  refused(wrong_name, "'name' must be \"x\"");
  refused(top_level_key, "unknown key 'release'");
  refused(no_releases, "'releases' must be a list");
}

/* Versions that are not versions are bad input, before any file is read. */
static void test_bad_versions(void **state) {
  (void)state;
  struct vf_framework_spec spec;
  struct vf_diag d;
  const char *bad[] = {"hf@", "hf@x", "hf@4.", "hf@.4", "hf@1.2.3.4.5", "hf@2023-1", "hf@2023-13", "hf@23-10",
                       "hf@4.46@5", "@4.46", "h/f", "hf@1234567.0", "hf@4.46 "};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    if (vf_framework_spec_parse(bad[i], &spec, &d) != VF_EINVAL) fail_msg("'%s' was accepted", bad[i]);
  assert_int_equal(vf_framework_spec_parse("litgpt@2023-10", &spec, &d), 0);
  assert_string_equal(spec.name, "litgpt");
  assert_string_equal(spec.version, "2023-10");
  assert_int_equal(vf_torch_release_check("2.13", &d), 0);
  assert_int_equal(vf_torch_release_check("2023-10", &d), VF_EINVAL);
}

/* Through the API a profile is opaque: loaded, described and freed; a refused load leaves
 * none behind. */
static void test_opaque_profile(void **state) {
  (void)state;
  struct vf_diag d;
  struct vf_profile *p = NULL;
  assert_int_equal(vf_profile_load("hf", "two", &p, &d), VF_EINVAL);
  assert_null(p);
  assert_int_equal(vf_profile_load("jax", NULL, &p, &d), VF_ENOTFOUND);
  assert_null(p);
  assert_int_equal(vf_profile_load("hf@4.0", NULL, &p, &d), 0);
  struct vf_profile_info info;
  vf_profile_describe(p, &info);
  assert_string_equal(info.name, "hf");
  assert_string_equal(info.release, "4.16"); /* the oldest release stands in */
  assert_string_equal(info.torch, "1.10");
  assert_true(info.release_predates);
  assert_false(info.torch_predates);
  vf_profile_free(p);
}

/* The releases each shipped profile describes all load, and hf's follow their PyTorch. */
static void test_shipped_profiles(void **state) {
  (void)state;
  static const char *const names[] = {"hf", "litgpt", "torchtune", "lightning", "deepspeed", "megatron", "torchtitan"};
  struct vf_profile p;
  struct vf_diag d;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    if (profile_read(names[i], NULL, &p, &d)) fail_msg("%s: %s: %s", names[i], d.file, d.msg);
    char spec[64];
    snprintf(spec, sizeof spec, "%s@%s", names[i], p.release);
    if (profile_read(spec, NULL, &p, &d)) fail_msg("%s: %s", spec, d.msg);
    assert_false(p.release_predates);
  }
  assert_int_equal(profile_read("hf", NULL, &p, &d), 0);
  assert_true(p.zero_grad_frees); /* the Trainer's model.zero_grad() under torch 2 */
  assert_false(p.eager_softmax_saves_input);
  assert_int_equal(profile_read("hf@4.16", NULL, &p, &d), 0);
  assert_string_equal(p.torch, "1.10");
  assert_false(p.zero_grad_frees);
  assert_true(p.eager_softmax_saves_input);
  assert_int_equal(p.default_attention, VF_ATTN_EAGER);
  assert_int_equal(profile_read("hf", "1.13", &p, &d), 0);
  assert_false(p.zero_grad_frees);
  assert_false(p.eager_softmax_saves_input);
  /* ProcessGroupNCCL records a collective's inputs on its stream up to torch 2.7 only. */
  assert_true(p.nccl_records_streams);
  assert_int_equal(profile_read("hf@4.49", NULL, &p, &d), 0);
  assert_true(p.nccl_records_streams);
  assert_int_equal(profile_read("hf@4.54", NULL, &p, &d), 0);
  assert_false(p.nccl_records_streams);
  assert_int_equal(profile_read("hf@4.49", "2.8", &p, &d), 0);
  assert_false(p.nccl_records_streams);
  /* FSDP2's reduce-scatter input moved to the computation stream in torch 2.5. */
  assert_int_equal(profile_read("hf", NULL, &p, &d), 0);
  assert_true(p.fsdp2_reduce_input_compute_stream);
  assert_int_equal(profile_read("hf", "2.4", &p, &d), 0);
  assert_false(p.fsdp2_reduce_input_compute_stream);
  assert_int_equal(profile_read("hf@4.49", "2.8", &p, &d), 0);
  assert_true(p.fsdp2_reduce_input_compute_stream);
  /* The loops that empty the cache once the model is set up: from how many GPUs. */
  assert_int_equal(p.empty_cache_before_training, 0);
  assert_int_equal(profile_read("lightning", NULL, &p, &d), 0);
  assert_int_equal(p.empty_cache_before_training, 1);
  assert_int_equal(profile_read("torchtune", NULL, &p, &d), 0);
  assert_int_equal(p.empty_cache_before_training, 2);
  /* The Trainer's checkpoint under accelerate: sharded with FSDP2 (5.23), whole units with
   * FSDP1 (5.0). */
  assert_int_equal(profile_read("hf", NULL, &p, &d), 0);
  assert_int_equal(p.save_gathers, VF_SAVE_NONE);
  assert_int_equal(profile_read("hf@5.0", NULL, &p, &d), 0);
  assert_int_equal(p.save_gathers, VF_SAVE_UNITS);
  assert_int_equal(profile_read("torchtune", NULL, &p, &d), 0);
  /* lit-gpt of October 2023, before litgpt's releases: its longest sample first, its
   * RMSNorm in the input's dtype. */
  assert_false(p.longest_first);
  assert_int_equal(profile_read("litgpt@2023-10", NULL, &p, &d), 0);
  assert_string_equal(p.release, "0.0");
  assert_string_equal(p.torch, "2.1");
  assert_true(p.longest_first);
  assert_int_equal(p.n_rms_norm_saves, 1);
  assert_int_equal(p.rms_norm_saves[0], 0);
  assert_int_equal(profile_read("litgpt", NULL, &p, &d), 0);
  assert_false(p.longest_first);
  assert_int_equal(p.rms_norm_saves[0], 4);
  /* torchtune between its releases: October 2024 is 0.3's chunked output and loss (from
   * 0.3.0), before activation offloading (0.4.0); 0.1 still gives the whole fp32 logits
   * and carries 0.3's foreach AdamW over. */
  assert_int_equal(profile_read("torchtune@2024-10", NULL, &p, &d), 0);
  assert_string_equal(p.release, "0.3");
  assert_int_equal(p.output_chunks, 8);
  assert_false(p.offloads_activations);
  assert_int_equal(profile_read("torchtune@0.1", NULL, &p, &d), 0);
  assert_int_equal(p.output_chunks, 0);
  assert_true(p.foreach_optimizer);
  assert_int_equal(profile_read("torchtune@0.5", NULL, &p, &d), 0);
  assert_true(p.offloads_activations);
  assert_false(p.fsdp_root_reshards);
  /* A value per model type: torchtune's RoPE tables, Qwen2's twice as wide. */
  assert_int_equal(profile_read("torchtune", NULL, &p, &d), 0);
  assert_int_equal(p.rope_table_bytes.n, 3);
  for (uint32_t i = 0; i < p.rope_table_bytes.n; i++)
    if (strcmp(p.rope_table_bytes.type[i], "qwen2") == 0) assert_int_equal(p.rope_table_bytes.value[i], 8);
}

/* A user's copy of data/ (VRAMFIT_DATA_DIR) is read instead, and its mistakes named. */
static void test_data_dir(void **state) {
  (void)state;
  char dir[512], path[1024];
  vf_test_tmpdir("profile-data", dir, sizeof dir);
  vf_test_write(dir, "torch.json", torch_text, strlen(torch_text), path, sizeof path);
  char fwdir[600];
  snprintf(fwdir, sizeof fwdir, "%s/frameworks", dir);
  vf_test_tmpdir("profile-data/frameworks", fwdir, sizeof fwdir);
  json_t *d = doc();
  char *text = json_dumps(d, 0);
  vf_test_write(fwdir, "x.json", text, strlen(text), path, sizeof path);
  free(text);
  no_source(d);
  json_object_set_new(d, "name", json_string("y"));
  text = json_dumps(d, 0);
  vf_test_write(fwdir, "y.json", text, strlen(text), path, sizeof path);
  free(text);
  json_decref(d);
  setenv("VRAMFIT_DATA_DIR", dir, 1);
  struct vf_profile p;
  struct vf_diag diag;
  int ok = profile_read("x@2.0", NULL, &p, &diag), spoiled = profile_read("y", NULL, &p, &diag);
  unsetenv("VRAMFIT_DATA_DIR");
  assert_int_equal(ok, 0);
  assert_int_equal(spoiled, VF_EFORMAT);
  assert_string_equal(diag.file, "frameworks/y.json");
  assert_non_null(strstr(diag.msg, "release 2.0: 'attn_out_copies' has no source"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_override_chain),   cmocka_unit_test(test_by_month),
      cmocka_unit_test(test_older_than_every_release), cmocka_unit_test(test_torch_indirection),
      cmocka_unit_test(test_refusals),         cmocka_unit_test(test_bad_versions),
      cmocka_unit_test(test_opaque_profile),
      cmocka_unit_test(test_shipped_profiles), cmocka_unit_test(test_data_dir),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

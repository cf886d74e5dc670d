/* The names a model goes by: Hub ids read from a local Hugging Face Hub cache (built here as
 * huggingface_hub lays it out: refs/main, snapshots/<hash>/ linking into blobs/), the
 * catalogue's Hub ids and aliases in any case, the closest names for a miss, and the
 * catalogue's refusal of two entries claiming one name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "st_writer.h"
#include "tmpdir.h"
#include "vramfit.h"

#define HASH "0123456789abcdef0123456789abcdef01234567"
#define PATH 4096

/* A llama small enough to write as a checkpoint; its config says float32. */
#define TINY(hidden)                                                                        \
  "{\"model_type\": \"llama\", \"hidden_size\": " #hidden ", \"num_hidden_layers\": 1, "    \
  "\"num_attention_heads\": 2, \"num_key_value_heads\": 2, \"intermediate_size\": 16, "       \
  "\"vocab_size\": 16, \"tie_word_embeddings\": false, \"torch_dtype\": \"float32\"}"
static const char tiny_config[] = TINY(8);

/* snprintf that fails the test rather than cut a path short. */
static void join(char *out, size_t size, const char *format, ...) __attribute__((format(printf, 3, 4)));
static void join(char *out, size_t size, const char *format, ...) {
  va_list ap;
  va_start(ap, format);
  int n = vsnprintf(out, size, format, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= size) fail_msg("path too long: %s", out);
}

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...) {
  char cmd[3 * PATH];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  if (system(cmd) != 0) fail_msg("failed: %s", cmd);
}

/* A cache folder (cache/folder) whose refs/main names HASH, with an empty snapshot. */
static void hub_folder(const char *cache, const char *folder, char *snap, size_t size) {
  join(snap, size, "%s/%s/snapshots/" HASH, cache, folder);
  sh("mkdir -p '%s' '%s/%s/blobs' '%s/%s/refs' && printf '" HASH "' > '%s/%s/refs/main'", snap,
     cache, folder, cache, folder, cache, folder);
}

/* Links snap/file to the blob named blob (written from bytes, or left missing when bytes is
 * NULL), as the Hub cache does. */
static void snapshot_file(const char *snap, const char *file, const char *blob, const char *bytes) {
  char blobs[PATH], path[PATH];
  if (bytes) {
    join(blobs, sizeof blobs, "%s/../../blobs", snap);
    vf_test_write(blobs, blob, bytes, strlen(bytes), path, sizeof path);
  }
  join(path, sizeof path, "%s/%s", snap, file);
  char target[PATH];
  join(target, sizeof target, "../../blobs/%s", blob);
  if (symlink(target, path) != 0) fail_msg("cannot link %s", path);
}

/* A cached model whose snapshot holds config.json (config: its text). */
static void hub_model(const char *cache, const char *folder, const char *config, char *snap,
                      size_t size) {
  hub_folder(cache, folder, snap, size);
  snapshot_file(snap, "config.json", "config-blob", config);
}

/* The tiny llama's tensors, in bfloat16 as its checkpoint stores them, written into the
 * blob the snapshot's model.safetensors links to. */
static void snapshot_checkpoint(const char *snap) {
  struct vf_model m;
  struct vf_diag d;
  vf_model_init(&m);
  assert_int_equal(vf_model_from_config_json(&m, tiny_config, strlen(tiny_config), "tiny", &d), 0);
  for (size_t i = 0; i < m.n_tensors; i++) m.tensors[i].dtype = VF_DTYPE_BF16;
  char blob[PATH];
  join(blob, sizeof blob, "%s/../../blobs/st-blob", snap);
  assert_int_equal(vf_st_write(blob, m.tensors, m.n_tensors), 0);
  vf_model_cleanup(&m);
  snapshot_file(snap, "model.safetensors", "st-blob", NULL);
}

/* A fresh folder for the test whose Hub cache is HF_HUB_CACHE = <dir>/hub (created). */
static void fresh_cache(const char *test, char *dir, size_t dsize, char *cache, size_t csize) {
  vf_test_tmpdir(test, dir, dsize);
  join(cache, csize, "%s/hub", dir);
  sh("mkdir -p '%s'", cache);
  setenv("HF_HUB_CACHE", cache, 1);
  unsetenv("HF_HOME");
}

static void loads(const char *arg, struct vf_model *m) {
  struct vf_diag d;
  vf_model_init(m);
  int rc = vf_model_load(m, arg, &d);
  if (rc) fail_msg("%s: %d %s: %s", arg, rc, d.file, d.msg);
}

/* Loading arg fails with code, one line naming every needle (NULL-terminated). */
static void refused(const char *arg, int code, ...) {
  struct vf_model m;
  struct vf_diag d;
  vf_model_init(&m);
  int rc = vf_model_load(&m, arg, &d);
  vf_model_cleanup(&m);
  char line[1200];
  vf_diag_format(&d, line, sizeof line);
  if (rc != code) fail_msg("%.80s: code %d, want %d (%s)", arg, rc, code, line);
  if (strchr(line, '\n')) fail_msg("%.80s: message of more than one line: %s", arg, line);
  va_list ap;
  va_start(ap, code);
  for (const char *n; (n = va_arg(ap, const char *));)
    if (!strstr(line, n)) fail_msg("%.80s: '%s' not in: %s", arg, n, line);
  va_end(ap);
}

/* ---- the Hub cache ------------------------------------------------------------------ */

static void hub_cache_snapshot_with_checkpoint(void **state) {
  (void)state;
  char dir[PATH], cache[PATH], snap[PATH], home[PATH];
  fresh_cache("names-hub", dir, sizeof dir, cache, sizeof cache);
  /* Under HF_HOME/hub, HF_HUB_CACHE unset. */
  join(home, sizeof home, "%s/hf", dir);
  hub_model(home, "hub/models--Org--Tiny", tiny_config, snap, sizeof snap);
  snapshot_checkpoint(snap);
  unsetenv("HF_HUB_CACHE");
  setenv("HF_HOME", home, 1);
  struct vf_model m;
  loads("org/TINY", &m); /* any case; named as the cache spells it */
  assert_string_equal(m.name, "Org/Tiny");
  assert_true(m.has_arch);
  assert_int_equal(m.arch.hidden, 8);
  assert_int_equal(vf_model_main_dtype(&m), VF_DTYPE_BF16); /* the checkpoint's tensors */
  assert_int_equal(m.n_notes, 0);
  vf_model_cleanup(&m);

  /* HF_HUB_CACHE wins over HF_HOME. */
  hub_model(cache, "models--org--tiny", TINY(16), snap, sizeof snap);
  setenv("HF_HUB_CACHE", cache, 1);
  loads("Org/Tiny", &m);
  assert_string_equal(m.name, "org/tiny");
  assert_int_equal(m.arch.hidden, 16);
  assert_int_equal(vf_model_main_dtype(&m), VF_DTYPE_F32); /* config only */
  vf_model_cleanup(&m);
  unsetenv("HF_HOME");
}

/* A blob that is not downloaded leaves the config: a checkpoint file, or a shard an index
 * names. */
static void hub_cache_missing_blobs(void **state) {
  (void)state;
  char dir[PATH], cache[PATH], snap[PATH];
  fresh_cache("names-blobs", dir, sizeof dir, cache, sizeof cache);
  hub_model(cache, "models--org--dangling", tiny_config, snap, sizeof snap);
  snapshot_file(snap, "model.safetensors", "never-downloaded", NULL);
  struct vf_model m;
  loads("org/dangling", &m);
  assert_string_equal(m.name, "org/dangling");
  assert_string_equal(m.source, snap);
  assert_int_equal(vf_model_main_dtype(&m), VF_DTYPE_F32);
  vf_model_cleanup(&m);

  hub_model(cache, "models--org--sharded", tiny_config, snap, sizeof snap);
  snapshot_file(snap, "model.safetensors.index.json", "index-blob",
                "{\"weight_map\": {\"lm_head.weight\": \"model-00001-of-00001.safetensors\"}}");
  loads("org/sharded", &m);
  assert_int_equal(m.arch.hidden, 8);
  vf_model_cleanup(&m);
}

static void hub_cache_broken_folders(void **state) {
  (void)state;
  char dir[PATH], cache[PATH], snap[PATH];
  fresh_cache("names-broken", dir, sizeof dir, cache, sizeof cache);
  sh("mkdir -p '%s/models--org--norefs/blobs'", cache);
  refused("org/norefs", VF_ENOTFOUND, "models--org--norefs", "refs/main",
          "huggingface-cli download org/norefs config.json", NULL);
  sh("mkdir -p '%s/models--org--refsdir/refs/main'", cache);
  refused("org/refsdir", VF_ENOTFOUND, "refs/main", NULL);

  hub_folder(cache, "models--org--badref", snap, sizeof snap);
  sh("printf '../../../etc' > '%s/models--org--badref/refs/main'", cache);
  refused("org/badref", VF_EFORMAT, "refs/main", "not a commit hash", NULL);
  sh("head -c 4096 /dev/zero | tr '\\0' a > '%s/models--org--badref/refs/main'", cache);
  refused("org/badref", VF_ERANGE, "refs/main", NULL);

  hub_folder(cache, "models--org--gone", snap, sizeof snap);
  sh("rmdir '%s'", snap);
  refused("org/gone", VF_ENOTFOUND, "snapshots/" HASH, "not in the Hub cache",
          "huggingface-cli download org/gone config.json", NULL);

  hub_folder(cache, "models--org--empty", snap, sizeof snap);
  refused("org/empty", VF_ENOTFOUND, "no config.json",
          "huggingface-cli download org/empty config.json", NULL);
  hub_folder(cache, "models--org--noconfig", snap, sizeof snap);
  snapshot_file(snap, "config.json", "never-downloaded", NULL);
  snapshot_file(snap, "model.safetensors", "never-downloaded-either", NULL);
  refused("org/noconfig", VF_ENOTFOUND, "no config.json", NULL);
}

/* Names that are not Hub ids never reach the cache's folders, and none crashes. */
static void hub_cache_odd_names(void **state) {
  (void)state;
  char dir[PATH], cache[PATH], snap[PATH];
  fresh_cache("names-odd", dir, sizeof dir, cache, sizeof cache);
  hub_model(cache, "models--org--tiny", tiny_config, snap, sizeof snap);
  static const char *odd[] = {"../tiny", "org/../tiny", "org//tiny", "org/tiny/x", "-org/tiny",
                              "org/tiny.", "org/ti--ny", "org/tiny\n", "/tiny", "org/", ""};
  for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) refused(odd[i], VF_ENOTFOUND, NULL);
  char longest[6000];
  memset(longest, 'a', sizeof longest - 1);
  longest[sizeof longest - 1] = '\0';
  refused(longest, VF_ENOTFOUND, "unknown model", NULL);
  longest[97] = '/';
  refused(longest, VF_ENOTFOUND, "unknown model", NULL);
  /* A cache that is a file, or unset, holds nothing. */
  setenv("HF_HUB_CACHE", snap, 1);
  refused("org/tiny", VF_ENOTFOUND, "not in the Hub cache", NULL);
  unsetenv("HF_HUB_CACHE");
  setenv("HOME", "", 1);
  refused("org/tiny", VF_ENOTFOUND, "not in the Hub cache (none", NULL);
}

/* ---- the catalogue ------------------------------------------------------------------- */

static void load_catalogue(struct vf_catalog *c) {
  struct vf_diag d;
  vf_catalog_init(c);
  if (vf_catalog_load(c, &d)) fail_msg("vf_catalog_load: %s: %s", d.file, d.msg);
}

static void upper(const char *s, char *out, size_t size) {
  size_t i = 0;
  for (; s[i] && i + 1 < size; i++) out[i] = (char)(s[i] >= 'a' && s[i] <= 'z' ? s[i] - 32 : s[i]);
  out[i] = '\0';
}

/* Every Hub id and alias leads to its entry, as written and in upper case. */
static void catalogue_ids_and_aliases(void **state) {
  (void)state;
  char dir[PATH], cache[PATH];
  fresh_cache("names-catalogue", dir, sizeof dir, cache, sizeof cache);
  struct vf_catalog c;
  load_catalogue(&c);
  size_t aliases = 0;
  for (size_t i = 0; i < c.n; i++) {
    const struct vf_catalog_entry *e = &c.entries[i];
    for (size_t j = 0; j <= e->n_aliases; j++) {
      const char *id = j ? e->aliases[j - 1] : e->hub_id;
      char up[256];
      upper(id, up, sizeof up);
      for (int k = 0; k < 2; k++) {
        struct vf_model m;
        loads(k ? up : id, &m);
        if (strcmp(m.name, e->name) != 0) fail_msg("%s is %s, not %s", k ? up : id, m.name, e->name);
        assert_string_equal(m.source, "catalogue");
        vf_model_cleanup(&m);
      }
    }
    aliases += e->n_aliases;
  }
  assert_true(aliases >= 80);
  vf_catalog_cleanup(&c);

  static const struct {
    const char *id, *entry;
  } published[] = {
      {"Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"},
      {"qwen2.5-7b-instruct", "qwen2.5-7b"},
      {"meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"},
      {"meta-llama/Meta-Llama-3.1-8B", "llama-3.1-8b"},
      {"meta-llama/meta-llama-3.1-8b-instruct", "llama-3.1-8b"},
      {"google/gemma-2-2b-it", "gemma-2-2b"},
      {"mistralai/Mistral-7B-Instruct-v0.1", "mistral-7b"},
      {"mistralai/Mistral-7B-Instruct-v0.2", "mistral-7b-v0.2"},
      {"microsoft/Phi-3-mini-4k-instruct", "phi-3-mini-4k-instruct"},
      {"TinyLlama/TinyLlama-1.1B-Chat-v1.0", "tinyllama-1.1b"},
  };
  for (size_t i = 0; i < sizeof published / sizeof *published; i++) {
    struct vf_model m;
    loads(published[i].id, &m);
    assert_string_equal(m.name, published[i].entry);
    vf_model_cleanup(&m);
  }
}

/* A Hub id the cache holds is read from the cache, even when the catalogue knows it. */
static void hub_cache_before_catalogue(void **state) {
  (void)state;
  char dir[PATH], cache[PATH], snap[PATH];
  fresh_cache("names-order", dir, sizeof dir, cache, sizeof cache);
  hub_model(cache, "models--Qwen--Qwen2.5-7B-Instruct", tiny_config, snap, sizeof snap);
  struct vf_model m;
  loads("qwen/qwen2.5-7b-instruct", &m);
  assert_string_equal(m.name, "Qwen/Qwen2.5-7B-Instruct");
  assert_int_equal(m.arch.hidden, 8);
  vf_model_cleanup(&m);
  loads("qwen2.5-7b-instruct", &m); /* a plain alias is the catalogue's */
  assert_string_equal(m.name, "qwen2.5-7b");
  vf_model_cleanup(&m);
}

static void unknown_names_suggest(void **state) {
  (void)state;
  char dir[PATH], cache[PATH];
  fresh_cache("names-unknown", dir, sizeof dir, cache, sizeof cache);
  refused("qwen2.5-7b-instrct", VF_ENOTFOUND, "unknown model 'qwen2.5-7b-instrct'",
          "did you mean qwen2.5-7b?", NULL);
  refused("Llama3.1-8B-Instruct", VF_ENOTFOUND, "did you mean llama-3.1-8b?", NULL);
  refused("QWEN2_5-7B", VF_ENOTFOUND, "did you mean qwen2.5-7b?", NULL);
  refused("Qwen/Qwen2.5-7B-Instrct", VF_ENOTFOUND, cache, "not in the catalogue",
          "'huggingface-cli download Qwen/Qwen2.5-7B-Instrct config.json'",
          "did you mean qwen2.5-7b?", NULL);
  refused("someone/unheard-of", VF_ENOTFOUND, "huggingface-cli download someone/unheard-of",
          "('vramfit models' lists them)", NULL);
  struct vf_model m;
  struct vf_diag d;
  vf_model_init(&m);
  assert_int_equal(vf_model_load(&m, "zzzzzzzzzzzz", &d), VF_ENOTFOUND);
  assert_null(strstr(d.msg, "did you mean"));
  vf_model_cleanup(&m);
}

static void catalogue_search(void **state) {
  (void)state;
  struct vf_catalog c;
  load_catalogue(&c);
  size_t qwen = 0, instruct = 0;
  for (size_t i = 0; i < c.n; i++) {
    qwen += vf_catalog_entry_matches(&c.entries[i], "QWEN");
    instruct += vf_catalog_entry_matches(&c.entries[i], "2.5-7B-INSTRUCT");
  }
  assert_int_equal(qwen, 15); /* Qwen2.5 0.5B to 72B, Qwen3 0.6B to 32B and its two MoE */
  assert_int_equal(instruct, 1);
  vf_catalog_cleanup(&c);
}

/* ---- the catalogue's own checks -------------------------------------------------------- */

/* A copy of the catalogue under VRAMFIT_DATA_DIR, with entry's text `from` replaced by `to`. */
static void edited_catalogue(const char *test, const char *entry, const char *from, const char *to) {
  char dir[PATH], models[PATH], path[PATH];
  unsetenv("VRAMFIT_DATA_DIR"); /* the copy is of the embedded catalogue */
  vf_test_tmpdir(test, dir, sizeof dir);
  join(models, sizeof models, "%s/models", dir);
  sh("mkdir -p '%s'", models);
  struct vf_catalog c;
  load_catalogue(&c);
  for (size_t i = 0; i < c.n; i++) {
    char *json, *edited, file[256];
    size_t len;
    assert_int_equal(vf_catalog_config(c.entries[i].name, &json, &len), 0);
    char *at = strcmp(c.entries[i].name, entry) == 0 ? strstr(json, from) : NULL;
    if (at) {
      assert_non_null(edited = malloc(len + strlen(to) + 1));
      sprintf(edited, "%.*s%s%s", (int)(at - json), json, to, at + strlen(from));
      vf_free(json);
      json = edited;
    }
    join(file, sizeof file, "%s.json", c.entries[i].name);
    vf_test_write(models, file, json, strlen(json), path, sizeof path);
    vf_free(json);
  }
  vf_catalog_cleanup(&c);
  setenv("VRAMFIT_DATA_DIR", dir, 1);
}

static void catalogue_refused(const char *needle1, const char *needle2) {
  struct vf_catalog c;
  struct vf_diag d;
  vf_catalog_init(&c);
  assert_int_equal(vf_catalog_load(&c, &d), VF_EFORMAT);
  assert_int_equal(c.n, 0);
  if (!strstr(d.msg, needle1) || !strstr(d.msg, needle2))
    fail_msg("'%s', '%s' not in %s: %s", needle1, needle2, d.file, d.msg);
}

static void catalogue_refuses_double_claims(void **state) {
  (void)state;
  char dir[PATH], cache[PATH];
  fresh_cache("names-claims-cache", dir, sizeof dir, cache, sizeof cache);
  edited_catalogue("names-claims", "llama-2-7b", "\"aliases\": [",
                   "\"aliases\": [\"QWEN/Qwen2.5-7B-Instruct\", ");
  catalogue_refused("claimed by", "llama-2-7b");
  catalogue_refused("qwen2.5-7b", "Qwen2.5-7B-Instruct");
  /* The loader of MODEL refuses it too, rather than pick one. */
  refused("Qwen/Qwen2.5-7B-Instruct", VF_EFORMAT, "claimed by", NULL);

  edited_catalogue("names-claims", "gpt2", "\"aliases\": []", "\"aliases\": [\"GPT2-Large\"]");
  catalogue_refused("gpt2-large", "claimed by");
  edited_catalogue("names-claims", "phi-2", "\"aliases\": []",
                   "\"aliases\": [\"microsoft/phi-2\"]");
  catalogue_refused("microsoft/phi-2", "claimed by phi-2 and again by phi-2");

  edited_catalogue("names-claims", "gpt2", "\"aliases\": [],", "");
  catalogue_refused("_vramfit.aliases", "required");
  edited_catalogue("names-claims", "gpt2", "\"aliases\": []", "\"aliases\": [\"a b\"]");
  catalogue_refused("_vramfit.aliases[0]", "not a Hub id or a name");
  edited_catalogue("names-claims", "gpt2", "\"hf_repo\": \"openai-community/gpt2\",", "");
  catalogue_refused("_vramfit.hf_repo", "required");
  unsetenv("VRAMFIT_DATA_DIR");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(hub_cache_snapshot_with_checkpoint),
      cmocka_unit_test(hub_cache_missing_blobs),
      cmocka_unit_test(hub_cache_broken_folders),
      cmocka_unit_test(catalogue_ids_and_aliases),
      cmocka_unit_test(hub_cache_before_catalogue),
      cmocka_unit_test(unknown_names_suggest),
      cmocka_unit_test(catalogue_search),
      cmocka_unit_test(catalogue_refuses_double_claims),
      cmocka_unit_test(hub_cache_odd_names), /* last: it clears HOME */
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

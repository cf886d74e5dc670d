/* The model description: catalogue parameter counts, per-kind splits, tensor layouts,
 * name classification, dtype sizes, checkpoint adoption and architecture validation.
 *
 * Every expected number is written out here (from shared/calibration/models.tsv and from
 * hand computation), never read at run time, so a change in the code that moves a count
 * fails this test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "vramfit.h"

/* ---- helpers ------------------------------------------------------------------------ */

static void load(struct vf_model *m, const char *name) {
  struct vf_diag d;
  vf_model_init(m);
  int rc = vf_model_load(m, name, &d);
  if (rc) fail_msg("vf_model_load(%s): %d %s", name, rc, d.msg);
}

static const struct vf_tensor *tensor(const struct vf_model *m, const char *name) {
  for (size_t i = 0; i < m->n_tensors; i++)
    if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
  fail_msg("%s has no tensor %s", m->name, name);
  return NULL;
}

static bool has_tensor(const struct vf_model *m, const char *name) {
  for (size_t i = 0; i < m->n_tensors; i++)
    if (strcmp(m->tensors[i].name, name) == 0) return true;
  return false;
}

static void assert_shape(const struct vf_model *m, const char *name, uint32_t ndim, uint64_t d0,
                         uint64_t d1) {
  const struct vf_tensor *t = tensor(m, name);
  assert_int_equal(t->ndim, ndim);
  assert_int_equal(t->shape[0], d0);
  if (ndim > 1) assert_int_equal(t->shape[1], d1);
}

/* q k v o gate up down head embedding norm other, in enum vf_kind order. */
static void assert_by_kind(const struct vf_model *m, const uint64_t want[VF_KIND_PUBLIC_COUNT]) {
  uint64_t got[VF_KIND_PUBLIC_COUNT];
  vf_model_by_kind(m, got);
  uint64_t sum = 0;
  for (int k = 0; k < VF_KIND_PUBLIC_COUNT; k++) {
    if (got[k] != want[k])
      fail_msg("%s by_kind[%s] = %llu, want %llu", m->name, vf_kind_name((enum vf_kind)k),
               (unsigned long long)got[k], (unsigned long long)want[k]);
    sum += got[k];
  }
  /* The split must neither lose nor invent parameters. */
  assert_int_equal(sum, vf_model_params(m));
}

/* ---- catalogue parameter counts ----------------------------------------------------- */

/* shared/calibration/models.tsv, column total_params (all 36 models there have a number). */
static const struct {
  const char *name;
  uint64_t params;
} catalogue[] = {
    {"gpt2", 124439808ull},
    {"gpt2-medium", 354823168ull},
    {"gpt2-large", 774030080ull},
    {"gpt2-xl", 1557611200ull},
    {"bert-base-uncased", 109482240ull},
    {"bert-large-uncased", 335141888ull},
    {"roberta-large", 355359744ull},
    {"llama-2-7b", 6738415616ull},
    {"llama-2-13b", 13015864320ull},
    {"llama-2-70b", 68976648192ull},
    {"llama-3-8b", 8030261248ull},
    {"llama-3.1-8b", 8030261248ull},
    {"llama-3.1-70b", 70553706496ull},
    {"llama-3.1-405b", 405853388800ull},
    {"llama-3.2-1b", 1235814400ull},
    {"llama-3.2-3b", 3212749824ull},
    {"mistral-7b", 7241732096ull},
    {"mistral-7b-v0.2", 7241732096ull},
    {"mixtral-8x7b", 46702792704ull},
    {"qwen2.5-0.5b", 494032768ull},
    {"qwen2.5-1.5b", 1543714304ull},
    {"qwen2.5-7b", 7615616512ull},
    {"qwen2.5-14b", 14770033664ull},
    {"qwen2.5-72b", 72706203648ull},
    {"gemma-2b", 2506172416ull},
    {"gemma-7b", 8537680896ull},
    {"gemma-2-2b", 2614341888ull},
    {"gemma-2-9b", 9241705984ull},
    {"phi-1.5", 1418270720ull},
    {"phi-2", 2779683840ull},
    {"phi-3-mini-4k-instruct", 3821079552ull},
    {"tinyllama-1.1b", 1100048384ull},
    {"falcon-7b", 6921720704ull},
    {"stablelm-base-alpha-3b", 3637321728ull},
    {"pythia-1b", 1011781632ull},
    {"pythia-6.9b", 6857302016ull},
    /* Added since, counted by hand from their configs; each file's _vramfit says what the
     * count was checked against (test_catalogue_published below holds them to it). The
     * text-only Gemma 3 4B, 12B and 27B have no published count of their own: keras-hub's
     * text presets count a 262,144-row table, the checkpoints hold 262,208 rows. */
    {"deepseek-v2-lite", 15706484224ull},
    {"gemma-2-27b", 27227128320ull},
    {"gemma-3-1b", 999885952ull},
    {"gemma-3-4b", 3880263168ull},   /* keras-hub 3,880,099,328 + 64 x 2560 */
    {"gemma-3-12b", 11766034176ull}, /* keras-hub 11,765,788,416 + 64 x 3840 */
    {"gemma-3-27b", 27009346304ull}, /* keras-hub 27,009,002,240 + 64 x 5376 */
    {"llama-3.3-70b", 70553706496ull},
    {"mistral-nemo-12b", 12247782400ull},
    {"mistral-small-24b", 23572403200ull},
    {"mixtral-8x22b", 140630071296ull},
    {"olmo-2-1b", 1484916736ull},
    {"olmo-2-7b", 7298617344ull},
    {"olmo-2-13b", 13716198400ull},
    {"phi-3.5-mini-instruct", 3821079552ull},
    {"phi-4", 14659507200ull},
    {"phi-4-mini-instruct", 3836021760ull},
    {"qwen2.5-3b", 3085938688ull},
    {"qwen2.5-32b", 32763876352ull},
    {"qwen3-0.6b", 596049920ull},
    {"qwen3-1.7b", 1720574976ull},
    {"qwen3-4b", 4022468096ull},
    {"qwen3-8b", 8190735360ull},
    {"qwen3-14b", 14768307200ull},
    {"qwen3-32b", 32762123264ull},
    {"qwen3-30b-a3b", 30532122624ull},
    {"qwen3-235b-a22b", 235093634560ull},
    {"smollm2-135m", 134515008ull},
    {"smollm2-360m", 361821120ull},
    {"smollm2-1.7b", 1711376384ull},
    {"smollm3-3b", 3075098624ull},
};
#define N_CATALOGUE (sizeof catalogue / sizeof *catalogue)

static void test_catalogue_params(void **state) {
  (void)state;
  for (size_t i = 0; i < N_CATALOGUE; i++) {
    struct vf_model m;
    load(&m, catalogue[i].name);
    if (vf_model_params(&m) != catalogue[i].params)
      fail_msg("%s: %llu parameters, models.tsv says %llu", catalogue[i].name,
               (unsigned long long)vf_model_params(&m), (unsigned long long)catalogue[i].params);
    assert_string_equal(m.name, catalogue[i].name);
    assert_string_equal(m.source, "catalogue");
    assert_true(m.has_arch);
    uint64_t bytes;
    assert_int_equal(vf_model_bytes(&m, &bytes), 0);
    vf_model_cleanup(&m);
  }
}

/* A published count rounded to its last non-zero digit (7.61B written 7610000000) holds
 * within half that digit's unit; an exact count holds exactly (a count that happens to end
 * in zeros gets a tolerance of a few parameters, which no configuration error stays within). */
static uint64_t published_tolerance(uint64_t published) {
  uint64_t unit = 1;
  while (published && published % (unit * 10) == 0) unit *= 10;
  return unit / 2;
}

/* _vramfit.published_params of a catalogue model, or 0 without one. */
static uint64_t published_params(const char *name) {
  char *text;
  size_t len;
  assert_int_equal(vf_catalog_config(name, &text, &len), 0);
  json_t *root = json_loadb(text, len, 0, NULL);
  vf_free(text);
  assert_non_null(root);
  json_t *v = json_object_get(json_object_get(root, "_vramfit"), "published_params");
  if (v && !json_is_integer(v)) fail_msg("%s: published_params is not a whole number", name);
  uint64_t n = v ? (uint64_t)json_integer_value(v) : 0;
  json_decref(root);
  return n;
}

/* Every catalogue model with a published parameter count counts to it. */
static void test_catalogue_published(void **state) {
  (void)state;
  struct vf_catalog c;
  struct vf_diag d;
  vf_catalog_init(&c);
  if (vf_catalog_load(&c, &d)) fail_msg("vf_catalog_load: %s: %s", d.file, d.msg);
  for (size_t i = 0; i < c.n; i++) {
    const char *name = c.entries[i].name;
    uint64_t published = published_params(name);
    if (!published) continue;
    struct vf_model m;
    load(&m, name);
    uint64_t n = vf_model_params(&m), off = n > published ? n - published : published - n;
    if (off > published_tolerance(published))
      fail_msg("%s: %llu parameters, published %llu (within %llu)", name, (unsigned long long)n,
               (unsigned long long)published, (unsigned long long)published_tolerance(published));
    vf_model_cleanup(&m);
  }
  vf_catalog_cleanup(&c);
}

/* Every catalogue entry is tested above and every tested name is in the catalogue, in
 * name order ("gpt2" before "gpt2-large"). */
static void test_catalogue_listing(void **state) {
  (void)state;
  struct vf_catalog c;
  struct vf_diag d;
  vf_catalog_init(&c);
  if (vf_catalog_load(&c, &d)) fail_msg("vf_catalog_load: %s: %s", d.file, d.msg);
  assert_int_equal(c.n, N_CATALOGUE);
  const char *prev = "";
  for (size_t i = 0; i < c.n; i++) {
    const char *name = c.entries[i].name;
    assert_true(strcmp(prev, name) < 0);
    bool known = false;
    for (size_t j = 0; j < N_CATALOGUE; j++) known |= strcmp(catalogue[j].name, name) == 0;
    if (!known) fail_msg("catalogue has %s, which this test does not check", name);
    prev = name;
  }
  vf_catalog_cleanup(&c);
}

static void test_catalogue_case_insensitive(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, "LLAMA-2-7B");
  assert_string_equal(m.name, "llama-2-7b");
  assert_int_equal(vf_model_params(&m), 6738415616ull);
  vf_model_cleanup(&m);

  struct vf_diag d;
  vf_model_init(&m);
  assert_int_equal(vf_model_load(&m, "llama-9-1t", &d), VF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "llama-9-1t"));
  assert_int_equal(vf_model_load(&m, "", &d), VF_ENOTFOUND);
  assert_int_equal(vf_model_load(&m, "../models/gpt2", &d), VF_ENOTFOUND);
  vf_model_cleanup(&m);
}

/* ---- per-kind splits, hand-computed ------------------------------------------------- */

static void test_by_kind_llama31_8b(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, "llama-3.1-8b");
  /* q 32 x 4096 x 4096; k, v 32 x 4096 x 1024 (8 kv heads); MLP 32 x 4096 x 14336;
   * head and embedding 128256 x 4096; norms (2 x 32 + 1) x 4096. */
  const uint64_t want[] = {536870912, 134217728, 134217728, 536870912, 1879048192, 1879048192,
                           1879048192, 525336576, 525336576, 266240, 0};
  assert_by_kind(&m, want);
  assert_int_equal(vf_model_embedding_params(&m), 525336576);
  assert_int_equal(m.n_tensors, 291); /* as in the released safetensors */
  assert_int_equal(vf_model_main_dtype(&m), VF_DTYPE_BF16);
  uint64_t bytes;
  assert_int_equal(vf_model_bytes(&m, &bytes), 0);
  assert_int_equal(bytes, 2 * 8030261248ull);
  vf_model_cleanup(&m);
}

static void test_by_kind_gpt2_fused_thirds(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, "gpt2");
  /* c_attn is one [768, 2304] Conv1D with a 2304 bias per layer: 12 x 1,771,776 split in
   * equal thirds. The head is tied, so it adds nothing; wte + wpe are the embedding. */
  const uint64_t want[] = {7087104, 7087104, 7087104, 7087104, 0, 28348416, 28320768,
                           0, 39383808, 38400, 0};
  assert_by_kind(&m, want);
  assert_int_equal(vf_model_embedding_params(&m), (50257 + 1024) * 768);
  assert_int_equal(m.n_tensors, 148);
  assert_int_equal(vf_model_main_dtype(&m), VF_DTYPE_F32);
  vf_model_cleanup(&m);
}

static void test_by_kind_phi3_fused(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, "phi-3-mini-4k-instruct");
  /* qkv_proj [9216, 3072] split 32:32:32 heads; gate_up_proj [16384, 3072] split in halves. */
  const uint64_t want[] = {301989888, 301989888, 301989888, 301989888, 805306368, 805306368,
                           805306368, 98500608, 98500608, 199680, 0};
  assert_by_kind(&m, want);
  assert_shape(&m, "model.layers.0.self_attn.qkv_proj.weight", 2, 9216, 3072);
  assert_shape(&m, "model.layers.0.mlp.gate_up_proj.weight", 2, 16384, 3072);
  assert_int_equal(tensor(&m, "model.layers.0.self_attn.qkv_proj.weight")->kind, VF_KIND_QKV);
  assert_int_equal(tensor(&m, "model.layers.0.mlp.gate_up_proj.weight")->kind, VF_KIND_GATE_UP);
  assert_false(has_tensor(&m, "model.layers.0.self_attn.q_proj.weight"));
  vf_model_cleanup(&m);
}

static void test_by_kind_falcon_multi_query(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, "falcon-7b");
  /* query_key_value [4672, 4544]: 71 query heads and one shared k and v head of 64. */
  assert_shape(&m, "transformer.h.0.self_attention.query_key_value.weight", 2, 4672, 4544);
  assert_false(has_tensor(&m, "transformer.h.0.self_attention.query_key_value.bias"));
  assert_false(has_tensor(&m, "lm_head.weight")); /* tied */
  assert_true(has_tensor(&m, "transformer.h.31.input_layernorm.bias"));
  assert_false(has_tensor(&m, "transformer.h.0.ln_attn.weight"));
  const uint64_t want[] = {660733952, 9306112, 9306112, 660733952, 0, 2642935808, 2642935808,
                           0, 295469056, 299904, 0};
  assert_by_kind(&m, want);
  vf_model_cleanup(&m);
}

static void test_by_kind_other_families(void **state) {
  (void)state;
  static const struct {
    const char *name;
    uint64_t want[VF_KIND_PUBLIC_COUNT];
  } cases[] = {
      /* q/k/v carry biases, o does not. */
      {"qwen2.5-7b", {359761920, 51394560, 51394560, 359661568, 1901068288, 1901068288,
                      1901068288, 544997376, 544997376, 204288, 0}},
      /* head_dim 256: q, k, v, o 16 x 256 = 4096 wide on a 3072 hidden. */
      {"gemma-7b", {352321536, 352321536, 352321536, 352321536, 2113929216, 2113929216,
                    2113929216, 0, 786432000, 175104, 0}},
      /* four norms per layer. */
      {"gemma-2-2b", {122683392, 61341696, 61341696, 122683392, 552075264, 552075264,
                      552075264, 0, 589824000, 241920, 0}},
      {"llama-3.2-1b", {67108864, 16777216, 16777216, 67108864, 268435456, 268435456,
                        268435456, 0, 262668288, 67584, 0}},
      /* biases everywhere, an lm_head bias, one LayerNorm per layer. */
      {"phi-2", {209797120, 209797120, 209797120, 209797120, 0, 839188480, 838942720,
                 131123200, 131072000, 168960, 0}},
      /* fused query_key_value with biases, split in thirds; untied embed_out. */
      {"pythia-1b", {67141632, 67141632, 67141632, 67141632, 0, 268566528, 268468224,
                     103022592, 103022592, 135168, 0}},
      /* encoder with pooler (other). */
      {"bert-large-uncased", {25190400, 25190400, 25190400, 25190400, 0, 100761600, 100687872,
                              0, 31780864, 100352, 1049600}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    struct vf_model m;
    load(&m, cases[i].name);
    assert_by_kind(&m, cases[i].want);
    vf_model_cleanup(&m);
  }
}

static void test_by_kind_mixtral(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, "mixtral-8x7b");
  uint64_t got[VF_KIND_PUBLIC_COUNT];
  vf_model_by_kind(&m, got);
  /* 32 layers x 8 experts x 4096 x 14336 each for gate, up and down; the router
   * (32 x [8, 4096]) counts as other. */
  assert_int_equal(got[VF_KIND_GATE], 15032385536ull);
  assert_int_equal(got[VF_KIND_UP], 15032385536ull);
  assert_int_equal(got[VF_KIND_DOWN], 15032385536ull);
  assert_int_equal(got[VF_KIND_OTHER], 1048576);
  assert_int_equal(got[VF_KIND_K], 134217728);
  vf_model_cleanup(&m);
}

/* Without a config the split of a fused qkv cannot know the head counts: thirds. */
static void test_by_kind_without_arch(void **state) {
  (void)state;
  struct vf_model m;
  vf_model_init(&m);
  struct vf_tensor t = {.name = "blk.0.attn_qkv.weight", .ndim = 2, .shape = {300, 10},
                        .dtype = VF_DTYPE_F16, .kind = VF_KIND_QKV, .layer = 0, .expert = -1};
  assert_int_equal(vf_model_add_tensor(&m, &t), 0);
  struct vf_tensor gu = {.name = "x.gate_up_proj.weight", .ndim = 2, .shape = {7, 2},
                         .dtype = VF_DTYPE_F16, .kind = VF_KIND_GATE_UP, .layer = 0, .expert = -1};
  assert_int_equal(vf_model_add_tensor(&m, &gu), 0);
  uint64_t got[VF_KIND_PUBLIC_COUNT];
  vf_model_by_kind(&m, got);
  assert_int_equal(got[VF_KIND_Q], 1000);
  assert_int_equal(got[VF_KIND_K], 1000);
  assert_int_equal(got[VF_KIND_V], 1000);
  /* 14 elements: gate gets the rounded-down half, up the rest; nothing is lost. */
  assert_int_equal(got[VF_KIND_GATE], 7);
  assert_int_equal(got[VF_KIND_UP], 7);
  vf_model_cleanup(&m);
}

/* ---- tensor layouts ----------------------------------------------------------------- */

static void test_tensors_gpt2_conv1d(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, "gpt2");
  /* Conv1D stores [in, out], the transpose of nn.Linear. */
  assert_shape(&m, "transformer.h.0.attn.c_attn.weight", 2, 768, 2304);
  assert_shape(&m, "transformer.h.0.attn.c_attn.bias", 1, 2304, 0);
  assert_shape(&m, "transformer.h.0.attn.c_proj.weight", 2, 768, 768);
  assert_shape(&m, "transformer.h.11.mlp.c_fc.weight", 2, 768, 3072);
  assert_shape(&m, "transformer.h.11.mlp.c_proj.weight", 2, 3072, 768);
  assert_shape(&m, "transformer.wte.weight", 2, 50257, 768);
  assert_shape(&m, "transformer.wpe.weight", 2, 1024, 768);
  assert_shape(&m, "transformer.ln_f.bias", 1, 768, 0);
  assert_false(has_tensor(&m, "lm_head.weight"));
  assert_false(has_tensor(&m, "transformer.h.12.ln_1.weight"));
  const struct vf_tensor *t = tensor(&m, "transformer.h.11.mlp.c_proj.weight");
  assert_int_equal(t->kind, VF_KIND_DOWN);
  assert_int_equal(t->layer, 11);
  assert_int_equal(t->expert, -1);
  assert_int_equal(t->dtype, VF_DTYPE_F32);
  assert_int_equal(tensor(&m, "transformer.wte.weight")->layer, -1);
  vf_model_cleanup(&m);
}

static void test_tensors_gemma(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, "gemma-2b");
  /* 8 heads x head_dim 256, a single kv head, tied head. */
  assert_int_equal(m.arch.head_dim, 256);
  assert_shape(&m, "model.layers.0.self_attn.q_proj.weight", 2, 2048, 2048);
  assert_shape(&m, "model.layers.0.self_attn.k_proj.weight", 2, 256, 2048);
  assert_shape(&m, "model.layers.17.self_attn.o_proj.weight", 2, 2048, 2048);
  assert_false(has_tensor(&m, "lm_head.weight"));
  vf_model_cleanup(&m);

  load(&m, "gemma-7b");
  /* head_dim 256 x 16 heads = 4096, wider than the 3072 hidden. */
  assert_shape(&m, "model.layers.0.self_attn.q_proj.weight", 2, 4096, 3072);
  assert_shape(&m, "model.layers.0.self_attn.v_proj.weight", 2, 4096, 3072);
  assert_shape(&m, "model.layers.0.self_attn.o_proj.weight", 2, 3072, 4096);
  vf_model_cleanup(&m);

  load(&m, "gemma-2-2b");
  assert_shape(&m, "model.layers.0.self_attn.q_proj.weight", 2, 2048, 2304);
  assert_shape(&m, "model.layers.0.self_attn.k_proj.weight", 2, 1024, 2304);
  assert_shape(&m, "model.layers.25.pre_feedforward_layernorm.weight", 1, 2304, 0);
  assert_shape(&m, "model.layers.25.post_feedforward_layernorm.weight", 1, 2304, 0);
  assert_true(m.arch.final_logit_softcap > 29.9 && m.arch.final_logit_softcap < 30.1);
  vf_model_cleanup(&m);
}

static void test_tensors_mixtral(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, "mixtral-8x7b");
  assert_int_equal(m.arch.experts, 8);
  assert_int_equal(m.arch.experts_per_token, 2);
  /* Per layer: 2 norms, q k v o, router, 8 experts x w1 w2 w3; plus embed, norm, head. */
  assert_int_equal(m.n_tensors, 1 + 32 * (2 + 4 + 1 + 24) + 2);
  const struct vf_tensor *r = tensor(&m, "model.layers.31.block_sparse_moe.gate.weight");
  assert_int_equal(r->kind, VF_KIND_ROUTER);
  assert_int_equal(r->shape[0], 8);
  assert_int_equal(r->shape[1], 4096);
  assert_int_equal(r->layer, 31);
  assert_int_equal(r->expert, -1);
  const struct vf_tensor *w1 = tensor(&m, "model.layers.3.block_sparse_moe.experts.7.w1.weight");
  assert_int_equal(w1->kind, VF_KIND_GATE);
  assert_int_equal(w1->expert, 7);
  assert_int_equal(w1->layer, 3);
  assert_shape(&m, "model.layers.3.block_sparse_moe.experts.7.w1.weight", 2, 14336, 4096);
  assert_shape(&m, "model.layers.3.block_sparse_moe.experts.7.w2.weight", 2, 4096, 14336);
  assert_int_equal(tensor(&m, "model.layers.3.block_sparse_moe.experts.7.w2.weight")->kind,
                   VF_KIND_DOWN);
  assert_int_equal(tensor(&m, "model.layers.3.block_sparse_moe.experts.0.w3.weight")->kind,
                   VF_KIND_UP);
  assert_false(has_tensor(&m, "model.layers.0.block_sparse_moe.experts.8.w1.weight"));
  assert_false(has_tensor(&m, "model.layers.0.mlp.gate_proj.weight"));
  vf_model_cleanup(&m);
}

/* q_norm and k_norm span a head in qwen3 and gemma3 (modeling_qwen3.py, modeling_gemma3.py
 * in transformers 5.23), the whole projection in olmo2 (modeling_olmo2.py), whose two norms
 * follow the sublayers; head_dim may differ from hidden / heads (Mistral Nemo). */
static void test_tensors_qk_norms(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, "qwen3-8b");
  assert_shape(&m, "model.layers.0.self_attn.q_norm.weight", 1, 128, 0);
  assert_shape(&m, "model.layers.35.self_attn.k_norm.weight", 1, 128, 0);
  assert_shape(&m, "model.layers.0.self_attn.q_proj.weight", 2, 4096, 4096);
  assert_int_equal(tensor(&m, "model.layers.0.self_attn.q_norm.weight")->kind, VF_KIND_NORM);
  assert_true(has_tensor(&m, "model.layers.0.input_layernorm.weight"));
  vf_model_cleanup(&m);

  load(&m, "olmo-2-7b");
  assert_shape(&m, "model.layers.0.self_attn.q_norm.weight", 1, 4096, 0);
  assert_shape(&m, "model.layers.0.self_attn.k_norm.weight", 1, 4096, 0);
  assert_shape(&m, "model.layers.31.post_feedforward_layernorm.weight", 1, 4096, 0);
  assert_true(has_tensor(&m, "model.layers.0.post_attention_layernorm.weight"));
  assert_false(has_tensor(&m, "model.layers.0.input_layernorm.weight"));
  assert_false(has_tensor(&m, "model.layers.0.pre_feedforward_layernorm.weight"));
  assert_true(m.arch.post_norms);
  assert_int_equal(m.arch.dtype, VF_DTYPE_F32);
  vf_model_cleanup(&m);

  load(&m, "gemma-3-27b");
  assert_shape(&m, "model.layers.0.self_attn.q_norm.weight", 1, 128, 0);
  assert_shape(&m, "model.layers.0.self_attn.q_proj.weight", 2, 4096, 5376);
  assert_shape(&m, "model.layers.61.pre_feedforward_layernorm.weight", 1, 5376, 0);
  assert_shape(&m, "model.embed_tokens.weight", 2, 262208, 5376);
  assert_false(has_tensor(&m, "lm_head.weight"));
  vf_model_cleanup(&m);

  load(&m, "mistral-nemo-12b");
  assert_shape(&m, "model.layers.0.self_attn.q_proj.weight", 2, 4096, 5120);
  assert_shape(&m, "model.layers.0.self_attn.o_proj.weight", 2, 5120, 4096);
  assert_int_equal(m.arch.qk_norm, VF_QK_NORM_NONE);
  vf_model_cleanup(&m);

  load(&m, "phi-4-mini-instruct");
  assert_true(m.arch.tied_embeddings);
  assert_true(m.arch.rotary_fraction == 0.75);
  assert_shape(&m, "model.layers.0.self_attn.qkv_proj.weight", 2, 3072 + 2 * 1024, 3072);
  vf_model_cleanup(&m);
}

/* qwen3_moe's experts on every layer, named as its checkpoints name them; deepseek_v2's
 * latent attention, its dense first layer and the shared experts of the others. */
static void test_tensors_moe_and_mla(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, "qwen3-30b-a3b");
  assert_shape(&m, "model.layers.0.mlp.gate.weight", 2, 128, 2048);
  assert_shape(&m, "model.layers.47.mlp.experts.127.down_proj.weight", 2, 2048, 768);
  assert_shape(&m, "model.layers.0.self_attn.k_norm.weight", 1, 128, 0);
  assert_int_equal(tensor(&m, "model.layers.0.mlp.gate.weight")->kind, VF_KIND_ROUTER);
  assert_int_equal(tensor(&m, "model.layers.3.mlp.experts.5.up_proj.weight")->expert, 5);
  assert_false(has_tensor(&m, "model.layers.0.mlp.gate_proj.weight"));
  assert_int_equal(m.arch.intermediate, 768);
  vf_model_cleanup(&m);

  load(&m, "deepseek-v2-lite");
  assert_shape(&m, "model.layers.0.self_attn.q_proj.weight", 2, 16 * 192, 2048);
  assert_shape(&m, "model.layers.0.self_attn.kv_a_proj_with_mqa.weight", 2, 512 + 64, 2048);
  assert_shape(&m, "model.layers.0.self_attn.kv_a_layernorm.weight", 1, 512, 0);
  assert_shape(&m, "model.layers.0.self_attn.kv_b_proj.weight", 2, 16 * (128 + 128), 512);
  assert_shape(&m, "model.layers.0.self_attn.o_proj.weight", 2, 2048, 16 * 128);
  assert_shape(&m, "model.layers.0.mlp.gate_proj.weight", 2, 10944, 2048);
  assert_false(has_tensor(&m, "model.layers.0.mlp.gate.weight"));
  assert_shape(&m, "model.layers.1.mlp.gate.weight", 2, 64, 2048);
  assert_shape(&m, "model.layers.26.mlp.experts.63.gate_proj.weight", 2, 1408, 2048);
  const struct vf_tensor *shared = tensor(&m, "model.layers.1.mlp.shared_experts.down_proj.weight");
  assert_int_equal(shared->shape[1], 2 * 1408);
  assert_int_equal(shared->expert, -1);
  assert_int_equal(shared->kind, VF_KIND_DOWN);
  assert_int_equal(tensor(&m, "model.layers.0.self_attn.kv_b_proj.weight")->kind, VF_KIND_OTHER);
  vf_model_cleanup(&m);
}

static void test_tensors_bert(void **state) {
  (void)state;
  struct vf_model m;
  load(&m, "bert-base-uncased");
  assert_int_equal(m.n_tensors, 199); /* BertModel's named parameters */
  assert_shape(&m, "bert.embeddings.word_embeddings.weight", 2, 30522, 768);
  assert_shape(&m, "bert.embeddings.position_embeddings.weight", 2, 512, 768);
  assert_shape(&m, "bert.embeddings.token_type_embeddings.weight", 2, 2, 768);
  assert_shape(&m, "bert.encoder.layer.11.attention.self.query.weight", 2, 768, 768);
  assert_shape(&m, "bert.encoder.layer.11.attention.self.key.bias", 1, 768, 0);
  assert_shape(&m, "bert.encoder.layer.11.intermediate.dense.weight", 2, 3072, 768);
  assert_shape(&m, "bert.encoder.layer.11.output.dense.weight", 2, 768, 3072);
  assert_shape(&m, "bert.pooler.dense.weight", 2, 768, 768);
  assert_int_equal(tensor(&m, "bert.encoder.layer.4.attention.self.value.weight")->kind, VF_KIND_V);
  assert_int_equal(tensor(&m, "bert.encoder.layer.4.attention.output.dense.weight")->kind, VF_KIND_O);
  assert_int_equal(tensor(&m, "bert.encoder.layer.4.output.LayerNorm.weight")->kind, VF_KIND_NORM);
  assert_int_equal(tensor(&m, "bert.pooler.dense.weight")->kind, VF_KIND_OTHER);
  assert_int_equal(vf_model_embedding_params(&m), (30522 + 512 + 2) * 768);
  vf_model_cleanup(&m);

  load(&m, "roberta-large");
  /* RoBERTa: its own prefix, 514 positions, a single token type. */
  assert_shape(&m, "roberta.embeddings.position_embeddings.weight", 2, 514, 1024);
  assert_shape(&m, "roberta.embeddings.token_type_embeddings.weight", 2, 1, 1024);
  assert_false(has_tensor(&m, "bert.pooler.dense.weight"));
  vf_model_cleanup(&m);
}

/* Each tensor's stored kind, layer and expert agree with what its name says: the same
 * classifier runs on real checkpoints, so the two must never drift apart. */
static void test_expanded_names_classify_back(void **state) {
  (void)state;
  for (size_t i = 0; i < N_CATALOGUE; i++) {
    struct vf_model m;
    load(&m, catalogue[i].name);
    for (size_t j = 0; j < m.n_tensors; j++) {
      const struct vf_tensor *t = &m.tensors[j];
      int32_t layer, expert;
      enum vf_kind k = vf_kind_from_name(t->name, &layer, &expert);
      if (k != t->kind || layer != t->layer || expert != t->expert)
        fail_msg("%s: %s is %s/%d/%d by name, %s/%d/%d by layout", catalogue[i].name, t->name,
                 vf_kind_name(k), layer, expert, vf_kind_name(t->kind), t->layer, t->expert);
    }
    vf_model_cleanup(&m);
  }
}

/* ---- vf_kind_from_name -------------------------------------------------------------- */

static void test_kind_from_name(void **state) {
  (void)state;
  static const struct {
    const char *name;
    enum vf_kind kind;
    int32_t layer, expert;
  } cases[] = {
      /* Hugging Face llama family */
      {"model.layers.3.self_attn.q_proj.weight", VF_KIND_Q, 3, -1},
      {"model.layers.3.self_attn.k_proj.bias", VF_KIND_K, 3, -1},
      {"model.layers.12.self_attn.v_proj.weight", VF_KIND_V, 12, -1},
      {"model.layers.0.self_attn.o_proj.weight", VF_KIND_O, 0, -1},
      {"model.layers.31.mlp.gate_proj.weight", VF_KIND_GATE, 31, -1},
      {"model.layers.31.mlp.up_proj.weight", VF_KIND_UP, 31, -1},
      {"model.layers.31.mlp.down_proj.weight", VF_KIND_DOWN, 31, -1},
      {"model.layers.2.input_layernorm.weight", VF_KIND_NORM, 2, -1},
      {"model.layers.2.post_attention_layernorm.weight", VF_KIND_NORM, 2, -1},
      {"model.norm.weight", VF_KIND_NORM, -1, -1},
      {"model.embed_tokens.weight", VF_KIND_EMBEDDING, -1, -1},
      {"lm_head.weight", VF_KIND_HEAD, -1, -1},
      {"model.layers.0.self_attn.qkv_proj.weight", VF_KIND_QKV, 0, -1},
      {"model.layers.0.mlp.gate_up_proj.weight", VF_KIND_GATE_UP, 0, -1},
      {"model.layers.1.block_sparse_moe.experts.5.w2.weight", VF_KIND_DOWN, 1, 5},
      {"model.layers.1.block_sparse_moe.experts.5.w1.weight", VF_KIND_GATE, 1, 5},
      {"model.layers.1.block_sparse_moe.experts.15.w3.weight", VF_KIND_UP, 1, 15},
      {"model.layers.1.block_sparse_moe.gate.weight", VF_KIND_ROUTER, 1, -1},
      {"model.layers.0.self_attn.rotary_emb.inv_freq", VF_KIND_OTHER, 0, -1},
      /* GPT-2 */
      {"transformer.h.0.attn.c_attn.weight", VF_KIND_QKV, 0, -1},
      {"transformer.h.0.attn.c_proj.weight", VF_KIND_O, 0, -1},
      {"transformer.h.0.mlp.c_fc.weight", VF_KIND_UP, 0, -1},
      {"transformer.h.0.mlp.c_proj.weight", VF_KIND_DOWN, 0, -1},
      {"transformer.h.10.ln_2.bias", VF_KIND_NORM, 10, -1},
      {"transformer.wte.weight", VF_KIND_EMBEDDING, -1, -1},
      {"transformer.wpe.weight", VF_KIND_EMBEDDING, -1, -1},
      {"transformer.ln_f.weight", VF_KIND_NORM, -1, -1},
      {"h.4.attn.c_attn.bias", VF_KIND_QKV, 4, -1}, /* saved without the prefix */
      /* GPT-NeoX, Falcon */
      {"gpt_neox.layers.5.attention.query_key_value.weight", VF_KIND_QKV, 5, -1},
      {"gpt_neox.layers.5.attention.dense.weight", VF_KIND_O, 5, -1},
      {"gpt_neox.layers.5.mlp.dense_h_to_4h.weight", VF_KIND_UP, 5, -1},
      {"gpt_neox.layers.5.mlp.dense_4h_to_h.weight", VF_KIND_DOWN, 5, -1},
      {"gpt_neox.embed_in.weight", VF_KIND_EMBEDDING, -1, -1},
      {"embed_out.weight", VF_KIND_HEAD, -1, -1},
      {"transformer.h.7.self_attention.query_key_value.weight", VF_KIND_QKV, 7, -1},
      {"transformer.h.7.self_attention.dense.weight", VF_KIND_O, 7, -1},
      {"transformer.word_embeddings.weight", VF_KIND_EMBEDDING, -1, -1},
      /* Phi */
      {"model.layers.9.self_attn.dense.weight", VF_KIND_O, 9, -1},
      {"model.layers.9.mlp.fc1.weight", VF_KIND_UP, 9, -1},
      {"model.layers.9.mlp.fc2.bias", VF_KIND_DOWN, 9, -1},
      {"model.final_layernorm.weight", VF_KIND_NORM, -1, -1},
      /* BERT, RoBERTa */
      {"bert.encoder.layer.0.attention.self.query.weight", VF_KIND_Q, 0, -1},
      {"bert.encoder.layer.0.attention.self.key.weight", VF_KIND_K, 0, -1},
      {"bert.encoder.layer.0.attention.self.value.weight", VF_KIND_V, 0, -1},
      {"bert.encoder.layer.0.attention.output.dense.weight", VF_KIND_O, 0, -1},
      {"bert.encoder.layer.0.attention.output.LayerNorm.weight", VF_KIND_NORM, 0, -1},
      {"bert.encoder.layer.0.intermediate.dense.weight", VF_KIND_UP, 0, -1},
      {"bert.encoder.layer.0.output.dense.weight", VF_KIND_DOWN, 0, -1},
      {"bert.encoder.layer.23.output.LayerNorm.bias", VF_KIND_NORM, 23, -1},
      {"bert.embeddings.word_embeddings.weight", VF_KIND_EMBEDDING, -1, -1},
      {"roberta.embeddings.token_type_embeddings.weight", VF_KIND_EMBEDDING, -1, -1},
      {"classifier.weight", VF_KIND_HEAD, -1, -1},
      {"cls.predictions.bias", VF_KIND_HEAD, -1, -1},
      {"score.weight", VF_KIND_HEAD, -1, -1},
      /* GGUF */
      {"token_embd.weight", VF_KIND_EMBEDDING, -1, -1},
      {"blk.7.ffn_gate.weight", VF_KIND_GATE, 7, -1},
      {"blk.7.ffn_up.weight", VF_KIND_UP, 7, -1},
      {"blk.7.ffn_down.weight", VF_KIND_DOWN, 7, -1},
      {"blk.0.attn_q.weight", VF_KIND_Q, 0, -1},
      {"blk.0.attn_k.weight", VF_KIND_K, 0, -1},
      {"blk.0.attn_v.weight", VF_KIND_V, 0, -1},
      {"blk.0.attn_output.weight", VF_KIND_O, 0, -1},
      {"blk.0.attn_qkv.weight", VF_KIND_QKV, 0, -1},
      {"blk.0.attn_norm.weight", VF_KIND_NORM, 0, -1},
      {"blk.0.ffn_norm.weight", VF_KIND_NORM, 0, -1},
      {"blk.3.ffn_gate_inp.weight", VF_KIND_ROUTER, 3, -1},
      {"blk.3.ffn_gate_exps.weight", VF_KIND_GATE, 3, -1},
      {"blk.3.ffn_down_exps.weight", VF_KIND_DOWN, 3, -1},
      {"output_norm.weight", VF_KIND_NORM, -1, -1},
      {"output.weight", VF_KIND_HEAD, -1, -1},
      {"rope_freqs.weight", VF_KIND_OTHER, -1, -1},
      /* litgpt */
      {"transformer.h.0.attn.attn.weight", VF_KIND_QKV, 0, -1},
      {"transformer.h.0.attn.qkv.weight", VF_KIND_QKV, 0, -1},
      {"transformer.h.0.attn.proj.weight", VF_KIND_O, 0, -1},
      {"transformer.h.2.mlp.fc_1.weight", VF_KIND_GATE, 2, -1},
      {"transformer.h.2.mlp.fc_2.weight", VF_KIND_UP, 2, -1},
      {"transformer.h.2.mlp.proj.weight", VF_KIND_DOWN, 2, -1},
      {"transformer.h.2.mlp.fc.weight", VF_KIND_UP, 2, -1},
      {"transformer.h.2.norm_1.weight", VF_KIND_NORM, 2, -1},
      {"transformer.h.2.mlp.experts.3.fc_1.weight", VF_KIND_GATE, 2, 3},
      /* nothing recognisable */
      {"some_buffer", VF_KIND_OTHER, -1, -1},
      {"", VF_KIND_OTHER, -1, -1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int32_t layer = 99, expert = 99;
    enum vf_kind k = vf_kind_from_name(cases[i].name, &layer, &expert);
    if (k != cases[i].kind || layer != cases[i].layer || expert != cases[i].expert)
      fail_msg("'%s': got %s layer %d expert %d, want %s layer %d expert %d", cases[i].name,
               vf_kind_name(k), layer, expert, vf_kind_name(cases[i].kind), cases[i].layer,
               cases[i].expert);
  }
  /* layer and expert are optional outputs. */
  assert_int_equal(vf_kind_from_name("blk.1.attn_q.weight", NULL, NULL), VF_KIND_Q);
  /* An index too large for int32 is no index. */
  int32_t layer;
  vf_kind_from_name("model.layers.99999999999.mlp.up_proj.weight", &layer, NULL);
  assert_int_equal(layer, -1);
}

/* ---- dtypes ------------------------------------------------------------------------- */

static void test_dtype_bytes(void **state) {
  (void)state;
  static const struct {
    enum vf_dtype t;
    uint64_t n, bytes;
  } ok[] = {
      {VF_DTYPE_F32, 10, 40},     {VF_DTYPE_F16, 10, 20},      {VF_DTYPE_BF16, 7, 14},
      {VF_DTYPE_F64, 3, 24},      {VF_DTYPE_F8_E4M3, 5, 5},    {VF_DTYPE_I8, 9, 9},
      {VF_DTYPE_I64, 2, 16},      {VF_DTYPE_BOOL, 3, 3},       {VF_DTYPE_F32, 0, 0},
      {VF_DTYPE_F4, 4, 2},        {VF_DTYPE_F6_E2M3, 8, 6},    /* sub-byte types pack */
      {VF_DTYPE_Q4_0, 32, 18},    {VF_DTYPE_Q4_0, 4096, 2304}, {VF_DTYPE_Q4_1, 32, 20},
      {VF_DTYPE_Q5_0, 32, 22},    {VF_DTYPE_Q5_1, 32, 24},     {VF_DTYPE_Q8_0, 64, 68},
      {VF_DTYPE_Q2_K, 256, 84},   {VF_DTYPE_Q3_K, 256, 110},   {VF_DTYPE_Q4_K, 512, 288},
      {VF_DTYPE_Q5_K, 256, 176},  {VF_DTYPE_Q6_K, 256, 210},   {VF_DTYPE_Q8_K, 256, 292},
      {VF_DTYPE_IQ4_NL, 32, 18},  {VF_DTYPE_IQ4_XS, 256, 136}, {VF_DTYPE_IQ2_XXS, 256, 66},
      {VF_DTYPE_MXFP4, 32, 17},   {VF_DTYPE_TQ2_0, 256, 66},
  };
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
    uint64_t b = 12345;
    int rc = vf_dtype_bytes(ok[i].t, ok[i].n, &b);
    if (rc || b != ok[i].bytes)
      fail_msg("%s x %llu: rc %d, %llu bytes, want %llu", vf_dtype_name(ok[i].t),
               (unsigned long long)ok[i].n, rc, (unsigned long long)b,
               (unsigned long long)ok[i].bytes);
  }
  uint64_t b = 777;
  /* Not a whole number of blocks. */
  assert_int_equal(vf_dtype_bytes(VF_DTYPE_Q4_0, 33, &b), VF_EINVAL);
  assert_int_equal(vf_dtype_bytes(VF_DTYPE_Q4_K, 32, &b), VF_EINVAL);
  assert_int_equal(vf_dtype_bytes(VF_DTYPE_F4, 3, &b), VF_EINVAL);
  /* No size known. */
  assert_int_equal(vf_dtype_bytes(VF_DTYPE_UNKNOWN, 4, &b), VF_EUNSUPPORTED);
  assert_int_equal(vf_dtype_bytes(VF_DTYPE_COUNT, 4, &b), VF_EUNSUPPORTED);
  assert_int_equal(vf_dtype_bytes((enum vf_dtype)-3, 4, &b), VF_EUNSUPPORTED);
  /* Overflow of the byte count. */
  assert_int_equal(vf_dtype_bytes(VF_DTYPE_F64, UINT64_MAX / 4, &b), VF_ERANGE);
  assert_int_equal(b, 777); /* untouched on failure */
  assert_int_equal(vf_dtype_bytes(VF_DTYPE_U8, UINT64_MAX, &b), 0);
  assert_int_equal(b, UINT64_MAX);
}

static void test_dtype_names(void **state) {
  (void)state;
  enum vf_dtype t;
  assert_int_equal(vf_dtype_from_name("bfloat16", &t), 0);
  assert_int_equal(t, VF_DTYPE_BF16);
  assert_int_equal(vf_dtype_from_name("Q4_K", &t), 0);
  assert_int_equal(t, VF_DTYPE_Q4_K);
  assert_int_equal(vf_dtype_from_name("fp16", &t), 0);
  assert_int_equal(t, VF_DTYPE_F16);
  assert_int_equal(vf_dtype_from_name("FLOAT32", &t), 0);
  assert_int_equal(t, VF_DTYPE_F32);
  assert_int_equal(vf_dtype_from_name("float17", &t), VF_ENOTFOUND);
  assert_int_equal(vf_dtype_from_name("unknown", &t), VF_ENOTFOUND);
  assert_string_equal(vf_dtype_name(VF_DTYPE_IQ2_XXS), "IQ2_XXS");
  assert_string_equal(vf_dtype_name(VF_DTYPE_COUNT), "unknown");
  /* Every named dtype round-trips through its name. */
  for (int i = 1; i < VF_DTYPE_COUNT; i++) {
    assert_int_equal(vf_dtype_from_name(vf_dtype_name((enum vf_dtype)i), &t), 0);
    assert_int_equal(t, i);
  }
}

/* ---- adopting a checkpoint ---------------------------------------------------------- */

static const char tiny_llama[] =
    "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"intermediate_size\": 128,"
    " \"vocab_size\": 100, \"torch_dtype\": \"bfloat16\"}";

static void tiny(struct vf_model *m) {
  struct vf_diag d;
  vf_model_init(m);
  assert_int_equal(vf_model_from_config_json(m, tiny_llama, strlen(tiny_llama), "config.json", &d), 0);
}

/* A copy of m's tensors as a "checkpoint" in F16. */
static void copy_as_checkpoint(const struct vf_model *m, struct vf_model *ck) {
  vf_model_init(ck);
  for (size_t i = 0; i < m->n_tensors; i++) {
    struct vf_tensor t = m->tensors[i];
    t.dtype = VF_DTYPE_F16;
    assert_int_equal(vf_model_add_tensor(ck, &t), 0);
  }
  ck->source = strdup("model.safetensors");
}

static bool has_note(const struct vf_model *m, const char *text) {
  for (size_t i = 0; i < m->n_notes; i++)
    if (strcmp(m->notes[i], text) == 0) return true;
  return false;
}

static void test_adopt_checkpoint_agrees(void **state) {
  (void)state;
  struct vf_model m, ck;
  tiny(&m);
  copy_as_checkpoint(&m, &ck);
  size_t n = m.n_tensors;
  uint64_t params = vf_model_params(&m);
  assert_int_equal(vf_model_adopt_checkpoint(&m, &ck), 0);
  assert_int_equal(m.n_notes, 0);
  assert_int_equal(m.n_tensors, n);
  assert_int_equal(vf_model_params(&m), params);
  /* The checkpoint's dtype wins and the source names it; ckpt is emptied. */
  assert_int_equal(vf_model_main_dtype(&m), VF_DTYPE_F16);
  assert_string_equal(m.source, "model.safetensors");
  assert_true(m.has_arch);
  assert_int_equal(ck.n_tensors, 0);
  assert_null(ck.tensors);
  assert_null(ck.source);
  vf_model_cleanup(&ck);
  vf_model_cleanup(&m);
}

static void test_adopt_checkpoint_disagrees(void **state) {
  (void)state;
  struct vf_model m, ck;
  tiny(&m);
  vf_model_init(&ck);
  for (size_t i = 0; i < m.n_tensors; i++) {
    struct vf_tensor t = m.tensors[i];
    if (strcmp(t.name, "model.layers.1.mlp.up_proj.weight") == 0) continue; /* missing */
    if (strcmp(t.name, "model.layers.0.self_attn.k_proj.weight") == 0) t.shape[0] = 64;
    if (strcmp(t.name, "model.norm.weight") == 0) {
      t.ndim = 2; /* same numbers, different rank */
      t.shape[1] = 1;
    }
    assert_int_equal(vf_model_add_tensor(&ck, &t), 0);
  }
  struct vf_tensor extra = {.name = "model.layers.0.self_attn.rotary_emb.inv_freq", .ndim = 1,
                            .shape = {8}, .dtype = VF_DTYPE_F32, .kind = VF_KIND_OTHER,
                            .layer = 0, .expert = -1};
  assert_int_equal(vf_model_add_tensor(&ck, &extra), 0);
  size_t ck_n = ck.n_tensors;
  assert_int_equal(vf_model_adopt_checkpoint(&m, &ck), 0);
  assert_int_equal(m.n_notes, 4);
  assert_true(has_note(&m, "model.layers.1.mlp.up_proj.weight: in the config's layout, not in "
                           "the checkpoint"));
  assert_true(has_note(&m, "model.layers.0.self_attn.k_proj.weight: config implies [32, 64], "
                           "checkpoint has [64, 64]"));
  assert_true(has_note(&m, "model.norm.weight: config implies [64], checkpoint has [64, 1]"));
  assert_true(has_note(&m, "model.layers.0.self_attn.rotary_emb.inv_freq: in the checkpoint, "
                           "not in the config's layout"));
  /* The checkpoint is the truth: its tensors, including the extra one, are the model. */
  assert_int_equal(m.n_tensors, ck_n);
  assert_false(has_tensor(&m, "model.layers.1.mlp.up_proj.weight"));
  assert_shape(&m, "model.layers.0.self_attn.k_proj.weight", 2, 64, 64);
  vf_model_cleanup(&ck);
  vf_model_cleanup(&m);
}

/* A checkpoint of another model must not flood the output: 20 notes and a summary. */
static void test_adopt_checkpoint_caps_notes(void **state) {
  (void)state;
  struct vf_model m, ck;
  tiny(&m);
  vf_model_init(&ck);
  for (int i = 0; i < 30; i++) {
    char name[64];
    snprintf(name, sizeof name, "blk.%d.attn_q.weight", i);
    struct vf_tensor t = {.name = name, .ndim = 2, .shape = {4, 4}, .dtype = VF_DTYPE_Q8_0,
                          .kind = VF_KIND_Q, .layer = i, .expert = -1};
    assert_int_equal(vf_model_add_tensor(&ck, &t), 0);
  }
  size_t differences = m.n_tensors + 30;
  assert_int_equal(vf_model_adopt_checkpoint(&m, &ck), 0);
  assert_int_equal(m.n_notes, 21);
  char last[64];
  snprintf(last, sizeof last, "... and %zu more differences", differences - 20);
  assert_string_equal(m.notes[20], last);
  assert_int_equal(m.n_tensors, 30);
  vf_model_cleanup(&ck);
  vf_model_cleanup(&m);
}

/* ---- architecture validation -------------------------------------------------------- */

static struct vf_arch good_arch(void) {
  struct vf_arch a = {.family = VF_FAMILY_LLAMA, .hidden = 4096, .layers = 32, .heads = 32,
                      .kv_heads = 8, .head_dim = 128, .intermediate = 14336, .vocab = 128256,
                      .max_positions = 8192, .dtype = VF_DTYPE_BF16, .norms_per_layer = 2};
  return a;
}

static void test_arch_validate(void **state) {
  (void)state;
  struct vf_diag d;
  struct vf_arch a = good_arch();
  assert_int_equal(vf_arch_validate(&a, &d), 0);
  assert_int_equal(vf_arch_validate(&a, NULL), 0);

  static const struct {
    size_t field; /* offset of the uint64_t to change */
    uint64_t value;
    const char *why;
  } bad[] = {
      {offsetof(struct vf_arch, hidden), 0, "hidden_size must be positive"},
      {offsetof(struct vf_arch, layers), 0, "num_hidden_layers must be positive"},
      {offsetof(struct vf_arch, heads), 0, "num_attention_heads must be positive"},
      {offsetof(struct vf_arch, kv_heads), 0, "num_key_value_heads must divide num_attention_heads"},
      {offsetof(struct vf_arch, kv_heads), 5, "num_key_value_heads must divide num_attention_heads"},
      {offsetof(struct vf_arch, kv_heads), 64, "num_key_value_heads must divide num_attention_heads"},
      {offsetof(struct vf_arch, head_dim), 0, "head_dim must be positive"},
      {offsetof(struct vf_arch, vocab), 0, "vocab_size must be positive"},
      {offsetof(struct vf_arch, intermediate), 0, "intermediate_size must be positive"},
      {offsetof(struct vf_arch, experts_per_token), 2, "more experts per token than experts"},
      {offsetof(struct vf_arch, hidden), 1ull << 25, "a dimension is implausibly large"},
      {offsetof(struct vf_arch, vocab), 1ull << 29, "a dimension is implausibly large"},
      {offsetof(struct vf_arch, layers), 100001, "a dimension is implausibly large"},
      {offsetof(struct vf_arch, head_dim), (1ull << 20) + 1, "a dimension is implausibly large"},
      {offsetof(struct vf_arch, max_positions), (1ull << 32) + 1, "a dimension is implausibly large"},
      {offsetof(struct vf_arch, type_vocab), (1ull << 20) + 1, "a dimension is implausibly large"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    a = good_arch();
    memcpy((char *)&a + bad[i].field, &bad[i].value, sizeof bad[i].value);
    memset(&d, 0, sizeof d);
    int rc = vf_arch_validate(&a, &d);
    if (rc != VF_EFORMAT || strcmp(d.msg, bad[i].why) != 0)
      fail_msg("case %zu: rc %d '%s', want '%s'", i, rc, d.msg, bad[i].why);
    assert_int_equal(d.code, VF_EFORMAT);
    assert_int_equal(vf_arch_validate(&a, NULL), VF_EFORMAT);
  }
  /* Each dimension under its own cap, together far too many tensors (6.4 million expert
   * MLPs) or parameters (~10^17): refused before anything is expanded. */
  a = good_arch();
  a.layers = 99999, a.experts = 64;
  assert_int_equal(vf_arch_validate(&a, &d), VF_EFORMAT);
  assert_string_equal(d.msg, "the dimensions together imply an implausibly large model");
  a = good_arch();
  a.hidden = 1ull << 24, a.intermediate = 1ull << 26, a.layers = 100;
  assert_int_equal(vf_arch_validate(&a, &d), VF_EFORMAT);
  assert_string_equal(d.msg, "the dimensions together imply an implausibly large model");

  /* The largest real models stay valid: 405B dense, and a 256-expert MoE. */
  a = good_arch();
  a.hidden = 16384, a.layers = 126, a.heads = 128, a.intermediate = 53248;
  assert_int_equal(vf_arch_validate(&a, &d), 0);
  a = good_arch();
  a.hidden = 7168, a.layers = 61, a.heads = 128, a.kv_heads = 128, a.intermediate = 2048;
  a.experts = 256, a.experts_per_token = 8;
  assert_int_equal(vf_arch_validate(&a, &d), 0);
}

/* vf_model_expand refuses an invalid architecture and leaves no tensors behind. */
static void test_expand_invalid(void **state) {
  (void)state;
  struct vf_model m;
  tiny(&m);
  m.arch.kv_heads = 3;
  assert_int_equal(vf_model_expand(&m), VF_EFORMAT);
  m.arch.kv_heads = 2;
  assert_int_equal(vf_model_expand(&m), 0);
  /* embed, 2 x (2 norms + 4 attention + 3 MLP), norm, head */
  assert_int_equal(m.n_tensors, 1 + 2 * 9 + 2);
  vf_model_cleanup(&m);
}

static void test_names(void **state) {
  (void)state;
  assert_string_equal(vf_family_name(VF_FAMILY_GPTNEOX), "gpt-neox");
  assert_string_equal(vf_family_name(VF_FAMILY_COUNT), "unknown");
  static const char *const public_kinds[] = {"q", "k", "v", "o", "gate", "up", "down",
                                             "head", "embedding", "norm", "other"};
  for (int k = 0; k < VF_KIND_PUBLIC_COUNT; k++)
    assert_string_equal(vf_kind_name((enum vf_kind)k), public_kinds[k]);
  assert_string_equal(vf_kind_name(VF_KIND_COUNT), "unknown");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_catalogue_params),
      cmocka_unit_test(test_catalogue_published),
      cmocka_unit_test(test_catalogue_listing),
      cmocka_unit_test(test_catalogue_case_insensitive),
      cmocka_unit_test(test_by_kind_llama31_8b),
      cmocka_unit_test(test_by_kind_gpt2_fused_thirds),
      cmocka_unit_test(test_by_kind_phi3_fused),
      cmocka_unit_test(test_by_kind_falcon_multi_query),
      cmocka_unit_test(test_by_kind_other_families),
      cmocka_unit_test(test_by_kind_mixtral),
      cmocka_unit_test(test_by_kind_without_arch),
      cmocka_unit_test(test_tensors_gpt2_conv1d),
      cmocka_unit_test(test_tensors_gemma),
      cmocka_unit_test(test_tensors_mixtral),
      cmocka_unit_test(test_tensors_qk_norms),
      cmocka_unit_test(test_tensors_moe_and_mla),
      cmocka_unit_test(test_tensors_bert),
      cmocka_unit_test(test_expanded_names_classify_back),
      cmocka_unit_test(test_kind_from_name),
      cmocka_unit_test(test_dtype_bytes),
      cmocka_unit_test(test_dtype_names),
      cmocka_unit_test(test_adopt_checkpoint_agrees),
      cmocka_unit_test(test_adopt_checkpoint_disagrees),
      cmocka_unit_test(test_adopt_checkpoint_caps_notes),
      cmocka_unit_test(test_arch_validate),
      cmocka_unit_test(test_expand_invalid),
      cmocka_unit_test(test_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

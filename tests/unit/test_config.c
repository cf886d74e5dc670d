/* vf_model_from_config_json on configs written inline: every supported model_type, the
 * key spellings of GPT-2 and Falcon, bias switches, and every way a config can be wrong
 * (each must give a clear message naming the key and the file, never a crash). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "vramfit.h"

#define FILE_NAME "dir/config.json"

static int parse(struct vf_model *m, const char *json, struct vf_diag *d) {
  vf_model_init(m);
  memset(d, 0, sizeof *d);
  return vf_model_from_config_json(m, json, strlen(json), FILE_NAME, d);
}

static void parse_ok(struct vf_model *m, const char *json) {
  struct vf_diag d;
  int rc = parse(m, json, &d);
  if (rc) fail_msg("rc %d: %s", rc, d.msg);
}

/* Parses json expecting failure with code; d.msg must contain every fragment. */
static void parse_fails(const char *json, int code, const char *fragment1, const char *fragment2) {
  struct vf_model m;
  struct vf_diag d;
  int rc = parse(&m, json, &d);
  if (rc != code) fail_msg("rc %d, want %d (msg '%s') for %s", rc, code, d.msg, json);
  assert_int_equal(d.code, code);
  assert_string_equal(d.file, FILE_NAME);
  if (fragment1 && !strstr(d.msg, fragment1)) fail_msg("'%s' lacks '%s'", d.msg, fragment1);
  if (fragment2 && !strstr(d.msg, fragment2)) fail_msg("'%s' lacks '%s'", d.msg, fragment2);
  assert_int_equal(m.n_tensors, 0);
  assert_false(m.has_arch);
  vf_model_cleanup(&m);
  /* Without a diag the same failure is reported and nothing crashes. */
  vf_model_init(&m);
  assert_int_equal(vf_model_from_config_json(&m, json, strlen(json), FILE_NAME, NULL), code);
  vf_model_cleanup(&m);
}

static const struct vf_tensor *find(const struct vf_model *m, const char *name) {
  for (size_t i = 0; i < m->n_tensors; i++)
    if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
  return NULL;
}

static uint64_t rows(const struct vf_model *m, const char *name) {
  const struct vf_tensor *t = find(m, name);
  if (!t) fail_msg("no tensor %s", name);
  return t->shape[0];
}

/* ---- every supported model_type ----------------------------------------------------- */

/* hidden 64, 2 layers, 4 heads (2 kv where the type has GQA), MLP 128, vocab 100, 32
 * positions; the expected totals are hand-computed per family layout. */
#define DIMS                                                                                  \
  "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "              \
  "\"intermediate_size\": 128, \"vocab_size\": 100, \"max_position_embeddings\": 32"

static void test_each_model_type(void **state) {
  (void)state;
  static const struct {
    const char *json;
    enum vf_family family;
    uint64_t params;
    const char *must_have; /* a tensor only this layout has */
  } cases[] = {
      {"{\"model_type\": \"llama\", \"num_key_value_heads\": 2, " DIMS "}", VF_FAMILY_LLAMA,
       86848, "lm_head.weight"},
      {"{\"model_type\": \"mistral\", \"num_key_value_heads\": 2, " DIMS "}", VF_FAMILY_LLAMA,
       86848, "model.layers.1.mlp.gate_proj.weight"},
      {"{\"model_type\": \"qwen2\", \"num_key_value_heads\": 2, " DIMS "}", VF_FAMILY_LLAMA,
       87104, "model.layers.1.self_attn.k_proj.bias"},
      {"{\"model_type\": \"gemma\", \"num_key_value_heads\": 2, \"head_dim\": 32, " DIMS "}",
       VF_FAMILY_LLAMA, 105024, "model.norm.weight"},
      {"{\"model_type\": \"gemma2\", \"num_key_value_heads\": 2, \"head_dim\": 32, " DIMS "}",
       VF_FAMILY_LLAMA, 105280, "model.layers.1.post_feedforward_layernorm.weight"},
      {"{\"model_type\": \"phi3\", \"num_key_value_heads\": 2, " DIMS "}", VF_FAMILY_LLAMA,
       86848, "model.layers.0.self_attn.qkv_proj.weight"},
      {"{\"model_type\": \"mixtral\", \"num_key_value_heads\": 2, \"num_local_experts\": 4, "
       "\"num_experts_per_tok\": 2, " DIMS "}",
       VF_FAMILY_MIXTRAL, 234816, "model.layers.1.block_sparse_moe.experts.3.w3.weight"},
      /* qwen3: q_norm and k_norm of head_dim each, on both layers. */
      {"{\"model_type\": \"qwen3\", \"num_key_value_heads\": 2, \"head_dim\": 16, " DIMS "}",
       VF_FAMILY_LLAMA, 86912, "model.layers.1.self_attn.k_norm.weight"},
      /* qwen3_moe: per layer a router of 4 x 64 and 4 experts of 3 x 64 x 32. */
      {"{\"model_type\": \"qwen3_moe\", \"num_key_value_heads\": 2, \"head_dim\": 16, \"num_experts\": 4, "
       "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, " DIMS "}",
       VF_FAMILY_MIXTRAL, 87424, "model.layers.1.mlp.experts.3.down_proj.weight"},
      /* qwen3_moe as transformers 5.23.0 writes its config (Qwen3MoeConfig.to_json_string):
       * the experts counted under num_local_experts. */
      {"{\"model_type\": \"qwen3_moe\", \"num_key_value_heads\": 2, \"head_dim\": 16, \"num_local_experts\": 4, "
       "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, " DIMS "}",
       VF_FAMILY_MIXTRAL, 87424, "model.layers.1.mlp.experts.3.down_proj.weight"},
      /* gemma3_text: gemma2's four norms, qwen3's q/k norms, tied. */
      {"{\"model_type\": \"gemma3_text\", \"num_key_value_heads\": 2, \"head_dim\": 16, " DIMS "}",
       VF_FAMILY_LLAMA, 80768, "model.layers.1.self_attn.q_norm.weight"},
      /* olmo2: q_norm of 64 and k_norm of 32, the two norms after the sublayers. */
      {"{\"model_type\": \"olmo2\", \"num_key_value_heads\": 2, " DIMS "}", VF_FAMILY_LLAMA, 87040,
       "model.layers.1.post_feedforward_layernorm.weight"},
      {"{\"model_type\": \"smollm3\", \"num_key_value_heads\": 2, " DIMS "}", VF_FAMILY_LLAMA, 80448,
       "model.layers.1.mlp.down_proj.weight"},
      /* deepseek_v2: latent attention of 6,408 a layer (q 64 x 48, kv_a 64 x 12, its norm 8,
       * kv_b 8 x 64, o 32 x 64); layer 0 dense (3 x 64 x 128), layer 1 a router of 4, 4
       * experts and one shared of 3 x 64 x 16. */
      {"{\"model_type\": \"deepseek_v2\", \"moe_intermediate_size\": 16, \"n_routed_experts\": 4, "
       "\"num_experts_per_tok\": 2, \"n_shared_experts\": 1, \"first_k_dense_replace\": 1, \"q_lora_rank\": null, "
       "\"kv_lora_rank\": 8, \"qk_nope_head_dim\": 8, \"qk_rope_head_dim\": 4, \"v_head_dim\": 8, " DIMS "}",
       VF_FAMILY_DEEPSEEK, 66128, "model.layers.1.mlp.shared_experts.up_proj.weight"},
      {"{\"model_type\": \"gpt2\", \"n_embd\": 64, \"n_layer\": 2, \"n_head\": 4, "
       "\"n_inner\": null, \"n_positions\": 32, \"vocab_size\": 100}",
       VF_FAMILY_GPT2, 108544, "transformer.wpe.weight"},
      {"{\"model_type\": \"gpt_neox\", " DIMS "}", VF_FAMILY_GPTNEOX, 79872, "embed_out.weight"},
      {"{\"model_type\": \"falcon\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 4, \"vocab_size\": 100}",
       VF_FAMILY_FALCON, 92800, "transformer.h.1.input_layernorm.weight"},
      {"{\"model_type\": \"phi\", " DIMS "}", VF_FAMILY_PHI, 79716, "lm_head.bias"},
      {"{\"model_type\": \"bert\", " DIMS "}", VF_FAMILY_BERT, 79808, "bert.pooler.dense.bias"},
      {"{\"model_type\": \"roberta\", \"type_vocab_size\": 1, " DIMS "}", VF_FAMILY_BERT, 79744,
       "roberta.embeddings.token_type_embeddings.weight"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    struct vf_model m;
    parse_ok(&m, cases[i].json);
    if (vf_model_params(&m) != cases[i].params)
      fail_msg("%s: %llu params, want %llu", m.arch.model_type,
               (unsigned long long)vf_model_params(&m), (unsigned long long)cases[i].params);
    assert_int_equal(m.arch.family, cases[i].family);
    assert_true(m.has_arch);
    if (!find(&m, cases[i].must_have)) fail_msg("%s lacks %s", m.arch.model_type, cases[i].must_have);
    /* No torch_dtype: weights load in float32. */
    assert_int_equal(m.arch.dtype, VF_DTYPE_F32);
    vf_model_cleanup(&m);
  }
}

/* ---- layout details ----------------------------------------------------------------- */

static void test_gpt2_keys(void **state) {
  (void)state;
  struct vf_model m;
  parse_ok(&m, "{\"model_type\": \"gpt2\", \"n_embd\": 64, \"n_layer\": 3, \"n_head\": 4, "
               "\"n_inner\": null, \"n_ctx\": 16, \"vocab_size\": 100}");
  assert_int_equal(m.arch.hidden, 64);
  assert_int_equal(m.arch.layers, 3);
  assert_int_equal(m.arch.heads, 4);
  assert_int_equal(m.arch.head_dim, 16);
  assert_int_equal(m.arch.intermediate, 256); /* n_inner null: 4 x n_embd */
  assert_int_equal(m.arch.max_positions, 16);
  assert_true(m.arch.tied_embeddings);
  assert_null(find(&m, "lm_head.weight"));
  vf_model_cleanup(&m);

  parse_ok(&m, "{\"model_type\": \"gpt2\", \"n_embd\": 64, \"n_layer\": 1, \"n_head\": 4, "
               "\"n_inner\": 100, \"n_positions\": 16, \"vocab_size\": 100, "
               "\"tie_word_embeddings\": false}");
  assert_int_equal(m.arch.intermediate, 100);
  assert_int_equal(find(&m, "transformer.h.0.mlp.c_fc.weight")->shape[1], 100);
  assert_non_null(find(&m, "lm_head.weight"));
  vf_model_cleanup(&m);
}

static void test_falcon_variants(void **state) {
  (void)state;
  struct vf_model m;
  /* falcon-40b-like: the new decoder architecture with 8 kv heads has two norms per
   * layer and a (H + 2 KV) x head_dim wide fused qkv. */
  parse_ok(&m, "{\"model_type\": \"falcon\", \"hidden_size\": 8192, \"num_hidden_layers\": 2, "
               "\"num_attention_heads\": 128, \"num_kv_heads\": 8, \"new_decoder_architecture\": true, "
               "\"vocab_size\": 100, \"bias\": false, \"parallel_attn\": true}");
  assert_int_equal(m.arch.kv_heads, 8);
  assert_int_equal(m.arch.norms_per_layer, 2);
  assert_int_equal(rows(&m, "transformer.h.0.self_attention.query_key_value.weight"), (128 + 16) * 64);
  assert_non_null(find(&m, "transformer.h.1.ln_attn.weight"));
  assert_non_null(find(&m, "transformer.h.1.ln_mlp.bias"));
  assert_null(find(&m, "transformer.h.1.input_layernorm.weight"));
  uint64_t k[VF_KIND_PUBLIC_COUNT];
  vf_model_by_kind(&m, k);
  assert_int_equal(k[VF_KIND_Q], 2ull * 8192 * 8192);
  assert_int_equal(k[VF_KIND_K], 2ull * 8192 * 512);
  assert_int_equal(k[VF_KIND_V], 2ull * 8192 * 512);
  vf_model_cleanup(&m);

  /* New architecture without num_kv_heads: one kv head per head (transformers' default). */
  parse_ok(&m, "{\"model_type\": \"falcon\", \"hidden_size\": 64, \"num_hidden_layers\": 1, "
               "\"num_attention_heads\": 4, \"new_decoder_architecture\": true, \"vocab_size\": 100}");
  assert_int_equal(m.arch.kv_heads, 4);
  assert_int_equal(rows(&m, "transformer.h.0.self_attention.query_key_value.weight"), 192);
  vf_model_cleanup(&m);

  /* falcon-7b: multi_query gives one kv head even when a newer transformers wrote
   * num_kv_heads = num_attention_heads into the file. */
  parse_ok(&m, "{\"model_type\": \"falcon\", \"hidden_size\": 4544, \"num_hidden_layers\": 1, "
               "\"num_attention_heads\": 71, \"num_kv_heads\": 71, \"multi_query\": true, "
               "\"new_decoder_architecture\": false, \"vocab_size\": 100}");
  assert_int_equal(m.arch.kv_heads, 1);
  assert_int_equal(m.arch.norms_per_layer, 1);
  assert_int_equal(rows(&m, "transformer.h.0.self_attention.query_key_value.weight"), 4672);
  vf_model_cleanup(&m);

  /* falcon-rw style: no multi-query, biases on. */
  parse_ok(&m, "{\"model_type\": \"falcon\", \"hidden_size\": 64, \"num_hidden_layers\": 1, "
               "\"num_attention_heads\": 4, \"multi_query\": false, \"bias\": true, "
               "\"parallel_attn\": false, \"vocab_size\": 100}");
  assert_int_equal(m.arch.kv_heads, 4);
  assert_int_equal(rows(&m, "transformer.h.0.self_attention.query_key_value.weight"), 192);
  assert_non_null(find(&m, "transformer.h.0.self_attention.query_key_value.bias"));
  assert_non_null(find(&m, "transformer.h.0.mlp.dense_4h_to_h.bias"));
  assert_false(m.arch.parallel_residual);
  vf_model_cleanup(&m);
}

static void test_bias_switches(void **state) {
  (void)state;
  struct vf_model m;
  /* Llama with attention_bias: all four projections get a bias; mlp_bias the MLP. */
  parse_ok(&m, "{\"model_type\": \"llama\", \"num_key_value_heads\": 2, \"attention_bias\": true, "
               "\"mlp_bias\": true, " DIMS "}");
  assert_int_equal(rows(&m, "model.layers.0.self_attn.q_proj.bias"), 64);
  assert_int_equal(rows(&m, "model.layers.0.self_attn.k_proj.bias"), 32);
  assert_int_equal(rows(&m, "model.layers.0.self_attn.v_proj.bias"), 32);
  assert_int_equal(rows(&m, "model.layers.0.self_attn.o_proj.bias"), 64);
  assert_int_equal(rows(&m, "model.layers.1.mlp.down_proj.bias"), 64);
  assert_int_equal(rows(&m, "model.layers.1.mlp.gate_proj.bias"), 128);
  assert_int_equal(vf_model_params(&m), 86848 + 2 * (64 + 32 + 32 + 64) + 2 * (128 + 128 + 64));
  vf_model_cleanup(&m);

  /* Llama by default: no biases at all. */
  parse_ok(&m, "{\"model_type\": \"llama\", \"num_key_value_heads\": 2, " DIMS "}");
  assert_null(find(&m, "model.layers.0.self_attn.q_proj.bias"));
  assert_null(find(&m, "model.layers.0.self_attn.o_proj.bias"));
  vf_model_cleanup(&m);

  /* Qwen2: q, k and v biases, none on o. */
  parse_ok(&m, "{\"model_type\": \"qwen2\", \"num_key_value_heads\": 2, " DIMS "}");
  assert_int_equal(rows(&m, "model.layers.0.self_attn.q_proj.bias"), 64);
  assert_int_equal(rows(&m, "model.layers.0.self_attn.k_proj.bias"), 32);
  assert_int_equal(rows(&m, "model.layers.0.self_attn.v_proj.bias"), 32);
  assert_null(find(&m, "model.layers.0.self_attn.o_proj.bias"));
  assert_null(find(&m, "model.layers.0.mlp.up_proj.bias"));
  vf_model_cleanup(&m);

  /* GPT-NeoX with attention_bias false drops the qkv and dense biases. */
  parse_ok(&m, "{\"model_type\": \"gpt_neox\", \"attention_bias\": false, " DIMS "}");
  assert_null(find(&m, "gpt_neox.layers.0.attention.query_key_value.bias"));
  assert_null(find(&m, "gpt_neox.layers.0.attention.dense.bias"));
  vf_model_cleanup(&m);
}

static void test_switches(void **state) {
  (void)state;
  struct vf_model m;
  parse_ok(&m, "{\"model_type\": \"llama\", \"tie_word_embeddings\": true, "
               "\"torch_dtype\": \"bfloat16\", \"num_key_value_heads\": 4, " DIMS "}");
  assert_true(m.arch.tied_embeddings);
  assert_null(find(&m, "lm_head.weight"));
  assert_int_equal(m.arch.dtype, VF_DTYPE_BF16);
  assert_int_equal(find(&m, "model.embed_tokens.weight")->dtype, VF_DTYPE_BF16);
  vf_model_cleanup(&m);

  /* Newer transformers write "dtype" instead of "torch_dtype". */
  parse_ok(&m, "{\"model_type\": \"gemma\", \"dtype\": \"float16\", " DIMS "}");
  assert_int_equal(m.arch.dtype, VF_DTYPE_F16);
  assert_true(m.arch.tied_embeddings); /* Gemma ties by default */
  vf_model_cleanup(&m);

  parse_ok(&m, "{\"model_type\": \"gpt_neox\", \"rotary_pct\": 0.5, "
               "\"use_parallel_residual\": false, " DIMS "}");
  assert_true(m.arch.rotary_fraction > 0.49 && m.arch.rotary_fraction < 0.51);
  assert_false(m.arch.parallel_residual);
  vf_model_cleanup(&m);

  parse_ok(&m, "{\"model_type\": \"qwen2\", \"use_sliding_window\": false, "
               "\"sliding_window\": 4096, " DIMS "}");
  assert_int_equal(m.arch.sliding_window, 0);
  vf_model_cleanup(&m);
  parse_ok(&m, "{\"model_type\": \"mistral\", \"sliding_window\": 4096, " DIMS "}");
  assert_int_equal(m.arch.sliding_window, 4096);
  vf_model_cleanup(&m);
  parse_ok(&m, "{\"model_type\": \"mistral\", \"sliding_window\": null, " DIMS "}");
  assert_int_equal(m.arch.sliding_window, 0);
  vf_model_cleanup(&m);

  /* Unknown extra keys and the catalogue's own "_vramfit" block are ignored. */
  parse_ok(&m, "{\"model_type\": \"llama\", \"rope_scaling\": {\"type\": \"llama3\"}, "
               "\"_vramfit\": {\"hf_repo\": \"x\"}, \"architectures\": [\"LlamaForCausalLM\"], " DIMS "}");
  assert_int_equal(vf_model_params(&m), 6400 + 2 * (4096 * 4 + 3 * 8192 + 128) + 64 + 6400);
  vf_model_cleanup(&m);
}

/* ---- malformed input ---------------------------------------------------------------- */

static void test_missing_keys(void **state) {
  (void)state;
  parse_fails("{\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
              " \"vocab_size\": 100}",
              VF_EFORMAT, "missing 'hidden_size'", NULL);
  parse_fails("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 4,"
              " \"vocab_size\": 100}",
              VF_EFORMAT, "missing 'num_hidden_layers'", NULL);
  parse_fails("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2,"
              " \"vocab_size\": 100}",
              VF_EFORMAT, "missing 'num_attention_heads'", NULL);
  parse_fails("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2,"
              " \"num_attention_heads\": 4}",
              VF_EFORMAT, "missing 'vocab_size'", NULL);
  /* A GPT-2 config spells it n_embd: the message names that spelling too. */
  parse_fails("{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_head\": 4, \"n_positions\": 8,"
              " \"vocab_size\": 100}",
              VF_EFORMAT, "missing 'hidden_size'", "'n_embd'");
  /* Learned position tables need their length. */
  parse_fails("{\"model_type\": \"gpt2\", \"n_embd\": 64, \"n_layer\": 2, \"n_head\": 4,"
              " \"vocab_size\": 100}",
              VF_EFORMAT, "missing 'max_position_embeddings'", "'n_positions'");
  parse_fails("{\"model_type\": \"bert\", \"hidden_size\": 64, \"num_hidden_layers\": 2,"
              " \"num_attention_heads\": 4, \"vocab_size\": 100}",
              VF_EFORMAT, "missing 'max_position_embeddings'", NULL);
  /* null counts as absent. */
  parse_fails("{\"model_type\": \"llama\", \"hidden_size\": null, \"num_hidden_layers\": 2,"
              " \"num_attention_heads\": 4, \"vocab_size\": 100}",
              VF_EFORMAT, "missing 'hidden_size'", NULL);
  parse_fails("{\"hidden_size\": 64}", VF_EFORMAT, "missing 'model_type'", NULL);
  parse_fails("{\"model_type\": 7}", VF_EFORMAT, "'model_type'", NULL);
  parse_fails("[1, 2, 3]", VF_EFORMAT, "'model_type'", NULL);
  parse_fails("{}", VF_EFORMAT, "missing 'model_type'", NULL);
}

static void test_invalid_json(void **state) {
  (void)state;
  struct vf_model m;
  struct vf_diag d;
  /* The doubled comma on line 3 is at column 23. */
  const char *broken = "{\n  \"model_type\": \"llama\",\n  \"hidden_size\": 4096,,\n}\n";
  assert_int_equal(parse(&m, broken, &d), VF_EFORMAT);
  assert_int_equal(d.line, 3);
  assert_int_equal(d.col, 23);
  assert_string_equal(d.file, FILE_NAME);
  assert_non_null(strstr(d.msg, "invalid JSON"));
  char text[1200];
  vf_diag_format(&d, text, sizeof text);
  assert_non_null(strstr(text, FILE_NAME ":3:23: invalid JSON"));
  assert_null(strchr(text, '\n'));
  vf_model_cleanup(&m);

  /* A string left open on line 2. */
  assert_int_equal(parse(&m, "{\"model_type\": \"llama\",\n \"x\": \"abc", &d), VF_EFORMAT);
  assert_int_equal(d.line, 2);
  assert_true(d.col >= 1);
  vf_model_cleanup(&m);

  /* A key given twice is ambiguous: which value would transformers use? Refused. */
  assert_int_equal(parse(&m, "{\"model_type\": \"llama\", \"model_type\": \"gpt2\"}", &d), VF_EFORMAT);
  assert_int_equal(d.line, 1);
  assert_non_null(strstr(d.msg, "model_type"));
  vf_model_cleanup(&m);

  parse_fails("", VF_EFORMAT, "invalid JSON", NULL);
  parse_fails("{\"model_type\": \"llama\"} trailing", VF_EFORMAT, "invalid JSON", NULL);
  /* A NUL byte inside the text is an error, not the end of the input. */
  static const char with_nul[] = "{\"model_type\": \"ll\0ama\"}";
  assert_int_equal(vf_model_from_config_json(&m, with_nul, sizeof with_nul - 1, FILE_NAME, &d),
                   VF_EFORMAT);
  vf_model_cleanup(&m);
}

static void test_unknown_model_type(void **state) {
  (void)state;
  parse_fails("{\"model_type\": \"t5\", \"d_model\": 512}", VF_EUNSUPPORTED,
              "model_type 't5' is not supported", NULL);
  struct vf_model m;
  struct vf_diag d;
  assert_int_equal(parse(&m, "{\"model_type\": \"mamba\"}", &d), VF_EUNSUPPORTED);
  assert_string_equal(d.msg, "model_type 'mamba' is not supported; supported: llama, mistral, "
                             "qwen2, qwen3, qwen3_moe, gemma, gemma2, gemma3_text, olmo2, smollm3, "
                             "phi3, mixtral, deepseek_v2, gpt2, gpt_neox, falcon, phi, bert, roberta");
  vf_model_cleanup(&m);
  /* model_type is matched exactly, as transformers does. */
  parse_fails("{\"model_type\": \"Llama\", " DIMS "}", VF_EUNSUPPORTED, "'Llama'", NULL);
}

static void test_bad_dimensions(void **state) {
  (void)state;
  /* Negative, fractional, string, boolean, array: each names the key. */
  static const char *const values[] = {"-4096", "4096.5", "4096.0", "\"4096\"", "true", "[64]", "{}"};
  for (size_t i = 0; i < sizeof values / sizeof *values; i++) {
    char json[512];
    snprintf(json, sizeof json,
             "{\"model_type\": \"llama\", \"hidden_size\": %s, \"num_hidden_layers\": 2,"
             " \"num_attention_heads\": 4, \"vocab_size\": 100}",
             values[i]);
    parse_fails(json, VF_EFORMAT, "'hidden_size' must be a non-negative whole number", NULL);
  }
  parse_fails("{\"model_type\": \"llama\", \"num_key_value_heads\": -2, " DIMS "}", VF_EFORMAT,
              "'num_key_value_heads' must be a non-negative whole number", NULL);
  parse_fails("{\"model_type\": \"gpt2\", \"n_embd\": 64, \"n_layer\": 2.5, \"n_head\": 4,"
              " \"n_positions\": 8, \"vocab_size\": 100}",
              VF_EFORMAT, "'n_layer' must be a non-negative whole number", NULL);
  parse_fails("{\"model_type\": \"llama\", \"tie_word_embeddings\": \"yes\", " DIMS "}",
              VF_EFORMAT, "'tie_word_embeddings' must be true or false", NULL);
  parse_fails("{\"model_type\": \"gemma2\", \"final_logit_softcapping\": \"30\", " DIMS "}",
              VF_EFORMAT, "'final_logit_softcapping' must be a number", NULL);
  /* Zero is a whole number but no size. */
  parse_fails("{\"model_type\": \"llama\", \"hidden_size\": 0, \"num_hidden_layers\": 2,"
              " \"num_attention_heads\": 4, \"vocab_size\": 100}",
              VF_EFORMAT, "hidden_size", NULL);
  parse_fails("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 0,"
              " \"num_attention_heads\": 4, \"vocab_size\": 100}",
              VF_EFORMAT, "num_hidden_layers must be positive", NULL);
  parse_fails("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2,"
              " \"num_attention_heads\": 0, \"vocab_size\": 100}",
              VF_EFORMAT, "num_attention_heads must be positive", NULL);
  parse_fails("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2,"
              " \"num_attention_heads\": 4, \"vocab_size\": 0}",
              VF_EFORMAT, "vocab_size must be positive", NULL);
  /* Larger than any JSON integer jansson accepts. */
  parse_fails("{\"model_type\": \"llama\", \"hidden_size\": 99999999999999999999999, " DIMS "}",
              VF_EFORMAT, "invalid JSON", NULL);
}

static void test_heads(void **state) {
  (void)state;
  /* Heads must divide hidden unless head_dim is given. */
  parse_fails("{\"model_type\": \"llama\", \"hidden_size\": 100, \"num_hidden_layers\": 2,"
              " \"num_attention_heads\": 3, \"vocab_size\": 100}",
              VF_EFORMAT, "hidden size 100 is not a multiple of 3 heads", NULL);
  struct vf_model m;
  parse_ok(&m, "{\"model_type\": \"llama\", \"hidden_size\": 100, \"num_hidden_layers\": 1,"
               " \"num_attention_heads\": 3, \"head_dim\": 32, \"vocab_size\": 100}");
  assert_int_equal(rows(&m, "model.layers.0.self_attn.q_proj.weight"), 96);
  vf_model_cleanup(&m);
  /* kv heads must divide heads. */
  parse_fails("{\"model_type\": \"llama\", \"num_key_value_heads\": 3, " DIMS "}", VF_EFORMAT,
              "num_key_value_heads must divide num_attention_heads", NULL);
  parse_fails("{\"model_type\": \"llama\", \"num_key_value_heads\": 8, " DIMS "}", VF_EFORMAT,
              "num_key_value_heads must divide num_attention_heads", NULL);
  parse_fails("{\"model_type\": \"llama\", \"num_key_value_heads\": 0, " DIMS "}", VF_EFORMAT,
              "num_key_value_heads", NULL);
  parse_fails("{\"model_type\": \"falcon\", \"hidden_size\": 64, \"num_hidden_layers\": 1,"
              " \"num_attention_heads\": 4, \"num_kv_heads\": 3, \"new_decoder_architecture\": true,"
              " \"vocab_size\": 100}",
              VF_EFORMAT, "num_key_value_heads must divide num_attention_heads", NULL);
  parse_fails("{\"model_type\": \"mixtral\", \"num_local_experts\": 2, \"num_experts_per_tok\": 3, "
              DIMS "}",
              VF_EFORMAT, "more experts per token than experts", NULL);
}

/* Keys a config may leave out take the configuration class's defaults (transformers 5.23):
 * qwen3's head_dim 128, deepseek_v2's q_lora_rank 1536 (null: no query compression). Layouts
 * the estimator's layers cannot hold are refused with the reason. */
static void test_class_defaults_and_refusals(void **state) {
  (void)state;
  struct vf_model m;
  parse_ok(&m, "{\"model_type\": \"qwen3\", " DIMS "}");
  assert_int_equal(m.arch.head_dim, 128);
  assert_int_equal(rows(&m, "model.layers.0.self_attn.q_proj.weight"), 4 * 128);
  vf_model_cleanup(&m);
#define DEEPSEEK "{\"model_type\": \"deepseek_v2\", \"moe_intermediate_size\": 16, \"n_routed_experts\": 4, " DIMS
  parse_ok(&m, DEEPSEEK "}");
  assert_int_equal(rows(&m, "model.layers.0.self_attn.q_a_proj.weight"), 1536);
  assert_int_equal(rows(&m, "model.layers.0.self_attn.q_a_layernorm.weight"), 1536);
  assert_int_equal(rows(&m, "model.layers.0.self_attn.q_b_proj.weight"), 4 * (128 + 64));
  assert_int_equal(rows(&m, "model.layers.0.mlp.shared_experts.gate_proj.weight"), 2 * 16);
  assert_null(find(&m, "model.layers.0.self_attn.q_proj.weight"));
  assert_int_equal(m.arch.dense_layers, 0);
  vf_model_cleanup(&m);
  parse_fails(DEEPSEEK ", \"n_shared_experts\": 4611686018427387904}", VF_EFORMAT, "implausibly large", NULL);
  parse_fails(DEEPSEEK ", \"first_k_dense_replace\": 3}", VF_EFORMAT, "more dense layers than layers", NULL);
#undef DEEPSEEK
#define QWEN3_MOE "{\"model_type\": \"qwen3_moe\", \"num_experts\": 4, " DIMS
  parse_fails(QWEN3_MOE "}", VF_EFORMAT, "missing 'moe_intermediate_size'", NULL);
  parse_fails(QWEN3_MOE ", \"moe_intermediate_size\": 32, \"mlp_only_layers\": [0]}", VF_EUNSUPPORTED,
              "mlp_only_layers", NULL);
  parse_fails(QWEN3_MOE ", \"moe_intermediate_size\": 32, \"decoder_sparse_step\": 2}", VF_EUNSUPPORTED,
              "decoder_sparse_step", NULL);
#undef QWEN3_MOE
}

static void test_absurd_sizes(void **state) {
  (void)state;
  parse_fails("{\"model_type\": \"llama\", \"hidden_size\": 1099511627776, \"num_hidden_layers\": 2,"
              " \"num_attention_heads\": 4, \"vocab_size\": 100}",
              VF_EFORMAT, "implausibly large", NULL);
  parse_fails("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 1000000000,"
              " \"num_attention_heads\": 4, \"vocab_size\": 100}",
              VF_EFORMAT, "implausibly large", NULL);
  parse_fails("{\"model_type\": \"gpt2\", \"n_embd\": 64, \"n_layer\": 2, \"n_head\": 4,"
              " \"n_positions\": 9223372036854775807, \"vocab_size\": 100}",
              VF_EFORMAT, "implausibly large", NULL);
  /* Each dimension under its cap, but 100,000 layers of 100,000 experts would be ten
   * billion expert MLPs: refused before expanding them (this used to run out of memory). */
  parse_fails("{\"model_type\": \"mixtral\", \"hidden_size\": 64, \"num_hidden_layers\": 100000,"
              " \"num_attention_heads\": 4, \"num_local_experts\": 100000, \"num_experts_per_tok\": 2,"
              " \"intermediate_size\": 128, \"vocab_size\": 100}",
              VF_EFORMAT, "the dimensions together imply an implausibly large model", NULL);
  parse_fails("{\"model_type\": \"llama\", \"hidden_size\": 16777216, \"num_hidden_layers\": 1000,"
              " \"num_attention_heads\": 4096, \"intermediate_size\": 67108864, \"vocab_size\": 100}",
              VF_EFORMAT, "the dimensions together imply an implausibly large model", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_each_model_type),
      cmocka_unit_test(test_gpt2_keys),
      cmocka_unit_test(test_falcon_variants),
      cmocka_unit_test(test_bias_switches),
      cmocka_unit_test(test_switches),
      cmocka_unit_test(test_missing_keys),
      cmocka_unit_test(test_invalid_json),
      cmocka_unit_test(test_unknown_model_type),
      cmocka_unit_test(test_bad_dimensions),
      cmocka_unit_test(test_heads),
      cmocka_unit_test(test_class_defaults_and_refusals),
      cmocka_unit_test(test_absurd_sizes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

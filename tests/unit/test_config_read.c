/* Training configs read into settings (include/vramfit/config.h), ecosystem by ecosystem,
 * on the configs of tests/data/configs/ (shaped like the recipes each project ships), and
 * the failures: every setting with its place, every value vramfit cannot model warned. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sbuf.h"
#include "io/formats.h"
#include "tmpdir.h"
#include "vramfit.h"

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

static const char *src(const char *rel) {
  static char paths[8][1024];
  static int next;
  const char *root = getenv("VF_SOURCE_DIR");
  char *p = paths[next++ % 8];
  snprintf(p, 1024, "%s/tests/data/configs/%s", root ? root : "../..", rel);
  return p;
}

/* "name=value@file:line ..." then "! name@file:line key=text ..." for the warnings. */
static char *dump(const struct vf_config *c) {
  struct sbuf b = {0};
  for (size_t i = 0; i < c->n_settings; i++) {
    const struct vf_config_setting *s = &c->settings[i];
    sb_printf(&b, "%s%s=%s@%s:%d", i ? " " : "", s->name, s->value, base_name(s->file), s->line);
  }
  for (size_t i = 0; i < c->n_warnings; i++) {
    const struct vf_config_warning *w = &c->warnings[i];
    sb_printf(&b, " ! %s@%s:%d %s=%s", w->name ? w->name : "-", base_name(w->file), w->line, w->key, w->text);
  }
  return sb_take(&b, NULL);
}

/* Reads the files (under tests/data/configs/ unless absolute) and checks the dump. */
static void expect(const char *want, const char *format, int n, ...) {
  const char *paths[8];
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < n; i++) {
    const char *p = va_arg(ap, const char *);
    paths[i] = p[0] == '/' ? p : src(p);
  }
  va_end(ap);
  struct vf_config c;
  struct vf_diag d;
  vf_config_init(&c);
  vf_diag_clear(&d);
  int rc = vf_config_read(&c, paths, (size_t)n, format, &d);
  if (rc) fail_msg("%s: %d %s", paths[0], rc, d.msg);
  char *got = dump(&c);
  if (strcmp(got, want) != 0) fail_msg("%s:\n got: %s\nwant: %s", paths[0], got, want);
  free(got);
  vf_config_cleanup(&c);
}

/* Reads one file and checks that it fails with code at line, the message holding needle. */
static void refuse(const char *rel, int code, int line, const char *needle) {
  const char *path = src(rel);
  struct vf_config c;
  struct vf_diag d;
  vf_config_init(&c);
  vf_diag_clear(&d);
  int rc = vf_config_read(&c, &path, 1, NULL, &d);
  if (rc != code || d.line != line || !strstr(d.msg, needle))
    fail_msg("%s: %d at line %d: %s (want %d at line %d: ...%s...)", rel, rc, d.line, d.msg, code, line, needle);
  vf_config_cleanup(&c);
}

static void hf_trainer_with_deepspeed(void **state) {
  (void)state;
  expect("framework=hf@train.yaml:3 model=Qwen/Qwen2.5-7B@train.yaml:3 weights=bf16@train.yaml:4 amp=bf16@train.yaml:21 "
         "batch=2@train.yaml:11 accumulation=16@train.yaml:13 seq=4096@train.yaml:8 eval=yes@train.yaml:19 "
         "grad_ckpt=full@train.yaml:14 attention=sdpa@train.yaml:5 optimizer=adamw@train.yaml:0 "
         "compile=no@train.yaml:0 shard=zero3@ds_z3_offload.json:8 offload=optimizer,params@ds_z3_offload.json:9",
         NULL, 1, "hf/train.yaml");
  /* Given on the command line too, the JSON is the same file, read once. */
  expect("framework=hf@train.yaml:3 model=Qwen/Qwen2.5-7B@train.yaml:3 weights=bf16@train.yaml:4 amp=bf16@train.yaml:21 "
         "batch=2@train.yaml:11 accumulation=16@train.yaml:13 seq=4096@train.yaml:8 eval=yes@train.yaml:19 "
         "grad_ckpt=full@train.yaml:14 attention=sdpa@train.yaml:5 optimizer=adamw@train.yaml:0 "
         "compile=no@train.yaml:0 shard=zero3@ds_z3_offload.json:8 offload=optimizer,params@ds_z3_offload.json:9",
         NULL, 2, "hf/train.yaml", "hf/ds_z3_offload.json");
}

static void hf_trainer_json_with_fsdp(void **state) {
  (void)state;
  expect("framework=hf@fsdp.json:2 model=llama-3.1-8b@fsdp.json:2 amp=bf16@fsdp.json:14 method=full@fsdp.json:0 "
         "lora_r=16@fsdp.json:0 quant=none@fsdp.json:0 batch=4@fsdp.json:4 accumulation=4@fsdp.json:5 "
         "seq=2048@fsdp.json:6 eval=no@fsdp.json:0 grad_ckpt=full@fsdp.json:11 compile=yes@fsdp.json:13 loss=fused@fsdp.json:12 "
         "shard=fsdp@fsdp.json:10 offload=optimizer,params@fsdp.json:10 "
         "! optimizer@fsdp.json:8 optim=galore_adamw",
         NULL, 1, "hf/fsdp.json");
}

static void trl_qlora_and_accelerate(void **state) {
  (void)state;
  expect("framework=hf@sft_qlora.yaml:2 model=mistralai/Mistral-7B-v0.1@sft_qlora.yaml:2 weights=bf16@sft_qlora.yaml:4 "
         "amp=bf16@sft_qlora.yaml:26 method=qlora@sft_qlora.yaml:10 lora_r=16@sft_qlora.yaml:11 "
         "lora_targets=q,k,v,o@sft_qlora.yaml:15 quant=nf4-dq@sft_qlora.yaml:8 batch=4@sft_qlora.yaml:42 "
         "accumulation=2@sft_qlora.yaml:29 seq=2048@sft_qlora.yaml:37 lengths=varied@sft_qlora.yaml:23 "
         "eval=yes@sft_qlora.yaml:28 grad_ckpt=full@sft_qlora.yaml:30 attention=flash@sft_qlora.yaml:5 "
         "optimizer=adamw@sft_qlora.yaml:0 compile=no@sft_qlora.yaml:0 offload=none@sft_qlora.yaml:0",
         NULL, 1, "trl/sft_qlora.yaml");
  /* TRL's own defaults (gradient checkpointing on), the launcher's GPUs and ZeRO from the
   * accelerate config, the allocator setting from env:. */
  expect("framework=hf@sft_lora.yaml:3 model=qwen2.5-1.5b@sft_lora.yaml:5 amp=bf16@accelerate_zero2.yaml:13 "
         "method=lora@sft_lora.yaml:7 lora_r=64@sft_lora.yaml:8 lora_targets=all-linear@sft_lora.yaml:10 "
         "quant=none@sft_lora.yaml:0 batch=8@sft_lora.yaml:11 accumulation=4@sft_lora.yaml:12 "
         "seq=4096@sft_lora.yaml:13 lengths=fixed@sft_lora.yaml:14 eval=no@sft_lora.yaml:0 "
         "grad_ckpt=full@sft_lora.yaml:0 optimizer=adamw@sft_lora.yaml:0 compile=no@sft_lora.yaml:0 offload=optimizer@accelerate_zero2.yaml:5 "
         "alloc_conf=expandable_segments:True@sft_lora.yaml:4 gpus=4@accelerate_zero2.yaml:15 "
         "shard=zero2@accelerate_zero2.yaml:9",
         NULL, 2, "trl/sft_lora.yaml", "trl/accelerate_zero2.yaml");
}

static void axolotl_recipes(void **state) {
  (void)state;
  expect("framework=hf@qlora.yml:1 model=llama-3.1-8b@qlora.yml:1 weights=bf16@qlora.yml:39 amp=bf16@qlora.yml:39 "
         "method=qlora@qlora.yml:16 lora_r=32@qlora.yml:24 lora_targets=all-linear@qlora.yml:27 "
         "quant=nf4-dq@qlora.yml:7 batch=2@qlora.yml:33 accumulation=4@qlora.yml:32 seq=4096@qlora.yml:19 "
         "lengths=fixed@qlora.yml:20 grad_ckpt=full@qlora.yml:42 attention=flash@qlora.yml:43 "
         "optimizer=adamw@qlora.yml:35 offload=none@qlora.yml:0",
         NULL, 1, "axolotl/qlora.yml");
  expect("framework=hf@lora_ds.yml:1 model=qwen2.5-7b@lora_ds.yml:1 weights=bf16@lora_ds.yml:33 "
         "amp=bf16@lora_ds.yml:33 method=lora@lora_ds.yml:8 lora_r=16@lora_ds.yml:9 "
         "lora_targets=q,v,gate,up,down@lora_ds.yml:13 quant=none@lora_ds.yml:0 batch=4@lora_ds.yml:30 "
         "accumulation=2@lora_ds.yml:31 seq=2048@lora_ds.yml:20 lengths=varied@lora_ds.yml:21 "
         "grad_ckpt=full@lora_ds.yml:34 attention=sdpa@lora_ds.yml:35 optimizer=adamw-8bit@lora_ds.yml:32 "
         "loss=fused@lora_ds.yml:28 offload=optimizer@zero2.json:5 shard=zero2@zero2.json:3 "
         "! lora_targets@lora_ds.yml:18 lora_target_modules=embed_tokens "
         "! grad_ckpt@lora_ds.yml:34 gradient_checkpointing=offload",
         NULL, 1, "axolotl/lora_ds.yml");
  expect("framework=hf@fsdp_full.yml:1 model=llama-3.1-70b@fsdp_full.yml:1 weights=bf16@fsdp_full.yml:16 "
         "amp=bf16@fsdp_full.yml:16 method=full@fsdp_full.yml:0 quant=none@fsdp_full.yml:0 "
         "batch=1@fsdp_full.yml:10 accumulation=8@fsdp_full.yml:11 seq=8192@fsdp_full.yml:8 "
         "lengths=fixed@fsdp_full.yml:9 grad_ckpt=full@fsdp_full.yml:29 attention=flash@fsdp_full.yml:17 "
         "optimizer=adamw@fsdp_full.yml:13 loss=cce@fsdp_full.yml:18 shard=fsdp@fsdp_full.yml:24 "
         "offload=optimizer,params@fsdp_full.yml:24",
         NULL, 1, "axolotl/fsdp_full.yml");
}

static void llamafactory_recipes(void **state) {
  (void)state;
  /* LLaMA-Factory's defaults: LoRA on every linear layer, gradient checkpointing on. */
  expect("framework=hf@qwen_lora_sft.yaml:2 model=qwen2.5-7b@qwen_lora_sft.yaml:2 weights=bf16@qwen_lora_sft.yaml:35 "
         "amp=bf16@qwen_lora_sft.yaml:35 method=lora@qwen_lora_sft.yaml:8 lora_r=8@qwen_lora_sft.yaml:9 "
         "lora_targets=all-linear@qwen_lora_sft.yaml:10 quant=none@qwen_lora_sft.yaml:0 "
         "batch=1@qwen_lora_sft.yaml:29 accumulation=8@qwen_lora_sft.yaml:30 seq=2048@qwen_lora_sft.yaml:15 "
         "eval=no@qwen_lora_sft.yaml:0 grad_ckpt=full@qwen_lora_sft.yaml:0 optimizer=adamw@qwen_lora_sft.yaml:0",
         NULL, 1, "llamafactory/qwen_lora_sft.yaml");
  expect("framework=hf@llama_qlora.yaml:2 model=llama-3-8b@llama_qlora.yaml:2 weights=bf16@llama_qlora.yaml:26 "
         "amp=bf16@llama_qlora.yaml:26 method=qlora@llama_qlora.yaml:11 lora_r=16@llama_qlora.yaml:12 "
         "lora_targets=q,v@llama_qlora.yaml:13 quant=nf4@llama_qlora.yaml:3 batch=2@llama_qlora.yaml:23 "
         "accumulation=4@llama_qlora.yaml:24 seq=4096@llama_qlora.yaml:19 lengths=fixed@llama_qlora.yaml:20 "
         "eval=no@llama_qlora.yaml:0 grad_ckpt=none@llama_qlora.yaml:28 attention=flash@llama_qlora.yaml:6 "
         "optimizer=adamw@llama_qlora.yaml:0 loss=fused@llama_qlora.yaml:27",
         NULL, 1, "llamafactory/llama_qlora.yaml");
  expect("framework=hf@full_ds3.yaml:2 model=qwen2.5-14b@full_ds3.yaml:2 amp=bf16@full_ds3.yaml:19 "
         "method=full@full_ds3.yaml:7 lora_r=8@full_ds3.yaml:0 lora_targets=all-linear@full_ds3.yaml:0 "
         "quant=none@full_ds3.yaml:0 batch=1@full_ds3.yaml:16 accumulation=2@full_ds3.yaml:17 "
         "seq=8192@full_ds3.yaml:13 eval=no@full_ds3.yaml:0 grad_ckpt=full@full_ds3.yaml:0 "
         "optimizer=adamw@full_ds3.yaml:20 shard=zero3@ds_z3_config.json:19 offload=none@ds_z3_config.json:0",
         NULL, 1, "llamafactory/full_ds3.yaml");
  expect("framework=hf@freeze.yaml:1 model=llama-3.2-3b@freeze.yaml:1 amp=none@freeze.yaml:0 lora_r=8@freeze.yaml:0 "
         "lora_targets=all-linear@freeze.yaml:0 quant=none@freeze.yaml:0 batch=4@freeze.yaml:9 "
         "accumulation=4@freeze.yaml:10 seq=1024@freeze.yaml:8 eval=no@freeze.yaml:0 grad_ckpt=full@freeze.yaml:0 "
         "! method@freeze.yaml:4 finetuning_type=freeze ! optimizer@freeze.yaml:11 optim=galore_adamw",
         NULL, 1, "llamafactory/freeze.yaml");
}

static void torchtune_recipes(void **state) {
  (void)state;
  expect("framework=torchtune@1B_lora_single_device.yaml:7 amp=none@1B_lora_single_device.yaml:65 "
         "weights=bf16@1B_lora_single_device.yaml:65 lora_r=64@1B_lora_single_device.yaml:14 "
         "lora_targets=q,v,o,gate,up,down@1B_lora_single_device.yaml:12 batch=4@1B_lora_single_device.yaml:42 "
         "accumulation=8@1B_lora_single_device.yaml:60 lengths=varied@1B_lora_single_device.yaml:39 "
         "grad_ckpt=none@1B_lora_single_device.yaml:68 optimizer=adamw@1B_lora_single_device.yaml:46 "
         "optimizer_in_bwd=no@1B_lora_single_device.yaml:0 compile=no@1B_lora_single_device.yaml:61 "
         "loss=chunked@1B_lora_single_device.yaml:55 "
         "offload=none@1B_lora_single_device.yaml:69 "
         "method=lora@1B_lora_single_device.yaml:11 model=llama-3.2-1b@1B_lora_single_device.yaml:11 "
         "! seq@1B_lora_single_device.yaml:22 tokenizer.max_seq_len=null",
         NULL, 1, "torchtune/1B_lora_single_device.yaml");
  expect("framework=torchtune@8B_qlora_packed.yaml:4 amp=none@8B_qlora_packed.yaml:35 "
         "weights=bf16@8B_qlora_packed.yaml:35 "
         "lora_r=8@8B_qlora_packed.yaml:11 lora_targets=q,k,v,o,gate,up,down@8B_qlora_packed.yaml:8 "
         "batch=2@8B_qlora_packed.yaml:23 accumulation=1@8B_qlora_packed.yaml:24 seq=8192@8B_qlora_packed.yaml:18 "
         "lengths=fixed@8B_qlora_packed.yaml:22 grad_ckpt=full@8B_qlora_packed.yaml:36 "
         "optimizer=paged-adamw-8bit@8B_qlora_packed.yaml:28 compile=yes@8B_qlora_packed.yaml:38 "
         "loss=chunked@8B_qlora_packed.yaml:31 "
         "offload=activations@8B_qlora_packed.yaml:37 method=qlora@8B_qlora_packed.yaml:7 "
         "model=llama-3.1-8b@8B_qlora_packed.yaml:7 "
         "! optimizer_in_bwd@8B_qlora_packed.yaml:25 optimizer_in_bwd=True",
         NULL, 1, "torchtune/8B_qlora_packed.yaml");
  expect("framework=torchtune@7B_full_distributed.yaml:4 amp=none@7B_full_distributed.yaml:36 "
         "weights=bf16@7B_full_distributed.yaml:36 batch=2@7B_full_distributed.yaml:24 "
         "accumulation=8@7B_full_distributed.yaml:32 seq=4096@7B_full_distributed.yaml:13 "
         "lengths=varied@7B_full_distributed.yaml:23 grad_ckpt=full@7B_full_distributed.yaml:35 "
         "optimizer=adamw@7B_full_distributed.yaml:27 optimizer_in_bwd=no@7B_full_distributed.yaml:0 "
         "compile=no@7B_full_distributed.yaml:0 loss=chunked@7B_full_distributed.yaml:31 "
         "offload=optimizer,params@7B_full_distributed.yaml:33 method=full@7B_full_distributed.yaml:7 "
         "model=qwen2.5-7b@7B_full_distributed.yaml:7",
         NULL, 1, "torchtune/7B_full_distributed.yaml");
}

static void litgpt_configs(void **state) {
  (void)state;
  /* checkpoint_dir loses "checkpoints/" (a Hub id); the accumulation is global / micro /
   * GPUs. */
  expect("framework=litgpt@lora.yaml:3 model=meta-llama/Llama-3.2-1B@lora.yaml:3 amp=none@lora.yaml:9 "
         "weights=bf16@lora.yaml:9 method=lora@lora.yaml:17 lora_r=32@lora.yaml:17 lora_targets=q,v@lora.yaml:20 "
         "batch=1@lora.yaml:42 gpus=1@lora.yaml:14 accumulation=8@lora.yaml:40 seq=512@lora.yaml:47 "
         "optimizer=adamw@lora.yaml:63",
         NULL, 1, "litgpt/lora.yaml");
  expect("framework=litgpt@qlora.yaml:2 model=mistralai/Mistral-7B-v0.1@qlora.yaml:2 amp=none@qlora.yaml:8 weights=bf16@qlora.yaml:8 "
         "method=lora@qlora.yaml:20 lora_r=32@qlora.yaml:20 lora_targets=q,k,v,o,gate,up,down@qlora.yaml:23 "
         "quant=nf4@qlora.yaml:11 batch=2@qlora.yaml:35 gpus=2@qlora.yaml:14 accumulation=4@qlora.yaml:32 "
         "seq=2048@qlora.yaml:38",
         NULL, 1, "litgpt/qlora.yaml");
  expect("framework=litgpt@full_auto.yaml:1 model=tinyllama-1.1b@full_auto.yaml:1 amp=bf16@full_auto.yaml:3 "
         "lora_targets=q,v@full_auto.yaml:0 batch=4@full_auto.yaml:10 accumulation=16@full_auto.yaml:9 "
         "seq=1024@full_auto.yaml:13 optimizer=adamw@full_auto.yaml:15 ! gpus@full_auto.yaml:4 devices=auto",
         NULL, 1, "litgpt/full_auto.yaml");
}

static void lightning_cli(void **state) {
  (void)state;
  /* devices x num_nodes; a strategy's name says the stage and the offload. */
  expect("framework=lightning@cli_ds.yaml:3 model=llama-3.2-3b@cli_ds.yaml:16 amp=bf16@cli_ds.yaml:9 "
         "batch=8@cli_ds.yaml:22 gpus=8@cli_ds.yaml:7 accumulation=4@cli_ds.yaml:11 seq=1024@cli_ds.yaml:23 "
         "optimizer=adamw@cli_ds.yaml:26 shard=zero2@cli_ds.yaml:6 offload=optimizer@cli_ds.yaml:6",
         NULL, 1, "lightning/cli_ds.yaml");
  expect("framework=lightning@fsdp_class.yaml:1 model=pythia-1b@fsdp_class.yaml:18 amp=none@fsdp_class.yaml:5 "
         "weights=bf16@fsdp_class.yaml:5 batch=16@fsdp_class.yaml:20 gpus=4@fsdp_class.yaml:4 "
         "accumulation=1@fsdp_class.yaml:0 seq=2048@fsdp_class.yaml:21 grad_ckpt=full@fsdp_class.yaml:12 "
         "shard=fsdp@fsdp_class.yaml:7",
         NULL, 1, "lightning/fsdp_class.yaml");
}

static void hydra_composes_its_defaults(void **state) {
  (void)state;
  /* trainer/gpu.yaml (composed after trainer/default.yaml, which it lists) wins over it;
   * the data group's keys land under data. */
  expect("framework=lightning@config.yaml:2 model=gemma-2-2b@config.yaml:8 amp=bf16@gpu.yaml:6 "
         "method=lora@config.yaml:10 lora_r=16@config.yaml:10 batch=12@alpaca.yaml:3 gpus=2@gpu.yaml:5 "
         "accumulation=2@default.yaml:11 seq=1024@alpaca.yaml:4 "
         "alloc_conf=expandable_segments:True@config.yaml:19",
         NULL, 1, "hydra/conf/config.yaml");
}

static void malformed_and_unknown_configs(void **state) {
  (void)state;
  refuse("errors/broken.yaml", VF_EFORMAT, 4, "invalid YAML");
  refuse("errors/duplicate.yaml", VF_EFORMAT, 4, "duplicate key 'per_device_train_batch_size'");
  refuse("errors/unknown.yaml", VF_EUNSUPPORTED, 1, "not a training config");
  refuse("errors/missing_ds.yaml", VF_ENOTFOUND, 5, "deepspeed: configs/ds_zero3.json: no such file");
}

/* The model's own config.json is a model, not a training config; a YAML no map claims is
 * refused; --format claims what detection would not. */
static void detection(void **state) {
  (void)state;
  struct vf_diag d;
  char path[1024];
  const char *root = getenv("VF_SOURCE_DIR");
  static const char *const models[] = {"qwen2.5-7b", "llama-3.1-8b", "bert-base-uncased", "mixtral-8x7b", "gpt2"};
  for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
    snprintf(path, sizeof path, "%s/data/models/%s.json", root ? root : "../..", models[i]);
    assert_int_equal(vf_config_detect(path, NULL, &d), 0);
  }
  assert_int_equal(vf_config_detect(src("hf/train.yaml"), NULL, &d), 1);
  assert_int_equal(vf_config_detect(src("hf/fsdp.json"), NULL, &d), 1);
  assert_int_equal(vf_config_detect(src("errors/unknown.yaml"), NULL, &d), VF_EUNSUPPORTED);
  assert_int_equal(d.line, 1);
  assert_int_equal(vf_config_detect(src("errors/unknown.yaml"), "hydra", &d), 1);
  assert_int_equal(vf_config_detect(src("errors/unknown.yaml"), "nosuch", &d), VF_EINVAL);
  assert_int_equal(vf_config_detect("qwen2.5-7b", NULL, &d), 0);
  char dir[512], broken[1024];
  vf_test_tmpdir("config-detect", dir, sizeof dir);
  vf_test_write(dir, "config.json", "{\"hidden_size\": 8,", 18, broken, sizeof broken);
  assert_int_equal(vf_config_detect(broken, NULL, &d), 0);
}

static const char *put(const char *dir, const char *name, const char *text) {
  static char paths[4][1024];
  static int next;
  char *p = paths[next++ % 4];
  vf_test_write(dir, name, text, strlen(text), p, 1024);
  return p;
}

/* Two files that disagree: the first is read, the other warned about; a DeepSpeed config
 * inline; interpolations and aliases are said, not guessed. */
static void files_together(void **state) {
  (void)state;
  char dir[512];
  vf_test_tmpdir("config-together", dir, sizeof dir);
  const char *a = put(dir, "a.yaml", "model_name_or_path: gpt2\nper_device_train_batch_size: 4\n"
                                     "gradient_accumulation_steps: 2\noutput_dir: o\n"
                                     "deepspeed:\n  zero_optimization:\n    stage: 1\n"
                                     "  train_micro_batch_size_per_gpu: 8\n");
  expect("framework=hf@a.yaml:1 model=gpt2@a.yaml:1 amp=none@a.yaml:0 batch=4@a.yaml:2 accumulation=2@a.yaml:3 "
         "eval=no@a.yaml:0 grad_ckpt=none@a.yaml:0 optimizer=adamw@a.yaml:0 compile=no@a.yaml:0 shard=zero1@a.yaml:7 offload=none@a.yaml:0 "
         "! batch@a.yaml:8 train_micro_batch_size_per_gpu=8",
         NULL, 1, a);
  const char *b = put(dir, "b.yaml", "base_model: gpt2\nsequence_len: ${max_len}\nmicro_batch_size: &mb 2\n"
                                     "gradient_accumulation_steps: *mb\n");
  expect("framework=hf@b.yaml:1 model=gpt2@b.yaml:1 weights=bf16@b.yaml:0 amp=bf16@b.yaml:0 method=full@b.yaml:0 "
         "quant=none@b.yaml:0 batch=2@b.yaml:3 grad_ckpt=none@b.yaml:0 optimizer=adamw@b.yaml:0 offload=none@b.yaml:0 "
         "! accumulation@b.yaml:4 gradient_accumulation_steps=mb ! seq@b.yaml:2 sequence_len=${max_len}",
         NULL, 1, b);
  /* --format names the main config's tool. */
  const char *c = put(dir, "c.yaml", "batch_size: 3\n");
  expect("framework=torchtune@c.yaml:1 batch=3@c.yaml:1 accumulation=1@c.yaml:0 grad_ckpt=none@c.yaml:0 "
         "optimizer_in_bwd=no@c.yaml:0 compile=no@c.yaml:0 offload=none@c.yaml:0",
         "torchtune", 1, c);
}

/* A logical value a map reads into a setting must be one the option takes. */
static void value_ok(const char *format, const char *logical, const char *value) {
  static const struct {
    const char *name;
    enum vf_enum_kind kind;
  } words[] = {{"weights", VF_ENUM_PRECISION}, {"method", VF_ENUM_METHOD}, {"quant", VF_ENUM_QUANT},
               {"lengths", VF_ENUM_LENGTHS}, {"eval", VF_ENUM_EVAL}, {"grad_ckpt", VF_ENUM_CKPT},
               {"attention", VF_ENUM_ATTENTION}, {"optimizer", VF_ENUM_OPTIMIZER}, {"shard", VF_ENUM_SHARD}};
  uint32_t bits;
  int v;
  char dtype[16];
  if (strcmp(value, "default") == 0) return;
  for (size_t i = 0; i < sizeof words / sizeof *words; i++)
    if (strcmp(words[i].name, logical) == 0 && vf_enum_parse(words[i].kind, value, &v) != 0)
      fail_msg("%s: %s: '%s' is no value of --%s", format, logical, value, logical);
  snprintf(dtype, sizeof dtype, "%.*s", (int)strcspn(value, "-"), value);
  if (strcmp(logical, "precision") == 0 && vf_enum_parse(VF_ENUM_PRECISION, dtype, &v) != 0)
    fail_msg("%s: precision: '%s'", format, value);
  if (strcmp(logical, "lora_targets") == 0 && vf_lora_targets_parse(value, &bits) != 0)
    fail_msg("%s: lora_targets: '%s'", format, value);
  if (strcmp(logical, "offload") == 0 && !strstr("none optimizer params activations", value))
    fail_msg("%s: offload: '%s'", format, value);
}

static void entry_ok(const char *format, const char *logical, const json_t *entry) {
  static const char *const forms[] = {"values", "set", "present"};
  for (size_t i = 0; i < 3; i++) {
    const char *value;
    json_t *spelling;
    json_object_foreach(json_object_get(entry, forms[i]), value, spelling) value_ok(format, logical, value);
  }
}

/* Every value a map spells is one the command line takes, every torchtune builder a model
 * of the catalogue: a typo in a map would be a refusal naming the user's file. */
static void maps_read_into_options(void **state) {
  (void)state;
  struct formats fs;
  struct vf_diag d;
  assert_int_equal(formats_load(&fs, &d), 0);
  for (size_t i = 0; i < fs.n; i++) {
    static const char *const parts[] = {"keys", "read"};
    for (size_t p = 0; p < 2; p++) {
      const char *logical;
      json_t *entry;
      json_object_foreach(json_object_get(fs.v[i].map, parts[p]), logical, entry) {
        entry_ok(fs.v[i].name, logical, entry);
      }
    }
    const char *builder;
    json_t *model;
    json_object_foreach(json_object_get(fs.v[i].map, "builders"), builder, model) {
      char *text;
      size_t len;
      if (vf_catalog_config(json_string_value(model), &text, &len) != 0) fail_msg("%s: not in the catalogue", builder);
      vf_free(text);
    }
  }
  formats_free(&fs);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(hf_trainer_with_deepspeed),
      cmocka_unit_test(hf_trainer_json_with_fsdp),
      cmocka_unit_test(trl_qlora_and_accelerate),
      cmocka_unit_test(axolotl_recipes),
      cmocka_unit_test(llamafactory_recipes),
      cmocka_unit_test(torchtune_recipes),
      cmocka_unit_test(litgpt_configs),
      cmocka_unit_test(lightning_cli),
      cmocka_unit_test(hydra_composes_its_defaults),
      cmocka_unit_test(malformed_and_unknown_configs),
      cmocka_unit_test(detection),
      cmocka_unit_test(files_together),
      cmocka_unit_test(maps_read_into_options),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

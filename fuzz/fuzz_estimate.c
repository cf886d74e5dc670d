/* libFuzzer target: the estimator on arbitrary setups. Whatever the bytes ask for, the
 * estimate is refused with a reason or comes out consistent: no crash, no overflow, the
 * breakdown summing to the device figure and allocated <= reserved <= device. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/profile.h"
#include "vramfit.h"

static const char *const models[] = {"gpt2",     "llama-3.2-1b", "mixtral-8x7b", "bert-base-uncased",
                                     "gemma-2-2b", "falcon-7b",  "phi-2",        "pythia-1b",
                                     "qwen3-0.6b", "gemma-3-1b", "olmo-2-1b",    "deepseek-v2-lite"};
static const char *const frameworks[] = {"hf", "hf@4.16", "litgpt", "torchtune", "lightning",
                                         "deepspeed", "megatron", "torchtitan"};

struct bytes {
  const uint8_t *p;
  size_t n;
};

static uint64_t next(struct bytes *b, uint64_t limit) {
  uint64_t v = 0;
  for (int i = 0; i < 4 && b->n; i++, b->p++, b->n--) v = v << 8 | *b->p;
  return limit ? v % limit : v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static struct vf_model m[sizeof models / sizeof *models];
  static struct vf_profile p[sizeof frameworks / sizeof *frameworks];
  static int loaded;
  struct vf_diag d;
  if (!loaded) {
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
      vf_model_init(&m[i]);
      if (vf_model_load(&m[i], models[i], &d)) abort();
    }
    for (size_t i = 0; i < sizeof frameworks / sizeof *frameworks; i++)
      if (profile_read(frameworks[i], NULL, &p[i], &d)) abort();
    loaded = 1;
  }
  struct bytes b = {data, size};
  const struct vf_model *model = &m[next(&b, sizeof models / sizeof *models)];
  const struct vf_profile *prof = &p[next(&b, sizeof frameworks / sizeof *frameworks)];
  struct vf_setup s;
  vf_setup_default(&s);
  /* Mostly small values, sometimes anything: both the usual and the absurd get tried. */
  uint64_t scale = next(&b, 4) == 0 ? 0 : 64;
  s.batch = next(&b, scale);
  s.seq = next(&b, scale ? 4096 : 0);
  s.accumulation = next(&b, 4);
  s.weights = (enum vf_precision)next(&b, 4);
  s.amp = (enum vf_precision)next(&b, 4);
  s.optimizer = (enum vf_optimizer)next(&b, 8);
  s.method = (enum vf_method)next(&b, 6);
  s.lora_r = next(&b, scale ? 256 : 0);
  s.lora_targets = (uint32_t)next(&b, 1u << VF_KIND_PUBLIC_COUNT);
  s.quant = (enum vf_quant)next(&b, 5);
  s.grad_ckpt = (enum vf_ckpt)next(&b, 3);
  s.attention = (enum vf_attention)next(&b, 4);
  s.gpus = next(&b, scale ? 1024 : 0);
  s.tp = next(&b, 9);
  s.pp = next(&b, 9);
  s.cp = next(&b, 5);
  s.shard = (enum vf_shard)next(&b, 6);
  s.offload = (uint32_t)next(&b, 8);
  s.gpu_cc_major = (uint32_t)next(&b, 13);
  struct vf_alloc_conf c;
  vf_alloc_conf_default(&c);
  c.expandable_segments = next(&b, 2);
  s.pp_schedule = (enum vf_pp_schedule)next(&b, 5);
  s.sequence_parallel = (enum vf_sp)next(&b, 3);
  /* 1 when the bytes run out, as the older seeds' setups had them. */
  s.ep = next(&b, 8) + 1;
  s.dp_replicate = next(&b, 4) + 1;
  s.compile = (enum vf_compile)next(&b, 2);
  struct vf_estimate e;
  if (vf_estimate(model, &s, prof, &c, &e, &d) != 0) return 0;
  uint64_t sum = e.allocator_slack + e.context;
  for (int k = 0; k < VF_CAT_COUNT; k++) sum += e.by_category[k];
  if (sum != e.device_peak || e.allocated_peak > e.reserved_peak || e.reserved_peak > e.device_peak) abort();
  return 0;
}

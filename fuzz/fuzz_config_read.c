/* Random training configs read into settings (vf_config_read). The input is up to three
 * documents split at "\n%%\n": the config (byte 0 picks its name, .yaml or .json, and the
 * format forced, if any), "ds.json" beside it (a DeepSpeed config it may name) and
 * "data/alpaca.yaml" (a Hydra group config its defaults list may name). Whatever is read,
 * each setting must be one the command line takes: a known name once, its value one the
 * option accepts, a place in one of the files. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vramfit.h"

static const char *const formats[] = {NULL, "hf", "trl", "axolotl", "llamafactory", "torchtune", "litgpt",
                                      "lightning", "hydra", "deepspeed", "accelerate"};

static const struct {
  const char *name;
  int kind; /* an enum_kind, or -1: a whole number, -2: free text, -3: a list */
} settings[] = {
    {"framework", -2}, {"model", -2}, {"weights", VF_ENUM_PRECISION}, {"amp", VF_ENUM_PRECISION},
    {"method", VF_ENUM_METHOD}, {"lora_r", -1}, {"lora_targets", -3}, {"quant", VF_ENUM_QUANT},
    {"batch", -1}, {"gpus", -1}, {"accumulation", -1}, {"seq", -1}, {"lengths", VF_ENUM_LENGTHS},
    {"eval", VF_ENUM_EVAL}, {"grad_ckpt", VF_ENUM_CKPT}, {"attention", VF_ENUM_ATTENTION},
    {"optimizer", VF_ENUM_OPTIMIZER}, {"loss", VF_ENUM_LOSS}, {"optimizer_in_bwd", VF_ENUM_IN_BWD},
    {"compile", VF_ENUM_COMPILE},
    {"shard", VF_ENUM_SHARD}, {"offload", -3},
    {"tp", -1}, {"pp", -1}, {"cp", -1}, {"ep", -1}, {"alloc_conf", -2},
};

static void check(bool ok, const char *what, const char *detail) {
  if (ok) return;
  fprintf(stderr, "fuzz_config_read: %s: %s\n", what, detail);
  abort();
}

static char dir[64];

static void put(const char *name, const uint8_t *bytes, size_t n) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  fwrite(bytes, 1, n, f);
  fclose(f);
}

/* A whole number as the options take one: digits, kept as given (the option refuses the rest). */
static bool setting_ok(const struct vf_config_setting *s) {
  for (size_t i = 0; i < sizeof settings / sizeof *settings; i++) {
    if (strcmp(settings[i].name, s->name) != 0) continue;
    int v;
    uint32_t bits;
    switch (settings[i].kind) {
    case -1: return s->value[0] != '\0';
    case -2: return true;
    case -3:
      return strcmp(s->name, "lora_targets") == 0 ? vf_lora_targets_parse(s->value, &bits) == 0
                                                  : strspn(s->value, "nonepticmzrsavl,") == strlen(s->value);
    default: return vf_enum_parse((enum vf_enum_kind)settings[i].kind, s->value, &v) == 0;
    }
  }
  return false;
}

static void check_config(const struct vf_config *c) {
  for (size_t i = 0; i < c->n_settings; i++) {
    const struct vf_config_setting *s = &c->settings[i];
    check(setting_ok(s), "a setting the command line does not take", s->name);
    check(strncmp(s->file, dir, strlen(dir)) == 0 && s->line >= 0, "a setting with no place", s->name);
    for (size_t j = 0; j < i; j++) check(strcmp(c->settings[j].name, s->name) != 0, "a setting twice", s->name);
  }
  for (size_t i = 0; i < c->n_warnings; i++)
    check(c->warnings[i].file && c->warnings[i].why[0], "a warning without a place or reason", c->warnings[i].key);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2 || size > 8192) return 0;
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/fuzz-config-XXXXXX");
    if (!mkdtemp(dir)) abort();
    char sub[96];
    snprintf(sub, sizeof sub, "%s/data", dir);
    mkdir(sub, 0700);
  }
  const char *names[] = {"config.yaml", "config.json", "ds.json", "data/alpaca.yaml"};
  const uint8_t *p = data + 1, *end = data + size;
  for (int part = 0; part < 3; part++) {
    const uint8_t *cut = NULL;
    for (const uint8_t *q = p; q + 4 <= end && !cut; q++)
      if (memcmp(q, "\n%%\n", 4) == 0) cut = q;
    size_t n = (size_t)((cut ? cut : end) - p);
    put(part == 0 ? names[data[0] & 1] : names[part + 1], p, n);
    p = cut ? cut + 4 : end;
  }
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, names[data[0] & 1]);
  const char *paths[] = {path};
  struct vf_config c;
  struct vf_diag d;
  vf_config_init(&c);
  if (vf_config_read(&c, paths, 1, formats[(data[0] >> 1) % (sizeof formats / sizeof *formats)], &d) == 0)
    check_config(&c);
  vf_config_cleanup(&c);
  vf_config_detect(path, NULL, &d);
  return 0;
}

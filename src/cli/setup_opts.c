/* The setup options shared by estimate and plan (see setup_opts.h). */
#include <ctype.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"

#include "cli/setup_opts.h"

void setup_request_init(struct setup_request *r, const char *cmd) {
  memset(r, 0, sizeof *r);
  r->cmd = cmd;
  r->framework = "hf";
  vf_framework_spec_parse(r->framework, &r->spec, NULL);
  vf_setup_default(&r->setup);
}

/* Each setup option: its flag, and the value of the setup it sets (K_COUNT: none, --gpu). */
static const struct {
  int code;
  const char *flag;
  enum setup_key key;
} options[] = {
    {O_BATCH, "--batch", K_BATCH},
    {O_SEQ, "--seq", K_SEQ},
    {O_ACCUMULATION, "--accumulation", K_ACCUMULATION},
    {O_TASK, "--task", K_TASK},
    {O_FRAMEWORK, "--framework", K_FRAMEWORK},
    {O_WEIGHTS, "--weights", K_WEIGHTS},
    {O_AMP, "--amp", K_AMP},
    {O_OPTIMIZER, "--optimizer", K_OPTIMIZER},
    {O_METHOD, "--method", K_METHOD},
    {O_LORA_R, "--lora-r", K_LORA_R},
    {O_LORA_TARGETS, "--lora-targets", K_LORA_TARGETS},
    {O_QUANT, "--quant", K_QUANT},
    {O_GRAD_CKPT, "--grad-ckpt", K_GRAD_CKPT},
    {O_ATTENTION, "--attention", K_ATTENTION},
    {O_GPUS, "--gpus", K_GPUS},
    {O_SHARD, "--shard", K_SHARD},
    {O_OFFLOAD, "--offload", K_OFFLOAD},
    {O_TP, "--tp", K_TP},
    {O_PP, "--pp", K_PP},
    {O_CP, "--cp", K_CP},
    {O_GPU, "--gpu", K_COUNT},
    {O_ALLOC_CONF, "--alloc-conf", K_ALLOC_CONF},
    {O_LENGTHS, "--lengths", K_LENGTHS},
    {O_TORCH, "--torch", K_TORCH},
    {O_EVAL, "--eval", K_EVAL},
    {O_PP_SCHEDULE, "--pp-schedule", K_PP_SCHEDULE},
    {O_SEQUENCE_PARALLEL, "--sequence-parallel", K_SEQUENCE_PARALLEL},
    {O_DP_REPLICATE, "--dp-replicate", K_DP_REPLICATE},
    {O_EP, "--ep", K_EP},
    {O_FORMAT, "--format", K_COUNT},
    {O_LOSS, "--loss", K_LOSS},
    {O_OPTIMIZER_IN_BWD, "--optimizer-in-bwd", K_OPTIMIZER_IN_BWD},
    {O_COMPILE, "--compile", K_COMPILE},
};
#define N_OPTIONS (sizeof options / sizeof *options)

static int parse_enum(const struct setup_request *r, const char *label, enum vf_enum_kind kind,
                      const char *text, int *out) {
  if (vf_enum_parse(kind, text, out) == 0) return 0;
  char choices[256];
  vf_enum_choices(kind, choices, sizeof choices);
  cli_usage_error(r->cmd, "%s: '%s' is not one of %s", label, text, choices);
  return VF_EINVAL;
}

static int parse_offload(const struct setup_request *r, const char *label, const char *text, uint32_t *out) {
  static const struct { const char *name; uint32_t bit; } names[] = {
      {"none", 0}, {"optimizer", VF_OFFLOAD_OPTIMIZER}, {"params", VF_OFFLOAD_PARAMS},
      {"activations", VF_OFFLOAD_ACTIVATIONS}};
  *out = 0;
  for (const char *p = text; *p;) {
    size_t n = strcspn(p, ","), i;
    for (i = 0; i < 4; i++)
      if (strlen(names[i].name) == n && strncmp(p, names[i].name, n) == 0) break;
    if (i == 4) {
      cli_usage_error(r->cmd, "%s: '%s' is not a list of none, optimizer, params, activations", label, text);
      return VF_EINVAL;
    }
    *out |= names[i].bit;
    p += n + (p[n] == ',');
  }
  return 0;
}

static int parse_precision(const struct setup_request *r, const char *label, const char *text,
                           enum vf_precision *out, bool allow_none) {
  /* Weights take fp32, bf16 or fp16; autocast none, bf16 or fp16. */
  const char *choices = allow_none ? "none, bf16, fp16" : "fp32, bf16, fp16";
  int v;
  if (vf_enum_parse(VF_ENUM_PRECISION, text, &v) || (v == VF_PREC_NONE && !allow_none) ||
      (allow_none && v == VF_PREC_FP32)) {
    cli_usage_error(r->cmd, "%s: '%s' is not one of %s", label, text, choices);
    return VF_EINVAL;
  }
  *out = (enum vf_precision)v;
  return 0;
}

/* Histograms of sample lengths are a line per length: a few hundred KiB at most. */
#define MAX_HISTOGRAM (64u << 20)

/* --lengths varied:MEAN,MAX (two whole numbers) or varied:FILE (a histogram of the
 * dataset's sample lengths, vf_length_dist_parse). */
static int parse_length_dist(struct setup_request *r, const char *label, const char *arg) {
  const char *spec = arg + 7;
  struct vf_length_dist *dist = &r->setup.length_dist;
  unsigned long long mean, max;
  int used = 0;
  if (sscanf(spec, "%llu,%llu%n", &mean, &max, &used) == 2 && !spec[used] && isdigit((unsigned char)spec[0])) {
    if (vf_length_dist_mean_max(mean, max, dist)) {
      cli_usage_error(r->cmd, "%s: '%s': the mean must be from 1 to the longest (%llu)", label, arg, max);
      return VF_EINVAL;
    }
  } else {
    char *text = NULL;
    size_t len = 0;
    struct vf_diag d;
    vf_diag_clear(&d);
    int rc = file_read(spec, MAX_HISTOGRAM, &text, &len, &d);
    if (!rc && (rc = vf_length_dist_parse(text, len, dist, &d)) != 0)
      snprintf(d.file, sizeof d.file, "%s", spec);
    free(text);
    if (rc) {
      cli_diag_error(r->cmd, rc, &d);
      return VF_EINVAL;
    }
  }
  r->setup.lengths = VF_LENGTHS_VARIED;
  r->lengths_spec = arg;
  return 0;
}

/* The options that name one value of an enum, and the setup field each sets (every enum of
 * the setup is int-sized: gcc and clang give enums of small values int's size). */
static const struct {
  int option;
  enum vf_enum_kind kind;
  size_t field;
} enum_options[] = {
    {O_TASK, VF_ENUM_TASK, offsetof(struct vf_setup, task)},
    {O_OPTIMIZER, VF_ENUM_OPTIMIZER, offsetof(struct vf_setup, optimizer)},
    {O_METHOD, VF_ENUM_METHOD, offsetof(struct vf_setup, method)},
    {O_QUANT, VF_ENUM_QUANT, offsetof(struct vf_setup, quant)},
    {O_GRAD_CKPT, VF_ENUM_CKPT, offsetof(struct vf_setup, grad_ckpt)},
    {O_ATTENTION, VF_ENUM_ATTENTION, offsetof(struct vf_setup, attention)},
    {O_SHARD, VF_ENUM_SHARD, offsetof(struct vf_setup, shard)},
    {O_EVAL, VF_ENUM_EVAL, offsetof(struct vf_setup, eval)},
    {O_SEQUENCE_PARALLEL, VF_ENUM_SP, offsetof(struct vf_setup, sequence_parallel)},
    {O_LOSS, VF_ENUM_LOSS, offsetof(struct vf_setup, loss)},
    {O_OPTIMIZER_IN_BWD, VF_ENUM_IN_BWD, offsetof(struct vf_setup, optimizer_in_bwd)},
    {O_COMPILE, VF_ENUM_COMPILE, offsetof(struct vf_setup, compile)},
};
_Static_assert(sizeof(enum vf_task) == sizeof(int) && sizeof(enum vf_optimizer) == sizeof(int) &&
                   sizeof(enum vf_method) == sizeof(int) && sizeof(enum vf_quant) == sizeof(int) &&
                   sizeof(enum vf_ckpt) == sizeof(int) && sizeof(enum vf_attention) == sizeof(int) &&
                   sizeof(enum vf_shard) == sizeof(int) && sizeof(enum vf_eval) == sizeof(int) &&
                   sizeof(enum vf_sp) == sizeof(int) && sizeof(enum vf_loss) == sizeof(int) &&
                   sizeof(enum vf_in_bwd) == sizeof(int) && sizeof(enum vf_compile) == sizeof(int),
               "enum_options writes the setup's enums as int");

static int parse_choice(struct setup_request *r, int c, const char *label, const char *arg) {
  struct vf_setup *s = &r->setup;
  int v = 0, rc;
  for (size_t i = 0; i < sizeof enum_options / sizeof *enum_options; i++) {
    if (enum_options[i].option != c) continue;
    rc = parse_enum(r, label, enum_options[i].kind, arg, &v);
    if (!rc) memcpy((char *)s + enum_options[i].field, &v, sizeof v);
    return rc;
  }
  switch (c) {
  case O_LENGTHS:
    if (!strncmp(arg, "varied:", 7)) return parse_length_dist(r, label, arg);
    rc = parse_enum(r, label, VF_ENUM_LENGTHS, arg, &v);
    s->lengths = (enum vf_lengths)v;
    s->length_dist.n = 0;
    r->lengths_spec = NULL;
    return rc;
  case O_PP_SCHEDULE:
    /* "none" is a profile's word for a framework without a pipeline, no one's choice. */
    if (vf_enum_parse(VF_ENUM_PP_SCHEDULE, arg, &v) || v == VF_PP_NONE) {
      cli_usage_error(r->cmd, "%s: '%s' is not one of gpipe, 1f1b, interleaved-1f1b", label, arg);
      return VF_EINVAL;
    }
    s->pp_schedule = (enum vf_pp_schedule)v;
    return 0;
  default: /* every setup option is handled here or in parse_option */
    return VF_EINTERNAL;
  }
}

/* --framework NAME[@VERSION] and --torch VERSION: checked here, resolved when the profile loads. */
static int parse_version(struct setup_request *r, int c, const char *label, const char *arg) {
  struct vf_diag d;
  vf_diag_clear(&d);
  if (c == O_FRAMEWORK ? vf_framework_spec_parse(arg, &r->spec, &d) : vf_torch_release_check(arg, &d)) {
    cli_usage_error(r->cmd, "%s: %s", label, d.msg);
    return VF_EINVAL;
  }
  if (c == O_FRAMEWORK) r->framework = arg;
  else r->torch = arg;
  return 0;
}

static int parse_option(struct setup_request *r, int c, const char *label, const char *arg) {
  struct vf_setup *s = &r->setup;
  switch (c) {
  case O_BATCH: return cli_parse_u64(r->cmd, label, arg, &s->batch);
  case O_SEQ: return cli_parse_u64(r->cmd, label, arg, &s->seq);
  case O_ACCUMULATION:
    if (cli_parse_u64(r->cmd, label, arg, &s->accumulation)) return VF_EINVAL;
    if (s->accumulation) return 0;
    cli_usage_error(r->cmd, "%s must be at least 1", label);
    return VF_EINVAL;
  case O_LORA_R: return cli_parse_u64(r->cmd, label, arg, &s->lora_r);
  case O_GPUS: return cli_parse_u64(r->cmd, label, arg, &s->gpus);
  case O_TP: return cli_parse_u64(r->cmd, label, arg, &s->tp);
  case O_PP: return cli_parse_u64(r->cmd, label, arg, &s->pp);
  case O_CP: return cli_parse_u64(r->cmd, label, arg, &s->cp);
  case O_DP_REPLICATE: return cli_parse_u64(r->cmd, label, arg, &s->dp_replicate);
  case O_EP: return cli_parse_u64(r->cmd, label, arg, &s->ep);
  case O_WEIGHTS: return parse_precision(r, label, arg, &s->weights, false);
  case O_AMP: return parse_precision(r, label, arg, &s->amp, true);
  case O_OFFLOAD: return parse_offload(r, label, arg, &s->offload);
  case O_FRAMEWORK:
  case O_TORCH: return parse_version(r, c, label, arg);
  case O_GPU: r->gpu = arg; return 0;
  case O_FORMAT: r->format = arg; return 0;
  case O_ALLOC_CONF: r->alloc_conf = arg; return 0;
  case O_LORA_TARGETS:
    if (vf_lora_targets_parse(arg, &s->lora_targets) == 0) return 0;
    cli_usage_error(r->cmd, "%s: '%s' is not a comma list of q,k,v,o,gate,up,down,head or all-linear", label, arg);
    return VF_EINVAL;
  default: return parse_choice(r, c, label, arg);
  }
}

/* The value an option sets, and what else it says: a --framework with a version names the
 * release too. */
static uint64_t keys_set(const struct setup_request *r, int c) {
  for (size_t i = 0; i < N_OPTIONS; i++) {
    if (options[i].code != c) continue;
    if (options[i].key == K_COUNT) return 0;
    uint64_t bits = 1ull << options[i].key;
    return c == O_FRAMEWORK && r->spec.version[0] ? bits | 1ull << K_FRAMEWORK_RELEASE : bits;
  }
  return 0;
}

static const char *flag_of(int c) {
  for (size_t i = 0; i < N_OPTIONS; i++)
    if (options[i].code == c) return options[i].flag;
  return "?";
}

int setup_option(struct setup_request *r, int c, const char *arg) {
  int rc = parse_option(r, c, flag_of(c), arg);
  if (!rc) r->given |= keys_set(r, c);
  return rc;
}

int setup_option_from(struct setup_request *r, int c, const char *arg, const char *where, const char *tool) {
  char label[PATH_MAX + 64];
  snprintf(label, sizeof label, "%s (%s)", where, flag_of(c));
  int rc = parse_option(r, c, label, arg);
  uint64_t keys = rc ? 0 : keys_set(r, c);
  for (int k = 0; k < K_COUNT; k++) {
    if (!(keys & (1ull << k))) continue;
    r->read_from[k] = tool ? NULL : where;
    r->by_tool[k] = tool;
  }
  return rc;
}

int setup_option_code(enum setup_key k) {
  for (size_t i = 0; i < N_OPTIONS; i++)
    if (options[i].key == k) return options[i].code;
  return 0;
}

/* The allocator configuration: --alloc-conf, else what the environment would give PyTorch. */
static int alloc_conf_for(const struct setup_request *r, struct vf_alloc_conf *conf) {
  struct vf_diag d;
  vf_diag_clear(&d);
  int rc = r->alloc_conf ? vf_alloc_conf_parse(r->alloc_conf, conf, &d)
                         : vf_alloc_conf_from_env(getenv("PYTORCH_ALLOC_CONF"),
                                                  getenv("PYTORCH_CUDA_ALLOC_CONF"),
                                                  getenv("PYTORCH_NO_CUDA_MEMORY_CACHING"), conf, &d);
  if (!rc) return 0;
  if (r->alloc_conf && !d.file[0]) snprintf(d.file, sizeof d.file, "--alloc-conf");
  return cli_diag_error(r->cmd, rc, &d);
}

static int gpu_for(const struct setup_request *r, struct vf_gpu_spec *gpu) {
  memset(gpu, 0, sizeof *gpu);
  if (!r->gpu) return 0;
  struct vf_diag d;
  vf_diag_clear(&d);
  int rc = strcmp(r->gpu, "auto") == 0 ? vf_gpu_detect(gpu, &d) : vf_gpu_parse(r->gpu, gpu, &d);
  /* On a detected GPU other processes' memory is not ours to use: the run gets what is free. */
  if (!rc && gpu->detected && gpu->free_bytes < gpu->capacity_bytes) gpu->capacity_bytes = gpu->free_bytes;
  if (!rc) return 0;
  if (!d.file[0]) snprintf(d.file, sizeof d.file, "--gpu");
  return cli_diag_error(r->cmd, rc, &d);
}

int setup_context_load_env(struct setup_request *r, struct setup_context *c) {
  struct vf_diag d;
  vf_diag_clear(&d);
  vf_model_init(&c->model);
  struct vf_profile_info profile;
  int rc = vf_profile_load(r->framework, r->torch, &c->profile, &d);
  if (!rc) {
    vf_profile_describe(c->profile, &profile);
    rc = vf_uncertainty_load(profile.name, &c->uncertainty, &d);
  }
  if (rc) rc = cli_diag_error(r->cmd, rc, &d);
  if (!rc && !(rc = alloc_conf_for(r, &c->conf))) rc = gpu_for(r, &c->gpu);
  if (rc) {
    setup_context_cleanup(c);
    return rc;
  }
  struct vf_setup *s = &r->setup;
  s->gpu_cc_major = (uint32_t)c->gpu.cc_major;
  s->gpu_cc_minor = (uint32_t)c->gpu.cc_minor;
  s->capacity_bytes = c->gpu.capacity_bytes;
  bool distributed = s->gpus > 1 || s->tp > 1 || s->pp > 1 || s->cp > 1;
  if (vf_runtime_context_bytes(s->gpu_cc_major, distributed, &s->context_bytes)) s->context_bytes = 0;
  return EXIT_OK;
}

int setup_context_load(struct setup_request *r, const char *model, struct setup_context *c) {
  int rc = setup_context_load_env(r, c);
  if (rc) return rc;
  struct vf_diag d;
  vf_diag_clear(&d);
  if ((rc = vf_model_load(&c->model, model, &d))) {
    setup_context_cleanup(c);
    /* A model a training config names: the error names its place. */
    if (r->read_from[K_MODEL] && !d.file[0]) snprintf(d.file, sizeof d.file, "%s", r->read_from[K_MODEL]);
    return cli_diag_error(r->cmd, rc, &d);
  }
  /* The default length stops at a learned position table's end, which a run cannot pass. */
  const struct vf_arch *a = &c->model.arch;
  if (!setup_from_user(r, K_SEQ) && a->learned_positions && r->setup.seq > a->max_positions)
    r->setup.seq = a->max_positions;
  return EXIT_OK;
}

void setup_context_cleanup(struct setup_context *c) {
  vf_model_cleanup(&c->model);
  vf_profile_free(c->profile);
  c->profile = NULL;
}

/* ---- the setup as it was used, and where each value came from ---- */

void setup_targets_text(uint32_t bits, char *buf, size_t size) {
  size_t n = 0;
  buf[0] = '\0';
  for (int k = 0; k < VF_KIND_PUBLIC_COUNT && n < size; k++)
    if (bits & (1u << k)) n += (size_t)snprintf(buf + n, size - n, "%s%s", n ? "," : "", vf_kind_name((enum vf_kind)k));
}

const char *setup_alloc_conf_text(const struct setup_request *r) {
  const char *v = r->alloc_conf;
  if (!v) v = getenv("PYTORCH_ALLOC_CONF");
  if (!v) v = getenv("PYTORCH_CUDA_ALLOC_CONF");
  return v ? v : "";
}

static const char *const key_names[K_COUNT] = {
    "model", "framework", "framework_release", "torch", "task", "weights", "amp", "method", "lora_r",
    "lora_targets", "quant", "batch", "accumulation", "seq", "lengths", "eval", "grad_ckpt", "attention",
    "optimizer", "loss", "optimizer_in_bwd", "compile", "shard", "offload", "gpus", "tp", "pp", "cp", "ep", "dp_replicate", "pp_schedule",
    "sequence_parallel", "alloc_conf"};

enum setup_key setup_key_named(const char *name) {
  int k = 0;
  while (k < K_COUNT && strcmp(key_names[k], name) != 0) k++;
  return (enum setup_key)k;
}

static json_t *enum_json(enum vf_enum_kind kind, int value) { return json_string(vf_enum_name(kind, value)); }

/* One value of the resolved setup s, as "setup" spells it. */
static json_t *value_json(enum setup_key k, const struct vf_setup *s, const struct setup_request *r,
                          const struct setup_context *c, const struct vf_profile_info *p) {
  char text[128];
  switch (k) {
  case K_MODEL: return json_string(c->model.name);
  case K_FRAMEWORK: return json_string(p->name);
  case K_FRAMEWORK_RELEASE: return json_string(p->release);
  case K_TORCH: return json_string(p->torch);
  case K_TASK: return enum_json(VF_ENUM_TASK, s->task);
  case K_WEIGHTS: return enum_json(VF_ENUM_PRECISION, s->weights);
  case K_AMP: return enum_json(VF_ENUM_PRECISION, s->amp);
  case K_METHOD: return enum_json(VF_ENUM_METHOD, s->method);
  case K_LORA_R: return json_integer((json_int_t)s->lora_r);
  case K_LORA_TARGETS: setup_targets_text(s->lora_targets, text, sizeof text); return json_string(text);
  case K_QUANT: return enum_json(VF_ENUM_QUANT, vf_setup_quant(s));
  case K_BATCH: return json_integer((json_int_t)s->batch);
  case K_ACCUMULATION: return json_integer((json_int_t)s->accumulation);
  case K_SEQ: return json_integer((json_int_t)s->seq);
  case K_LENGTHS:
    /* A distribution of sample lengths, as it was given. */
    return r->lengths_spec && s->lengths == VF_LENGTHS_VARIED ? json_string(r->lengths_spec)
                                                              : enum_json(VF_ENUM_LENGTHS, s->lengths);
  case K_EVAL: return json_boolean(s->eval == VF_EVAL_YES);
  case K_GRAD_CKPT: return enum_json(VF_ENUM_CKPT, s->grad_ckpt);
  case K_ATTENTION: return enum_json(VF_ENUM_ATTENTION, s->attention);
  case K_OPTIMIZER: return enum_json(VF_ENUM_OPTIMIZER, s->optimizer);
  case K_LOSS: return enum_json(VF_ENUM_LOSS, s->loss);
  case K_OPTIMIZER_IN_BWD: return enum_json(VF_ENUM_IN_BWD, s->optimizer_in_bwd);
  case K_COMPILE: return enum_json(VF_ENUM_COMPILE, s->compile);
  case K_SHARD: return enum_json(VF_ENUM_SHARD, s->shard);
  case K_OFFLOAD: vf_offload_format(s->offload, text, sizeof text); return json_string(text);
  case K_GPUS: return json_integer((json_int_t)s->gpus);
  case K_TP: return json_integer((json_int_t)s->tp);
  case K_PP: return json_integer((json_int_t)s->pp);
  case K_CP: return json_integer((json_int_t)s->cp);
  case K_EP: return json_integer((json_int_t)s->ep);
  case K_DP_REPLICATE: return json_integer((json_int_t)s->dp_replicate);
  case K_PP_SCHEDULE: return enum_json(VF_ENUM_PP_SCHEDULE, s->pp_schedule);
  case K_SEQUENCE_PARALLEL: return enum_json(VF_ENUM_SP, s->sequence_parallel);
  case K_ALLOC_CONF: return json_string(setup_alloc_conf_text(r));
  default: return json_null();
  }
}

bool setup_from_user(const struct setup_request *r, enum setup_key k) {
  if (k == K_MODEL) return true;
  if (k == K_ALLOC_CONF && setup_alloc_conf_text(r)[0]) return true;
  return (r->given & (1ull << k)) || r->read_from[k];
}

/* The setup's values, all of them or the assumed ones only. */
static json_t *values_json(const struct setup_request *r, const struct setup_context *c, bool assumed_only) {
  struct vf_setup s = r->setup;
  vf_setup_resolve(&s, &c->model, c->profile);
  struct vf_profile_info p;
  vf_profile_describe(c->profile, &p);
  json_t *o = json_object();
  for (int k = 0; k < K_COUNT; k++)
    if (!assumed_only || !setup_from_user(r, (enum setup_key)k))
      json_object_set_new(o, key_names[k], value_json((enum setup_key)k, &s, r, c, &p));
  return o;
}

json_t *setup_values_json(const struct setup_request *r, const struct setup_context *c) {
  return values_json(r, c, false);
}

json_t *setup_assumed_json(const struct setup_request *r, const struct setup_context *c) {
  return values_json(r, c, true);
}

json_t *setup_read_from_json(const struct setup_request *r) {
  json_t *o = json_object();
  for (int k = 0; k < K_COUNT; k++)
    if (r->read_from[k]) json_object_set_new(o, key_names[k], json_string(r->read_from[k]));
  return o;
}

/* The parallel layout's values, which say nothing on one GPU (the line leaves them out, and the
 * adapters' shape under full fine-tuning; --json has them all). */
static bool layout_key(const char *key) {
  static const char *const keys[] = {"tp", "pp", "cp", "ep", "dp_replicate", "pp_schedule", "sequence_parallel"};
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
    if (strcmp(key, keys[i]) == 0) return true;
  return false;
}

void setup_assumed_print(const struct setup_request *r, const struct setup_context *c) {
  json_t *assumed = setup_assumed_json(r, c);
  struct vf_profile_info p;
  vf_profile_describe(c->profile, &p);
  const char *key;
  json_t *v;
  bool first = true;
  json_object_foreach(assumed, key, v) {
    if (r->setup.gpus == 1 && layout_key(key)) continue;
    if (r->setup.method == VF_METHOD_FULL && strncmp(key, "lora_", 5) == 0) continue; /* no adapters to shape */
    if (strcmp(key, "optimizer_in_bwd") == 0) continue; /* no: the step after the backward, every loop's own */
    printf("%s %s ", first ? "assumed (no option or config gave them):" : ",", key);
    if (json_is_string(v)) printf("%s", json_string_value(v)[0] ? json_string_value(v) : "none");
    else if (json_is_boolean(v)) printf("%s", json_is_true(v) ? "yes" : "no");
    else printf("%" JSON_INTEGER_FORMAT, json_integer_value(v));
    enum setup_key k = setup_key_named(key);
    if (k < K_COUNT && r->by_tool[k]) printf(" (%s's default)", r->by_tool[k]);
    else if (strcmp(key, "weights") == 0 && p.checkpoint_dtype_weights) printf(" (the checkpoint's dtype)");
    if (strcmp(key, "seq") == 0 && c->model.arch.learned_positions && r->setup.seq == c->model.arch.max_positions)
      printf(" (the model's positions)");
    first = false;
  }
  if (!first) printf("\n");
  json_decref(assumed);
}

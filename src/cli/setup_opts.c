/* The setup options shared by estimate and plan (see setup_opts.h). */
#include <stdlib.h>
#include <string.h>

#include "cli/setup_opts.h"

void setup_request_init(struct setup_request *r, const char *cmd) {
  memset(r, 0, sizeof *r);
  r->cmd = cmd;
  r->framework = "hf";
  vf_framework_spec_parse(r->framework, &r->spec, NULL);
  vf_setup_default(&r->setup);
}

static int parse_enum(const struct setup_request *r, const char *flag, enum vf_enum_kind kind,
                      const char *text, int *out) {
  if (vf_enum_parse(kind, text, out) == 0) return 0;
  char choices[256];
  vf_enum_choices(kind, choices, sizeof choices);
  cli_usage_error(r->cmd, "%s: '%s' is not one of %s", flag, text, choices);
  return VF_EINVAL;
}

static int parse_offload(const struct setup_request *r, const char *text, uint32_t *out) {
  static const struct { const char *name; uint32_t bit; } names[] = {
      {"none", 0}, {"optimizer", VF_OFFLOAD_OPTIMIZER}, {"params", VF_OFFLOAD_PARAMS},
      {"activations", VF_OFFLOAD_ACTIVATIONS}};
  *out = 0;
  for (const char *p = text; *p;) {
    size_t n = strcspn(p, ","), i;
    for (i = 0; i < 4; i++)
      if (strlen(names[i].name) == n && strncmp(p, names[i].name, n) == 0) break;
    if (i == 4) {
      cli_usage_error(r->cmd, "--offload: '%s' is not a list of none, optimizer, params, activations", text);
      return VF_EINVAL;
    }
    *out |= names[i].bit;
    p += n + (p[n] == ',');
  }
  return 0;
}

static int parse_precision(const struct setup_request *r, const char *flag, const char *text,
                           enum vf_precision *out, bool allow_none) {
  /* Weights take fp32, bf16 or fp16; autocast none, bf16 or fp16. */
  const char *choices = allow_none ? "none, bf16, fp16" : "fp32, bf16, fp16";
  int v;
  if (vf_enum_parse(VF_ENUM_PRECISION, text, &v) || (v == VF_PREC_NONE && !allow_none) ||
      (allow_none && v == VF_PREC_FP32)) {
    cli_usage_error(r->cmd, "%s: '%s' is not one of %s", flag, text, choices);
    return VF_EINVAL;
  }
  *out = (enum vf_precision)v;
  return 0;
}

static int parse_choice(struct setup_request *r, int c, const char *arg) {
  struct vf_setup *s = &r->setup;
  int v = 0, rc;
  switch (c) {
  case O_TASK:
    rc = parse_enum(r, "--task", VF_ENUM_TASK, arg, &v);
    s->task = (enum vf_task)v;
    return rc;
  case O_OPTIMIZER:
    rc = parse_enum(r, "--optimizer", VF_ENUM_OPTIMIZER, arg, &v);
    s->optimizer = (enum vf_optimizer)v;
    return rc;
  case O_METHOD:
    rc = parse_enum(r, "--method", VF_ENUM_METHOD, arg, &v);
    s->method = (enum vf_method)v;
    return rc;
  case O_QUANT:
    rc = parse_enum(r, "--quant", VF_ENUM_QUANT, arg, &v);
    s->quant = (enum vf_quant)v;
    return rc;
  case O_GRAD_CKPT:
    rc = parse_enum(r, "--grad-ckpt", VF_ENUM_CKPT, arg, &v);
    s->grad_ckpt = (enum vf_ckpt)v;
    return rc;
  case O_ATTENTION:
    rc = parse_enum(r, "--attention", VF_ENUM_ATTENTION, arg, &v);
    s->attention = (enum vf_attention)v;
    return rc;
  case O_SHARD:
    rc = parse_enum(r, "--shard", VF_ENUM_SHARD, arg, &v);
    s->shard = (enum vf_shard)v;
    return rc;
  case O_LENGTHS:
    rc = parse_enum(r, "--lengths", VF_ENUM_LENGTHS, arg, &v);
    s->lengths = (enum vf_lengths)v;
    return rc;
  case O_EVAL:
    rc = parse_enum(r, "--eval", VF_ENUM_EVAL, arg, &v);
    s->eval = (enum vf_eval)v;
    return rc;
  case O_PP_SCHEDULE:
    /* "none" is a profile's word for a framework without a pipeline, no one's choice. */
    if (vf_enum_parse(VF_ENUM_PP_SCHEDULE, arg, &v) || v == VF_PP_NONE) {
      cli_usage_error(r->cmd, "--pp-schedule: '%s' is not one of gpipe, 1f1b, interleaved-1f1b", arg);
      return VF_EINVAL;
    }
    s->pp_schedule = (enum vf_pp_schedule)v;
    return 0;
  case O_SEQUENCE_PARALLEL:
    rc = parse_enum(r, "--sequence-parallel", VF_ENUM_SP, arg, &v);
    s->sequence_parallel = (enum vf_sp)v;
    return rc;
  default: /* every setup option is handled here or in setup_option */
    return VF_EINTERNAL;
  }
}

/* --framework NAME[@VERSION] and --torch VERSION: checked here, resolved when the profile loads. */
static int parse_version(struct setup_request *r, int c, const char *arg) {
  struct vf_diag d;
  vf_diag_clear(&d);
  if (c == O_FRAMEWORK ? vf_framework_spec_parse(arg, &r->spec, &d) : vf_torch_release_check(arg, &d)) {
    cli_usage_error(r->cmd, "%s: %s", c == O_FRAMEWORK ? "--framework" : "--torch", d.msg);
    return VF_EINVAL;
  }
  if (c == O_FRAMEWORK) r->framework = arg;
  else r->torch = arg;
  return 0;
}

static int parse_count(struct setup_request *r, const char *flag, const char *arg, uint64_t *out) {
  return cli_parse_u64(r->cmd, flag, arg, out);
}

int setup_option(struct setup_request *r, int c, const char *arg) {
  struct vf_setup *s = &r->setup;
  switch (c) {
  case O_BATCH: return parse_count(r, "--batch", arg, &s->batch);
  case O_SEQ: return parse_count(r, "--seq", arg, &s->seq);
  case O_ACCUMULATION:
    if (parse_count(r, "--accumulation", arg, &s->accumulation)) return VF_EINVAL;
    if (s->accumulation) return 0;
    cli_usage_error(r->cmd, "--accumulation must be at least 1");
    return VF_EINVAL;
  case O_LORA_R: return parse_count(r, "--lora-r", arg, &s->lora_r);
  case O_GPUS: return parse_count(r, "--gpus", arg, &s->gpus);
  case O_TP: return parse_count(r, "--tp", arg, &s->tp);
  case O_PP: return parse_count(r, "--pp", arg, &s->pp);
  case O_CP: return parse_count(r, "--cp", arg, &s->cp);
  case O_DP_REPLICATE: return parse_count(r, "--dp-replicate", arg, &s->dp_replicate);
  case O_EP: return parse_count(r, "--ep", arg, &s->ep);
  case O_WEIGHTS: return parse_precision(r, "--weights", arg, &s->weights, false);
  case O_AMP: return parse_precision(r, "--amp", arg, &s->amp, true);
  case O_OFFLOAD: return parse_offload(r, arg, &s->offload);
  case O_FRAMEWORK:
  case O_TORCH: return parse_version(r, c, arg);
  case O_GPU: r->gpu = arg; return 0;
  case O_ALLOC_CONF: r->alloc_conf = arg; return 0;
  case O_LORA_TARGETS:
    if (vf_lora_targets_parse(arg, &s->lora_targets) == 0) return 0;
    cli_usage_error(r->cmd, "--lora-targets: '%s' is not a comma list of q,k,v,o,gate,up,down,head or all-linear", arg);
    return VF_EINVAL;
  default: return parse_choice(r, c, arg);
  }
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
    return cli_diag_error(r->cmd, rc, &d);
  }
  return EXIT_OK;
}

void setup_context_cleanup(struct setup_context *c) {
  vf_model_cleanup(&c->model);
  vf_profile_free(c->profile);
  c->profile = NULL;
}

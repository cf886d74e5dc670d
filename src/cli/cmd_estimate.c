/* vramfit estimate MODEL [options]: peak GPU memory of one training step. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static const char usage[] =
    "usage: vramfit estimate MODEL [options]\n\n"
    "Peak GPU memory of one training step (the second: optimizer states exist), as\n"
    "torch.cuda.max_memory_allocated(), max_memory_reserved() and nvidia-smi see it,\n"
    "with a breakdown at the peak.\n\n"
    "  --batch N            micro batch per GPU (1)\n"
    "  --seq N              tokens per sample, the longest in the batch (2048)\n"
    "  --accumulation N     micro batches per optimizer step; gradients persist between them\n"
    "                       (the framework's stock recipes: litgpt accumulates, the others 1)\n"
    "  --task T             causal-lm | seq-classification | masked-lm\n"
    "  --framework F        hf | litgpt | torchtune | lightning | deepspeed | megatron | torchtitan (hf)\n"
    "  --weights D          dtype the weights are stored in: fp32 | bf16 | fp16 (fp32)\n"
    "  --amp D              autocast compute dtype: none | bf16 | fp16 (none)\n"
    "  --optimizer O        adamw | adamw-8bit | paged-adamw-8bit | adafactor | sgd |\n"
    "                       sgd-momentum | lion | none (adamw)\n"
    "  --method M           full | lora | qlora | dora | adapter | adapter-v2 (full)\n"
    "  --lora-r N           LoRA rank (8)\n"
    "  --lora-targets L     comma list of q,k,v,o,gate,up,down,head, or all-linear (q,v)\n"
    "  --quant Q            none | nf4 | nf4-dq | int8 (qlora implies nf4-dq)\n"
    "  --grad-ckpt G        none | full | selective (none)\n"
    "  --attention A        eager | sdpa | flash (the framework's default)\n"
    "  --gpus N             data-parallel GPUs (1)\n"
    "  --shard S            none | zero1 | zero2 | zero3 | fsdp (none)\n"
    "  --offload O          none | optimizer | params | activations (comma list)\n"
    "  --tp N, --pp N, --cp N   tensor / pipeline / context parallel sizes (1)\n"
    "  --gpu G              catalogue GPU (a100-40gb, rtx-4090, ...), a size (24GiB, 80GB)\n"
    "  --alloc-conf S       PYTORCH_CUDA_ALLOC_CONF to model (default: the environment's)\n"
    "  --json               machine-readable output\n\n"
    "Exit status: 0, or 1 when --gpu is given and the peak does not fit.\n";

enum {
  O_BATCH = 256, O_SEQ, O_ACCUMULATION, O_TASK, O_FRAMEWORK, O_WEIGHTS, O_AMP, O_OPTIMIZER, O_METHOD, O_LORA_R,
  O_LORA_TARGETS, O_QUANT, O_GRAD_CKPT, O_ATTENTION, O_GPUS, O_SHARD, O_OFFLOAD, O_TP, O_PP,
  O_CP, O_GPU, O_ALLOC_CONF, O_JSON, O_HELP
};

static const struct option opts[] = {
    {"batch", required_argument, NULL, O_BATCH},       {"seq", required_argument, NULL, O_SEQ},
    {"accumulation", required_argument, NULL, O_ACCUMULATION},
    {"task", required_argument, NULL, O_TASK},         {"framework", required_argument, NULL, O_FRAMEWORK},
    {"weights", required_argument, NULL, O_WEIGHTS},   {"amp", required_argument, NULL, O_AMP},
    {"optimizer", required_argument, NULL, O_OPTIMIZER}, {"method", required_argument, NULL, O_METHOD},
    {"lora-r", required_argument, NULL, O_LORA_R},     {"lora-targets", required_argument, NULL, O_LORA_TARGETS},
    {"quant", required_argument, NULL, O_QUANT},       {"grad-ckpt", required_argument, NULL, O_GRAD_CKPT},
    {"attention", required_argument, NULL, O_ATTENTION}, {"gpus", required_argument, NULL, O_GPUS},
    {"shard", required_argument, NULL, O_SHARD},       {"offload", required_argument, NULL, O_OFFLOAD},
    {"tp", required_argument, NULL, O_TP},             {"pp", required_argument, NULL, O_PP},
    {"cp", required_argument, NULL, O_CP},             {"gpu", required_argument, NULL, O_GPU},
    {"alloc-conf", required_argument, NULL, O_ALLOC_CONF}, {"json", no_argument, NULL, O_JSON},
    {"help", no_argument, NULL, O_HELP},               {NULL, 0, NULL, 0}};

struct request {
  struct vf_setup setup;
  const char *framework, *gpu, *alloc_conf;
  bool json;
};

static int parse_enum(const char *flag, enum vf_enum_kind kind, const char *text, int *out,
                      const char *choices) {
  if (vf_enum_parse(kind, text, out) == 0 && !(kind == VF_ENUM_QUANT && *out == VF_QUANT_DEFAULT) &&
      !(kind == VF_ENUM_ATTENTION && *out == VF_ATTN_DEFAULT) && !(kind == VF_ENUM_TASK && *out == VF_TASK_AUTO))
    return 0;
  cli_usage_error("estimate", "%s: '%s' is not one of %s", flag, text, choices);
  return VF_EINVAL;
}

static int parse_offload(const char *text, uint32_t *out) {
  static const struct { const char *name; uint32_t bit; } names[] = {
      {"none", 0}, {"optimizer", VF_OFFLOAD_OPTIMIZER}, {"params", VF_OFFLOAD_PARAMS},
      {"activations", VF_OFFLOAD_ACTIVATIONS}};
  *out = 0;
  for (const char *p = text; *p;) {
    size_t n = strcspn(p, ","), i;
    for (i = 0; i < 4; i++)
      if (strlen(names[i].name) == n && strncmp(p, names[i].name, n) == 0) break;
    if (i == 4) {
      cli_usage_error("estimate", "--offload: '%s' is not a list of none, optimizer, params, activations", text);
      return VF_EINVAL;
    }
    *out |= names[i].bit;
    p += n + (p[n] == ',');
  }
  return 0;
}

static int parse_precision(const char *flag, const char *text, enum vf_precision *out, bool allow_none) {
  int v;
  if (parse_enum(flag, VF_ENUM_PRECISION, text, &v, allow_none ? "none, bf16, fp16" : "fp32, bf16, fp16"))
    return VF_EINVAL;
  if ((v == VF_PREC_NONE && !allow_none) || (allow_none && v == VF_PREC_FP32)) {
    cli_usage_error("estimate", "%s: '%s' is not one of %s", flag, text,
                    allow_none ? "none, bf16, fp16" : "fp32, bf16, fp16");
    return VF_EINVAL;
  }
  *out = (enum vf_precision)v;
  return 0;
}

static int parse_option(int c, const char *arg, struct request *r) {
  struct vf_setup *s = &r->setup;
  int v = 0, rc = 0;
  switch (c) {
  case O_BATCH: return cli_parse_u64("estimate", "--batch", arg, &s->batch);
  case O_SEQ: return cli_parse_u64("estimate", "--seq", arg, &s->seq);
  case O_ACCUMULATION:
    if (cli_parse_u64("estimate", "--accumulation", arg, &s->accumulation)) return VF_EINVAL;
    if (s->accumulation) return 0;
    cli_usage_error("estimate", "--accumulation must be at least 1");
    return VF_EINVAL;
  case O_LORA_R: return cli_parse_u64("estimate", "--lora-r", arg, &s->lora_r);
  case O_GPUS: return cli_parse_u64("estimate", "--gpus", arg, &s->gpus);
  case O_TP: return cli_parse_u64("estimate", "--tp", arg, &s->tp);
  case O_PP: return cli_parse_u64("estimate", "--pp", arg, &s->pp);
  case O_CP: return cli_parse_u64("estimate", "--cp", arg, &s->cp);
  case O_WEIGHTS: return parse_precision("--weights", arg, &s->weights, false);
  case O_AMP: return parse_precision("--amp", arg, &s->amp, true);
  case O_OFFLOAD: return parse_offload(arg, &s->offload);
  case O_FRAMEWORK: r->framework = arg; return 0;
  case O_GPU: r->gpu = arg; return 0;
  case O_ALLOC_CONF: r->alloc_conf = arg; return 0;
  case O_JSON: r->json = true; return 0;
  case O_LORA_TARGETS:
    if (vf_lora_targets_parse(arg, &s->lora_targets) == 0) return 0;
    cli_usage_error("estimate", "--lora-targets: '%s' is not a comma list of q,k,v,o,gate,up,down,head or all-linear", arg);
    return VF_EINVAL;
  case O_TASK:
    rc = parse_enum("--task", VF_ENUM_TASK, arg, &v, "causal-lm, seq-classification, masked-lm");
    s->task = (enum vf_task)v;
    return rc;
  case O_OPTIMIZER:
    rc = parse_enum("--optimizer", VF_ENUM_OPTIMIZER, arg, &v,
                    "adamw, adamw-8bit, paged-adamw-8bit, adafactor, sgd, sgd-momentum, lion, none");
    s->optimizer = (enum vf_optimizer)v;
    return rc;
  case O_METHOD:
    rc = parse_enum("--method", VF_ENUM_METHOD, arg, &v, "full, lora, qlora, dora, adapter, adapter-v2");
    s->method = (enum vf_method)v;
    return rc;
  case O_QUANT:
    rc = parse_enum("--quant", VF_ENUM_QUANT, arg, &v, "none, nf4, nf4-dq, int8");
    s->quant = (enum vf_quant)v;
    return rc;
  case O_GRAD_CKPT:
    rc = parse_enum("--grad-ckpt", VF_ENUM_CKPT, arg, &v, "none, full, selective");
    s->grad_ckpt = (enum vf_ckpt)v;
    return rc;
  case O_ATTENTION:
    rc = parse_enum("--attention", VF_ENUM_ATTENTION, arg, &v, "eager, sdpa, flash");
    s->attention = (enum vf_attention)v;
    return rc;
  case O_SHARD:
    rc = parse_enum("--shard", VF_ENUM_SHARD, arg, &v, "none, zero1, zero2, zero3, fsdp");
    s->shard = (enum vf_shard)v;
    return rc;
  default: /* every option of opts is handled above */
    return VF_EINTERNAL;
  }
}

/* The allocator configuration: --alloc-conf, else what the environment would give PyTorch. */
static int alloc_conf_for(const struct request *r, struct vf_alloc_conf *conf) {
  struct vf_diag d;
  vf_diag_clear(&d);
  int rc = r->alloc_conf ? vf_alloc_conf_parse(r->alloc_conf, conf, &d)
                         : vf_alloc_conf_from_env(getenv("PYTORCH_ALLOC_CONF"),
                                                  getenv("PYTORCH_CUDA_ALLOC_CONF"),
                                                  getenv("PYTORCH_NO_CUDA_MEMORY_CACHING"), conf, &d);
  if (!rc) return 0;
  if (r->alloc_conf && !d.file[0]) snprintf(d.file, sizeof d.file, "--alloc-conf");
  return cli_diag_error("estimate", rc, &d);
}

static int gpu_for(const struct request *r, struct vf_gpu_spec *gpu) {
  memset(gpu, 0, sizeof *gpu);
  if (!r->gpu) return 0;
  struct vf_diag d;
  vf_diag_clear(&d);
  int rc = strcmp(r->gpu, "auto") == 0 ? vf_gpu_detect(gpu, &d) : vf_gpu_parse(r->gpu, gpu, &d);
  /* On a detected GPU other processes' memory is not ours to use: the run gets what is free. */
  if (!rc && gpu->detected && gpu->free_bytes < gpu->capacity_bytes) gpu->capacity_bytes = gpu->free_bytes;
  if (!rc) return 0;
  if (!d.file[0]) snprintf(d.file, sizeof d.file, "--gpu");
  return cli_diag_error("estimate", rc, &d);
}

static json_t *estimate_json(const struct vf_model *m, const struct vf_estimate *e, uint64_t capacity,
                             const char *framework) {
  json_t *breakdown = json_object();
  static const enum vf_category order[] = {VF_CAT_WEIGHTS, VF_CAT_GRADIENTS, VF_CAT_OPTIMIZER,
                                           VF_CAT_ACTIVATIONS, VF_CAT_TEMPORARIES};
  for (size_t i = 0; i < sizeof order / sizeof *order; i++)
    json_object_set_new(breakdown, vf_category_name(order[i]), json_integer((json_int_t)e->by_category[order[i]]));
  json_object_set_new(breakdown, "allocator_slack", json_integer((json_int_t)e->allocator_slack));
  json_object_set_new(breakdown, "runtime", json_integer((json_int_t)(e->by_category[VF_CAT_RUNTIME] + e->context)));
  json_t *timeline = json_array();
  for (int p = VF_PHASE_FORWARD; p < VF_PHASE_COUNT; p++)
    json_array_append_new(timeline, json_pack("{s:s, s:I, s:I}", "phase", vf_phase_name((enum vf_phase)p),
                                              "allocated_bytes", (json_int_t)e->phase_allocated[p],
                                              "reserved_bytes", (json_int_t)e->phase_reserved[p]));
  json_t *o = json_object();
  json_object_set_new(o, "model", json_pack("{s:s, s:I, s:I}", "name", m->name, "params", (json_int_t)e->params,
                                            "trainable_params", (json_int_t)e->trainable_params));
  json_object_set_new(o, "peak", json_pack("{s:I, s:I, s:I, s:s}", "allocated_bytes", (json_int_t)e->allocated_peak,
                                           "reserved_bytes", (json_int_t)e->reserved_peak,
                                           "device_bytes", (json_int_t)e->device_peak,
                                           "phase", vf_phase_name(e->peak_phase)));
  json_object_set_new(o, "breakdown", breakdown);
  json_object_set_new(o, "timeline", timeline);
  json_object_set_new(o, "assumed", json_pack("{s:s, s:s, s:I}", "framework", framework, "attention",
                                              vf_enum_name(VF_ENUM_ATTENTION, e->attention),
                                              "accumulation", (json_int_t)e->accumulation));
  json_object_set_new(o, "capacity_bytes", capacity ? json_integer((json_int_t)capacity) : json_null());
  json_object_set_new(o, "fits", capacity ? json_boolean(e->device_peak <= capacity) : json_null());
  return o;
}

static void row(const char *label, uint64_t bytes, uint64_t capacity) {
  char human[32];
  cli_format_bytes(bytes, human, sizeof human);
  if (capacity)
    printf("  %-22s %12s  %5.1f%%\n", label, human, 100.0 * (double)bytes / (double)capacity);
  else
    printf("  %-22s %12s\n", label, human);
}

static void estimate_text(const struct vf_model *m, const struct vf_estimate *e, const struct vf_gpu_spec *gpu,
                          const char *framework) {
  uint64_t cap = gpu->capacity_bytes;
  char total[32], trainable[32];
  cli_group_digits(e->params, total, sizeof total);
  cli_group_digits(e->trainable_params, trainable, sizeof trainable);
  printf("%s: %s parameters, %s trainable\n", m->name, total, trainable);
  printf("%s: %s attention, %llu micro batch%s per optimizer step\n\n", framework,
         vf_enum_name(VF_ENUM_ATTENTION, e->attention), (unsigned long long)e->accumulation,
         e->accumulation == 1 ? "" : "es");
  printf("  at the peak (%s)%s\n", vf_phase_name(e->peak_phase), cap ? "        bytes   of GPU" : "");
  for (int c = 0; c < VF_CAT_RUNTIME; c++) row(vf_category_name((enum vf_category)c), e->by_category[c], cap);
  row("allocator slack", e->allocator_slack, cap);
  row("CUDA, cuBLAS, NCCL", e->by_category[VF_CAT_RUNTIME] + e->context, cap);
  printf("\n");
  row("max_memory_allocated", e->allocated_peak, cap);
  row("max_memory_reserved", e->reserved_peak, cap);
  row("nvidia-smi (device)", e->device_peak, cap);
  if (!cap) return;
  char capacity[32], room[32];
  cli_format_bytes(cap, capacity, sizeof capacity);
  bool fits = e->device_peak <= cap;
  cli_format_bytes(fits ? cap - e->device_peak : e->device_peak - cap, room, sizeof room);
  bool color = cli_use_color(stdout);
  printf("\n%s%s%s on %s (%s): %s %s\n", color ? (fits ? "\033[32m" : "\033[31m") : "",
         fits ? "fits" : "does not fit", color ? "\033[0m" : "",
         gpu->name[0] ? gpu->name : "the GPU", capacity, room, fits ? "to spare" : "short");
}

int cmd_estimate(int argc, char **argv) {
  struct request r = {.framework = "hf"};
  vf_setup_default(&r.setup);
  optind = 1;
  opterr = 0; /* getopt's own message would make the error two lines */
  for (int c; (c = getopt_long(argc, argv, ":h", opts, NULL)) != -1;) {
    if (c == O_HELP || c == 'h') return fputs(usage, stdout), EXIT_OK;
    if (c == ':' || c == '?') return cli_option_error("estimate", c, argv);
    if (parse_option(c, optarg, &r)) return EXIT_BAD_INPUT;
  }
  if (optind != argc - 1)
    return cli_usage_error("estimate", optind == argc ? "MODEL is missing; see 'vramfit estimate --help'"
                                                      : "expects exactly one MODEL");
  struct vf_profile profile;
  struct vf_alloc_conf conf;
  struct vf_gpu_spec gpu;
  struct vf_diag d;
  vf_diag_clear(&d);
  int rc = vf_profile_load(r.framework, &profile, &d);
  if (rc) return cli_diag_error("estimate", rc, &d);
  if ((rc = alloc_conf_for(&r, &conf)) || (rc = gpu_for(&r, &gpu))) return rc;
  r.setup.gpu_cc_major = (uint32_t)gpu.cc_major;
  r.setup.gpu_cc_minor = (uint32_t)gpu.cc_minor;
  r.setup.capacity_bytes = gpu.capacity_bytes;
  bool distributed = r.setup.gpus > 1 || r.setup.tp > 1 || r.setup.pp > 1 || r.setup.cp > 1;
  if (vf_runtime_context_bytes(r.setup.gpu_cc_major, distributed, &r.setup.context_bytes))
    r.setup.context_bytes = 0;

  struct vf_model m;
  vf_model_init(&m);
  if ((rc = vf_model_load(&m, argv[optind], &d))) {
    vf_model_cleanup(&m);
    return cli_diag_error("estimate", rc, &d);
  }
  struct vf_estimate e;
  rc = vf_estimate(&m, &r.setup, &profile, &conf, &e, &d);
  if (rc) {
    vf_model_cleanup(&m);
    return cli_diag_error("estimate", rc, &d);
  }
  int code = EXIT_OK;
  if (r.json) code = cli_print_json(estimate_json(&m, &e, gpu.capacity_bytes, r.framework));
  else estimate_text(&m, &e, &gpu, r.framework);
  if (code == EXIT_OK && gpu.capacity_bytes && e.device_peak > gpu.capacity_bytes) code = EXIT_NO;
  vf_model_cleanup(&m);
  return code;
}

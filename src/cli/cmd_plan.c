/* vramfit plan MODEL [estimate options] --gpu G [options]: the fastest setting that fits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/history_cli.h"
#include "cli/setup_config.h"
#include "cli/workload_cli.h"

static const char usage[] =
    "usage: vramfit plan MODEL [estimate options] --gpu G [options]\n"
    "       vramfit plan CONFIG [more configs] [estimate options] --gpu G [--write] [options]\n"
    "       vramfit plan --workload FILE --gpu G [--gpus N] [--safety F] [--target-effective-batch N]\n"
    "                    [--keep KNOBS] [--json]\n\n"
    "The fastest training setting that fits the GPU, within the changes allowed: micro batch\n"
    "and accumulation (keeping the effective batch), gradient checkpointing, optimizer,\n"
    "autocast precision, ZeRO sharding and CPU offload; method (LoRA, QLoRA) and, as a last\n"
    "resort, seq where --keep lets them change. Three tiers: safe (the safety fraction less\n"
    "10 points of the GPU), balanced (the safety fraction; recommended), aggressive (97%).\n"
    "Safe and balanced hold the high end of the peak's range to their share, as 'estimate'\n"
    "judges a fit (the range: how far the estimator has missed on measured runs of similar\n"
    "setups); aggressive holds the estimate itself to it, betting that it is right.\n"
    "Speed is a model (tokens/s from FLOPs per token, the GPU's rate, an assumed utilisation,\n"
    "the traffic between GPUs over their links and the pipeline's bubble): it ranks settings,\n"
    "it does not time them.\n\n"
    "  --gpu G                      catalogue GPU (a100-40gb, rtx-4090, ...), a size (24GiB), or auto\n"
    "  --safety F                   share of GPU memory a plan may use (0.90)\n"
    "  --target-effective-batch N   batch x accumulation x data-parallel GPUs to keep (as given)\n"
    "  --keep LIST                  knobs that must not change, on top of capacity (= method,\n"
    "                               lora-r, quant and the model): seq, precision, optimizer,\n"
    "                               method, lora-r, quant, grad-ckpt, shard, offload, alloc-conf,\n"
    "                               loss, optimizer-in-bwd; none lifts capacity\n"
    "  --json                       machine-readable output (`vramfit apply --plan` reads it)\n"
    "  --write                      with training configs as MODEL: write the recommended\n"
    "                               setting into the keys it was read from, as 'vramfit apply\n"
    "                               CONFIG --plan' does (backups, the diff); a key the\n"
    "                               configs leave to a default is added where it has one home\n"
    "  --format F                   the training config's tool, where its keys do not tell\n"
    "  --calibrate                  scale every estimate's batch-dependent part by what a run\n"
    "                               of the given setup measured here ('vramfit history')\n"
    "  --gpus-per-node M            search the layout too: --gpus is the world size in nodes of M\n"
    "                               GPUs; tp (dividing the heads, at most M), pp, cp, ep, the\n"
    "                               schedule\n"
    "  --network-gbps B             GB/s per GPU between nodes, one direction (50)\n"
    "  --workload FILE              plan every stage of a workload.yaml instead of MODEL: the\n"
    "                               shared micro batch and accumulation and each stage's knobs,\n"
    "                               judged as a model's plan is; with --gpus N data parallel,\n"
    "                               --keep names the workload's knobs to hold\n\n"
    "Every option of 'vramfit estimate' describes the given setting (--batch, --seq,\n"
    "--lengths, --accumulation, --weights, --amp, --optimizer, --method, --grad-ckpt,\n"
    "--gpus, ...).\n\n"
    "The plan is kept for 'vramfit doctor' (which checks it against the memory free now), and\n"
    "when the given setup was measured on this machine, the output says how far its estimate\n"
    "was from it.\n\n"
    "Exit status: 0, or 1 when nothing fits within the allowed changes (the smallest peak\n"
    "found is printed).\n";

enum { O_SAFETY = O_SETUP_END, O_TARGET, O_KEEP, O_JSON, O_HELP, O_CALIBRATE, O_GPUS_PER_NODE, O_NETWORK, O_WORKLOAD,
       O_WRITE };

static const struct option opts[] = {
    SETUP_OPTIONS,
    CONFIG_OPTIONS,
    {"write", no_argument, NULL, O_WRITE},
    {"safety", required_argument, NULL, O_SAFETY},
    {"target-effective-batch", required_argument, NULL, O_TARGET},
    {"keep", required_argument, NULL, O_KEEP},
    {"json", no_argument, NULL, O_JSON},
    {"help", no_argument, NULL, O_HELP},
    {"calibrate", no_argument, NULL, O_CALIBRATE},
    {"gpus-per-node", required_argument, NULL, O_GPUS_PER_NODE},
    {"network-gbps", required_argument, NULL, O_NETWORK},
    {"workload", required_argument, NULL, O_WORKLOAD},
    {NULL, 0, NULL, 0}};

struct plan_args {
  struct setup_request setup;
  double safety;
  uint64_t target, gpus_per_node;
  double network_gbps;
  uint32_t keep;
  bool json, calibrate, safety_given, write;
  const char *workload, *keep_list;
  const char *unworkable; /* the first option given that a workload plan cannot honour */
};

/* A number above 0 and at most max: --safety (a fraction), --network-gbps. */
static int parse_positive(const char *flag, const char *arg, double max, const char *expects, double *out) {
  char *end;
  double v = strtod(arg, &end);
  if (end != arg && !*end && v > 0 && v <= max) return *out = v, 0;
  cli_usage_error("plan", "%s expects %s, got '%s'", flag, expects, arg);
  return VF_EINVAL;
}

/* A whole number of at least 1: --target-effective-batch, --gpus-per-node. */
static int parse_count(const char *flag, const char *arg, uint64_t *out) {
  if (cli_parse_u64("plan", flag, arg, out)) return VF_EINVAL;
  if (*out) return 0;
  cli_usage_error("plan", "%s must be at least 1", flag);
  return VF_EINVAL;
}

static int plan_option(struct plan_args *a, int c, const char *arg) {
  switch (c) {
  case O_SAFETY:
    a->safety_given = true;
    return parse_positive("--safety", arg, 1, "a fraction above 0 and at most 1", &a->safety);
  case O_TARGET: return parse_count("--target-effective-batch", arg, &a->target);
  case O_WORKLOAD: a->workload = arg; return 0;
  case O_KEEP: a->keep_list = arg; return 0;
  case O_JSON: a->json = true; return 0;
  case O_WRITE: a->write = true; return 0;
  case O_CALIBRATE: a->calibrate = true; return 0;
  case O_NETWORK: return parse_positive("--network-gbps", arg, 1e6, "GB/s above 0", &a->network_gbps);
  case O_GPUS_PER_NODE: return parse_count("--gpus-per-node", arg, &a->gpus_per_node);
  default: return setup_option(&a->setup, c, arg);
  }
}

/* ---- output ---- */

static const char *quant_name(const struct vf_setup *s) {
  if (s->quant != VF_QUANT_DEFAULT) return vf_enum_name(VF_ENUM_QUANT, (int)s->quant);
  return s->method == VF_METHOD_QLORA ? "nf4-dq" : "none";
}

/* The layout of a setting, as the contract names its fields. */
static void layout_json(json_t *o, const struct vf_setup *s) {
  uint64_t group = s->tp * s->pp * s->cp;
  json_object_set_new(o, "tp", json_integer((json_int_t)s->tp));
  json_object_set_new(o, "pp", json_integer((json_int_t)s->pp));
  json_object_set_new(o, "cp", json_integer((json_int_t)s->cp));
  json_object_set_new(o, "ep", json_integer((json_int_t)s->ep));
  enum vf_pp_schedule schedule = s->pp > 1 ? s->pp_schedule : VF_PP_NONE;
  json_object_set_new(o, "pp_schedule", json_string(vf_enum_name(VF_ENUM_PP_SCHEDULE, schedule)));
  json_object_set_new(o, "dp", json_integer((json_int_t)(s->gpus / group)));
}

static json_t *choice_json(const struct vf_plan_choice *c, bool layout) {
  if (!c->found) return json_null();
  const struct vf_setup *s = &c->setup;
  char offload[64];
  vf_offload_format(s->offload, offload, sizeof offload);
  json_t *o = json_pack("{s:I, s:I, s:I, s:s, s:s, s:s, s:s, s:s, s:I, s:f}", "batch", (json_int_t)s->batch,
                        "accumulation", (json_int_t)s->accumulation, "seq", (json_int_t)s->seq, "grad_ckpt",
                        vf_enum_name(VF_ENUM_CKPT, (int)s->grad_ckpt), "optimizer",
                        vf_enum_name(VF_ENUM_OPTIMIZER, (int)s->optimizer), "method",
                        vf_enum_name(VF_ENUM_METHOD, (int)s->method), "shard",
                        vf_enum_name(VF_ENUM_SHARD, (int)s->shard), "offload", offload, "peak_device_bytes",
                        (json_int_t)c->peak_device_bytes, "tokens_per_second", round(c->tokens_per_second));
  /* precision is apply's autocast switch: null (left alone) when there is no autocast. */
  json_object_set_new(o, "precision", s->amp == VF_PREC_NONE ? json_null()
                                                             : json_string(vf_enum_name(VF_ENUM_PRECISION, (int)s->amp)));
  json_object_set_new(o, "weights", json_string(vf_enum_name(VF_ENUM_PRECISION, (int)s->weights)));
  json_object_set_new(o, "alloc_conf", json_string(c->alloc_conf));
  json_object_set_new(o, "loss", json_string(vf_enum_name(VF_ENUM_LOSS, (int)s->loss)));
  json_object_set_new(o, "optimizer_in_bwd", json_string(vf_enum_name(VF_ENUM_IN_BWD, (int)s->optimizer_in_bwd)));
  json_object_set_new(o, "lora_r", json_integer((json_int_t)s->lora_r));
  json_object_set_new(o, "quant", json_string(quant_name(s)));
  json_object_set_new(o, "gpus", json_integer((json_int_t)s->gpus));
  json_object_set_new(o, "effective_batch", json_integer((json_int_t)c->effective_batch));
  json_object_set_new(o, "budget_bytes", json_integer((json_int_t)c->budget_bytes));
  json_object_set_new(o, "peak_device_range", json_pack("{s:I, s:I}", "low", (json_int_t)c->device_range.low,
                                                        "high", (json_int_t)c->device_range.high));
  if (layout) layout_json(o, s);
  return o;
}

static json_t *plan_json(const struct vf_plan_result *p, uint64_t capacity, bool layout) {
  json_t *tiers = json_object(), *changes = json_array();
  for (int t = 0; t < VF_TIER_COUNT; t++)
    json_object_set_new(tiers, vf_tier_name((enum vf_tier)t), choice_json(&p->tiers[t], layout));
  for (size_t i = 0; i < p->n_changes; i++) json_array_append_new(changes, json_string(p->changes[i]));
  json_t *o = json_object();
  json_object_set_new(o, "recommended", choice_json(&p->tiers[VF_TIER_BALANCED], layout));
  json_object_set_new(o, "tiers", tiers);
  json_object_set_new(o, "changes", changes);
  json_object_set_new(o, "target_effective_batch", json_integer((json_int_t)p->target_effective_batch));
  json_object_set_new(o, "capacity_bytes", json_integer((json_int_t)capacity));
  json_object_set_new(o, "given", choice_json(&p->given, layout));
  json_object_set_new(o, "smallest_peak_device_bytes",
                      p->smallest.found ? json_integer((json_int_t)p->smallest.peak_device_bytes) : json_null());
  json_object_set_new(o, "estimates", json_integer((json_int_t)p->estimates));
  json_t *tried = json_array();
  for (size_t i = 0; i < p->n_alloc_tried; i++)
    json_array_append_new(tried, json_pack("{s:s, s:I, s:I}", "alloc_conf", p->alloc_tried[i].alloc_conf,
                                           "peak_device_bytes", (json_int_t)p->alloc_tried[i].peak_device_bytes,
                                           "high", (json_int_t)p->alloc_tried[i].device_range.high));
  json_object_set_new(o, "alloc_tried", tried);
  return o;
}

/* What the columns do not show, on a line of its own where it is not the given setting's:
 * the allocator's configuration, the loss, the optimizer's step in the backward, the precision. */
static void row_notes(const struct vf_plan_choice *c, const struct vf_plan_choice *given) {
  const struct vf_setup *s = &c->setup;
  char line[320] = "";
  size_t n = 0;
  if (strcmp(c->alloc_conf, given->alloc_conf) != 0)
    n += (size_t)snprintf(line + n, sizeof line - n, ", PYTORCH_CUDA_ALLOC_CONF=%s", c->alloc_conf);
  if (s->loss != given->setup.loss && n < sizeof line)
    n += (size_t)snprintf(line + n, sizeof line - n, ", loss %s", vf_enum_name(VF_ENUM_LOSS, (int)s->loss));
  if (s->optimizer_in_bwd != given->setup.optimizer_in_bwd && n < sizeof line)
    n += (size_t)snprintf(line + n, sizeof line - n, ", optimizer_in_bwd %s",
                          vf_enum_name(VF_ENUM_IN_BWD, (int)s->optimizer_in_bwd));
  bool precision = s->amp != given->setup.amp || s->weights != given->setup.weights;
  if (precision && n < sizeof line)
    snprintf(line + n, sizeof line - n, ", autocast %s, weights %s", vf_enum_name(VF_ENUM_PRECISION, (int)s->amp),
             vf_enum_name(VF_ENUM_PRECISION, (int)s->weights));
  if (line[0]) printf("  %-10s %s\n", "", line + 2);
}

/* The offload column's width: 9, or the longest value a row shows
 * ("optimizer,params,activations"); the smallest peak's row shows where nothing fits. */
static int offload_width(const struct vf_plan_result *p) {
  int width = (int)strlen("optimizer");
  const struct vf_plan_choice *rows[] = {&p->given, &p->tiers[0], &p->tiers[1], &p->tiers[2], &p->smallest};
  size_t n = p->tiers[VF_TIER_BALANCED].found ? 4 : 5;
  for (size_t i = 0; i < n; i++) {
    char text[64];
    vf_offload_format(rows[i]->setup.offload, text, sizeof text);
    if (rows[i]->found && (int)strlen(text) > width) width = (int)strlen(text);
  }
  return width;
}

static void tier_row(const char *name, const struct vf_plan_choice *c, const struct vf_plan_choice *given,
                     uint64_t capacity, bool layout, int offload_w) {
  if (!c->found) {
    printf("  %-10s  nothing fits\n", name);
    return;
  }
  const struct vf_setup *s = &c->setup;
  char offload[64], peak[32], high[32], rate[32];
  vf_offload_format(s->offload, offload, sizeof offload);
  cli_format_bytes(c->peak_device_bytes, peak, sizeof peak);
  cli_format_bytes(c->device_range.high, high, sizeof high);
  cli_group_digits((uint64_t)round(c->tokens_per_second), rate, sizeof rate);
  printf("  %-10s %5llu %5llu %6llu  %-9s  %-16s  %-6s  %-5s  %-*s %10s %10s %5.1f%% %10s\n", name,
         (unsigned long long)s->batch, (unsigned long long)s->accumulation, (unsigned long long)s->seq,
         vf_enum_name(VF_ENUM_CKPT, (int)s->grad_ckpt), vf_enum_name(VF_ENUM_OPTIMIZER, (int)s->optimizer),
         vf_enum_name(VF_ENUM_METHOD, (int)s->method), vf_enum_name(VF_ENUM_SHARD, (int)s->shard), offload_w,
         offload, peak, high, 100.0 * (double)c->device_range.high / (double)capacity, rate);
  row_notes(c, given);
  if (!layout) return;
  char where[96];
  vf_layout_format(s, where, sizeof where);
  printf("  %-10s layout: %s\n", "", where);
}

static void plan_text(const struct vf_model *m, const struct vf_gpu_spec *gpu, const struct vf_plan_result *p,
                      double safety, bool layout) {
  char cap[32], low[32];
  cli_format_bytes(gpu->capacity_bytes, cap, sizeof cap);
  printf("%s on %s (%s): effective batch %llu, %llu GPU%s\n\n", m->name, gpu->name[0] ? gpu->name : "the GPU", cap,
         (unsigned long long)p->target_effective_batch, (unsigned long long)p->given.setup.gpus,
         p->given.setup.gpus == 1 ? "" : "s");
  int ow = offload_width(p);
  printf("  %-10s %5s %5s %6s  %-9s  %-16s  %-6s  %-5s  %-*s %10s %10s %6s %10s\n", "tier", "batch", "accum",
         "seq", "grad ckpt", "optimizer", "method", "shard", ow, "offload", "peak", "high end", "of GPU", "tokens/s");
  tier_row("given", &p->given, &p->given, gpu->capacity_bytes, layout, ow);
  for (int t = 0; t < VF_TIER_COUNT; t++)
    tier_row(vf_tier_name((enum vf_tier)t), &p->tiers[t], &p->given, gpu->capacity_bytes, layout, ow);
  if (!p->tiers[VF_TIER_BALANCED].found) {
    tier_row("smallest", &p->smallest, &p->given, gpu->capacity_bytes, layout, ow);
    cli_format_bytes(p->smallest.peak_device_bytes, low, sizeof low);
    printf("\nnothing fits under %.0f%% of the GPU at the high end within the allowed changes: the smallest"
           " peak found is %s (let more knobs change: --keep)\n", 100 * safety, low);
    return;
  }
  printf("\nrecommended: balanced, the fastest whose high end stays under %.0f%% of the GPU\n", 100 * safety);
  for (size_t i = 0; i < p->n_changes; i++) printf("  - %s\n", p->changes[i]);
}

/* The plan, kept for 'vramfit doctor' and 'vramfit watch' in this project and the project
 * of the config it was made of: "llama-3.1-8b on a100-40gb". */
static void keep_plan(const struct setup_config *sc, const struct vf_gpu_spec *gpu, const char *gpu_arg, json_t *plan) {
  char label[512];
  snprintf(label, sizeof label, "%s on %s", sc->model, gpu->name[0] ? gpu->name : gpu_arg);
  history_save_plan(label, plan, sc->n_files ? sc->files[0] : NULL);
}

/* Plans a loaded setup; the plan's JSON (with where its setting was read) in *out. */
static int plan_setup(struct plan_args *a, const struct setup_config *sc, const struct setup_context *ctx,
                      json_t **out) {
  struct vf_plan_request req = {&ctx->model, ctx->profile, &ctx->conf, &ctx->gpu, a->setup.setup,
                                a->safety, a->target, a->keep | setup_config_keep(sc), 0, &ctx->uncertainty,
                                a->gpus_per_node, a->network_gbps, setup_alloc_conf_text(&a->setup)};
  bool layout = a->gpus_per_node > 0;
  setup_config_warn(&a->setup, ctx, sc);
  /* What a run of the given setup measured here, and --calibrate to it. */
  struct history_note note;
  history_note_find(&a->setup, sc->model, ctx, &note);
  if (a->calibrate) req.batch_scale = history_note_ratio(&note, "plan");
  struct vf_plan_result *p = malloc(sizeof *p);
  struct vf_diag d;
  vf_diag_clear(&d);
  int rc = p ? vf_plan_search(&req, p, &d) : VF_ENOMEM;
  json_t *o = rc ? NULL : plan_json(p, ctx->gpu.capacity_bytes, layout);
  if (o) history_note_json(&note, o);
  if (o && setup_config_any(sc)) {
    json_object_set_new(o, "read_from", setup_read_from_json(&a->setup));
    json_object_set_new(o, "warnings", setup_config_warnings_json(&a->setup, ctx, sc));
  }
  int code = rc ? cli_diag_error("plan", rc, &d) : p->tiers[VF_TIER_BALANCED].found ? EXIT_OK : EXIT_NO;
  if (code == EXIT_OK) keep_plan(sc, &ctx->gpu, a->setup.gpu, o);
  if (!rc && !a->json) plan_text(&ctx->model, &ctx->gpu, p, a->safety, layout), history_note_print(&note);
  history_note_cleanup(&note);
  free(p);
  *out = o;
  return code;
}

/* The plan shown, and with --write written into the configs it was read from. */
static int plan_show(struct plan_args *a, const struct setup_config *sc, const struct setup_context *ctx) {
  json_t *o = NULL, *written = NULL;
  int code = plan_setup(a, sc, ctx, &o);
  if (code == EXIT_OK && a->write) code = setup_config_write(&a->setup, sc, o, a->json, &written);
  if (written) json_object_set_new(o, "written", written);
  if (o && a->json && (code == EXIT_OK || code == EXIT_NO)) {
    int printed = cli_print_json(json_incref(o));
    if (printed) code = printed;
  }
  json_decref(o);
  return code;
}

/* Options a workload plan honours besides its own: the GPU, the allocator, data parallelism
 * and the plan's own figures. The workload gives the rest of its setup; history keeps its
 * measured runs by stage, which no estimate of a whole workload is matched to. */
static bool workload_option(int c) {
  static const int honoured[] = {O_GPU, O_ALLOC_CONF, O_GPUS, O_SAFETY, O_TARGET, O_KEEP, O_JSON, O_WORKLOAD};
  for (size_t i = 0; i < sizeof honoured / sizeof *honoured; i++)
    if (honoured[i] == c) return true;
  return false;
}

static int model_keep(struct plan_args *a) {
  if (!a->keep_list || vf_keep_list(a->keep_list, &a->keep) == 0) return EXIT_OK;
  return cli_usage_error("plan", "--keep: '%s' is not a comma list of seq, precision, optimizer, method, lora-r, "
                         "quant, grad-ckpt, shard, offload, alloc-conf, loss, optimizer-in-bwd, capacity, none", a->keep_list);
}

int cmd_plan(int argc, char **argv) {
  struct plan_args a = {.safety = 0.90, .keep = VF_KEEP_CAPACITY};
  setup_request_init(&a.setup, "plan");
  optind = 1;
  opterr = 0; /* getopt's own message would make the error two lines */
  for (int c, at = -1; (c = getopt_long(argc, argv, ":h", opts, &at)) != -1; at = -1) {
    if (c == O_HELP || c == 'h') return fputs(usage, stdout), EXIT_OK;
    if (c == ':' || c == '?') return cli_option_error("plan", c, argv);
    if (!workload_option(c) && !a.unworkable && at >= 0) a.unworkable = opts[at].name;
    if (plan_option(&a, c, optarg)) return EXIT_BAD_INPUT;
  }
  if (a.workload && optind != argc)
    return cli_usage_error("plan", "--workload: the workload names its model; give no MODEL");
  if (a.workload && a.unworkable)
    return cli_usage_error("plan", "--%s: a workload plan takes --gpu, --gpus, --alloc-conf, --safety, "
                           "--target-effective-batch, --keep (the workload's knobs) and --json; the workload gives "
                           "the rest", a.unworkable);
  if (a.workload)
    return plan_workload(&a.setup, a.workload, a.safety_given ? a.safety : 0, a.target, a.keep_list, a.json);
  if (model_keep(&a)) return EXIT_BAD_INPUT;
  if (optind == argc) return cli_usage_error("plan", "MODEL is missing; see 'vramfit plan --help'");
  if (!a.setup.gpu) return cli_usage_error("plan", "--gpu is required: the GPU to plan for");
  struct setup_config sc;
  struct setup_context ctx;
  int rc = setup_config_read(&a.setup, argv + optind, argc - optind, &sc);
  if (!rc && a.write && !setup_config_any(&sc))
    rc = cli_usage_error("plan", "--write writes the plan into the training configs given as MODEL; none was given");
  if (!rc) rc = setup_context_load(&a.setup, sc.model, &ctx);
  if (!rc) {
    rc = plan_show(&a, &sc, &ctx);
    setup_context_cleanup(&ctx);
  }
  setup_config_cleanup(&sc);
  return rc;
}

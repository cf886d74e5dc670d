/* vramfit trace MODEL [estimate options]: the framework's own training code, run on the CPU
 * against a fake CUDA device, measured as the CUDA caching allocator would count it. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fileio.h"
#include "cli/setup_config.h"
#include "cli/trace_run.h"
#include "cli/workload_cli.h"

static const char usage[] =
    "usage: vramfit trace MODEL [estimate options] [--json] [--events FILE] [--timeout S]\n"
    "       vramfit trace --workload FILE [--gpu G] [--json] [--timeout S]\n\n"
    "Runs the framework's own training code for the setup (two optimizer steps of\n"
    "--accumulation micro batches, from building the model on) on this machine's CPU, with\n"
    "every tensor on a fake CUDA device, and measures what torch.cuda.max_memory_allocated()\n"
    "and max_memory_reserved() would report: each storage allocation and free is replayed\n"
    "through the caching-allocator model. No GPU and no weights are needed: the model is\n"
    "built from its config with random values. Where CUDA kernels keep other tensors than\n"
    "the fake device shows (the SDPA backends, cuBLAS workspaces), the tracer follows CUDA.\n\n"
    "MODEL is a catalogue name, Hub id or alias, a Hub id in the local Hugging Face Hub\n"
    "cache, a config.json, a folder holding one, or a training config naming one of those\n"
    "(its validation setting aside: the tracer runs the framework's loop). The options are\n"
    "estimate's, --format too (see 'vramfit estimate --help'); traced frameworks: hf\n"
    "(transformers, PEFT, the Trainer), litgpt, torchtune, lightning. Many GPUs: torchtune\n"
    "and litgpt with --gpus N --shard fsdp, and hf and lightning with --gpus N (DDP) or\n"
    "--gpus N --shard fsdp, trace rank 0 on a fake process group (its collectives move\n"
    "nothing, their buffers are allocated as on a GPU); --tp, --pp, --cp and ZeRO are not\n"
    "traced, nor --offload but torchtune's --offload activations.\n\n"
    "  --json         machine-readable output\n"
    "  --events FILE  keep the allocation events (one per line) in FILE\n"
    "  --timeout S    stop the tracer after S seconds (exit 4)\n"
    "  --workload FILE  trace the workload's own model (model.factory in FILE) at its\n"
    "                 trace.points (default: a few around the first stage's minimums), fit\n"
    "                 how the peak grows with the sequences and the loss's size, and write\n"
    "                 the fit beside FILE (NAME.trace.json), where 'plan --workload' uses it\n"
    "                 for a model given by its factory only\n\n"
    "The tracer runs in the Python environments 'make trace-env' builds, one per framework\n"
    "(torch 2.13 for the CPU and the framework's pinned release) under .venv-trace/;\n"
    "VRAMFIT_TRACE_ENV names another root.\n\n"
    "Exit status: 0; 2 bad input or a setup the framework cannot run; 3 the environment or\n"
    "the framework is missing; 4 the tracer failed or ran past --timeout.\n";

enum { O_JSON = O_SETUP_END, O_HELP, O_EVENTS, O_TIMEOUT, O_WORKLOAD };

static const struct option opts[] = {SETUP_OPTIONS, CONFIG_OPTIONS, {"json", no_argument, NULL, O_JSON},
                                     {"events", required_argument, NULL, O_EVENTS},
                                     {"timeout", required_argument, NULL, O_TIMEOUT},
                                     {"workload", required_argument, NULL, O_WORKLOAD},
                                     {"help", no_argument, NULL, O_HELP}, {NULL, 0, NULL, 0}};

struct trace_args {
  struct setup_request r;
  enum vf_attention attention; /* as given, before the profile's default fills it */
  bool json;
  const char *events, *model, *workload;
  const char *setup_flag; /* the first setup option given other than --gpu and --alloc-conf */
  uint64_t timeout_s;
};

/* Scratch files of one trace, removed at the end. */
struct scratch {
  char dir[64], setup[96], events[96], summary[96], config[96];
};

static int scratch_make(struct scratch *s) {
  const char *tmp = getenv("TMPDIR");
  snprintf(s->dir, sizeof s->dir, "%s/vramfit-trace-XXXXXX", tmp && *tmp && strlen(tmp) < 40 ? tmp : "/tmp");
  if (!mkdtemp(s->dir)) return VF_EIO;
  snprintf(s->setup, sizeof s->setup, "%s/setup.json", s->dir);
  snprintf(s->events, sizeof s->events, "%s/events", s->dir);
  snprintf(s->summary, sizeof s->summary, "%s/summary.json", s->dir);
  snprintf(s->config, sizeof s->config, "%s/config.json", s->dir);
  return 0;
}

static void scratch_remove(const struct scratch *s) {
  unlink(s->setup);
  unlink(s->events);
  unlink(s->summary);
  unlink(s->config);
  rmdir(s->dir);
}

/* The config.json the tracer builds the model from: the catalogue's copy, the file given,
 * or the one in the folder given or (a Hub id) in the Hub cache's snapshot. */
static int config_path(const struct vf_model *m, const char *arg, const struct scratch *s,
                       char *out, size_t size) {
  if (strcmp(m->source, "catalogue") == 0) {
    char *text;
    size_t len;
    if (vf_catalog_config(m->name, &text, &len)) return VF_ENOTFOUND;
    int rc = file_write(s->config, text, len);
    vf_free(text);
    snprintf(out, size, "%s", s->config);
    return rc;
  }
  const char *from = path_is_dir(arg) || path_is_file(arg) ? arg : m->source;
  if (path_is_dir(from)) snprintf(out, size, "%s/config.json", from);
  else snprintf(out, size, "%s", from);
  return str_ends_with(out, ".json") && !str_ends_with(out, ".index.json") && path_is_file(out)
             ? 0 : VF_EUNSUPPORTED;
}

static json_t *kinds_json(uint32_t bits) {
  uint32_t all_linear;
  vf_lora_targets_parse("all-linear", &all_linear);
  /* The framework's own "all linear layers" rule, which knows the model's projections. */
  if (bits == all_linear) return json_pack("[s]", "all-linear");
  json_t *a = json_array();
  for (int k = 0; k <= VF_KIND_HEAD; k++)
    if (bits & (1u << k)) json_array_append_new(a, json_string(vf_kind_name((enum vf_kind)k)));
  return a;
}

static json_t *offload_json(uint32_t bits) {
  static const char *const names[] = {"optimizer", "params", "activations"};
  json_t *a = json_array();
  for (int i = 0; i < 3; i++)
    if (bits & (1u << i)) json_array_append_new(a, json_string(names[i]));
  return a;
}

/* The setup as the tracer reads it (python/vramfit/trace/spec.py). */
static json_t *setup_json(const struct trace_args *a, const struct setup_context *c, const char *config,
                          const char *framework, const char *version) {
  const struct vf_setup *s = &a->r.setup;
  json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:s, s:s, s:s}", "model", c->model.name,
                        "config", config, "framework", framework, "framework_version", version, "task",
                        vf_enum_name(VF_ENUM_TASK, s->task), "batch", (json_int_t)s->batch, "seq",
                        (json_int_t)s->seq, "accumulation", (json_int_t)s->accumulation, "lengths",
                        vf_enum_name(VF_ENUM_LENGTHS, s->lengths), "weights",
                        vf_enum_name(VF_ENUM_PRECISION, s->weights), "amp", vf_enum_name(VF_ENUM_PRECISION, s->amp));
  json_object_set_new(o, "optimizer", json_string(vf_enum_name(VF_ENUM_OPTIMIZER, s->optimizer)));
  json_object_set_new(o, "method", json_string(vf_enum_name(VF_ENUM_METHOD, s->method)));
  json_object_set_new(o, "lora_r", json_integer((json_int_t)s->lora_r));
  json_object_set_new(o, "lora_targets", kinds_json(s->lora_targets));
  json_object_set_new(o, "quant", json_string(vf_enum_name(VF_ENUM_QUANT, vf_setup_quant(s))));
  json_object_set_new(o, "grad_ckpt", json_string(vf_enum_name(VF_ENUM_CKPT, s->grad_ckpt)));
  json_object_set_new(o, "optimizer_in_bwd", json_boolean(s->optimizer_in_bwd == VF_IN_BWD_YES));
  /* Unless asked for one, the framework picks its attention as it does for users. */
  json_object_set_new(o, "attention", json_string(a->attention == VF_ATTN_DEFAULT
                                                      ? "default" : vf_enum_name(VF_ENUM_ATTENTION, s->attention)));
  json_object_set_new(o, "gpus", json_integer((json_int_t)s->gpus));
  json_object_set_new(o, "shard", json_string(vf_enum_name(VF_ENUM_SHARD, s->shard)));
  json_object_set_new(o, "offload", offload_json(s->offload));
  json_object_set_new(o, "tp", json_integer((json_int_t)s->tp));
  json_object_set_new(o, "pp", json_integer((json_int_t)s->pp));
  json_object_set_new(o, "cp", json_integer((json_int_t)s->cp));
  if (s->lengths == VF_LENGTHS_VARIED && s->length_dist.n) {
    /* The steps and each micro batch's longest sample, drawn as the estimate draws them. */
    uint64_t n = VF_LENGTH_STEPS * s->accumulation;
    json_t *longest = json_array();
    for (uint64_t k = 0; k < n; k++)
      json_array_append_new(longest, json_integer((json_int_t)vf_length_dist_batch(&s->length_dist, s->batch, s->seq, k, n)));
    json_object_set_new(o, "steps", json_integer(VF_LENGTH_STEPS));
    json_object_set_new(o, "batch_lengths", longest);
  }
  /* The GPU's generation picks kernels and workspace sizes; without one the tracer
   * impersonates an H100. */
  if (c->gpu.cc_major)
    json_object_set_new(o, "gpu", json_pack("{s:s, s:[i,i], s:I}", "name", c->gpu.full_name, "capability",
                                            c->gpu.cc_major, c->gpu.cc_minor, "total_bytes",
                                            (json_int_t)c->gpu.capacity_bytes));
  return o;
}

struct traced {
  struct vf_trace events;
  struct vf_trace_result result;
  json_t *summary; /* what the tracer reported: framework release, torch, notes */
};

static int read_results(const struct scratch *s, const struct trace_args *a, const struct vf_alloc_conf *conf,
                        struct traced *t) {
  struct vf_diag d;
  vf_diag_clear(&d);
  json_error_t je;
  if (!(t->summary = json_load_file(s->summary, 0, &je)))
    return cli_error("trace", EXIT_INTERNAL, "the tracer's summary is unreadable: %s", je.text);
  char *text;
  size_t len;
  int rc = file_read(s->events, SIZE_MAX / 2, &text, &len, &d);
  if (!rc) rc = vf_trace_parse(text, len, &t->events, &d);
  if (!rc && a->events && file_write(a->events, text, len)) {
    rc = VF_EIO;
    snprintf(d.file, sizeof d.file, "%s", a->events);
    snprintf(d.msg, sizeof d.msg, "cannot write the events");
  }
  free(text);
  if (rc) {
    cli_diag_error("trace", rc, &d);
    return rc == VF_EIO ? EXIT_ENV : EXIT_INTERNAL;
  }
  if ((rc = vf_trace_replay(&t->events, conf, &t->result)))
    return cli_error("trace", EXIT_INTERNAL, "replaying the tracer's events: %s", vf_strerror(rc));
  return EXIT_OK;
}

static const char *phase_of(const struct traced *t, size_t i) {
  return i < t->events.nphases ? t->events.phases[i] : "load";
}

static json_t *result_json(const struct trace_args *a, const struct setup_context *c, struct traced *t,
                           const char *framework) {
  const struct vf_trace_result *r = &t->result;
  json_t *phases = json_object(), *breakdown = json_object();
  for (size_t i = 0; i < t->events.nphases; i++)
    json_object_set_new(phases, t->events.phases[i],
                        json_pack("{s:I, s:I}", "allocated_bytes", (json_int_t)r->phase_peak[i].allocated,
                                  "reserved_bytes", (json_int_t)r->phase_peak[i].reserved));
  for (int k = VF_CAT_WEIGHTS; k <= VF_CAT_ACTIVATIONS; k++)
    json_object_set_new(breakdown, vf_category_name((enum vf_category)k), json_integer((json_int_t)r->by_category[k]));
  json_t *fw = json_object_get(t->summary, "framework");
  json_t *o = json_object();
  json_object_set_new(o, "model", json_pack("{s:s, s:s, s:s}", "name", c->model.name, "family",
                                            vf_family_name(c->model.arch.family), "model_type",
                                            c->model.arch.model_type));
  json_object_set_new(o, "traced", json_pack("{s:I, s:I, s:s, s:o, s:o, s:I}", "allocated_bytes",
                                             (json_int_t)r->allocated_peak, "reserved_bytes",
                                             (json_int_t)r->reserved_peak, "phase", phase_of(t, r->peak_phase),
                                             "phases", phases, "breakdown", breakdown, "events",
                                             (json_int_t)r->events));
  json_object_set_new(o, "framework", json_pack("{s:s, s:O, s:O}", "name", framework, "package",
                                                json_object_get(fw, "name"), "version",
                                                json_object_get(fw, "version")));
  json_object_set(o, "torch", json_object_get(t->summary, "torch"));
  json_object_set(o, "seconds", json_object_get(t->summary, "seconds"));
  json_object_set(o, "sdpa_backends", json_object_get(t->summary, "sdpa_backends"));
  json_object_set(o, "notes", json_object_get(t->summary, "notes"));
  (void)a;
  return o;
}

static void result_text(const struct setup_context *c, const struct traced *t, const char *framework) {
  const struct vf_trace_result *r = &t->result;
  json_t *fw = json_object_get(t->summary, "framework");
  printf("%s: traced %s (%s %s, torch %s) in %.1f s\n\n", c->model.name, framework,
         json_string_value(json_object_get(fw, "name")), json_string_value(json_object_get(fw, "version")),
         json_string_value(json_object_get(t->summary, "torch")),
         json_number_value(json_object_get(t->summary, "seconds")));
  char a[32], b[32];
  printf("  phase          allocated      reserved\n");
  for (size_t i = 0; i < t->events.nphases; i++) {
    cli_format_bytes(r->phase_peak[i].allocated, a, sizeof a);
    cli_format_bytes(r->phase_peak[i].reserved, b, sizeof b);
    printf("  %-10s  %12s  %12s%s\n", t->events.phases[i], a, b, i == r->peak_phase ? "  <- peak" : "");
  }
  printf("\n  at the peak (%s)\n", phase_of(t, r->peak_phase));
  for (int k = VF_CAT_WEIGHTS; k <= VF_CAT_ACTIVATIONS; k++) {
    cli_format_bytes(r->by_category[k], a, sizeof a);
    printf("  %-22s %12s\n", k == VF_CAT_ACTIVATIONS ? "activations, temporaries" : vf_category_name((enum vf_category)k), a);
  }
  cli_format_bytes(r->allocated_peak, a, sizeof a);
  cli_format_bytes(r->reserved_peak, b, sizeof b);
  printf("\n  max_memory_allocated   %12s\n  max_memory_reserved    %12s\n", a, b);
}

static int parse_args(int argc, char **argv, struct trace_args *a) {
  setup_request_init(&a->r, "trace");
  optind = 1;
  opterr = 0;
  int at = -1;
  for (int c; (c = getopt_long(argc, argv, ":h", opts, &at)) != -1; at = -1) {
    if (c == O_HELP || c == 'h') return fputs(usage, stdout), -1;
    if (c == ':' || c == '?') return cli_option_error("trace", c, argv);
    if (c == O_JSON) a->json = true;
    else if (c == O_EVENTS) a->events = optarg;
    else if (c == O_WORKLOAD) a->workload = optarg;
    else if (c == O_TIMEOUT) {
      if (cli_parse_u64("trace", "--timeout", optarg, &a->timeout_s)) return EXIT_BAD_INPUT;
    } else {
      /* A workload says what it runs; only the GPU and the allocator are the tracer's. */
      if (c != O_GPU && c != O_ALLOC_CONF && !a->setup_flag && at >= 0) a->setup_flag = opts[at].name;
      if (setup_option(&a->r, c, optarg)) return EXIT_BAD_INPUT;
    }
  }
  if (a->workload && a->setup_flag)
    return cli_usage_error("trace", "--%s: the workload gives its own setup; with --workload only --gpu and "
                                    "--alloc-conf apply", a->setup_flag);
  if (a->workload)
    return optind == argc ? EXIT_OK : cli_usage_error("trace", "--workload: the workload names its model; give no MODEL");
  /* The tracer runs the torch its environment pins: another one cannot be asked for. */
  if (a->r.torch)
    return cli_usage_error("trace", "--torch: the tracer runs the PyTorch release its environment pins "
                                    "('make trace-env'); --torch is estimate's");
  /* The fused kernels are Triton's, for GPUs; the CPU runs the framework's own loss. */
  if (a->r.setup.loss != VF_LOSS_DEFAULT)
    return cli_usage_error("trace", "--loss %s: the tracer runs the framework's own loss on the CPU (Liger's and "
                                    "Cut Cross-Entropy's kernels need a GPU); --loss is the estimator's",
                           vf_enum_name(VF_ENUM_LOSS, a->r.setup.loss));
  /* Inductor's kernels for the CPU are not the GPU's: the tracer runs eager. */
  if (a->r.setup.compile == VF_COMPILE_YES)
    return cli_usage_error("trace", "--compile yes: the tracer runs the framework eager on the CPU; --compile is "
                                    "the estimator's");
  /* The traced loop validates where the framework's own does (litgpt's scripts). */
  if (a->r.setup.eval != VF_EVAL_DEFAULT)
    return cli_usage_error("trace", "--eval: the tracer validates as the framework's loop does (litgpt's "
                                    "scripts do, the others do not); --eval is the estimator's");
  return EXIT_OK;
}

/* Runs the tracer on a prepared setup and prints what it measured. */
static int trace_setup(const struct trace_args *a, const struct setup_context *c, const struct trace_env *env,
                       const struct scratch *s, const char *framework, const char *version) {
  char config[PATH_MAX];
  if (config_path(&c->model, a->model, s, config, sizeof config))
    return cli_usage_error("trace", "%s: the tracer builds models from a Hugging Face config.json: give a "
                           "catalogue name, a Hub id, a config.json or a folder holding one", a->model);
  json_t *setup = setup_json(a, c, config, framework, version);
  int rc = json_dump_file(setup, s->setup, 0);
  json_decref(setup);
  if (rc) return cli_error("trace", EXIT_ENV, "%s: cannot write the setup", s->setup);
  int code = trace_run(env, s->setup, s->events, s->summary, (double)a->timeout_s);
  if (code) return code;
  struct traced t = {0};
  vf_trace_init(&t.events);
  if ((code = read_results(s, a, &c->conf, &t)) == EXIT_OK) {
    if (a->json) code = cli_print_json(result_json(a, c, &t, framework));
    else result_text(c, &t, framework);
  }
  vf_trace_cleanup(&t.events);
  json_decref(t.summary);
  return code;
}

/* The frameworks python/vramfit/trace/drivers/ can run. */
static const char *const traced_frameworks[] = {"hf", "litgpt", "torchtune", "lightning"};

static bool is_traced(const char *framework) {
  for (size_t i = 0; i < sizeof traced_frameworks / sizeof *traced_frameworks; i++)
    if (strcmp(framework, traced_frameworks[i]) == 0) return true;
  return false;
}

/* Checks the resolved setup and the tracer's environment, then traces in a scratch folder. */
static int trace_loaded(const struct trace_args *a, const struct setup_context *c, const char *framework,
                        const char *version) {
  struct vf_diag d;
  vf_diag_clear(&d);
  if (vf_setup_validate(&a->r.setup, &c->model, &d)) return cli_diag_error("trace", VF_EINVAL, &d);
  if (!is_traced(framework))
    return cli_usage_error("trace", "--framework %s: no tracer driver (traced: hf, litgpt, torchtune, lightning)",
                           framework);
  /* A release other than the pinned one has an environment of its own: litgpt@0.4. */
  char env_name[96];
  snprintf(env_name, sizeof env_name, "%s%s%s", framework, *version ? "@" : "", version);
  struct trace_env env;
  int code = trace_env_find(&env, env_name);
  if (code) return code;
  struct scratch s;
  if (scratch_make(&s)) return cli_error("trace", EXIT_ENV, "cannot create a scratch folder in $TMPDIR");
  code = trace_setup(a, c, &env, &s, framework, version);
  scratch_remove(&s);
  return code;
}

/* Traces the setup the command line and the configs among args describe. */
static int trace_model(struct trace_args *a, char *const *args, int n) {
  struct setup_config sc;
  struct setup_context ctx;
  int code = setup_config_read(&a->r, args, n, &sc);
  /* A config's validation setting is the estimator's: the tracer runs the framework's loop. */
  a->r.setup.eval = VF_EVAL_DEFAULT;
  a->r.read_from[K_EVAL] = a->r.by_tool[K_EVAL] = NULL;
  a->model = sc.model;
  if (!code) code = setup_context_load(&a->r, a->model, &ctx);
  if (!code) {
    setup_config_warn(&a->r, &ctx, &sc);
    a->attention = a->r.setup.attention;
    vf_setup_resolve(&a->r.setup, &ctx.model, ctx.profile);
    code = trace_loaded(a, &ctx, a->r.spec.name, a->r.spec.version);
    setup_context_cleanup(&ctx);
  }
  setup_config_cleanup(&sc);
  return code;
}

int cmd_trace(int argc, char **argv) {
  struct trace_args a = {0};
  int code = parse_args(argc, argv, &a);
  if (code) return code < 0 ? EXIT_OK : code;
  if (a.workload) return trace_workload(&a.r, a.workload, a.json, (double)a.timeout_s);
  return trace_model(&a, argv + optind, argc - optind);
}

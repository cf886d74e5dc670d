/* vramfit probe [options] -- CMD ARGS...: finds the largest micro batch that fits by running
 * the user's own training command (the search is vf_probe_*, one launch is probe_run.c). */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/history_cli.h"
#include "cli/probe_run.h"
#include "cli/probe_stage.h"
#include "cli/setup_opts.h"

static const char usage[] =
    "usage: vramfit probe [--min N] [--max N] [--timeout S] [--grace S] [--json]\n"
    "                     [--margin F] [--target-effective-batch N]\n"
    "                     [--model MODEL [estimate options]] -- CMD ARGS...\n"
    "       vramfit probe --workload FILE --stage NAME [--gpu G] [options] -- CMD ARGS...\n\n"
    "Finds the largest micro batch that fits by running your own training command at\n"
    "different batches. '{batch}' in ARGS is replaced by the batch to try, and VRAMFIT_BATCH\n"
    "holds it. Make the command short: a few steps (the second step is the peak).\n\n"
    "The answer is the boundary (the largest batch that fits), the batch to train with (the\n"
    "largest whose peak, grown by the margin, still fits) and the accumulation that keeps\n"
    "the effective batch. It warns when the peaks do not grow with the batch (the command\n"
    "ignores it) and when the answer is --max (a larger batch may fit too).\n\n"
    "  --min N       smallest batch to try (1)\n"
    "  --max N       largest batch to try (4096)\n"
    "  --timeout S   a launch still running after S seconds counts as fitting ('timeout'):\n"
    "                its process tree gets SIGTERM, then SIGKILL after the grace period\n"
    "  --grace S     seconds from SIGTERM to SIGKILL when a launch's tree is ended (default:\n"
    "                the --timeout, within 1 to 10 s; 10 without --timeout)\n"
    "  --json        machine-readable output\n"
    "  --margin F    share of the peak kept free at the recommended batch, from 0 to 1\n"
    "                (default: the estimate's range with --model, else 0.10); without\n"
    "                peaks (no NVML) the largest fit divided by 1 + F\n"
    "  --target-effective-batch N\n"
    "                micro batch x accumulation to keep: the accumulation is the fewest\n"
    "                micro batches that reach N at the recommended batch, which then\n"
    "                shrinks to the least that still reaches it (per GPU: with D\n"
    "                data-parallel GPUs, give N / D; with --stage: the stage's planned\n"
    "                micro batch x accumulation)\n"
    "  --model MODEL start at the estimator's largest batch that fits the GPU (--gpu, else\n"
    "                the one NVML finds) for MODEL with the options of 'vramfit estimate'\n"
    "                (--seq, --method, --weights, ...; not --batch); fits by the estimate\n"
    "                itself, not the high end of its range: the likeliest batch is where\n"
    "                the fewest launches find the answer\n"
    "  --workload FILE --stage NAME\n"
    "                confirm a curriculum stage of a workload.yaml: the workload is planned\n"
    "                for the GPU (--gpu, else the one NVML finds), '{KNOB}' in ARGS becomes\n"
    "                the stage's planned value ({n_positives}, {n_negatives}, {accumulation};\n"
    "                VRAMFIT_N_POSITIVES, ... hold them), and the search starts at the\n"
    "                estimate's largest micro batch for the stage; the stage is confirmed\n"
    "                when its planned micro batch fits\n\n"
    "A launch fits when it exits 0 and runs out of memory when it fails with an\n"
    "out-of-memory report (PyTorch, CUDA, cuBLAS, cuDNN, NCCL, JAX, TensorFlow, host) in its\n"
    "output. Peaks are the most the command's processes held on one GPU, sampled through\n"
    "NVML every 0.1 s. They steer the search: peak(batch) is fitted to the launches that fit\n"
    "(a line, or a curve where the peaks bend) with a band for NVML's noise, and the next\n"
    "launch is where it crosses the GPU's free memory (or what an out-of-memory launch far\n"
    "short of it reached), splitting the batches the band leaves open; where the fit fails,\n"
    "the rest is bisected. The batch past the answer is not launched where two or more\n"
    "measured peaks put even the bottom of their band there over the GPU's free memory\n"
    "('settled_by_peaks' in --json). Without peaks (no NVML): the search starts at the\n"
    "estimate and steps out by an eighth of it, doubling each step (without --model:\n"
    "doubles from --min), then bisects. The command's output is captured (the last 64 KiB\n"
    "of each stream) and shown only when a launch fails.\n\n"
    "Each launch runs in its own process group; its whole tree (children that left the\n"
    "group included) is ended at the time limit, when it exits leaving processes behind, and\n"
    "when vramfit gets Ctrl-C, SIGTERM or SIGHUP (passed on, then SIGKILL after the grace\n"
    "period). Every launch is kept in the history ('vramfit history').\n\n"
    "Exit status: 0; 1 when not even --min fits; 2 when a launch fails for another reason\n"
    "than memory (the end of its stderr is shown); 3 when CMD cannot be run; killed by the\n"
    "signal that stopped it.\n";

#define NAME "probe"

enum { O_MIN = O_SETUP_END, O_MAX, O_TIMEOUT, O_GRACE, O_JSON, O_MODEL, O_WORKLOAD, O_STAGE, O_MARGIN, O_TARGET };

/* The margin without --margin and without an estimate's range. */
#define DEFAULT_MARGIN 0.10

struct request {
  uint64_t min, max;
  uint64_t target; /* --target-effective-batch; 0: none */
  double timeout_s, grace_s;
  double margin;   /* --margin; < 0: not given */
  bool json;
  char **cmd;
  const char *model, *workload, *stage;
  struct setup_request setup;
  const char *setup_flag; /* the first estimate option given; they need --model */
};

static int parse_seconds(const char *flag, const char *text, bool zero, double *out) {
  char *end;
  double v = strtod(text, &end);
  if (end == text || *end || !isfinite(v) || v < 0 || (v == 0 && !zero))
    return cli_usage_error(NAME, "%s expects seconds %s 0, got '%s'", flag, zero ? "from" : "above", text);
  *out = v;
  return 0;
}

static int parse_margin(const char *text, double *out) {
  char *end;
  double v = strtod(text, &end);
  if (end == text || *end || !isfinite(v) || v < 0 || v >= 1)
    return cli_usage_error(NAME, "--margin expects a share of the peak from 0 to below 1 (0.1: 10%%), got '%s'", text);
  *out = v;
  return 0;
}

static int parse_target(const char *text, uint64_t *out) {
  if (cli_parse_u64(NAME, "--target-effective-batch", text, out)) return EXIT_BAD_INPUT;
  return *out ? 0 : cli_usage_error(NAME, "--target-effective-batch expects at least 1");
}

static int take_option(int c, const char *name, char **argv, struct request *r) {
  if (c == O_MIN) return cli_parse_u64(NAME, "--min", optarg, &r->min) ? EXIT_BAD_INPUT : 0;
  if (c == O_MARGIN) return parse_margin(optarg, &r->margin);
  if (c == O_TARGET) return parse_target(optarg, &r->target);
  if (c == O_MAX) return cli_parse_u64(NAME, "--max", optarg, &r->max) ? EXIT_BAD_INPUT : 0;
  if (c == O_TIMEOUT) return parse_seconds("--timeout", optarg, false, &r->timeout_s);
  if (c == O_GRACE) return parse_seconds("--grace", optarg, true, &r->grace_s);
  if (c == O_JSON) r->json = true;
  else if (c == O_MODEL) r->model = optarg;
  else if (c == O_WORKLOAD) r->workload = optarg;
  else if (c == O_STAGE) r->stage = optarg;
  else if (c == O_BATCH) return cli_usage_error(NAME, "--batch is what probe finds; bound it with --min and --max");
  else if (c >= O_BATCH && c < O_SETUP_END) {
    /* --gpu also names the GPU a workload's stage is planned for. */
    if (!r->setup_flag && c != O_GPU) r->setup_flag = name;
    return setup_option(&r->setup, c, optarg) ? EXIT_BAD_INPUT : 0;
  } else return cli_option_error(NAME, c, argv);
  return 0;
}

static int parse_args(int argc, char **argv, struct request *r) {
  static const struct option opts[] = {
      SETUP_OPTIONS,
      {"min", required_argument, NULL, O_MIN},         {"max", required_argument, NULL, O_MAX},
      {"timeout", required_argument, NULL, O_TIMEOUT}, {"json", no_argument, NULL, O_JSON},
      {"model", required_argument, NULL, O_MODEL},     {"grace", required_argument, NULL, O_GRACE},
      {"workload", required_argument, NULL, O_WORKLOAD}, {"stage", required_argument, NULL, O_STAGE},
      {"margin", required_argument, NULL, O_MARGIN}, {"target-effective-batch", required_argument, NULL, O_TARGET},
      {NULL, 0, NULL, 0}};
  *r = (struct request){.min = 1, .max = 4096, .grace_s = -1, .margin = -1};
  setup_request_init(&r->setup, NAME);
  optind = 1;
  opterr = 0;
  int at = -1;
  for (int c; (c = getopt_long(argc, argv, "+:", opts, &at)) != -1; at = -1) {
    int rc = take_option(c, at >= 0 ? opts[at].name : "", argv, r);
    if (rc) return rc;
  }
  if (r->setup_flag && !r->model)
    return cli_usage_error(NAME, "--%s is an estimate option: it needs --model", r->setup_flag);
  if (r->setup.gpu && !r->model && !r->workload)
    return cli_usage_error(NAME, "--gpu needs --model or --workload: the GPU of the estimate to start from");
  if (!r->workload != !r->stage)
    return cli_usage_error(NAME, "--workload and --stage go together: the stage of which workload to confirm");
  if (r->workload && r->model) return cli_usage_error(NAME, "--workload: the workload names its model; no --model");
  bool dashdash = optind > 1 && strcmp(argv[optind - 1], "--") == 0;
  if (!dashdash)
    return cli_usage_error(NAME, optind < argc ? "unexpected argument '%s'; put the command after '--'"
                                               : "no command; see 'vramfit probe --help'%s",
                           optind < argc ? argv[optind] : "");
  if (optind == argc) return cli_usage_error(NAME, "no command after '--'");
  if (r->min < 1 || r->min > r->max)
    return cli_usage_error(NAME, "--min must be at least 1 and at most --max");
  r->cmd = argv + optind;
  /* Time for a trainer to release the GPU: as long as the limit itself, within 1 to 10 s. */
  if (r->grace_s < 0) r->grace_s = r->timeout_s ? fmin(fmax(r->timeout_s, 1), 10) : 10;
  return 0;
}

/* ---- output ---- */

static void print_trial(const struct probe_launch *l, uint64_t batch, uint64_t predicted) {
  printf("batch %llu: %s", (unsigned long long)batch, vf_probe_outcome_name(l->outcome));
  if (l->outcome == VF_PROBE_OOM) printf(" (%s)", vf_oom_source_name(l->oom));
  char peak[32] = "", guess[32] = "";
  if (l->peak_bytes) cli_format_bytes(l->peak_bytes, peak, sizeof peak);
  if (predicted) cli_format_bytes(predicted, guess, sizeof guess);
  printf(", %s%s%s%s%s%s%.1f s\n", peak, peak[0] ? " peak" : "", guess[0] ? " (predicted " : "", guess,
         guess[0] ? ")" : "", peak[0] || guess[0] ? ", " : "", l->seconds);
  fflush(stdout);
}

static json_t *trial_json(const struct probe_launch *l, uint64_t batch, enum vf_probe_move m, uint64_t predicted) {
  return json_pack("{s:I, s:s, s:I, s:o, s:f, s:s, s:o}", "batch", (json_int_t)batch, "outcome",
                   vf_probe_outcome_name(l->outcome), "peak_device_bytes", (json_int_t)l->peak_bytes,
                   "exit_code", l->exit_code < 0 ? json_null() : json_integer(l->exit_code),
                   "seconds", round(l->seconds * 1000) / 1000, "move", vf_probe_move_name(m),
                   "predicted_peak_bytes", predicted ? json_integer((json_int_t)predicted) : json_null());
}

/* The failed launch's own words: the last lines of its stderr (else of its stdout). */
static void print_failure(const struct probe_launch *l, uint64_t batch) {
  const struct probe_tail *t = l->err.len ? &l->err : &l->out;
  fprintf(stderr, "vramfit probe: batch %llu failed with exit status %d and no out-of-memory "
                  "report; the end of its %s:\n",
          (unsigned long long)batch, l->exit_code, t == &l->err ? "stderr" : "output");
  size_t from = t->len > 4096 ? t->len - 4096 : 0;
  unsigned lines = 0;
  for (size_t i = t->len; i > from; i--)
    if (t->buf[i - 1] == '\n' && i < t->len && ++lines == 20) {
      from = i;
      break;
    }
  fwrite(t->buf + from, 1, t->len - from, stderr);
  if (t->len && t->buf[t->len - 1] != '\n') fputc('\n', stderr);
}

/* ---- where to start ---- */

struct start {
  uint64_t hint;          /* the estimator's largest batch that fits; 0: none */
  double range;           /* how far above its point the estimate's range reaches there, a
                           * share of the point; 0: no estimate */
  struct vf_probe_prior prior; /* the estimate's curve around it; slope 0: none */
  struct vf_gpu_spec gpu; /* the GPU the estimate was fitted to */
  char *setup;            /* the estimate's setup for the history; NULL without --model */
  struct probe_stage stage; /* --workload --stage: the stage as planned; stage.cmd NULL otherwise */
};

/* The estimate's curve near the hint, fitted to estimates where vf_probe_prior_batches says
 * (slope 0 when they fail or do not grow). */
static void estimate_curve(const struct setup_context *ctx, const struct vf_setup *s, struct start *st) {
  uint64_t batches[3], peaks[3];
  unsigned n = vf_probe_prior_batches(st->hint, batches);
  for (unsigned i = 0; i < n; i++) {
    struct vf_setup at = *s;
    at.batch = batches[i];
    struct vf_estimate e;
    if (vf_estimate(&ctx->model, &at, ctx->profile, &ctx->conf, &e, NULL)) return;
    peaks[i] = e.device_peak;
  }
  vf_probe_prior_fit(batches, peaks, n, &st->prior);
}

/* How far above the estimate at the hint its range reaches: the estimator's measured spread
 * for setups like this one, the margin a run at the answer needs by default. */
static void estimate_range(const struct setup_context *ctx, const struct vf_setup *s, struct start *st) {
  struct vf_setup at = *s;
  at.batch = st->hint;
  struct vf_estimate e;
  struct vf_ranges r;
  if (vf_estimate(&ctx->model, &at, ctx->profile, &ctx->conf, &e, NULL) || !e.device_peak) return;
  vf_estimate_ranges(&e, vf_uncertainty_for(&ctx->uncertainty, &at), &r);
  st->range = (double)r.kind[VF_PEAK_DEVICE].high / (double)e.device_peak - 1;
}

/* A workload's stage: the command gets the stage's knobs, the search the estimate's start. */
static int stage_hint(struct request *r, struct start *st) {
  int code = probe_stage_prepare(&r->setup, r->workload, r->stage, r->cmd, r->min, r->max, &st->stage);
  if (code) return code;
  r->cmd = st->stage.cmd;
  st->hint = st->stage.hint;
  st->prior = st->stage.prior;
  st->gpu = st->stage.gpu;
  st->setup = strdup(st->stage.setup);
  return st->setup ? EXIT_OK : EXIT_INTERNAL;
}

/* The estimator's largest batch that fits the GPU; 0 without --model, without a GPU (none
 * given, none found) or when by the estimate not even --min fits. Returns an exit code. */
static int estimate_hint(struct request *r, struct start *st) {
  memset(st, 0, sizeof *st);
  if (r->workload) return stage_hint(r, st);
  if (!r->model) return EXIT_OK;
  struct vf_diag d;
  vf_diag_clear(&d);
  if (!r->setup.gpu && vf_gpu_detect(&st->gpu, &d) == 0) r->setup.gpu = "auto";
  struct setup_context ctx;
  int code = setup_context_load(&r->setup, r->model, &ctx);
  if (code) return code;
  st->gpu = ctx.gpu;
  int rc = st->gpu.capacity_bytes ? vf_estimate_max_batch(&ctx.model, &r->setup.setup, ctx.profile,
                                                          &ctx.conf, r->min, r->max, &st->hint, &d)
                                  : 0;
  if (st->hint) estimate_curve(&ctx, &r->setup.setup, st);
  if (st->hint) estimate_range(&ctx, &r->setup.setup, st);
  st->setup = rc ? NULL : history_setup_json(&r->setup, r->model, &ctx);
  setup_context_cleanup(&ctx);
  if (rc) return cli_diag_error(NAME, rc, &d);
  return st->setup ? EXIT_OK : EXIT_INTERNAL;
}

static void print_stage(const struct request *r, const struct start *st) {
  printf("stage %s of %s:", st->stage.name, r->workload);
  const char *key;
  json_t *v;
  int i = 0;
  json_object_foreach(st->stage.knobs, key, v) printf("%s %s %lld", i++ ? "," : "", key, (long long)json_integer_value(v));
  printf("; planned micro batch %llu\n", (unsigned long long)st->stage.planned);
}

static void print_start(const struct request *r, const struct start *st) {
  char capacity[32];
  cli_format_bytes(st->gpu.capacity_bytes, capacity, sizeof capacity);
  const struct vf_gpu_spec *gpu = &st->gpu;
  const char *name = gpu->full_name[0] ? gpu->full_name : gpu->name[0] ? gpu->name : "the GPU";
  if (st->hint)
    printf("starting at batch %llu, the estimate's largest on %s (%s)\n", (unsigned long long)st->hint,
           name, capacity);
  else if (gpu->capacity_bytes)
    printf("by the estimate not even batch %llu fits on %s (%s): starting there\n",
           (unsigned long long)r->min, name, capacity);
  else
    printf("no GPU given (--gpu) or found: no estimate to start from\n");
}

/* The measured peaks steer the search up to the free memory of the GPU the runs get. */
static void steer(struct vf_probe *p, struct vf_nvml *nvml, const struct start *st, bool json) {
  unsigned index;
  struct vf_gpu_sample gpu;
  if (vf_nvml_visible(nvml, &index, NULL) || vf_nvml_sample(nvml, index, &gpu) ||
      !(gpu.fields & VF_FIELD_MEMORY) || !gpu.free_bytes)
    return;
  vf_probe_steer(p, gpu.free_bytes, &st->prior);
  if (json) return;
  char room[32];
  cli_format_bytes(gpu.free_bytes, room, sizeof room);
  printf("steering by the measured peaks: %s free on %s\n", room, gpu.name);
}

/* ---- the search ---- */

struct search {
  struct vf_probe p;
  struct probe_runner runner;
  struct probe_launch *launch;
  json_t *trials;
  struct vf_history *history;
  const char *setup;
};

static void record(const struct search *s, uint64_t batch) {
  const struct probe_launch *l = s->launch;
  struct vf_run run = {.when = (double)l->started, .command = (char *)l->command, .setup = (char *)s->setup,
                       .batch = batch, .exit_code = l->exit_code, .peak_device_bytes = l->peak_bytes,
                       .seconds = l->seconds};
  snprintf(run.source, sizeof run.source, "probe");
  snprintf(run.outcome, sizeof run.outcome, "%s", l->stopped_by ? "interrupted" : vf_probe_outcome_name(l->outcome));
  history_gpu(s->runner.nvml, l->gpu, &run);
  history_add(s->history, NAME, &run);
}

/* Launches until the search is over. Returns an exit code; EXIT_OK also when nothing fitted. */
static int search_run(struct search *s, bool json) {
  enum vf_probe_move m;
  for (uint64_t b; (b = vf_probe_next(&s->p, &m));) {
    uint64_t predicted = m == VF_PROBE_PREDICTED ? vf_probe_predict(&s->p, b) : 0;
    struct vf_diag d;
    vf_diag_clear(&d);
    int rc = probe_launch(&s->runner, b, s->launch, &d);
    if (rc == VF_ENOMEM) return fputs("vramfit probe: out of memory\n", stderr), EXIT_INTERNAL;
    if (rc) return cli_diag_error(NAME, rc, &d);
    record(s, b);
    if (s->launch->stopped_by) return EXIT_OK;
    vf_probe_record(&s->p, b, s->launch->outcome, s->launch->peak_bytes);
    if (json) json_array_append_new(s->trials, trial_json(s->launch, b, m, predicted));
    else print_trial(s->launch, b, predicted);
    if (s->launch->outcome == VF_PROBE_ERROR) {
      print_failure(s->launch, b);
      return EXIT_BAD_INPUT;
    }
  }
  return EXIT_OK;
}

/* Why the batch past the answer was not launched, where the peaks settled it. */
static void print_settled(const struct vf_probe *p) {
  uint64_t batch, predicted, limit;
  if (!vf_probe_settled(p, &batch, &predicted, &limit)) return;
  char at[32], most[32];
  cli_format_bytes(predicted, at, sizeof at);
  cli_format_bytes(limit, most, sizeof most);
  printf("batch %llu not launched: the measured peaks put it at %s, over the %s a launch can hold\n",
         (unsigned long long)batch, at, most);
}

static json_t *settled_json(const struct vf_probe *p) {
  uint64_t batch, predicted, limit;
  if (!vf_probe_settled(p, &batch, &predicted, &limit)) return json_null();
  return json_pack("{s:I, s:I, s:I}", "batch", (json_int_t)batch, "predicted_peak_bytes", (json_int_t)predicted,
                   "limit_bytes", (json_int_t)limit);
}

static void print_result(const struct search *s, const struct request *r) {
  uint64_t fit = vf_probe_result(&s->p);
  if (fit)
    printf("largest batch that fits: %llu (%u launch%s)\n", (unsigned long long)fit, s->p.launches,
           s->p.launches == 1 ? "" : "es");
  else
    printf("no batch fits: batch %llu (--min) ran out of memory\n", (unsigned long long)r->min);
  print_settled(&s->p);
}

/* A stage is confirmed when its planned micro batch fits the real GPU. */
static bool stage_confirmed(const struct search *s, const struct start *st) {
  return vf_probe_result(&s->p) >= st->stage.planned;
}

static void print_stage_result(const struct search *s, const struct start *st) {
  if (stage_confirmed(s, st))
    printf("stage %s confirmed: the planned micro batch %llu fits\n", st->stage.name,
           (unsigned long long)st->stage.planned);
  else
    printf("stage %s not confirmed: the planned micro batch %llu does not fit; plan again with a lower --safety\n",
           st->stage.name, (unsigned long long)st->stage.planned);
}

static json_t *stage_json(const struct search *s, const struct start *st) {
  return json_pack("{s:s, s:O, s:I, s:b}", "name", st->stage.name, "knobs", st->stage.knobs, "planned_batch",
                   (json_int_t)st->stage.planned, "confirmed", stage_confirmed(s, st));
}

/* ---- the advice ---- */

enum margin_source { FROM_OPTION, FROM_ESTIMATE, FROM_DEFAULT };

/* The margin: --margin, else the estimate's range, else the default. */
static double margin_of(const struct request *r, const struct start *st, enum margin_source *from) {
  *from = r->margin >= 0 ? FROM_OPTION : st->range > 0 ? FROM_ESTIMATE : FROM_DEFAULT;
  return *from == FROM_OPTION ? r->margin : *from == FROM_ESTIMATE ? st->range : DEFAULT_MARGIN;
}

struct advice {
  struct vf_probe_advice a;
  double margin;
  enum margin_source from;
  uint64_t target;    /* 0: none */
  const char *wanted; /* where the target came from */
};

static void print_advice(const struct advice *v) {
  static const char *const said[] = {"--margin", "the estimate's range", "the default"};
  const struct vf_probe_advice *a = &v->a;
  printf("recommended: batch %llu, accumulation %llu", (unsigned long long)a->batch,
         (unsigned long long)a->accumulation);
  if (v->target)
    printf(" (effective batch %llu for %s %llu)", (unsigned long long)(a->batch * a->accumulation), v->wanted,
           (unsigned long long)v->target);
  char peak[32], limit[32];
  cli_format_bytes(a->peak_bytes, peak, sizeof peak);
  cli_format_bytes(a->limit_bytes, limit, sizeof limit);
  if (!a->peak_bytes)
    printf(": the largest fit less a %.3g%% margin (%s); no peaks were measured\n", 100 * v->margin,
           said[v->from]);
  else
    printf(": peak %s, under the %s a launch can hold %s a %.3g%% margin (%s)%s\n", peak, limit,
           a->within_margin ? "with" : "but not with", 100 * v->margin, said[v->from],
           a->within_margin ? "" : ": no batch leaves it");
}

static json_t *advice_json(const struct advice *v) {
  static const char *const names[] = {"option", "estimate", "default"};
  const struct vf_probe_advice *a = &v->a;
  if (!a->batch) return json_null();
  return json_pack("{s:I, s:I, s:I, s:I, s:f, s:s, s:b}", "batch", (json_int_t)a->batch, "accumulation",
                   (json_int_t)a->accumulation, "effective_batch", (json_int_t)(a->batch * a->accumulation),
                   "peak_device_bytes", (json_int_t)a->peak_bytes, "margin", v->margin, "margin_source",
                   names[v->from], "within_margin", a->within_margin);
}

/* What the answer cannot say by itself: peaks that did not grow with the batch (a command
 * that ignores it), and a fit at --max (the boundary may lie above; not when --min and --max
 * ask about one batch). */
static json_t *warnings(const struct search *s, const struct request *r) {
  json_t *out = json_array();
  char text[512], low_peak[32], high_peak[32];
  struct vf_probe_point low, high;
  if (vf_probe_flat(&s->p, &low, &high)) {
    cli_format_bytes(low.peak_bytes, low_peak, sizeof low_peak);
    cli_format_bytes(high.peak_bytes, high_peak, sizeof high_peak);
    snprintf(text, sizeof text, "the peaks did not grow with the batch (%s at batch %llu, %s at batch %llu): "
             "the command seems to ignore the batch it is given; put {batch} in its arguments or have it "
             "read VRAMFIT_BATCH", low_peak, (unsigned long long)low.batch, high_peak,
             (unsigned long long)high.batch);
    json_array_append_new(out, json_string(text));
  }
  if (vf_probe_result(&s->p) == r->max && r->min < r->max) {
    snprintf(text, sizeof text, "batch %llu, the --max, fits: a larger batch may fit too; raise --max to "
             "look further", (unsigned long long)r->max);
    json_array_append_new(out, json_string(text));
  }
  size_t i;
  json_t *w;
  json_array_foreach(out, i, w) fprintf(stderr, "vramfit probe: warning: %s\n", json_string_value(w));
  return out;
}

static int report(struct search *s, const struct request *r, const struct start *st, int code) {
  /* A stage keeps the effective batch its plan gave it, unless told otherwise. */
  struct advice v = {.target = r->target ? r->target : st->stage.effective,
                     .wanted = r->target ? "--target-effective-batch" : "the stage's planned effective batch"};
  v.margin = margin_of(r, st, &v.from);
  vf_probe_advise(&s->p, v.margin, v.target, &v.a);
  json_t *warned = code == EXIT_OK ? warnings(s, r) : json_array();
  /* A failed launch still leaves the trials so far for scripts. */
  if (r->json && (code == EXIT_OK || s->p.launches)) {
    json_t *o = json_pack("{s:I, s:I, s:o, s:O}", "max_batch", (json_int_t)vf_probe_result(&s->p),
                          "launches", (json_int_t)s->p.launches, "estimate_batch",
                          st->hint ? json_integer((json_int_t)st->hint) : json_null(), "trials", s->trials);
    json_object_set_new(o, "settled_by_peaks", settled_json(&s->p));
    json_object_set_new(o, "recommended", code == EXIT_OK ? advice_json(&v) : json_null());
    json_object_set_new(o, "warnings", json_incref(warned));
    if (st->stage.cmd) json_object_set_new(o, "stage", stage_json(s, st));
    int rc = cli_print_json(o);
    if (rc) code = rc;
  } else if (code == EXIT_OK) {
    print_result(s, r);
    if (v.a.batch) print_advice(&v);
    if (st->stage.cmd) print_stage_result(s, st);
  }
  json_decref(warned);
  if (code == EXIT_OK && st->stage.cmd && !stage_confirmed(s, st)) return EXIT_NO;
  return code == EXIT_OK && !vf_probe_result(&s->p) ? EXIT_NO : code;
}

/* A stop signal ended the launch's tree: say so, and die of the signal as vramfit would
 * have without catching it. */
static void die_stopped(const struct search *s, uint64_t batch) {
  int sig = s->launch->stopped_by;
  fprintf(stderr, "vramfit probe: stopped by signal %d during the launch at batch %llu; its processes "
                  "were ended\n", sig, (unsigned long long)batch);
  fflush(stdout);
  vf_proc_die_of(sig);
}

int cmd_probe(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) return fputs(usage, stdout), EXIT_OK;
  struct request r;
  int code = parse_args(argc, argv, &r);
  if (code) return code;
  struct start st;
  if ((code = estimate_hint(&r, &st))) return code;
  if (r.workload && !r.json) print_stage(&r, &st);
  if ((r.model || r.workload) && !r.json) print_start(&r, &st);
  struct search s = {.runner = {.cmd = r.cmd, .timeout_s = r.timeout_s, .grace_s = r.grace_s},
                     .setup = st.setup};
  vf_probe_init(&s.p, r.min, r.max, st.hint);
  s.launch = calloc(1, sizeof *s.launch);
  s.trials = json_array();
  /* Without NVML the search works all the same; peaks are unknown. */
  if (vf_nvml_open(&s.runner.nvml, NULL)) s.runner.nvml = NULL;
  else steer(&s.p, s.runner.nvml, &st, r.json);
  s.runner.stop_fd = vf_proc_catch_stop_signals();
  s.history = history_open_for_writing(NAME);
  code = s.launch && s.trials ? search_run(&s, r.json) : EXIT_INTERNAL;
  vf_history_close(s.history);
  if (s.launch && s.launch->stopped_by) die_stopped(&s, vf_probe_next(&s.p, NULL));
  code = report(&s, &r, &st, code);
  vf_nvml_close(s.runner.nvml);
  json_decref(s.trials);
  free(s.launch);
  free(st.setup);
  probe_stage_cleanup(&st.stage);
  return code;
}

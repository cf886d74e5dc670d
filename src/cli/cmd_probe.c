/* vramfit probe [options] -- CMD ARGS...: finds the largest micro batch that fits by running
 * the user's own training command (the search is vf_probe_*, one launch is probe_run.c). */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/probe_run.h"
#include "cli/setup_opts.h"

static const char usage[] =
    "usage: vramfit probe [--min N] [--max N] [--timeout S] [--json]\n"
    "                     [--model MODEL [estimate options]] -- CMD ARGS...\n\n"
    "Finds the largest micro batch that fits by running your own training command at\n"
    "different batches. '{batch}' in ARGS is replaced by the batch to try, and VRAMFIT_BATCH\n"
    "holds it. Make the command short: a few steps (the second step is the peak).\n\n"
    "  --min N       smallest batch to try (1)\n"
    "  --max N       largest batch to try (4096)\n"
    "  --timeout S   a launch still running after S seconds counts as fitting ('timeout'):\n"
    "                it gets SIGTERM, then SIGKILL after as long again (1 to 10 s)\n"
    "  --json        machine-readable output\n"
    "  --model MODEL start at the estimator's largest batch that fits the GPU (--gpu, else\n"
    "                the one NVML finds) for MODEL with the options of 'vramfit estimate'\n"
    "                (--seq, --method, --weights, ...; not --batch)\n\n"
    "A launch fits when it exits 0 and runs out of memory when it fails with an\n"
    "out-of-memory report (PyTorch, CUDA, cuBLAS, cuDNN, NCCL, JAX, TensorFlow, host) in its\n"
    "output. The search starts at the estimate and steps out by an eighth of it, doubling\n"
    "each step (without --model: doubles from --min), then bisects between the largest\n"
    "batch that fitted and the smallest that did not. Peaks are the most the command's\n"
    "processes held on one GPU, sampled through NVML every 0.1 s; 0 when NVML is\n"
    "unavailable (unknown). The command's output is captured (the last 64 KiB of each\n"
    "stream) and shown only when a launch fails.\n\n"
    "Exit status: 0; 1 when not even --min fits; 2 when a launch fails for another reason\n"
    "than memory (the end of its stderr is shown); 3 when CMD cannot be run.\n";

#define NAME "probe"

enum { O_MIN = O_SETUP_END, O_MAX, O_TIMEOUT, O_JSON, O_MODEL };

struct request {
  uint64_t min, max;
  double timeout_s;
  bool json;
  char **cmd;
  const char *model;
  struct setup_request setup;
  const char *setup_flag; /* the first estimate option given; they need --model */
};

static int parse_timeout(const char *text, double *out) {
  char *end;
  double v = strtod(text, &end);
  if (end == text || *end || !isfinite(v) || v <= 0)
    return cli_usage_error(NAME, "--timeout expects seconds above 0, got '%s'", text);
  *out = v;
  return 0;
}

static int take_option(int c, const char *name, char **argv, struct request *r) {
  if (c == O_MIN) return cli_parse_u64(NAME, "--min", optarg, &r->min) ? EXIT_BAD_INPUT : 0;
  if (c == O_MAX) return cli_parse_u64(NAME, "--max", optarg, &r->max) ? EXIT_BAD_INPUT : 0;
  if (c == O_TIMEOUT) return parse_timeout(optarg, &r->timeout_s);
  if (c == O_JSON) r->json = true;
  else if (c == O_MODEL) r->model = optarg;
  else if (c == O_BATCH) return cli_usage_error(NAME, "--batch is what probe finds; bound it with --min and --max");
  else if (c >= O_BATCH && c < O_SETUP_END) {
    if (!r->setup_flag) r->setup_flag = name;
    return setup_option(&r->setup, c, optarg) ? EXIT_BAD_INPUT : 0;
  } else return cli_option_error(NAME, c, argv);
  return 0;
}

static int parse_args(int argc, char **argv, struct request *r) {
  static const struct option opts[] = {
      SETUP_OPTIONS,
      {"min", required_argument, NULL, O_MIN},         {"max", required_argument, NULL, O_MAX},
      {"timeout", required_argument, NULL, O_TIMEOUT}, {"json", no_argument, NULL, O_JSON},
      {"model", required_argument, NULL, O_MODEL},     {NULL, 0, NULL, 0}};
  *r = (struct request){.min = 1, .max = 4096};
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
  bool dashdash = optind > 1 && strcmp(argv[optind - 1], "--") == 0;
  if (!dashdash)
    return cli_usage_error(NAME, optind < argc ? "unexpected argument '%s'; put the command after '--'"
                                               : "no command; see 'vramfit probe --help'%s",
                           optind < argc ? argv[optind] : "");
  if (optind == argc) return cli_usage_error(NAME, "no command after '--'");
  if (r->min < 1 || r->min > r->max)
    return cli_usage_error(NAME, "--min must be at least 1 and at most --max");
  r->cmd = argv + optind;
  return 0;
}

/* ---- output ---- */

static void print_trial(const struct probe_launch *l, uint64_t batch) {
  printf("batch %llu: %s", (unsigned long long)batch, vf_probe_outcome_name(l->outcome));
  if (l->outcome == VF_PROBE_OOM) printf(" (%s)", vf_oom_source_name(l->oom));
  char peak[32] = "";
  if (l->peak_bytes) cli_format_bytes(l->peak_bytes, peak, sizeof peak);
  printf(", %s%s%.1f s\n", peak, peak[0] ? " peak, " : "", l->seconds);
  fflush(stdout);
}

static json_t *trial_json(const struct probe_launch *l, uint64_t batch) {
  return json_pack("{s:I, s:s, s:I, s:o, s:f}", "batch", (json_int_t)batch, "outcome",
                   vf_probe_outcome_name(l->outcome), "peak_device_bytes", (json_int_t)l->peak_bytes,
                   "exit_code", l->exit_code < 0 ? json_null() : json_integer(l->exit_code),
                   "seconds", round(l->seconds * 1000) / 1000);
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

/* The estimator's largest batch that fits the GPU; 0 without --model, without a GPU (none
 * given, none found) or when by the estimate not even --min fits. Returns an exit code. */
static int estimate_hint(struct request *r, uint64_t *hint, struct vf_gpu_spec *gpu) {
  *hint = 0;
  memset(gpu, 0, sizeof *gpu);
  if (!r->model) return EXIT_OK;
  struct vf_diag d;
  vf_diag_clear(&d);
  if (!r->setup.gpu && vf_gpu_detect(gpu, &d) == 0) r->setup.gpu = "auto";
  struct setup_context ctx;
  int code = setup_context_load(&r->setup, r->model, &ctx);
  if (code) return code;
  *gpu = ctx.gpu;
  int rc = gpu->capacity_bytes ? vf_estimate_max_batch(&ctx.model, &r->setup.setup, &ctx.profile,
                                                       &ctx.conf, r->min, r->max, hint, &d)
                               : 0;
  setup_context_cleanup(&ctx);
  return rc ? cli_diag_error(NAME, rc, &d) : EXIT_OK;
}

static void print_start(const struct request *r, uint64_t hint, const struct vf_gpu_spec *gpu) {
  char capacity[32];
  cli_format_bytes(gpu->capacity_bytes, capacity, sizeof capacity);
  const char *name = gpu->full_name[0] ? gpu->full_name : gpu->name[0] ? gpu->name : "the GPU";
  if (hint)
    printf("starting at batch %llu, the estimate's largest on %s (%s)\n", (unsigned long long)hint,
           name, capacity);
  else if (gpu->capacity_bytes)
    printf("by the estimate not even batch %llu fits on %s (%s): starting there\n",
           (unsigned long long)r->min, name, capacity);
  else
    printf("no GPU given (--gpu) or found: no estimate to start from\n");
}

/* ---- the search ---- */

struct search {
  struct vf_probe p;
  struct probe_runner runner;
  struct probe_launch *launch;
  json_t *trials;
};

/* Launches until the search is over. Returns an exit code; EXIT_OK also when nothing fitted. */
static int search_run(struct search *s, bool json) {
  for (uint64_t b; (b = vf_probe_next(&s->p));) {
    struct vf_diag d;
    vf_diag_clear(&d);
    int rc = probe_launch(&s->runner, b, s->launch, &d);
    if (rc == VF_ENOMEM) return fputs("vramfit probe: out of memory\n", stderr), EXIT_INTERNAL;
    if (rc) return cli_diag_error(NAME, rc, &d);
    vf_probe_record(&s->p, b, s->launch->outcome);
    if (json) json_array_append_new(s->trials, trial_json(s->launch, b));
    else print_trial(s->launch, b);
    if (s->launch->outcome == VF_PROBE_ERROR) {
      print_failure(s->launch, b);
      return EXIT_BAD_INPUT;
    }
  }
  return EXIT_OK;
}

static void print_result(const struct search *s, const struct request *r) {
  uint64_t fit = vf_probe_result(&s->p);
  if (fit)
    printf("largest batch that fits: %llu (%u launch%s)\n", (unsigned long long)fit, s->p.launches,
           s->p.launches == 1 ? "" : "es");
  else
    printf("no batch fits: batch %llu (--min) ran out of memory\n", (unsigned long long)r->min);
}

int cmd_probe(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) return fputs(usage, stdout), EXIT_OK;
  struct request r;
  int code = parse_args(argc, argv, &r);
  if (code) return code;
  uint64_t hint;
  struct vf_gpu_spec gpu;
  if ((code = estimate_hint(&r, &hint, &gpu))) return code;
  if (r.model && !r.json) print_start(&r, hint, &gpu);
  struct search s = {.runner = {.cmd = r.cmd, .timeout_s = r.timeout_s}};
  vf_probe_init(&s.p, r.min, r.max, hint);
  s.launch = malloc(sizeof *s.launch);
  s.trials = json_array();
  /* Without NVML the search works all the same; peaks are unknown. */
  if (vf_nvml_open(&s.runner.nvml, NULL)) s.runner.nvml = NULL;
  code = s.launch && s.trials ? search_run(&s, r.json) : EXIT_INTERNAL;
  /* A failed launch still leaves the trials so far for scripts. */
  if (r.json && (code == EXIT_OK || s.p.launches)) {
    json_t *o = json_pack("{s:I, s:I, s:o, s:O}", "max_batch", (json_int_t)vf_probe_result(&s.p),
                          "launches", (json_int_t)s.p.launches, "estimate_batch",
                          hint ? json_integer((json_int_t)hint) : json_null(), "trials", s.trials);
    int rc = cli_print_json(o);
    if (rc) code = rc;
  } else if (code == EXIT_OK) {
    print_result(&s, &r);
  }
  if (code == EXIT_OK && !vf_probe_result(&s.p)) code = EXIT_NO;
  vf_nvml_close(s.runner.nvml);
  json_decref(s.trials);
  free(s.launch);
  return code;
}

/* vramfit probe [options] -- CMD ARGS...: finds the largest micro batch that fits by running
 * the user's own training command (the search is vf_probe_*, one launch is probe_run.c). */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/probe_run.h"

static const char usage[] =
    "usage: vramfit probe [--min N] [--max N] [--timeout S] [--json] -- CMD ARGS...\n\n"
    "Finds the largest micro batch that fits by running your own training command at\n"
    "different batches. '{batch}' in ARGS is replaced by the batch to try, and VRAMFIT_BATCH\n"
    "holds it. Make the command short: a few steps (the second step is the peak).\n\n"
    "  --min N       smallest batch to try (1)\n"
    "  --max N       largest batch to try (4096)\n"
    "  --timeout S   a launch still running after S seconds counts as fitting ('timeout'):\n"
    "                it gets SIGTERM, then SIGKILL after as long again (1 to 10 s)\n"
    "  --json        machine-readable output\n\n"
    "A launch fits when it exits 0 and runs out of memory when it fails with an\n"
    "out-of-memory report (PyTorch, CUDA, cuBLAS, cuDNN, NCCL, JAX, TensorFlow, host) in its\n"
    "output. The search doubles from --min, then bisects between the largest batch that\n"
    "fitted and the smallest that did not. Peaks are the most the command's processes held\n"
    "on one GPU, sampled through NVML every 0.1 s; 0 when NVML is unavailable (unknown).\n\n"
    "Exit status: 0; 1 when not even --min fits; 2 when a launch fails for another reason\n"
    "than memory (the end of its stderr is shown); 3 when CMD cannot be run.\n";

#define NAME "probe"

enum { O_MIN = 256, O_MAX, O_TIMEOUT, O_JSON };

struct request {
  uint64_t min, max;
  double timeout_s;
  bool json;
  char **cmd;
};

static int parse_timeout(const char *text, double *out) {
  char *end;
  double v = strtod(text, &end);
  if (end == text || *end || !isfinite(v) || v <= 0)
    return cli_usage_error(NAME, "--timeout expects seconds above 0, got '%s'", text);
  *out = v;
  return 0;
}

static int parse_args(int argc, char **argv, struct request *r) {
  static const struct option opts[] = {
      {"min", required_argument, NULL, O_MIN},         {"max", required_argument, NULL, O_MAX},
      {"timeout", required_argument, NULL, O_TIMEOUT}, {"json", no_argument, NULL, O_JSON},
      {NULL, 0, NULL, 0}};
  *r = (struct request){.min = 1, .max = 4096};
  optind = 1;
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, "+:", opts, NULL)) != -1;) {
    int rc = 0;
    if (c == O_MIN) rc = cli_parse_u64(NAME, "--min", optarg, &r->min) ? EXIT_BAD_INPUT : 0;
    else if (c == O_MAX) rc = cli_parse_u64(NAME, "--max", optarg, &r->max) ? EXIT_BAD_INPUT : 0;
    else if (c == O_TIMEOUT) rc = parse_timeout(optarg, &r->timeout_s);
    else if (c == O_JSON) r->json = true;
    else rc = cli_option_error(NAME, c, argv);
    if (rc) return rc;
  }
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
  struct search s = {.runner = {.cmd = r.cmd, .timeout_s = r.timeout_s}};
  vf_probe_init(&s.p, r.min, r.max, 0);
  s.launch = malloc(sizeof *s.launch);
  s.trials = json_array();
  /* Without NVML the search works all the same; peaks are unknown. */
  if (vf_nvml_open(&s.runner.nvml, NULL)) s.runner.nvml = NULL;
  code = s.launch && s.trials ? search_run(&s, r.json) : EXIT_INTERNAL;
  /* A failed launch still leaves the trials so far for scripts. */
  if (r.json && (code == EXIT_OK || s.p.launches)) {
    json_t *o = json_pack("{s:I, s:I, s:O}", "max_batch", (json_int_t)vf_probe_result(&s.p),
                          "launches", (json_int_t)s.p.launches, "trials", s.trials);
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

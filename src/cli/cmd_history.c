/* vramfit history [--json] [--limit N]: the runs measured on this machine. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/history_cli.h"

static const char usage[] =
    "usage: vramfit history [--json] [--limit N]\n\n"
    "The runs measured on this machine, oldest first: every launch of 'vramfit probe' and every\n"
    "'vramfit watch -- CMD', with the command, the estimate's setup (probe --model), the batch,\n"
    "the outcome, the peak the run's processes held on one GPU (NVML), the GPU, the driver and\n"
    "when it started. 'vramfit estimate' and 'plan' of a setup measured here compare\n"
    "themselves with it (and --calibrate to it).\n\n"
    "  --json      {\"store\": path, \"runs\": [{\"when\", \"command\", \"setup\", \"batch\",\n"
    "              \"outcome\", \"peak_device_bytes\", \"gpu\", ...}]}\n"
    "  --limit N   only the last N runs\n\n"
    "The store is $XDG_STATE_HOME/vramfit/history.sqlite3 (default\n"
    "~/.local/state/vramfit/); delete it to forget everything.\n";

#define NAME "history"

static json_t *text_or_null(const char *s) { return s && s[0] ? json_string(s) : json_null(); }

static json_t *run_json(const struct vf_run *r) {
  char when[32];
  history_stamp(r->when, HISTORY_UTC, true, when, sizeof when);
  json_t *setup = r->setup ? json_loads(r->setup, 0, NULL) : NULL;
  json_t *o = json_pack("{s:I, s:s, s:s, s:s, s:o, s:o, s:s, s:o, s:I, s:o, s:o, s:o, s:f}", "id",
                        (json_int_t)r->id, "when", when, "source", r->source, "command", r->command,
                        "setup", setup ? setup : json_null(), "batch",
                        r->batch ? json_integer((json_int_t)r->batch) : json_null(), "outcome", r->outcome,
                        "exit_code", r->exit_code >= 0 ? json_integer(r->exit_code) : json_null(),
                        "peak_device_bytes", (json_int_t)r->peak_device_bytes, "gpu", text_or_null(r->gpu),
                        "gpu_uuid", text_or_null(r->gpu_uuid), "driver", text_or_null(r->driver),
                        "seconds", r->seconds);
  return o;
}

static void print_runs(const struct vf_run *runs, size_t n, const char *path) {
  if (!n) {
    printf("no runs kept yet: 'vramfit probe' and 'vramfit watch -- CMD' keep theirs in %s\n", path);
    return;
  }
  printf("%-16s  %-6s %6s  %-11s %11s  %-24s  %s\n", "WHEN", "SOURCE", "BATCH", "OUTCOME", "PEAK", "GPU",
         "COMMAND");
  for (size_t i = 0; i < n; i++) {
    const struct vf_run *r = &runs[i];
    char when[32], batch[24] = "-", peak[32] = "-";
    history_stamp(r->when, HISTORY_LOCAL, false, when, sizeof when);
    if (r->batch) snprintf(batch, sizeof batch, "%llu", (unsigned long long)r->batch);
    if (r->peak_device_bytes) cli_format_bytes(r->peak_device_bytes, peak, sizeof peak);
    printf("%-16s  %-6s %6s  %-11s %11s  %-24.24s  %s\n", when, r->source, batch, r->outcome, peak,
           r->gpu[0] ? r->gpu : "-", r->command);
  }
}

static int parse_args(int argc, char **argv, bool *json, uint64_t *limit) {
  static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
                                       {"limit", required_argument, NULL, 'n'},
                                       {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, ":", opts, NULL)) != -1;) {
    if (c == 'j') *json = true;
    else if (c == 'n') {
      if (cli_parse_u64(NAME, "--limit", optarg, limit)) return EXIT_BAD_INPUT;
    } else return cli_option_error(NAME, c, argv);
  }
  if (optind < argc) return cli_usage_error(NAME, "unexpected argument '%s'", argv[optind]);
  return 0;
}

/* The runs kept so far; none (and no error) before the first was kept. */
static int load(const char *dir, uint64_t limit, struct vf_run **runs, size_t *n) {
  struct vf_history *h;
  struct vf_diag d;
  vf_diag_clear(&d);
  *runs = NULL;
  *n = 0;
  int rc = vf_history_open(dir, false, &h, &d);
  if (rc == VF_ENOTFOUND) return EXIT_OK;
  if (!rc) rc = vf_history_list(h, limit, runs, n, &d);
  vf_history_close(h);
  return rc ? cli_diag_error(NAME, rc, &d) : EXIT_OK;
}

int cmd_history(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) return fputs(usage, stdout), EXIT_OK;
  bool json = false;
  uint64_t limit = 0;
  int code = parse_args(argc, argv, &json, &limit);
  if (code) return code;
  char dir[1024], path[1100];
  if (vf_history_dir(dir, sizeof dir))
    return fprintf(stderr, "vramfit history: neither XDG_STATE_HOME nor HOME says where the history is\n"),
           EXIT_ENV;
  snprintf(path, sizeof path, "%s/" VF_HISTORY_FILE, dir);
  struct vf_run *runs;
  size_t n;
  if ((code = load(dir, limit, &runs, &n))) return code;
  if (json) {
    json_t *list = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(list, run_json(&runs[i]));
    code = cli_print_json(json_pack("{s:s, s:o}", "store", path, "runs", list));
  } else {
    print_runs(runs, n, path);
  }
  vf_history_runs_free(runs, n);
  return code;
}

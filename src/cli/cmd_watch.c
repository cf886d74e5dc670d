/* vramfit watch: samples the GPUs, optionally while running a command, and warns about
 * process memory that keeps growing and GPUs that sit idle. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/gpu_view.h"
#include "cli/history_cli.h"
#include "cli/watch.h"

static const char usage[] =
    "usage: vramfit watch [--interval S] [--count N] [--log FILE] [--plain]\n"
    "                     [--warmup S] [--window S] [--grace S] [--pid P | -- CMD ARGS...]\n\n"
    "Samples every GPU (or the GPUs a process tree uses) every S seconds, N times, until\n"
    "the watched command or process exits, or until interrupted. On a terminal it shows a\n"
    "live view (keys: <-/-> or 0-9 switch GPU, q quit); otherwise one line per GPU per\n"
    "sample.\n\n"
    "  --interval S  seconds between samples (default 1; 0.1 costs well under 1% of a core)\n"
    "  --count N     stop after N samples\n"
    "  --log FILE    append one row per GPU per sample to FILE.csv or FILE.jsonl, flushed\n"
    "                every sample, warnings included\n"
    "  --plain       lines even on a terminal\n"
    "  --pid P       watch process P and its children; stop when it exits\n"
    "  -- CMD ARGS   run CMD, watch its process tree, exit with its exit code; the run is\n"
    "                kept in the history ('vramfit history')\n"
    "  --grace S     seconds from SIGTERM to SIGKILL when CMD's tree is ended (default 10)\n"
    "  --warmup S    ignore a process's first S seconds when judging growth, and the\n"
    "                first S seconds the watched processes hold memory when judging\n"
    "                headroom (default 120)\n"
    "  --window S    judge growth, under-use and headroom over the last S seconds (default\n"
    "                600 for growth, 300 for under-use and headroom)\n\n"
    "Warns when a process's memory keeps growing after warm-up (steps that level off are\n"
    "the allocator's normal caching), with the time left until the GPU is full at that rate;\n"
    "when utilization and power stay low while a watched process holds memory; and when the\n"
    "watched processes hold less than half of a GPU's memory for the whole window after\n"
    "warm-up ('memory headroom': the share used and how far the batch could grow before they\n"
    "hold 90% of it, with what the last plan made for this project recommends).\n\n"
    "CMD runs in its own process group (its stdin is /dev/null when ours is a terminal).\n"
    "Ctrl-C, SIGTERM or SIGHUP to vramfit, and q in the view, pass the signal on to every\n"
    "process of CMD's tree (SIGINT for Ctrl-C and q, SIGTERM otherwise), and SIGKILL follows\n"
    "after the grace period; processes CMD leaves behind when it exits are ended the same\n"
    "way. No process of the tree outlives vramfit.\n";

#define NAME "watch"

#define GRACE_S 10 /* from SIGTERM to SIGKILL when the command's tree is ended */

static int parse_seconds(const char *flag, const char *text, double min, double *out) {
  char *end;
  double v = strtod(text, &end);
  if (end == text || *end || !isfinite(v) || v < min)
    return cli_usage_error(NAME, "%s expects seconds (at least %g), got '%s'", flag, min, text);
  *out = v;
  return 0;
}

static int parse_args(int argc, char **argv, struct watch_opts *o) {
  static const struct option opts[] = {
      {"interval", required_argument, NULL, 'i'}, {"count", required_argument, NULL, 'c'},
      {"log", required_argument, NULL, 'l'},      {"pid", required_argument, NULL, 'p'},
      {"plain", no_argument, NULL, 'P'},          {"warmup", required_argument, NULL, 'w'},
      {"window", required_argument, NULL, 'W'},   {"grace", required_argument, NULL, 'g'},
      {NULL, 0, NULL, 0}};
  *o = (struct watch_opts){.interval = 1, .underuse_window_s = 300, .grace_s = GRACE_S};
  vf_trend_config_default(&o->trend);
  optind = 1;
  opterr = 0;
  uint64_t pid = 0;
  for (int c; (c = getopt_long(argc, argv, "+:", opts, NULL)) != -1;) {
    int rc = 0;
    if (c == 'i') rc = parse_seconds("--interval", optarg, 0.01, &o->interval);
    else if (c == 'c') rc = cli_parse_u64(NAME, "--count", optarg, &o->count) ? EXIT_BAD_INPUT : 0;
    else if (c == 'l') o->log_path = optarg;
    else if (c == 'p') rc = cli_parse_u64(NAME, "--pid", optarg, &pid) ? EXIT_BAD_INPUT : 0;
    else if (c == 'P') o->plain = true;
    else if (c == 'w') rc = parse_seconds("--warmup", optarg, 0, &o->trend.warmup_s);
    else if (c == 'W') rc = parse_seconds("--window", optarg, 0.1, &o->trend.window_s);
    else if (c == 'g') rc = parse_seconds("--grace", optarg, 0, &o->grace_s);
    else rc = cli_option_error(NAME, c, argv);
    if (rc) return rc;
    if (c == 'W') o->underuse_window_s = o->trend.window_s;
  }
  o->pid = (pid_t)pid;
  bool dashdash = optind > 1 && strcmp(argv[optind - 1], "--") == 0;
  if (optind < argc && !dashdash)
    return cli_usage_error(NAME, "unexpected argument '%s'; put the command after '--'",
                           argv[optind]);
  if (optind < argc) o->cmd = argv + optind;
  if (dashdash && !o->cmd) return cli_usage_error(NAME, "no command after '--'");
  if (o->cmd && o->pid) return cli_usage_error(NAME, "--pid and a command exclude each other");
  if (o->pid && (pid != (uint64_t)o->pid || (kill(o->pid, 0) && errno == ESRCH)))
    return cli_usage_error(NAME, "--pid: no process %llu", (unsigned long long)pid);
  return 0;
}

/* ---- plain output ---- */

static void print_procs(const struct watch *w, unsigned gpu) {
  unsigned shown = 0, more = 0;
  for (size_t i = 0; i < w->nprocs; i++) {
    const struct wproc *p = &w->procs[i];
    if (p->gpu != gpu || !p->seen || !p->watched) continue;
    if (shown++ == 3) {
      more++;
      continue;
    }
    char mem[32];
    gpu_view_bytes(p->used_bytes, mem, sizeof mem);
    printf("%s %u %s %s", shown == 1 ? "  |" : ",", p->pid, p->name, mem);
    if (p->trend.state == VF_TREND_GROWING)
      printf(" (+%.1f MiB/min)", p->trend.slope_bps * 60 / 1048576.0);
  }
  if (more) printf(", %u more", more);
}

static void print_sample(const struct watch *w) {
  for (unsigned i = 0; i < w->ngpus; i++) {
    if (!watch_gpu_shown(w, i)) continue;
    char line[512];
    gpu_view_line(&w->gpus[i].s, w->gpus[i].err, line, sizeof line);
    printf("[%7.1fs] %s", w->now, line);
    print_procs(w, i);
    putchar('\n');
  }
  for (size_t k = 0; k < w->nwarn; k++) printf("warning: %s\n", w->warn[k]);
  fflush(stdout);
}

/* ---- the loop ---- */

struct run {
  struct watch w;
  struct watch_log *log;
  struct tui *tui;
  struct vf_child child;
  bool has_child;
  int stop_fd;     /* readable once a stop signal arrived */
  int passed_on;   /* the signal passed on to the command's tree; 0: none yet */
  double kill_at;  /* when SIGKILL follows it */
  double start, next;
  time_t started;
};

static int take_sample(struct run *r) {
  int rc = watch_sample(&r->w, cli_monotonic() - r->start);
  if (rc) return rc;
  if (r->log) watch_log_rows(r->log, &r->w);
  if (r->tui) tui_draw(r->tui, &r->w);
  else print_sample(&r->w);
  return 0;
}

static void to_view(void *tui, const char *buf, size_t n) { tui_output(tui, buf, n); }

static void drain(struct run *r, int *fd) { cli_drain(fd, to_view, r->tui); }

/* Sleeps until the next sample, a key, command output, a stop signal or the command's exit. */
static void wait_events(struct run *r, double timeout_s) {
  struct pollfd fds[5];
  nfds_t n = 0;
  int *owners[5];
  if (r->has_child && !r->child.exited && r->child.pidfd >= 0)
    fds[n] = (struct pollfd){.fd = r->child.pidfd, .events = POLLIN}, owners[n++] = NULL;
  if (r->child.out_fd >= 0)
    fds[n] = (struct pollfd){.fd = r->child.out_fd, .events = POLLIN}, owners[n++] = &r->child.out_fd;
  if (r->child.err_fd >= 0)
    fds[n] = (struct pollfd){.fd = r->child.err_fd, .events = POLLIN}, owners[n++] = &r->child.err_fd;
  if (r->tui) fds[n] = (struct pollfd){.fd = STDIN_FILENO, .events = POLLIN}, owners[n++] = NULL;
  /* The pipe stays readable once a signal came: after that it would only spin the loop. */
  if (r->stop_fd >= 0 && !vf_proc_stop_signal())
    fds[n] = (struct pollfd){.fd = r->stop_fd, .events = POLLIN}, owners[n++] = NULL;
  /* Without a pidfd the child is polled for at least ten times a second. */
  if (r->has_child && r->child.pidfd < 0 && timeout_s > 0.1) timeout_s = 0.1;
  int ms = timeout_s < 0 ? -1 : (int)ceil(timeout_s * 1000);
  if (poll(fds, n, ms) <= 0) return;
  for (nfds_t i = 0; i < n; i++)
    if (fds[i].revents && owners[i]) drain(r, owners[i]);
}

static bool pid_alive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

static bool finished(struct run *r) {
  const struct watch_opts *o = &r->w.o;
  bool counted = o->count && r->w.samples >= o->count;
  if (r->has_child) return vf_proc_wait(&r->child, false) == 1;
  if (vf_proc_stop_signal() || counted) return true;
  return o->pid && !pid_alive(o->pid);
}

/* Interrupts the command's tree once; SIGKILL follows after the grace period. */
static void pass_on(struct run *r, int sig) {
  if (r->passed_on) return;
  r->passed_on = sig;
  vf_proc_signal_tree(&r->child, sig);
  r->kill_at = cli_monotonic() + r->w.o.grace_s;
}

static void escalate(struct run *r) {
  if (!r->passed_on || cli_monotonic() < r->kill_at) return;
  vf_proc_signal_tree(&r->child, SIGKILL);
  r->kill_at = INFINITY;
}

static int loop(struct run *r) {
  const struct watch_opts *o = &r->w.o;
  r->start = cli_monotonic();
  r->next = 0;
  while (!finished(r)) {
    int stop = vf_proc_stop_signal();
    double now = cli_monotonic() - r->start;
    bool sampling = !o->count || r->w.samples < o->count;
    if (sampling && !stop && now >= r->next) {
      int rc = take_sample(r);
      if (rc) return rc;
      r->next = fmax(r->next + o->interval, now);
      continue;
    }
    if (r->tui && !tui_keys(r->tui, &r->w)) {
      if (!r->has_child) break;
      pass_on(r, SIGINT); /* quitting the view interrupts the command */
    }
    if (stop && r->has_child) pass_on(r, stop == SIGINT ? SIGINT : SIGTERM);
    escalate(r);
    double wait_s = sampling && !stop ? r->next - (cli_monotonic() - r->start) : 0.2;
    if (r->passed_on) wait_s = fmin(wait_s, r->kill_at - cli_monotonic());
    wait_events(r, fmax(wait_s, 0));
  }
  return 0;
}

static int start_child(struct run *r) {
  struct vf_diag d;
  vf_diag_clear(&d);
  bool capture = r->tui != NULL;
  /* In its own process group the command cannot read the terminal: it would be stopped. */
  bool null_stdin = capture || isatty(STDIN_FILENO);
  r->started = time(NULL);
  int rc = vf_proc_spawn(r->w.o.cmd, capture, null_stdin, &r->child, &d);
  if (rc) return cli_diag_error(NAME, rc, &d);
  r->has_child = true;
  r->w.tree = &r->child;
  return 0;
}

static int open_outputs(struct run *r) {
  const struct watch_opts *o = &r->w.o;
  if (o->log_path) {
    int rc = watch_log_open(o->log_path, &r->log);
    if (rc == VF_EINVAL)
      return cli_usage_error(NAME, "--log: '%s' must end in .csv or .jsonl", o->log_path);
    if (rc)
      return cli_usage_error(NAME, "--log: cannot write '%s': %s", o->log_path, strerror(errno));
  }
  int rc = gpu_view_open(NAME, &r->w.nvml);
  if (rc) return rc;
  r->w.ngpus = vf_nvml_count(r->w.nvml);
  r->w.gpus = calloc(r->w.ngpus ? r->w.ngpus : 1, sizeof *r->w.gpus);
  if (!r->w.gpus) {
    fprintf(stderr, "vramfit watch: out of memory\n");
    return EXIT_INTERNAL;
  }
  if (!o->plain) r->tui = tui_open();
  return 0;
}

/* What the last plan made for this project recommends, for the memory headroom warning. */
static void last_plan(struct watch *w) {
  char *json, *about;
  if (history_last_plan(NAME, &json, &about)) return;
  json_t *root = json_loads(json, 0, NULL), *rec = json_object_get(root, "recommended");
  json_t *batch = json_object_get(rec, "batch"), *peak = json_object_get(rec, "peak_device_bytes");
  char at[48] = "";
  if (json_is_integer(peak)) {
    snprintf(at, sizeof at, " at a peak of ");
    cli_format_bytes((uint64_t)json_integer_value(peak), at + strlen(at), sizeof at - strlen(at));
  }
  if (json_is_integer(batch))
    snprintf(w->plan, sizeof w->plan, "the last plan made for this project (%s) recommends batch %lld%s", about,
             (long long)json_integer_value(batch), at);
  json_decref(root);
  free(json);
  free(about);
}

/* Ends what is left of the command's tree (all of it when the loop failed); after a signal
 * was passed on, SIGKILL comes when its grace period would have ended. */
static void end_child(struct run *r) {
  if (!r->has_child) return;
  double grace = r->passed_on ? fmax(0, r->kill_at - cli_monotonic()) : r->w.o.grace_s;
  vf_proc_end_tree(&r->child, SIGTERM, isfinite(grace) ? grace : 0);
  watch_record(&r->w, r->started, cli_monotonic() - r->start, r->child.exited ? r->child.code : -1,
               r->passed_on);
}

static void finish(struct run *r) {
  tui_close(r->tui);
  vf_proc_close(&r->child);
  watch_log_close(r->log);
  watch_free(&r->w);
  vf_nvml_close(r->w.nvml);
}

int cmd_watch(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) return fputs(usage, stdout), EXIT_OK;
  struct run r = {.child = VF_CHILD_NONE, .stop_fd = -1};
  int rc = parse_args(argc, argv, &r.w.o);
  if (rc) return rc;
  r.w.root = r.w.o.pid;
  r.stop_fd = vf_proc_catch_stop_signals();
  signal(SIGPIPE, SIG_IGN); /* a closed stdout must not kill us before the command ends */
  rc = open_outputs(&r);
  if (!rc) last_plan(&r.w);
  if (!rc && r.w.o.cmd) rc = start_child(&r);
  if (!rc && loop(&r) != 0) {
    fprintf(stderr, "vramfit watch: out of memory\n");
    rc = EXIT_INTERNAL;
  }
  end_child(&r);
  int code = rc ? rc : !r.has_child ? EXIT_OK : r.child.exited ? r.child.code : EXIT_INTERNAL;
  finish(&r);
  return code;
}

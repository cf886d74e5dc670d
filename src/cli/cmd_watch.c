/* vramfit watch: samples the GPUs, optionally while running a command, and warns about
 * process memory that keeps growing and GPUs that sit idle. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/gpu_view.h"
#include "cli/watch.h"

static const char usage[] =
    "usage: vramfit watch [--interval S] [--count N] [--log FILE] [--plain]\n"
    "                     [--warmup S] [--window S] [--pid P | -- CMD ARGS...]\n\n"
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
    "  -- CMD ARGS   run CMD, watch its process tree, exit with its exit code\n"
    "  --warmup S    ignore a process's first S seconds when judging growth (default 120)\n"
    "  --window S    judge growth and under-use over the last S seconds (default 600 for\n"
    "                growth, 300 for under-use)\n\n"
    "Warns when a process's memory keeps growing after warm-up (steps that level off are\n"
    "the allocator's normal caching), with the time left until the GPU is full at that rate,\n"
    "and when utilization and power stay low while a watched process holds memory.\n";

#define NAME "watch"

static volatile sig_atomic_t stop_sig, stop_from_process;

/* A signal typed at the terminal already reached the command (same process group); one
 * sent to vramfit alone is passed on. */
static void on_stop(int sig, siginfo_t *info, void *ctx) {
  (void)ctx;
  stop_sig = sig;
  stop_from_process = info->si_code == SI_USER || info->si_code == SI_QUEUE;
}

static void catch_signals(void) {
  struct sigaction sa = {.sa_sigaction = on_stop, .sa_flags = SA_SIGINFO};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  signal(SIGPIPE, SIG_IGN); /* a closed stdout must not kill us before the command ends */
}

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
      {"window", required_argument, NULL, 'W'},   {NULL, 0, NULL, 0}};
  *o = (struct watch_opts){.interval = 1, .underuse_window_s = 300};
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
  bool has_child, child_done;
  int child_code;
  double start, next;
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

static void reap(struct run *r) {
  if (r->has_child && !r->child_done && vf_child_wait(&r->child, false, &r->child_code) == 1)
    r->child_done = true;
}

/* Sleeps until the next sample, a key, command output or the command's exit. */
static void wait_events(struct run *r, double timeout_s) {
  struct pollfd fds[4];
  nfds_t n = 0;
  int *owners[4];
  if (r->has_child && !r->child_done && r->child.pidfd >= 0)
    fds[n] = (struct pollfd){.fd = r->child.pidfd, .events = POLLIN}, owners[n++] = NULL;
  if (r->child.out_fd >= 0)
    fds[n] = (struct pollfd){.fd = r->child.out_fd, .events = POLLIN}, owners[n++] = &r->child.out_fd;
  if (r->child.err_fd >= 0)
    fds[n] = (struct pollfd){.fd = r->child.err_fd, .events = POLLIN}, owners[n++] = &r->child.err_fd;
  if (r->tui) fds[n] = (struct pollfd){.fd = STDIN_FILENO, .events = POLLIN}, owners[n++] = NULL;
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
  if (r->has_child) return r->child_done;
  if (stop_sig || counted) return true;
  return o->pid && !pid_alive(o->pid);
}

static int loop(struct run *r) {
  const struct watch_opts *o = &r->w.o;
  r->start = cli_monotonic();
  r->next = 0;
  while (!finished(r)) {
    double now = cli_monotonic() - r->start;
    bool sampling = !o->count || r->w.samples < o->count;
    if (sampling && !stop_sig && now >= r->next) {
      int rc = take_sample(r);
      if (rc) return rc;
      r->next = fmax(r->next + o->interval, now);
      continue;
    }
    if (r->tui && !tui_keys(r->tui, &r->w)) {
      if (!r->has_child) break;
      vf_child_signal(&r->child, SIGINT); /* quitting the view interrupts the command */
    }
    if (stop_sig && stop_from_process) {
      vf_child_signal(&r->child, stop_sig);
      stop_from_process = 0;
    }
    wait_events(r, sampling && !stop_sig ? r->next - (cli_monotonic() - r->start) : 0.2);
    reap(r);
  }
  return 0;
}

static int start_child(struct run *r) {
  struct vf_diag d;
  vf_diag_clear(&d);
  bool capture = r->tui != NULL;
  int rc = vf_child_spawn(r->w.o.cmd, capture, capture, &r->child, &d);
  if (rc) return cli_diag_error(NAME, rc, &d);
  r->has_child = true;
  r->w.root = r->child.pid;
  if (r->child.out_fd >= 0) fcntl(r->child.out_fd, F_SETFL, O_NONBLOCK);
  if (r->child.err_fd >= 0) fcntl(r->child.err_fd, F_SETFL, O_NONBLOCK);
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

static void finish(struct run *r) {
  if (r->has_child && !r->child_done) {
    vf_child_wait(&r->child, true, &r->child_code);
    r->child_done = true;
  }
  tui_close(r->tui);
  vf_child_close(&r->child);
  watch_log_close(r->log);
  watch_free(&r->w);
  vf_nvml_close(r->w.nvml);
}

int cmd_watch(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) return fputs(usage, stdout), EXIT_OK;
  struct run r = {.child = {.pid = -1, .out_fd = -1, .err_fd = -1, .pidfd = -1}};
  int rc = parse_args(argc, argv, &r.w.o);
  if (rc) return rc;
  r.w.root = r.w.o.pid;
  stop_sig = 0;
  catch_signals();
  rc = open_outputs(&r);
  if (!rc && r.w.o.cmd) rc = start_child(&r);
  if (!rc && loop(&r) != 0) {
    fprintf(stderr, "vramfit watch: out of memory\n");
    rc = EXIT_INTERNAL;
  }
  finish(&r);
  return rc ? rc : r.has_child ? r.child_code : EXIT_OK;
}

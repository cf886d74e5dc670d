/* One launch of 'vramfit probe': the command runs with its output captured for the OOM
 * parser, NVML is sampled for its process tree, and a run past the time limit is stopped.
 * Whatever happens, the launch's whole process tree is gone when probe_launch returns. */
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/history_cli.h"
#include "cli/probe_run.h"

#define SAMPLE_S 0.1 /* NVML readings cost well under a millisecond */

char *probe_substitute(const char *text, const char *key, const char *batch) {
  size_t n = 0, klen = strlen(key), blen = strlen(batch);
  for (const char *p = text; (p = strstr(p, key)); p += klen) n++;
  char *out = malloc(strlen(text) + n * blen + 1), *o = out;
  if (!out) return NULL;
  for (const char *p = text, *hit;; p = hit + klen) {
    hit = strstr(p, key);
    size_t part = hit ? (size_t)(hit - p) : strlen(p);
    memcpy(o, p, part);
    o += part;
    if (!hit) break;
    memcpy(o, batch, blen);
    o += blen;
  }
  *o = '\0';
  return out;
}

static void free_argv(char **argv) {
  for (size_t i = 0; argv && argv[i]; i++) free(argv[i]);
  free(argv);
}

static char **command_for(char **cmd, const char *batch) {
  size_t n = 0;
  while (cmd[n]) n++;
  char **argv = calloc(n + 1, sizeof *argv);
  for (size_t i = 0; argv && i < n; i++)
    if (!(argv[i] = probe_substitute(cmd[i], "{batch}", batch))) return free_argv(argv), NULL;
  return argv;
}

static void tail_add(struct probe_tail *t, const char *bytes, size_t n) {
  if (n >= PROBE_TAIL) {
    bytes += n - PROBE_TAIL;
    n = PROBE_TAIL;
  }
  if (t->len + n > PROBE_TAIL) {
    size_t drop = t->len + n - PROBE_TAIL;
    memmove(t->buf, t->buf + drop, t->len - drop);
    t->len -= drop;
  }
  memcpy(t->buf + t->len, bytes, n);
  t->len += n;
}

static void to_tail(void *tail, const char *buf, size_t n) { tail_add(tail, buf, n); }

static void drain(int *fd, struct probe_tail *t) { cli_drain(fd, to_tail, t); }

/* The most the tree holds on any one GPU right now, and that GPU. */
static uint64_t tree_bytes(struct vf_nvml *nvml, const struct vf_child *tree, int *gpu) {
  uint64_t most = 0;
  struct vf_gpu_sample s;
  for (unsigned g = 0; g < vf_nvml_count(nvml); g++) {
    if (vf_nvml_sample(nvml, g, &s) || !(s.fields & VF_FIELD_PROCS)) continue;
    uint64_t sum = 0;
    for (size_t i = 0; i < s.nprocs; i++)
      if (s.procs[i].used_bytes != VF_BYTES_UNKNOWN && vf_proc_tree_has(tree, (pid_t)s.procs[i].pid))
        sum += s.procs[i].used_bytes;
    if (sum > most) most = sum, *gpu = (int)g;
  }
  return most;
}

struct watch_state {
  struct vf_child child;
  double start, next_sample, term_at, kill_at;
  bool timed_out;
};

/* SIGTERM to the whole tree at the limit, SIGKILL to what is left after the grace period:
 * time for a trainer to release the GPU. */
static void enforce_limit(const struct probe_runner *r, struct watch_state *w, double now) {
  if (!w->timed_out && now >= w->term_at) {
    vf_proc_signal_tree(&w->child, SIGTERM);
    w->timed_out = true;
    w->kill_at = now + r->grace_s;
  } else if (w->timed_out && now >= w->kill_at) {
    vf_proc_signal_tree(&w->child, SIGKILL);
    w->kill_at = INFINITY;
  }
}

static void drain_both(struct watch_state *w, struct probe_launch *l) {
  if (w->child.out_fd >= 0) drain(&w->child.out_fd, &l->out);
  if (w->child.err_fd >= 0) drain(&w->child.err_fd, &l->err);
}

/* Sleeps until the next sample, the limit, output, a stop signal or the command's exit. */
static void wait_events(const struct probe_runner *r, struct watch_state *w, struct probe_launch *l,
                        double until) {
  struct pollfd fds[4];
  nfds_t n = 0;
  if (w->child.pidfd >= 0) fds[n++] = (struct pollfd){.fd = w->child.pidfd, .events = POLLIN};
  if (w->child.out_fd >= 0) fds[n++] = (struct pollfd){.fd = w->child.out_fd, .events = POLLIN};
  if (w->child.err_fd >= 0) fds[n++] = (struct pollfd){.fd = w->child.err_fd, .events = POLLIN};
  if (r->stop_fd >= 0) fds[n++] = (struct pollfd){.fd = r->stop_fd, .events = POLLIN};
  double wait_s = until - cli_monotonic();
  /* Without a pidfd the exit is noticed by polling. */
  if (w->child.pidfd < 0 && wait_s > SAMPLE_S) wait_s = SAMPLE_S;
  if (!vf_proc_stop_signal()) poll(fds, n, wait_s > 0 ? (int)ceil(wait_s * 1000) : 0);
  drain_both(w, l);
}

static void sample(const struct probe_runner *r, struct watch_state *w, struct probe_launch *l, double now) {
  int gpu = -1;
  uint64_t bytes = tree_bytes(r->nvml, &w->child, &gpu);
  if (bytes > l->peak_bytes) l->peak_bytes = bytes, l->gpu = gpu;
  w->next_sample = now + SAMPLE_S;
}

/* Runs until the command exits or a stop signal ends its tree. */
static void watch_child(const struct probe_runner *r, struct watch_state *w, struct probe_launch *l) {
  w->term_at = r->timeout_s ? w->start + r->timeout_s : INFINITY;
  /* A sample first: a command that exits at once still had its moment on the GPU. */
  do {
    if ((l->stopped_by = vf_proc_stop_signal())) {
      vf_proc_end_tree(&w->child, l->stopped_by == SIGINT ? SIGINT : SIGTERM, r->grace_s);
      break;
    }
    double now = cli_monotonic();
    if (r->nvml && now >= w->next_sample) sample(r, w, l, now);
    if (r->timeout_s) enforce_limit(r, w, now);
    double until = fmin(w->timed_out ? w->kill_at : w->term_at, r->nvml ? w->next_sample : INFINITY);
    wait_events(r, w, l, until);
  } while (vf_proc_wait(&w->child, false) == 0);
  /* What the command wrote just before it exited. */
  drain_both(w, l);
  /* What it left behind: workers, daemons. After a timeout they have had SIGTERM already. */
  double grace = w->timed_out ? fmax(0, w->kill_at - cli_monotonic()) : r->grace_s;
  vf_proc_end_tree(&w->child, SIGTERM, isfinite(grace) ? grace : 0);
  l->exit_code = w->child.code;
}

static void judge(struct probe_launch *l, bool timed_out) {
  struct vf_oom_report rep;
  l->oom = VF_OOM_NONE;
  if (timed_out) {
    l->outcome = VF_PROBE_TIMEOUT;
    l->exit_code = -1;
    return;
  }
  if (l->exit_code == 0) {
    l->outcome = VF_PROBE_OK;
    return;
  }
  if (vf_oom_parse(l->err.buf, l->err.len, &rep) == 0 && rep.source != VF_OOM_NONE) l->oom = rep.source;
  else if (vf_oom_parse(l->out.buf, l->out.len, &rep) == 0) l->oom = rep.source;
  l->outcome = l->oom != VF_OOM_NONE ? VF_PROBE_OOM : VF_PROBE_ERROR;
}

static int start(const struct probe_runner *r, uint64_t batch, struct vf_child *c, struct probe_launch *l,
                 struct vf_diag *d) {
  char text[24];
  snprintf(text, sizeof text, "%llu", (unsigned long long)batch);
  char **argv = command_for(r->cmd, text);
  if (!argv || setenv("VRAMFIT_BATCH", text, 1)) return free_argv(argv), VF_ENOMEM;
  int rc = vf_proc_spawn(argv, true, true, c, d);
  history_command_line(argv, l->command, sizeof l->command);
  free_argv(argv);
  return rc;
}

int probe_launch(const struct probe_runner *r, uint64_t batch, struct probe_launch *l,
                 struct vf_diag *d) {
  l->out.len = l->err.len = 0;
  l->peak_bytes = 0;
  l->gpu = -1;
  l->stopped_by = 0;
  l->started = time(NULL);
  struct watch_state w = {.child = VF_CHILD_NONE, .start = cli_monotonic()};
  int rc = start(r, batch, &w.child, l, d);
  if (!rc) {
    watch_child(r, &w, l);
    l->seconds = cli_monotonic() - w.start;
    judge(l, w.timed_out);
  }
  vf_proc_close(&w.child);
  return rc;
}

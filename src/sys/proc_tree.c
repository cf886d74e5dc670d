/* The members of a process tree started by vf_proc_spawn(), ending them, and the stop
 * signals that make vramfit end its trees before it exits. */
#define _GNU_SOURCE /* pipe2 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sys/proc_internal.h"

#define POLL_S 0.02      /* between looks at what is left of a tree being ended */
#define STUCK_S 5.0      /* how long SIGKILL may take before a member counts as stuck */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void nap(double seconds) {
  struct timespec ts = {.tv_sec = (time_t)seconds, .tv_nsec = (long)(fmod(seconds, 1) * 1e9)};
  nanosleep(&ts, NULL); /* a signal cutting it short only makes the next look earlier */
}

/* Every process visible in /proc. */
static size_t scan_all(struct proc_stat **out) {
  size_t n = 0, cap = 0;
  struct proc_stat *all = NULL;
  DIR *d = opendir("/proc");
  for (struct dirent *e; d && (e = readdir(d));) {
    if (!isdigit((unsigned char)e->d_name[0])) continue;
    if (n == cap) {
      size_t grown = cap ? cap * 2 : 512;
      struct proc_stat *more = realloc(all, grown * sizeof *more);
      if (!more) break;
      all = more;
      cap = grown;
    }
    if (proc_stat((pid_t)atoi(e->d_name), &all[n]) == 0) n++;
  }
  if (d) closedir(d);
  *out = all;
  return n;
}

static bool in_group(const struct vf_child *c, const struct proc_stat *p) {
  return c->pid > 0 && p->pgrp == c->pid;
}

static int by_pid(const void *a, const void *b) {
  pid_t x = ((const struct proc_stat *)a)->pid, y = ((const struct proc_stat *)b)->pid;
  return (x > y) - (x < y);
}

enum { UNKNOWN, MEMBER, OUTSIDE };

/* Whether all[i] is a member: in the group, or a descendant of the caller. Memoized in
 * state[] over the parent links (all sorted by pid); depth bounds a corrupt loop. */
static bool member_at(const struct vf_child *c, const struct proc_stat *all, size_t n, uint8_t *state,
                      size_t i, int depth) {
  if (state[i] != UNKNOWN) return state[i] == MEMBER;
  pid_t self = getpid();
  bool yes = false;
  if (all[i].pid != self && depth < 256) {
    struct proc_stat key = {.pid = all[i].ppid};
    const struct proc_stat *parent = bsearch(&key, all, n, sizeof *all, by_pid);
    yes = all[i].ppid == self || in_group(c, &all[i]) ||
          (parent && member_at(c, all, n, state, (size_t)(parent - all), depth + 1));
  }
  state[i] = yes ? MEMBER : OUTSIDE;
  return yes;
}

/* Marks the live (not yet exited) members; returns how many there are. */
static size_t members(const struct vf_child *c, struct proc_stat *all, size_t n, bool *mark) {
  qsort(all, n, sizeof *all, by_pid);
  uint8_t *state = calloc(n ? n : 1, 1);
  size_t live = 0;
  for (size_t i = 0; state && i < n; i++) {
    mark[i] = member_at(c, all, n, state, i, 0) && all[i].state != 'Z' && all[i].state != 'X';
    live += mark[i];
  }
  free(state);
  return live;
}

bool vf_proc_tree_has(const struct vf_child *c, pid_t pid) {
  struct proc_stat p;
  if (pid <= 0 || pid == getpid() || proc_stat(pid, &p)) return false;
  if (in_group(c, &p)) return true;
  return vf_proc_in_tree(pid, getpid());
}

/* Signals the live members, each on its own (signalling the group too would make a member
 * handle the signal twice); with done, only those not in *done yet, which it extends. Returns
 * how many it signalled. */
static size_t signal_members(struct vf_child *c, int sig, pid_t **done, size_t *ndone) {
  proc_reap(c);
  struct proc_stat *all;
  size_t n = scan_all(&all), count = 0;
  bool *mark = calloc(n ? n : 1, sizeof *mark);
  if (mark && members(c, all, n, mark)) {
    for (size_t i = 0; i < n; i++) {
      if (!mark[i]) continue;
      bool seen = false;
      for (size_t k = 0; done && k < *ndone && !seen; k++) seen = (*done)[k] == all[i].pid;
      if (seen) continue;
      kill(all[i].pid, sig);
      if (sig != SIGKILL && sig != SIGCONT) kill(all[i].pid, SIGCONT);
      count++;
      pid_t *more = done ? realloc(*done, (*ndone + 1) * sizeof **done) : NULL;
      if (more) more[(*ndone)++] = all[i].pid, *done = more;
    }
  }
  free(mark);
  free(all);
  return count;
}

size_t vf_proc_signal_tree(struct vf_child *c, int sig) { return signal_members(c, sig, NULL, NULL); }

static size_t live_members(struct vf_child *c) {
  proc_reap(c);
  struct proc_stat *all;
  size_t n = scan_all(&all);
  bool *mark = calloc(n ? n : 1, sizeof *mark);
  size_t live = mark ? members(c, all, n, mark) : 0;
  free(mark);
  free(all);
  return live;
}

int vf_proc_end_tree(struct vf_child *c, int sig, double grace_s) {
  double kill_at = now_s() + grace_s, give_up = kill_at + STUCK_S;
  pid_t *done = NULL;
  size_t ndone = 0;
  int rc = 0;
  /* Each member gets sig once, however late it appears; after the grace period SIGKILL goes
   * to everything left, again and again, until a fork cannot outrun it. */
  while (live_members(c)) {
    double t = now_s();
    if (t >= give_up) {
      rc = VF_EIO;
      break;
    }
    if (t >= kill_at) {
      if (c->pid > 0) kill(-c->pid, SIGKILL); /* also reaches a member forked since the scan */
      signal_members(c, SIGKILL, NULL, NULL);
    } else {
      signal_members(c, sig, &done, &ndone);
    }
    nap(POLL_S);
  }
  free(done);
  proc_reap(c);
  return rc;
}

/* ---- stop signals ---- */

static volatile sig_atomic_t stop_signal;
static int stop_pipe[2] = {-1, -1};

static void on_stop(int sig) {
  int saved = errno;
  if (!stop_signal) stop_signal = sig;
  if (stop_pipe[1] >= 0) {
    ssize_t ignored = write(stop_pipe[1], "", 1); /* full pipe: a wake-up is pending anyway */
    (void)ignored;
  }
  errno = saved;
}

int vf_proc_catch_stop_signals(void) {
  if (stop_pipe[0] < 0 && pipe2(stop_pipe, O_NONBLOCK | O_CLOEXEC)) stop_pipe[0] = stop_pipe[1] = -1;
  /* No SA_RESTART: a blocking wait returns with EINTR instead of sleeping on. */
  struct sigaction sa = {.sa_handler = on_stop};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  return stop_pipe[0];
}

int vf_proc_stop_signal(void) { return stop_signal; }

void vf_proc_die_of(int sig) {
  signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  sigprocmask(SIG_UNBLOCK, &set, NULL);
  raise(sig);
  _exit(128 + sig);
}

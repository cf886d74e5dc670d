/* One run of the tracer (python -m vramfit.trace), its progress passed through to stderr. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/trace_run.h"

#ifndef VF_SOURCE_DIR
#define VF_SOURCE_DIR "."
#endif

#define GRACE_S 5.0 /* between SIGTERM and SIGKILL */

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) { stop_signal = sig; }

static int path_in(char *out, size_t size, const char *dir, const char *rel) {
  return snprintf(out, size, "%s/%s", dir, rel) < (int)size ? 0 : VF_ERANGE;
}

int trace_env_find(struct trace_env *e, const char *framework) {
  const char *env = getenv("VRAMFIT_TRACE_ENV"), *pkg = getenv("VRAMFIT_PYTHON_DIR");
  snprintf(e->env_dir, sizeof e->env_dir, "%s/%s", env && *env ? env : VF_SOURCE_DIR "/.venv-trace", framework);
  snprintf(e->package_dir, sizeof e->package_dir, "%s", pkg && *pkg ? pkg : VF_SOURCE_DIR "/python");
  if (path_in(e->python, sizeof e->python, e->env_dir, "bin/python") ||
      path_in(e->shim, sizeof e->shim, e->env_dir, "lib/vramfit_fakecuda.so"))
    return cli_error("trace", EXIT_ENV, "path of the tracer environment too long");
  const char *missing = access(e->python, X_OK) ? e->python : access(e->shim, R_OK) ? e->shim : NULL;
  if (missing)
    return cli_error("trace", EXIT_ENV,
                     "the %s tracer's Python environment is missing (%s); run 'make trace-env "
                     "TRACE_FRAMEWORKS=%s' in %s", framework, missing, framework, VF_SOURCE_DIR);
  char init[PATH_MAX];
  if (path_in(init, sizeof init, e->package_dir, "vramfit/trace/__main__.py") || access(init, R_OK))
    return cli_error("trace", EXIT_ENV, "the tracer's package is missing from %s (set VRAMFIT_PYTHON_DIR)",
                     e->package_dir);
  return EXIT_OK;
}

static void to_stderr(void *arg, const char *buf, size_t n) {
  (void)arg;
  fwrite(buf, 1, n, stderr);
}

struct watch {
  struct vf_child child;
  double term_at, kill_at;
  bool stopping;
};

/* SIGTERM when the time is up or we were asked to stop, SIGKILL a grace period later. */
static void enforce(struct watch *w, double now) {
  if (!w->stopping && (now >= w->term_at || stop_signal)) {
    vf_child_signal(&w->child, SIGTERM);
    w->stopping = true;
    w->kill_at = now + GRACE_S;
  } else if (w->stopping && now >= w->kill_at) {
    vf_child_signal(&w->child, SIGKILL);
    w->kill_at = INFINITY;
  }
}

static int watch_child(struct watch *w) {
  int code = 0;
  for (;;) {
    enforce(w, cli_monotonic());
    struct pollfd fds[2];
    nfds_t n = 0;
    if (w->child.out_fd >= 0) fds[n++] = (struct pollfd){.fd = w->child.out_fd, .events = POLLIN};
    if (w->child.err_fd >= 0) fds[n++] = (struct pollfd){.fd = w->child.err_fd, .events = POLLIN};
    double until = w->stopping ? w->kill_at : w->term_at;
    double wait_s = fmin(until - cli_monotonic(), 0.2); /* exits are noticed by polling */
    poll(fds, n, wait_s > 0 ? (int)ceil(wait_s * 1000) : 0);
    /* The tracer's stdout is the frameworks' chatter (the Trainer prints its metrics):
     * it goes to stderr with the progress, keeping our stdout for the result. */
    cli_drain(&w->child.out_fd, to_stderr, NULL);
    cli_drain(&w->child.err_fd, to_stderr, NULL);
    if (vf_child_wait(&w->child, false, &code) == 1) return code;
  }
}

static int start(const struct trace_env *e, char *const argv[], struct vf_child *c) {
  if (setenv("PYTHONPATH", e->package_dir, 1) || setenv("VRAMFIT_FAKECUDA_SHIM", e->shim, 1) ||
      setenv("PYTHONUNBUFFERED", "1", 1))
    return cli_error("trace", EXIT_INTERNAL, "out of memory");
  struct vf_diag d;
  vf_diag_clear(&d);
  int rc = vf_child_spawn(argv, true, true, c, &d);
  if (rc) return cli_diag_error("trace", rc, &d);
  fcntl(c->out_fd, F_SETFL, O_NONBLOCK);
  fcntl(c->err_fd, F_SETFL, O_NONBLOCK);
  return 0;
}

int trace_run(const struct trace_env *e, const char *setup_path, const char *events_path,
              const char *summary_path, double timeout_s) {
  char *argv[] = {(char *)e->python, "-m", "vramfit.trace", "--setup", (char *)setup_path,
                  "--events", (char *)events_path, "--summary", (char *)summary_path, NULL};
  struct sigaction sa = {.sa_handler = on_signal}, old[3];
  const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
  for (int i = 0; i < 3; i++) sigaction(sigs[i], &sa, &old[i]);
  struct watch w = {.term_at = timeout_s > 0 ? cli_monotonic() + timeout_s : INFINITY};
  int rc = start(e, argv, &w.child);
  int code = rc ? rc : watch_child(&w);
  vf_child_close(&w.child);
  for (int i = 0; i < 3; i++) sigaction(sigs[i], &old[i], NULL);
  if (rc) return rc;
  if (stop_signal) {
    cli_error("trace", EXIT_INTERNAL, "interrupted; the tracer was stopped");
    signal(stop_signal, SIG_DFL); /* end as the signal asked, now that nothing is left running */
    raise(stop_signal);
    return EXIT_INTERNAL;
  }
  if (w.stopping)
    return cli_error("trace", EXIT_INTERNAL, "the tracer ran past --timeout %.0f s and was stopped", timeout_s);
  /* The tracer printed why it failed; its status is ours (2 setup, 3 environment). */
  return code <= EXIT_INTERNAL ? code : EXIT_INTERNAL;
}

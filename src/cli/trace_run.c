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

/* Passes the tracer's output on until it exits, the time is up or a stop signal comes;
 * then (timed_out / the signal) its whole process tree is ended. Returns its exit code. */
static int watch_child(struct vf_child *c, double timeout_s, int stop_fd, bool *timed_out) {
  double term_at = timeout_s > 0 ? cli_monotonic() + timeout_s : INFINITY;
  while (!vf_proc_wait(c, false)) {
    if (cli_monotonic() >= term_at || vf_proc_stop_signal()) {
      *timed_out = !vf_proc_stop_signal();
      vf_proc_end_tree(c, vf_proc_stop_signal() == SIGINT ? SIGINT : SIGTERM, GRACE_S);
      break;
    }
    struct pollfd fds[3];
    nfds_t n = 0;
    if (c->out_fd >= 0) fds[n++] = (struct pollfd){.fd = c->out_fd, .events = POLLIN};
    if (c->err_fd >= 0) fds[n++] = (struct pollfd){.fd = c->err_fd, .events = POLLIN};
    if (stop_fd >= 0) fds[n++] = (struct pollfd){.fd = stop_fd, .events = POLLIN};
    double wait_s = fmin(term_at - cli_monotonic(), 0.2); /* exits are noticed by polling */
    poll(fds, n, wait_s > 0 ? (int)ceil(wait_s * 1000) : 0);
    /* The tracer's stdout is the frameworks' chatter (the Trainer prints its metrics): it
     * goes to stderr with the progress, keeping our stdout for the result. */
    cli_drain(&c->out_fd, to_stderr, NULL);
    cli_drain(&c->err_fd, to_stderr, NULL);
  }
  cli_drain(&c->out_fd, to_stderr, NULL);
  cli_drain(&c->err_fd, to_stderr, NULL);
  return c->code;
}

int trace_run(const struct trace_env *e, const char *setup_path, const char *events_path,
              const char *summary_path, double timeout_s) {
  const char *args[] = {"vramfit.trace", "--setup", setup_path, "--events", events_path,
                        "--summary", summary_path, NULL};
  return trace_run_module(e, args, timeout_s);
}

int trace_run_module(const struct trace_env *e, const char *const *args, double timeout_s) {
  char *argv[16] = {(char *)e->python, "-m"};
  size_t n = 2;
  for (; args[n - 2] && n + 1 < sizeof argv / sizeof *argv; n++) argv[n] = (char *)args[n - 2];
  argv[n] = NULL;
  if (setenv("PYTHONPATH", e->package_dir, 1) || setenv("VRAMFIT_FAKECUDA_SHIM", e->shim, 1) ||
      setenv("PYTHONUNBUFFERED", "1", 1))
    return cli_error("trace", EXIT_INTERNAL, "out of memory");
  int stop_fd = vf_proc_catch_stop_signals();
  struct vf_child c = VF_CHILD_NONE;
  struct vf_diag d;
  vf_diag_clear(&d);
  int rc = vf_proc_spawn(argv, true, true, &c, &d);
  if (rc) return cli_diag_error("trace", rc, &d);
  bool timed_out = false;
  int code = watch_child(&c, timeout_s, stop_fd, &timed_out);
  vf_proc_close(&c);
  if (vf_proc_stop_signal()) {
    cli_error("trace", EXIT_INTERNAL, "interrupted; the tracer was stopped");
    vf_proc_die_of(vf_proc_stop_signal());
  }
  if (timed_out)
    return cli_error("trace", EXIT_INTERNAL, "the tracer ran past --timeout %.0f s and was stopped", timeout_s);
  /* The tracer printed why it failed; its status is ours (2 setup, 3 environment). */
  return code <= EXIT_INTERNAL ? code : EXIT_INTERNAL;
}

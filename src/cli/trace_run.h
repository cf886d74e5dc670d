/* vramfit trace: the tracer's Python environment and one run of it (trace_run.c). */
#ifndef VF_CLI_TRACE_RUN_H
#define VF_CLI_TRACE_RUN_H

#include <limits.h>

#include "vramfit.h"

/* Where the tracer lives: the framework's virtual environment `make trace-env` builds (its
 * python and the fake-CUDA shim) and the package directory (python/). */
struct trace_env {
  char python[PATH_MAX], shim[PATH_MAX], package_dir[PATH_MAX], env_dir[PATH_MAX];
};

/* <root>/<framework>, the root being VRAMFIT_TRACE_ENV or the source tree's .venv-trace,
 * and VRAMFIT_PYTHON_DIR or the source tree's python/. EXIT_OK, or EXIT_ENV with what is
 * missing and how to make it printed. */
int trace_env_find(struct trace_env *e, const char *framework);

/* Runs `python -m vramfit.trace` on the setup file, writing events and summary files;
 * progress lines go to stderr as they come. Stops the tracer (SIGTERM, then SIGKILL) on
 * timeout (timeout_s > 0) and on SIGINT/SIGTERM/SIGHUP, after which vramfit ends by the
 * same signal. Returns an exit code, its one-line message printed: the tracer's own
 * (2 setup, 3 environment, 4 internal), or 4 for a timeout, 3 when it cannot start. */
int trace_run(const struct trace_env *e, const char *setup_path, const char *events_path,
              const char *summary_path, double timeout_s);

/* The same for another module of the tracer: `python -m args[0] args[1] ...` (args ends
 * with NULL; at most 13). */
int trace_run_module(const struct trace_env *e, const char *const *args, double timeout_s);

#endif

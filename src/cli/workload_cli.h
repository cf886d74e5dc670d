/* Workloads on the command line: loading a workload.yaml with the GPU, allocator and
 * framework profile to estimate it under, and `plan --workload`. */
#ifndef VF_CLI_WORKLOAD_CLI_H
#define VF_CLI_WORKLOAD_CLI_H

#include "cli/setup_opts.h"

struct workload_context {
  struct vf_workload w;
  struct setup_context env;
  struct vf_wl_env wl_env;
};

/* Loads the workload (errors as file:line:col, exit 2) and what --gpu and --alloc-conf name,
 * under the workload's own framework profile. Returns an exit code; on EXIT_OK the caller
 * releases c with workload_context_cleanup(). c is large: allocate it. */
int workload_context_load(struct setup_request *r, const char *file, struct workload_context *c);
void workload_context_cleanup(struct workload_context *c);

/* `vramfit plan --workload FILE`: safety 0 and target 0 take the workload's; keep (NULL:
 * none) names the knobs held at the values the configs give. */
int plan_workload(struct setup_request *r, const char *file, double safety, uint64_t target, const char *keep,
                  bool json);

/* `vramfit trace --workload FILE`: traces the factory at the workload's points and writes
 * the fit beside it (src/cli/trace_workload.c). */
int trace_workload(struct setup_request *r, const char *file, bool json, double timeout_s);

#endif

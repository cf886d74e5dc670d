/* A workload's plan as `vramfit plan --workload --json` prints it (the contract's fields),
 * shared by the command and the Python binding. */
#ifndef VF_IO_WORKLOAD_JSON_H
#define VF_IO_WORKLOAD_JSON_H

#include <jansson.h>

#include "vramfit/workload.h"

/* The breakdown at an estimate's peak: the contract's seven categories. */
json_t *vf_estimate_breakdown_json(const struct vf_estimate *e);

json_t *vf_workload_plan_json(const struct vf_workload *w, const struct vf_wl_plan *p, uint64_t capacity_bytes);

/* What `trace --workload` measured ("fit" in the file it writes beside the workload), and
 * back: VF_EFORMAT when a field is missing or of the wrong type. */
json_t *vf_workload_fit_json(const struct vf_wl_fit *f);
/* That file: the workload's path with .yaml / .yml (if any) replaced by .trace.json. */
void vf_workload_trace_path(const char *workload_file, char *out, size_t size);
int vf_workload_fit_from_json(const json_t *o, struct vf_wl_fit *f);

#endif

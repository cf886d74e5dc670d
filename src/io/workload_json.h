/* A workload's plan as `vramfit plan --workload --json` prints it (the contract's fields),
 * shared by the command and the Python binding. */
#ifndef VF_IO_WORKLOAD_JSON_H
#define VF_IO_WORKLOAD_JSON_H

#include <jansson.h>

#include "vramfit/workload.h"

/* The breakdown at an estimate's peak: the contract's seven categories. */
json_t *vf_estimate_breakdown_json(const struct vf_estimate *e);

json_t *vf_workload_plan_json(const struct vf_workload *w, const struct vf_wl_plan *p, uint64_t capacity_bytes);

#endif

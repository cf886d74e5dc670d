/* Pieces of the planner shared between its files. */
#ifndef VF_CORE_PLAN_INTERNAL_H
#define VF_CORE_PLAN_INTERNAL_H

#include "vramfit.h"

/* Data-parallel replicas: the GPUs left once tensor, pipeline and context parallel
 * groups are formed. */
uint64_t plan_data_parallel(const struct vf_setup *s);

/* Tokens per second of setting s for a model of params parameters, trainable of them
 * trained, with activation_bytes of saved activations per micro batch (offloaded ones
 * cross the host link). */
double plan_rate(const struct vf_model *m, const struct vf_setup *s, uint64_t params,
                 uint64_t trainable, uint64_t activation_bytes, const struct vf_gpu_spec *gpu);

/* Fills out->changes: the steps from out->given to the balanced tier, most important
 * first, each with the peak it leads to. */
void plan_changes(const struct vf_plan_request *r, struct vf_plan_result *out);

#endif

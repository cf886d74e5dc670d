/* Pieces of the planner shared between its files. */
#ifndef VF_CORE_PLAN_INTERNAL_H
#define VF_CORE_PLAN_INTERNAL_H

#include "vramfit.h"

/* Data-parallel replicas: the GPUs left once tensor, pipeline and context parallel
 * groups are formed. */
uint64_t plan_data_parallel(const struct vf_setup *s);

/* Where the GPUs sit: how many share a node (and its GPU-to-GPU links), the network
 * between nodes, and the model chunks per rank of the interleaved pipeline schedule. */
struct plan_cluster {
  uint64_t gpus_per_node;
  double network_gbps; /* GB/s per GPU, one direction */
  uint64_t pp_chunks;
};

/* The cluster of a request: its own figures, else PLAN_NODE_GPUS GPUs a node and
 * PLAN_NETWORK_GBPS between nodes. */
#define PLAN_NODE_GPUS 8
#define PLAN_NETWORK_GBPS 50.0
struct plan_cluster plan_cluster_of(const struct vf_plan_request *r);

/* Tokens per second of setting s for a model of params parameters, trainable of them
 * trained, with activation_bytes of saved activations per micro batch (offloaded ones
 * cross the host link), on cluster c. */
double plan_rate(const struct vf_model *m, const struct vf_setup *s, uint64_t params, uint64_t trainable,
                 uint64_t activation_bytes, const struct vf_gpu_spec *gpu, const struct plan_cluster *c);

/* Fills out->changes: the steps from out->given to the balanced tier, most important
 * first, each with the peak it leads to. */
void plan_changes(const struct vf_plan_request *r, struct vf_plan_result *out);

/* A GPU without bf16: compute capability below 8.0, or no bf16 rate in the catalogue. */
bool plan_lacks_bf16(const struct vf_gpu_spec *g);

/* The allocator configuration of a setting whose alloc_conf is text, the given one's
 * given: the request's, with the option text appends to it (expandable segments or
 * max_split_size_mb, the changes a plan makes to it). */
void plan_alloc_conf(const struct vf_plan_request *r, const char *given, const char *text, struct vf_alloc_conf *out);

#endif

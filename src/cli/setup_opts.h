/* The training-setup options of `vramfit estimate` (the contract's table), shared by every
 * command that takes a setup: one option table, one parser, one way to resolve the
 * framework profile, allocator configuration, GPU and model they name. */
#ifndef VF_CLI_SETUP_OPTS_H
#define VF_CLI_SETUP_OPTS_H

#include <getopt.h>

#include "cli/cli.h"

enum {
  O_BATCH = 256, O_SEQ, O_ACCUMULATION, O_TASK, O_FRAMEWORK, O_WEIGHTS, O_AMP, O_OPTIMIZER,
  O_METHOD, O_LORA_R, O_LORA_TARGETS, O_QUANT, O_GRAD_CKPT, O_ATTENTION, O_GPUS, O_SHARD,
  O_OFFLOAD, O_TP, O_PP, O_CP, O_GPU, O_ALLOC_CONF, O_LENGTHS, O_TORCH, O_EVAL, O_PP_SCHEDULE,
  O_SEQUENCE_PARALLEL, O_DP_REPLICATE, O_EP,
  O_SETUP_END /* a command's own options are numbered from here */
};

/* The struct option entries of the setup options, to open a command's table with. */
#define SETUP_OPTIONS                                                                          \
  {"batch", required_argument, NULL, O_BATCH}, {"seq", required_argument, NULL, O_SEQ},        \
  {"accumulation", required_argument, NULL, O_ACCUMULATION},                                  \
  {"task", required_argument, NULL, O_TASK}, {"framework", required_argument, NULL, O_FRAMEWORK}, \
  {"weights", required_argument, NULL, O_WEIGHTS}, {"amp", required_argument, NULL, O_AMP},    \
  {"optimizer", required_argument, NULL, O_OPTIMIZER},                                        \
  {"method", required_argument, NULL, O_METHOD}, {"lora-r", required_argument, NULL, O_LORA_R}, \
  {"lora-targets", required_argument, NULL, O_LORA_TARGETS},                                  \
  {"quant", required_argument, NULL, O_QUANT}, {"grad-ckpt", required_argument, NULL, O_GRAD_CKPT}, \
  {"attention", required_argument, NULL, O_ATTENTION}, {"gpus", required_argument, NULL, O_GPUS}, \
  {"shard", required_argument, NULL, O_SHARD}, {"offload", required_argument, NULL, O_OFFLOAD}, \
  {"tp", required_argument, NULL, O_TP}, {"pp", required_argument, NULL, O_PP},                \
  {"cp", required_argument, NULL, O_CP}, {"gpu", required_argument, NULL, O_GPU},              \
  {"alloc-conf", required_argument, NULL, O_ALLOC_CONF}, {"lengths", required_argument, NULL, O_LENGTHS}, \
  {"torch", required_argument, NULL, O_TORCH}, {"eval", required_argument, NULL, O_EVAL},      \
  {"pp-schedule", required_argument, NULL, O_PP_SCHEDULE},                                    \
  {"sequence-parallel", required_argument, NULL, O_SEQUENCE_PARALLEL},                        \
  {"dp-replicate", required_argument, NULL, O_DP_REPLICATE}, {"ep", required_argument, NULL, O_EP}

/* What the setup options asked for. cmd names the command in error messages. */
struct setup_request {
  const char *cmd;
  struct vf_setup setup;
  const char *framework; /* --framework as given: NAME or NAME@VERSION */
  struct vf_framework_spec spec; /* the same, split and checked */
  const char *torch, *gpu, *alloc_conf; /* NULL when not given */
};

/* The contract's defaults. */
void setup_request_init(struct setup_request *r, const char *cmd);

/* Takes one setup option (c below O_SETUP_END) and its value; prints the one-line error
 * itself. 0 or VF_EINVAL. */
int setup_option(struct setup_request *r, int c, const char *arg);

/* Everything the setup names, resolved. */
struct setup_context {
  struct vf_profile *profile;
  struct vf_alloc_conf conf;
  struct vf_gpu_spec gpu; /* zeroed when no --gpu was given */
  struct vf_model model;
  struct vf_uncertainty_table uncertainty; /* the framework's measured spread */
};

/* Loads the profile and its measured spread, the allocator configuration, GPU and model,
 * and fills the setup's GPU fields (generation, capacity, CUDA context). Returns an exit
 * code, the error printed; on EXIT_OK the caller releases c with setup_context_cleanup(). */
int setup_context_load(struct setup_request *r, const char *model, struct setup_context *c);
void setup_context_cleanup(struct setup_context *c);
/* The same without a model (c->model stays empty): for workloads, which name their own. */
int setup_context_load_env(struct setup_request *r, struct setup_context *c);

#endif

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
  O_SEQUENCE_PARALLEL, O_DP_REPLICATE, O_EP, O_FORMAT, O_LOSS, O_OPTIMIZER_IN_BWD, O_COMPILE,
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
  {"dp-replicate", required_argument, NULL, O_DP_REPLICATE}, {"ep", required_argument, NULL, O_EP}, \
  {"loss", required_argument, NULL, O_LOSS},                                                  \
  {"optimizer-in-bwd", required_argument, NULL, O_OPTIMIZER_IN_BWD},                          \
  {"compile", required_argument, NULL, O_COMPILE}

/* --format, for the commands that read a training config as MODEL (cli/setup_config.h). */
#define CONFIG_OPTIONS {"format", required_argument, NULL, O_FORMAT}

/* The values a setup holds, as `--json` names them in "setup" (the contract's list, and the
 * few more a run's setup has), so that each can say where it came from: the command line, a
 * training config (read_from), or a default ("assumed"). */
enum setup_key {
  K_MODEL, K_FRAMEWORK, K_FRAMEWORK_RELEASE, K_TORCH, K_TASK, K_WEIGHTS, K_AMP, K_METHOD, K_LORA_R,
  K_LORA_TARGETS, K_QUANT, K_BATCH, K_ACCUMULATION, K_SEQ, K_LENGTHS, K_EVAL, K_GRAD_CKPT, K_ATTENTION,
  K_OPTIMIZER, K_LOSS, K_OPTIMIZER_IN_BWD, K_COMPILE, K_SHARD, K_OFFLOAD, K_GPUS, K_TP, K_PP, K_CP, K_EP, K_DP_REPLICATE, K_PP_SCHEDULE,
  K_SEQUENCE_PARALLEL, K_ALLOC_CONF, K_COUNT
};

/* What the setup options asked for. cmd names the command in error messages. */
struct setup_request {
  const char *cmd;
  struct vf_setup setup;
  const char *framework; /* --framework as given: NAME or NAME@VERSION */
  struct vf_framework_spec spec; /* the same, split and checked */
  const char *torch, *gpu, *alloc_conf; /* NULL when not given */
  const char *lengths_spec;             /* --lengths varied:MEAN,MAX or varied:FILE as given, else NULL */
  const char *format;                   /* --format: the tool of the training config given */
  uint64_t given;                       /* bit (1 << K_x) per value the command line gave */
  const char *read_from[K_COUNT];       /* "FILE:LINE" of a value a training config gave, else NULL */
  const char *by_tool[K_COUNT];         /* the tool whose default a config left a value to */
};

/* The contract's defaults. */
void setup_request_init(struct setup_request *r, const char *cmd);

/* Takes one setup option (c below O_SETUP_END) and its value; prints the one-line error
 * itself. 0 or VF_EINVAL. */
int setup_option(struct setup_request *r, int c, const char *arg);
/* The same for a value a training config gives at where ("FILE:LINE", kept by the caller for
 * as long as r): the error names where, not the option. tool: the config lacks the key and
 * the value is that tool's default (then it stays among the assumed values), or NULL. */
int setup_option_from(struct setup_request *r, int c, const char *arg, const char *where, const char *tool);
/* The value of the setup a name of "setup" is (K_COUNT: none), and the option that sets it
 * (0: none). */
enum setup_key setup_key_named(const char *name);
int setup_option_code(enum setup_key k);

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

/* Whether a value came from the user: an option, the model argument, a config file or, for
 * the allocator's configuration, the environment PyTorch reads it from. */
bool setup_from_user(const struct setup_request *r, enum setup_key k);
/* Every value the setup holds once the framework has filled what it left open, as the
 * contract's "setup"; "assumed", those that came from a default; "read_from", where a
 * training config gave each of the others. */
json_t *setup_values_json(const struct setup_request *r, const struct setup_context *c);
json_t *setup_assumed_json(const struct setup_request *r, const struct setup_context *c);
json_t *setup_read_from_json(const struct setup_request *r);
/* "assumed: weights bf16 (the checkpoint's dtype), batch 1, ...": one line, or none. */
void setup_assumed_print(const struct setup_request *r, const struct setup_context *c);
/* The LoRA targets as a comma list ("q,v"). */
void setup_targets_text(uint32_t bits, char *buf, size_t size);
/* The allocator configuration the run uses: --alloc-conf, else what PyTorch reads; "" for none. */
const char *setup_alloc_conf_text(const struct setup_request *r);

#endif

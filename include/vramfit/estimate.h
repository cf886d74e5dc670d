#ifndef VRAMFIT_ESTIMATE_H
#define VRAMFIT_ESTIMATE_H

#include <stdbool.h>
#include <stdint.h>

#include "vramfit/api.h"
#include "vramfit/error.h"
#include "vramfit/model.h"

enum vf_task { VF_TASK_AUTO, VF_TASK_CAUSAL_LM, VF_TASK_SEQ_CLS, VF_TASK_MASKED_LM };
enum vf_precision { VF_PREC_NONE, VF_PREC_FP32, VF_PREC_BF16, VF_PREC_FP16 };
enum vf_optimizer {
  VF_OPT_ADAMW, VF_OPT_ADAMW_8BIT, VF_OPT_PAGED_ADAMW_8BIT, VF_OPT_ADAFACTOR, VF_OPT_SGD,
  VF_OPT_SGD_MOMENTUM, VF_OPT_LION, VF_OPT_NONE
};
enum vf_method { VF_METHOD_FULL, VF_METHOD_LORA, VF_METHOD_QLORA, VF_METHOD_DORA,
                 VF_METHOD_ADAPTER, VF_METHOD_ADAPTER_V2 };
enum vf_quant { VF_QUANT_DEFAULT, VF_QUANT_NONE, VF_QUANT_NF4, VF_QUANT_NF4_DQ, VF_QUANT_INT8 };
enum vf_ckpt { VF_CKPT_NONE, VF_CKPT_FULL, VF_CKPT_SELECTIVE };
enum vf_attention { VF_ATTN_DEFAULT, VF_ATTN_EAGER, VF_ATTN_SDPA, VF_ATTN_FLASH };
/* HSDP is FSDP sharding within groups of data-parallel GPUs, replicated across the groups. */
enum vf_shard { VF_SHARD_NONE, VF_SHARD_ZERO1, VF_SHARD_ZERO2, VF_SHARD_ZERO3, VF_SHARD_FSDP, VF_SHARD_HSDP };
enum vf_offload { VF_OFFLOAD_OPTIMIZER = 1, VF_OFFLOAD_PARAMS = 2, VF_OFFLOAD_ACTIVATIONS = 4 };
/* Whether batches all have --seq tokens per sample (packed or fixed-length data) or are
 * padded to their own longest sample, so that their lengths vary from step to step. */
enum vf_lengths { VF_LENGTHS_DEFAULT, VF_LENGTHS_FIXED, VF_LENGTHS_VARIED };
/* Whether the run validates: a forward under no_grad over a batch of the micro batch's
 * size after the training steps, with the optimizer's states still there. */
enum vf_eval { VF_EVAL_DEFAULT, VF_EVAL_NO, VF_EVAL_YES };
/* Pipeline schedules: all forwards then all backwards (GPipe); one forward, one backward in
 * the steady state (1F1B); 1F1B over several model chunks per rank (interleaved). "none"
 * is a profile's value for a framework without pipeline parallelism, no one's choice. */
enum vf_pp_schedule { VF_PP_DEFAULT, VF_PP_NONE, VF_PP_GPIPE, VF_PP_1F1B, VF_PP_INTERLEAVED };
/* Whether tensor parallelism splits the tokens of the norms and residual adds too
 * (sequence parallelism), or only the heads and the MLP's width. */
enum vf_sp { VF_SP_DEFAULT, VF_SP_NO, VF_SP_YES };
/* The loss over the logits: the framework's own (default); cross-entropy over chunks of the
 * logits, each up-cast alone (chunked); a kernel that never makes the logits whole, Liger's
 * fused linear cross-entropy (fused) or Apple's Cut Cross-Entropy (cce). "default" is a
 * spelling here, the contract's --loss default. */
enum vf_loss { VF_LOSS_DEFAULT, VF_LOSS_CHUNKED, VF_LOSS_FUSED, VF_LOSS_CCE };
/* Whether each parameter's optimizer steps inside the backward, as soon as its gradient is
 * made, which then goes (torchtune's optimizer_in_bwd): the whole model's gradients never
 * exist at once. */
enum vf_in_bwd { VF_IN_BWD_NO, VF_IN_BWD_YES };
/* Whether the run uses torch.compile (the framework's switch: torchtitan's
 * training.compile, torchtune's compile, the Trainer's torch_compile). vramfit models what
 * of it was measured: the loss the framework compiles (the profile's compiled_loss) and
 * what compiled layers keep (compiled_layers, selective_keep_compiled). */
enum vf_compile { VF_COMPILE_NO, VF_COMPILE_YES };

/* Names as the contract spells them; vf_enum_parse() maps a name back. The "auto" and
 * "default" entries stand for "not given": they have a name but are no one's spelling, so
 * vf_enum_parse() refuses them (VF_ENOTFOUND) and vf_enum_choices() leaves them out. */
enum vf_enum_kind { VF_ENUM_TASK, VF_ENUM_PRECISION, VF_ENUM_OPTIMIZER, VF_ENUM_METHOD,
                    VF_ENUM_QUANT, VF_ENUM_CKPT, VF_ENUM_ATTENTION, VF_ENUM_SHARD, VF_ENUM_LENGTHS,
                    VF_ENUM_EVAL, VF_ENUM_PP_SCHEDULE, VF_ENUM_SP, VF_ENUM_LOSS, VF_ENUM_IN_BWD,
                    VF_ENUM_COMPILE };
VF_API const char *vf_enum_name(enum vf_enum_kind kind, int value);
VF_API int vf_enum_parse(enum vf_enum_kind kind, const char *name, int *value);
/* The names vf_enum_parse() accepts, comma-separated ("none, nf4, nf4-dq, int8"). */
VF_API void vf_enum_choices(enum vf_enum_kind kind, char *buf, size_t size);

/* What a framework's modeling and training code does that changes memory, at one of its
 * releases (data/frameworks/<name>.json, with the behaviours that follow the PyTorch release
 * from data/torch.json). Opaque: its fields are the estimator's switches, which grow with
 * every mechanism modelled; vf_profile_describe() says what a caller may want to show. */
struct vf_profile;
struct vf_profile_info {
  const char *name;    /* "hf" */
  const char *release; /* the framework release the values describe ("5.23") */
  const char *date;    /* when that release was current ("2026-06") */
  const char *torch;   /* the PyTorch release of the run: asked for, or the release's own */
  /* The version asked for is older than every release the profile describes (its oldest
   * stands in); the same for the PyTorch release among those data/torch.json describes. */
  bool release_predates, torch_predates;
  /* Loading a full checkpoint under FSDP unshards every unit at once (the whole model on
   * every GPU while loading). */
  bool fsdp_full_load;
  /* Without a dtype asked for, the weights load in the checkpoint's dtype (else float32). */
  bool checkpoint_dtype_weights;
  /* Under torch.compile the framework compiles its loss too, and its layers. */
  bool compiled_loss, compiled_layers;
};
/* The strings borrow from p. */
VF_API void vf_profile_describe(const struct vf_profile *p, struct vf_profile_info *out);

/* The lengths of a dataset's samples (--lengths varied:MEAN,MAX, or a histogram of the
 * dataset): count[i] samples of length[i] tokens, lengths ascending and distinct. n 0:
 * none given. */
#define VF_LENGTH_BINS 64
struct vf_length_dist {
  uint32_t n;
  uint64_t length[VF_LENGTH_BINS], count[VF_LENGTH_BINS];
};

/* A distribution of mean `mean` with no sample longer than `max`: a truncated exponential
 * over 1..max (uniform when the mean is the middle, skewed to short samples below it and
 * to long ones above), in at most VF_LENGTH_BINS bins, each at its longest length.
 * VF_EINVAL unless 1 <= mean <= max. */
VF_API int vf_length_dist_mean_max(uint64_t mean, uint64_t max, struct vf_length_dist *out);
/* Reads a histogram of sample lengths: a line per length, "LENGTH COUNT" (two whole numbers,
 * spaces or a tab between), '#' starting a comment, blank lines ignored; a length listed
 * twice counts twice. More distinct lengths than VF_LENGTH_BINS are merged into bins of
 * about equal counts, each at its longest length. VF_EFORMAT with d's line:col. */
VF_API int vf_length_dist_parse(const char *text, size_t len, struct vf_length_dist *out, struct vf_diag *d);
/* The padded length of micro batch k of n drawn from d: a batch of `batch` samples padded to
 * its longest, at a quantile of the longest-of-batch distribution that a van der Corput
 * sequence picks (so any first k spread over the range); the last, k = n - 1, is the
 * distribution's longest. Samples longer than seq are cut to seq, as the recipes truncate
 * them. Deterministic. */
VF_API uint64_t vf_length_dist_batch(const struct vf_length_dist *d, uint64_t batch, uint64_t seq, uint64_t k,
                                     uint64_t n);
/* The optimizer steps an estimate replays (and a trace runs) over a distribution of sample
 * lengths: enough for the cache that batches of other lengths leave to settle. */
#define VF_LENGTH_STEPS 8

struct vf_setup {
  uint64_t batch, seq;
  uint64_t accumulation; /* micro batches per optimizer step; 0: the framework's default */
  enum vf_task task;
  enum vf_precision weights, amp;
  enum vf_optimizer optimizer;
  enum vf_loss loss;
  enum vf_in_bwd optimizer_in_bwd;
  enum vf_compile compile;
  enum vf_method method;
  uint64_t lora_r;
  uint32_t lora_targets; /* bit (1 << VF_KIND_x) per targeted kind */
  enum vf_quant quant;
  enum vf_ckpt grad_ckpt;
  enum vf_attention attention;
  enum vf_lengths lengths;
  struct vf_length_dist length_dist; /* with VF_LENGTHS_VARIED: the samples' lengths (n 0: not known) */
  enum vf_eval eval;
  uint64_t gpus, tp, pp, cp;
  uint64_t ep; /* expert parallelism: each GPU holds experts / ep of every MoE layer's experts */
  enum vf_pp_schedule pp_schedule; /* VF_PP_DEFAULT: the framework's */
  enum vf_sp sequence_parallel;    /* VF_SP_DEFAULT: the framework's, with tp > 1 */
  enum vf_shard shard;
  uint64_t dp_replicate; /* HSDP's replicas: each shards over dp / dp_replicate GPUs (1 otherwise) */
  uint32_t offload; /* VF_OFFLOAD_* bits */
  uint32_t gpu_cc_major, gpu_cc_minor; /* 0: unknown GPU generation */
  uint64_t capacity_bytes;            /* 0: no GPU given */
  uint64_t context_bytes;             /* CUDA context and module images (not allocator) */
};

/* Contract defaults: batch 1, seq 2048, fp32 weights, AdamW, full, LoRA r 8 on q,v. */
VF_API void vf_setup_default(struct vf_setup *s);
/* Fills what the setup left to the framework (task, attention, accumulation, lengths)
 * with what the model and the framework's profile say. */
VF_API void vf_setup_resolve(struct vf_setup *s, const struct vf_model *m, const struct vf_profile *p);
/* Batches padded to their longest sample with no distribution of the samples' lengths given:
 * samples are assumed spread evenly over 1..seq (the distribution of mean seq / 2), and the
 * replay draws batches from that as from a given one. A no-op otherwise. */
VF_API void vf_setup_assume_lengths(struct vf_setup *s);
/* Parses a LoRA target list ("q,v", "all-linear") into bits. */
VF_API int vf_lora_targets_parse(const char *text, uint32_t *bits);
/* The quantization of the base weights a setup means: --quant as given, nf4-dq for qlora
 * when none is given, and VF_QUANT_NONE when the weights are not quantized. */
VF_API enum vf_quant vf_setup_quant(const struct vf_setup *s);
/* Whether the weights are sharded and gathered per unit (ZeRO-3, FSDP, HSDP); whether the
 * sharding is FSDP's (FSDP, HSDP). */
VF_API bool vf_shard_weights(enum vf_shard shard);
VF_API bool vf_shard_fsdp(enum vf_shard shard);
/* Rejects contradictory or impossible setups, with the reason in d. */
VF_API int vf_setup_validate(const struct vf_setup *s, const struct vf_model *m, struct vf_diag *d);
/* Rejects a parallel layout the framework cannot run (a resolved setup): a pipeline or
 * schedule it does not have, stages it cannot split the layers into. */
VF_API int vf_layout_validate(const struct vf_setup *s, const struct vf_model *m, const struct vf_profile *p,
                              struct vf_diag *d);

enum vf_category { VF_CAT_WEIGHTS, VF_CAT_GRADIENTS, VF_CAT_OPTIMIZER, VF_CAT_ACTIVATIONS,
                   VF_CAT_TEMPORARIES, VF_CAT_RUNTIME, VF_CAT_COUNT };
VF_API const char *vf_category_name(enum vf_category c);

enum vf_phase { VF_PHASE_LOAD, VF_PHASE_FORWARD, VF_PHASE_LOSS, VF_PHASE_BACKWARD,
                VF_PHASE_OPTIMIZER, VF_PHASE_EVAL, VF_PHASE_SAVE, VF_PHASE_COUNT };
VF_API const char *vf_phase_name(enum vf_phase p);

struct vf_estimate {
  uint64_t params, trainable_params;
  /* What the estimate assumed where the setup left it open. */
  enum vf_attention attention;
  uint64_t accumulation;
  enum vf_lengths lengths;
  enum vf_eval eval; /* whether the run validates after its steps */
  uint64_t allocated_peak, reserved_peak, device_peak;
  enum vf_phase peak_phase;
  /* At the allocated peak: live tensor bytes per category; then the allocator's cached and
   * fragmented bytes at its reserved peak beyond them, and the CUDA context. They sum to
   * device_peak. */
  uint64_t by_category[VF_CAT_COUNT];
  uint64_t allocator_slack, context;
  uint64_t phase_allocated[VF_PHASE_COUNT], phase_reserved[VF_PHASE_COUNT];
  /* With a distribution of sample lengths: the higher reserved peak of the drawn batches in
   * either order (0 without one); the reserved and device ranges reach up to it. */
  uint64_t reserved_worst;
  /* With a GPU given: what the allocator may reserve there (its capacity less the CUDA
   * context). Reaching it, the allocator freed its cached blocks and retried, as PyTorch's
   * does before it raises out of memory (cache_releases counts those retries); where a
   * request failed even so (out_of_memory), the replay went on past the GPU's size to
   * measure the peak. 0 and false without a GPU. */
  uint64_t allocator_capacity, cache_releases;
  bool out_of_memory;
  /* Parallel layout: the pipeline schedule (VF_PP_NONE without a pipeline), the pipeline
   * rank whose peak is reported (the most loaded), its blocks and the micro batches whose
   * activations it holds at once; whether tensor parallelism splits the sequence too. */
  enum vf_pp_schedule pp_schedule;
  uint64_t pp_rank, pp_rank_layers;
  double pp_in_flight;
  bool sequence_parallel;
  /* With --compile yes: the loss ran compiled (the framework compiles it, and no tensor
   * parallel loss, chunking, fused kernel or soft-capping takes its place). */
  bool loss_compiled;
};

struct vf_alloc_conf;

/* Peak memory of the second training step (every persistent buffer exists). Pure. */
VF_API int vf_estimate(const struct vf_model *m, const struct vf_setup *s, const struct vf_profile *p,
                       const struct vf_alloc_conf *alloc, struct vf_estimate *out, struct vf_diag *d);

/* One event of the replayed run, with the allocator's figures right after it. Besides
 * allocations and frees, the streams' part (vf_trace_event's): a block used on another
 * stream too, a CUDA event recorded, the host waiting for one; and the cache emptied. */
enum vf_timeline_op {
  VF_TIMELINE_ALLOC,
  VF_TIMELINE_FREE,
  VF_TIMELINE_RECORD,
  VF_TIMELINE_EVENT,
  VF_TIMELINE_WAIT,
  VF_TIMELINE_EMPTY_CACHE
};
struct vf_timeline_event {
  uint8_t op;       /* enum vf_timeline_op */
  uint8_t phase;    /* enum vf_phase */
  uint8_t category; /* enum vf_category of the block (VF_CAT_RUNTIME for the others) */
  uint8_t stage;    /* pipeline rank replayed (0 without a pipeline) */
  uint8_t with_graph; /* a free that waits for the autograd graph to go: in one model, its
                       * backward's end; in a workload of several, the whole backward's */
  uint32_t stream;  /* where the block is made or used, or the event recorded (0: the default) */
  uint64_t id;      /* the block (an allocation's id is freed by the free of the same id), or
                     * the CUDA event for VF_TIMELINE_EVENT and _WAIT, numbered apart */
  uint64_t bytes;   /* block bytes (rounded as the allocator rounds); 0 for the others */
  uint64_t allocated, reserved;
};
typedef void (*vf_timeline_fn)(void *arg, const struct vf_timeline_event *e);

/* vf_estimate() with every layer replayed (no extension from shorter replays), telling fn
 * of each event in order, of the pipeline rank reported only. Pure apart from
 * what fn does. */
VF_API int vf_estimate_timeline(const struct vf_model *m, const struct vf_setup *s, const struct vf_profile *p,
                                const struct vf_alloc_conf *alloc, vf_timeline_fn fn, void *arg,
                                struct vf_estimate *out, struct vf_diag *d);

/* A --framework value: NAME, or NAME@VERSION where VERSION is a release ("4.46") or, for
 * code from between releases, a month ("2023-10"). 0 or VF_EINVAL (d says why). */
struct vf_framework_spec {
  char name[32], version[16]; /* version "" when none was given */
};
VF_API int vf_framework_spec_parse(const char *text, struct vf_framework_spec *out, struct vf_diag *d);
/* A --torch value: a PyTorch release ("2.1", "1.13.1"). 0 or VF_EINVAL (d says why). */
VF_API int vf_torch_release_check(const char *text, struct vf_diag *d);

/* ---- Readers (src/io) ---- */
/* Loads the profile of a framework ("hf") at the newest release it describes, or at the
 * newest release not after a version ("hf@4.46", "litgpt@2023-10"), under the PyTorch release
 * torch (NULL or "": the release's own). A version older than every release described gets
 * the oldest (release_predates). VF_EINVAL for an ill-formed version, VF_ENOTFOUND for an
 * unknown framework, VF_EFORMAT for a malformed data file. *out is freed with
 * vf_profile_free(). */
VF_API int vf_profile_load(const char *framework, const char *torch, struct vf_profile **out, struct vf_diag *d);
VF_API void vf_profile_free(struct vf_profile *p);
/* Device memory outside PyTorch's allocator, from data/runtime.json: the CUDA context of a
 * GPU generation, plus NCCL's buffers when the run spans several GPUs. */
VF_API int vf_runtime_context_bytes(uint32_t cc_major, bool distributed, uint64_t *out);

#endif

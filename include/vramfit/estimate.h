#ifndef VRAMFIT_ESTIMATE_H
#define VRAMFIT_ESTIMATE_H

#include <stdbool.h>
#include <stdint.h>

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

/* Names as the contract spells them; vf_enum_parse() maps a name back. The "auto" and
 * "default" entries stand for "not given": they have a name but are no one's spelling, so
 * vf_enum_parse() refuses them (VF_ENOTFOUND) and vf_enum_choices() leaves them out. */
enum vf_enum_kind { VF_ENUM_TASK, VF_ENUM_PRECISION, VF_ENUM_OPTIMIZER, VF_ENUM_METHOD,
                    VF_ENUM_QUANT, VF_ENUM_CKPT, VF_ENUM_ATTENTION, VF_ENUM_SHARD, VF_ENUM_LENGTHS,
                    VF_ENUM_EVAL, VF_ENUM_PP_SCHEDULE, VF_ENUM_SP };
const char *vf_enum_name(enum vf_enum_kind kind, int value);
int vf_enum_parse(enum vf_enum_kind kind, const char *name, int *value);
/* The names vf_enum_parse() accepts, comma-separated ("none, nf4, nf4-dq, int8"). */
void vf_enum_choices(enum vf_enum_kind kind, char *buf, size_t size);

/* A value per model type (config.json's model_type), "*" standing for every other type. */
#define VF_TYPE_VALUES_MAX 8
struct vf_type_values {
  char type[VF_TYPE_VALUES_MAX][16];
  uint32_t value[VF_TYPE_VALUES_MAX];
  uint32_t n;
};

/* What a framework's modeling and training code does that changes memory, at one of its
 * releases. Read from data/frameworks/<name>.json, with the behaviours that follow the
 * PyTorch release from data/torch.json (src/io/profile.c). */
struct vf_profile {
  char name[32];
  char release[16]; /* the framework release the values describe ("5.23") */
  char date[8];     /* when that release was current ("2026-06") */
  char torch[16];   /* the PyTorch release of the run: asked for, or the one used with the release */
  /* The version asked for is older than every release the profile describes (its oldest
   * stands in); the same for the PyTorch release among those data/torch.json describes. */
  bool release_predates, torch_predates;
  enum vf_attention default_attention;
  /* Copies a norm keeps for backward, in bytes per element (0 stands for the compute
   * dtype's size): always, and in addition when the norm's weight is trainable. */
  uint32_t rms_norm_saves[4], n_rms_norm_saves;
  uint32_t rms_norm_weight_saves[4], n_rms_norm_weight_saves;
  uint32_t layer_norm_saves[4], n_layer_norm_saves;
  bool gqa_expand;          /* K/V repeated to all heads before attention */
  bool kv_repeat_interleave; /* gqa_expand copies with repeat_interleave, even one head */
  uint32_t attn_out_copies; /* copies of the attention output kept when o_proj trains */
  bool fused_qkv;           /* one q,k,v projection (and one LoRA branch) per layer */
  bool qkv_view_kept;       /* unexpanded V stays a view of the fused q,k,v output, keeping all of it */
  bool lora_zero_pad;       /* a fused q,k,v LoRA adapting some of q, k, v keeps its zero-padded output */
  bool softcap_eager;       /* attention score soft-capping forces the eager path */
  bool final_softcap_logits; /* final soft-capping caps the logits (else the final norm's output) */
  bool untie_embeddings;    /* a separate output head even where the config ties it */
  uint32_t quant_input_bytes; /* a quantized linear keeps its input at this size (0: not) */
  /* The training loop holds each micro batch's autograd graph (in litgpt, through its loss
   * and logits variables) until the next micro batch's loss is computed. */
  bool graph_held;
  /* Per element, beyond the weight, while a 4-bit weight is dequantized: for the backward's
   * input gradient, and for the forward's matmul. */
  uint32_t dequant_extra_bytes, dequant_forward_extra_bytes;
  /* A quantized model's token embedding is swapped, after the optimizer is made, for one
   * normalizing its output (bitsandbytes' StableEmbedding): the old one stays allocated,
   * and the new one trains outside the optimizer, so its gradient is never freed. */
  bool stable_embedding;
  bool rope_copies;         /* q and k rotated into new tensors */
  uint32_t gelu_new_saves;  /* tensors of the MLP's width the gelu_new activation keeps */
  bool eager_softmax_fp32;  /* softmax computed in fp32 then cast */
  bool eager_softmax_saves_input; /* attention softmax keeps its input too (torch < 1.11) */
  /* Loss, in bytes per logit: alive at the loss forward's peak (e.g. 2 + 4 + 4: logits,
   * fp32 up-cast, log-softmax), kept from there into the backward, and added at the loss
   * backward's peak. */
  uint32_t logits_peak_bytes, logits_kept_bytes, logits_backward_bytes;
  /* Of the kept bytes, those the training loop still holds after the backward: the logits
   * Lightning Fabric converts to fp32 after the forward (convert_output) stay in the loop's
   * variable until the next micro batch's forward has made its own (0: none held). */
  uint32_t logits_held_bytes;
  uint32_t loss_chunk_tokens; /* >0: the head and loss run over chunks of this many positions */
  /* With chunks, full fine-tuning runs the head over the whole sequence and only the loss
   * over slices of its converted logits, whose gradients the backward assembles whole. */
  bool full_head_whole;
  /* >0: the model returns its logits as this many chunks of each sequence, all made (whole,
   * in the compute dtype) before the loss up-casts them one chunk at a time. */
  uint32_t output_chunks;
  /* Bytes per element of each quantized weight that its quantizer allocates on the GPU
   * while converting it at load time (torchao's NF4 nearest-value search: 66). */
  uint32_t quant_load_bytes;
  bool adapter_fp32;    /* LoRA weights kept in fp32 under 16-bit base weights */
  bool lora_dropout;    /* LoRA dropout active (a mask and a copy of each adapted input) */
  bool foreach_optimizer; /* multi-tensor optimizer step: one state-sized temporary */
  bool master_weights;    /* fp32 master copy of 16-bit trainable weights */
  double selective_keep;  /* share of a layer's saved tensors kept by selective checkpointing */
  bool quantize_head;      /* the output head is quantized along with the blocks */
  uint32_t default_accumulation; /* micro batches per step in the framework's stock recipes */
  bool zero_grad_frees;    /* zero_grad() frees gradients (set_to_none) instead of zeroing */
  bool zero_grad_before_backward; /* zero_grad() runs after the next forward, not the step */
  bool fsdp_no_sync;       /* FSDP accumulates unsharded gradients under no_sync() */
  bool fsdp_flat_params;   /* FSDP units are flat parameters (FSDP1), not per-tensor (FSDP2) */
  bool fsdp_adapter_units_train; /* a flat unit holds a layer's adapters with its frozen weights */
  bool fsdp_full_load;     /* loading the checkpoint unshards every FSDP unit at once */
  bool fsdp_root_reshards; /* FSDP2's root unit reshards after its forward, gathers again for backward */
  /* FSDP2 shards an untied input embedding as a unit of its own (resharded after its
   * forward, gathered again for its backward) and the final norm with the head as another
   * (gathered at the norm, reduced and resharded when the head's backward is done). */
  bool fsdp_embedding_unit;
  /* The model's forward computes the loss itself (labels passed in), so FSDP2's root
   * post-forward, which frees the last forward all-gather buffer, comes after the loss. */
  bool loss_in_forward;
  /* FSDP mixed precision reduces in the compute dtype: a unit's unsharded gradients (held
   * under no_sync(), or awaiting their reduce-scatter) stay in it, not the weights' */
  bool fsdp_grads_in_compute_dtype;
  /* Under FSDP with mixed precision the framework runs the forward under autocast too, not
   * only on the weights FSDP gathers in the compute dtype (autocast's fp32 ops then up-cast). */
  bool fsdp_autocast;
  /* Data parallelism without sharding wraps the model in torch's DistributedDataParallel,
   * whose constructor broadcasts every parameter from rank 0 through flat buckets. */
  bool ddp_init_broadcast;
  bool varied_lengths;     /* the stock recipes pad each batch to its longest sample */
  bool validates;          /* the stock training loop runs validation between steps */
  bool generates;          /* validation is followed by generating a sample (a KV cache) */
  bool ckpt_input_grads;   /* checkpointing makes the embeddings' output require grad */
  bool lion_fp32_states;   /* --optimizer lion keeps its momentum in fp32 (bitsandbytes' Lion) */
  /* 8-bit optimizers keep the states of nn.Embedding weights in 32 bits (the HF Trainer
   * registers them so), and one fp32 absmax per block of this many elements of an 8-bit
   * state (0: none). */
  bool embedding_states_fp32;
  uint32_t optim8bit_block;
  /* Model types (config.json model_type) whose modeling code differs from the framework's
   * usual path: eager attention taking the softmax in the scores' own dtype, without
   * eager_softmax_fp32's up-cast; and attention passing one multi-query K/V head to SDPA
   * as it is, without enable_gqa. */
  char eager_softmax_in_dtype[8][VF_MODEL_TYPE_LEN];
  uint32_t n_eager_softmax_in_dtype;
  char sdpa_mqa_unexpanded[8][VF_MODEL_TYPE_LEN];
  uint32_t n_sdpa_mqa_unexpanded;
  /* Model types whose rotary embedding concatenates q into a new tensor laid out [batch,
   * heads, positions, dim], so that SDPA's output is laid out so too and the attention
   * output's transpose(1, 2).contiguous() copies it; and those whose V stays a view of the
   * fused q,k,v output while q and k are rotated into new tensors (qkv_view_kept for them). */
  char sdpa_out_copied[8][VF_MODEL_TYPE_LEN];
  uint32_t n_sdpa_out_copied;
  char qkv_view_models[8][VF_MODEL_TYPE_LEN];
  uint32_t n_qkv_view_models;
  bool sdpa_math_fp32; /* SDPA's math backend computes 16-bit inputs in fp32 */
  bool experts_in_weight_dtype; /* MoE experts compute in their weights' dtype, outside autocast */
  bool adafactor_fp32_copies; /* Adafactor's step copies 16-bit gradients and parameters to fp32 */
  bool padding_mask;          /* padded batches come with an attention mask */
  /* The RoPE table of cosines and sines a model keeps on the GPU, in bytes per position and
   * rotated dimension (0: none, they are computed each forward), and whether a LoRA model
   * keeps one per layer (1) rather than one (0). */
  struct vf_type_values rope_table_bytes, lora_rope_table_per_layer;
  /* Pipeline parallelism: the schedules the framework runs (bit 1 << VF_PP_x each; 0: none)
   * and its default, the first listed; the model chunks per rank of the interleaved
   * schedule; whether every stage must get as many layers; whether the pipeline runs on
   * torch.distributed.pipelining (receive buffers for every micro batch, the last stage's
   * outputs kept through the step, FSDP left unsharded until the last backward). */
  uint32_t pp_schedules;
  enum vf_pp_schedule pp_default_schedule;
  uint32_t pp_stages_per_rank;
  bool pp_even_layers;
  bool pp_torch_pipelining;
  bool pp_input_grads_kept; /* each micro batch's stage-input gradient stays on its receive buffer until the next step */
  bool sequence_parallel;  /* tensor parallelism comes with sequence parallelism by default */
  bool sp_gathered_input;  /* under sequence parallelism a projection keeps its all-gathered input */
  bool grad_buffer_fp32;   /* gradients live in one persistent fp32 buffer, zeroed, never freed */
  /* Context parallelism's ring attention all-gathers every rank's keys and values at once
   * (else it passes them on rank to rank through two buffers). */
  bool cp_kv_all_gather;
  /* Under tensor parallelism the cross-entropy runs on the vocabulary-sharded logits through
   * torch's loss_parallel, whose log-softmax and fused backward are decompositions. */
  bool loss_parallel;
  /* Expert parallelism: each expert takes at most this factor of its even share of the
   * routed tokens, padded up to it (0: dropless, every token, no padding). */
  double moe_capacity_factor;
  /* ZeRO-1/2 gradient reduction: the reduce buckets each backward allocates (0: none; 2
   * with overlap_comm) and their elements (0: hidden x hidden, the HF integration's
   * "auto"). */
  uint32_t zero_reduce_buckets, zero_reduce_bucket_elems;
  /* ZeRO-3's parameter coordinator (DeepSpeed): the most elements its prefetching keeps
   * gathered, in millions (stage3_max_live_parameters; 0: not modelled, a layer gathered
   * at a time), the parameters small enough to stay gathered for the run
   * (stage3_param_persistence_threshold; 0: 10 x hidden, the HF integration's "auto"), and
   * the IPG buffers of zero_reduce_bucket_elems the optimizer keeps for the gradients it
   * reduces. */
  uint32_t zero3_max_live_millions, zero3_persistence_elems, zero3_ipg_buckets;
  /* ZeRO-3's optimizer step converts the gradients of one sub group of this many million
   * partition elements at a time to fp32 (sub_group_size; 0: not modelled). */
  uint32_t zero3_sub_group_millions;
};

struct vf_setup {
  uint64_t batch, seq;
  uint64_t accumulation; /* micro batches per optimizer step; 0: the framework's default */
  enum vf_task task;
  enum vf_precision weights, amp;
  enum vf_optimizer optimizer;
  enum vf_method method;
  uint64_t lora_r;
  uint32_t lora_targets; /* bit (1 << VF_KIND_x) per targeted kind */
  enum vf_quant quant;
  enum vf_ckpt grad_ckpt;
  enum vf_attention attention;
  enum vf_lengths lengths;
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
void vf_setup_default(struct vf_setup *s);
/* Fills what the setup left to the framework (task, attention, accumulation, lengths)
 * with what the model and the framework's profile say. */
void vf_setup_resolve(struct vf_setup *s, const struct vf_model *m, const struct vf_profile *p);
/* Parses a LoRA target list ("q,v", "all-linear") into bits. */
int vf_lora_targets_parse(const char *text, uint32_t *bits);
/* The quantization of the base weights a setup means: --quant as given, nf4-dq for qlora
 * when none is given, and VF_QUANT_NONE when the weights are not quantized. */
enum vf_quant vf_setup_quant(const struct vf_setup *s);
/* Whether the weights are sharded and gathered per unit (ZeRO-3, FSDP, HSDP); whether the
 * sharding is FSDP's (FSDP, HSDP). */
bool vf_shard_weights(enum vf_shard shard);
bool vf_shard_fsdp(enum vf_shard shard);
/* Rejects contradictory or impossible setups, with the reason in d. */
int vf_setup_validate(const struct vf_setup *s, const struct vf_model *m, struct vf_diag *d);
/* Rejects a parallel layout the framework cannot run (a resolved setup): a pipeline or
 * schedule it does not have, stages it cannot split the layers into. */
int vf_layout_validate(const struct vf_setup *s, const struct vf_model *m, const struct vf_profile *p,
                       struct vf_diag *d);

enum vf_category { VF_CAT_WEIGHTS, VF_CAT_GRADIENTS, VF_CAT_OPTIMIZER, VF_CAT_ACTIVATIONS,
                   VF_CAT_TEMPORARIES, VF_CAT_RUNTIME, VF_CAT_COUNT };
const char *vf_category_name(enum vf_category c);

enum vf_phase { VF_PHASE_LOAD, VF_PHASE_FORWARD, VF_PHASE_LOSS, VF_PHASE_BACKWARD,
                VF_PHASE_OPTIMIZER, VF_PHASE_EVAL, VF_PHASE_SAVE, VF_PHASE_COUNT };
const char *vf_phase_name(enum vf_phase p);

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
  /* Parallel layout: the pipeline schedule (VF_PP_NONE without a pipeline), the pipeline
   * rank whose peak is reported (the most loaded), its blocks and the micro batches whose
   * activations it holds at once; whether tensor parallelism splits the sequence too. */
  enum vf_pp_schedule pp_schedule;
  uint64_t pp_rank, pp_rank_layers;
  double pp_in_flight;
  bool sequence_parallel;
};

struct vf_alloc_conf;

/* Peak memory of the second training step (every persistent buffer exists). Pure. */
int vf_estimate(const struct vf_model *m, const struct vf_setup *s, const struct vf_profile *p,
                const struct vf_alloc_conf *alloc, struct vf_estimate *out, struct vf_diag *d);

/* One event of the replayed run, with the allocator's figures right after it. */
enum vf_timeline_op { VF_TIMELINE_ALLOC, VF_TIMELINE_FREE };
struct vf_timeline_event {
  uint8_t op;       /* enum vf_timeline_op */
  uint8_t phase;    /* enum vf_phase */
  uint8_t category; /* enum vf_category of the block */
  uint8_t stage;    /* pipeline rank replayed (0 without a pipeline) */
  uint8_t with_graph; /* a free that waits for the autograd graph to go: in one model, its
                       * backward's end; in a workload of several, the whole backward's */
  uint64_t id;      /* the block; an allocation's id is freed by the free of the same id */
  uint64_t bytes;   /* block bytes (rounded as the allocator rounds) */
  uint64_t allocated, reserved;
};
typedef void (*vf_timeline_fn)(void *arg, const struct vf_timeline_event *e);

/* vf_estimate() with every layer replayed (no extension from shorter replays), telling fn
 * of each allocation and free in order, of the pipeline rank reported only. Pure apart from
 * what fn does. */
int vf_estimate_timeline(const struct vf_model *m, const struct vf_setup *s, const struct vf_profile *p,
                         const struct vf_alloc_conf *alloc, vf_timeline_fn fn, void *arg,
                         struct vf_estimate *out, struct vf_diag *d);

/* A --framework value: NAME, or NAME@VERSION where VERSION is a release ("4.46") or, for
 * code from between releases, a month ("2023-10"). 0 or VF_EINVAL (d says why). */
struct vf_framework_spec {
  char name[32], version[16]; /* version "" when none was given */
};
int vf_framework_spec_parse(const char *text, struct vf_framework_spec *out, struct vf_diag *d);
/* A --torch value: a PyTorch release ("2.1", "1.13.1"). 0 or VF_EINVAL (d says why). */
int vf_torch_release_check(const char *text, struct vf_diag *d);

/* ---- Readers (src/io) ---- */
/* Loads the profile of a framework ("hf") at the newest release it describes, or at the
 * newest release not after a version ("hf@4.46", "litgpt@2023-10"), under the PyTorch release
 * torch (NULL or "": the release's own). A version older than every release described gets
 * the oldest (release_predates). VF_EINVAL for an ill-formed version, VF_ENOTFOUND for an
 * unknown framework, VF_EFORMAT for a malformed data file. */
int vf_profile_load(const char *framework, const char *torch, struct vf_profile *p, struct vf_diag *d);
/* Device memory outside PyTorch's allocator, from data/runtime.json: the CUDA context of a
 * GPU generation, plus NCCL's buffers when the run spans several GPUs. */
int vf_runtime_context_bytes(uint32_t cc_major, bool distributed, uint64_t *out);

#endif

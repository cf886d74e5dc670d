/* The framework profile: every switch of the estimator that depends on what a framework's
 * code does, at one of its releases. Read from data/frameworks/<name>.json and
 * data/torch.json by src/io/profile.c, used by the estimator (src/core/estimate/) and the
 * setup's defaults. Outside the library it is opaque (include/vramfit/estimate.h), so a new
 * mechanism adds a field here without changing the API. DEVELOPERS.md says how to add one. */
#ifndef VF_CORE_PROFILE_H
#define VF_CORE_PROFILE_H

#include <stdbool.h>
#include <stdint.h>

#include "vramfit.h"

/* A value per model type (config.json's model_type), "*" standing for every other type. */
#define TYPE_VALUES_MAX 8
struct type_values {
  char type[TYPE_VALUES_MAX][16];
  uint32_t value[TYPE_VALUES_MAX];
  uint32_t n;
};

/* What the checkpoint's save of FSDP-sharded weights gathers on the GPU: each unit's whole
 * (FSDP1's full state dict), one tensor at a time (FSDP2's full state dict:
 * DTensor.full_tensor, then to the CPU), or nothing (each rank writes its own shards).
 * ZeRO-3's save gathers module by module whatever the profile says. */
enum vf_save_gathers { VF_SAVE_UNITS, VF_SAVE_TENSORS, VF_SAVE_NONE };

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
  /* Model types whose RMSNorm multiplies its weight before casting back to the input's
   * dtype: a trainable weight keeps the fp32 normalized input instead. */
  char rms_norm_weight_fp32[8][VF_MODEL_TYPE_LEN];
  uint32_t n_rms_norm_weight_fp32;
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
  /* --loss chunked where the framework's own loss takes the logits whole: the chunks it cuts
   * them into, each up-cast alone as with output_chunks (0: the framework has none). */
  uint32_t chunked_output_chunks;
  /* The kernels the framework can run for the head and loss together, never making the
   * logits whole: Liger's fused linear cross-entropy (--loss fused), Cut Cross-Entropy
   * (--loss cce). */
  bool liger_loss, cce_loss;
  /* The framework can offload the tensors saved for the backward to the CPU (a switch its
   * configs have), and only with activation checkpointing on. */
  bool offloads_activations, activation_offload_needs_ckpt;
  /* Offloaded activations the offloader keeps on the GPU until as many newer ones are copied
   * out, its copies and the reloads made on a stream of its own (0: freed at once, reloaded
   * on the computation stream). */
  uint32_t offload_stash;
  /* The framework can step each parameter's optimizer inside the backward, in a hook run
   * once its gradient is accumulated, and free the gradient there (a switch its configs
   * have; its full fine-tuning recipes alone, without accumulation). */
  bool optimizer_in_bwd;
  /* Bytes per element of each quantized weight that its quantizer allocates on the GPU
   * while converting it at load time (torchao's NF4 nearest-value search: 66). */
  uint32_t quant_load_bytes;
  bool adapter_fp32;    /* LoRA weights kept in fp32 under 16-bit base weights */
  bool lora_dropout;    /* LoRA dropout active (a mask and a copy of each adapted input) */
  bool foreach_optimizer; /* multi-tensor optimizer step: one state-sized temporary */
  bool master_weights;    /* fp32 master copy of 16-bit trainable weights */
  /* The framework has a selective checkpointing of its own to switch on (the planner offers
   * --grad-ckpt selective only then; elsewhere it would be the user's own policy). */
  bool selective_policy;
  double selective_keep;  /* share of a layer's saved tensors kept by selective checkpointing */
  /* The same when the layers run compiled (--compile yes): AOTAutograd saves only what the
   * backward reads, where eager's checkpoint stores every output its policy saves. */
  double selective_keep_compiled;
  bool quantize_head;      /* the output head is quantized along with the blocks */
  /* A quantized model whose weights are not sharded has the parameters it leaves in 16 bits
   * (embeddings, norms, head) up-cast to fp32 before training: the QLoRA recipes' PEFT
   * prepare_model_for_kbit_training, which they skip for sharded QLoRA. */
  bool quant_rest_fp32;
  uint32_t default_accumulation; /* micro batches per step in the framework's stock recipes */
  bool zero_grad_frees;    /* zero_grad() frees gradients (set_to_none) instead of zeroing */
  bool zero_grad_before_backward; /* zero_grad() runs after the next forward, not the step */
  bool fsdp_no_sync;       /* FSDP accumulates unsharded gradients under no_sync() */
  bool fsdp_flat_params;   /* FSDP units are flat parameters (FSDP1), not per-tensor (FSDP2) */
  bool fsdp_adapter_units_train; /* a flat unit holds a layer's adapters with its frozen weights */
  bool fsdp_full_load;     /* loading the checkpoint unshards every FSDP unit at once */
  bool fsdp_sync_module_states; /* FSDP1's wrap broadcasts each unit from rank 0 */
  /* ProcessGroupNCCL records a collective's tensors on its own stream (recordStream), so
   * their blocks return to the cache only once the host learns that stream's work is done;
   * from torch 2.8 it holds them on the host until work.wait() instead ("torch"). */
  bool nccl_records_streams;
  /* FSDP2 copies a unit's gradients into its reduce-scatter input on the computation
   * stream, not the reduce-scatter stream's pool ("torch": from 2.5, pytorch#129721). */
  bool fsdp2_reduce_input_compute_stream;
  /* The loop empties the allocator's cache once the model is set up, before the first step,
   * from this many GPUs on (0: never): what the setup left cached goes back to the GPU. */
  uint32_t empty_cache_before_training;
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
  /* Without a dtype asked for, the weights are loaded in the checkpoint's dtype (config.json's
   * torch_dtype: transformers 5's from_pretrained dtype "auto"), not in float32. */
  bool checkpoint_dtype_weights;
  /* Under FSDP with mixed precision, trainable 16-bit weights are made fp32 before sharding
   * (accelerate's upcast): fp32 shards, gradients and optimizer states. */
  bool fsdp_upcast_trainable;
  /* Data parallelism without sharding wraps the model in torch's DistributedDataParallel,
   * whose constructor broadcasts every parameter from rank 0 through flat buckets. */
  bool ddp_init_broadcast;
  /* The loop reads a value of the GPU's on the host every optimizer step (the loss, to log or
   * to check it), so the host then knows the GPU's work done and every block another stream
   * kept returns to the cache. */
  bool host_waits_each_step;
  /* Under torch.compile (--compile yes) the framework compiles its loss function too, not
   * only the model's layers. */
  bool compiled_loss;
  /* Under torch.compile the framework compiles the transformer layers (one graph each). */
  bool compiled_layers;
  bool varied_lengths;     /* the stock recipes pad each batch to its longest sample */
  /* The loop's first micro batch holds the training set's longest sample (to run out of
   * memory at once), so no earlier micro batch's graph is alive next to it. */
  bool longest_first;
  enum vf_save_gathers save_gathers;
  bool validates;          /* the stock training loop runs validation between steps */
  bool validates_first;    /* where the run validates, it does once before its first step too */
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
  /* Model types whose sliding-window layers give SDPA their window as a mask once the
   * sequence reaches it. */
  char sdpa_window_mask[8][VF_MODEL_TYPE_LEN];
  uint32_t n_sdpa_window_mask;
  bool sdpa_math_fp32; /* SDPA's math backend computes 16-bit inputs in fp32 */
  bool experts_in_weight_dtype; /* MoE experts compute in their weights' dtype, outside autocast */
  bool adafactor_fp32_copies; /* Adafactor's step copies 16-bit gradients and parameters to fp32 */
  bool padding_mask;          /* padded batches come with an attention mask */
  /* The RoPE table of cosines and sines a model keeps on the GPU, in bytes per position and
   * rotated dimension (0: none, they are computed each forward), and whether a LoRA model
   * keeps one per layer (1) rather than one (0). */
  struct type_values rope_table_bytes, lora_rope_table_per_layer;
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

#endif

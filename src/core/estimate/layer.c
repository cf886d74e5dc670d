/* A transformer layer: its parameters, its forward (norms, attention, MLP, what each
 * keeps for the backward), its backward, and what changes both: activation checkpointing,
 * which runs the forward again before the backward (full or selective), and activation
 * offloading to the host. Sources: torch 2.13 torch/utils/checkpoint.py (non-reentrant
 * checkpointing's _StopRecomputationError); transformers 5.23 modeling_bert.py
 * (BertOutput.forward, BertLayer.feed_forward_chunk), modeling_llama.py, modeling_gpt_neox.py
 * GPTNeoXLayer; autocast_mode.cpp cached_cast; Megatron-Core's expert data parallel group,
 * torchtitan's dp_mod_ep mesh. */
#include <string.h>

#include "core/estimate/internal.h"

/* What is sharded of parameters [begin, end): their elements (or bytes), of the trainable
 * ones only where asked. An expert is sharded over its expert-data-parallel group of
 * dsize / ep GPUs (Megatron-Core's expert data parallel group, torchtitan's dp_mod_ep
 * mesh): counted ep times against the dsize every other parameter is divided by. */
uint64_t layer_param_sum(const struct ctx *x, size_t begin, size_t end, bool trainable, bool bytes, bool sharded) {
  uint64_t n = 0;
  for (size_t i = begin; i < end; i++) {
    const struct param *p = &x->ps->v[i];
    if (trainable && !p->trainable) continue;
    n += (bytes ? p->bytes : p->numel) * (sharded && p->expert ? x->s->ep : 1);
  }
  return n;
}

uint64_t layer_sum(const struct ctx *x, int32_t layer, bool trainable, bool bytes, bool sharded) {
  size_t begin, end;
  params_layer(x->ps, layer, &begin, &end);
  return layer_param_sum(x, begin, end, trainable, bytes, sharded);
}

/* Allocates a layer's weights, or the gradients of its trainable tensors (into g). */
void layer_params(struct ctx *x, int32_t layer, struct ids *g) {
  size_t begin, end;
  params_layer(x->ps, layer, &begin, &end);
  for (size_t i = begin; i < end; i++) {
    const struct param *p = &x->ps->v[i];
    bool late = layer < 0 && p->embedding && embedding_grads_late(x);
    if (!g) quant_load_weight(x, p);
    else if (p->trainable && !late) ids_push(x, g, tape_take(x, p->numel * x->d.g, VF_CAT_GRADIENTS));
  }
}

/* A profile's list of bytes per element kept, 0 standing for zero_bytes. */
static void keep_list(struct ctx *x, struct saved *sv, const uint32_t *bytes, uint32_t n, uint64_t elems,
                      uint64_t zero_bytes) {
  for (uint32_t i = 0; i < n; i++) tape_keep(x, sv, elems * (bytes[i] ? bytes[i] : zero_bytes));
}

/* Trainable projections reading a norm's output keep it as their input. Autocast casts it
 * for each of them apart (a cast is cached only for leaf weights, autocast_mode.cpp
 * cached_cast), so each keeps a copy of its own. */
static void norm_output_saves(struct ctx *x, struct saved *sv, uint32_t readers, bool trains) {
  /* Under sequence parallelism the projections read the output all-gathered over the
   * tensor-parallel group, the whole sequence: kept as their input where the framework keeps
   * the gathered tensor, else a buffer for the matmul (gathered again in the backward). */
  bool gathered_kept = x->d.sp && x->p->sp_gathered_input && trains;
  if (x->d.sp && readers && !gathered_kept) tape_transient(x, x->d.T * x->d.h * x->d.c, VF_CAT_TEMPORARIES);
  if (!trains) return;
  uint32_t copies = autocast_casts(x) ? readers : readers > 0;
  uint64_t read = x->d.sp && !gathered_kept ? x->d.Ts : x->d.T;
  for (uint32_t i = 0; i < copies; i++) tape_keep(x, sv, read * x->d.h * x->d.c);
}

/* What a norm over elems elements of in_bytes each keeps for its backward, more with a
 * trainable weight (`trains`: the weights of its layer, or of the head): the weight's
 * product keeps its other factor, the normalized input cast back to the input's dtype, or
 * in fp32 where the model multiplies before casting back (rms_norm_weight_fp32). The
 * profiles' 0 stands for the input's dtype in what the weight and LayerNorm keep. */
void layer_norm_keeps(struct ctx *x, struct saved *sv, uint64_t elems, uint64_t in_bytes, bool trains) {
  const struct vf_profile *p = x->p;
  if (x->m->arch.norm == VF_NORM_RMS && x->saving.compiled) {
    tape_keep(x, sv, elems * in_bytes); /* the input, whatever eager keeps (layers_compiled) */
  } else if (x->m->arch.norm == VF_NORM_RMS) {
    keep_list(x, sv, p->rms_norm_saves, p->n_rms_norm_saves, elems, x->d.c);
    if (!adapter_norm_weights_train(x, trains)) return;
    if (model_listed(p->rms_norm_weight_fp32, p->n_rms_norm_weight_fp32, x->m->arch.model_type))
      tape_keep(x, sv, elems * 4);
    else
      keep_list(x, sv, p->rms_norm_weight_saves, p->n_rms_norm_weight_saves, elems, in_bytes);
  } else {
    keep_list(x, sv, p->layer_norm_saves, p->n_layer_norm_saves, elems, in_bytes);
  }
}

/* A norm of the residual stream (in the weights' dtype under autocast) keeps what its
 * backward needs, and trainable projections after it keep its output. */
void layer_norm_saves(struct ctx *x, struct saved *sv, uint32_t readers, bool trains) {
  layer_norm_keeps(x, sv, x->d.Ts * x->d.h, autocast_stream_bytes(x), trains);
  norm_output_saves(x, sv, readers, trains);
}

/* Non-reentrant checkpointing stops recomputing a layer once the last tensor its forward
 * saved is saved again (torch 2.13 torch/utils/checkpoint.py: the pack hook raises
 * _StopRecomputationError). A post-norm layer's last saved tensors are its final
 * LayerNorm's mean and rstd, outputs of that op, so the recomputation stops inside
 * BertOutput.forward (transformers 5.23 modeling_bert.py) with the norm's output made (in
 * the stream's dtype) and what the Python frames still name: the dropped-out dense output
 * (`hidden_states`, while `self.LayerNorm(hidden_states + input_tensor)` runs) and the
 * activation's output (`intermediate_output` in BertLayer.feed_forward_chunk, kept anyway
 * when the down projection's weight trains). They go as the recomputation unwinds. A
 * pre-norm layer without dropout stops at its last projection's saved input, before that
 * projection's output exists. (GPT-2's residual dropout saves its mask once its output
 * exists, so that output is alive at the stop too: not counted, a compute-dtype stream.) */
static bool post_norm(const struct ctx *x) {
  return x->m->arch.family == VF_FAMILY_BERT;
}

static void recomputation_stop(struct ctx *x) {
  const struct dims *d = &x->d;
  if (!post_norm(x)) return;
  uint32_t activation = x->layers_train ? 0 : tape_take(x, d->T * d->ffn * mlp_bytes(x), VF_CAT_TEMPORARIES);
  uint32_t dropped = tape_take(x, d->Ts * d->h * d->c, VF_CAT_TEMPORARIES);
  tape_transient(x, d->Ts * d->h * autocast_stream_bytes(x), VF_CAT_TEMPORARIES);
  tape_give(x, dropped);
  tape_give(x, activation);
}

/* A block whose norms follow its sublayers (transformers 5.23 modeling_olmo2.py
 * Olmo2DecoderLayer: residual + post_attention_layernorm(self_attn(x)), then the same with
 * the MLP and post_feedforward_layernorm): the projections read the block's input and the
 * residual after attention themselves, keeping them, and the norms' outputs go straight to
 * the residual adds. While the MLP runs, the residual it keeps is counted twice (as the
 * stream and as the MLP's input), one stream's bytes above what is live. */
static void post_norm_block(struct ctx *x, struct saved *sv, int32_t layer) {
  norm_output_saves(x, sv, attention_readers(x), x->layers_train);
  attention_forward(x, sv, layer);
  parallel_ring_exchange(x, false);
  parallel_row_output(x);
  layer_norm_saves(x, sv, 0, x->layers_train);
  uint32_t mid = tape_take(x, x->d.Ts * x->d.h * x->d.c, VF_CAT_ACTIVATIONS);
  norm_output_saves(x, sv, mlp_readers(x), x->layers_train);
  mlp_forward(x, sv);
  parallel_row_output(x);
  layer_norm_saves(x, sv, 0, x->layers_train);
  tape_give(x, mid);
}

/* One block's forward; returns in sv what it keeps for backward. A parallel block feeds
 * attention and MLP from the same input: through one norm (Falcon, Phi) or two (GPT-NeoX),
 * both keeping that input. Recomputing, it ends where checkpointing stops it. */
static void block_layers(struct ctx *x, struct saved *sv, int32_t layer, bool recomputing) {
  const struct vf_arch *a = &x->m->arch;
  uint64_t stream = x->d.Ts * x->d.h * x->d.c;
  bool one_norm = a->parallel_residual && a->norms_per_layer == 1; /* read by attention and MLP */
  if (a->post_norms) {
    post_norm_block(x, sv, layer);
    return;
  }
  layer_norm_saves(x, sv, attention_readers(x) + (one_norm ? mlp_readers(x) : 0), x->layers_train);
  attention_forward(x, sv, layer);
  parallel_ring_exchange(x, false);
  parallel_row_output(x);
  uint32_t mid = tape_take(x, stream, VF_CAT_ACTIVATIONS);
  if (a->parallel_residual) {
    /* A parallel block's second norm (GPT-NeoX's post_attention_layernorm, modeling_gpt_neox.py
     * GPTNeoXLayer) reads the block input too: the input its LayerNorm keeps is the one the
     * first keeps; only its output is its own. */
    if (!one_norm) norm_output_saves(x, sv, mlp_readers(x), x->layers_train);
  } else {
    /* The norms after attention: the one before the MLP, and Gemma-2's around the outputs
     * (read by no projection). */
    for (uint32_t i = 2; i <= a->norms_per_layer; i++)
      layer_norm_saves(x, sv, i == (a->norms_per_layer == 4 ? 3u : 2u) ? mlp_readers(x) : 0, x->layers_train);
  }
  mlp_forward(x, sv);
  parallel_row_output(x);
  if (recomputing) recomputation_stop(x);
  tape_give(x, mid);
}

/* torch.compile runs the layers (the profile's compiled_layers, with --compile yes), and
 * AOTAutograd's min-cut partitioner (torch/_functorch/partitioners.py@v2.13.0
 * min_cut_rematerialization_partition) saves the fewest bytes the backward can recompute
 * the rest from: an RMSNorm keeps its input in the stream's dtype, not its fp32 up-cast and
 * normalized product, and a gated MLP recomputes its activation's output from the gate
 * projection's. bench/compiled_layers.py measures torchtune 0.6.1's and transformers 5.23's
 * Llama layers on the CPU (torch 2.13): 8,344 and 7,832 bytes a token a layer compiled,
 * 12,824 and 11,288 eager; these rules count 8,336 and 7,824, 12,816 and 11,280. Under
 * selective checkpointing the profile's compiled share stands for it. */
static bool layers_compiled(const struct ctx *x) {
  return x->s->compile == VF_COMPILE_YES && x->p->compiled_layers && x->s->grad_ckpt != VF_CKPT_SELECTIVE;
}

static void block_forward(struct ctx *x, struct saved *sv, int32_t layer, bool recomputing) {
  x->saving.compiled = layers_compiled(x);
  block_layers(x, sv, layer, recomputing);
  x->saving.compiled = false;
}

/* A layer's forward whose tensors all go when it is done: checkpointed, evaluated under
 * no_grad, or outside autograd's graph. What it makes is this micro batch's alone. */
void layer_forward_keeping_nothing(struct ctx *x, int32_t layer) {
  double in_flight = x->saving.in_flight;
  struct saved scratch = {0};
  x->saving.in_flight = 1;
  block_forward(x, &scratch, layer, false);
  tape_release(x, &scratch);
  x->saving.in_flight = in_flight;
}

/* A layer's forward in the step: outside autograd's graph it keeps nothing; fully
 * checkpointed, its input alone. */
void layer_forward(struct ctx *x, struct saved *sv, int32_t layer) {
  if (adapter_outside_graph(x, layer)) {
    layer_forward_keeping_nothing(x, layer);
  } else if (x->s->grad_ckpt == VF_CKPT_FULL) {
    autocast_copies(x, layer, sv, false);
    /* The checkpoint keeps the layer's input: the residual stream, in the weights' dtype
     * under autocast (transformers 5.23 modeling_llama.py `residual + hidden_states`
     * promotes a 16-bit output to the fp32 stream; modeling_bert.py's post-norm
     * LayerNorm(hidden_states + input_tensor) is on autocast's fp32 list,
     * aten/src/ATen/autocast_mode.cpp in torch 2.13). */
    tape_keep(x, sv, x->d.Ts * x->d.h * autocast_stream_bytes(x));
    layer_forward_keeping_nothing(x, layer);
  } else {
    autocast_copies(x, layer, sv, false);
    block_forward(x, sv, layer, false);
  }
}

static void offloaded(struct ctx *x, struct saved *sv, uint32_t i) {
  tape_give(x, sv->id[i]);
  sv->id[i] = 0;
}

/* Activation offloading moves a layer's saved tensors to the host after its forward and
 * brings them back for its backward. An offloader that copies on a stream of its own keeps
 * each tensor on the GPU until offload_stash further tensors have been packed, small ones
 * and those it does not offload included (torchtune 0.6.1 _activation_offloading.py
 * pack_tensor: the fwd_stash, by tensor id). A fully checkpointed layer packs two: the
 * input it keeps and the empty tensor torch's checkpoint saves beside it
 * (torch/utils/checkpoint.py _NoopSaveInputs). */
static void pack(struct ctx *x, struct saved *sv, uint32_t i) {
  struct offload_stash *st = &x->sched.stash;
  st->packs++;
  while (st->n && st->v[0].packed + x->p->offload_stash <= st->packs) {
    offloaded(x, st->v[0].sv, st->v[0].at);
    memmove(st->v, st->v + 1, --st->n * sizeof *st->v);
  }
  if (!sv) return;
  if (st->n == MAX_STASH) offloaded(x, sv, i);
  else st->v[st->n++] = (struct stashed){sv, i, st->packs};
}

void layer_offload(struct ctx *x, struct saved *sv) {
  if (!(x->s->offload & VF_OFFLOAD_ACTIVATIONS)) return;
  if (x->p->offload_stash && x->s->grad_ckpt == VF_CKPT_FULL) pack(x, NULL, 0);
  for (uint32_t i = 0; i < sv->n; i++) {
    if (sv->cat[i] != VF_CAT_ACTIVATIONS || sv->on_graph[i]) continue;
    if (x->p->offload_stash) pack(x, sv, i);
    else offloaded(x, sv, i);
  }
}

/* The final norm packs more tensors than the stash holds (torchtune's RMSNorm and
 * transformers' both save its fp32 input, the inverse root, their product and the weight):
 * every layer's input has gone to the host before the head runs. */
void layer_offload_flush(struct ctx *x) {
  struct offload_stash *st = &x->sched.stash;
  for (uint32_t k = 0; k < st->n; k++) offloaded(x, st->v[k].sv, st->v[k].at);
  st->n = 0;
  st->packs = 0;
}

/* What was offloaded comes back, on the offloader's stream where it has one (the stream's
 * own blocks, which the computation stream's allocations cannot take). */
static void reload(struct ctx *x, struct saved *sv) {
  uint8_t stream = x->p->offload_stash ? STREAM_OFFLOAD : STREAM_COMPUTE;
  for (size_t i = 0; i < sv->n; i++)
    if (!sv->id[i]) sv->id[i] = tape_take_on(x, sv->bytes[i], (enum vf_category)sv->cat[i], stream);
}

/* Checkpointed layers run their forward again before their backward: all of it (full) or
 * what selective checkpointing did not keep. */
static void recompute(struct ctx *x, struct saved *sv, int32_t layer) {
  double kept = x->saving.keep_share, in_flight = x->saving.in_flight;
  x->saving.in_flight = 1; /* the micro batch in its backward only */
  if (x->s->grad_ckpt == VF_CKPT_FULL) {
    /* The checkpoint holds the layer's input until the layer's backward is done. A
     * pre-norm layer's first norm saves that very tensor again as it recomputes (the
     * recomputation runs on the inputs the checkpoint kept), which the replay counts
     * there; no op of a post-norm layer saves its input. */
    if (!post_norm(x)) tape_release(x, sv);
    x->saving.keep_share = 1.0;
    autocast_copies(x, layer, sv, true);
    block_forward(x, sv, layer, true);
  } else if (x->s->grad_ckpt == VF_CKPT_SELECTIVE) {
    x->saving.keep_share = 1.0 - kept;
    block_forward(x, sv, layer, true);
  }
  x->saving.keep_share = kept;
  x->saving.in_flight = in_flight;
}

void layer_backward(struct ctx *x, int32_t layer, struct saved *sv, struct ids *g) {
  uint32_t gathered = fsdp_gather(x, layer);
  reload(x, sv);
  recompute(x, sv, layer);
  uint32_t whole = tape_take(x, parallel_sequence_bytes(x), VF_CAT_TEMPORARIES);
  uint32_t mlp = tape_take(x, mlp_backward_bytes(x), VF_CAT_TEMPORARIES);
  quant_backward(x, layer);
  parallel_token_exchange(x);
  tape_give(x, mlp);
  tape_give(x, whole);
  attention_layer(x, layer);
  uint32_t attn = tape_take(x, attention_backward_bytes(x), VF_CAT_TEMPORARIES);
  parallel_ring_exchange(x, true);
  grads_layer(x, layer, g);
  optim_layer_in_backward(x, layer, g);
  tape_give(x, attn);
  tape_release(x, sv);
  fsdp_reshard(x, gathered);
}

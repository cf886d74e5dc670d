/* Parallelism inside a layer and across the data-parallel GPUs, as one GPU sees it: the
 * sizes it holds, and what the collectives around a layer hold at once: sequence
 * parallelism's whole sequence, context parallelism's ring attention, expert parallelism's
 * all-to-all. Sources: torch's context_parallel (_AllGatherRotater, _SDPAMerger,
 * _templated_ring_attention_backward); torchtitan/models/llama/model.py@9dec370 and its
 * dp_shard_cp mesh; Megatron's data-parallel group with context parallelism; Megatron-Core
 * token_dispatcher.py MoEAlltoAllTokenDispatcher; FSDP2 fully_shard on a 2-D mesh (HSDP). */
#include "core/estimate/internal.h"

/* The sizes one GPU sees: tensor parallelism splits the heads, the MLP and the vocabulary,
 * context parallelism the sequence, sequence parallelism the tokens of the norms and residual
 * adds; model states are sharded over the data-parallel GPUs. */
/* The sizes that follow a micro batch's (padded) length. */
void parallel_length(struct ctx *x, uint64_t seq) {
  const struct vf_setup *s = x->s;
  struct dims *d = &x->d;
  d->T = s->batch * (seq / s->cp);
  d->Ts = d->sp ? d->T / s->tp : d->T;
  d->s_kv = seq / s->cp;
}

void parallel_dims(struct ctx *x) {
  const struct vf_arch *a = &x->m->arch;
  const struct vf_setup *s = x->s;
  struct dims *d = &x->d;
  d->sp = s->sequence_parallel == VF_SP_YES && s->tp > 1;
  parallel_length(x, s->seq);
  d->h = a->hidden;
  d->q = a->heads * a->head_dim / s->tp;
  d->kv = a->kv_heads * a->head_dim / s->tp;
  d->ffn = a->intermediate / s->tp;
  d->heads = a->heads / s->tp;
  d->vocab = a->vocab / s->tp;
  d->labels = a->num_labels;
  d->c = s->amp != VF_PREC_NONE ? precision_bytes(s->amp) : params_rest_bytes(s, x->p);
  d->w = s->method == VF_METHOD_FULL || !x->p->adapter_fp32 ? params_rest_bytes(s, x->p) : 4;
  d->g = d->w;
  /* FSDP and ZeRO shard over the data-parallel and context-parallel GPUs (torchtitan's
   * dp_shard_cp mesh, Megatron's data-parallel group with context parallelism); HSDP over
   * one replica's group of them (FSDP2 fully_shard on a 2-D mesh: replicate x shard). */
  d->dsize = s->gpus / (s->tp * s->pp) / s->dp_replicate;
  if (!d->dsize) d->dsize = 1;
}

/* A row-parallel projection (o, down) makes partial sums of the whole sequence before they
 * are reduce-scattered to this GPU's part of it under sequence parallelism. */
void parallel_row_output(struct ctx *x) {
  if (x->d.sp) tape_transient(x, x->d.T * x->d.h * x->d.c, VF_CAT_TEMPORARIES);
}

/* Under sequence parallelism a layer's backward holds the input gradient of the whole
 * sequence, before its reduce-scatter, and the input gathered again for the weight gradient
 * where the forward kept only its shard. */
uint64_t parallel_sequence_bytes(const struct ctx *x) {
  const struct dims *d = &x->d;
  uint64_t wholes = d->sp ? (x->p->sp_gathered_input ? 1 : 2) : 0;
  return wholes * d->T * d->h * d->c;
}

/* Context parallelism's ring attention, around the attention kernel of each block: this
 * rank's keys and values concatenated to be sent, and the other ranks' received, all at
 * once (cp_kv_all_gather: torch's context_parallel, _AllGatherRotater) or one rank's at a
 * time into a second buffer; the partial outputs merged in fp32 (_SDPAMerger with
 * convert_to_f32). The backward accumulates the gradients of q, k and v in fp32 and passes
 * those of k and v on through two more buffers (_templated_ring_attention_backward). The
 * keys and values are those the SDPA call is given (context_parallel replaces the
 * aten._scaled_dot_product_*_attention ops): repeated to every query head where the model
 * repeats them first (torchtitan/models/llama/model.py@9dec370 repeat_kv before
 * F.scaled_dot_product_attention). */
void parallel_ring_exchange(struct ctx *x, bool backward) {
  if (x->s->cp == 1) return;
  const struct dims *d = &x->d;
  uint64_t width = attention_kv_width(x);
  uint64_t kv = d->T * 2 * width * d->c, received = x->p->cp_kv_all_gather ? x->s->cp * kv : kv;
  uint64_t merged = backward ? d->T * (d->q + 2 * width) * 4 + 2 * d->T * 2 * width * 4 : 2 * d->T * d->q * 4;
  tape_transient(x, kv + received + merged, VF_CAT_TEMPORARIES);
}

/* Expert parallelism's all-to-all, once to send the routed tokens to their experts' GPUs
 * and once to bring the outputs back (and the same for their gradients in the backward):
 * the tokens to send and those received alive at once, padded to the capacity where the
 * framework caps it (Megatron-Core token_dispatcher.py MoEAlltoAllTokenDispatcher). */
void parallel_token_exchange(struct ctx *x) {
  const struct vf_arch *a = &x->m->arch;
  if (!a->experts || x->s->ep == 1) return;
  double cf = x->p->moe_capacity_factor > 0 ? x->p->moe_capacity_factor : 1;
  uint64_t routed = (uint64_t)((double)(x->d.T * a->experts_per_token) * cf);
  tape_transient(x, 2 * routed * x->d.h * mlp_bytes(x), VF_CAT_TEMPORARIES);
}

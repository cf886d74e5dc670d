/* DeepSpeed ZeRO: ZeRO-3's parameter coordinator, which keeps parameters gathered (small
 * ones for good, the others as far as its prefetching leads), its IPG buffers and its step
 * by sub groups; ZeRO-1/2's reduce buckets. The gradients ZeRO-2 and ZeRO-3 reduce to a
 * shard are grads.c's, the partitioned optimizer states optimizer.c's. Sources: DeepSpeed
 * parameter_offload.py mark_persistent_parameters, partitioned_param_coordinator.py
 * _fetch_sub_module_impl, stage3.py (_create_fp16_sub_groups,
 * _prepare_fp32_grad_for_sub_group, _release_sub_group, contiguous_gradients),
 * deepspeed/runtime/zero/stage_1_and_2.py backward. */
#include "core/estimate/internal.h"

/* ZeRO-3 gathers through DeepSpeed's parameter coordinator, which prefetches and keeps
 * small parameters gathered (profile field zero3_max_live_millions). */
bool zero3_coordinator(const struct ctx *x) {
  return x->s->shard == VF_SHARD_ZERO3 && x->p->zero3_max_live_millions;
}

/* A parameter the coordinator never releases once gathered: at most
 * stage3_param_persistence_threshold elements (parameter_offload.py
 * mark_persistent_parameters). */
bool zero3_persists(const struct ctx *x, const struct param *p) {
  if (!zero3_coordinator(x)) return false;
  uint64_t threshold = x->p->zero3_persistence_elems ? x->p->zero3_persistence_elems : 10 * x->m->arch.hidden;
  return p->numel <= threshold;
}

/* The elements of a layer's parameters that persist, or of those gathered for each use. */
uint64_t zero3_gathered_elems(const struct ctx *x, int32_t layer, bool persisting) {
  uint64_t n = 0;
  size_t begin, end;
  params_layer(x->ps, layer, &begin, &end);
  for (size_t i = begin; i < end; i++)
    if (zero3_persists(x, &x->ps->v[i]) == persisting) n += x->ps->v[i].numel;
  return n;
}

/* The most ZeRO-3's coordinator holds gathered, for a stage of `layers` blocks: every
 * module's hooks prefetch the parameters the recorded trace uses next, up to
 * min(max_live - gathered, prefetch bucket) elements and at least one whole parameter a
 * call, kept until their module has run (partitioned_param_coordinator.py
 * _fetch_sub_module_impl). A module consumes at most its own parameters while every
 * module, containers and norms too, prefetches a bucket more: the lead grows until
 * max_live stops it, one parameter past it at most, or until the whole stage is gathered
 * (a model smaller than max_reuse_distance keeps all it gathered until its backward). */
static uint64_t zero3_live_elems(const struct ctx *x, uint64_t layers) {
  uint64_t largest = 0;
  for (int32_t l = -1; l < 1; l++) { /* the root and a block: the blocks are alike */
    size_t begin, end;
    params_layer(x->ps, l, &begin, &end);
    for (size_t i = begin; i < end; i++)
      if (!zero3_persists(x, &x->ps->v[i]) && x->ps->v[i].numel > largest) largest = x->ps->v[i].numel;
  }
  uint64_t stage = zero3_gathered_elems(x, -1, false) + layers * zero3_gathered_elems(x, 0, false);
  uint64_t cap = x->p->zero3_max_live_millions * UINT64_C(1000000) + largest;
  return stage < cap ? stage : cap;
}

/* The gradient partition elements of the largest sub group ZeRO-3's step updates at once,
 * for a stage of `layers` blocks: its trainable partitions, split into sub groups closed
 * once they reach sub_group_size elements, one parameter's partition past it at most
 * (stage3.py _create_fp16_sub_groups). */
static uint64_t zero3_sub_group_elems(const struct ctx *x, uint64_t layers) {
  size_t end, unused;
  params_layer(x->ps, (int32_t)layers, &end, &unused);
  uint64_t partition = layer_param_sum(x, 0, end, true, false, true) / x->d.dsize;
  uint64_t cap = x->p->zero3_sub_group_millions * UINT64_C(1000000) + optim_largest_trainable(x) / x->d.dsize;
  return partition < cap ? partition : cap;
}

/* The rank replayed's figures, for its `layers` blocks. */
void zero_rank(struct ctx *x, uint64_t layers) {
  x->zero.zero3_live = zero3_coordinator(x) ? zero3_live_elems(x, layers) : 0;
  x->zero.zero3_sub_group =
      x->s->shard == VF_SHARD_ZERO3 && x->p->zero3_sub_group_millions ? zero3_sub_group_elems(x, layers) : 0;
}

/* ZeRO-3 updates a sub group at a time: its gradient partitions flattened, converted to
 * the fp32 master's dtype, and freed after its update (stage3.py
 * _prepare_fp32_grad_for_sub_group, _release_sub_group). */
void zero3_step_grads(struct ctx *x) {
  uint64_t n = x->zero.zero3_sub_group;
  uint32_t flat = tape_take(x, n * x->d.g, WEIGHT_TEMPORARIES);
  uint32_t fp32 = x->d.g < 4 ? tape_take(x, n * 4, WEIGHT_TEMPORARIES) : 0;
  tape_give(x, flat);
  tape_give(x, fp32);
}

/* Elements of each ZeRO reduce bucket: reduce_bucket_size. */
static uint64_t zero_bucket_elems(const struct ctx *x) {
  return x->p->zero_reduce_bucket_elems ? x->p->zero_reduce_bucket_elems : x->d.h * x->d.h;
}

/* ZeRO-3's IPG buffers, made with its optimizer (stage3.py, contiguous_gradients). */
void zero3_ipg_buffers(struct ctx *x) {
  if (x->s->shard == VF_SHARD_ZERO3)
    tape_take(x, x->p->zero3_ipg_buckets * zero_bucket_elems(x) * x->d.w, VF_CAT_GRADIENTS);
}

/* ZeRO-1/2 with contiguous gradients: each backward replaces the reduce buckets, one or two
 * (overlap_comm) of reduce_bucket_size elements in the weights' dtype, kept until the next
 * (deepspeed/runtime/zero/stage_1_and_2.py backward: self.ipg_buffer = [] then torch.empty
 * for each). */
void zero_reduce_buckets(struct ctx *x) {
  const struct vf_profile *p = x->p;
  if (!p->zero_reduce_buckets || (x->s->shard != VF_SHARD_ZERO1 && x->s->shard != VF_SHARD_ZERO2)) return;
  tape_give(x, x->zero.reduce_buckets);
  x->zero.reduce_buckets = tape_take(x, p->zero_reduce_buckets * zero_bucket_elems(x) * x->d.w, VF_CAT_GRADIENTS);
}

/* Data parallelism without sharding, as DistributedDataParallel's constructor sets it up:
 * the parameters broadcast from rank 0, then the flat gradient buckets every backward
 * reduces from (or the gradient buffer of a framework that keeps its own). Sources: torch
 * 2.13 nn/parallel/distributed.py _sync_module_states; c10d comm.cpp broadcast_coalesced;
 * reducer.cpp compute_bucket_assignment_by_size. */
#include "core/estimate/internal.h"

static uint64_t trainable_elems(const struct ctx *x, uint64_t layers) {
  size_t end, unused;
  params_layer(x->ps, (int32_t)layers, &end, &unused);
  return layer_param_sum(x, 0, end, true, false, false);
}

/* Data parallelism without sharding: torch's DistributedDataParallel, or a framework's own. */
static bool data_parallel_unsharded(const struct ctx *x) {
  const struct vf_setup *s = x->s;
  return s->shard == VF_SHARD_NONE && s->gpus / (s->tp * s->pp * s->cp) > 1;
}

/* c10d's broadcast_coalesced (csrc/distributed/c10d/comm.cpp) over parameters [begin,
 * end): it flattens each bucket of tensors into one new tensor, copies it back when its
 * broadcast is done and keeps at most two in flight; a bucket closes once it holds 250 MiB
 * (reducer.cpp compute_bucket_assignment_by_size), so it passes that by up to a tensor.
 * Buckets are per dtype; the weights share one, and adapters in another dtype (a few MiB)
 * are counted among them. A quantized weight's state is no tensor of the module's and is
 * not broadcast. Where on_nccl, each bucket is also used on the process group's
 * stream (ProcessGroupNCCL before torch 2.8 records a collective's inputs there), so its
 * block returns to the cache only once the host learns the broadcast is done. */
void broadcast_coalesced(struct ctx *x, size_t begin, size_t end, bool on_nccl) {
  const uint64_t limit = 250ull << 20;
  uint32_t in_flight[2] = {0, 0};
  uint64_t bucket = 0, made = 0;
  for (size_t i = begin; i < end; i++) {
    bucket += param_tensor_bytes(&x->ps->v[i]);
    if (bucket < limit && i + 1 < end) continue;
    uint32_t *slot = &in_flight[made++ % 2];
    tape_give(x, *slot);
    *slot = tape_take(x, bucket, VF_CAT_TEMPORARIES);
    if (on_nccl) tape_record(x, *slot, STREAM_NCCL);
    bucket = 0;
  }
  tape_give(x, in_flight[0]);
  tape_give(x, in_flight[1]);
}

/* DistributedDataParallel's constructor broadcasts every parameter from rank 0 before it
 * makes its gradient buckets (torch 2.13 nn/parallel/distributed.py _sync_module_states,
 * broadcast_bucket_size 250 MiB). Between the two the host works out the reducer's
 * buckets; the replay takes the broadcasts as done by then (not measured on a GPU). */
static void ddp_init_broadcast(struct ctx *x) {
  if (x->p->ddp_init_broadcast && data_parallel_unsharded(x)) broadcast_coalesced(x, 0, x->ps->n, false);
}

void ddp_init(struct ctx *x) {
  ddp_init_broadcast(x);
  /* DDP's flat gradient buckets, when there is data parallelism to reduce over; a
   * framework with a gradient buffer of its own keeps every gradient there. */
  if (x->p->grad_buffer_fp32) tape_take(x, trainable_elems(x, x->layers) * 4, VF_CAT_GRADIENTS);
  else if (data_parallel_unsharded(x)) tape_take(x, trainable_elems(x, x->layers) * x->d.g, VF_CAT_GRADIENTS);
}

/* Pipeline parallelism as torch.distributed.pipelining runs it: the rank replayed (its
 * model chunks, its part of the model outside the blocks, the micro batches in flight), its
 * FSDP units left gathered and unreduced until its last backward, and the outputs, input
 * gradients and receive buffers it keeps. Which blocks a rank holds and how many micro
 * batches it keeps at once is src/core/pipeline.c's arithmetic (pipeline_*). Sources:
 * torch/distributed/pipelining/stage.py (backward_maybe_with_nosync, forward_one_chunk,
 * clear_runtime_states, _prepare_forward_infra, _prepare_backward_infra), schedules.py
 * (PipelineScheduleMulti._step_microbatches, _add_reduce_grad, _merge_outputs),
 * _backward.py stage_backward; pytorch#153383; torchtitan parallelize_llama.py@9dec370
 * apply_fsdp and train.py@9dec370. */
#include "core/estimate/internal.h"
#include "core/pipeline.h"

/* Model chunks per rank, for the whole estimate. */
void pipe_setup(struct ctx *x) { x->pp.chunks = pipeline_chunks(x->s->pp_schedule, x->p); }

/* The rank replayed: its share of the parts outside the blocks (the embedding on the first,
 * the head and loss on the last), the chunk forwards it holds at most, the order of its
 * chunks' backwards. */
void pipe_rank(struct ctx *x, uint64_t rank) {
  const struct vf_setup *s = x->s;
  x->pp.stage = (int)rank;
  x->pp.has_embedding = rank == 0;
  x->pp.has_head = rank + 1 == s->pp;
  x->pp.chunks_in_flight = pipeline_chunks_in_flight(s->pp_schedule, s->pp, x->pp.chunks, x->accumulation, rank);
  x->pp.chunks_apart =
      x->p->pp_torch_pipelining && pipeline_chunk_backwards_apart(s->pp_schedule, s->pp, x->pp.chunks, x->accumulation);
}

/* The micro batches whose activations the rank holds while the replayed one runs: the
 * schedule's most, fewer once the pipeline drains (k micro batches from the step's end,
 * only those k are left). */
double pipe_in_flight(const struct ctx *x) {
  uint64_t left = (x->accumulation - schedule_micro_index(x)) * x->pp.chunks;
  uint64_t held = x->pp.chunks_in_flight < left ? x->pp.chunks_in_flight : left;
  return (double)held / (double)x->pp.chunks;
}

/* Under a pipeline, torch.distributed.pipelining runs an FSDP2 stage's backwards with
 * set_reshard_after_backward(False) and set_requires_gradient_sync(False) until the last
 * micro batch's, after which _post_backward reshards and reduces (torch/distributed/
 * pipelining/stage.py backward_maybe_with_nosync); torchtitan does not reshard after the
 * forward under a pipeline either (torchtitan/parallelisms/parallelize_llama.py@9dec370
 * apply_fsdp). The stage's weights stay gathered and its gradients whole through the step. */
bool pipe_fsdp(const struct ctx *x) {
  return x->s->pp > 1 && x->p->pp_torch_pipelining && vf_shard_fsdp(x->s->shard);
}

/* The end of a pipeline's last backward under FSDP: every unit reduced, then resharded. */
void pipe_post_backward(struct ctx *x, struct ids *g) {
  if (pipe_fsdp(x)) fsdp_post_backward(x, -1, (int32_t)x->layers, g);
}

/* The replayed layer where this rank's model chunk c begins: the blocks of the chunks
 * before it, scaled to the layers replayed. */
static uint64_t chunk_start(const struct ctx *x, uint64_t c) {
  uint64_t layers = x->m->arch.layers, pp = x->s->pp, stages = pp * x->pp.chunks, rank = (uint64_t)x->pp.stage;
  uint64_t before = 0;
  for (uint64_t i = 0; i < c; i++) before += pipeline_stage_layers(layers, stages, rank + i * pp, x->p->pp_even_layers);
  return before * x->layers / pipeline_rank_layers(layers, pp, x->pp.chunks, rank, x->p->pp_even_layers);
}

/* The model chunk a unit belongs to: the root's embedding to the first, its head to the last. */
static uint64_t unit_chunk(const struct ctx *x, int32_t layer) {
  if (layer < 0) return x->pp.has_head ? x->pp.chunks - 1 : 0;
  uint64_t c = x->pp.chunks - 1;
  while (c && chunk_start(x, c) > (uint64_t)layer) c--;
  return c;
}

/* Each stage runs its FSDP post-backward (reduce-scatter, reshard) after its own last
 * micro batch's backward: torch/distributed/pipelining/schedules.py of the 2.6 era,
 * PipelineScheduleMulti._step_microbatches, passes last_backward = backward_counter
 * [stage_idx] == n_microbatches to stage.py backward_maybe_with_nosync; later releases
 * keep the timing with a REDUCE_GRAD action _add_reduce_grad puts right after a stage's
 * last backward. When a rank's chunks run their
 * backwards one after the other, a chunk is reduced and resharded before the chunk below
 * it makes its first gradient: the replay's micro batches but the last make the whole
 * gradients of the last chunk only, and the last one's backward ends each chunk in turn. */
bool pipe_grads_deferred(const struct ctx *x, int32_t layer) {
  return x->pp.chunks_apart && !x->sched.last_micro && unit_chunk(x, layer) + 1 < x->pp.chunks;
}

/* After the backward of `layer`, the last micro batch's: the chunk it starts is done. */
void pipe_chunk_post_backward(struct ctx *x, uint64_t layer, struct ids *g) {
  if (!x->pp.chunks_apart || !x->sched.last_micro || !pipe_fsdp(x)) return;
  uint64_t c = unit_chunk(x, (int32_t)layer);
  if (!c || chunk_start(x, c) != layer) return;
  uint64_t end = c + 1 < x->pp.chunks ? chunk_start(x, c + 1) : x->layers;
  fsdp_post_backward(x, (int32_t)layer, (int32_t)end, g);
  if (c + 1 == x->pp.chunks && x->pp.has_head) fsdp_post_backward(x, -1, 0, g);
}

/* A stage's outputs stay in torch.distributed.pipelining's output_chunks until the next
 * step clears them (stage.py forward_one_chunk, clear_runtime_states): every stage's under
 * the profile's torch (pytorch#153383, in 2.8, keeps the last stage's only), the logits on
 * the last. This micro batch's, or for the replay's middle one those of every micro batch it
 * stands for. Returns whether they are kept. */
bool pipe_hold_output(struct ctx *x, uint64_t bytes) {
  if (!x->p->pp_torch_pipelining || x->s->pp == 1) return false;
  uint64_t m = x->accumulation, k = schedule_micro_index(x), count = k == 0 || k == m - 1 ? 1 : m - 2;
  /* The middle ones as one block, as the receive buffers are: thousands of micro batches
   * would otherwise cost the replay a block each. */
  ids_push(x, &x->pp.outputs, tape_take(x, count * bytes, VF_CAT_ACTIVATIONS));
  return true;
}

/* torch.distributed.pipelining hands a stage its receive buffer itself as input, and its
 * backward (torch.autograd.backward) leaves the input's gradient on the buffer's .grad: under
 * the profile's torch that stays, for every micro batch and model chunk that received, until
 * the next step's clear_runtime_states (pipelining/_backward.py stage_backward, stage.py). */
void pipe_hold_input_grads(struct ctx *x, uint64_t stream) {
  if (x->p->pp_input_grads_kept) pipe_hold_output(x, (x->pp.chunks - x->pp.has_embedding) * stream);
}

/* The last stage's logits kept (pipe_hold_output): the bytes per logit they take of the loss's. */
uint32_t pipe_keep_logits(struct ctx *x, uint64_t n) {
  if (x->task == VF_TASK_SEQ_CLS) return 0;
  return pipe_hold_output(x, n * x->d.c) ? x->d.c : 0;
}

/* At the step's end the schedule concatenates the last stage's into the output it returns
 * (_merge_outputs), which torchtitan drops at once (train.py@9dec370). */
void pipe_merge_outputs(struct ctx *x) {
  if (x->pp.outputs.n && x->pp.has_head)
    tape_transient(x, x->accumulation * head_loss_outputs(x) * x->d.c, VF_CAT_TEMPORARIES);
}

/* torch.distributed.pipelining makes a stage's receive buffers for every micro batch when
 * the schedule first runs, and keeps them: for the activations from the stage before
 * (_prepare_forward_infra) and for their gradients from the stage after
 * (_prepare_backward_infra) (stage.py). A rank runs a stage per model chunk. */
static void receive_buffers(struct ctx *x) {
  if (!x->p->pp_torch_pipelining || x->s->pp == 1 || x->pp.receive_buffers) return;
  x->pp.receive_buffers = true;
  uint64_t per = x->accumulation * x->d.Ts * x->d.h * x->d.c;
  tape_take(x, (x->pp.chunks - x->pp.has_embedding) * per, VF_CAT_ACTIVATIONS);
  tape_take(x, (x->pp.chunks - x->pp.has_head) * per, VF_CAT_ACTIVATIONS);
}

/* A micro batch begins: the outputs kept are cleared at each step's first. */
void pipe_micro_begins(struct ctx *x) {
  if (schedule_micro_index(x) == 0) ids_give(x, &x->pp.outputs); /* the schedule's clear_runtime_states */
  receive_buffers(x);
}

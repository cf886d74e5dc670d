/* The output head and the loss: the final norm, the head's matmul (its weight cast or
 * dequantized), the logits and the loss's tensors over them, whole or chunk by chunk, the
 * logits the training loop holds, and their backward down to the head's input gradient;
 * or, with --loss fused or cce, a kernel that takes the head and the loss together and
 * never makes the logits whole (fused_loss.c). Sources: torch/distributed/tensor/parallel/
 * loss.py (loss_parallel); tools/autograd/derivatives.yaml@v2.13.0; torch/csrc/autograd/
 * input_buffer.cpp accumulate and engine.cpp CompareNodeTaskTime; litgpt's full.py. */
#include <stdio.h>
#include <string.h>

#include "base/diag.h"
#include "core/estimate/internal.h"

/* The chunks the logits are cut into for the loss: the framework's own, or where its own
 * loss takes them whole, those of its chunked loss when --loss chunked asks for it. */
static uint64_t output_chunks(const struct ctx *x) {
  return head_loss_differs(x->p, x->s->loss) && x->s->loss == VF_LOSS_CHUNKED ? x->p->chunked_output_chunks
                                                                               : x->p->output_chunks;
}

/* A kernel runs the head and the loss together (Liger's or Cut Cross-Entropy). */
static bool fused_loss(const struct ctx *x) {
  return x->s->loss == VF_LOSS_FUSED || x->s->loss == VF_LOSS_CCE;
}

/* The framework's own loss chunks the logits (litgpt's by positions, torchtune's by pieces). */
static bool own_loss_chunked(const struct vf_profile *p) { return p->loss_chunk_tokens || p->output_chunks; }

bool head_loss_differs(const struct vf_profile *p, enum vf_loss loss) {
  switch (loss) {
  case VF_LOSS_CHUNKED: return !own_loss_chunked(p) && p->chunked_output_chunks;
  case VF_LOSS_FUSED: return p->liger_loss;
  case VF_LOSS_CCE: return p->cce_loss;
  default: return false;
  }
}

static bool loss_offered(const struct vf_profile *p, enum vf_loss loss) {
  return loss == VF_LOSS_DEFAULT || (loss == VF_LOSS_CHUNKED && own_loss_chunked(p)) || head_loss_differs(p, loss);
}

/* A loss the framework cannot run is refused, naming those it can; the fused kernels replace
 * a causal LM's head and loss, which other tasks do not have. */
int head_loss_offered(const struct vf_setup *s, const struct vf_profile *p, struct vf_diag *d) {
  const char *name = vf_enum_name(VF_ENUM_LOSS, (int)s->loss);
  if (!loss_offered(p, s->loss)) {
    char offered[64] = "default";
    for (int l = VF_LOSS_CHUNKED; l <= VF_LOSS_CCE; l++)
      if (loss_offered(p, (enum vf_loss)l))
        snprintf(offered + strlen(offered), sizeof offered - strlen(offered), ", %s", vf_enum_name(VF_ENUM_LOSS, l));
    return diag_at(d, VF_EINVAL, NULL, UINT64_MAX, "--loss %s: %s %s has no such loss (it runs: %s)", name, p->name,
                   p->release, offered);
  }
  if ((s->loss == VF_LOSS_FUSED || s->loss == VF_LOSS_CCE) && s->task != VF_TASK_CAUSAL_LM)
    return diag_at(d, VF_EINVAL, NULL, UINT64_MAX, "--loss %s replaces a causal LM's head and loss; a %s model has none",
                   name, vf_enum_name(VF_ENUM_TASK, (int)s->task));
  return 0;
}

/* The output head is the input embedding's weight (tied). */
bool head_tied(const struct ctx *x) {
  return x->m->arch.tied_embeddings && !x->p->untie_embeddings && x->task == VF_TASK_CAUSAL_LM && x->pp.has_head;
}

/* torch's loss_parallel (torch/distributed/tensor/parallel/loss.py) computes the
 * log-softmax of the sharded logits by its decomposition (_log_softmax): x - max and its
 * exp are new fp32 tensors beside the up-cast, where aten's kernel makes only its output;
 * its fused backward (_nll_loss_and_log_softmax_backward) makes zeros_like(x), exp(x),
 * their sum and the product beside the kept log-softmax, where nll_loss's and
 * _log_softmax's backward kernels make one gradient each: 4 bytes a logit more in both. */
static uint32_t loss_parallel_bytes(const struct ctx *x) {
  return x->s->tp > 1 && x->p->loss_parallel && x->task == VF_TASK_CAUSAL_LM ? 4 : 0;
}

/* torch.compile runs the loss (the profile's compiled_loss, with --compile yes): Inductor
 * turns the up-cast, the log-softmax and nll_loss into reductions over the logits, so the forward
 * makes no tensor of their size. AOTAutograd's partitioner saves the logits themselves, the
 * graph's input, and recomputes the rest in the backward (torch/_functorch/partitioners.py
 * min_cut_rematerialization_partition), whose kernel writes the logits' gradient in their
 * dtype while they are still kept: nll_loss's scatter onto zeros becomes a pointwise select
 * (torch/_inductor/fx_passes/joint_graph.py, config optimize_scatter_upon_const_tensor, on
 * by default). bench/compiled_loss.py measures it on the CPU (torch 2.13): 2 bytes a bf16
 * logit beyond the logits, where eager's loss takes 12. The loss is cross-entropy over the
 * model's logits, whole or in the chunks of a chunked output (torchtune's, whose
 * compile_loss compiles each chunk's cross-entropy); tensor parallelism's loss_parallel,
 * litgpt's chunks of positions, fused kernels and soft-capping stay as eager runs them. */
bool head_loss_compiled(const struct ctx *x) {
  return x->s->compile == VF_COMPILE_YES && x->p->compiled_loss && x->task == VF_TASK_CAUSAL_LM &&
         !loss_parallel_bytes(x) && !head_loss_differs(x->p, x->s->loss) && !x->p->loss_chunk_tokens &&
         x->m->arch.final_logit_softcap <= 0 && !x->p->logits_held_bytes;
}

/* The most the loss's forward holds per logit (per label for classification). */
static uint32_t logits_peak_bytes(const struct ctx *x) {
  if (head_loss_compiled(x)) return x->d.c;
  return x->task == VF_TASK_SEQ_CLS ? 12 : x->p->logits_peak_bytes + loss_parallel_bytes(x);
}

uint64_t head_loss_outputs(const struct ctx *x) {
  return x->task == VF_TASK_SEQ_CLS ? x->d.labels * x->s->batch : x->d.T * x->d.vocab;
}

/* A chunked head splits each sequence into pieces of loss_chunk_tokens positions, or into
 * output_chunks pieces as torch.chunk cuts them (ceil(len / n) positions each). */
static uint64_t loss_chunks(const struct ctx *x) {
  uint64_t len = x->d.s_kv, per = x->p->loss_chunk_tokens, pieces = output_chunks(x);
  if (pieces) per = (len + pieces - 1) / pieces;
  if (!per || x->task == VF_TASK_SEQ_CLS || len <= per) return 1;
  return (len + per - 1) / per;
}

/* The head runs whole and only its loss in chunks, over slices of the logits the loop
 * converted (litgpt's full.py). */
static bool head_whole(const struct ctx *x) {
  return x->base_trainable && x->p->full_head_whole && loss_chunks(x) > 1;
}

/* Bytes per logit of a chunked output the model makes whole before the loss (0: none). */
static uint32_t whole_output_bytes(const struct ctx *x) {
  return output_chunks(x) && x->task == VF_TASK_CAUSAL_LM ? x->d.c : 0;
}

/* Logits the training loop holds past the backward: converted from the head's output, in
 * full, after the forward; the previous micro batch's are released only then. With batch
 * lengths that vary the previous batch may be shorter, but a long run also meets two of
 * its longest batches in a row. */
static uint32_t hold_logits(struct ctx *x, uint64_t n) {
  uint32_t per = x->task == VF_TASK_SEQ_CLS ? 0 : x->p->logits_held_bytes;
  if (!per) return 0;
  /* Converting to the dtype it already has returns the same tensor. */
  uint32_t raw = per != x->d.c ? tape_take(x, n * x->d.c, VF_CAT_TEMPORARIES) : 0;
  uint32_t held = tape_take(x, n * per, VF_CAT_TEMPORARIES);
  tape_give(x, raw);
  tape_give(x, x->head.held_logits);
  x->head.held_logits = held;
  return per;
}

/* Makes `per` bytes a logit over n logits, one of `parts` chunks of them: a narrower
 * tensor first (the 16-bit logits the fp32 ones are made from), then fp32 tensors. */
static struct logit_tensors take_logit_tensors(struct ctx *x, uint64_t n, uint32_t per, uint64_t parts) {
  struct logit_tensors t = {{0}};
  uint32_t wide = per / 4 < LOGIT_TENSORS - 1 ? per / 4 : LOGIT_TENSORS - 1, narrow = per - 4 * wide;
  if (narrow) t.id[0] = tape_take(x, n * narrow / parts, VF_CAT_TEMPORARIES);
  for (uint32_t i = 1; i <= wide; i++) t.id[i] = tape_take(x, n * 4 / parts, VF_CAT_TEMPORARIES);
  return t;
}

/* The tensor a chain of backward nodes ends with; each of the others goes once the node
 * that reads it has run. */
static uint32_t last_logit_tensor(struct logit_tensors *t) {
  uint32_t last = 0;
  for (int i = 0; i < LOGIT_TENSORS; i++)
    if (t->id[i]) last = t->id[i];
  return last;
}

static void give_logit_tensors(struct ctx *x, struct logit_tensors *t) {
  for (int i = 0; i < LOGIT_TENSORS; i++) tape_give(x, t->id[i]);
  *t = (struct logit_tensors){{0}};
}

/* The compiled loss keeps the logits the head made: a pipeline stage holds them anyway. */
static struct loss_kept compiled_loss_forward(struct ctx *x, uint64_t n) {
  struct loss_kept k = {0};
  uint32_t output = pipe_keep_logits(x, n);
  k.loss = take_logit_tensors(x, n, x->d.c - output, 1);
  return k;
}

/* The logits and the loss: the forward's peak holds logits, their fp32 up-cast and the
 * log-softmax at once (one chunk at a time when the loss is chunked); what backward needs
 * stays. Gemma-2 soft-capping keeps one more copy (the tanh output), made with the logits,
 * before the training loop converts them. */
struct loss_kept head_forward(struct ctx *x, struct saved *sv) {
  const struct dims *d = &x->d;
  /* A fused kernel is no module: it saves none of the final norm's output for a matmul. */
  layer_norm_saves(x, sv, x->task == VF_TASK_SEQ_CLS || fused_loss(x) ? 0 : 1, x->base_trainable);
  if (fused_loss(x)) return fused_loss_forward(x, sv);
  if (x->task == VF_TASK_CAUSAL_LM) {
    quant_input(x, sv, d->h, 1, true);
    adapter_input(x, sv, d->h, BIT(VF_KIND_HEAD));
    adapter_projection(x, sv, d->h, d->vocab, BIT(VF_KIND_HEAD));
    /* Autocast casts the head's weight like any matmul's (autocast_mode.cpp lower-precision
     * list), and the matmul keeps the copy for its backward. It caches the cast only for a
     * weight that trains (cached_cast: a leaf requiring grad): a frozen head run chunk by
     * chunk is cast, and its copy kept, once per chunk. */
    uint64_t casts = x->base_trainable ? 1 : loss_chunks(x);
    for (uint64_t i = 0; autocast_casts(x) && !quant_weight(x, true) && i < casts; i++)
      tape_keep(x, sv, d->vocab * d->h * d->c);
  }
  if (x->task == VF_TASK_MASKED_LM) tape_keep(x, sv, d->T * d->h * d->c * 3);
  fsdp_before_loss(x);
  uint64_t n = head_loss_outputs(x);
  if (head_loss_compiled(x)) return compiled_loss_forward(x, n);
  uint32_t kept = x->task == VF_TASK_SEQ_CLS ? 12 : x->p->logits_kept_bytes;
  uint32_t peak = logits_peak_bytes(x);
  uint32_t cap = 0;
  /* Final soft-capping keeps the tanh's output: of the logits, or of the final norm's. */
  if (x->m->arch.final_logit_softcap > 0 && x->task != VF_TASK_SEQ_CLS) {
    if (x->p->final_softcap_logits) cap = d->c;
    else tape_keep(x, sv, d->T * d->h * d->c);
  }
  struct loss_kept k = {.capped = tape_take(x, n * cap, VF_CAT_TEMPORARIES)};
  /* A chunked output is alive whole through the loss's forward, which up-casts one chunk at
   * a time; the training loop lets go of it once the loss is computed. */
  uint32_t whole_bytes = whole_output_bytes(x), whole = tape_take(x, n * whole_bytes, VF_CAT_TEMPORARIES);
  uint32_t held = hold_logits(x, n), output = pipe_keep_logits(x, n);
  /* Slicing off the last position of a batch's whole logits leaves a tensor reshape has to
   * copy before it can split the rows into chunks. */
  uint32_t sliced = head_whole(x) && x->s->batch > 1 ? tape_take(x, n * held, VF_CAT_TEMPORARIES) : 0;
  /* The logits and their up-cast come first, the log-softmax the backward keeps last. */
  uint32_t made = kept + cap + whole_bytes + output;
  struct logit_tensors rest = take_logit_tensors(x, n, peak > made ? peak - made : 0, loss_chunks(x));
  k.loss = take_logit_tensors(x, n, kept > held ? kept - held : 0, 1);
  tape_give(x, sliced);
  give_logit_tensors(x, &rest);
  tape_give(x, whole);
  return k;
}

/* Each chunk of a chunked output gives its own piece of the head weight's gradient, which
 * autograd sums in the weight's input buffer out of place (torch/csrc/autograd/
 * input_buffer.cpp accumulate, as traced under torch 2.13): the sum so far, the new piece
 * and their sum at once. */
static void chunked_head_grad(struct ctx *x) {
  if (!whole_output_bytes(x) || loss_chunks(x) < 2 || !x->base_trainable) return;
  tape_transient(x, 2 * x->d.vocab * x->d.h * x->d.g, VF_CAT_TEMPORARIES);
}

/* The head weight's new gradient while accumulating: a tied head's waits in the embedding
 * weight's input buffer for the embedding's own (returned, for embedding_backward); an
 * untied one's is added in at once. */
static uint32_t accumulating_head_grad(struct ctx *x) {
  if (!grads_accumulating_in_place(x) || !x->base_trainable || x->task != VF_TASK_CAUSAL_LM || !x->pp.has_head)
    return 0;
  uint32_t grad = tape_take(x, x->d.vocab * x->d.h * x->d.g, VF_CAT_GRADIENTS);
  chunked_head_grad(x);
  if (head_tied(x)) return grad;
  tape_give(x, grad);
  return 0;
}

/* A whole head's loss chunks each leave the gradient of their slice of the converted
 * logits: the split's backward concatenates them into one (SplitBackward0's cat), and the
 * slice's backward copies that into zeros of the whole logits (slice_backward), before
 * the cast. Returns the whole gradient; frees the chunk's, chunk_grad. */
static uint32_t assemble_grads(struct ctx *x, uint32_t chunk_grad) {
  uint64_t bytes = head_loss_outputs(x) * x->p->logits_held_bytes;
  uint32_t parts = tape_take(x, bytes, VF_CAT_TEMPORARIES);
  tape_give(x, chunk_grad);
  uint32_t joined = tape_take(x, bytes, VF_CAT_TEMPORARIES);
  tape_give(x, parts);
  uint32_t padded = tape_take(x, bytes, VF_CAT_TEMPORARIES);
  tape_give(x, joined);
  return padded;
}

/* A compiled loss's backward: its kernel writes the gradient of the logits, in their dtype,
 * while the graph still keeps them. A chunked loss is a compiled graph per chunk, each
 * letting go of its chunk as it ends: at most the logits and one chunk's gradient, then
 * the whole gradient. */
static uint32_t compiled_loss_backward(struct ctx *x, struct loss_kept *k, uint64_t n, uint64_t chunks) {
  uint64_t bytes = n * x->d.c;
  if (chunks == 1) {
    uint32_t grad = tape_take(x, bytes, VF_CAT_TEMPORARIES);
    give_logit_tensors(x, &k->loss);
    return grad;
  }
  uint32_t first = tape_take(x, bytes / chunks, VF_CAT_TEMPORARIES);
  give_logit_tensors(x, &k->loss);
  uint32_t grad = tape_take(x, bytes, VF_CAT_TEMPORARIES);
  tape_give(x, first);
  return grad;
}

/* The loss's backward: its gradients of the logits, next to what it kept. The loss's
 * nodes have all run and let go of what they kept (autograd releases a node's saved
 * tensors once it has run) before the head's matmul gets the gradient, cast to its dtype
 * (the up-cast's ToCopyBackward), and makes its weight and input gradients. A chunked
 * loss's (or a chunked output's) nodes run one chunk at a time, but all of them before any chunk of the head's
 * matmul: autograd's engine runs the most recently recorded ready node first
 * (torch/csrc/autograd/engine.cpp CompareNodeTaskTime), and the head made every chunk
 * before the loss began; so the cast gradients of all chunks wait for the head. A tanh
 * output goes with its chunk's matmul: all at once unchunked, chunk by chunk from the
 * head's first backward on, when chunked. Returns the gradient the head's matmul reads. */
static uint32_t loss_backward(struct ctx *x, struct loss_kept *k) {
  uint64_t n = head_loss_outputs(x), chunks = loss_chunks(x);
  if (x->task == VF_TASK_SEQ_CLS) return tape_take(x, n * 8 / chunks, VF_CAT_TEMPORARIES);
  if (head_loss_compiled(x)) return compiled_loss_backward(x, k, n, chunks);
  /* nll_loss's gradient goes once _log_softmax's backward has read it, with the
   * log-softmax that node kept; the cast reads the last. */
  uint32_t per = x->p->logits_backward_bytes + loss_parallel_bytes(x);
  struct logit_tensors grad_logits = take_logit_tensors(x, n, per, chunks);
  uint32_t last = last_logit_tensor(&grad_logits);
  for (int i = 0; i < LOGIT_TENSORS; i++)
    if (grad_logits.id[i] != last) tape_give(x, grad_logits.id[i]);
  give_logit_tensors(x, &k->loss);
  if (chunks == 1) {
    tape_give(x, k->capped);
    k->capped = 0;
  }
  uint32_t from = head_whole(x) ? assemble_grads(x, last) : last;
  uint32_t cast = tape_take(x, n * x->d.c, VF_CAT_TEMPORARIES);
  tape_give(x, from);
  return cast;
}

uint32_t head_backward(struct ctx *x, struct saved *sv, struct loss_kept k, struct ids *g) {
  const struct dims *d = &x->d;
  bool fused = fused_loss(x);
  uint32_t grad_logits = fused ? 0 : loss_backward(x, &k);
  fsdp_regather_root(x);
  fsdp_backward_prefetch(x, (int32_t)x->layers - 1);
  /* The backward's first matmul is the head's: the loss's nodes call no cuBLAS. */
  schedule_workspace(x, &x->sched.backward_workspace);
  uint32_t grad_hidden = fused ? fused_loss_backward(x, &k) : tape_take(x, d->T * d->h * d->c, VF_CAT_TEMPORARIES);
  /* A quantized head is dequantized again for the input gradient. */
  if (!fused && quant_weight(x, true) && x->task == VF_TASK_CAUSAL_LM)
    tape_transient(x, d->h * d->vocab * dequant_bytes(x, false), WEIGHT_TEMPORARIES);
  /* A fused kernel's weight gradient is the one the head gets: AccumulateGrad takes it over. */
  tape_give(x, k.grad_weight);
  uint32_t root_grads = grads_head(x, g);
  optim_root_in_backward(x, true, g);
  /* Accumulating, grads_head made nothing: the head's new gradient comes beside the kept one. */
  if (grads_accumulating_in_place(x)) root_grads = accumulating_head_grad(x);
  else chunked_head_grad(x);
  tape_give(x, grad_logits);
  give_logit_tensors(x, &k.loss);
  tape_give(x, k.capped);
  tape_release(x, sv);
  tape_give(x, grad_hidden);
  if (!fsdp_embedding_unit(x)) return root_grads;
  /* The norm-and-head unit's post-backward: reduced (its shard is made) and resharded. */
  tape_give(x, root_grads);
  fsdp_reshard_root(x);
  return 0;
}

/* Validation's loss, over the whole logits at once. Liger's model forward makes the logits
 * outside training (lce_forward's skip_logits is self.training); Cut Cross-Entropy's patch
 * runs its kernel in evaluation too (cce_patch's train_only is False), which under no_grad
 * keeps only its log-sum-exp. */
void head_eval_loss(struct ctx *x) {
  if (!x->pp.has_head) return;
  if (x->s->loss == VF_LOSS_CCE) tape_transient(x, x->d.T * 4, VF_CAT_TEMPORARIES);
  else {
    struct logit_tensors t = take_logit_tensors(x, head_loss_outputs(x), logits_peak_bytes(x), 1);
    give_logit_tensors(x, &t);
  }
}

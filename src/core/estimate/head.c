/* The output head and the loss: the final norm, the head's matmul (its weight cast or
 * dequantized), the logits and the loss's tensors over them, whole or chunk by chunk, the
 * logits the training loop holds, and their backward down to the head's input gradient.
 * Sources: torch/distributed/tensor/parallel/loss.py (loss_parallel);
 * tools/autograd/derivatives.yaml@v2.13.0; torch/csrc/autograd/input_buffer.cpp
 * accumulate and engine.cpp CompareNodeTaskTime; autocast_mode.cpp cached_cast; litgpt's
 * full.py. */
#include "core/estimate/internal.h"

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

/* The most the loss's forward holds per logit (per label for classification). */
static uint32_t logits_peak_bytes(const struct ctx *x) {
  return x->task == VF_TASK_SEQ_CLS ? 12 : x->p->logits_peak_bytes + loss_parallel_bytes(x);
}

uint64_t head_loss_outputs(const struct ctx *x) {
  return x->task == VF_TASK_SEQ_CLS ? x->d.labels * x->s->batch : x->d.T * x->d.vocab;
}

/* A chunked head splits each sequence into pieces of loss_chunk_tokens positions, or into
 * output_chunks pieces as torch.chunk cuts them (ceil(len / n) positions each). */
static uint64_t loss_chunks(const struct ctx *x) {
  uint64_t len = x->d.s_kv, per = x->p->loss_chunk_tokens, pieces = x->p->output_chunks;
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
  return x->p->output_chunks && x->task == VF_TASK_CAUSAL_LM ? x->d.c : 0;
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

/* The logits and the loss: the forward's peak holds logits, their fp32 up-cast and the
 * log-softmax at once (one chunk at a time when the loss is chunked); what backward needs
 * stays. Gemma-2 soft-capping keeps one more copy (the tanh output), made with the logits,
 * before the training loop converts them. */
struct loss_kept head_forward(struct ctx *x, struct saved *sv) {
  const struct dims *d = &x->d;
  layer_norm_saves(x, sv, x->task == VF_TASK_SEQ_CLS ? 0 : 1, x->base_trainable);
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
  uint32_t grad_logits = loss_backward(x, &k);
  fsdp_regather_root(x);
  fsdp_backward_prefetch(x, (int32_t)x->layers - 1);
  /* The backward's first matmul is the head's: the loss's nodes call no cuBLAS. */
  schedule_workspace(x, &x->sched.backward_workspace);
  uint32_t grad_hidden = tape_take(x, d->T * d->h * d->c, VF_CAT_TEMPORARIES);
  /* A quantized head is dequantized again for the input gradient. */
  if (quant_weight(x, true) && x->task == VF_TASK_CAUSAL_LM)
    tape_transient(x, d->h * d->vocab * dequant_bytes(x, false), WEIGHT_TEMPORARIES);
  uint32_t root_grads = grads_head(x, g);
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

/* Validation's loss, over the whole logits at once. */
void head_eval_loss(struct ctx *x) {
  if (x->pp.has_head) tape_transient(x, head_loss_outputs(x) * logits_peak_bytes(x), VF_CAT_TEMPORARIES);
}

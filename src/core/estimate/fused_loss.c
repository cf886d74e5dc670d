/* The fused kernels that take the output head and the loss together and never make the
 * logits whole: Liger's fused linear cross-entropy (--loss fused) and Cut Cross-Entropy
 * (--loss cce), their forward and what they keep for the backward. head.c calls them in
 * place of its logits and loss. Sources: linkedin/Liger-Kernel src/liger_kernel/ops/
 * fused_linear_cross_entropy.py@v0.8.2; apple/ml-cross-entropy cut_cross_entropy/cce.py and
 * cce_backward.py@d42911f; torch autocast_mode.cpp cached_cast. */
#include "core/estimate/internal.h"
#include "core/version.h"

/* Liger's chunk of positions: the tokens over ceil(vocab / hidden), to the next power of two,
 * so that a chunk's logits are about the size of the head's input. */
static uint64_t liger_chunk(const struct ctx *x) {
  const struct dims *d = &x->d;
  uint64_t factor = (d->vocab + d->h - 1) / d->h, want = (d->T + factor - 1) / factor, chunk = 1;
  while (chunk < want) chunk <<= 1;
  return chunk < d->T ? chunk : d->T;
}

/* Liger adds each chunk's weight gradient into an fp32 one in place (torch.addmm with
 * out_dtype) when the gradient is fp32, the chunk's logits 16-bit, the GPU Ampere or newer
 * (or unknown) and torch 2.8 or newer; otherwise it makes the product and its fp32 copy. */
static bool liger_adds_in_place(const struct ctx *x) {
  struct version torch, since = {.part = {2, 8}};
  bool new_torch = version_release_parse(x->p->torch, &torch) == 0 && version_compare(&torch, &since) >= 0;
  bool ampere = !x->s->gpu_cc_major || x->s->gpu_cc_major >= 8;
  return x->d.w == 4 && x->d.c == 2 && ampere && new_torch;
}

/* Autocast's copy of the head weight for a matmul: a trainable weight's is cached until the
 * autocast region ends (autocast_mode.cpp cached_cast), a frozen one's goes with the matmul
 * (returned, for the caller to free). */
static uint32_t head_weight_cast(struct ctx *x) {
  if (!autocast_casts(x)) return 0;
  uint32_t id = tape_take(x, x->d.vocab * x->d.h * x->d.c, WEIGHT_TEMPORARIES);
  if (!x->base_trainable) return id;
  ids_push(x, &x->autocast.cache, id);
  return 0;
}

/* Liger's fused linear cross-entropy in training (fused_linear_cross_entropy.py@v0.8.2,
 * fused_linear_cross_entropy_forward): the gradients of the head's input (zeros_like the
 * input, in its dtype) and, where the head trains, of its weight (zeros_like the weight)
 * are made up front, with fp32 per-token losses; each chunk of positions makes its logits
 * in the compute dtype, turns them into their own gradient in place (the Triton kernel),
 * multiplies that by the weight into its rows of the input's gradient (a chunk-sized product
 * copied in) and, for a trainable head, by the input into the weight's. The forward saves
 * the two gradients (save_for_backward), and the backward only scales them in place. */
static void liger_forward(struct ctx *x, struct loss_kept *k) {
  const struct dims *d = &x->d;
  uint64_t weight = d->vocab * d->h, chunk = liger_chunk(x);
  k->grad_input = tape_take(x, d->T * d->h * autocast_stream_bytes(x), VF_CAT_TEMPORARIES);
  k->grad_weight = x->base_trainable ? tape_take(x, weight * d->w, VF_CAT_GRADIENTS) : 0;
  uint32_t losses = tape_take(x, d->T * 4, VF_CAT_TEMPORARIES);
  /* Every chunk allocates alike, into the blocks the one before freed: one stands for all. */
  uint32_t cast = head_weight_cast(x);
  uint32_t logits = tape_take(x, chunk * d->vocab * d->c, VF_CAT_TEMPORARIES);
  tape_give(x, cast);
  tape_transient(x, chunk * d->h * d->c, VF_CAT_TEMPORARIES);
  if (x->base_trainable && !liger_adds_in_place(x)) {
    uint32_t product = tape_take(x, weight * d->c, WEIGHT_TEMPORARIES);
    tape_transient(x, d->c < 4 ? weight * 4 : 0, WEIGHT_TEMPORARIES);
    tape_give(x, product);
  }
  tape_give(x, logits);
  tape_give(x, losses);
}

/* Cut Cross-Entropy's forward (cce.py@d42911f, LinearCrossEntropyFunction.forward): Triton
 * kernels compute each position's log-sum-exp (fp32) and, for the backward's filtering
 * (filter_eps "auto"), the vocabulary's average logit (fp32) without making any logits; the
 * input and the weight are cast to the autocast dtype (.to: copies where they are wider)
 * and saved with them. The negative target logits (fp32) become the loss in place. */
static void cce_forward(struct ctx *x, struct saved *sv, struct loss_kept *k) {
  const struct dims *d = &x->d;
  tape_keep(x, sv, d->T * d->h * d->c);
  k->weight_cast = autocast_casts(x) ? tape_take(x, d->vocab * d->h * d->c, WEIGHT_TEMPORARIES) : 0;
  k->lse = tape_take(x, d->T * 4, VF_CAT_TEMPORARIES);
  k->logit_avg = tape_take(x, d->vocab * 4, VF_CAT_TEMPORARIES);
  tape_transient(x, d->T * 4, VF_CAT_TEMPORARIES);
}

/* Cut Cross-Entropy's backward (cce_backward.py@d42911f, cce_backward_kernel): the
 * vocabulary sorted by average logit (argsort's int64, kept as int32), the gradients of the
 * input and, where the head trains, of the weight (zeros_like the cast tensors), filled
 * block by block, then cast back to the dtypes the input and the weight had. Returns the
 * input's gradient; the weight's goes to k->grad_weight. */
static uint32_t cce_backward(struct ctx *x, struct loss_kept *k) {
  const struct dims *d = &x->d;
  uint64_t weight = d->vocab * d->h;
  uint32_t sorted = tape_take(x, d->vocab * 8, VF_CAT_TEMPORARIES);
  uint32_t order = tape_take(x, d->vocab * 4, VF_CAT_TEMPORARIES);
  tape_give(x, sorted);
  uint32_t grad_input = tape_take(x, d->T * d->h * d->c, VF_CAT_TEMPORARIES);
  uint32_t grad_weight = x->base_trainable ? tape_take(x, weight * d->c, VF_CAT_GRADIENTS) : 0;
  tape_give(x, order);
  if (grad_weight && d->w != d->c) {
    uint32_t wide = tape_take(x, weight * d->w, VF_CAT_GRADIENTS);
    tape_give(x, grad_weight);
    grad_weight = wide;
  }
  k->grad_weight = grad_weight;
  tape_give(x, k->weight_cast);
  tape_give(x, k->lse);
  tape_give(x, k->logit_avg);
  if (autocast_stream_bytes(x) == d->c) return grad_input;
  uint32_t wide = tape_take(x, d->T * d->h * autocast_stream_bytes(x), VF_CAT_TEMPORARIES);
  tape_give(x, grad_input);
  return wide;
}

struct loss_kept fused_loss_forward(struct ctx *x, struct saved *sv) {
  struct loss_kept k = {0};
  fsdp_before_loss(x);
  if (x->s->loss == VF_LOSS_CCE) cce_forward(x, sv, &k);
  else liger_forward(x, &k);
  return k;
}

/* The gradient of the head's input: Liger's, made in the forward, or Cut Cross-Entropy's. */
uint32_t fused_loss_backward(struct ctx *x, struct loss_kept *k) {
  if (x->s->loss == VF_LOSS_CCE) return cce_backward(x, k);
  uint32_t grad_input = k->grad_input;
  k->grad_input = 0;
  return grad_input;
}

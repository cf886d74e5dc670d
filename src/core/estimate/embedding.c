/* The embeddings: their forward's post-processing (BERT's LayerNorm and dropout, GPT-2's
 * dropout, the leaf a frozen model's checkpointing makes of the looked-up rows), their
 * backward, last in the pass (the sort of token ids, a tied weight's two gradients summed),
 * and the normalizing embedding bitsandbytes swaps into a quantized model. Sources:
 * embedding_dense_backward_cuda (EmbeddingBackwardKernel.cu);
 * torch/csrc/autograd/input_buffer.cpp accumulate; transformers 5.23 modeling_utils.py
 * (gradient_checkpointing_enable, enable_input_require_grads), modeling_bert.py
 * BertEmbeddings.forward, modeling_gpt2.py GPT2Model.forward; torch 2.13
 * torch/csrc/autograd/functions/accumulate_grad.h; bitsandbytes nn/modules.py
 * StableEmbedding. */
#include "core/estimate/internal.h"

/* The quantized model's embedding is swapped for a normalizing one that trains. */
bool embedding_stable(const struct ctx *x) {
  return x->p->stable_embedding && quant_model(x->s) && x->task == VF_TASK_CAUSAL_LM;
}

/* Bytes of the token embedding's weight. */
uint64_t embedding_bytes(const struct ctx *x) {
  uint64_t bytes = 0;
  size_t begin, end;
  params_layer(x->ps, -1, &begin, &end);
  for (size_t i = begin; i < end; i++)
    if (x->ps->v[i].embedding) bytes += x->ps->v[i].bytes;
  return bytes;
}

/* Whether the embeddings' output is in autograd's graph: the embeddings train, or the
 * framework makes it require grad for checkpointing (transformers' modeling_utils.py
 * gradient_checkpointing_enable calls enable_input_require_grads for text models: profile
 * field ckpt_input_grads). */
static bool embeddings_in_graph(const struct ctx *x) {
  return x->base_trainable || (x->p->ckpt_input_grads && x->s->grad_ckpt != VF_CKPT_NONE);
}

/* What the embeddings' own post-processing keeps: BERT and RoBERTa normalize the summed
 * embeddings, the LayerNorm keeping its input in the stream's dtype, then drop out (a bool
 * mask), as modeling_bert.py BertEmbeddings.forward does; GPT-2 drops out the sum
 * (modeling_gpt2.py GPT2Model.forward, self.drop). Nothing when outside the graph.
 * With the weights frozen, the graph starts at the looked-up rows themselves, made a leaf
 * that requires grad by the hook enable_input_require_grads registers
 * (transformers 5.23 modeling_utils.py, `output.requires_grad_(True)`); its AccumulateGrad
 * node holds the leaf (torch 2.13 torch/csrc/autograd/functions/accumulate_grad.h,
 * `Variable variable`) until the backward ends. Where that leaf is the stream (every
 * other family: the first layer's input, Gemma's scaled rows included) it costs nothing
 * more; BERT's and GPT-2's sum it with the positions' rows into a new tensor. */
struct embedding_kept embedding_forward(struct ctx *x) {
  struct embedding_kept k = {0, 0, 0};
  enum vf_family f = x->m->arch.family;
  uint64_t elems = x->d.Ts * x->d.h;
  if (!embeddings_in_graph(x) || (f != VF_FAMILY_BERT && f != VF_FAMILY_GPT2)) return k;
  if (!x->base_trainable) k.leaf = tape_take(x, elems * x->d.w, VF_CAT_ACTIVATIONS);
  if (f == VF_FAMILY_BERT) k.norm_input = tape_take(x, elems * autocast_stream_bytes(x), VF_CAT_ACTIVATIONS);
  k.mask = tape_take(x, elems, VF_CAT_ACTIVATIONS);
  return k;
}

/* Their backward, the pass's last: the dropout's input gradient replaces the stream's, and
 * the LayerNorm's is made beside it. Returns the gradient left for the embeddings. */
uint32_t embedding_post_backward(struct ctx *x, uint32_t grad_stream, struct embedding_kept k) {
  if (!k.mask) return grad_stream;
  uint64_t bytes = x->d.Ts * x->d.h * autocast_stream_bytes(x);
  uint32_t grad = tape_take(x, bytes, VF_CAT_TEMPORARIES);
  tape_give(x, grad_stream);
  tape_give(x, k.mask);
  if (k.norm_input) {
    uint32_t norm_grad = tape_take(x, bytes, VF_CAT_TEMPORARIES);
    tape_give(x, grad);
    tape_give(x, k.norm_input);
    grad = norm_grad;
  }
  if (!k.leaf) return grad;
  /* The gradient reaching the leaf is the one AccumulateGrad keeps as its .grad. */
  tape_give_with_graph(x, grad);
  tape_give_with_graph(x, k.leaf);
  return 0;
}

/* Embedding weights the head does not share get their gradients from their own backward,
 * the pass's last (embedding_dense_backward allocates the gradient), not with the head's
 * gradients; where the root's gradients are whole tensors made fresh. */
bool embedding_grads_late(const struct ctx *x) {
  return x->pp.has_head && !head_tied(x) && !x->grads.kept && !grads_no_sync(x) && !grads_sharded(x->s);
}

/* The gradients embedding_grads_late leaves to the embeddings' backward. */
static void late_embedding_grads(struct ctx *x) {
  if (!embedding_grads_late(x)) return;
  size_t begin, end;
  params_layer(x->ps, -1, &begin, &end);
  for (size_t i = begin; i < end; i++) {
    const struct param *p = &x->ps->v[i];
    if (p->trainable && p->embedding) ids_push(x, &x->grads.list, tape_take(x, p->numel * x->d.g, VF_CAT_GRADIENTS));
  }
}

/* The embedding's backward (embedding_dense_backward_cuda, EmbeddingBackwardKernel.cu)
 * sorts more than 3072 token ids: sorted and original ids, a range and segment offsets
 * (int64 each), then sums the rows of each partial segment in fp32:
 * [n / 10 + min(n, V), h]. */
static uint64_t embedding_sort_bytes(const struct ctx *x) {
  uint64_t n = x->d.T, seg = n < x->d.vocab ? n : x->d.vocab, partial = n / 10 + seg;
  return n <= 3072 ? 0 : 4 * n * 8 + 2 * seg * 8 + partial * 8 + partial * x->d.h * 4;
}

/* The embedding's backward, last in the pass. A tied embedding's weight has two
 * gradients: the head's matmul gave the first (in first), the embedding's backward makes
 * the second, and autograd sums them into a new tensor while both are alive
 * (torch/csrc/autograd/input_buffer.cpp accumulate: out of place while the first is still
 * referenced). Both are of the weight autograd sees: under FSDP's mixed precision the
 * gathered one, in the compute dtype (FSDP2 _fsdp_param.py init_dtype_attrs: the unsharded
 * parameter in param_dtype), not the fp32 shard's. Returns what replaces first. */
uint32_t embedding_backward(struct ctx *x, uint32_t first) {
  if (!x->base_trainable || !x->pp.has_embedding) return first;
  bool tied = head_tied(x);
  uint64_t bytes = x->d.vocab * x->d.h * grads_autograd_bytes(x);
  late_embedding_grads(x);
  /* Accumulating, an untied embedding's gradient too is made before it is added in. */
  uint32_t second = tied || grads_accumulating_in_place(x) ? tape_take(x, bytes, VF_CAT_GRADIENTS) : 0;
  tape_transient(x, embedding_sort_bytes(x), VF_CAT_TEMPORARIES);
  if (!tied) {
    tape_give(x, second);
    return first;
  }
  uint32_t sum = tape_take(x, bytes, VF_CAT_GRADIENTS);
  tape_give(x, second);
  tape_give(x, first);
  return sum;
}

/* The swapped-in embedding's backward (bitsandbytes nn/modules.py StableEmbedding: a
 * LayerNorm over the looked-up rows, which it keeps): the norm's input gradient, then the
 * embedding's own, which the first backward leaves as the weight's gradient and every
 * later one adds into it (the optimizer does not know the weight, so zero_grad never
 * frees it). Ends what the forward kept and the gradient of the stream. */
void embedding_stable_backward(struct ctx *x, uint32_t grad_stream, uint32_t embedded) {
  uint64_t stream = x->d.T * x->d.h * x->d.c;
  uint32_t norm_grad = tape_take(x, stream, VF_CAT_TEMPORARIES);
  tape_give(x, grad_stream);
  tape_give(x, embedded);
  tape_transient(x, embedding_sort_bytes(x), VF_CAT_TEMPORARIES);
  if (!x->embedding.stable_grad) x->embedding.stable_grad = tape_take(x, embedding_bytes(x), VF_CAT_GRADIENTS);
  else tape_transient(x, embedding_bytes(x), WEIGHT_TEMPORARIES);
  tape_give(x, norm_grad);
}

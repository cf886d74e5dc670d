#include "base/grow.h"
#include "core/params.h"
#include "core/profile.h"

#include <stdlib.h>
#include <string.h>

uint32_t precision_bytes(enum vf_precision p) {
  return p == VF_PREC_FP32 ? 4 : (p == VF_PREC_BF16 || p == VF_PREC_FP16) ? 2 : 0;
}

uint32_t params_rest_bytes(const struct vf_setup *s, const struct vf_profile *p) {
  bool upcast = p->quant_rest_fp32 && vf_setup_quant(s) != VF_QUANT_NONE && !vf_shard_weights(s->shard);
  return upcast ? 4 : precision_bytes(s->weights);
}

static int push(struct params *ps, const struct param *p) {
  struct param *grown = array_grow(ps->v, &ps->cap, ps->n + 1, sizeof *grown);
  if (!grown) return VF_ENOMEM;
  ps->v = grown;
  ps->v[ps->n++] = *p;
  return 0;
}

/* A quantized weight's bytes: its packed data, 4 bits an element (8 for int8), and its
 * state beside it, an attribute of the parameter and no tensor of its own (bitsandbytes
 * nn/modules.py: Params4bit's quant_state, Int8Params' scales): one fp32 absmax per 64
 * elements, or with double quantization an 8-bit absmax per 64 plus an fp32 scale per 256
 * of those and their code table; int8, an fp32 scale per row. */
static void quantize(struct param *p, enum vf_quant q) {
  uint64_t n = p->numel, data = n / 2;
  switch (q) {
  case VF_QUANT_NF4:
    p->quant_state_bytes = (n + 63) / 64 * 4;
    break;
  case VF_QUANT_NF4_DQ:
    p->quant_state_bytes = (n + 63) / 64 + (n + 16383) / 16384 * 4 + 256 * 4;
    break;
  default: /* int8 */
    data = n;
    p->quant_state_bytes = (n / 4096 + 1) * 4;
  }
  p->quantized = true;
  p->bytes = data + p->quant_state_bytes;
}

static bool is_block_linear(enum vf_kind k) {
  return k == VF_KIND_Q || k == VF_KIND_K || k == VF_KIND_V || k == VF_KIND_O ||
         k == VF_KIND_GATE || k == VF_KIND_UP || k == VF_KIND_DOWN || k == VF_KIND_QKV ||
         k == VF_KIND_GATE_UP;
}

/* Output rows of each target inside a (possibly fused) projection of out rows. */
static uint64_t targeted_out(const struct vf_arch *a, enum vf_kind k, uint64_t out, uint32_t targets) {
  if (k == VF_KIND_QKV) {
    uint64_t whole = a->heads + 2 * a->kv_heads, sum = 0;
    if (targets & (1u << VF_KIND_Q)) sum += out / whole * a->heads;
    if (targets & (1u << VF_KIND_K)) sum += out / whole * a->kv_heads;
    if (targets & (1u << VF_KIND_V)) sum += out / whole * a->kv_heads;
    return sum;
  }
  if (k == VF_KIND_GATE_UP)
    return ((targets >> VF_KIND_GATE) & 1) * out / 2 + ((targets >> VF_KIND_UP) & 1) * out / 2;
  return (targets >> k) & 1 ? out : 0;
}

static bool lora_like(enum vf_method m) {
  return m == VF_METHOD_LORA || m == VF_METHOD_QLORA || m == VF_METHOD_DORA;
}

/* A weight [out, in] of a block projection; GPT-2 Conv1D stores [in, out]. */
static void linear_shape(const struct vf_model *m, const struct vf_tensor *t, uint64_t *in, uint64_t *out) {
  bool conv1d = m->arch.family == VF_FAMILY_GPT2;
  *out = conv1d ? t->shape[1] : t->shape[0];
  *in = conv1d ? t->shape[0] : t->shape[1];
}

static int add_adapter(struct params *ps, const struct vf_setup *s, int32_t layer,
                       uint64_t in, uint64_t out, uint32_t wb) {
  struct param a = {.layer = layer, .numel = s->lora_r * in, .trainable = true, .in = in, .out = s->lora_r};
  struct param b = {.layer = layer, .numel = s->lora_r * out, .trainable = true, .in = s->lora_r, .out = out};
  a.bytes = a.numel * wb;
  b.bytes = b.numel * wb;
  int rc = push(ps, &a);
  if (!rc) rc = push(ps, &b);
  if (!rc && s->method == VF_METHOD_DORA) {
    struct param mag = {.layer = layer, .numel = out, .bytes = out * wb, .trainable = true};
    rc = push(ps, &mag);
  }
  ps->trainable += a.numel + b.numel + (s->method == VF_METHOD_DORA ? out : 0);
  return rc;
}

static int add_task_head(struct params *ps, const struct vf_model *m, enum vf_task task, uint32_t wb) {
  const struct vf_arch *a = &m->arch;
  uint64_t sizes[4] = {0};
  if (task == VF_TASK_SEQ_CLS && a->family == VF_FAMILY_BERT)
    sizes[0] = a->num_labels * a->hidden, sizes[1] = a->num_labels;
  else if (task == VF_TASK_SEQ_CLS)
    sizes[0] = a->num_labels * a->hidden; /* score head replaces lm_head */
  else if (task == VF_TASK_MASKED_LM)
    sizes[0] = a->hidden * a->hidden, sizes[1] = a->hidden, sizes[2] = 2 * a->hidden, sizes[3] = a->vocab;
  for (int i = 0; i < 4; i++) {
    if (!sizes[i]) continue;
    struct param p = {.layer = -1, .numel = sizes[i], .bytes = sizes[i] * wb, .trainable = true};
    if (i == 0) p.in = a->hidden, p.out = sizes[0] / a->hidden; /* the head's matrix */
    int rc = push(ps, &p);
    if (rc) return rc;
    ps->total += sizes[i];
    ps->trainable += sizes[i];
  }
  return 0;
}

/* A stable counting sort by layer (-1 first): layers are small integers, and the blocks
 * keep their model order. */
static int order_by_layer(struct params *ps, uint64_t layers) {
  size_t *start = calloc(layers + 2, sizeof *start);
  struct param *sorted = malloc(ps->n * sizeof *sorted);
  if (!start || !sorted) {
    free(start);
    free(sorted);
    return VF_ENOMEM;
  }
  for (size_t i = 0; i < ps->n; i++) start[ps->v[i].layer + 2]++;
  for (uint64_t l = 1; l < layers + 2; l++) start[l] += start[l - 1];
  for (size_t i = 0; i < ps->n; i++) sorted[start[ps->v[i].layer + 1]++] = ps->v[i];
  free(ps->v);
  free(start);
  ps->v = sorted;
  ps->cap = ps->n;
  return 0;
}

/* Where each layer begins: the estimator asks for every layer's range, many times a replay. */
static int index_layers(struct params *ps, uint64_t layers) {
  if (!(ps->first = malloc((layers + 2) * sizeof *ps->first))) return VF_ENOMEM;
  ps->layers = layers;
  size_t i = 0;
  for (int64_t l = -1; l <= (int64_t)layers; l++) {
    while (i < ps->n && ps->v[i].layer < l) i++;
    ps->first[l + 1] = i;
  }
  return 0;
}

static size_t first_at_least(const struct params *ps, int32_t layer) {
  if (layer < 0) return 0;
  return (uint64_t)layer > ps->layers ? ps->n : ps->first[layer + 1];
}

/* Frameworks that copy a tied embedding into a separate lm_head train and store both; so
 * does a pipeline, whose last stage needs the head away from the first stage's embedding
 * (Megatron's shared embedding, its gradient all-reduced between the two): counted then
 * as the same parameters. */
static int add_untied_head(struct params *ps, const struct vf_model *m, const struct vf_setup *s,
                           const struct vf_profile *pr, enum vf_quant q, uint32_t adapter_wb) {
  const struct vf_arch *a = &m->arch;
  bool full = s->method == VF_METHOD_FULL, counted = pr->untie_embeddings;
  struct param head = {.layer = -1, .numel = a->vocab * a->hidden / s->tp, .trainable = full,
                          .linear = true, .in = a->hidden, .out = a->vocab / s->tp};
  head.bytes = head.numel * params_rest_bytes(s, pr);
  if (pr->quantize_head && q != VF_QUANT_NONE && !full) quantize(&head, q);
  if (counted) ps->total += a->vocab * a->hidden;
  if (counted && full) ps->trainable += a->vocab * a->hidden;
  int rc = push(ps, &head);
  if (!rc && lora_like(s->method) && (s->lora_targets & (1u << VF_KIND_HEAD)))
    rc = add_adapter(ps, s, -1, head.in, head.out, adapter_wb);
  return rc;
}

int params_build(struct params *ps, const struct vf_model *m, const struct vf_setup *s,
                 const struct vf_profile *pr, enum vf_task task) {
  memset(ps, 0, sizeof *ps);
  /* Sized once: every tensor, an adapter pair for each, and a few task-head tensors. */
  if (!(ps->v = array_grow(NULL, &ps->cap, 3 * m->n_tensors + 8, sizeof *ps->v))) return VF_ENOMEM;
  uint32_t wb = params_rest_bytes(s, pr);
  uint32_t adapter_wb = (pr->adapter_fp32 && s->method != VF_METHOD_FULL) ? 4 : wb;
  bool full = s->method == VF_METHOD_FULL;
  enum vf_quant q = vf_setup_quant(s);
  int rc = 0;
  for (size_t i = 0; i < m->n_tensors && !rc; i++) {
    const struct vf_tensor *t = &m->tensors[i];
    uint64_t n = vf_tensor_numel(t);
    /* A classification head replaces a decoder's lm_head. */
    if (task == VF_TASK_SEQ_CLS && t->kind == VF_KIND_HEAD) continue;
    /* A checkpoint may name layers its config does not have: count them outside the blocks. */
    int32_t layer = t->layer < (int32_t)m->arch.layers ? t->layer : -1;
    /* Under expert parallelism a GPU holds its share of each layer's experts. */
    bool held = t->expert < 0 || (uint64_t)t->expert < m->arch.experts / s->ep;
    struct param p = {.layer = layer, .numel = n, .trainable = full, .embedding = t->kind == VF_KIND_EMBEDDING,
                         .expert = t->expert >= 0};
    bool linear = t->ndim == 2 && (is_block_linear(t->kind) || (t->kind == VF_KIND_HEAD && pr->quantize_head));
    bool split = t->ndim == 2 && (is_block_linear(t->kind) || t->kind == VF_KIND_HEAD ||
                                  t->kind == VF_KIND_EMBEDDING);
    if (split) p.numel = n / s->tp;
    p.bytes = p.numel * wb;
    if (linear && q != VF_QUANT_NONE && !full) quantize(&p, q);
    if (t->ndim == 2 && (is_block_linear(t->kind) || t->kind == VF_KIND_HEAD)) {
      p.linear = true;
      linear_shape(m, t, &p.in, &p.out);
    } else if (t->ndim == 2) {
      p.out = t->shape[0] / (split ? s->tp : 1);
      p.in = t->shape[1];
    }
    ps->total += n;
    if (full) ps->trainable += n;
    if (!held) continue;
    rc = push(ps, &p);
    if (rc || full || !lora_like(s->method) || !p.linear) continue;
    uint64_t out = targeted_out(&m->arch, t->kind, p.out, s->lora_targets);
    if (!out || (t->kind == VF_KIND_HEAD && !(s->lora_targets & (1u << VF_KIND_HEAD)))) continue;
    rc = add_adapter(ps, s, layer, p.in, out / s->tp, adapter_wb);
  }
  if (!rc && (pr->untie_embeddings || s->pp > 1) && m->arch.tied_embeddings && task == VF_TASK_CAUSAL_LM)
    rc = add_untied_head(ps, m, s, pr, q, adapter_wb);
  if (!rc && (s->method == VF_METHOD_ADAPTER || s->method == VF_METHOD_ADAPTER_V2)) {
    /* Adapter prompts (10 tokens and a gate per head) in the prompted layers and, for v2, a
     * bias and scale per projection in every layer. */
    for (uint64_t l = 0; l < m->arch.layers && !rc; l++) {
      uint64_t n = l >= VF_ADAPTER_START_LAYER ? 10 * m->arch.hidden + m->arch.heads : 0;
      if (s->method == VF_METHOD_ADAPTER_V2) n += 2 * (4 * m->arch.hidden + 3 * m->arch.intermediate);
      if (!n) continue;
      struct param p = {.layer = (int32_t)l, .numel = n, .bytes = n * adapter_wb, .trainable = true};
      rc = push(ps, &p);
      ps->trainable += n;
    }
  }
  if (!rc) rc = add_task_head(ps, m, task, full ? wb : adapter_wb);
  if (!rc && ps->n) rc = order_by_layer(ps, m->arch.layers);
  if (!rc) rc = index_layers(ps, m->arch.layers);
  return rc;
}

void params_layer(const struct params *ps, int32_t layer, size_t *begin, size_t *end) {
  *begin = first_at_least(ps, layer);
  *end = first_at_least(ps, layer + 1);
}

void params_keep_root(struct params *ps, bool embedding, bool rest) {
  size_t begin, end, kept = 0;
  params_layer(ps, -1, &begin, &end);
  for (size_t i = begin; i < end; i++)
    if (ps->v[i].embedding ? embedding : rest) ps->v[begin + kept++] = ps->v[i];
  memmove(ps->v + begin + kept, ps->v + end, (ps->n - end) * sizeof *ps->v);
  size_t dropped = end - begin - kept;
  ps->n -= dropped;
  for (uint64_t l = 0; l <= ps->layers; l++) ps->first[l + 1] -= dropped;
}

void params_cleanup(struct params *ps) {
  free(ps->v);
  free(ps->first);
  memset(ps, 0, sizeof *ps);
}

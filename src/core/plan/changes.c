/* What the plan changes, in sentences: from the given setting to the balanced tier one
 * knob at a time, the knob that lowers the peak most first, each with why and the peak it
 * leads to; the micro batch last, as it spends what the others saved. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/plan/internal.h"

enum move { M_ALLOC, M_LOSS, M_SEQ, M_METHOD, M_RANK, M_PRECISION, M_OPTIMIZER, M_IN_BWD, M_CKPT, M_SHARD, M_LAYOUT,
            M_OFFLOAD, M_COUNT };

/* A setting on the way: its knobs and its allocator configuration. */
struct point {
  struct vf_setup s;
  const char *alloc;
};

void vf_offload_format(uint32_t bits, char *buf, size_t size) {
  static const char *const names[] = {"optimizer", "params", "activations"};
  static const uint32_t flags[] = {VF_OFFLOAD_OPTIMIZER, VF_OFFLOAD_PARAMS, VF_OFFLOAD_ACTIVATIONS};
  size_t used = 0;
  snprintf(buf, size, "none");
  for (size_t i = 0; i < 3; i++)
    if ((bits & flags[i]) && used < size)
      used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? "," : "", names[i]);
}

static bool differs(const struct point *a, const struct point *b, enum move m) {
  const struct vf_setup *x = &a->s, *y = &b->s;
  switch (m) {
  case M_ALLOC: return strcmp(a->alloc, b->alloc) != 0;
  case M_LOSS: return x->loss != y->loss;
  case M_SEQ: return x->seq != y->seq;
  case M_METHOD: return x->method != y->method || x->quant != y->quant;
  case M_RANK: return x->lora_r != y->lora_r;
  case M_PRECISION: return x->amp != y->amp || x->weights != y->weights;
  case M_OPTIMIZER: return x->optimizer != y->optimizer;
  case M_IN_BWD: return x->optimizer_in_bwd != y->optimizer_in_bwd;
  case M_CKPT: return x->grad_ckpt != y->grad_ckpt;
  case M_SHARD: return x->shard != y->shard;
  case M_LAYOUT:
    return x->tp != y->tp || x->pp != y->pp || x->cp != y->cp || x->ep != y->ep ||
           (y->pp > 1 && x->pp_schedule != y->pp_schedule);
  default: return x->offload != y->offload;
  }
}

static void take(struct point *cur, const struct point *to, enum move m) {
  struct vf_setup *c = &cur->s;
  const struct vf_setup *t = &to->s;
  switch (m) {
  case M_ALLOC: cur->alloc = to->alloc; break;
  case M_LOSS: c->loss = t->loss; break;
  case M_SEQ: c->seq = t->seq; break;
  case M_METHOD: c->method = t->method, c->quant = t->quant; break;
  case M_RANK: c->lora_r = t->lora_r; break;
  case M_PRECISION: c->amp = t->amp, c->weights = t->weights; break;
  case M_OPTIMIZER: c->optimizer = t->optimizer; break;
  case M_IN_BWD: /* the step in the backward comes with its split: accumulation 1 */
    c->optimizer_in_bwd = t->optimizer_in_bwd;
    if (t->optimizer_in_bwd == VF_IN_BWD_YES) c->batch = t->batch, c->accumulation = t->accumulation;
    break;
  case M_CKPT: c->grad_ckpt = t->grad_ckpt; break;
  case M_SHARD: c->shard = t->shard; break;
  case M_LAYOUT: c->tp = t->tp, c->pp = t->pp, c->cp = t->cp, c->ep = t->ep, c->pp_schedule = t->pp_schedule; break;
  default: c->offload = t->offload; break;
  }
}

static const char *name(enum vf_enum_kind kind, int value) { return vf_enum_name(kind, value); }

static int describe_method(char *buf, size_t size, const struct vf_setup *from, const struct vf_setup *to) {
  unsigned long long r = (unsigned long long)to->lora_r;
  if (from->method == VF_METHOD_FULL && to->method == VF_METHOD_LORA)
    return snprintf(buf, size, "train LoRA adapters (r %llu) instead of the full model (--keep lets the method change)", r);
  if (to->method == VF_METHOD_QLORA)
    return snprintf(buf, size, "train QLoRA adapters (r %llu) on 4-bit base weights instead of %s (--keep lets them change)",
                    r, from->method == VF_METHOD_FULL ? "the full model" : "16-bit ones");
  return snprintf(buf, size, "method %s → %s", name(VF_ENUM_METHOD, (int)from->method), name(VF_ENUM_METHOD, (int)to->method));
}

static int describe_precision(char *buf, size_t size, const struct vf_plan_request *r, const struct vf_setup *from,
                              const struct vf_setup *to) {
  const char *amp = name(VF_ENUM_PRECISION, (int)to->amp);
  char weights[64] = "";
  if (from->weights != to->weights)
    snprintf(weights, sizeof weights, ", weights %s → %s", name(VF_ENUM_PRECISION, (int)from->weights),
             name(VF_ENUM_PRECISION, (int)to->weights));
  if (plan_lacks_bf16(r->gpu) && to->amp == VF_PREC_FP16)
    return snprintf(buf, size,
                    "compute in fp16 with a GradScaler (it keeps the loss scale and fp32 gradients)%s: %s has no bf16 "
                    "(compute capability %d.%d)", weights, r->gpu->name[0] ? r->gpu->name : "the GPU", r->gpu->cc_major,
                    r->gpu->cc_minor);
  if (from->amp == VF_PREC_NONE) return snprintf(buf, size, "compute in %s (autocast mixed precision)%s", amp, weights);
  return snprintf(buf, size, "autocast %s → %s%s", name(VF_ENUM_PRECISION, (int)from->amp), amp, weights);
}

static int describe_optimizer(char *buf, size_t size, const struct vf_setup *from, const struct vf_setup *to) {
  static const char *const why[] = {[VF_OPT_ADAMW_8BIT] = " (8-bit states)",
                                    [VF_OPT_PAGED_ADAMW_8BIT] = " (8-bit states, paged out to CPU memory under pressure)",
                                    [VF_OPT_ADAFACTOR] = " (factored second moments, no first)"};
  const char *because = to->optimizer < sizeof why / sizeof *why && why[to->optimizer] ? why[to->optimizer] : "";
  return snprintf(buf, size, "optimizer %s → %s%s", name(VF_ENUM_OPTIMIZER, (int)from->optimizer),
                  name(VF_ENUM_OPTIMIZER, (int)to->optimizer), because);
}

static int describe_in_bwd(char *buf, size_t size, const struct vf_setup *from, const struct vf_setup *to) {
  if (to->optimizer_in_bwd == VF_IN_BWD_NO)
    return snprintf(buf, size, "step the optimizer after the backward (optimizer_in_bwd off)");
  int n = snprintf(buf, size, "step the optimizer inside the backward (torchtune's optimizer_in_bwd: each gradient goes "
                   "once its parameter is updated, so the model's gradients never exist at once; no gradient clipping)");
  if ((from->batch != to->batch || from->accumulation != to->accumulation) && n > 0 && (size_t)n < size)
    snprintf(buf + n, size - (size_t)n, ", micro batch %llu → %llu with accumulation %llu → 1, which it needs",
             (unsigned long long)from->batch, (unsigned long long)to->batch, (unsigned long long)from->accumulation);
  return n;
}

static int describe_loss(char *buf, size_t size, const struct vf_setup *from, const struct vf_setup *to) {
  const char *why = to->loss == VF_LOSS_FUSED ? "Liger's fused linear cross-entropy: the logits are never whole"
                    : to->loss == VF_LOSS_CCE ? "Cut Cross-Entropy: the logits are never whole"
                    : to->loss == VF_LOSS_CHUNKED ? "the logits are up-cast and their loss taken one chunk at a time"
                                                  : "the framework's own loss";
  return snprintf(buf, size, "loss %s → %s (%s)", name(VF_ENUM_LOSS, (int)from->loss), name(VF_ENUM_LOSS, (int)to->loss),
                  why);
}

/* A value searched down (seq, the LoRA rank): the largest that fits, and why it moved. */
static int describe_dial(char *buf, size_t size, const char *what, uint64_t from, uint64_t to, const char *kept) {
  return snprintf(buf, size, "%s %llu → %llu, the largest that fits: nothing fits at %llu with the knobs that keep the "
                  "trained model as it is (%s keeps it)", what, (unsigned long long)from, (unsigned long long)to,
                  (unsigned long long)from, kept);
}

static int describe_ckpt(char *buf, size_t size, const struct vf_setup *from, const struct vf_setup *to) {
  if (to->grad_ckpt == VF_CKPT_NONE) return snprintf(buf, size, "turn off gradient checkpointing (no recomputation)");
  if (from->grad_ckpt == VF_CKPT_NONE)
    return snprintf(buf, size, "turn on gradient checkpointing (%s: activations recomputed in the backward)",
                    name(VF_ENUM_CKPT, (int)to->grad_ckpt));
  return snprintf(buf, size, "gradient checkpointing %s → %s", name(VF_ENUM_CKPT, (int)from->grad_ckpt),
                  name(VF_ENUM_CKPT, (int)to->grad_ckpt));
}

void vf_layout_format(const struct vf_setup *s, char *buf, size_t size) {
  typedef unsigned long long ull;
  int n = snprintf(buf, size, "tp %llu x pp %llu", (ull)s->tp, (ull)s->pp);
  if (s->pp > 1 && (size_t)n < size)
    n += snprintf(buf + n, size - (size_t)n, " (%s)", vf_enum_name(VF_ENUM_PP_SCHEDULE, s->pp_schedule));
  if (s->cp > 1 && (size_t)n < size) n += snprintf(buf + n, size - (size_t)n, " x cp %llu", (ull)s->cp);
  if ((size_t)n < size) n += snprintf(buf + n, size - (size_t)n, " x dp %llu", (ull)plan_data_parallel(s));
  if (s->ep > 1 && (size_t)n < size) snprintf(buf + n, size - (size_t)n, ", ep %llu", (ull)s->ep);
}

static int describe(char *buf, size_t size, const struct vf_plan_request *r, enum move m, const struct point *from,
                    const struct point *to) {
  const struct vf_setup *f = &from->s, *t = &to->s;
  char a[64], b[64];
  switch (m) {
  case M_ALLOC:
    return snprintf(buf, size, "PYTORCH_CUDA_ALLOC_CONF=%s: segments grow in place rather than new ones being cut, "
                    "so the allocator reserves little beyond the tensors", to->alloc);
  case M_LOSS: return describe_loss(buf, size, f, t);
  case M_SEQ: return describe_dial(buf, size, "seq", f->seq, t->seq, "--keep seq");
  case M_METHOD: return describe_method(buf, size, f, t);
  case M_RANK: return describe_dial(buf, size, "LoRA rank", f->lora_r, t->lora_r, "--keep lora-r");
  case M_PRECISION: return describe_precision(buf, size, r, f, t);
  case M_OPTIMIZER: return describe_optimizer(buf, size, f, t);
  case M_IN_BWD: return describe_in_bwd(buf, size, f, t);
  case M_CKPT: return describe_ckpt(buf, size, f, t);
  case M_SHARD:
    return snprintf(buf, size, "shard %s → %s across %llu GPUs", name(VF_ENUM_SHARD, (int)f->shard),
                    name(VF_ENUM_SHARD, (int)t->shard), (unsigned long long)f->gpus);
  case M_LAYOUT:
    vf_layout_format(f, a, sizeof a);
    vf_layout_format(t, b, sizeof b);
    return snprintf(buf, size, "layout %s → %s", a, b);
  default:
    vf_offload_format(f->offload, a, sizeof a);
    vf_offload_format(t->offload, b, sizeof b);
    return snprintf(buf, size, "offload %s → %s (to CPU memory)", a, b);
  }
}

static void gib(char *buf, size_t size, uint64_t bytes) {
  snprintf(buf, size, "%.1f GiB", (double)bytes / (double)(1ull << 30));
}

static void add(struct vf_plan_result *out, const char *what, uint64_t before, uint64_t after) {
  if (out->n_changes == VF_PLAN_MAX_CHANGES) return;
  char a[32], b[32];
  gib(a, sizeof a, before);
  gib(b, sizeof b, after);
  /* A description too long for the line loses its end, never the figures' room. */
  int room = (int)sizeof out->changes[0] - (int)(strlen(a) + strlen(b)) - (int)sizeof ": peak  → ";
  snprintf(out->changes[out->n_changes++], sizeof out->changes[0], "%.*s: peak %s → %s", room, what, a, b);
}

/* The remaining move that lowers the peak of cur most, with that peak; M_COUNT when the
 * estimator refuses each alone (the last of them is then taken without a figure). */
static enum move lowest(const struct vf_plan_request *r, struct vf_plan_result *out, const struct point *given,
                        const struct point *cur, const struct point *to, uint64_t *peak) {
  enum move best = M_COUNT;
  for (int m = 0; m < M_COUNT; m++) {
    if (!differs(cur, to, (enum move)m)) continue;
    struct point next = *cur;
    struct vf_estimate e;
    struct vf_diag d;
    struct vf_alloc_conf conf;
    take(&next, to, (enum move)m);
    plan_alloc_conf(r, given->alloc, next.alloc, &conf);
    out->estimates++;
    if (vf_estimate(r->model, &next.s, r->profile, &conf, &e, &d)) continue;
    if (r->batch_scale > 0) vf_estimate_calibrate(&e, r->batch_scale);
    if (best == M_COUNT || e.device_peak < *peak) best = (enum move)m, *peak = e.device_peak;
  }
  return best;
}

static void batch_sentence(struct vf_plan_result *out, const struct vf_setup *from, const struct vf_plan_choice *to,
                           uint64_t before) {
  char what[VF_PLAN_CHANGE_LEN];
  int n = snprintf(what, sizeof what, "micro batch %llu → %llu with accumulation %llu → %llu ",
                   (unsigned long long)from->batch, (unsigned long long)to->setup.batch,
                   (unsigned long long)from->accumulation, (unsigned long long)to->setup.accumulation);
  if (to->effective_batch == out->target_effective_batch)
    snprintf(what + n, sizeof what - (size_t)n, "keeps the effective batch at %llu",
             (unsigned long long)to->effective_batch);
  else
    snprintf(what + n, sizeof what - (size_t)n,
             "makes the effective batch %llu, %.1f%% off the %llu asked: the nearest to it of the fastest split that fits",
             (unsigned long long)to->effective_batch,
             100.0 * fabs((double)to->effective_batch - (double)out->target_effective_batch) /
                 (double)out->target_effective_batch,
             (unsigned long long)out->target_effective_batch);
  add(out, what, before, to->peak_device_bytes);
}

/* On a GPU without bf16, a bf16 setting --keep precision holds is one the GPU cannot run. */
static void bf16_kept(const struct vf_plan_request *r, struct vf_plan_result *out, const struct vf_setup *s) {
  if (!plan_lacks_bf16(r->gpu) || (s->amp != VF_PREC_BF16 && s->weights != VF_PREC_BF16) || out->n_changes == VF_PLAN_MAX_CHANGES)
    return;
  snprintf(out->changes[out->n_changes++], sizeof out->changes[0],
           "%s has no bf16 (compute capability %d.%d): --keep precision holds bf16, which it runs only emulated if at "
           "all (the Trainer refuses it); fp16 autocast with a GradScaler is what such a GPU runs",
           r->gpu->name[0] ? r->gpu->name : "the GPU", r->gpu->cc_major, r->gpu->cc_minor);
}

void plan_changes(const struct vf_plan_request *r, struct vf_plan_result *out) {
  const struct vf_plan_choice *to_choice = &out->tiers[VF_TIER_BALANCED];
  const struct point given = {out->given.setup, out->given.alloc_conf}, to = {to_choice->setup, to_choice->alloc_conf};
  struct point cur = given;
  uint64_t peak = out->given.peak_device_bytes;
  for (;;) {
    uint64_t next_peak = 0;
    enum move m = lowest(r, out, &given, &cur, &to, &next_peak);
    if (m == M_COUNT) break;
    char what[VF_PLAN_CHANGE_LEN];
    describe(what, sizeof what, r, m, &cur, &to);
    add(out, what, peak, next_peak);
    take(&cur, &to, m);
    peak = next_peak;
  }
  for (int m = 0; m < M_COUNT; m++) /* moves the estimator refuses one at a time */
    take(&cur, &to, (enum move)m);
  if (cur.s.batch != to.s.batch || cur.s.accumulation != to.s.accumulation ||
      to_choice->effective_batch != out->target_effective_batch)
    batch_sentence(out, &cur.s, to_choice, peak);
  if (!out->n_changes)
    snprintf(out->changes[out->n_changes++], sizeof out->changes[0], "keep the given setting: it is already the fastest that fits");
  bf16_kept(r, out, &to.s);
}

/* What the plan changes, in sentences: from the given setting to the balanced tier one
 * knob at a time, the knob that lowers the peak most first, each with the peak it leads
 * to; the micro batch last, as it spends what the others saved. */
#include <stdio.h>
#include <string.h>

#include "core/plan/internal.h"

enum move { M_SEQ, M_METHOD, M_PRECISION, M_OPTIMIZER, M_CKPT, M_SHARD, M_LAYOUT, M_OFFLOAD, M_COUNT };

void vf_offload_format(uint32_t bits, char *buf, size_t size) {
  static const char *const names[] = {"optimizer", "params", "activations"};
  static const uint32_t flags[] = {VF_OFFLOAD_OPTIMIZER, VF_OFFLOAD_PARAMS, VF_OFFLOAD_ACTIVATIONS};
  size_t used = 0;
  snprintf(buf, size, "none");
  for (size_t i = 0; i < 3; i++)
    if ((bits & flags[i]) && used < size)
      used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? "," : "", names[i]);
}

static bool differs(const struct vf_setup *a, const struct vf_setup *b, enum move m) {
  switch (m) {
  case M_SEQ: return a->seq != b->seq;
  case M_METHOD: return a->method != b->method || a->quant != b->quant;
  case M_PRECISION: return a->amp != b->amp;
  case M_OPTIMIZER: return a->optimizer != b->optimizer;
  case M_CKPT: return a->grad_ckpt != b->grad_ckpt;
  case M_SHARD: return a->shard != b->shard;
  case M_LAYOUT:
    return a->tp != b->tp || a->pp != b->pp || a->cp != b->cp || a->ep != b->ep ||
           (b->pp > 1 && a->pp_schedule != b->pp_schedule);
  default: return a->offload != b->offload;
  }
}

static void take(struct vf_setup *cur, const struct vf_setup *to, enum move m) {
  switch (m) {
  case M_SEQ: cur->seq = to->seq; break;
  case M_METHOD: cur->method = to->method, cur->quant = to->quant; break;
  case M_PRECISION: cur->amp = to->amp; break;
  case M_OPTIMIZER: cur->optimizer = to->optimizer; break;
  case M_CKPT: cur->grad_ckpt = to->grad_ckpt; break;
  case M_SHARD: cur->shard = to->shard; break;
  case M_LAYOUT:
    cur->tp = to->tp, cur->pp = to->pp, cur->cp = to->cp, cur->ep = to->ep, cur->pp_schedule = to->pp_schedule;
    break;
  default: cur->offload = to->offload; break;
  }
}

static int describe_method(char *buf, size_t size, const struct vf_setup *from, const struct vf_setup *to) {
  const char *m = vf_enum_name(VF_ENUM_METHOD, (int)to->method);
  unsigned long long r = (unsigned long long)to->lora_r;
  if (from->method == VF_METHOD_FULL && to->method == VF_METHOD_LORA)
    return snprintf(buf, size, "train LoRA adapters (r %llu) instead of the full model", r);
  if (to->method == VF_METHOD_QLORA)
    return snprintf(buf, size, "train QLoRA adapters (r %llu) on 4-bit base weights instead of %s", r,
                    from->method == VF_METHOD_FULL ? "the full model" : "16-bit ones");
  return snprintf(buf, size, "method %s → %s", vf_enum_name(VF_ENUM_METHOD, (int)from->method), m);
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

static int describe(char *buf, size_t size, enum move m, const struct vf_setup *from, const struct vf_setup *to) {
  char a[64], b[64];
  switch (m) {
  case M_SEQ:
    return snprintf(buf, size, "seq %llu → %llu, a last resort: nothing fits at %llu within the allowed changes",
                    (unsigned long long)from->seq, (unsigned long long)to->seq, (unsigned long long)from->seq);
  case M_METHOD: return describe_method(buf, size, from, to);
  case M_PRECISION:
    if (from->amp == VF_PREC_NONE)
      return snprintf(buf, size, "compute in %s (autocast mixed precision)", vf_enum_name(VF_ENUM_PRECISION, (int)to->amp));
    return snprintf(buf, size, "autocast %s → %s", vf_enum_name(VF_ENUM_PRECISION, (int)from->amp),
                    vf_enum_name(VF_ENUM_PRECISION, (int)to->amp));
  case M_OPTIMIZER:
    return snprintf(buf, size, "optimizer %s → %s", vf_enum_name(VF_ENUM_OPTIMIZER, (int)from->optimizer),
                    vf_enum_name(VF_ENUM_OPTIMIZER, (int)to->optimizer));
  case M_CKPT:
    if (to->grad_ckpt == VF_CKPT_NONE) return snprintf(buf, size, "turn off gradient checkpointing");
    if (from->grad_ckpt == VF_CKPT_NONE)
      return snprintf(buf, size, "turn on gradient checkpointing (%s)", vf_enum_name(VF_ENUM_CKPT, (int)to->grad_ckpt));
    return snprintf(buf, size, "gradient checkpointing %s → %s", vf_enum_name(VF_ENUM_CKPT, (int)from->grad_ckpt),
                    vf_enum_name(VF_ENUM_CKPT, (int)to->grad_ckpt));
  case M_SHARD:
    return snprintf(buf, size, "shard %s → %s across %llu GPUs", vf_enum_name(VF_ENUM_SHARD, (int)from->shard),
                    vf_enum_name(VF_ENUM_SHARD, (int)to->shard), (unsigned long long)from->gpus);
  case M_LAYOUT:
    vf_layout_format(from, a, sizeof a);
    vf_layout_format(to, b, sizeof b);
    return snprintf(buf, size, "layout %s → %s", a, b);
  default:
    vf_offload_format(from->offload, a, sizeof a);
    vf_offload_format(to->offload, b, sizeof b);
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
static enum move lowest(const struct vf_plan_request *r, struct vf_plan_result *out, const struct vf_setup *cur,
                        const struct vf_setup *to, uint64_t *peak) {
  enum move best = M_COUNT;
  for (int m = 0; m < M_COUNT; m++) {
    if (!differs(cur, to, (enum move)m)) continue;
    struct vf_setup next = *cur;
    struct vf_estimate e;
    struct vf_diag d;
    take(&next, to, (enum move)m);
    out->estimates++;
    if (vf_estimate(r->model, &next, r->profile, r->alloc, &e, &d)) continue;
    if (r->batch_scale > 0) vf_estimate_calibrate(&e, r->batch_scale);
    if (best == M_COUNT || e.device_peak < *peak) best = (enum move)m, *peak = e.device_peak;
  }
  return best;
}

static void batch_sentence(struct vf_plan_result *out, const struct vf_setup *from, const struct vf_plan_choice *to,
                           uint64_t before) {
  char what[200];
  int n = snprintf(what, sizeof what, "micro batch %llu → %llu with accumulation %llu → %llu ",
                   (unsigned long long)from->batch, (unsigned long long)to->setup.batch,
                   (unsigned long long)from->accumulation, (unsigned long long)to->setup.accumulation);
  if (to->effective_batch == out->target_effective_batch)
    snprintf(what + n, sizeof what - (size_t)n, "keeps the effective batch at %llu",
             (unsigned long long)to->effective_batch);
  else
    snprintf(what + n, sizeof what - (size_t)n, "makes the effective batch %llu, the nearest to %llu the GPUs share evenly",
             (unsigned long long)to->effective_batch, (unsigned long long)out->target_effective_batch);
  add(out, what, before, to->peak_device_bytes);
}

void plan_changes(const struct vf_plan_request *r, struct vf_plan_result *out) {
  const struct vf_plan_choice *to = &out->tiers[VF_TIER_BALANCED];
  struct vf_setup cur = out->given.setup;
  uint64_t peak = out->given.peak_device_bytes;
  for (;;) {
    uint64_t next_peak = 0;
    enum move m = lowest(r, out, &cur, &to->setup, &next_peak);
    if (m == M_COUNT) break;
    char what[160];
    describe(what, sizeof what, m, &cur, &to->setup);
    add(out, what, peak, next_peak);
    take(&cur, &to->setup, m);
    peak = next_peak;
  }
  for (int m = 0; m < M_COUNT; m++) /* moves the estimator refuses one at a time */
    take(&cur, &to->setup, (enum move)m);
  if (cur.batch != to->setup.batch || cur.accumulation != to->setup.accumulation ||
      to->effective_batch != out->target_effective_batch)
    batch_sentence(out, &cur, to, peak);
  if (!out->n_changes)
    snprintf(out->changes[out->n_changes++], sizeof out->changes[0], "keep the given setting: it is already the fastest that fits");
}

/* The planner: the fastest setting under each tier's budget, found by calling the
 * estimator.
 *
 * Micro batches. Any micro batch b from 1 to the n samples each data-parallel replica
 * handles per step, with the accumulation round(n / b) (at least 1): the effective batch is
 * the nearest to the one asked for that b reaches (micro batch 3 with accumulation 21 over
 * 4 GPUs makes 252 of 256). A binary search finds the largest b under a tier's budget, the
 * peak growing with b; the micro batches down to half of it are ranked, each percent the
 * effective batch misses the target by costing two.
 *
 * Levels. The knobs that leave the trained model as it is come first: the allocator's
 * configuration, the loss kernel, autocast, the optimizer's storage, checkpointing, ZeRO
 * and offload (and the micro batch). Only where nothing fits with them does a tier change
 * what is trained, and only what --keep leaves free: the method (LoRA, then QLoRA's 4-bit
 * base), then the LoRA rank and the seq, each to the largest value that fits (a binary
 * search, not halving). Within a level every combination of the knobs is ranked by its
 * throughput at its fastest micro batch, memory aside (an upper bound), and tried in that
 * order until no bound beats the best found. Ranking charges each changed knob 1% so that a
 * change must buy speed. The search ranks on quick estimates; each tier's few best settings
 * are then settled on exact ones, and the best of them taken (settle_runners).
 *
 * Layouts (gpus_per_node): every tp, pp, cp, ep and schedule the framework can run on the
 * world is one more dimension of the combinations, with the shard; the other knobs stay
 * as given. Each layout has its own samples per replica. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "base/grow.h"
#include "core/bisect.h"
#include "core/estimate/estimate.h"
#include "core/plan/internal.h"
#include "core/profile.h"

#define DEFAULT_SAFETY 0.90
#define SAFE_MARGIN 0.10      /* the safe tier keeps this much more of the GPU free */
#define AGGRESSIVE_SHARE 0.97 /* the aggressive tier leaves room for little more than noise */
#define CHANGE_PENALTY 0.01
#define MISS_PENALTY 2.0
/* seq is searched in steps of this many tokens, the LoRA rank in steps of RANK_STEP (below
 * it, every rank). */
#define SEQ_STEP 128
#define RANK_STEP 8
#define MAX_PER_GPU (1ull << 30)
/* Layouts searched at most (tp x pp x cp x schedule), and context-parallel sizes tried. */
#define MAX_LAYOUTS 1024
#define MAX_CP 8
/* Exact estimates kept while settling; quick ones per configuration searched. */
#define MAX_EXACT 96
#define MAX_TRIED 64
/* The best settings of a tier's search settled on exact estimates, the best of them taken. */
#define MAX_RUNNERS 8
/* max_split_size_mb values tried on each tier's setting, the usual advice's. */
static const unsigned split_mb[] = {128, 512};
#define MAX_ALLOCS (2 + sizeof split_mb / sizeof *split_mb)

static const char *const tier_names[VF_TIER_COUNT] = {"safe", "balanced", "aggressive"};

const char *vf_tier_name(enum vf_tier t) { return t < VF_TIER_COUNT ? tier_names[t] : "unknown"; }

int vf_keep_parse(const char *list, uint32_t *bits) {
  static const struct { const char *name; uint32_t bits; } names[] = {
      {"seq", VF_KEEP_SEQ},         {"precision", VF_KEEP_PRECISION}, {"optimizer", VF_KEEP_OPTIMIZER},
      {"method", VF_KEEP_METHOD},   {"lora-r", VF_KEEP_LORA_R},       {"quant", VF_KEEP_QUANT},
      {"grad-ckpt", VF_KEEP_GRAD_CKPT}, {"shard", VF_KEEP_SHARD},     {"offload", VF_KEEP_OFFLOAD},
      {"alloc-conf", VF_KEEP_ALLOC_CONF}, {"loss", VF_KEEP_LOSS},     {"optimizer-in-bwd", VF_KEEP_IN_BWD},
      {"capacity", VF_KEEP_CAPACITY},
      {"none", 0}};
  uint32_t out = 0;
  if (!*list) return VF_EINVAL;
  for (const char *p = list; *p;) {
    size_t n = strcspn(p, ","), i, count = sizeof names / sizeof *names;
    for (i = 0; i < count; i++)
      if (strlen(names[i].name) == n && strncmp(p, names[i].name, n) == 0) break;
    if (i == count) return VF_EINVAL;
    out |= names[i].bits;
    p += n + (p[n] == ',');
  }
  *bits = out;
  return 0;
}

int vf_keep_list(const char *list, uint32_t *bits) {
  int rc = vf_keep_parse(list, bits);
  if (rc) return rc;
  bool none = false;
  for (const char *p = list; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ','))
    none |= strncmp(p, "none", 4) == 0 && (p[4] == ',' || !p[4]);
  if (!none) *bits |= VF_KEEP_CAPACITY;
  return 0;
}

struct config {
  struct vf_setup s; /* batch and accumulation set per micro batch tried */
  size_t layout;     /* its index in search.layouts */
  size_t alloc;      /* its allocator configuration: search.alloc */
  uint64_t per_gpu;  /* samples each data-parallel replica takes per step in its layout */
  double bound;      /* ranking score at its fastest micro batch */
  size_t order;      /* where it was built: knobs earlier in their lists first, on a tie */
};

/* A parallel layout of the world's GPUs. */
struct layout {
  uint64_t tp, pp, cp, ep;
  enum vf_pp_schedule schedule;
  bool fits; /* a setting of it fits at micro batch 1 (in the level searched) */
};

/* A micro batch estimated for the configuration being searched; ok: the estimator took it. */
struct tried {
  uint64_t batch;
  bool ok;
  struct vf_estimate e;
};

/* A value of the level that a search moves (seq, or the LoRA rank) with its steps
 * (step 0: no value moved). */
struct dial {
  size_t offset; /* of the value in struct vf_setup */
  uint64_t step, given;
};

/* An exact estimate made while settling the tiers. */
struct exact {
  struct vf_setup s;
  size_t alloc;
  struct vf_estimate e;
  bool ok;
};

struct search {
  const struct vf_plan_request *r;
  struct vf_plan_result *out;
  uint64_t budget[VF_TIER_COUNT];
  double score[VF_TIER_COUNT];
  /* Per tier, the best settings found, one per setting of the knobs and the allocator (one may
   * let a larger micro batch fit where it lowers no peak at the smaller), best first (score[t]
   * is the first's): the quick estimates misjudge the micro batch that fits by a GiB or two,
   * so a runner-up may fit a larger one exactly (guide 003: adafactor at micro batch 2 where
   * adamw-8bit fits only 1). */
  struct vf_plan_choice runners[VF_TIER_COUNT][MAX_RUNNERS];
  double runner_score[VF_TIER_COUNT][MAX_RUNNERS], runner_bound[VF_TIER_COUNT][MAX_RUNNERS];
  size_t n_runners[VF_TIER_COUNT];
  bool settled[VF_TIER_COUNT];
  uint32_t tiers;  /* the tiers the level being searched is for (bit per tier) */
  bool probing;    /* the level is searched only to learn whether anything fits */
  bool algorithms; /* optimizers that change the update may be tried (optimizers()) */
  uint64_t target; /* the effective batch asked for */
  /* The given allocator configuration and, where it lacks them, expandable segments (the
   * n_alloc searched); then the max_split_size_mb values tried on the settings chosen, up to
   * n_alloc_all (find_allocs). */
  struct vf_alloc_conf alloc[MAX_ALLOCS];
  char alloc_text[MAX_ALLOCS][VF_PLAN_ALLOC_CONF_LEN];
  size_t n_alloc, n_alloc_all;
  struct tried tried[MAX_TRIED];
  size_t n_tried;
  struct plan_cluster cluster;
  struct layout layouts[MAX_LAYOUTS];
  size_t n_layouts;
  struct config *configs; /* a level's: every layout with every combination of the knobs */
  size_t cap_configs;
  struct exact exact[MAX_EXACT];
  size_t n_exact;
  struct dial dialed[VF_TIER_COUNT]; /* per tier, the value a seq or rank search settled it at */
};

static uint64_t effective_batch(const struct vf_setup *s) {
  return s->batch * s->accumulation * plan_data_parallel(s);
}

/* The accumulation that brings micro batch b nearest to n samples per replica. */
static uint64_t accumulation_for(uint64_t n, uint64_t b) {
  uint64_t a = (n + b / 2) / b;
  return a ? a : 1;
}

static void set_micro(struct vf_setup *s, uint64_t n, uint64_t b) {
  s->batch = b;
  s->accumulation = accumulation_for(n, b);
}

/* The range of setting s's device peak, as estimated in e. */
static struct vf_range device_range(const struct vf_plan_request *r, const struct vf_setup *s,
                                    const struct vf_estimate *e) {
  if (!r->uncertainty) return (struct vf_range){e->device_peak, e->device_peak};
  return vf_range_of(e->device_peak, &vf_uncertainty_for(r->uncertainty, s)->kind[VF_PEAK_DEVICE]);
}

/* The peak tier t holds to its budget (plan.h says why). */
static uint64_t judged_peak(const struct vf_plan_request *r, enum vf_tier t, const struct vf_setup *s,
                            const struct vf_estimate *e) {
  return t == VF_TIER_AGGRESSIVE ? e->device_peak : device_range(r, s, e).high;
}

static struct vf_plan_choice choice(const struct search *S, const struct vf_setup *s, size_t alloc,
                                    const struct vf_estimate *e, uint64_t budget) {
  double rate = plan_rate(S->r->model, s, e->params, e->trainable_params, e->by_category[VF_CAT_ACTIVATIONS],
                          S->r->gpu, &S->cluster);
  struct vf_plan_choice c = {true, *s, "", effective_batch(s), e->device_peak, budget, rate, device_range(S->r, s, e)};
  snprintf(c.alloc_conf, sizeof c.alloc_conf, "%s", S->alloc_text[alloc]);
  return c;
}

/* Keeps the lowest peak seen for the nothing-fits report. */
static void note_smallest(struct search *S, const struct vf_setup *s, size_t alloc, const struct vf_estimate *e) {
  struct vf_plan_choice *low = &S->out->smallest;
  if (!low->found || e->device_peak < low->peak_device_bytes) *low = choice(S, s, alloc, e, 0);
}

/* The estimate of s under allocator configuration alloc: quick (a search's) or exact (every
 * layer replayed, as `estimate` makes it), scaled by --calibrate. */
static int estimate_with(struct search *S, const struct vf_setup *s, size_t alloc, bool exact,
                         struct vf_estimate *e, struct vf_diag *d) {
  const struct vf_plan_request *r = S->r;
  int rc = exact ? vf_estimate(r->model, s, r->profile, &S->alloc[alloc], e, d)
                 : estimate_quick(r->model, s, r->profile, &S->alloc[alloc], e, d);
  if (!rc && r->batch_scale > 0) vf_estimate_calibrate(e, r->batch_scale);
  S->out->estimates++;
  if (!rc) note_smallest(S, s, alloc, e);
  return rc;
}

static int estimate(struct search *S, const struct vf_setup *s, size_t alloc, struct vf_estimate *e) {
  struct vf_diag d;
  return estimate_with(S, s, alloc, false, e, &d);
}

static int changes_from_base(const struct vf_setup *base, const struct vf_setup *s) {
  bool layout = s->tp != base->tp || s->pp != base->pp || s->cp != base->cp || s->ep != base->ep ||
                (s->pp > 1 && s->pp_schedule != base->pp_schedule);
  return (s->seq != base->seq) + (s->method != base->method) + (s->lora_r != base->lora_r) +
         (s->amp != base->amp) + (s->weights != base->weights) + (s->optimizer != base->optimizer) +
         (s->grad_ckpt != base->grad_ckpt) + (s->shard != base->shard) + (s->offload != base->offload) +
         (s->loss != base->loss) + (s->optimizer_in_bwd != base->optimizer_in_bwd) + layout;
}

/* The ranking score: the rate, less 1% for each knob changed and 2% for each percent the
 * effective batch misses the target by: a split that misses it changes what is trained, and
 * must run faster by twice as much. The allocator's setting costs nothing (take_alloc). */
static double score(const struct search *S, const struct vf_setup *s, double rate) {
  double miss = fabs((double)effective_batch(s) - (double)S->target) / (double)S->target;
  return rate * (1 - CHANGE_PENALTY * changes_from_base(&S->r->base, s)) * (miss < 0.5 ? 1 - MISS_PENALTY * miss : 0);
}

/* ---- the values each knob may take, the given one first ---- */

bool plan_lacks_bf16(const struct vf_gpu_spec *g) {
  return g && ((g->cc_major > 0 && g->cc_major < 8) || (g->bf16_tflops <= 0 && g->fp16_tflops > 0));
}

/* The weights and autocast dtype a setting gets: as given, and autocast for fp32 weights
 * without it. A GPU without bf16 runs neither bf16 weights nor bf16 autocast, so there bf16
 * becomes fp16 autocast with a GradScaler, whose gradients must be fp32: weights that train
 * are stored in fp32, frozen ones in fp16. */
static size_t precisions(const struct vf_plan_request *r, const struct vf_setup *level, enum vf_precision out[][2]) {
  size_t n = 0;
  enum vf_precision w = level->weights, a = level->amp;
  bool keep = r->keep & VF_KEEP_PRECISION;
  if (!keep && plan_lacks_bf16(r->gpu) && (w == VF_PREC_BF16 || a == VF_PREC_BF16)) {
    out[n][0] = w == VF_PREC_BF16 ? level->method == VF_METHOD_FULL ? VF_PREC_FP32 : VF_PREC_FP16 : w;
    out[n++][1] = VF_PREC_FP16;
    return n;
  }
  out[n][0] = w, out[n++][1] = a;
  if (!keep && a == VF_PREC_NONE && w == VF_PREC_FP32) out[n][0] = w, out[n++][1] = plan_lacks_bf16(r->gpu) ? VF_PREC_FP16 : VF_PREC_BF16;
  return n;
}

/* Each optimizer after the given one keeps less state. AdamW's storage (8-bit states, paged)
 * keeps its update, and so the trained model; Adafactor (no first moment, factored second)
 * changes the update, so it is tried only where the storage alone fits nothing
 * (S->algorithms), as the method and seq are. */
static size_t optimizers(const struct search *S, enum vf_optimizer *out) {
  static const enum vf_optimizer chain[] = {VF_OPT_ADAMW, VF_OPT_ADAMW_8BIT, VF_OPT_PAGED_ADAMW_8BIT,
                                            VF_OPT_ADAFACTOR};
  size_t n = 0, i = 0, count = sizeof chain / sizeof *chain - !S->algorithms;
  out[n++] = S->r->base.optimizer;
  if (S->r->keep & VF_KEEP_OPTIMIZER) return n;
  while (i < count && chain[i] != S->r->base.optimizer) i++;
  while (++i < count) out[n++] = chain[i];
  return n;
}

static size_t ckpts(const struct vf_plan_request *r, enum vf_ckpt *out) {
  static const enum vf_ckpt all[] = {VF_CKPT_NONE, VF_CKPT_SELECTIVE, VF_CKPT_FULL};
  size_t n = 0;
  out[n++] = r->base.grad_ckpt;
  for (size_t i = 0; i < 3 && !(r->keep & VF_KEEP_GRAD_CKPT); i++)
    if (all[i] != r->base.grad_ckpt) out[n++] = all[i];
  return n;
}

/* Stronger ZeRO stages only: with communication ignored a weaker one never helps. FSDP is
 * ZeRO-3's memory and is not offered, as apply cannot write it. */
static size_t shards(const struct vf_plan_request *r, enum vf_shard *out) {
  size_t n = 0;
  out[n++] = r->base.shard;
  if ((r->keep & VF_KEEP_SHARD) || plan_data_parallel(&r->base) < 2) return n;
  for (int z = (int)r->base.shard + 1; r->base.shard != VF_SHARD_FSDP && z <= VF_SHARD_ZERO3; z++)
    out[n++] = (enum vf_shard)z;
  return n;
}

/* Optimizer offload, and parameters with it (valid under ZeRO-3 only), each with or without
 * the activations where the framework offloads them. */
static size_t offloads(const struct vf_plan_request *r, uint32_t *out) {
  uint32_t states = VF_OFFLOAD_OPTIMIZER | VF_OFFLOAD_PARAMS, rest = r->base.offload & ~states;
  uint32_t acts = r->profile->offloads_activations ? VF_OFFLOAD_ACTIVATIONS : 0;
  const uint32_t all[] = {rest, rest | VF_OFFLOAD_OPTIMIZER, rest | states, rest | acts,
                          rest | acts | VF_OFFLOAD_OPTIMIZER, rest | acts | states};
  size_t n = 0;
  out[n++] = r->base.offload;
  for (size_t i = 0; i < 6 && !(r->keep & VF_KEEP_OFFLOAD); i++) {
    bool seen = false;
    for (size_t k = 0; k < n; k++) seen |= out[k] == all[i];
    if (!seen) out[n++] = all[i];
  }
  return n;
}

/* The given loss, and the framework's lighter ones: Liger's fused kernel (the switch its
 * configs spell: use_liger_kernel, enable_liger_kernel, liger_fused_linear_cross_entropy),
 * else its chunked loss. Cut Cross-Entropy, axolotl's alone, is planned only as given. */
static size_t losses(const struct vf_plan_request *r, enum vf_loss *out) {
  size_t n = 0;
  out[n++] = r->base.loss;
  if (r->keep & VF_KEEP_LOSS || r->base.loss == VF_LOSS_FUSED || r->base.loss == VF_LOSS_CCE) return n;
  if (estimate_loss_differs(r->profile, VF_LOSS_FUSED)) out[n++] = VF_LOSS_FUSED;
  else if (r->base.loss == VF_LOSS_DEFAULT && estimate_loss_differs(r->profile, VF_LOSS_CHUNKED))
    out[n++] = VF_LOSS_CHUNKED;
  return n;
}

/* The given optimizer timing, and torchtune's step in the backward where the framework has
 * it for full fine-tuning (it trains the same model: the same update, made as each gradient
 * arrives) and --keep optimizer-in-bwd lets it; the micro batches searched then keep accumulation 1
 * (in_bwd_lowest). */
static size_t in_bwds(const struct vf_plan_request *r, const struct vf_setup *level, enum vf_in_bwd *out) {
  size_t n = 0;
  out[n++] = r->base.optimizer_in_bwd;
  if (!(r->keep & VF_KEEP_IN_BWD) && r->profile->optimizer_in_bwd && level->method == VF_METHOD_FULL &&
      r->base.optimizer_in_bwd == VF_IN_BWD_NO)
    out[n++] = VF_IN_BWD_YES;
  return n;
}

/* Frozen-base methods after the given one, each lighter: LoRA, then QLoRA (quantized). */
static size_t methods(const struct vf_plan_request *r, struct vf_setup *out) {
  size_t n = 0;
  out[n++] = r->base;
  if (r->keep & VF_KEEP_METHOD) return n;
  if (r->base.method == VF_METHOD_FULL) {
    out[n] = r->base;
    out[n++].method = VF_METHOD_LORA;
  }
  bool plain = r->base.quant == VF_QUANT_NONE || r->base.quant == VF_QUANT_DEFAULT;
  if (!(r->keep & VF_KEEP_QUANT) && plain && r->base.method != VF_METHOD_QLORA &&
      (r->base.method == VF_METHOD_FULL || r->base.method == VF_METHOD_LORA)) {
    out[n] = r->base;
    out[n].method = VF_METHOD_QLORA;
    out[n++].quant = VF_QUANT_DEFAULT;
  }
  return n;
}

/* ---- the search ---- */

/* Bytes of model states a GPU holds at least in setting s: its share of the weights,
 * gradients and optimizer states as sharded, without activations or anything transient.
 * Settings above a budget by this alone are not worth an estimate. */
static double state_floor(const struct vf_setup *s, double params, double trainable) {
  double split = (double)(s->tp * s->pp), shards = (double)(s->gpus / split);
  double weight = vf_setup_quant(s) != VF_QUANT_NONE ? 0.5 : s->weights == VF_PREC_FP32 ? 4 : 2;
  /* States take the trainable weights' dtype at least (16-bit ones without a master copy). */
  double wide = s->weights == VF_PREC_FP32 ? 4 : 2;
  double state = s->optimizer == VF_OPT_ADAMW ? 2 * wide
                 : s->optimizer == VF_OPT_ADAMW_8BIT || s->optimizer == VF_OPT_PAGED_ADAMW_8BIT ? 2
                 : s->optimizer == VF_OPT_SGD_MOMENTUM || s->optimizer == VF_OPT_LION ? wide
                                                                                      : 0;
  double weights = (s->offload & VF_OFFLOAD_PARAMS) ? 0 : params * weight / (vf_shard_weights(s->shard) ? shards : 1);
  double grads = s->optimizer_in_bwd == VF_IN_BWD_YES ? 0
                 : trainable * (s->weights == VF_PREC_FP32 ? 4 : 2) / (s->shard >= VF_SHARD_ZERO2 ? shards : 1);
  double states =
      (s->offload & VF_OFFLOAD_OPTIMIZER) ? 0 : trainable * state / (s->shard >= VF_SHARD_ZERO1 ? shards : 1);
  return (weights + grads + states) / split;
}

/* The samples per replica of layout s for the effective batch asked for (rounded to a
 * whole number the replicas share). */
static uint64_t samples_per_replica(const struct search *S, const struct vf_setup *s) {
  uint64_t dp = plan_data_parallel(s), n = (S->target + dp / 2) / dp;
  return n ? n : 1;
}

/* The ranking score of setting s with n samples per replica at its fastest micro batch,
 * memory aside: an upper bound on what it can reach. Larger micro batches run faster (the
 * largest, n, with accumulation 1); under a pipeline more of them also shrink the bubble,
 * which n micro batches of n bound. */
static double best_rate(const struct search *S, struct vf_setup *s, uint64_t n, uint64_t params,
                        uint64_t trainable) {
  double best = 0;
  for (uint64_t a = 1; a <= (s->pp > 1 ? n : 1); a = a < n ? n : a + 1) {
    s->batch = n, s->accumulation = a;
    double r = plan_rate(S->r->model, s, params, trainable, 0, S->r->gpu, &S->cluster);
    r *= 1 - CHANGE_PENALTY * changes_from_base(&S->r->base, s);
    if (r > best) best = r;
  }
  return best;
}

/* The knob values one level combines (the layouts aside). */
struct knobs {
  enum vf_precision prec[2][2];
  enum vf_optimizer opt[4];
  enum vf_ckpt ck[3];
  enum vf_shard sh[4];
  uint32_t off[6];
  enum vf_loss loss[2];
  enum vf_in_bwd in_bwd[2];
  size_t np, no, nc, ns, nf, nl, nb;
};

static void knobs_of(const struct search *S, const struct vf_setup *level, struct knobs *k) {
  k->np = precisions(S->r, level, k->prec), k->no = optimizers(S, k->opt), k->nc = ckpts(S->r, k->ck);
  k->ns = shards(S->r, k->sh), k->nf = offloads(S->r, k->off), k->nl = losses(S->r, k->loss);
  k->nb = in_bwds(S->r, level, k->in_bwd);
}

/* Adds configuration index i of the knobs' product on top of level in layout l, unless the
 * model states alone rule it out; the bound needs the method's parameter counts. */
static bool add_config(struct search *S, struct config *c, const struct vf_setup *level, size_t l, size_t i,
                       const struct knobs *k, uint64_t params, uint64_t trainable) {
  const struct layout *L = &S->layouts[l];
  size_t alloc = i % S->n_alloc;
  i /= S->n_alloc;
  c->s = *level;
  c->s.tp = L->tp, c->s.pp = L->pp, c->s.cp = L->cp, c->s.ep = L->ep, c->s.pp_schedule = L->schedule;
  c->s.loss = k->loss[i % k->nl], i /= k->nl;
  c->s.optimizer_in_bwd = k->in_bwd[i % k->nb], i /= k->nb;
  c->s.weights = k->prec[i % k->np][0], c->s.amp = k->prec[i % k->np][1], i /= k->np;
  c->s.optimizer = k->opt[i % k->no], i /= k->no;
  c->s.grad_ckpt = k->ck[i % k->nc], i /= k->nc;
  c->s.shard = k->sh[i % k->ns], i /= k->ns;
  c->s.offload = k->off[i % k->nf];
  c->layout = l, c->alloc = alloc;
  bool ckpt_lacking = (c->s.offload & VF_OFFLOAD_ACTIVATIONS) && c->s.grad_ckpt == VF_CKPT_NONE;
  if (ckpt_lacking && S->r->profile->activation_offload_needs_ckpt) return false;
  if (state_floor(&c->s, (double)params, (double)trainable) > (double)S->budget[VF_TIER_AGGRESSIVE]) return false;
  c->per_gpu = samples_per_replica(S, &c->s);
  c->bound = best_rate(S, &c->s, c->per_gpu, params, trainable);
  return true;
}

/* Every combination of the layouts and the knobs on top of level (method and seq set). */
static size_t build_configs(struct search *S, const struct vf_setup *level, uint64_t params, uint64_t trainable) {
  struct knobs k;
  knobs_of(S, level, &k);
  size_t per_layout = S->n_alloc * k.nl * k.nb * k.np * k.no * k.nc * k.ns * k.nf, n = 0;
  struct config *grown = array_grow(S->configs, &S->cap_configs, S->n_layouts * per_layout, sizeof *grown);
  if (!grown) return 0;
  S->configs = grown;
  for (size_t l = 0; l < S->n_layouts; l++)
    for (size_t i = 0; i < per_layout; i++) {
      S->configs[n].order = n;
      n += add_config(S, &S->configs[n], level, l, i, &k, params, trainable);
    }
  return n;
}

static int by_bound(const void *a, const void *b) {
  const struct config *p = a, *q = b;
  if (p->bound != q->bound) return (p->bound < q->bound) - (p->bound > q->bound);
  return (p->order > q->order) - (p->order < q->order);
}

/* The estimate of c at micro batch b, or NULL when the estimator refuses the setting. */
static const struct vf_estimate *at(struct search *S, struct config *c, uint64_t b) {
  for (size_t i = 0; i < S->n_tried; i++)
    if (S->tried[i].batch == b) return S->tried[i].ok ? &S->tried[i].e : NULL;
  struct tried *t = &S->tried[S->n_tried < MAX_TRIED ? S->n_tried++ : MAX_TRIED - 1];
  set_micro(&c->s, c->per_gpu, b);
  t->batch = b;
  t->ok = estimate(S, &c->s, c->alloc, &t->e) == 0;
  return t->ok ? &t->e : NULL;
}

static bool fits(struct search *S, struct config *c, uint64_t b, enum vf_tier t) {
  const struct vf_estimate *e = at(S, c, b);
  set_micro(&c->s, c->per_gpu, b);
  return e && judged_peak(S->r, t, &c->s, e) <= S->budget[t];
}

struct fit_arg {
  struct search *S;
  struct config *c;
  enum vf_tier t;
};

static bool micro_fits(uint64_t b, void *arg) {
  struct fit_arg *f = arg;
  return fits(f->S, f->c, b, f->t);
}

/* The smallest micro batch of n samples per replica whose accumulation is 1: the only ones
 * a step in the backward runs with (torchtune refuses accumulation with it). */
static uint64_t in_bwd_lowest(uint64_t n) {
  uint64_t b = 2 * n / 3 ? 2 * n / 3 : 1;
  while (b > 1 && accumulation_for(n, b - 1) == 1) b--;
  while (accumulation_for(n, b) > 1) b++;
  return b ? b : 1;
}

/* The largest micro batch whose peak fits tier t's budget, or 0. */
static uint64_t lowest_micro(const struct vf_setup *s, uint64_t n) {
  return s->optimizer_in_bwd == VF_IN_BWD_YES ? in_bwd_lowest(n) : 1;
}

static uint64_t largest_fitting(struct search *S, struct config *c, enum vf_tier t) {
  uint64_t low = lowest_micro(&c->s, c->per_gpu);
  if (!fits(S, c, low, t)) return 0;
  struct fit_arg f = {S, c, t};
  return last_fitting(low, c->per_gpu, micro_fits, &f);
}

/* Of the micro batches from half of most up to it, all of which fit, the one that ranks
 * best: a smaller one may reach the effective batch exactly where the largest misses it. */
static uint64_t best_micro(const struct search *S, struct vf_setup s, uint64_t n, uint64_t most,
                           const struct vf_estimate *e) {
  uint64_t best = most;
  double top = -1;
  for (uint64_t b = most; b >= 1 && b * 2 >= most; b--) {
    set_micro(&s, n, b);
    double sc = score(S, &s, plan_rate(S->r->model, &s, e->params, e->trainable_params, 0, S->r->gpu, &S->cluster));
    if (sc > top) top = sc, best = b;
  }
  return best;
}

/* Keeps choice c, of ranking score sc and bound, among tier t's runners, in their order, one
 * per setting of the knobs and the allocator (the micro batch aside); an earlier one wins a
 * tie. */
static void keep_runner(struct search *S, enum vf_tier t, const struct vf_plan_choice *c, double sc,
                        double bound) {
  struct vf_plan_choice *list = S->runners[t];
  double *scores = S->runner_score[t], *bounds = S->runner_bound[t];
  size_t n = S->n_runners[t], at = n;
  for (size_t k = 0; k < n; k++)
    if (changes_from_base(&list[k].setup, &c->setup) == 0 && strcmp(list[k].alloc_conf, c->alloc_conf) == 0)
      at = k;
  if (at < n ? scores[at] >= sc : n == MAX_RUNNERS && scores[n - 1] >= sc) return;
  if (at == n) at = n < MAX_RUNNERS ? n++ : n - 1;
  for (; at > 0 && scores[at - 1] < sc; at--)
    list[at] = list[at - 1], scores[at] = scores[at - 1], bounds[at] = bounds[at - 1];
  list[at] = *c, scores[at] = sc, bounds[at] = bound;
  S->n_runners[t] = n;
  S->score[t] = scores[0];
  S->out->tiers[t] = list[0];
}

static void consider(struct search *S, enum vf_tier t, struct config *c, uint64_t most) {
  struct vf_setup s = c->s;
  uint64_t b = best_micro(S, s, c->per_gpu, most, at(S, c, most));
  if (!fits(S, c, b, t)) b = most;
  const struct vf_estimate *e = at(S, c, b);
  if (!e) return;
  set_micro(&s, c->per_gpu, b);
  struct vf_plan_choice c_at = choice(S, &s, c->alloc, e, S->budget[t]);
  keep_runner(S, t, &c_at, score(S, &s, c_at.tokens_per_second), c->bound);
}

/* Whether the layout of c with half its context-parallel size fits: splitting the tokens
 * further then only adds traffic, the same tokens per GPU running at twice the micro batch. */
static bool half_cp_fits(const struct search *S, const struct config *c) {
  const struct layout *L = &S->layouts[c->layout];
  for (size_t i = 0; i < S->n_layouts && L->cp > 1; i++) {
    const struct layout *H = &S->layouts[i];
    bool same_rest = H->tp == L->tp && H->pp == L->pp && H->ep == L->ep && H->schedule == L->schedule;
    if (H->fits && H->cp * 2 == L->cp && same_rest) return true;
  }
  return false;
}

/* Tries c for every tier it could improve; false when it can improve none (nor can any
 * configuration ranked after it). Tighter budgets are tried only where looser ones fit. */
static bool try_config(struct search *S, struct config *c) {
  bool open[VF_TIER_COUNT], any = false;
  for (int t = 0; t < VF_TIER_COUNT; t++)
    any |= open[t] = (S->tiers & (1u << t)) && !S->settled[t] && c->bound > S->score[t];
  if (!any) return false;
  if (half_cp_fits(S, c)) return true;
  S->n_tried = 0;
  for (int t = VF_TIER_AGGRESSIVE; t >= 0; t--) {
    if (!open[t]) continue;
    uint64_t most = largest_fitting(S, c, (enum vf_tier)t);
    if (!most) break;
    S->layouts[c->layout].fits = true;
    consider(S, (enum vf_tier)t, c, most);
  }
  return true;
}

static bool found_all(const struct search *S) {
  for (int t = 0; t < VF_TIER_COUNT; t++)
    if ((S->tiers & (1u << t)) && !S->out->tiers[t].found) return false;
  return true;
}

/* Searches one level (method, rank and seq set) for the tiers in S->tiers; a probe stops at
 * the first setting that fits. */
static void search_level(struct search *S, const struct vf_setup *level) {
  struct vf_setup probe = *level;
  struct vf_estimate ref;
  probe.accumulation = samples_per_replica(S, &probe); /* batch 1 */
  if (estimate(S, &probe, 0, &ref)) return;
  for (size_t l = 0; l < S->n_layouts; l++) S->layouts[l].fits = false;
  size_t n = build_configs(S, level, ref.params, ref.trainable_params);
  qsort(S->configs, n, sizeof *S->configs, by_bound);
  for (size_t i = 0; i < n && !(S->probing && found_all(S));)
    if (!try_config(S, &S->configs[i++])) break;
}

/* Searches a level for the tiers not settled yet, which settle where something fits. */
static void settle_level(struct search *S, const struct vf_setup *level) {
  S->tiers = 0;
  for (int t = 0; t < VF_TIER_COUNT; t++) S->tiers |= !S->settled[t] ? 1u << t : 0;
  search_level(S, level);
  for (int t = 0; t < VF_TIER_COUNT; t++) S->settled[t] |= S->out->tiers[t].found;
}

static bool all_settled(const struct search *S) {
  return S->settled[VF_TIER_SAFE] && S->settled[VF_TIER_BALANCED] && S->settled[VF_TIER_AGGRESSIVE];
}

/* Whether anything fits tier t at level, leaving the tier's result as it was. */
static bool level_fits(struct search *S, const struct vf_setup *level, enum vf_tier t) {
  S->tiers = 1u << t, S->probing = true;
  search_level(S, level);
  bool found = S->out->tiers[t].found;
  S->out->tiers[t] = (struct vf_plan_choice){0};
  S->score[t] = 0, S->n_runners[t] = 0, S->probing = false;
  return found;
}

static uint64_t *dial_field(struct vf_setup *s, const struct dial *v) { return (uint64_t *)((char *)s + v->offset); }

/* The number of values below the given one that the dial takes: step, 2 step, ... (every
 * value from 1 where the given one is not above a step). */
static uint64_t dial_count(const struct dial *v) {
  uint64_t step = v->given > v->step ? v->step : 1;
  return (v->given - 1) / step;
}

static uint64_t dial_value(const struct dial *v, uint64_t i) { return (i + 1) * (v->given > v->step ? v->step : 1); }

struct dial_arg {
  struct search *S;
  struct vf_setup *level;
  const struct dial *v;
  enum vf_tier t;
};

static bool dial_fits(uint64_t i, void *arg) {
  struct dial_arg *a = arg;
  *dial_field(a->level, a->v) = dial_value(a->v, i);
  return level_fits(a->S, a->level, a->t);
}

/* Each tier not settled yet settles at the largest value of the dial below the given one at
 * which anything fits, a binary search over its values. */
static void settle_dial(struct search *S, struct vf_setup *level, const struct dial *v) {
  uint64_t count = dial_count(v), *field = dial_field(level, v);
  for (int t = 0; t < VF_TIER_COUNT && count; t++) {
    if (S->settled[t]) continue;
    *field = dial_value(v, 0);
    if (!level_fits(S, level, (enum vf_tier)t)) continue;
    struct dial_arg a = {S, level, v, (enum vf_tier)t};
    *field = dial_value(v, last_fitting(0, count - 1, dial_fits, &a));
    S->tiers = 1u << t;
    search_level(S, level);
    S->settled[t] |= S->out->tiers[t].found;
    if (S->settled[t]) S->dialed[t] = *v;
  }
  *field = v->given;
}

static bool lora_family(enum vf_method m) {
  return m == VF_METHOD_LORA || m == VF_METHOD_QLORA || m == VF_METHOD_DORA;
}

/* Levels: what is trained as given, then each allowed method at the given seq and rank,
 * then with the seq and then the LoRA rank searched (the memory guides' last resort). Each
 * level takes the tiers the ones before left unsettled. */
static void search(struct search *S) {
  const struct vf_plan_request *r = S->r;
  struct vf_setup level[3];
  size_t n = methods(r, level);
  for (size_t m = 0; m < n; m++) level[m].batch = 1;
  for (size_t m = 0; m < n && !all_settled(S); m++) {
    S->algorithms = false;
    settle_level(S, &level[m]);
    S->algorithms = true;
    if (!all_settled(S) && !(r->keep & VF_KEEP_OPTIMIZER)) settle_level(S, &level[m]);
  }
  uint64_t cp = r->base.cp ? r->base.cp : 1, step = SEQ_STEP % cp ? SEQ_STEP * cp : SEQ_STEP;
  for (size_t m = 0; m < n && !(r->keep & VF_KEEP_SEQ) && !all_settled(S); m++)
    settle_dial(S, &level[m], &(struct dial){offsetof(struct vf_setup, seq), step, level[m].seq});
  for (size_t m = 0; m < n && !(r->keep & VF_KEEP_LORA_R) && !all_settled(S); m++)
    if (lora_family(level[m].method))
      settle_dial(S, &level[m], &(struct dial){offsetof(struct vf_setup, lora_r), RANK_STEP, level[m].lora_r});
}

/* ---- the planner ---- */

static int bad(struct vf_diag *d, const char *why) {
  return diag_at(d, VF_EINVAL, NULL, UINT64_MAX, "%s", why);
}

/* Adds the layout of s when the framework can run it on the model. */
static void add_layout(struct search *S, const struct vf_setup *s) {
  struct vf_diag d;
  struct vf_setup resolved = *s;
  vf_setup_resolve(&resolved, S->r->model, S->r->profile);
  if (S->n_layouts == MAX_LAYOUTS || vf_setup_validate(&resolved, S->r->model, &d) ||
      vf_layout_validate(&resolved, S->r->model, S->r->profile, &d))
    return;
  S->layouts[S->n_layouts++] = (struct layout){s->tp, s->pp, s->cp, s->ep, resolved.pp_schedule, false};
}

/* Each pipeline schedule the framework runs for s's pp (none without a pipeline). */
static void add_schedules(struct search *S, struct vf_setup *s) {
  /* Expert parallelism over each divisor of the experts that divides dp x cp. */
  uint64_t experts = S->r->model->arch.experts, ep = s->ep;
  for (s->ep = 2; ep == 1 && experts && s->ep <= experts; s->ep++)
    if (experts % s->ep == 0 && (s->gpus / (s->tp * s->pp)) % s->ep == 0) add_schedules(S, s);
  s->ep = ep;
  if (s->pp == 1) {
    s->pp_schedule = VF_PP_DEFAULT;
    add_layout(S, s);
    return;
  }
  for (int k = VF_PP_GPIPE; k <= VF_PP_INTERLEAVED; k++) {
    s->pp_schedule = (enum vf_pp_schedule)k;
    if (S->r->profile->pp_schedules & (1u << k)) add_layout(S, s);
  }
}

/* The layouts searched: the given one alone, or with gpus_per_node every tp within a
 * node, pp and cp (up to MAX_CP) that divide the world, and each schedule. */
static void find_layouts(struct search *S) {
  const struct vf_plan_request *r = S->r;
  struct vf_setup s = r->base;
  if (!r->gpus_per_node) {
    add_layout(S, &s);
    return;
  }
  uint64_t world = r->base.gpus;
  s.ep = 1;
  for (s.tp = 1; s.tp <= r->gpus_per_node && s.tp <= world; s.tp++) {
    if (world % s.tp) continue;
    for (s.pp = 1; s.pp <= world / s.tp; s.pp++) {
      if ((world / s.tp) % s.pp || (s.pp > 1 && !r->profile->pp_schedules)) continue;
      for (s.cp = 1; s.cp <= MAX_CP && s.cp <= world / (s.tp * s.pp); s.cp *= 2)
        if ((world / (s.tp * s.pp)) % s.cp == 0) add_schedules(S, &s);
    }
  }
}

/* The allocator configurations a plan weighs: the given one and, where it lacks them and
 * the allocator is the native caching one, expandable segments added to it (the setting
 * PyTorch's out-of-memory message suggests), searched with every setting; and on the settings
 * the tiers choose, max_split_size_mb added to the given one, where it has none (large blocks
 * left whole, and the cached ones above the size released before the whole cache when the
 * GPU is full). None of them with --keep alloc-conf. The text of each is the given one with
 * the option appended. */
void plan_alloc_conf(const struct vf_plan_request *r, const char *given, const char *text, struct vf_alloc_conf *out) {
  *out = *r->alloc;
  if (strcmp(given, text) == 0) return;
  struct vf_alloc_conf added;
  struct vf_diag d;
  if (vf_alloc_conf_parse(text + strlen(given) + (given[0] ? 1 : 0), &added, &d)) return;
  out->expandable_segments |= added.expandable_segments;
  if (added.max_split_size != UINT64_MAX) out->max_split_size = added.max_split_size;
}

static void add_alloc(struct search *S, const char *given, const char *option) {
  char *text = S->alloc_text[S->n_alloc_all];
  snprintf(text, VF_PLAN_ALLOC_CONF_LEN, "%s%s%s", given, given[0] ? "," : "", option);
  plan_alloc_conf(S->r, given, text, &S->alloc[S->n_alloc_all++]);
}

static void find_allocs(struct search *S) {
  const struct vf_plan_request *r = S->r;
  const char *given = r->alloc_conf_text ? r->alloc_conf_text : "";
  const struct vf_alloc_conf *a = r->alloc;
  bool fixed = (r->keep & VF_KEEP_ALLOC_CONF) || a->backend_async || a->caching_disabled;
  snprintf(S->alloc_text[0], sizeof S->alloc_text[0], "%s", given);
  S->alloc[0] = *a;
  S->n_alloc_all = 1;
  if (!fixed && !a->expandable_segments) add_alloc(S, given, "expandable_segments:True");
  S->n_alloc = S->n_alloc_all;
  /* Expandable segments split any block and release none whole: max_split_size_mb does
   * nothing beside them. */
  bool split_given = a->max_split_size != UINT64_MAX || a->expandable_segments;
  for (size_t i = 0; !fixed && !split_given && i < sizeof split_mb / sizeof *split_mb; i++) {
    char option[40];
    snprintf(option, sizeof option, "max_split_size_mb:%u", split_mb[i]);
    add_alloc(S, given, option);
  }
}

/* The given setting as `estimate` makes it, its accumulation resolved, and what the search
 * needs from it: the effective batch, the budgets, the allocator settings, the layouts. */
static int start(struct search *S, struct vf_diag *d) {
  const struct vf_plan_request *r = S->r;
  double safety = r->safety > 0 ? r->safety : DEFAULT_SAFETY;
  if (!(safety <= 1)) return bad(d, "--safety must be a fraction above 0 and at most 1");
  if (!r->base.capacity_bytes) return bad(d, "planning needs a GPU (--gpu)");
  find_allocs(S);
  S->cluster = plan_cluster_of(r);
  struct vf_estimate e;
  struct vf_setup given = r->base;
  int rc = estimate_with(S, &given, 0, true, &e, d);
  if (rc) return rc;
  given.accumulation = e.accumulation;
  S->target = r->target_effective_batch ? r->target_effective_batch : effective_batch(&given);
  if (samples_per_replica(S, &given) > MAX_PER_GPU) return bad(d, "--target-effective-batch is implausibly large");
  double cap = (double)r->base.capacity_bytes;
  double share[VF_TIER_COUNT] = {safety - SAFE_MARGIN, safety, safety > AGGRESSIVE_SHARE ? safety : AGGRESSIVE_SHARE};
  for (int t = 0; t < VF_TIER_COUNT; t++) S->budget[t] = share[t] > 0 ? (uint64_t)(share[t] * cap) : 0;
  S->out->target_effective_batch = S->target;
  S->out->given = choice(S, &given, 0, &e, S->budget[VF_TIER_BALANCED]);
  find_layouts(S);
  return 0;
}

/* The settings of one search differ only in the knobs changes_from_base counts, the
 * allocator configuration and the micro batch split. */
static bool same_setting(const struct exact *x, const struct vf_setup *s, size_t alloc) {
  return changes_from_base(&x->s, s) == 0 && x->alloc == alloc && x->s.batch == s->batch &&
         x->s.accumulation == s->accumulation;
}

/* The exact estimate of s into e, false when the estimator refuses it. Tiers often settle
 * on the same setting, a looser one on a tighter one's, and a replay of every layer costs as
 * much as dozens of quick ones: each is made once. */
static bool exact_estimate(struct search *S, const struct vf_setup *s, size_t alloc, struct vf_estimate *e) {
  for (size_t k = 0; k < S->n_exact; k++)
    if (same_setting(&S->exact[k], s, alloc)) {
      *e = S->exact[k].e;
      return S->exact[k].ok;
    }
  struct vf_diag d;
  bool ok = estimate_with(S, s, alloc, true, e, &d) == 0;
  if (S->n_exact < MAX_EXACT) S->exact[S->n_exact++] = (struct exact){*s, alloc, *e, ok};
  return ok;
}

static size_t alloc_index(const struct search *S, const struct vf_plan_choice *c) {
  for (size_t i = 1; i < S->n_alloc_all; i++)
    if (strcmp(c->alloc_conf, S->alloc_text[i]) == 0) return i;
  return 0;
}

/* Whether an exact estimate of tier t's choice c at micro batch b fits the tier's budget;
 * e gets the estimate. A setting the estimator refuses does not fit. */
static bool exact_fits(struct search *S, enum vf_tier t, const struct vf_plan_choice *c, uint64_t n, uint64_t b,
                       struct vf_estimate *e) {
  struct vf_setup s = c->setup;
  set_micro(&s, n, b);
  return exact_estimate(S, &s, alloc_index(S, c), e) && judged_peak(S->r, t, &s, e) <= c->budget_bytes;
}

/* Moves choice c of tier t to the micro batch its exact estimates settle: down from where
 * the quick estimates put it while it is over (halving, then up again by a binary search),
 * up while the next one fits; then the best ranked of those below. False when not even
 * micro batch 1 fits. */
static bool settle(struct search *S, enum vf_tier t, struct vf_plan_choice *c) {
  struct vf_estimate e;
  uint64_t n = samples_per_replica(S, &c->setup), b = c->setup.batch, low = b, floor = lowest_micro(&c->setup, n);
  while (!exact_fits(S, t, c, n, low, &e))
    if (low <= floor) return false;
    else b = low - 1, low = low / 2 > floor ? low / 2 : floor;
  while (low < b) { /* low fits, b + 1 does not (or b is where the quick search stopped) */
    uint64_t mid = low + (b - low + 1) / 2;
    if (exact_fits(S, t, c, n, mid, &e)) low = mid;
    else b = mid - 1;
  }
  while (low < n && S->n_exact < MAX_EXACT && exact_fits(S, t, c, n, low + 1, &e)) low++;
  size_t alloc = alloc_index(S, c);
  exact_fits(S, t, c, n, low, &e);
  b = best_micro(S, c->setup, n, low, &e);
  if (!exact_fits(S, t, c, n, b, &e)) exact_fits(S, t, c, n, b = low, &e);
  set_micro(&c->setup, n, b);
  *c = choice(S, &c->setup, alloc, &e, c->budget_bytes);
  return true;
}

/* Where value lies among the dial's values (value = dial_value(v, index)). */
static uint64_t dial_index(const struct dial *v, uint64_t value) {
  uint64_t unit = v->given > v->step ? v->step : 1;
  return value / unit - 1;
}

/* Tier t's choice c at the dial's value i, settled on exact estimates into out; false when
 * nothing fits there. */
static bool settle_at(struct search *S, enum vf_tier t, const struct vf_plan_choice *c, uint64_t i,
                      struct vf_plan_choice *out) {
  *out = *c;
  *dial_field(&out->setup, &S->dialed[t]) = dial_value(&S->dialed[t], i);
  return settle(S, t, out);
}

/* A tier the seq or rank search settled has the largest value its quick estimates let
 * fit; the exact ones may let longer ones fit, its other knobs as they are. */
static void climb(struct search *S, enum vf_tier t, struct vf_plan_choice *c) {
  const struct dial *v = &S->dialed[t];
  for (struct vf_plan_choice next; v->step && c->found;) {
    uint64_t i = dial_index(v, *dial_field(&c->setup, v)) + 1;
    if (i >= dial_count(v) || !settle_at(S, t, c, i, &next)) return;
    *c = next;
  }
}

struct exact_dial_arg {
  struct search *S;
  enum vf_tier t;
  const struct vf_plan_choice *c;
};

static bool exact_dial_fits(uint64_t i, void *arg) {
  struct exact_dial_arg *a = arg;
  struct vf_plan_choice next;
  return settle_at(a->S, a->t, a->c, i, &next);
}

/* A tier the seq or rank search settled where its exact estimates do not fit: the largest
 * value below at which they do (a binary search, the other knobs as they are), rather than a
 * tighter tier's shorter one. False when none does, or the tier was settled without a dial. */
static bool descend(struct search *S, enum vf_tier t, struct vf_plan_choice *c) {
  const struct dial *v = &S->dialed[t];
  uint64_t i = v->step ? dial_index(v, *dial_field(&c->setup, v)) : 0;
  struct vf_plan_choice next;
  if (!i || !settle_at(S, t, c, 0, &next)) return false;
  struct exact_dial_arg a = {S, t, c};
  if (!settle_at(S, t, c, last_fitting(0, i - 1, exact_dial_fits, &a), &next)) return false;
  *c = next;
  return true;
}

/* Whether choice a beats b: it trains more as given (a longer seq, a larger rank), or as
 * much, faster. */
static bool better(const struct search *S, const struct vf_plan_choice *a, const struct vf_plan_choice *b) {
  if (a->setup.seq != b->setup.seq) return a->setup.seq > b->setup.seq;
  if (a->setup.lora_r != b->setup.lora_r) return a->setup.lora_r > b->setup.lora_r;
  return score(S, &a->setup, a->tokens_per_second) >=
         score(S, &b->setup, b->tokens_per_second);
}

/* The peak tier t judges of its choice c. */
static uint64_t judged_choice(enum vf_tier t, const struct vf_plan_choice *c) {
  return t == VF_TIER_AGGRESSIVE ? c->peak_device_bytes : c->device_range.high;
}

/* The allocator's setting changes neither what is trained nor how fast: a tier takes the one
 * that lowers the peak of the setting chosen most (the fragmentation PyTorch's out-of-memory
 * message suggests expandable segments for), with the micro batch the room allows. */
static void take_alloc(struct search *S, enum vf_tier t, struct vf_plan_choice *c) {
  if (!c->found) return;
  size_t now = alloc_index(S, c), best = now;
  uint64_t lowest = judged_choice(t, c);
  struct vf_estimate e, best_e;
  for (size_t i = 0; i < S->n_alloc_all; i++)
    if (i != now && exact_estimate(S, &c->setup, i, &e) && judged_peak(S->r, t, &c->setup, &e) < lowest)
      best = i, best_e = e, lowest = judged_peak(S->r, t, &c->setup, &e);
  if (best == now) return;
  struct vf_plan_choice with = choice(S, &c->setup, best, &best_e, c->budget_bytes);
  if (settle(S, t, &with) && score(S, &with.setup, with.tokens_per_second) >= score(S, &c->setup, c->tokens_per_second))
    *c = with;
}

/* The allocator settings weighed against the recommended setting, each with its peak, so that
 * a plan shows those it did not take and why (a higher peak). */
static void note_allocs(struct search *S) {
  const struct vf_plan_choice *c = &S->out->tiers[VF_TIER_BALANCED];
  size_t now = alloc_index(S, c);
  for (size_t i = 0; c->found && i < S->n_alloc_all && S->out->n_alloc_tried < VF_PLAN_MAX_ALLOCS; i++) {
    struct vf_estimate e;
    if (i == now || !exact_estimate(S, &c->setup, i, &e)) continue;
    struct vf_plan_alloc_tried *a = &S->out->alloc_tried[S->out->n_alloc_tried++];
    snprintf(a->alloc_conf, sizeof a->alloc_conf, "%s", S->alloc_text[i]);
    a->peak_device_bytes = e.device_peak;
    a->device_range = device_range(S->r, &c->setup, &e);
  }
}

/* Whether tier t's runner k may beat its choice c so far: at another seq or rank, or with a
 * bound above c's score (an exact estimate costs dozens of quick ones). */
static bool may_beat(const struct search *S, enum vf_tier t, size_t k, const struct vf_plan_choice *c) {
  const struct vf_setup *r = &S->runners[t][k].setup;
  return !c->found || r->seq != c->setup.seq || r->lora_r != c->setup.lora_r ||
         S->runner_bound[t][k] > score(S, &c->setup, c->tokens_per_second);
}

/* Tier t's choice c: the best of its runners, each settled on exact estimates (the seq or
 * rank lowered where the micro batch cannot be); the allocator setting that suits it, and
 * max_split_size_mb, are weighed on the best alone. */
static void settle_runners(struct search *S, enum vf_tier t, struct vf_plan_choice *c) {
  for (size_t k = 0; k < S->n_runners[t]; k++) {
    if (k > 0 && !may_beat(S, t, k, c)) continue;
    struct vf_plan_choice r = S->runners[t][k];
    if (!settle(S, t, &r)) r.found = descend(S, t, &r);
    if (k == 0 || (r.found && (!c->found || !better(S, c, &r)))) *c = r;
  }
  take_alloc(S, t, c);
}

/* The search ran on quick estimates: each tier's choice is settled on exact ones. What
 * fits a tighter tier's budget fits a looser one's, so a looser tier whose own choice
 * settled worse (or not at all) takes the tighter one's, its micro batch grown where the
 * looser budget allows. */
static void confirm(struct search *S) {
  for (int t = 0; t < VF_TIER_COUNT; t++) {
    struct vf_plan_choice *c = &S->out->tiers[t], *tighter = t > 0 ? &S->out->tiers[t - 1] : NULL;
    settle_runners(S, (enum vf_tier)t, c);
    climb(S, (enum vf_tier)t, c);
    if (!tighter || !tighter->found) continue;
    if (c->found && better(S, c, tighter)) continue;
    *c = *tighter;
    c->budget_bytes = S->budget[t];
    settle(S, (enum vf_tier)t, c);
  }
}

int vf_plan_search(const struct vf_plan_request *given, struct vf_plan_result *out, struct vf_diag *d) {
  memset(out, 0, sizeof *out);
  struct search *S = calloc(1, sizeof *S);
  if (!S) return VF_ENOMEM;
  /* The weights the framework loads when none were asked for are the given ones: a plan that
   * changes the precision starts from them. */
  struct vf_plan_request request = *given;
  struct vf_setup resolved = given->base;
  vf_setup_resolve(&resolved, given->model, given->profile);
  request.base.weights = resolved.weights;
  const struct vf_plan_request *r = &request;
  /* A layout search changes the layout, the shard and the micro batch; the other knobs
   * stay as given, which keeps it to a few hundred estimates. */
  struct vf_plan_request layout_request = *r;
  if (r->gpus_per_node)
    layout_request.keep |= VF_KEEP_PRECISION | VF_KEEP_OPTIMIZER | VF_KEEP_GRAD_CKPT | VF_KEEP_OFFLOAD |
                           VF_KEEP_ALLOC_CONF | VF_KEEP_LOSS | VF_KEEP_IN_BWD;
  S->r = &layout_request;
  S->out = out;
  int rc = start(S, d);
  if (!rc) search(S);
  if (!rc) confirm(S);
  if (!rc) note_allocs(S);
  if (!rc && out->tiers[VF_TIER_BALANCED].found) plan_changes(r, out);
  free(S->configs);
  free(S);
  return rc;
}

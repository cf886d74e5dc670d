/* The planner: the fastest setting under each tier's budget, found by calling the
 * estimator.
 *
 * Search. Micro batches are the divisors b of the samples each data-parallel replica
 * handles per step (n), with accumulation n / b, so the effective batch stays as asked
 * (n is rounded when the GPUs do not divide it). The other knobs are searched in
 * levels, the least intrusive first: the given seq and method, then other methods,
 * then halved seqs; a tier settles at the first level where something fits. Within a
 * level every combination of precision, optimizer, checkpointing, shard and offload is
 * ranked by its throughput at its fastest micro batch, memory aside (an upper bound) and
 * tried in that order until no bound beats the best found; a binary search over the
 * divisors finds the largest micro batch under each budget, the peak growing with the
 * micro batch. Ranking charges each changed knob 1% so that a change must buy speed.
 *
 * Layouts (gpus_per_node): every tp, pp, cp, ep and schedule the framework can run on the
 * world is one more dimension of the combinations, with the shard; the other knobs stay
 * as given. Each layout has its own samples per replica, so its own divisors. */
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "core/bisect.h"
#include "core/estimate/estimate.h"
#include "core/plan/internal.h"
#include "core/profile.h"

#define DEFAULT_SAFETY 0.90
#define SAFE_MARGIN 0.10      /* the safe tier keeps this much more of the GPU free */
#define AGGRESSIVE_SHARE 0.97 /* the aggressive tier leaves room for little more than noise */
#define CHANGE_PENALTY 0.01
#define MIN_SEQ 128
#define MAX_PER_GPU (1ull << 30)
/* Per level and layout: 2 precisions x 4 optimizers x 3 checkpointing x 4 shards x 3 offloads. */
#define MAX_KNOBS 288
/* Layouts searched at most (tp x pp x cp x schedule), and context-parallel sizes tried. */
#define MAX_LAYOUTS 1024
#define MAX_CP 8
/* Exact estimates kept while settling: each tier tries two or three micro batches. */
#define MAX_EXACT 16

static const char *const tier_names[VF_TIER_COUNT] = {"safe", "balanced", "aggressive"};

const char *vf_tier_name(enum vf_tier t) { return t < VF_TIER_COUNT ? tier_names[t] : "unknown"; }

int vf_keep_parse(const char *list, uint32_t *bits) {
  static const struct { const char *name; uint32_t bits; } names[] = {
      {"seq", VF_KEEP_SEQ},         {"precision", VF_KEEP_PRECISION}, {"optimizer", VF_KEEP_OPTIMIZER},
      {"method", VF_KEEP_METHOD},   {"lora-r", VF_KEEP_LORA_R},       {"quant", VF_KEEP_QUANT},
      {"grad-ckpt", VF_KEEP_GRAD_CKPT}, {"shard", VF_KEEP_SHARD},     {"offload", VF_KEEP_OFFLOAD},
      {"capacity", VF_KEEP_CAPACITY}, {"none", 0}};
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

struct config {
  struct vf_setup s; /* batch and accumulation set per micro batch tried */
  size_t layout;     /* its index in search.layouts */
  uint64_t per_gpu;  /* samples each data-parallel replica takes per step in its layout */
  double bound;      /* ranking score at the largest micro batch */
};

/* A parallel layout of the world's GPUs. */
struct layout {
  uint64_t tp, pp, cp, ep;
  enum vf_pp_schedule schedule;
  bool fits; /* a setting of it fits at micro batch 1 (in the level searched) */
};

/* An exact estimate made while settling the tiers; ok: the estimator took the setting. */
struct exact {
  struct vf_setup s;
  struct vf_estimate e;
  bool ok;
};

struct search {
  const struct vf_plan_request *r;
  struct vf_plan_result *out;
  uint64_t budget[VF_TIER_COUNT];
  double score[VF_TIER_COUNT];
  bool settled[VF_TIER_COUNT];
  uint64_t target;           /* the effective batch asked for */
  uint64_t per_gpu, *div;    /* the samples per replica the divisors are of, and they */
  size_t n_div;
  struct vf_estimate *cache; /* per divisor, for the configuration being searched */
  uint8_t *cached;           /* 0: not tried, 1: estimated, 2: refused by the estimator */
  struct plan_cluster cluster;
  struct layout layouts[MAX_LAYOUTS];
  size_t n_layouts;
  struct config *configs;    /* n_layouts x MAX_KNOBS */
  struct exact exact[MAX_EXACT];
  size_t n_exact;
};

static uint64_t effective_batch(const struct vf_setup *s) {
  return s->batch * s->accumulation * plan_data_parallel(s);
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

static struct vf_plan_choice choice(const struct vf_plan_request *r, const struct vf_setup *s,
                                    const struct vf_estimate *e, uint64_t budget) {
  struct plan_cluster c = plan_cluster_of(r);
  double rate = plan_rate(r->model, s, e->params, e->trainable_params, e->by_category[VF_CAT_ACTIVATIONS], r->gpu, &c);
  return (struct vf_plan_choice){true, *s, effective_batch(s), e->device_peak, budget, rate, device_range(r, s, e)};
}

/* Runs the estimator, keeping the lowest peak seen for the nothing-fits report. */
static int estimate_with(struct search *S, const struct vf_setup *s, struct vf_estimate *e,
                         struct vf_diag *d) {
  int rc = estimate_quick(S->r->model, s, S->r->profile, S->r->alloc, e, d);
  if (!rc && S->r->batch_scale > 0) vf_estimate_calibrate(e, S->r->batch_scale);
  S->out->estimates++;
  struct vf_plan_choice *low = &S->out->smallest;
  if (!rc && (!low->found || e->device_peak < low->peak_device_bytes)) *low = choice(S->r, s, e, 0);
  return rc;
}

static int estimate(struct search *S, const struct vf_setup *s, struct vf_estimate *e) {
  struct vf_diag d;
  return estimate_with(S, s, e, &d);
}

static int changes_from_base(const struct vf_setup *base, const struct vf_setup *s) {
  bool layout = s->tp != base->tp || s->pp != base->pp || s->cp != base->cp || s->ep != base->ep ||
                (s->pp > 1 && s->pp_schedule != base->pp_schedule);
  return (s->seq != base->seq) + (s->method != base->method) + (s->amp != base->amp) +
         (s->optimizer != base->optimizer) + (s->grad_ckpt != base->grad_ckpt) +
         (s->shard != base->shard) + (s->offload != base->offload) + layout;
}

static double score(const struct search *S, const struct vf_setup *s, double rate) {
  return rate * (1 - CHANGE_PENALTY * changes_from_base(&S->r->base, s));
}

static void free_divisors(struct search *S) {
  free(S->div);
  free(S->cache);
  free(S->cached);
  S->div = NULL, S->cache = NULL, S->cached = NULL;
  S->n_div = 0;
}

/* The divisors of n samples per replica, ascending: the micro batches tried. */
static int divisors(struct search *S, uint64_t n) {
  if (S->div && S->per_gpu == n) return 0;
  free_divisors(S);
  S->per_gpu = n;
  uint64_t low = 0;
  for (uint64_t b = 1; b * b <= n; b++) low += n % b == 0;
  S->div = malloc(2 * low * sizeof *S->div);
  S->cache = calloc(2 * low, sizeof *S->cache);
  S->cached = calloc(2 * low, sizeof *S->cached);
  if (!S->div || !S->cache || !S->cached) return VF_ENOMEM;
  for (uint64_t b = 1; b * b <= n; b++)
    if (n % b == 0) S->div[S->n_div++] = b;
  for (size_t i = low; i-- > 0;)
    if (S->div[i] * S->div[i] != n) S->div[S->n_div++] = n / S->div[i];
  return 0;
}

/* ---- the values each knob may take, the given one first ---- */

static enum vf_precision autocast_dtype(const struct vf_gpu_spec *g) {
  bool lacks_bf16 = g && ((g->cc_major > 0 && g->cc_major < 8) || (g->bf16_tflops <= 0 && g->fp16_tflops > 0));
  return lacks_bf16 ? VF_PREC_FP16 : VF_PREC_BF16;
}

static size_t precisions(const struct vf_plan_request *r, enum vf_precision *out) {
  size_t n = 0;
  out[n++] = r->base.amp;
  if (!(r->keep & VF_KEEP_PRECISION) && r->base.amp == VF_PREC_NONE && r->base.weights == VF_PREC_FP32)
    out[n++] = autocast_dtype(r->gpu);
  return n;
}

/* Each optimizer after the given one keeps less state. */
static size_t optimizers(const struct vf_plan_request *r, enum vf_optimizer *out) {
  static const enum vf_optimizer chain[] = {VF_OPT_ADAMW, VF_OPT_ADAMW_8BIT, VF_OPT_PAGED_ADAMW_8BIT,
                                            VF_OPT_ADAFACTOR};
  size_t n = 0, i = 0, count = sizeof chain / sizeof *chain;
  out[n++] = r->base.optimizer;
  if (r->keep & VF_KEEP_OPTIMIZER) return n;
  while (i < count && chain[i] != r->base.optimizer) i++;
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

/* Optimizer offload, and parameters with it (valid under ZeRO-3 only); activation offload
 * stays as given. */
static size_t offloads(const struct vf_plan_request *r, uint32_t *out) {
  uint32_t moved = VF_OFFLOAD_OPTIMIZER | VF_OFFLOAD_PARAMS, rest = r->base.offload & ~moved;
  const uint32_t all[] = {rest, rest | VF_OFFLOAD_OPTIMIZER, rest | moved};
  size_t n = 0;
  out[n++] = r->base.offload;
  for (size_t i = 0; i < 3 && !(r->keep & VF_KEEP_OFFLOAD); i++)
    if (all[i] != r->base.offload) out[n++] = all[i];
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
  double state = s->optimizer == VF_OPT_ADAMW ? 8
                 : s->optimizer == VF_OPT_ADAMW_8BIT || s->optimizer == VF_OPT_PAGED_ADAMW_8BIT ? 2
                 : s->optimizer == VF_OPT_SGD_MOMENTUM || s->optimizer == VF_OPT_LION ? 4
                                                                                      : 0;
  double weights = (s->offload & VF_OFFLOAD_PARAMS) ? 0 : params * weight / (vf_shard_weights(s->shard) ? shards : 1);
  double grads = trainable * (s->weights == VF_PREC_FP32 ? 4 : 2) / (s->shard >= VF_SHARD_ZERO2 ? shards : 1);
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

/* The ranking score of setting s at its fastest split of n samples per replica into micro
 * batches, memory aside: an upper bound on what it can reach. Larger micro batches run
 * faster; under a pipeline more of them shrink the bubble. */
static double best_rate(const struct search *S, struct vf_setup *s, uint64_t n, uint64_t params, uint64_t trainable) {
  double best = 0;
  for (uint64_t b = 1; b * b <= n; b++) {
    if (n % b) continue;
    for (int i = 0; i < 2; i++) {
      s->batch = i ? n / b : b, s->accumulation = n / s->batch;
      double r = score(S, s, plan_rate(S->r->model, s, params, trainable, 0, S->r->gpu, &S->cluster));
      if (r > best) best = r;
    }
  }
  return best;
}

/* Every combination of the layouts and the knobs on top of level (method and seq set)
 * that the model states alone do not rule out; the bound needs the method's parameter
 * counts. A layout's bound takes its pipeline as full as the samples allow. */
static size_t build_configs(struct search *S, const struct vf_setup *level, uint64_t params,
                            uint64_t trainable) {
  enum vf_precision amp[2];
  enum vf_optimizer opt[4];
  enum vf_ckpt ck[3];
  enum vf_shard sh[4];
  uint32_t off[3];
  size_t na = precisions(S->r, amp), no = optimizers(S->r, opt), nc = ckpts(S->r, ck);
  size_t ns = shards(S->r, sh), nf = offloads(S->r, off), n = 0;
  double budget = (double)S->budget[VF_TIER_AGGRESSIVE];
  for (size_t l = 0; l < S->n_layouts; l++)
    for (size_t a = 0; a < na; a++)
      for (size_t o = 0; o < no; o++)
        for (size_t c = 0; c < nc; c++)
          for (size_t h = 0; h < ns; h++)
            for (size_t f = 0; f < nf; f++) {
              struct config *k = &S->configs[n];
              const struct layout *L = &S->layouts[l];
              k->s = *level;
              k->s.tp = L->tp, k->s.pp = L->pp, k->s.cp = L->cp, k->s.ep = L->ep, k->s.pp_schedule = L->schedule;
              k->layout = l;
              k->s.amp = amp[a], k->s.optimizer = opt[o], k->s.grad_ckpt = ck[c];
              k->s.shard = sh[h], k->s.offload = off[f];
              if (state_floor(&k->s, (double)params, (double)trainable) > budget) continue;
              k->per_gpu = samples_per_replica(S, &k->s);
              k->bound = best_rate(S, &k->s, k->per_gpu, params, trainable);
              n++;
            }
  return n;
}

static int by_bound(const void *a, const void *b) {
  double x = ((const struct config *)a)->bound, y = ((const struct config *)b)->bound;
  return (x < y) - (x > y);
}

/* The estimate of c at divisor i, or NULL when the estimator refuses the setting. */
static const struct vf_estimate *at(struct search *S, struct config *c, size_t i) {
  if (S->cached[i] == 1) return &S->cache[i];
  if (S->cached[i] == 2) return NULL;
  c->s.batch = S->div[i];
  c->s.accumulation = S->per_gpu / S->div[i];
  S->cached[i] = estimate(S, &c->s, &S->cache[i]) ? 2 : 1;
  return S->cached[i] == 1 ? &S->cache[i] : NULL;
}

static bool fits(struct search *S, struct config *c, size_t i, enum vf_tier t) {
  const struct vf_estimate *e = at(S, c, i);
  return e && judged_peak(S->r, t, &c->s, e) <= S->budget[t];
}

struct fit_arg {
  struct search *S;
  struct config *c;
  enum vf_tier t;
};

static bool divisor_fits(uint64_t i, void *arg) {
  struct fit_arg *f = arg;
  return fits(f->S, f->c, (size_t)i, f->t);
}

/* The largest divisor whose peak fits tier t's budget, or -1. */
static long largest_fitting(struct search *S, struct config *c, enum vf_tier t) {
  if (!fits(S, c, 0, t)) return -1;
  struct fit_arg f = {S, c, t};
  return (long)last_fitting(0, S->n_div - 1, divisor_fits, &f);
}

static void consider(struct search *S, enum vf_tier t, struct config *c, size_t i) {
  struct vf_setup s = c->s;
  s.batch = S->div[i];
  s.accumulation = S->per_gpu / S->div[i];
  struct vf_plan_choice c_at = choice(S->r, &s, &S->cache[i], S->budget[t]);
  double sc = score(S, &s, c_at.tokens_per_second);
  if (sc <= S->score[t]) return;
  S->score[t] = sc;
  S->out->tiers[t] = c_at;
}

/* Tries c for every tier it could improve; false when it can improve none (nor can any
 * configuration ranked after it). Tighter budgets are tried only where looser ones fit. */
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

static bool try_config(struct search *S, struct config *c) {
  bool open[VF_TIER_COUNT], any = false;
  for (int t = 0; t < VF_TIER_COUNT; t++) any |= open[t] = !S->settled[t] && c->bound > S->score[t];
  if (!any) return false;
  if (half_cp_fits(S, c)) return true;
  if (divisors(S, c->per_gpu)) return false;
  memset(S->cached, 0, S->n_div * sizeof *S->cached);
  for (int t = VF_TIER_AGGRESSIVE; t >= 0; t--) {
    if (!open[t]) continue;
    long i = largest_fitting(S, c, (enum vf_tier)t);
    if (i < 0) break;
    S->layouts[c->layout].fits = true;
    consider(S, (enum vf_tier)t, c, (size_t)i);
  }
  return true;
}

static void search_level(struct search *S, const struct vf_setup *level) {
  struct vf_setup probe = *level;
  struct vf_estimate ref;
  probe.accumulation = samples_per_replica(S, &probe); /* batch 1 */
  if (estimate(S, &probe, &ref)) return;
  for (size_t l = 0; l < S->n_layouts; l++) S->layouts[l].fits = false;
  size_t n = build_configs(S, level, ref.params, ref.trainable_params);
  qsort(S->configs, n, sizeof *S->configs, by_bound);
  for (size_t i = 0; i < n;)
    if (!try_config(S, &S->configs[i++])) break;
  for (int t = 0; t < VF_TIER_COUNT; t++) S->settled[t] |= S->out->tiers[t].found;
}

static bool all_settled(const struct search *S) {
  return S->settled[VF_TIER_SAFE] && S->settled[VF_TIER_BALANCED] && S->settled[VF_TIER_AGGRESSIVE];
}

/* Levels: the given seq with each allowed method, then each halved seq the same way. */
static void search(struct search *S) {
  struct vf_setup level[3];
  size_t n = methods(S->r, level);
  for (uint64_t seq = S->r->base.seq;; seq /= 2) {
    for (size_t m = 0; m < n && !all_settled(S); m++) {
      level[m].seq = seq;
      level[m].batch = 1;
      search_level(S, &level[m]);
    }
    bool can_halve = !(S->r->keep & VF_KEEP_SEQ) && seq / 2 >= MIN_SEQ && (seq / 2) % S->r->base.cp == 0;
    if (all_settled(S) || !can_halve) return;
  }
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

/* The given setting as estimated, its accumulation resolved, and what the search needs
 * from it: the effective batch, the budgets, the layouts. */
static int start(struct search *S, struct vf_diag *d) {
  const struct vf_plan_request *r = S->r;
  double safety = r->safety > 0 ? r->safety : DEFAULT_SAFETY;
  if (!(safety <= 1)) return bad(d, "--safety must be a fraction above 0 and at most 1");
  if (!r->base.capacity_bytes) return bad(d, "planning needs a GPU (--gpu)");
  struct vf_estimate e;
  struct vf_setup given = r->base;
  int rc = estimate_with(S, &given, &e, d);
  if (rc) return rc;
  given.accumulation = e.accumulation;
  S->cluster = plan_cluster_of(r);
  S->target = r->target_effective_batch ? r->target_effective_batch : effective_batch(&given);
  if (samples_per_replica(S, &given) > MAX_PER_GPU) return bad(d, "--target-effective-batch is implausibly large");
  double cap = (double)r->base.capacity_bytes;
  double share[VF_TIER_COUNT] = {safety - SAFE_MARGIN, safety, safety > AGGRESSIVE_SHARE ? safety : AGGRESSIVE_SHARE};
  for (int t = 0; t < VF_TIER_COUNT; t++) S->budget[t] = share[t] > 0 ? (uint64_t)(share[t] * cap) : 0;
  S->out->target_effective_batch = S->target;
  S->out->given = choice(r, &given, &e, S->budget[VF_TIER_BALANCED]);
  find_layouts(S);
  S->configs = malloc((S->n_layouts ? S->n_layouts : 1) * MAX_KNOBS * sizeof *S->configs);
  if (!S->configs) return VF_ENOMEM;
  return divisors(S, samples_per_replica(S, &given));
}

/* The settings of one search differ only in the knobs changes_from_base counts and in
 * the micro batch split. */
static bool same_setting(const struct vf_setup *a, const struct vf_setup *b) {
  return changes_from_base(a, b) == 0 && a->batch == b->batch && a->accumulation == b->accumulation;
}

/* The exact (every layer replayed) estimate of s into e, false when the estimator refuses
 * it. Tiers often settle on the same setting, a looser one on a tighter one's, and a
 * replay of every layer costs as much as dozens of quick ones: each is made once. */
static bool exact_estimate(struct search *S, const struct vf_setup *s, struct vf_estimate *e) {
  for (size_t k = 0; k < S->n_exact; k++)
    if (same_setting(&S->exact[k].s, s)) {
      *e = S->exact[k].e;
      return S->exact[k].ok;
    }
  struct vf_diag d;
  bool ok = vf_estimate(S->r->model, s, S->r->profile, S->r->alloc, e, &d) == 0;
  if (ok && S->r->batch_scale > 0) vf_estimate_calibrate(e, S->r->batch_scale);
  if (S->n_exact < MAX_EXACT) S->exact[S->n_exact++] = (struct exact){*s, *e, ok};
  return ok;
}

/* Whether an exact estimate of tier t's choice c at micro batch divisor i fits the tier's
 * budget; e gets the estimate. A setting the estimator refuses does not fit. */
static bool exact_fits(struct search *S, enum vf_tier t, const struct vf_plan_choice *c, size_t i,
                       struct vf_estimate *e) {
  struct vf_setup s = c->setup;
  s.batch = S->div[i];
  s.accumulation = S->per_gpu / S->div[i];
  return exact_estimate(S, &s, e) && judged_peak(S->r, t, &s, e) <= c->budget_bytes;
}

static size_t divisor_index(const struct search *S, uint64_t batch) {
  size_t i = 0;
  while (i + 1 < S->n_div && S->div[i] < batch) i++;
  return i;
}

/* Moves choice c of tier t to the largest micro batch whose exact estimate fits the tier's
 * budget: down from where the quick estimates put it while it is over, then up while the
 * next one fits. False when not even the smallest fits. */
static bool settle(struct search *S, enum vf_tier t, struct vf_plan_choice *c) {
  struct vf_estimate e, next;
  if (divisors(S, c->setup.batch * c->setup.accumulation)) return false;
  size_t i = divisor_index(S, c->setup.batch);
  bool ok = exact_fits(S, t, c, i, &e);
  while (!ok && i > 0) ok = exact_fits(S, t, c, --i, &e);
  if (!ok) return false;
  while (i + 1 < S->n_div && exact_fits(S, t, c, i + 1, &next)) {
    e = next;
    i++;
  }
  c->setup.batch = S->div[i];
  c->setup.accumulation = S->per_gpu / S->div[i];
  *c = choice(S->r, &c->setup, &e, c->budget_bytes);
  return true;
}

/* The search ran on quick estimates: each tier's choice is settled on exact ones. What
 * fits a tighter tier's budget fits a looser one's, so a looser tier whose own choice
 * settled lower (or not at all) takes the tighter one's, its micro batch grown where the
 * looser budget allows. */
static void confirm(struct search *S) {
  for (int t = 0; t < VF_TIER_COUNT; t++) {
    struct vf_plan_choice *c = &S->out->tiers[t], *tighter = t > 0 ? &S->out->tiers[t - 1] : NULL;
    if (c->found) c->found = settle(S, (enum vf_tier)t, c);
    if (!tighter || !tighter->found) continue;
    if (c->found && score(S, &c->setup, c->tokens_per_second) >= score(S, &tighter->setup, tighter->tokens_per_second))
      continue;
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
    layout_request.keep |= VF_KEEP_PRECISION | VF_KEEP_OPTIMIZER | VF_KEEP_GRAD_CKPT | VF_KEEP_OFFLOAD;
  S->r = &layout_request;
  S->out = out;
  int rc = start(S, d);
  if (!rc) search(S);
  if (!rc) confirm(S);
  if (!rc && out->tiers[VF_TIER_BALANCED].found) plan_changes(r, out);
  free_divisors(S);
  free(S->configs);
  free(S);
  return rc;
}

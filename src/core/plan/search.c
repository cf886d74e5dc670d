/* The search: each level's configurations ranked by their bound and tried in that order,
 * the largest micro batch that fits a tier found by a binary search, the best ranked kept
 * as the tier's runners; then the levels, and the dials of seq and the LoRA rank. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "core/bisect.h"
#include "core/plan/internal.h"
#include "core/profile.h"

/* seq is searched in steps of this many tokens, the LoRA rank in steps of RANK_STEP (below
 * it, every rank). */
#define SEQ_STEP 128
#define RANK_STEP 8

struct config {
  struct vf_setup s; /* batch and accumulation set per micro batch tried */
  size_t layout;     /* its index in search.layouts */
  size_t alloc;      /* its allocator configuration: search.alloc */
  uint64_t per_gpu;  /* samples each data-parallel replica takes per step in its layout */
  double bound;      /* ranking score at its fastest micro batch */
  size_t order;      /* where it was built: knobs earlier in their lists first, on a tie */
};

/* The accumulation that brings micro batch b nearest to n samples per replica. */
static uint64_t accumulation_for(uint64_t n, uint64_t b) {
  uint64_t a = (n + b / 2) / b;
  return a ? a : 1;
}

void plan_set_micro(struct vf_setup *s, uint64_t n, uint64_t b) {
  s->batch = b;
  s->accumulation = accumulation_for(n, b);
}

static int estimate(struct search *S, const struct vf_setup *s, size_t alloc, struct vf_estimate *e) {
  struct vf_diag d;
  return plan_estimate_with(S, s, alloc, false, e, &d);
}

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
uint64_t plan_samples_per_replica(const struct search *S, const struct vf_setup *s) {
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
    r *= 1 - CHANGE_PENALTY * plan_changes_from_base(&S->r->base, s);
    if (r > best) best = r;
  }
  return best;
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
  c->per_gpu = plan_samples_per_replica(S, &c->s);
  c->bound = best_rate(S, &c->s, c->per_gpu, params, trainable);
  return true;
}

/* Every combination of the layouts and the knobs on top of level (method and seq set). */
static size_t build_configs(struct search *S, const struct vf_setup *level, uint64_t params, uint64_t trainable) {
  struct knobs k;
  plan_knobs_of(S, level, &k);
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
  plan_set_micro(&c->s, c->per_gpu, b);
  t->batch = b;
  t->ok = estimate(S, &c->s, c->alloc, &t->e) == 0;
  return t->ok ? &t->e : NULL;
}

static bool fits(struct search *S, struct config *c, uint64_t b, enum vf_tier t) {
  const struct vf_estimate *e = at(S, c, b);
  plan_set_micro(&c->s, c->per_gpu, b);
  return e && plan_judged_peak(S->r, t, &c->s, e) <= S->budget[t];
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

uint64_t plan_lowest_micro(const struct vf_setup *s, uint64_t n) {
  return s->optimizer_in_bwd == VF_IN_BWD_YES ? in_bwd_lowest(n) : 1;
}

/* The largest micro batch whose peak fits tier t's budget, or 0. */
static uint64_t largest_fitting(struct search *S, struct config *c, enum vf_tier t) {
  uint64_t low = plan_lowest_micro(&c->s, c->per_gpu);
  if (!fits(S, c, low, t)) return 0;
  struct fit_arg f = {S, c, t};
  return last_fitting(low, c->per_gpu, micro_fits, &f);
}

/* Of the micro batches from half of most up to it, all of which fit, the one that ranks
 * best: a smaller one may reach the effective batch exactly where the largest misses it. */
uint64_t plan_best_micro(const struct search *S, struct vf_setup s, uint64_t n, uint64_t most,
                         const struct vf_estimate *e) {
  uint64_t best = most;
  double top = -1;
  for (uint64_t b = most; b >= 1 && b * 2 >= most; b--) {
    plan_set_micro(&s, n, b);
    double sc =
        plan_score(S, &s, plan_rate(S->r->model, &s, e->params, e->trainable_params, 0, S->r->gpu, &S->cluster));
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
    if (plan_changes_from_base(&list[k].setup, &c->setup) == 0 && strcmp(list[k].alloc_conf, c->alloc_conf) == 0)
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
  uint64_t b = plan_best_micro(S, s, c->per_gpu, most, at(S, c, most));
  if (!fits(S, c, b, t)) b = most;
  const struct vf_estimate *e = at(S, c, b);
  if (!e) return;
  plan_set_micro(&s, c->per_gpu, b);
  struct vf_plan_choice c_at = plan_choice(S, &s, c->alloc, e, S->budget[t]);
  keep_runner(S, t, &c_at, plan_score(S, &s, c_at.tokens_per_second), c->bound);
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
  probe.accumulation = plan_samples_per_replica(S, &probe); /* batch 1 */
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

uint64_t *plan_dial_field(struct vf_setup *s, const struct dial *v) { return (uint64_t *)((char *)s + v->offset); }

/* The number of values below the given one that the dial takes: step, 2 step, ... (every
 * value from 1 where the given one is not above a step). */
uint64_t plan_dial_count(const struct dial *v) {
  uint64_t step = v->given > v->step ? v->step : 1;
  return (v->given - 1) / step;
}

uint64_t plan_dial_value(const struct dial *v, uint64_t i) { return (i + 1) * (v->given > v->step ? v->step : 1); }

struct dial_arg {
  struct search *S;
  struct vf_setup *level;
  const struct dial *v;
  enum vf_tier t;
};

static bool dial_fits(uint64_t i, void *arg) {
  struct dial_arg *a = arg;
  *plan_dial_field(a->level, a->v) = plan_dial_value(a->v, i);
  return level_fits(a->S, a->level, a->t);
}

/* Each tier not settled yet settles at the largest value of the dial below the given one at
 * which anything fits, a binary search over its values. */
static void settle_dial(struct search *S, struct vf_setup *level, const struct dial *v) {
  uint64_t count = plan_dial_count(v), *field = plan_dial_field(level, v);
  for (int t = 0; t < VF_TIER_COUNT && count; t++) {
    if (S->settled[t]) continue;
    *field = plan_dial_value(v, 0);
    if (!level_fits(S, level, (enum vf_tier)t)) continue;
    struct dial_arg a = {S, level, v, (enum vf_tier)t};
    *field = plan_dial_value(v, last_fitting(0, count - 1, dial_fits, &a));
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
void plan_search(struct search *S) {
  const struct vf_plan_request *r = S->r;
  struct vf_setup level[3];
  size_t n = plan_methods(r, level);
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

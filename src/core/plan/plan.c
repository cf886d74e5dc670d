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
 * as given. Each layout has its own samples per replica.
 *
 * The files: keep.c reads --keep; knobs.c has the values each knob may take; layouts.c the
 * layouts and allocator configurations weighed; search.c the search on quick estimates;
 * settle.c the settling on exact ones; speed.c the throughput model that ranks; changes.c
 * the steps from the given setting to the plan. This one starts and runs a plan, and holds
 * what every stage uses to estimate, judge and rank a setting. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "core/estimate/estimate.h"
#include "core/plan/internal.h"

#define DEFAULT_SAFETY 0.90
#define SAFE_MARGIN 0.10      /* the safe tier keeps this much more of the GPU free */
#define AGGRESSIVE_SHARE 0.97 /* the aggressive tier leaves room for little more than noise */
#define MISS_PENALTY 2.0
#define MAX_PER_GPU (1ull << 30)

static const char *const tier_names[VF_TIER_COUNT] = {"safe", "balanced", "aggressive"};

const char *vf_tier_name(enum vf_tier t) { return t < VF_TIER_COUNT ? tier_names[t] : "unknown"; }

/* ---- estimating, judging and ranking a setting ---- */

static uint64_t effective_batch(const struct vf_setup *s) {
  return s->batch * s->accumulation * plan_data_parallel(s);
}

/* The range of setting s's device peak, as estimated in e. */
struct vf_range plan_device_range(const struct vf_plan_request *r, const struct vf_setup *s,
                                  const struct vf_estimate *e) {
  if (!r->uncertainty) return (struct vf_range){e->device_peak, e->device_peak};
  return vf_range_of(e->device_peak, &vf_uncertainty_for(r->uncertainty, s)->kind[VF_PEAK_DEVICE]);
}

/* The peak tier t holds to its budget (plan.h says why). */
uint64_t plan_judged_peak(const struct vf_plan_request *r, enum vf_tier t, const struct vf_setup *s,
                          const struct vf_estimate *e) {
  return t == VF_TIER_AGGRESSIVE ? e->device_peak : plan_device_range(r, s, e).high;
}

struct vf_plan_choice plan_choice(const struct search *S, const struct vf_setup *s, size_t alloc,
                                  const struct vf_estimate *e, uint64_t budget) {
  double rate = plan_rate(S->r->model, s, e->params, e->trainable_params, e->by_category[VF_CAT_ACTIVATIONS],
                          S->r->gpu, &S->cluster);
  struct vf_plan_choice c = {true, *s, "", effective_batch(s), e->device_peak, budget, rate,
                             plan_device_range(S->r, s, e)};
  snprintf(c.alloc_conf, sizeof c.alloc_conf, "%s", S->alloc_text[alloc]);
  return c;
}

/* Keeps the lowest peak seen for the nothing-fits report. */
static void note_smallest(struct search *S, const struct vf_setup *s, size_t alloc, const struct vf_estimate *e) {
  struct vf_plan_choice *low = &S->out->smallest;
  if (low->found && e->device_peak >= low->peak_device_bytes) return;
  *low = plan_choice(S, s, alloc, e, 0);
  S->smallest_alloc = alloc;
}

/* The smallest peak was noted from the search's quick estimates; its row reports it as
 * `estimate` makes it, as every other row does (a quick estimate can be a GiB or two off). */
static void settle_smallest(struct search *S) {
  struct vf_plan_choice *low = &S->out->smallest;
  struct vf_setup s = low->setup;
  struct vf_estimate e;
  struct vf_diag d;
  size_t alloc = S->smallest_alloc;
  if (low->found && !plan_estimate_with(S, &s, alloc, true, &e, &d)) *low = plan_choice(S, &s, alloc, &e, 0);
}

/* The estimate of s under allocator configuration alloc: quick (a search's) or exact (every
 * layer replayed, as `estimate` makes it), scaled by --calibrate. */
int plan_estimate_with(struct search *S, const struct vf_setup *s, size_t alloc, bool exact,
                       struct vf_estimate *e, struct vf_diag *d) {
  const struct vf_plan_request *r = S->r;
  int rc = exact ? vf_estimate(r->model, s, r->profile, &S->alloc[alloc], e, d)
                 : estimate_quick(r->model, s, r->profile, &S->alloc[alloc], e, d);
  if (!rc && r->batch_scale > 0) vf_estimate_calibrate(e, r->batch_scale);
  S->out->estimates++;
  if (!rc) note_smallest(S, s, alloc, e);
  return rc;
}

int plan_changes_from_base(const struct vf_setup *base, const struct vf_setup *s) {
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
double plan_score(const struct search *S, const struct vf_setup *s, double rate) {
  double miss = fabs((double)effective_batch(s) - (double)S->target) / (double)S->target;
  return rate * (1 - CHANGE_PENALTY * plan_changes_from_base(&S->r->base, s)) *
         (miss < 0.5 ? 1 - MISS_PENALTY * miss : 0);
}

/* ---- the planner ---- */

static int bad(struct vf_diag *d, const char *why) {
  return diag_at(d, VF_EINVAL, NULL, UINT64_MAX, "%s", why);
}

/* The given setting as `estimate` makes it, its accumulation resolved, and what the search
 * needs from it: the effective batch, the budgets, the allocator settings, the layouts. */
static int start(struct search *S, struct vf_diag *d) {
  const struct vf_plan_request *r = S->r;
  double safety = r->safety > 0 ? r->safety : DEFAULT_SAFETY;
  if (!(safety <= 1)) return bad(d, "--safety must be a fraction above 0 and at most 1");
  if (!r->base.capacity_bytes) return bad(d, "planning needs a GPU (--gpu)");
  plan_find_allocs(S);
  S->cluster = plan_cluster_of(r);
  struct vf_estimate e;
  struct vf_setup given = r->base;
  int rc = plan_estimate_with(S, &given, 0, true, &e, d);
  if (rc) return rc;
  given.accumulation = e.accumulation;
  S->target = r->target_effective_batch ? r->target_effective_batch : effective_batch(&given);
  if (plan_samples_per_replica(S, &given) > MAX_PER_GPU) return bad(d, "--target-effective-batch is implausibly large");
  double cap = (double)r->base.capacity_bytes;
  double share[VF_TIER_COUNT] = {safety - SAFE_MARGIN, safety, safety > AGGRESSIVE_SHARE ? safety : AGGRESSIVE_SHARE};
  for (int t = 0; t < VF_TIER_COUNT; t++) S->budget[t] = share[t] > 0 ? (uint64_t)(share[t] * cap) : 0;
  S->out->target_effective_batch = S->target;
  S->out->given = plan_choice(S, &given, 0, &e, S->budget[VF_TIER_BALANCED]);
  plan_find_layouts(S);
  return 0;
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
  if (!rc) plan_search(S);
  if (!rc) plan_confirm(S);
  if (!rc) settle_smallest(S);
  if (!rc) plan_note_allocs(S);
  if (!rc && out->tiers[VF_TIER_BALANCED].found) plan_changes(r, out);
  free(S->configs);
  free(S);
  return rc;
}

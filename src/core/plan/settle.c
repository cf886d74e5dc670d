/* Settling the tiers on exact estimates: the search ranked on quick ones. */
#include <stdio.h>
#include <string.h>

#include "core/bisect.h"
#include "core/plan/internal.h"

/* The settings of one search differ only in the knobs plan_changes_from_base counts, the
 * allocator configuration and the micro batch split. */
static bool same_setting(const struct exact *x, const struct vf_setup *s, size_t alloc) {
  return plan_changes_from_base(&x->s, s) == 0 && x->alloc == alloc && x->s.batch == s->batch &&
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
  bool ok = plan_estimate_with(S, s, alloc, true, e, &d) == 0;
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
  plan_set_micro(&s, n, b);
  return exact_estimate(S, &s, alloc_index(S, c), e) && plan_judged_peak(S->r, t, &s, e) <= c->budget_bytes;
}

/* Moves choice c of tier t to the micro batch its exact estimates settle: down from where
 * the quick estimates put it while it is over (halving, then up again by a binary search),
 * up while the next one fits; then the best ranked of those below. False when not even
 * micro batch 1 fits. */
static bool settle(struct search *S, enum vf_tier t, struct vf_plan_choice *c) {
  struct vf_estimate e;
  uint64_t n = plan_samples_per_replica(S, &c->setup), b = c->setup.batch, low = b,
           floor = plan_lowest_micro(&c->setup, n);
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
  b = plan_best_micro(S, c->setup, n, low, &e);
  if (!exact_fits(S, t, c, n, b, &e)) exact_fits(S, t, c, n, b = low, &e);
  plan_set_micro(&c->setup, n, b);
  *c = plan_choice(S, &c->setup, alloc, &e, c->budget_bytes);
  return true;
}

/* Where value lies among the dial's values (value = plan_dial_value(v, index)). */
static uint64_t dial_index(const struct dial *v, uint64_t value) {
  uint64_t unit = v->given > v->step ? v->step : 1;
  return value / unit - 1;
}

/* Tier t's choice c at the dial's value i, settled on exact estimates into out; false when
 * nothing fits there. */
static bool settle_at(struct search *S, enum vf_tier t, const struct vf_plan_choice *c, uint64_t i,
                      struct vf_plan_choice *out) {
  *out = *c;
  *plan_dial_field(&out->setup, &S->dialed[t]) = plan_dial_value(&S->dialed[t], i);
  return settle(S, t, out);
}

/* A tier the seq or rank search settled has the largest value its quick estimates let
 * fit; the exact ones may let longer ones fit, its other knobs as they are. */
static void climb(struct search *S, enum vf_tier t, struct vf_plan_choice *c) {
  const struct dial *v = &S->dialed[t];
  for (struct vf_plan_choice next; v->step && c->found;) {
    uint64_t i = dial_index(v, *plan_dial_field(&c->setup, v)) + 1;
    if (i >= plan_dial_count(v) || !settle_at(S, t, c, i, &next)) return;
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
  uint64_t i = v->step ? dial_index(v, *plan_dial_field(&c->setup, v)) : 0;
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
  return plan_score(S, &a->setup, a->tokens_per_second) >=
         plan_score(S, &b->setup, b->tokens_per_second);
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
    if (i != now && exact_estimate(S, &c->setup, i, &e) && plan_judged_peak(S->r, t, &c->setup, &e) < lowest)
      best = i, best_e = e, lowest = plan_judged_peak(S->r, t, &c->setup, &e);
  if (best == now) return;
  struct vf_plan_choice with = plan_choice(S, &c->setup, best, &best_e, c->budget_bytes);
  if (settle(S, t, &with) &&
      plan_score(S, &with.setup, with.tokens_per_second) >= plan_score(S, &c->setup, c->tokens_per_second))
    *c = with;
}

/* The allocator settings weighed against the recommended setting, each with its peak, so that
 * a plan shows those it did not take and why (a higher peak). */
void plan_note_allocs(struct search *S) {
  const struct vf_plan_choice *c = &S->out->tiers[VF_TIER_BALANCED];
  size_t now = alloc_index(S, c);
  for (size_t i = 0; c->found && i < S->n_alloc_all && S->out->n_alloc_tried < VF_PLAN_MAX_ALLOCS; i++) {
    struct vf_estimate e;
    if (i == now || !exact_estimate(S, &c->setup, i, &e)) continue;
    struct vf_plan_alloc_tried *a = &S->out->alloc_tried[S->out->n_alloc_tried++];
    snprintf(a->alloc_conf, sizeof a->alloc_conf, "%s", S->alloc_text[i]);
    a->peak_device_bytes = e.device_peak;
    a->device_range = plan_device_range(S->r, &c->setup, &e);
  }
}

/* Whether tier t's runner k may beat its choice c so far: at another seq or rank, or with a
 * bound above c's score (an exact estimate costs dozens of quick ones). */
static bool may_beat(const struct search *S, enum vf_tier t, size_t k, const struct vf_plan_choice *c) {
  const struct vf_setup *r = &S->runners[t][k].setup;
  return !c->found || r->seq != c->setup.seq || r->lora_r != c->setup.lora_r ||
         S->runner_bound[t][k] > plan_score(S, &c->setup, c->tokens_per_second);
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
void plan_confirm(struct search *S) {
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

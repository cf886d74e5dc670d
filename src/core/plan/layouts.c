/* The layouts a plan searches and the allocator configurations it weighs. */
#include <stdio.h>
#include <string.h>

#include "core/plan/internal.h"
#include "core/profile.h"

/* Context-parallel sizes tried. */
#define MAX_CP 8

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
void plan_find_layouts(struct search *S) {
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

void plan_find_allocs(struct search *S) {
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

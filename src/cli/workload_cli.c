/* Workloads on the command line (see workload_cli.h). */
#include <stdlib.h>
#include <string.h>

#include "cli/history_cli.h"
#include "cli/workload_cli.h"

int workload_context_load(struct setup_request *r, const char *file, struct workload_context *c) {
  struct vf_diag d;
  vf_diag_clear(&d);
  vf_workload_init(&c->w);
  int rc = vf_workload_load(&c->w, file, &d);
  if (rc) {
    vf_workload_cleanup(&c->w);
    return cli_diag_error(r->cmd, rc == VF_EIO ? VF_EINVAL : rc, &d);
  }
  /* The workload says which framework runs it; its profile gives what the encoders keep. */
  r->framework = c->w.framework;
  vf_framework_spec_parse(r->framework, &r->spec, NULL);
  if ((rc = setup_context_load_env(r, &c->env))) {
    vf_workload_cleanup(&c->w);
    return rc;
  }
  c->wl_env = (struct vf_wl_env){c->env.profile, &c->env.conf, r->setup.gpu_cc_major, r->setup.gpu_cc_minor,
                                 r->setup.context_bytes, r->setup.gpus};
  return EXIT_OK;
}

void workload_context_cleanup(struct workload_context *c) {
  vf_workload_cleanup(&c->w);
  setup_context_cleanup(&c->env);
}

/* ---- plan --workload, as JSON ---- */

/* {"dotted.path": value} of the knobs that live in the stage's file (in_stage) or in the
 * main config (shared). */
static json_t *set_json(const struct vf_workload *w, const struct vf_wl_point *pt, bool in_stage) {
  json_t *o = json_object();
  for (size_t k = 0; k < w->n_knobs; k++)
    if (w->knobs[k].path[0] && w->knobs[k].in_stage == in_stage)
      json_object_set_new(o, w->knobs[k].path, json_integer((json_int_t)pt->values[k]));
  return o;
}

static json_t *stage_json(const struct vf_workload *w, const struct vf_wl_plan *p, size_t st) {
  const struct vf_wl_stage_plan *sp = &p->stages[st];
  json_t *knobs = json_object();
  for (size_t k = 0; k < w->n_knobs; k++)
    if (w->knobs[k].role == VF_WL_KNOB)
      json_object_set_new(knobs, w->knobs[k].name, json_integer((json_int_t)sp->point.values[k]));
  const struct vf_wl_stage *s = st < w->n_stages ? &w->stages[st] : NULL;
  json_t *o = json_pack("{s:s, s:o, s:I, s:I, s:I, s:o, s:I, s:I, s:I, s:s}", "name", s ? s->name : "default",
                        "file", s && s->file[0] ? json_string(s->file) : json_null(), "batch",
                        (json_int_t)sp->point.values[w->batch], "accumulation", (json_int_t)p->accumulation,
                        "effective_batch", (json_int_t)(sp->point.values[w->batch] * (int64_t)(p->accumulation * p->gpus)),
                        "knobs", knobs, "peak_device_bytes", (json_int_t)sp->est.device_peak, "budget_bytes",
                        (json_int_t)p->budget_bytes, "sequences", (json_int_t)sp->shape.sequences, "phase",
                        vf_phase_name(sp->est.peak_phase));
  json_object_set_new(o, "peak_allocated_bytes", json_integer((json_int_t)sp->est.allocated_peak));
  json_object_set_new(o, "peak_reserved_bytes", json_integer((json_int_t)sp->est.reserved_peak));
  json_object_set_new(o, "fits", json_boolean(sp->device_range.high <= p->budget_bytes));
  json_object_set_new(o, "peak_device_range", json_pack("{s:I, s:I}", "low", (json_int_t)sp->device_range.low, "high",
                                                        (json_int_t)sp->device_range.high));
  json_object_set_new(o, "breakdown", cli_breakdown_json(&sp->est));
  json_object_set_new(o, "set", set_json(w, &sp->point, true));
  return o;
}

/* The contract's `plan --workload --json`: per stage the shared micro batch and accumulation,
 * the stage's knobs, the peak with its breakdown, and where apply writes each value ("set"). */
static json_t *plan_json(const struct vf_workload *w, const struct vf_wl_plan *p, uint64_t capacity_bytes) {
  json_t *stages = json_array(), *changes = json_array();
  for (size_t st = 0; st < p->n_stages; st++) json_array_append_new(stages, stage_json(w, p, st));
  for (size_t i = 0; i < p->n_changes; i++) json_array_append_new(changes, json_string(p->changes[i]));
  json_t *o = json_pack("{s:s, s:I, s:I, s:b}", "workload", w->name[0] ? w->name : w->file, "capacity_bytes",
                        (json_int_t)capacity_bytes, "budget_bytes", (json_int_t)p->budget_bytes, "found", p->found);
  json_object_set_new(o, "target_effective_batch",
                      p->target_effective_batch ? json_integer((json_int_t)p->target_effective_batch) : json_null());
  json_object_set_new(o, "gpus", json_integer((json_int_t)p->gpus));
  json_object_set_new(o, "config", w->config[0] ? json_string(w->config) : json_null());
  json_object_set_new(o, "estimated_from", json_string(w->fit.n_points ? "trace" : "parts"));
  json_object_set_new(o, "stages", stages);
  json_object_set_new(o, "recommended", p->found ? json_deep_copy(json_array_get(stages, 0)) : json_null());
  json_object_set_new(o, "shared", json_pack("{s:o}", "set", set_json(w, &p->stages[0].point, false)));
  json_object_set_new(o, "changes", changes);
  json_object_set_new(o, "estimates", json_integer((json_int_t)p->estimates));
  return o;
}

/* ---- plan --workload, as text ---- */

static const char *stage_name(const struct vf_workload *w, size_t st) {
  return st < w->n_stages ? w->stages[st].name : "default";
}

static void stage_table(const struct vf_workload *w, const struct vf_wl_plan *p, uint64_t capacity) {
  printf("  %-8s", "stage");
  for (size_t k = 0; k < w->n_knobs; k++)
    if (w->knobs[k].role == VF_WL_KNOB) printf(" %12s", w->knobs[k].name);
  printf(" %10s %12s %12s %7s  %s\n", "sequences", "peak", "high end", "of GPU", "file");
  for (size_t st = 0; st < p->n_stages; st++) {
    const struct vf_wl_stage_plan *sp = &p->stages[st];
    char seqs[32], peak[32], high[32];
    printf("  %-8s", stage_name(w, st));
    for (size_t k = 0; k < w->n_knobs; k++)
      if (w->knobs[k].role == VF_WL_KNOB) printf(" %12lld", (long long)sp->point.values[k]);
    cli_group_digits(sp->shape.sequences, seqs, sizeof seqs);
    cli_format_bytes(sp->est.device_peak, peak, sizeof peak);
    cli_format_bytes(sp->device_range.high, high, sizeof high);
    printf(" %10s %12s %12s %6.1f%%  %s\n", seqs, peak, high, 100.0 * (double)sp->device_range.high / (double)capacity,
           st < w->n_stages && w->stages[st].file[0] ? w->stages[st].file : "-");
  }
}

static void breakdown_row(const struct vf_wl_plan *p, const char *label, int which) {
  printf("  %-18s", label);
  for (size_t st = 0; st < p->n_stages; st++) {
    const struct vf_estimate *e = &p->stages[st].est;
    uint64_t v = which >= 0 ? e->by_category[which] : which == -1 ? e->allocator_slack : e->context + e->by_category[VF_CAT_RUNTIME];
    char b[32];
    cli_format_bytes(v, b, sizeof b);
    printf(" %11s", b);
  }
  printf("\n");
}

static void breakdown_table(const struct vf_workload *w, const struct vf_wl_plan *p) {
  printf("\n  %-18s", "at the peak");
  for (size_t st = 0; st < p->n_stages; st++) printf(" %11s", stage_name(w, st));
  printf("\n  %-18s", "phase");
  for (size_t st = 0; st < p->n_stages; st++) printf(" %11s", vf_phase_name(p->stages[st].est.peak_phase));
  printf("\n");
  for (int k = VF_CAT_WEIGHTS; k < VF_CAT_RUNTIME; k++) breakdown_row(p, vf_category_name((enum vf_category)k), k);
  breakdown_row(p, "allocator slack", -1);
  breakdown_row(p, "CUDA, cuBLAS", -2);
}

static void plan_text(const struct vf_workload *w, const struct vf_gpu_spec *gpu, const char *gpu_arg,
                      const struct vf_wl_plan *p) {
  char cap[32], budget[32];
  cli_format_bytes(gpu->capacity_bytes, cap, sizeof cap);
  cli_format_bytes(p->budget_bytes, budget, sizeof budget);
  printf("%s on %s (%s): budget %.0f%%, %s, for the high end of each peak's range%s\n", w->name[0] ? w->name : w->file,
         gpu->name[0] ? gpu->name : gpu_arg, cap, 100 * p->safety, budget, p->gpus > 1 ? " on each GPU" : "");
  if (w->fit.n_points)
    printf("estimated from the trace of %s (%zu points, largest error %.1f%%)\n", w->factory, w->fit.n_points,
           100 * w->fit.max_error);
  if (p->found) {
    printf("micro batch %llu, accumulation %llu", (unsigned long long)p->batch, (unsigned long long)p->accumulation);
    if (p->gpus > 1) printf(", %llu GPUs", (unsigned long long)p->gpus);
    printf(": effective batch %llu", (unsigned long long)p->effective_batch);
    if (p->target_effective_batch) printf(" (target %llu)", (unsigned long long)p->target_effective_batch);
    printf("\n");
  }
  printf("\n");
  stage_table(w, p, gpu->capacity_bytes);
  breakdown_table(w, p);
  if (!p->found) {
    char peak[32];
    cli_format_bytes(p->stages[p->tightest].device_range.high, peak, sizeof peak);
    printf("\nnothing fits: stage %s needs up to %s at its knobs' minimums and a micro batch of %lld, over the budget of %s\n",
           stage_name(w, p->tightest), peak, (long long)p->stages[p->tightest].point.values[w->batch], budget);
    return;
  }
  printf("\n");
  if (!p->n_changes) printf("  the configs hold this plan already\n");
  for (size_t i = 0; i < p->n_changes; i++) printf("  - %s\n", p->changes[i]);
}

/* --keep for a workload: the knobs it names stay at the values its configs give. */
static int keep_knobs(const struct setup_request *r, const struct vf_workload *w, const char *list,
                      const struct vf_wl_point *given, uint32_t *out) {
  *out = 0;
  for (const char *p = list; p && *p;) {
    size_t n = strcspn(p, ",");
    char name[VF_WL_NAME];
    snprintf(name, sizeof name, "%.*s", (int)n, p);
    int k = vf_workload_knob(w, name);
    if (k < 0)
      return cli_usage_error(r->cmd, "--keep: '%s' is not a knob of %s (its knobs name what --keep holds)", name,
                             w->file);
    for (size_t st = 0; st < (w->n_stages ? w->n_stages : 1); st++)
      if (given[st].values[k] < 0)
        return cli_usage_error(r->cmd, "--keep %s: its configs give no value to hold (%s)", name,
                               w->knobs[k].path[0] ? w->knobs[k].path : "no path");
    *out |= 1u << k;
    p += n + (p[n] == ',');
  }
  return EXIT_OK;
}

/* What a workload plan cannot honour: data parallelism over a measured fit of one process. */
static int workload_refuses(const struct setup_request *r, const struct vf_workload *w) {
  if (r->setup.gpus > 1 && w->fit.n_points)
    return cli_usage_error(r->cmd, "--gpus %llu: %s is estimated from the trace of one process, which holds no "
                           "data-parallel buffers; plan it on one GPU", (unsigned long long)r->setup.gpus, w->file);
  return EXIT_OK;
}

int plan_workload(struct setup_request *r, const char *file, double safety, uint64_t target, const char *keep,
                  bool json) {
  if (!r->gpu) return cli_usage_error(r->cmd, "--gpu is required: the GPU to plan for");
  struct workload_context *c = calloc(1, sizeof *c);
  struct vf_wl_plan *p = malloc(sizeof *p);
  struct vf_wl_point *given = calloc(VF_WL_MAX_STAGES, sizeof *given);
  int code = c && p && given ? workload_context_load(r, file, c) : cli_error(r->cmd, EXIT_INTERNAL, "out of memory");
  if (code) {
    free(c), free(p), free(given);
    return code;
  }
  vf_workload_given(&c->w, given);
  uint32_t kept = 0;
  code = workload_refuses(r, &c->w);
  if (!code) code = keep_knobs(r, &c->w, keep, given, &kept);
  if (code) {
    workload_context_cleanup(c);
    free(c), free(p), free(given);
    return code;
  }
  struct vf_wl_plan_request req = {&c->w, c->wl_env, c->env.gpu.capacity_bytes, safety, target, given,
                                   &c->env.uncertainty, kept};
  struct vf_diag d;
  vf_diag_clear(&d);
  int rc = vf_workload_plan(&req, p, &d);
  if (rc) code = cli_diag_error(r->cmd, rc, &d);
  json_t *o = rc ? NULL : plan_json(&c->w, p, c->env.gpu.capacity_bytes);
  if (o && p->found) {
    char label[VF_WL_PATH + 64];
    snprintf(label, sizeof label, "%s on %s", file, c->env.gpu.name[0] ? c->env.gpu.name : r->gpu);
    history_save_plan(label, o, file);
  }
  if (o && json) code = cli_print_json(json_incref(o));
  else if (o) plan_text(&c->w, &c->env.gpu, r->gpu, p);
  if (code == EXIT_OK && !p->found) code = EXIT_NO;
  json_decref(o);
  workload_context_cleanup(c);
  free(c), free(p), free(given);
  return code;
}

/* The workload plan as JSON: per stage the shared micro batch and accumulation, the stage's
 * knobs, the peak with its breakdown, and where apply writes each value ("set"). */
#include <stdio.h>
#include <string.h>

#include "io/workload_json.h"

json_t *vf_estimate_breakdown_json(const struct vf_estimate *e) {
  json_t *o = json_object();
  for (int k = VF_CAT_WEIGHTS; k < VF_CAT_RUNTIME; k++)
    json_object_set_new(o, vf_category_name((enum vf_category)k), json_integer((json_int_t)e->by_category[k]));
  json_object_set_new(o, "allocator_slack", json_integer((json_int_t)e->allocator_slack));
  json_object_set_new(o, "runtime", json_integer((json_int_t)(e->context + e->by_category[VF_CAT_RUNTIME])));
  return o;
}

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
                        "effective_batch", (json_int_t)(sp->point.values[w->batch] * (int64_t)p->accumulation),
                        "knobs", knobs, "peak_device_bytes", (json_int_t)sp->est.device_peak, "budget_bytes",
                        (json_int_t)p->budget_bytes, "sequences", (json_int_t)sp->shape.sequences, "phase",
                        vf_phase_name(sp->est.peak_phase));
  json_object_set_new(o, "peak_allocated_bytes", json_integer((json_int_t)sp->est.allocated_peak));
  json_object_set_new(o, "peak_reserved_bytes", json_integer((json_int_t)sp->est.reserved_peak));
  json_object_set_new(o, "fits", json_boolean(sp->est.device_peak <= p->budget_bytes));
  json_object_set_new(o, "breakdown", vf_estimate_breakdown_json(&sp->est));
  json_object_set_new(o, "set", set_json(w, &sp->point, true));
  return o;
}

json_t *vf_workload_plan_json(const struct vf_workload *w, const struct vf_wl_plan *p, uint64_t capacity_bytes) {
  json_t *stages = json_array(), *changes = json_array();
  for (size_t st = 0; st < p->n_stages; st++) json_array_append_new(stages, stage_json(w, p, st));
  for (size_t i = 0; i < p->n_changes; i++) json_array_append_new(changes, json_string(p->changes[i]));
  json_t *o = json_pack("{s:s, s:I, s:I, s:b}", "workload", w->name[0] ? w->name : w->file, "capacity_bytes",
                        (json_int_t)capacity_bytes, "budget_bytes", (json_int_t)p->budget_bytes, "found", p->found);
  json_object_set_new(o, "target_effective_batch",
                      p->target_effective_batch ? json_integer((json_int_t)p->target_effective_batch) : json_null());
  json_object_set_new(o, "config", w->config[0] ? json_string(w->config) : json_null());
  json_object_set_new(o, "estimated_from", json_string(w->fit.n_points ? "trace" : "parts"));
  json_object_set_new(o, "stages", stages);
  json_object_set_new(o, "recommended", p->found ? json_deep_copy(json_array_get(stages, 0)) : json_null());
  json_object_set_new(o, "shared", json_pack("{s:o}", "set", set_json(w, &p->stages[0].point, false)));
  json_object_set_new(o, "changes", changes);
  json_object_set_new(o, "estimates", json_integer((json_int_t)p->estimates));
  return o;
}

/* ---- what `trace --workload` measured, in the file beside the workload ---- */

static json_t *terms_json(const double t[VF_WL_TERMS]) {
  json_t *a = json_array();
  for (size_t i = 0; i < VF_WL_TERMS; i++) json_array_append_new(a, json_real(t[i]));
  return a;
}

json_t *vf_workload_fit_json(const struct vf_wl_fit *f) {
  json_t *by = json_object();
  for (int c = 0; c < VF_CAT_COUNT; c++)
    json_object_set_new(by, vf_category_name((enum vf_category)c), terms_json(f->by_category[c]));
  json_t *o = json_pack("{s:[s,s,s], s:o, s:o, s:o, s:s, s:I, s:f, s:f}", "terms", "bytes", "per_sequence",
                        "per_loss_element", "allocated_bytes", terms_json(f->allocated), "reserved_bytes",
                        terms_json(f->reserved), "breakdown", by, "phase", vf_phase_name(f->phase), "points",
                        (json_int_t)f->n_points, "r2", f->r2, "max_error", f->max_error);
  return o;
}

void vf_workload_trace_path(const char *workload_file, char *out, size_t size) {
  size_t n = strlen(workload_file);
  const char *dot = strrchr(workload_file, '.'), *slash = strrchr(workload_file, '/');
  if (dot && (!slash || dot > slash) && (strcmp(dot, ".yaml") == 0 || strcmp(dot, ".yml") == 0))
    n = (size_t)(dot - workload_file);
  snprintf(out, size, "%.*s.trace.json", (int)n, workload_file);
}

static bool terms_read(const json_t *a, double t[VF_WL_TERMS]) {
  if (!json_is_array(a) || json_array_size(a) != VF_WL_TERMS) return false;
  for (size_t i = 0; i < VF_WL_TERMS; i++) {
    if (!json_is_number(json_array_get(a, i))) return false;
    t[i] = json_number_value(json_array_get(a, i));
  }
  return true;
}

static bool phase_read(const json_t *s, enum vf_phase *out) {
  for (int p = 0; p < VF_PHASE_COUNT && json_is_string(s); p++)
    if (strcmp(vf_phase_name((enum vf_phase)p), json_string_value(s)) == 0) return *out = (enum vf_phase)p, true;
  return false;
}

int vf_workload_fit_from_json(const json_t *o, struct vf_wl_fit *f) {
  memset(f, 0, sizeof *f);
  const json_t *by = json_object_get(o, "breakdown"), *n = json_object_get(o, "points");
  bool ok = terms_read(json_object_get(o, "allocated_bytes"), f->allocated) &&
            terms_read(json_object_get(o, "reserved_bytes"), f->reserved) && json_is_object(by) &&
            phase_read(json_object_get(o, "phase"), &f->phase) && json_is_integer(n) && json_integer_value(n) > 0;
  for (int c = 0; ok && c < VF_CAT_COUNT; c++)
    ok = terms_read(json_object_get(by, vf_category_name((enum vf_category)c)), f->by_category[c]);
  if (!ok) return memset(f, 0, sizeof *f), VF_EFORMAT;
  f->n_points = (size_t)json_integer_value(n);
  f->r2 = json_number_value(json_object_get(o, "r2"));
  f->max_error = json_number_value(json_object_get(o, "max_error"));
  return 0;
}

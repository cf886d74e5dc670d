/* What `trace --workload` measured, in the file it writes beside the workload
 * (NAME.trace.json): the fit's JSON, written through vf_workload_fit_text() and read back
 * here when the workload loads. */
#include <stdio.h>
#include <string.h>

#include "io/workload_trace.h"

static json_t *terms_json(const double t[VF_WL_TERMS]) {
  json_t *a = json_array();
  for (size_t i = 0; i < VF_WL_TERMS; i++) json_array_append_new(a, json_real(t[i]));
  return a;
}

static json_t *fit_json(const struct vf_wl_fit *f) {
  json_t *by = json_object();
  for (int c = 0; c < VF_CAT_COUNT; c++)
    json_object_set_new(by, vf_category_name((enum vf_category)c), terms_json(f->by_category[c]));
  json_t *o = json_pack("{s:[s,s,s], s:o, s:o, s:o, s:s, s:I, s:f, s:f}", "terms", "bytes", "per_sequence",
                        "per_loss_element", "allocated_bytes", terms_json(f->allocated), "reserved_bytes",
                        terms_json(f->reserved), "breakdown", by, "phase", vf_phase_name(f->phase), "points",
                        (json_int_t)f->n_points, "r2", f->r2, "max_error", f->max_error);
  return o;
}

char *vf_workload_fit_text(const struct vf_wl_fit *f) {
  json_t *o = fit_json(f);
  char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(o);
  return text;
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

int workload_fit_from_json(const json_t *o, struct vf_wl_fit *f) {
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

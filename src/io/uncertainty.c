/* data/uncertainty.json: the estimator's spread per group of setups, read for every
 * estimate and written by bench/spread (core/spread.h says what it holds). */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/diag.h"
#include "base/json_util.h"
#include "core/spread.h"
#include "io/data.h"
#include "vramfit/uncertainty.h"

#define DATA_PATH "uncertainty.json"

/* ---- reading ---- */

/* One kind of a group: {"low": number, "high": number}, -1 < low <= high. */
static int read_spread(json_t *group, enum vf_peak_kind k, size_t i, const char *file, struct vf_spread *out,
                       struct vf_diag *d) {
  const char *name = vf_peak_kind_name(k);
  json_t *o = json_object_get(group, name);
  json_t *low = json_object_get(o, "low"), *high = json_object_get(o, "high");
  if (json_is_number(low) && json_is_number(high)) {
    out->low = json_number_value(low);
    out->high = json_number_value(high);
    if (out->low > -1 && out->low <= out->high && isfinite(out->high)) return 0;
  }
  return diag_at(d, VF_EFORMAT, file, UINT64_MAX,
                 "groups[%zu].%s: expected {\"low\": number, \"high\": number} with -1 < low <= high", i, name);
}

/* The group's method: a class, or VF_SPREAD_ALL_CLASSES for "all". */
static int read_method(json_t *group, size_t i, const char *file, int *cls, struct vf_diag *d) {
  const char *m = json_string_value(json_object_get(group, "method"));
  enum vf_method_class c;
  if (m && strcmp(m, VF_SPREAD_ALL) == 0) return *cls = VF_SPREAD_ALL_CLASSES, 0;
  if (m && vf_method_class_parse(m, &c) == 0) return *cls = (int)c, 0;
  return diag_at(d, VF_EFORMAT, file, UINT64_MAX,
                 "groups[%zu].method: expected one of full, lora, qlora, adapter, all", i);
}

/* How well a group matches framework's class cls: 3 its own group, 2 the framework's, 1
 * every setup's, 0 none. */
static int match(const char *group_fw, int group_cls, const char *framework, int cls) {
  bool all_fw = strcmp(group_fw, VF_SPREAD_ALL) == 0, all_cls = group_cls == VF_SPREAD_ALL_CLASSES;
  if (all_fw) return all_cls ? 1 : 0;
  if (strcmp(group_fw, framework) != 0) return 0;
  return group_cls == cls ? 3 : all_cls ? 2 : 0;
}

/* Reads group i and takes it for every class it matches better than what is there (best:
 * how well each class's group matches so far). */
static int take_group(json_t *group, size_t i, const char *file, const char *framework, int *best,
                      struct vf_uncertainty_table *out, struct vf_diag *d) {
  const char *fw = json_string_value(json_object_get(group, "framework"));
  int cls = VF_SPREAD_ALL_CLASSES, rc;
  if (!fw || !*fw || strlen(fw) >= 32)
    return diag_at(d, VF_EFORMAT, file, UINT64_MAX, "groups[%zu].framework: expected a name", i);
  if ((rc = read_method(group, i, file, &cls, d))) return rc;
  struct vf_uncertainty u = {0};
  for (int k = 0; k < VF_PEAK_COUNT; k++)
    if ((rc = read_spread(group, (enum vf_peak_kind)k, i, file, &u.kind[k], d))) return rc;
  snprintf(u.group, sizeof u.group, "%s/%s", fw,
           cls == VF_SPREAD_ALL_CLASSES ? VF_SPREAD_ALL : vf_method_class_name((enum vf_method_class)cls));
  for (int c = 0; c < VF_CLASS_COUNT; c++) {
    int m = match(fw, cls, framework, c);
    if (m > best[c]) best[c] = m, out->by_class[c] = u;
  }
  return 0;
}

static int read_groups(json_t *root, const char *file, const char *framework, struct vf_uncertainty_table *out,
                       struct vf_diag *d) {
  json_t *groups = json_object_get(root, "groups"), *group;
  if (!json_is_array(groups))
    return diag_at(d, VF_EFORMAT, file, UINT64_MAX, "expected an object with a \"groups\" list");
  int best[VF_CLASS_COUNT] = {0}, rc;
  size_t i;
  json_array_foreach(groups, i, group)
    if ((rc = take_group(group, i, file, framework, best, out, d))) return rc;
  /* every framework falls back to it: a file without it would fail only for some setups */
  int every = 0;
  json_array_foreach(groups, i, group) {
    const char *fw = json_string_value(json_object_get(group, "framework"));
    const char *m = json_string_value(json_object_get(group, "method"));
    every |= strcmp(fw, VF_SPREAD_ALL) == 0 && strcmp(m, VF_SPREAD_ALL) == 0;
  }
  if (!every)
    return diag_at(d, VF_EFORMAT, file, UINT64_MAX,
                   "no group for every setup (\"framework\": \"all\", \"method\": \"all\")");
  return 0;
}

int vf_uncertainty_parse(const char *text, size_t len, const char *file, const char *framework,
                         struct vf_uncertainty_table *out, struct vf_diag *d) {
  char name[32];
  /* a release ("hf@4.46") shares its framework's record */
  snprintf(name, sizeof name, "%.*s", (int)strcspn(framework, "@"), framework);
  json_t *root;
  int rc = parse_json_text(text, len, file, &root, d);
  if (rc) return rc;
  memset(out, 0, sizeof *out);
  rc = read_groups(root, file, name, out, d);
  json_decref(root);
  return rc;
}

int vf_uncertainty_load(const char *framework, struct vf_uncertainty_table *out, struct vf_diag *d) {
  const char *text;
  size_t len;
  if (data_get(DATA_PATH, &text, &len))
    return diag_at(d, VF_ENOTFOUND, DATA_PATH, UINT64_MAX,
                   "missing from the data folder (VRAMFIT_DATA_DIR needs a copy of data/ that has it)");
  int rc = vf_uncertainty_parse(text, len, DATA_PATH, framework, out, d);
  data_release(text);
  return rc;
}

/* ---- writing ---- */

/* Four decimals (0.01%): finer would only be noise in the file's history. */
static json_t *fraction(double v) { return json_real(round(v * 1e4) / 1e4); }

static json_t *spread_json(const struct vf_spread *s) {
  return json_pack("{s:o, s:o}", "low", fraction(s->low), "high", fraction(s->high));
}

static json_t *group_json(const struct spread_group *g) {
  json_t *o = json_pack("{s:s, s:s}", "framework", g->framework, "method",
                        g->cls == VF_SPREAD_ALL_CLASSES ? VF_SPREAD_ALL
                                                        : vf_method_class_name((enum vf_method_class)g->cls));
  for (int k = 0; k < VF_PEAK_COUNT; k++)
    json_object_set_new(o, vf_peak_kind_name((enum vf_peak_kind)k), spread_json(&g->u.kind[k]));
  json_t *sources = json_object();
  for (int s = 0; s < SOURCE_COUNT; s++) {
    const struct spread_part *p = &g->part[s];
    json_t *part = spread_json(&p->spread);
    json_object_set_new(part, "cases", json_integer((json_int_t)p->cases));
    json_object_set_new(part, "from", json_string(p->from));
    json_object_set_new(sources, spread_source_name((enum spread_source)s), part);
  }
  json_object_set_new(o, "sources", sources);
  return o;
}

static const char *const notes[] = {
    "Generated by bench/spread (make uncertainty) from the traced corpus (bench/traced/*.tsv) and the "
    "published cases (../shared/calibration/published.tsv); do not edit by hand.",
    "Each number is the estimator's relative error (est - meas) / meas. An estimate est of a group then "
    "ranges from est / (1 + high) to est / (1 + low), never narrower than 1% either side.",
    "sources: allocated = max_memory_allocated of the traced corpus and the published allocated cases; "
    "replayed = max_memory_reserved of the traced events replayed through vramfit's allocator model (the "
    "event model's misses); reserved, device = the published reserved and nvidia-smi cases.",
    "A source's low and high are its 5th and 95th percentiles, nearest rank: with fewer than 20 cases "
    "those are the minimum and maximum, so every case of the group lies inside. 'from' names the group "
    "whose cases gave it: a group with fewer than 5 cases of a source takes the framework's (FRAMEWORK/all), "
    "and that every setup's (all/all).",
    "allocated = the allocated source. reserved = the envelope of allocated and replayed, compounded "
    "((1 + a)(1 + b) - 1) with the published reserved source: the allocator model's misses on top of the "
    "event model's (the published runs' own event-model misses are counted twice: on the safe side). "
    "device = the envelope of reserved and the published device source (a device peak is a reserved peak "
    "plus a CUDA context of known size).",
    "A framework's setups use the group FRAMEWORK/CLASS (classes: full; lora = LoRA and DoRA; qlora = "
    "LoRA on quantized weights; adapter = LLaMA-Adapter), else FRAMEWORK/all, else all/all.",
};

int uncertainty_write(FILE *f, const struct spread_group *groups, size_t n) {
  json_t *list = json_array(), *notes_json = json_array();
  for (size_t i = 0; i < sizeof notes / sizeof *notes; i++) json_array_append_new(notes_json, json_string(notes[i]));
  for (size_t i = 0; i < n; i++) json_array_append_new(list, group_json(&groups[i]));
  json_t *root = json_pack("{s:o, s:i, s:i, s:o}", "notes", notes_json, "percentile", VF_SPREAD_PERCENTILE,
                           "min_cases", VF_SPREAD_MIN_CASES, "groups", list);
  int rc = root && json_dumpf(root, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6)) == 0 &&
                   fputc('\n', f) != EOF
               ? 0
               : VF_EIO;
  json_decref(root);
  return rc;
}

/* A workload file with everything it names: the main config, the stage files, the factory's
 * module and the encoders' models, each checked to exist before anything is planned. */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "base/fileio.h"
#include "base/json_util.h"
#include "io/doc.h"
#include "io/workload_trace.h"
#include "vramfit/workload.h"

#define MAX_WORKLOAD_BYTES (1u << 20)

/* path relative to the workload's folder (absolute paths as they are). */
static void beside(const struct vf_workload *w, const char *path, char *out, size_t size) {
  if (path[0] == '/' || strcmp(w->dir, ".") == 0) snprintf(out, size, "%s", path);
  else snprintf(out, size, "%s/%s", w->dir, path);
}

static int must_exist(const struct vf_workload *w, const char *path, int line, const char *what, struct vf_diag *d) {
  char full[2 * VF_WL_PATH];
  beside(w, path, full, sizeof full);
  if (path_is_file(full)) return 0;
  return diag_line(d, VF_EINVAL, w->file, line, 1, "%s %s does not exist", what, full);
}

static int check_files(const struct vf_workload *w, struct vf_diag *d) {
  int rc = w->config[0] ? must_exist(w, w->config, w->config_line, "the main config", d) : 0;
  for (size_t s = 0; !rc && s < w->n_stages; s++) {
    char what[96];
    snprintf(what, sizeof what, "stage '%s': its file", w->stages[s].name);
    if (w->stages[s].file[0]) rc = must_exist(w, w->stages[s].file, w->stages[s].file_line, what, d);
  }
  if (!rc && w->factory[0]) {
    char module[VF_WL_PATH];
    snprintf(module, sizeof module, "%.*s", (int)(strrchr(w->factory, ':') - w->factory), w->factory);
    rc = must_exist(w, module, w->factory_line, "factory: the module", d);
  }
  return rc;
}

/* An encoder's model: a path beside the workload when one exists there, else a catalogue name. */
static int load_encoder(struct vf_workload *w, size_t i, struct vf_diag *d) {
  char full[2 * VF_WL_PATH];
  beside(w, w->encoders[i].model, full, sizeof full);
  const char *arg = path_is_file(full) || path_is_dir(full) ? full : w->encoders[i].model;
  struct vf_diag inner;
  vf_diag_clear(&inner);
  int rc = vf_model_load(&w->models[i], arg, &inner);
  if (!rc) return 0;
  char why[sizeof inner.msg + sizeof inner.file + 64];
  vf_diag_format(&inner, why, sizeof why);
  return diag_line(d, rc, w->file, w->encoders[i].line, 1, "encoder '%s': %s", w->encoders[i].name, why);
}

/* What `trace --workload` measured of the factory, from the file it wrote beside the
 * workload, when there is one. */
static int load_fit(struct vf_workload *w, const char *path, struct vf_diag *d) {
  char file[VF_WL_PATH + 16], *text;
  size_t len;
  vf_workload_trace_path(path, file, sizeof file);
  if (!path_is_file(file)) return 0;
  int rc = file_read(file, MAX_WORKLOAD_BYTES, &text, &len, d);
  if (rc) return rc;
  json_t *o = NULL;
  rc = parse_json_text(text, len, file, &o, d);
  free(text);
  if (!rc && workload_fit_from_json(json_object_get(o, "fit"), &w->fit))
    rc = diag_at(d, VF_EFORMAT, file, UINT64_MAX, "no usable \"fit\": run 'vramfit trace --workload %s' again",
                 path);
  json_decref(o);
  return rc;
}

int vf_workload_load(struct vf_workload *w, const char *path, struct vf_diag *d) {
  char *text, copy[VF_WL_PATH];
  size_t len;
  int rc = file_read(path, MAX_WORKLOAD_BYTES, &text, &len, d);
  if (rc) return rc;
  snprintf(copy, sizeof copy, "%s", path);
  rc = vf_workload_parse(w, text, len, path, dirname(copy), d);
  free(text);
  if (!rc) rc = check_files(w, d);
  for (size_t i = 0; !rc && i < w->n_encoders; i++) rc = load_encoder(w, i, d);
  w->models_loaded = !rc;
  if (!rc) rc = load_fit(w, path, d);
  return rc;
}

/* A whole number at a dotted path of a YAML or JSON file; -1 when there is none. */
static int64_t value_at(const char *file, const char *path) {
  char *text;
  size_t len;
  struct vf_diag d;
  if (!path[0] || file_read(file, DOC_MAX_BYTES, &text, &len, &d)) return -1;
  struct doc doc;
  int64_t v = -1;
  struct yfind f;
  struct vf_value val;
  if (doc_open(&doc, file, text, len, &d) == 0) {
    if (ytree_find(&doc.t, path, &f, &d) == 0 && f.node && ynode_value(f.node, &val) && val.kind == VF_VALUE_INT &&
        val.i >= 0)
      v = val.i;
    doc_close(&doc);
  }
  free(text);
  return v;
}

void vf_workload_given(const struct vf_workload *w, struct vf_wl_point given[VF_WL_MAX_STAGES]) {
  size_t n = w->n_stages ? w->n_stages : 1;
  char config[2 * VF_WL_PATH], stage[2 * VF_WL_PATH];
  beside(w, w->config, config, sizeof config);
  for (size_t s = 0; s < n; s++) {
    stage[0] = '\0';
    if (s < w->n_stages && w->stages[s].file[0]) beside(w, w->stages[s].file, stage, sizeof stage);
    for (size_t k = 0; k < w->n_knobs; k++) {
      const char *file = w->knobs[k].in_stage ? stage : w->config[0] ? config : "";
      given[s].values[k] = file[0] ? value_at(file, w->knobs[k].path) : -1;
    }
  }
}

/* A workload's knobs and their bounds; what a micro batch holds at a point. */
#include <stdio.h>
#include <string.h>

#include "base/diag.h"
#include "vramfit/workload.h"

void vf_workload_init(struct vf_workload *w) {
  memset(w, 0, sizeof *w);
  snprintf(w->framework, sizeof w->framework, "hf");
  w->weights = VF_PREC_FP32;
  w->amp = VF_PREC_NONE;
  w->optimizer = VF_OPT_ADAMW;
  w->batch = w->accumulation = -1;
  for (size_t i = 0; i < VF_WL_MAX_ENCODERS; i++) vf_model_init(&w->models[i]);
}

void vf_workload_cleanup(struct vf_workload *w) {
  for (size_t i = 0; i < VF_WL_MAX_ENCODERS; i++) vf_model_cleanup(&w->models[i]);
  w->models_loaded = false;
}

int vf_workload_knob(const struct vf_workload *w, const char *name) {
  for (size_t i = 0; i < w->n_knobs; i++)
    if (strcmp(w->knobs[i].name, name) == 0) return (int)i;
  return -1;
}

void vf_workload_bounds(const struct vf_workload *w, size_t stage, size_t k, int64_t *min, int64_t *max) {
  const struct vf_wl_bound *b = stage < w->n_stages ? &w->stages[stage].bounds[k] : NULL;
  *min = b && b->set ? b->min : w->knobs[k].min;
  *max = b && b->set ? b->max : w->knobs[k].max;
}

static int eval_at(const struct vf_workload *w, const struct vf_wl_expr *e, const struct vf_wl_point *pt,
                   uint64_t *out, struct vf_diag *d) {
  int64_t v;
  int rc = vf_wl_expr_eval(w, e, pt, &v);
  if (rc)
    return diag_line(d, VF_ERANGE, w->file, e->line, e->col, "'%s' cannot be evaluated here (negative, "
                     "division by zero or too large)", e->text);
  *out = (uint64_t)v;
  return 0;
}

int vf_workload_shape(const struct vf_workload *w, const struct vf_wl_point *pt, struct vf_wl_shape *out,
                      struct vf_diag *d) {
  memset(out, 0, sizeof *out);
  uint64_t per_anchor = 1;
  int rc = w->sequences.n ? eval_at(w, &w->sequences, pt, &per_anchor, d) : 0;
  if (rc) return rc;
  if (__builtin_mul_overflow((uint64_t)pt->values[w->batch], per_anchor, &out->sequences))
    return diag_line(d, VF_ERANGE, w->file, w->sequences.line, w->sequences.col, "sequences overflow");
  for (size_t i = 0; i < w->n_loss; i++) {
    uint64_t elems = 1, dim = 0;
    for (uint32_t k = 0; k < w->loss[i].ndim; k++) {
      if ((rc = eval_at(w, &w->loss[i].dims[k], pt, &dim, d))) return rc;
      if (__builtin_mul_overflow(elems, dim, &elems))
        return diag_line(d, VF_ERANGE, w->file, w->loss[i].line, 1, "loss tensor '%s' overflows", w->loss[i].name);
    }
    out->loss_elems += elems;
  }
  return 0;
}

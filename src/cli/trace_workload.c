/* `vramfit trace --workload FILE`: the user's own model factory, run on the CPU against the
 * fake CUDA device at a few knob settings (python -m vramfit.trace.workload), each run
 * replayed through the caching-allocator model; the fit of how the peak grows goes into
 * the file beside the workload, where `plan --workload` finds it. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fileio.h"
#include "cli/trace_run.h"
#include "cli/workload_cli.h"

struct wl_trace {
  struct vf_wl_point points[VF_WL_MAX_POINTS];
  size_t n;
  struct vf_wl_measure m[VF_WL_MAX_POINTS];
  uint64_t estimate[VF_WL_MAX_POINTS]; /* the spec's estimate of the allocated peak; 0: none */
  struct vf_wl_fit fit;
  json_t *summary;
  char dir[64];
};

static void scratch_remove(struct wl_trace *t) {
  char p[128];
  for (size_t i = 0; i < t->n; i++) {
    snprintf(p, sizeof p, "%s/events-%zu", t->dir, i);
    unlink(p);
  }
  snprintf(p, sizeof p, "%s/setup.json", t->dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/summary.json", t->dir);
  unlink(p);
  rmdir(t->dir);
}

static json_t *knobs_json(const struct vf_workload *w, const struct vf_wl_point *pt) {
  json_t *o = json_object();
  for (size_t k = 0; k < w->n_knobs; k++)
    json_object_set_new(o, w->knobs[k].name, json_integer((json_int_t)pt->values[k]));
  return o;
}

/* The setup python/vramfit/trace/workload.py reads: the factory by absolute path, so that
 * the tracer may run from anywhere. */
static int write_setup(const struct workload_context *c, const struct wl_trace *t, const char *path) {
  const struct vf_workload *w = &c->w;
  char module[VF_WL_PATH], full[PATH_MAX], root[PATH_MAX];
  const char *colon = strrchr(w->factory, ':');
  snprintf(module, sizeof module, "%.*s", (int)(colon - w->factory), w->factory);
  char rel[2 * VF_WL_PATH];
  if (module[0] == '/') snprintf(rel, sizeof rel, "%s", module);
  else snprintf(rel, sizeof rel, "%s/%s", w->dir, module);
  if (!realpath(rel, full) || !realpath(w->dir, root)) return VF_EIO;
  json_t *pts = json_array();
  for (size_t i = 0; i < t->n; i++) json_array_append_new(pts, knobs_json(w, &t->points[i]));
  json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:s, s:s, s:s}", "factory", full, "function", colon + 1, "root", root,
                        "points", pts, "weights", vf_enum_name(VF_ENUM_PRECISION, w->weights), "amp",
                        vf_enum_name(VF_ENUM_PRECISION, w->amp), "optimizer",
                        vf_enum_name(VF_ENUM_OPTIMIZER, w->optimizer));
  const struct vf_gpu_spec *g = &c->env.gpu;
  if (g->cc_major)
    json_object_set_new(o, "gpu", json_pack("{s:s, s:[i,i], s:I}", "name", g->full_name, "capability", g->cc_major,
                                            g->cc_minor, "total_bytes", (json_int_t)g->capacity_bytes));
  int rc = json_dump_file(o, path, 0) ? VF_EIO : 0;
  json_decref(o);
  return rc;
}

static enum vf_phase phase_named(const char *name) {
  for (int p = 0; p < VF_PHASE_COUNT; p++)
    if (strcmp(vf_phase_name((enum vf_phase)p), name) == 0) return (enum vf_phase)p;
  return VF_PHASE_BACKWARD;
}

/* Point i's events, replayed. */
static int measure(const struct workload_context *c, struct wl_trace *t, size_t i, struct vf_diag *d) {
  char path[128], *text;
  size_t len;
  snprintf(path, sizeof path, "%s/events-%zu", t->dir, i);
  struct vf_trace ev;
  vf_trace_init(&ev);
  int rc = file_read(path, SIZE_MAX / 2, &text, &len, d);
  if (!rc) {
    rc = vf_trace_parse(text, len, &ev, d);
    free(text);
  }
  struct vf_trace_result r;
  if (!rc) rc = vf_trace_replay(&ev, &c->env.conf, &r);
  struct vf_wl_measure *m = &t->m[i];
  if (!rc) rc = vf_workload_shape(&c->w, &t->points[i], &m->shape, d);
  if (!rc) {
    m->allocated = r.allocated_peak;
    m->reserved = r.reserved_peak;
    memcpy(m->by_category, r.by_category, sizeof m->by_category);
    m->phase = phase_named(r.peak_phase < ev.nphases ? ev.phases[r.peak_phase] : "load");
  }
  vf_trace_cleanup(&ev);
  return rc;
}

/* The spec's own estimate at each point, when the workload also gives its parts (the fit
 * of an earlier trace, which would stand in for them, is set aside). */
static int estimate_points(struct workload_context *c, struct wl_trace *t, struct vf_diag *d) {
  c->w.fit.n_points = 0;
  for (size_t i = 0; i < t->n && c->w.n_encoders; i++) {
    struct vf_estimate e;
    int rc = vf_workload_estimate(&c->w, &t->points[i], &c->wl_env, &e, d);
    if (rc) return rc;
    t->estimate[i] = e.allocated_peak;
  }
  return 0;
}

static double error_of(const struct wl_trace *t, size_t i) {
  return (double)t->estimate[i] / (double)t->m[i].allocated - 1;
}

static json_t *result_json(const struct workload_context *c, const struct wl_trace *t, const char *file) {
  const struct vf_workload *w = &c->w;
  json_t *pts = json_array();
  for (size_t i = 0; i < t->n; i++) {
    json_t *p = json_pack("{s:o, s:I, s:I, s:I, s:I, s:s}", "knobs", knobs_json(w, &t->points[i]), "sequences",
                          (json_int_t)t->m[i].shape.sequences, "loss_elements", (json_int_t)t->m[i].shape.loss_elems,
                          "allocated_bytes", (json_int_t)t->m[i].allocated, "reserved_bytes",
                          (json_int_t)t->m[i].reserved, "phase", vf_phase_name(t->m[i].phase));
    json_object_set_new(p, "estimate_allocated_bytes",
                        t->estimate[i] ? json_integer((json_int_t)t->estimate[i]) : json_null());
    json_object_set_new(p, "estimate_error", t->estimate[i] ? json_real(error_of(t, i)) : json_null());
    json_array_append_new(pts, p);
  }
  char *fit = vf_workload_fit_text(&t->fit);
  json_t *o = json_pack("{s:s, s:s, s:O, s:O, s:o, s:o, s:s}", "workload", w->name[0] ? w->name : w->file, "factory",
                        w->factory, "torch", json_object_get(t->summary, "torch"), "seconds",
                        json_object_get(t->summary, "seconds"), "points", pts, "fit",
                        fit ? json_loads(fit, 0, NULL) : NULL, "file", file);
  vf_free(fit);
  return o;
}

static void fit_text(const struct vf_wl_fit *f) {
  char fixed[32], seq[32];
  cli_format_bytes(f->allocated[0] > 0 ? (uint64_t)f->allocated[0] : 0, fixed, sizeof fixed);
  cli_format_bytes(f->allocated[1] > 0 ? (uint64_t)f->allocated[1] : 0, seq, sizeof seq);
  printf("\nfit of the allocated peak: %s + %s per sequence + %.1f B per loss element\n", fixed, seq,
         f->allocated[2]);
  printf("  over %zu points: R^2 %.5f, largest error %.2f%%\n", f->n_points, f->r2, 100 * f->max_error);
}

static void result_text(const struct workload_context *c, const struct wl_trace *t, const char *file) {
  const struct vf_workload *w = &c->w;
  printf("%s: traced %s (torch %s) at %zu points in %.1f s\n\n", w->name[0] ? w->name : w->file, w->factory,
         json_string_value(json_object_get(t->summary, "torch")), t->n,
         json_number_value(json_object_get(t->summary, "seconds")));
  for (size_t k = 0; k < w->n_knobs; k++)
    if (w->knobs[k].role != VF_WL_ACCUMULATION) printf(" %12s", w->knobs[k].name);
  printf(" %10s %12s %12s  %-9s%s\n", "sequences", "allocated", "reserved", "phase",
         w->n_encoders ? "     estimate   diff" : "");
  for (size_t i = 0; i < t->n; i++) {
    char a[32], r[32], s[32], e[32];
    for (size_t k = 0; k < w->n_knobs; k++)
      if (w->knobs[k].role != VF_WL_ACCUMULATION) printf(" %12lld", (long long)t->points[i].values[k]);
    cli_group_digits(t->m[i].shape.sequences, s, sizeof s);
    cli_format_bytes(t->m[i].allocated, a, sizeof a);
    cli_format_bytes(t->m[i].reserved, r, sizeof r);
    printf(" %10s %12s %12s  %-9s", s, a, r, vf_phase_name(t->m[i].phase));
    if (t->estimate[i]) {
      cli_format_bytes(t->estimate[i], e, sizeof e);
      printf(" %12s %+5.1f%%", e, 100 * error_of(t, i));
    }
    printf("\n");
  }
  fit_text(&t->fit);
  printf("written to %s\n", file);
}

/* Runs the tracer and measures every point; the scratch folder is t->dir. */
static int run_points(struct workload_context *c, struct wl_trace *t, const struct trace_env *env,
                      double timeout_s) {
  char setup[96], summary[96];
  snprintf(setup, sizeof setup, "%s/setup.json", t->dir);
  snprintf(summary, sizeof summary, "%s/summary.json", t->dir);
  if (write_setup(c, t, setup)) return cli_error("trace", EXIT_ENV, "%s: cannot write the tracer's setup", setup);
  const char *args[] = {"vramfit.trace.workload", "--setup", setup, "--out", t->dir, NULL};
  int code = trace_run_module(env, args, timeout_s);
  if (code) return code;
  json_error_t je;
  if (!(t->summary = json_load_file(summary, 0, &je)))
    return cli_error("trace", EXIT_INTERNAL, "the tracer's summary is unreadable: %s", je.text);
  struct vf_diag d;
  vf_diag_clear(&d);
  for (size_t i = 0; i < t->n; i++)
    if (measure(c, t, i, &d)) return cli_diag_error("trace", VF_EFORMAT, &d), EXIT_INTERNAL;
  if (vf_workload_fit(t->m, t->n, &t->fit))
    return cli_error("trace", EXIT_BAD_INPUT, "%s: the %zu points traced cannot tell the fit's terms apart: give "
                     "trace.points that differ in sequences and in the loss's size", c->w.file, t->n);
  if (estimate_points(c, t, &d)) return cli_diag_error("trace", VF_EINVAL, &d);
  return EXIT_OK;
}

static int save(const struct workload_context *c, const struct wl_trace *t, const char *file) {
  json_t *o = result_json(c, t, file);
  char *text = json_dumps(o, JSON_INDENT(2));
  int rc = text ? file_write(file, text, strlen(text)) : VF_ENOMEM;
  free(text);
  json_decref(o);
  return rc;
}

static int trace_context(struct workload_context *c, struct wl_trace *t, bool json, double timeout_s) {
  if (!c->w.factory[0])
    return cli_error("trace", EXIT_BAD_INPUT, "%s: the workload names no model.factory to trace", c->w.file);
  struct trace_env env;
  struct vf_framework_spec spec;
  vf_framework_spec_parse(c->w.framework, &spec, NULL);
  int code = trace_env_find(&env, spec.name);
  if (code) return code;
  const char *tmp = getenv("TMPDIR");
  snprintf(t->dir, sizeof t->dir, "%s/vramfit-trace-XXXXXX", tmp && *tmp && strlen(tmp) < 40 ? tmp : "/tmp");
  if (!mkdtemp(t->dir)) return cli_error("trace", EXIT_ENV, "cannot create a scratch folder in $TMPDIR");
  t->n = vf_workload_trace_points(&c->w, t->points);
  code = run_points(c, t, &env, timeout_s);
  scratch_remove(t);
  if (code) return code;
  char file[VF_WL_PATH + 16];
  vf_workload_trace_path(c->w.file, file, sizeof file);
  if (save(c, t, file)) return cli_error("trace", EXIT_ENV, "%s: cannot write the measurement", file);
  if (json) return cli_print_json(result_json(c, t, file));
  result_text(c, t, file);
  return EXIT_OK;
}

int trace_workload(struct setup_request *r, const char *file, bool json, double timeout_s) {
  struct workload_context *c = calloc(1, sizeof *c);
  struct wl_trace *t = calloc(1, sizeof *t);
  int code = c && t ? workload_context_load(r, file, c) : cli_error("trace", EXIT_INTERNAL, "out of memory");
  if (code == EXIT_OK) {
    code = trace_context(c, t, json, timeout_s);
    workload_context_cleanup(c);
  }
  if (t) json_decref(t->summary);
  free(c), free(t);
  return code;
}

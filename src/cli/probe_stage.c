/* probe --workload FILE --stage NAME (see probe_stage.h). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "cli/probe_run.h"
#include "cli/probe_stage.h"
#include "cli/workload_cli.h"

#define NAME "probe"

static int stage_index(const struct vf_workload *w, const char *name) {
  for (size_t i = 0; i < w->n_stages; i++)
    if (strcmp(w->stages[i].name, name) == 0) return (int)i;
  return -1;
}

static int no_stage(const struct vf_workload *w, const char *name) {
  char list[512] = "";
  for (size_t i = 0; i < w->n_stages; i++) {
    size_t len = strlen(list);
    snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", w->stages[i].name);
  }
  return cli_usage_error(NAME, "--stage %s: %s has no such stage (%s)", name, w->file,
                         w->n_stages ? list : "it has no stages");
}

/* The plan's values for every stage; the stage's own whether or not everything fits (the
 * real GPU is the judge here). */
static int plan_stage(const struct workload_context *c, size_t st, struct vf_wl_point *out) {
  struct vf_wl_plan *p = malloc(sizeof *p);
  struct vf_wl_point *given = calloc(VF_WL_MAX_STAGES, sizeof *given);
  if (!p || !given) return free(p), free(given), cli_error(NAME, EXIT_INTERNAL, "out of memory");
  vf_workload_given(&c->w, given);
  struct vf_wl_plan_request req = {&c->w, c->wl_env, c->env.gpu.capacity_bytes, 0, 0, given, &c->env.uncertainty, 0};
  struct vf_diag d;
  vf_diag_clear(&d);
  int rc = vf_workload_plan(&req, p, &d);
  if (!rc) *out = p->stages[st].point;
  free(p), free(given);
  return rc ? cli_diag_error(NAME, rc, &d) : EXIT_OK;
}

static int peak_at(const struct workload_context *c, const struct vf_wl_point *pt, int64_t batch, uint64_t *peak) {
  struct vf_wl_point at = *pt;
  at.values[c->w.batch] = batch;
  struct vf_estimate e;
  int rc = vf_workload_estimate(&c->w, &at, &c->wl_env, &e, NULL);
  *peak = e.device_peak;
  return rc;
}

/* The largest micro batch in [min, max] whose estimate fits the GPU (by the estimate itself,
 * as probe --model starts), and the estimate's curve around it, fitted where
 * vf_probe_prior_batches says as probe --model fits its own. */
static void estimate_hint(const struct workload_context *c, struct probe_stage *s, uint64_t min, uint64_t max) {
  uint64_t cap = c->env.gpu.capacity_bytes, peak;
  int64_t lo = (int64_t)min, hi = (int64_t)max, best = 0;
  if (hi > c->w.knobs[c->w.batch].max) hi = c->w.knobs[c->w.batch].max;
  while (lo <= hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (peak_at(c, &s->point, mid, &peak)) return;
    if (peak <= cap) best = mid, lo = mid + 1;
    else hi = mid - 1;
  }
  s->hint = (uint64_t)best;
  if (!best) return;
  uint64_t batches[3], peaks[3];
  unsigned n = vf_probe_prior_batches(s->hint, batches);
  for (unsigned i = 0; i < n; i++)
    if (peak_at(c, &s->point, (int64_t)batches[i], &peaks[i])) return;
  vf_probe_prior_fit(batches, peaks, n, &s->prior);
}

/* {knob} in the command becomes the stage's value, and VRAMFIT_<KNOB> holds it. */
static int fill_command(const struct vf_workload *w, struct probe_stage *s, char **cmd) {
  size_t n = 0;
  while (cmd[n]) n++;
  if (!(s->cmd = calloc(n + 1, sizeof *s->cmd))) return VF_ENOMEM;
  for (size_t i = 0; i < n; i++)
    if (!(s->cmd[i] = strdup(cmd[i]))) return VF_ENOMEM;
  for (size_t k = 0; k < w->n_knobs; k++) {
    if ((int)k == w->batch) continue;
    char key[VF_WL_NAME + 2], value[24], var[VF_WL_NAME + 8];
    snprintf(key, sizeof key, "{%s}", w->knobs[k].name);
    snprintf(value, sizeof value, "%lld", (long long)s->point.values[k]);
    for (size_t i = 0; i < n; i++) {
      char *next = probe_substitute(s->cmd[i], key, value);
      if (!next) return VF_ENOMEM;
      free(s->cmd[i]);
      s->cmd[i] = next;
    }
    snprintf(var, sizeof var, "VRAMFIT_%s", w->knobs[k].name);
    for (char *p = var; *p; p++) *p = (char)toupper((unsigned char)*p);
    if (setenv(var, value, 1)) return VF_ENOMEM;
    if (w->knobs[k].role == VF_WL_KNOB) json_object_set_new(s->knobs, w->knobs[k].name, json_integer(s->point.values[k]));
  }
  return 0;
}

static int prepare(struct workload_context *c, const char *workload, const char *stage, char **cmd, uint64_t min,
                   uint64_t max, struct probe_stage *s) {
  int st = stage_index(&c->w, stage);
  if (st < 0) return no_stage(&c->w, stage);
  int code = plan_stage(c, (size_t)st, &s->point);
  if (code) return code;
  snprintf(s->name, sizeof s->name, "%s", stage);
  s->planned = (uint64_t)s->point.values[c->w.batch];
  int64_t accumulation = c->w.accumulation >= 0 ? s->point.values[c->w.accumulation] : 1;
  s->effective = s->planned * (uint64_t)(accumulation > 0 ? accumulation : 1);
  s->gpu = c->env.gpu;
  if (!(s->knobs = json_object()) || fill_command(&c->w, s, cmd))
    return cli_error(NAME, EXIT_INTERNAL, "out of memory");
  estimate_hint(c, s, min, max);
  json_t *setup = json_pack("{s:s, s:s, s:O}", "workload", workload, "stage", stage, "knobs", s->knobs);
  s->setup = setup ? json_dumps(setup, JSON_COMPACT) : NULL;
  json_decref(setup);
  return s->setup ? EXIT_OK : cli_error(NAME, EXIT_INTERNAL, "out of memory");
}

int probe_stage_prepare(struct setup_request *r, const char *workload, const char *stage, char **cmd,
                        uint64_t min, uint64_t max, struct probe_stage *s) {
  memset(s, 0, sizeof *s);
  struct vf_diag d;
  vf_diag_clear(&d);
  if (!r->gpu && vf_gpu_detect(&s->gpu, &d) == 0) r->gpu = "auto";
  if (!r->gpu) return cli_usage_error(NAME, "--stage: no GPU found to plan the stage for: give --gpu G");
  struct workload_context *c = calloc(1, sizeof *c);
  if (!c) return cli_error(NAME, EXIT_INTERNAL, "out of memory");
  int code = workload_context_load(r, workload, c);
  if (code == EXIT_OK) {
    code = prepare(c, workload, stage, cmd, min, max, s);
    workload_context_cleanup(c);
  }
  free(c);
  return code;
}

void probe_stage_cleanup(struct probe_stage *s) {
  for (size_t i = 0; s->cmd && s->cmd[i]; i++) free(s->cmd[i]);
  free(s->cmd);
  free(s->setup);
  json_decref(s->knobs);
  memset(s, 0, sizeof *s);
}

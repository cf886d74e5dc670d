/* The run history as the commands use it (history_cli.h). */
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "cli/history_cli.h"

/* ---- writing ---- */

/* Characters a shell takes literally outside quotes. */
static bool plain_word(const char *s) {
  if (!*s) return false;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && !strchr("-_./=:,+@%{}", *s)) return false;
  return true;
}

void history_command_line(char *const argv[], char *buf, size_t size) {
  size_t n = 0;
  buf[0] = '\0';
  for (size_t i = 0; argv[i] && n < size; i++) {
    if (i) n += (size_t)snprintf(buf + n, size - n, " ");
    if (plain_word(argv[i])) {
      if (n < size) n += (size_t)snprintf(buf + n, size - n, "%s", argv[i]);
      continue;
    }
    /* Single quotes keep everything but a single quote, which becomes '\'' */
    if (n < size) n += (size_t)snprintf(buf + n, size - n, "'");
    for (const char *p = argv[i]; *p && n < size; p++)
      n += (size_t)snprintf(buf + n, size - n, *p == '\'' ? "'\\''" : "%c", *p);
    if (n < size) n += (size_t)snprintf(buf + n, size - n, "'");
  }
  if (n >= size && size > 4) memcpy(buf + size - 4, "...", 4);
}

struct vf_history *history_open_for_writing(const char *cmd) {
  char dir[1024];
  struct vf_history *h = NULL;
  struct vf_diag d;
  vf_diag_clear(&d);
  if (vf_history_dir(dir, sizeof dir))
    fprintf(stderr, "vramfit %s: warning: runs are not kept in the history: neither XDG_STATE_HOME "
                    "nor HOME says where\n", cmd);
  else if (vf_history_open(dir, true, &h, &d)) {
    char why[1200];
    vf_diag_format(&d, why, sizeof why);
    fprintf(stderr, "vramfit %s: warning: runs are not kept in the history: %s\n", cmd, why);
  }
  return h;
}

void history_gpu(struct vf_nvml *nvml, int gpu, struct vf_run *r) {
  if (!nvml) return;
  int cuda;
  vf_nvml_driver(nvml, r->driver, sizeof r->driver, &cuda);
  unsigned index = (unsigned)gpu;
  struct vf_gpu_sample s;
  if ((gpu < 0 && vf_nvml_visible(nvml, &index, NULL)) || vf_nvml_sample(nvml, index, &s)) return;
  snprintf(r->gpu, sizeof r->gpu, "%s", s.name);
  snprintf(r->gpu_uuid, sizeof r->gpu_uuid, "%s", s.uuid);
}

void history_add(struct vf_history *h, const char *cmd, const struct vf_run *r) {
  static bool warned;
  struct vf_diag d;
  vf_diag_clear(&d);
  if (!h || vf_history_add(h, r, &d) == 0 || warned) return;
  char why[1200];
  vf_diag_format(&d, why, sizeof why);
  fprintf(stderr, "vramfit %s: warning: a run was not kept in the history: %s\n", cmd, why);
  warned = true;
}

/* ---- the setup ---- */

/* A path that exists, made absolute; else the model it resolved to (a catalogue name, whichever
 * alias or Hub id named it, or the Hub id of a cached model), in lower case. */
static json_t *model_key(const char *model, const struct vf_model *resolved) {
  char path[PATH_MAX];
  if ((path_is_file(model) || path_is_dir(model)) && realpath(model, path)) return json_string(path);
  char *lower = strdup(resolved->name ? resolved->name : model);
  for (char *p = lower; p && *p; p++) *p = (char)tolower((unsigned char)*p);
  json_t *v = lower ? json_string(lower) : NULL;
  free(lower);
  return v;
}

static json_t *enum_value(enum vf_enum_kind kind, int value) { return json_string(vf_enum_name(kind, value)); }

char *history_setup_json(const struct setup_request *r, const char *model, const struct setup_context *c) {
  /* The weights the run loads: the framework's default ones when no --weights was given. */
  struct vf_setup resolved = r->setup, keyed = r->setup;
  vf_setup_resolve(&resolved, &c->model, c->profile);
  keyed.weights = resolved.weights;
  const struct vf_setup *s = &keyed;
  char targets[128], offload[64];
  setup_targets_text(s->lora_targets, targets, sizeof targets);
  vf_offload_format(s->offload, offload, sizeof offload);
  json_t *o = json_pack("{s:o, s:s, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:I, s:s, s:o, s:o, s:o, s:o,"
                        " s:I, s:I, s:I, s:I, s:o, s:s, s:s}",
                        "model", model_key(model, &c->model), "framework", r->framework, "seq", (json_int_t)s->seq,
                        "accumulation", (json_int_t)s->accumulation, "task", enum_value(VF_ENUM_TASK, s->task),
                        "weights", enum_value(VF_ENUM_PRECISION, s->weights), "amp",
                        enum_value(VF_ENUM_PRECISION, s->amp), "optimizer",
                        enum_value(VF_ENUM_OPTIMIZER, s->optimizer), "method",
                        enum_value(VF_ENUM_METHOD, s->method), "lora_r", (json_int_t)s->lora_r,
                        "lora_targets", targets, "quant", enum_value(VF_ENUM_QUANT, s->quant), "grad_ckpt",
                        enum_value(VF_ENUM_CKPT, s->grad_ckpt), "attention",
                        enum_value(VF_ENUM_ATTENTION, s->attention), "lengths",
                        enum_value(VF_ENUM_LENGTHS, s->lengths), "gpus", (json_int_t)s->gpus, "tp",
                        (json_int_t)s->tp, "pp", (json_int_t)s->pp, "cp", (json_int_t)s->cp, "shard",
                        enum_value(VF_ENUM_SHARD, s->shard), "offload", offload, "alloc_conf",
                        setup_alloc_conf_text(r));
  char *text = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(o);
  return text;
}

/* ---- reading ---- */

/* The store to read from; NULL when there is none yet (quietly) or it cannot be read (with
 * a warning naming cmd). */
static void unreadable(const char *cmd, int rc, const struct vf_diag *d) {
  if (!rc || rc == VF_ENOTFOUND) return;
  char why[1200];
  vf_diag_format(d, why, sizeof why);
  fprintf(stderr, "vramfit %s: warning: the history cannot be read: %s\n", cmd, why);
}

static struct vf_history *open_for_reading(const char *cmd) {
  char dir[1024];
  struct vf_history *h = NULL;
  struct vf_diag d;
  vf_diag_clear(&d);
  if (vf_history_dir(dir, sizeof dir)) return NULL;
  unreadable(cmd, vf_history_open(dir, false, &h, &d), &d);
  return h;
}

void history_stamp(double when, const char *format, bool utc, char *buf, size_t size) {
  time_t t = (time_t)when;
  struct tm tm;
  if (!(utc ? gmtime_r(&t, &tm) : localtime_r(&t, &tm)) || !strftime(buf, size, format, &tm))
    snprintf(buf, size, "?");
}

void history_note_find(const struct setup_request *r, const char *model, const struct setup_context *ctx,
                       struct history_note *n) {
  memset(n, 0, sizeof *n);
  char *setup = history_setup_json(r, model, ctx);
  struct vf_history *h = setup ? open_for_reading(r->cmd) : NULL;
  struct vf_diag d;
  vf_diag_clear(&d);
  int rc = h ? vf_history_measured(h, setup, &n->run, &d) : VF_ENOTFOUND;
  unreadable(r->cmd, rc, &d);
  n->found = rc == 0;
  vf_history_close(h);
  free(setup);
  if (!n->found) return;
  struct vf_setup at = r->setup;
  at.batch = n->run.batch;
  struct vf_estimate e;
  if (vf_estimate(&ctx->model, &at, ctx->profile, &ctx->conf, &e, &d)) {
    history_note_cleanup(n);
    return;
  }
  n->estimate_bytes = e.device_peak;
  if (vf_calibration_ratio(&e, n->run.peak_device_bytes, &n->ratio)) n->ratio = 0;
}

double history_note_ratio(struct history_note *n, const char *cmd) {
  if (n->ratio > 0) {
    n->calibrated = true;
    return n->ratio;
  }
  if (n->found) {
    fprintf(stderr, "vramfit %s: warning: --calibrate: the measured run (batch %llu) leaves nothing "
                    "batch-dependent to scale; the estimate is not calibrated\n",
            cmd, (unsigned long long)n->run.batch);
  } else {
    fprintf(stderr, "vramfit %s: warning: --calibrate: no run of this setup was measured on this "
                    "machine ('vramfit probe --model ...' measures one); the estimate is not "
                    "calibrated\n", cmd);
  }
  return 0;
}

static double error_of(const struct history_note *n) {
  return ((double)n->estimate_bytes - (double)n->run.peak_device_bytes) / (double)n->run.peak_device_bytes;
}

void history_note_print(const struct history_note *n) {
  if (!n->found) return;
  char peak[32], day[32];
  cli_format_bytes(n->run.peak_device_bytes, peak, sizeof peak);
  history_stamp(n->run.when, "%Y-%m-%d", false, day, sizeof day);
  double err = error_of(n);
  printf("\nmeasured %s at batch %llu on %s, %s; this estimate was %.0f%% %s\n", peak,
         (unsigned long long)n->run.batch, n->run.gpu[0] ? n->run.gpu : "an unnamed GPU", day,
         fabs(err) * 100, err >= 0 ? "high" : "low");
  if (n->calibrated)
    printf("calibrated: the batch-dependent part (activations, temporaries) scaled by %.3f, as "
           "measured at batch %llu\n", n->ratio, (unsigned long long)n->run.batch);
}

void history_note_json(const struct history_note *n, json_t *o) {
  if (!n->found) return;
  char when[32];
  history_stamp(n->run.when, HISTORY_UTC, true, when, sizeof when);
  json_object_set_new(o, "measured",
                      json_pack("{s:s, s:I, s:I, s:s, s:I, s:f}", "when", when, "batch",
                                (json_int_t)n->run.batch, "peak_device_bytes",
                                (json_int_t)n->run.peak_device_bytes, "gpu", n->run.gpu,
                                "estimate_device_bytes", (json_int_t)n->estimate_bytes, "error",
                                round(error_of(n) * 1e4) / 1e4));
  if (n->calibrated)
    json_object_set_new(o, "calibration", json_pack("{s:f, s:I}", "batch_part_ratio", n->ratio,
                                                    "measured_batch", (json_int_t)n->run.batch));
}

void history_note_cleanup(struct history_note *n) {
  vf_run_cleanup(&n->run);
  n->found = false;
}

/* ---- plans ---- */

/* The project of path (NULL: none) into buf; "" when it cannot be told. */
static const char *project_of(const char *path, char *buf, size_t size) {
  buf[0] = '\0';
  return path && vf_history_project(path, buf, size) == 0 ? buf : NULL;
}

void history_save_plan(const char *label, json_t *plan, const char *config) {
  char *text = json_dumps(plan, JSON_COMPACT);
  struct vf_history *h = text ? history_open_for_writing("plan") : NULL;
  struct vf_diag d;
  vf_diag_clear(&d);
  char here[PATH_MAX], of_config[PATH_MAX];
  if (h && vf_history_save_plan(h, label, text, project_of(".", here, sizeof here),
                                project_of(config, of_config, sizeof of_config), &d)) {
    char why[1200];
    vf_diag_format(&d, why, sizeof why);
    fprintf(stderr, "vramfit plan: warning: the plan was not kept for 'vramfit doctor': %s\n", why);
  }
  vf_history_close(h);
  free(text);
}

int history_last_plan(const char *cmd, char **json, char **about) {
  *json = *about = NULL;
  char here[PATH_MAX];
  struct vf_history *h = project_of(".", here, sizeof here) ? open_for_reading(cmd) : NULL;
  if (!h) return VF_ENOTFOUND;
  char *label;
  double when;
  struct vf_diag d;
  vf_diag_clear(&d);
  int rc = vf_history_last_plan(h, here, json, &label, &when, &d);
  unreadable(cmd, rc, &d);
  vf_history_close(h);
  if (rc) return rc;
  char stamp[32];
  history_stamp(when, HISTORY_LOCAL, false, stamp, sizeof stamp);
  size_t size = strlen(label) + sizeof stamp + 8;
  *about = malloc(size);
  if (*about) snprintf(*about, size, "%s, %s", label, stamp);
  free(label);
  if (*about) return 0;
  free(*json);
  *json = NULL;
  return VF_ENOMEM;
}

/* Training configs as MODEL (see setup_config.h). */
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "base/sbuf.h"
#include "cli/apply_view.h"
#include "cli/setup_config.h"

bool setup_config_any(const struct setup_config *sc) { return sc->n_files > 0; }

void setup_config_cleanup(struct setup_config *sc) {
  for (size_t i = 0; sc->where && i < sc->cfg.n_settings; i++) free(sc->where[i]);
  free(sc->where);
  free(sc->files);
  vf_config_cleanup(&sc->cfg);
  memset(sc, 0, sizeof *sc);
}

/* The configs among args, and the one argument that is not (the model). */
static int sort_args(struct setup_request *r, char *const *args, int n, struct setup_config *sc, const char **model) {
  *model = NULL;
  for (int i = 0; i < n; i++) {
    struct vf_diag d;
    vf_diag_clear(&d);
    int rc = vf_config_detect(args[i], sc->n_files ? NULL : r->format, &d);
    if (rc < 0) return cli_diag_error(r->cmd, rc, &d);
    if (rc) sc->files[sc->n_files++] = args[i];
    else if (*model)
      return cli_usage_error(r->cmd, "expects exactly one MODEL (%s, %s); the other arguments are training configs",
                             *model, args[i]);
    else *model = args[i];
  }
  if (!n) return cli_usage_error(r->cmd, "MODEL is missing; see 'vramfit %s --help'", r->cmd);
  if (r->format && !sc->n_files) return cli_usage_error(r->cmd, "--format %s: no training config given", r->format);
  return EXIT_OK;
}

/* The tool a config's default comes from: the format of the file that lacks the key. */
static const char *tool_of(const struct setup_config *sc, const struct vf_config_setting *s) {
  for (size_t i = 0; i < sc->cfg.n_files; i++)
    if (strcmp(sc->cfg.files[i].path, s->file) == 0) return sc->cfg.files[i].format;
  return "the tool";
}

/* One setting into r, unless the command line gave it; "model" names the model to load
 * when no MODEL argument did. */
static int apply_setting(struct setup_request *r, struct setup_config *sc, size_t i, const char *model_arg) {
  const struct vf_config_setting *s = &sc->cfg.settings[i];
  enum setup_key k = setup_key_named(s->name);
  char *where = malloc(strlen(s->file) + 16);
  if (!where) return cli_error(r->cmd, EXIT_INTERNAL, "out of memory");
  if (s->line) sprintf(where, "%s:%d", s->file, s->line);
  else strcpy(where, s->file);
  sc->where[i] = where;
  if (k == K_MODEL && !model_arg) {
    sc->model = s->value;
    r->read_from[K_MODEL] = s->line ? where : NULL;
  }
  int code = setup_option_code(k);
  if (k == K_COUNT || !code || (r->given & (1ull << k))) return EXIT_OK;
  return setup_option_from(r, code, s->value, where, s->line ? NULL : tool_of(sc, s)) ? EXIT_BAD_INPUT : EXIT_OK;
}

/* No model anywhere: the configs name none that can be read. */
static int no_model(const struct setup_request *r, const struct setup_config *sc) {
  for (size_t i = 0; i < sc->cfg.n_warnings; i++) {
    const struct vf_config_warning *w = &sc->cfg.warnings[i];
    if (w->name && strcmp(w->name, "model") == 0)
      return cli_error(r->cmd, EXIT_BAD_INPUT, "%s:%d: %s: %s %s: give the model as MODEL too", w->file, w->line,
                       w->key, w->text, w->why);
  }
  return cli_error(r->cmd, EXIT_BAD_INPUT, "%s:1: names no model that a %s config keeps: give the model as MODEL "
                   "too ('vramfit %s CONFIG MODEL')", sc->cfg.files[0].path, sc->cfg.files[0].format, r->cmd);
}

int setup_config_read(struct setup_request *r, char *const *args, int n, struct setup_config *sc) {
  memset(sc, 0, sizeof *sc);
  vf_config_init(&sc->cfg);
  const char *model_arg;
  if (!(sc->files = calloc(n ? (size_t)n : 1, sizeof *sc->files)))
    return cli_error(r->cmd, EXIT_INTERNAL, "out of memory");
  int code = sort_args(r, args, n, sc, &model_arg);
  sc->model = model_arg;
  if (code || !sc->n_files) return code;
  struct vf_diag d;
  vf_diag_clear(&d);
  int rc = vf_config_read(&sc->cfg, sc->files, sc->n_files, r->format, &d);
  if (rc) return cli_diag_error(r->cmd, rc, &d);
  if (!(sc->where = calloc(sc->cfg.n_settings ? sc->cfg.n_settings : 1, sizeof *sc->where)))
    return cli_error(r->cmd, EXIT_INTERNAL, "out of memory");
  for (size_t i = 0; i < sc->cfg.n_settings && !code; i++) code = apply_setting(r, sc, i, model_arg);
  return code || sc->model ? code : no_model(r, sc);
}

/* ---- what was read, and what could not be ---- */

static void value_text(const json_t *v, char *buf, size_t size) {
  if (json_is_string(v)) snprintf(buf, size, "%s", json_string_value(v)[0] ? json_string_value(v) : "none");
  else if (json_is_boolean(v)) snprintf(buf, size, "%s", json_is_true(v) ? "yes" : "no");
  else snprintf(buf, size, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
}

/* "FILE:LINE: KEY: TEXT WHY; vramfit assumes NAME VALUE". */
static json_t *sentence(const struct vf_config_warning *w, const json_t *setup) {
  char used[160] = "";
  const json_t *v = w->name ? json_object_get(setup, w->name) : NULL;
  if (v) value_text(v, used, sizeof used);
  return json_sprintf("%s:%d: %s: %s %s%s%s%s%s", w->file, w->line, w->key, w->text, w->why,
                      v ? "; vramfit assumes " : "", v ? w->name : "", v ? " " : "", used);
}

json_t *setup_config_warnings_json(const struct setup_request *r, const struct setup_context *c,
                                   const struct setup_config *sc) {
  json_t *setup = setup_values_json(r, c), *out = json_array();
  for (size_t i = 0; i < sc->cfg.n_warnings; i++) json_array_append_new(out, sentence(&sc->cfg.warnings[i], setup));
  json_decref(setup);
  return out;
}

void setup_config_warn(const struct setup_request *r, const struct setup_context *c, const struct setup_config *sc) {
  json_t *all = setup_config_warnings_json(r, c, sc), *w;
  size_t i;
  json_array_foreach(all, i, w) fprintf(stderr, "warning: %s\n", json_string_value(w));
  json_decref(all);
}

static const char *format_of(const struct setup_config *sc, const char *file) {
  for (size_t i = 0; i < sc->cfg.n_files; i++)
    if (strcmp(sc->cfg.files[i].path, file) == 0) return sc->cfg.files[i].format;
  return NULL;
}

/* Whether setting i is in effect: read from its file, not left to a default, not given on
 * the command line. */
static bool in_effect(const struct setup_request *r, const struct setup_config *sc, size_t i) {
  enum setup_key k = setup_key_named(sc->cfg.settings[i].name);
  return k < K_COUNT && r->read_from[k] && r->read_from[k] == sc->where[i];
}

/* The values the setup took from one file, as they are used. */
static void print_file(const struct setup_request *r, const struct setup_config *sc, const char *file,
                       const json_t *setup) {
  const char *format = format_of(sc, file);
  bool first = true;
  for (size_t i = 0; i < sc->cfg.n_settings; i++) {
    const struct vf_config_setting *s = &sc->cfg.settings[i];
    if (strcmp(s->file, file) != 0 || !in_effect(r, sc, i)) continue;
    char v[160];
    value_text(json_object_get(setup, s->name), v, sizeof v);
    if (first) printf("read from %s%s%s%s: ", file, format ? " (" : "", format ? format : "", format ? ")" : "");
    printf("%s%s %s (line %d)", first ? "" : ", ", s->name, v, s->line);
    first = false;
  }
  if (!first) printf("\n");
}

void setup_config_print(const struct setup_request *r, const struct setup_context *c, const struct setup_config *sc) {
  json_t *setup = setup_values_json(r, c);
  for (size_t i = 0; i < sc->cfg.n_settings; i++) {
    bool seen = false;
    for (size_t j = 0; j < i; j++) seen |= strcmp(sc->cfg.settings[j].file, sc->cfg.settings[i].file) == 0;
    if (!seen) print_file(r, sc, sc->cfg.settings[i].file, setup);
  }
  json_decref(setup);
}

static uint32_t keep_bits(const char *knob) {
  uint32_t bits = 0;
  return vf_keep_parse(knob, &bits) == 0 ? bits : 0;
}

/* Whether a config read can hold a plan's knob: apply has a place for it in one of them. */
static bool writable(const struct setup_config *sc, const char *key) {
  for (size_t i = 0; key && i < sc->cfg.n_files; i++) {
    size_t n = strlen(key);
    for (const char *p = sc->cfg.files[i].writes; (p = strstr(p, key)); p += n)
      if ((p == sc->cfg.files[i].writes || p[-1] == ' ') && (p[n] == ' ' || !p[n])) return true;
  }
  return false;
}

uint32_t setup_config_keep(const struct setup_config *sc) {
  /* Each knob a plan may turn, and the key apply writes it as (NULL: apply writes none). */
  static const char *const knobs[][2] = {{"seq", "seq"}, {"precision", "precision"}, {"optimizer", "optimizer"},
                                         {"grad-ckpt", "grad_ckpt"}, {"shard", "zero_stage"}, {"offload", "offload"},
                                         {"loss", "loss"}, {"optimizer-in-bwd", "optimizer_in_bwd"}, {"method", NULL}, {"lora-r", NULL}, {"quant", NULL}};
  uint32_t keep = 0;
  if (!setup_config_any(sc)) return 0;
  for (size_t i = 0; i < sizeof knobs / sizeof *knobs; i++)
    if (!writable(sc, knobs[i][1])) keep |= keep_bits(knobs[i][0]);
  for (size_t i = 0; i < sc->cfg.n_warnings; i++) {
    const char *name = sc->cfg.warnings[i].name;
    char knob[32];
    if (!name) continue;
    snprintf(knob, sizeof knob, "%s", strcmp(name, "weights") == 0 || strcmp(name, "amp") == 0 ? "precision" : name);
    for (char *p = knob; *p; p++) *p = *p == '_' ? '-' : *p;
    keep |= keep_bits(knob);
  }
  return keep;
}

/* ---- writing a plan back ---- */

static void add_file(const char **files, size_t *n, const char *path) {
  for (size_t i = 0; i < *n; i++)
    if (strcmp(files[i], path) == 0) return;
  files[(*n)++] = path;
}

/* The configs to write: those given or named, and the Hydra configs values came from. */
static const char **files_read(const struct setup_config *sc, size_t *n) {
  const char **files = calloc(sc->cfg.n_files + sc->cfg.n_settings + 1, sizeof *files);
  *n = 0;
  for (size_t i = 0; files && i < sc->cfg.n_files; i++) add_file(files, n, sc->cfg.files[i].path);
  for (size_t i = 0; files && i < sc->cfg.n_settings; i++) add_file(files, n, sc->cfg.settings[i].file);
  return files;
}

/* Whether each key has one file to go in: the files are the configs read, of as many tools
 * (a Trainer config and its DeepSpeed JSON), not configs of one composition, where apply
 * --create would add a missing key to every one. */
static bool one_home(const struct setup_config *sc, size_t n) {
  for (size_t i = 0; i < sc->cfg.n_files; i++)
    for (size_t j = 0; j < i; j++)
      if (strcmp(sc->cfg.files[i].format, sc->cfg.files[j].format) == 0) return false;
  return n == sc->cfg.n_files;
}

static int apply_plan(const struct setup_request *r, const struct setup_config *sc, struct vf_plan *p, size_t n,
                      bool json, struct vf_apply *a, struct vf_diag *d) {
  /* A key the configs left to their tool's default is added where it has one home. */
  /* The configs were read, and said which tool each is for ("read from FILE (trl)"). */
  struct vf_apply_opts o = {.format = n == 1 ? r->format : NULL, .create = one_home(sc, n), .gpus = p->gpus,
                            .formats_told = 1};
  int rc = vf_apply_prepare(a, p->inputs, n, &o, d);
  if (!rc && !json) apply_view_diffs(a);
  if (!rc) rc = vf_apply_commit(a, d);
  if (!rc && !json) apply_view_summary(a);
  return rc;
}

int setup_config_write(const struct setup_request *r, const struct setup_config *sc, const json_t *plan, bool json,
                       json_t **written) {
  size_t n;
  const char **files = files_read(sc, &n);
  char *text = json_dumps(plan, JSON_COMPACT);
  struct vf_plan p;
  struct vf_apply a;
  struct vf_diag d;
  vf_plan_init(&p);
  vf_apply_init(&a);
  vf_diag_clear(&d);
  int rc = files && text ? vf_plan_parse(&p, "the plan", text, strlen(text), NULL, files, n, NULL, 0, &d) : VF_ENOMEM;
  if (!rc) rc = apply_plan(r, sc, &p, n, json, &a, &d);
  if (!rc && json) *written = apply_view_json(&a, false);
  int code = rc ? cli_diag_error(r->cmd, rc, &d) : EXIT_OK;
  vf_apply_cleanup(&a);
  vf_plan_cleanup(&p);
  free(text);
  free(files);
  return code;
}

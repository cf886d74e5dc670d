/* Training configs read into settings (include/vramfit/config.h): each file is claimed by
 * a format map (or named by --format), read through that map (config_map.c) and, where a
 * tool spells something no map form can, its own code (config_torchtune.c); the configs a
 * file names are read after it. A file's value wins over a later file's and any value over
 * a tool's default, so the main config speaks first and a DeepSpeed JSON fills in what it
 * alone says. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "base/fileio.h"
#include "base/sbuf.h"
#include "io/config_internal.h"

void vf_config_init(struct vf_config *c) { memset(c, 0, sizeof *c); }

/* ---- recording ---- */

static const char *file_of(const struct place *p) { return p->layer->tree.file; }

static const char *node_text(const struct place *p) {
  return p->node && p->node->kind == YN_SCALAR ? p->node->value : "";
}

static int warn_line(struct creader *r, const char *name, const char *file, int line, const char *key,
                     const char *text, const char *why) {
  struct vf_config *c = r->out;
  struct vf_config_warning *grown = realloc(c->warnings, (c->n_warnings + 1) * sizeof *grown);
  if (!grown) return VF_ENOMEM;
  c->warnings = grown;
  struct vf_config_warning *w = &grown[c->n_warnings++];
  *w = (struct vf_config_warning){name ? strdup(name) : NULL, strdup(file), line, strdup(key), strdup(text),
                                  strdup(why)};
  return w->file && w->key && w->text && w->why && (!name || w->name) ? 0 : VF_ENOMEM;
}

int config_warn(struct creader *r, const char *name, const struct place *p, const char *text,
                const char *why, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, why);
  vsnprintf(msg, sizeof msg, why, ap);
  va_end(ap);
  return warn_line(r, name, file_of(p), place_line(p), p->key, text ? text : node_text(p), msg);
}

static struct vf_config_setting *find(const struct vf_config *c, const char *name) {
  for (size_t i = 0; i < c->n_settings; i++)
    if (strcmp(c->settings[i].name, name) == 0) return &c->settings[i];
  return NULL;
}

const struct vf_config_setting *vf_config_get(const struct vf_config *c, const char *name) {
  return find(c, name);
}

const char *config_value(const struct creader *r, const char *name) {
  const struct vf_config_setting *s = find(r->out, name);
  return s ? s->value : NULL;
}

static void setting_free(struct vf_config_setting *s) {
  free(s->name);
  free(s->value);
  free(s->file);
  free(s->key);
}

static int fill(struct vf_config_setting *s, const char *name, const char *value, const struct place *p) {
  *s = (struct vf_config_setting){strdup(name), strdup(value), strdup(file_of(p)), place_line(p), strdup(p->key)};
  return s->name && s->value && s->file && s->key ? 0 : VF_ENOMEM;
}

int config_set(struct creader *r, const char *name, const char *value, const struct place *p) {
  struct vf_config *c = r->out;
  struct vf_config_setting *old = find(c, name);
  bool given = p->node != NULL;
  if (old && (!given || (old->line && strcmp(old->value, value) == 0))) return 0;
  if (old && old->line)
    return config_warn(r, name, p, value, "disagrees with %s:%d (%s %s), which is read", old->file, old->line,
                       old->key, old->value);
  if (old) {
    setting_free(old);
    return fill(old, name, value, p);
  }
  struct vf_config_setting *grown = realloc(c->settings, (c->n_settings + 1) * sizeof *grown);
  if (!grown) return VF_ENOMEM;
  c->settings = grown;
  return fill(&grown[c->n_settings++], name, value, p);
}

void config_drop(struct creader *r, const char *name) {
  struct vf_config *c = r->out;
  struct vf_config_setting *s = find(c, name);
  if (!s) return;
  setting_free(s);
  size_t i = (size_t)(s - c->settings);
  memmove(s, s + 1, (c->n_settings - i - 1) * sizeof *s);
  c->n_settings--;
}

/* ---- files ---- */

/* The logical keys the map gives the editor a place for ("paths", "set" or "derived"). */
static char *writes(const struct format *fmt) {
  struct sbuf b = {0};
  const char *key;
  json_t *entry;
  json_object_foreach(json_object_get(fmt->map, "keys"), key, entry) {
    if (json_object_get(entry, "paths") || json_object_get(entry, "set") || json_object_get(entry, "derived"))
      sb_printf(&b, "%s%s", b.len ? " " : "", key);
  }
  sb_puts(&b, "");
  return sb_take(&b, NULL);
}

static int add_file(struct creader *r, const char *path, const struct format *fmt, const char *why,
                    struct cfile **out) {
  struct cfile **grown = realloc(r->files, (r->n_files + 1) * sizeof *grown);
  struct vf_config_file *listed = realloc(r->out->files, (r->out->n_files + 1) * sizeof *listed);
  if (grown) r->files = grown;
  if (listed) r->out->files = listed;
  struct cfile *f = grown && listed ? calloc(1, sizeof *f) : NULL;
  if (!f) return VF_ENOMEM;
  r->files[r->n_files++] = f;
  f->fmt = fmt;
  f->path = strdup(path);
  listed[r->out->n_files++] = (struct vf_config_file){strdup(path), strdup(fmt->name), strdup(why), writes(fmt)};
  *out = f;
  const struct vf_config_file *l = &listed[r->out->n_files - 1];
  return f->path && l->path && l->why && l->format && l->writes ? 0 : VF_ENOMEM;
}

/* "its keys (micro_batch_size, sequence_len, ...)": the detect keys of the map it has,
 * the weightiest first. */
static char *detected_why(const struct format *fmt, const struct cfile *f) {
  struct sbuf b = {0};
  sb_puts(&b, "its keys (");
  size_t n = 0;
  for (json_int_t w = 10; w > 0 && n < 3; w--) {
    const char *path;
    json_t *weight;
    json_object_foreach(json_object_get(fmt->map, "detect"), path, weight) {
      struct place p;
      if (json_integer_value(weight) != w || n == 3 || view_find(f, path, &p, NULL) || !p.node) continue;
      sb_printf(&b, "%s%s", n++ ? ", " : "", path);
    }
  }
  sb_puts(&b, ")");
  return sb_take(&b, NULL);
}

static int unclaimed(const char *path, const struct formats *fs, struct vf_diag *d) {
  struct sbuf names = {0};
  for (size_t i = 0; i < fs->n; i++) sb_printf(&names, "%s%s", i ? ", " : "", fs->v[i].name);
  int rc = diag_line(d, VF_EUNSUPPORTED, path, 1, 1,
                     "not a training config vramfit reads: no tool's keys are in it (name its tool with --format: %s)",
                     names.p ? names.p : "");
  sb_free(&names);
  return rc;
}

/* Opens a config given by the caller: forced's format, else the map that claims it. */
static int open_given(struct creader *r, const char *path, const struct format *forced) {
  struct cfile probe = {0};
  int rc = view_open(&probe, path, r->d);
  const struct format *fmt = forced;
  if (!rc && !fmt && probe.n_src) fmt = formats_detect(&r->fs, &probe.src[0]->doc, NULL);
  if (!rc && !fmt) rc = unclaimed(path, &r->fs, r->d);
  char *why = rc ? NULL : forced ? strdup("--format") : detected_why(fmt, &probe);
  struct cfile *f = NULL;
  if (!rc) rc = why ? add_file(r, path, fmt, why, &f) : VF_ENOMEM;
  free(why);
  if (f) { /* the view moves into the file read */
    free(f->path);
    *f = probe;
    f->fmt = fmt;
    f->path = strdup(path);
    return f->path ? 0 : VF_ENOMEM;
  }
  view_close(&probe);
  return rc;
}

/* A file the caller gave with that name (the same path, or the same base name: the config
 * may name it from another folder). */
static bool given(const struct creader *r, const char *name) {
  for (size_t i = 0; i < r->n_files; i++)
    if (strcmp(path_base(r->files[i]->path), path_base(name)) == 0) return true;
  return false;
}

/* Where a named config is: as written (tools resolve it from where they run), else beside
 * the config naming it. */
static int locate(const struct cfile *f, const struct place *p, char *out, size_t size, struct vf_diag *d) {
  const char *name = p->node->value;
  if (path_is_file(name) && (size_t)snprintf(out, size, "%s", name) < size) return 0;
  if (view_beside(f, name, out, size) && path_is_file(out)) return 0;
  return diag_line(d, VF_ENOTFOUND, file_of(p), place_line(p), 1,
                   "%s: %s: no such file here or in %s: give it after the config", p->key, name, f->dir);
}

int config_add_named(struct creader *r, struct cfile *f, const struct place *p, const char *format) {
  const struct format *fmt = formats_find(&r->fs, format, r->d);
  if (!fmt) return VF_EINTERNAL;
  char why[768];
  snprintf(why, sizeof why, "%s: in %s:%d", p->key, file_of(p), place_line(p));
  struct cfile *named;
  if (p->node->kind == YN_MAP) { /* the config inline */
    int rc = add_file(r, f->path, fmt, why, &named);
    return rc ? rc : view_add_tree(named, &p->layer->tree, p->node);
  }
  if (p->node->kind != YN_SCALAR || ynode_type(p->node) != VF_VALUE_STRING || given(r, p->node->value)) return 0;
  char path[PATH_MAX];
  int rc = locate(f, p, path, sizeof path, r->d);
  if (!rc) rc = add_file(r, path, fmt, why, &named);
  return rc ? rc : view_open(named, path, r->d);
}

/* ---- reading ---- */

/* The tool's framework (the map's "framework"), from the main config alone: a DeepSpeed
 * JSON beside a Trainer config runs under the Trainer. */
static int framework(struct creader *r, const struct cfile *f) {
  const char *name = json_string_value(json_object_get(f->fmt->map, "framework"));
  const struct layer *self = view_self(f);
  if (!name || !self || !self->tree.root) return 0;
  const struct ynode *root = self->tree.root;
  struct place p = {self, root->kind == YN_MAP && root->nkid ? root->kid[0] : root, ""};
  snprintf(p.key, sizeof p.key, "%s", node_text(&p));
  return config_set(r, "framework", name, &p);
}

/* Configs a Hydra defaults list names that are not there: Hydra would stop, projects that
 * load their configs themselves do not; their values are not read. */
static int missing(struct creader *r, const struct cfile *f) {
  for (size_t i = 0; i < f->n_missing; i++) {
    const struct missing *m = &f->missing[i];
    int rc = warn_line(r, NULL, m->file, m->line, "defaults", m->entry,
                       "names a config that is not there; its values are not read");
    if (rc) return rc;
  }
  return 0;
}

static int read_all(struct creader *r) {
  int rc = 0;
  for (size_t i = 0; i < r->n_files && !rc; i++) {
    struct cfile *f = r->files[i];
    rc = i == 0 ? framework(r, f) : 0;
    if (!rc) rc = missing(r, f);
    if (!rc) rc = map_read(r, f);
    if (!rc && strcmp(f->fmt->name, "torchtune") == 0) rc = torchtune_read(r, f);
  }
  return rc;
}

int vf_config_read(struct vf_config *c, const char *const *paths, size_t n, const char *format,
                   struct vf_diag *d) {
  struct creader r = {.out = c, .d = d};
  int rc = formats_load(&r.fs, d);
  const struct format *forced = NULL;
  if (!rc && format && strcmp(format, "auto") != 0 && !(forced = formats_find(&r.fs, format, d))) rc = VF_EINVAL;
  for (size_t i = 0; i < n && !rc; i++) rc = open_given(&r, paths[i], i == 0 ? forced : NULL);
  if (!rc) rc = read_all(&r);
  for (size_t i = 0; i < r.n_files; i++) {
    view_close(r.files[i]);
    free(r.files[i]->path);
    free(r.files[i]);
  }
  free(r.files);
  formats_free(&r.fs);
  return rc;
}

/* A file read as a training config; a .py one too, so that doc_open says it is code. */
static bool config_file_type(const char *path) {
  return str_ends_with(path, ".yaml") || str_ends_with(path, ".yml") || str_ends_with(path, ".json") ||
         str_ends_with(path, ".py");
}

int vf_config_detect(const char *path, const char *format, struct vf_diag *d) {
  bool forced = format && strcmp(format, "auto") != 0;
  if (!path_is_file(path) || (!forced && !config_file_type(path))) return 0;
  struct formats fs;
  struct cfile probe = {0};
  int rc = formats_load(&fs, d);
  if (!rc) rc = view_open(&probe, path, d);
  bool json = str_ends_with(path, ".json");
  int claimed = 0;
  if (!rc) claimed = forced ? formats_find(&fs, format, d) != NULL : formats_detect(&fs, &probe.src[0]->doc, NULL) != NULL;
  if (!rc && forced && !claimed) rc = VF_EINVAL;
  else if (!rc && !claimed && !json) rc = unclaimed(path, &fs, d);
  else if (rc == VF_EFORMAT && json && !forced) rc = 0; /* a broken config.json: the model reader says why */
  view_close(&probe);
  if (fs.v) formats_free(&fs);
  return rc ? rc : claimed;
}

void vf_config_cleanup(struct vf_config *c) {
  for (size_t i = 0; i < c->n_settings; i++) setting_free(&c->settings[i]);
  for (size_t i = 0; i < c->n_warnings; i++) {
    struct vf_config_warning *w = &c->warnings[i];
    free(w->name);
    free(w->file);
    free(w->key);
    free(w->text);
    free(w->why);
  }
  for (size_t i = 0; i < c->n_files; i++) {
    free(c->files[i].path);
    free(c->files[i].format);
    free(c->files[i].why);
    free(c->files[i].writes);
  }
  free(c->settings);
  free(c->warnings);
  free(c->files);
  memset(c, 0, sizeof *c);
}

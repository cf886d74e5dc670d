/* Hydra composes a primary config with the configs its `defaults` list names, in list
 * order; `_self_` places the primary config's own values in that order (Hydra >= 1.1 puts
 * it last when it is not listed). A value the primary config holds at a path that a config
 * listed after `_self_` also sets is overridden at run time, so writing it there would change
 * nothing. Such an edit moves to that config when it is one of the call's files, and is
 * refused with the reason otherwise. A path the primary config lacks goes the same way when
 * such a config sets it; and where configs the project loads itself per stage (folders
 * beside the primary one that its composition does not hold: conf/text_curriculum/) set
 * it, a value in the primary config would not reach them either. */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "base/fileio.h"
#include "edit/internal.h"
#include "io/hydra.h"

enum { MAX_CONFIGS = 32 };

/* The configs listed after _self_, in order. */
static size_t after_self(const struct ynode *root, const char *dir, struct hydra_entry *out, size_t max) {
  size_t n = hydra_defaults(root, dir, out, max), self = 0;
  while (self < n && !out[self].self) self++;
  if (self == n) return 0;
  memmove(out, out + self + 1, (n - self - 1) * sizeof *out);
  return n - self - 1;
}

/* A config as the user would name it: beside f as f was named (conf/data/alpaca.yaml), not
 * as resolved. */
static void shown(const struct afile *f, const char *file, char *out, size_t size) {
  char real[PATH_MAX], given[PATH_MAX];
  path_folder(f->pub->target, real, sizeof real);
  path_folder(f->pub->path, given, sizeof given);
  size_t n = strlen(real);
  if (strncmp(file, real, n) != 0 || file[n] != '/') snprintf(out, size, "%s", file);
  else if (strcmp(given, ".") == 0) snprintf(out, size, "%s", file + n + 1);
  else snprintf(out, size, "%s/%s", given, file + n + 1);
}

static struct afile *file_in_call(const struct astate *s, const char *path) {
  char real[PATH_MAX];
  if (!realpath(path, real)) return NULL;
  for (size_t i = 0; i < s->n; i++)
    if (strcmp(s->f[i].pub->target, real) == 0) return &s->f[i];
  return NULL;
}

/* Whether the later config sets rest; *readable is false when it could not be read. */
static bool later_sets(const struct hydra_entry *l, const char *p, const char **rest, bool *readable) {
  char *text;
  size_t len;
  *readable = false;
  if (file_read(l->file, DOC_MAX_BYTES, &text, &len, NULL) != 0) return false;
  char package[sizeof l->package];
  snprintf(package, sizeof package, "%s", l->package);
  hydra_package_header(text, len, package, sizeof package);
  struct doc doc;
  bool sets = false;
  if ((*rest = hydra_inside(package, p)) && doc_open(&doc, l->file, text, len, NULL) == 0) {
    struct yfind fd;
    *readable = true;
    sets = ytree_find(&doc.t, *rest, &fd, NULL) == 0 && fd.node;
    doc_close(&doc);
  }
  free(text);
  return sets;
}

static void drop_edit(struct afile *f, size_t k) {
  struct pedit *p = &f->edits[k];
  free(p->key);
  free(p->path);
  free(p->owned);
  free(p->note);
  memmove(p, p + 1, (f->n_edits - k - 1) * sizeof *p);
  f->n_edits--;
}

/* Moves edit k to the later config l, or refuses it; *moved says which. */
static int redirect(struct astate *s, struct afile *f, size_t k, const struct hydra_entry *l,
                    const char *rest, bool *moved, struct vf_diag *d) {
  struct pedit *p = &f->edits[k];
  struct afile *g = file_in_call(s, l->file);
  struct vf_value cur;
  size_t at = 0;
  queue_get(f, p->path, &cur, &at);
  char name[PATH_MAX];
  shown(f, l->file, name, sizeof name);
  if (!g)
    return ytree_diag(&f->doc.t, d, VF_EINVAL, at, "%s: the defaults entry '%s' comes after "
                      "_self_ and sets it too (%s), so a value here changes nothing: give %s "
                      "too, or move _self_ to the end of the defaults list", p->path, l->entry,
                      name, name);
  char why[512];
  snprintf(why, sizeof why, "%s's defaults entry '%s' overrides %s there", f->pub->path, l->entry, p->path);
  int rc = queue_add(g, p->key, rest, &p->value, p->create, p->keep_type, why, d);
  if (!rc) drop_edit(f, k);
  *moved = rc == 0;
  return rc;
}

static int check_edit(struct astate *s, struct afile *f, size_t k, const struct hydra_entry *l, size_t n,
                      bool *moved, struct vf_diag *d) {
  *moved = false;
  for (size_t i = n; i-- > 0;) { /* the last entry that sets it wins */
    const char *rest = NULL;
    bool readable;
    if (!hydra_inside(l[i].package, f->edits[k].path)) continue;
    if (later_sets(&l[i], f->edits[k].path, &rest, &readable))
      return redirect(s, f, k, &l[i], rest, moved, d);
    if (!readable)
      return queue_note(s->a, "%s: %s: the defaults entry '%s' comes after _self_ and may set "
                        "it; %s could not be read to check", f->pub->path, f->edits[k].path,
                        l[i].entry, l[i].file);
  }
  return 0;
}

/* Whether a config listed after _self_ in f's defaults sets path. */
static bool set_later(const struct afile *f, const char *path) {
  char dir[PATH_MAX];
  path_folder(f->pub->target, dir, sizeof dir);
  struct hydra_entry l[32];
  size_t n = after_self(f->doc.t.root, dir, l, 32);
  for (size_t i = 0; i < n; i++) {
    const char *rest;
    bool readable;
    if (hydra_inside(l[i].package, path) && later_sets(&l[i], path, &rest, &readable)) return true;
  }
  return false;
}

/* Whether the YAML config at path sets key at its root. */
static bool sets_at_root(const char *path, const char *key) {
  char *text;
  size_t len;
  struct doc doc;
  if (file_read(path, DOC_MAX_BYTES, &text, &len, NULL) != 0) return false;
  bool sets = false;
  if (doc_open(&doc, path, text, len, NULL) == 0) {
    struct yfind fd;
    sets = ytree_find(&doc.t, key, &fd, NULL) == 0 && fd.node;
    doc_close(&doc);
  }
  free(text);
  return sets;
}

/* dir/name into out; false when it does not fit. */
static bool join(char *out, size_t size, const char *dir, const char *name) {
  int n = snprintf(out, size, "%s/%s", dir, name);
  return n >= 0 && (size_t)n < size;
}

static bool yaml_name(const struct dirent *e) {
  return str_ends_with(e->d_name, ".yaml") || str_ends_with(e->d_name, ".yml");
}

static bool composed_in(const struct hydra_config *c, size_t n, const char *folder) {
  for (size_t i = 0; i < n; i++) {
    char dir[PATH_MAX];
    path_folder(c[i].file, dir, sizeof dir);
    if (!c[i].self && strcmp(dir, folder) == 0) return true;
  }
  return false;
}

typedef void stage_visit(const char *file, void *ctx);

static void visit_folder(const char *folder, stage_visit *visit, void *ctx) {
  struct dirent **names;
  int n = scandir(folder, &names, NULL, alphasort);
  for (int i = 0; i < n; i++) {
    char file[PATH_MAX];
    if (yaml_name(names[i]) && join(file, sizeof file, folder, names[i]->d_name)) visit(file, ctx);
    free(names[i]);
  }
  if (n >= 0) free(names);
}

/* Visits, by name, the configs in the folders beside f that its composition does not hold:
 * the project loads them itself, a stage at a time (conf/text_curriculum/). */
static int each_stage_config(const struct afile *f, stage_visit *visit, void *ctx) {
  struct hydra_config *c = calloc(MAX_CONFIGS, sizeof *c);
  if (!c) return VF_ENOMEM;
  struct dirent **names;
  char dir[PATH_MAX];
  path_folder(f->pub->target, dir, sizeof dir);
  int n = scandir(dir, &names, NULL, alphasort);
  size_t composed = n > 0 ? hydra_compose(f->pub->target, &f->doc.t, c, MAX_CONFIGS) : 0;
  for (int i = 0; i < n; i++) {
    char sub[PATH_MAX];
    if (names[i]->d_name[0] != '.' && join(sub, sizeof sub, dir, names[i]->d_name) && path_is_dir(sub) &&
        !composed_in(c, composed, sub))
      visit_folder(sub, visit, ctx);
    free(names[i]);
  }
  if (n >= 0) free(names);
  free(c);
  return 0;
}

struct unreached {
  const struct astate *s;
  const char *path;
  char first[PATH_MAX];
  size_t count;
};

/* A stage config that sets the path at its root and is not one of the call's files. */
static void count_unreached(const char *file, void *ctx) {
  struct unreached *u = ctx;
  if (file_in_call(u->s, file) || !sets_at_root(file, u->path)) return;
  if (!u->count++) snprintf(u->first, sizeof u->first, "%s", file);
}

static bool primary(const struct afile *f) {
  return f->fmt && strcmp(f->fmt->name, "hydra") == 0 && !f->package[0] && !f->stage && f->doc.t.root;
}

enum hydra_owner hydra_owner_of(const struct astate *s, const struct afile *f, const char *path, char *file,
                                size_t size, size_t *count) {
  *count = 0;
  if (!primary(f)) return HYDRA_NONE;
  struct unreached u = {s, path, "", 0};
  if (each_stage_config(f, count_unreached, &u) == 0 && u.count) { /* the stages load last */
    *count = u.count;
    shown(f, u.first, file, size);
    return HYDRA_STAGES;
  }
  return set_later(f, path) ? HYDRA_LATER : HYDRA_NONE;
}

struct adoption {
  const struct astate *s;
  const struct afile *f;
  int rc;
};

/* A stage config of the call that no tool claims takes the primary config's map, its keys
 * at the root as the project merges them, so that a value lands where the stage reads it. */
static void adopt_stage(const char *file, void *ctx) {
  struct adoption *a = ctx;
  struct afile *g = file_in_call(a->s, file);
  if (!g || g->fmt || a->rc) return;
  g->fmt = a->f->fmt;
  g->stage = true;
  if (!(g->pub->format = strdup(g->fmt->name))) a->rc = VF_ENOMEM;
}

/* The files of the call that f's composition holds get f's map at their package. */
static int adopt_group_files(struct astate *s, const struct afile *f) {
  struct hydra_config *c = calloc(MAX_CONFIGS, sizeof *c);
  if (!c) return VF_ENOMEM;
  size_t n = hydra_compose(f->pub->target, &f->doc.t, c, MAX_CONFIGS);
  int rc = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    struct afile *g = c[i].self || c[i].missing ? NULL : file_in_call(s, c[i].file);
    if (!g || g == f || (g->fmt && g->fmt != f->fmt)) continue;
    g->fmt = f->fmt;
    snprintf(g->package, sizeof g->package, "%s", c[i].package);
    free(g->pub->format);
    if (!(g->pub->format = strdup(f->fmt->name))) rc = VF_ENOMEM;
  }
  free(c);
  return rc;
}

int hydra_packages(struct astate *s) {
  for (size_t i = 0; i < s->n; i++) {
    const struct afile *f = &s->f[i];
    struct adoption a = {s, f, 0};
    int rc = primary(f) ? adopt_group_files(s, f) : 0;
    if (!rc && primary(f)) rc = each_stage_config(f, adopt_stage, &a);
    if (rc || a.rc) return rc ? rc : a.rc;
  }
  return 0;
}

int check_hydra_defaults(struct astate *s, struct afile *f, struct vf_diag *d) {
  if (!f->n_edits) return 0;
  char dir[PATH_MAX];
  path_folder(f->pub->target, dir, sizeof dir);
  struct hydra_entry l[32];
  size_t n = after_self(f->doc.t.root, dir, l, 32);
  for (size_t k = 0; k < f->n_edits;) {
    bool moved;
    int rc = check_edit(s, f, k, l, n, &moved, d);
    if (rc) return rc;
    k += !moved;
  }
  return 0;
}

/* Hydra composes a primary config with the configs its `defaults` list names, in list
 * order; `_self_` places the primary config's own values in that order (Hydra >= 1.1 puts
 * it last when it is not listed). A value the primary config holds at a path that a config
 * listed after `_self_` also sets is overridden at run time, so writing it there would change
 * nothing. Such an edit moves to that config when it is one of the call's files, and is
 * refused with the reason otherwise. */
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

static struct afile *file_in_call(struct astate *s, const char *path) {
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
  if (!g)
    return ytree_diag(&f->doc.t, d, VF_EINVAL, at, "%s: the defaults entry '%s' comes after "
                      "_self_ and sets it too (%s), so a value here changes nothing: give %s "
                      "too, or move _self_ to the end of the defaults list", p->path, l->entry,
                      l->file, l->file);
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
    int rc = f->fmt && strcmp(f->fmt->name, "hydra") == 0 && !f->package[0] ? adopt_group_files(s, f) : 0;
    if (rc) return rc;
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

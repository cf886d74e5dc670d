/* A config as the layers a value may come from: the file itself, or the configs its Hydra
 * defaults list composes (each at its package), the one composed last first; and parts of
 * a file another config reads (`deepspeed: {...}`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "base/fileio.h"
#include "io/config_internal.h"
#include "io/hydra.h"

/* Nested defaults lists deeper than this are not followed (Hydra itself has no limit, but
 * configs that deep are not seen in training repositories). */
enum { MAX_DEPTH = 4, MAX_ENTRIES = 32 };

static int add_layer(struct cfile *f, const struct ytree *t, const struct ynode *root, const char *package) {
  struct layer *grown = realloc(f->layers, (f->n_layers + 1) * sizeof *grown);
  if (!grown) return VF_ENOMEM;
  f->layers = grown;
  struct layer *l = &grown[f->n_layers++];
  l->tree = *t;
  l->tree.root = (struct ynode *)root;
  snprintf(l->package, sizeof l->package, "%s", package);
  return 0;
}

int view_add_tree(struct cfile *f, const struct ytree *t, const struct ynode *root) {
  return add_layer(f, t, root, "");
}

/* Reads and parses one document of f. VF_ENOTFOUND (d unfilled) when it does not exist. */
static int load_source(struct cfile *f, const char *path, struct source **out, struct vf_diag *d) {
  if (!path_is_file(path)) return VF_ENOTFOUND;
  struct source **grown = realloc(f->src, (f->n_src + 1) * sizeof *grown);
  if (!grown) return VF_ENOMEM;
  f->src = grown;
  struct source *s = calloc(1, sizeof *s);
  if (!s) return VF_ENOMEM;
  grown[f->n_src++] = s;
  size_t len;
  int rc = file_read(path, DOC_MAX_BYTES, &s->text, &len, d);
  if (!rc) rc = doc_open(&s->doc, path, s->text, len, d);
  *out = s;
  return rc;
}

static void folder_of(const char *path, char *dir, size_t size) {
  const char *slash = strrchr(path, '/');
  if (slash) snprintf(dir, size, "%.*s", (int)(slash - path), path);
  else snprintf(dir, size, ".");
}

/* false when the package is too long to hold (no key could lie under it anyway). */
static bool join_package(const char *parent, const char *child, char *out, size_t size) {
  int n = snprintf(out, size, "%s%s%s", parent, parent[0] && child[0] ? "." : "", child);
  return n >= 0 && (size_t)n < size;
}

static int compose(struct cfile *f, struct source *s, const char *package, int depth, struct vf_diag *d);

static int note_missing(struct cfile *f, const struct source *parent, const struct hydra_entry *e) {
  struct missing *grown = realloc(f->missing, (f->n_missing + 1) * sizeof *grown);
  if (!grown) return VF_ENOMEM;
  f->missing = grown;
  struct missing *m = &grown[f->n_missing++];
  struct yfind at;
  int col;
  ytree_find(&parent->doc.t, "defaults", &at, NULL);
  ytree_linecol(&parent->doc.t, at.node ? at.node->start : 0, &m->line, &col);
  snprintf(m->file, sizeof m->file, "%s", parent->doc.file);
  snprintf(m->entry, sizeof m->entry, "%s (%s)", e->entry, e->file);
  return 0;
}

/* The config an entry names, composed at its package; optional ones may be missing. */
static int compose_entry(struct cfile *f, const struct source *parent, const struct hydra_entry *e,
                         const char *package, int depth, struct vf_diag *d) {
  struct source *s = NULL;
  struct vf_diag sub;
  vf_diag_clear(&sub);
  int rc = load_source(f, e->file, &s, &sub);
  if (rc == VF_ENOTFOUND && strncmp(e->entry, "optional ", 9) == 0) return 0;
  if (rc == VF_ENOTFOUND) return note_missing(f, parent, e);
  if (rc) {
    if (d) *d = sub;
    return rc;
  }
  char own[256], full[256];
  snprintf(own, sizeof own, "%s", e->package);
  hydra_package_header(s->text, strlen(s->text), own, sizeof own);
  /* A header names the package from the root; an entry's package is below its parent's. */
  if (strcmp(own, e->package) != 0) snprintf(full, sizeof full, "%s", own);
  else if (!join_package(package, own, full, sizeof full)) return 0;
  return compose(f, s, full, depth + 1, d);
}

/* Adds s's layers in composition order: its defaults entries, itself where _self_ is. */
static int compose(struct cfile *f, struct source *s, const char *package, int depth, struct vf_diag *d) {
  struct hydra_entry *e = calloc(MAX_ENTRIES, sizeof *e);
  if (!e) return VF_ENOMEM;
  char dir[PATH_MAX];
  folder_of(s->doc.file, dir, sizeof dir);
  size_t n = depth < MAX_DEPTH ? hydra_defaults(s->doc.t.root, dir, e, MAX_ENTRIES) : 0;
  int rc = n ? 0 : add_layer(f, &s->doc.t, s->doc.t.root, package);
  for (size_t i = 0; i < n && !rc; i++)
    rc = e[i].self ? add_layer(f, &s->doc.t, s->doc.t.root, package) : compose_entry(f, s, &e[i], package, depth, d);
  free(e);
  return rc;
}

int view_open(struct cfile *f, const char *path, struct vf_diag *d) {
  folder_of(path, f->dir, sizeof f->dir);
  struct source *s = NULL;
  int rc = load_source(f, path, &s, d);
  if (rc == VF_ENOTFOUND) return diag_at(d, rc, path, UINT64_MAX, "no such file");
  if (!rc) rc = compose(f, s, "", 0, d);
  /* Composed last wins: the highest precedence first. */
  for (size_t i = 0; !rc && i < f->n_layers / 2; i++) {
    struct layer t = f->layers[i];
    f->layers[i] = f->layers[f->n_layers - 1 - i];
    f->layers[f->n_layers - 1 - i] = t;
  }
  return rc;
}

int view_find(const struct cfile *f, const char *path, struct place *out, struct vf_diag *d) {
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < f->n_layers; i++) {
    const struct layer *l = &f->layers[i];
    const char *rest = hydra_inside(l->package, path);
    struct yfind fd;
    struct vf_diag sub;
    if (!rest) continue;
    vf_diag_clear(&sub);
    int rc = ytree_find(&l->tree, rest, &fd, &sub);
    /* A path that runs into a plain value or a list is absent; a duplicate key is not. */
    if (rc == VF_EFORMAT) return d ? (*d = sub, rc) : rc;
    if (rc || !fd.node) continue;
    out->layer = l;
    out->node = fd.node;
    snprintf(out->key, sizeof out->key, "%s", rest);
    return 0;
  }
  return 0;
}

const struct layer *view_self(const struct cfile *f) {
  for (size_t i = 0; f->n_src && i < f->n_layers; i++)
    if (f->layers[i].tree.root == f->src[0]->doc.t.root) return &f->layers[i];
  return f->n_layers ? &f->layers[0] : NULL;
}

bool view_beside(const struct cfile *f, const char *name, char *out, size_t size) {
  if (name[0] == '/' || strcmp(f->dir, ".") == 0) return false;
  int n = snprintf(out, size, "%s/%s", f->dir, name);
  return n > 0 && (size_t)n < size && (path_is_file(out) || path_is_dir(out));
}

int place_line(const struct place *p) {
  int line = 0, col;
  if (p->node) ytree_linecol(&p->layer->tree, p->node->start, &line, &col);
  return line;
}

void view_close(struct cfile *f) {
  for (size_t i = 0; i < f->n_src; i++) {
    doc_close(&f->src[i]->doc);
    free(f->src[i]->text);
    free(f->src[i]);
  }
  free(f->src);
  free(f->layers);
  free(f->missing);
  f->src = NULL;
  f->layers = NULL;
  f->missing = NULL;
  f->n_src = f->n_layers = f->n_missing = 0;
}

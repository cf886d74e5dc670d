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

enum { MAX_CONFIGS = 32 };

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

static int note_missing(struct cfile *f, const struct hydra_config *h) {
  struct missing *grown = realloc(f->missing, (f->n_missing + 1) * sizeof *grown);
  if (!grown) return VF_ENOMEM;
  f->missing = grown;
  struct missing *m = &grown[f->n_missing++];
  snprintf(m->file, sizeof m->file, "%s", h->listed_in);
  m->line = h->line;
  snprintf(m->entry, sizeof m->entry, "%s (%s)", h->entry, h->file);
  return 0;
}

/* The layers of s's composition in its order: each config at its package, s itself where
 * its _self_ is. */
static int compose(struct cfile *f, struct source *s, struct vf_diag *d) {
  struct hydra_config *c = calloc(MAX_CONFIGS, sizeof *c);
  if (!c) return VF_ENOMEM;
  size_t n = hydra_compose(s->doc.file, &s->doc.t, c, MAX_CONFIGS);
  int rc = n ? 0 : add_layer(f, &s->doc.t, s->doc.t.root, "");
  for (size_t i = 0; i < n && !rc; i++) {
    struct source *g = s;
    if (c[i].missing) rc = note_missing(f, &c[i]);
    else if (!c[i].self) rc = load_source(f, c[i].file, &g, d);
    if (!rc && !c[i].missing) rc = add_layer(f, &g->doc.t, g->doc.t.root, c[i].package);
  }
  free(c);
  return rc;
}

int view_open(struct cfile *f, const char *path, struct vf_diag *d) {
  path_folder(path, f->dir, sizeof f->dir);
  struct source *s = NULL;
  int rc = load_source(f, path, &s, d);
  if (rc == VF_ENOTFOUND) return diag_at(d, rc, path, UINT64_MAX, "no such file");
  if (!rc) rc = compose(f, s, d);
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

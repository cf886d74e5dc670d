/* Checking an edit before anything is written: the result is re-parsed and compared with
 * the original node by node, so that only the values asked for changed (and only the keys
 * asked for were added), whatever the splicing in splice.c did. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "edit/internal.h"

struct target {
  const struct ynode *old, *now;
};

struct verify {
  const struct ytree *o, *n;
  struct target *tg;
  size_t ntg;
  struct vf_diag *d;
};

static bool same_str(const char *a, const char *b) { return (!a && !b) || (a && b && strcmp(a, b) == 0); }

static const struct target *target_of(const struct verify *v, const struct ynode *now) {
  for (size_t i = 0; i < v->ntg; i++)
    if (v->tg[i].now == now) return &v->tg[i];
  return NULL;
}

static int differs(const struct verify *v, const struct ynode *now, const char *what) {
  return ytree_diag(v->n, v->d, VF_EFORMAT, now ? now->start : 0,
                    "cannot edit safely: the result would also change %s here", what);
}

static bool key_repeated(const struct ynode *m, size_t i) {
  const struct ynode *k = m->kid[i];
  for (size_t j = 0; j < m->nkid; j += 2)
    if (j != i && m->kid[j]->kind == YN_SCALAR && m->kid[j]->vlen == k->vlen &&
        memcmp(m->kid[j]->value, k->value, k->vlen) == 0)
      return true;
  return false;
}

/* Appended entries must be exactly the keys the edits created. */
static int check_created(const struct verify *v, const struct ynode *m, size_t from) {
  for (size_t i = from; i + 1 < m->nkid; i += 2) {
    const struct ynode *k = m->kid[i], *val = m->kid[i + 1];
    if (k->kind != YN_SCALAR || k->tag || k->anchor || key_repeated(m, i))
      return differs(v, k, "a key");
    if (val->tag || val->anchor) return differs(v, val, "a value");
    if (val->kind == YN_MAP) {
      int rc = val->nkid ? check_created(v, val, 0) : differs(v, val, "a value");
      if (rc) return rc;
      continue;
    }
    const struct target *t = target_of(v, val);
    if (val->kind != YN_SCALAR || !t || t->old) return differs(v, val, "a value");
  }
  return 0;
}

static int compare(const struct verify *v, const struct ynode *o, const struct ynode *n) {
  const struct target *t = target_of(v, n);
  /* An edited value keeps its anchor: aliases elsewhere still name it. */
  if (t && t->old == o)
    return same_str(o->tag, n->tag) && same_str(o->anchor, n->anchor) ? 0 : differs(v, n, "an anchor");
  if (o->kind != n->kind || o->style != n->style || !same_str(o->tag, n->tag) ||
      !same_str(o->anchor, n->anchor))
    return differs(v, n, "the style, tag or anchor");
  if (o->kind == YN_SCALAR || o->kind == YN_ALIAS) {
    if (o->vlen != n->vlen || memcmp(o->value, n->value, o->vlen) != 0) return differs(v, n, "a value");
    return 0;
  }
  if (n->nkid < o->nkid || (o->kind == YN_SEQ && n->nkid != o->nkid))
    return differs(v, n, "the number of entries");
  for (size_t i = 0; i < o->nkid; i++) {
    int rc = compare(v, o->kid[i], n->kid[i]);
    if (rc) return rc;
  }
  return o->kind == YN_MAP ? check_created(v, n, o->nkid) : 0;
}

static int find_targets(struct verify *v, const struct vf_path_edit *edits, size_t n) {
  for (size_t i = 0; i < n; i++) {
    struct yfind fo, fn;
    int rc = ytree_find(v->n, edits[i].path, &fn, v->d);
    if (rc) return rc;
    if (!fn.node || !ynode_equals(fn.node, &edits[i].value))
      return ytree_diag(v->n, v->d, VF_EFORMAT, fn.node ? fn.node->start : 0,
                        "cannot edit safely: %s does not read back as the value written",
                        edits[i].path);
    rc = ytree_find(v->o, edits[i].path, &fo, v->d);
    if (rc) return rc;
    if ((!fo.node && !edits[i].create) || (fo.node && fo.node->kind != YN_SCALAR && fo.node->kind != YN_ALIAS))
      return ytree_diag(v->o, v->d, VF_EFORMAT, 0, "cannot edit safely: %s was not a value there",
                        edits[i].path);
    v->tg[i] = (struct target){fo.node, fn.node};
  }
  return 0;
}

static int verify_docs(const struct doc *o, const struct doc *n,
                       const struct vf_path_edit *edits, size_t ne, struct vf_diag *d) {
  if (o->t.json != n->t.json)
    return diag_line(d, VF_EFORMAT, o->file, 1, 1, "cannot edit safely: the result is not JSON");
  struct verify v = {&o->t, &n->t, calloc(ne ? ne : 1, sizeof *v.tg), ne, d};
  if (!v.tg) return VF_ENOMEM;
  int rc = find_targets(&v, edits, ne);
  if (!rc && o->t.root && n->t.root) rc = compare(&v, o->t.root, n->t.root);
  else if (!rc && n->t.root) rc = n->t.root->kind == YN_MAP ? check_created(&v, n->t.root, 0)
                                                            : differs(&v, n->t.root, "the document");
  else if (!rc && o->t.root) rc = differs(&v, NULL, "the document");
  free(v.tg);
  return rc;
}

int vf_edit_verify(const char *file, const char *old, size_t old_len, const char *new_text,
                   size_t new_len, const struct vf_path_edit *edits, size_t n, struct vf_diag *d) {
  struct doc o, nd;
  int rc = doc_open(&o, file, old, old_len, d);
  if (rc) return rc;
  rc = doc_open(&nd, file, new_text, new_len, d);
  if (rc) {
    doc_close(&o);
    return rc == VF_ENOMEM ? rc : VF_EFORMAT;
  }
  rc = verify_docs(&o, &nd, edits, n, d);
  doc_close(&nd);
  doc_close(&o);
  return rc;
}

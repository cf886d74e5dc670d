/* Surgical YAML/JSON editing: locate a value in the document's node tree, replace only its
 * bytes (or append a key to its mapping), then have verify.c re-parse the result and check
 * that nothing else changed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "edit/internal.h"

void vf_edited_cleanup(struct vf_edited *e) {
  for (size_t i = 0; i < e->n_changes; i++) {
    struct vf_change *c = &e->changes[i];
    free(c->key);
    free(c->path);
    free(c->old_text);
    free(c->new_text);
    free(c->note);
  }
  free(e->changes);
  free(e->text);
  memset(e, 0, sizeof *e);
}

/* ---- replacing a value ---- */

static const struct ynode *first_bool(const struct ynode *n) {
  if (!n) return NULL;
  if (n->kind == YN_SCALAR) return ynode_type(n) == VF_VALUE_BOOL && !n->tag ? n : NULL;
  for (size_t i = 0; i < n->nkid; i++) {
    const struct ynode *b = first_bool(n->kid[i]);
    if (b) return b;
  }
  return NULL;
}

/* The aliases of n's anchor: those after n and before the anchor is defined again. */
struct uses {
  const struct ynode *target;
  bool past, redefined;
  size_t count, first; /* the first use's offset */
};

static void find_uses(const struct ynode *m, struct uses *u) {
  if (u->redefined) return;
  if (m == u->target) u->past = true;
  else if (u->past && m->anchor && strcmp(m->anchor, u->target->anchor) == 0) u->redefined = true;
  else if (u->past && m->kind == YN_ALIAS && strcmp(m->value, u->target->anchor) == 0 && !u->count++) u->first = m->start;
  for (size_t i = 0; i < m->nkid && !u->redefined; i++) find_uses(m->kid[i], u);
}

/* A value other keys use through its anchor would change them too, silently. */
static int check_anchor(const struct ytree *t, const struct ynode *n, const struct vf_path_edit *e,
                        struct vf_diag *d) {
  struct uses u = {n, false, false, 0, 0};
  if (!n->anchor) return 0;
  find_uses(t->root, &u);
  if (!u.count) return 0;
  int line, col;
  ytree_linecol(t, u.first, &line, &col);
  char more[48] = "";
  if (u.count > 1) snprintf(more, sizeof more, " and %zu more", u.count - 1);
  return ytree_diag(t, d, VF_EINVAL, n->start, "%s carries the anchor &%s, which line %d%s use%s as *%s: a new "
                    "value here would change %s too: --set %s too (an alias set takes a value of its own), or "
                    "edit the file by hand", e->path, n->anchor, line, more, u.count > 1 ? "" : "s", n->anchor,
                    u.count > 1 ? "them" : "it", u.count > 1 ? "those keys" : "that key");
}

/* The node an alias names: the last one before it to define the anchor. */
static void find_anchored(const struct ynode *m, const struct ynode *alias, const struct ynode **found) {
  if (m->start >= alias->start) return;
  if (m->anchor && strcmp(m->anchor, alias->value) == 0) *found = m;
  for (size_t i = 0; i < m->nkid; i++) find_anchored(m->kid[i], alias, found);
}

static int check_value(const struct ytree *t, const struct ynode *n, const struct vf_path_edit *e,
                       struct vf_diag *d) {
  if (n->style == YAML_LITERAL_SCALAR_STYLE || n->style == YAML_FOLDED_SCALAR_STYLE)
    return ytree_diag(t, d, VF_EINVAL, n->vstart, "%s is a block scalar (| or >); edit it by hand",
                      e->path);
  if (n->tag)
    return ytree_diag(t, d, VF_EINVAL, n->start, "%s has an explicit tag (%s); edit it by hand",
                      e->path, n->tag);
  return check_anchor(t, n, e, d);
}

/* n is what is replaced; an alias of a single value is replaced by the new value itself, and
 * the anchor keeps its own for the keys that still use it. */
static int check_target(const struct ytree *t, const struct ynode *n, const struct vf_path_edit *e,
                        struct vf_diag *d) {
  const struct ynode *v = n; /* what the key holds */
  if (n->kind == YN_ALIAS) {
    v = NULL;
    find_anchored(t->root, n, &v);
    if (!v)
      return ytree_diag(t, d, VF_EINVAL, n->start, "%s is the alias *%s, which no anchor before it defines",
                        e->path, n->value);
  }
  if (v->kind != YN_SCALAR)
    return ytree_diag(t, d, VF_EINVAL, n->start, "%s %s a %s, not a single value", e->path,
                      n == v ? "holds" : "is an alias of", v->kind == YN_MAP ? "mapping" : "list");
  int rc = n == v ? check_value(t, n, e, d) : 0;
  if (rc || !e->keep_type) return rc;
  enum vf_value_kind was = ynode_type(v), now = e->value.kind;
  bool was_num = was == VF_VALUE_INT || was == VF_VALUE_FLOAT;
  bool now_num = now == VF_VALUE_INT || now == VF_VALUE_FLOAT;
  if (was_num && !now_num)
    return ytree_diag(t, d, VF_EINVAL, n->vstart, "%s holds a number, not %s", e->path,
                      now == VF_VALUE_STRING ? "a string" : "this value");
  if (was == VF_VALUE_BOOL && now != VF_VALUE_BOOL)
    return ytree_diag(t, d, VF_EINVAL, n->vstart, "%s holds true or false, not this value",
                      e->path);
  return 0;
}

static int fill_change(struct vf_change *ch, const struct ytree *t, const char *path, size_t at,
                       const char *old, size_t old_len, const char *new_text, size_t new_len) {
  ytree_linecol(t, at, &ch->line, &ch->col);
  ch->key = strdup(path);
  ch->path = strdup(path);
  ch->old_text = bytes_dup(old, old_len);
  ch->new_text = bytes_dup(new_text, new_len);
  return ch->key && ch->path && ch->old_text && ch->new_text ? 0 : VF_ENOMEM;
}

static int splice(struct sbuf *out, const struct ytree *t, size_t from, size_t to, const char *mid,
                  size_t mid_len) {
  sb_add(out, t->text, from);
  sb_add(out, mid, mid_len);
  sb_add(out, t->text + to, t->len - to);
  return out->oom ? VF_ENOMEM : 0;
}

static int replace_value(const struct ytree *t, const struct vf_path_edit *e, const struct ynode *n,
                         struct sbuf *out, struct vf_change *ch, struct vf_diag *d) {
  int rc = check_target(t, n, e, d);
  if (rc) return rc;
  bool alias = n->kind == YN_ALIAS;
  size_t from = alias ? n->start : n->vstart;
  struct sbuf val = {0};
  /* An empty value (`key:`) needs the space YAML wants after the colon. */
  size_t lead = from == n->end && from > 0 && t->text[from - 1] == ':';
  if (lead) sb_puts(&val, " ");
  rc = render_value(&val, &e->value, t->json, alias ? NULL : n, first_bool(t->root));
  if (!rc) rc = splice(out, t, from, n->end, val.p, val.len);
  if (!rc)
    rc = fill_change(ch, t, e->path, from, t->text + from, n->end - from, val.p + lead, val.len - lead);
  char note[256];
  snprintf(note, sizeof note, "written in place of the alias *%s; &%s keeps its value for the keys that still use it",
           n->value, n->value);
  if (!rc && alias && !(ch->note = strdup(note))) rc = VF_ENOMEM;
  sb_free(&val);
  return rc;
}

/* ---- adding a key ---- */

static size_t column_of(const struct ytree *t, size_t off) {
  int line, col;
  ytree_linecol(t, off, &line, &col);
  return (size_t)col - 1;
}

/* The file's indentation unit: how far a nested block mapping sits right of its parent. */
static size_t indent_step(const struct ytree *t, const struct ynode *n) {
  if (!n || n->kind != YN_MAP || ynode_flow(n)) return 0;
  for (size_t i = 1; i < n->nkid; i += 2) {
    const struct ynode *v = n->kid[i];
    if (v->kind == YN_MAP && !ynode_flow(v) && v->nkid) {
      size_t outer = column_of(t, n->kid[0]->start), inner = column_of(t, v->kid[0]->start);
      if (inner > outer) return inner - outer;
    }
    size_t s = indent_step(t, v);
    if (s) return s;
  }
  return 0;
}

/* Renders the missing segments of rest as nested block lines, or as one flow value. */
static int render_block(struct sbuf *out, const struct ytree *t, const char *rest,
                        const struct vf_value *v, size_t indent, bool final_eol) {
  size_t step = indent_step(t, t->root);
  if (!step) step = 2;
  for (size_t depth = 0;; depth++) {
    size_t n = strcspn(rest, ".");
    char *key = bytes_dup(rest, n);
    if (!key) return VF_ENOMEM;
    sb_printf(out, "%*s", (int)(indent + depth * step), "");
    render_key(out, key, false);
    free(key);
    sb_puts(out, ":");
    if (!rest[n]) {
      sb_puts(out, " ");
      int rc = render_value(out, v, false, NULL, first_bool(t->root));
      if (rc) return rc;
      if (final_eol) sb_puts(out, t->eol);
      return out->oom ? VF_ENOMEM : 0;
    }
    sb_puts(out, t->eol);
    rest += n + 1;
  }
}

static int render_flow(struct sbuf *out, const struct ytree *t, const char *rest,
                       const struct vf_value *v, const struct ynode *bool_style) {
  size_t n = strcspn(rest, ".");
  char *key = bytes_dup(rest, n);
  if (!key) return VF_ENOMEM;
  render_key(out, key, t->json);
  free(key);
  sb_puts(out, ": ");
  if (!rest[n]) return render_value(out, v, t->json, NULL, bool_style);
  sb_puts(out, "{");
  int rc = render_flow(out, t, rest + n + 1, v, bool_style);
  sb_puts(out, "}");
  return rc ? rc : out->oom ? VF_ENOMEM : 0;
}

static size_t line_start(const struct ytree *t, size_t off) {
  while (off > t->bom && t->text[off - 1] != '\n') off--;
  return off;
}

/* Inserts after the last entry of a block mapping, on a line of its own. */
static int add_block(const struct ytree *t, const struct ynode *m, const char *rest,
                     const struct vf_value *v, struct sbuf *ins, size_t *at) {
  size_t pos = m ? m->end : t->len, indent = m ? column_of(t, m->kid[0]->start) : 0;
  if (!(pos > t->bom && t->text[pos - 1] == '\n')) {
    const char *lf = memchr(t->text + pos, '\n', t->len - pos);
    pos = lf ? (size_t)(lf - t->text) + 1 : t->len;
  }
  *at = pos;
  bool at_eof_no_eol = pos == t->len && pos > t->bom && t->text[pos - 1] != '\n';
  if (at_eof_no_eol) sb_puts(ins, t->eol);
  return render_block(ins, t, rest, v, indent, !at_eof_no_eol);
}

/* Inserts into a flow mapping ({...} or a JSON object) after its last entry. */
static int add_flow(const struct ytree *t, const struct ynode *m, const char *rest,
                    const struct vf_value *v, struct sbuf *ins, size_t *at) {
  const struct ynode *style = first_bool(t->root);
  if (m->nkid == 0) {
    *at = m->close;
    return render_flow(ins, t, rest, v, style);
  }
  const struct ynode *key = m->kid[m->nkid - 2];
  *at = m->kid[m->nkid - 1]->end;
  size_t ls = line_start(t, key->start);
  if (ls <= m->start) {
    sb_puts(ins, ", ");
  } else {
    size_t ws = ls;
    while (ws < key->start && (t->text[ws] == ' ' || t->text[ws] == '\t')) ws++;
    sb_puts(ins, ",");
    sb_puts(ins, t->eol);
    sb_add(ins, t->text + ls, ws - ls);
  }
  return render_flow(ins, t, rest, v, style);
}

static int create_value(const struct ytree *t, const struct vf_path_edit *e, const struct yfind *f,
                        struct sbuf *out, struct vf_change *ch, struct vf_diag *d) {
  if (!f->parent && (t->json || t->root))
    return ytree_diag(t, d, VF_EINVAL, 0, "cannot add %s: the document is not a mapping", e->path);
  struct sbuf ins = {0};
  size_t at = 0;
  int rc = f->parent && ynode_flow(f->parent) ? add_flow(t, f->parent, f->rest, &e->value, &ins, &at)
                                              : add_block(t, f->parent, f->rest, &e->value, &ins, &at);
  if (!rc) rc = splice(out, t, at, at, ins.p, ins.len);
  if (!rc) {
    struct sbuf val = {0};
    rc = render_value(&val, &e->value, t->json, NULL, first_bool(t->root));
    if (!rc) rc = fill_change(ch, t, e->path, f->parent ? f->parent->start : 0, "", 0, val.p, val.len);
    ch->created = 1;
    sb_free(&val);
  }
  sb_free(&ins);
  return rc;
}

/* ---- driver ---- */

static int check_paths(const char *file, const struct vf_path_edit *edits, size_t n,
                       struct vf_diag *d) {
  for (size_t i = 0; i < n; i++) {
    const char *p = edits[i].path;
    if (!p || !*p || *p == '.' || p[strlen(p) - 1] == '.' || strstr(p, ".."))
      return diag_line(d, VF_EINVAL, file, 1, 1, "'%s' is not a dotted path", p ? p : "");
  }
  return 0;
}

/* One edit on the current text; *out stays empty when the value is already there. */
static int edit_step(const struct ytree *t, const struct vf_path_edit *e, bool create_pass,
                     struct sbuf *out, struct vf_change *ch, struct vf_diag *d) {
  struct yfind f;
  int rc = ytree_find(t, e->path, &f, d);
  if (rc) return rc;
  if (f.node) {
    if (create_pass || ynode_equals(f.node, &e->value)) return 0;
    return replace_value(t, e, f.node, out, ch, d);
  }
  if (!create_pass) return 0;
  if (!e->create)
    return ytree_diag(t, d, VF_ENOTFOUND, f.parent ? f.parent->start : 0, "no key %s%s", e->path,
                      f.merged ? " (it may come from a << merge)" : "");
  return create_value(t, e, &f, out, ch, d);
}

static bool at_alias(const struct ytree *t, const struct vf_path_edit *e) {
  struct yfind f;
  return ytree_find(t, e->path, &f, NULL) == 0 && f.node && f.node->kind == YN_ALIAS;
}

/* Edits run one at a time on the text the previous one produced, aliases first (so that an
 * anchor whose every use the call replaces is free to change), then values, new keys last,
 * so that every step sees real positions. */
static int run_edits(const char *file, struct doc *doc, char **cur, size_t *cur_len,
                     const struct vf_path_edit *edits, size_t n, struct vf_edited *out,
                     struct vf_diag *d) {
  bool *first = calloc(n ? n : 1, sizeof *first);
  if (!first) return VF_ENOMEM;
  for (size_t i = 0; i < n; i++) first[i] = at_alias(&doc->t, &edits[i]);
  int rc = 0;
  for (int pass = 0; pass < 3 && !rc; pass++) {
    for (size_t i = 0; i < n && !rc; i++) {
      if ((pass == 0) != first[i] && pass < 2) continue;
      struct sbuf next = {0};
      struct vf_change *ch = &out->changes[out->n_changes];
      rc = edit_step(&doc->t, &edits[i], pass == 2, &next, ch, d);
      if (!rc && next.len) {
        out->n_changes++;
        doc_close(doc);
        free(*cur);
        *cur = sb_take(&next, cur_len);
        rc = *cur ? doc_open(doc, file, *cur, *cur_len, d) : VF_ENOMEM;
      }
      sb_free(&next);
    }
  }
  free(first);
  return rc;
}

/* Reports every change where it sits in the result: new keys shift the lines below them. */
static void locate_changes(const struct ytree *t, struct vf_edited *out) {
  for (size_t i = 0; i < out->n_changes; i++) {
    struct yfind f;
    if (ytree_find(t, out->changes[i].path, &f, NULL) == 0 && f.node)
      ytree_linecol(t, f.node->vstart, &out->changes[i].line, &out->changes[i].col);
  }
}

int vf_edit_buffer(const char *file, const char *text, size_t len, const struct vf_path_edit *edits,
                   size_t n, struct vf_edited *out, struct vf_diag *d) {
  memset(out, 0, sizeof *out);
  int rc = check_paths(file, edits, n, d);
  if (rc) return rc;
  out->changes = calloc(n ? n : 1, sizeof *out->changes);
  char *cur = bytes_dup(text, len);
  size_t cur_len = len;
  struct doc doc;
  if (!out->changes || !cur) rc = VF_ENOMEM;
  if (!rc) rc = doc_open(&doc, file, cur, cur_len, d);
  if (!rc) {
    rc = run_edits(file, &doc, &cur, &cur_len, edits, n, out, d);
    if (!rc) locate_changes(&doc.t, out);
    doc_close(&doc);
  }
  if (!rc) rc = vf_edit_verify(file, text, len, cur, cur_len, edits, n, d);
  if (rc) {
    free(cur);
    vf_edited_cleanup(out);
    return rc;
  }
  out->text = cur;
  out->len = cur_len;
  return 0;
}

/* A YAML/JSON node tree with byte positions, built from libyaml's events. libyaml marks
 * count characters (a CRLF counts two, a BOM none), so every mark is mapped to a byte
 * offset before it is stored. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base/diag.h"
#include "base/sbuf.h"
#include "io/doc.h"

enum { MAX_DEPTH = 256 };

/* Maps libyaml's character index to a byte offset; marks mostly arrive in order, so a
 * forward cursor makes the walk linear. */
struct c2b {
  const char *text;
  size_t len, ci, bi;
  bool ascii;
};

static size_t c2b_map(struct c2b *m, size_t idx) {
  if (m->ascii) return idx < m->len ? idx : m->len;
  if (idx < m->ci) m->ci = m->bi = 0;
  while (m->ci < idx && m->bi < m->len) {
    m->bi++;
    while (m->bi < m->len && ((unsigned char)m->text[m->bi] & 0xC0) == 0x80) m->bi++;
    m->ci++;
  }
  return m->bi;
}

struct builder {
  struct ytree *t;
  struct c2b m;
  struct ynode *stack[MAX_DEPTH];
  size_t depth;
  int docs;
};

static size_t byte_at(struct builder *b, yaml_mark_t mark) { return b->t->bom + c2b_map(&b->m, mark.index); }

static char *dup_or_null(const yaml_char_t *s) { return s ? strdup((const char *)s) : NULL; }

static bool is_anchor_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         c == '-';
}

/* An event's start mark sits on its anchor or tag; the value proper follows them. */
static size_t skip_properties(const char *s, size_t p, size_t end) {
  while (p < end && (s[p] == '&' || s[p] == '!')) {
    if (s[p] == '&') {
      p++;
      while (p < end && is_anchor_char(s[p])) p++;
    } else {
      while (p < end && s[p] != ' ' && s[p] != '\t' && s[p] != '\r' && s[p] != '\n') p++;
    }
    while (p < end && (s[p] == ' ' || s[p] == '\t' || s[p] == '\r' || s[p] == '\n' || s[p] == '#')) {
      if (s[p] == '#')
        while (p < end && s[p] != '\n') p++;
      else
        p++;
    }
  }
  return p < end ? p : end;
}

static void node_free(struct ynode *n) {
  if (!n) return;
  for (size_t i = 0; i < n->nkid; i++) node_free(n->kid[i]);
  free(n->kid);
  free(n->value);
  free(n->tag);
  free(n->anchor);
  free(n);
}

void ytree_free(struct ytree *t) {
  node_free(t->root);
  t->root = NULL;
}

void ytree_linecol(const struct ytree *t, size_t off, int *line, int *col) {
  int l = 1, c = 1;
  for (size_t i = t->bom; i < off && i < t->len; i++) {
    unsigned char ch = (unsigned char)t->text[i];
    if (ch == '\n') {
      l++;
      c = 1;
    } else if ((ch & 0xC0) != 0x80 && ch != '\r') {
      c++;
    }
  }
  *line = l;
  *col = c;
}

int ytree_diag(const struct ytree *t, struct vf_diag *d, int code, size_t off, const char *fmt, ...) {
  if (!d) return code;
  char msg[sizeof d->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  int line, col;
  ytree_linecol(t, off, &line, &col);
  return diag_line(d, code, t->file, line, col, "%s", msg);
}

static int add_kid(struct ynode *p, struct ynode *k) {
  if (p->nkid == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 8;
    struct ynode **grown = realloc(p->kid, cap * sizeof *grown);
    if (!grown) return VF_ENOMEM;
    p->kid = grown;
    p->cap = cap;
  }
  p->kid[p->nkid++] = k;
  return 0;
}

static int attach(struct builder *b, struct ynode *n) {
  if (b->depth == 0) {
    b->t->root = n;
    return 0;
  }
  int rc = add_kid(b->stack[b->depth - 1], n);
  if (rc) node_free(n);
  return rc;
}

static struct ynode *node_new(struct builder *b, enum ynode_kind kind, const yaml_event_t *e) {
  struct ynode *n = calloc(1, sizeof *n);
  if (!n) return NULL;
  n->kind = kind;
  n->json = b->t->json;
  n->start = byte_at(b, e->start_mark);
  n->end = byte_at(b, e->end_mark);
  n->vstart = n->start;
  return n;
}

static int on_scalar(struct builder *b, const yaml_event_t *e) {
  struct ynode *n = node_new(b, YN_SCALAR, e);
  if (!n) return VF_ENOMEM;
  n->style = e->data.scalar.style;
  n->vlen = e->data.scalar.length;
  n->value = bytes_dup((const char *)e->data.scalar.value, n->vlen);
  n->anchor = dup_or_null(e->data.scalar.anchor);
  n->tag = dup_or_null(e->data.scalar.tag);
  if (!n->value || (e->data.scalar.anchor && !n->anchor) || (e->data.scalar.tag && !n->tag)) {
    node_free(n);
    return VF_ENOMEM;
  }
  if (n->anchor || n->tag) n->vstart = skip_properties(b->t->text, n->start, n->end);
  return attach(b, n);
}

static int on_alias(struct builder *b, const yaml_event_t *e) {
  struct ynode *n = node_new(b, YN_ALIAS, e);
  if (!n) return VF_ENOMEM;
  n->value = dup_or_null(e->data.alias.anchor);
  if (!n->value) {
    node_free(n);
    return VF_ENOMEM;
  }
  n->vlen = strlen(n->value);
  return attach(b, n);
}

static int on_start(struct builder *b, const yaml_event_t *e, enum ynode_kind kind) {
  struct ynode *n = node_new(b, kind, e);
  if (!n) return VF_ENOMEM;
  const yaml_char_t *anchor, *tag;
  if (kind == YN_MAP) {
    n->style = e->data.mapping_start.style;
    anchor = e->data.mapping_start.anchor;
    tag = e->data.mapping_start.tag;
  } else {
    n->style = e->data.sequence_start.style;
    anchor = e->data.sequence_start.anchor;
    tag = e->data.sequence_start.tag;
  }
  n->anchor = dup_or_null(anchor);
  n->tag = dup_or_null(tag);
  if ((anchor && !n->anchor) || (tag && !n->tag)) {
    node_free(n);
    return VF_ENOMEM;
  }
  int rc = attach(b, n);
  if (rc) return rc;
  b->stack[b->depth++] = n;
  return 0;
}

static void on_end(struct builder *b, const yaml_event_t *e) {
  struct ynode *n = b->stack[--b->depth];
  if (ynode_flow(n)) {
    n->close = byte_at(b, e->start_mark);
    n->end = n->close + 1;
  } else if (n->nkid) {
    /* A block collection's end event sits on the next token, past comments and blank
     * lines that belong to whatever follows. */
    n->end = n->kid[n->nkid - 1]->end;
  }
}

static int on_event(struct builder *b, const yaml_event_t *e, struct vf_diag *d) {
  switch (e->type) {
  case YAML_DOCUMENT_START_EVENT:
    if (++b->docs > 1)
      return ytree_diag(b->t, d, VF_EFORMAT, byte_at(b, e->start_mark),
                        "more than one YAML document in the file is not supported");
    return 0;
  case YAML_SCALAR_EVENT:
    return on_scalar(b, e);
  case YAML_ALIAS_EVENT:
    return on_alias(b, e);
  case YAML_MAPPING_START_EVENT:
  case YAML_SEQUENCE_START_EVENT:
    if (b->depth == MAX_DEPTH)
      return ytree_diag(b->t, d, VF_EFORMAT, byte_at(b, e->start_mark),
                        "nested deeper than %d levels", MAX_DEPTH);
    return on_start(b, e, e->type == YAML_MAPPING_START_EVENT ? YN_MAP : YN_SEQ);
  case YAML_MAPPING_END_EVENT:
  case YAML_SEQUENCE_END_EVENT:
    on_end(b, e);
    return 0;
  default:
    return 0;
  }
}

static int parser_error(struct builder *b, const yaml_parser_t *p, struct vf_diag *d) {
  if (p->error == YAML_MEMORY_ERROR) return VF_ENOMEM;
  const char *what = b->t->json ? "JSON" : "YAML";
  size_t off = byte_at(b, p->problem_mark);
  if (p->context)
    return ytree_diag(b->t, d, VF_EFORMAT, off, "invalid %s: %s %s", what, p->problem, p->context);
  return ytree_diag(b->t, d, VF_EFORMAT, off, "invalid %s: %s", what,
                    p->problem ? p->problem : "cannot parse");
}

static int check_encoding(struct ytree *t, struct vf_diag *d) {
  const unsigned char *u = (const unsigned char *)t->text;
  if (t->len >= 3 && u[0] == 0xEF && u[1] == 0xBB && u[2] == 0xBF) t->bom = 3;
  else if (t->len >= 2 && ((u[0] == 0xFE && u[1] == 0xFF) || (u[0] == 0xFF && u[1] == 0xFE)))
    return diag_line(d, VF_EFORMAT, t->file, 1, 1, "UTF-16 files are not supported");
  const char *lf = memchr(t->text, '\n', t->len);
  t->eol = lf && lf > t->text && lf[-1] == '\r' ? "\r\n" : "\n";
  return 0;
}

static bool all_ascii(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] >= 0x80) return false;
  return true;
}

int ytree_parse(struct ytree *t, const char *file, const char *text, size_t len, bool json,
                struct vf_diag *d) {
  memset(t, 0, sizeof *t);
  t->file = file;
  t->text = text;
  t->len = len;
  t->json = json;
  int rc = check_encoding(t, d);
  if (rc) return rc;
  struct builder *b = calloc(1, sizeof *b);
  if (!b) return VF_ENOMEM;
  b->t = t;
  b->m = (struct c2b){text + t->bom, len - t->bom, 0, 0, all_ascii(text, len)};
  yaml_parser_t p;
  if (!yaml_parser_initialize(&p)) {
    free(b);
    return VF_ENOMEM;
  }
  yaml_parser_set_input_string(&p, (const unsigned char *)text + t->bom, len - t->bom);
  yaml_parser_set_encoding(&p, YAML_UTF8_ENCODING);
  for (bool done = false; !done && !rc;) {
    yaml_event_t e;
    if (!yaml_parser_parse(&p, &e)) {
      rc = parser_error(b, &p, d);
      break;
    }
    done = e.type == YAML_STREAM_END_EVENT;
    rc = on_event(b, &e, d);
    yaml_event_delete(&e);
  }
  yaml_parser_delete(&p);
  free(b);
  if (rc) ytree_free(t);
  return rc;
}

/* ---- paths ---- */

static bool is_merge_key(const struct ynode *k) {
  return k->kind == YN_SCALAR && k->style == YAML_PLAIN_SCALAR_STYLE && strcmp(k->value, "<<") == 0;
}

/* The value under key seg[0..n) in map m; a second match is an error (loaders disagree on
 * which one wins). */
static int map_get(const struct ytree *t, const struct ynode *m, const char *seg, size_t n,
                   struct ynode **out, struct vf_diag *d) {
  *out = NULL;
  for (size_t i = 0; i + 1 < m->nkid; i += 2) {
    const struct ynode *k = m->kid[i];
    if (k->kind != YN_SCALAR || k->vlen != n || memcmp(k->value, seg, n) != 0) continue;
    if (*out)
      return ytree_diag(t, d, VF_EFORMAT, k->start, "duplicate key '%.*s'", (int)n, seg);
    *out = m->kid[i + 1];
  }
  return 0;
}

/* Keys may hold dots themselves: try "a", then "a.b", ... as the next segment. */
static int map_step(const struct ytree *t, const struct ynode *m, const char *p, struct ynode **v,
                    size_t *used, struct vf_diag *d) {
  for (const char *dot = p;; dot++) {
    dot = strchr(dot, '.');
    size_t n = dot ? (size_t)(dot - p) : strlen(p);
    int rc = map_get(t, m, p, n, v, d);
    if (rc || *v) {
      *used = n;
      return rc;
    }
    if (!dot) return 0;
  }
}

static int seq_step(const struct ytree *t, const struct ynode *s, const char *p, struct ynode **v,
                    size_t *used, struct vf_diag *d) {
  size_t n = strcspn(p, ".");
  char *end;
  unsigned long long i = strtoull(p, &end, 10);
  if (n == 0 || end != p + n || *p == '-' || *p == '+')
    return ytree_diag(t, d, VF_ENOTFOUND, s->start, "'%.*s' is not an index: this is a list",
                      (int)n, p);
  if (i >= s->nkid)
    return ytree_diag(t, d, VF_ENOTFOUND, s->start, "the list has %zu items, no item %llu",
                      s->nkid, i);
  *v = s->kid[i];
  *used = n;
  return 0;
}

int ytree_find(const struct ytree *t, const char *path, struct yfind *out, struct vf_diag *d) {
  memset(out, 0, sizeof *out);
  struct ynode *n = t->root;
  const char *p = path;
  while (n && *p) {
    struct ynode *v = NULL;
    size_t used = 0;
    int rc;
    if (n->kind == YN_MAP) {
      rc = map_step(t, n, p, &v, &used, d);
    } else if (n->kind == YN_SEQ) {
      rc = seq_step(t, n, p, &v, &used, d);
    } else if (n->kind == YN_ALIAS) {
      return ytree_diag(t, d, VF_EFORMAT, n->start,
                        "the path goes through the alias *%s; edit the anchor &%s instead",
                        n->value, n->value);
    } else {
      return ytree_diag(t, d, VF_ENOTFOUND, n->vstart,
                        "'%.*s' would be under a plain value, not a mapping", (int)strcspn(p, "."), p);
    }
    if (rc) return rc;
    if (!v) {
      out->parent = n;
      out->rest = p;
      for (size_t i = 0; i < n->nkid; i += 2) out->merged |= is_merge_key(n->kid[i]);
      return 0;
    }
    n = v;
    p += used;
    if (*p == '.') p++;
  }
  if (!n) {
    out->rest = p;
    return 0;
  }
  out->node = n;
  return 0;
}

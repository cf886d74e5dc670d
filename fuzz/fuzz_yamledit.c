/* Random YAML/JSON documents and random edits. Whenever vramfit accepts an edit, an
 * independent oracle (its own walk over libyaml events) must agree that every other value
 * is unchanged and the edited paths hold their new values. Then the output is mutated at
 * random: whenever vf_edit_verify lets a mutant through, the oracle must agree too.
 *
 * Input: byte 0 picks the leaves to edit, byte 1 the values, byte 2 flags (JSON name,
 * create, two edits), bytes 3-4 the mutation; the rest is the document. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "vramfit.h"

enum { MAX_DOC = 4096, MAX_LEAVES = 2048, MAX_DEPTH = 48, PATH_MAX_LEN = 512 };

struct leaf {
  char path[PATH_MAX_LEN];
  char *value; /* "P|tag|anchor|text": P plain, Q quoted, A alias, M/S empty collection */
};

struct leaves {
  struct leaf *v;
  size_t n;
  bool ambiguous; /* keys with dots, or paths too long to tell apart */
};

struct frame {
  bool map, want_key;
  size_t index, plen;
  char key[PATH_MAX_LEN];
  size_t kids;
};

static void free_leaves(struct leaves *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i].value);
  free(l->v);
  memset(l, 0, sizeof *l);
}

static bool add_leaf(struct leaves *l, const char *path, char kind, const char *tag, const char *anchor,
                     const char *text, size_t tlen) {
  if (l->n == MAX_LEAVES) return false;
  struct leaf *f = &l->v[l->n++];
  snprintf(f->path, sizeof f->path, "%s", path);
  size_t n = tlen + strlen(tag ? tag : "") + strlen(anchor ? anchor : "") + 8;
  f->value = malloc(n);
  int head = snprintf(f->value, n, "%c|%s|%s|", kind, tag ? tag : "", anchor ? anchor : "");
  memcpy(f->value + head, text, tlen);
  f->value[head + (int)tlen] = '\0';
  return true;
}

/* The path of the node about to start under the top frame, in path (len: its length). */
static void child_path(const struct frame *st, size_t depth, char *path) {
  const struct frame *top = &st[depth - 1];
  if (top->map) snprintf(path + top->plen, PATH_MAX_LEN - top->plen, "%s%s", top->plen ? "." : "", top->key);
  else snprintf(path + top->plen, PATH_MAX_LEN - top->plen, "%s%zu", top->plen ? "." : "", top->index);
}

/* Handles one event; false when the document is beyond what the oracle models. */
static bool on_event(const yaml_event_t *e, struct frame *st, size_t *depth, char *path, struct leaves *out) {
  struct frame *top = *depth ? &st[*depth - 1] : NULL;
  if (top && top->map && top->want_key && e->type != YAML_MAPPING_END_EVENT) {
    if (e->type != YAML_SCALAR_EVENT) return false; /* complex keys */
    const char *k = (const char *)e->data.scalar.value;
    if (!*k || strchr(k, '.') || e->data.scalar.length >= PATH_MAX_LEN / 4) out->ambiguous = true;
    snprintf(top->key, sizeof top->key, "%s", k);
    top->want_key = false;
    return true;
  }
  if (top) path[top->plen] = '\0';
  if (top && e->type != YAML_MAPPING_END_EVENT && e->type != YAML_SEQUENCE_END_EVENT) child_path(st, *depth, path);
  if (strlen(path) >= PATH_MAX_LEN - 8) out->ambiguous = true;
  switch (e->type) {
  case YAML_SCALAR_EVENT: {
    bool plain = e->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    if (!add_leaf(out, path, plain ? 'P' : 'Q', (const char *)e->data.scalar.tag,
                  (const char *)e->data.scalar.anchor, (const char *)e->data.scalar.value,
                  e->data.scalar.length))
      return false;
    break;
  }
  case YAML_ALIAS_EVENT:
    if (!add_leaf(out, path, 'A', NULL, NULL, (const char *)e->data.alias.anchor,
                  strlen((const char *)e->data.alias.anchor)))
      return false;
    break;
  case YAML_MAPPING_START_EVENT:
  case YAML_SEQUENCE_START_EVENT:
    if (*depth == MAX_DEPTH) return false;
    st[*depth] = (struct frame){e->type == YAML_MAPPING_START_EVENT, true, 0, strlen(path), "", 0};
    (*depth)++;
    return true;
  case YAML_MAPPING_END_EVENT:
  case YAML_SEQUENCE_END_EVENT:
    if (!top->kids && !add_leaf(out, path, top->map ? 'M' : 'S', NULL, NULL, "", 0)) return false;
    (*depth)--;
    break;
  default:
    return true;
  }
  /* A node finished under the (new) top frame. */
  if (*depth) {
    struct frame *p = &st[*depth - 1];
    p->kids++;
    if (p->map) p->want_key = true;
    else p->index++;
  }
  return true;
}

/* Flattens a document into its leaves; false when libyaml or the oracle gives up. */
static bool flatten(const uint8_t *text, size_t len, struct leaves *out) {
  memset(out, 0, sizeof *out);
  out->v = calloc(MAX_LEAVES, sizeof *out->v);
  yaml_parser_t p;
  yaml_parser_initialize(&p);
  yaml_parser_set_input_string(&p, text, len);
  struct frame *st = calloc(MAX_DEPTH, sizeof *st);
  char path[PATH_MAX_LEN] = "";
  size_t depth = 0;
  bool ok = true;
  for (bool done = false; ok && !done;) {
    yaml_event_t e;
    if (!yaml_parser_parse(&p, &e)) {
      ok = false;
      break;
    }
    done = e.type == YAML_STREAM_END_EVENT;
    ok = on_event(&e, st, &depth, path, out);
    yaml_event_delete(&e);
  }
  yaml_parser_delete(&p);
  free(st);
  if (!ok) free_leaves(out);
  return ok;
}

static const char *const bools[] = {"true", "false", "yes", "no", "on", "off"};

/* The "|tag|anchor|" part of a leaf. */
static size_t props_len(const char *leaf) {
  const char *p = strchr(leaf + 2, '|');
  return (size_t)(strchr(p + 1, '|') - leaf) + 1;
}

/* Whether a loaded leaf is the value written (as YAML 1.1 and JSON loaders read it), with
 * the old leaf's tag and anchor (none for a new key). */
static bool holds(const char *leaf, const char *old, const struct vf_value *v) {
  char kind = leaf[0];
  size_t props = props_len(leaf);
  if (old ? props != props_len(old) || memcmp(leaf + 1, old + 1, props - 1) != 0
          : strncmp(leaf + 1, "|||", 3) != 0)
    return false;
  const char *t = leaf + props;
  char *end;
  switch (v->kind) {
  case VF_VALUE_NULL:
    return kind == 'P' && (!*t || !strcmp(t, "~") || !strcasecmp(t, "null"));
  case VF_VALUE_BOOL:
    for (size_t i = 0; i < 6; i++)
      if (!strcasecmp(t, bools[i])) return kind == 'P' && (i % 2 == 0) == !!v->b;
    return false;
  case VF_VALUE_INT: {
    const char *digits = t + (*t == '-' || *t == '+');
    return kind == 'P' && strtoll(t, &end, 10) == v->i && !*end && (digits[0] != '0' || !digits[1]);
  }
  case VF_VALUE_FLOAT:
    return kind == 'P' && strtod(t, &end) == v->f && !*end;
  case VF_VALUE_STRING:
    if (strcmp(t, v->s) != 0) return false;
    if (kind == 'Q') return true;
    /* Plain strings must not read as anything else. */
    return kind == 'P' && *t && !strchr("0123456789+-.~", *t) &&
           strcasecmp(t, "null") && strcasecmp(t, "true") && strcasecmp(t, "false") &&
           strcasecmp(t, "yes") && strcasecmp(t, "no") && strcasecmp(t, "on") && strcasecmp(t, "off") &&
           strcasecmp(t, "y") && strcasecmp(t, "n");
  }
  return false;
}

static int edited(const struct vf_path_edit *e, size_t ne, const char *path) {
  for (size_t i = 0; i < ne; i++)
    if (strcmp(e[i].path, path) == 0) return (int)i;
  return -1;
}

/* An empty mapping that an edit may fill with a new key. */
static bool filled(const struct leaf *l, const struct vf_path_edit *e, size_t ne) {
  size_t n = strlen(l->path);
  for (size_t k = 0; k < ne && l->value[0] == 'M'; k++)
    if (!n || (strncmp(e[k].path, l->path, n) == 0 && e[k].path[n] == '.')) return true;
  return false;
}

/* The oracle: new = old except the edited paths, which hold their values (once each). */
static bool same_elsewhere(const struct leaves *a, const struct leaves *b, const struct vf_path_edit *e,
                           size_t ne) {
  size_t i = 0, j = 0;
  int seen[2] = {0, 0};
  const char *was[2] = {NULL, NULL};
  for (size_t k = 0; k < a->n; k++)
    if (edited(e, ne, a->v[k].path) >= 0) was[edited(e, ne, a->v[k].path)] = a->v[k].value;
  for (;;) {
    while (i < a->n && (edited(e, ne, a->v[i].path) >= 0 || filled(&a->v[i], e, ne))) i++;
    while (j < b->n && edited(e, ne, b->v[j].path) >= 0) {
      int k = edited(e, ne, b->v[j].path);
      if (!holds(b->v[j].value, was[k], &e[k].value)) return false;
      seen[k]++;
      j++;
    }
    if (i == a->n || j == b->n) break;
    if (strcmp(a->v[i].path, b->v[j].path) != 0 || strcmp(a->v[i].value, b->v[j].value) != 0) return false;
    i++, j++;
  }
  for (size_t k = 0; k < ne; k++)
    if (seen[k] != 1) return false;
  return i == a->n && j == b->n;
}

static const char *const strings[] = {"adamw_torch", "bf16-mixed", "16-mixed", "yes", "a: b", "x #y",
                                      "", "\xC3\xA9t\xC3\xA9", "'q'", "\"dq\"", "a\nb", "null", "1e-4",
                                      "[x]", "-", "~", "it's"};

static struct vf_value pick_value(uint8_t b) {
  switch (b % 6) {
  case 0: return (struct vf_value){.kind = VF_VALUE_INT, .i = (long long)b * 37 - 1000};
  case 1: return (struct vf_value){.kind = VF_VALUE_BOOL, .b = b & 8};
  case 2: return (struct vf_value){.kind = VF_VALUE_FLOAT, .f = ldexp((double)(b | 1), (b >> 3) - 20)};
  case 3: return (struct vf_value){.kind = VF_VALUE_NULL};
  default: return (struct vf_value){.kind = VF_VALUE_STRING, .s = strings[b % (sizeof strings / sizeof *strings)]};
  }
}

static void check(bool ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "fuzz_yamledit: %s\n", what);
    abort();
  }
}

/* Mutates out at a chosen place; when verify accepts the mutant, the oracle must too. */
static void mutate_and_verify(const char *file, const uint8_t *doc, size_t n, const struct vf_edited *r,
                              const struct vf_path_edit *e, size_t ne, const struct leaves *old,
                              uint8_t op, uint8_t where) {
  if (!r->len) return;
  char *m = malloc(r->len + 2);
  size_t pos = ((size_t)where * 131 + op) % r->len, len = r->len;
  memcpy(m, r->text, r->len);
  if (op % 3 == 0) {
    m[pos] = (char)(m[pos] ^ (1 + (op >> 2)));
  } else if (op % 3 == 1) {
    memmove(m + pos, m + pos + 1, len - pos - 1);
    len--;
  } else {
    memmove(m + pos + 1, m + pos, len - pos);
    m[pos] = "0a:-\n #'\"[]{},&*!"[op % 18];
    len++;
  }
  if (vf_edit_verify(file, (const char *)doc, n, m, len, e, ne, NULL) == 0) {
    struct leaves now;
    check(flatten((const uint8_t *)m, len, &now), "verify accepted text the oracle cannot read");
    check(same_elsewhere(old, &now, e, ne), "verify accepted a change elsewhere");
    free_leaves(&now);
  }
  free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 6 || size > MAX_DOC) return 0;
  const uint8_t *doc = data + 5;
  size_t n = size - 5;
  struct leaves old;
  if (!flatten(doc, n, &old)) return 0;
  const char *file = data[2] & 1 ? "f.json" : "f.yaml";
  struct vf_path_edit e[2];
  size_t ne = data[2] & 4 ? 2 : 1;
  char fresh[2][32];
  for (size_t k = 0; k < ne; k++) {
    snprintf(fresh[k], sizeof fresh[k], "fz%u.k%zu", data[0] & 3, k);
    bool create = (data[2] >> (k + 1)) & 1 && data[2] & 8;
    e[k] = (struct vf_path_edit){old.n && !create ? old.v[(data[0] + k * 7) % old.n].path : fresh[k],
                                 pick_value((uint8_t)(data[1] + k * 5)), create || !old.n, 0};
  }
  if (old.ambiguous || (ne == 2 && strcmp(e[0].path, e[1].path) == 0)) {
    free_leaves(&old);
    return 0;
  }
  struct vf_edited r;
  if (vf_edit_buffer(file, (const char *)doc, n, e, ne, &r, NULL) == 0) {
    struct leaves now;
    check(flatten((const uint8_t *)r.text, r.len, &now), "the result does not parse");
    check(same_elsewhere(&old, &now, e, ne), "an edit changed something else");
    free_leaves(&now);
    if (ne == 1 && r.n_changes == 1 && !r.changes[0].created) {
      /* Only the old value's bytes may differ. */
      size_t pre = 0, suf = 0, span = strlen(r.changes[0].old_text);
      while (pre < n && pre < r.len && doc[pre] == (uint8_t)r.text[pre]) pre++;
      while (suf < n - pre && suf < r.len - pre && doc[n - 1 - suf] == (uint8_t)r.text[r.len - 1 - suf]) suf++;
      check(pre + suf + span + 1 >= n, "bytes outside the value changed");
    }
    mutate_and_verify(file, doc, n, &r, e, ne, &old, data[3], data[4]);
    vf_edited_cleanup(&r);
  }
  free_leaves(&old);
  return 0;
}

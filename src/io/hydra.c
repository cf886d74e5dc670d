/* Hydra's defaults list (hydra.h): configs are chosen as "group[@package]: option" (or a
 * plain "name" beside the primary config) and composed in list order, `_self_` placing the
 * primary config's own values; without `_self_` they come last (Hydra >= 1.1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "io/hydra.h"

/* Nested defaults lists deeper than this are not followed (configs that deep are not seen
 * in training repositories). */
enum { MAX_DEPTH = 4, MAX_ENTRIES = 32 };

static const struct ynode *root_get(const struct ynode *root, const char *key) {
  for (size_t i = 0; root && root->kind == YN_MAP && i + 1 < root->nkid; i += 2)
    if (root->kid[i]->kind == YN_SCALAR && strcmp(root->kid[i]->value, key) == 0) return root->kid[i + 1];
  return NULL;
}

void hydra_package_header(const char *text, size_t len, char *package, size_t size) {
  for (const char *p = text, *end = text + len; p < end && *p == '#';) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t n = (size_t)((nl ? nl : end) - p);
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), p);
    char *at = strstr(line, "@package");
    if (at) {
      char word[256] = "";
      sscanf(at + 8, " %255[^ \r\t]", word);
      if (strcmp(word, "_global_") == 0) package[0] = '\0';
      else if (word[0] && strcmp(word, "_group_") != 0) snprintf(package, size, "%s", word);
      return;
    }
    p = nl ? nl + 1 : end;
  }
}

/* The config and package of "group[@package]: option" (or of a plain "name"), relative to
 * the folder of the primary config. */
static void describe(const char *dir, const char *key, const char *option, struct hydra_entry *e) {
  const char *k = strncmp(key, "optional ", 9) == 0 ? key + 9 : key;
  while (*k == '/') k++;
  size_t glen = strcspn(k, "@");
  snprintf(e->entry, sizeof e->entry, "%s%s%s", key, key[0] ? ": " : "", option);
  e->self = false;
  if (!key[0]) {
    snprintf(e->file, sizeof e->file, "%s/%s.yaml", dir, option);
    e->package[0] = '\0';
    return;
  }
  snprintf(e->file, sizeof e->file, "%s/%.*s/%s.yaml", dir, (int)glen, k, option);
  if (k[glen] == '@') snprintf(e->package, sizeof e->package, "%s", k + glen + 1);
  else snprintf(e->package, sizeof e->package, "%.*s", (int)glen, k);
  for (char *c = e->package; *c; c++) *c = *c == '/' ? '.' : *c;
  if (strcmp(e->package, "_global_") == 0 || strcmp(e->package, "_here_") == 0) e->package[0] = '\0';
}

static void add_option(const char *dir, const char *key, const struct ynode *opt, struct hydra_entry *out,
                       size_t *n, size_t max) {
  if (*n == max || !opt || opt->kind != YN_SCALAR || ynode_type(opt) != VF_VALUE_STRING ||
      strcmp(opt->value, "???") == 0)
    return;
  describe(dir, key, opt->value, &out[*n]);
  (*n)++;
}

static void add_self(struct hydra_entry *out, size_t *n, size_t max) {
  if (*n == max) return;
  out[*n] = (struct hydra_entry){.entry = "_self_", .self = true};
  (*n)++;
}

/* One entry of the list: _self_, a plain name, or "group: option(s)". */
static void add_entry(const struct ynode *e, const char *dir, struct hydra_entry *out, size_t *n, size_t max,
                      bool *self) {
  if (e->kind == YN_SCALAR && strcmp(e->value, "_self_") == 0) {
    *self = true;
    add_self(out, n, max);
    return;
  }
  if (e->kind == YN_SCALAR) {
    add_option(dir, "", e, out, n, max);
    return;
  }
  if (e->kind != YN_MAP || e->nkid != 2 || e->kid[0]->kind != YN_SCALAR ||
      strncmp(e->kid[0]->value, "override ", 9) == 0)
    return;
  const struct ynode *v = e->kid[1];
  for (size_t k = 0; v->kind == YN_SEQ && k < v->nkid; k++) add_option(dir, e->kid[0]->value, v->kid[k], out, n, max);
  if (v->kind != YN_SEQ) add_option(dir, e->kid[0]->value, v, out, n, max);
}

size_t hydra_defaults(const struct ynode *root, const char *dir, struct hydra_entry *out, size_t max) {
  const struct ynode *defaults = root_get(root, "defaults");
  if (!defaults || defaults->kind != YN_SEQ) return 0;
  size_t n = 0;
  bool self = false;
  for (size_t i = 0; i < defaults->nkid; i++) add_entry(defaults->kid[i], dir, out, &n, max, &self);
  if (!self) add_self(out, &n, max);
  return n;
}

const char *hydra_inside(const char *package, const char *path) {
  size_t n = strlen(package);
  if (!n) return path;
  return strncmp(path, package, n) == 0 && path[n] == '.' ? path + n + 1 : NULL;
}

struct composer {
  struct hydra_config *out;
  size_t n, max;
};

static struct hydra_config *add_config(struct composer *c, const char *file, const char *package) {
  if (c->n == c->max) return NULL;
  struct hydra_config *h = &c->out[c->n++];
  memset(h, 0, sizeof *h);
  snprintf(h->file, sizeof h->file, "%s", file);
  snprintf(h->package, sizeof h->package, "%s", package);
  return h;
}

/* A config listed but not there: where it is listed, for the warning. */
static void add_missing(struct composer *c, const char *parent, const struct ytree *pt, const struct hydra_entry *e) {
  struct hydra_config *h = strncmp(e->entry, "optional ", 9) == 0 ? NULL : add_config(c, e->file, "");
  struct yfind at;
  int col;
  if (!h) return;
  h->missing = true;
  snprintf(h->entry, sizeof h->entry, "%s", e->entry);
  snprintf(h->listed_in, sizeof h->listed_in, "%s", parent);
  ytree_find(pt, "defaults", &at, NULL);
  ytree_linecol(pt, at.node ? at.node->start : 0, &h->line, &col);
}

static void compose(struct composer *c, const char *path, const struct ytree *t, const char *package, int depth);

/* A listed config, composed at its package: its header's, else its entry's below its
 * parent's. One that does not parse is listed as it is, for its reader to say why. */
static void compose_entry(struct composer *c, const char *parent, const struct ytree *pt, const struct hydra_entry *e,
                          const char *package, int depth) {
  char *text = NULL, own[256], full[256];
  size_t len;
  struct doc doc;
  if (!path_is_file(e->file) || file_read(e->file, DOC_MAX_BYTES, &text, &len, NULL) != 0) {
    add_missing(c, parent, pt, e);
    return;
  }
  snprintf(own, sizeof own, "%s", e->package);
  hydra_package_header(text, len, own, sizeof own);
  const char *dot = package[0] && own[0] ? "." : "";
  int n = strcmp(own, e->package) != 0 ? snprintf(full, sizeof full, "%s", own)
                                        : snprintf(full, sizeof full, "%s%s%s", package, dot, own);
  bool parsed = n >= 0 && (size_t)n < sizeof full && doc_open(&doc, e->file, text, len, NULL) == 0;
  if (parsed) compose(c, e->file, &doc.t, full, depth + 1);
  else add_config(c, e->file, full);
  if (parsed) doc_close(&doc);
  free(text);
}

static void compose(struct composer *c, const char *path, const struct ytree *t, const char *package, int depth) {
  struct hydra_entry *e = calloc(MAX_ENTRIES, sizeof *e);
  char dir[PATH_MAX];
  path_folder(path, dir, sizeof dir);
  size_t n = e && depth < MAX_DEPTH ? hydra_defaults(t->root, dir, e, MAX_ENTRIES) : 0;
  for (size_t i = 0; i < n; i++) {
    struct hydra_config *h = e[i].self ? add_config(c, path, package) : NULL;
    if (h) h->self = depth == 0;
    else if (!e[i].self) compose_entry(c, path, t, &e[i], package, depth);
  }
  if (!n && depth) add_config(c, path, package); /* a listed config without a list of its own */
  free(e);
}

size_t hydra_compose(const char *path, const struct ytree *primary, struct hydra_config *out, size_t max) {
  struct composer c = {out, 0, max};
  compose(&c, path, primary, "", 0);
  return c.n;
}

/* Hydra's defaults list (hydra.h): configs are chosen as "group[@package]: option" (or a
 * plain "name" beside the primary config) and composed in list order, `_self_` placing the
 * primary config's own values; without `_self_` they come last (Hydra >= 1.1). */
#include <stdio.h>
#include <string.h>

#include "io/hydra.h"

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

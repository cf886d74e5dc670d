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

/* One config a defaults entry after _self_ merges in. */
struct later {
  char entry[256];   /* as written: "data: mnist" */
  char file[PATH_MAX];
  char package[256]; /* where its keys land: "data"; "" for the root */
};

static const struct ynode *root_get(const struct ynode *root, const char *key) {
  for (size_t i = 0; root && root->kind == YN_MAP && i + 1 < root->nkid; i += 2)
    if (root->kid[i]->kind == YN_SCALAR && strcmp(root->kid[i]->value, key) == 0) return root->kid[i + 1];
  return NULL;
}

/* "# @package _global_" (or a path) in the config's first lines changes its package. */
static void package_header(const char *text, size_t len, char *package, size_t size) {
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
static void describe(const char *dir, const char *key, const char *option, struct later *l) {
  const char *k = strncmp(key, "optional ", 9) == 0 ? key + 9 : key;
  while (*k == '/') k++;
  size_t glen = strcspn(k, "@");
  snprintf(l->entry, sizeof l->entry, "%s%s%s", key, option && key[0] ? ": " : "", option ? option : "");
  if (!key[0]) {
    snprintf(l->file, sizeof l->file, "%s/%s.yaml", dir, option);
    l->package[0] = '\0';
    return;
  }
  snprintf(l->file, sizeof l->file, "%s/%.*s/%s.yaml", dir, (int)glen, k, option);
  if (k[glen] == '@') snprintf(l->package, sizeof l->package, "%s", k + glen + 1);
  else snprintf(l->package, sizeof l->package, "%.*s", (int)glen, k);
  for (char *c = l->package; *c; c++) *c = *c == '/' ? '.' : *c;
  if (strcmp(l->package, "_global_") == 0 || strcmp(l->package, "_here_") == 0) l->package[0] = '\0';
}

static void add_option(const char *dir, const char *key, const struct ynode *opt, struct later *out,
                       size_t *n, size_t max) {
  if (*n == max || !opt || opt->kind != YN_SCALAR || ynode_type(opt) != VF_VALUE_STRING ||
      strcmp(opt->value, "???") == 0)
    return;
  describe(dir, key, opt->value, &out[*n]);
  (*n)++;
}

/* The configs listed after _self_, in order; none when _self_ is missing (then it is last). */
static size_t after_self(const struct ynode *defaults, const char *dir, struct later *out, size_t max) {
  size_t n = 0;
  bool self = false;
  for (size_t i = 0; defaults && defaults->kind == YN_SEQ && i < defaults->nkid; i++) {
    const struct ynode *e = defaults->kid[i];
    if (e->kind == YN_SCALAR) {
      if (strcmp(e->value, "_self_") == 0) self = true;
      else if (self) add_option(dir, "", e, out, &n, max);
      continue;
    }
    if (!self || e->kind != YN_MAP || e->nkid != 2 || e->kid[0]->kind != YN_SCALAR ||
        strncmp(e->kid[0]->value, "override ", 9) == 0)
      continue;
    const struct ynode *v = e->kid[1];
    for (size_t k = 0; v->kind == YN_SEQ && k < v->nkid; k++) add_option(dir, e->kid[0]->value, v->kid[k], out, &n, max);
    if (v->kind != YN_SEQ) add_option(dir, e->kid[0]->value, v, out, &n, max);
  }
  return n;
}

/* The path inside the later config that P of the primary config is, or NULL. */
static const char *inside(const struct later *l, const char *p) {
  size_t n = strlen(l->package);
  if (!n) return p;
  return strncmp(p, l->package, n) == 0 && p[n] == '.' ? p + n + 1 : NULL;
}

static struct afile *file_in_call(struct astate *s, const char *path) {
  char real[PATH_MAX];
  if (!realpath(path, real)) return NULL;
  for (size_t i = 0; i < s->n; i++)
    if (strcmp(s->f[i].pub->target, real) == 0) return &s->f[i];
  return NULL;
}

/* Whether the later config sets rest; *readable is false when it could not be read. */
static bool later_sets(const struct later *l, const char *p, const char **rest, bool *readable) {
  char *text;
  size_t len;
  *readable = false;
  if (file_read(l->file, DOC_MAX_BYTES, &text, &len, NULL) != 0) return false;
  struct later real = *l;
  package_header(text, len, real.package, sizeof real.package);
  struct doc doc;
  bool sets = false;
  if ((*rest = inside(&real, p)) && doc_open(&doc, l->file, text, len, NULL) == 0) {
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
static int redirect(struct astate *s, struct afile *f, size_t k, const struct later *l,
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

static int check_edit(struct astate *s, struct afile *f, size_t k, const struct later *l, size_t n,
                      bool *moved, struct vf_diag *d) {
  *moved = false;
  for (size_t i = n; i-- > 0;) { /* the last entry that sets it wins */
    const char *rest = NULL;
    bool readable;
    if (!inside(&l[i], f->edits[k].path)) continue;
    if (later_sets(&l[i], f->edits[k].path, &rest, &readable))
      return redirect(s, f, k, &l[i], rest, moved, d);
    if (!readable)
      return queue_note(s->a, "%s: %s: the defaults entry '%s' comes after _self_ and may set "
                        "it; %s could not be read to check", f->pub->path, f->edits[k].path,
                        l[i].entry, l[i].file);
  }
  return 0;
}

int check_hydra_defaults(struct astate *s, struct afile *f, struct vf_diag *d) {
  const struct ynode *defaults = root_get(f->doc.t.root, "defaults");
  if (!defaults || defaults->kind != YN_SEQ || !f->n_edits) return 0;
  char dir[PATH_MAX];
  const char *slash = strrchr(f->pub->target, '/');
  snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - f->pub->target) : 1, slash ? f->pub->target : ".");
  struct later l[32];
  size_t n = after_self(defaults, dir, l, 32);
  for (size_t k = 0; k < f->n_edits;) {
    bool moved;
    int rc = check_edit(s, f, k, l, n, &moved, d);
    if (rc) return rc;
    k += !moved;
  }
  return 0;
}

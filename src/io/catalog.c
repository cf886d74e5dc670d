/* The model catalogue: data/models/<name>.json, Hugging Face config.json files, each with a
 * "_vramfit" object naming the Hub id it was taken from ("hf_repo") and its aliases: the
 * names a user may give for the same architecture (docs/models.md). */
#define _GNU_SOURCE /* strcasestr */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/closest.h"
#include "base/diag.h"
#include "base/grow.h"
#include "base/json_util.h"
#include "io/catalog.h"
#include "io/data.h"
#include "io/hub.h"
#include "vramfit.h"

#define MODELS_DIR "models/"

struct paths {
  const char **path;
  size_t n, cap;
  int rc;
};

static int collect(const char *path, void *arg) {
  struct paths *p = arg;
  const char **grown = array_grow(p->path, &p->cap, p->n + 1, sizeof *grown);
  if (!grown) return p->rc = VF_ENOMEM;
  p->path = grown;
  p->path[p->n++] = path;
  return 0;
}

static size_t stem_len(const char *path) {
  size_t n = strlen(path);
  return n > 5 && strcmp(path + n - 5, ".json") == 0 ? n - 5 : n;
}

/* By model name, not by file name: "gpt2" before "gpt2-large", although "gpt2.json"
 * sorts after "gpt2-large.json" ('.' > '-'). */
static int by_name(const void *a, const void *b) {
  const char *x = *(const char *const *)a, *y = *(const char *const *)b;
  size_t lx = stem_len(x), ly = stem_len(y);
  int c = strncmp(x, y, lx < ly ? lx : ly);
  return c ? c : (lx > ly) - (lx < ly);
}

void vf_catalog_init(struct vf_catalog *c) { memset(c, 0, sizeof *c); }

static void entry_cleanup(struct vf_catalog_entry *e) {
  free(e->name);
  free(e->hub_id);
  for (size_t i = 0; i < e->n_aliases; i++) free(e->aliases[i]);
  free(e->aliases);
}

void vf_catalog_cleanup(struct vf_catalog *c) {
  for (size_t i = 0; i < c->n; i++) entry_cleanup(&c->entries[i]);
  free(c->entries);
  vf_catalog_init(c);
}

/* A Hub id, or a plain name spelled as the Hub spells repository names. */
static bool name_valid(const char *s) {
  return hub_id_valid(s) || hub_name_valid(s, strlen(s));
}

static int read_aliases(struct vf_catalog_entry *e, json_t *list, const char *path,
                        struct vf_diag *d) {
  if (!json_is_array(list))
    return diag_at(d, VF_EFORMAT, path, UINT64_MAX,
                   "_vramfit.aliases: a list of Hub ids and names is required ([] for none)");
  size_t n = json_array_size(list);
  if (n && !(e->aliases = calloc(n, sizeof *e->aliases))) return VF_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    const char *s = json_string_value(json_array_get(list, i));
    if (!s || !name_valid(s))
      return diag_at(d, VF_EFORMAT, path, UINT64_MAX,
                     "_vramfit.aliases[%zu]: not a Hub id or a name", i);
    if (!(e->aliases[e->n_aliases] = strdup(s))) return VF_ENOMEM;
    e->n_aliases++;
  }
  return 0;
}

static int read_entry(struct vf_catalog_entry *e, const char *path, struct vf_diag *d) {
  const char *base = path + strlen(MODELS_DIR), *text;
  size_t len;
  if (!(e->name = strndup(base, stem_len(base)))) return VF_ENOMEM;
  int rc = data_get(path, &text, &len);
  if (rc) return diag_at(d, rc, path, UINT64_MAX, "cannot read");
  json_t *root = NULL;
  rc = parse_json_text(text, len, path, &root, d);
  data_release(text);
  if (rc) return rc;
  json_t *own = json_object_get(root, "_vramfit");
  const char *hub = json_string_value(json_object_get(own, "hf_repo"));
  if (!hub || !hub_id_valid(hub))
    rc = diag_at(d, VF_EFORMAT, path, UINT64_MAX, "_vramfit.hf_repo: a Hub id is required");
  else if (!(e->hub_id = strdup(hub)))
    rc = VF_ENOMEM;
  else
    rc = read_aliases(e, json_object_get(own, "aliases"), path, d);
  json_decref(root);
  return rc;
}

struct claim {
  const char *text;
  const struct vf_catalog_entry *by;
};

static int by_text(const void *a, const void *b) {
  return strcasecmp(((const struct claim *)a)->text, ((const struct claim *)b)->text);
}

/* Every name, Hub id and alias leads to one entry: two entries claiming one alias would
 * make a name mean whichever was read first. */
static int check_claims(const struct vf_catalog *c, struct vf_diag *d) {
  size_t n = 0, cap = 0;
  struct claim *all = NULL;
  for (size_t i = 0; i < c->n; i++) {
    const struct vf_catalog_entry *e = &c->entries[i];
    struct claim *grown = array_grow(all, &cap, n + 2 + e->n_aliases, sizeof *all);
    if (!grown) {
      free(all);
      return VF_ENOMEM;
    }
    all = grown;
    all[n++] = (struct claim){e->name, e};
    all[n++] = (struct claim){e->hub_id, e};
    for (size_t j = 0; j < e->n_aliases; j++) all[n++] = (struct claim){e->aliases[j], e};
  }
  qsort(all, n, sizeof *all, by_text);
  int rc = 0;
  for (size_t i = 1; i < n && !rc; i++) {
    if (strcasecmp(all[i - 1].text, all[i].text) != 0) continue;
    char file[160];
    snprintf(file, sizeof file, MODELS_DIR "%s.json", all[i].by->name);
    rc = diag_at(d, VF_EFORMAT, file, UINT64_MAX,
                 "'%s' is claimed by %s and again by %s: a name, Hub id or alias leads to one "
                 "entry", all[i].text, all[i - 1].by->name, all[i].by->name);
  }
  free(all);
  return rc;
}

int vf_catalog_load(struct vf_catalog *c, struct vf_diag *d) {
  vf_diag_clear(d);
  struct paths p = {0};
  data_each(MODELS_DIR, collect, &p);
  int rc = p.rc;
  if (!rc && p.n && !(c->entries = calloc(p.n, sizeof *c->entries))) rc = VF_ENOMEM;
  if (!rc && p.n) qsort(p.path, p.n, sizeof *p.path, by_name);
  for (size_t i = 0; i < p.n && !rc; i++, c->n++) rc = read_entry(&c->entries[c->n], p.path[i], d);
  free(p.path);
  if (!rc) rc = check_claims(c, d);
  if (rc) vf_catalog_cleanup(c);
  return rc;
}

bool vf_catalog_entry_matches(const struct vf_catalog_entry *e, const char *word) {
  bool hit = strcasestr(e->name, word) || strcasestr(e->hub_id, word);
  for (size_t i = 0; i < e->n_aliases && !hit; i++) hit = strcasestr(e->aliases[i], word);
  return hit;
}

const struct vf_catalog_entry *catalog_find(const struct vf_catalog *c, const char *id) {
  for (size_t i = 0; i < c->n; i++) {
    const struct vf_catalog_entry *e = &c->entries[i];
    if (strcasecmp(id, e->name) == 0 || strcasecmp(id, e->hub_id) == 0) return e;
    for (size_t j = 0; j < e->n_aliases; j++)
      if (strcasecmp(id, e->aliases[j]) == 0) return e;
  }
  return NULL;
}

/* The repository part of a Hub id: organisations say who published a model, not which one
 * it is, so names are compared without them. */
static const char *repo_part(const char *id) {
  const char *slash = strrchr(id, '/');
  return slash ? slash + 1 : id;
}

static void offer(struct closest *s, const char *name, const char *spelling) {
  char folded[CLOSEST_NAME];
  const char *repo = repo_part(spelling);
  name_fold(repo, strlen(repo), folded, sizeof folded);
  closest_offer(s, name, folded);
}

size_t catalog_suggest(const struct vf_catalog *c, const char *text, char *list, size_t size) {
  struct closest s;
  const char *repo = repo_part(text);
  closest_start(&s, repo, strlen(repo));
  for (size_t i = 0; i < c->n; i++) {
    const struct vf_catalog_entry *e = &c->entries[i];
    offer(&s, e->name, e->name);
    offer(&s, e->name, e->hub_id);
    for (size_t j = 0; j < e->n_aliases; j++) offer(&s, e->name, e->aliases[j]);
  }
  return closest_list(&s, list, size);
}

int vf_catalog_config(const char *name, char **json, size_t *len) {
  char path[160];
  const char *text;
  if (snprintf(path, sizeof path, MODELS_DIR "%s.json", name) >= (int)sizeof path) return VF_ENOTFOUND;
  int rc = data_get(path, &text, len);
  if (rc) return rc;
  *json = malloc(*len + 1);
  if (*json) {
    memcpy(*json, text, *len);
    (*json)[*len] = '\0';
  }
  data_release(text);
  return *json ? 0 : VF_ENOMEM;
}

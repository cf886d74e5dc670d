/* Ecosystem maps (data/formats/NAME.json): where each logical key lives and how its values
 * are spelled. The editor (src/edit/) writes settings through them and the config reader
 * (config_map.c) reads the same keys back. A map holds:
 *   "name", "title", "priority" (lower wins a detection tie), "syntax" ("json" to claim
 *   JSON files only), "keep_auto" (leave "auto" values to the HF Trainer),
 *   "framework" (the profile a run of this tool uses, for reading),
 *   "detect": {path: weight} (a file is claimed at a score of 3 or more; a name other tools
 *     and projects use too weighs less than 3, and one every tool of a family has, such as
 *     gradient_accumulation_steps, weighs 1 or is left out, so that it never claims alone),
 *   "defaults": {path: value the loader uses when the key is absent},
 *   "keys": {logical: {"paths": [candidates, first present wins],
 *                      "values": {logical value: spelling}}
 *           | {logical: {"set": {logical value: {path: spelling}}}}
 *           | {logical: {"derived": path}}  (computed from other keys by src/edit/check.c)
 *     each entry may add "families": {plain value: [variants, default first]} (precision:
 *     bf16 -> bf16-mixed or bf16-true, whichever family the file uses), "plain": "mixed" or
 *     "true" (the family this map's plain values are), and "notes": {value: sentence, or
 *     {"if": {path: value}, "note": sentence}} (said when the value lands),
 *   "reasons": {logical: why this tool has no place for it},
 *   "read": {logical: entry} in forms only the reader takes (config_map.c: words of a
 *     string, "present", "times", alternatives in a "set"), so that the editor never writes
 *     them; "files": {name: {"paths", "format"}} (configs a key names: `deepspeed:`);
 *     "warn": {path: {"if": spelling, "why", "name"}} (values vramfit does not model);
 *     "builders" (torchtune's model builders: catalogue names).
 * A spelling is a JSON value or an array of equivalent ones (the first is written); the
 * logical value "default" spells the tool's own choice (read as nothing to set). */
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "base/json_util.h"
#include "base/sbuf.h"
#include "io/data.h"
#include "io/formats.h"

enum { CLAIM_SCORE = 3 };

struct loader {
  struct formats *fs;
  struct vf_diag *d;
};

static int load_one(const char *path, void *arg) {
  struct loader *l = arg;
  const char *bytes;
  size_t len;
  int rc = data_get(path, &bytes, &len);
  if (rc) return diag_at(l->d, rc, path, UINT64_MAX, "cannot read the format map");
  json_t *map = NULL;
  rc = parse_json_text(bytes, len, path, &map, l->d);
  data_release(bytes);
  if (rc) return rc;
  const char *name = json_string_value(json_object_get(map, "name"));
  struct format *grown = realloc(l->fs->v, (l->fs->n + 1) * sizeof *grown);
  char *copy = name ? strdup(name) : NULL;
  if (!grown || !copy || !json_is_object(json_object_get(map, "keys"))) {
    if (grown) l->fs->v = grown;
    free(copy);
    json_decref(map);
    return name ? VF_ENOMEM : diag_at(l->d, VF_EFORMAT, path, UINT64_MAX, "no \"name\"");
  }
  l->fs->v = grown;
  l->fs->v[l->fs->n++] = (struct format){copy, map};
  return 0;
}

int formats_load(struct formats *fs, struct vf_diag *d) {
  memset(fs, 0, sizeof *fs);
  struct loader l = {fs, d};
  int rc = data_each("formats/", load_one, &l);
  if (rc) formats_free(fs);
  return rc;
}

void formats_free(struct formats *fs) {
  for (size_t i = 0; i < fs->n; i++) {
    free(fs->v[i].name);
    json_decref(fs->v[i].map);
  }
  free(fs->v);
  memset(fs, 0, sizeof *fs);
}

const struct format *formats_find(const struct formats *fs, const char *name,
                                  struct vf_diag *d) {
  struct sbuf names = {0};
  for (size_t i = 0; i < fs->n; i++) {
    if (strcmp(fs->v[i].name, name) == 0) {
      sb_free(&names);
      return &fs->v[i];
    }
    sb_printf(&names, "%s%s", i ? ", " : "", fs->v[i].name);
  }
  diag_at(d, VF_EINVAL, NULL, UINT64_MAX, "unknown format '%s' (auto, %s)", name,
          names.p ? names.p : "");
  sb_free(&names);
  return NULL;
}

static bool present(const struct doc *doc, const char *path) {
  struct yfind found;
  return ytree_find(&doc->t, path, &found, NULL) == 0 && found.node;
}

static int score(const struct format *f, const struct doc *doc) {
  const char *syntax = json_string_value(json_object_get(f->map, "syntax"));
  if (syntax && strcmp(syntax, "json") == 0 && !doc->t.json) return 0;
  const char *path;
  json_t *w;
  int total = 0;
  json_object_foreach(json_object_get(f->map, "detect"), path, w) if (present(doc, path)) total += (int)json_integer_value(w);
  return total;
}

/* The three heaviest of f's keys found in doc (in the map's order among equals), ", ..."
 * when there are more. */
static void evidence_keys(const struct format *f, const struct doc *doc, char *out, size_t size) {
  enum { MAX_KEYS = 32 };
  const char *keys[MAX_KEYS];
  json_int_t weights[MAX_KEYS];
  size_t n = 0;
  const char *path;
  json_t *w;
  json_object_foreach(json_object_get(f->map, "detect"), path, w) {
    if (n == MAX_KEYS || !present(doc, path)) continue;
    size_t at = n++;
    for (; at > 0 && weights[at - 1] < json_integer_value(w); at--) keys[at] = keys[at - 1], weights[at] = weights[at - 1];
    keys[at] = path, weights[at] = json_integer_value(w);
  }
  out[0] = '\0';
  for (size_t i = 0, len = 0; i < n && i < 3; i++, len = strlen(out))
    snprintf(out + len, size - len, "%s%s", len ? ", " : "", keys[i]);
  if (n > 3) snprintf(out + strlen(out), size - strlen(out), ", ...");
}

const struct format *formats_detect(const struct formats *fs, const struct doc *doc, struct format_evidence *ev) {
  const struct format *best = NULL;
  int best_score = 0;
  json_int_t best_prio = 0;
  for (size_t i = 0; i < fs->n; i++) {
    int s = score(&fs->v[i], doc);
    json_int_t prio = json_integer_value(json_object_get(fs->v[i].map, "priority"));
    if (s > best_score || (s == best_score && best && prio < best_prio)) {
      best = &fs->v[i];
      best_score = s;
      best_prio = prio;
    }
  }
  if (ev) {
    *ev = (struct format_evidence){best, best_score, ""};
    if (best) evidence_keys(best, doc, ev->keys, sizeof ev->keys);
  }
  return best_score >= CLAIM_SCORE ? best : NULL;
}

const json_t *format_key(const struct format *f, const char *key) {
  return f ? json_object_get(json_object_get(f->map, "keys"), key) : NULL;
}

const json_t *format_default(const struct format *f, const char *path) {
  return f ? json_object_get(json_object_get(f->map, "defaults"), path) : NULL;
}

bool format_keeps_auto(const struct format *f) {
  return f && json_is_true(json_object_get(f->map, "keep_auto"));
}

const char *format_reason(const struct format *f, const char *key) {
  return f ? json_string_value(json_object_get(json_object_get(f->map, "reasons"), key)) : NULL;
}

const char *format_family(const json_t *entry, const struct ynode *node) {
  const json_t *values = json_object_get(entry, "values"), *variants;
  const char *plain;
  if (!node) return NULL;
  json_object_foreach((json_t *)json_object_get(entry, "families"), plain, variants) {
    size_t i;
    const json_t *v;
    json_array_foreach(variants, i, v) {
      const char *name = json_string_value(v);
      if (name && spelling_matches(json_object_get(values, name), node)) return strrchr(name, '-');
    }
  }
  return NULL;
}

bool spelling_matches(const json_t *spelling, const struct ynode *node) {
  if (json_is_array(spelling)) {
    size_t i;
    const json_t *one;
    json_array_foreach(spelling, i, one) if (spelling_matches(one, node)) return true;
    return false;
  }
  struct vf_value v;
  return value_from_json(spelling, &v) == 0 && ynode_equals(node, &v);
}

const json_t *spelling_first(const json_t *spelling) {
  return json_is_array(spelling) ? json_array_get(spelling, 0) : spelling;
}

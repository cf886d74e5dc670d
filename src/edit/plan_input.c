/* Plans (`vramfit plan --json` output) as settings for apply. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "base/fileio.h"
#include "base/json_util.h"
#include "edit/internal.h"

/* Plan fields that are logical keys as they are. */
static const char *const direct_fields[] = {"batch", "accumulation", "seq", "grad_ckpt", "optimizer",
                                            "precision", "offload", "zero_stage", "loss",
                                            "optimizer_in_bwd"};

struct list {
  struct vf_setting *v;
  size_t n;
};

struct store {
  char **str;
  size_t nstr;
  struct list *lists;
  size_t nlists;
};

static const char *keep(struct store *st, char *s) {
  char **grown = s ? realloc(st->str, (st->nstr + 1) * sizeof *grown) : NULL;
  if (!grown) {
    free(s);
    return NULL;
  }
  st->str = grown;
  st->str[st->nstr++] = s;
  return s;
}

static int push(struct list *l, const char *key, const char *value, int from_plan) {
  if (!key || !value) return VF_ENOMEM;
  for (size_t i = 0; i < l->n; i++) {
    if (strcmp(l->v[i].key, key) != 0) continue;
    l->v[i] = (struct vf_setting){key, value, from_plan};
    return 0;
  }
  struct vf_setting *grown = realloc(l->v, (l->n + 1) * sizeof *grown);
  if (!grown) return VF_ENOMEM;
  l->v = grown;
  l->v[l->n++] = (struct vf_setting){key, value, from_plan};
  return 0;
}

/* A JSON value as --set would take it, owned by the store (the JSON goes away); for paths
 * (typed) a string stays a string even when it looks like a number. */
static const char *as_text(struct store *st, const json_t *v, bool typed) {
  if (json_is_string(v) && !typed) return keep(st, strdup(json_string_value(v)));
  if (json_is_string(v)) {
    const char *s = json_string_value(v);
    struct vf_value probe;
    if (vf_value_parse(s, &probe) == 0 && probe.kind == VF_VALUE_STRING) return s;
    size_t n = strlen(s);
    char *q = malloc(n + 3);
    if (q) snprintf(q, n + 3, "\"%s\"", s);
    return keep(st, q);
  }
  return keep(st, json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT));
}

static int shard_stage(const char *file, const char *shard, const char **out, struct vf_diag *d) {
  static const char *const names[][2] = {{"none", "0"}, {"zero1", "1"}, {"zero2", "2"}, {"zero3", "3"}};
  for (size_t i = 0; i < 4; i++)
    if (strcmp(shard, names[i][0]) == 0) return *out = names[i][1], 0;
  return diag_at(d, VF_EUNSUPPORTED, file, UINT64_MAX,
                 "the plan asks for shard %s, which apply cannot write: set it up by hand", shard);
}

/* Whether a field is one to write: given (a plan of the user's own configs, its "given"
 * read from them) holds the files' values, so only what the plan changes is written, into
 * the keys it was read from, and what vramfit could not model stays as the files have it. */
static bool to_write(const json_t *v, const json_t *given, const char *field) {
  return v && !json_is_null(v) && !(given && json_equal((json_t *)v, json_object_get(given, field)));
}

/* set_only: the object's "set" alone (a workload plan's stage, whose batch and
 * accumulation belong to the main config). */
static int read_fields(struct store *st, const char *file, const json_t *o, const json_t *given, bool set_only,
                       struct list *l, struct vf_diag *d) {
  for (size_t i = 0; !set_only && i < sizeof direct_fields / sizeof *direct_fields; i++) {
    const json_t *v = json_object_get(o, direct_fields[i]);
    if (!to_write(v, given, direct_fields[i])) continue;
    int rc = push(l, direct_fields[i], as_text(st, v, false), 1);
    if (rc) return rc;
  }
  const json_t *shard_v = json_object_get(o, "shard");
  const char *shard = set_only || !to_write(shard_v, given, "shard") ? NULL : json_string_value(shard_v), *stage = NULL;
  if (shard) {
    int rc = shard_stage(file, shard, &stage, d);
    if (!rc) rc = push(l, "zero_stage", stage, 1);
    if (rc) return rc;
  }
  const char *path;
  json_t *v;
  json_object_foreach((json_t *)json_object_get(o, "set"), path, v) {
    if (json_is_object(v) || json_is_array(v))
      return diag_at(d, VF_EFORMAT, file, UINT64_MAX, "\"set\": %s must be a single value", path);
    int rc = push(l, keep(st, strdup(path)), as_text(st, v, true), 0);
    if (rc) return rc;
  }
  return 0;
}

static struct list *new_list(struct store *st) {
  struct list *grown = realloc(st->lists, (st->nlists + 1) * sizeof *grown);
  if (!grown) return NULL;
  st->lists = grown;
  grown[st->nlists] = (struct list){0};
  return &grown[st->nlists++];
}

static bool stage_matches(const json_t *stage, const char *path) {
  const char *file = json_string_value(json_object_get(stage, "file"));
  const char *name = json_string_value(json_object_get(stage, "name"));
  const char *b = path_base(path);
  if (file) return strcmp(file, path) == 0 || strcmp(path_base(file), b) == 0;
  if (!name) return false;
  size_t n = strcspn(b, ".");
  return strcmp(name, b) == 0 || (strlen(name) == n && strncmp(name, b, n) == 0);
}

/* Lists are only complete once --set has been added; index i of p->inputs gets list li[i]. */
static int build_inputs(struct vf_plan *p, struct store *st, const size_t *li,
                        const char *const *files, size_t n_files, const struct vf_setting *extra,
                        size_t n_extra) {
  for (size_t k = 0; k < st->nlists; k++)
    for (size_t e = 0; e < n_extra; e++) {
      int rc = push(&st->lists[k], extra[e].key, extra[e].value, 0);
      if (rc) return rc;
    }
  p->inputs = calloc(n_files ? n_files : 1, sizeof *p->inputs);
  if (!p->inputs) return VF_ENOMEM;
  for (size_t i = 0; i < n_files; i++)
    p->inputs[i] = (struct vf_apply_input){files[i], st->lists[li[i]].v, st->lists[li[i]].n};
  p->n_inputs = n_files;
  return 0;
}

static int match_stages(struct store *st, const char *file, const json_t *stages, bool set_only,
                        const char *const *files, size_t n_files, size_t *li, struct vf_diag *d) {
  size_t i;
  const json_t *stage;
  json_array_foreach(stages, i, stage) {
    struct list *l = new_list(st);
    if (!l) return VF_ENOMEM;
    size_t hits = 0, idx = st->nlists - 1;
    int rc = read_fields(st, file, stage, NULL, set_only, l, d);
    for (size_t f = 0; f < n_files && !rc; f++) {
      if (!stage_matches(stage, files[f])) continue;
      if (li[f] != 0)
        return diag_at(d, VF_EINVAL, file, UINT64_MAX, "two stages match %s", files[f]);
      li[f] = idx;
      hits++;
    }
    if (rc) return rc;
    /* A stage with nothing of its own to write (a workload without stage files: the main
     * config takes everything) needs no file. */
    if (!hits && l->n) {
      const char *name = json_string_value(json_object_get(stage, "file"));
      if (!name) name = json_string_value(json_object_get(stage, "name"));
      return diag_at(d, VF_EINVAL, file, UINT64_MAX, "stage %zu (%s) matches none of the files given",
                     i, name ? name : "unnamed");
    }
  }
  return 0;
}

static int load(struct vf_plan *p, struct store *st, const char *file, const json_t *root,
                const char *tier, const char *const *files, size_t n_files,
                const struct vf_setting *extra, size_t n_extra, struct vf_diag *d) {
  const json_t *base = tier ? json_object_get(json_object_get(root, "tiers"), tier)
                            : json_object_get(root, "recommended");
  const json_t *stages = json_object_get(root, "stages");
  /* A workload's plan: "recommended" is its first stage, values of that stage's file; the
   * main config takes the values every stage shares. */
  const json_t *shared = json_object_get(root, "shared");
  if (!tier && json_is_array(stages) && json_is_object(shared)) base = shared;
  if (tier && !base)
    return diag_at(d, VF_EINVAL, file, UINT64_MAX, "the plan has no tier '%s'", tier);
  if (!json_is_object(base) && !json_is_array(stages))
    return diag_at(d, VF_EFORMAT, file, UINT64_MAX,
                   "not a plan: no \"recommended\" object and no \"stages\" list");
  struct list *l0 = new_list(st);
  if (!l0) return VF_ENOMEM;
  /* A plan of configs says where it read them ("read_from"): it writes back its changes. */
  const json_t *given = json_object_get(root, "read_from") ? json_object_get(root, "given") : NULL;
  int rc = base ? read_fields(st, file, base, given, false, l0, d) : 0;
  size_t *li = calloc(n_files ? n_files : 1, sizeof *li);
  if (!li) return VF_ENOMEM;
  if (!rc && stages) rc = match_stages(st, file, stages, base == shared, files, n_files, li, d);
  if (!rc) rc = build_inputs(p, st, li, files, n_files, extra, n_extra);
  free(li);
  const json_t *conf = json_object_get(base, "alloc_conf");
  if (!conf) conf = json_object_get(root, "alloc_conf");
  const json_t *gpus = json_object_get(base, "gpus");
  if (!gpus) gpus = json_object_get(root, "gpus");
  if (!rc && json_is_string(conf) && !(p->alloc_conf = strdup(json_string_value(conf)))) rc = VF_ENOMEM;
  if (json_is_integer(gpus) && json_integer_value(gpus) > 0) p->gpus = (uint64_t)json_integer_value(gpus);
  return rc;
}

void vf_plan_init(struct vf_plan *p) { memset(p, 0, sizeof *p); }

/* "-" is standard input, so that `vramfit plan --json ... | vramfit apply --plan - F` works. */
static int read_plan(const char *file, char **text, size_t *len, struct vf_diag *d) {
  if (strcmp(file, "-") != 0) return file_read(file, 16u << 20, text, len, d);
  struct sbuf b = {0};
  char chunk[65536];
  for (size_t n; (n = fread(chunk, 1, sizeof chunk, stdin)) > 0;) sb_add(&b, chunk, n);
  if (ferror(stdin)) {
    sb_free(&b);
    return diag_at(d, VF_EIO, "-", UINT64_MAX, "cannot read standard input");
  }
  *text = sb_take(&b, len);
  return *text ? 0 : VF_ENOMEM;
}

int vf_plan_parse(struct vf_plan *p, const char *file, const char *text, size_t len, const char *tier,
                  const char *const *files, size_t n_files, const struct vf_setting *extra, size_t n_extra,
                  struct vf_diag *d) {
  struct store *st = p->priv ? p->priv : calloc(1, sizeof *st);
  if (!st) return VF_ENOMEM;
  p->priv = st;
  json_t *root = NULL;
  int rc = parse_json_text(text, len, file, &root, d);
  if (!rc) rc = load(p, st, file, root, tier, files, n_files, extra, n_extra, d);
  json_decref(root);
  return rc;
}

int vf_plan_load(struct vf_plan *p, const char *file, const char *tier, const char *const *files,
                 size_t n_files, const struct vf_setting *extra, size_t n_extra, struct vf_diag *d) {
  char *text = NULL;
  size_t len = 0;
  int rc = read_plan(file, &text, &len, d);
  if (!rc) rc = vf_plan_parse(p, file, text, len, tier, files, n_files, extra, n_extra, d);
  free(text);
  return rc;
}

void vf_plan_cleanup(struct vf_plan *p) {
  struct store *st = p->priv;
  for (size_t i = 0; st && i < st->nstr; i++) free(st->str[i]);
  for (size_t i = 0; st && i < st->nlists; i++) free(st->lists[i].v);
  if (st) {
    free(st->str);
    free(st->lists);
  }
  free(st);
  free(p->inputs);
  free(p->alloc_conf);
  memset(p, 0, sizeof *p);
}

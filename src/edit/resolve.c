/* From settings (logical keys or dotted paths) to the values each file gets. A logical
 * key is looked up in the file's format map; a group of files (those given the same
 * settings) must between them take every setting, so the DeepSpeed JSON may hold the
 * micro batch while the TrainingArguments file holds the optimizer. */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/diag.h"
#include "edit/internal.h"
#include "io/hydra.h"

enum ltype { L_INT, L_ENUM, L_LIST };

struct logical {
  const char *name;
  enum ltype type;
  long long min, max;
  const char *values;  /* enums and lists: the accepted values, space-separated */
  const char *neutral; /* asks for nothing: skipped quietly where it has no place */
};

static const struct logical logicals[] = {
    {"batch", L_INT, 1, 1 << 24, NULL, NULL},
    {"accumulation", L_INT, 1, 1 << 24, NULL, "1"},
    {"seq", L_INT, 1, 1 << 30, NULL, NULL},
    {"zero_stage", L_INT, 0, 3, NULL, "0"},
    {"grad_ckpt", L_ENUM, 0, 0, "none full selective", "none"},
    {"precision", L_ENUM, 0, 0, "bf16 fp16 fp32 bf16-mixed bf16-true fp16-mixed fp16-true", NULL},
    {"optimizer", L_ENUM, 0, 0, "adamw adamw-8bit paged-adamw-8bit adafactor sgd sgd-momentum lion",
     NULL},
    {"offload", L_LIST, 0, 0, "none optimizer params activations", "none"},
    {"loss", L_ENUM, 0, 0, "default chunked fused cce", "default"},
    {"optimizer_in_bwd", L_ENUM, 0, 0, "no yes", "no"},
};

/* Other spellings users type, as "key:spelling" -> value. */
static const char *const aliases[][2] = {
    {"grad_ckpt:true", "full"},        {"grad_ckpt:on", "full"},
    {"grad_ckpt:false", "none"},       {"grad_ckpt:off", "none"},
    {"precision:bfloat16", "bf16"},    {"precision:16-true", "fp16-true"},
    {"precision:16-mixed", "fp16-mixed"}, {"precision:16", "fp16"},
    {"precision:float16", "fp16"},     {"precision:32", "fp32"},
    {"precision:32-true", "fp32"},     {"precision:float32", "fp32"},
    {"precision:none", "fp32"},        {"offload:param", "params"},
    {"offload:parameters", "params"},  {"offload:optim", "optimizer"},
};

enum { MAX_ELEM = 4 };

/* A checked logical value; lists are split into elements. */
struct lvalue {
  const struct logical *l;
  long long i;
  char text[128];
  const char *elem[MAX_ELEM];
  size_t nelem;
  char buf[128];
};

/* O_ELSEWHERE: missing here, and set by configs a Hydra run loads over this one. */
enum outcome { O_LANDED, O_AUTO, O_ELSEWHERE, O_MISSING_DIFFERS, O_MISSING_NODEFAULT, O_UNMAPPED };

/* Which configs set a path instead (O_ELSEWHERE): the first, and how many. */
struct owners {
  char first[PATH_MAX];
  size_t count;
};

/* What one setting did in one file, per element, with what a message needs. */
struct result {
  enum outcome o[MAX_ELEM];
  char path[256];
  size_t at;
  const json_t *def;
  struct owners owners;
};

/* A key written ".path" is always a path in the file, even one named like a logical key
 * (litgpt's own top-level `precision`). */
static bool literal(const char *key) { return key[0] == '.'; }

static const char *path_of(const char *key) { return key + literal(key); }

static const struct logical *logical_of(const char *key) {
  for (size_t i = 0; i < sizeof logicals / sizeof *logicals; i++)
    if (strcmp(logicals[i].name, key) == 0) return &logicals[i];
  return NULL;
}

static bool in_list(const char *word, const char *list) {
  size_t n = strlen(word);
  for (const char *p = list; *p;) {
    size_t k = strcspn(p, " ");
    if (k == n && strncmp(p, word, n) == 0) return true;
    p += k + (p[k] == ' ');
  }
  return false;
}

static const char *canonical(const struct logical *l, char *word) {
  for (char *p = word; *p; p++) *p = (char)(l->type == L_ENUM && *p == '_' ? '-' : tolower((unsigned char)*p));
  char probe[160];
  snprintf(probe, sizeof probe, "%s:%s", l->name, word);
  for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++)
    if (strcmp(aliases[i][0], probe) == 0) return aliases[i][1];
  return word;
}

static int bad_value(const struct lvalue *v, const char *text, struct vf_diag *d) {
  if (v->l->type == L_INT)
    return diag_at(d, VF_EINVAL, NULL, UINT64_MAX, "%s=%s: expects a whole number from %lld to %lld",
                   v->l->name, text, v->l->min, v->l->max);
  return diag_at(d, VF_EINVAL, NULL, UINT64_MAX, "%s=%s: expects %s%s", v->l->name, text,
                 v->l->type == L_LIST ? "a comma list of " : "one of ", v->l->values);
}

static int parse_list(struct lvalue *v, const char *text, struct vf_diag *d) {
  snprintf(v->buf, sizeof v->buf, "%s", text);
  v->text[0] = '\0';
  for (char *save = NULL, *w = strtok_r(v->buf, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
    const char *c = canonical(v->l, w);
    if (!in_list(c, v->l->values) || v->nelem == MAX_ELEM) return bad_value(v, text, d);
    v->elem[v->nelem++] = c;
    snprintf(v->text + strlen(v->text), sizeof v->text - strlen(v->text), "%s%s",
             v->nelem > 1 ? "," : "", c);
  }
  bool has_none = false;
  for (size_t i = 0; i < v->nelem; i++) has_none |= strcmp(v->elem[i], "none") == 0;
  return v->nelem == 0 || (has_none && v->nelem > 1) ? bad_value(v, text, d) : 0;
}

static int parse_logical(struct lvalue *v, const struct logical *l, const char *text,
                         struct vf_diag *d) {
  memset(v, 0, sizeof *v);
  v->l = l;
  if (l->type == L_LIST) return parse_list(v, text, d);
  if (l->type == L_INT) {
    struct vf_value pv;
    if (vf_value_parse(text, &pv) || pv.kind != VF_VALUE_INT || pv.i < l->min || pv.i > l->max)
      return bad_value(v, text, d);
    v->i = pv.i;
    snprintf(v->text, sizeof v->text, "%lld", pv.i);
  } else {
    snprintf(v->buf, sizeof v->buf, "%s", text);
    const char *c = canonical(l, v->buf);
    if (!in_list(c, l->values)) return bad_value(v, text, d);
    snprintf(v->text, sizeof v->text, "%s", c);
  }
  v->elem[0] = v->text;
  v->nelem = 1;
  return 0;
}

/* ---- one place a value may go ---- */

struct slot {
  const char *const *cands; /* candidate paths, first present wins */
  size_t ncand;
  const json_t *spelling;   /* from the map, or NULL: write direct */
  struct vf_value direct;
  bool keep_auto, keep_type, check_interp;
};

struct sres {
  enum outcome o;
  const char *path;
  size_t at;
  const json_t *def;
  bool edit, create;
  struct vf_value value;
  struct owners owners;
};

static bool wanted_equals_json(const struct slot *sl, const json_t *j) {
  if (sl->spelling) {
    if (!json_is_array(sl->spelling)) return json_equal((json_t *)sl->spelling, (json_t *)j);
    size_t i;
    const json_t *one;
    json_array_foreach(sl->spelling, i, one) if (json_equal((json_t *)one, (json_t *)j)) return true;
    return false;
  }
  struct vf_value v;
  return value_from_json(j, &v) == 0 && value_same(&v, &sl->direct);
}

static int wanted_value(const struct slot *sl, struct vf_value *v) {
  if (!sl->spelling) {
    *v = sl->direct;
    return 0;
  }
  return value_from_json(spelling_first(sl->spelling), v);
}

static int found_node(const struct afile *f, const struct slot *sl, const struct ynode *n,
                      const char *path, struct sres *r, struct vf_diag *d) {
  r->path = path;
  r->at = n->start;
  r->o = O_LANDED;
  if (n->kind == YN_SCALAR && sl->keep_auto && ynode_type(n) == VF_VALUE_STRING &&
      strcmp(n->value, "auto") == 0) {
    r->o = O_AUTO;
    return 0;
  }
  if (n->kind == YN_SCALAR && sl->check_interp && strstr(n->value, "${"))
    return ytree_diag(&f->doc.t, d, VF_EINVAL, n->start,
                      "%s is the interpolation %s: set the key it points to, or --set %s=VALUE "
                      "to replace it",
                      path, n->value, path);
  bool same = n->kind == YN_SCALAR &&
              (sl->spelling ? spelling_matches(sl->spelling, n) : ynode_equals(n, &sl->direct));
  if (same) return 0;
  r->edit = true;
  return wanted_value(sl, &r->value);
}

/* jsonargparse reads a class's arguments under init_args: a key created beside class_path
 * would not be one of them. */
static bool beside_class_path(const struct yfind *fd) {
  const struct ynode *m = fd->parent;
  if (!m || m->kind != YN_MAP || (strncmp(fd->rest, "init_args", 9) == 0 && strchr(".", fd->rest[9])))
    return false;
  for (size_t i = 0; i + 1 < m->nkid; i += 2)
    if (m->kid[i]->kind == YN_SCALAR && strcmp(m->kid[i]->value, "class_path") == 0) return true;
  return false;
}

/* How many segments of the candidate are missing (fewer: a better place to create). */
static size_t missing_depth(const struct yfind *fd) {
  size_t n = 1;
  for (const char *p = fd->rest; *p; p++) n += *p == '.';
  return n;
}

/* A map's path as it is in f: below f's Hydra package, or NULL when not under it. */
static const char *in_file(const struct afile *f, const char *path) {
  return hydra_inside(f->package, path);
}

/* A Hydra primary config's path that stage configs outside the call set: a value here
 * would not reach the stages, whether the path is here (at) or not. */
static bool stages_own(const struct astate *s, const struct afile *f, const char *path, size_t at, struct sres *r) {
  if (hydra_owner_of(s, f, path, r->owners.first, sizeof r->owners.first, &r->owners.count) != HYDRA_STAGES)
    return false;
  r->path = path;
  r->at = at;
  r->o = O_ELSEWHERE;
  return true;
}

/* A Hydra primary config that lacks every candidate: where the project's stage configs set
 * one, it does not land here; where a config listed after _self_ sets one, the edit is
 * queued here for check_hydra_defaults to move there (or refuse), --create or not. 0 when
 * so decided, 1 when no other config sets any. */
static int owned_elsewhere(const struct astate *s, const struct afile *f, const struct slot *sl, struct sres *r) {
  for (size_t i = 0; i < sl->ncand; i++) {
    const char *path = in_file(f, sl->cands[i]);
    enum hydra_owner o = path ? hydra_owner_of(s, f, path, r->owners.first, sizeof r->owners.first, &r->owners.count)
                              : HYDRA_NONE;
    if (o == HYDRA_NONE) continue;
    r->path = path;
    if (o == HYDRA_STAGES) return r->o = O_ELSEWHERE, 0;
    r->edit = r->create = true;
    return wanted_value(sl, &r->value);
  }
  return 1;
}

static int resolve_slot(const struct astate *s, const struct afile *f, const struct slot *sl, struct sres *r,
                        bool create, struct vf_diag *d) {
  memset(r, 0, sizeof *r);
  const char *best = NULL;
  size_t best_depth = SIZE_MAX, best_at = 0;
  for (size_t i = 0; i < sl->ncand; i++) {
    struct yfind fd;
    const char *path = in_file(f, sl->cands[i]);
    int rc = path ? ytree_find(&f->doc.t, path, &fd, d) : VF_ENOTFOUND;
    if (rc == VF_ENOTFOUND) continue;
    if (rc) return rc;
    if (fd.node) return stages_own(s, f, path, fd.node->start, r) ? 0 : found_node(f, sl, fd.node, path, r, d);
    if (missing_depth(&fd) < best_depth && !beside_class_path(&fd)) {
      best = path;
      best_depth = missing_depth(&fd);
      best_at = fd.parent ? fd.parent->start : 0;
    }
    if (!r->def) r->def = format_default(f->fmt, sl->cands[i]);
  }
  r->path = best ? best : sl->cands[0];
  r->at = best_at;
  if (r->def && wanted_equals_json(sl, r->def)) return 0;
  int rc = owned_elsewhere(s, f, sl, r);
  if (rc <= 0) return rc;
  if (create && best) {
    r->edit = r->create = true;
    return wanted_value(sl, &r->value);
  }
  r->o = r->def ? O_MISSING_DIFFERS : O_MISSING_NODEFAULT;
  return 0;
}

/* ---- one setting in one file ---- */

struct job {
  struct astate *s;
  struct afile *f;
  const struct vf_setting *set;
  struct result *res;
  struct vf_diag *d;
};

static void set_all(struct result *res, size_t n, enum outcome o) {
  for (size_t i = 0; i < n; i++) res->o[i] = o;
}

/* Runs slots and queues their edits only when all of them can be written. */
static int run_slots(struct job *j, const struct slot *slots, size_t n, bool *which,
                     size_t nelem) {
  struct sres r[16];
  enum outcome worst = O_LANDED;
  size_t autos = 0, worst_at = 0;
  if (n > 16) n = 16;
  for (size_t i = 0; i < n; i++) {
    int rc = resolve_slot(j->s, j->f, &slots[i], &r[i], j->s->o->create, j->d);
    if (rc) return rc;
    autos += r[i].o == O_AUTO;
    if (r[i].o > worst && r[i].o != O_AUTO) worst = r[i].o, worst_at = i;
  }
  if (worst == O_LANDED && n && autos == n) worst = O_AUTO;
  const struct sres *m = &r[worst == O_LANDED || worst == O_AUTO ? 0 : worst_at];
  snprintf(j->res->path, sizeof j->res->path, "%s", m->path ? m->path : "");
  j->res->at = m->at;
  j->res->def = m->def;
  j->res->owners = m->owners;
  for (size_t e = 0; e < nelem; e++)
    if (which[e]) j->res->o[e] = worst;
  for (size_t i = 0; i < n && worst == O_LANDED; i++) {
    int rc = r[i].o != O_AUTO ? 0
             : queue_note(j->s->a, "%s: %s stays \"auto\" (filled from TrainingArguments)",
                          j->f->pub->path, r[i].path);
    if (!rc && r[i].edit)
      rc = queue_add(j->f, j->set->key, r[i].path, &r[i].value, r[i].create, slots[i].keep_type,
                     NULL, j->d);
    if (rc) return rc;
  }
  return 0;
}

static const char *override_of(const struct astate *s, const char *key) {
  for (size_t i = 0; i < s->o->n_maps; i++)
    if (strcmp(s->o->maps[i].key, key) == 0) return s->o->maps[i].value;
  return NULL;
}

/* "paths" form: one slot; the value's spelling comes from "values" when the map has it. */
static int run_paths(struct job *j, const json_t *entry, const struct lvalue *v, const char *over) {
  const json_t *paths = json_object_get(entry, "paths"), *values = json_object_get(entry, "values");
  const char *cands[16];
  size_t n = 0;
  if (over) cands[n++] = over;
  for (size_t i = 0; !over && i < json_array_size(paths) && n < 16; i++)
    cands[n++] = json_string_value(json_array_get(paths, i));
  struct slot sl = {cands, n, NULL, {0}, format_keeps_auto(j->f->fmt), false, true};
  if (values) {
    sl.spelling = json_object_get(values, v->text);
    if (!sl.spelling) {
      set_all(j->res, v->nelem, O_UNMAPPED);
      return 0;
    }
  } else if (v->l->type == L_INT) {
    sl.direct = (struct vf_value){.kind = VF_VALUE_INT, .i = v->i};
  } else {
    sl.direct = (struct vf_value){.kind = VF_VALUE_STRING, .s = v->text};
  }
  bool all[MAX_ELEM] = {true, true, true, true};
  return n ? run_slots(j, &sl, 1, all, v->nelem) : (set_all(j->res, v->nelem, O_UNMAPPED), 0);
}

/* "set" form: each value names several paths; a list's elements are laid over "none". */
static int run_set(struct job *j, const json_t *set, const struct lvalue *v) {
  json_t *merged = json_object();
  if (!merged) return VF_ENOMEM;
  bool which[MAX_ELEM] = {false};
  if (v->l->type == L_LIST && json_object_get(set, "none"))
    json_object_update(merged, json_object_get(set, "none"));
  for (size_t e = 0; e < v->nelem; e++) {
    const json_t *one = json_object_get(set, v->elem[e]);
    which[e] = one != NULL;
    j->res->o[e] = O_UNMAPPED;
    if (one) json_object_update(merged, (json_t *)one);
  }
  struct slot slots[16];
  const char *paths[16];
  size_t n = 0;
  const char *path;
  json_t *sp;
  json_object_foreach(merged, path, sp) {
    if (n == 16) break;
    paths[n] = path;
    slots[n] = (struct slot){&paths[n], 1, sp, {0}, format_keeps_auto(j->f->fmt), false, true};
    n++;
  }
  bool any = false;
  for (size_t e = 0; e < v->nelem; e++) any |= which[e];
  int rc = any ? run_slots(j, slots, n, which, v->nelem) : 0;
  json_decref(merged);
  return rc;
}

/* The node a "paths" entry would write: the first candidate present in the file. */
static const struct ynode *current(const struct afile *f, const json_t *entry, const char *over) {
  const json_t *paths = json_object_get(entry, "paths");
  size_t n = over ? 1 : json_array_size(paths);
  for (size_t i = 0; i < n; i++) {
    struct yfind fd;
    const char *p = in_file(f, over ? over : json_string_value(json_array_get(paths, i)));
    if (p && ytree_find(&f->doc.t, p, &fd, NULL) == 0 && fd.node) return fd.node;
  }
  return NULL;
}

/* Precision comes in families: "true" (the weights themselves in the dtype) and "mixed"
 * (fp32 master weights and autocast), which need different memory. A plain bf16 or fp16
 * keeps the family the file already uses ("families" lists the variants, the default
 * first); a qualified one (bf16-mixed) finds the plain spelling of a map whose spellings
 * are all of one family ("plain"). */
static int pick_family(struct job *j, const json_t *entry, const char *over, struct lvalue *v) {
  const json_t *variants = json_object_get(json_object_get(entry, "families"), v->text);
  const char *dash = strrchr(v->text, '-'), *plain = json_string_value(json_object_get(entry, "plain"));
  if (!variants) {
    if (dash && plain && strcmp(dash + 1, plain) == 0) v->text[dash - v->text] = '\0';
    return 0;
  }
  const char *family = format_family(entry, current(j->f, entry, over));
  for (size_t i = 1; family && i < json_array_size(variants); i++) {
    const char *name = json_string_value(json_array_get(variants, i));
    const char *suffix = name ? strrchr(name, '-') : NULL;
    if (!suffix || strcmp(suffix, family) != 0) continue;
    int rc = queue_note(j->s->a, "%s: %s=%s written as %s, the family the file uses (%s); "
                        "ask for %s=%s to change it", j->f->pub->path, v->l->name, v->text,
                        name, strcmp(family, "-true") == 0 ? "the weights themselves in that "
                        "dtype, no fp32 master copy" : "fp32 master weights and autocast",
                        v->l->name, json_string_value(json_array_get(variants, 0)));
    snprintf(v->text, sizeof v->text, "%s", name);
    return rc;
  }
  snprintf(v->text, sizeof v->text, "%s", json_string_value(json_array_get(variants, 0)));
  return 0;
}

/* What the map says about a value once it is written ("notes": {value: sentence}), or
 * about a value left as the file has it ({value: {"if": {path: value}, "note": ...}}). */
static int landed_note(struct job *j, const json_t *entry, const struct lvalue *v) {
  const json_t *n = json_object_get(json_object_get(entry, "notes"), v->text);
  const char *text = json_is_string(n) ? json_string_value(n) : json_string_value(json_object_get(n, "note"));
  if (!text || j->res->o[0] != O_LANDED) return 0;
  const char *path;
  const json_t *want;
  json_object_foreach((json_t *)json_object_get(n, "if"), path, want) {
    struct vf_value cur, w;
    if (!queue_get(j->f, path, &cur, NULL) || value_from_json(want, &w) || !value_same(&cur, &w))
      return 0;
  }
  return queue_note(j->s->a, "%s: %s", j->f->pub->path, text);
}

/* A key the tool derives from others ("derived": the path that holds it): litgpt's
 * accumulation is global_batch_size / (micro batch x devices), kept by check.c. */
static int run_derived(struct job *j, const json_t *entry, const struct lvalue *v) {
  j->f->accumulation = v->i;
  snprintf(j->res->path, sizeof j->res->path, "%s", json_string_value(json_object_get(entry, "derived")));
  set_all(j->res, v->nelem, O_LANDED);
  return 0;
}

static int run_logical(struct job *j, const struct logical *l) {
  struct lvalue v;
  int rc = parse_logical(&v, l, j->set->value, j->d);
  if (rc) return rc;
  const char *over = override_of(j->s, l->name);
  const json_t *entry = format_key(j->f->fmt, l->name);
  if (!over && json_object_get(entry, "derived")) return run_derived(j, entry, &v);
  rc = pick_family(j, entry, over, &v);
  if (rc) return rc;
  if (over || json_object_get(entry, "paths")) rc = run_paths(j, entry, &v, over);
  else if (json_object_get(entry, "set")) rc = run_set(j, json_object_get(entry, "set"), &v);
  else set_all(j->res, v.nelem, O_UNMAPPED);
  return rc ? rc : landed_note(j, entry, &v);
}

/* A dotted path: the value as typed (a "quoted" value is a string), in the type it has. */
static int run_dotted(struct job *j) {
  const char *text = j->set->value;
  size_t n = strlen(text);
  char *inner = NULL;
  struct vf_value v;
  int rc;
  if (n >= 2 && text[0] == '"' && text[n - 1] == '"') {
    inner = bytes_dup(text + 1, n - 2);
    if (!inner) return VF_ENOMEM;
    v = (struct vf_value){.kind = VF_VALUE_STRING, .s = inner};
    rc = 0;
  } else if ((rc = vf_value_parse(text, &v)) != 0) {
    return diag_at(j->d, rc, NULL, UINT64_MAX, "%s=%s: not a value", j->set->key, text);
  }
  const char *cands[1] = {path_of(j->set->key)};
  struct slot sl = {cands, 1, NULL, v, false, true, false};
  bool all[MAX_ELEM] = {true};
  rc = run_slots(j, &sl, 1, all, 1);
  free(inner);
  return rc;
}

/* ---- groups ---- */

static void value_text(const struct vf_setting *set, size_t e, char *buf, size_t size) {
  const struct logical *l = logical_of(set->key);
  struct lvalue v;
  if (l && l->type == L_LIST && parse_logical(&v, l, set->value, NULL) == 0 && e < v.nelem)
    snprintf(buf, size, "%s", v.elem[e]);
  else
    snprintf(buf, size, "%s", set->value);
}

static bool neutral(const struct vf_setting *set, const char *val) {
  const struct logical *l = logical_of(set->key);
  return l && l->neutral && strcmp(l->neutral, val) == 0;
}

/* A logical key in a file no tool's keys claim: which tool reads it is not guessed (a
 * project's own micro_batch_size is not axolotl's), and what its keys fell short of is said. */
static int unclaimed(const struct afile *f, const char *key, const char *val, struct vf_diag *d) {
  const struct format_evidence *ev = &f->evidence;
  char why[sizeof ev->keys + 96] = "no tool's keys are in it";
  if (ev->best)
    snprintf(why, sizeof why, "its keys %s are not enough to take it for %s", ev->keys, ev->best->name);
  return diag_line(d, VF_EINVAL, f->pub->path, 1, 1, "cannot tell which tool reads this file for %s=%s (%s): use "
                   "--format F, or --map %s=PATH, or --set the file's own dotted path", key, val, why, key);
}

/* A value the project's stage configs set, which a value in f would not reach. */
static int elsewhere(struct astate *s, const struct afile *f, const struct vf_setting *set, const char *val,
                     const struct result *r, struct vf_diag *d) {
  char more[64] = "", what[512];
  if (r->owners.count > 1) snprintf(more, sizeof more, " and %zu more", r->owners.count - 1);
  if (strcmp(r->path, path_of(set->key)) == 0) snprintf(what, sizeof what, "%s", r->path);
  else snprintf(what, sizeof what, "%s (for %s=%s)", r->path, set->key, val);
  if (set->from_plan)
    return queue_note(s->a, "%s: %s is set by %s%s, which the run loads over this file a stage at a time: not written", f->pub->path, what, r->owners.first, more);
  return ytree_diag(&f->doc.t, d, VF_EINVAL, r->at, "%s is set by %s%s, which the run loads over this file a "
                    "stage at a time, so a value here would not reach the stages: give %s", what,
                    r->owners.first, more, r->owners.count > 1 ? "those files" : "that file");
}

/* Nothing in the group took this element: an error, or a note for a plan's field. */
static int not_landed(struct astate *s, const struct vf_setting *set, size_t e, struct afile *f,
                      const struct result *r, bool several, struct vf_diag *d) {
  char val[128];
  value_text(set, e, val, sizeof val);
  const struct ytree *t = &f->doc.t;
  bool required = !set->from_plan;
  const char *why = format_reason(f->fmt, set->key);
  char def[96] = "";
  if (r->def) {
    char *dt = json_dumps(r->def, JSON_ENCODE_ANY);
    snprintf(def, sizeof def, "%s", dt ? dt : "?");
    free(dt);
  }
  switch (r->o[e]) {
  case O_ELSEWHERE:
    return elsewhere(s, f, set, val, r, d);
  case O_MISSING_DIFFERS:
    return ytree_diag(t, d, VF_ENOTFOUND, r->at, "no %s for %s=%s (the default, %s, differs); --create adds it",
                      r->path, set->key, val, def);
  case O_MISSING_NODEFAULT:
    if (!required)
      return queue_note(s->a, "%s: no %s for %s=%s; not written", f->pub->path, r->path, set->key, val);
    if (strcmp(r->path, path_of(set->key)) == 0)
      return ytree_diag(t, d, VF_ENOTFOUND, r->at, "no key %s; --create adds it", r->path);
    return ytree_diag(t, d, VF_ENOTFOUND, r->at, "no %s for %s=%s; --create adds it", r->path, set->key, val);
  case O_AUTO:
    if (!required) return queue_note(s->a, "%s: %s stays \"auto\"; not written", f->pub->path, r->path);
    return ytree_diag(t, d, VF_EINVAL, r->at,
                      "%s is \"auto\" (the HF Trainer fills it from TrainingArguments): give that "
                      "file too, or --set %s=VALUE to replace it",
                      r->path, r->path);
  default:
    if (!required && neutral(set, val)) return 0;
    if (several)
      return diag_line(d, VF_EINVAL, f->pub->path, 1, 1,
                       "none of the files given has a place for %s=%s%s", set->key, val,
                       f->fmt ? "" : " (use --format or --map KEY=PATH)");
    if (!f->fmt)
      return unclaimed(f, set->key, val, d);
    return diag_line(d, VF_EINVAL, f->pub->path, 1, 1, "%s=%s has no place in a %s config%s%s%s",
                     set->key, val, f->fmt->name, why ? ": " : "", why ? why : "",
                     required ? "" : " (from the plan: set it by hand, or --map it)");
  }
}

/* The file whose outcome explains best why an element did not land. */
static size_t explain(const size_t *members, size_t nm, struct result **res, size_t k, size_t e) {
  size_t pick = members[0];
  for (size_t m = 0; m < nm; m++)
    if (res[members[m]][k].o[e] < res[pick][k].o[e]) pick = members[m];
  return pick;
}

/* The file whose stage configs, outside the call, set what an element sets (even where the
 * call's own stage configs took it, those would run with the old value), or SIZE_MAX. */
static size_t unreached_stages(const size_t *members, size_t nm, struct result **res, size_t k, size_t e) {
  for (size_t m = 0; m < nm; m++)
    if (res[members[m]][k].o[e] == O_ELSEWHERE) return members[m];
  return SIZE_MAX;
}

static size_t elements_of(const struct vf_setting *set) {
  const struct logical *l = logical_of(set->key);
  struct lvalue v;
  return l && l->type == L_LIST && parse_logical(&v, l, set->value, NULL) == 0 ? v.nelem : 1;
}

static int settle_group(struct astate *s, size_t first, struct result **res, struct vf_diag *d) {
  size_t members[256], nm = 0;
  for (size_t i = first; i < s->n && nm < 256; i++)
    if (s->f[i].group == s->f[first].group) members[nm++] = i;
  for (size_t k = 0; k < s->f[first].n_group; k++) {
    const struct vf_setting *set = &s->f[first].group[k];
    for (size_t e = 0; e < elements_of(set); e++) {
      bool landed = false;
      for (size_t m = 0; m < nm; m++) landed |= res[members[m]][k].o[e] == O_LANDED;
      for (size_t m = 0; landed && e == 0 && m < nm; m++) {
        const struct result *r = &res[members[m]][k];
        int rc = r->o[e] != O_AUTO ? 0
                 : queue_note(s->a, "%s: %s stays \"auto\" (filled from TrainingArguments)",
                              s->f[members[m]].pub->path, r->path);
        if (rc) return rc;
      }
      size_t away = unreached_stages(members, nm, res, k, e);
      if (landed && away == SIZE_MAX) continue;
      size_t who = away != SIZE_MAX ? away : explain(members, nm, res, k, e);
      int rc = not_landed(s, set, e, &s->f[who], &res[who][k], nm > 1, d);
      if (rc) return rc;
    }
  }
  return 0;
}

static int resolve_file(struct astate *s, struct afile *f, struct result *res, struct vf_diag *d) {
  for (size_t k = 0; k < f->n_group; k++) {
    struct job j = {s, f, &f->group[k], &res[k], d};
    const struct logical *l = literal(f->group[k].key) ? NULL : logical_of(f->group[k].key);
    int rc = l ? run_logical(&j, l) : run_dotted(&j);
    if (rc) return rc;
  }
  return 0;
}

int resolve_settings(struct astate *s, struct vf_diag *d) {
  for (size_t i = 0; i < s->o->n_maps; i++)
    if (!logical_of(s->o->maps[i].key))
      return diag_at(d, VF_EINVAL, NULL, UINT64_MAX,
                     "--map %s=%s: %s is not a logical key (batch, accumulation, seq, grad_ckpt, "
                     "precision, optimizer, zero_stage, offload)",
                     s->o->maps[i].key, s->o->maps[i].value, s->o->maps[i].key);
  struct result **res = calloc(s->n ? s->n : 1, sizeof *res);
  if (!res) return VF_ENOMEM;
  int rc = 0;
  for (size_t i = 0; i < s->n && !rc; i++) {
    res[i] = calloc(s->f[i].n_group ? s->f[i].n_group : 1, sizeof **res);
    rc = res[i] ? resolve_file(s, &s->f[i], res[i], d) : VF_ENOMEM;
  }
  for (size_t i = 0; i < s->n && !rc; i++) {
    bool seen = false;
    for (size_t j = 0; j < i; j++) seen |= s->f[j].group == s->f[i].group;
    if (!seen) rc = settle_group(s, i, res, d);
  }
  for (size_t i = 0; i < s->n; i++) free(res[i]);
  free(res);
  return rc;
}

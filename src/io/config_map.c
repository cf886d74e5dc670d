/* A format map's entries read back into settings: the editor writes a logical value
 * through an entry, the reader turns what the file holds there into the value again. An
 * entry of "keys" (shared with the editor) or of "read" (forms the editor cannot write
 * back: words of a string, products, presence) is one or more of:
 *   "paths" (+ "values")  the first path present holds the value, spelled as "values"
 *                         maps it ("words": true: any word of a string or item of a list);
 *                         else the map's default for the first path that has one
 *   "set"                 a value whose paths all hold its spellings (or their defaults);
 *                         an array of such objects: alternatives; most paths present wins
 *   "present"             a value whose paths any is in the file
 *   "derived"             litgpt's accumulation: that path's global batch over the micro
 *                         batch and the GPUs
 *   "times"               paths whose numbers multiply the value (devices x num_nodes)
 *   "strip"               a prefix a model name loses ("checkpoints/")
 * A value in the file wins over a default, the "keys" entry over the "read" one; list
 * settings (offload, lora_targets) join what every form finds. A value no spelling
 * matches is a warning, never dropped silently. The map's "files" name other configs
 * (`deepspeed: ds.json`), its "warn" values vramfit does not model, its "framework" the
 * profile its runs use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "base/sbuf.h"
#include "io/config_internal.h"

enum kind { K_INT, K_WORD, K_LIST, K_GPUS, K_TEXT, K_MODEL, K_PRECISION };

/* The settings a map may give, in the order they are read (the derived accumulation needs
 * the batch and the GPUs). noun names a value in warnings ("is not an optimizer vramfit
 * models"); lists have their elements in the order they are written. */
struct logical {
  const char *name;
  enum kind kind;
  const char *noun;
  const char *elements;
};

static const struct logical logicals[] = {
    {"model", K_MODEL, "a model", NULL},
    {"weights", K_WORD, "a weight dtype", NULL},
    {"precision", K_PRECISION, "a precision", NULL},
    {"method", K_WORD, "a fine-tuning method", NULL},
    {"lora_r", K_INT, "a LoRA rank", NULL},
    {"lora_targets", K_LIST, "a LoRA target", "all-linear q k v o gate up down head"},
    {"quant", K_WORD, "a quantization", NULL},
    {"batch", K_INT, "a micro batch", NULL},
    {"gpus", K_GPUS, "a GPU count", NULL},
    {"accumulation", K_INT, "an accumulation", NULL},
    {"seq", K_INT, "a sequence length", NULL},
    {"lengths", K_WORD, "a kind of sample lengths", NULL},
    {"eval", K_WORD, "a validation setting", NULL},
    {"grad_ckpt", K_WORD, "a checkpointing", NULL},
    {"attention", K_WORD, "an attention", NULL},
    {"optimizer", K_WORD, "an optimizer", NULL},
    {"optimizer_in_bwd", K_WORD, "an optimizer-in-backward setting", NULL},
    {"compile", K_WORD, "a compile setting", NULL},
    {"loss", K_WORD, "a loss", NULL},
    {"shard", K_WORD, "a sharding", NULL},
    {"offload", K_LIST, "an offload", "none optimizer params activations"},
    {"tp", K_INT, "a tensor parallel size", NULL},
    {"pp", K_INT, "a pipeline parallel size", NULL},
    {"cp", K_INT, "a context parallel size", NULL},
    {"ep", K_INT, "an expert parallel size", NULL},
    {"alloc_conf", K_TEXT, "an allocator setting", NULL},
};

enum { MAX_ELEMENTS = 16 };

/* What one form found: a value (lists: elements) and where. */
struct cand {
  bool any;
  char value[256];
  unsigned bits;
  struct place at; /* at.node NULL: a default */
  const json_t *entry;
  bool as_tool; /* a spelling of "default" matched: the tool's own choice, nothing to set */
  /* A value no spelling matched, warned about only when no other form reads the setting
   * from the file (a "read" entry may know spellings the editor does not write). */
  bool pending;
  struct place warn_at;
};

struct job {
  struct creader *r;
  struct cfile *f;
  const struct logical *l;
};

/* ---- spellings ---- */

static bool json_matches(const json_t *spelling, const json_t *v) {
  if (!json_is_array(spelling)) return json_equal((json_t *)spelling, (json_t *)v);
  size_t i;
  const json_t *one;
  json_array_foreach(spelling, i, one) if (json_equal((json_t *)one, (json_t *)v)) return true;
  return false;
}

static bool word_matches(const json_t *spelling, const char *word, size_t n) {
  if (json_is_array(spelling)) {
    size_t i;
    const json_t *one;
    json_array_foreach(spelling, i, one) if (word_matches(one, word, n)) return true;
    return false;
  }
  const char *s = json_string_value(spelling);
  return s && strlen(s) == n && strncmp(s, word, n) == 0;
}

/* The logical value whose spelling the node (word: the word) has, or NULL. */
static const char *lookup(const json_t *values, const struct ynode *node, const char *word, size_t n) {
  const char *name;
  json_t *spelling;
  json_object_foreach((json_t *)values, name, spelling) {
    if (word ? word_matches(spelling, word, n) : spelling_matches(spelling, node)) return name;
  }
  return NULL;
}

static const char *lookup_json(const json_t *values, const json_t *v) {
  const char *name;
  json_t *spelling;
  json_object_foreach((json_t *)values, name, spelling) if (json_matches(spelling, v)) return name;
  return NULL;
}

/* Index of a list element, or -1. */
static int element(const struct logical *l, const char *name) {
  int i = 0;
  for (const char *p = l->elements; *p; i++) {
    size_t n = strcspn(p, " ");
    if (strlen(name) == n && strncmp(p, name, n) == 0) return i;
    p += n + (p[n] == ' ');
  }
  return -1;
}

static bool is_auto(const struct job *j, const struct ynode *n) {
  return n->kind == YN_SCALAR && format_keeps_auto(j->f->fmt) && strcmp(n->value, "auto") == 0;
}

/* The value "default" in a map spells the tool's own choice ("flash_attn: auto"): it sets
 * nothing, and is no value vramfit lacks either. */
static bool tool_default(struct cand *c, const char *value) {
  if (!value || strcmp(value, "default") != 0) return false;
  c->as_tool = true;
  return true;
}

static void found(struct cand *c, const struct place *at, const char *value) {
  if (tool_default(c, value)) return;
  c->any = true;
  c->at = *at;
  if (value) snprintf(c->value, sizeof c->value, "%s", value);
}

static void found_element(const struct job *j, struct cand *c, const struct place *at, const char *name) {
  int e = tool_default(c, name) ? -1 : element(j->l, name);
  if (e < 0) return;
  if (!c->any || (!c->at.node && at->node)) c->at = *at;
  c->any = true;
  c->bits |= 1u << e;
}

/* Every element a word or node spells (one word may stand for several: "fsdp_cpu_offload"
 * offloads the optimizer and the parameters); false when none. */
static bool elements_of(const struct job *j, const json_t *values, const struct place *at, const char *word, size_t n,
                        struct cand *c) {
  const char *name;
  json_t *spelling;
  bool any = false;
  json_object_foreach((json_t *)values, name, spelling) {
    if (!(word ? word_matches(spelling, word, n) : spelling_matches(spelling, at->node))) continue;
    found_element(j, c, at, name);
    any = true;
  }
  return any;
}

/* A value vramfit cannot model: a list's element is warned about at once, a word setting's
 * value once the other forms had their say (c). */
static int not_modelled(const struct job *j, const struct place *at, const char *text, struct cand *c) {
  if (c && !c->pending) {
    c->pending = true;
    c->warn_at = *at;
    return 0;
  }
  return c ? 0 : config_warn(j->r, j->l->name, at, text, "is not %s vramfit models", j->l->noun);
}

/* "quiet": true: an entry that reads what it can and leaves the rest unsaid (its values
 * are read in full elsewhere, such as a method the weights' dtype depends on). */
static bool quiet(const json_t *entry) { return json_is_true(json_object_get(entry, "quiet")); }

/* ---- "paths" ---- */

/* Each word of a string ("q_proj,v_proj", "full_shard auto_wrap") or item of a list.
 * quiet: words that are no value are other settings' ("words": true), not warned. */
static int each_word(const struct job *j, const struct place *at, const json_t *values, bool quiet, struct cand *c) {
  const struct ynode *n = at->node;
  for (size_t i = 0; n->kind == YN_SEQ && i < n->nkid; i++) {
    struct place item = *at;
    item.node = n->kid[i];
    int rc = n->kid[i]->kind == YN_SCALAR ? each_word(j, &item, values, quiet, c) : 0;
    if (rc) return rc;
  }
  if (n->kind != YN_SCALAR) return 0;
  if (ynode_type(n) != VF_VALUE_STRING)
    return elements_of(j, values, at, NULL, 0, c) || quiet || ynode_type(n) == VF_VALUE_NULL
               ? 0 : not_modelled(j, at, NULL, NULL);
  for (const char *p = n->value + strspn(n->value, ", \t"); *p; p += strspn(p, ", \t")) {
    size_t len = strcspn(p, ", \t");
    char word[128];
    snprintf(word, sizeof word, "%.*s", (int)(len < sizeof word ? len : sizeof word - 1), p);
    int rc = elements_of(j, values, at, p, len, c) || quiet ? 0 : not_modelled(j, at, word, NULL);
    if (rc) return rc;
    p += len;
  }
  return 0;
}

/* With "words": the first value a word of the string or an item of the list spells. */
static const char *any_word(const json_t *values, const struct ynode *n) {
  for (size_t i = 0; n->kind == YN_SEQ && i < n->nkid; i++) {
    const char *name = any_word(values, n->kid[i]);
    if (name) return name;
  }
  if (n->kind != YN_SCALAR) return NULL;
  if (ynode_type(n) != VF_VALUE_STRING) return lookup(values, n, NULL, 0);
  for (const char *p = n->value + strspn(n->value, ", \t"); *p; p += strspn(p, ", \t")) {
    size_t len = strcspn(p, ", \t");
    const char *name = lookup(values, NULL, p, len);
    if (name) return name;
    p += len;
  }
  return NULL;
}

/* A word setting: the value the node spells; a null node is unset. */
static int word_from_node(const struct job *j, const json_t *entry, const struct place *at, struct cand *c) {
  const json_t *values = json_object_get(entry, "values");
  const struct ynode *n = at->node;
  bool words = json_is_true(json_object_get(entry, "words"));
  const char *name = words ? any_word(values, n) : lookup(values, n, NULL, 0);
  if (name) return found(c, at, name), 0;
  if (words || quiet(entry) || n->kind != YN_SCALAR || ynode_type(n) == VF_VALUE_NULL) return 0;
  return not_modelled(j, at, NULL, c);
}

/* A GPU count: a number, a list of devices or "0,1"; -1 and "auto" are every GPU there is. */
static int count_devices(const struct job *j, const struct place *at, long long *out) {
  const struct ynode *n = at->node;
  struct vf_value v;
  *out = 0;
  if (n->kind == YN_SEQ) {
    *out = (long long)n->nkid;
  } else if (ynode_value(n, &v) && v.kind == VF_VALUE_INT) {
    *out = v.i;
  } else if (n->kind == YN_SCALAR && strchr(n->value, ',')) {
    for (const char *p = n->value + strspn(n->value, ", "); *p; p += strspn(p, ", ")) {
      p += strcspn(p, ", ");
      (*out)++;
    }
  } else if (n->kind == YN_SCALAR && n->value[0] && strspn(n->value, "0123456789") == strlen(n->value)) {
    *out = atoll(n->value);
  }
  if (*out > 0) return 0;
  return config_warn(j->r, j->l->name, at, NULL,
                     "means every GPU of the machine it runs on, which vramfit cannot know");
}

/* A default's place: f's own document, the key it would be at. */
static struct place default_place(const struct job *j, const char *path) {
  struct place at = {view_self(j->f), NULL, ""};
  snprintf(at.key, sizeof at.key, "%s", path);
  return at;
}

/* A number at path: in the file, else the map's default; *ok false when neither. */
static int number_at(const struct job *j, const char *path, long long *out, struct place *at, bool *ok) {
  int rc = view_find(j->f, path, at, j->r->d);
  const json_t *def = format_default(j->f->fmt, path);
  struct vf_value v;
  *ok = false;
  if (rc) return rc;
  if (!at->node) *at = default_place(j, path);
  if (at->node && ynode_value(at->node, &v) && v.kind == VF_VALUE_INT) *ok = true, *out = v.i;
  else if (!at->node && json_is_integer(def)) *ok = true, *out = json_integer_value(def);
  else if (at->node) return config_warn(j->r, j->l->name, at, NULL, "is not a whole number");
  return 0;
}

/* "times": the count multiplied by the numbers at those paths (devices x num_nodes). */
static int multiply(const struct job *j, const json_t *entry, long long count, struct cand *c) {
  size_t i;
  const json_t *p;
  json_array_foreach(json_object_get(entry, "times"), i, p) {
    struct place at;
    long long factor;
    bool ok;
    int rc = number_at(j, json_string_value(p), &factor, &at, &ok);
    if (rc || (!ok && at.node)) return rc; /* a factor that is no number was warned about */
    count *= ok && factor > 0 ? factor : 1;
  }
  snprintf(c->value, sizeof c->value, "%lld", count);
  c->any = true;
  return 0;
}

static int text_from_node(const struct job *j, const json_t *entry, const struct place *at, struct cand *c) {
  const struct ynode *n = at->node;
  if (n->kind != YN_SCALAR) return 0;
  if (ynode_type(n) == VF_VALUE_NULL)
    return j->l->kind != K_INT ? 0
           : config_warn(j->r, j->l->name, at, "null", "sets no %s: the data decides it, which vramfit cannot know",
                         j->l->noun);
  if (j->l->kind != K_MODEL) return found(c, at, n->value), 0;
  char *name;
  int rc = map_model_value(j->f, n->value, json_string_value(json_object_get(entry, "strip")), &name);
  if (!rc) found(c, at, name);
  free(name);
  return rc;
}

static int from_node(const struct job *j, const json_t *entry, const struct place *at, struct cand *c) {
  const struct ynode *n = at->node;
  const json_t *values = json_object_get(entry, "values");
  if (n->kind == YN_ALIAS)
    return config_warn(j->r, j->l->name, at, n->value, "is an alias, which vramfit does not follow");
  if (n->kind == YN_SCALAR && strstr(n->value, "${"))
    return config_warn(j->r, j->l->name, at, NULL, "is an interpolation, which vramfit does not resolve");
  if (is_auto(j, n)) return 0; /* the HF Trainer fills it from its own arguments */
  if (j->l->kind == K_LIST)
    return values ? each_word(j, at, values, json_is_true(json_object_get(entry, "words")) || quiet(entry), c) : 0;
  if (j->l->kind == K_GPUS) {
    long long count;
    int rc = count_devices(j, at, &count);
    c->at = *at;
    return rc || count < 1 ? rc : multiply(j, entry, count, c);
  }
  if (values) return word_from_node(j, entry, at, c);
  return text_from_node(j, entry, at, c);
}

static int from_default(const struct job *j, const json_t *entry, const char *path, const json_t *def, struct cand *c) {
  const json_t *values = json_object_get(entry, "values");
  struct place at = default_place(j, path);
  if (values && j->l->kind == K_LIST) {
    const char *name;
    json_t *spelling;
    json_object_foreach((json_t *)values, name, spelling) {
      if (json_matches(spelling, def)) found_element(j, c, &at, name);
    }
    return 0;
  }
  if (values) {
    const char *name = lookup_json(values, def);
    if (name) found(c, &at, name);
    return 0;
  }
  char text[64];
  if (json_is_integer(def)) snprintf(text, sizeof text, "%lld", (long long)json_integer_value(def));
  else if (json_is_string(def)) snprintf(text, sizeof text, "%s", json_string_value(def));
  else return 0;
  found(c, &at, text);
  return j->l->kind == K_GPUS ? multiply(j, entry, atoll(text), c) : 0;
}

static int read_paths(const struct job *j, const json_t *entry, struct cand *c) {
  const json_t *paths = json_object_get(entry, "paths"), *p;
  size_t i;
  json_array_foreach(paths, i, p) {
    struct place at;
    int rc = view_find(j->f, json_string_value(p), &at, j->r->d);
    if (rc || at.node) return rc ? rc : from_node(j, entry, &at, c);
  }
  json_array_foreach(paths, i, p) {
    const json_t *def = format_default(j->f->fmt, json_string_value(p));
    if (def) return from_default(j, entry, json_string_value(p), def, c);
  }
  return 0;
}

/* ---- "set" and "present" ---- */

/* How many of alt's paths the file holds with its spellings, the others at their
 * defaults; -1 when one differs, -2 when one is "auto" (left to the HF Trainer). *first:
 * the first path present. */
static int match_alt(const struct job *j, const json_t *alt, struct place *first, int *rc) {
  const char *path;
  json_t *spelling;
  int present = 0;
  json_object_foreach((json_t *)alt, path, spelling) {
    struct place at;
    if ((*rc = view_find(j->f, path, &at, j->r->d))) return -1;
    const json_t *def = format_default(j->f->fmt, path);
    if (at.node && is_auto(j, at.node)) return -2;
    if (at.node && !present++) *first = at;
    if (at.node ? !spelling_matches(spelling, at.node) : !def || !json_matches(spelling, def)) return -1;
  }
  const char *key = json_object_iter_key(json_object_iter((json_t *)alt));
  if (!present) *first = default_place(j, key ? key : "");
  return present;
}

/* The first path of alt the file holds, or at.node NULL. */
static struct place first_present(const struct job *j, const json_t *alt) {
  const char *path;
  json_t *spelling;
  struct place at = {0};
  json_object_foreach((json_t *)alt, path, spelling) {
    if (view_find(j->f, path, &at, NULL) == 0 && at.node) return at;
  }
  return (struct place){0};
}

/* When no value of the set matches: a warning naming the first of its paths the file holds. */
static int unmatched_set(const struct job *j, const json_t *set, struct cand *c) {
  const char *value;
  json_t *alts;
  json_object_foreach((json_t *)set, value, alts) {
    size_t n = json_is_array(alts) ? json_array_size(alts) : 1;
    for (size_t i = 0; i < n; i++) {
      struct place at = first_present(j, json_is_array(alts) ? json_array_get(alts, i) : alts);
      if (at.node) return not_modelled(j, &at, NULL, c);
    }
  }
  return 0;
}

static int read_set(const struct job *j, const json_t *entry, struct cand *c) {
  const json_t *set = json_object_get(entry, "set");
  const char *value;
  json_t *alts;
  int best = -1, rc = 0;
  bool saw_auto = false;
  json_object_foreach((json_t *)set, value, alts) {
    size_t n = json_is_array(alts) ? json_array_size(alts) : 1;
    for (size_t i = 0; i < n && !rc; i++) {
      struct place at;
      int score = match_alt(j, json_is_array(alts) ? json_array_get(alts, i) : alts, &at, &rc);
      saw_auto |= score == -2;
      if (score >= 0 && j->l->kind == K_LIST) found_element(j, c, &at, value);
      else if (score > best) best = score, found(c, &at, value);
    }
  }
  if (rc || c->any || c->as_tool || saw_auto || quiet(entry)) return rc;
  return unmatched_set(j, set, c);
}

static int read_present(const struct job *j, const json_t *entry, struct cand *c) {
  const char *value;
  json_t *paths, *p;
  size_t i;
  json_object_foreach(json_object_get(entry, "present"), value, paths) json_array_foreach(paths, i, p) {
    struct place at;
    int rc = view_find(j->f, json_string_value(p), &at, j->r->d);
    if (rc) return rc;
    if (!at.node) continue;
    if (j->l->kind == K_LIST) found_element(j, c, &at, value);
    else return found(c, &at, value), 0;
  }
  return 0;
}

/* ---- "derived" ---- */

/* litgpt's accumulation: global batch / GPUs / micro batch, rounded down (litgpt/args.py
 * gradient_accumulation_iters). */
static int read_derived(const struct job *j, const json_t *entry, struct cand *c) {
  const char *batch = config_value(j->r, "batch"), *gpus = config_value(j->r, "gpus");
  struct place at;
  long long global;
  bool ok;
  int rc = number_at(j, json_string_value(json_object_get(entry, "derived")), &global, &at, &ok);
  if (rc || !ok || !batch) return rc;
  long long micro = atoll(batch), world = gpus ? atoll(gpus) : 1;
  long long accumulation = micro > 0 && world > 0 ? global / world / micro : 0;
  if (accumulation < 1)
    return config_warn(j->r, j->l->name, &at, NULL, "is below micro batch %lld x %lld GPUs: litgpt stops on it", micro,
                       world);
  char text[32];
  snprintf(text, sizeof text, "%lld", accumulation);
  return found(c, &at, text), 0;
}

/* ---- one setting ---- */

/* A value found in the file wins over a default; among equals the first form read. */
static void merge(const struct job *j, struct cand *best, const struct cand *c) {
  if (c->pending && !best->pending) best->pending = true, best->warn_at = c->warn_at;
  if (!c->any) return;
  if (j->l->kind == K_LIST) {
    if (!best->any || (!best->at.node && c->at.node)) best->at = c->at;
    best->any = true;
    best->bits |= c->bits;
    return;
  }
  if (best->any && (best->at.node || !c->at.node)) return;
  bool pending = best->pending;
  struct place warn_at = best->warn_at;
  *best = *c;
  best->pending = pending;
  best->warn_at = warn_at;
}

static int read_entry(const struct job *j, const json_t *entry, struct cand *best) {
  static int (*const forms[])(const struct job *, const json_t *, struct cand *) = {read_paths, read_set,
                                                                                     read_present, read_derived};
  static const char *const keys[] = {"paths", "set", "present", "derived"};
  for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
    if (!json_object_get(entry, keys[i])) continue;
    struct cand c = {.entry = entry};
    int rc = forms[i](j, entry, &c);
    if (rc) return rc;
    c.entry = entry;
    merge(j, best, &c);
  }
  return 0;
}

/* A list's elements, in the order the option takes them; "none" only alone, "all-linear"
 * for every linear layer. */
static void join_elements(const struct logical *l, unsigned bits, char *out, size_t size) {
  unsigned none_or_all = 1u; /* the first element of both lists */
  if (bits & none_or_all)
    bits = bits == none_or_all || element(l, "all-linear") == 0 ? none_or_all : bits & ~none_or_all;
  out[0] = '\0';
  int i = 0;
  for (const char *p = l->elements; *p; i++) {
    size_t n = strcspn(p, " ");
    if (bits & (1u << i)) snprintf(out + strlen(out), size - strlen(out), "%s%.*s", out[0] ? "," : "", (int)n, p);
    p += n + (p[n] == ' ');
  }
}

/* Precision as two settings: autocast for the mixed family (fp32 weights stay), the
 * weights' own dtype for the true one. A plain value is of the map's "plain" family. */
static int emit_precision(const struct job *j, const struct cand *c) {
  char dtype[16];
  const char *dash = strchr(c->value, '-');
  snprintf(dtype, sizeof dtype, "%.*s", (int)(dash ? (size_t)(dash - c->value) : strlen(c->value)), c->value);
  const char *family = dash ? dash + 1 : json_string_value(json_object_get(c->entry, "plain"));
  bool pure = family && strcmp(family, "true") == 0, fp32 = strcmp(dtype, "fp32") == 0;
  int rc = config_set(j->r, "amp", pure || fp32 ? "none" : dtype, &c->at);
  return rc || !pure ? rc : config_set(j->r, "weights", dtype, &c->at);
}

static int read_logical(struct creader *r, struct cfile *f, const struct logical *l) {
  struct job j = {r, f, l};
  struct cand best = {0};
  const json_t *entries[] = {format_key(f->fmt, l->name),
                             json_object_get(json_object_get(f->fmt->map, "read"), l->name)};
  for (size_t i = 0; i < 2; i++) {
    int rc = entries[i] ? read_entry(&j, entries[i], &best) : 0;
    if (rc) return rc;
  }
  /* A value the file has but no form could read: the tool's default is not the file's. */
  if (best.pending && !(best.any && best.at.node))
    return config_warn(r, l->name, &best.warn_at, NULL, "is not %s vramfit models", l->noun);
  if (!best.any) return 0;
  if (l->kind == K_PRECISION) return emit_precision(&j, &best);
  if (l->kind == K_LIST) join_elements(l, best.bits, best.value, sizeof best.value);
  return config_set(r, l->name, best.value, &best.at);
}

/* ---- the map's other parts ---- */

/* "files": {"NAME": {"paths": [...], "format": F}}: configs a key names. */
static int read_files(struct creader *r, struct cfile *f) {
  const char *name;
  json_t *e, *p;
  size_t i;
  json_object_foreach(json_object_get(f->fmt->map, "files"), name, e) {
    json_array_foreach(json_object_get(e, "paths"), i, p) {
      struct place at;
      int rc = view_find(f, json_string_value(p), &at, r->d);
      if (!rc && !at.node) continue;
      rc = rc ? rc : config_add_named(r, f, &at, json_string_value(json_object_get(e, "format")));
      if (rc) return rc;
      break;
    }
  }
  return 0;
}

/* "warn": {path: {"if": spelling, "why": sentence, "name": setting}}: values the setup
 * cannot express. */
static int read_warnings(struct creader *r, struct cfile *f) {
  const char *path;
  json_t *w;
  json_object_foreach(json_object_get(f->fmt->map, "warn"), path, w) {
    struct place at;
    int rc = view_find(f, path, &at, r->d);
    if (!rc && at.node && spelling_matches(json_object_get(w, "if"), at.node))
      rc = config_warn(r, json_string_value(json_object_get(w, "name")), &at, NULL, "%s",
                       json_string_value(json_object_get(w, "why")));
    if (rc) return rc;
  }
  return 0;
}

int map_read(struct creader *r, struct cfile *f) {
  int rc = read_files(r, f);
  for (size_t i = 0; i < sizeof logicals / sizeof *logicals && !rc; i++) rc = read_logical(r, f, &logicals[i]);
  return rc ? rc : read_warnings(r, f);
}

int map_model_value(const struct cfile *f, const char *text, const char *strip, char **out) {
  char path[PATH_MAX];
  if (view_beside(f, text, path, sizeof path)) *out = strdup(path);
  else if (path_is_dir(text) || path_is_file(text) || !strip || strncmp(text, strip, strlen(strip)) != 0)
    *out = strdup(text);
  else *out = strdup(text + strlen(strip));
  return *out ? 0 : VF_ENOMEM;
}

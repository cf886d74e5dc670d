/* The workload spec (workload.yaml) into a struct vf_workload: every key checked, every
 * expression compiled against the knobs, every error one line at file:line:col. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "core/workload/expr.h"
#include "io/doc.h"

struct reader {
  struct ytree t;
  struct vf_workload *w;
  struct vf_diag *d;
};

static int err(struct reader *r, const struct ynode *n, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int err(struct reader *r, const struct ynode *n, int code, const char *fmt, ...) {
  char msg[sizeof r->d->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return ytree_diag(&r->t, r->d, code, n ? n->vstart : r->t.bom, "%s", msg);
}

static int line_of(const struct reader *r, const struct ynode *n) {
  int line, col;
  ytree_linecol(&r->t, n->vstart, &line, &col);
  return line;
}

/* ---- scalars ---- */

static int want_map(struct reader *r, const struct ynode *n, const char *what) {
  return n->kind == YN_MAP ? 0 : err(r, n, VF_EFORMAT, "%s must be a mapping", what);
}

static int want_seq(struct reader *r, const struct ynode *n, const char *what) {
  return n->kind == YN_SEQ ? 0 : err(r, n, VF_EFORMAT, "%s must be a list", what);
}

static int text(struct reader *r, const struct ynode *n, const char *what, char *out, size_t size) {
  struct vf_value v = {0};
  if (!ynode_value(n, &v) || v.kind == VF_VALUE_NULL || v.kind == VF_VALUE_BOOL)
    return err(r, n, VF_EFORMAT, "%s must be a plain value", what);
  if (n->vlen == 0 || n->vlen >= size) return err(r, n, VF_EFORMAT, "%s must be 1 to %zu characters", what, size - 1);
  memcpy(out, n->value, n->vlen + 1);
  return 0;
}

static int integer(struct reader *r, const struct ynode *n, const char *what, int64_t min, int64_t *out) {
  struct vf_value v = {0};
  if (!ynode_value(n, &v) || v.kind != VF_VALUE_INT)
    return err(r, n, VF_EFORMAT, "%s must be a whole number", what);
  if (v.i < min || v.i > (1ll << 40)) return err(r, n, VF_EINVAL, "%s must be between %lld and 2^40", what, (long long)min);
  *out = v.i;
  return 0;
}

static int count(struct reader *r, const struct ynode *n, const char *what, uint64_t *out) {
  int64_t v = 0;
  int rc = integer(r, n, what, 1, &v);
  if (!rc) *out = (uint64_t)v;
  return rc;
}

static int choice(struct reader *r, const struct ynode *n, const char *what, enum vf_enum_kind kind, int *out) {
  char word[32], choices[256];
  int rc = text(r, n, what, word, sizeof word);
  if (!rc && vf_enum_parse(kind, word, out) == 0) return 0;
  vf_enum_choices(kind, choices, sizeof choices);
  return rc ? rc : err(r, n, VF_EINVAL, "%s: '%s' is not one of %s", what, word, choices);
}

static int expression(struct reader *r, const struct ynode *n, const char *what, struct vf_wl_expr *e) {
  char buf[VF_WL_EXPR_TEXT];
  int rc = text(r, n, what, buf, sizeof buf);
  struct vf_diag inner;
  vf_diag_clear(&inner);
  if (!rc && (rc = vf_wl_expr_compile(r->w, buf, e, &inner))) {
    /* The compiler's column is within the text: move it to the file's. */
    int line, col;
    ytree_linecol(&r->t, n->vstart, &line, &col);
    int quoted = n->style == YAML_SINGLE_QUOTED_SCALAR_STYLE || n->style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
    return diag_line(r->d, rc, r->t.file, line, col + quoted + inner.col - 1, "%s: %s", what, inner.msg);
  }
  if (!rc) ytree_linecol(&r->t, n->vstart, &e->line, &e->col);
  return rc;
}

/* ---- mappings with known keys ---- */

typedef int (*field_fn)(struct reader *r, const struct ynode *value, void *arg);

struct field {
  const char *key;
  field_fn fn;
};

static int fields(struct reader *r, const struct ynode *map, const char *what, const struct field *f, size_t nf,
                  void *arg) {
  int rc = want_map(r, map, what);
  for (size_t i = 0; !rc && i + 1 < map->nkid; i += 2) {
    const struct ynode *k = map->kid[i];
    size_t j = 0;
    while (j < nf && !(k->kind == YN_SCALAR && strcmp(k->value, f[j].key) == 0)) j++;
    if (j == nf) {
      char known[512] = "";
      for (size_t m = 0; m < nf; m++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", m ? ", " : "", f[m].key);
      return err(r, k, VF_EINVAL, "%s: unknown key '%s' (known: %s)", what, k->kind == YN_SCALAR ? k->value : "?",
                 known);
    }
    rc = f[j].fn(r, map->kid[i + 1], arg);
  }
  return rc;
}

static const struct ynode *lookup(const struct ynode *map, const char *key) {
  for (size_t i = 0; map && map->kind == YN_MAP && i + 1 < map->nkid; i += 2)
    if (map->kid[i]->kind == YN_SCALAR && strcmp(map->kid[i]->value, key) == 0) return map->kid[i + 1];
  return NULL;
}

/* ---- knobs ---- */

static int knob_path(struct reader *r, const struct ynode *n, void *arg) {
  struct vf_wl_knob *k = arg;
  return text(r, n, "path", k->path, sizeof k->path);
}
static int knob_min(struct reader *r, const struct ynode *n, void *arg) {
  return integer(r, n, "min", 0, &((struct vf_wl_knob *)arg)->min);
}
static int knob_max(struct reader *r, const struct ynode *n, void *arg) {
  return integer(r, n, "max", 0, &((struct vf_wl_knob *)arg)->max);
}
static int knob_priority(struct reader *r, const struct ynode *n, void *arg) {
  int64_t v = 0;
  int rc = integer(r, n, "priority", 0, &v);
  if (!rc && v > 1000) rc = err(r, n, VF_EINVAL, "priority must be at most 1000");
  if (!rc) ((struct vf_wl_knob *)arg)->priority = (int)v;
  return rc;
}
static int knob_in(struct reader *r, const struct ynode *n, void *arg) {
  char word[16];
  int rc = text(r, n, "in", word, sizeof word);
  if (rc) return rc;
  if (strcmp(word, "stage") != 0 && strcmp(word, "config") != 0)
    return err(r, n, VF_EINVAL, "in: '%s' is not one of config, stage", word);
  ((struct vf_wl_knob *)arg)->in_stage = word[0] == 's';
  return 0;
}

static const struct field knob_fields[] = {
    {"path", knob_path}, {"min", knob_min}, {"max", knob_max}, {"priority", knob_priority}, {"in", knob_in}};

static int knob(struct reader *r, const struct ynode *key, const struct ynode *value, size_t index) {
  struct vf_wl_knob *k = &r->w->knobs[r->w->n_knobs];
  if (key->kind != YN_SCALAR || !key->vlen || key->vlen >= sizeof k->name)
    return err(r, key, VF_EFORMAT, "a knob's name must be 1 to %zu characters", sizeof k->name - 1);
  for (const char *p = key->value; *p; p++)
    if (!(*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (p > key->value && *p >= '0' && *p <= '9')))
      return err(r, key, VF_EINVAL, "knob '%s': names are letters, digits and '_'", key->value);
  if (vf_workload_knob(r->w, key->value) >= 0) return err(r, key, VF_EINVAL, "knob '%s' is given twice", key->value);
  memcpy(k->name, key->value, key->vlen + 1);
  k->role = strcmp(k->name, "batch") == 0 ? VF_WL_BATCH : strcmp(k->name, "accumulation") == 0 ? VF_WL_ACCUMULATION : VF_WL_KNOB;
  bool shared = k->role != VF_WL_KNOB;
  k->min = shared ? 1 : -1;
  k->max = shared ? 4096 : -1;
  k->priority = k->role == VF_WL_BATCH ? 0 : (int)index + 1;
  k->in_stage = !shared;
  k->line = line_of(r, key);
  int rc = fields(r, value, "a knob", knob_fields, sizeof knob_fields / sizeof *knob_fields, k);
  if (rc) return rc;
  if (k->min < 0 || k->max < 0) return err(r, value, VF_EINVAL, "knob '%s' needs its range: min and max", k->name);
  if (k->min > k->max)
    return err(r, value, VF_EINVAL, "knob '%s': min %lld is above max %lld", k->name, (long long)k->min, (long long)k->max);
  if (shared && k->min < 1) return err(r, value, VF_EINVAL, "knob '%s' must be at least 1", k->name);
  if (shared && k->in_stage)
    return err(r, value, VF_EINVAL, "knob '%s' is shared by every stage: it lives in the main config", k->name);
  r->w->n_knobs++;
  return 0;
}

static int knobs(struct reader *r, const struct ynode *map) {
  int rc = want_map(r, map, "knobs");
  for (size_t i = 0; !rc && i + 1 < map->nkid; i += 2) {
    if (r->w->n_knobs == VF_WL_MAX_KNOBS - 1) return err(r, map->kid[i], VF_ERANGE, "at most %d knobs", VF_WL_MAX_KNOBS - 1);
    rc = knob(r, map->kid[i], map->kid[i + 1], i / 2);
  }
  if (rc) return rc;
  struct vf_workload *w = r->w;
  w->batch = vf_workload_knob(w, "batch");
  w->accumulation = vf_workload_knob(w, "accumulation");
  if (w->batch < 0) { /* the micro batch is always a knob, written nowhere unless given */
    w->batch = (int)w->n_knobs;
    w->knobs[w->n_knobs++] = (struct vf_wl_knob){.name = "batch", .role = VF_WL_BATCH, .min = 1, .max = 4096};
  }
  return 0;
}

/* ---- defines: names first, so that they may refer to each other in any order ---- */

static int defines(struct reader *r, const struct ynode *map) {
  int rc = want_map(r, map, "define");
  struct vf_workload *w = r->w;
  for (size_t i = 0; !rc && i + 1 < map->nkid; i += 2) {
    const struct ynode *k = map->kid[i];
    if (w->n_defines == VF_WL_MAX_DEFINES) return err(r, k, VF_ERANGE, "at most %d defines", VF_WL_MAX_DEFINES);
    int sym;
    rc = text(r, k, "a define's name", w->defines[w->n_defines].name, VF_WL_NAME);
    if (!rc && wl_symbol(w, k->value, k->vlen, &sym) != VF_ENOTFOUND)
      rc = err(r, k, VF_EINVAL, "define '%s': the name is taken", k->value);
    if (!rc) w->n_defines++;
  }
  for (size_t i = 0; !rc && i + 1 < map->nkid; i += 2)
    rc = expression(r, map->kid[i + 1], w->defines[i / 2].name, &w->defines[i / 2].expr);
  return rc ? rc : wl_defines_check(w, r->t.file, r->d);
}

/* ---- the model ---- */

static int enc_name(struct reader *r, const struct ynode *n, void *arg) {
  return text(r, n, "name", ((struct vf_wl_encoder *)arg)->name, VF_WL_NAME);
}
static int enc_model(struct reader *r, const struct ynode *n, void *arg) {
  return text(r, n, "model", ((struct vf_wl_encoder *)arg)->model, VF_WL_PATH);
}
static int enc_method(struct reader *r, const struct ynode *n, void *arg) {
  struct vf_wl_encoder *e = arg;
  int v = 0, rc = choice(r, n, "method", VF_ENUM_METHOD, &v);
  if (!rc && v != VF_METHOD_FULL && v != VF_METHOD_LORA && v != VF_METHOD_DORA)
    rc = err(r, n, VF_EUNSUPPORTED, "method: an encoder trains with full, lora or dora");
  e->method = (enum vf_method)v;
  return rc;
}
static int enc_lora_r(struct reader *r, const struct ynode *n, void *arg) {
  return count(r, n, "lora_r", &((struct vf_wl_encoder *)arg)->lora_r);
}
static int enc_targets(struct reader *r, const struct ynode *n, void *arg) {
  char word[96];
  int rc = text(r, n, "lora_targets", word, sizeof word);
  if (!rc && vf_lora_targets_parse(word, &((struct vf_wl_encoder *)arg)->lora_targets))
    rc = err(r, n, VF_EINVAL, "lora_targets: '%s' is not a comma list of q,k,v,o,gate,up,down,head or all-linear", word);
  return rc;
}
static int enc_ckpt(struct reader *r, const struct ynode *n, void *arg) {
  int v = 0, rc = choice(r, n, "grad_ckpt", VF_ENUM_CKPT, &v);
  ((struct vf_wl_encoder *)arg)->grad_ckpt = (enum vf_ckpt)v;
  return rc;
}
static int enc_tokens(struct reader *r, const struct ynode *n, void *arg) {
  return expression(r, n, "tokens", &((struct vf_wl_encoder *)arg)->tokens);
}

static const struct field encoder_fields[] = {{"name", enc_name},       {"model", enc_model},
                                              {"method", enc_method},   {"lora_r", enc_lora_r},
                                              {"lora_targets", enc_targets}, {"grad_ckpt", enc_ckpt},
                                              {"tokens", enc_tokens}};

static int encoders(struct reader *r, const struct ynode *n, void *arg) {
  (void)arg;
  int rc = want_seq(r, n, "encoders");
  struct vf_workload *w = r->w;
  for (size_t i = 0; !rc && i < n->nkid; i++) {
    if (w->n_encoders == VF_WL_MAX_ENCODERS) return err(r, n->kid[i], VF_ERANGE, "at most %d encoders", VF_WL_MAX_ENCODERS);
    struct vf_wl_encoder *e = &w->encoders[w->n_encoders];
    *e = (struct vf_wl_encoder){.method = VF_METHOD_FULL, .lora_r = 8, .grad_ckpt = VF_CKPT_NONE};
    vf_lora_targets_parse("q,v", &e->lora_targets);
    e->line = line_of(r, n->kid[i]);
    rc = fields(r, n->kid[i], "an encoder", encoder_fields, sizeof encoder_fields / sizeof *encoder_fields, e);
    if (!rc && !e->model[0]) rc = err(r, n->kid[i], VF_EINVAL, "an encoder needs its model (a catalogue name or config.json)");
    if (!rc && !e->name[0]) snprintf(e->name, sizeof e->name, "encoder%zu", i + 1);
    if (!rc) w->n_encoders++;
  }
  return rc;
}

static int moe_experts(struct reader *r, const struct ynode *n, void *a) { return count(r, n, "experts", &((struct vf_wl_moe *)a)->experts); }
static int moe_top_k(struct reader *r, const struct ynode *n, void *a) { return count(r, n, "top_k", &((struct vf_wl_moe *)a)->top_k); }
static int moe_hidden(struct reader *r, const struct ynode *n, void *a) { return count(r, n, "hidden", &((struct vf_wl_moe *)a)->hidden); }
static int moe_out(struct reader *r, const struct ynode *n, void *a) { return count(r, n, "out", &((struct vf_wl_moe *)a)->out); }
static int moe_kind(struct reader *r, const struct ynode *n, void *a) {
  (void)a;
  char word[16];
  int rc = text(r, n, "kind", word, sizeof word);
  return rc ? rc : strcmp(word, "moe") == 0 ? 0 : err(r, n, VF_EUNSUPPORTED, "fusion kind '%s': only moe", word);
}

static const struct field moe_fields[] = {{"kind", moe_kind},     {"experts", moe_experts}, {"top_k", moe_top_k},
                                          {"hidden", moe_hidden}, {"out", moe_out}};

static int fusion(struct reader *r, const struct ynode *n, void *arg) {
  (void)arg;
  struct vf_wl_moe *m = &r->w->moe;
  m->line = line_of(r, n);
  int rc = fields(r, n, "fusion", moe_fields, sizeof moe_fields / sizeof *moe_fields, m);
  if (!rc && (!m->experts || !m->top_k || !m->hidden || !m->out))
    rc = err(r, n, VF_EINVAL, "fusion needs experts, top_k, hidden and out");
  if (!rc && m->top_k > m->experts) rc = err(r, n, VF_EINVAL, "fusion: top_k %llu is more than the %llu experts",
                                             (unsigned long long)m->top_k, (unsigned long long)m->experts);
  return rc;
}

static int head_name(struct reader *r, const struct ynode *n, void *a) { return text(r, n, "name", ((struct vf_wl_head *)a)->name, VF_WL_NAME); }
static int head_out(struct reader *r, const struct ynode *n, void *a) { return count(r, n, "out", &((struct vf_wl_head *)a)->out); }
static const struct field head_fields[] = {{"name", head_name}, {"out", head_out}};

static int heads(struct reader *r, const struct ynode *n, void *arg) {
  (void)arg;
  int rc = want_seq(r, n, "heads");
  struct vf_workload *w = r->w;
  for (size_t i = 0; !rc && i < n->nkid; i++) {
    if (w->n_heads == VF_WL_MAX_HEADS) return err(r, n->kid[i], VF_ERANGE, "at most %d heads", VF_WL_MAX_HEADS);
    struct vf_wl_head *h = &w->heads[w->n_heads];
    h->line = line_of(r, n->kid[i]);
    rc = fields(r, n->kid[i], "a head", head_fields, sizeof head_fields / sizeof *head_fields, h);
    if (!rc && !h->out) rc = err(r, n->kid[i], VF_EINVAL, "a head needs out (its output features)");
    if (!rc) w->n_heads++;
  }
  return rc;
}

static int factory(struct reader *r, const struct ynode *n, void *arg) {
  (void)arg;
  struct vf_workload *w = r->w;
  int rc = text(r, n, "factory", w->factory, sizeof w->factory);
  const char *colon = rc ? NULL : strrchr(w->factory, ':');
  if (!rc && (!colon || colon == w->factory || !colon[1] || !strstr(w->factory, ".py:")))
    rc = err(r, n, VF_EINVAL, "factory: '%s' is not FILE.py:FUNCTION", w->factory);
  w->factory_line = line_of(r, n);
  return rc;
}

static const struct field model_fields[] = {
    {"encoders", encoders}, {"fusion", fusion}, {"heads", heads}, {"factory", factory}};

/* ---- sample and loss ---- */

static int sample_sequences(struct reader *r, const struct ynode *n, void *a) {
  (void)a;
  return expression(r, n, "sequences", &r->w->sequences);
}
static int sample_tokens(struct reader *r, const struct ynode *n, void *a) {
  (void)a;
  return expression(r, n, "tokens", &r->w->tokens);
}
static const struct field sample_fields[] = {{"sequences", sample_sequences}, {"tokens", sample_tokens}};

static int tensor_name(struct reader *r, const struct ynode *n, void *a) { return text(r, n, "name", ((struct vf_wl_tensor *)a)->name, VF_WL_NAME); }
static int tensor_shape(struct reader *r, const struct ynode *n, void *a) {
  struct vf_wl_tensor *t = a;
  int rc = want_seq(r, n, "shape");
  if (!rc && (n->nkid == 0 || n->nkid > VF_WL_MAX_DIMS)) rc = err(r, n, VF_EINVAL, "shape has 1 to %d dimensions", VF_WL_MAX_DIMS);
  for (size_t i = 0; !rc && i < n->nkid; i++) rc = expression(r, n->kid[i], "shape", &t->dims[i]);
  if (!rc) t->ndim = (uint32_t)n->nkid;
  return rc;
}
static int tensor_dtype(struct reader *r, const struct ynode *n, void *a) {
  char word[16];
  int rc = text(r, n, "dtype", word, sizeof word);
  enum vf_dtype dt;
  uint64_t bytes = 0;
  if (!rc && (vf_dtype_from_name(word, &dt) || vf_dtype_bytes(dt, 1, &bytes) || !bytes))
    rc = err(r, n, VF_EINVAL, "dtype: '%s' is not a dtype (fp32, bf16, fp16, ...)", word);
  ((struct vf_wl_tensor *)a)->elem_bytes = (uint32_t)bytes;
  return rc;
}
static int tensor_copies(struct reader *r, const struct ynode *n, void *a) {
  uint64_t v = 0;
  int rc = count(r, n, "copies", &v);
  if (!rc && v > 16) rc = err(r, n, VF_EINVAL, "copies must be at most 16");
  ((struct vf_wl_tensor *)a)->copies = (uint32_t)v;
  return rc;
}
static const struct field tensor_fields[] = {
    {"name", tensor_name}, {"shape", tensor_shape}, {"dtype", tensor_dtype}, {"copies", tensor_copies}};

static int loss_tensors(struct reader *r, const struct ynode *n, void *arg) {
  (void)arg;
  int rc = want_seq(r, n, "tensors");
  struct vf_workload *w = r->w;
  for (size_t i = 0; !rc && i < n->nkid; i++) {
    if (w->n_loss == VF_WL_MAX_TENSORS) return err(r, n->kid[i], VF_ERANGE, "at most %d loss tensors", VF_WL_MAX_TENSORS);
    struct vf_wl_tensor *t = &w->loss[w->n_loss];
    /* InfoNCE keeps the scores and their log-softmax; fp32 as losses compute. */
    *t = (struct vf_wl_tensor){.elem_bytes = 4, .copies = 2, .line = line_of(r, n->kid[i])};
    rc = fields(r, n->kid[i], "a loss tensor", tensor_fields, sizeof tensor_fields / sizeof *tensor_fields, t);
    if (!rc && !t->ndim) rc = err(r, n->kid[i], VF_EINVAL, "a loss tensor needs its shape");
    if (!rc) w->n_loss++;
  }
  return rc;
}
static const struct field loss_fields[] = {{"tensors", loss_tensors}};

/* ---- stages ---- */

static int stage_bound(struct reader *r, struct vf_wl_stage *s, const struct ynode *key, const struct ynode *v) {
  const struct vf_workload *w = r->w;
  int k = key->kind == YN_SCALAR ? vf_workload_knob(w, key->value) : -1;
  if (k < 0) return err(r, key, VF_EINVAL, "stage '%s': unknown knob '%s'", s->name, key->kind == YN_SCALAR ? key->value : "?");
  const struct vf_wl_knob *kn = &w->knobs[k];
  if (kn->role != VF_WL_KNOB)
    return err(r, key, VF_EINVAL, "stage '%s': %s is shared by every stage (set its range under knobs)", s->name, kn->name);
  struct vf_wl_bound *b = &s->bounds[k];
  int rc;
  if (v->kind == YN_MAP) {
    struct vf_wl_knob tmp = {.min = kn->min, .max = kn->max};
    static const struct field range[] = {{"min", knob_min}, {"max", knob_max}};
    rc = fields(r, v, "a stage's range", range, 2, &tmp);
    b->min = tmp.min, b->max = tmp.max;
  } else {
    rc = integer(r, v, kn->name, 0, &b->min);
    b->max = b->min;
  }
  if (rc) return rc;
  if (b->min > b->max)
    return err(r, v, VF_EINVAL, "stage '%s': %s range %lld..%lld is empty", s->name, kn->name, (long long)b->min, (long long)b->max);
  if (b->min < kn->min || b->max > kn->max)
    return err(r, v, VF_EINVAL, "stage '%s': %s range %lld..%lld cannot be met within the knob's %lld..%lld", s->name,
               kn->name, (long long)b->min, (long long)b->max, (long long)kn->min, (long long)kn->max);
  b->set = true;
  return 0;
}

static int stage(struct reader *r, const struct ynode *n, struct vf_wl_stage *s, size_t index) {
  int rc = want_map(r, n, "a stage");
  s->line = line_of(r, n);
  snprintf(s->name, sizeof s->name, "stage%zu", index + 1);
  const struct ynode *v;
  if (!rc && (v = lookup(n, "name"))) rc = text(r, v, "name", s->name, sizeof s->name);
  if (!rc && (v = lookup(n, "file"))) rc = text(r, v, "file", s->file, sizeof s->file), s->file_line = line_of(r, v);
  for (size_t i = 0; !rc && i + 1 < n->nkid; i += 2) {
    const struct ynode *k = n->kid[i];
    if (k->kind == YN_SCALAR && (strcmp(k->value, "name") == 0 || strcmp(k->value, "file") == 0)) continue;
    if (k->kind != YN_SCALAR || strcmp(k->value, "knobs") != 0)
      return err(r, k, VF_EINVAL, "a stage: unknown key '%s' (known: name, file, knobs)", k->kind == YN_SCALAR ? k->value : "?");
    const struct ynode *m = n->kid[i + 1];
    rc = want_map(r, m, "a stage's knobs");
    for (size_t j = 0; !rc && j + 1 < m->nkid; j += 2) rc = stage_bound(r, s, m->kid[j], m->kid[j + 1]);
  }
  return rc;
}

static int stages(struct reader *r, const struct ynode *n) {
  int rc = want_seq(r, n, "stages");
  struct vf_workload *w = r->w;
  for (size_t i = 0; !rc && i < n->nkid; i++) {
    if (w->n_stages == VF_WL_MAX_STAGES) return err(r, n->kid[i], VF_ERANGE, "at most %d stages", VF_WL_MAX_STAGES);
    rc = stage(r, n->kid[i], &w->stages[w->n_stages], i);
    for (size_t j = 0; !rc && j < w->n_stages; j++)
      if (strcmp(w->stages[j].name, w->stages[w->n_stages].name) == 0)
        rc = err(r, n->kid[i], VF_EINVAL, "two stages are named '%s'", w->stages[j].name);
    if (!rc) w->n_stages++;
  }
  return rc;
}

/* ---- trace points ---- */

static int point(struct reader *r, const struct ynode *n, struct vf_wl_point *pt) {
  const struct vf_workload *w = r->w;
  for (size_t k = 0; k < w->n_knobs; k++) pt->values[k] = w->knobs[k].min;
  int rc = want_map(r, n, "a trace point");
  for (size_t i = 0; !rc && i + 1 < n->nkid; i += 2) {
    const struct ynode *key = n->kid[i];
    int k = key->kind == YN_SCALAR ? vf_workload_knob(w, key->value) : -1;
    if (k < 0) return err(r, key, VF_EINVAL, "trace point: unknown knob '%s'", key->kind == YN_SCALAR ? key->value : "?");
    rc = integer(r, n->kid[i + 1], w->knobs[k].name, w->knobs[k].min, &pt->values[k]);
    if (!rc && pt->values[k] > w->knobs[k].max)
      rc = err(r, n->kid[i + 1], VF_EINVAL, "trace point: %s %lld is above its max %lld", w->knobs[k].name,
               (long long)pt->values[k], (long long)w->knobs[k].max);
  }
  return rc;
}

static int trace_points(struct reader *r, const struct ynode *n, void *arg) {
  (void)arg;
  int rc = want_seq(r, n, "points");
  struct vf_workload *w = r->w;
  for (size_t i = 0; !rc && i < n->nkid; i++) {
    if (w->n_points == VF_WL_MAX_POINTS) return err(r, n->kid[i], VF_ERANGE, "at most %d trace points", VF_WL_MAX_POINTS);
    rc = point(r, n->kid[i], &w->points[w->n_points]);
    if (!rc) w->n_points++;
  }
  return rc;
}
static const struct field trace_fields[] = {{"points", trace_points}};

/* ---- the top level ---- */

static int top_name(struct reader *r, const struct ynode *n, void *a) { (void)a; return text(r, n, "name", r->w->name, VF_WL_NAME); }
static int top_framework(struct reader *r, const struct ynode *n, void *a) {
  (void)a;
  struct vf_framework_spec spec;
  struct vf_diag inner;
  int rc = text(r, n, "framework", r->w->framework, VF_WL_NAME);
  if (!rc && vf_framework_spec_parse(r->w->framework, &spec, &inner)) rc = err(r, n, VF_EINVAL, "framework: %s", inner.msg);
  return rc;
}
static int top_precision(struct reader *r, const struct ynode *n, const char *what, bool autocast, enum vf_precision *out) {
  int v = 0, rc = choice(r, n, what, VF_ENUM_PRECISION, &v);
  if (!rc && autocast && v == VF_PREC_FP32) v = VF_PREC_NONE;
  if (!rc && !autocast && v == VF_PREC_NONE) rc = err(r, n, VF_EINVAL, "weights: fp32, bf16 or fp16");
  *out = (enum vf_precision)v;
  return rc;
}
static int top_weights(struct reader *r, const struct ynode *n, void *a) { (void)a; return top_precision(r, n, "weights", false, &r->w->weights); }
static int top_amp(struct reader *r, const struct ynode *n, void *a) { (void)a; return top_precision(r, n, "amp", true, &r->w->amp); }
static int top_optimizer(struct reader *r, const struct ynode *n, void *a) {
  (void)a;
  int v = 0, rc = choice(r, n, "optimizer", VF_ENUM_OPTIMIZER, &v);
  r->w->optimizer = (enum vf_optimizer)v;
  return rc;
}
static int top_config(struct reader *r, const struct ynode *n, void *a) {
  (void)a;
  r->w->config_line = line_of(r, n);
  return text(r, n, "config", r->w->config, VF_WL_PATH);
}
static int top_model(struct reader *r, const struct ynode *n, void *a) {
  return fields(r, n, "model", model_fields, sizeof model_fields / sizeof *model_fields, a);
}
static int top_sample(struct reader *r, const struct ynode *n, void *a) {
  return fields(r, n, "sample", sample_fields, sizeof sample_fields / sizeof *sample_fields, a);
}
static int top_loss(struct reader *r, const struct ynode *n, void *a) {
  return fields(r, n, "loss", loss_fields, sizeof loss_fields / sizeof *loss_fields, a);
}
static int top_target(struct reader *r, const struct ynode *n, void *a) {
  (void)a;
  return count(r, n, "target_effective_batch", &r->w->target_effective_batch);
}
static int top_safety(struct reader *r, const struct ynode *n, void *a) {
  (void)a;
  struct vf_value v = {0};
  if (!ynode_value(n, &v) || (v.kind != VF_VALUE_FLOAT && v.kind != VF_VALUE_INT))
    return err(r, n, VF_EFORMAT, "safety must be a number");
  double f = v.kind == VF_VALUE_INT ? (double)v.i : v.f;
  if (!(f > 0 && f <= 1)) return err(r, n, VF_EINVAL, "safety must be above 0 and at most 1");
  r->w->safety = f;
  return 0;
}
static int top_trace(struct reader *r, const struct ynode *n, void *a) {
  return fields(r, n, "trace", trace_fields, sizeof trace_fields / sizeof *trace_fields, a);
}
/* Read before the others (knobs name the symbols), so skipped here. */
static int top_skip(struct reader *r, const struct ynode *n, void *a) {
  (void)r, (void)n, (void)a;
  return 0;
}

static const struct field top_fields[] = {
    {"name", top_name},     {"framework", top_framework}, {"weights", top_weights},
    {"amp", top_amp},       {"optimizer", top_optimizer}, {"config", top_config},
    {"model", top_model},   {"sample", top_sample},       {"loss", top_loss},
    {"define", top_skip},   {"knobs", top_skip},          {"stages", top_skip},
    {"target_effective_batch", top_target}, {"safety", top_safety}, {"trace", top_trace}};

static int check_whole(struct reader *r, const struct ynode *root) {
  const struct vf_workload *w = r->w;
  if (!w->n_encoders && !w->factory[0])
    return err(r, lookup(root, "model") ? lookup(root, "model") : root, VF_EINVAL,
               "model: give its parts (encoders, fusion, heads) or a factory (module.py:build)");
  if (w->n_encoders && !w->sequences.n)
    return err(r, lookup(root, "sample") ? lookup(root, "sample") : root, VF_EINVAL,
               "sample: sequences (per anchor, an expression of the knobs) is needed with encoders");
  for (size_t i = 0; i < w->n_encoders; i++)
    if (!w->encoders[i].tokens.n && !w->tokens.n)
      return diag_line(r->d, VF_EINVAL, r->t.file, w->encoders[i].line, 1,
                       "encoder '%s': tokens per sequence: give sample.tokens or the encoder's tokens",
                       w->encoders[i].name);
  for (size_t s = 0; s < w->n_stages; s++)
    if (w->stages[s].file[0] && !w->config[0])
      return diag_line(r->d, VF_EINVAL, r->t.file, w->stages[s].file_line, 1,
                       "stage '%s' names a file: the workload needs its main config too (config:)", w->stages[s].name);
  return 0;
}

int vf_workload_parse(struct vf_workload *w, const char *text_, size_t len, const char *file, const char *dir,
                      struct vf_diag *d) {
  struct reader r = {.w = w, .d = d};
  snprintf(w->file, sizeof w->file, "%s", file);
  snprintf(w->dir, sizeof w->dir, "%s", dir ? dir : ".");
  int rc = ytree_parse(&r.t, w->file, text_, len, false, d);
  if (rc) return rc;
  const struct ynode *root = r.t.root;
  if (!root || root->kind != YN_MAP) rc = err(&r, root, VF_EFORMAT, "a workload is a mapping (name:, model:, knobs:, ...)");
  const struct ynode *n;
  if (!rc) rc = knobs(&r, (n = lookup(root, "knobs")) ? n : &(struct ynode){.kind = YN_MAP});
  if (!rc && (n = lookup(root, "define"))) rc = defines(&r, n);
  if (!rc) rc = fields(&r, root, "the workload", top_fields, sizeof top_fields / sizeof *top_fields, NULL);
  if (!rc && (n = lookup(root, "stages"))) rc = stages(&r, n);
  if (!rc) rc = check_whole(&r, root);
  ytree_free(&r.t);
  return rc;
}

/* `vramfit apply` as a library: read every file, turn settings into values, check the
 * rules that tie files together, edit and verify in memory; then, separately, back up and
 * write. Nothing is written unless every file of the call could be edited. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "io/edit_internal.h"

void vf_apply_init(struct vf_apply *a) { memset(a, 0, sizeof *a); }

int vf_apply_note(struct vf_apply *a, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *msg = n >= 0 ? malloc((size_t)n + 1) : NULL;
  char **grown = msg ? realloc(a->notes, (a->n_notes + 1) * sizeof *grown) : NULL;
  if (!grown) {
    free(msg);
    return VF_ENOMEM;
  }
  va_start(ap, fmt);
  vsnprintf(msg, (size_t)n + 1, fmt, ap);
  va_end(ap);
  a->notes = grown;
  a->notes[a->n_notes++] = msg;
  return 0;
}

/* ---- queued edits ---- */

static void pedit_free(struct pedit *p) {
  free(p->key);
  free(p->path);
  free(p->owned);
  free(p->note);
}

int afile_add(struct afile *f, const char *key, const char *path, const struct vf_value *v,
              int create, int keep_type, const char *note, struct vf_diag *d) {
  for (size_t i = 0; i < f->n_edits; i++) {
    struct pedit *p = &f->edits[i];
    if (strcmp(p->path, path) != 0) continue;
    if (vf_value_same(&p->value, v)) {
      p->create |= create;
      return 0;
    }
    char *a = vf_value_text(&p->value), *b = vf_value_text(v);
    struct vf_value cur;
    size_t at = 0;
    afile_get(f, path, &cur, &at);
    int rc = ytree_diag(&f->doc.t, d, VF_EINVAL, at, "%s: %s asks for %s but %s for %s", path,
                        p->key, a ? a : "?", key, b ? b : "?");
    free(a);
    free(b);
    return rc;
  }
  struct pedit *grown = realloc(f->edits, (f->n_edits + 1) * sizeof *grown);
  if (!grown) return VF_ENOMEM;
  f->edits = grown;
  struct pedit *p = &grown[f->n_edits];
  *p = (struct pedit){strdup(key), strdup(path), *v, NULL, create, keep_type, note ? strdup(note) : NULL};
  if (v->kind == VF_VALUE_STRING) p->value.s = p->owned = strdup(v->s);
  if (!p->key || !p->path || (note && !p->note) || (v->kind == VF_VALUE_STRING && !p->owned)) {
    pedit_free(p);
    return VF_ENOMEM;
  }
  f->n_edits++;
  return 0;
}

int afile_get(const struct afile *f, const char *path, struct vf_value *v, size_t *at) {
  struct yfind fd;
  bool found = ytree_find(&f->doc.t, path, &fd, NULL) == 0 && fd.node;
  if (at) *at = found ? fd.node->start : 0;
  for (size_t i = 0; i < f->n_edits; i++) {
    if (strcmp(f->edits[i].path, path) != 0) continue;
    *v = f->edits[i].value;
    return 2;
  }
  return found && ynode_value(fd.node, v) ? 1 : 0;
}

/* ---- files ---- */

static int grow_files(struct vf_apply *a, size_t more) {
  struct vf_apply_file *grown = realloc(a->files, (a->n_files + more) * sizeof *grown);
  if (!grown) return VF_ENOMEM;
  memset(grown + a->n_files, 0, more * sizeof *grown);
  a->files = grown;
  return 0;
}

/* Reads a file for the call; two names for the same file would race each other. */
static int load(struct vf_apply *a, struct vf_apply_file *pub, const char *path, bool missing_ok,
                const struct vf_apply_opts *o, struct vf_diag *d) {
  struct vf_loaded *src = calloc(1, sizeof *src);
  if (!src) return VF_ENOMEM;
  pub->priv = src;
  int rc = vf_file_load(src, path, missing_ok, !o->dry_run, d);
  if (rc) return rc;
  for (struct vf_apply_file *g = a->files; g < pub; g++) {
    const struct vf_loaded *other = g->priv;
    if (other && ((src->exists && other->exists && other->dev == src->dev && other->ino == src->ino) ||
                  strcmp(other->target, src->target) == 0))
      return diag_at(d, VF_EINVAL, path, UINT64_MAX, "is the same file as %s", g->path);
  }
  pub->path = strdup(path);
  pub->target = strdup(src->target);
  pub->old_text = bytes_dup(src->bytes, src->len);
  pub->old_len = src->len;
  pub->created = !src->exists;
  return pub->path && pub->target && pub->old_text ? 0 : VF_ENOMEM;
}

/* Stores the edited text, its changes and its diff in pub; takes ed's contents. */
static int finish(struct vf_apply_file *pub, struct vf_edited *ed) {
  pub->new_text = ed->text;
  pub->new_len = ed->len;
  pub->changes = ed->changes;
  pub->n_changes = ed->n_changes;
  memset(ed, 0, sizeof *ed);
  if (!pub->new_text) {
    pub->new_text = bytes_dup(pub->old_text, pub->old_len);
    pub->new_len = pub->old_len;
    if (!pub->new_text) return VF_ENOMEM;
  }
  return vf_diff_unified(pub->path, pub->old_text, pub->old_len, pub->new_text, pub->new_len, &pub->diff);
}

static int open_file(struct astate *s, struct afile *f, const struct vf_apply_input *in,
                     const struct vf_format *forced, struct vf_diag *d) {
  f->group = in->settings;
  f->n_group = in->n_settings;
  int rc = load(s->a, f->pub, in->path, false, s->o, d);
  const struct vf_loaded *src = f->pub->priv;
  if (!rc) rc = vf_doc_open(&f->doc, in->path, src->bytes, src->len, d);
  if (rc) return rc;
  f->fmt = forced ? forced : vf_formats_detect(&s->fs, &f->doc);
  if (f->fmt && !(f->pub->format = strdup(f->fmt->name))) return VF_ENOMEM;
  return 0;
}

/* Runs the queued edits through the engine, naming each change after its setting. */
static int edit_file(struct afile *f, struct vf_diag *d) {
  struct vf_path_edit *pe = calloc(f->n_edits ? f->n_edits : 1, sizeof *pe);
  if (!pe) return VF_ENOMEM;
  for (size_t i = 0; i < f->n_edits; i++)
    pe[i] = (struct vf_path_edit){f->edits[i].path, f->edits[i].value, f->edits[i].create,
                                  f->edits[i].keep_type};
  struct vf_edited ed = {0};
  const struct vf_loaded *src = f->pub->priv;
  int rc = f->n_edits ? vf_edit_buffer(f->pub->path, src->bytes, src->len, pe, f->n_edits, &ed, d) : 0;
  free(pe);
  for (size_t c = 0; !rc && c < ed.n_changes; c++) {
    for (size_t i = 0; i < f->n_edits; i++) {
      if (strcmp(f->edits[i].path, ed.changes[c].path) != 0) continue;
      free(ed.changes[c].key);
      ed.changes[c].key = strdup(f->edits[i].key);
      ed.changes[c].note = f->edits[i].note ? strdup(f->edits[i].note) : NULL;
      if (!ed.changes[c].key) rc = VF_ENOMEM;
    }
  }
  if (!rc) rc = finish(f->pub, &ed);
  vf_edited_cleanup(&ed);
  return rc;
}

static void state_free(struct astate *s) {
  for (size_t i = 0; i < s->n; i++) {
    for (size_t k = 0; k < s->f[i].n_edits; k++) pedit_free(&s->f[i].edits[k]);
    free(s->f[i].edits);
    vf_doc_close(&s->f[i].doc);
  }
  free(s->f);
  vf_formats_free(&s->fs);
}

static int prepare(struct astate *s, const struct vf_apply_input *in, size_t n, struct vf_diag *d) {
  const struct vf_format *forced = NULL;
  int rc = vf_formats_load(&s->fs, d);
  if (!rc && s->o->format && strcmp(s->o->format, "auto") != 0 &&
      !(forced = vf_formats_find(&s->fs, s->o->format, d)))
    rc = VF_EINVAL;
  if (!rc) rc = grow_files(s->a, n);
  if (!rc && !(s->f = calloc(n ? n : 1, sizeof *s->f))) rc = VF_ENOMEM;
  for (size_t i = 0; i < n && !rc; i++) {
    s->f[i].pub = &s->a->files[s->a->n_files++];
    s->n++;
    rc = open_file(s, &s->f[i], &in[i], forced, d);
  }
  if (!rc) rc = vf_resolve_settings(s, d);
  if (!rc) rc = vf_check_consistency(s, d);
  for (size_t i = 0; i < s->n && !rc; i++) rc = edit_file(&s->f[i], d);
  return rc;
}

int vf_apply_prepare(struct vf_apply *a, const struct vf_apply_input *in, size_t n,
                     const struct vf_apply_opts *o, struct vf_diag *d) {
  struct astate s = {.a = a, .o = o};
  int rc = prepare(&s, in, n, d);
  state_free(&s);
  return rc;
}

int vf_apply_env(struct vf_apply *a, const char *path, const char *alloc_conf,
                 const struct vf_apply_opts *o, struct vf_diag *d) {
  int rc = grow_files(a, 1);
  if (rc) return rc;
  struct vf_apply_file *pub = &a->files[a->n_files++];
  rc = load(a, pub, path, true, o, d);
  if (!rc && !(pub->format = strdup("env"))) rc = VF_ENOMEM;
  struct vf_edited ed = {0};
  if (!rc) rc = vf_env_edit(path, pub->old_text, pub->old_len, alloc_conf, &ed, d);
  if (!rc) rc = finish(pub, &ed);
  vf_edited_cleanup(&ed);
  return rc;
}

static bool changed(const struct vf_apply_file *f) {
  return f->new_len != f->old_len || memcmp(f->new_text, f->old_text, f->old_len) != 0;
}

/* Names the files already written when a later one fails, so the message is true. */
static int partly_written(const struct vf_apply *a, size_t failed, int rc, struct vf_diag *d) {
  struct sbuf names = {0};
  for (size_t i = 0; i < failed; i++)
    if (changed(&a->files[i])) sb_printf(&names, "%s%s", names.len ? ", " : "", a->files[i].path);
  size_t n = d ? strlen(d->msg) : 0;
  if (d && names.p) snprintf(d->msg + n, sizeof d->msg - n, " (already written: %s)", names.p);
  sb_free(&names);
  return rc;
}

int vf_apply_commit(struct vf_apply *a, struct vf_diag *d) {
  /* Every file is checked before the first is written: a late change leaves all untouched. */
  for (size_t i = 0; i < a->n_files; i++) {
    int rc = changed(&a->files[i]) ? vf_file_unchanged(a->files[i].priv, d) : 0;
    if (rc) return rc;
  }
  for (size_t i = 0; i < a->n_files; i++) {
    struct vf_apply_file *f = &a->files[i];
    int rc = changed(f) ? vf_file_replace(f->priv, f->new_text, f->new_len, &f->backup, d) : 0;
    if (rc) return partly_written(a, i, rc, d);
  }
  return 0;
}

void vf_apply_cleanup(struct vf_apply *a) {
  for (size_t i = 0; i < a->n_files; i++) {
    struct vf_apply_file *f = &a->files[i];
    struct vf_edited ed = {f->new_text, f->new_len, f->changes, f->n_changes};
    vf_edited_cleanup(&ed);
    free(f->path);
    free(f->target);
    free(f->format);
    free(f->old_text);
    free(f->diff);
    free(f->backup);
    if (f->priv) vf_loaded_free(f->priv);
    free(f->priv);
  }
  for (size_t i = 0; i < a->n_notes; i++) free(a->notes[i]);
  free(a->notes);
  free(a->files);
  memset(a, 0, sizeof *a);
}

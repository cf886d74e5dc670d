/* `vramfit apply` as a library: read every file into the queue (queue.c), turn settings into
 * values (resolve.c), check the rules that tie files together (check.c), edit and verify in
 * memory (splice.c); then, separately, back up and write (write.c). Nothing is written
 * unless every file of the call could be edited. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "edit/internal.h"

void vf_apply_init(struct vf_apply *a) { memset(a, 0, sizeof *a); }

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
  return diff_unified(pub->path, pub->old_text, pub->old_len, pub->new_text, pub->new_len, &pub->diff);
}

/* Runs the queued edits through the engine, naming each change after its setting. */
static int edit_file(struct afile *f, struct vf_diag *d) {
  struct vf_path_edit *pe = calloc(f->n_edits ? f->n_edits : 1, sizeof *pe);
  if (!pe) return VF_ENOMEM;
  for (size_t i = 0; i < f->n_edits; i++)
    pe[i] = (struct vf_path_edit){f->edits[i].path, f->edits[i].value, f->edits[i].create,
                                  f->edits[i].keep_type};
  struct vf_edited ed = {0};
  const struct target_file *src = f->pub->priv;
  int rc = f->n_edits ? vf_edit_buffer(f->pub->path, src->bytes, src->len, pe, f->n_edits, &ed, d) : 0;
  free(pe);
  for (size_t c = 0; !rc && c < ed.n_changes; c++) {
    for (size_t i = 0; i < f->n_edits; i++) {
      if (strcmp(f->edits[i].path, ed.changes[c].path) != 0) continue;
      free(ed.changes[c].key);
      ed.changes[c].key = strdup(f->edits[i].key);
      if (f->edits[i].note) { /* why apply added it, else what the engine said */
        free(ed.changes[c].note);
        ed.changes[c].note = strdup(f->edits[i].note);
      }
      if (!ed.changes[c].key || (f->edits[i].note && !ed.changes[c].note)) rc = VF_ENOMEM;
    }
  }
  if (!rc) rc = finish(f->pub, &ed);
  vf_edited_cleanup(&ed);
  return rc;
}

static int prepare(struct astate *s, const struct vf_apply_input *in, size_t n, struct vf_diag *d) {
  int rc = queue_open(s, in, n, d);
  if (!rc) rc = hydra_packages(s);
  if (!rc) rc = queue_format_notes(s);
  if (!rc) rc = resolve_settings(s, d);
  if (!rc) rc = check_consistency(s, d);
  for (size_t i = 0; i < s->n && !rc; i++) rc = edit_file(&s->f[i], d);
  return rc;
}

int vf_apply_prepare(struct vf_apply *a, const struct vf_apply_input *in, size_t n,
                     const struct vf_apply_opts *o, struct vf_diag *d) {
  struct astate s = {.a = a, .o = o};
  int rc = prepare(&s, in, n, d);
  queue_free(&s);
  return rc;
}

int vf_apply_env(struct vf_apply *a, const char *path, const char *alloc_conf,
                 const struct vf_apply_opts *o, struct vf_diag *d) {
  int rc = queue_reserve(a, 1);
  if (rc) return rc;
  struct vf_apply_file *pub = &a->files[a->n_files++];
  rc = queue_load(a, pub, path, true, o, d);
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
    int rc = changed(&a->files[i]) ? target_unchanged(a->files[i].priv, d) : 0;
    if (rc) return rc;
  }
  for (size_t i = 0; i < a->n_files; i++) {
    struct vf_apply_file *f = &a->files[i];
    int rc = changed(f) ? target_replace(f->priv, f->new_text, f->new_len, &f->backup, d) : 0;
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
    if (f->priv) target_free(f->priv);
    free(f->priv);
  }
  for (size_t i = 0; i < a->n_notes; i++) free(a->notes[i]);
  free(a->notes);
  free(a->files);
  memset(a, 0, sizeof *a);
}

/* Shared by apply and plan --write: what an apply did, as JSON or as text. */
#include "cli/apply_view.h"

static json_t *change_json(const struct vf_change *c) {
  return json_pack("{s:s, s:s, s:i, s:i, s:s, s:s, s:b, s:s?}", "key", c->key, "path", c->path,
                   "line", c->line, "col", c->col, "old", c->old_text, "new", c->new_text,
                   "created", c->created, "note", c->note);
}

json_t *apply_view_json(const struct vf_apply *r, bool dry_run) {
  json_t *files = json_array(), *notes = json_array();
  for (size_t i = 0; i < r->n_files; i++) {
    const struct vf_apply_file *f = &r->files[i];
    json_t *changes = json_array();
    for (size_t k = 0; k < f->n_changes; k++) json_array_append_new(changes, change_json(&f->changes[k]));
    json_array_append_new(files, json_pack("{s:s, s:s, s:s?, s:s?, s:o, s:s}", "file", f->path,
                                           "target", f->target, "format", f->format, "backup",
                                           f->backup, "changes", changes, "diff", f->diff));
  }
  for (size_t i = 0; i < r->n_notes; i++) json_array_append_new(notes, json_string(r->notes[i]));
  return json_pack("{s:b, s:o, s:o}", "dry_run", dry_run, "files", files, "notes", notes);
}

void apply_view_diffs(const struct vf_apply *r) {
  for (size_t i = 0; i < r->n_files; i++) fputs(r->files[i].diff, stdout);
  fflush(stdout);
  for (size_t i = 0; i < r->n_notes; i++) fprintf(stderr, "note: %s\n", r->notes[i]);
}

void apply_view_summary(const struct vf_apply *r) {
  for (size_t i = 0; i < r->n_files; i++) {
    const struct vf_apply_file *f = &r->files[i];
    for (size_t k = 0; k < f->n_changes; k++) {
      const struct vf_change *c = &f->changes[k];
      fprintf(stderr, "%s:%d: %s: %s %s -> %s%s%s%s\n", f->path, c->line, c->key, c->path,
              c->created ? "(new)" : c->old_text, c->new_text, c->note ? " (" : "",
              c->note ? c->note : "", c->note ? ")" : "");
    }
    if (!f->n_changes && !f->created) fprintf(stderr, "%s: already set, nothing to change\n", f->path);
    else if (f->backup) fprintf(stderr, "%s: written (backup %s)\n", f->path, f->backup);
    else fprintf(stderr, "%s: written\n", f->path);
  }
}


/* The edit queue of one `vramfit apply` call: it loads the files (refusing two names for one
 * file), opens each as a document with its format map, and holds the values queued for each
 * file until apply.c runs them through the editor. Settings (resolve.c), the rules between
 * files (check.c) and Hydra's defaults (hydra.c) only add to it and read it back, so that
 * every value asked for in a file is in one place and two asks for one path must agree. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "edit/internal.h"

int queue_note(struct vf_apply *a, const char *fmt, ...) {
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

static void pedit_free(struct pedit *p) {
  free(p->key);
  free(p->path);
  free(p->owned);
  free(p->note);
}

int queue_add(struct afile *f, const char *key, const char *path, const struct vf_value *v,
              int create, int keep_type, const char *note, struct vf_diag *d) {
  for (size_t i = 0; i < f->n_edits; i++) {
    struct pedit *p = &f->edits[i];
    if (strcmp(p->path, path) != 0) continue;
    if (value_same(&p->value, v)) {
      p->create |= create;
      return 0;
    }
    char *a = value_to_text(&p->value), *b = value_to_text(v);
    struct vf_value cur;
    size_t at = 0;
    queue_get(f, path, &cur, &at);
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

int queue_get(const struct afile *f, const char *path, struct vf_value *v, size_t *at) {
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

int queue_reserve(struct vf_apply *a, size_t more) {
  struct vf_apply_file *grown = realloc(a->files, (a->n_files + more) * sizeof *grown);
  if (!grown) return VF_ENOMEM;
  memset(grown + a->n_files, 0, more * sizeof *grown);
  a->files = grown;
  return 0;
}

/* Reads a file for the call; two names for the same file would race each other. */
int queue_load(struct vf_apply *a, struct vf_apply_file *pub, const char *path, bool missing_ok,
               const struct vf_apply_opts *o, struct vf_diag *d) {
  struct target_file *src = calloc(1, sizeof *src);
  if (!src) return VF_ENOMEM;
  pub->priv = src;
  int rc = target_load(src, path, missing_ok, !o->dry_run, d);
  if (rc) return rc;
  for (struct vf_apply_file *g = a->files; g < pub; g++) {
    const struct target_file *other = g->priv;
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

static int open_file(struct astate *s, struct afile *f, const struct vf_apply_input *in,
                     const struct format *forced, struct vf_diag *d) {
  f->group = in->settings;
  f->n_group = in->n_settings;
  int rc = queue_load(s->a, f->pub, in->path, false, s->o, d);
  const struct target_file *src = f->pub->priv;
  if (!rc) rc = doc_open(&f->doc, in->path, src->bytes, src->len, d);
  if (rc) return rc;
  f->fmt = forced ? forced : formats_detect(&s->fs, &f->doc, &f->evidence);
  if (f->fmt && !(f->pub->format = strdup(f->fmt->name))) return VF_ENOMEM;
  return 0;
}

int queue_open(struct astate *s, const struct vf_apply_input *in, size_t n, struct vf_diag *d) {
  const struct format *forced = NULL;
  int rc = formats_load(&s->fs, d);
  if (!rc && s->o->format && strcmp(s->o->format, "auto") != 0 &&
      !(forced = formats_find(&s->fs, s->o->format, d)))
    rc = VF_EINVAL;
  if (!rc) rc = queue_reserve(s->a, n);
  if (!rc && !(s->f = calloc(n ? n : 1, sizeof *s->f))) rc = VF_ENOMEM;
  for (size_t i = 0; i < n && !rc; i++) {
    s->f[i].pub = &s->a->files[s->a->n_files++];
    s->n++;
    rc = open_file(s, &s->f[i], &in[i], forced, d);
  }
  return rc;
}

int queue_format_notes(struct astate *s) {
  for (size_t i = 0; i < s->n && !s->o->formats_told; i++) {
    const struct afile *f = &s->f[i];
    int rc = f->fmt && f->fmt == f->evidence.best
             ? queue_note(s->a, "%s: taken for %s by its keys %s (--format names another tool)", f->pub->path,
                          f->fmt->name, f->evidence.keys)
             : 0;
    if (rc) return rc;
  }
  return 0;
}

void queue_free(struct astate *s) {
  for (size_t i = 0; i < s->n; i++) {
    for (size_t k = 0; k < s->f[i].n_edits; k++) pedit_free(&s->f[i].edits[k]);
    free(s->f[i].edits);
    doc_close(&s->f[i].doc);
  }
  free(s->f);
  formats_free(&s->fs);
}

/* Internals of the editor (`vramfit apply`), included only by src/edit/ and its tests.
 * Calls run one way: a file calls only into files on the lines above its own (or earlier on
 * its own line).
 *   leaves: render.c (values as text), write.c (atomic writes, backups), diff.c
 *   splice: verify.c (re-parse and compare), splice.c (vf_edit_buffer), env.c (env files)
 *   queue:  queue.c (the files of one call and the values queued for each)
 *   rules:  hydra.c (Hydra defaults lists), check.c (rules between files), resolve.c
 *   apply:  apply.c (prepare, commit), plan_input.c (a plan JSON as apply inputs)
 * Documents and format maps are read by io (io/doc.h, io/formats.h). Everything here works
 * on buffers except write.c. */
#ifndef VF_EDIT_INTERNAL_H
#define VF_EDIT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/sbuf.h"
#include "io/doc.h"
#include "io/formats.h"
#include "vramfit/edit.h"

/* ---- rendering values (render.c) ---- */
/* Writes v as a scalar: JSON syntax for json files; otherwise in the style of old (may be
 * NULL), with bools spelled like bool_style (may be NULL). */
int render_value(struct sbuf *out, const struct vf_value *v, bool json, const struct ynode *old,
                 const struct ynode *bool_style);
/* A mapping key: plain when that reads back as the same string, else quoted. */
void render_key(struct sbuf *out, const char *key, bool json);

/* ---- unified diff (diff.c) ---- */
/* "--- a/LABEL / +++ b/LABEL" and hunks with 3 lines of context; "" when equal. */
int diff_unified(const char *label, const char *a, size_t alen, const char *b, size_t blen,
                 char **out);

/* ---- files (write.c) ---- */
/* A file apply edits, as read, with what identifies it on disk. */
struct target_file {
  char *path;   /* as given */
  char *target; /* symlinks resolved: the file that is edited */
  char *bytes;
  size_t len;
  bool exists;
  uint64_t dev, ino, size;
  int64_t mtime_ns;
  unsigned mode;
  unsigned uid, gid;
};
/* Reads path (following symlinks). missing_ok: a missing file loads as empty. writable:
 * refuse read-only files and folders apply cannot write into. */
int target_load(struct target_file *f, const char *path, bool missing_ok, bool writable,
                struct vf_diag *d);
/* 0 when the file is still exactly what target_load read (or still absent), else
 * VF_ECHANGED. */
int target_unchanged(const struct target_file *f, struct vf_diag *d);
/* Backs up the old content (first free FILE.backup, FILE.backup.1, ...; never replacing
 * one) and replaces the file atomically with bytes, keeping its mode. VF_ECHANGED when the
 * file changed on disk after target_load. *backup gets the backup's path (NULL: none). */
int target_replace(const struct target_file *f, const char *bytes, size_t len, char **backup,
                   struct vf_diag *d);
void target_free(struct target_file *f);

/* ---- the edit queue (queue.c) ---- */
/* One value to write in one file. */
struct pedit {
  char *key;  /* the setting that asked for it */
  char *path;
  struct vf_value value; /* a STRING value points into owned */
  char *owned;
  int create, keep_type;
  char *note; /* set for values apply adds to keep files consistent */
};

struct afile {
  struct vf_apply_file *pub; /* pub->priv holds the struct target_file */
  struct doc doc;
  const struct format *fmt;
  struct format_evidence evidence; /* why fmt was detected, or why none was */
  const struct vf_setting *group; /* files that share a settings array form a group */
  size_t n_group;
  struct pedit *edits;
  size_t n_edits;
  long long accumulation; /* a derived accumulation asked for (litgpt); 0: not asked */
  char package[256];      /* a config another one's Hydra defaults list composes: where its
                           * keys land ("data"); "" otherwise */
  bool stage;             /* a config a Hydra project loads over its primary one, a stage at a
                           * time: the primary config's map, keys at the root */
};

struct astate {
  struct vf_apply *a;
  const struct vf_apply_opts *o;
  struct formats fs;
  struct afile *f;
  size_t n;
};

/* Adds a sentence to the call's notes. */
int queue_note(struct vf_apply *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Makes room for more files in a; the new entries are zeroed. */
int queue_reserve(struct vf_apply *a, size_t more);
/* Reads a file into pub, the next entry of a; two names for the same file are refused. */
int queue_load(struct vf_apply *a, struct vf_apply_file *pub, const char *path, bool missing_ok,
               const struct vf_apply_opts *o, struct vf_diag *d);
/* Loads the format maps and every input file into s, each with its map (o->format, or the
 * one detected); nothing queued yet. */
int queue_open(struct astate *s, const struct vf_apply_input *in, size_t n, struct vf_diag *d);
/* Says which tool each file was taken for by its keys, and by which (files given --format,
 * or whose format a Hydra composition gave, need no word, nor a caller that said it). */
int queue_format_notes(struct astate *s);
/* Frees the queue; the files stay in s->a. */
void queue_free(struct astate *s);
/* Queues a value for f; the same path twice must agree. */
int queue_add(struct afile *f, const char *key, const char *path, const struct vf_value *v,
              int create, int keep_type, const char *note, struct vf_diag *d);
/* What path will hold once the queued edits are written: 2 with *v when an edit sets it,
 * 1 when the file has it (*at: its offset), 0 when absent. */
int queue_get(const struct afile *f, const char *path, struct vf_value *v, size_t *at);

/* ---- what goes in the queue (hydra.c, check.c, resolve.c) ---- */
/* Configs of the call that another one's Hydra defaults list composes take its map, at
 * their package, and its stage configs of the call take it at their root, so that a value
 * lands in the config it is read from (hydra.c). */
int hydra_packages(struct astate *s);
/* Hydra: a primary config's edits that a defaults entry after _self_ would override move to
 * that entry's config when the call holds it, else are refused (hydra.c). */
int check_hydra_defaults(struct astate *s, struct afile *f, struct vf_diag *d);
/* Where a path that f lacks is set instead, when f is a Hydra primary config (hydra.c). */
enum hydra_owner {
  HYDRA_NONE,
  HYDRA_LATER,  /* a config listed after _self_: an edit queued in f is moved there (or refused)
                 * by check_hydra_defaults */
  HYDRA_STAGES, /* configs the project loads itself, a stage at a time, from a folder beside f
                 * that its composition does not hold, and that the call does not hold (those
                 * take the value themselves); *count of them, the first in file */
};
enum hydra_owner hydra_owner_of(const struct astate *s, const struct afile *f, const char *path, char *file,
                                size_t size, size_t *count);
/* Cross-file rules: adds the edits they imply, refuses what they forbid (check.c). */
int check_consistency(struct astate *s, struct vf_diag *d);
/* Turns every file's settings into queued edits (resolve.c). */
int resolve_settings(struct astate *s, struct vf_diag *d);

#endif

/* Writing settings into users' own config files (`vramfit apply`).
 *
 * Edits change only the bytes of the values they set: comments, blank lines,
 * indentation, quoting, key order, anchors, flow lists, CRLF line ends and a BOM stay as
 * they were. Every edit is re-parsed and checked against the original (every other value
 * unchanged) before anything is written; writes are atomic and keep a backup. */
#ifndef VRAMFIT_EDIT_H
#define VRAMFIT_EDIT_H

#include <stddef.h>
#include <stdint.h>

#include "vramfit/api.h"
#include "vramfit/error.h"

/* ---- values ---- */
enum vf_value_kind { VF_VALUE_NULL, VF_VALUE_BOOL, VF_VALUE_INT, VF_VALUE_FLOAT, VF_VALUE_STRING };

struct vf_value {
  enum vf_value_kind kind;
  int b;        /* BOOL */
  long long i;  /* INT */
  double f;     /* FLOAT */
  const char *s; /* STRING, borrowed */
};

/* Reads a value as typed after `--set KEY=`: whole numbers, decimals (1e-4 too), true or
 * false, null, anything else as a string (s = text). VF_EINVAL for an empty text,
 * VF_ERANGE for a whole number beyond 64 bits. */
VF_API int vf_value_parse(const char *text, struct vf_value *out);

/* ---- editing one buffer ---- */
/* A value to write at a dotted path ("zero_optimization.stage"; digits index a list). */
struct vf_path_edit {
  const char *path;
  struct vf_value value;
  int create;    /* add the key, and missing parent mappings, when absent */
  int keep_type; /* refuse replacing a number or bool with a value of another type */
};

/* One value written. */
struct vf_change {
  char *key;      /* the logical key or path asked for */
  char *path;     /* the path written */
  int line, col;  /* where the value is in the result, 1-based */
  char *old_text; /* the bytes replaced; "" when created */
  char *new_text; /* the bytes written */
  int created;
  char *note;     /* why, for values apply added itself (NULL otherwise) */
};

struct vf_edited {
  char *text;
  size_t len;
  struct vf_change *changes;
  size_t n_changes;
};
VF_API void vf_edited_cleanup(struct vf_edited *e);

/* Applies edits to a YAML or JSON buffer (JSON when it looks like JSON) and verifies the
 * result. Values already equal are left alone. VF_EFORMAT: unparsable, or a path through
 * an alias, list or scalar; VF_ENOTFOUND: missing key without create; VF_EINVAL: a target
 * that is a list, mapping, block scalar or tagged value, or a value of the wrong type. */
VF_API int vf_edit_buffer(const char *file, const char *text, size_t len, const struct vf_path_edit *edits,
                          size_t n, struct vf_edited *out, struct vf_diag *d);

/* Checks that new_text is old with exactly these edits: each path holds its value, created
 * keys were appended to their mapping, and every other key, value, style, tag and anchor is
 * unchanged. 0 or VF_EFORMAT (d says where). */
VF_API int vf_edit_verify(const char *file, const char *old, size_t old_len, const char *new_text,
                          size_t new_len, const struct vf_path_edit *edits, size_t n, struct vf_diag *d);

/* Sets PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF in a shell env file (NAME=V,
 * export NAME=V, or NAME=V prefixing a command), merging alloc_conf's options into
 * the existing value and appending missing lines. */
VF_API int vf_env_edit(const char *file, const char *text, size_t len, const char *alloc_conf,
                       struct vf_edited *out, struct vf_diag *d);

/* ---- apply: several files in one consistent change ---- */
/* KEY=VALUE: a logical key (batch, accumulation, seq, grad_ckpt, precision, optimizer,
 * zero_stage, offload) or a dotted path. */
struct vf_setting {
  const char *key;
  const char *value;
  int from_plan; /* a plan's field: a key with no place in any file is a note, not an error */
};

/* One file and what to set in it. Files that share a settings array are one group: a key
 * must land in at least one file of its group. */
struct vf_apply_input {
  const char *path;
  const struct vf_setting *settings;
  size_t n_settings;
};

struct vf_apply_opts {
  const char *format; /* "auto" or NULL to detect, or a format name */
  int create;         /* add missing keys */
  uint64_t gpus;      /* data-parallel world size for DeepSpeed's train_batch_size; 0: derive */
  int dry_run;        /* allow read-only files: nothing will be written */
  const struct vf_setting *maps; /* LOGICAL=PATH: where a logical key lives in every file */
  size_t n_maps;
  int formats_told;   /* the caller already said which tool each file is for (plan --write): no
                       * note on what detection took */
};

struct vf_apply_file {
  char *path;   /* as given */
  char *target; /* the file edited (symlinks followed) */
  char *format; /* the map used ("hf", ...; "env" for --env), NULL: dotted paths only */
  char *old_text, *new_text;
  size_t old_len, new_len;
  struct vf_change *changes;
  size_t n_changes;
  char *diff;   /* unified diff, "" when unchanged */
  char *backup; /* after commit: the backup written, or NULL */
  int created;  /* an env file that did not exist */
  void *priv;
};

struct vf_apply {
  struct vf_apply_file *files;
  size_t n_files;
  char **notes; /* what was skipped or fixed, one sentence each */
  size_t n_notes;
};

VF_API void vf_apply_init(struct vf_apply *a);
/* Reads, edits, cross-checks and verifies every file in memory; writes nothing. */
VF_API int vf_apply_prepare(struct vf_apply *a, const struct vf_apply_input *in, size_t n,
                            const struct vf_apply_opts *o, struct vf_diag *d);
/* Adds the env file edit (the file may not exist yet). */
VF_API int vf_apply_env(struct vf_apply *a, const char *path, const char *alloc_conf,
                        const struct vf_apply_opts *o, struct vf_diag *d);
/* Writes every changed file: backup first, then an atomic replace. Stops at the first
 * failure (VF_ECHANGED when a file changed on disk since it was read). */
VF_API int vf_apply_commit(struct vf_apply *a, struct vf_diag *d);
VF_API void vf_apply_cleanup(struct vf_apply *a);

/* ---- plans (`vramfit plan --json` output) ---- */
/* Reads a plan file ("-": standard input): "recommended" (or tiers[tier]) applies to every
 * file; for curriculum files, "stages": [{"name" | "file", same fields}] applies to the
 * FILE it names by path, base name, or base name without extension. Fields: batch,
 * accumulation, seq, grad_ckpt, optimizer, precision, offload, zero_stage, shard (zero1..3
 * becomes zero_stage), "set": {"dotted.path": value}; others are ignored. A plan of the
 * user's own configs ("read_from": where its setting was read) writes only the fields
 * that differ from its "given" setting: what it changes, nothing it read. extra (--set)
 * is added to every list and wins over the plan. */
struct vf_plan {
  struct vf_apply_input *inputs; /* one per file, in the order given */
  size_t n_inputs;
  char *alloc_conf; /* the plan's "alloc_conf", or NULL */
  uint64_t gpus;    /* the plan's "gpus", or 0 */
  void *priv;
};
VF_API void vf_plan_init(struct vf_plan *p);
VF_API int vf_plan_load(struct vf_plan *p, const char *file, const char *tier, const char *const *files,
                        size_t n_files, const struct vf_setting *extra, size_t n_extra, struct vf_diag *d);
/* The same from a plan's text in memory; file names it in messages. */
VF_API int vf_plan_parse(struct vf_plan *p, const char *file, const char *text, size_t len, const char *tier,
                         const char *const *files, size_t n_files, const struct vf_setting *extra, size_t n_extra,
                         struct vf_diag *d);
VF_API void vf_plan_cleanup(struct vf_plan *p);

#endif

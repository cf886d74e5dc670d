/* Internals of `vramfit apply`: a YAML/JSON node tree with byte positions, value
 * typing and rendering, format maps, consistency checks, diffs and atomic writes.
 * Everything here works on buffers except edit_write.c. */
#ifndef VF_IO_EDIT_INTERNAL_H
#define VF_IO_EDIT_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "base/sbuf.h"
#include "vramfit/edit.h"

/* Largest config file apply reads. */
#define VF_EDIT_MAX_BYTES (8u << 20)

/* ---- node tree (edit_tree.c) ---- */
enum ynode_kind { YN_SCALAR, YN_MAP, YN_SEQ, YN_ALIAS };

struct ynode {
  enum ynode_kind kind;
  int style;       /* scalar: yaml_scalar_style_t; map/seq: yaml_*_style_t (1 block, 2 flow) */
  char *value;     /* scalar text as loaded; alias: the anchor it names */
  size_t vlen;
  char *tag, *anchor;          /* NULL when absent */
  size_t start, vstart, end;   /* bytes: node with properties, value proper, end of
                                * the node and everything nested in it */
  size_t close;                /* flow collections: offset of the closing bracket */
  bool json;                   /* from a JSON file: any JSON number is a number */
  struct ynode **kid;          /* map: key, value, key, value...; seq: items */
  size_t nkid, cap;
};

/* Whether a collection is written in flow style ({...} or [...], JSON included). */
static inline bool ynode_flow(const struct ynode *n) {
  return n->kind == YN_MAP ? n->style == YAML_FLOW_MAPPING_STYLE
                           : n->kind == YN_SEQ && n->style == YAML_FLOW_SEQUENCE_STYLE;
}

struct ytree {
  const char *file;
  const char *text; /* borrowed */
  size_t len, bom;
  bool json;
  const char *eol;  /* the file's line break: "\n" or "\r\n" */
  struct ynode *root; /* NULL for an empty document */
};

/* Parses text (YAML, or JSON when json is set) into t; d gets FILE:LINE:COL on errors. */
int ytree_parse(struct ytree *t, const char *file, const char *text, size_t len, bool json,
                struct vf_diag *d);
void ytree_free(struct ytree *t);
/* 1-based line and column (in characters) of a byte offset. */
void ytree_linecol(const struct ytree *t, size_t off, int *line, int *col);
/* Fills d with the position of off and a message; returns code. */
int ytree_diag(const struct ytree *t, struct vf_diag *d, int code, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Where a path leads. node is the value at the path, or NULL when it is missing; then
 * parent is the deepest mapping reached (NULL: empty document) and rest the segments
 * still missing. merged: the missing key may come from a `<<` merge. */
struct yfind {
  struct ynode *node, *parent;
  const char *rest;
  bool merged;
};
/* VF_EFORMAT when the path crosses an alias or a duplicate key; VF_ENOTFOUND when it runs
 * into a plain value, or into a list with a key that is not one of its indices. */
int ytree_find(const struct ytree *t, const char *path, struct yfind *out, struct vf_diag *d);

/* ---- scalar typing and rendering (edit_value.c) ---- */
/* The type the loaders give a scalar node (YAML 1.1 as PyYAML reads it, which JSON agrees
 * with); exponent forms without a dot count as floats, as OmegaConf and jsonargparse read them. */
enum vf_value_kind ynode_type(const struct ynode *n);
/* A scalar node's value as loaded (strings borrowed from the node); false for others. */
bool ynode_value(const struct ynode *n, struct vf_value *out);
/* Whether the node holds exactly v. */
bool ynode_equals(const struct ynode *n, const struct vf_value *v);
/* Writes v as a scalar: JSON syntax for json files; otherwise in the style of old (may be
 * NULL), with bools spelled like bool_style (may be NULL). */
int vf_render_value(struct sbuf *out, const struct vf_value *v, bool json, const struct ynode *old,
                    const struct ynode *bool_style);
/* A mapping key: plain when that reads back as the same string, else quoted. */
void vf_render_key(struct sbuf *out, const char *key, bool json);
/* The value as one line for messages and --json ("8", "true", "adamw_torch"). */
char *vf_value_text(const struct vf_value *v);
/* Converts a JSON scalar from a format map; strings are borrowed from j. */
int vf_value_from_json(const json_t *j, struct vf_value *out);
bool vf_value_same(const struct vf_value *a, const struct vf_value *b);

/* ---- documents (yamledit.c) ---- */
struct vf_doc {
  struct ytree t;
  char *file;
};
/* Parses text as JSON when it looks like JSON (or the name ends in .json), else YAML. */
int vf_doc_open(struct vf_doc *doc, const char *file, const char *text, size_t len,
                struct vf_diag *d);
void vf_doc_close(struct vf_doc *doc);

/* ---- unified diff (edit_diff.c) ---- */
/* "--- a/LABEL / +++ b/LABEL" and hunks with 3 lines of context; "" when equal. */
int vf_diff_unified(const char *label, const char *a, size_t alen, const char *b, size_t blen,
                    char **out);

/* ---- files (edit_write.c) ---- */
struct vf_loaded {
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
int vf_file_load(struct vf_loaded *f, const char *path, bool missing_ok, bool writable,
                 struct vf_diag *d);
/* 0 when the file is still exactly what vf_file_load read (or still absent), else
 * VF_ECHANGED. */
int vf_file_unchanged(const struct vf_loaded *f, struct vf_diag *d);
/* Backs up the old content (first free FILE.backup, FILE.backup.1, ...; never replacing
 * one) and replaces the file atomically with bytes, keeping its mode. VF_ECHANGED when the
 * file changed on disk after vf_file_load. *backup gets the backup's path (NULL: none). */
int vf_file_replace(const struct vf_loaded *f, const char *bytes, size_t len, char **backup,
                    struct vf_diag *d);
void vf_loaded_free(struct vf_loaded *f);

/* ---- format maps (edit_format.c, data/formats/NAME.json) ---- */
struct vf_format {
  char *name;
  json_t *map;
};
struct vf_formats {
  struct vf_format *v;
  size_t n;
};
int vf_formats_load(struct vf_formats *fs, struct vf_diag *d);
void vf_formats_free(struct vf_formats *fs);
/* NULL with d filled when no map has that name. */
const struct vf_format *vf_formats_find(const struct vf_formats *fs, const char *name,
                                        struct vf_diag *d);
/* The map that scores highest on doc's keys, or NULL when none claims it. */
const struct vf_format *vf_formats_detect(const struct vf_formats *fs, const struct vf_doc *doc);
/* The map's entry for a logical key ("batch"), or NULL. */
const json_t *vf_format_key(const struct vf_format *f, const char *key);
/* The map's default for a path, or NULL. */
const json_t *vf_format_default(const struct vf_format *f, const char *path);
bool vf_format_keeps_auto(const struct vf_format *f);
/* Why the map has no place for a logical key ("reasons": {key: sentence}), or NULL. */
const char *vf_format_reason(const struct vf_format *f, const char *key);
/* The family suffix ("-true", "-mixed") of the variant in entry's "families" whose spelling
 * node holds, or NULL. */
const char *vf_format_family(const json_t *entry, const struct ynode *node);
/* Whether node holds one of the spellings (a JSON value or an array of them). */
bool vf_spelling_matches(const json_t *spelling, const struct ynode *node);
/* The spelling to write: the value, or an array's first. */
const json_t *vf_spelling_first(const json_t *spelling);

/* ---- apply state (edit_apply.c, edit_resolve.c, edit_check.c) ---- */
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
  struct vf_apply_file *pub; /* pub->priv holds the struct vf_loaded */
  struct vf_doc doc;
  const struct vf_format *fmt;
  const struct vf_setting *group; /* files that share a settings array form a group */
  size_t n_group;
  struct pedit *edits;
  size_t n_edits;
  long long accumulation; /* a derived accumulation asked for (litgpt); 0: not asked */
};

struct astate {
  struct vf_apply *a;
  const struct vf_apply_opts *o;
  struct vf_formats fs;
  struct afile *f;
  size_t n;
};

/* Queues a value for f; the same path twice must agree. */
int afile_add(struct afile *f, const char *key, const char *path, const struct vf_value *v,
              int create, int keep_type, const char *note, struct vf_diag *d);
/* What path will hold once the queued edits are written: 2 with *v when an edit sets it,
 * 1 when the file has it (*at: its offset), 0 when absent. */
int afile_get(const struct afile *f, const char *path, struct vf_value *v, size_t *at);
int vf_apply_note(struct vf_apply *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Turns every file's settings into queued edits (edit_resolve.c). */
int vf_resolve_settings(struct astate *s, struct vf_diag *d);
/* Cross-file rules: adds the edits they imply, refuses what they forbid (edit_check.c). */
int vf_check_consistency(struct astate *s, struct vf_diag *d);
/* Hydra: a primary config's edits that a defaults entry after _self_ would override move to
 * that entry's config when the call holds it, else are refused (edit_hydra.c). */
int vf_check_hydra_defaults(struct astate *s, struct afile *f, struct vf_diag *d);

#endif

/* Reading YAML and JSON documents with byte positions: the node tree (doc_tree.c), what each
 * scalar holds as the loaders read it (doc_value.c) and opening a document as YAML or JSON
 * (doc.c). Readers of io (workload files) and the editor (src/edit/) share it: the editor
 * needs every value's bytes to change only those. */
#ifndef VF_IO_DOC_H
#define VF_IO_DOC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

#include "vramfit/edit.h"

/* Largest config file read. */
#define DOC_MAX_BYTES (8u << 20)

/* ---- node tree (doc_tree.c) ---- */
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

/* ---- scalar typing (doc_value.c) ---- */
/* The type the loaders give a scalar node (YAML 1.1 as PyYAML reads it, which JSON agrees
 * with); exponent forms without a dot count as floats, as OmegaConf and jsonargparse read them. */
enum vf_value_kind ynode_type(const struct ynode *n);
/* A scalar node's value as loaded (strings borrowed from the node); false for others. */
bool ynode_value(const struct ynode *n, struct vf_value *out);
/* Whether the node holds exactly v. */
bool ynode_equals(const struct ynode *n, const struct vf_value *v);
/* The value as one line for messages and --json ("8", "true", "adamw_torch"). */
char *value_to_text(const struct vf_value *v);
/* Converts a JSON scalar from a format map; strings are borrowed from j. */
int value_from_json(const json_t *j, struct vf_value *out);
bool value_same(const struct vf_value *a, const struct vf_value *b);
/* 1 for yes/true/on, 0 for no/false/off (in any case), -1 for any other word: the YAML 1.1
 * bool words, which a plain string must avoid to read back as a string. */
int value_bool_word(const char *s);
/* The shortest decimal that reads back as f, always with a dot and, when it has an
 * exponent, a signed one: PyYAML reads 1e-4 and 1.0e4 as strings, 1.0e-04 as a float. */
void value_format_float(char *buf, size_t size, double f);

/* ---- documents (doc.c) ---- */
struct doc {
  struct ytree t;
  char *file;
};
/* Parses text as JSON when it looks like JSON (or the name ends in .json), else YAML; a
 * Python file (.py) is refused (VF_EUNSUPPORTED). */
int doc_open(struct doc *doc, const char *file, const char *text, size_t len, struct vf_diag *d);
void doc_close(struct doc *doc);

#endif

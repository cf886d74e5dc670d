/* Internals of the training-config reader (include/vramfit/config.h), for its files:
 *   config_read.c       the entry points: files, formats, the configs they name, merging
 *   config_view.c       a config as the layers a value may come from (Hydra's composition)
 *   config_map.c        the format maps' entries read back into settings
 *   config_torchtune.c  torchtune's model builders (model and method in one name)
 * The maps are the editor's (data/formats/NAME.json, io/formats.h): what `vramfit apply`
 * writes into a key is read back from the same key. */
#ifndef VF_IO_CONFIG_INTERNAL_H
#define VF_IO_CONFIG_INTERNAL_H

#include <limits.h>
#include <stdbool.h>

#include "io/doc.h"
#include "io/formats.h"
#include "vramfit/config.h"

/* One document a value may come from, with the package its keys land in (Hydra); tree
 * is the document, or the part of it a config names inline (`deepspeed: {...}`). */
struct layer {
  struct ytree tree;
  char package[256];
};

/* A document read for a config, with its text (the tree borrows it). */
struct source {
  struct doc doc;
  char *text;
};

/* A defaults entry whose config is not there. */
struct missing {
  char file[PATH_MAX]; /* the config listing it */
  int line;
  char entry[PATH_MAX + 260]; /* "data: alpaca (conf/data/alpaca.yaml)": an entry and a path */
};

/* A config being read: its layers, the highest precedence first. */
struct cfile {
  char *path;
  char dir[PATH_MAX]; /* its folder, for the paths it names */
  const struct format *fmt;
  struct source **src; /* owned: the config and what its Hydra defaults list composes */
  size_t n_src;
  struct layer *layers;
  size_t n_layers;
  struct missing *missing;
  size_t n_missing;
};

struct creader {
  struct formats fs;
  struct vf_config *out;
  struct cfile **files; /* pointers: a config named while reading is appended */
  size_t n_files;
  struct vf_diag *d;
};

/* Where a value was found: the layer, the node (NULL: the tool's default) and the key
 * path in that layer's document. */
struct place {
  const struct layer *layer;
  const struct ynode *node;
  char key[256];
};

/* ---- config_view.c ---- */
/* Reads path as f's document: its only layer, or composed with its Hydra defaults list
 * (configs that are not there listed in f->missing, optional ones skipped). */
int view_open(struct cfile *f, const char *path, struct vf_diag *d);
/* An extra layer: a part of one of f's documents (`deepspeed: {...}`), not owned. */
int view_add_tree(struct cfile *f, const struct ytree *t, const struct ynode *root);
/* The node at path in the highest layer that has it; 0 with out->node NULL when none
 * does. VF_EFORMAT for a duplicate key on the way (d names it). */
int view_find(const struct cfile *f, const char *path, struct place *out, struct vf_diag *d);
/* The layer of f's own document (a default's place). */
const struct layer *view_self(const struct cfile *f);
/* name as a path relative to f's folder, into out, when something is there. */
bool view_beside(const struct cfile *f, const char *name, char *out, size_t size);
/* 1-based line of a place; 0 for a default. */
int place_line(const struct place *p);
void view_close(struct cfile *f);

/* ---- config_read.c ---- */
/* Records a setting read from f at p; the first file's value wins over later files', a
 * value in a file over a default (then a disagreement is a warning). */
int config_set(struct creader *r, const char *name, const char *value, const struct place *p);
/* Records a warning about the value at p (name may be NULL); text: the value in
 * question, NULL for the node's own. */
int config_warn(struct creader *r, const char *name, const struct place *p, const char *text,
                const char *why, ...) __attribute__((format(printf, 5, 6)));
/* The value recorded so far for name, or NULL. */
const char *config_value(const struct creader *r, const char *name);
/* Forgets a setting read (a key the tool reads only in other cases). */
void config_drop(struct creader *r, const char *name);
/* Adds the config a key of f names (a path, or part of f inline) to the files read. */
int config_add_named(struct creader *r, struct cfile *f, const struct place *p, const char *format);

/* ---- config_map.c ---- */
/* Reads every setting f's map describes (its "keys", then its reading-only "read"). */
int map_read(struct creader *r, struct cfile *f);
/* A model's name or path as a config gives it: relative paths are the config's folder's
 * when they exist there; strip (or NULL) is a prefix a name loses when no such file
 * exists ("checkpoints/" of litgpt). */
int map_model_value(const struct cfile *f, const char *text, const char *strip, char **out);

/* ---- config_torchtune.c ---- */
/* The model and method of torchtune's model._component_ builder. */
int torchtune_read(struct creader *r, struct cfile *f);

#endif

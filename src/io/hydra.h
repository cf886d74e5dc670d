/* Hydra's defaults list: the configs a primary config composes, in order, and the package
 * each one's keys land in. The config reader composes them to read a value where Hydra
 * would take it from; the editor (src/edit/hydra.c) moves an edit to the config that
 * overrides it. */
#ifndef VF_IO_HYDRA_H
#define VF_IO_HYDRA_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "io/doc.h"

/* One config the defaults list composes, or the primary config's own values (_self_). */
struct hydra_entry {
  char entry[256];     /* as written: "data: mnist", "_self_" */
  char file[PATH_MAX]; /* the config it names, beside the primary one; "" for _self_ */
  char package[256];   /* where its keys land: "data"; "" for the root */
  bool self;
};

/* The entries of root's defaults list in composition order (later ones win), at most max:
 * _self_ where it is listed, else last (Hydra >= 1.1). Entries that name no config
 * (null, "???", overrides, other options than a name) are left out. dir: the primary
 * config's folder. 0 when root has no defaults list. */
size_t hydra_defaults(const struct ynode *root, const char *dir, struct hydra_entry *out, size_t max);
/* A "# @package PKG" header among the config's first comment lines changes its package
 * (_global_: the root). */
void hydra_package_header(const char *text, size_t len, char *package, size_t size);
/* The path inside a config of this package that path of the composed config is, or NULL
 * when the path is not under the package. */
const char *hydra_inside(const char *package, const char *path);

/* One config of a composition. */
struct hydra_config {
  char file[PATH_MAX]; /* the primary config itself where its _self_ is */
  char package[256];   /* where its keys land, its header applied */
  bool self;
  bool missing;        /* listed but not there (then entry and line say where it is listed) */
  char entry[256];
  char listed_in[PATH_MAX];
  int line;
};
/* Every config the primary config (path, parsed as primary) composes, in composition
 * order (later ones win), following the defaults lists of the configs it lists (relative to
 * their own folder, at their package), at most max. Configs are read from disk for their
 * defaults lists and headers; optional ones that are not there are left out. 0 when the
 * primary has no defaults list. */
size_t hydra_compose(const char *path, const struct ytree *primary, struct hydra_config *out, size_t max);

#endif

/* The ecosystem format maps (data/formats/NAME.json, formats.c): which tool a config file
 * is for, where each logical key ("batch") lives in it and how its values are spelled.
 * Read by the editor (src/edit/) to place settings, and kept with the readers so that
 * training configs can be read through the same maps. */
#ifndef VF_IO_FORMATS_H
#define VF_IO_FORMATS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "io/doc.h"

struct format {
  char *name;
  json_t *map;
};
struct formats {
  struct format *v;
  size_t n;
};
int formats_load(struct formats *fs, struct vf_diag *d);
void formats_free(struct formats *fs);
/* NULL with d filled when no map has that name. */
const struct format *formats_find(const struct formats *fs, const char *name, struct vf_diag *d);
/* Why a file was taken for a tool, or was not: the map that scored highest on its keys and
 * those keys, heaviest first. */
struct format_evidence {
  const struct format *best; /* NULL: no map's key is in the file */
  int score;
  char keys[256];            /* "sequence_len, micro_batch_size, base_model, ..." */
};
/* The map that scores highest on doc's keys, or NULL when none claims it; ev (may be NULL)
 * gets the evidence either way. */
const struct format *formats_detect(const struct formats *fs, const struct doc *doc, struct format_evidence *ev);
/* The map's entry for a logical key ("batch"), or NULL. */
const json_t *format_key(const struct format *f, const char *key);
/* The map's default for a path, or NULL. */
const json_t *format_default(const struct format *f, const char *path);
bool format_keeps_auto(const struct format *f);
/* Why the map has no place for a logical key ("reasons": {key: sentence}), or NULL. */
const char *format_reason(const struct format *f, const char *key);
/* The family suffix ("-true", "-mixed") of the variant in entry's "families" whose spelling
 * node holds, or NULL. */
const char *format_family(const json_t *entry, const struct ynode *node);
/* Whether node holds one of the spellings (a JSON value or an array of them). */
bool spelling_matches(const json_t *spelling, const struct ynode *node);
/* The spelling to write: the value, or an array's first. */
const json_t *spelling_first(const json_t *spelling);

#endif

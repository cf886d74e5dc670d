/* Looking names up in the model catalogue (struct vf_catalog, include/vramfit/model.h). */
#ifndef VF_IO_CATALOG_H
#define VF_IO_CATALOG_H

#include <stddef.h>

#include "vramfit/model.h"

/* The entry whose name, Hub id or alias is id, ignoring case; NULL when none. */
const struct vf_catalog_entry *catalog_find(const struct vf_catalog *c, const char *id);

/* Writes the names of the entries closest to a name that is in no entry into list,
 * comma-separated (base/closest.h); returns how many. Names, Hub ids and aliases are
 * compared without organisation, case and the separators '-', '_', '.'. */
size_t catalog_suggest(const struct vf_catalog *c, const char *text, char *list, size_t size);

#endif

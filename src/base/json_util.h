/* jansson glue shared by the JSON readers. */
#ifndef VF_BASE_JSON_UTIL_H
#define VF_BASE_JSON_UTIL_H

#include <jansson.h>
#include <stddef.h>

#include "vramfit/error.h"

/* Parses text as one JSON value, keeping 64-bit integers exact. On a syntax error d gets the
 * file, line and column. */
int parse_json_text(const char *text, size_t len, const char *file, json_t **out, struct vf_diag *d);

#endif

/* Versions of frameworks and of PyTorch: a release ("5.23", "0.4.0": dotted numbers) or a
 * month ("2023-10", for code from between releases). Pure. */
#ifndef VF_CORE_VERSION_H
#define VF_CORE_VERSION_H

#include <stdbool.h>
#include <stdint.h>

#define VF_VERSION_PARTS 4

struct version {
  bool month;                      /* "YYYY-MM": part[0] the year, part[1] the month */
  uint32_t part[VF_VERSION_PARTS]; /* a release's numbers, missing ones 0 (5.23 == 5.23.0) */
};

/* A release: 1 to 4 dot-separated numbers of at most 6 digits. 0 or VF_EINVAL. */
int version_release_parse(const char *text, struct version *v);
/* A month: YYYY-MM. 0 or VF_EINVAL. */
int version_month_parse(const char *text, struct version *v);
/* Either. 0 or VF_EINVAL. */
int version_parse(const char *text, struct version *v);
/* <0, 0, >0 as a is older than, the same as or newer than b (both releases or both months). */
int version_compare(const struct version *a, const struct version *b);

#endif

/* A workload's expression symbols and defines, which its reader (src/io/workload_read.c)
 * checks as it reads them. */
#ifndef VF_CORE_WORKLOAD_EXPR_H
#define VF_CORE_WORKLOAD_EXPR_H

#include "vramfit/workload.h"

/* The symbol of a name in expressions: a knob index or VF_WL_MAX_KNOBS + a define's.
 * VF_ENOTFOUND; VF_EUNSUPPORTED for the accumulation knob. */
int wl_symbol(const struct vf_workload *w, const char *name, size_t len, int *sym);

/* VF_EINVAL naming the cycle ("a -> b -> a") at the first define of it, in file. */
int wl_defines_check(const struct vf_workload *w, const char *file, struct vf_diag *d);

#endif

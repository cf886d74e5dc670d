/* Workload internals shared by the reader (src/io/workload_*.c) and the core. */
#ifndef VF_CORE_WORKLOAD_INTERNAL_H
#define VF_CORE_WORKLOAD_INTERNAL_H

#include "vramfit/workload.h"

/* The symbol of a name in expressions: a knob index or VF_WL_MAX_KNOBS + a define's.
 * VF_ENOTFOUND; VF_EUNSUPPORTED for the accumulation knob. */
int vf_wl_symbol(const struct vf_workload *w, const char *name, size_t len, int *sym);

/* VF_EINVAL naming the cycle ("a -> b -> a") at the first define of it, in file. */
int vf_wl_defines_check(const struct vf_workload *w, const char *file, struct vf_diag *d);

#endif

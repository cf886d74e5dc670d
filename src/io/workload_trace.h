/* The fit `trace --workload` wrote beside a workload (NAME.trace.json), read back when the
 * workload loads (src/io/workload_load.c). */
#ifndef VF_IO_WORKLOAD_TRACE_H
#define VF_IO_WORKLOAD_TRACE_H

#include <jansson.h>

#include "vramfit/workload.h"

/* The "fit" object of that file: VF_EFORMAT when a field is missing or of the wrong type. */
int workload_fit_from_json(const json_t *o, struct vf_wl_fit *f);

#endif

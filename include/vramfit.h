/* vramfit: will this training run fit on the GPU, and what is the best setting that does?
 *
 * The one public header. Conventions (libuv/curl style):
 *  - every fallible function returns 0 or a negative VF_E* code; vf_strerror() names it;
 *  - parsers also fill an optional caller-owned struct vf_diag with file and position;
 *  - structs the caller allocates are set up with *_init() and released with *_cleanup();
 *  - strings the library allocates for the caller are freed with vf_free(). */
#ifndef VRAMFIT_H
#define VRAMFIT_H

#include "vramfit/alloc.h"
#include "vramfit/command.h"
#include "vramfit/config.h"
#include "vramfit/edit.h"
#include "vramfit/error.h"
#include "vramfit/estimate.h"
#include "vramfit/gpu.h"
#include "vramfit/history.h"
#include "vramfit/model.h"
#include "vramfit/monitor.h"
#include "vramfit/plan.h"
#include "vramfit/plot.h"
#include "vramfit/probe.h"
#include "vramfit/trace.h"
#include "vramfit/uncertainty.h"
#include "vramfit/workload.h"

#endif

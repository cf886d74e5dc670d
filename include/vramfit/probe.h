/* Finding the largest micro batch that fits by launching the real training command: the
 * search as a pure state machine (the caller runs the launches), and the estimator's own
 * largest fitting batch to start it from. */
#ifndef VRAMFIT_PROBE_H
#define VRAMFIT_PROBE_H

#include <stdbool.h>
#include <stdint.h>

#include "vramfit/error.h"
#include "vramfit/estimate.h"

enum vf_probe_outcome {
  VF_PROBE_OK,      /* exited 0 */
  VF_PROBE_OOM,     /* failed with an out-of-memory report */
  VF_PROBE_ERROR,   /* failed otherwise: the search stops */
  VF_PROBE_TIMEOUT, /* still running at the time limit: counts as fitting */
};

/* "ok", "oom", "error", "timeout". */
const char *vf_probe_outcome_name(enum vf_probe_outcome o);

struct vf_probe {
  uint64_t min, max;
  uint64_t start;    /* the first batch */
  uint64_t fit;      /* largest batch that fitted; 0: none yet */
  uint64_t oom;      /* smallest batch that ran out of memory; 0: none yet */
  uint64_t step;     /* distance of the next step out from the one side known so far */
  unsigned launches;
  bool stopped;      /* a launch failed for another reason than memory */
};

/* Searches [min, max] (1 <= min <= max). hint: a batch expected to be close to the answer
 * (clamped into the range), or 0 for none. With a hint the search starts there and steps out
 * by an eighth of it, doubling each step; without, it starts at min and doubles. Once a fit
 * and an out-of-memory batch bracket the answer, it bisects. VF_EINVAL on a bad range. */
int vf_probe_init(struct vf_probe *p, uint64_t min, uint64_t max, uint64_t hint);

/* The batch to launch next, never one launched before and always in [min, max]; 0 when the
 * search is over. */
uint64_t vf_probe_next(const struct vf_probe *p);

/* The outcome of launching batch, which must be what vf_probe_next() proposed (VF_EINVAL
 * otherwise). */
int vf_probe_record(struct vf_probe *p, uint64_t batch, enum vf_probe_outcome o);

/* The largest batch that fitted; 0 when none did (yet). */
static inline uint64_t vf_probe_result(const struct vf_probe *p) { return p->fit; }

/* The largest micro batch in [min, max] whose estimated device peak fits s->capacity_bytes
 * (bisection over vf_estimate, which rises with the batch); s->batch is ignored. *out is 0
 * when even min does not fit. VF_EINVAL without a capacity; vf_estimate's errors. Pure. */
int vf_estimate_max_batch(const struct vf_model *m, const struct vf_setup *s,
                          const struct vf_profile *prof, const struct vf_alloc_conf *alloc,
                          uint64_t min, uint64_t max, uint64_t *out, struct vf_diag *d);

#endif

/* Finding the largest micro batch that fits by launching the real training command: the
 * search as a pure state machine (the caller runs the launches), and the estimator's own
 * largest fitting batch to start it from. */
#ifndef VRAMFIT_PROBE_H
#define VRAMFIT_PROBE_H

#include <stdbool.h>
#include <stdint.h>

#include "vramfit/api.h"
#include "vramfit/error.h"
#include "vramfit/estimate.h"

enum vf_probe_outcome {
  VF_PROBE_OK,      /* exited 0 */
  VF_PROBE_OOM,     /* failed with an out-of-memory report */
  VF_PROBE_ERROR,   /* failed otherwise: the search stops */
  VF_PROBE_TIMEOUT, /* still running at the time limit: counts as fitting */
};

/* "ok", "oom", "error", "timeout". */
VF_API const char *vf_probe_outcome_name(enum vf_probe_outcome o);

#define VF_PROBE_MAX_POINTS 64

/* A launch that fitted, with the peak NVML measured for it. */
struct vf_probe_point {
  uint64_t batch, peak_bytes;
};

/* How the next batch was chosen. */
enum vf_probe_move {
  VF_PROBE_START,     /* the first launch: the hint, else min */
  VF_PROBE_PREDICTED, /* where the peaks fitted so far cross the ceiling (or the middle of
                       * the batches their noise band leaves open) */
  VF_PROBE_APPROACH,  /* the bottom of a band much wider than the points are spread, or
                       * halfway there while the points show no bend */
  VF_PROBE_CONFIRM,   /* just past the largest fit, where the band puts the answer */
  VF_PROBE_BISECT,    /* the middle of the bracket: the peaks cannot steer (or did not) */
  VF_PROBE_STEP,      /* stepping out from the one side known, doubling (no peaks) */
};

/* The estimate's peak(batch) near its largest fitting batch: fixed + slope b + bend b^2 bytes
 * (bend 0: a line; slope 0: no estimate). */
struct vf_probe_prior {
  double fixed, slope, bend;
};

/* Where to take the estimates the prior is fitted to, for an estimate whose largest fitting
 * batch is hint (>= 1): three batches (a half, three quarters and all of the hint), or two
 * when the hint is too small for three distinct ones; returns how many. */
VF_API unsigned vf_probe_prior_batches(uint64_t hint, uint64_t batches[3]);

/* The prior through the estimated peaks at those batches (n 2 or 3): a parabola through three
 * where they bend upwards and it rises from no samples, else the line through the first and
 * the last. slope 0 when the estimates do not grow. */
VF_API void vf_probe_prior_fit(const uint64_t batches[3], const uint64_t peaks[3], unsigned n,
                               struct vf_probe_prior *out);

struct vf_probe {
  uint64_t min, max;
  uint64_t start;    /* the first batch */
  uint64_t fit;      /* largest batch that fitted; 0: none yet */
  uint64_t oom;      /* smallest batch that ran out of memory; 0: none yet */
  uint64_t step;     /* distance of the next step out from the one side known so far */
  unsigned launches;
  bool stopped;      /* a launch failed for another reason than memory */
  /* Steering by measured peaks (vf_probe_steer): */
  uint64_t ceiling;      /* the most a launch can hold: the GPU's free memory; 0: unknown
                          * (no steering) */
  uint64_t revealed;     /* the highest peak an out-of-memory launch reached; 0: none */
  uint64_t revealed_least; /* the lowest such peak; 0: none */
  struct vf_probe_prior prior; /* the estimate's curve; slope 0: none, fixed 0: unknown */
  struct vf_probe_point points[VF_PROBE_MAX_POINTS];
  unsigned npoints;
  bool overshot;         /* the last launch was a prediction that ran out of memory */
  bool predicted;        /* the last launch was a prediction */
  uint64_t reach;        /* how far the next confirmation goes past the largest fit; 0: one */
};

/* Searches [min, max] (1 <= min <= max). hint: a batch expected to be close to the answer
 * (clamped into the range), or 0 for none. VF_EINVAL on a bad range. Without peaks: with a
 * hint the search starts there and steps out by an eighth of it, doubling each step; without,
 * it starts at min and doubles; once a fit and an out-of-memory batch bracket the answer, it
 * bisects. */
VF_API int vf_probe_init(struct vf_probe *p, uint64_t min, uint64_t max, uint64_t hint);

/* Steers the search by measured peaks: ceiling_bytes is what a launch may hold (the free
 * memory of the GPU the runs get); prior the estimate's curve near its largest fitting batch
 * (NULL, or slope 0: none; fixed 0: its bytes at no samples unknown). From then on every
 * launch that fits with a peak adds a point; peak(batch) is fitted to the points (one point:
 * the estimate's curve with its batch-dependent part scaled to pass through it where the
 * scale is within an eighth of 1, else the estimate's curve moved to pass through it, else
 * the line through it and the origin; a line; a parabola where well-spread points bend
 * upwards beyond NVML's noise) with a band (each peak may be off by NVML's noise, the
 * estimate's growth by an eighth). The answer lies between where the top and the bottom of
 * the band cross the ceiling; the next launch is where the curve itself crosses it, or the
 * bottom of a band much wider than the points are spread, and the launch just past the
 * largest fit where the band puts the answer there (none where the peaks settle that it runs
 * out of memory: vf_probe_settled). A launch that runs out of memory more
 * than 256 MiB short of the ceiling, or where the band puts it under it, makes the ceiling
 * what the launches reached plus up to 256 MiB; a curve contradicted even by that, a line
 * overshooting from points that show no bend, or peaks that did not help within twice
 * bisection's launches leave the next launch to bisection. Without peaks (NVML saw nothing)
 * the search is as without steering. */
VF_API void vf_probe_steer(struct vf_probe *p, uint64_t ceiling_bytes, const struct vf_probe_prior *prior);

/* The batch to launch next, never one launched before and always in [min, max]; 0 when the
 * search is over. move (may be NULL) says why. */
VF_API uint64_t vf_probe_next(const struct vf_probe *p, enum vf_probe_move *move);

/* The outcome of launching batch, which must be what vf_probe_next() proposed (VF_EINVAL
 * otherwise), with the peak NVML measured (0: unknown). */
VF_API int vf_probe_record(struct vf_probe *p, uint64_t batch, enum vf_probe_outcome o, uint64_t peak_bytes);

/* The peak the points so far predict for batch; 0 when they cannot (fewer than one point,
 * or no steering). */
VF_API uint64_t vf_probe_predict(const struct vf_probe *p, uint64_t batch);

/* Whether the search is over without launching the batch past its answer because the
 * measured peaks settle it: a curve fitted to two or more of them (never the estimate's
 * alone) puts even the bottom of its noise band there above what a launch can surely hold
 * (the GPU's free memory, and less than the curve's top at a batch that ran out of memory).
 * Then *batch is that batch, *predicted its predicted peak and *limit that hold, in bytes. */
VF_API bool vf_probe_settled(const struct vf_probe *p, uint64_t *batch, uint64_t *predicted, uint64_t *limit);

/* "start", "predicted", "confirm", "bisect", "step". */
VF_API const char *vf_probe_move_name(enum vf_probe_move m);

/* The largest batch that fitted; 0 when none did (yet). */
static inline uint64_t vf_probe_result(const struct vf_probe *p) { return p->fit; }

/* What to train with once the search is over: the largest fit is the boundary, and a run at
 * the boundary has no room for a longer batch, a later evaluation or another process. */
struct vf_probe_advice {
  uint64_t batch;        /* the largest batch up to the largest fit whose peak, grown by the
                          * margin, the GPU still holds; 0 when nothing fitted */
  uint64_t accumulation; /* micro batches per optimizer step: 1 without a target */
  uint64_t peak_bytes;   /* the peak the measured peaks put at batch; 0: no peaks */
  uint64_t limit_bytes;  /* what a launch can hold, which the margin is kept under; 0: no peaks */
  bool within_margin;    /* false when even batch 1 leaves less than the margin (batch is 1) */
};

/* The advice for a search that is over, with margin (a share of the peak, >= 0) and target,
 * the effective batch to keep (batch x accumulation; 0: none). Where peaks were measured,
 * batch is the largest whose peak (the fitted curve) times 1 + margin stays under what a
 * launch can hold; without them the peak is taken to grow in proportion to the batch: the
 * largest fit divided by 1 + margin. With a target, accumulation is the fewest micro
 * batches that reach it at that batch, and batch then the smallest that reaches it at that
 * accumulation: batch x accumulation is the target, or above it by less than accumulation. */
VF_API void vf_probe_advise(const struct vf_probe *p, double margin, uint64_t target, struct vf_probe_advice *out);

/* Whether the measured peaks did not grow with the batch: two or more fits at least four
 * times apart whose peaks differ by less than NVML's noise (a command that ignores the
 * batch it is given). *low and *high are the smallest and the largest of those fits. */
VF_API bool vf_probe_flat(const struct vf_probe *p, struct vf_probe_point *low, struct vf_probe_point *high);

/* The largest micro batch in [min, max] whose estimated device peak fits s->capacity_bytes
 * (bisection over vf_estimate, which rises with the batch); s->batch is ignored. *out is 0
 * when even min does not fit. VF_EINVAL without a capacity; vf_estimate's errors. Pure. */
VF_API int vf_estimate_max_batch(const struct vf_model *m, const struct vf_setup *s,
                                 const struct vf_profile *prof, const struct vf_alloc_conf *alloc,
                                 uint64_t min, uint64_t max, uint64_t *out, struct vf_diag *d);

#endif

/* Measurements that correct estimates: the batch-dependent part of an estimate, scaled by
 * what a run of the same setup measured (`vramfit estimate --calibrate`). */
#include <math.h>

#include "vramfit/history.h"

uint64_t vf_estimate_batch_part(const struct vf_estimate *e) {
  return e->by_category[VF_CAT_ACTIVATIONS] + e->by_category[VF_CAT_TEMPORARIES];
}

int vf_calibration_ratio(const struct vf_estimate *at_measured, uint64_t measured_device_bytes,
                         double *ratio) {
  uint64_t part = vf_estimate_batch_part(at_measured), rest = at_measured->device_peak - part;
  if (!part || measured_device_bytes <= rest) return VF_ERANGE;
  *ratio = (double)(measured_device_bytes - rest) / (double)part;
  return 0;
}

static uint64_t scaled(uint64_t bytes, double ratio) { return (uint64_t)llround((double)bytes * ratio); }

/* Adds delta (which may be negative) to a peak, never below zero. */
static void shift(uint64_t *peak, int64_t delta) {
  *peak = delta < 0 && (uint64_t)-delta > *peak ? 0 : (uint64_t)((int64_t)*peak + delta);
}

void vf_estimate_calibrate(struct vf_estimate *e, double ratio) {
  uint64_t *act = &e->by_category[VF_CAT_ACTIVATIONS], *tmp = &e->by_category[VF_CAT_TEMPORARIES];
  uint64_t before = *act + *tmp;
  *act = scaled(*act, ratio);
  *tmp = scaled(*tmp, ratio);
  int64_t delta = (int64_t)(*act + *tmp) - (int64_t)before;
  shift(&e->allocated_peak, delta);
  shift(&e->reserved_peak, delta);
  shift(&e->device_peak, delta);
}

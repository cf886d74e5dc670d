/* The range of an estimate from its group's measured spread (vramfit/uncertainty.h). */
#include <math.h>
#include <string.h>

#include "vramfit/uncertainty.h"

/* The narrowest range: measured peaks differ by about this much from run to run of the
 * same setup (seeds, library versions), however good the estimator's record. */
#define RANGE_FLOOR 0.01

static const char *const kind_names[VF_PEAK_COUNT] = {"allocated", "reserved", "device"};
static const char *const class_names[VF_CLASS_COUNT] = {"full", "lora", "qlora", "adapter"};

const char *vf_peak_kind_name(enum vf_peak_kind k) { return k < VF_PEAK_COUNT ? kind_names[k] : "unknown"; }

const char *vf_method_class_name(enum vf_method_class c) {
  return c < VF_CLASS_COUNT ? class_names[c] : "unknown";
}

int vf_method_class_parse(const char *name, enum vf_method_class *out) {
  for (int c = 0; c < VF_CLASS_COUNT; c++)
    if (strcmp(name, class_names[c]) == 0) return *out = (enum vf_method_class)c, 0;
  return VF_ENOTFOUND;
}

enum vf_method_class vf_setup_class(const struct vf_setup *s) {
  switch (s->method) {
  case VF_METHOD_FULL: return VF_CLASS_FULL;
  case VF_METHOD_ADAPTER:
  case VF_METHOD_ADAPTER_V2: return VF_CLASS_ADAPTER;
  default: return vf_setup_quant(s) == VF_QUANT_NONE ? VF_CLASS_LORA : VF_CLASS_QLORA;
  }
}

/* bytes, rounded by round_fn, saturating where the double leaves uint64_t's range. */
static uint64_t to_bytes(double bytes, double (*round_fn)(double)) {
  double r = round_fn(bytes);
  if (!(r >= 0)) return 0;
  return r >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)r;
}

struct vf_range vf_range_of(uint64_t point, const struct vf_spread *s) {
  double over = fmax(s->high, RANGE_FLOOR), under = fmin(s->low, -RANGE_FLOOR), p = (double)point;
  struct vf_range r = {to_bytes(p / (1 + over), floor),
                       1 + under > 0 ? to_bytes(p / (1 + under), ceil) : UINT64_MAX};
  /* the doubles lose the last bits of peaks above 2^53 bytes: keep the point inside anyway */
  if (r.low > point) r.low = point;
  if (r.high < point) r.high = point;
  return r;
}

/* A distribution of sample lengths puts the reserved peak where the replayed batches left
 * it; the same batches in another order (reserved_worst) can leave it higher, so the
 * reserved and device ranges reach that far at least. */
static void reach_worst(const struct vf_estimate *e, struct vf_ranges *out) {
  if (e->reserved_worst <= e->reserved_peak) return;
  uint64_t more = e->reserved_worst - e->reserved_peak;
  if (out->kind[VF_PEAK_RESERVED].high < e->reserved_worst) out->kind[VF_PEAK_RESERVED].high = e->reserved_worst;
  if (out->kind[VF_PEAK_DEVICE].high < e->device_peak + more) out->kind[VF_PEAK_DEVICE].high = e->device_peak + more;
}

/* Where the replay filled the GPU and went on by freeing the allocator's cache, reserved
 * memory cannot go past what the GPU leaves the allocator: an estimator error that leaves
 * the live tensors within it is caught by the same release. Live tensors beyond it fail. */
static void within_the_gpu(const struct vf_estimate *e, struct vf_ranges *out) {
  uint64_t cap = e->allocator_capacity;
  if (!cap || !e->cache_releases || e->out_of_memory || out->kind[VF_PEAK_ALLOCATED].high > cap) return;
  if (out->kind[VF_PEAK_RESERVED].high > cap) out->kind[VF_PEAK_RESERVED].high = cap;
  uint64_t device = cap + e->context;
  if (out->kind[VF_PEAK_DEVICE].high > device) out->kind[VF_PEAK_DEVICE].high = device;
}

void vf_estimate_ranges(const struct vf_estimate *e, const struct vf_uncertainty *u, struct vf_ranges *out) {
  const uint64_t point[VF_PEAK_COUNT] = {e->allocated_peak, e->reserved_peak, e->device_peak};
  for (int k = 0; k < VF_PEAK_COUNT; k++) out->kind[k] = vf_range_of(point[k], &u->kind[k]);
  reach_worst(e, out);
  within_the_gpu(e, out);
}

const struct vf_uncertainty *vf_uncertainty_for(const struct vf_uncertainty_table *t, const struct vf_setup *s) {
  return &t->by_class[vf_setup_class(s)];
}

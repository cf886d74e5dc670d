/* The estimator's measured spread per group of similar setups: what data/uncertainty.json
 * holds, computed from the estimator's errors on measured cases (bench/spread writes it).
 *
 * Sources of errors (est - meas) / meas:
 *   allocated  max_memory_allocated: the traced corpus and the published allocated cases;
 *   replayed   max_memory_reserved of the traced events replayed through vramfit's own
 *              allocator model: the event model's misses as they move reserved;
 *   reserved   max_memory_reserved of published runs: the allocator model's misses too;
 *   device     nvidia-smi of published runs.
 * Each source's spread in a group is its errors' 5th and 95th percentiles (nearest rank:
 * the minimum and maximum below 20 cases). A group with fewer than 5 cases of a source takes
 * that source from the framework's whole group, and that from every setup's; no case at
 * all: no error (0, 0). The three kinds:
 *   allocated = allocated;
 *   reserved  = the envelope of allocated and replayed (the event model), compounded with
 *               reserved ((1 + a)(1 + b) - 1 at each end): the published reserved errors
 *               hold their runs' event-model misses too, so these count twice: on the
 *               safe side;
 *   device    = the envelope of reserved and device: a device peak is a reserved peak plus
 *               a CUDA context of known size, so it errs no more than reserved, relatively,
 *               unless the context does: the published device cases say by how much. */
#ifndef VF_CORE_SPREAD_H
#define VF_CORE_SPREAD_H

#include <stddef.h>
#include <stdio.h>

#include "vramfit/uncertainty.h"

enum spread_source { SOURCE_ALLOCATED, SOURCE_REPLAYED, SOURCE_RESERVED, SOURCE_DEVICE,
                        SOURCE_COUNT };
/* "allocated", "replayed", "reserved", "device". */
const char *spread_source_name(enum spread_source s);

/* Percentile of the low end (the high end mirrors it) and the fewest cases a group needs. */
enum { VF_SPREAD_PERCENTILE = 5, VF_SPREAD_MIN_CASES = 5 };

/* "All frameworks" and "all classes" in a group. */
#define VF_SPREAD_ALL "all"
#define VF_SPREAD_ALL_CLASSES VF_CLASS_COUNT

/* One measured case. */
struct spread_case {
  char framework[32];
  enum vf_method_class cls;
  enum spread_source source;
  double error;
};

/* One source's spread in a group: from the cases of group `from` ("" when none). */
struct spread_part {
  struct vf_spread spread;
  size_t cases;
  char from[48];
};

struct spread_group {
  char framework[32];  /* VF_SPREAD_ALL: every framework */
  int cls;             /* enum vf_method_class, or VF_SPREAD_ALL_CLASSES */
  struct spread_part part[SOURCE_COUNT];
  struct vf_uncertainty u; /* the three kinds, composed from the parts */
};

/* The groups the cases support: every setup's, then per framework (by name) the whole
 * framework's and each class with a case. *out is malloc'ed. 0 or VF_ENOMEM. Pure. */
int spread_groups(const struct spread_case *cases, size_t n, struct spread_group **out, size_t *n_out);

/* The spread of n errors (sorted in place): the percentiles above; (0, 0) for none. */
struct vf_spread spread_of(double *errors, size_t n);

/* ---- Writer (src/io) ---- */
/* Writes the groups as data/uncertainty.json, with notes saying how they were made. 0 or
 * VF_EIO. */
int uncertainty_write(FILE *f, const struct spread_group *groups, size_t n);

#endif

/* Estimates against measured peaks: shared by bench/accuracy (which prints the figures) and
 * tests/unit/test_accuracy (which fails when they break the estimator's targets).
 *
 * Two corpora: shared/calibration/published.tsv (id, model, args, measured_mib, kind, ...;
 * kind says which peak was measured) and the traced corpus, bench/traced/NAME.tsv (id, model,
 * family, framework, framework_version, torch, args, allocated_bytes, reserved_bytes, phase,
 * seconds: max_memory_allocated, and reserved as the traced events replayed through vramfit's
 * allocator model). Each case runs `VRAMFIT estimate MODEL ARGS --json`: args holds every
 * estimate option the case needs. */
#ifndef VF_TEST_ACCURACY_H
#define VF_TEST_ACCURACY_H

#include <stdbool.h>
#include <stddef.h>

struct acc_case {
  char id[64], model[128], kind[16], args[2048];
  double measured;  /* bytes */
  double estimated; /* bytes; < 0 when vramfit gave no estimate */
  char release[64]; /* published cases: the --framework NAME@RELEASE it was measured with */
  char family[32];  /* traced cases: the model's model_type (qwen2, gemma2, ...) */
  char lengths[16]; /* the batches' lengths the estimate replayed (setup.lengths: fixed, varied) */
};

struct acc_set {
  struct acc_case *v;
  size_t n;
};

/* Appends the rows of a corpus file; 0, or -1 with err filled (unreadable file, bad row).
 * Published cases get the framework and PyTorch release they were measured with from
 * bench/calibration-releases.tsv (ACC_RELEASES_FILE); a case it has no row for is an error. */
int acc_read_published(const char *path, struct acc_set *s, char *err, size_t size);
int acc_read_traced(const char *path, struct acc_set *s, char *err, size_t size);
/* Every *.tsv of dir, sorted by name (none: 0 with the set unchanged). */
int acc_read_traced_dir(const char *dir, struct acc_set *s, char *err, size_t size);
/* The same files' replayed reserved peaks, as cases of kind "replayed" (compared with
 * peak.reserved_bytes); rows without one are left out. */
int acc_read_replayed_dir(const char *dir, struct acc_set *s, char *err, size_t size);
/* Splits estimated "replayed" cases into "replayed fixed" and "replayed varied" by the
 * lengths the estimate replayed: with plain varied lengths the tracer runs a shorter batch
 * then full ones, the estimate batches drawn from an assumed spread, so only fixed lengths
 * compare the same batches. */
void acc_split_replayed(struct acc_set *s);
void acc_free(struct acc_set *s);

/* The word after flag in the case's args ("--method" -> "lora") into out; NULL when the
 * args do not give flag. */
const char *acc_arg(const struct acc_case *c, const char *flag, char *out, size_t size);

/* Runs every case through the binary and fills `estimated`. */
void acc_estimate(const char *vramfit, struct acc_set *s);
/* The relative error (est - meas) / meas; negative: underestimated (the run would OOM). */
double acc_error(const struct acc_case *c);

/* The figures of one kind ("allocated", "reserved", "device", ...). */
struct acc_stats {
  int n, failed;
  double median, p90;  /* of |error| */
  double worst_under;  /* the most negative error, 0 when none is under */
  const char *worst_id; /* the case of worst_under */
  int under10;         /* cases underestimated by more than 10% */
};
void acc_stats_of(const struct acc_set *s, const char *kind, struct acc_stats *out);
/* The kinds the set holds, in first-seen order; returns how many (at most max). */
size_t acc_kinds(const struct acc_set *s, const char **out, size_t max);

/* Targets: median |error|, 90th percentile (< 0: not checked), deepest underestimate. */
struct acc_limits {
  double median, p90, under;
};
/* Whether the figures meet the limits; when not, why says which and by how much. */
bool acc_meets(const struct acc_stats *st, const struct acc_limits *lim, char *why, size_t size);

#endif

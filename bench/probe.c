/* Launches the batch search of 'vramfit probe' (vf_probe_*) spends, over simulated trainers,
 * for every boundary from 1 to 4096.
 *
 * A trainer's peak is fixed memory (a fifth of the GPU) plus a batch-dependent part that is
 * linear, or a quarter quadratic at the boundary; the part is scaled so that the largest
 * batch that fits is exactly the boundary. Variants: peaks reported exactly, with up to
 * 20 MiB of noise either way, with fragmentation (out of memory 5% below where the line
 * reaches the ceiling), and no peaks at all (NVML unavailable: doubling and bisecting). An
 * out-of-memory launch reports what filled the GPU, less up to 256 MiB. The estimate's
 * variants start from its largest batch and its curve there (fitted to its peaks where
 * `vramfit probe` takes them, by the same library call), the estimate being exact or off by
 * 5% or 10% in its batch-dependent part.
 *
 * Usage: bench_probe. Exits 1 when a search finds a wrong answer. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "vramfit.h"

#define GIB 1073741824.0
#define CAPACITY (80 * GIB)
#define FIXED (16 * GIB)
#define MAX_BATCH 4096
#define NOISE (20 * 1048576.0) /* one of the 20 MiB segments PyTorch reserves large blocks in */

struct trainer {
  const char *name;
  double quadratic; /* share of the batch-dependent part at the boundary that is quadratic */
  double noise;     /* the reported peaks are off by up to this many bytes either way */
  double frag;      /* out of memory this share below where the line reaches the ceiling */
  bool peaks;       /* NVML reports peaks */
};

struct sim {
  const struct trainer *t;
  uint64_t boundary; /* the answer */
  double line_at;    /* where the (unfragmented) peak reaches the ceiling */
  uint32_t seed;
};

/* The true peak of batch b: FIXED + the batch-dependent part reaching the ceiling at line_at. */
static double true_peak(const struct sim *s, double b) {
  double x = b / s->line_at, q = s->t->quadratic;
  return FIXED + (CAPACITY - FIXED) * ((1 - q) * x + q * x * x);
}

static double noise(struct sim *s) {
  s->seed = s->seed * 1664525u + 1013904223u;
  return ((double)(s->seed >> 8) / (double)(1u << 24)) * 2 - 1;
}

/* An out-of-memory launch held what filled the GPU (or the fragmented part it could use) less
 * what it failed to get: up to OOM_SHORT. */
#define OOM_SHORT (256 * 1048576.0)

static enum vf_probe_outcome launch(struct sim *s, uint64_t b, uint64_t *peak) {
  bool fits = b <= s->boundary;
  double usable = s->t->frag ? true_peak(s, (double)s->boundary + 0.5) : CAPACITY;
  double p = fits ? true_peak(s, (double)b) + s->t->noise * noise(s) : usable - OOM_SHORT * (noise(s) + 1) / 2;
  *peak = s->t->peaks ? (uint64_t)p : 0;
  return fits ? VF_PROBE_OK : VF_PROBE_OOM;
}

static void sim_init(struct sim *s, const struct trainer *t, uint64_t boundary) {
  *s = (struct sim){t, boundary, 0, (uint32_t)boundary * 2654435761u};
  /* The line reaches the ceiling half a batch past the boundary (or past it by frag). */
  s->line_at = t->frag ? ((double)boundary + 0.5) / (1 - t->frag) : (double)boundary + 0.5;
}

/* The estimate's peak at batch b, off by err in its batch-dependent part. */
static double estimated_peak(const struct sim *s, double err, double b) {
  return (true_peak(s, b) - FIXED) * (1 + err) + FIXED;
}

/* The estimate, off by err: its largest batch, and its curve there (prior) fitted to its
 * peaks at the batches `vramfit probe` takes them at. */
static uint64_t estimate(const struct sim *s, double err, struct vf_probe_prior *prior) {
  double lo = 1, hi = MAX_BATCH + 1;
  *prior = (struct vf_probe_prior){0};
  if (estimated_peak(s, err, 1) > CAPACITY) return 0;
  while (hi - lo > 1) {
    double mid = floor((lo + hi) / 2);
    if (estimated_peak(s, err, mid) <= CAPACITY) lo = mid;
    else hi = mid;
  }
  uint64_t batches[3], peaks[3];
  unsigned n = vf_probe_prior_batches((uint64_t)lo, batches);
  for (unsigned i = 0; i < n; i++) peaks[i] = (uint64_t)estimated_peak(s, err, (double)batches[i]);
  vf_probe_prior_fit(batches, peaks, n, prior);
  return (uint64_t)lo;
}

/* Launches to find the boundary; 0 when the search got it wrong. */
static unsigned search(const struct trainer *t, uint64_t boundary, bool hinted, double err) {
  struct sim s;
  sim_init(&s, t, boundary);
  struct vf_probe_prior prior = {0};
  uint64_t hint = hinted ? estimate(&s, err, &prior) : 0;
  struct vf_probe p;
  vf_probe_init(&p, 1, MAX_BATCH, hint);
  vf_probe_steer(&p, (uint64_t)CAPACITY, &prior);
  for (uint64_t b; (b = vf_probe_next(&p, NULL));) {
    uint64_t peak;
    enum vf_probe_outcome o = launch(&s, b, &peak);
    vf_probe_record(&p, b, o, peak);
    if (p.launches > 64) return 0;
  }
  return vf_probe_result(&p) == boundary ? p.launches : 0;
}

#define TYPICAL 64 /* micro batches up to this are the common case */

struct tally {
  double sum, typical;
  unsigned most;
  bool wrong;
};

static void row(const char *trainer, const char *start, const struct tally *t) {
  printf("  %-26s %-18s %6.2f %5u %10.2f%s\n", trainer, start, t->sum / MAX_BATCH, t->most, t->typical / TYPICAL,
         t->wrong ? "  WRONG ANSWERS" : "");
}

static bool run(const struct trainer *t, const char *start, bool hinted, double err) {
  struct tally y = {0};
  for (uint64_t boundary = 1; boundary <= MAX_BATCH; boundary++) {
    unsigned n = search(t, boundary, hinted, err);
    if (!n) y.wrong = true;
    y.sum += n;
    if (boundary <= TYPICAL) y.typical += n;
    if (n > y.most) y.most = n;
  }
  row(t->name, start, &y);
  return !y.wrong;
}

int main(void) {
  static const struct trainer trainers[] = {
      {"linear", 0, 0, 0, true},           {"quadratic (25% at T)", 0.25, 0, 0, true},
      {"linear, noisy peaks", 0, NOISE, 0, true}, {"quadratic, noisy peaks", 0.25, NOISE, 0, true},
      {"linear, fragmentation 5%", 0, 0, 0.05, true}, {"linear, no peaks (no NVML)", 0, 0, 0, false},
  };
  static const struct {
    const char *name;
    bool hinted;
    double err;
  } starts[] = {{"no estimate", false, 0}, {"estimate exact", true, 0}, {"estimate 5% high", true, 0.05},
                {"estimate 10% low", true, -0.10}};
  bool ok = true;
  printf("launches to find the largest batch that fits: mean and most over every boundary in 1..%d, mean over 1..%d\n",
         MAX_BATCH, TYPICAL);
  printf("  %-26s %-18s %6s %5s %10s\n", "trainer", "start", "mean", "most", "mean<=64");
  for (size_t i = 0; i < sizeof trainers / sizeof *trainers; i++)
    for (size_t k = 0; k < sizeof starts / sizeof *starts; k++)
      ok = run(&trainers[i], starts[k].name, starts[k].hinted, starts[k].err) && ok;
  return ok ? 0 : 1;
}

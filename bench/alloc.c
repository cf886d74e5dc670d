/* Allocator replay speed: a synthetic 7B-like training step (weights, two steps of
 * forward activations, backward, gradients and Adam states, with temporaries and small
 * tensors) replayed through the caching-allocator model many times, as the estimator does.
 * Usage: bench_alloc [seconds]   (default 2 per configuration) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "vramfit.h"

#define MiB (1024ull * 1024ull)
#define LAYERS 32
#define MAX_EVENTS 8192

struct event {
  uint64_t bytes; /* 0: free the tensor in slot */
  uint32_t slot;
};

struct trace {
  struct event ev[MAX_EVENTS];
  size_t n;
  uint32_t slots;
};

static uint32_t alloc_ev(struct trace *t, uint64_t bytes) {
  t->ev[t->n++] = (struct event){.bytes = bytes, .slot = t->slots};
  return t->slots++;
}

static void free_ev(struct trace *t, uint32_t slot) {
  t->ev[t->n++] = (struct event){.bytes = 0, .slot = slot};
}

/* A short-lived tensor: allocated and freed around one kernel. */
static void temp_ev(struct trace *t, uint64_t bytes) { free_ev(t, alloc_ev(t, bytes)); }

static void forward_layer(struct trace *t, uint32_t saved[LAYERS][8], int l) {
  const uint64_t act = 4ull * 2048 * 4096 * 2, mlp = 4ull * 2048 * 11008 * 2;
  saved[l][0] = alloc_ev(t, act);          /* norm output */
  saved[l][1] = alloc_ev(t, act);          /* q */
  saved[l][2] = alloc_ev(t, act / 4);      /* k (GQA) */
  saved[l][3] = alloc_ev(t, act / 4);      /* v */
  saved[l][4] = alloc_ev(t, 4ull * 32 * 2048 * 4); /* softmax lse */
  temp_ev(t, act);                         /* attention output before o_proj */
  saved[l][5] = alloc_ev(t, mlp);          /* gate */
  saved[l][6] = alloc_ev(t, mlp);          /* up */
  temp_ev(t, mlp);                         /* silu(gate) * up */
  saved[l][7] = alloc_ev(t, act);          /* residual */
  for (int i = 0; i < 6; i++) temp_ev(t, 4096 * 2 * (uint64_t)(i + 1)); /* small scalars */
}

static void backward_layer(struct trace *t, uint32_t saved[LAYERS][8], uint32_t *grads,
                           bool first_step, int l) {
  const uint64_t act = 4ull * 2048 * 4096 * 2, mlp = 4ull * 2048 * 11008 * 2;
  uint32_t d_mlp = alloc_ev(t, mlp);
  temp_ev(t, mlp);
  for (int i = 7; i >= 5; i--) free_ev(t, saved[l][i]);
  uint32_t d_act = alloc_ev(t, act);
  free_ev(t, d_mlp);
  temp_ev(t, act);
  for (int i = 4; i >= 0; i--) free_ev(t, saved[l][i]);
  free_ev(t, d_act);
  if (first_step) /* gradients live until the optimizer step, then stay cached */
    for (int i = 0; i < 9; i++)
      grads[l * 9 + i] = alloc_ev(t, i < 4 ? 32 * MiB : i < 7 ? 86 * MiB : 8192);
}

static void build(struct trace *t) {
  static uint32_t saved[LAYERS][8], grads[LAYERS * 9];
  for (int l = 0; l < LAYERS * 9; l++) alloc_ev(t, l % 9 < 4 ? 32 * MiB : l % 9 < 7 ? 86 * MiB : 8192);
  alloc_ev(t, 250 * MiB); /* embeddings */
  for (int step = 0; step < 2; step++) {
    uint32_t logits = 0;
    for (int l = 0; l < LAYERS; l++) forward_layer(t, saved, l);
    logits = alloc_ev(t, 4ull * 2048 * 32000 * 4);
    temp_ev(t, 4ull * 2048 * 32000 * 4);
    free_ev(t, logits);
    for (int l = LAYERS - 1; l >= 0; l--) backward_layer(t, saved, grads, step == 0, l);
    for (int l = 0; l < LAYERS * 9 && step == 0; l++) { /* Adam m and v in fp32 */
      uint64_t w = l % 9 < 4 ? 64 * MiB : l % 9 < 7 ? 172 * MiB : 16384;
      alloc_ev(t, w);
      alloc_ev(t, w);
    }
    for (int l = 0; l < LAYERS * 9; l++) temp_ev(t, l % 9 < 4 ? 32 * MiB : 4096); /* foreach */
  }
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int replay(struct vf_allocator *a, const struct trace *t, uint64_t *ids) {
  for (size_t i = 0; i < t->n; i++) {
    const struct event *e = &t->ev[i];
    int rc = e->bytes ? vf_allocator_malloc(a, e->bytes, 0, &ids[e->slot])
                      : vf_allocator_free(a, ids[e->slot]);
    if (rc) return rc;
  }
  return 0;
}

/* The fastest of many short batches: other work on the machine only slows batches down,
 * so the best one is the closest to the allocator's own cost. */
static int run(const char *name, const char *conf_text, const struct trace *t, double secs) {
  struct vf_alloc_conf conf;
  struct vf_diag d;
  struct vf_allocator a;
  uint64_t *ids = calloc(t->slots, sizeof *ids);
  if (!ids || vf_alloc_conf_parse(conf_text, &conf, &d) || vf_allocator_init(&a, &conf, 0)) {
    free(ids);
    fprintf(stderr, "bench_alloc: setup failed for %s\n", name);
    return 1;
  }
  const int batch = 20;
  double start = now(), best = 1e30;
  int rc = 0;
  while (!rc && now() - start < secs) {
    double t0 = now();
    for (int i = 0; i < batch && !rc; i++) {
      vf_allocator_reset(&a, &conf, 0);
      rc = replay(&a, t, ids);
    }
    double dt = (now() - t0) / batch;
    if (dt < best) best = dt;
  }
  struct vf_alloc_stats s;
  vf_allocator_stats(&a, &s);
  if (!rc)
    printf("%-22s %5zu events  %6.0f replays/s  %5.1f M events/s  %4.1f ns/event  "
           "peak reserved %.2f GiB (allocated %.2f GiB)\n",
           name, t->n, 1.0 / best, (double)t->n / best / 1e6, best / (double)t->n * 1e9,
           (double)s.peak_reserved / (1024.0 * MiB), (double)s.peak_allocated / (1024.0 * MiB));
  vf_allocator_cleanup(&a);
  free(ids);
  return rc != 0;
}

int main(int argc, char **argv) {
  double secs = argc > 1 ? atof(argv[1]) : 2.0;
  static struct trace t;
  build(&t);
  int bad = run("default", "", &t, secs);
  bad |= run("expandable_segments", "expandable_segments:True", &t, secs);
  bad |= run("max_split_size_mb:128", "max_split_size_mb:128", &t, secs);
  bad |= run("roundup_power2_div:4", "roundup_power2_divisions:4", &t, secs);
  return bad;
}

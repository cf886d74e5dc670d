/* How long vf_model_load takes for the largest catalogue model, llama-3.1-405b, from the
 * catalogue and from a checkpoint folder shaped like its Hub release (config.json and a
 * 30-shard model.safetensors.index.json; shards hold real headers over sparse data). The
 * folder load reads 31 files and adopts the checkpoint against the config's layout.
 * Given the vramfit binary it also times whole `vramfit inspect ... --json` processes.
 * Usage: bench_inspect [runs [VRAMFIT]]   (default 21 runs; prints medians in ms) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/data.h"
#include "st_writer.h"
#include "timing.h"
#include "vramfit.h"

#define MODEL "llama-3.1-405b"
#define SHARDS 30

/* Median wall time of vf_model_load(arg) over runs; the model's tensor and note counts. */
static int time_load(const char *arg, int runs, double *median, size_t *tensors, size_t *notes) {
  double *t = calloc((size_t)runs, sizeof *t);
  if (!t) return -1;
  for (int i = 0; i < runs; i++) {
    struct vf_model m;
    struct vf_diag d;
    vf_model_init(&m);
    double start = bench_now_ms();
    int rc = vf_model_load(&m, arg, &d);
    t[i] = bench_now_ms() - start;
    *tensors = m.n_tensors;
    *notes = m.n_notes;
    vf_model_cleanup(&m);
    if (rc) {
      fprintf(stderr, "bench_inspect: %s: %s\n", arg, d.msg);
      free(t);
      return -1;
    }
  }
  *median = bench_median(t, runs);
  free(t);
  return 0;
}

/* The Hub layout of MODEL in dir: its config.json and SHARDS safetensors shards. */
static int make_checkpoint(const char *dir) {
  struct vf_model m;
  struct vf_diag d;
  vf_model_init(&m);
  int rc = vf_model_load(&m, MODEL, &d);
  if (!rc) rc = vf_st_write_sharded(dir, m.tensors, m.n_tensors, SHARDS);
  vf_model_cleanup(&m);
  const char *config;
  size_t len;
  char path[4200];
  snprintf(path, sizeof path, "%s/config.json", dir);
  if (rc || data_get("models/" MODEL ".json", &config, &len) != 0) return -1;
  FILE *f = fopen(path, "w");
  rc = f && fwrite(config, 1, len, f) == len ? 0 : -1;
  if (f && fclose(f) != 0) rc = -1;
  data_release(config);
  return rc;
}

int main(int argc, char **argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 21;
  if (runs < 1) runs = 1;
  const char *base = getenv("TMPDIR");
  char dir[4096], cmd[4200];
  snprintf(dir, sizeof dir, "%s/vf-bench-inspect-XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(dir) || make_checkpoint(dir) != 0) {
    fprintf(stderr, "bench_inspect: cannot write the checkpoint in %s\n", dir);
    return 1;
  }
  double ms;
  size_t tensors, notes;
  int rc = time_load(MODEL, runs, &ms, &tensors, &notes);
  if (!rc)
    printf("vf_model_load %-34s %7.2f ms  (%zu tensors, median of %d)\n", MODEL " (catalogue)",
           ms, tensors, runs);
  if (!rc) rc = time_load(dir, runs, &ms, &tensors, &notes);
  if (!rc)
    printf("vf_model_load %-34s %7.2f ms  (%zu tensors, %zu notes, median of %d)\n",
           MODEL " (config + " "30-shard index)", ms, tensors, notes, runs);
  if (!rc && argc > 2) {
    char *catalogue[] = {argv[2], "inspect", MODEL, "--json", NULL};
    char *folder[] = {argv[2], "inspect", dir, "--json", NULL};
    printf("vramfit inspect %-32s %7.2f ms  (whole process, median of %d)\n", MODEL " --json",
           bench_process_ms(catalogue, runs), runs);
    printf("vramfit inspect %-32s %7.2f ms  (whole process, median of %d)\n",
           "30-shard folder --json", bench_process_ms(folder, runs), runs);
  }
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench_inspect: could not remove %s\n", dir);
  return rc ? 1 : 0;
}

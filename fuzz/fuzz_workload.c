/* libFuzzer target: the workload reader (src/io/workload_read.c) and the expressions it
 * compiles, on any bytes. A spec is read or refused with one line at file:line:col, never a
 * crash; an accepted spec's expressions evaluate (or report an overflow) at its knobs'
 * minimums, maximums and trace points. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vramfit.h"

static void evaluate(const struct vf_workload *w, const struct vf_wl_point *pt) {
  struct vf_wl_shape shape;
  struct vf_diag d;
  vf_diag_clear(&d);
  if (vf_workload_shape(w, pt, &shape, &d) != 0 && (!d.msg[0] || strchr(d.msg, '\n'))) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct vf_workload *w = malloc(sizeof *w);
  if (!w) return 0;
  vf_workload_init(w);
  struct vf_diag d;
  vf_diag_clear(&d);
  int rc = vf_workload_parse(w, (const char *)data, size, "workload.yaml", ".", &d);
  if (rc != 0 && (!d.msg[0] || strchr(d.msg, '\n') || strcmp(d.file, "workload.yaml") != 0 || d.line < 1)) abort();
  if (rc == 0) {
    if (w->batch < 0 || (size_t)w->batch >= w->n_knobs) abort();
    struct vf_wl_point lo = {{0}}, hi = {{0}};
    for (size_t k = 0; k < w->n_knobs; k++) lo.values[k] = w->knobs[k].min, hi.values[k] = w->knobs[k].max;
    evaluate(w, &lo);
    evaluate(w, &hi);
    for (size_t i = 0; i < w->n_points; i++) evaluate(w, &w->points[i]);
  }
  vf_workload_cleanup(w);
  free(w);
  return 0;
}

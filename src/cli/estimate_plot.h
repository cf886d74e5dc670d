/* `vramfit estimate --plot FILE.svg`: the replayed run's allocator figures, gathered from
 * vf_estimate_timeline()'s events and drawn by vf_plot_svg_write() (estimate_plot.c). */
#ifndef VF_CLI_ESTIMATE_PLOT_H
#define VF_CLI_ESTIMATE_PLOT_H

#include "cli/setup_opts.h"

struct estimate_plot {
  const char *path; /* NULL: no plot asked for */
  /* A pipeline's first and last stages are replayed one after the other as separate runs;
   * each is kept until the estimate says which one holds the peak. */
  struct vf_plot_point *points[2];
  size_t n[2], cap[2];
  bool oom;
};

void estimate_plot_init(struct estimate_plot *p, const char *path);
/* Records one event (a vf_timeline_fn's body). */
void estimate_plot_add(struct estimate_plot *p, const struct vf_timeline_event *e);
/* Draws the stage holding e's allocated peak to p->path. Returns an exit code, the
 * one-line error printed. */
int estimate_plot_write(const struct estimate_plot *p, const struct setup_request *r,
                        const struct setup_context *c, const struct vf_estimate *e);
void estimate_plot_cleanup(struct estimate_plot *p);

#endif

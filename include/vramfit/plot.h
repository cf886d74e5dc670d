/* The memory timeline of an estimated run drawn as an SVG image (`vramfit estimate --plot`):
 * allocated and reserved bytes event by event, the phases as labelled bands, the allocated
 * peak marked, the breakdown at the peak as a stacked bar, and the GPU's capacity. */
#ifndef VRAMFIT_PLOT_H
#define VRAMFIT_PLOT_H

#include <stddef.h>
#include <stdint.h>

#include "vramfit/api.h"
#include "vramfit/error.h"
#include "vramfit/estimate.h"

/* The allocator's figures right after one event of the run (struct vf_timeline_event). */
struct vf_plot_point {
  uint64_t allocated, reserved;
  uint32_t phase; /* enum vf_phase; bands are named by vf_phase_name() */
};

struct vf_plot {
  const char *title, *subtitle; /* any bytes: escaped, and invalid UTF-8 replaced */
  const struct vf_plot_point *points;
  size_t n_points;
  const struct vf_estimate *estimate; /* the breakdown at the peak */
  uint64_t capacity;                  /* the GPU's bytes; 0: no GPU given, no line */
  const char *gpu;                    /* its name for the line's label; NULL or "" for none */
};

/* A standalone SVG document, the same bytes for the same plot (the locale plays no part).
 * Runs of any length are drawn at one column per pixel with each column's lowest and
 * highest values, so the exact peak stays and the document stays small (< 300 KB).
 * *svg is NUL-terminated; free it with vf_free(). VF_ENOMEM. */
VF_API int vf_plot_svg(const struct vf_plot *p, char **svg, size_t *len);

/* Writes the document to path through a temporary file in the same folder renamed over it,
 * so a failed write leaves no partial file and an existing one intact. VF_EIO (d names the
 * file and why) or VF_ENOMEM. */
VF_API int vf_plot_svg_write(const struct vf_plot *p, const char *path, struct vf_diag *d);

#endif

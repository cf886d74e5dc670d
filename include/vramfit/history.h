/* The run history: every launch `vramfit probe` makes and every `vramfit watch -- CMD`, with
 * what was measured, and the plans `vramfit plan` made, each for its project. One SQLite database per user
 * and machine (history.sqlite3 under $XDG_STATE_HOME/vramfit/, default
 * ~/.local/state/vramfit/): transactions keep it whole when a writer crashes mid-write, and
 * the write-ahead log with a busy timeout lets several vramfit processes write at once. */
#ifndef VRAMFIT_HISTORY_H
#define VRAMFIT_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vramfit/api.h"
#include "vramfit/error.h"
#include "vramfit/estimate.h"

struct vf_history; /* an open store */

#define VF_HISTORY_FILE "history.sqlite3" /* the store's file in its folder */

/* One measured run. The strings of a run the store returns are the library's (vf_run_cleanup). */
struct vf_run {
  int64_t id;
  double when;                /* start, seconds since 1970 (UTC) */
  char source[8];             /* "probe" or "watch" */
  char *command;              /* as run, quoted as a shell would need it */
  char *setup;                /* the estimate's setup as canonical JSON; NULL when not known */
  uint64_t batch;             /* 0: not known (watch) */
  char outcome[16];           /* ok, oom, error, timeout (probe trials); ok, error, interrupted */
  int exit_code;              /* -1: none (timed out, still running when stopped) */
  uint64_t peak_device_bytes; /* the most the run's processes held on one GPU; 0: unknown */
  char gpu[96], gpu_uuid[96]; /* the GPU of the peak (or the run's); "" when none was seen */
  char driver[80];
  double seconds;
};

/* The store's folder: $XDG_STATE_HOME/vramfit when that is an absolute path, else
 * $HOME/.local/state/vramfit. VF_ENOTFOUND when neither variable says where. */
VF_API int vf_history_dir(char *buf, size_t size);

/* Opens the store in dir. create: makes the folder and the database when missing (for
 * writers); otherwise VF_ENOTFOUND when there is none yet (readers need not make one).
 * VF_EIO (d names the file and says why) when it cannot be opened or is not a store. */
VF_API int vf_history_open(const char *dir, bool create, struct vf_history **out, struct vf_diag *d);
VF_API void vf_history_close(struct vf_history *h);

/* Appends a run (id is ignored). VF_EIO (d says why). */
VF_API int vf_history_add(struct vf_history *h, const struct vf_run *r, struct vf_diag *d);

/* Frees the strings of a run the store returned. */
VF_API void vf_run_cleanup(struct vf_run *r);

/* The last limit runs (0: all), oldest first. *out is freed with vf_history_runs_free. */
VF_API int vf_history_list(struct vf_history *h, size_t limit, struct vf_run **out, size_t *n,
                           struct vf_diag *d);
VF_API void vf_history_runs_free(struct vf_run *runs, size_t n);

/* The measurement to compare an estimate of setup with: the latest run of that setup that
 * fitted (ok or timeout) with a known peak. A probe only ever launches above its largest
 * fit so far, so that is its session's largest batch that fitted. VF_ENOTFOUND when there is
 * none. Release out with vf_run_cleanup. */
VF_API int vf_history_measured(struct vf_history *h, const char *setup, struct vf_run *out,
                               struct vf_diag *d);

/* The project a path belongs to, as an absolute folder: the git work tree that holds it (the
 * nearest folder at or above it with a .git), else the path's own folder (the path itself
 * when it is a folder). Plans are kept for projects, so that a project's checks never meet
 * another project's plan. VF_EIO when the path cannot be resolved, VF_ERANGE when buf is too
 * small. */
VF_API int vf_history_project(const char *path, char *buf, size_t size);

/* Keeps a plan (`vramfit plan --json` output) with a label saying what it is for
 * ("llama-3.1-8b on a100-40gb") and the projects it was made for: made_in, the project of
 * the folder it was made in, and config, the project of the training config or workload it
 * was made of (NULL: none). */
VF_API int vf_history_save_plan(struct vf_history *h, const char *label, const char *json, const char *made_in,
                                const char *config, struct vf_diag *d);
/* The last plan kept for project (made in it, or of a config in it): its JSON and label
 * (both vf_free) and when it was kept. VF_ENOTFOUND when there is none (plans kept before
 * plans had projects belong to none). */
VF_API int vf_history_last_plan(struct vf_history *h, const char *project, char **json, char **label,
                                double *when, struct vf_diag *d);

/* ---- measurements that correct estimates (pure) ---- */

/* The part of an estimate that grows with the batch: the activations and temporaries live at
 * the peak. (Weights, gradients, optimizer states and the CUDA context do not.) */
VF_API uint64_t vf_estimate_batch_part(const struct vf_estimate *e);

/* How much the batch-dependent part really was: (measured device peak - the estimate's other
 * parts) / the estimate's batch-dependent part, for an estimate at the measured batch.
 * VF_ERANGE when the estimate has no batch-dependent part at its peak, or the measurement
 * lies below the rest of the estimate (nothing to scale). */
VF_API int vf_calibration_ratio(const struct vf_estimate *at_measured, uint64_t measured_device_bytes,
                                double *ratio);

/* Scales e's batch-dependent part by ratio: activations and temporaries, and the three peaks
 * by the same bytes, so that the breakdown still sums to the device peak. */
VF_API void vf_estimate_calibrate(struct vf_estimate *e, double ratio);

#endif

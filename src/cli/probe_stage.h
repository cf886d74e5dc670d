/* `vramfit probe --workload FILE --stage NAME`: a curriculum stage confirmed on the real
 * GPU. The workload is planned for the GPU, the stage's knobs ({n_positives}, ...) are filled
 * into the command once, and the search for the micro batch starts at the estimate's
 * largest at those knobs. */
#ifndef VF_CLI_PROBE_STAGE_H
#define VF_CLI_PROBE_STAGE_H

#include "cli/setup_opts.h"

struct probe_stage {
  char **cmd;               /* the command with the stage's knobs filled in */
  struct vf_wl_point point; /* the plan's values for the stage (batch included) */
  uint64_t planned;         /* the plan's micro batch, which the stage is confirmed at */
  uint64_t effective;       /* the plan's micro batch x accumulation, which the advice keeps */
  uint64_t hint;            /* the largest micro batch the estimate fits on the GPU; 0: none */
  struct vf_probe_prior prior; /* the estimate's curve around it; slope 0: none */
  struct vf_gpu_spec gpu;
  char *setup;              /* for the history: {"workload", "stage", "knobs"} */
  json_t *knobs;            /* {"name": value} of the stage's own knobs */
  char name[VF_WL_NAME];
};

/* Loads and plans the workload (--gpu, else the GPU NVML finds) and prepares the stage.
 * Returns an exit code, the error printed; release s with probe_stage_cleanup(). */
int probe_stage_prepare(struct setup_request *r, const char *workload, const char *stage, char **cmd,
                        uint64_t min, uint64_t max, struct probe_stage *s);
void probe_stage_cleanup(struct probe_stage *s);

#endif

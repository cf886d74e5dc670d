/* Shared by gpus, watch and doctor: opening NVML for a command, and a GPU sample as JSON or
 * as one line of text. */
#ifndef VF_CLI_GPU_VIEW_H
#define VF_CLI_GPU_VIEW_H

#include <jansson.h>
#include <stddef.h>

#include "vramfit.h"

/* Opens NVML; on failure prints "vramfit CMD: <why>" and returns the exit code (3). */
int gpu_view_open(const char *cmd, struct vf_nvml **n);

/* The contract's gpus --json object for one GPU, plus what else the driver gave; unknown
 * values are null. err: the sample's result (a GPU that did not answer gets "error"). */
json_t *gpu_view_json(const struct vf_gpu_sample *s, int err);

/* "GPU 0 NVIDIA A100  14.02/79.14 GiB  util 87%  312/400 W  61C" */
void gpu_view_line(const struct vf_gpu_sample *s, int err, char *buf, size_t size);

/* "13.10 GiB", or "?" for VF_BYTES_UNKNOWN. */
void gpu_view_bytes(uint64_t bytes, char *buf, size_t size);

#endif

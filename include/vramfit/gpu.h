#ifndef VRAMFIT_GPU_H
#define VRAMFIT_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vramfit/api.h"
#include "vramfit/error.h"

/* One GPU: a catalogue entry (data/gpus.tsv), a bare size, or a detected device. */
struct vf_gpu_spec {
  char name[32];       /* catalogue name ("a100-80gb"); "" for a bare size */
  char aliases[128];   /* other accepted names, comma-separated */
  char full_name[96];  /* "A100 80GB SXM4", or the driver's name for a detected GPU */
  char vendor[16];     /* "NVIDIA", "AMD"; "" when unknown */
  char arch[32];       /* "Ampere GA100" */
  int cc_major, cc_minor; /* CUDA compute capability; 0.0 = unknown or not CUDA */
  uint64_t capacity_bytes; /* total as nvidia-smi/NVML/PyTorch report it (ECC reserve out) */
  double bandwidth_gbps;   /* memory bandwidth, GB/s; 0 = unknown */
  double bf16_tflops;      /* dense tensor-core rates; 0 = unsupported or unknown */
  double fp16_tflops;      /* FP16 inputs, FP32 accumulate */
  double fp32_tflops;
  double link_gbps;        /* GPU-to-GPU bandwidth inside a node, one direction, GB/s; 0 = unknown */
  /* Filled only by vf_gpu_detect(). */
  bool detected;
  int index;           /* NVML device index */
  char uuid[96];
  uint64_t free_bytes; /* free memory when detected */
};

/* A catalogue entry by name or alias, ignoring case and '-', '_', '.', ' ' ("RTX 4090").
 * VF_ENOTFOUND when none matches. */
VF_API int vf_gpu_lookup(const char *name, struct vf_gpu_spec *out);

/* The catalogue in file order. vf_gpu_catalog_get returns VF_ENOTFOUND past the end. */
VF_API size_t vf_gpu_catalog_count(void);
VF_API int vf_gpu_catalog_get(size_t i, struct vf_gpu_spec *out);

/* A --gpu argument: a catalogue name, or a size ("24GiB", "80GB", "24G", "24576MiB";
 * GB = 10^9, GiB = G = 2^30) that gives the capacity only (compute capability 0.0).
 * VF_ENOTFOUND (unknown name; d lists close names) or VF_EINVAL (malformed size). */
VF_API int vf_gpu_parse(const char *text, struct vf_gpu_spec *out, struct vf_diag *d);

#endif

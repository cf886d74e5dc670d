/* Watching real GPUs: NVML sampling (the process trees are vramfit/proc.h), memory-trend
 * and under-use analysis, and reading out-of-memory reports in training logs. */
#ifndef VRAMFIT_MONITOR_H
#define VRAMFIT_MONITOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "vramfit/api.h"
#include "vramfit/error.h"
#include "vramfit/gpu.h"
#include "vramfit/proc.h"

/* ---- NVML ------------------------------------------------------------------------------- */

#define VF_GPU_MAX_PROCS 64
#define VF_BYTES_UNKNOWN UINT64_MAX

/* Which fields of a sample hold a value: a driver may not support some on some boards. */
enum {
  VF_FIELD_MEMORY = 1u << 0,   /* total, used, free */
  VF_FIELD_RESERVED = 1u << 1, /* reserved (only from the v2 memory call) */
  VF_FIELD_UTIL = 1u << 2,
  VF_FIELD_TEMP = 1u << 3,
  VF_FIELD_POWER = 1u << 4,
  VF_FIELD_POWER_LIMIT = 1u << 5,
  VF_FIELD_PROCS = 1u << 6,
};

struct vf_gpu_proc {
  uint32_t pid;
  uint64_t used_bytes; /* VF_BYTES_UNKNOWN when the driver does not say (WSL2, WDDM) */
  char name[64];       /* command name; "" when the process is not visible here */
};

struct vf_gpu_sample {
  unsigned index;
  char name[96], uuid[96];
  int cc_major, cc_minor; /* 0.0 when unknown */
  unsigned fields;        /* VF_FIELD_* */
  uint64_t total_bytes, used_bytes, free_bytes, reserved_bytes;
  unsigned util_gpu, util_memory; /* percent */
  unsigned temperature_c;
  unsigned power_mw, power_limit_mw;
  size_t nprocs;
  struct vf_gpu_proc procs[VF_GPU_MAX_PROCS];
};

struct vf_nvml; /* a loaded, initialised NVML */

/* Loads $VRAMFIT_NVML or libnvidia-ml.so.1 and initialises it. VF_ENODRIVER (d says why in
 * one sentence) when there is no library or no driver. */
VF_API int vf_nvml_open(struct vf_nvml **out, struct vf_diag *d);
VF_API void vf_nvml_close(struct vf_nvml *n);

/* GPUs NVML counts, including ones that later fail to answer. */
VF_API unsigned vf_nvml_count(const struct vf_nvml *n);
/* Driver version ("550.54.15") and CUDA driver version (12040); "" and 0 when unknown. */
VF_API void vf_nvml_driver(const struct vf_nvml *n, char *version, size_t size, int *cuda_version);

/* One reading of GPU index. A field the driver refuses is left out of s->fields; VF_EIO
 * only when the GPU cannot be reached at all (the others still can). */
VF_API int vf_nvml_sample(struct vf_nvml *n, unsigned index, struct vf_gpu_sample *s);

/* The NVML index of a CUDA_VISIBLE_DEVICES entry: an index, or a (prefix of a) "GPU-" UUID.
 * VF_ENOTFOUND when no GPU matches. */
VF_API int vf_nvml_find(struct vf_nvml *n, const char *entry, unsigned *index);

/* The NVML index of the GPU a training run started here gets: the first CUDA_VISIBLE_DEVICES
 * entry, else GPU 0. VF_ENOTFOUND (d says why) when there is none. */
VF_API int vf_nvml_visible(struct vf_nvml *n, unsigned *index, struct vf_diag *d);

/* The GPU a training run would get: the first CUDA_VISIBLE_DEVICES entry, else GPU 0, as a
 * spec (capacity = total, free_bytes, compute capability; rates from the catalogue when the
 * driver's name matches an entry). VF_ENODRIVER without NVML, VF_ENOTFOUND when
 * CUDA_VISIBLE_DEVICES hides every GPU or names none that exists. */
VF_API int vf_gpu_detect(struct vf_gpu_spec *out, struct vf_diag *d);

/* ---- trends ----------------------------------------------------------------------------- */

struct vf_trend_config {
  double warmup_s;      /* ignore the first seconds: the allocator's staircase */
  double window_s;      /* judge the trend over the most recent seconds */
  double min_slope_bps; /* growth slower than this (bytes/s) is never a leak */
};

/* Defaults: 120 s warm-up, 600 s window, 1 MiB/min. */
VF_API void vf_trend_config_default(struct vf_trend_config *c);

enum vf_trend_state {
  VF_TREND_WARMUP,  /* not enough history after warm-up */
  VF_TREND_STEADY,  /* flat, falling, or steps that do not go on */
  VF_TREND_GROWING, /* growth above the threshold in every third of the window: a leak */
};

struct vf_trend {
  enum vf_trend_state state;
  double slope_bps;   /* Theil-Sen slope over the window, bytes/s */
  double seconds_to_full; /* headroom / slope; < 0 when not growing */
};

/* Judges a memory series (t seconds ascending, v bytes) given the bytes still free on the
 * GPU. Pure: no allocation, any n; t[0] is taken as the start of the process. */
VF_API void vf_trend_analyze(const double *t, const double *v, size_t n, double headroom_bytes,
                             const struct vf_trend_config *c, struct vf_trend *out);

struct vf_underuse {
  bool flagged;       /* low for the whole window */
  double util_mean;   /* percent */
  double power_ratio; /* mean draw / limit; < 0 when power is unknown */
};

/* Utilization (percent) and power ratio (draw/limit, or < 0 unknown) over the last window_s:
 * flagged when the samples span the whole window, mean utilization is below 30% and, where
 * power is known, mean draw below 40% of the limit. */
VF_API void vf_underuse_analyze(const double *t, const double *util, const double *power_ratio,
                                size_t n, double window_s, struct vf_underuse *out);

/* The share of a GPU a run may use, and its batch grow to: the planner's default safety. */
#define VF_HEADROOM_USE 0.90

struct vf_headroom {
  bool flagged;      /* under half of the GPU for the whole window after warm-up */
  double held_bytes; /* the most the watched processes held over the window */
  double share;      /* held_bytes / the GPU's memory */
  double growth;     /* how many times the batch could grow before the run holds
                      * VF_HEADROOM_USE of the GPU, taking all of what it holds to grow with
                      * the batch: at least this, since a fixed part only adds room */
};

/* Judges the memory the watched processes held on one GPU (t seconds ascending, t[0] when
 * they first held memory there; held bytes) against its total: flagged when the window of
 * the last window_s seconds lies wholly after warmup_s and the most held in it stays under
 * half of the GPU. Pure: no allocation, any n. */
VF_API void vf_headroom_analyze(const double *t, const double *held, size_t n, double total_bytes, double warmup_s,
                                double window_s, struct vf_headroom *out);

/* ---- out-of-memory reports in logs -------------------------------------------------------- */

/* The words 'vramfit watch' puts in its leak warnings, which vf_oom_parse looks for. */
#define VF_LEAK_WARNING "memory keeps growing"

enum vf_oom_source {
  VF_OOM_NONE,
  VF_OOM_PYTORCH,    /* the caching allocator's "CUDA out of memory. Tried to allocate" */
  VF_OOM_CUDA,       /* a raw CUDA call: "CUDA error: out of memory", CUDA_ERROR_OUT_OF_MEMORY */
  VF_OOM_CUBLAS,     /* CUBLAS_STATUS_ALLOC_FAILED */
  VF_OOM_CUDNN,      /* cuDNN status errors that are often memory in disguise */
  VF_OOM_NCCL,       /* NCCL "Cuda failure 'out of memory'" */
  VF_OOM_JAX,        /* XLA RESOURCE_EXHAUSTED */
  VF_OOM_TENSORFLOW, /* ResourceExhaustedError / OOM when allocating tensor */
  VF_OOM_HOST,       /* host RAM: DefaultCPUAllocator */
};

/* A process the report lists ("Process 48213 has 6.02 GiB memory in use"). */
struct vf_oom_proc {
  unsigned pid;
  uint64_t bytes;
};
#define VF_OOM_MAX_PROCS 8

/* Unknown numbers are VF_BYTES_UNKNOWN. */
struct vf_oom_report {
  enum vf_oom_source source;
  bool certain;   /* false: a status that is often, not always, an OOM (cuDNN, cuBLAS) */
  int line;       /* 1-based line of the report */
  int gpu;        /* device index, -1 when not said */
  unsigned count; /* OOM reports in the log */
  unsigned progress_lines; /* training-progress lines (steps, epochs) before the report */
  bool leak_warning; /* a 'vramfit watch' leak warning (VF_LEAK_WARNING) is in the log */
  char excerpt[320]; /* the report's first line, trimmed */
  uint64_t tried_bytes, capacity_bytes, free_bytes, process_bytes;
  uint64_t allocated_bytes, reserved_unallocated_bytes;
  uint64_t other_process_bytes; /* sum of the processes the message lists, each pid once */
  uint64_t allowed_bytes;       /* PyTorch <= 2.0: the per-process limit ("N allowed;") */
  uint64_t private_pool_bytes;  /* allocated in private pools (CUDA Graphs) */
  struct vf_oom_proc procs[VF_OOM_MAX_PROCS]; /* the processes listed, in order */
  unsigned n_procs;
};

/* Finds the first certain out-of-memory report in a log (else the first likely one) and reads
 * its numbers from the report itself (its line, and the lines a wrapped PyTorch message or an
 * NCCL warning continues on). Log lines at INFO level are never reports: TensorFlow logs the
 * allocations it retries there. Returns 0 with source VF_OOM_NONE when there is none. Pure. */
VF_API int vf_oom_parse(const char *text, size_t len, struct vf_oom_report *out);

enum vf_oom_cause {
  VF_OOM_CAUSE_UNKNOWN,
  VF_OOM_CAUSE_FRAGMENTATION, /* reserved-but-unallocated could have held the request */
  VF_OOM_CAUSE_OTHER_PROCESS, /* memory held outside this process (or outside PyTorch) */
  VF_OOM_CAUSE_LEAK,          /* ran for a while, then ran out asking for little */
  VF_OOM_CAUSE_TOO_LARGE,     /* the setting needs more than the GPU has */
  VF_OOM_CAUSE_LIMIT,         /* a per-process limit below the GPU's capacity was reached */
  VF_OOM_CAUSE_NOT_FULL,      /* the GPU had more free than was asked for */
};

/* What a report's numbers say, with the figures the explanation needs. */
struct vf_oom_analysis {
  enum vf_oom_cause cause;
  int self_listed;        /* index into procs of the entry that is the run itself (a container
                           * names it by a pid the run cannot see as its own), or -1 */
  uint64_t others_bytes;  /* held by other processes: those listed (less the run itself), or
                           * capacity - free - this process; VF_BYTES_UNKNOWN when not known */
  uint64_t outside_bytes; /* PyTorch <= 2.0: capacity - free - reserved, held outside PyTorch
                           * (other processes, this one's CUDA context and non-PyTorch use) */
  uint64_t limit_bytes;   /* what the run may use: the allowed limit, else the capacity */
};

/* The most likely cause of a parsed report and the figures behind it. Pure. */
VF_API void vf_oom_analyze(const struct vf_oom_report *r, struct vf_oom_analysis *out);
/* vf_oom_analyze's cause. Pure. */
VF_API enum vf_oom_cause vf_oom_cause(const struct vf_oom_report *r);
/* "PyTorch", "cuBLAS", ... */
VF_API const char *vf_oom_source_name(enum vf_oom_source s);
/* "fragmentation", "other_process", "leak", "too_large", "limit", "not_full", "unknown" */
VF_API const char *vf_oom_cause_name(enum vf_oom_cause c);

#endif

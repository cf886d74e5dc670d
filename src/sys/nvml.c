/* NVML loaded at run time: no CUDA headers at build time, and no driver needed to run the
 * rest of vramfit. Every symbol is looked up newest version first; every field may fail on
 * its own; a GPU that stops answering never hides the others. */
#include <ctype.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/diag.h"
#include "sys/nvml_abi.h"
#include "vramfit/monitor.h"

#define DEFAULT_LIB "libnvidia-ml.so.1"
#define WSL_LIB "/usr/lib/wsl/lib/libnvidia-ml.so.1"
#define ALL_ONES 0xFFFFFFFFFFFFFFFFull

enum { PROC_COMPUTE, PROC_GRAPHICS, PROC_KINDS };
enum { PROC_V3, PROC_V2, PROC_V1, PROC_VERSIONS };

struct nvml_syms {
  nvml_init_fn init;
  nvml_shutdown_fn shutdown;
  nvml_error_string_fn error_string;
  nvml_driver_version_fn driver_version;
  nvml_cuda_version_fn cuda_version;
  nvml_process_name_fn process_name;
  nvml_count_fn count;
  nvml_handle_fn handle;
  nvml_string_fn name, uuid;
  nvml_cc_fn cc;
  nvml_memory_v2_fn memory_v2;
  nvml_memory_fn memory;
  nvml_util_fn util;
  nvml_temperature_v_fn temperature_v;
  nvml_temperature_fn temperature;
  nvml_uint_fn power, power_limit;
  nvml_procs_fn procs[PROC_KINDS][PROC_VERSIONS];
};

struct nvml_gpu {
  nvmlDevice_t handle;
  nvmlReturn_t error; /* why the handle could not be had */
  char name[NVML_BUFFER_SIZE], uuid[NVML_BUFFER_SIZE];
  int cc_major, cc_minor;
};

/* Entries are read through a 32-byte stride buffer so that an R535 driver writing its longer
 * layout through _v3 stays inside it; the count asked for is sized to that stride. */
#define PROC_STRIDE_MAX sizeof(nvmlProcessDetail_v1_t)

struct raw_procs {
  unsigned char *buf;
  size_t cap; /* entries of PROC_STRIDE_MAX bytes */
  unsigned count;
};

struct vf_nvml {
  void *lib;
  struct nvml_syms f;
  bool memory_v2_refused;         /* learned once: old drivers reject the v2 struct */
  int procs_from[PROC_KINDS];     /* first process-call version that still works */
  unsigned count;
  struct nvml_gpu *gpus;
  char driver[80];
  int cuda;
  struct raw_procs procs; /* reused by every sample */
};

/* The first of names the library exports, newest version first. */
static void *first_symbol(void *lib, const char *const *names) {
  for (; *names; names++) {
    void *p = dlsym(lib, *names);
    if (p) return p;
  }
  return NULL;
}
#define SYMBOL(lib, ...) first_symbol(lib, (const char *const[]){__VA_ARGS__, NULL})

static void resolve(struct vf_nvml *n) {
  struct nvml_syms *f = &n->f;
  void *l = n->lib;
  f->init = (nvml_init_fn)SYMBOL(l, "nvmlInit_v2", "nvmlInit");
  f->shutdown = (nvml_shutdown_fn)SYMBOL(l, "nvmlShutdown");
  f->error_string = (nvml_error_string_fn)SYMBOL(l, "nvmlErrorString");
  f->driver_version = (nvml_driver_version_fn)SYMBOL(l, "nvmlSystemGetDriverVersion");
  f->cuda_version = (nvml_cuda_version_fn)SYMBOL(l, "nvmlSystemGetCudaDriverVersion_v2",
                                                 "nvmlSystemGetCudaDriverVersion");
  f->process_name = (nvml_process_name_fn)SYMBOL(l, "nvmlSystemGetProcessName");
  f->count = (nvml_count_fn)SYMBOL(l, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
  f->handle = (nvml_handle_fn)SYMBOL(l, "nvmlDeviceGetHandleByIndex_v2",
                                     "nvmlDeviceGetHandleByIndex");
  f->name = (nvml_string_fn)SYMBOL(l, "nvmlDeviceGetName");
  f->uuid = (nvml_string_fn)SYMBOL(l, "nvmlDeviceGetUUID");
  f->cc = (nvml_cc_fn)SYMBOL(l, "nvmlDeviceGetCudaComputeCapability");
  f->memory_v2 = (nvml_memory_v2_fn)SYMBOL(l, "nvmlDeviceGetMemoryInfo_v2");
  f->memory = (nvml_memory_fn)SYMBOL(l, "nvmlDeviceGetMemoryInfo");
  f->util = (nvml_util_fn)SYMBOL(l, "nvmlDeviceGetUtilizationRates");
  f->temperature_v = (nvml_temperature_v_fn)SYMBOL(l, "nvmlDeviceGetTemperatureV");
  f->temperature = (nvml_temperature_fn)SYMBOL(l, "nvmlDeviceGetTemperature");
  f->power = (nvml_uint_fn)SYMBOL(l, "nvmlDeviceGetPowerUsage");
  f->power_limit = (nvml_uint_fn)SYMBOL(l, "nvmlDeviceGetEnforcedPowerLimit");
  static const char *const procs[PROC_KINDS][PROC_VERSIONS] = {
      {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
       "nvmlDeviceGetComputeRunningProcesses"},
      {"nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2",
       "nvmlDeviceGetGraphicsRunningProcesses"}};
  for (int k = 0; k < PROC_KINDS; k++)
    for (int v = 0; v < PROC_VERSIONS; v++)
      f->procs[k][v] = (nvml_procs_fn)dlsym(l, procs[k][v]);
}

static const char *nvml_error(const struct vf_nvml *n, nvmlReturn_t rc) {
  const char *s = n->f.error_string ? n->f.error_string(rc) : NULL;
  return s ? s : "unknown error";
}

static int load_library(struct vf_nvml *n, struct vf_diag *d) {
  const char *env = getenv("VRAMFIT_NVML");
  if (env && *env) {
    n->lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    if (!n->lib)
      return diag_at(d, VF_ENODRIVER, "", UINT64_MAX,
                     "cannot load the NVML library named by VRAMFIT_NVML: %s", dlerror());
    return 0;
  }
  n->lib = dlopen(DEFAULT_LIB, RTLD_NOW | RTLD_LOCAL);
  if (!n->lib) n->lib = dlopen(WSL_LIB, RTLD_NOW | RTLD_LOCAL);
  if (!n->lib)
    return diag_at(d, VF_ENODRIVER, "", UINT64_MAX,
                   "no NVIDIA driver found (%s cannot be loaded); install the driver, or "
                   "set VRAMFIT_NVML to the library's path",
                   DEFAULT_LIB);
  return 0;
}

static void read_device(struct vf_nvml *n, unsigned i) {
  struct nvml_gpu *g = &n->gpus[i];
  g->error = n->f.handle(i, &g->handle);
  if (g->error) return;
  if (!n->f.name || n->f.name(g->handle, g->name, sizeof g->name)) g->name[0] = '\0';
  if (!n->f.uuid || n->f.uuid(g->handle, g->uuid, sizeof g->uuid)) g->uuid[0] = '\0';
  if (!n->f.cc || n->f.cc(g->handle, &g->cc_major, &g->cc_minor))
    g->cc_major = g->cc_minor = 0;
}

static int start(struct vf_nvml *n, struct vf_diag *d) {
  resolve(n);
  if (!n->f.init || !n->f.count || !n->f.handle || !(n->f.memory || n->f.memory_v2))
    return diag_at(d, VF_ENODRIVER, "", UINT64_MAX,
                   "the NVML library lacks the functions vramfit needs (nvmlInit, "
                   "nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex, nvmlDeviceGetMemoryInfo)");
  nvmlReturn_t rc = n->f.init();
  if (rc) {
    n->f.shutdown = NULL; /* nothing to shut down */
    return diag_at(d, VF_ENODRIVER, "", UINT64_MAX, "NVML cannot reach the driver: %s (%d)",
                   nvml_error(n, rc), rc);
  }
  if (n->f.count(&n->count)) n->count = 0;
  if (n->f.driver_version && n->f.driver_version(n->driver, sizeof n->driver)) n->driver[0] = 0;
  if (n->f.cuda_version && n->f.cuda_version(&n->cuda)) n->cuda = 0;
  n->gpus = calloc(n->count ? n->count : 1, sizeof *n->gpus);
  if (!n->gpus) return diag_at(d, VF_ENOMEM, "", UINT64_MAX, "out of memory");
  for (unsigned i = 0; i < n->count; i++) read_device(n, i);
  return 0;
}

int vf_nvml_open(struct vf_nvml **out, struct vf_diag *d) {
  *out = NULL;
  struct vf_nvml *n = calloc(1, sizeof *n);
  if (!n) return diag_at(d, VF_ENOMEM, "", UINT64_MAX, "out of memory");
  int rc = load_library(n, d);
  if (!rc) rc = start(n, d);
  if (rc) {
    vf_nvml_close(n);
    return rc;
  }
  *out = n;
  return 0;
}

void vf_nvml_close(struct vf_nvml *n) {
  if (!n) return;
  if (n->lib && n->f.shutdown) n->f.shutdown();
  if (n->lib) dlclose(n->lib);
  free(n->gpus);
  free(n->procs.buf);
  free(n);
}

unsigned vf_nvml_count(const struct vf_nvml *n) { return n->count; }

void vf_nvml_driver(const struct vf_nvml *n, char *version, size_t size, int *cuda_version) {
  snprintf(version, size, "%s", n->driver);
  *cuda_version = n->cuda;
}

/* The driver reports "unknown" as all ones (WSL2, WDDM) and UMA parts report a zero total. */
static bool memory_known(unsigned long long total, unsigned long long free,
                         unsigned long long used) {
  return total && total != ALL_ONES && free != ALL_ONES && used != ALL_ONES && free <= total &&
         used <= total;
}

static void sample_memory(struct vf_nvml *n, nvmlDevice_t h, struct vf_gpu_sample *s) {
  if (n->f.memory_v2 && !n->memory_v2_refused) {
    nvmlMemory_v2_t m = {.version = nvmlMemory_v2};
    nvmlReturn_t rc = n->f.memory_v2(h, &m);
    if (rc == NVML_SUCCESS) {
      if (!memory_known(m.total, m.free, m.used)) return;
      s->total_bytes = m.total;
      s->free_bytes = m.free;
      s->used_bytes = m.used;
      s->reserved_bytes = m.reserved;
      s->fields |= VF_FIELD_MEMORY | (m.reserved != ALL_ONES ? VF_FIELD_RESERVED : 0);
      return;
    }
    if (rc != NVML_ERROR_FUNCTION_NOT_FOUND && rc != NVML_ERROR_ARGUMENT_VERSION_MISMATCH &&
        rc != NVML_ERROR_NOT_SUPPORTED)
      return;
    n->memory_v2_refused = true;
  }
  nvmlMemory_t m;
  if (!n->f.memory || n->f.memory(h, &m) || !memory_known(m.total, m.free, m.used)) return;
  s->total_bytes = m.total;
  s->free_bytes = m.free;
  s->used_bytes = m.used;
  s->fields |= VF_FIELD_MEMORY;
}

static void sample_gauges(struct vf_nvml *n, nvmlDevice_t h, struct vf_gpu_sample *s) {
  nvmlUtilization_t u;
  if (n->f.util && n->f.util(h, &u) == NVML_SUCCESS && u.gpu <= 100) {
    s->util_gpu = u.gpu;
    s->util_memory = u.memory;
    s->fields |= VF_FIELD_UTIL;
  }
  nvmlTemperature_v1_t tv = {.version = nvmlTemperature_v1, .sensorType = NVML_TEMPERATURE_GPU};
  unsigned int t;
  if (n->f.temperature_v && n->f.temperature_v(h, &tv) == NVML_SUCCESS && tv.temperature >= 0) {
    s->temperature_c = (unsigned)tv.temperature;
    s->fields |= VF_FIELD_TEMP;
  } else if (n->f.temperature && n->f.temperature(h, NVML_TEMPERATURE_GPU, &t) == NVML_SUCCESS) {
    s->temperature_c = t;
    s->fields |= VF_FIELD_TEMP;
  }
  if (n->f.power && n->f.power(h, &s->power_mw) == NVML_SUCCESS) s->fields |= VF_FIELD_POWER;
  if (n->f.power_limit && n->f.power_limit(h, &s->power_limit_mw) == NVML_SUCCESS &&
      s->power_limit_mw > 0)
    s->fields |= VF_FIELD_POWER_LIMIT;
}

static void decode_proc(const unsigned char *p, int version, uint32_t *pid, uint64_t *used) {
  if (version == PROC_V1) {
    nvmlProcessInfo_v1_t e;
    memcpy(&e, p, sizeof e);
    *pid = e.pid;
    *used = e.usedGpuMemory;
  } else {
    nvmlProcessInfo_v2_t e;
    memcpy(&e, p, sizeof e);
    *pid = e.pid;
    *used = e.usedGpuMemory;
  }
}

static size_t proc_stride(int version) {
  return version == PROC_V1 ? sizeof(nvmlProcessInfo_v1_t) : sizeof(nvmlProcessInfo_v2_t);
}

/* A list read with the wrong layout shows zero PIDs or sizes beyond the GPU. */
static bool procs_sane(const struct raw_procs *r, int version, uint64_t total) {
  for (unsigned i = 0; i < r->count; i++) {
    uint32_t pid;
    uint64_t used;
    decode_proc(r->buf + i * proc_stride(version), version, &pid, &used);
    if (pid == 0 || (used != ALL_ONES && total && used > total)) return false;
  }
  return true;
}

/* One call of a process function, growing the buffer while the driver asks for more. */
static nvmlReturn_t call_procs(nvml_procs_fn fn, nvmlDevice_t h, struct raw_procs *r) {
  for (int tries = 0; tries < 4; tries++) {
    unsigned int count = (unsigned int)r->cap;
    nvmlReturn_t rc = fn(h, &count, r->buf);
    if (rc == NVML_SUCCESS) {
      r->count = count;
      return rc;
    }
    if (rc != NVML_ERROR_INSUFFICIENT_SIZE) return rc;
    size_t want = (size_t)count + 16; /* processes may start between the two calls */
    unsigned char *grown = realloc(r->buf, want * PROC_STRIDE_MAX);
    if (!grown) return NVML_ERROR_UNKNOWN;
    r->buf = grown;
    r->cap = want;
  }
  return NVML_ERROR_INSUFFICIENT_SIZE;
}

/* Tries _v3, _v2 and v1 in turn, remembering which versions the driver lacks or garbles.
 * Returns the version that answered, or -1. */
static int query_procs(struct vf_nvml *n, int kind, nvmlDevice_t h, uint64_t total,
                       struct raw_procs *r) {
  for (int v = n->procs_from[kind]; v < PROC_VERSIONS; v++) {
    nvml_procs_fn fn = n->f.procs[kind][v];
    if (!fn) continue;
    nvmlReturn_t rc = call_procs(fn, h, r);
    bool missing = rc == NVML_ERROR_FUNCTION_NOT_FOUND ||
                   rc == NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (rc == NVML_SUCCESS && procs_sane(r, v, total)) return v;
    if (!missing && rc != NVML_SUCCESS) return -1;
    n->procs_from[kind] = v + 1;
  }
  return -1;
}

/* /proc first; NVML's name (a path) for a pid from another PID namespace, as in a container
 * without --pid=host. */
static void proc_name(const struct vf_nvml *n, uint32_t pid, char *buf, size_t size) {
  if (vf_proc_name((pid_t)pid, buf, size) == 0) return;
  char path[256];
  buf[0] = '\0';
  if (!n->f.process_name || n->f.process_name(pid, path, sizeof path)) return;
  const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
  size_t len = strnlen(base, size - 1);
  memcpy(buf, base, len);
  buf[len] = '\0';
}

static void add_proc(const struct vf_nvml *n, struct vf_gpu_sample *s, uint32_t pid,
                     uint64_t used) {
  for (size_t i = 0; i < s->nprocs; i++) {
    struct vf_gpu_proc *p = &s->procs[i];
    if (p->pid != pid) continue;
    /* A process in both the compute and graphics lists has one allocation total. */
    if (p->used_bytes == VF_BYTES_UNKNOWN || (used != ALL_ONES && used > p->used_bytes))
      p->used_bytes = used == ALL_ONES ? VF_BYTES_UNKNOWN : used;
    return;
  }
  if (s->nprocs == VF_GPU_MAX_PROCS) return;
  struct vf_gpu_proc *p = &s->procs[s->nprocs++];
  p->pid = pid;
  p->used_bytes = used == ALL_ONES ? VF_BYTES_UNKNOWN : used;
  proc_name(n, pid, p->name, sizeof p->name);
}

static void sample_procs(struct vf_nvml *n, nvmlDevice_t h, struct vf_gpu_sample *s) {
  struct raw_procs *r = &n->procs;
  if (!r->buf) {
    r->buf = malloc(32 * PROC_STRIDE_MAX);
    if (!r->buf) return;
    r->cap = 32;
  }
  uint64_t total = s->fields & VF_FIELD_MEMORY ? s->total_bytes : 0;
  for (int kind = 0; kind < PROC_KINDS; kind++) {
    int v = query_procs(n, kind, h, total, r);
    if (v < 0) continue;
    s->fields |= VF_FIELD_PROCS;
    for (unsigned i = 0; i < r->count; i++) {
      uint32_t pid;
      uint64_t used;
      decode_proc(r->buf + i * proc_stride(v), v, &pid, &used);
      add_proc(n, s, pid, used);
    }
  }
}

int vf_nvml_sample(struct vf_nvml *n, unsigned index, struct vf_gpu_sample *s) {
  memset(s, 0, sizeof *s);
  s->index = index;
  if (index >= n->count) return VF_ENOTFOUND;
  const struct nvml_gpu *g = &n->gpus[index];
  snprintf(s->name, sizeof s->name, "%s", g->name);
  snprintf(s->uuid, sizeof s->uuid, "%s", g->uuid);
  s->cc_major = g->cc_major;
  s->cc_minor = g->cc_minor;
  if (g->error) return VF_EIO;
  sample_memory(n, g->handle, s);
  sample_gauges(n, g->handle, s);
  sample_procs(n, g->handle, s);
  return 0;
}

int vf_nvml_find(struct vf_nvml *n, const char *entry, unsigned *index) {
  while (isspace((unsigned char)*entry)) entry++;
  size_t len = strlen(entry);
  while (len && isspace((unsigned char)entry[len - 1])) len--;
  if (len == 0) return VF_ENOTFOUND;
  if (isdigit((unsigned char)entry[0])) {
    char *end;
    unsigned long i = strtoul(entry, &end, 10);
    if ((size_t)(end - entry) != len || i >= n->count) return VF_ENOTFOUND;
    *index = (unsigned)i;
    return 0;
  }
  /* CUDA accepts any unique prefix of a "GPU-" UUID. */
  if (len < 5 || strncasecmp(entry, "GPU-", 4) != 0) return VF_ENOTFOUND;
  unsigned found = 0;
  for (unsigned i = 0; i < n->count; i++)
    if (strncasecmp(n->gpus[i].uuid, entry, len) == 0) {
      *index = i;
      found++;
    }
  return found == 1 ? 0 : VF_ENOTFOUND;
}

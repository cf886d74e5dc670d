/* The part of NVML's ABI we use, declared from NVIDIA's documented layout (nvml.h, API 13)
 * so the build needs no CUDA headers and the library loads at run time. Shared with the fake
 * NVML in tests/fake_nvml, which exports these same symbols. */
#ifndef VF_SYS_NVML_ABI_H
#define VF_SYS_NVML_ABI_H

typedef int nvmlReturn_t; /* enum nvmlReturn_enum, stored as int */
typedef struct nvmlDevice_st *nvmlDevice_t;

enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_UNKNOWN = 999,
};

/* A versioned struct's first word: its size, and the version in the top byte. Passing a bare
 * version number (nvtop's bug) makes the driver refuse the call. */
#define NVML_STRUCT_VERSION(size, ver) ((unsigned int)(size) | ((unsigned int)(ver) << 24))

#define NVML_BUFFER_SIZE 96 /* NVML_DEVICE_NAME_V2_BUFFER_SIZE and _UUID_V2_ */
#define NVML_TEMPERATURE_GPU 0

typedef struct {
  unsigned int gpu;    /* % of time a kernel ran */
  unsigned int memory; /* % of time memory was read or written (not capacity) */
} nvmlUtilization_t;

typedef struct { /* v1: used = allocated + reserved by the driver */
  unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct { /* v2: used excludes the driver's reserve, as nvidia-smi shows since R510 */
  unsigned int version;
  unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 NVML_STRUCT_VERSION(sizeof(nvmlMemory_v2_t), 2)

typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory; /* all ones when the driver cannot tell (WDDM, WSL2) */
} nvmlProcessInfo_v1_t;

typedef struct { /* what the _v2 and _v3 process calls fill */
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId; /* all ones without MIG */
} nvmlProcessInfo_v2_t;

/* R535.43-535.86 drivers filled this 32-byte layout through _v3 without a version change. */
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
  unsigned long long usedGpuCcProtectedMemory;
} nvmlProcessDetail_v1_t;

typedef struct {
  unsigned int version;
  int sensorType;
  int temperature;
} nvmlTemperature_v1_t;
#define nvmlTemperature_v1 NVML_STRUCT_VERSION(sizeof(nvmlTemperature_v1_t), 1)

_Static_assert(sizeof(nvmlMemory_t) == 24, "NVML ABI: nvmlMemory_t");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "NVML ABI: nvmlMemory_v2_t");
_Static_assert(nvmlMemory_v2 == 0x02000028u, "NVML ABI: nvmlMemory_v2 version word");
_Static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "NVML ABI: nvmlProcessInfo_v1_t");
_Static_assert(sizeof(nvmlProcessInfo_v2_t) == 24, "NVML ABI: nvmlProcessInfo_v2_t");
_Static_assert(sizeof(nvmlProcessDetail_v1_t) == 32, "NVML ABI: nvmlProcessDetail_v1_t");
_Static_assert(nvmlTemperature_v1 == 0x0100000Cu, "NVML ABI: nvmlTemperature_v1");

/* Entry points, as function-pointer types named after the symbols. */
typedef nvmlReturn_t (*nvml_init_fn)(void);
typedef nvmlReturn_t (*nvml_shutdown_fn)(void);
typedef const char *(*nvml_error_string_fn)(nvmlReturn_t);
typedef nvmlReturn_t (*nvml_driver_version_fn)(char *, unsigned int);
typedef nvmlReturn_t (*nvml_cuda_version_fn)(int *);
typedef nvmlReturn_t (*nvml_count_fn)(unsigned int *);
typedef nvmlReturn_t (*nvml_process_name_fn)(unsigned int, char *, unsigned int);
typedef nvmlReturn_t (*nvml_handle_fn)(unsigned int, nvmlDevice_t *);
typedef nvmlReturn_t (*nvml_string_fn)(nvmlDevice_t, char *, unsigned int);
typedef nvmlReturn_t (*nvml_cc_fn)(nvmlDevice_t, int *, int *);
typedef nvmlReturn_t (*nvml_memory_fn)(nvmlDevice_t, nvmlMemory_t *);
typedef nvmlReturn_t (*nvml_memory_v2_fn)(nvmlDevice_t, nvmlMemory_v2_t *);
typedef nvmlReturn_t (*nvml_util_fn)(nvmlDevice_t, nvmlUtilization_t *);
typedef nvmlReturn_t (*nvml_uint_fn)(nvmlDevice_t, unsigned int *);
typedef nvmlReturn_t (*nvml_temperature_fn)(nvmlDevice_t, int, unsigned int *);
typedef nvmlReturn_t (*nvml_temperature_v_fn)(nvmlDevice_t, nvmlTemperature_v1_t *);
/* The last argument is an array of nvmlProcessInfo_v1_t (unversioned symbol) or
 * nvmlProcessInfo_v2_t (_v2, _v3). */
typedef nvmlReturn_t (*nvml_procs_fn)(nvmlDevice_t, unsigned int *, void *);

#endif

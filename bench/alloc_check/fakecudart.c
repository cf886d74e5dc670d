/* A stand-in for the CUDA runtime (libcudart.so.13) that PyTorch's caching allocator
 * (libc10_cuda.so of the torch wheel) runs against on a machine without a GPU: one device
 * whose memory is a counter with a capacity, streams and events whose work completes only
 * when the caller synchronizes (an event's synchronize completes every stream's work
 * recorded before it, as vramfit's replays take a GPU to run the streams in the order the
 * host queued their work), and the driver calls of expandable segments, reached as
 * the allocator reaches them (cudaGetDriverEntryPointByVersion). Nothing is computed and no
 * device memory exists: device pointers are addresses handed out in increasing order, as
 * vramfit's allocator model hands them out, so that best fit's last tie-break (the lower
 * address) is the same on both sides.
 *
 * Built against the CUDA headers of NVIDIA's nvidia-cuda-runtime wheel, so every signature
 * is the runtime's own (the compiler refuses a mismatch). The capacity is
 * VF_FAKE_CUDA_CAPACITY bytes (default 1 PiB: unlimited, as `vramfit trace` replays). */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MIB (UINT64_C(1) << 20)
#define MAX_STREAMS 1024 /* PyTorch makes its pools of 32 streams per priority at once */
#define MAX_ALLOCS (1u << 20)

struct fake_stream {
  uint64_t recorded;  /* events recorded on the stream so far */
  uint64_t completed; /* of them, those whose work is done */
  uint64_t *time;     /* the clock at each of its events, by sequence number - 1 */
};

struct fake_event {
  struct fake_stream *s;
  uint64_t seq, time;
};

static uint64_t clock_now; /* events recorded on any stream */

struct range {
  uint64_t addr, size;
};

static struct fake_stream streams[MAX_STREAMS]; /* [0] is the default stream */
static unsigned nstreams = 1;
static struct range mallocs[MAX_ALLOCS];  /* live cudaMalloc ranges */
static uint64_t handles[MAX_ALLOCS];      /* cuMemCreate sizes by handle - 1 */
static unsigned nmallocs, nhandles;
static uint64_t used, next_addr = UINT64_C(1) << 40;

static uint64_t capacity(void) {
  static uint64_t cap;
  if (!cap) {
    const char *v = getenv("VF_FAKE_CUDA_CAPACITY");
    cap = v && *v ? strtoull(v, NULL, 10) : UINT64_C(1) << 50;
  }
  return cap;
}

static uint64_t bump(uint64_t size, uint64_t align) {
  uint64_t at = (next_addr + align - 1) / align * align;
  next_addr = at + size;
  return at;
}

/* The default stream is handle 0 (and the legacy and per-thread handles 1 and 2). */
static struct fake_stream *stream_of(cudaStream_t s) {
  uintptr_t h = (uintptr_t)s;
  return h <= 2 ? &streams[0] : (struct fake_stream *)s;
}

/* ---- device ---- */

cudaError_t cudaGetDeviceCount(int *count) { *count = 1; return cudaSuccess; }
cudaError_t cudaGetDevice(int *device) { *device = 0; return cudaSuccess; }
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaDriverGetVersion(int *v) { *v = 13000; return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaErrorFake"; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "fake CUDA error"; }
cudaError_t cudaDeviceCanAccessPeer(int *can, int d, int p) { (void)d, (void)p; *can = 0; return cudaSuccess; }
cudaError_t cudaDeviceEnablePeerAccess(int p, unsigned f) { (void)p, (void)f; return cudaSuccess; }
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
  *least = 0;
  *greatest = -5;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device) {
  (void)device;
  memset(p, 0, sizeof *p);
  strcpy(p->name, "vramfit fake H100");
  p->totalGlobalMem = capacity();
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 132;
  p->warpSize = 32;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
  *total = capacity();
  *free_bytes = capacity() - used;
  return cudaSuccess;
}

/* ---- memory ---- */

cudaError_t cudaMalloc(void **p, size_t size) {
  if (size > capacity() - used || nmallocs == MAX_ALLOCS) return cudaErrorMemoryAllocation;
  uint64_t at = bump(size, 2 * MIB);
  mallocs[nmallocs++] = (struct range){at, size};
  used += size;
  *p = (void *)(uintptr_t)at;
  return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
  for (unsigned i = 0; i < nmallocs; i++)
    if (mallocs[i].addr == (uintptr_t)p) {
      used -= mallocs[i].size;
      mallocs[i] = mallocs[--nmallocs];
      return cudaSuccess;
    }
  return p ? cudaErrorInvalidValue : cudaSuccess;
}

cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t s) { (void)s; return cudaMalloc(p, size); }
cudaError_t cudaFreeAsync(void *p, cudaStream_t s) { (void)s; return cudaFree(p); }
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k) {
  (void)d, (void)s, (void)n, (void)k;
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st) {
  (void)d, (void)s, (void)n, (void)k, (void)st;
  return cudaSuccess;
}
cudaError_t cudaMemcpyPeerAsync(void *d, int dd, const void *s, int sd, size_t n, cudaStream_t st) {
  (void)d, (void)dd, (void)s, (void)sd, (void)n, (void)st;
  return cudaSuccess;
}

/* The asynchronous backend is not compared: its pool calls only answer. */
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int d) { (void)d; *pool = NULL; return cudaSuccess; }
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t p, enum cudaMemPoolAttr a, void *v) {
  (void)p, (void)a;
  memset(v, 0, sizeof(uint64_t));
  return cudaSuccess;
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t p, enum cudaMemPoolAttr a, void *v) {
  (void)p, (void)a, (void)v;
  return cudaSuccess;
}
cudaError_t cudaMemPoolSetAccess(cudaMemPool_t p, const struct cudaMemAccessDesc *d, size_t n) {
  (void)p, (void)d, (void)n;
  return cudaSuccess;
}
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t p, size_t keep) { (void)p, (void)keep; return cudaSuccess; }
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p) { (void)h, (void)p; return cudaErrorNotSupported; }
cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h, unsigned f) {
  (void)p, (void)h, (void)f;
  return cudaErrorNotSupported;
}
cudaError_t cudaIpcCloseMemHandle(void *p) { (void)p; return cudaErrorNotSupported; }

/* ---- streams and events: work completes when the caller synchronizes ---- */

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int priority) {
  (void)flags, (void)priority;
  if (nstreams == MAX_STREAMS) return cudaErrorMemoryAllocation;
  *s = (cudaStream_t)&streams[nstreams++];
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  struct fake_stream *f = stream_of(s);
  f->completed = f->recorded;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  for (unsigned i = 0; i < nstreams; i++) streams[i].completed = streams[i].recorded;
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s) {
  struct fake_stream *f = stream_of(s);
  return f->completed == f->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f) { (void)s, (void)e, (void)f; return cudaSuccess; }
cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *st) {
  (void)s;
  *st = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, enum cudaStreamCaptureStatus *st, unsigned long long *id,
                                     cudaGraph_t *g, const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
                                     size_t *ndeps) {
  (void)s, (void)id, (void)g, (void)deps, (void)edges;
  *st = cudaStreamCaptureStatusNone;
  if (ndeps) *ndeps = 0;
  return cudaSuccess;
}
cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *m) { (void)m; return cudaSuccess; }
cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t n, cudaGraphNode_t *d, cudaGraphEdgeData *e, size_t *k) {
  (void)n, (void)d, (void)e;
  *k = 0;
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
  (void)flags;
  struct fake_event *f = calloc(1, sizeof *f);
  if (!f) return cudaErrorMemoryAllocation;
  *e = (cudaEvent_t)f;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) { free(e); return cudaSuccess; }

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  struct fake_event *f = (struct fake_event *)e;
  struct fake_stream *st = stream_of(s);
  uint64_t *time = realloc(st->time, (st->recorded + 1) * sizeof *time);
  if (!time) return cudaErrorMemoryAllocation;
  st->time = time;
  f->s = st;
  f->seq = ++st->recorded;
  f->time = time[f->seq - 1] = ++clock_now;
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  const struct fake_event *f = (const struct fake_event *)e;
  return !f->s || f->s->completed >= f->seq ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  const struct fake_event *f = (const struct fake_event *)e;
  if (!f->s) return cudaSuccess;
  for (unsigned i = 0; i < nstreams; i++) {
    struct fake_stream *st = &streams[i];
    while (st->completed < st->recorded && st->time[st->completed] <= f->time) st->completed++;
  }
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { (void)a, (void)b; *ms = 0; return cudaSuccess; }

/* ---- the driver calls of expandable segments ---- */

static CUresult cu_get_error_string(CUresult e, const char **s) { (void)e; *s = "fake CUDA driver error"; return CUDA_SUCCESS; }
static CUresult cu_device_get(CUdevice *d, int ordinal) { *d = ordinal; return CUDA_SUCCESS; }
static CUresult cu_ctx_get_current(CUcontext *c) { *c = (CUcontext)&streams[0]; return CUDA_SUCCESS; }
static CUresult cu_device_get_attribute(int *v, CUdevice_attribute a, CUdevice d) {
  (void)d;
  *v = a == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED;
  return CUDA_SUCCESS;
}
static CUresult cu_granularity(size_t *g, const CUmemAllocationProp *p, CUmemAllocationGranularity_flags o) {
  (void)p, (void)o;
  *g = 2 * MIB;
  return CUDA_SUCCESS;
}
static CUresult cu_address_reserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
                                   unsigned long long flags) {
  (void)addr, (void)flags;
  *p = bump(size, align > 2 * MIB ? align : 2 * MIB);
  return CUDA_SUCCESS;
}
static CUresult cu_address_free(CUdeviceptr p, size_t size) { (void)p, (void)size; return CUDA_SUCCESS; }
static CUresult cu_create(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *p,
                          unsigned long long flags) {
  (void)p, (void)flags;
  if (size > capacity() - used || nhandles == MAX_ALLOCS) return CUDA_ERROR_OUT_OF_MEMORY;
  handles[nhandles++] = size;
  used += size;
  *h = nhandles;
  return CUDA_SUCCESS;
}
static CUresult cu_release(CUmemGenericAllocationHandle h) {
  used -= handles[h - 1];
  handles[h - 1] = 0;
  return CUDA_SUCCESS;
}
static CUresult cu_map(CUdeviceptr p, size_t size, size_t off, CUmemGenericAllocationHandle h,
                       unsigned long long flags) {
  (void)p, (void)size, (void)off, (void)h, (void)flags;
  return CUDA_SUCCESS;
}
static CUresult cu_unmap(CUdeviceptr p, size_t size) { (void)p, (void)size; return CUDA_SUCCESS; }
static CUresult cu_set_access(CUdeviceptr p, size_t size, const CUmemAccessDesc *d, size_t n) {
  (void)p, (void)size, (void)d, (void)n;
  return CUDA_SUCCESS;
}
static CUresult cu_unsupported(void) { return CUDA_ERROR_NOT_SUPPORTED; }

struct entry {
  const char *name;
  void *fn;
};

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned version,
                                             unsigned long long flags, enum cudaDriverEntryPointQueryResult *status) {
  (void)version, (void)flags;
  static const struct entry entries[] = {
      {"cuGetErrorString", (void *)cu_get_error_string},
      {"cuDeviceGet", (void *)cu_device_get},
      {"cuCtxGetCurrent", (void *)cu_ctx_get_current},
      {"cuDeviceGetAttribute", (void *)cu_device_get_attribute},
      {"cuMemGetAllocationGranularity", (void *)cu_granularity},
      {"cuMemAddressReserve", (void *)cu_address_reserve},
      {"cuMemAddressFree", (void *)cu_address_free},
      {"cuMemCreate", (void *)cu_create},
      {"cuMemRelease", (void *)cu_release},
      {"cuMemMap", (void *)cu_map},
      {"cuMemUnmap", (void *)cu_unmap},
      {"cuMemSetAccess", (void *)cu_set_access},
  };
  *fn = (void *)cu_unsupported;
  for (size_t i = 0; i < sizeof entries / sizeof *entries; i++)
    if (strcmp(entries[i].name, symbol) == 0) *fn = entries[i].fn;
  if (status) *status = cudaDriverEntryPointSuccess;
  return cudaSuccess;
}

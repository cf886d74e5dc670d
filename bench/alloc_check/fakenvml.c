/* A stand-in for NVML (libnvidia-ml.so.1), which PyTorch's caching allocator opens to ask
 * whether the device supports fabric handles for expandable segments
 * (get_fabric_access): one device, without a fabric. Return
 * values are NVML's: 0 success, 3 NVML_ERROR_NOT_SUPPORTED. */
#include <string.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_NOT_SUPPORTED 3

static int device;

int nvmlInit_v2(void) { return NVML_SUCCESS; }
int nvmlDeviceGetHandleByPciBusId_v2(const char *pci_bus_id, void **handle) {
  (void)pci_bus_id;
  *handle = &device;
  return NVML_SUCCESS;
}
/* nvmlGpuFabricInfo_v2 after its version word: cluster UUID, status, clique, state
 * (0: fabric not supported), health mask. */
int nvmlDeviceGetGpuFabricInfoV(void *d, void *info) {
  (void)d;
  memset((char *)info + 4, 0, 32);
  return NVML_SUCCESS;
}
int nvmlDeviceGetComputeRunningProcesses(void *d, unsigned *n, void *infos) {
  (void)d, (void)infos;
  *n = 0;
  return NVML_SUCCESS;
}
int nvmlDeviceGetNvLinkRemoteDeviceType(void *d, unsigned link, int *type) {
  (void)d, (void)link, (void)type;
  return NVML_ERROR_NOT_SUPPORTED;
}
int nvmlDeviceGetNvLinkRemotePciInfo_v2(void *d, unsigned link, void *pci) {
  (void)d, (void)link, (void)pci;
  return NVML_ERROR_NOT_SUPPORTED;
}
int nvmlSystemGetCudaDriverVersion_v2(int *v) { *v = 13000; return NVML_SUCCESS; }

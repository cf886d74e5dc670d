// Makes a CPU-only PyTorch build accept tensors on a fake "cuda" device through autograd.
//
// FakeTensorMode can already create fake CUDA tensors on a CPU-only build (it installs a
// no-op CUDA device guard when it avoids device init). Autograd's engine, though, asks
// which accelerator the build has (at::accelerator::getAccelerator) when it accumulates
// gradients into an input buffer, and a CPU-only build answers "none", which aborts the
// backward. Registering CUDA hooks that report a built, available CUDA with one device
// lets the engine run the backward of fake CUDA tensors; no CUDA call is ever made, since
// every op on those tensors is answered by FakeTensorMode's meta kernels.
//
// The hooks must be registered before anything asks for them (at::detail::getCUDAHooks()
// keeps the first answer), so this library is loaded before `import torch`.
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/FakeGuardImpl.h>

namespace {

struct FakeCUDAHooks final : at::CUDAHooksInterface {
  explicit FakeCUDAHooks(at::CUDAHooksArgs) {}
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return 1; }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  c10::DeviceIndex current_device() const override { return 0; }
  int getNumGPUs() const override { return 1; }
};

}  // namespace

C10_REGISTER_GUARD_IMPL(CUDA, c10::impl::FakeGuardImpl<c10::DeviceType::CUDA>);

namespace at {
C10_REGISTER_TYPED_CLASS(CUDAHooksRegistry, "CUDAHooks", FakeCUDAHooks);
}

// src/core/no_cuda.cpp - the CUDA hooks of a build without CUDA: every GPU request fails closed.
#include "mhc/error.hpp"
#include "src/core/cuda_hooks.hpp"

namespace mhc::detail {

int cuda_device_count() { return 0; }

size_t cuda_prepared_bytes(int32_t, int64_t, int32_t) {
  MHC_FAIL("prepared_bytes: device cuda requested, but this build of mhc has no CUDA backend");
}

void cuda_upload_weights(PreparedWeights::Impl&, void*) {
  MHC_FAIL("prepare: device cuda requested, but this build of mhc has no CUDA backend");
}

void cuda_attach_weights(PreparedWeights::Impl&, const void*) {
  MHC_FAIL("attach_prepared: device cuda requested, but this build of mhc has no CUDA backend");
}

void cuda_create_workspace(Workspace::Impl&) {
  MHC_FAIL("Workspace::create: device cuda requested, but this build of mhc has no CUDA backend");
}

std::shared_ptr<void> cuda_zeroed(Device, size_t) {
  MHC_FAIL("device cuda requested, but this build of mhc has no CUDA backend");
}

void cuda_sync(Device, void*) { MHC_FAIL("device cuda requested, but this build of mhc has no CUDA backend"); }

WarmupReport cuda_warmup(Device, std::vector<const void*>*) {
  MHC_FAIL("warmup: device cuda requested, but this build of mhc has no CUDA backend");
}

std::vector<KernelName> cuda_kernel_names() { return {}; }

}  // namespace mhc::detail

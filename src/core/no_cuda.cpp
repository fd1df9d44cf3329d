// src/core/no_cuda.cpp - the CUDA hooks of a build without CUDA: every GPU request fails closed.
#include "mhc/error.hpp"
#include "src/core/cuda_hooks.hpp"

namespace mhc::detail {

int cuda_device_count() { return 0; }

void cuda_upload_weights(PreparedWeights::Impl&) {
  MHC_FAIL("prepare: device cuda requested, but this build of mhc has no CUDA backend");
}

void cuda_create_workspace(Workspace::Impl&) {
  MHC_FAIL("Workspace::create: device cuda requested, but this build of mhc has no CUDA backend");
}

}  // namespace mhc::detail

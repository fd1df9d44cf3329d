// src/cuda/n4/kernels.hpp - the launchers of the n = 4 kernels, one per kernel file. Each
// takes the plain N4Params (src/cuda/n4/config.cuh) and a LaunchCtx; src/cuda/n4/plan.cu
// decides which run, in which order, over which token slices.
#pragma once

#include "src/cuda/launch.cuh"
#include "src/cuda/n4/config.cuh"

namespace mhc::cuda::n4 {

constexpr int kPostBlocksPerSm = 16;  // post_kernel's grid cap, blocks per multiprocessor

/// mix_kernel (mix_kernel.cu): post stage (p.has_post) and the partial dots of p.T tokens.
void launch_mix_kernel(const N4Params& p, const LaunchCtx& ctx);
/// Sets mix_kernel's dynamic shared memory limit on `device` (the current device); false where
/// the device has less than kMixSmem per block (the variant then declines the mixes ops).
bool configure_mix_kernel(int device);
/// collapse_kernel (collapse_kernel.cu): epilogue of the partials (p.has_mixes) and collapse.
void launch_collapse_kernel(const N4Params& p, const LaunchCtx& ctx);
/// post_kernel (post_kernel.cu): post alone.
void launch_post_kernel(const N4Params& p, const LaunchCtx& ctx);

}  // namespace mhc::cuda::n4

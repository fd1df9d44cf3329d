// src/cuda/check.cuh - CUDA error checks that throw mhc::Error with file:line.
#pragma once

#include <cuda_runtime.h>

#include "mhc/error.hpp"

#define MHC_CUDA_CHECK(expr)                                                               \
  do {                                                                                     \
    const cudaError_t mhc_err_ = (expr);                                                   \
    MHC_CHECK(mhc_err_ == cudaSuccess, #expr, " failed: ", cudaGetErrorName(mhc_err_), " (", \
              cudaGetErrorString(mhc_err_), ")");                                          \
  } while (0)

/// Checks the launch that just happened (configuration errors surface here, not later).
#define MHC_CUDA_CHECK_LAUNCH() MHC_CUDA_CHECK(cudaGetLastError())

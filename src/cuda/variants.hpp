// src/cuda/variants.hpp - the CUDA rows of the variant list (src/registry/registry.cpp).
#pragma once

#include <vector>

#include "src/registry/registry.hpp"

namespace mhc::detail {

/// Every CUDA variant, in priority order (fast paths before the generic path).
std::vector<Variant> cuda_variants();

}  // namespace mhc::detail

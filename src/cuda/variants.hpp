// src/cuda/variants.hpp - the CUDA rows of the variant list (src/registry/registry.cpp), and
// the supports()/run() pair of every CUDA variant.
#pragma once

#include <vector>

#include "src/registry/registry.hpp"

namespace mhc::cuda {

// src/cuda/generic.cu: every operator, any n in 1..8, any H.
bool generic_supports(const detail::Problem& p);
void generic_run(const detail::Problem& p);

}  // namespace mhc::cuda

namespace mhc::detail {

/// Every CUDA variant, in priority order (fast paths before the generic path).
std::vector<Variant> cuda_variants();

}  // namespace mhc::detail

// src/cpu/fast.hpp - the fast CPU backend (fp32, OpenMP over tokens), beside the float64 oracle.
#pragma once

#include "src/core/problem.hpp"

namespace mhc::detail {

/// post for n = 4, any H >= 1, CPU tensors (full or broadcast residual). Every output is the
/// oracle's (reference_run's) bits: the certified fp32 sum, else the oracle's float64 sum.
bool fast_post_supports(const Problem& p);
void fast_post_run(const Problem& p);

}  // namespace mhc::detail

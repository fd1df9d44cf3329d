// src/cpu/reference.hpp - the float64 CPU reference of every operator (the oracle).
#pragma once

#include "src/core/problem.hpp"

namespace mhc::detail {

/// Evaluates any operator of `p` in float64, rounding to bf16 exactly at the points of spec
/// section 3 and nowhere else; fp32 outputs are the float64 values rounded once.
void reference_run(const Problem& p);

/// The spec's Sinkhorn (section 3) on an n x n matrix in place, row-major c[j*n + k].
void reference_sinkhorn(double* c, int n, int iters, double eps);

}  // namespace mhc::detail

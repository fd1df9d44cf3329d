// src/cpu/reference.hpp - the float64 CPU reference of every operator (the oracle).
#pragma once

#include "src/core/problem.hpp"

namespace mhc::detail {

/// Evaluates any operator of `p` in float64, rounding to bf16 exactly at the points of spec
/// section 3 and nowhere else; fp32 outputs are the float64 values rounded once.
void reference_run(const Problem& p);

/// The mixes epilogue of token t from m = (x @ fn^T) * r (p.weights->rows values): pre (returned
/// in pre[0..n)), post and comb (spec section 3; the learned head: pre only), written to the
/// outputs of `p` that are set. The oracle and the fast CPU path share it.
void reference_mixes_epilogue(const Problem& p, int64_t t, const double* m, double* pre);

/// The spec's Sinkhorn (section 3) on an n x n matrix in place, row-major c[j*n + k].
void reference_sinkhorn(double* c, int n, int iters, double eps);

}  // namespace mhc::detail

// src/registry/registry.hpp - the variant list of this build and the dispatcher.
//
// The list is written out by hand, in priority order: the CUDA rows in src/cuda/variants.cu
// (fast paths before the generic path), then the CPU reference rows in registry.cpp. The first
// row whose supports() (and prefer(), where set) accepts the problem wins.
#pragma once

#include <vector>

#include "src/registry/variant.hpp"

namespace mhc::detail {

/// Every variant of this build, in priority order.
const std::vector<Variant>& variants();
/// The first variant supporting `p`, or the forced one (which must exist, match p.op and
/// support p). Throws mhc::Error naming the reason otherwise.
const Variant& select_variant(const Problem& p, const char* forced_id);

}  // namespace mhc::detail

// src/registry/registry.hpp - the explicit variant list and the dispatcher.
//
// Every kernel path is one Variant row: an id "<op>.<variant>" (the same string in logs,
// tests, benchmark JSON and Exec::variant), a supports() predicate that dispatch and the
// launcher's own host checks share, and a run function taking the plain Problem.
// The list is written out by hand in registry.cpp, in priority order: the first row whose
// supports() accepts the problem wins.
#pragma once

#include <vector>

#include "src/core/problem.hpp"

namespace mhc::detail {

struct Variant {
  const char* id;                         // "<op>.<variant>"
  Op op;                                  // which operator it implements
  DeviceType device;                      // where it runs
  const char* envelope;                   // what supports() accepts, in words
  bool (*supports)(const Problem& p);     // shape/layout/device predicate
  void (*run)(const Problem& p);          // asynchronous on p.stream for CUDA
};

/// Every variant of this build, in priority order.
const std::vector<Variant>& variants();
/// The first variant supporting `p`, or the forced one (which must exist, match p.op and
/// support p). Throws mhc::Error naming the reason otherwise.
const Variant& select_variant(const Problem& p, const char* forced_id);

}  // namespace mhc::detail

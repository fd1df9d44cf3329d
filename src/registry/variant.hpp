// src/registry/variant.hpp - one row of the variant list.
//
// Every kernel path is one Variant row: an id "<op>.<variant>" (the same string in logs,
// tests, benchmark JSON and Exec::variant), a supports() predicate that dispatch and the
// launcher's own host checks share, and a run function taking the plain Problem. The backends
// write their rows (src/cuda/variants.cu); the registry (registry.hpp) lists and selects them.
#pragma once

#include "src/core/problem.hpp"

namespace mhc::detail {

struct Variant {
  const char* id;                         // "<op>.<variant>"
  Op op;                                  // which operator it implements
  DeviceType device;                      // where it runs
  const char* envelope;                   // what supports() accepts, in words
  bool (*supports)(const Problem& p);     // shape/layout/device predicate
  void (*run)(const Problem& p);          // asynchronous on p.stream for CUDA
  const char* kernels = "";               // the plan: the kernels it runs, in order ("a -> b")
  // Variants of one family give bit-identical outputs (the same canonical order of the mixes
  // and the same epilogue), so the dispatcher may choose among them by T; tests check it.
  const char* family = "";
  // Where the dispatcher prefers this row (e.g. a T range); null: wherever it is supported. A
  // forced variant (Exec::variant) needs only supports().
  bool (*prefer)(const Problem& p) = nullptr;
};

}  // namespace mhc::detail

// src/registry/registry.cpp - the variant list of this build (the CUDA rows of src/cuda/variants.cu,
// then the CPU rows written here: the fast CPU path before the reference), selection, and mhc::list_variants().
#include "src/registry/registry.hpp"

#include <cstring>
#include <string>

#include "mhc/error.hpp"
#include "mhc/ops.hpp"
#include "src/core/cuda_hooks.hpp"
#include "src/cpu/fast.hpp"
#include "src/cpu/reference.hpp"
#ifdef MHC_WITH_CUDA
#include "src/cuda/variants.hpp"
#endif

namespace mhc::detail {

namespace {

bool cpu_supports(const Problem& p) { return p.device.type == DeviceType::kCPU; }

std::vector<Variant> build_list() {
  constexpr const char* kCpuEnvelope = "any n in 1..8, any H >= 1, CPU tensors (float64 reference)";
  std::vector<Variant> list;
#ifdef MHC_WITH_CUDA
  for (const Variant& v : cuda_variants()) list.push_back(v);
#endif
  // The fast CPU rows come first (the default on the CPU wherever they support the call); the
  // float64 reference stays the oracle. post.cpu_fast gives the reference's bits, so it shares
  // its family; the others have fp32-level mixes (src/cpu/fast_mixes.cpp): a family of their own.
  constexpr const char* kFastEnvelope = "n = 4, any H >= 1, CPU tensors (fp32 SIMD mixes, certified exact sums)";
  constexpr const char* kFastPlan = "post -> dots (AVX2/scalar) -> epilogue -> collapse (OpenMP)";
  auto fast = [&](const char* id, Op op) {
    list.push_back({id, op, DeviceType::kCPU, kFastEnvelope, fast_ops_supports, fast_ops_run, kFastPlan, "cpu_fast"});
  };
  auto ref = [&](const char* id, Op op) {
    list.push_back({id, op, DeviceType::kCPU, kCpuEnvelope, cpu_supports, reference_run, "reference (float64)", "cpu_ref"});
  };
  fast("mixes.cpu_fast", Op::kMixes);
  ref("mixes.cpu_ref", Op::kMixes);
  fast("collapse.cpu_fast", Op::kCollapse);
  ref("collapse.cpu_ref", Op::kCollapse);
  fast("pre.cpu_fast", Op::kPre);
  ref("pre.cpu_ref", Op::kPre);
  fast("pre_broadcast.cpu_fast", Op::kPreBroadcast);
  ref("pre_broadcast.cpu_ref", Op::kPreBroadcast);
  list.push_back({"post.cpu_fast", Op::kPost, DeviceType::kCPU,
                  "n = 4, any H >= 1, CPU tensors (fp32 certified sums, float64 fallback)", fast_post_supports,
                  fast_post_run, "fast_post (OpenMP over tokens)", "cpu_ref"});
  ref("post.cpu_ref", Op::kPost);
  fast("post_pre.cpu_fast", Op::kPostPre);
  ref("post_pre.cpu_ref", Op::kPostPre);
  fast("head.cpu_fast", Op::kHead);
  ref("head.cpu_ref", Op::kHead);
  return list;
}

}  // namespace

const std::vector<Variant>& variants() {
  static const std::vector<Variant> list = build_list();
  return list;
}

const Variant& select_variant(const Problem& p, const char* forced_id) {
  if (forced_id != nullptr && forced_id[0] != '\0') {
    for (const Variant& v : variants()) {
      if (std::strcmp(v.id, forced_id) != 0) continue;
      MHC_CHECK(v.op == p.op, op_name(p.op), ": exec.variant: '", forced_id, "' implements ",
                op_name(v.op), ", not ", op_name(p.op));
      MHC_CHECK(v.supports(p), op_name(p.op), ": exec.variant: '", forced_id,
                "' does not support this call (device ", device_name(p.device), ", n = ", p.n,
                ", H = ", p.H, "); it supports: ", v.envelope);
      return v;
    }
    MHC_FAIL(op_name(p.op), ": exec.variant: no variant named '", forced_id,
             "' in this build (mhc variants lists them)");
  }
  for (const Variant& v : variants()) {
    if (v.op == p.op && v.supports(p) && (v.prefer == nullptr || v.prefer(p))) return v;
  }
  MHC_FAIL(op_name(p.op), ": no variant supports this call (device ", device_name(p.device),
           ", n = ", p.n, ", H = ", p.H, ")");
}

}  // namespace mhc::detail

namespace mhc {

std::vector<VariantInfo> list_variants() {
  std::vector<VariantInfo> out;
  for (const detail::Variant& v : detail::variants()) {
    out.push_back({v.id, v.device == DeviceType::kCUDA ? "cuda" : "cpu", v.envelope, v.kernels, v.family});
  }
  return out;
}

bool cuda_available() { return detail::cuda_device_count() > 0; }

}  // namespace mhc

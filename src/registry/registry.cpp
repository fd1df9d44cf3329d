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
  list.push_back({"mixes.cpu_ref", Op::kMixes, DeviceType::kCPU, kCpuEnvelope, cpu_supports, reference_run, "reference (float64)", "cpu_ref"});
  list.push_back({"collapse.cpu_ref", Op::kCollapse, DeviceType::kCPU, kCpuEnvelope, cpu_supports, reference_run, "reference (float64)", "cpu_ref"});
  list.push_back({"pre.cpu_ref", Op::kPre, DeviceType::kCPU, kCpuEnvelope, cpu_supports, reference_run, "reference (float64)", "cpu_ref"});
  list.push_back({"pre_broadcast.cpu_ref", Op::kPreBroadcast, DeviceType::kCPU, kCpuEnvelope, cpu_supports, reference_run, "reference (float64)", "cpu_ref"});
  // Bit-equal to post.cpu_ref (its outputs are the oracle's bits), so it shares the family.
  list.push_back({"post.cpu_fast", Op::kPost, DeviceType::kCPU,
                  "n = 4, any H >= 1, CPU tensors (fp32 certified sums, float64 fallback)", fast_post_supports,
                  fast_post_run, "fast_post (OpenMP over tokens)", "cpu_ref"});
  list.push_back({"post.cpu_ref", Op::kPost, DeviceType::kCPU, kCpuEnvelope, cpu_supports, reference_run, "reference (float64)", "cpu_ref"});
  list.push_back({"post_pre.cpu_ref", Op::kPostPre, DeviceType::kCPU, kCpuEnvelope, cpu_supports, reference_run, "reference (float64)", "cpu_ref"});
  list.push_back({"head.cpu_ref", Op::kHead, DeviceType::kCPU, kCpuEnvelope, cpu_supports, reference_run, "reference (float64)", "cpu_ref"});
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

// src/core/problem.hpp - the one plain params struct every variant (CPU or CUDA) receives.
//
// The API layer (src/api) validates the caller's TensorViews and lowers every operator to a
// Problem: raw pointers, 64-bit row strides (in elements, dimension 0 only; inner dimensions
// are contiguous), named scalars. Fields an operator does not use stay null.
//
// Every operator is a subset of one per-token pipeline, which is how both backends read it:
//   1. post stage   (post, post_pre):  residual_out = bf16(post_mix*layer_output + comb^T residual)
//   2. mixes stage  (mixes, pre, pre_broadcast, post_pre, head learned): mixes of the
//                    (new) residual -> pre/post/comb
//   3. collapse stage (collapse, pre, pre_broadcast, post_pre, head): layer_input
#pragma once

#include <cstdint>

#include "mhc/config.hpp"
#include "mhc/tensor.hpp"
#include "mhc/weights.hpp"

namespace mhc::detail {

using bf16_t = uint16_t;  // raw bf16 bits; kernels reinterpret as __nv_bfloat16

enum class Op { kMixes, kCollapse, kPre, kPreBroadcast, kPost, kPostPre, kHead };
const char* op_name(Op op);  // "mixes", "post_pre", ... (src/core/problem.cpp)

struct Problem {
  Op op = Op::kMixes;
  Device device{};
  int64_t T = 0;  // tokens
  int32_t n = 0;  // streams
  int64_t H = 0;  // hidden size

  // scalars (spec section 2)
  float norm_eps = 0, pre_eps = 0, sinkhorn_eps = 0, post_scale = 0, rmsnorm_eps = 0;
  int32_t sinkhorn_iters = 0;
  PreSource pre_source = PreSource::kComputed;  // which pre the collapse uses
  HeadKind head_kind = HeadKind::kLearned;       // head only

  // inputs
  const bf16_t* residual = nullptr;        // [T,n,H], or [T,H] when residual_broadcast
  int64_t residual_stride = 0;
  bool residual_broadcast = false;         // pre_broadcast's embedding, or post's first-layer form
  const bf16_t* layer_output = nullptr;    // [T,H]
  int64_t layer_output_stride = 0;
  const float* post_mix = nullptr;         // [T,n]
  int64_t post_mix_stride = 0;
  const float* comb_mix = nullptr;         // [T,n,n]
  int64_t comb_mix_stride = 0;
  const float* pre_mix_in = nullptr;       // [T,n], PreSource::kCarried / HeadKind::kCarried
  int64_t pre_mix_in_stride = 0;
  const bf16_t* rmsnorm_weight = nullptr;  // [H] or null (no fold)
  const PreparedWeights::Impl* weights = nullptr;  // mix block or head

  // outputs
  bf16_t* residual_out = nullptr;          // [T,n,H]
  int64_t residual_out_stride = 0;
  bf16_t* layer_input = nullptr;           // [T,H]; collapse / head output
  int64_t layer_input_stride = 0;
  float* pre_mix_out = nullptr;            // [T,n]
  int64_t pre_mix_out_stride = 0;
  float* post_mix_out = nullptr;           // [T,n]
  int64_t post_mix_out_stride = 0;
  float* comb_mix_out = nullptr;           // [T,n,n]
  int64_t comb_mix_out_stride = 0;

  // execution
  void* stream = nullptr;
  Workspace::Impl* workspace = nullptr;

  // derived
  int64_t K() const { return static_cast<int64_t>(n) * H; }
  int32_t M() const { return (n + 2) * n; }
  bool has_post_stage() const { return op == Op::kPost || op == Op::kPostPre; }
  bool has_mixes_stage() const {
    return op == Op::kMixes || op == Op::kPre || op == Op::kPreBroadcast || op == Op::kPostPre ||
           (op == Op::kHead && head_kind == HeadKind::kLearned);
  }
  bool has_collapse_stage() const { return op != Op::kMixes && op != Op::kPost; }
  /// The mean head: its collapse is the exact sum of the streams divided by n.
  bool mean_head() const { return op == Op::kHead && head_kind == HeadKind::kMean; }
};

}  // namespace mhc::detail

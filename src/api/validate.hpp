// src/api/validate.hpp - the checks of spec section 7, shared by every operator's entry point.
//
// Every message reads "<op>: <tensor>: expected <what>, got <actual>". Checks run before any
// output is touched.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "mhc/config.hpp"
#include "mhc/ops.hpp"
#include "mhc/tensor.hpp"
#include "src/core/problem.hpp"

namespace mhc::detail {

class Checker {
 public:
  Checker(Op op, const Config& config);

  /// Checks a tensor whose dimension 0 is tokens (any stride >= row length) and whose inner
  /// dimensions are contiguous. The first tensor checked fixes the call's device.
  void tensor(const TensorView& t, const char* name, DType dtype, std::initializer_list<int64_t> shape);
  /// Same, when `t` is present; nothing when absent.
  void optional(const TensorView& t, const char* name, DType dtype, std::initializer_list<int64_t> shape);
  /// An output: checked like an input, and exec() checks that it overlaps no other tensor. Two
  /// views whose byte ranges interleave are accepted when they have the same row stride and the
  /// rows of one fit in the gaps between the rows of the other (buf[:, 0, :] and buf[:, 1, :]).
  void output(const TensorView& t, const char* name, DType dtype, std::initializer_list<int64_t> shape);
  void optional_output(const TensorView& t, const char* name, DType dtype, std::initializer_list<int64_t> shape);
  /// Checks that `t` is absent (an argument the chosen mode does not use).
  void absent(const TensorView& t, const char* name, const char* why);
  /// Checks prepared weights against the config and the call's device.
  void weights(const PreparedWeights* w, const char* name, bool head);
  /// Last check of every operator: no output overlaps any other tensor of the call, and the
  /// workspace is there when the call runs on CUDA.
  void exec(const Exec& e);

  /// The problem every operator starts from: op, device, T, n, H, scalars, stream, workspace.
  Problem problem(int64_t T, const Exec& e) const;
  const char* op_name() const { return op_name_; }
  Device device() const { return device_; }

 private:
  Op op_;
  const char* op_name_;
  Config config_;
  Device device_{};
  bool device_set_ = false;
  struct Seen {
    const char* name;
    uintptr_t begin, end;  // byte range
    bool output;
    uint64_t row_bytes;     // bytes of one row (dimension 0 index), for strided views
    uint64_t stride_bytes;  // row stride in bytes; 0 when the view has fewer than 2 rows
  };
  // The tensors checked so far, in place (no heap allocation per call): post_pre, the widest
  // operator, has 11.
  static constexpr int kMaxSeen = 16;
  Seen seen_[kMaxSeen];
  int num_seen_ = 0;
};

/// Row stride (elements) of a token-major tensor, or 0 when absent.
int64_t row_stride(const TensorView& t);
template <typename T>
T* ptr(const TensorView& t) {
  return t.present() ? static_cast<T*>(t.data) : nullptr;
}

/// Points a Problem field (and its row stride) at a view; null when the view is absent.
template <typename T>
void bind(const TensorView& t, T*& field, int64_t& stride) {
  field = ptr<T>(t);
  stride = row_stride(t);
}

/// The pre half shared by pre, pre_broadcast and post_pre: the weights, the carried pre, the
/// RMSNorm weight and the outputs layer_input, post, comb and fresh pre.
struct PreStage {
  PreSource pre_source;
  const PreparedWeights* weights;
  const TensorView* pre_mix_in;
  const TensorView* rmsnorm_weight;
  const TensorView* layer_input;
  const TensorView* post_mix;  const char* post_mix_name;
  const TensorView* comb_mix;  const char* comb_mix_name;
  const TensorView* pre_mix_out;
};
/// Checks the pre half of a call with T tokens and fills it into `p`.
void lower_pre_stage(Checker& c, const PreStage& s, int64_t T, Problem& p);

/// Runs the variant the dispatcher picks (or exec.variant). T = 0 runs nothing.
void execute(const Problem& p, const char* forced_variant);
/// The id of the variant execute() would run.
std::string select_id(const Problem& p, const char* forced_variant);

}  // namespace mhc::detail

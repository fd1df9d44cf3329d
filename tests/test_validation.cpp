// tests/test_validation.cpp - the failure rules of spec section 7 on the CPU.
//
// Every bad input must throw mhc::Error whose message names the tensor (or field) and the
// expected value, and nothing may be written: outputs start as 0xFF poison (with slack past
// the end of every buffer) and inputs are snapshotted; both are checked after each throw.
// Suites: Bad (rejections, and a positive control that the untouched arguments run) and
// Strided (row strides > row length are accepted and give the contiguous result).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "mhc/mhc.hpp"
#include "tools/model.hpp"

namespace {

using mhc::Config;
using mhc::DType;
using mhc::HeadKind;
using mhc::PreSource;
using mhc::TensorView;
using mhc::tools::Rng;
using Bits = std::vector<uint16_t>;
using Floats = std::vector<float>;

constexpr size_t kSlack = 128;  // elements past the end of every buffer (room for bad views)

TensorView bf16_view(const Bits& v, std::initializer_list<int64_t> shape) {
  return mhc::make_view(v.data(), DType::kBFloat16, shape);
}
TensorView f32_view(const Floats& v, std::initializer_list<int64_t> shape) {
  return mhc::make_view(v.data(), DType::kFloat32, shape);
}
// Same view, row stride (dimension 0) replaced.
TensorView with_row_stride(TensorView t, int64_t stride) {
  t.strides[0] = stride;
  return t;
}
// Same view, data pointer moved by `bytes`.
TensorView shifted_by(TensorView t, int64_t bytes) {
  t.data = static_cast<char*>(t.data) + bytes;
  return t;
}
TensorView on_device(TensorView t, mhc::Device d) {
  t.device = d;
  return t;
}
const mhc::Device kCuda0{mhc::DeviceType::kCUDA, 0};
const mhc::Device kCuda1{mhc::DeviceType::kCUDA, 1};

Bits poisoned_bits(int64_t count) { return Bits(static_cast<size_t>(count) + kSlack, 0xffffu); }
Floats poisoned_floats(int64_t count) {
  Floats v(static_cast<size_t>(count) + kSlack);
  std::memset(v.data(), 0xff, v.size() * sizeof(float));
  return v;
}
template <typename V>
bool all_poisoned(const V& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(v[0]); ++i) {
    if (p[i] != 0xffu) return false;
  }
  return true;
}
template <typename V>
bool same_bytes(const V& a, const V& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
}

Bits random_bits(int64_t count, Rng& rng) {
  Bits v = mhc::tools::random_bf16(static_cast<size_t>(count), rng);
  v.resize(v.size() + kSlack, 0);
  return v;
}
Floats random_floats(int64_t count, Rng& rng, double lo, double hi) {
  Floats v(static_cast<size_t>(count) + kSlack, 0.0f);
  for (int64_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = static_cast<float>(lo + (hi - lo) * rng.uniform());
  return v;
}

// One mix block (or head) for config c with n streams and hidden size H.
struct Block {
  Floats fn, scale, base;
  mhc::PreparedWeights prepared;
};
Block make_block(int32_t n, int64_t H, Rng& rng, bool head) {
  const int64_t rows = head ? n : (n + 2) * n, K = n * H;
  Block b;
  b.fn = mhc::tools::random_f32(static_cast<size_t>(rows * K), rng, 1.0 / std::sqrt(static_cast<double>(K)));
  b.scale = head ? Floats{1.25f} : Floats{1.0f, 0.75f, 1.5f};
  b.base = mhc::tools::random_f32(static_cast<size_t>(rows), rng, 0.5);
  if (head) {
    b.prepared = mhc::prepare_head({f32_view(b.fn, {rows, K}), f32_view(b.scale, {1}), f32_view(b.base, {rows})}, n, H,
                                   mhc::Device{});
  } else {
    b.prepared = mhc::prepare({f32_view(b.fn, {rows, K}), f32_view(b.scale, {3}), f32_view(b.base, {rows})}, n, H,
                              mhc::Device{});
  }
  return b;
}

// The message of the mhc::Error that `call` throws; `thrown` tells whether it threw.
std::string error_of(const std::function<void()>& call, bool& thrown) {
  thrown = false;
  try {
    call();
  } catch (const mhc::Error& e) {
    thrown = true;
    return e.message();
  }
  return "";
}

void expect_message(const std::function<void()>& call, std::initializer_list<const char*> needles) {
  bool thrown = false;
  const std::string message = error_of(call, thrown);
  EXPECT_TRUE(thrown) << "no mhc::Error was thrown";
  for (const char* needle : needles) {
    EXPECT_NE(message.find(needle), std::string::npos) << "message \"" << message << "\" lacks \"" << needle << "\"";
  }
}

// =============================================================================================
// The fixture: valid arguments for every operator at n = 3, H = 40, T = 5 (numbers chosen so
// that each dimension reads differently in a message).

class Bad : public ::testing::Test {
 protected:
  static constexpr int64_t T = 5;
  static constexpr int32_t n = 3;
  static constexpr int64_t H = 40;

  void SetUp() override {
    c.n = n;
    c.H = H;
    Rng rng(1234);
    residual = random_bits(T * n * H, rng);
    embedding = random_bits(T * H, rng);
    layer_output = random_bits(T * H, rng);
    norm = random_bits(H, rng);
    post_mix = random_floats(T * n, rng, 0.1, 1.9);
    comb_mix = random_floats(T * n * n, rng, 0.0, 1.0);
    pre_mix_in = random_floats(T * n, rng, 0.1, 1.1);
    block = make_block(n, H, rng, false);
    head = make_block(n, H, rng, true);
    snapshot_ = {residual, embedding, layer_output, norm};
    snapshot_f_ = {post_mix, comb_mix, pre_mix_in};
    poison();
  }

  void poison() {
    residual_out = poisoned_bits(T * n * H);
    layer_input = poisoned_bits(T * H);
    pre_mix_out = poisoned_floats(T * n);
    post_mix_out = poisoned_floats(T * n);
    comb_mix_out = poisoned_floats(T * n * n);
  }

  bool outputs_poisoned() const {
    return all_poisoned(residual_out) && all_poisoned(layer_input) && all_poisoned(pre_mix_out) &&
           all_poisoned(post_mix_out) && all_poisoned(comb_mix_out);
  }
  bool inputs_unchanged() const {
    return same_bytes(residual, snapshot_[0]) && same_bytes(embedding, snapshot_[1]) &&
           same_bytes(layer_output, snapshot_[2]) && same_bytes(norm, snapshot_[3]) &&
           same_bytes(post_mix, snapshot_f_[0]) && same_bytes(comb_mix, snapshot_f_[1]) &&
           same_bytes(pre_mix_in, snapshot_f_[2]);
  }

  // Expects the call to throw mhc::Error naming every needle and to write nothing. Restores
  // the buffers afterwards so that one failure does not spill into the next case.
  void expect_rejected(const std::function<void()>& call, std::initializer_list<const char*> needles) {
    expect_message(call, needles);
    EXPECT_TRUE(outputs_poisoned()) << "an output was written by a call that failed validation";
    EXPECT_TRUE(inputs_unchanged()) << "an input was written by a call that failed validation";
    poison();
    residual = snapshot_[0];
    embedding = snapshot_[1];
    layer_output = snapshot_[2];
    norm = snapshot_[3];
    post_mix = snapshot_f_[0];
    comb_mix = snapshot_f_[1];
    pre_mix_in = snapshot_f_[2];
  }

  mhc::MixesArgs mixes_args() const {
    mhc::MixesArgs a;
    a.config = c;
    a.residual = bf16_view(residual, {T, n, H});
    a.weights = &block.prepared;
    a.pre_mix = f32_view(pre_mix_out, {T, n});
    a.post_mix = f32_view(post_mix_out, {T, n});
    a.comb_mix = f32_view(comb_mix_out, {T, n, n});
    return a;
  }
  mhc::CollapseArgs collapse_args() const {
    mhc::CollapseArgs a;
    a.config = c;
    a.pre_source = PreSource::kCarried;
    a.residual = bf16_view(residual, {T, n, H});
    a.pre_mix = f32_view(pre_mix_in, {T, n});
    a.rmsnorm_weight = bf16_view(norm, {H});
    a.layer_input = bf16_view(layer_input, {T, H});
    return a;
  }
  mhc::PreArgs pre_args() const {
    mhc::PreArgs a;
    a.config = c;
    a.pre_source = PreSource::kCarried;
    a.residual = bf16_view(residual, {T, n, H});
    a.weights = &block.prepared;
    a.pre_mix_in = f32_view(pre_mix_in, {T, n});
    a.rmsnorm_weight = bf16_view(norm, {H});
    a.layer_input = bf16_view(layer_input, {T, H});
    a.post_mix = f32_view(post_mix_out, {T, n});
    a.comb_mix = f32_view(comb_mix_out, {T, n, n});
    a.pre_mix_out = f32_view(pre_mix_out, {T, n});
    return a;
  }
  mhc::PreBroadcastArgs pre_broadcast_args() const {
    mhc::PreBroadcastArgs a;
    a.config = c;
    a.pre_source = PreSource::kCarried;
    a.embedding = bf16_view(embedding, {T, H});
    a.weights = &block.prepared;
    a.pre_mix_in = f32_view(pre_mix_in, {T, n});
    a.rmsnorm_weight = bf16_view(norm, {H});
    a.layer_input = bf16_view(layer_input, {T, H});
    a.post_mix = f32_view(post_mix_out, {T, n});
    a.comb_mix = f32_view(comb_mix_out, {T, n, n});
    a.pre_mix_out = f32_view(pre_mix_out, {T, n});
    a.residual_out = bf16_view(residual_out, {T, n, H});
    return a;
  }
  mhc::PostArgs post_args() const {
    mhc::PostArgs a;
    a.config = c;
    a.layer_output = bf16_view(layer_output, {T, H});
    a.residual = bf16_view(residual, {T, n, H});
    a.post_mix = f32_view(post_mix, {T, n});
    a.comb_mix = f32_view(comb_mix, {T, n, n});
    a.residual_out = bf16_view(residual_out, {T, n, H});
    return a;
  }
  mhc::PostPreArgs post_pre_args() const {
    mhc::PostPreArgs a;
    a.config = c;
    a.pre_source = PreSource::kCarried;
    a.layer_output = bf16_view(layer_output, {T, H});
    a.residual = bf16_view(residual, {T, n, H});
    a.post_mix = f32_view(post_mix, {T, n});
    a.comb_mix = f32_view(comb_mix, {T, n, n});
    a.weights = &block.prepared;
    a.pre_mix_in = f32_view(pre_mix_in, {T, n});
    a.rmsnorm_weight = bf16_view(norm, {H});
    a.residual_out = bf16_view(residual_out, {T, n, H});
    a.layer_input = bf16_view(layer_input, {T, H});
    a.post_mix_out = f32_view(post_mix_out, {T, n});
    a.comb_mix_out = f32_view(comb_mix_out, {T, n, n});
    a.pre_mix_out = f32_view(pre_mix_out, {T, n});
    return a;
  }
  mhc::HeadArgs head_args(HeadKind kind) const {
    mhc::HeadArgs a;
    a.config = c;
    a.kind = kind;
    a.residual = bf16_view(residual, {T, n, H});
    if (kind == HeadKind::kLearned) a.weights = &head.prepared;
    if (kind == HeadKind::kCarried) a.pre_mix_in = f32_view(pre_mix_in, {T, n});
    a.rmsnorm_weight = bf16_view(norm, {H});
    a.output = bf16_view(layer_input, {T, H});
    return a;
  }

  Config c;
  Bits residual, embedding, layer_output, norm;  // inputs
  Floats post_mix, comb_mix, pre_mix_in;         // inputs
  Block block, head;
  Bits residual_out, layer_input;                // outputs (head writes layer_input)
  Floats pre_mix_out, post_mix_out, comb_mix_out;

 private:
  std::vector<Bits> snapshot_;
  std::vector<Floats> snapshot_f_;
};

// SCOPED_TRACE names the failing case by its line.
#define EXPECT_REJECTED(call, ...)                    \
  do {                                                \
    SCOPED_TRACE(#call);                              \
    expect_rejected([&] { call; }, {__VA_ARGS__});    \
  } while (0)

// Positive control: every argument set the other tests break runs as given and writes.
TEST_F(Bad, UntouchedArgumentsRunAndWrite) {
  EXPECT_NO_THROW(mhc::mixes(mixes_args()));
  EXPECT_FALSE(all_poisoned(Floats(comb_mix_out.begin(), comb_mix_out.begin() + T * n * n)));
  poison();
  EXPECT_NO_THROW(mhc::collapse(collapse_args()));
  EXPECT_FALSE(all_poisoned(Bits(layer_input.begin(), layer_input.begin() + T * H)));
  poison();
  EXPECT_NO_THROW(mhc::pre(pre_args()));
  EXPECT_FALSE(all_poisoned(Floats(pre_mix_out.begin(), pre_mix_out.begin() + T * n)));
  poison();
  EXPECT_NO_THROW(mhc::pre_broadcast(pre_broadcast_args()));
  EXPECT_FALSE(all_poisoned(Bits(residual_out.begin(), residual_out.begin() + T * n * H)));
  poison();
  EXPECT_NO_THROW(mhc::post(post_args()));
  EXPECT_FALSE(all_poisoned(Bits(residual_out.begin(), residual_out.begin() + T * n * H)));
  poison();
  EXPECT_NO_THROW(mhc::post_pre(post_pre_args()));
  EXPECT_FALSE(all_poisoned(Floats(post_mix_out.begin(), post_mix_out.begin() + T * n)));
  poison();
  for (HeadKind kind : {HeadKind::kLearned, HeadKind::kCarried, HeadKind::kMean}) {
    EXPECT_NO_THROW(mhc::head(head_args(kind)));
    EXPECT_FALSE(all_poisoned(Bits(layer_input.begin(), layer_input.begin() + T * H)));
    poison();
  }
  // The slack past every buffer is never written by a valid call.
  mhc::post_pre(post_pre_args());
  EXPECT_TRUE(all_poisoned(Bits(residual_out.end() - kSlack, residual_out.end())));
  EXPECT_TRUE(all_poisoned(Bits(layer_input.end() - kSlack, layer_input.end())));
  EXPECT_TRUE(all_poisoned(Floats(comb_mix_out.end() - kSlack, comb_mix_out.end())));
}

TEST_F(Bad, WrongDtype) {
  {
    auto a = pre_args();
    a.residual.dtype = DType::kFloat32;
    EXPECT_REJECTED(mhc::pre(a), "residual", "expected dtype bf16", "got fp32");
  }
  {
    auto a = post_args();
    a.post_mix.dtype = DType::kBFloat16;
    EXPECT_REJECTED(mhc::post(a), "post_mix", "expected dtype fp32", "got bf16");
  }
  {
    auto a = collapse_args();
    a.rmsnorm_weight.dtype = DType::kFloat16;
    EXPECT_REJECTED(mhc::collapse(a), "rmsnorm_weight", "expected dtype bf16", "got fp16");
  }
  {
    auto a = post_pre_args();
    a.layer_input.dtype = DType::kUInt8;
    EXPECT_REJECTED(mhc::post_pre(a), "layer_input", "expected dtype bf16", "got uint8");
  }
  {
    auto a = post_pre_args();
    a.comb_mix_out.dtype = DType::kInt32;
    EXPECT_REJECTED(mhc::post_pre(a), "comb_mix_out", "expected dtype fp32", "got int32");
  }
  {
    auto a = mixes_args();
    a.pre_mix.dtype = DType::kFloat64;
    EXPECT_REJECTED(mhc::mixes(a), "pre_mix", "expected dtype fp32", "got fp64");
  }
  {
    auto a = pre_broadcast_args();
    a.embedding.dtype = DType::kInt64;
    EXPECT_REJECTED(mhc::pre_broadcast(a), "embedding", "expected dtype bf16", "got int64");
  }
  {
    auto a = head_args(HeadKind::kCarried);
    a.pre_mix_in.dtype = DType::kBFloat16;
    EXPECT_REJECTED(mhc::head(a), "pre_mix_in", "expected dtype fp32", "got bf16");
  }
}

TEST_F(Bad, WrongShape) {
  {
    auto a = mixes_args();
    a.residual = bf16_view(residual, {T, n, H - 1});
    EXPECT_REJECTED(mhc::mixes(a), "residual", "to be 40", "got 39");
  }
  {
    auto a = mixes_args();
    a.pre_mix = f32_view(pre_mix_out, {T + 1, n});
    EXPECT_REJECTED(mhc::mixes(a), "pre_mix", "to be 5", "got 6");
  }
  {
    auto a = post_args();
    a.comb_mix = f32_view(comb_mix, {T, n, n + 1});
    EXPECT_REJECTED(mhc::post(a), "comb_mix", "to be 3", "got 4");
  }
  {
    auto a = post_pre_args();
    a.layer_output = bf16_view(layer_output, {T, H + 1});
    EXPECT_REJECTED(mhc::post_pre(a), "layer_output", "to be 40", "got 41");
  }
  {
    auto a = post_pre_args();
    a.post_mix_out = f32_view(post_mix_out, {T - 1, n});
    EXPECT_REJECTED(mhc::post_pre(a), "post_mix_out", "to be 5", "got 4");
  }
  {
    auto a = collapse_args();
    a.rmsnorm_weight = bf16_view(norm, {H - 1});
    EXPECT_REJECTED(mhc::collapse(a), "rmsnorm_weight", "to be 40", "got 39");
  }
  {
    auto a = pre_broadcast_args();
    a.residual_out = bf16_view(residual_out, {T, n - 1, H});
    EXPECT_REJECTED(mhc::pre_broadcast(a), "residual_out", "to be 3", "got 2");
  }
  {
    auto a = head_args(HeadKind::kCarried);
    a.pre_mix_in = f32_view(pre_mix_in, {T, n + 2});
    EXPECT_REJECTED(mhc::head(a), "pre_mix_in", "to be 3", "got 5");
  }
  {  // post's broadcast-form residual still has to match [T, H]
    auto a = post_args();
    a.residual = bf16_view(embedding, {T, H + 2});
    EXPECT_REJECTED(mhc::post(a), "residual", "to be 40", "got 42");
  }
}

TEST_F(Bad, WrongRank) {
  {
    auto a = pre_args();
    a.residual = bf16_view(residual, {T, n * H});
    EXPECT_REJECTED(mhc::pre(a), "residual", "expected rank 3", "got rank 2");
  }
  {
    auto a = post_args();
    a.residual = bf16_view(residual, {T, 1, n, H});
    EXPECT_REJECTED(mhc::post(a), "residual", "expected rank 3", "got rank 4");
  }
  {
    auto a = post_pre_args();
    a.residual = bf16_view(residual, {T * n * H});
    EXPECT_REJECTED(mhc::post_pre(a), "residual", "expected rank 3", "got rank 1");
  }
  {
    auto a = mixes_args();
    a.comb_mix = f32_view(comb_mix_out, {T, n * n});
    EXPECT_REJECTED(mhc::mixes(a), "comb_mix", "expected rank 3", "got rank 2");
  }
  {
    auto a = collapse_args();
    a.rmsnorm_weight = bf16_view(norm, {1, H});
    EXPECT_REJECTED(mhc::collapse(a), "rmsnorm_weight", "expected rank 1", "got rank 2");
  }
  {
    auto a = head_args(HeadKind::kMean);
    a.output = bf16_view(layer_input, {T, 1, H});
    EXPECT_REJECTED(mhc::head(a), "output", "expected rank 2", "got rank 3");
  }
}

TEST_F(Bad, DeviceMismatch) {
  {
    auto a = post_args();
    a.post_mix = on_device(a.post_mix, kCuda0);
    EXPECT_REJECTED(mhc::post(a), "post_mix", "expected device cpu", "got cuda:0");
  }
  {
    auto a = post_pre_args();
    a.residual_out = on_device(a.residual_out, kCuda1);
    EXPECT_REJECTED(mhc::post_pre(a), "residual_out", "expected device cpu", "got cuda:1");
  }
  {
    auto a = collapse_args();
    a.rmsnorm_weight = on_device(a.rmsnorm_weight, kCuda0);
    EXPECT_REJECTED(mhc::collapse(a), "rmsnorm_weight", "expected device cpu", "got cuda:0");
  }
  {
    auto a = mixes_args();
    a.comb_mix = on_device(a.comb_mix, kCuda0);
    EXPECT_REJECTED(mhc::mixes(a), "comb_mix", "expected device cpu", "got cuda:0");
  }
  {  // the first tensor fixes the device: a CUDA residual makes the CPU outputs the mismatch
    auto a = head_args(HeadKind::kMean);
    a.residual = on_device(a.residual, kCuda0);
    EXPECT_REJECTED(mhc::head(a), "expected device cuda:0", "got cpu");
  }
}

// Every tensor on a GPU, weights prepared for the CPU: the weights are on the wrong device.
TEST_F(Bad, WeightsPreparedForAnotherDevice) {
  {
    auto a = mixes_args();
    for (TensorView* t : {&a.residual, &a.pre_mix, &a.post_mix, &a.comb_mix}) *t = on_device(*t, kCuda0);
    EXPECT_REJECTED(mhc::mixes(a), "weights", "expected weights on cuda:0", "prepared for cpu");
  }
  {
    auto a = pre_args();
    for (TensorView* t : {&a.residual, &a.pre_mix_in, &a.rmsnorm_weight, &a.layer_input, &a.post_mix, &a.comb_mix,
                          &a.pre_mix_out}) {
      *t = on_device(*t, kCuda1);
    }
    EXPECT_REJECTED(mhc::pre(a), "weights", "expected weights on cuda:1", "prepared for cpu");
  }
  {
    auto a = head_args(HeadKind::kLearned);
    for (TensorView* t : {&a.residual, &a.rmsnorm_weight, &a.output}) *t = on_device(*t, kCuda0);
    EXPECT_REJECTED(mhc::head(a), "weights", "expected weights on cuda:0", "prepared for cpu");
  }
}

TEST_F(Bad, CudaCallWithoutWorkspace) {
  auto a = collapse_args();
  for (TensorView* t : {&a.residual, &a.pre_mix, &a.rmsnorm_weight, &a.layer_input}) *t = on_device(*t, kCuda0);
  EXPECT_REJECTED(mhc::collapse(a), "exec.workspace", "expected a workspace");
}

TEST_F(Bad, WeightsForAnotherShapeOrKind) {
  Rng rng(99);
  const Block other_n = make_block(n - 1, H, rng, false);
  const Block other_h = make_block(n, H + 1, rng, false);
  const Block other_head_n = make_block(n + 1, H, rng, true);
  const mhc::PreparedWeights empty;
  {
    auto a = pre_args();
    a.weights = &other_n.prepared;
    EXPECT_REJECTED(mhc::pre(a), "weights", "weights for n = 3", "got n = 2");
  }
  {
    auto a = post_pre_args();
    a.weights = &other_h.prepared;
    EXPECT_REJECTED(mhc::post_pre(a), "weights", "weights for H = 40", "got H = 41");
  }
  {
    auto a = mixes_args();
    a.weights = &head.prepared;
    EXPECT_REJECTED(mhc::mixes(a), "weights", "expected mix-block weights", "got head weights");
  }
  {
    auto a = pre_broadcast_args();
    a.weights = &head.prepared;
    EXPECT_REJECTED(mhc::pre_broadcast(a), "weights", "expected mix-block weights", "got head weights");
  }
  {
    auto a = head_args(HeadKind::kLearned);
    a.weights = &block.prepared;
    EXPECT_REJECTED(mhc::head(a), "weights", "expected head weights", "got mix-block weights");
  }
  {
    auto a = head_args(HeadKind::kLearned);
    a.weights = &other_head_n.prepared;
    EXPECT_REJECTED(mhc::head(a), "weights", "weights for n = 3", "got n = 4");
  }
  {
    auto a = post_pre_args();
    a.weights = nullptr;
    EXPECT_REJECTED(mhc::post_pre(a), "weights", "expected prepared weights");
  }
  {
    auto a = pre_args();
    a.weights = &empty;
    EXPECT_REJECTED(mhc::pre(a), "weights", "expected prepared weights");
  }
  {
    auto a = head_args(HeadKind::kLearned);
    a.weights = nullptr;
    EXPECT_REJECTED(mhc::head(a), "weights", "expected prepared weights");
  }
}

TEST_F(Bad, NullDataPointer) {
  {
    auto a = pre_args();
    a.residual.data = nullptr;
    EXPECT_REJECTED(mhc::pre(a), "residual", "null data pointer", "600 elements");
  }
  {
    auto a = collapse_args();
    a.layer_input.data = nullptr;
    EXPECT_REJECTED(mhc::collapse(a), "layer_input", "null data pointer");
  }
  {
    auto a = post_pre_args();
    a.pre_mix_in.data = nullptr;
    EXPECT_REJECTED(mhc::post_pre(a), "pre_mix_in", "null data pointer");
  }
  {
    auto a = post_args();
    a.comb_mix.data = nullptr;
    EXPECT_REJECTED(mhc::post(a), "comb_mix", "null data pointer");
  }
  {
    auto a = collapse_args();
    a.rmsnorm_weight.data = nullptr;
    EXPECT_REJECTED(mhc::collapse(a), "rmsnorm_weight", "null data pointer");
  }
}

TEST_F(Bad, MisalignedPointer) {
  {
    auto a = pre_args();
    a.residual = shifted_by(a.residual, 1);
    EXPECT_REJECTED(mhc::pre(a), "residual", "2-byte aligned");
  }
  {
    auto a = post_args();
    a.post_mix = shifted_by(a.post_mix, 2);
    EXPECT_REJECTED(mhc::post(a), "post_mix", "4-byte aligned");
  }
  {
    auto a = post_pre_args();
    a.comb_mix_out = shifted_by(a.comb_mix_out, 1);
    EXPECT_REJECTED(mhc::post_pre(a), "comb_mix_out", "4-byte aligned");
  }
  {
    auto a = collapse_args();
    a.rmsnorm_weight = shifted_by(a.rmsnorm_weight, 1);
    EXPECT_REJECTED(mhc::collapse(a), "rmsnorm_weight", "2-byte aligned");
  }
  {
    auto a = pre_broadcast_args();
    a.embedding = shifted_by(a.embedding, 3);
    EXPECT_REJECTED(mhc::pre_broadcast(a), "embedding", "2-byte aligned");
  }
}

TEST_F(Bad, NonContiguousInnerDimensions) {
  Bits wide(residual.size() * 2, 0);  // room for views with doubled strides
  {
    auto a = pre_args();
    a.residual = mhc::make_view(wide.data(), DType::kBFloat16, {T, n, H});
    a.residual.strides[0] = 2 * n * H;
    a.residual.strides[1] = 2 * H;
    a.residual.strides[2] = 2;
    EXPECT_REJECTED(mhc::pre(a), "residual", "contiguous inner dimensions", "dimension 2");
  }
  {  // comb_mix as a transposed view: [j, k] with k-stride n
    auto a = post_args();
    a.comb_mix.strides[1] = 1;
    a.comb_mix.strides[2] = n;
    EXPECT_REJECTED(mhc::post(a), "comb_mix", "contiguous inner dimensions", "dimension 2 has stride 3");
  }
  {
    auto a = collapse_args();
    a.rmsnorm_weight.strides[0] = 2;
    EXPECT_REJECTED(mhc::collapse(a), "rmsnorm_weight", "contiguous", "stride 2");
  }
  {
    auto a = post_pre_args();
    a.layer_input = mhc::make_view(wide.data(), DType::kBFloat16, {T, H});
    a.layer_input.strides[0] = 2 * H;
    a.layer_input.strides[1] = 2;
    EXPECT_REJECTED(mhc::post_pre(a), "layer_input", "contiguous inner dimensions", "dimension 1");
    EXPECT_TRUE(std::all_of(wide.begin(), wide.end(), [](uint16_t v) { return v == 0; }));
  }
}

TEST_F(Bad, RowStrideSmallerThanRow) {
  {
    auto a = collapse_args();
    a.layer_input = with_row_stride(a.layer_input, H - 1);
    EXPECT_REJECTED(mhc::collapse(a), "layer_input", "row stride >= 40", "got 39");
  }
  {
    auto a = mixes_args();
    a.residual = with_row_stride(a.residual, n * H - 1);
    EXPECT_REJECTED(mhc::mixes(a), "residual", "row stride >= 120", "got 119");
  }
  {
    auto a = post_pre_args();
    a.pre_mix_in = with_row_stride(a.pre_mix_in, n - 1);
    EXPECT_REJECTED(mhc::post_pre(a), "pre_mix_in", "row stride >= 3", "got 2");
  }
  {
    auto a = post_args();
    a.layer_output = with_row_stride(a.layer_output, -H);
    EXPECT_REJECTED(mhc::post(a), "layer_output", "row stride >= 40", "got -40");
  }
  {
    auto a = head_args(HeadKind::kMean);
    a.output = with_row_stride(a.output, 0);
    EXPECT_REJECTED(mhc::head(a), "output", "row stride >= 40", "got 0");
  }
}

TEST_F(Bad, StreamCountOutOfRange) {
  for (int32_t bad_n : {0, 9, -1}) {
    const std::string got = "got " + std::to_string(bad_n);
    SCOPED_TRACE(got);
    Config bad = c;
    bad.n = bad_n;
    auto m = mixes_args();
    m.config = bad;
    EXPECT_REJECTED(mhc::mixes(m), "n must be in 1..8", got.c_str());
    auto co = collapse_args();
    co.config = bad;
    EXPECT_REJECTED(mhc::collapse(co), "n must be in 1..8", got.c_str());
    auto p = pre_args();
    p.config = bad;
    EXPECT_REJECTED(mhc::pre(p), "n must be in 1..8", got.c_str());
    auto pb = pre_broadcast_args();
    pb.config = bad;
    EXPECT_REJECTED(mhc::pre_broadcast(pb), "n must be in 1..8", got.c_str());
    auto po = post_args();
    po.config = bad;
    EXPECT_REJECTED(mhc::post(po), "n must be in 1..8", got.c_str());
    auto pp = post_pre_args();
    pp.config = bad;
    EXPECT_REJECTED(mhc::post_pre(pp), "n must be in 1..8", got.c_str());
    auto h = head_args(HeadKind::kMean);
    h.config = bad;
    EXPECT_REJECTED(mhc::head(h), "n must be in 1..8", got.c_str());
  }
}

TEST_F(Bad, HiddenSizeOutOfRange) {
  // Above mhc::kMaxHidden too (issue 17, finding 2: n*H wrapped for H = 2^62 + 16).
  for (int64_t bad_h : {int64_t{0}, int64_t{-7}, mhc::kMaxHidden + 1, (int64_t{1} << 62) + 16}) {
    const std::string got = "got " + std::to_string(bad_h);
    SCOPED_TRACE(got);
    Config bad = c;
    bad.H = bad_h;
    auto pp = post_pre_args();
    pp.config = bad;
    EXPECT_REJECTED(mhc::post_pre(pp), "H must be in 1..1048576", got.c_str());
    auto co = collapse_args();
    co.config = bad;
    EXPECT_REJECTED(mhc::collapse(co), "H must be in 1..1048576", got.c_str());
    auto h = head_args(HeadKind::kLearned);
    h.config = bad;
    EXPECT_REJECTED(mhc::head(h), "H must be in 1..1048576", got.c_str());
  }
}

TEST_F(Bad, SinkhornItersBelowOne) {
  for (int32_t iters : {0, -3}) {
    const std::string got = "got " + std::to_string(iters);
    Config bad = c;
    bad.sinkhorn_iters = iters;
    auto m = mixes_args();
    m.config = bad;
    EXPECT_REJECTED(mhc::mixes(m), "sinkhorn_iters", "must be in 1..", got.c_str());
    auto pp = post_pre_args();
    pp.config = bad;
    EXPECT_REJECTED(mhc::post_pre(pp), "sinkhorn_iters", "must be in 1..", got.c_str());
  }
}

// Issue 17, finding 10: 2^31 - 1 iterations ran for minutes, uninterruptibly.
TEST_F(Bad, SinkhornItersAboveCap) {
  for (int32_t iters : {mhc::kMaxSinkhornIters + 1, std::numeric_limits<int32_t>::max()}) {
    const std::string got = "got " + std::to_string(iters);
    Config bad = c;
    bad.sinkhorn_iters = iters;
    auto m = mixes_args();
    m.config = bad;
    EXPECT_REJECTED(mhc::mixes(m), "sinkhorn_iters must be in 1..1048576", got.c_str());
    auto pp = post_pre_args();
    pp.config = bad;
    EXPECT_REJECTED(mhc::post_pre(pp), "sinkhorn_iters must be in 1..1048576", got.c_str());
  }
}

TEST_F(Bad, NegativeOrNonFiniteEps) {
  float Config::*fields[] = {&Config::norm_eps, &Config::pre_eps, &Config::sinkhorn_eps, &Config::rmsnorm_eps};
  const char* names[] = {"norm_eps", "pre_eps", "sinkhorn_eps", "rmsnorm_eps"};
  for (int i = 0; i < 4; ++i) {
    for (float value : {-1e-6f, -1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      SCOPED_TRACE(std::string(names[i]) + " = " + std::to_string(value));
      Config bad = c;
      bad.*fields[i] = value;
      auto pp = post_pre_args();
      pp.config = bad;
      EXPECT_REJECTED(mhc::post_pre(pp), names[i], "finite and >= 0", "got");
      auto co = collapse_args();
      co.config = bad;
      EXPECT_REJECTED(mhc::collapse(co), names[i], "finite and >= 0", "got");
    }
  }
  for (float value : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    Config bad = c;
    bad.post_scale = value;
    auto m = mixes_args();
    m.config = bad;
    EXPECT_REJECTED(mhc::mixes(m), "post_scale", "finite");
  }
  // validate_config alone names the field too.
  Config bad = c;
  bad.sinkhorn_eps = -0.5f;
  expect_message([&] { mhc::validate_config(bad); }, {"sinkhorn_eps", "-0.5"});
}

TEST_F(Bad, CarriedPreWithoutPreMix) {
  {
    auto a = pre_args();
    a.pre_mix_in = TensorView{};
    EXPECT_REJECTED(mhc::pre(a), "pre_mix_in", "absent");
  }
  {
    auto a = pre_broadcast_args();
    a.pre_mix_in = TensorView{};
    EXPECT_REJECTED(mhc::pre_broadcast(a), "pre_mix_in", "absent");
  }
  {
    auto a = post_pre_args();
    a.pre_mix_in = TensorView{};
    EXPECT_REJECTED(mhc::post_pre(a), "pre_mix_in", "absent");
  }
  {
    auto a = collapse_args();
    a.pre_mix = TensorView{};
    EXPECT_REJECTED(mhc::collapse(a), "pre_mix", "absent");
  }
  {
    auto a = head_args(HeadKind::kCarried);
    a.pre_mix_in = TensorView{};
    EXPECT_REJECTED(mhc::head(a), "pre_mix_in", "absent");
  }
}

TEST_F(Bad, PreSourceTheOperatorCannotUse) {
  {
    auto a = collapse_args();
    a.pre_source = PreSource::kComputed;
    EXPECT_REJECTED(mhc::collapse(a), "pre_source", "expected carried or identity", "got computed");
  }
  {
    auto a = post_pre_args();
    a.pre_source = PreSource::kIdentity;
    EXPECT_REJECTED(mhc::post_pre(a), "pre_source", "got identity");
  }
}

TEST_F(Bad, OutputOverlapsInput) {
  {
    auto a = collapse_args();
    a.layer_input = bf16_view(residual, {T, H});
    EXPECT_REJECTED(mhc::collapse(a), "layer_input", "overlap", "residual");
  }
  {
    auto a = pre_args();
    a.layer_input = shifted_by(bf16_view(residual, {T, H}), 2 * H * 2);
    EXPECT_REJECTED(mhc::pre(a), "layer_input", "overlap", "residual");
  }
  {  // in-place carry of the shifted pre: pre_mix_out would overwrite pre_mix_in before it is used
    auto a = pre_args();
    a.pre_mix_out = f32_view(pre_mix_in, {T, n});
    EXPECT_REJECTED(mhc::pre(a), "pre_mix_out", "overlap", "pre_mix_in");
  }
  {
    auto a = pre_broadcast_args();
    a.pre_mix_out = f32_view(pre_mix_in, {T, n});
    EXPECT_REJECTED(mhc::pre_broadcast(a), "pre_mix_out", "overlap", "pre_mix_in");
  }
  {
    auto a = pre_broadcast_args();
    a.layer_input = bf16_view(embedding, {T, H});
    EXPECT_REJECTED(mhc::pre_broadcast(a), "layer_input", "overlap", "embedding");
  }
  {
    auto a = pre_broadcast_args();
    a.layer_input = shifted_by(bf16_view(residual_out, {T, H}), 4 * n * H * 2);  // inside the last token
    EXPECT_REJECTED(mhc::pre_broadcast(a), "residual_out", "overlap", "layer_input");
  }
  {  // post in place
    auto a = post_args();
    a.residual_out = bf16_view(residual, {T, n, H});
    EXPECT_REJECTED(mhc::post(a), "residual_out", "overlap", "residual");
  }
  {  // a broadcast-form residual inside residual_out
    auto a = post_args();
    a.residual = shifted_by(bf16_view(residual_out, {T, H}), 2 * (T * n * H - T * H));
    EXPECT_REJECTED(mhc::post(a), "residual_out", "overlap", "residual");
  }
  {  // layer_output inside residual_out
    auto a = post_args();
    a.layer_output = shifted_by(bf16_view(residual_out, {T, H}), 2 * H);
    EXPECT_REJECTED(mhc::post(a), "residual_out", "overlap", "layer_output");
  }
  {  // post_pre: the fresh mixes written over the previous ones (last row only)
    auto a = post_pre_args();
    a.post_mix_out = shifted_by(f32_view(post_mix, {T, n}), (T - 1) * n * 4);
    EXPECT_REJECTED(mhc::post_pre(a), "post_mix_out", "overlap", "post_mix");
  }
  {
    auto a = post_pre_args();
    a.comb_mix_out = f32_view(comb_mix, {T, n, n});
    EXPECT_REJECTED(mhc::post_pre(a), "comb_mix_out", "overlap", "comb_mix");
  }
  {
    auto a = post_pre_args();
    a.pre_mix_out = f32_view(pre_mix_in, {T, n});
    EXPECT_REJECTED(mhc::post_pre(a), "pre_mix_out", "overlap", "pre_mix_in");
  }
  {
    auto a = post_pre_args();
    a.residual_out = bf16_view(residual, {T, n, H});
    EXPECT_REJECTED(mhc::post_pre(a), "residual_out", "overlap", "residual");
  }
  {
    auto a = post_pre_args();
    a.layer_input = bf16_view(residual_out, {T, H});
    EXPECT_REJECTED(mhc::post_pre(a), "layer_input", "overlap", "residual_out");
  }
  {
    auto a = head_args(HeadKind::kMean);
    a.output = shifted_by(bf16_view(residual, {T, H}), (T * n * H - 1) * 2);  // shares the last element
    EXPECT_REJECTED(mhc::head(a), "output", "overlap", "residual");
  }
}

TEST_F(Bad, UnknownOrWrongForcedVariant) {
  {
    auto a = post_pre_args();
    a.exec.variant = "post_pre.nope";
    EXPECT_REJECTED(mhc::post_pre(a), "exec.variant", "post_pre.nope");
  }
  {
    auto a = pre_args();
    a.exec.variant = "post_pre.cpu_ref";
    EXPECT_REJECTED(mhc::pre(a), "exec.variant", "post_pre.cpu_ref", "implements post_pre");
  }
  {
    auto a = head_args(HeadKind::kMean);
    a.exec.variant = "";  // empty means the dispatcher's choice
    EXPECT_NO_THROW(mhc::head(a));
    poison();
  }
  {  // the forced id that exists runs
    auto a = post_pre_args();
    a.exec.variant = "post_pre.cpu_ref";
    EXPECT_EQ(mhc::selected_variant(a), "post_pre.cpu_ref");
    EXPECT_NO_THROW(mhc::post_pre(a));
    EXPECT_FALSE(outputs_poisoned());
    poison();
  }
}

// prepare() and prepare_head() reject checkpoint tensors of the wrong shape, dtype or layout.
TEST_F(Bad, PrepareRejectsBadCheckpointTensors) {
  const int64_t M = (n + 2) * n, K = n * H;
  Floats fn(static_cast<size_t>(M * K + 2 * K) + kSlack, 0.5f), scale(8, 1.0f), base(static_cast<size_t>(M) + 8, 0.0f);
  auto good = [&]() {
    return mhc::MixWeightsView{f32_view(fn, {M, K}), f32_view(scale, {3}), f32_view(base, {M})};
  };
  auto prep = [&](const mhc::MixWeightsView& w) { return [w] { (void)mhc::prepare(w, n, H, mhc::Device{}); }; };
  EXPECT_NO_THROW(mhc::prepare(good(), n, H, mhc::Device{}));
  {
    auto w = good();
    w.fn = f32_view(fn, {M, K + 1});
    expect_message(prep(w), {"fn", "to be 120", "got 121"});
  }
  {
    auto w = good();
    w.fn = f32_view(fn, {M + 1, K});
    expect_message(prep(w), {"fn", "to be 15", "got 16"});
  }
  {
    auto w = good();
    w.fn.dtype = DType::kBFloat16;
    expect_message(prep(w), {"fn", "expected dtype fp32", "got bf16"});
  }
  {
    auto w = good();
    w.fn = f32_view(fn, {M * K});
    expect_message(prep(w), {"fn", "expected rank 2", "got rank 1"});
  }
  {  // a transposed view of [K, M] memory
    auto w = good();
    w.fn.strides[0] = 1;
    w.fn.strides[1] = M;
    expect_message(prep(w), {"fn", "contiguous"});
  }
  {
    auto w = good();
    w.fn.data = nullptr;
    expect_message(prep(w), {"fn", "null data pointer"});
  }
  {
    auto w = good();
    w.fn = shifted_by(w.fn, 2);
    expect_message(prep(w), {"fn", "4-byte aligned"});
  }
  {
    auto w = good();
    w.fn = on_device(w.fn, kCuda0);
    expect_message(prep(w), {"fn", "cuda:0"});
  }
  {
    auto w = good();
    w.scale = f32_view(scale, {2});
    expect_message(prep(w), {"scale", "to be 3", "got 2"});
  }
  {
    auto w = good();
    w.scale.dtype = DType::kFloat64;
    expect_message(prep(w), {"scale", "expected dtype fp32", "got fp64"});
  }
  {
    auto w = good();
    w.base = f32_view(base, {M - 1});
    expect_message(prep(w), {"base", "to be 15", "got 14"});
  }
  {
    auto w = good();
    w.base = TensorView{};
    expect_message(prep(w), {"base", "absent"});
  }
  expect_message([&] { (void)mhc::prepare(good(), 0, H, mhc::Device{}); }, {"n must be in 1..8", "got 0"});
  expect_message([&] { (void)mhc::prepare(good(), 9, H, mhc::Device{}); }, {"n must be in 1..8", "got 9"});
  expect_message([&] { (void)mhc::prepare(good(), n, 0, mhc::Device{}); }, {"H must be in 1..", "got 0"});
  // The head: fn_head [n, K], scale_head [1], base_head [n]; a mix block's tensors do not fit.
  const mhc::HeadWeightsView head_good{f32_view(fn, {n, K}), f32_view(scale, {1}), f32_view(base, {n})};
  EXPECT_NO_THROW(mhc::prepare_head(head_good, n, H, mhc::Device{}));
  auto prep_head = [&](const mhc::HeadWeightsView& w) {
    return [w] { (void)mhc::prepare_head(w, n, H, mhc::Device{}); };
  };
  {
    auto w = head_good;
    w.fn = f32_view(fn, {M, K});
    expect_message(prep_head(w), {"fn_head", "to be 3", "got 15"});
  }
  {
    auto w = head_good;
    w.scale = f32_view(scale, {3});
    expect_message(prep_head(w), {"scale_head", "to be 1", "got 3"});
  }
  {
    auto w = head_good;
    w.base = f32_view(base, {M});
    expect_message(prep_head(w), {"base_head", "to be 3", "got 15"});
  }
}

// =============================================================================================
// Strided: a [T, H] slice of a wider buffer (row stride > row length) is accepted and gives
// the contiguous result; padding is never read or written.

// `rows` rows of `row` elements copied into rows of `stride` elements; padding = fill.
template <typename V>
V spread_rows(const V& src, int64_t rows, int64_t row, int64_t stride, typename V::value_type fill) {
  V out(static_cast<size_t>(rows * stride), fill);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(src.begin() + r * row, src.begin() + (r + 1) * row, out.begin() + r * stride);
  }
  return out;
}
template <typename V>
V gather_rows(const V& src, int64_t rows, int64_t row, int64_t stride) {
  V out;
  for (int64_t r = 0; r < rows; ++r) out.insert(out.end(), src.begin() + r * stride, src.begin() + r * stride + row);
  return out;
}
template <typename V>
bool padding_is(const V& v, int64_t rows, int64_t row, int64_t stride, typename V::value_type fill) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = row; i < stride; ++i) {
      if (std::memcmp(&v[static_cast<size_t>(r * stride + i)], &fill, sizeof fill) != 0) return false;
    }
  }
  return true;
}

// The Bad fixture's arguments, with a strided layer_output (these calls must succeed).
class StridedSlice : public Bad {};

TEST_F(StridedSlice, LayerOutputMatchesContiguous) {
  const int64_t stride = H + 7;
  // NaN in the padding: reading it would poison the result.
  const Bits wide = spread_rows(layer_output, T, H, stride, uint16_t{0x7fc1});
  {
    mhc::post(post_args());
    const Bits want = residual_out;
    poison();
    auto a = post_args();
    a.layer_output = with_row_stride(bf16_view(wide, {T, H}), stride);
    mhc::post(a);
    EXPECT_EQ(Bits(residual_out.begin(), residual_out.begin() + T * n * H), Bits(want.begin(), want.begin() + T * n * H));
    poison();
  }
  {
    mhc::post_pre(post_pre_args());
    const Bits want_res = residual_out, want_in = layer_input;
    const Floats want_comb = comb_mix_out;
    poison();
    auto a = post_pre_args();
    a.layer_output = with_row_stride(bf16_view(wide, {T, H}), stride);
    mhc::post_pre(a);
    EXPECT_TRUE(same_bytes(residual_out, want_res));
    EXPECT_TRUE(same_bytes(layer_input, want_in));
    EXPECT_TRUE(same_bytes(comb_mix_out, want_comb));
    poison();
  }
}

TEST(Strided, EveryRowStrideMatchesContiguous) {
  const int32_t n = 4;
  const int64_t H = 24, T = 6, K = n * H;
  Config c;
  c.n = n;
  c.H = H;
  Rng rng(4242);
  const Block block = make_block(n, H, rng, false);
  const Bits residual = mhc::tools::random_bf16(static_cast<size_t>(T * K), rng);
  const Bits layer_output = mhc::tools::random_bf16(static_cast<size_t>(T * H), rng);
  Bits norm = mhc::tools::random_bf16(static_cast<size_t>(H), rng, 0.2);
  Floats post_mix(static_cast<size_t>(T * n)), comb_mix(static_cast<size_t>(T * n * n)), pre_in(static_cast<size_t>(T * n));
  for (float& v : post_mix) v = static_cast<float>(0.2 + rng.uniform());
  for (float& v : comb_mix) v = static_cast<float>(rng.uniform());
  for (float& v : pre_in) v = static_cast<float>(0.1 + rng.uniform());

  // Contiguous run.
  Bits res_out(static_cast<size_t>(T * K), 0xffff), lay_in(static_cast<size_t>(T * H), 0xffff);
  Floats post_out(static_cast<size_t>(T * n)), comb_out(static_cast<size_t>(T * n * n)), pre_out(static_cast<size_t>(T * n));
  mhc::PostPreArgs a;
  a.config = c;
  a.pre_source = PreSource::kCarried;
  a.layer_output = bf16_view(layer_output, {T, H});
  a.residual = bf16_view(residual, {T, n, H});
  a.post_mix = f32_view(post_mix, {T, n});
  a.comb_mix = f32_view(comb_mix, {T, n, n});
  a.weights = &block.prepared;
  a.pre_mix_in = f32_view(pre_in, {T, n});
  a.rmsnorm_weight = bf16_view(norm, {H});
  a.residual_out = bf16_view(res_out, {T, n, H});
  a.layer_input = bf16_view(lay_in, {T, H});
  a.post_mix_out = f32_view(post_out, {T, n});
  a.comb_mix_out = f32_view(comb_out, {T, n, n});
  a.pre_mix_out = f32_view(pre_out, {T, n});
  mhc::post_pre(a);

  // Every token-major tensor strided, inputs padded with NaN, outputs padded with a marker.
  const float kNaN = std::numeric_limits<float>::quiet_NaN(), kMark = -12345.0f;
  const Bits s_lo = spread_rows(layer_output, T, H, H + 3, uint16_t{0x7fc1});
  const Bits s_res = spread_rows(residual, T, K, K + 5, uint16_t{0x7fc1});
  const Floats s_post = spread_rows(post_mix, T, n, n + 1, kNaN);
  const Floats s_comb = spread_rows(comb_mix, T, n * n, n * n + 2, kNaN);
  const Floats s_pre = spread_rows(pre_in, T, n, n + 3, kNaN);
  Bits s_res_out(static_cast<size_t>(T * (K + 4)), 0x1234), s_lay_in(static_cast<size_t>(T * (H + 9)), 0x1234);
  Floats s_post_out(static_cast<size_t>(T * (n + 2)), kMark), s_comb_out(static_cast<size_t>(T * (n * n + 1)), kMark),
      s_pre_out(static_cast<size_t>(T * (2 * n)), kMark);
  mhc::PostPreArgs s = a;
  s.layer_output = with_row_stride(bf16_view(s_lo, {T, H}), H + 3);
  s.residual = with_row_stride(bf16_view(s_res, {T, n, H}), K + 5);
  s.post_mix = with_row_stride(f32_view(s_post, {T, n}), n + 1);
  s.comb_mix = with_row_stride(f32_view(s_comb, {T, n, n}), n * n + 2);
  s.pre_mix_in = with_row_stride(f32_view(s_pre, {T, n}), n + 3);
  s.residual_out = with_row_stride(bf16_view(s_res_out, {T, n, H}), K + 4);
  s.layer_input = with_row_stride(bf16_view(s_lay_in, {T, H}), H + 9);
  s.post_mix_out = with_row_stride(f32_view(s_post_out, {T, n}), n + 2);
  s.comb_mix_out = with_row_stride(f32_view(s_comb_out, {T, n, n}), n * n + 1);
  s.pre_mix_out = with_row_stride(f32_view(s_pre_out, {T, n}), 2 * n);
  mhc::post_pre(s);

  EXPECT_TRUE(same_bytes(gather_rows(s_res_out, T, K, K + 4), res_out));
  EXPECT_TRUE(same_bytes(gather_rows(s_lay_in, T, H, H + 9), lay_in));
  EXPECT_TRUE(same_bytes(gather_rows(s_post_out, T, n, n + 2), post_out));
  EXPECT_TRUE(same_bytes(gather_rows(s_comb_out, T, n * n, n * n + 1), comb_out));
  EXPECT_TRUE(same_bytes(gather_rows(s_pre_out, T, n, 2 * n), pre_out));
  EXPECT_TRUE(padding_is(s_res_out, T, K, K + 4, uint16_t{0x1234})) << "residual_out padding written";
  EXPECT_TRUE(padding_is(s_lay_in, T, H, H + 9, uint16_t{0x1234})) << "layer_input padding written";
  EXPECT_TRUE(padding_is(s_post_out, T, n, n + 2, kMark)) << "post_mix_out padding written";
  EXPECT_TRUE(padding_is(s_comb_out, T, n * n, n * n + 1, kMark)) << "comb_mix_out padding written";
  EXPECT_TRUE(padding_is(s_pre_out, T, n, 2 * n, kMark)) << "pre_mix_out padding written";
}

// ---- hostile input (issue 17) ---------------------------------------------------------------

// Finding 2: prepare(n = 4, H = 2^62 + 16): n*H wrapped to 64, passed the fn [24, 64] shape check
// and wrote far past fn_b. prepare_head the same.
TEST_F(Bad, PrepareRejectsHiddenSizesWhoseProductWraps) {
  Floats fn(24 * 64, 0.0f), scale(3, 1.0f), base(24, 0.0f);
  const int64_t huge = (int64_t{1} << 62) + 16;
  expect_message([&] {
    (void)mhc::prepare({f32_view(fn, {24, 64}), f32_view(scale, {3}), f32_view(base, {24})}, 4, huge, mhc::Device{});
  }, {"prepare: H must be in 1..1048576", "got 4611686018427387920"});
  Floats hfn(4 * 64, 0.0f), hscale(1, 1.0f), hbase(4, 0.0f);
  expect_message([&] {
    (void)mhc::prepare_head({f32_view(hfn, {4, 64}), f32_view(hscale, {1}), f32_view(hbase, {4})}, 4, huge,
                            mhc::Device{});
  }, {"prepare: H must be in 1..1048576"});
}

// Finding 4: numel, byte ranges and make_view multiplied unchecked; T = 2^61 passed validation
// and T = -3 ran as a no-op.
TEST_F(Bad, TokenCountsThatOverflowOrAreNegative) {
  for (int64_t bad_t : {int64_t{-3}, int64_t{-1}}) {
    const std::string got = "got " + std::to_string(bad_t);
    auto a = collapse_args();
    for (TensorView* v : {&a.residual, &a.pre_mix, &a.layer_input}) v->shape[0] = bad_t;
    EXPECT_REJECTED(mhc::collapse(a), "collapse: residual: expected extents >= 0", got.c_str());
  }
  {
    auto a = collapse_args();
    for (TensorView* v : {&a.residual, &a.pre_mix, &a.layer_input}) v->shape[0] = int64_t{1} << 61;
    EXPECT_REJECTED(mhc::collapse(a), "collapse: residual: expected at most 1099511627776 tokens");
  }
  {
    // Under the token cap, but T * row stride overflows the byte range.
    auto a = post_args();
    a.layer_output.shape[0] = mhc::kMaxTokens;
    a.layer_output.strides[0] = int64_t{1} << 40;
    for (TensorView* v : {&a.residual, &a.post_mix, &a.comb_mix, &a.residual_out}) v->shape[0] = mhc::kMaxTokens;
    EXPECT_REJECTED(mhc::post(a), "post: layer_output", "spans more bytes than the address space holds");
  }
  {
    TensorView t = bf16_view(residual, {T, n, H});
    t.shape[1] = int64_t{1} << 40;
    t.shape[2] = int64_t{1} << 40;
    expect_message([&] { (void)t.numel(); }, {"the element count overflows int64"});
    t.shape[1] = -2;
    expect_message([&] { (void)t.numel(); }, {"negative extent in dimension 1"});
  }
  expect_message([&] { (void)mhc::make_view(residual.data(), DType::kBFloat16, {int64_t{1} << 40, int64_t{1} << 40}); },
                 {"make_view", "the strides overflow int64"});
  expect_message([&] { (void)mhc::make_view(residual.data(), DType::kBFloat16, {4, -3}); },
                 {"make_view: negative extent -3 in dimension 1"});
  int64_t out = 0;
  EXPECT_FALSE(mhc::mul_fits(int64_t{1} << 32, int64_t{1} << 31, &out));
  expect_message([&] { (void)mhc::checked_mul(int64_t{1} << 32, int64_t{1} << 31, "--tokens * H"); },
                 {"--tokens * H: 4294967296 * 2147483648 overflows int64"});
}

// Finding 9: arguments the chosen mode does not use were never looked at.
TEST_F(Bad, ArgumentsTheModeIgnoresMustBeAbsent) {
  Floats wide(17 * 3 + kSlack, 0.0f);
  {
    auto a = pre_args();
    a.pre_source = PreSource::kComputed;  // the caller forgot pre_source = carried
    EXPECT_REJECTED(mhc::pre(a), "pre: pre_mix_in: expected absent", "pass pre_source=carried");
  }
  {
    auto a = pre_args();
    a.pre_source = PreSource::kComputed;
    a.pre_mix_in = mhc::make_view(wide.data(), DType::kFloat64, {17, 3});
    EXPECT_REJECTED(mhc::pre(a), "pre_mix_in: expected absent");
  }
  {
    auto a = post_pre_args();
    a.pre_source = PreSource::kComputed;
    EXPECT_REJECTED(mhc::post_pre(a), "post_pre: pre_mix_in: expected absent");
  }
  {
    auto a = pre_broadcast_args();
    a.pre_source = PreSource::kIdentity;
    EXPECT_REJECTED(mhc::pre_broadcast(a), "pre_broadcast: pre_mix_in: expected absent", "identity");
  }
  {
    auto a = collapse_args();
    a.pre_source = PreSource::kIdentity;
    EXPECT_REJECTED(mhc::collapse(a), "collapse: pre_mix: expected absent", "identity");
  }
  {
    auto a = head_args(HeadKind::kMean);
    a.weights = &block.prepared;
    EXPECT_REJECTED(mhc::head(a), "head: weights: expected none", "mean");
  }
  {
    auto a = head_args(HeadKind::kMean);
    a.pre_mix_in = f32_view(pre_mix_in, {T, n});
    EXPECT_REJECTED(mhc::head(a), "head: pre_mix_in: expected absent");
  }
  {
    auto a = head_args(HeadKind::kLearned);
    a.pre_mix_in = f32_view(pre_mix_in, {T, n});
    EXPECT_REJECTED(mhc::head(a), "head: pre_mix_in: expected absent");
  }
  {
    auto a = head_args(HeadKind::kCarried);
    a.weights = &head.prepared;
    EXPECT_REJECTED(mhc::head(a), "head: weights: expected none", "carried");
  }
}

// Finding 12: error text carried the build tree's absolute path before "src/api/...".
TEST_F(Bad, ErrorLocationsAreRelativeToTheSourceRoot) {
  auto a = collapse_args();
  a.residual = TensorView{};
  try {
    mhc::collapse(a);
    ADD_FAILURE() << "no error";
  } catch (const mhc::Error& e) {
    EXPECT_EQ(std::string(e.file()), "src/api/validate.cpp");
    EXPECT_EQ(std::string(e.what()).rfind("src/api/validate.cpp:", 0), 0u) << e.what();
  }
  EXPECT_STREQ(mhc::detail::source_relative("/elsewhere/x.cpp"), "/elsewhere/x.cpp");
}

// Finding 14: two outputs interleaved in one buffer (buf[:, 0, :] and buf[:, 1, :]) do not
// overlap and are accepted; shifted by one element they do overlap and are refused.
TEST_F(Bad, InterleavedOutputsThatDoNotOverlapAreAccepted) {
  Floats buf = poisoned_floats(T * 2 * n);  // [T, 2, n]: post_mix then pre_mix in each row
  auto a = mixes_args();
  a.post_mix = with_row_stride(f32_view(buf, {T, n}), 2 * n);
  a.pre_mix = with_row_stride(shifted_by(f32_view(buf, {T, n}), n * 4), 2 * n);
  EXPECT_NO_THROW(mhc::mixes(a));
  poison();  // the accepted call wrote comb_mix_out
  auto b = mixes_args();
  b.post_mix = with_row_stride(f32_view(buf, {T, n}), 2 * n);
  b.pre_mix = with_row_stride(shifted_by(f32_view(buf, {T, n}), (n - 1) * 4), 2 * n);
  EXPECT_REJECTED(mhc::mixes(b), "overlap");
}

}  // namespace

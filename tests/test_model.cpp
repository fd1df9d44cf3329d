// tests/test_model.cpp - the model driver of `mhc run` (tools/model.cpp), on the CPU.
//
// run_model chains the fused operators (pre_broadcast, post_pre at every boundary, post, head)
// through swapped buffers. These tests write the same forward again from the spec (section 5)
// with the unfused operators, post then pre at every boundary, on plain host vectors, and
// require the same output bits: on the CPU the fused and unfused paths are bit-equal
// (test_reference's Fused cases), so any difference is the driver's plumbing (which weights,
// which norm, which mixes or carried pre feed which call). They also pin the driver's own
// helpers (random numbers, checksum, stand-in sublayer) and its determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "mhc/mhc.hpp"
#include "src/core/bf16.hpp"
#include "tools/model.hpp"

namespace {

using mhc::DType;
using mhc::HeadKind;
using mhc::PreSource;
using mhc::tools::HostModel;
using Bits = std::vector<uint16_t>;
using Floats = std::vector<float>;

constexpr int32_t kLayers = 2;
constexpr int64_t kTokens = 3;
constexpr uint64_t kSeed = 20261129;

mhc::PreparedWeights prepare_block(const mhc::tools::HostBlock& b, const mhc::Config& c) {
  mhc::MixWeightsView v;
  v.fn = mhc::make_view(b.fn.data(), DType::kFloat32, {c.M(), c.K()});
  v.scale = mhc::make_view(b.scale.data(), DType::kFloat32, {3});
  v.base = mhc::make_view(b.base.data(), DType::kFloat32, {c.M()});
  return mhc::prepare(v, c.n, c.H, mhc::Device{});
}

// The mixes a sublayer's pre hands on: post and comb for the next post, the fresh pre (shifted
// mode) for the next collapse.
struct Mixes {
  Floats post, comb, pre;
};

// The spec section 5 forward of `m`, written with the unfused operators on host vectors.
Bits compose_forward(const HostModel& m, const Bits& embedding, int64_t T) {
  const mhc::Config& c = m.config;
  const int64_t n = c.n, H = c.H;
  const bool shifted = m.mode == mhc::Mode::kShifted;
  auto bf = [](const Bits& v, std::initializer_list<int64_t> shape) { return mhc::make_view(v.data(), DType::kBFloat16, shape); };
  auto f32 = [](const Floats& v, std::initializer_list<int64_t> shape) { return mhc::make_view(v.data(), DType::kFloat32, shape); };

  Bits residual(static_cast<size_t>(T * n * H)), layer_input(static_cast<size_t>(T * H));
  Mixes mix{Floats(static_cast<size_t>(T * n)), Floats(static_cast<size_t>(T * n * n)), Floats(static_cast<size_t>(T * n))};

  // Layer 0, attention: the streams are n copies of the embedding (materialised here).
  {
    const mhc::PreparedWeights w = prepare_block(m.attn[0], c);
    mhc::PreBroadcastArgs a;
    a.config = c;
    a.pre_source = shifted ? PreSource::kIdentity : PreSource::kComputed;
    a.embedding = bf(embedding, {T, H});
    a.weights = &w;
    a.rmsnorm_weight = bf(m.attn_norm[0], {H});
    a.layer_input = bf(layer_input, {T, H});
    a.post_mix = f32(mix.post, {T, n});
    a.comb_mix = f32(mix.comb, {T, n, n});
    if (shifted) a.pre_mix_out = f32(mix.pre, {T, n});
    a.residual_out = bf(residual, {T, n, H});
    mhc::pre_broadcast(a);
  }
  int sublayer = 0;
  Bits layer_output = mhc::tools::standin_sublayer(layer_input, sublayer++);

  auto post = [&](const Bits& res, const Mixes& in) {
    Bits out(res.size());
    mhc::PostArgs a;
    a.config = c;
    a.layer_output = bf(layer_output, {T, H});
    a.residual = bf(res, {T, n, H});
    a.post_mix = f32(in.post, {T, n});
    a.comb_mix = f32(in.comb, {T, n, n});
    a.residual_out = bf(out, {T, n, H});
    mhc::post(a);
    return out;
  };

  // Sublayers 1 .. 2L-1: the odd ones are FFNs, the even ones attention; each boundary is the
  // previous sublayer's post, then this sublayer's pre (collapse with the previous fresh pre in
  // shifted mode).
  for (int32_t b = 1; b < 2 * m.layers; ++b) {
    const int32_t l = b / 2;
    const bool ffn = b % 2 == 1;
    residual = post(residual, mix);
    const mhc::PreparedWeights w = prepare_block(ffn ? m.ffn[l] : m.attn[l], c);
    Mixes next{Floats(mix.post.size()), Floats(mix.comb.size()), Floats(mix.pre.size())};
    mhc::PreArgs a;
    a.config = c;
    a.pre_source = shifted ? PreSource::kCarried : PreSource::kComputed;
    a.residual = bf(residual, {T, n, H});
    a.weights = &w;
    if (shifted) a.pre_mix_in = f32(mix.pre, {T, n});
    a.rmsnorm_weight = bf(ffn ? m.ffn_norm[l] : m.attn_norm[l], {H});
    a.layer_input = bf(layer_input, {T, H});
    a.post_mix = f32(next.post, {T, n});
    a.comb_mix = f32(next.comb, {T, n, n});
    if (shifted) a.pre_mix_out = f32(next.pre, {T, n});
    mhc::pre(a);
    mix = next;
    layer_output = mhc::tools::standin_sublayer(layer_input, sublayer++);
  }

  // The last post, then the head with the final norm.
  residual = post(residual, mix);
  mhc::PreparedWeights head_w;
  if (m.head == HeadKind::kLearned) {
    mhc::HeadWeightsView hv;
    hv.fn = mhc::make_view(m.head_block.fn.data(), DType::kFloat32, {n, c.K()});
    hv.scale = mhc::make_view(m.head_block.scale.data(), DType::kFloat32, {1});
    hv.base = mhc::make_view(m.head_block.base.data(), DType::kFloat32, {n});
    head_w = mhc::prepare_head(hv, c.n, H, mhc::Device{});
  }
  Bits output(static_cast<size_t>(T * H));
  mhc::HeadArgs a;
  a.config = c;
  a.kind = m.head;
  a.residual = bf(residual, {T, n, H});
  if (m.head == HeadKind::kLearned) a.weights = &head_w;
  if (m.head == HeadKind::kCarried) a.pre_mix_in = f32(mix.pre, {T, n});
  a.rmsnorm_weight = bf(m.final_norm, {H});
  a.output = bf(output, {T, H});
  mhc::head(a);
  return output;
}

Bits random_embedding(int64_t T, int64_t H, uint64_t seed) {
  mhc::tools::Rng rng(seed);
  return mhc::tools::random_bf16(static_cast<size_t>(T * H), rng);
}

size_t count_differences(const Bits& a, const Bits& b) {
  size_t d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d += a[i] != b[i];
  return d + (a.size() > b.size() ? a.size() - b.size() : b.size() - a.size());
}

// ---------------------------------------------------------------------------------------------
// The forward, for the three kinds of model: normal mode with a learned head (V4), shifted
// mode with the carried head (V4.1), normal mode with the mean head (GLM).

class RunModel : public testing::TestWithParam<const char*> {};

TEST_P(RunModel, MatchesTheUnfusedForward) {
  const mhc::ModelPreset& preset = mhc::model_preset(GetParam());
  const HostModel m = mhc::tools::synthetic_model(preset, kLayers, kSeed);
  const Bits emb = random_embedding(kTokens, m.config.H, kSeed + 1);

  const mhc::tools::RunResult r = mhc::tools::run_model(m, emb, kTokens, mhc::Device{});
  const Bits want = compose_forward(m, emb, kTokens);
  ASSERT_EQ(r.output.size(), want.size());
  EXPECT_EQ(count_differences(r.output, want), 0u) << "output values differing from the unfused forward";

  // Not a constant or an echo: the output moved away from the embedding, and is finite.
  EXPECT_GT(count_differences(r.output, emb), r.output.size() / 2);
  for (uint16_t v : r.output) ASSERT_TRUE(std::isfinite(mhc::detail::bf16_to_float(v)));

  // One call per operator and boundary, each on the CPU.
  EXPECT_EQ(r.op_calls.at("pre_broadcast"), 1);
  EXPECT_EQ(r.op_calls.at("post_pre"), 2 * kLayers - 1);
  EXPECT_EQ(r.op_calls.at("post"), 1);
  EXPECT_EQ(r.op_calls.at("head"), 1);
  // Every operator has a fast CPU variant for n = 4 (src/cpu/fast.hpp), the default there.
  for (const auto& [op, variant] : r.variants) {
    EXPECT_EQ(variant, op + (m.config.n == 4 ? ".cpu_fast" : ".cpu_ref"));
  }
}

TEST_P(RunModel, TwoRunsAndAForcedFamilyGiveTheSameBits) {
  const HostModel m = mhc::tools::synthetic_model(mhc::model_preset(GetParam()), kLayers, kSeed);
  const Bits emb = random_embedding(kTokens, m.config.H, kSeed + 2);
  const mhc::tools::RunResult a = mhc::tools::run_model(m, emb, kTokens, mhc::Device{});
  const mhc::tools::RunResult b = mhc::tools::run_model(m, emb, kTokens, mhc::Device{});
  const mhc::tools::RunResult forced = mhc::tools::run_model(m, emb, kTokens, mhc::Device{}, "cpu_ref");
  EXPECT_EQ(count_differences(a.output, b.output), 0u);
  EXPECT_EQ(mhc::tools::checksum(a.output), mhc::tools::checksum(b.output));
  EXPECT_EQ(count_differences(a.output, forced.output), 0u);
  EXPECT_EQ(forced.variants.at("post_pre"), "post_pre.cpu_ref");
}

TEST_P(RunModel, TokenAloneEqualsTokenInBatch) {
  const HostModel m = mhc::tools::synthetic_model(mhc::model_preset(GetParam()), kLayers, kSeed);
  const int64_t H = m.config.H;
  const Bits emb = random_embedding(kTokens, H, kSeed + 3);
  const Bits batch = mhc::tools::run_model(m, emb, kTokens, mhc::Device{}).output;
  for (int64_t t = 0; t < kTokens; ++t) {
    const Bits one(emb.begin() + t * H, emb.begin() + (t + 1) * H);
    const Bits alone = mhc::tools::run_model(m, one, 1, mhc::Device{}).output;
    EXPECT_EQ(count_differences(alone, Bits(batch.begin() + t * H, batch.begin() + (t + 1) * H)), 0u)
        << "token " << t;
  }
}

std::string preset_test_name(const testing::TestParamInfo<const char*>& param) {
  std::string name = param.param;
  for (char& ch : name) {
    if (ch == '-' || ch == '.') ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Presets, RunModel, testing::Values("deepseek-v4-flash", "deepseek-v4.1-flash", "glm-5-next"),
                         preset_test_name);

TEST(RunModelErrors, RejectsAWrongEmbeddingOrNoLayers) {
  const mhc::ModelPreset& preset = mhc::model_preset("deepseek-v4-flash");
  HostModel m = mhc::tools::synthetic_model(preset, 1, kSeed);
  const Bits emb = random_embedding(2, m.config.H, kSeed);
  EXPECT_THROW(mhc::tools::run_model(m, emb, 3, mhc::Device{}), mhc::Error);  // 2 tokens given, 3 claimed
  EXPECT_THROW(mhc::tools::run_model(m, emb, 2, mhc::Device{}, "no_such_family"), mhc::Error);
  m.layers = 0;
  EXPECT_THROW(mhc::tools::run_model(m, emb, 2, mhc::Device{}), mhc::Error);
}

// ---------------------------------------------------------------------------------------------
// The driver's helpers: their outputs are part of what `mhc run` prints and what the GPU
// checks compare, so they must not drift between platforms or builds.

TEST(ModelHelpers, SyntheticModelIsSeededAndShaped) {
  const mhc::ModelPreset& preset = mhc::model_preset("deepseek-v4-flash");
  const HostModel a = mhc::tools::synthetic_model(preset, kLayers, kSeed);
  const HostModel b = mhc::tools::synthetic_model(preset, kLayers, kSeed);
  const HostModel other = mhc::tools::synthetic_model(preset, kLayers, kSeed + 1);
  const mhc::Config& c = a.config;
  ASSERT_EQ(a.attn.size(), static_cast<size_t>(kLayers));
  ASSERT_EQ(a.ffn.size(), static_cast<size_t>(kLayers));
  EXPECT_EQ(a.attn[1].fn.size(), static_cast<size_t>(c.M() * c.K()));
  EXPECT_EQ(a.attn[1].scale.size(), 3u);
  EXPECT_EQ(a.head_block.fn.size(), static_cast<size_t>(c.n * c.K()));
  EXPECT_EQ(a.head_block.scale.size(), 1u);
  EXPECT_EQ(a.ffn_norm[1].size(), static_cast<size_t>(c.H));
  EXPECT_EQ(a.attn[1].fn, b.attn[1].fn);
  EXPECT_EQ(a.final_norm, b.final_norm);
  EXPECT_NE(a.attn[1].fn, other.attn[1].fn);
  EXPECT_NE(a.attn[0].fn, a.ffn[0].fn);
}

TEST(ModelHelpers, RngIsSplitMix64) {
  mhc::tools::Rng rng(0);
  EXPECT_EQ(rng.next(), 0xe220a8397b1dcdafull);  // the published first output of splitmix64(0)
  mhc::tools::Rng u(7);
  for (int i = 0; i < 1000; ++i) {
    const double x = u.uniform();
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
  }
}

TEST(ModelHelpers, ChecksumIsFnv1aOverLittleEndianBytes) {
  // The FNV-1a recurrence, byte by byte, low byte of each value first, from checksum({}).
  auto fnv1a = [](uint64_t h, std::initializer_list<uint8_t> bytes) {
    for (uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ull;
    return h;
  };
  const uint64_t basis = mhc::tools::checksum({});
  EXPECT_EQ(mhc::tools::checksum({0x6f66, 0x626f, 0x7261}), fnv1a(basis, {'f', 'o', 'o', 'b', 'a', 'r'}));
  // The published 64-bit FNV-1a values: the empty input and "foobar".
  EXPECT_EQ(basis, 0xcbf29ce484222325ull);
  EXPECT_EQ(mhc::tools::checksum({0x6f66, 0x626f, 0x7261}), 0x85944171f73967e8ull);
  EXPECT_NE(mhc::tools::checksum({0x3f80, 0x4000}), mhc::tools::checksum({0x4000, 0x3f80}));
  EXPECT_NE(mhc::tools::checksum({0x3f80}), mhc::tools::checksum({0x3f81}));
}

TEST(ModelHelpers, StandinSublayerFollowsItsFormula) {
  const Bits x = {mhc::detail::float_to_bf16(0.0f), mhc::detail::float_to_bf16(1.0f), mhc::detail::float_to_bf16(-2.5f)};
  for (int index : {0, 3, 9}) {
    const Bits y = mhc::tools::standin_sublayer(x, index);
    ASSERT_EQ(y.size(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      // bf16(sin(1.5 x + 0.1 (index % 7)) * 0.5), to within one bf16 ulp of the double value.
      const double want = 0.5 * std::sin(1.5 * mhc::detail::bf16_to_float(x[i]) + 0.1 * (index % 7));
      const double got = mhc::detail::bf16_to_float(y[i]);
      EXPECT_NEAR(got, want, std::ldexp(std::fabs(want), -7) + 1e-30) << "index " << index << ", x " << i;
    }
  }
}

}  // namespace

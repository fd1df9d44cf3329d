// tests/test_cpu_fast.cpp - the fast CPU variants against the float64 oracle (cpu_ref).
//
// post.cpu_fast must give the oracle's bits for every output (NaN for NaN, any sign) (its fp32 sums are certified or
// redone in double): checked over T = 0, 1, 3, 17, 64, 600 and H = 7, 64, 4096, 5120, full and
// broadcast residuals, strided rows, NaN/Inf/huge inputs and cancelling terms (the double
// fallback), and for 1, 2, 3 and the default number of OpenMP threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "mhc/mhc.hpp"

namespace {

using mhc::Config;
using mhc::DType;
using mhc::TensorView;
using Bits = std::vector<uint16_t>;
using Floats = std::vector<float>;

uint16_t bf16_bits_of(float f) {  // truncation: the inputs only need to be some bf16 values
  uint32_t w;
  std::memcpy(&w, &f, sizeof w);
  return static_cast<uint16_t>(w >> 16);
}

// Inputs of one post call. Rows of layer_output and residual are `pad` elements longer than
// they need to be (strided views when pad > 0).
struct PostInputs {
  int64_t T = 0, H = 0, pad = 0;
  bool broadcast = false;
  Bits out, res;
  Floats post, comb;
  int64_t out_stride() const { return H + pad; }
  int64_t res_stride() const { return (broadcast ? H : 4 * H) + pad; }
};

PostInputs make_inputs(int64_t T, int64_t H, int64_t pad, bool broadcast, uint32_t seed) {
  PostInputs in;
  in.T = T;
  in.H = H;
  in.pad = pad;
  in.broadcast = broadcast;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  in.out.resize(static_cast<size_t>(T * in.out_stride()));
  in.res.resize(static_cast<size_t>(T * in.res_stride()));
  for (auto& v : in.out) v = bf16_bits_of(normal(rng));
  for (auto& v : in.res) v = bf16_bits_of(normal(rng));
  in.post.resize(static_cast<size_t>(T * 4));
  in.comb.resize(static_cast<size_t>(T * 16));
  for (auto& v : in.post) v = 2.0f * unit(rng);
  for (auto& v : in.comb) v = unit(rng);
  const int64_t streams = broadcast ? 1 : 4;
  for (int64_t t = 0; t < T; ++t) {
    uint16_t* out = in.out.data() + t * in.out_stride();
    uint16_t* res = in.res.data() + t * in.res_stride();
    const int64_t kind = t % 5;
    if (kind == 1) {  // cancelling terms: streams come in +a, -a pairs with equal weights
      for (int k = 0; k < 4; ++k) in.post[t * 4 + k] = 0x1p-12f;
      for (int i = 0; i < 16; ++i) in.comb[t * 16 + i] = 0.375f;
      if (!broadcast) {
        for (int64_t h = 0; h < H; ++h) {
          res[1 * H + h] = static_cast<uint16_t>(res[0 * H + h] ^ 0x8000u);
          res[3 * H + h] = static_cast<uint16_t>(res[2 * H + h] ^ 0x8000u);
        }
      }
      // the weights in fp32 have full mantissas, the sum sits near a bf16 rounding boundary
      in.comb[t * 16 + 0] = 0.375f + 0x1p-20f;
    } else if (kind == 2) {  // non-finite and huge values in some columns and weights
      for (int64_t h = 0; h < H; h += 3) {
        const uint16_t specials[5] = {0x7fc0u, 0xffc0u, 0x7f80u, 0xff80u, 0x7f7fu};
        const int64_t j = (h / 3) % streams;
        res[j * H + h] = specials[(h / 3) % 5];
        if (h % 2 == 0) out[h] = specials[(h / 3 + 2) % 5];
      }
      if (t % 10 == 2) in.comb[t * 16 + 5] = std::numeric_limits<float>::infinity();
    } else if (kind == 3) {  // zeros: exact zero sums of either sign
      for (int64_t h = 0; h < H; h += 2) {
        out[h] = 0x8000u;
        for (int64_t j = 0; j < streams; ++j) res[j * H + h] = (j % 2) ? 0x8000u : 0x0000u;
      }
    }
  }
  return in;
}

TensorView strided(const void* data, std::initializer_list<int64_t> shape, int64_t row_stride) {
  TensorView v = mhc::make_view(data, DType::kBFloat16, shape);
  v.strides[0] = row_stride;
  return v;
}

Bits run_post(const PostInputs& in, const char* variant) {
  Config c;
  c.n = 4;
  c.H = in.H;
  Bits result(static_cast<size_t>(in.T * 4 * in.H), 0xffffu);
  mhc::PostArgs a;
  a.config = c;
  a.layer_output = strided(in.out.data(), {in.T, in.H}, in.out_stride());
  a.residual = in.broadcast ? strided(in.res.data(), {in.T, in.H}, in.res_stride())
                            : strided(in.res.data(), {in.T, 4, in.H}, in.res_stride());
  a.post_mix = mhc::make_view(in.post.data(), DType::kFloat32, {in.T, 4});
  a.comb_mix = mhc::make_view(in.comb.data(), DType::kFloat32, {in.T, 4, 4});
  a.residual_out = mhc::make_view(result.data(), DType::kBFloat16, {in.T, 4, in.H});
  a.exec.variant = variant;
  EXPECT_EQ(mhc::selected_variant(a), variant != nullptr ? variant : "post.cpu_fast");
  mhc::post(a);
  return result;
}

bool is_nan(uint16_t b) { return (b & 0x7fffu) > 0x7f80u; }

// Outputs whose bits differ; two NaNs count as equal (as in the GPU suite): the sign of a NaN
// made from two NaNs of opposite sign, or from inf - inf, depends on how a compiler orders the
// operands of the oracle's own additions, so it is not part of the contract.
int64_t count_differences(const Bits& a, const Bits& b) {
  int64_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += a[i] != b[i] && !(is_nan(a[i]) && is_nan(b[i]));
  return d;
}

class ThreadCount {  // sets the OpenMP thread count for a scope
 public:
  explicit ThreadCount(int threads) {
#ifdef _OPENMP
    saved_ = omp_get_max_threads();
    if (threads > 0) omp_set_num_threads(threads);
#else
    (void)threads;
#endif
  }
  ~ThreadCount() {
#ifdef _OPENMP
    omp_set_num_threads(saved_);
#endif
  }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int saved_ = 1;
};

TEST(CpuFastPost, DefaultDispatchOnTheCpuForNEquals4) {
  const PostInputs in = make_inputs(2, 8, 0, false, 1);
  EXPECT_EQ(count_differences(run_post(in, nullptr), run_post(in, "post.cpu_ref")), 0);
}

TEST(CpuFastPost, BitEqualToTheOracleOverTheGrid) {
  uint32_t seed = 100;
  for (int64_t T : {0, 1, 3, 17, 64, 600}) {
    for (int64_t H : {7, 64, 4096, 5120}) {
      for (bool broadcast : {false, true}) {
        const int64_t pad = (T + H) % 3 == 0 ? 0 : 5;  // some strided, some contiguous
        const PostInputs in = make_inputs(T, H, pad, broadcast, seed++);
        const Bits want = run_post(in, "post.cpu_ref");
        for (int threads : {1, 2, 3, 0}) {  // 0: the default
          const ThreadCount scope(threads);
          const Bits got = run_post(in, "post.cpu_fast");
          EXPECT_EQ(count_differences(got, want), 0)
              << "T = " << T << ", H = " << H << (broadcast ? ", broadcast" : "") << ", pad " << pad
              << ", threads " << threads;
        }
      }
    }
  }
}

// Sums whose fp32 chain lands on the wrong side of a bf16 rounding boundary: only the double
// fallback gives the oracle's bits here.
TEST(CpuFastPost, CancellationNeedsTheDoubleFallback) {
  PostInputs in = make_inputs(1, 64, 0, false, 7);
  for (int k = 0; k < 4; ++k) in.post[k] = 1.0f;
  for (int i = 0; i < 16; ++i) in.comb[i] = 1.0f;
  in.comb[0] = 1.0f + 0x1p-23f;  // comb[0,0]: a full-mantissa weight
  for (int64_t h = 0; h < in.H; ++h) {
    in.out[h] = bf16_bits_of(0x1p-30f * static_cast<float>(1 + h % 7));  // tiny survivor
    in.res[0 * in.H + h] = bf16_bits_of(256.0f);
    in.res[1 * in.H + h] = bf16_bits_of(-256.0f);
    in.res[2 * in.H + h] = bf16_bits_of(0x1p-24f);
    in.res[3 * in.H + h] = bf16_bits_of(-0x1p-24f);
  }
  const Bits want = run_post(in, "post.cpu_ref");
  EXPECT_EQ(count_differences(run_post(in, "post.cpu_fast"), want), 0);
}

TEST(CpuFastPost, OtherStreamCountsStayOnTheOracle) {
  Config c;
  c.n = 2;
  c.H = 3;
  const Bits out(3, 0x3f80u), res(6, 0x3f80u), dst(6, 0);
  const Floats post(2, 1.0f), comb(4, 0.5f);
  mhc::PostArgs a;
  a.config = c;
  a.layer_output = mhc::make_view(out.data(), DType::kBFloat16, {1, 3});
  a.residual = mhc::make_view(res.data(), DType::kBFloat16, {1, 2, 3});
  a.post_mix = mhc::make_view(post.data(), DType::kFloat32, {1, 2});
  a.comb_mix = mhc::make_view(comb.data(), DType::kFloat32, {1, 2, 2});
  a.residual_out = mhc::make_view(dst.data(), DType::kBFloat16, {1, 2, 3});
  EXPECT_EQ(mhc::selected_variant(a), "post.cpu_ref");
  a.exec.variant = "post.cpu_fast";
  EXPECT_THROW(mhc::post(a), mhc::Error);
}

}  // namespace

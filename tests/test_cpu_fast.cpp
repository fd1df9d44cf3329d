// tests/test_cpu_fast.cpp - the fast CPU variants against the float64 oracle (cpu_ref).
//
// Every *.cpu_fast variant (OpsGrid below, one case per op-mode): against the oracle over
// T = 0, 1, 5, 67 and H = 4096, 5120, 7168, 999 by the GPU suite's rules (gpu_harness.hpp:
// fp32 mixes within 1e-5, bf16 within 1 ulp and >= 99.9% bit-equal, exact where the oracle is
// exact: residual_out and every collapse with a carried, identity or mean pre), outputs poisoned
// with NaN before the call (never-written elements fail) and padded rows (padding untouched);
// bit-equal across 1, 2 and all threads, every SIMD level (AVX-512, AVX2, scalar: cpu::force_isa),
// and T (a token alone, a
// slice, the batch: the decode and the tiled paths); NaN in one token changes that token only;
// hostile input is rejected with nothing written; the dispatcher's default is cpu_fast.
//
// post.cpu_fast must give the oracle's bits for every output (NaN for NaN, any sign) (its fp32 sums are certified or
// redone in double): checked over T = 0, 1, 3, 17, 64, 600 and H = 7, 64, 4096, 5120 (PostGrid, one
// case per H), full and broadcast residuals, strided rows, NaN/Inf/huge inputs and cancelling
// terms (the double fallback), T = 600 by non-temporal stores (its output 64-byte aligned), for
// 1, 2, 3 and the default number of OpenMP threads and every SIMD level.
//
// Each oracle result is computed once and every thread count and SIMD level is compared with it;
// a thread count equal to the default is not run twice (thread_counts), and the inputs are drawn
// by NormalBf16 and each H's weights once for all T (drawing inputs cost more than the calls).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <random>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "gpu_harness.hpp"
#include "mhc/mhc.hpp"
#include "src/core/bf16.hpp"
#include "src/cpu/exact_sum.hpp"
#include "src/cpu/fast.hpp"

namespace {

using mhc::Config;
using mhc::DType;
using mhc::TensorView;
// bf16 buffers start on a 64-byte boundary (a large std::vector's data sits 16 bytes past one),
// so that post.cpu_fast's non-temporal stores, which need aligned rows, run on a large residual_out.
template <typename V>
struct Aligned64 {
  using value_type = V;
  Aligned64() = default;
  template <typename U>
  Aligned64(const Aligned64<U>&) {}
  V* allocate(size_t count) {
    const size_t bytes = (count * sizeof(V) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<V*>(p);
  }
  void deallocate(V* p, size_t) { std::free(p); }
  friend bool operator==(const Aligned64&, const Aligned64&) { return true; }
  friend bool operator!=(const Aligned64&, const Aligned64&) { return false; }
};
using Bits = std::vector<uint16_t, Aligned64<uint16_t>>;
using Floats = std::vector<float>;

uint16_t bf16_bits_of(float f) {  // truncation: the inputs only need to be some bf16 values
  uint32_t w;
  std::memcpy(&w, &f, sizeof w);
  return static_cast<uint16_t>(w >> 16);
}

// A 64-bit uniform random bit generator (splitmix64), cheaper than std::mt19937.
struct SplitMix {
  using result_type = uint64_t;
  uint64_t state;
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~result_type{0}; }
  result_type operator()() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

// bf16 N(0, 1) values, cheaply (a grid draws tens of millions; a fresh normal costs several times
// a pool sample): 63 in 64 from a pool of 2^16 normals drawn once a process (2517 distinct bf16
// values, missing 0.7% of a normal's mass: the far tails and the smallest magnitudes), 1 in 64
// drawn fresh, so every value a normal gives can occur.
class NormalBf16 {
 public:
  explicit NormalBf16(uint64_t seed) : rng_{seed} {}
  uint16_t operator()() {
    const uint64_t r = rng_();
    if ((r & 63u) != 0) return pool_[static_cast<size_t>(r >> 48)];
    return mhc::detail::float_to_bf16(normal_(rng_));
  }

 private:
  static const Bits& pool() {
    static const Bits p = [] {
      Bits v(size_t{1} << 16);
      SplitMix rng{0x6d6863};
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (auto& x : v) x = mhc::detail::float_to_bf16(normal(rng));
      return v;
    }();
    return p;
  }
  const Bits& pool_ = pool();
  SplitMix rng_;
  std::normal_distribution<float> normal_{0.0f, 1.0f};
};

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
  SplitMix rng{seed};
  NormalBf16 normal(seed);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  in.out.resize(static_cast<size_t>(T * in.out_stride()));
  in.res.resize(static_cast<size_t>(T * in.res_stride()));
  for (auto& v : in.out) v = normal();
  for (auto& v : in.res) v = normal();
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

// The thread counts of a bit-equality check: `counts`, then 0 (the default: every core) unless
// the default is one of `counts` already (two cores: {1, 2}, the default run would repeat the 2).
std::vector<int> thread_counts(std::initializer_list<int> counts) {
  std::vector<int> list(counts);
#ifdef _OPENMP
  const int all = omp_get_max_threads();
#else
  const int all = 1;
#endif
  if (std::find(list.begin(), list.end(), all) == list.end()) list.push_back(0);
  return list;
}

TEST(CpuFastPost, DefaultDispatchOnTheCpuForNEquals4) {
  const PostInputs in = make_inputs(2, 8, 0, false, 1);
  EXPECT_EQ(count_differences(run_post(in, nullptr), run_post(in, "post.cpu_ref")), 0);
}

// One ctest case per H (the two large H take most of the time; ctest -j2 runs them side by side).
class PostGrid : public testing::TestWithParam<int64_t> {};

TEST_P(PostGrid, BitEqualToTheOracle) {
  const int64_t H = GetParam();
  uint32_t seed = 100 + static_cast<uint32_t>(H);
  for (int64_t T : {0, 1, 3, 17, 64, 600}) {
    for (bool broadcast : {false, true}) {
      const int64_t pad = (T + H) % 3 == 0 ? 0 : 5;  // some strided, some contiguous
      const PostInputs in = make_inputs(T, H, pad, broadcast, seed++);
      const Bits want = run_post(in, "post.cpu_ref");
      for (int threads : thread_counts({1, 2, 3})) {
        const ThreadCount scope(threads);
        const Bits got = run_post(in, "post.cpu_fast");
        EXPECT_EQ(count_differences(got, want), 0)
            << "T = " << T << ", H = " << H << (broadcast ? ", broadcast" : "") << ", pad " << pad
            << ", threads " << threads;
      }
      using mhc::detail::cpu::Isa;
      for (Isa level : {Isa::kAvx2, Isa::kScalar}) {  // every lower SIMD level (T = 600: the best level's streaming)
        if (level >= mhc::detail::cpu::best_isa() || T > 64) continue;
        mhc::detail::cpu::force_isa(level);
        const Bits got = run_post(in, "post.cpu_fast");
        mhc::detail::cpu::force_isa(Isa::kAvx512);
        EXPECT_EQ(count_differences(got, want), 0) << "T = " << T << ", H = " << H << (broadcast ? ", broadcast" : "")
                                                   << ", " << mhc::detail::cpu::isa_name(level);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(H, PostGrid, testing::Values(int64_t{7}, int64_t{64}, int64_t{4096}, int64_t{5120}),
                         [](const testing::TestParamInfo<int64_t>& i) { return "H" + std::to_string(i.param); });

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
  using mhc::detail::cpu::Isa;
  for (Isa level : {Isa::kAvx2, Isa::kScalar}) {
    mhc::detail::cpu::force_isa(level);
    const Bits got = run_post(in, "post.cpu_fast");
    mhc::detail::cpu::force_isa(Isa::kAvx512);
    EXPECT_EQ(count_differences(got, want), 0) << mhc::detail::cpu::isa_name(level);
  }
}

// The fast path's double -> bf16 rounding is the oracle's, over random doubles of every
// magnitude and the edges: ties, the carry into the exponent, 2^128, subnormal, zero, inf, NaN.
TEST(CpuFastPost, FastDoubleRoundingIsTheOracles) {
  std::mt19937_64 g(11);
  std::vector<double> v = {0.0, -0.0, 1.0, -1.0, 0x1p-126, 0x1p-127, 0x1.fep-127, 0x1p-133, 0x1p-134, 0x1p-150,
                           0x1.ffp127, 0x1.fe8p127, 0x1.ff0000001p127, 0x1p128, 0x1p200, -0x1p1000,
                           1.0 + 0x1p-8, 1.0 + 0x1p-8 + 0x1p-40, 1.0 + 3 * 0x1p-8, 0x1.ff8p0,
                           std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::denorm_min()};
  for (int i = 0; i < 200000; ++i) {
    uint64_t b = g();
    if (i % 2 == 0) b = (b & 0x800fffffffffffffull) | ((uint64_t{1023 - 140} + g() % 280) << 52);  // near bf16's range
    if (i % 5 == 0) b &= ~((uint64_t{1} << 44) - 1) | (g() % 2 ? 0 : (uint64_t{1} << 44) - 1);  // ties and near ties
    double d;
    std::memcpy(&d, &b, sizeof d);
    v.push_back(d);
  }
  int64_t bad = 0;
  for (double d : v) {
    const uint16_t want = mhc::detail::double_to_bf16(d), got = mhc::detail::cpu::round_double_bf16(d);
    bad += want != got && !(is_nan(want) && is_nan(got));
  }
  EXPECT_EQ(bad, 0);
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


// ---------------------------------------------------------------------------------------------
// Every other operator: *.cpu_fast against the oracle.

using mhc::HeadKind;
using mhc::PreSource;
using mhc_test::Check;
using mhc_test::Tensor;

enum class OpKind { kMixes, kCollapse, kPre, kPreBroadcast, kPostPre, kHead };

struct Mode {
  const char* name;
  OpKind op;
  PreSource source = PreSource::kComputed;
  HeadKind head = HeadKind::kLearned;
  bool norm = false;
  bool extra_out = false;  // pre_mix_out (pre, pre_broadcast, post_pre) / residual_out (pre_broadcast)
};

const std::vector<Mode>& modes() {
  static const std::vector<Mode> list = {
      {"mixes", OpKind::kMixes},
      {"collapse_carried", OpKind::kCollapse, PreSource::kCarried},
      {"collapse_carried_norm", OpKind::kCollapse, PreSource::kCarried, HeadKind::kLearned, true},
      {"collapse_identity_norm", OpKind::kCollapse, PreSource::kIdentity, HeadKind::kLearned, true},
      {"pre_computed_norm", OpKind::kPre, PreSource::kComputed, HeadKind::kLearned, true},
      {"pre_carried_out", OpKind::kPre, PreSource::kCarried, HeadKind::kLearned, false, true},
      {"pre_broadcast_computed_norm", OpKind::kPreBroadcast, PreSource::kComputed, HeadKind::kLearned, true, true},
      {"pre_broadcast_identity", OpKind::kPreBroadcast, PreSource::kIdentity, HeadKind::kLearned, false, true},
      {"post_pre_normal", OpKind::kPostPre},
      {"post_pre_normal_norm", OpKind::kPostPre, PreSource::kComputed, HeadKind::kLearned, true},
      {"post_pre_shifted_norm", OpKind::kPostPre, PreSource::kCarried, HeadKind::kLearned, true, true},
      {"head_learned_norm", OpKind::kHead, PreSource::kComputed, HeadKind::kLearned, true},
      {"head_carried", OpKind::kHead, PreSource::kCarried, HeadKind::kCarried},
      {"head_mean_norm", OpKind::kHead, PreSource::kComputed, HeadKind::kMean, true},
  };
  return list;
}

const char* op_id(OpKind op) {
  switch (op) {
    case OpKind::kMixes: return "mixes";
    case OpKind::kCollapse: return "collapse";
    case OpKind::kPre: return "pre";
    case OpKind::kPreBroadcast: return "pre_broadcast";
    case OpKind::kPostPre: return "post_pre";
    case OpKind::kHead: return "head";
  }
  return "?";
}

bool carried(const Mode& m) {
  return m.op == OpKind::kHead ? m.head == HeadKind::kCarried : m.source == PreSource::kCarried;
}
bool has_weights(const Mode& m) {
  return m.op != OpKind::kCollapse && !(m.op == OpKind::kHead && m.head != HeadKind::kLearned);
}
// A collapse whose weights are exact inputs (or none): its output is the oracle's bits.
bool exact_collapse(const Mode& m) {
  if (m.op == OpKind::kHead) return m.head != HeadKind::kLearned;
  return m.source != PreSource::kComputed;
}

// bf16 N(0, 1) in every logical element of t (NormalBf16).
void fill_normal_bf16(Tensor& t, uint64_t seed) {
  ASSERT_EQ(t.dtype, DType::kBFloat16);
  NormalBf16 normal(seed);
  for (int64_t r = 0; r < t.rows(); ++r) {
    uint16_t* row = t.h16.data() + r * t.stride();
    for (int64_t i = 0; i < t.row_len(); ++i) row[i] = normal();
  }
}

// One call's tensors (host only), rows padded by 3 elements, outputs NaN-poisoned.
struct Case {
  Mode mode;
  Config cfg;
  int64_t T = 0;
  std::map<std::string, Tensor> t;
  std::vector<std::string> outs;
  mhc::PreparedWeights weights;

  Tensor& operator[](const std::string& k) { return t.at(k); }
  bool has(const std::string& k) const { return t.count(k) > 0; }
  void add(const std::string& name, DType d, std::vector<int64_t> shape, bool out) {
    t.emplace(name, mhc_test::make_tensor(d, std::move(shape), 3, out, false));
    if (out) outs.push_back(name);
  }
  void poison() {
    for (const std::string& o : outs) t.at(o).poison_host();
  }
};

// The mode's prepared weights for H (a mix block, or a learned head's), drawn from `seed`.
mhc::PreparedWeights make_weights(const Mode& m, int64_t H, uint64_t seed) {
  const int64_t n = 4;
  const bool head = m.op == OpKind::kHead;
  const int32_t rows = head ? 4 : 24;
  const int64_t K = n * H;
  mhc::tools::Rng rng(mhc_test::mix_seed(seed, 77));
  const Floats fn = mhc::tools::random_f32(static_cast<size_t>(rows * K), rng, 1.0 / std::sqrt(static_cast<double>(K)));
  Floats scale(head ? 1 : 3);
  for (float& v : scale) v = static_cast<float>(0.5 + rng.uniform());
  const Floats base = mhc::tools::random_f32(static_cast<size_t>(rows), rng, 0.5);
  const TensorView fv = mhc::make_view(fn.data(), DType::kFloat32, {rows, K});
  const TensorView sv = mhc::make_view(scale.data(), DType::kFloat32, {static_cast<int64_t>(scale.size())});
  const TensorView bv = mhc::make_view(base.data(), DType::kFloat32, {rows});
  if (head) {
    mhc::HeadWeightsView v;
    v.fn = fv;
    v.scale = sv;
    v.base = bv;
    return mhc::prepare_head(v, 4, H, mhc::Device{});
  }
  mhc::MixWeightsView v;
  v.fn = fv;
  v.scale = sv;
  v.base = bv;
  return mhc::prepare(v, 4, H, mhc::Device{});
}

// weights: the mode's weights for H where it has some (make_weights); none given: drawn from seed.
Case make_case(const Mode& m, int64_t T, int64_t H, uint64_t seed, const mhc::PreparedWeights* weights = nullptr) {
  Case c;
  c.mode = m;
  c.T = T;
  c.cfg = mhc::model_preset(carried(m) ? "deepseek-v4.1-flash" : "deepseek-v4-flash").config;
  c.cfg.H = H;
  const int64_t n = 4;
  const bool bcast = m.op == OpKind::kPreBroadcast;
  if (bcast) {
    c.add("embedding", DType::kBFloat16, {T, H}, false);
  } else {
    c.add("residual", DType::kBFloat16, {T, n, H}, false);
  }
  if (m.op == OpKind::kPostPre) {
    c.add("layer_output", DType::kBFloat16, {T, H}, false);
    c.add("post_mix", DType::kFloat32, {T, n}, false);
    c.add("comb_mix", DType::kFloat32, {T, n, n}, false);
  }
  if (carried(m)) c.add("pre_mix_in", DType::kFloat32, {T, n}, false);
  if (m.norm) c.add("rmsnorm_weight", DType::kBFloat16, {H}, false);
  if (m.op == OpKind::kMixes) {
    c.add("pre_mix_out", DType::kFloat32, {T, n}, true);
  } else {
    c.add("layer_input", DType::kBFloat16, {T, H}, true);
  }
  if (m.op == OpKind::kMixes || m.op == OpKind::kPre || m.op == OpKind::kPreBroadcast || m.op == OpKind::kPostPre) {
    c.add("post_mix_out", DType::kFloat32, {T, n}, true);
    c.add("comb_mix_out", DType::kFloat32, {T, n, n}, true);
  }
  if (m.extra_out && m.op != OpKind::kHead) c.add("pre_mix_out", DType::kFloat32, {T, n}, true);
  if (m.op == OpKind::kPostPre || (bcast && m.extra_out)) c.add("residual_out", DType::kBFloat16, {T, n, H}, true);
  for (auto& [name, tensor] : c.t) {
    if (tensor.output) continue;
    const uint64_t s = mhc_test::mix_seed(seed, std::hash<std::string>{}(name));
    if (name == "post_mix") {
      mhc_test::fill_uniform(tensor, s, 0.2, 1.8);
    } else if (name == "comb_mix") {
      mhc_test::fill_uniform(tensor, s, 0.05, 0.45);
    } else if (name == "pre_mix_in") {
      mhc_test::fill_uniform(tensor, s, 0.2, 1.0);
    } else if (name == "rmsnorm_weight") {
      mhc_test::fill_uniform(tensor, s, 0.5, 1.5);
    } else {
      fill_normal_bf16(tensor, s);
    }
  }
  if (has_weights(m)) c.weights = weights != nullptr ? *weights : make_weights(m, H, seed);
  c.poison();
  return c;
}

// Calls the op on rows [t0, t0 + rows) of every tensor (rows < 0: all), forcing `variant`
// ("" = the dispatcher's choice); returns the variant that ran.
std::string call(Case& c, const std::string& variant, int64_t t0 = 0, int64_t rows = -1) {
  auto v = [&](const char* name) -> TensorView {
    if (!c.has(name)) return TensorView{};
    Tensor& x = c[name];
    return x.token_major() ? x.view(false, t0, rows) : x.view(false);
  };
  mhc::Exec ex;
  ex.variant = variant.empty() ? nullptr : variant.c_str();
  const Mode& m = c.mode;
  switch (m.op) {
    case OpKind::kMixes: {
      mhc::MixesArgs a;
      a.config = c.cfg;
      a.residual = v("residual");
      a.weights = &c.weights;
      a.pre_mix = v("pre_mix_out");
      a.post_mix = v("post_mix_out");
      a.comb_mix = v("comb_mix_out");
      a.exec = ex;
      mhc::mixes(a);
      return mhc::selected_variant(a);
    }
    case OpKind::kCollapse: {
      mhc::CollapseArgs a;
      a.config = c.cfg;
      a.pre_source = m.source;
      a.residual = v("residual");
      a.pre_mix = v("pre_mix_in");
      a.rmsnorm_weight = v("rmsnorm_weight");
      a.layer_input = v("layer_input");
      a.exec = ex;
      mhc::collapse(a);
      return mhc::selected_variant(a);
    }
    case OpKind::kPre: {
      mhc::PreArgs a;
      a.config = c.cfg;
      a.pre_source = m.source;
      a.residual = v("residual");
      a.weights = &c.weights;
      a.pre_mix_in = v("pre_mix_in");
      a.rmsnorm_weight = v("rmsnorm_weight");
      a.layer_input = v("layer_input");
      a.post_mix = v("post_mix_out");
      a.comb_mix = v("comb_mix_out");
      a.pre_mix_out = v("pre_mix_out");
      a.exec = ex;
      mhc::pre(a);
      return mhc::selected_variant(a);
    }
    case OpKind::kPreBroadcast: {
      mhc::PreBroadcastArgs a;
      a.config = c.cfg;
      a.pre_source = m.source;
      a.embedding = v("embedding");
      a.weights = &c.weights;
      a.pre_mix_in = v("pre_mix_in");
      a.rmsnorm_weight = v("rmsnorm_weight");
      a.layer_input = v("layer_input");
      a.post_mix = v("post_mix_out");
      a.comb_mix = v("comb_mix_out");
      a.pre_mix_out = v("pre_mix_out");
      a.residual_out = v("residual_out");
      a.exec = ex;
      mhc::pre_broadcast(a);
      return mhc::selected_variant(a);
    }
    case OpKind::kPostPre: {
      mhc::PostPreArgs a;
      a.config = c.cfg;
      a.pre_source = m.source;
      a.layer_output = v("layer_output");
      a.residual = v("residual");
      a.post_mix = v("post_mix");
      a.comb_mix = v("comb_mix");
      a.weights = &c.weights;
      a.pre_mix_in = v("pre_mix_in");
      a.rmsnorm_weight = v("rmsnorm_weight");
      a.residual_out = v("residual_out");
      a.layer_input = v("layer_input");
      a.post_mix_out = v("post_mix_out");
      a.comb_mix_out = v("comb_mix_out");
      a.pre_mix_out = v("pre_mix_out");
      a.exec = ex;
      mhc::post_pre(a);
      return mhc::selected_variant(a);
    }
    case OpKind::kHead: {
      mhc::HeadArgs a;
      a.config = c.cfg;
      a.kind = m.head;
      a.residual = v("residual");
      a.weights = has_weights(m) ? &c.weights : nullptr;
      a.pre_mix_in = v("pre_mix_in");
      a.rmsnorm_weight = v("rmsnorm_weight");
      a.output = v("layer_input");
      a.exec = ex;
      mhc::head(a);
      return mhc::selected_variant(a);
    }
  }
  return "";
}

using Outputs = std::map<std::string, Tensor>;
Tensor clone(const Tensor& x) {  // host copies only (a CPU test has no device memory)
  Tensor y;
  y.dtype = x.dtype;
  y.shape = x.shape;
  y.stride0 = x.stride0;
  y.output = x.output;
  y.h16 = x.h16;
  y.h32 = x.h32;
  y.g16 = x.h16;  // check_padding reads the "downloaded" copy
  y.g32 = x.h32;
  return y;
}
Outputs outputs(Case& c) {
  Outputs o;
  for (const std::string& name : c.outs) o.emplace(name, clone(c[name]));
  return o;
}
Outputs clone_all(const Outputs& x) {
  Outputs o;
  for (const auto& [name, t] : x) o.emplace(name, clone(t));
  return o;
}

Check check_of(const Mode& m, const std::string& name) {
  if (name == "residual_out") return Check::kExact;
  if (name != "layer_input") return Check::kF32;
  if (exact_collapse(m)) return m.norm ? Check::kBF16 : Check::kExact;
  return m.norm ? Check::kBF16Twice : Check::kBF16;
}

// The outputs of `got` against `want`, by `check` (kExact for the invariance checks).
void compare(const Mode& m, Outputs& want, Outputs& got, const std::string& label, bool exact) {
  for (auto& [name, w] : want) {
    Tensor& g = got.at(name);
    const Check check = exact ? Check::kExact : check_of(m, name);
    mhc_test::Tally t = mhc_test::compare_rows(w.dtype, check, w.host(), w.stride(), g.host(), g.stride(), w.rows(),
                                               w.row_len(), label + " " + name);
    t.merge(mhc_test::check_padding(g, label + " " + name));
    mhc_test::expect_tally(t, check, std::string(m.name) + ".cpu_fast " + label + " " + name);
  }
}

// head.cpu_fast's output goes out by non-temporal stores from cpu::kStreamMinBytes of residual
// (64-byte aligned rows; OpsGrid's cases are smaller and unaligned): the same bits as calls on
// slices of the batch below that size, for 1 and 2 threads, learned (with and without the fold)
// and mean.
TEST(CpuFastHead, StreamedOutputEqualsSlicedCalls) {
  const int64_t H = 64, n = 4, K = n * H, slice = 512;
  const int64_t T = mhc::detail::cpu::kStreamMinBytes / static_cast<int64_t>(K * sizeof(uint16_t));
  NormalBf16 normal(91);
  Bits residual(static_cast<size_t>(T * K)), norm(static_cast<size_t>(H)), want(static_cast<size_t>(T * H));
  for (uint16_t& v : residual) v = normal();
  for (uint16_t& v : norm) v = mhc::detail::float_to_bf16(1.0f + 0.125f * mhc::detail::bf16_to_float(normal()));
  const Mode learned{"head_learned_norm", OpKind::kHead, PreSource::kComputed, HeadKind::kLearned, true};
  const mhc::PreparedWeights weights = make_weights(learned, H, 93);
  auto run = [&](HeadKind kind, bool fold, int64_t t0, int64_t count, Bits& out) {
    mhc::HeadArgs a;
    a.config = mhc::model_preset("deepseek-v4-flash").config;
    a.config.H = H;
    a.kind = kind;
    a.residual = mhc::make_view(residual.data() + t0 * K, DType::kBFloat16, {count, n, H});
    a.weights = kind == HeadKind::kLearned ? &weights : nullptr;
    if (fold) a.rmsnorm_weight = mhc::make_view(norm.data(), DType::kBFloat16, {H});
    a.output = mhc::make_view(out.data() + t0 * H, DType::kBFloat16, {count, H});
    a.exec.variant = "head.cpu_fast";
    mhc::head(a);
  };
  for (const auto& [kind, fold] : {std::pair{HeadKind::kLearned, true}, std::pair{HeadKind::kLearned, false},
                                   std::pair{HeadKind::kMean, true}}) {
    for (int64_t t0 = 0; t0 < T; t0 += slice) run(kind, fold, t0, slice, want);
    for (int threads : thread_counts({1, 2})) {
      const ThreadCount scope(threads);
      Bits got(want.size(), 0xffff);
      run(kind, fold, 0, T, got);
      EXPECT_TRUE(got == want) << "head kind " << static_cast<int>(kind) << " fold " << fold << " threads " << threads;
    }
  }
}

class OpsGrid : public testing::TestWithParam<Mode> {};

TEST_P(OpsGrid, MatchesTheOracleOnEveryThreadCount) {
  const Mode& m = GetParam();
  const std::string fast = std::string(op_id(m.op)) + ".cpu_fast";
  uint64_t seed = 1000;
  for (int64_t H : {4096, 5120, 7168, 999}) {
    // One set of weights for every T of this H (drawing them cost more than the calls at T <= 5).
    const mhc::PreparedWeights weights = has_weights(m) ? make_weights(m, H, seed + 500) : mhc::PreparedWeights{};
    for (int64_t T : {0, 1, 5, 67}) {
      if (H != 4096 && T == 67 && m.op != OpKind::kPostPre) continue;  // keep the oracle's time modest
      const std::string label = "H=" + std::to_string(H) + " T=" + std::to_string(T);
      Case c = make_case(m, T, H, seed++, &weights);
      call(c, std::string(op_id(m.op)) + ".cpu_ref");
      Outputs want = outputs(c);
      Outputs first;
      for (int threads : thread_counts({1, 2})) {
        const ThreadCount scope(threads);
        c.poison();
        EXPECT_EQ(call(c, ""), fast) << label;  // the default on the CPU
        Outputs got = outputs(c);
        if (threads == 1) {
          compare(m, want, got, label, false);
          first = clone_all(got);
        } else {
          compare(m, first, got, label + " threads " + std::to_string(threads) + " vs 1", true);
        }
      }
      if (T >= 5 && (H == 999 || H == 4096)) {  // every lower SIMD level gives the best level's bits
        using mhc::detail::cpu::Isa;
        for (Isa level : {Isa::kAvx2, Isa::kScalar}) {
          if (level >= mhc::detail::cpu::best_isa()) continue;
          mhc::detail::cpu::force_isa(level);
          c.poison();
          call(c, fast);
          mhc::detail::cpu::force_isa(Isa::kAvx512);
          Outputs got = outputs(c);
          compare(m, first, got, label + " " + mhc::detail::cpu::isa_name(level) + " vs " +
                                     mhc::detail::cpu::isa_name(mhc::detail::cpu::best_isa()), true);
        }
      }
      if (T == 67) {  // batch invariance: token 0 alone and the slice [37, 56) (decode path)
        Outputs batch = clone_all(first);
        c.poison();
        call(c, fast, 0, 1);
        call(c, fast, 37, 19);
        for (auto& [name, w] : batch) {
          Tensor& g = c[name];
          for (int64_t t : {int64_t{0}, int64_t{37}, int64_t{50}, int64_t{55}}) {
            const size_t at = static_cast<size_t>(t * w.stride()) * w.esize();
            EXPECT_EQ(std::memcmp(static_cast<char*>(w.host()) + at, static_cast<char*>(g.host()) + at,
                                  static_cast<size_t>(w.row_len()) * w.esize()),
                      0)
                << m.name << " " << label << " " << name << " token " << t << " alone/in a slice differs from the batch";
          }
        }
      }
    }
  }
}

// NaN in one token's input changes that token's outputs only (and no call crashes).
TEST_P(OpsGrid, NanInOneTokenStaysInThatToken) {
  const Mode& m = GetParam();
  const std::string fast = std::string(op_id(m.op)) + ".cpu_fast";
  for (int64_t T : {int64_t{9}, int64_t{40}}) {
    Case c = make_case(m, T, 512, 7);
    call(c, fast);
    Outputs clean = outputs(c);
    const char* input = m.op == OpKind::kPreBroadcast ? "embedding" : "residual";
    c[input].h16[static_cast<size_t>(3 * c[input].stride() + 5)] = 0x7fc0u;
    c.poison();
    call(c, fast);
    for (auto& [name, w] : clean) {
      Tensor& g = c[name];
      for (int64_t t = 0; t < T; ++t) {
        if (t == 3) continue;
        const size_t at = static_cast<size_t>(t * w.stride()) * w.esize();
        EXPECT_EQ(std::memcmp(static_cast<char*>(w.host()) + at, static_cast<char*>(g.host()) + at,
                              static_cast<size_t>(w.row_len()) * w.esize()),
                  0)
            << m.name << " T=" << T << " " << name << " token " << t << " changed by a NaN in token 3";
      }
    }
  }
}

// Tokens whose squares overflow fp32 (values ~2^70) or underflow (~2^-70) take the double sum of
// squares (ss_of); their outputs still match the oracle, and every SIMD level gives the same bits.
TEST(CpuFastOps, HugeAndTinyTokensTakeTheDoubleSumOfSquares) {
  const Mode m{"post_pre_normal_norm", OpKind::kPostPre, PreSource::kComputed, HeadKind::kLearned, true};
  for (int64_t T : {int64_t{9}, int64_t{40}}) {  // the decode and the tiled paths
    Case c = make_case(m, T, 512, 21);
    Tensor& res = c["residual"];
    for (int64_t t : {int64_t{2}, int64_t{5}}) {
      for (int64_t i = 0; i < 4 * 512; ++i) {
        uint16_t& b = res.h16[static_cast<size_t>(t * res.stride() + i)];
        if ((b & 0x7fffu) == 0) continue;
        const int e = (b >> 7) & 0xff;
        const int shifted = t == 2 ? std::min(e + 70, 254) : std::max(e - 70, 1);
        b = static_cast<uint16_t>((b & 0x807fu) | (shifted << 7));
      }
    }
    c["layer_output"].h16.assign(c["layer_output"].h16.size(), 0);  // post keeps the streams' scale
    call(c, "post_pre.cpu_ref");
    Outputs want = outputs(c);
    c.poison();
    call(c, "post_pre.cpu_fast");
    Outputs got = outputs(c);
    compare(m, want, got, "T=" + std::to_string(T) + " huge/tiny", false);
    using mhc::detail::cpu::Isa;
    for (Isa level : {Isa::kAvx2, Isa::kScalar}) {
      if (level >= mhc::detail::cpu::best_isa()) continue;
      mhc::detail::cpu::force_isa(level);
      c.poison();
      call(c, "post_pre.cpu_fast");
      mhc::detail::cpu::force_isa(Isa::kAvx512);
      Outputs other = outputs(c);
      compare(m, got, other, "T=" + std::to_string(T) + " huge/tiny " + mhc::detail::cpu::isa_name(level), true);
    }
  }
}

// The AVX-512 loops' tails: H = 16, 48, 1008 (32-column steps, then a 16-column step of the fold)
// and 1023 (then the last 15 columns by the scalar code) for the folded collapse (carried pre:
// exact, and mean head) and the folded pre, against the oracle, and every SIMD level and 1 and 2
// threads with the best level's bits.
TEST(CpuFastOps, OddHiddenSizesMatchTheOracleOnEveryLevel) {
  const Mode list[] = {
      {"collapse_carried_norm", OpKind::kCollapse, PreSource::kCarried, HeadKind::kLearned, true},
      {"pre_computed_norm", OpKind::kPre, PreSource::kComputed, HeadKind::kLearned, true},
      {"head_mean_norm", OpKind::kHead, PreSource::kComputed, HeadKind::kMean, true},
  };
  uint64_t seed = 4000;
  for (const Mode& m : list) {
    const std::string fast = std::string(op_id(m.op)) + ".cpu_fast";
    for (int64_t H : {16, 48, 1008, 1023}) {
      const std::string label = "H=" + std::to_string(H) + " T=5";
      Case c = make_case(m, 5, H, seed++);
      call(c, std::string(op_id(m.op)) + ".cpu_ref");
      Outputs want = outputs(c);
      c.poison();
      call(c, fast);
      Outputs best = outputs(c);
      compare(m, want, best, label, false);
      for (int threads : thread_counts({1, 2})) {
        const ThreadCount scope(threads);
        using mhc::detail::cpu::Isa;
        for (Isa level : {Isa::kAvx512, Isa::kAvx2, Isa::kScalar}) {
          if (level > mhc::detail::cpu::best_isa()) continue;
          mhc::detail::cpu::force_isa(level);
          c.poison();
          call(c, fast);
          mhc::detail::cpu::force_isa(Isa::kAvx512);
          Outputs got = outputs(c);
          compare(m, best, got, label + " " + mhc::detail::cpu::isa_name(level) + " threads " + std::to_string(threads),
                  true);
        }
      }
    }
  }
}

// A call that fails validation writes nothing (the outputs keep their poison).
TEST_P(OpsGrid, HostileInputIsRejectedWithNothingWritten) {
  const Mode& m = GetParam();
  const std::string fast = std::string(op_id(m.op)) + ".cpu_fast";
  Case c = make_case(m, 5, 64, 3);
  c.cfg.sinkhorn_iters = 0;  // invalid (spec section 7)
  EXPECT_THROW(call(c, fast), mhc::Error);
  c.cfg = make_case(m, 5, 64, 3).cfg;
  c.cfg.H = 65;  // every tensor's shape is now wrong
  EXPECT_THROW(call(c, fast), mhc::Error);
  for (const std::string& name : c.outs) {
    Tensor& o = c[name];
    const bool poisoned = o.dtype == DType::kBFloat16
                              ? std::all_of(o.h16.begin(), o.h16.end(), [](uint16_t b) { return b == mhc_test::kPoison16; })
                              : std::all_of(o.h32.begin(), o.h32.end(),
                                            [](float f) { return mhc_test::f32_bits(f) == mhc_test::kPoison32; });
    EXPECT_TRUE(poisoned) << m.name << ": " << name << " was written by a rejected call";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, OpsGrid, testing::ValuesIn(modes()),
                         [](const testing::TestParamInfo<Mode>& i) { return std::string(i.param.name); });

TEST(CpuFastOps, OtherStreamCountsStayOnTheOracle) {
  Mode m{"pre_n2", OpKind::kPre, PreSource::kComputed};
  Case c = make_case(m, 2, 16, 5);
  c.cfg.n = 2;
  mhc::PreArgs a;  // n = 2 tensors: the dispatcher must pick the oracle
  const Bits res(2 * 2 * 16, 0x3f80u);
  Bits out(2 * 16, 0);
  Floats post(4), comb(8);
  mhc::tools::Rng rng(3);
  const Floats fn = mhc::tools::random_f32(8 * 32, rng, 0.1);
  const Floats scale(3, 1.0f), base(8, 0.0f);
  mhc::MixWeightsView wv;
  wv.fn = mhc::make_view(fn.data(), DType::kFloat32, {8, 32});
  wv.scale = mhc::make_view(scale.data(), DType::kFloat32, {3});
  wv.base = mhc::make_view(base.data(), DType::kFloat32, {8});
  const mhc::PreparedWeights w = mhc::prepare(wv, 2, 16, mhc::Device{});
  a.config = c.cfg;
  a.residual = mhc::make_view(res.data(), DType::kBFloat16, {2, 2, 16});
  a.weights = &w;
  a.layer_input = mhc::make_view(out.data(), DType::kBFloat16, {2, 16});
  a.post_mix = mhc::make_view(post.data(), DType::kFloat32, {2, 2});
  a.comb_mix = mhc::make_view(comb.data(), DType::kFloat32, {2, 2, 2});
  EXPECT_EQ(mhc::selected_variant(a), "pre.cpu_ref");
  a.exec.variant = "pre.cpu_fast";
  EXPECT_THROW(mhc::pre(a), mhc::Error);
}

}  // namespace

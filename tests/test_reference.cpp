// tests/test_reference.cpp - CPU tests of every operator through the public API (mhc::mixes,
// mhc::pre, ... on CPU TensorViews), which dispatch to the float64 reference.
//
// Expected values never come from the code under test: they are worked out by hand (the
// comments show the arithmetic) or computed by the straightforward float64 transcription of spec
// section 3 written below ("formula_*"), with its own bf16 rounding (nearest_bf16).
//
// Suites: KnownAnswer (hand-worked and formula answers on n = 1, 2, 4 and H = 1..3, plus a few
// checks at H = 4096), Properties (Sinkhorn column sums, pre/post ranges, Config fields),
// Fused (post_pre == post then pre, pre_broadcast == pre on the copies), Identity (bit-exact
// stream 0), EmptyBatch (T = 0), NonFinite (token isolation), BatchInvariance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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
using Doubles = std::vector<double>;

// ---------------------------------------------------------------------------------------------
// bf16 helpers, written independently of src/core/bf16.hpp

// Exact value of a bf16 bit pattern.
double bf16_value(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &word, sizeof f);
  return f;
}

// Bits of a value that bf16 represents exactly (the hand-written inputs below).
uint16_t exact_bf16(float f) {
  uint32_t word;
  std::memcpy(&word, &f, sizeof word);
  EXPECT_EQ(word & 0xffffu, 0u) << f << " is not exactly representable in bf16";
  return static_cast<uint16_t>(word >> 16);
}

Bits exact_bf16s(std::initializer_list<float> values) {
  Bits out;
  for (float v : values) out.push_back(exact_bf16(v));
  return out;
}

// The bf16 nearest to v, ties to the even pattern, found by measuring the distance to the
// candidates around v. (Finite v inside the bf16 range; NaN gives the canonical NaN.)
uint16_t nearest_bf16(double v) {
  if (std::isnan(v)) return 0x7fc0;
  const float f = static_cast<float>(v);  // within half a float ulp of v
  uint32_t word;
  std::memcpy(&word, &f, sizeof word);
  const uint16_t cut = static_cast<uint16_t>(word >> 16);  // f with its low 16 bits dropped
  if (std::isinf(f)) return cut;
  uint16_t best = cut;
  double best_dist = std::fabs(bf16_value(cut) - v);
  const uint16_t candidates[2] = {static_cast<uint16_t>(cut + 1),
                                  static_cast<uint16_t>((cut & 0x7fffu) != 0 ? cut - 1 : cut)};
  for (uint16_t cand : candidates) {
    const double d = std::fabs(bf16_value(cand) - v);
    if (d < best_dist || (d == best_dist && (cand & 1u) == 0 && (best & 1u) != 0)) {
      best = cand;
      best_dist = d;
    }
  }
  return best;
}

Doubles values_of(const Bits& bits) {
  Doubles out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_value(bits[i]);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Buffers, views, weights

TensorView bf16_view(const Bits& v, std::initializer_list<int64_t> shape) {
  return mhc::make_view(v.data(), DType::kBFloat16, shape);
}
TensorView f32_view(const Floats& v, std::initializer_list<int64_t> shape) {
  return mhc::make_view(v.data(), DType::kFloat32, shape);
}
TensorView opt_bf16(const Bits* v, std::initializer_list<int64_t> shape) {
  return v != nullptr ? bf16_view(*v, shape) : TensorView{};
}
TensorView opt_f32(const Floats* v, std::initializer_list<int64_t> shape) {
  return v != nullptr ? f32_view(*v, shape) : TensorView{};
}

Bits poisoned_bits(int64_t count) { return Bits(static_cast<size_t>(count), 0xffffu); }
Floats poisoned_floats(int64_t count) {
  Floats v(static_cast<size_t>(count));
  std::memset(v.data(), 0xff, v.size() * sizeof(float));
  return v;
}
bool all_poisoned(const Bits& v) {
  for (uint16_t x : v) {
    if (x != 0xffffu) return false;
  }
  return true;
}
bool all_poisoned(const Floats& v) {
  for (float x : v) {
    uint32_t w;
    std::memcpy(&w, &x, sizeof w);
    if (w != 0xffffffffu) return false;
  }
  return true;
}

// Checkpoint tensors of one block plus their prepared form.
struct Block {
  Floats fn, scale, base;
  mhc::PreparedWeights prepared;
};

Block make_block(const Config& c, Floats fn, Floats scale, Floats base) {
  Block b{std::move(fn), std::move(scale), std::move(base), {}};
  const int64_t rows = c.M();
  b.prepared = mhc::prepare({f32_view(b.fn, {rows, c.K()}), f32_view(b.scale, {3}), f32_view(b.base, {rows})},
                            c.n, c.H, mhc::Device{});
  return b;
}

Block make_head_block(const Config& c, Floats fn, Floats scale, Floats base) {
  Block b{std::move(fn), std::move(scale), std::move(base), {}};
  const int64_t rows = c.n;
  b.prepared = mhc::prepare_head({f32_view(b.fn, {rows, c.K()}), f32_view(b.scale, {1}), f32_view(b.base, {rows})},
                                 c.n, c.H, mhc::Device{});
  return b;
}

// fn ~ N(0, 1/K) so that the mixes of an RMS-normalised input are O(1); each alpha is drawn
// from [alpha, 2*alpha).
Block random_block(const Config& c, Rng& rng, double alpha, bool head) {
  const int64_t rows = head ? c.n : c.M();
  Floats fn = mhc::tools::random_f32(static_cast<size_t>(rows * c.K()), rng,
                                     1.0 / std::sqrt(static_cast<double>(c.K())));
  Floats scale(head ? 1 : 3);
  for (float& s : scale) s = static_cast<float>(alpha * (1.0 + rng.uniform()));
  Floats base = mhc::tools::random_f32(static_cast<size_t>(rows), rng, 0.5);
  return head ? make_head_block(c, std::move(fn), std::move(scale), std::move(base))
              : make_block(c, std::move(fn), std::move(scale), std::move(base));
}

Floats uniform_floats(int64_t count, Rng& rng, double lo, double hi) {
  Floats v(static_cast<size_t>(count));
  for (float& x : v) x = static_cast<float>(lo + (hi - lo) * rng.uniform());
  return v;
}

// Scalars where every field matters visibly (larger than the shipped ones).
Config test_config(int n, int64_t H) {
  Config c;
  c.n = n;
  c.H = H;
  c.norm_eps = 1e-3f;
  c.pre_eps = 0.01f;
  c.sinkhorn_eps = 1e-3f;
  c.sinkhorn_iters = 7;
  c.post_scale = 1.75f;
  c.rmsnorm_eps = 0.02f;
  return c;
}

// Random inputs of every operator for one config.
struct Inputs {
  Config c;
  int64_t T = 0;
  Bits residual;      // [T,n,H]
  Bits embedding;     // [T,H] (pre_broadcast input, post's broadcast-form residual)
  Bits layer_output;  // [T,H]
  Bits norm;          // [H]
  Floats post_mix;    // [T,n]
  Floats comb_mix;    // [T,n,n]
  Floats pre_mix_in;  // [T,n]
  Block block;        // mix block
  Block head;         // learned head
};

Inputs random_inputs(const Config& c, int64_t T, uint64_t seed) {
  Rng rng(seed);
  Inputs in;
  in.c = c;
  in.T = T;
  in.residual = mhc::tools::random_bf16(static_cast<size_t>(T * c.K()), rng);
  in.embedding = mhc::tools::random_bf16(static_cast<size_t>(T * c.H), rng);
  in.layer_output = mhc::tools::random_bf16(static_cast<size_t>(T * c.H), rng);
  in.norm.resize(static_cast<size_t>(c.H));
  for (uint16_t& w : in.norm) w = nearest_bf16(1.0 + 0.1 * rng.normal());
  in.post_mix = uniform_floats(T * c.n, rng, 0.1, 1.9);
  in.comb_mix = uniform_floats(T * c.n * c.n, rng, 0.0, 1.0);
  in.pre_mix_in = uniform_floats(T * c.n, rng, 0.05, 1.05);
  in.block = random_block(c, rng, 0.5, false);
  in.head = random_block(c, rng, 0.5, true);
  return in;
}

// ---------------------------------------------------------------------------------------------
// Running the operators (outputs start as 0xFF poison)

struct Result {
  Bits residual_out;  // [T,n,H]
  Bits layer_input;   // [T,H] (head: output)
  Floats pre_mix;     // [T,n] (mixes' pre_mix, or pre_mix_out)
  Floats post_mix;    // [T,n]
  Floats comb_mix;    // [T,n,n]
};

Result poisoned_result(const Config& c, int64_t T) {
  return {poisoned_bits(T * c.K()), poisoned_bits(T * c.H), poisoned_floats(T * c.n), poisoned_floats(T * c.n),
          poisoned_floats(T * c.n * c.n)};
}

Result run_mixes(const Config& c, int64_t T, const Bits& residual, const Block& b) {
  Result r = poisoned_result(c, T);
  mhc::MixesArgs a;
  a.config = c;
  a.residual = bf16_view(residual, {T, c.n, c.H});
  a.weights = &b.prepared;
  a.pre_mix = f32_view(r.pre_mix, {T, c.n});
  a.post_mix = f32_view(r.post_mix, {T, c.n});
  a.comb_mix = f32_view(r.comb_mix, {T, c.n, c.n});
  mhc::mixes(a);
  return r;
}

Result run_collapse(const Config& c, int64_t T, PreSource src, const Bits& residual, const Floats* pre_mix,
                    const Bits* norm) {
  Result r = poisoned_result(c, T);
  mhc::CollapseArgs a;
  a.config = c;
  a.pre_source = src;
  a.residual = bf16_view(residual, {T, c.n, c.H});
  a.pre_mix = opt_f32(pre_mix, {T, c.n});
  a.rmsnorm_weight = opt_bf16(norm, {c.H});
  a.layer_input = bf16_view(r.layer_input, {T, c.H});
  mhc::collapse(a);
  return r;
}

Result run_pre(const Config& c, int64_t T, PreSource src, const Bits& residual, const Block& b,
               const Floats* pre_in, const Bits* norm) {
  Result r = poisoned_result(c, T);
  mhc::PreArgs a;
  a.config = c;
  a.pre_source = src;
  a.residual = bf16_view(residual, {T, c.n, c.H});
  a.weights = &b.prepared;
  // An argument the mode does not use must be absent (issue 17): pass pre_in only when carried.
  a.pre_mix_in = src == PreSource::kCarried ? opt_f32(pre_in, {T, c.n}) : TensorView{};
  a.rmsnorm_weight = opt_bf16(norm, {c.H});
  a.layer_input = bf16_view(r.layer_input, {T, c.H});
  a.post_mix = f32_view(r.post_mix, {T, c.n});
  a.comb_mix = f32_view(r.comb_mix, {T, c.n, c.n});
  a.pre_mix_out = f32_view(r.pre_mix, {T, c.n});
  mhc::pre(a);
  return r;
}

Result run_pre_broadcast(const Config& c, int64_t T, PreSource src, const Bits& embedding, const Block& b,
                         const Floats* pre_in, const Bits* norm) {
  Result r = poisoned_result(c, T);
  mhc::PreBroadcastArgs a;
  a.config = c;
  a.pre_source = src;
  a.embedding = bf16_view(embedding, {T, c.H});
  a.weights = &b.prepared;
  // An argument the mode does not use must be absent (issue 17): pass pre_in only when carried.
  a.pre_mix_in = src == PreSource::kCarried ? opt_f32(pre_in, {T, c.n}) : TensorView{};
  a.rmsnorm_weight = opt_bf16(norm, {c.H});
  a.layer_input = bf16_view(r.layer_input, {T, c.H});
  a.post_mix = f32_view(r.post_mix, {T, c.n});
  a.comb_mix = f32_view(r.comb_mix, {T, c.n, c.n});
  a.pre_mix_out = f32_view(r.pre_mix, {T, c.n});
  a.residual_out = bf16_view(r.residual_out, {T, c.n, c.H});
  mhc::pre_broadcast(a);
  return r;
}

// broadcast: `residual` is the [T,H] first-layer form.
Result run_post(const Config& c, int64_t T, const Bits& layer_output, const Bits& residual, bool broadcast,
                const Floats& post_mix, const Floats& comb_mix) {
  Result r = poisoned_result(c, T);
  mhc::PostArgs a;
  a.config = c;
  a.layer_output = bf16_view(layer_output, {T, c.H});
  a.residual = broadcast ? bf16_view(residual, {T, c.H}) : bf16_view(residual, {T, c.n, c.H});
  a.post_mix = f32_view(post_mix, {T, c.n});
  a.comb_mix = f32_view(comb_mix, {T, c.n, c.n});
  a.residual_out = bf16_view(r.residual_out, {T, c.n, c.H});
  mhc::post(a);
  return r;
}

Result run_post_pre(const Config& c, int64_t T, PreSource src, const Bits& layer_output, const Bits& residual,
                    bool broadcast, const Floats& post_mix, const Floats& comb_mix, const Block& b,
                    const Floats* pre_in, const Bits* norm) {
  Result r = poisoned_result(c, T);
  mhc::PostPreArgs a;
  a.config = c;
  a.pre_source = src;
  a.layer_output = bf16_view(layer_output, {T, c.H});
  a.residual = broadcast ? bf16_view(residual, {T, c.H}) : bf16_view(residual, {T, c.n, c.H});
  a.post_mix = f32_view(post_mix, {T, c.n});
  a.comb_mix = f32_view(comb_mix, {T, c.n, c.n});
  a.weights = &b.prepared;
  // An argument the mode does not use must be absent (issue 17): pass pre_in only when carried.
  a.pre_mix_in = src == PreSource::kCarried ? opt_f32(pre_in, {T, c.n}) : TensorView{};
  a.rmsnorm_weight = opt_bf16(norm, {c.H});
  a.residual_out = bf16_view(r.residual_out, {T, c.n, c.H});
  a.layer_input = bf16_view(r.layer_input, {T, c.H});
  a.post_mix_out = f32_view(r.post_mix, {T, c.n});
  a.comb_mix_out = f32_view(r.comb_mix, {T, c.n, c.n});
  a.pre_mix_out = f32_view(r.pre_mix, {T, c.n});
  mhc::post_pre(a);
  return r;
}

Result run_head(const Config& c, int64_t T, HeadKind kind, const Bits& residual, const Block* head,
                const Floats* pre_in, const Bits* norm) {
  Result r = poisoned_result(c, T);
  mhc::HeadArgs a;
  a.config = c;
  a.kind = kind;
  a.residual = bf16_view(residual, {T, c.n, c.H});
  a.weights = head != nullptr ? &head->prepared : nullptr;
  a.pre_mix_in = kind == HeadKind::kCarried ? opt_f32(pre_in, {T, c.n}) : TensorView{};
  a.rmsnorm_weight = opt_bf16(norm, {c.H});
  a.output = bf16_view(r.layer_input, {T, c.H});
  mhc::head(a);
  return r;
}

// ---------------------------------------------------------------------------------------------
// The formula: spec section 3 transcribed in float64, one token at a time

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// Streams of token t as doubles, x[j*H + h]; the broadcast form repeats the [T,H] row n times.
Doubles streams_of(const Bits& residual, int64_t t, const Config& c, bool broadcast) {
  Doubles x(static_cast<size_t>(c.K()));
  for (int j = 0; j < c.n; ++j) {
    for (int64_t h = 0; h < c.H; ++h) {
      const size_t src = broadcast ? static_cast<size_t>(t * c.H + h) : static_cast<size_t>((t * c.n + j) * c.H + h);
      x[static_cast<size_t>(j * c.H + h)] = bf16_value(residual[src]);
    }
  }
  return x;
}

// Sinkhorn on an n x n matrix held as rows.
Doubles formula_sinkhorn(const Doubles& logits, int n, int iters, double eps) {
  std::vector<Doubles> m(static_cast<size_t>(n), Doubles(static_cast<size_t>(n)));
  for (int j = 0; j < n; ++j) {
    double top = logits[static_cast<size_t>(j * n)];
    for (int k = 0; k < n; ++k) top = std::max(top, logits[static_cast<size_t>(j * n + k)]);
    double total = 0.0;
    for (int k = 0; k < n; ++k) total += std::exp(logits[static_cast<size_t>(j * n + k)] - top);
    for (int k = 0; k < n; ++k) m[j][k] = std::exp(logits[static_cast<size_t>(j * n + k)] - top) / total + eps;
  }
  auto normalise_columns = [&]() {
    for (int k = 0; k < n; ++k) {
      double total = 0.0;
      for (int j = 0; j < n; ++j) total += m[j][k];
      for (int j = 0; j < n; ++j) m[j][k] = m[j][k] / (total + eps);
    }
  };
  auto normalise_rows = [&]() {
    for (int j = 0; j < n; ++j) {
      double total = 0.0;
      for (int k = 0; k < n; ++k) total += m[j][k];
      for (int k = 0; k < n; ++k) m[j][k] = m[j][k] / (total + eps);
    }
  };
  normalise_columns();
  for (int it = 1; it < iters; ++it) {
    normalise_rows();
    normalise_columns();
  }
  Doubles out;
  for (int j = 0; j < n; ++j) {
    for (int k = 0; k < n; ++k) out.push_back(m[j][k]);
  }
  return out;
}

struct Mix {
  Doubles pre, post, comb;
};

// mixes_of(x) of spec section 3; a head block gives pre only.
Mix formula_mixes(const Doubles& x, const Block& b, const Config& c, bool head) {
  const int n = c.n;
  const size_t K = x.size();
  double sumsq = 0.0;
  for (double v : x) sumsq += v * v;
  const double r = 1.0 / std::sqrt(sumsq / static_cast<double>(K) + static_cast<double>(c.norm_eps));
  const int rows = head ? n : c.M();
  Doubles m(static_cast<size_t>(rows));
  for (int row = 0; row < rows; ++row) {
    double dot = 0.0;
    for (size_t i = 0; i < K; ++i) dot += x[i] * static_cast<double>(b.fn[row * K + i]);
    m[static_cast<size_t>(row)] = dot * r;
  }
  Mix out;
  for (int j = 0; j < n; ++j) out.pre.push_back(sigmoid(m[j] * b.scale[0] + b.base[j]) + static_cast<double>(c.pre_eps));
  if (head) return out;
  for (int j = 0; j < n; ++j) {
    out.post.push_back(static_cast<double>(c.post_scale) * sigmoid(m[n + j] * b.scale[1] + b.base[n + j]));
  }
  Doubles logits;
  for (int i = 0; i < n * n; ++i) logits.push_back(m[2 * n + i] * b.scale[2] + b.base[2 * n + i]);
  out.comb = formula_sinkhorn(logits, n, c.sinkhorn_iters, c.sinkhorn_eps);
  return out;
}

// new[k,:] = bf16(post[k]*out + sum_j comb[j,k]*x[j,:]) for token t.
Bits formula_post(const Config& c, int64_t t, const Bits& layer_output, const Doubles& x, const Floats& post_mix,
                  const Floats& comb_mix) {
  const int n = c.n;
  Bits out(static_cast<size_t>(c.K()));
  for (int k = 0; k < n; ++k) {
    for (int64_t h = 0; h < c.H; ++h) {
      double v = static_cast<double>(post_mix[static_cast<size_t>(t * n + k)]) *
                 bf16_value(layer_output[static_cast<size_t>(t * c.H + h)]);
      for (int j = 0; j < n; ++j) {
        v += static_cast<double>(comb_mix[static_cast<size_t>(t * n * n + j * n + k)]) * x[static_cast<size_t>(j * c.H + h)];
      }
      out[static_cast<size_t>(k * c.H + h)] = nearest_bf16(v);
    }
  }
  return out;
}

Bits formula_collapse(const Config& c, const Doubles& x, const Doubles& pre) {
  Bits u(static_cast<size_t>(c.H));
  for (int64_t h = 0; h < c.H; ++h) {
    double v = 0.0;
    for (int j = 0; j < c.n; ++j) v += pre[static_cast<size_t>(j)] * x[static_cast<size_t>(j * c.H + h)];
    u[static_cast<size_t>(h)] = nearest_bf16(v);
  }
  return u;
}

Bits formula_rmsnorm(const Bits& u, const Bits& w, double eps) {
  double sumsq = 0.0;
  for (uint16_t b : u) sumsq += bf16_value(b) * bf16_value(b);
  const double inv = 1.0 / std::sqrt(sumsq / static_cast<double>(u.size()) + eps);
  Bits out(u.size());
  for (size_t h = 0; h < u.size(); ++h) out[h] = nearest_bf16(bf16_value(u[h]) * inv * bf16_value(w[h]));
  return out;
}

struct Expected {
  Bits residual_out, layer_input;
  Doubles pre_mix, post_mix, comb_mix;
};

void append(Bits& to, const Bits& from) { to.insert(to.end(), from.begin(), from.end()); }
void append(Doubles& to, const Doubles& from) { to.insert(to.end(), from.begin(), from.end()); }

// Mixes of x, then the collapse with the chosen pre, then the optional fold; appends token t.
void formula_pre_token(Expected& e, const Config& c, int64_t t, PreSource src, const Doubles& x, const Block& b,
                       const Floats* pre_in, const Bits* norm) {
  const Mix mix = formula_mixes(x, b, c, false);
  append(e.pre_mix, mix.pre);
  append(e.post_mix, mix.post);
  append(e.comb_mix, mix.comb);
  Bits u;
  if (src == PreSource::kIdentity) {
    for (int64_t h = 0; h < c.H; ++h) u.push_back(nearest_bf16(x[static_cast<size_t>(h)]));
  } else {
    Doubles pre = mix.pre;
    if (src == PreSource::kCarried) {
      for (int j = 0; j < c.n; ++j) pre[static_cast<size_t>(j)] = (*pre_in)[static_cast<size_t>(t * c.n + j)];
    }
    u = formula_collapse(c, x, pre);
  }
  append(e.layer_input, norm != nullptr ? formula_rmsnorm(u, *norm, c.rmsnorm_eps) : u);
}

// pre (broadcast = false) or pre_broadcast (broadcast = true, residual is the embedding).
Expected formula_pre(const Config& c, int64_t T, PreSource src, const Bits& residual, bool broadcast, const Block& b,
                     const Floats* pre_in, const Bits* norm) {
  Expected e;
  for (int64_t t = 0; t < T; ++t) {
    const Doubles x = streams_of(residual, t, c, broadcast);
    for (double v : x) e.residual_out.push_back(nearest_bf16(v));
    formula_pre_token(e, c, t, src, x, b, pre_in, norm);
  }
  return e;
}

Expected formula_post_pre(const Config& c, int64_t T, PreSource src, const Bits& layer_output, const Bits& residual,
                          bool broadcast, const Floats& post_mix, const Floats& comb_mix, const Block& b,
                          const Floats* pre_in, const Bits* norm) {
  Expected e;
  for (int64_t t = 0; t < T; ++t) {
    const Bits fresh = formula_post(c, t, layer_output, streams_of(residual, t, c, broadcast), post_mix, comb_mix);
    append(e.residual_out, fresh);
    formula_pre_token(e, c, t, src, values_of(fresh), b, pre_in, norm);
  }
  return e;
}

Expected formula_head(const Config& c, int64_t T, HeadKind kind, const Bits& residual, const Block& head,
                      const Floats& pre_in, const Bits* norm) {
  Expected e;
  for (int64_t t = 0; t < T; ++t) {
    const Doubles x = streams_of(residual, t, c, false);
    Bits u;
    if (kind == HeadKind::kMean) {
      for (int64_t h = 0; h < c.H; ++h) {
        double total = 0.0;
        for (int j = 0; j < c.n; ++j) total += x[static_cast<size_t>(j * c.H + h)];
        u.push_back(nearest_bf16(total / c.n));
      }
    } else {
      Doubles pre;
      if (kind == HeadKind::kLearned) {
        pre = formula_mixes(x, head, c, true).pre;
      } else {
        for (int j = 0; j < c.n; ++j) pre.push_back(pre_in[static_cast<size_t>(t * c.n + j)]);
      }
      u = formula_collapse(c, x, pre);
    }
    append(e.layer_input, norm != nullptr ? formula_rmsnorm(u, *norm, c.rmsnorm_eps) : u);
  }
  return e;
}

// ---------------------------------------------------------------------------------------------
// Comparisons

void expect_bits_eq(const Bits& got, const Bits& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: got 0x" << std::hex << got[i] << " (" << bf16_value(got[i])
                    << "), want 0x" << want[i] << " (" << bf16_value(want[i]) << ")" << std::dec;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " values differ";
}

// |got - want| <= rel * |want| (NaN never passes).
void expect_near_rel(const Floats& got, const Doubles& want, double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (err <= rel * std::fabs(want[i])) continue;
    if (++bad <= 5) ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
  }
  EXPECT_EQ(bad, 0) << what;
}

// Bit-for-bit equality of fp32 buffers (NaN patterns included).
void expect_same_floats(const Floats& got, const Floats& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << what << " differs";
}

// The spec section 6 tolerance for fp32 outputs of a fused path against an unfused one.
constexpr double kMixRel = 1e-6;  // the reference is float64 rounded once; the spec allows 1e-5

void expect_matches(const Result& got, const Expected& want, bool residual_out, bool mixes, bool layer_input) {
  if (residual_out) expect_bits_eq(got.residual_out, want.residual_out, "residual_out");
  if (layer_input) expect_bits_eq(got.layer_input, want.layer_input, "layer_input");
  if (mixes) {
    expect_near_rel(got.pre_mix, want.pre_mix, kMixRel, "pre_mix");
    expect_near_rel(got.post_mix, want.post_mix, kMixRel, "post_mix");
    expect_near_rel(got.comb_mix, want.comb_mix, kMixRel, "comb_mix");
  }
}

std::string shape_label(int n, int64_t H) { return "n=" + std::to_string(n) + " H=" + std::to_string(H); }

const int kTinyN[] = {1, 2, 4};
const int64_t kTinyH[] = {1, 2, 3};

// =============================================================================================
// KnownAnswer: worked by hand

TEST(KnownAnswer, MixesN1H2ByHand) {
  Config c;
  c.n = 1;
  c.H = 2;
  c.norm_eps = 3.5f;
  c.pre_eps = 0.125f;
  c.sinkhorn_eps = 0.5f;
  c.sinkhorn_iters = 2;
  c.post_scale = 3.0f;
  // K = 2, M = 3 rows: pre, post, comb. x = [3, 4]: sum(x^2)/K = 12.5, r = 1/sqrt(12.5 + 3.5) = 1/4.
  const Bits residual = exact_bf16s({3.0f, 4.0f});
  // fn rows: pre [1, 0] -> m = 3/4; post [0, 1] -> m = 1; comb [1, 1] -> m = 7/4.
  const Block b = make_block(c, {1, 0, 0, 1, 1, 1}, {2.0f, -1.0f, 5.0f}, {-1.5f, 0.5f, 0.3f});
  const Result r = run_mixes(c, 1, residual, b);
  // pre  = sigmoid(3/4 * 2 - 1.5) + 0.125 = sigmoid(0) + 0.125 = 0.625
  expect_near_rel(r.pre_mix, {0.625}, 1e-7, "pre_mix");
  // post = 3 * sigmoid(1 * -1 + 0.5) = 3 / (1 + e^0.5)
  expect_near_rel(r.post_mix, {3.0 / (1.0 + std::exp(0.5))}, 1e-7, "post_mix");
  // comb, n = 1: softmax of one logit = 1; + eps -> 1.5; column: 1.5 / (1.5 + 0.5) = 0.75;
  // iteration 2: row 0.75 / (0.75 + 0.5) = 0.6; column 0.6 / (0.6 + 0.5) = 6/11.
  expect_near_rel(r.comb_mix, {6.0 / 11.0}, 1e-7, "comb_mix");
}

// n = 2, H = 1: every mix row, both scale entries in use, and Sinkhorn worked step by step.
Config n2_config() {
  Config c;
  c.n = 2;
  c.H = 1;
  c.norm_eps = 3.0f;
  c.pre_eps = 0.0625f;
  c.sinkhorn_eps = 0.25f;
  c.sinkhorn_iters = 2;
  c.post_scale = 2.0f;
  c.rmsnorm_eps = 0.1875f;
  return c;
}

// x = [stream 0, stream 1] = [1, -1]: sum(x^2)/K = 1, r = 1/sqrt(1 + 3) = 1/2, so a row
// [a, b] of fn gives m = (a - b) / 2.
Block n2_block(const Config& c) {
  const float ln3 = std::log(3.0f);
  return make_block(c,
                    {
                        2, 0,   // row 0, pre 0:     m = 1
                        0, 0,   // row 1, pre 1:     m = 0
                        0, 2,   // row 2, post 0:    m = -1
                        4, 0,   // row 3, post 1:    m = 2
                        0, 0,   // row 4, comb[0,0]: m = 0
                        2, -2,  // row 5, comb[0,1]: m = 2
                        1, 1,   // row 6, comb[1,0]: m = 0 (the streams cancel)
                        0, 0,   // row 7, comb[1,1]: m = 0
                    },
                    {2.0f, 0.5f, ln3 / 4.0f},                                  // alpha_pre, alpha_post, alpha_comb
                    {-2.0f, ln3, 0.5f, ln3 - 1.0f, 0.0f, ln3 / 2.0f, 0.0f, 0.0f});  // base
}

TEST(KnownAnswer, SinkhornN2StepByStep) {
  const Config c = n2_config();
  const Block b = n2_block(c);
  const Result r = run_mixes(c, 1, exact_bf16s({1.0f, -1.0f}), b);
  // pre logits:  1 * 2 - 2 = 0 and 0 * 2 + ln3 = ln3  -> sigmoid = 1/2, 3/4; + 1/16
  expect_near_rel(r.pre_mix, {9.0 / 16.0, 13.0 / 16.0}, 1e-6, "pre_mix");
  // post logits: -1 * 0.5 + 0.5 = 0 and 2 * 0.5 + ln3 - 1 = ln3 -> 2 * (1/2, 3/4)
  expect_near_rel(r.post_mix, {1.0, 1.5}, 1e-6, "post_mix");
  // comb logits (row j = source, column k = destination), m * ln3/4 + base:
  //   [[0, 2 * ln3/4 + ln3/2], [0, 0]] = [[0, ln3], [0, 0]]
  // Step 1, row softmax:     [[1/4, 3/4], [1/2, 1/2]]
  //         + eps (1/4):     [[1/2, 1], [3/4, 3/4]]
  // Step 2, columns: sums + eps = 5/4 + 1/4 = 3/2 and 7/4 + 1/4 = 2
  //                          [[1/3, 1/2], [1/2, 3/8]]
  // Iteration 2 (sinkhorn_iters = 2), rows: sums + eps = 5/6 + 1/4 = 13/12 and 7/8 + 1/4 = 9/8
  //                          [[4/13, 6/13], [4/9, 1/3]]
  //         columns: sums + eps = 88/117 + 1/4 = 469/468 and 31/39 + 1/4 = 163/156
  //                          [[144/469, 72/163], [208/469, 52/163]]
  expect_near_rel(r.comb_mix, {144.0 / 469.0, 72.0 / 163.0, 208.0 / 469.0, 52.0 / 163.0}, 1e-6, "comb_mix");
}

TEST(KnownAnswer, PreN2ByHand) {
  const Config c = n2_config();
  const Block b = n2_block(c);
  const Bits residual = exact_bf16s({1.0f, -1.0f});
  {  // computed: u = 9/16 * 1 + 13/16 * -1 = -1/4
    const Result r = run_pre(c, 1, PreSource::kComputed, residual, b, nullptr, nullptr);
    expect_bits_eq(r.layer_input, exact_bf16s({-0.25f}), "computed layer_input");
    expect_near_rel(r.pre_mix, {9.0 / 16.0, 13.0 / 16.0}, 1e-6, "pre_mix_out");
    expect_near_rel(r.post_mix, {1.0, 1.5}, 1e-6, "post_mix");
    expect_near_rel(r.comb_mix, {144.0 / 469.0, 72.0 / 163.0, 208.0 / 469.0, 52.0 / 163.0}, 1e-6, "comb_mix");
  }
  {  // computed + fold: -1/4 / sqrt((1/16)/1 + 3/16) * 3 = -1/4 * 2 * 3 = -1.5
    const Bits w = exact_bf16s({3.0f});
    const Result r = run_pre(c, 1, PreSource::kComputed, residual, b, nullptr, &w);
    expect_bits_eq(r.layer_input, exact_bf16s({-1.5f}), "folded layer_input");
  }
  {  // carried pre [0.5, 2]: 0.5 - 2 = -1.5; pre_mix_out is still the fresh pre
    const Floats pre_in = {0.5f, 2.0f};
    const Result r = run_pre(c, 1, PreSource::kCarried, residual, b, &pre_in, nullptr);
    expect_bits_eq(r.layer_input, exact_bf16s({-1.5f}), "carried layer_input");
    expect_near_rel(r.pre_mix, {9.0 / 16.0, 13.0 / 16.0}, 1e-6, "pre_mix_out");
  }
  {  // identity: stream 0
    const Result r = run_pre(c, 1, PreSource::kIdentity, residual, b, nullptr, nullptr);
    expect_bits_eq(r.layer_input, exact_bf16s({1.0f}), "identity layer_input");
  }
}

TEST(KnownAnswer, CollapseCarriedByHand) {
  Config c;
  c.n = 2;
  c.H = 3;
  // streams [1, 2, -3] and [0.5, -4, 8] with pre [0.25, 1.5]:
  //   [0.25 + 0.75, 0.5 - 6, -0.75 + 12] = [1, -5.5, 11.25]
  const Bits residual = exact_bf16s({1.0f, 2.0f, -3.0f, 0.5f, -4.0f, 8.0f});
  const Floats pre = {0.25f, 1.5f};
  const Result r = run_collapse(c, 1, PreSource::kCarried, residual, &pre, nullptr);
  expect_bits_eq(r.layer_input, exact_bf16s({1.0f, -5.5f, 11.25f}), "layer_input");
}

TEST(KnownAnswer, CollapseRoundsToNearestEven) {
  Config c;
  c.n = 2;
  c.H = 5;
  // pre = [1, 2^-8]; stream 0 = [1, 1, 2, 1, -1], stream 1 = [1, 3, 1, 1.25, -1].
  // bf16 keeps 8 significant bits: the spacing is 2^-7 in [1, 2) and 2^-6 in [2, 4).
  //   1 + 2^-8            tie between 0x3f80 (1) and 0x3f81: even -> 0x3f80
  //   1 + 3 * 2^-8        tie between 0x3f81 and 0x3f82: even -> 0x3f82
  //   2 + 2^-8            below half the spacing at 2 -> 0x4000
  //   1 + 2^-8 + 2^-10    above the tie -> 0x3f81
  //   -(1 + 2^-8)         tie -> 0xbf80 (-1)
  const Bits residual = exact_bf16s({1, 1, 2, 1, -1, 1, 3, 1, 1.25f, -1});
  const Floats pre = {1.0f, 1.0f / 256.0f};
  const Result r = run_collapse(c, 1, PreSource::kCarried, residual, &pre, nullptr);
  expect_bits_eq(r.layer_input, {0x3f80, 0x3f82, 0x4000, 0x3f81, 0xbf80}, "layer_input");
}

TEST(KnownAnswer, RmsNormFoldByHand) {
  Config c;
  c.n = 1;
  c.H = 2;
  c.norm_eps = 1e-6f;     // unused by collapse; differs from rmsnorm_eps
  c.rmsnorm_eps = 3.5f;
  // u = bf16(1 * [3, 4]) = [3, 4]; mean(u^2) = 12.5; 1/sqrt(12.5 + 3.5) = 1/4;
  // [3/4, 1] * w with w = [2, -0.5] -> [1.5, -0.5]
  const Bits residual = exact_bf16s({3.0f, 4.0f});
  const Floats pre = {1.0f};
  const Bits w = exact_bf16s({2.0f, -0.5f});
  const Result r = run_collapse(c, 1, PreSource::kCarried, residual, &pre, &w);
  expect_bits_eq(r.layer_input, exact_bf16s({1.5f, -0.5f}), "layer_input");
  // Identity collapse with the same fold: stream 0 = [3, 4] -> the same answer.
  const Result id = run_collapse(c, 1, PreSource::kIdentity, residual, nullptr, &w);
  expect_bits_eq(id.layer_input, exact_bf16s({1.5f, -0.5f}), "identity layer_input");
}

TEST(KnownAnswer, PostByHand) {
  Config c;
  c.n = 2;
  c.H = 2;
  // out = [1, -2]; streams s0 = [2, 0.5], s1 = [-1, 4]; post = [0.5, 1.5];
  // comb[j][k] = [[0.25, 0.5], [0.75, 0.5]] (j = source, k = destination)
  //   new[0] = 0.5 * out + 0.25 * s0 + 0.75 * s1 = [0.5, -1] + [0.5, 0.125] + [-0.75, 3] = [0.25, 2.125]
  //   new[1] = 1.5 * out + 0.5 * s0 + 0.5 * s1   = [1.5, -3] + [1, 0.25] + [-0.5, 2]    = [2, -0.75]
  const Bits out = exact_bf16s({1.0f, -2.0f});
  const Bits residual = exact_bf16s({2.0f, 0.5f, -1.0f, 4.0f});
  const Floats post = {0.5f, 1.5f};
  const Floats comb = {0.25f, 0.5f, 0.75f, 0.5f};
  const Result r = run_post(c, 1, out, residual, false, post, comb);
  expect_bits_eq(r.residual_out, exact_bf16s({0.25f, 2.125f, 2.0f, -0.75f}), "residual_out");
}

TEST(KnownAnswer, PostBroadcastByHand) {
  Config c;
  c.n = 2;
  c.H = 2;
  // Broadcast residual e = [2, 0.5] (both streams); comb = [[0.25, 0.5], [0.75, 1]]:
  // column sums 1 and 1.5.  new[0] = 0.5 * [1, -2] + 1 * e = [2.5, -0.5];
  //                         new[1] = 1.5 * [1, -2] + 1.5 * e = [4.5, -2.25]
  const Bits out = exact_bf16s({1.0f, -2.0f});
  const Bits embedding = exact_bf16s({2.0f, 0.5f});
  const Floats post = {0.5f, 1.5f};
  const Floats comb = {0.25f, 0.5f, 0.75f, 1.0f};
  const Result r = run_post(c, 1, out, embedding, true, post, comb);
  expect_bits_eq(r.residual_out, exact_bf16s({2.5f, -0.5f, 4.5f, -2.25f}), "residual_out");
}

TEST(KnownAnswer, PostPreN1ByHand) {
  Config c;
  c.n = 1;
  c.H = 2;
  c.norm_eps = 3.5f;
  c.pre_eps = 0.25f;
  c.sinkhorn_eps = 0.5f;
  c.sinkhorn_iters = 2;
  c.post_scale = 3.0f;
  c.rmsnorm_eps = 1.96875f;
  // post: new = 0.5 * [2, 0] + 1 * [2, 4] = [3, 4]
  const Bits out = exact_bf16s({2.0f, 0.0f});
  const Bits residual = exact_bf16s({2.0f, 4.0f});
  const Floats post = {0.5f}, comb = {1.0f};
  // mixes of [3, 4] exactly as in MixesN1H2ByHand: pre = 0.5 + 0.25, post = 3 / (1 + e^0.5), comb = 6/11
  const Block b = make_block(c, {1, 0, 0, 1, 1, 1}, {2.0f, -1.0f, 5.0f}, {-1.5f, 0.5f, 0.3f});
  const double post_out = 3.0 / (1.0 + std::exp(0.5));
  {  // normal: u = 0.75 * [3, 4] = [2.25, 3]
    const Result r = run_post_pre(c, 1, PreSource::kComputed, out, residual, false, post, comb, b, nullptr, nullptr);
    expect_bits_eq(r.residual_out, exact_bf16s({3.0f, 4.0f}), "residual_out");
    expect_bits_eq(r.layer_input, exact_bf16s({2.25f, 3.0f}), "layer_input");
    expect_near_rel(r.post_mix, {post_out}, 1e-7, "post_mix_out");
    expect_near_rel(r.comb_mix, {6.0 / 11.0}, 1e-7, "comb_mix_out");
    expect_near_rel(r.pre_mix, {0.75}, 1e-7, "pre_mix_out");
  }
  {  // normal + fold: mean(u^2) = (5.0625 + 9) / 2 = 7.03125; + 1.96875 = 9 -> 1/3;
     // [0.75, 1] * w with w = [2, -4] -> [1.5, -4]
    const Bits w = exact_bf16s({2.0f, -4.0f});
    const Result r = run_post_pre(c, 1, PreSource::kComputed, out, residual, false, post, comb, b, nullptr, &w);
    expect_bits_eq(r.layer_input, exact_bf16s({1.5f, -4.0f}), "folded layer_input");
  }
  {  // shifted with pre_mix_in = [2]: u = [6, 8]; pre_mix_out is the fresh 0.75
    const Floats pre_in = {2.0f};
    const Result r = run_post_pre(c, 1, PreSource::kCarried, out, residual, false, post, comb, b, &pre_in, nullptr);
    expect_bits_eq(r.layer_input, exact_bf16s({6.0f, 8.0f}), "shifted layer_input");
    expect_near_rel(r.pre_mix, {0.75}, 1e-7, "pre_mix_out");
    expect_near_rel(r.post_mix, {post_out}, 1e-7, "post_mix_out");
  }
}

TEST(KnownAnswer, PreBroadcastN2ByHand) {
  Config c;
  c.n = 2;
  c.H = 1;
  c.norm_eps = 0.0f;
  c.pre_eps = 0.0f;
  c.sinkhorn_eps = 0.0f;
  c.sinkhorn_iters = 1;
  c.post_scale = 1.0f;
  // Embedding [3]: streams [3, 3], sum(x^2)/K = 9, r = 1/3; a row [a, b] gives m = a + b.
  // pre rows [1, -1] (m = 0) and [0.5, 0] (m = 0.5, * alpha 2 = 1, + base -1 = 0): pre = [1/2, 1/2]
  // post rows [0, 0] (m = 0) with bases 0 and ln3: post = [1/2, 3/4]
  // comb rows all [0, 0]: logits 0, softmax 1/2 everywhere, eps 0, one column pass: all 1/2
  const float ln3 = std::log(3.0f);
  const Block b = make_block(c, {1, -1, 0.5f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {2.0f, 1.0f, 1.0f},
                             {0.0f, -1.0f, 0.0f, ln3, 0.0f, 0.0f, 0.0f, 0.0f});
  const Result r = run_pre_broadcast(c, 1, PreSource::kComputed, exact_bf16s({3.0f}), b, nullptr, nullptr);
  expect_near_rel(r.pre_mix, {0.5, 0.5}, 1e-6, "pre_mix_out");
  expect_near_rel(r.post_mix, {0.5, 0.75}, 1e-6, "post_mix");
  expect_near_rel(r.comb_mix, {0.5, 0.5, 0.5, 0.5}, 1e-6, "comb_mix");
  // u = 1/2 * 3 + 1/2 * 3 = 3; residual_out = [3, 3]
  expect_bits_eq(r.layer_input, exact_bf16s({3.0f}), "layer_input");
  expect_bits_eq(r.residual_out, exact_bf16s({3.0f, 3.0f}), "residual_out");
}

TEST(KnownAnswer, HeadLearnedByHand) {
  Config c;
  c.n = 2;
  c.H = 1;
  c.norm_eps = 1.5f;
  c.pre_eps = 0.125f;
  c.post_scale = 100.0f;  // the head has no post; a post_scale leaking in would show
  // x = [2, 1]: sum(x^2)/K = 2.5, r = 1/sqrt(2.5 + 1.5) = 1/2.
  // fn_head rows [1, 0] -> m = 1 and [0, 2] -> m = 1; scale_head 3; base [-3, ln3 - 3]
  // -> logits [0, ln3] -> sigmoid [1/2, 3/4] + 1/8 = [0.625, 0.875]; no Sinkhorn
  // output = 0.625 * 2 + 0.875 * 1 = 2.125
  const float ln3 = std::log(3.0f);
  const Block head = make_head_block(c, {1, 0, 0, 2}, {3.0f}, {-3.0f, ln3 - 3.0f});
  const Result r = run_head(c, 1, HeadKind::kLearned, exact_bf16s({2.0f, 1.0f}), &head, nullptr, nullptr);
  expect_bits_eq(r.layer_input, exact_bf16s({2.125f}), "output");
}

TEST(KnownAnswer, HeadCarriedAndMeanByHand) {
  Config c;
  c.n = 2;
  c.H = 2;
  {  // carried pre [0.5, 0.25] on s0 = [1, -2], s1 = [4, 0.5]: [0.5 + 1, -1 + 0.125]
    const Floats pre = {0.5f, 0.25f};
    const Result r = run_head(c, 1, HeadKind::kCarried, exact_bf16s({1, -2, 4, 0.5f}), nullptr, &pre, nullptr);
    expect_bits_eq(r.layer_input, exact_bf16s({1.5f, -0.875f}), "carried output");
  }
  c.n = 4;
  {  // mean of [1, 2, 3, 5] = 2.75 and of [0.5, 0.5, -1, -1] = -0.25
    const Result r = run_head(c, 1, HeadKind::kMean, exact_bf16s({1, 0.5f, 2, 0.5f, 3, -1, 5, -1}), nullptr,
                              nullptr, nullptr);
    expect_bits_eq(r.layer_input, exact_bf16s({2.75f, -0.25f}), "mean output n=4");
  }
  c.n = 3;
  {  // mean of [1, 1, 2] = 4/3 = 1.0101010|1..b -> rounds up to 0x3fab (1.3359375);
     // mean of [1, 2, 4] = 7/3 = 2 * 1.0010101|0..b -> rounds down to 0x4015 (2.328125)
    const Result r = run_head(c, 1, HeadKind::kMean, exact_bf16s({1, 1, 1, 2, 2, 4}), nullptr, nullptr, nullptr);
    expect_bits_eq(r.layer_input, {0x3fab, 0x4015}, "mean output n=3");
  }
}

// =============================================================================================
// KnownAnswer: against the formula on every tiny shape (n = 1, 2, 4; H = 1..3; T = 3)

TEST(KnownAnswer, MixesFormula) {
  for (int n : kTinyN) {
    for (int64_t H : kTinyH) {
      SCOPED_TRACE(shape_label(n, H));
      const Config c = test_config(n, H);
      const Inputs in = random_inputs(c, 3, 100 + static_cast<uint64_t>(n * 10 + H));
      const Result r = run_mixes(c, 3, in.residual, in.block);
      const Expected e = formula_pre(c, 3, PreSource::kComputed, in.residual, false, in.block, nullptr, nullptr);
      expect_matches(r, e, false, true, false);
    }
  }
}

// The oracle's mixes (mixes.cpu_ref) are formula_mixes' values (each dot a plain row sum, in i
// order) rounded to fp32, bit for bit, not only within kMixRel. n = 1, 2, 3, 4, 8: 3, 8, 15, 24
// and 80 rows, whole groups of the four rows the oracle sums side by side and the rows after the
// last group.
TEST(KnownAnswer, MixesDotsAreThePlainRowSums) {
  auto bits = [](float f) {
    uint32_t w;
    std::memcpy(&w, &f, sizeof w);
    return w;
  };
  for (int n : {1, 2, 3, 4, 8}) {
    for (int64_t H : {int64_t{7}, int64_t{999}}) {
      SCOPED_TRACE(shape_label(n, H));
      const Config c = test_config(n, H);
      const int64_t T = 3;
      const Inputs in = random_inputs(c, T, 900 + static_cast<uint64_t>(n * 10 + H));
      Result r = poisoned_result(c, T);
      mhc::MixesArgs a;
      a.config = c;
      a.residual = bf16_view(in.residual, {T, c.n, c.H});
      a.weights = &in.block.prepared;
      a.pre_mix = f32_view(r.pre_mix, {T, c.n});
      a.post_mix = f32_view(r.post_mix, {T, c.n});
      a.comb_mix = f32_view(r.comb_mix, {T, c.n, c.n});
      a.exec.variant = "mixes.cpu_ref";
      mhc::mixes(a);
      const Expected e = formula_pre(c, T, PreSource::kComputed, in.residual, false, in.block, nullptr, nullptr);
      for (size_t i = 0; i < r.pre_mix.size(); ++i) {
        EXPECT_EQ(bits(r.pre_mix[i]), bits(static_cast<float>(e.pre_mix[i]))) << "pre_mix[" << i << "]";
        EXPECT_EQ(bits(r.post_mix[i]), bits(static_cast<float>(e.post_mix[i]))) << "post_mix[" << i << "]";
      }
      for (size_t i = 0; i < r.comb_mix.size(); ++i) {
        EXPECT_EQ(bits(r.comb_mix[i]), bits(static_cast<float>(e.comb_mix[i]))) << "comb_mix[" << i << "]";
      }
    }
  }
}

TEST(KnownAnswer, CollapseFormula) {
  for (int n : kTinyN) {
    for (int64_t H : kTinyH) {
      const Config c = test_config(n, H);
      const Inputs in = random_inputs(c, 3, 200 + static_cast<uint64_t>(n * 10 + H));
      for (bool fold : {false, true}) {
        SCOPED_TRACE(shape_label(n, H) + (fold ? " fold" : ""));
        const Bits* norm = fold ? &in.norm : nullptr;
        const Expected carried = formula_head(c, 3, HeadKind::kCarried, in.residual, in.head, in.pre_mix_in, norm);
        expect_bits_eq(run_collapse(c, 3, PreSource::kCarried, in.residual, &in.pre_mix_in, norm).layer_input,
                       carried.layer_input, "carried layer_input");
        const Expected identity =
            formula_pre(c, 3, PreSource::kIdentity, in.residual, false, in.block, nullptr, norm);
        expect_bits_eq(run_collapse(c, 3, PreSource::kIdentity, in.residual, nullptr, norm).layer_input,
                       identity.layer_input, "identity layer_input");
      }
    }
  }
}

TEST(KnownAnswer, PreFormula) {
  for (int n : kTinyN) {
    for (int64_t H : kTinyH) {
      const Config c = test_config(n, H);
      const Inputs in = random_inputs(c, 3, 300 + static_cast<uint64_t>(n * 10 + H));
      for (PreSource src : {PreSource::kComputed, PreSource::kCarried, PreSource::kIdentity}) {
        for (bool fold : {false, true}) {
          SCOPED_TRACE(shape_label(n, H) + " " + mhc::to_string(src) + (fold ? " fold" : ""));
          const Bits* norm = fold ? &in.norm : nullptr;
          const Result r = run_pre(c, 3, src, in.residual, in.block, &in.pre_mix_in, norm);
          const Expected e = formula_pre(c, 3, src, in.residual, false, in.block, &in.pre_mix_in, norm);
          expect_matches(r, e, false, true, true);
        }
      }
    }
  }
}

TEST(KnownAnswer, PreBroadcastFormula) {
  for (int n : kTinyN) {
    for (int64_t H : kTinyH) {
      const Config c = test_config(n, H);
      const Inputs in = random_inputs(c, 3, 400 + static_cast<uint64_t>(n * 10 + H));
      for (PreSource src : {PreSource::kComputed, PreSource::kCarried, PreSource::kIdentity}) {
        for (bool fold : {false, true}) {
          SCOPED_TRACE(shape_label(n, H) + " " + mhc::to_string(src) + (fold ? " fold" : ""));
          const Bits* norm = fold ? &in.norm : nullptr;
          const Result r = run_pre_broadcast(c, 3, src, in.embedding, in.block, &in.pre_mix_in, norm);
          const Expected e = formula_pre(c, 3, src, in.embedding, true, in.block, &in.pre_mix_in, norm);
          expect_matches(r, e, true, true, true);
        }
      }
    }
  }
}

TEST(KnownAnswer, PostFormula) {
  for (int n : kTinyN) {
    for (int64_t H : kTinyH) {
      const Config c = test_config(n, H);
      const Inputs in = random_inputs(c, 3, 500 + static_cast<uint64_t>(n * 10 + H));
      for (bool broadcast : {false, true}) {
        SCOPED_TRACE(shape_label(n, H) + (broadcast ? " broadcast" : ""));
        const Bits& res = broadcast ? in.embedding : in.residual;
        const Result r = run_post(c, 3, in.layer_output, res, broadcast, in.post_mix, in.comb_mix);
        Bits want;
        for (int64_t t = 0; t < 3; ++t) {
          append(want, formula_post(c, t, in.layer_output, streams_of(res, t, c, broadcast), in.post_mix, in.comb_mix));
        }
        expect_bits_eq(r.residual_out, want, "residual_out");
      }
    }
  }
}

TEST(KnownAnswer, PostPreFormula) {
  for (int n : kTinyN) {
    for (int64_t H : kTinyH) {
      const Config c = test_config(n, H);
      const Inputs in = random_inputs(c, 3, 600 + static_cast<uint64_t>(n * 10 + H));
      for (PreSource src : {PreSource::kComputed, PreSource::kCarried}) {
        for (bool fold : {false, true}) {
          for (bool broadcast : {false, true}) {
            SCOPED_TRACE(shape_label(n, H) + " " + mhc::to_string(src) + (fold ? " fold" : "") +
                         (broadcast ? " broadcast" : ""));
            const Bits* norm = fold ? &in.norm : nullptr;
            const Floats* pre_in = src == PreSource::kCarried ? &in.pre_mix_in : nullptr;
            const Bits& res = broadcast ? in.embedding : in.residual;
            const Result r = run_post_pre(c, 3, src, in.layer_output, res, broadcast, in.post_mix, in.comb_mix,
                                          in.block, pre_in, norm);
            const Expected e = formula_post_pre(c, 3, src, in.layer_output, res, broadcast, in.post_mix,
                                                in.comb_mix, in.block, pre_in, norm);
            expect_matches(r, e, true, true, true);
          }
        }
      }
    }
  }
}

TEST(KnownAnswer, HeadFormula) {
  for (int n : kTinyN) {
    for (int64_t H : kTinyH) {
      const Config c = test_config(n, H);
      const Inputs in = random_inputs(c, 3, 700 + static_cast<uint64_t>(n * 10 + H));
      for (HeadKind kind : {HeadKind::kLearned, HeadKind::kCarried, HeadKind::kMean}) {
        for (bool fold : {false, true}) {
          SCOPED_TRACE(shape_label(n, H) + " " + mhc::to_string(kind) + (fold ? " fold" : ""));
          const Bits* norm = fold ? &in.norm : nullptr;
          const Result r = run_head(c, 3, kind, in.residual, kind == HeadKind::kLearned ? &in.head : nullptr,
                                    kind == HeadKind::kCarried ? &in.pre_mix_in : nullptr, norm);
          expect_bits_eq(r.layer_input, formula_head(c, 3, kind, in.residual, in.head, in.pre_mix_in, norm).layer_input,
                         "output");
        }
      }
    }
  }
}

// The shipped shape: n = 4, H = 4096, T = 2, V4 scalars.
TEST(KnownAnswer, PostPreAndHeadAtH4096) {
  const mhc::ModelPreset& preset = mhc::model_preset("deepseek-v4-flash");
  const Config c = preset.config;
  ASSERT_EQ(c.H, 4096);
  const Inputs in = random_inputs(c, 2, 4096);
  for (PreSource src : {PreSource::kComputed, PreSource::kCarried}) {
    SCOPED_TRACE(mhc::to_string(src));
    const Floats* pre_in = src == PreSource::kCarried ? &in.pre_mix_in : nullptr;
    const Result r = run_post_pre(c, 2, src, in.layer_output, in.residual, false, in.post_mix, in.comb_mix,
                                  in.block, pre_in, &in.norm);
    const Expected e = formula_post_pre(c, 2, src, in.layer_output, in.residual, false, in.post_mix, in.comb_mix,
                                        in.block, pre_in, &in.norm);
    expect_matches(r, e, true, true, true);
  }
  const Result h = run_head(c, 2, HeadKind::kLearned, in.residual, &in.head, nullptr, &in.norm);
  expect_bits_eq(h.layer_input, formula_head(c, 2, HeadKind::kLearned, in.residual, in.head, in.pre_mix_in, &in.norm).layer_input,
                 "head output");
}

// =============================================================================================
// Properties

TEST(Properties, CombColumnSumsNearOne) {
  const int64_t T = 64;
  for (int n = 1; n <= mhc::kMaxStreams; ++n) {
    for (double alpha : {0.3, 3.0, 15.0}) {  // alpha 15: logits reach about +-30 and beyond
      SCOPED_TRACE(shape_label(n, 4) + " alpha=" + std::to_string(alpha));
      Config c;  // shipped scalars: sinkhorn_eps 1e-6, 20 iterations
      c.n = n;
      c.H = 4;
      Rng rng(static_cast<uint64_t>(n * 1000) + static_cast<uint64_t>(alpha * 10));
      const Block b = random_block(c, rng, alpha, false);
      const Bits residual = mhc::tools::random_bf16(static_cast<size_t>(T * c.K()), rng);
      const Result r = run_mixes(c, T, residual, b);
      double peak = 0.0;
      for (int64_t t = 0; t < T; ++t) {
        for (int k = 0; k < n; ++k) {
          double sum = 0.0;
          for (int j = 0; j < n; ++j) {
            const float v = r.comb_mix[static_cast<size_t>(t * n * n + j * n + k)];
            ASSERT_TRUE(std::isfinite(v) && v >= 0.0f) << "t=" << t << " comb[" << j << "," << k << "] = " << v;
            sum += v;
            peak = std::max(peak, static_cast<double>(v));
          }
          ASSERT_NEAR(sum, 1.0, 1e-5) << "t=" << t << " column " << k;
        }
      }
      if (alpha > 10.0 && n > 1) {
        EXPECT_GT(peak, 0.99) << "the logits were meant to be peaked";
      }
    }
  }
}

TEST(Properties, PreAndPostRanges) {
  const int64_t T = 128;
  for (int n : {1, 2, 4, 8}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    Config c;
    c.n = n;
    c.H = 8;
    c.post_scale = 2.0f;
    Rng rng(static_cast<uint64_t>(77 + n));
    const Bits residual = mhc::tools::random_bf16(static_cast<size_t>(T * c.K()), rng);
    {  // moderate logits (|logit| well below 17, where 2 * sigmoid would round to 2 in fp32)
      Block b = random_block(c, rng, 1.0, false);
      const Result r = run_mixes(c, T, residual, b);
      for (size_t i = 0; i < r.pre_mix.size(); ++i) {
        EXPECT_GT(r.pre_mix[i], 0.0f) << i;
        EXPECT_LE(r.pre_mix[i], 1.0f + c.pre_eps) << i;
        EXPECT_GT(r.post_mix[i], 0.0f) << i;
        EXPECT_LT(r.post_mix[i], c.post_scale) << i;
      }
    }
    {  // peaked logits: pre stays >= pre_eps > 0, post stays within [0, post_scale]
      Block b = random_block(c, rng, 30.0, false);
      const Result r = run_mixes(c, T, residual, b);
      for (size_t i = 0; i < r.pre_mix.size(); ++i) {
        EXPECT_GE(r.pre_mix[i], c.pre_eps) << i;
        EXPECT_LE(r.pre_mix[i], 1.0f + c.pre_eps) << i;
        EXPECT_GE(r.post_mix[i], 0.0f) << i;
        EXPECT_LE(r.post_mix[i], c.post_scale) << i;
      }
    }
  }
}

// All scalar fields distinct and large enough to matter.
Config distinct_config() {
  Config c;
  c.n = 4;
  c.H = 16;
  c.norm_eps = 0.5f;
  c.pre_eps = 0.25f;
  c.sinkhorn_eps = 0.125f;
  c.sinkhorn_iters = 3;
  c.post_scale = 1.5f;
  c.rmsnorm_eps = 0.0625f;
  return c;
}

// Every output of post_pre (normal mode, folded RMSNorm, pre_mix_out) as bytes.
std::vector<uint8_t> post_pre_bytes(const Config& c, const Inputs& in) {
  const Result r = run_post_pre(c, in.T, PreSource::kComputed, in.layer_output, in.residual, false, in.post_mix,
                                in.comb_mix, in.block, nullptr, &in.norm);
  std::vector<uint8_t> bytes;
  auto add = [&bytes](const void* p, size_t count) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + count);
  };
  add(r.residual_out.data(), r.residual_out.size() * 2);
  add(r.layer_input.data(), r.layer_input.size() * 2);
  add(r.pre_mix.data(), r.pre_mix.size() * 4);
  add(r.post_mix.data(), r.post_mix.size() * 4);
  add(r.comb_mix.data(), r.comb_mix.size() * 4);
  return bytes;
}

TEST(Properties, ConfigFieldsEachReachTheirOwnPlace) {
  const Config c = distinct_config();
  const Inputs in = random_inputs(c, 4, 2024);
  // The formula reads each field by name: a swap inside the library shows as a mismatch here.
  const Result r = run_post_pre(c, 4, PreSource::kComputed, in.layer_output, in.residual, false, in.post_mix,
                                in.comb_mix, in.block, nullptr, &in.norm);
  const Expected e = formula_post_pre(c, 4, PreSource::kComputed, in.layer_output, in.residual, false, in.post_mix,
                                      in.comb_mix, in.block, nullptr, &in.norm);
  expect_matches(r, e, true, true, true);

  // Every field changes the outputs, and swapping any two float fields changes them too.
  const std::vector<uint8_t> base = post_pre_bytes(c, in);
  float Config::*fields[] = {&Config::norm_eps, &Config::pre_eps, &Config::sinkhorn_eps, &Config::post_scale,
                             &Config::rmsnorm_eps};
  const char* names[] = {"norm_eps", "pre_eps", "sinkhorn_eps", "post_scale", "rmsnorm_eps"};
  for (int i = 0; i < 5; ++i) {
    Config changed = c;
    changed.*fields[i] *= 1.5f;
    EXPECT_NE(post_pre_bytes(changed, in), base) << names[i] << " has no effect";
    for (int j = i + 1; j < 5; ++j) {
      Config swapped = c;
      std::swap(swapped.*fields[i], swapped.*fields[j]);
      EXPECT_NE(post_pre_bytes(swapped, in), base) << "swapping " << names[i] << " and " << names[j]
                                                   << " leaves the outputs unchanged";
    }
  }
  Config more_iters = c;
  more_iters.sinkhorn_iters = 4;
  EXPECT_NE(post_pre_bytes(more_iters, in), base) << "sinkhorn_iters has no effect";
}

// =============================================================================================
// Fused: two different operator paths that must agree

TEST(Fused, PostPreEqualsPostThenPre) {
  for (int n : {1, 2, 4}) {
    for (int64_t H : {int64_t{3}, int64_t{64}}) {
      const Config c = test_config(n, H);
      const int64_t T = 5;
      const Inputs in = random_inputs(c, T, 800 + static_cast<uint64_t>(n * 100 + H));
      for (PreSource src : {PreSource::kComputed, PreSource::kCarried}) {
        for (bool fold : {false, true}) {
          for (bool broadcast : {false, true}) {
            SCOPED_TRACE(shape_label(n, H) + " " + mhc::to_string(src) + (fold ? " fold" : "") +
                         (broadcast ? " broadcast" : ""));
            const Bits* norm = fold ? &in.norm : nullptr;
            const Floats* pre_in = src == PreSource::kCarried ? &in.pre_mix_in : nullptr;
            const Bits& res = broadcast ? in.embedding : in.residual;
            const Result fused = run_post_pre(c, T, src, in.layer_output, res, broadcast, in.post_mix, in.comb_mix,
                                              in.block, pre_in, norm);
            const Result p = run_post(c, T, in.layer_output, res, broadcast, in.post_mix, in.comb_mix);
            const Result q = run_pre(c, T, src, p.residual_out, in.block, pre_in, norm);
            expect_bits_eq(fused.residual_out, p.residual_out, "residual_out");
            expect_bits_eq(fused.layer_input, q.layer_input, "layer_input");
            expect_same_floats(fused.post_mix, q.post_mix, "post_mix_out");
            expect_same_floats(fused.comb_mix, q.comb_mix, "comb_mix_out");
            expect_same_floats(fused.pre_mix, q.pre_mix, "pre_mix_out");
          }
        }
      }
    }
  }
}

TEST(Fused, PostPreEqualsPostThenPreAtH4096) {
  Config c = mhc::model_preset("deepseek-v4.1-flash").config;
  c.H = 4096;
  const int64_t T = 3;
  const Inputs in = random_inputs(c, T, 4097);
  for (PreSource src : {PreSource::kComputed, PreSource::kCarried}) {
    SCOPED_TRACE(mhc::to_string(src));
    const Floats* pre_in = src == PreSource::kCarried ? &in.pre_mix_in : nullptr;
    const Result fused = run_post_pre(c, T, src, in.layer_output, in.residual, false, in.post_mix, in.comb_mix,
                                      in.block, pre_in, &in.norm);
    const Result p = run_post(c, T, in.layer_output, in.residual, false, in.post_mix, in.comb_mix);
    const Result q = run_pre(c, T, src, p.residual_out, in.block, pre_in, &in.norm);
    expect_bits_eq(fused.residual_out, p.residual_out, "residual_out");
    expect_bits_eq(fused.layer_input, q.layer_input, "layer_input");
    expect_same_floats(fused.post_mix, q.post_mix, "post_mix_out");
    expect_same_floats(fused.comb_mix, q.comb_mix, "comb_mix_out");
    expect_same_floats(fused.pre_mix, q.pre_mix, "pre_mix_out");
  }
}

TEST(Fused, PreBroadcastEqualsPreOnCopies) {
  for (int n : {1, 2, 4}) {
    for (int64_t H : {int64_t{2}, int64_t{64}}) {
      const Config c = test_config(n, H);
      const int64_t T = 4;
      const Inputs in = random_inputs(c, T, 900 + static_cast<uint64_t>(n * 100 + H));
      Bits copies;  // [T,n,H]: n copies of each embedding row
      for (int64_t t = 0; t < T; ++t) {
        for (int j = 0; j < n; ++j) {
          copies.insert(copies.end(), in.embedding.begin() + t * H, in.embedding.begin() + (t + 1) * H);
        }
      }
      for (PreSource src : {PreSource::kComputed, PreSource::kCarried, PreSource::kIdentity}) {
        for (bool fold : {false, true}) {
          SCOPED_TRACE(shape_label(n, H) + " " + mhc::to_string(src) + (fold ? " fold" : ""));
          const Bits* norm = fold ? &in.norm : nullptr;
          const Result b = run_pre_broadcast(c, T, src, in.embedding, in.block, &in.pre_mix_in, norm);
          const Result p = run_pre(c, T, src, copies, in.block, &in.pre_mix_in, norm);
          expect_bits_eq(b.residual_out, copies, "residual_out");
          // Mixes through fn_b may round differently from the full fn: the spec's 1e-5.
          expect_near_rel(b.pre_mix, Doubles(p.pre_mix.begin(), p.pre_mix.end()), 1e-5, "pre_mix_out");
          expect_near_rel(b.post_mix, Doubles(p.post_mix.begin(), p.post_mix.end()), 1e-5, "post_mix");
          expect_near_rel(b.comb_mix, Doubles(p.comb_mix.begin(), p.comb_mix.end()), 1e-5, "comb_mix");
          expect_bits_eq(b.layer_input, p.layer_input, "layer_input");
        }
      }
    }
  }
}

// =============================================================================================
// Identity: stream 0 bit for bit, whatever the bits are

// Stream 0 / embedding rows full of awkward patterns: NaNs with payloads (quiet, signalling,
// negative), infinities, signed zeros, subnormals, the largest finite value.
Bits odd_patterns() {
  return {0x7f81, 0xffc5, 0x7fff, 0xff81, 0x7f80, 0xff80, 0x8000, 0x0000, 0x0001, 0x807f, 0x7f7f, 0x3f80};
}

TEST(Identity, CollapseAndPreReturnStreamZeroBits) {
  const Bits odd = odd_patterns();
  Config c = test_config(4, static_cast<int64_t>(odd.size()));
  const int64_t T = 2;
  Rng rng(5);
  Bits residual = mhc::tools::random_bf16(static_cast<size_t>(T * c.K()), rng);
  Bits want;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < c.H; ++h) {  // token 0: the odd patterns; token 1: reversed
      const uint16_t v = odd[static_cast<size_t>(t == 0 ? h : c.H - 1 - h)];
      residual[static_cast<size_t>(t * c.K() + h)] = v;
      want.push_back(v);
    }
  }
  const Block b = random_block(c, rng, 1.0, false);
  expect_bits_eq(run_collapse(c, T, PreSource::kIdentity, residual, nullptr, nullptr).layer_input, want,
                 "collapse layer_input");
  expect_bits_eq(run_pre(c, T, PreSource::kIdentity, residual, b, nullptr, nullptr).layer_input, want,
                 "pre layer_input");
}

TEST(Identity, PreBroadcastReturnsEmbeddingBits) {
  const Bits odd = odd_patterns();
  const Config c = test_config(4, static_cast<int64_t>(odd.size()));
  Rng rng(6);
  const Block b = random_block(c, rng, 1.0, false);
  Bits embedding = odd;
  Bits tail = mhc::tools::random_bf16(odd.size(), rng);  // token 1: ordinary values
  embedding.insert(embedding.end(), tail.begin(), tail.end());
  const Result r = run_pre_broadcast(c, 2, PreSource::kIdentity, embedding, b, nullptr, nullptr);
  expect_bits_eq(r.layer_input, embedding, "layer_input");
  Bits copies;
  for (int64_t t = 0; t < 2; ++t) {
    for (int j = 0; j < c.n; ++j) {
      copies.insert(copies.end(), embedding.begin() + t * c.H, embedding.begin() + (t + 1) * c.H);
    }
  }
  expect_bits_eq(r.residual_out, copies, "residual_out (n copies of the embedding)");
}

// =============================================================================================
// EmptyBatch: T = 0 is a no-op for every operator

TEST(EmptyBatch, EveryOperatorIsANoOp) {
  const Config c = test_config(4, 8);
  const Inputs in = random_inputs(c, 1, 11);  // one token's worth of memory behind each view
  for (bool null_data : {false, true}) {
    SCOPED_TRACE(null_data ? "null data pointers" : "poisoned buffers");
    Result out = poisoned_result(c, 1);
    auto bf = [&](const Bits& v, std::initializer_list<int64_t> shape) {
      TensorView view = bf16_view(v, shape);
      if (null_data) view.data = nullptr;
      return view;
    };
    auto f32 = [&](const Floats& v, std::initializer_list<int64_t> shape) {
      TensorView view = f32_view(v, shape);
      if (null_data) view.data = nullptr;
      return view;
    };
    const int64_t n = c.n, H = c.H;
    {
      mhc::MixesArgs a;
      a.config = c;
      a.residual = bf(in.residual, {0, n, H});
      a.weights = &in.block.prepared;
      a.pre_mix = f32(out.pre_mix, {0, n});
      a.post_mix = f32(out.post_mix, {0, n});
      a.comb_mix = f32(out.comb_mix, {0, n, n});
      EXPECT_NO_THROW(mhc::mixes(a));
    }
    {
      mhc::CollapseArgs a;
      a.config = c;
      a.residual = bf(in.residual, {0, n, H});
      a.pre_mix = f32(in.pre_mix_in, {0, n});
      a.rmsnorm_weight = bf16_view(in.norm, {H});
      a.layer_input = bf(out.layer_input, {0, H});
      EXPECT_NO_THROW(mhc::collapse(a));
    }
    {
      mhc::PreArgs a;
      a.config = c;
      a.pre_source = PreSource::kCarried;
      a.residual = bf(in.residual, {0, n, H});
      a.weights = &in.block.prepared;
      a.pre_mix_in = f32(in.pre_mix_in, {0, n});
      a.layer_input = bf(out.layer_input, {0, H});
      a.post_mix = f32(out.post_mix, {0, n});
      a.comb_mix = f32(out.comb_mix, {0, n, n});
      a.pre_mix_out = f32(out.pre_mix, {0, n});
      EXPECT_NO_THROW(mhc::pre(a));
    }
    {
      mhc::PreBroadcastArgs a;
      a.config = c;
      a.embedding = bf(in.embedding, {0, H});
      a.weights = &in.block.prepared;
      a.layer_input = bf(out.layer_input, {0, H});
      a.post_mix = f32(out.post_mix, {0, n});
      a.comb_mix = f32(out.comb_mix, {0, n, n});
      a.pre_mix_out = f32(out.pre_mix, {0, n});
      a.residual_out = bf(out.residual_out, {0, n, H});
      EXPECT_NO_THROW(mhc::pre_broadcast(a));
    }
    {
      mhc::PostArgs a;
      a.config = c;
      a.layer_output = bf(in.layer_output, {0, H});
      a.residual = bf(in.residual, {0, n, H});
      a.post_mix = f32(in.post_mix, {0, n});
      a.comb_mix = f32(in.comb_mix, {0, n, n});
      a.residual_out = bf(out.residual_out, {0, n, H});
      EXPECT_NO_THROW(mhc::post(a));
    }
    for (PreSource src : {PreSource::kComputed, PreSource::kCarried}) {
      mhc::PostPreArgs a;
      a.config = c;
      a.pre_source = src;
      a.layer_output = bf(in.layer_output, {0, H});
      a.residual = bf(in.residual, {0, n, H});
      a.post_mix = f32(in.post_mix, {0, n});
      a.comb_mix = f32(in.comb_mix, {0, n, n});
      a.weights = &in.block.prepared;
      if (src == PreSource::kCarried) a.pre_mix_in = f32(in.pre_mix_in, {0, n});
      a.rmsnorm_weight = bf16_view(in.norm, {H});
      a.residual_out = bf(out.residual_out, {0, n, H});
      a.layer_input = bf(out.layer_input, {0, H});
      a.post_mix_out = f32(out.post_mix, {0, n});
      a.comb_mix_out = f32(out.comb_mix, {0, n, n});
      a.pre_mix_out = f32(out.pre_mix, {0, n});
      EXPECT_NO_THROW(mhc::post_pre(a));
    }
    for (HeadKind kind : {HeadKind::kLearned, HeadKind::kCarried, HeadKind::kMean}) {
      mhc::HeadArgs a;
      a.config = c;
      a.kind = kind;
      a.residual = bf(in.residual, {0, n, H});
      if (kind == HeadKind::kLearned) a.weights = &in.head.prepared;
      if (kind == HeadKind::kCarried) a.pre_mix_in = f32(in.pre_mix_in, {0, n});
      a.output = bf(out.layer_input, {0, H});
      EXPECT_NO_THROW(mhc::head(a));
    }
    EXPECT_TRUE(all_poisoned(out.residual_out));
    EXPECT_TRUE(all_poisoned(out.layer_input));
    EXPECT_TRUE(all_poisoned(out.pre_mix));
    EXPECT_TRUE(all_poisoned(out.post_mix));
    EXPECT_TRUE(all_poisoned(out.comb_mix));
  }
}

// =============================================================================================
// NonFinite: NaN/Inf in one token's input reaches that token's outputs only

bool any_nonfinite(const Bits& v, int64_t begin, int64_t count) {
  for (int64_t i = begin; i < begin + count; ++i) {
    if (!std::isfinite(bf16_value(v[static_cast<size_t>(i)]))) return true;
  }
  return false;
}
bool any_nonfinite(const Floats& v, int64_t begin, int64_t count) {
  for (int64_t i = begin; i < begin + count; ++i) {
    if (!std::isfinite(v[static_cast<size_t>(i)])) return true;
  }
  return false;
}

// Token ta of every output of `a` equals token tb of `b`, bit for bit.
void expect_token_equal(const Result& a, int64_t ta, const Result& b, int64_t tb, const Config& c,
                        const std::string& what) {
  SCOPED_TRACE(what + " token " + std::to_string(ta) + " vs " + std::to_string(tb));
  auto same = [](const void* x, const void* y, int64_t bytes) {
    return std::memcmp(x, y, static_cast<size_t>(bytes)) == 0;
  };
  const int64_t n = c.n;
  EXPECT_TRUE(same(&a.residual_out[ta * c.K()], &b.residual_out[tb * c.K()], c.K() * 2)) << "residual_out";
  EXPECT_TRUE(same(&a.layer_input[ta * c.H], &b.layer_input[tb * c.H], c.H * 2)) << "layer_input";
  EXPECT_TRUE(same(&a.pre_mix[ta * n], &b.pre_mix[tb * n], n * 4)) << "pre_mix";
  EXPECT_TRUE(same(&a.post_mix[ta * n], &b.post_mix[tb * n], n * 4)) << "post_mix";
  EXPECT_TRUE(same(&a.comb_mix[ta * n * n], &b.comb_mix[tb * n * n], n * n * 4)) << "comb_mix";
}

TEST(NonFinite, StaysInsideItsToken) {
  const Config c = test_config(4, 16);
  const int64_t T = 5;
  const Inputs clean = random_inputs(c, T, 31);
  Inputs dirty = clean;
  const uint16_t kNaN = 0x7fc0, kInf = 0x7f80;
  dirty.residual[static_cast<size_t>(1 * c.K() + 2 * c.H + 5)] = kNaN;   // token 1, stream 2
  dirty.layer_output[static_cast<size_t>(3 * c.H + 7)] = kInf;           // token 3
  dirty.embedding[static_cast<size_t>(2 * c.H + 1)] = 0xff80;            // token 2: -Inf
  const std::vector<int64_t> hit = {1, 3};

  for (PreSource src : {PreSource::kComputed, PreSource::kCarried}) {
    const Floats* pre_in = src == PreSource::kCarried ? &clean.pre_mix_in : nullptr;
    const Result a = run_post_pre(c, T, src, clean.layer_output, clean.residual, false, clean.post_mix,
                                  clean.comb_mix, clean.block, pre_in, &clean.norm);
    const Result b = run_post_pre(c, T, src, dirty.layer_output, dirty.residual, false, dirty.post_mix,
                                  dirty.comb_mix, dirty.block, pre_in, &clean.norm);
    for (int64_t t : {0, 2, 4}) expect_token_equal(a, t, b, t, c, std::string("post_pre ") + mhc::to_string(src));
    for (int64_t t : hit) {
      EXPECT_TRUE(any_nonfinite(b.residual_out, t * c.K(), c.K())) << "token " << t;
      EXPECT_TRUE(any_nonfinite(b.layer_input, t * c.H, c.H)) << "token " << t;
      EXPECT_TRUE(any_nonfinite(b.comb_mix, t * c.n * c.n, c.n * c.n)) << "token " << t;
    }
  }
  {  // mixes and head (learned) see the NaN of token 1 only
    const Result a = run_mixes(c, T, clean.residual, clean.block);
    const Result b = run_mixes(c, T, dirty.residual, dirty.block);
    const Result ha = run_head(c, T, HeadKind::kLearned, clean.residual, &clean.head, nullptr, &clean.norm);
    const Result hb = run_head(c, T, HeadKind::kLearned, dirty.residual, &dirty.head, nullptr, &clean.norm);
    for (int64_t t : {0, 2, 3, 4}) {
      expect_token_equal(a, t, b, t, c, "mixes");
      expect_token_equal(ha, t, hb, t, c, "head");
    }
    EXPECT_TRUE(any_nonfinite(b.pre_mix, 1 * c.n, c.n));
    EXPECT_TRUE(any_nonfinite(hb.layer_input, 1 * c.H, c.H));
  }
  {  // pre_broadcast sees the -Inf of token 2 only
    const Result a = run_pre_broadcast(c, T, PreSource::kComputed, clean.embedding, clean.block, nullptr, &clean.norm);
    const Result b = run_pre_broadcast(c, T, PreSource::kComputed, dirty.embedding, dirty.block, nullptr, &clean.norm);
    for (int64_t t : {0, 1, 3, 4}) expect_token_equal(a, t, b, t, c, "pre_broadcast");
    EXPECT_TRUE(any_nonfinite(b.layer_input, 2 * c.H, c.H));
    EXPECT_TRUE(any_nonfinite(b.post_mix, 2 * c.n, c.n));
  }
}

// =============================================================================================
// BatchInvariance: a token's outputs do not depend on T or on its position

// Rows [t, t+1) of a token-major buffer of `row` elements per token.
template <typename V>
V row_of(const V& v, int64_t t, int64_t row) {
  return V(v.begin() + t * row, v.begin() + (t + 1) * row);
}

TEST(BatchInvariance, TokenAloneEqualsTokenInBatch) {
  const Config c = test_config(4, 24);
  const int64_t T = 7;
  const Inputs in = random_inputs(c, T, 47);
  const int64_t n = c.n, H = c.H, K = c.K();
  const Result batch_pp = run_post_pre(c, T, PreSource::kCarried, in.layer_output, in.residual, false, in.post_mix,
                                       in.comb_mix, in.block, &in.pre_mix_in, &in.norm);
  const Result batch_pb =
      run_pre_broadcast(c, T, PreSource::kComputed, in.embedding, in.block, nullptr, &in.norm);
  const Result batch_hd = run_head(c, T, HeadKind::kLearned, in.residual, &in.head, nullptr, &in.norm);
  for (int64_t t = 0; t < T; ++t) {
    const Bits lo = row_of(in.layer_output, t, H), res = row_of(in.residual, t, K), emb = row_of(in.embedding, t, H);
    const Floats post = row_of(in.post_mix, t, n), comb = row_of(in.comb_mix, t, n * n), pre = row_of(in.pre_mix_in, t, n);
    const Result alone_pp = run_post_pre(c, 1, PreSource::kCarried, lo, res, false, post, comb, in.block, &pre, &in.norm);
    const Result alone_pb = run_pre_broadcast(c, 1, PreSource::kComputed, emb, in.block, nullptr, &in.norm);
    const Result alone_hd = run_head(c, 1, HeadKind::kLearned, res, &in.head, nullptr, &in.norm);
    SCOPED_TRACE("token " + std::to_string(t));
    expect_bits_eq(alone_pp.residual_out, row_of(batch_pp.residual_out, t, K), "post_pre residual_out");
    expect_bits_eq(alone_pp.layer_input, row_of(batch_pp.layer_input, t, H), "post_pre layer_input");
    expect_same_floats(alone_pp.post_mix, row_of(batch_pp.post_mix, t, n), "post_pre post_mix_out");
    expect_same_floats(alone_pp.comb_mix, row_of(batch_pp.comb_mix, t, n * n), "post_pre comb_mix_out");
    expect_same_floats(alone_pp.pre_mix, row_of(batch_pp.pre_mix, t, n), "post_pre pre_mix_out");
    expect_bits_eq(alone_pb.layer_input, row_of(batch_pb.layer_input, t, H), "pre_broadcast layer_input");
    expect_same_floats(alone_pb.comb_mix, row_of(batch_pb.comb_mix, t, n * n), "pre_broadcast comb_mix");
    expect_bits_eq(alone_hd.layer_input, row_of(batch_hd.layer_input, t, H), "head output");
  }
  // The batch reversed: each token's outputs move with it.
  Inputs rev = in;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t s = T - 1 - t;
    std::copy(in.layer_output.begin() + s * H, in.layer_output.begin() + (s + 1) * H, rev.layer_output.begin() + t * H);
    std::copy(in.residual.begin() + s * K, in.residual.begin() + (s + 1) * K, rev.residual.begin() + t * K);
    std::copy(in.post_mix.begin() + s * n, in.post_mix.begin() + (s + 1) * n, rev.post_mix.begin() + t * n);
    std::copy(in.comb_mix.begin() + s * n * n, in.comb_mix.begin() + (s + 1) * n * n, rev.comb_mix.begin() + t * n * n);
    std::copy(in.pre_mix_in.begin() + s * n, in.pre_mix_in.begin() + (s + 1) * n, rev.pre_mix_in.begin() + t * n);
  }
  const Result reversed = run_post_pre(c, T, PreSource::kCarried, rev.layer_output, rev.residual, false, rev.post_mix,
                                       rev.comb_mix, in.block, &rev.pre_mix_in, &in.norm);
  for (int64_t t = 0; t < T; ++t) expect_token_equal(reversed, t, batch_pp, T - 1 - t, c, "reversed");
}

}  // namespace

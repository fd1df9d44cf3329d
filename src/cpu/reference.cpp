// src/cpu/reference.cpp - float64 reference backend: every operator, any n in 1..8, any H.
//
// Each token runs the same three stages (src/core/problem.hpp): post -> mixes -> collapse.
// Tokens are independent (batch invariance by construction) and may run in parallel.
#include "src/cpu/reference.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "src/core/bf16.hpp"
#include "src/core/prepared.hpp"

namespace mhc::detail {

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// The token's streams as doubles, x[j*H + h]; a broadcast residual is expanded here.
void load_streams(const Problem& p, int64_t t, std::vector<double>& x) {
  const bf16_t* row = p.residual + t * p.residual_stride;
  for (int j = 0; j < p.n; ++j) {
    const bf16_t* src = p.residual_broadcast ? row : row + j * p.H;
    for (int64_t h = 0; h < p.H; ++h) x[j * p.H + h] = bf16_to_float(src[h]);
  }
}

// Post stage: new[k,:] = bf16(post[k]*out + sum_j comb[j,k]*res[j,:]); x becomes the new streams.
void post_stage(const Problem& p, int64_t t, std::vector<double>& x) {
  const float* post = p.post_mix + t * p.post_mix_stride;
  const float* comb = p.comb_mix + t * p.comb_mix_stride;
  const bf16_t* out = p.layer_output + t * p.layer_output_stride;
  bf16_t* dst = p.residual_out + t * p.residual_out_stride;
  std::vector<double> fresh(x.size());
  for (int k = 0; k < p.n; ++k) {
    for (int64_t h = 0; h < p.H; ++h) {
      double v = static_cast<double>(post[k]) * bf16_to_float(out[h]);
      for (int j = 0; j < p.n; ++j) v += static_cast<double>(comb[j * p.n + k]) * x[j * p.H + h];
      const bf16_t b = double_to_bf16(v);
      dst[k * p.H + h] = b;
      fresh[k * p.H + h] = bf16_to_float(b);
    }
  }
  x.swap(fresh);
}

// Mixes stage: m = (x @ fn^T) * r, then the epilogue (reference_mixes_epilogue). Returns pre in `pre`.
void mixes_stage(const Problem& p, int64_t t, const std::vector<double>& x, std::vector<double>& pre) {
  const PreparedWeights::Impl& w = *p.weights;
  const int64_t K = p.K();
  double sumsq = 0.0;
  for (int64_t i = 0; i < K; ++i) sumsq += x[i] * x[i];
  const double r = 1.0 / std::sqrt(sumsq / static_cast<double>(K) + static_cast<double>(p.norm_eps));
  std::vector<double> m(static_cast<size_t>(w.rows));
  // Four rows at a time: four independent chains (one chain is bound by the latency of its
  // additions), each row's sum still the plain one in i order, so the same bits.
  int row = 0;
  for (; row + 4 <= w.rows; row += 4) {
    const float* f = w.fn.data() + row * K;
    double dot0 = 0.0, dot1 = 0.0, dot2 = 0.0, dot3 = 0.0;
    for (int64_t i = 0; i < K; ++i) {
      dot0 += x[i] * static_cast<double>(f[i]);
      dot1 += x[i] * static_cast<double>(f[K + i]);
      dot2 += x[i] * static_cast<double>(f[2 * K + i]);
      dot3 += x[i] * static_cast<double>(f[3 * K + i]);
    }
    m[row] = dot0 * r;
    m[row + 1] = dot1 * r;
    m[row + 2] = dot2 * r;
    m[row + 3] = dot3 * r;
  }
  for (; row < w.rows; ++row) {
    const float* f = w.fn.data() + row * K;
    double dot = 0.0;
    for (int64_t i = 0; i < K; ++i) dot += x[i] * static_cast<double>(f[i]);
    m[row] = dot * r;
  }
  reference_mixes_epilogue(p, t, m.data(), pre.data());
}

// Collapse stage: u = bf16(sum_j pre[j] x_j) (or stream 0 bits), then the optional RMSNorm fold.
void collapse_stage(const Problem& p, int64_t t, const std::vector<double>& x,
                    const std::vector<double>& pre) {
  bf16_t* dst = p.layer_input + t * p.layer_input_stride;
  std::vector<bf16_t> u(static_cast<size_t>(p.H));
  if (p.pre_source == PreSource::kIdentity) {
    // stream 0, bit for bit: copy the stored bits (a trip through double would canonicalise
    // NaN payloads)
    const bf16_t* s0 = p.has_post_stage() ? p.residual_out + t * p.residual_out_stride
                                          : p.residual + t * p.residual_stride;
    std::copy(s0, s0 + p.H, u.begin());
  } else if (p.mean_head()) {
    for (int64_t h = 0; h < p.H; ++h) {  // bf16(mean): the exact sum divided by n
      double v = 0.0;
      for (int j = 0; j < p.n; ++j) v += x[j * p.H + h];
      u[h] = double_to_bf16(v / p.n);
    }
  } else {
    for (int64_t h = 0; h < p.H; ++h) {
      double v = 0.0;
      for (int j = 0; j < p.n; ++j) v += pre[j] * x[j * p.H + h];
      u[h] = double_to_bf16(v);
    }
  }
  if (p.rmsnorm_weight == nullptr) {
    std::copy(u.begin(), u.end(), dst);
    return;
  }
  double sumsq = 0.0;
  for (int64_t h = 0; h < p.H; ++h) {
    const double v = bf16_to_float(u[h]);
    sumsq += v * v;
  }
  const double inv = 1.0 / std::sqrt(sumsq / static_cast<double>(p.H) + static_cast<double>(p.rmsnorm_eps));
  for (int64_t h = 0; h < p.H; ++h) {
    dst[h] = double_to_bf16(bf16_to_float(u[h]) * inv * bf16_to_float(p.rmsnorm_weight[h]));
  }
}

void run_token(const Problem& p, int64_t t) {
  std::vector<double> x(static_cast<size_t>(p.K()));
  std::vector<double> pre(static_cast<size_t>(p.n), 0.0);
  load_streams(p, t, x);
  if (p.has_post_stage()) post_stage(p, t, x);
  if (p.op == Op::kPreBroadcast && p.residual_out != nullptr) {  // n bit-exact copies of the embedding
    const bf16_t* src = p.residual + t * p.residual_stride;
    bf16_t* dst = p.residual_out + t * p.residual_out_stride;
    for (int j = 0; j < p.n; ++j) std::copy(src, src + p.H, dst + j * p.H);
  }
  if (p.has_mixes_stage()) mixes_stage(p, t, x, pre);
  if (!p.has_collapse_stage()) return;
  if (p.pre_source == PreSource::kCarried) {
    const float* src = p.pre_mix_in + t * p.pre_mix_in_stride;
    for (int j = 0; j < p.n; ++j) pre[j] = src[j];
  }
  collapse_stage(p, t, x, pre);
}

}  // namespace

void reference_mixes_epilogue(const Problem& p, int64_t t, const double* m, double* pre) {
  const PreparedWeights::Impl& w = *p.weights;
  const int n = p.n;
  for (int j = 0; j < n; ++j) pre[j] = sigmoid(m[j] * w.scale[0] + w.base[j]) + p.pre_eps;
  if (w.head) return;  // learned head: pre only
  if (p.pre_mix_out != nullptr) {
    float* dst = p.pre_mix_out + t * p.pre_mix_out_stride;
    for (int j = 0; j < n; ++j) dst[j] = static_cast<float>(pre[j]);
  }
  if (p.post_mix_out != nullptr) {
    float* dst = p.post_mix_out + t * p.post_mix_out_stride;
    for (int j = 0; j < n; ++j) {
      dst[j] = static_cast<float>(p.post_scale * sigmoid(m[n + j] * w.scale[1] + w.base[n + j]));
    }
  }
  if (p.comb_mix_out != nullptr) {
    double c[kMaxStreams * kMaxStreams];
    for (int i = 0; i < n * n; ++i) c[i] = m[2 * n + i] * w.scale[2] + w.base[2 * n + i];
    reference_sinkhorn(c, n, p.sinkhorn_iters, p.sinkhorn_eps);
    float* dst = p.comb_mix_out + t * p.comb_mix_out_stride;
    for (int i = 0; i < n * n; ++i) dst[i] = static_cast<float>(c[i]);
  }
}

void reference_sinkhorn(double* c, int n, int iters, double eps) {
  for (int j = 0; j < n; ++j) {  // row softmax, then + eps
    double mx = c[j * n];
    for (int k = 1; k < n; ++k) mx = (c[j * n + k] > mx || std::isnan(c[j * n + k])) ? c[j * n + k] : mx;
    double sum = 0.0;
    for (int k = 0; k < n; ++k) {
      c[j * n + k] = std::exp(c[j * n + k] - mx);
      sum += c[j * n + k];
    }
    for (int k = 0; k < n; ++k) c[j * n + k] = c[j * n + k] / sum + eps;
  }
  auto col_normalise = [&] {
    for (int k = 0; k < n; ++k) {
      double sum = 0.0;
      for (int j = 0; j < n; ++j) sum += c[j * n + k];
      for (int j = 0; j < n; ++j) c[j * n + k] /= (sum + eps);
    }
  };
  col_normalise();
  for (int it = 1; it < iters; ++it) {
    for (int j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int k = 0; k < n; ++k) sum += c[j * n + k];
      for (int k = 0; k < n; ++k) c[j * n + k] /= (sum + eps);
    }
    col_normalise();
  }
}

void reference_run(const Problem& p) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < p.T; ++t) run_token(p, t);
}

}  // namespace mhc::detail

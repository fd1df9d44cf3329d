// bench/probes/sinkhorn_forms.cu - candidate forms of the epilogue's Sinkhorn (the serial chain
// on decode's critical path): cycles on one warp, warm, and each form's largest deviation from
// a float64 evaluation of the spec's iteration and from the shipped form's bits, over 4096
// random 4 x 4 logit matrices. Forms:
//   shipped  epilogue.cuh's sinkhorn<4>: one thread; from iteration 1 on, a row step and the
//            column step after it with 4 reciprocals, not 8 (with s_j = rowsum_j + eps,
//            P_j = prod_{i != j} s_i, D = prod_i s_i: c[j,k] <- c[j,k] P_j / (colsum of c P + eps D))
//   unroll   the line-by-line form with the 20 iterations unrolled (the bits of lines)
//   lanes    lane j of 4 holds row j: rows local, column sums by xor-1/xor-2 butterflies (the
//            bits of lines: the butterfly forms (x0 + x1) + (x2 + x3) in every lane)
//   pair     one thread; per pair of lines one reciprocal: 1/a = b * rcp(a * b)
//   lines    one thread, line by line: 4 reciprocals per half-step (session 8's shipped form)
//   scale    one thread; the matrix kept as diag(a) K diag(b) (K the softmax step's matrix, every
//            step a diagonal scaling): a row step a_j <- a_j / (a_j (K b)_j + eps), a column step
//            b_k <- b_k / (b_k (K^T a)_k + eps), c = a_j K_jk b_k at the end: 8 reciprocals and
//            ~56 instructions an iteration against the shipped form's 4 and ~76
//   norcp*   timing only: the shipped form with a multiplication for each reciprocal
//   cols*    timing only: the column step alone, 20 times (4 reciprocals an iteration)
//   fma      the shipped form with the column sums of c * p by fused multiply-adds from the row
//            factors and c scaled by p_j q_k once an iteration (other bits)
//   quad     the shipped form with the column step's 4 reciprocals from one: with q_k = colsum_k +
//            eps D, 1/q_0 = (q_1 (q_2 q_3)) rcp((q_0 q_1)(q_2 q_3)), and so on (the products of
//            three formed beside the reciprocal): one multi-function instruction an iteration on
//            the chain instead of 4 issued back to back (a warp's MUFU takes several cycles of
//            its pipe even with one lane active, if the pipe is narrower than the warp), for 2 more
//            dependent FMULs; q_k stays within ~[1e-3, 3e2], so the product of 4 is far inside
//            fp32's range
// Standalone probe, from the repository root:
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -I. -Iinclude -o /tmp/sk \
//        bench/probes/sinkhorn_forms.cu && /tmp/sk
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "src/cuda/epilogue.cuh"

using namespace mhc::cuda;

constexpr int kIters = 20;
constexpr float kEps = 1e-6f;
constexpr int kCases = 4096;

__device__ __forceinline__ void sinkhorn_unrolled(float (&c)[16], float eps) {
  sinkhorn_rows_softmax<4>(c, eps);
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    if (it > 0) normalise_lines<4, 4, 1>(c, eps);
    normalise_lines<4, 1, 4>(c, eps);
  }
}

// Lines a and b (of kLine/kStep) divided by (sum + eps) with one reciprocal for the pair.
template <int kLine, int kStep>
__device__ __forceinline__ void normalise_pairs(float (&c)[16], float eps) {
#pragma unroll
  for (int a = 0; a < 4; a += 2) {
    const float sa = tree_sum<kStep, 0, 4>(c, a * kLine) + eps, sb = tree_sum<kStep, 0, 4>(c, (a + 1) * kLine) + eps;
    const float r = fast_rcp(sa * sb);
    const float ra = sb * r, rb = sa * r;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      c[a * kLine + k * kStep] *= ra;
      c[(a + 1) * kLine + k * kStep] *= rb;
    }
  }
}

__device__ __forceinline__ void sinkhorn_pair(float (&c)[16], float eps) {
  sinkhorn_rows_softmax<4>(c, eps);
  for (int it = 0; it < kIters; ++it) {
    if (it > 0) normalise_pairs<4, 1>(c, eps);
    normalise_pairs<1, 4>(c, eps);
  }
}

// The diagonal-scaling form: c = diag(a) K diag(b), K after the softmax step.
__device__ __forceinline__ void sinkhorn_scale(float (&c)[16], float eps) {
  sinkhorn_rows_softmax<4>(c, eps);
  float a[4] = {1.0f, 1.0f, 1.0f, 1.0f}, b[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) b[k] = fast_rcp(((c[k] + c[4 + k]) + (c[8 + k] + c[12 + k])) + eps);  // iteration 0
  for (int it = 1; it < kIters; ++it) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float kb = fmaf(c[j * 4], b[0], c[j * 4 + 1] * b[1]) + fmaf(c[j * 4 + 2], b[2], c[j * 4 + 3] * b[3]);
      a[j] *= fast_rcp(fmaf(a[j], kb, eps));
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float ka = fmaf(c[k], a[0], c[4 + k] * a[1]) + fmaf(c[8 + k], a[2], c[12 + k] * a[3]);
      b[k] *= fast_rcp(fmaf(b[k], ka, eps));
    }
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) c[i] = (a[i / 4] * c[i]) * b[i % 4];
}

// The shipped form's row step of one iteration (epilogue.cuh's product form): the row factors
// p_j = prod_{i != j} (rowsum_i + eps) and eps D (returned), c scaled by p where `scale`.
__device__ __forceinline__ float product_rows(float (&c)[16], float eps, float (&p)[4], bool scale) {
  float s[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) s[j] = tree_sum<1, 0, 4>(c, j * 4) + eps;
  const float s01 = s[0] * s[1], s23 = s[2] * s[3];
  p[0] = s[1] * s23;
  p[1] = s[0] * s23;
  p[2] = s[3] * s01;
  p[3] = s[2] * s01;
  if (scale) {
#pragma unroll
    for (int i = 0; i < 16; ++i) c[i] *= p[i / 4];
  }
  return (s01 * s23) * eps;
}

// The shipped product form with one reciprocal for the column step's 4.
__device__ __forceinline__ void sinkhorn_quad(float (&c)[16], float eps) {
  sinkhorn_rows_softmax<4>(c, eps);
  normalise_lines<4, 1, 4>(c, eps);  // iteration 0: the column step alone
  for (int it = 1; it < kIters; ++it) {
    float p[4];
    const float d_eps = product_rows(c, eps, p, true);
    float q[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) q[k] = tree_sum<4, 0, 4>(c, k) + d_eps;
    const float q01 = q[0] * q[1], q23 = q[2] * q[3];
    const float r = fast_rcp(q01 * q23);
    const float inv[4] = {(q[1] * q23) * r, (q[0] * q23) * r, (q[3] * q01) * r, (q[2] * q01) * r};
#pragma unroll
    for (int i = 0; i < 16; ++i) c[i] *= inv[i % 4];
  }
}

// Timing-only ablations of the shipped form (their values are not a Sinkhorn): `norcp` replaces
// each reciprocal by a multiplication (what the multi-function unit adds to the chain), `cols`
// runs the column step alone 20 times (the chain without the row products).
__device__ __forceinline__ float mul_not_rcp(float x) { return x * 0.25f; }
__device__ __forceinline__ void sinkhorn_norcp(float (&c)[16], float eps) {
  sinkhorn_rows_softmax<4>(c, eps);
  for (int it = 0; it < kIters; ++it) {
    float p[4];
    const float d_eps = product_rows(c, eps, p, true);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float q = mul_not_rcp(tree_sum<4, 0, 4>(c, k) + d_eps);
#pragma unroll
      for (int j = 0; j < 4; ++j) c[j * 4 + k] *= q;
    }
  }
}
__device__ __forceinline__ void sinkhorn_cols(float (&c)[16], float eps) {
  sinkhorn_rows_softmax<4>(c, eps);
  for (int it = 0; it < kIters; ++it) normalise_lines<4, 1, 4>(c, eps);
}

// The shipped product form with each column sum of c * p formed by fused multiply-adds straight
// from the row factors, ((c0 p0 + c1 p1) + (c2 p2 + c3 p3)) as fmaf(c1, p1, c0 p0) + fmaf(c3, p3,
// c2 p2), and c scaled once by p_j q_k at the end of the iteration (other bits: a candidate).
__device__ __forceinline__ void sinkhorn_fma(float (&c)[16], float eps) {
  sinkhorn_rows_softmax<4>(c, eps);
  normalise_lines<4, 1, 4>(c, eps);  // iteration 0: the column step alone
  for (int it = 1; it < kIters; ++it) {
    float p[4];
    const float d_eps = product_rows(c, eps, p, false);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float col = fmaf(c[4 + k], p[1], c[k] * p[0]) + fmaf(c[12 + k], p[3], c[8 + k] * p[2]);
      const float q = fast_rcp(col + d_eps);
#pragma unroll
      for (int j = 0; j < 4; ++j) c[j * 4 + k] *= p[j] * q;
    }
  }
}

// The line-by-line form (session 8's shipped form; epilogue.cuh keeps it for N != 4 and a large eps).
__device__ __forceinline__ void sinkhorn_lines(float (&c)[16], float eps) {
  sinkhorn_rows_softmax<4>(c, eps);
  for (int it = 0; it < kIters; ++it) {
    if (it > 0) normalise_lines<4, 4, 1>(c, eps);
    normalise_lines<4, 1, 4>(c, eps);
  }
}

// Lane j (< 4) holds row j in x[0..3]; the other lanes of the warp follow along (ignored).
__device__ __forceinline__ void sinkhorn_lanes(float (&x)[4], float eps) {
  {
    float mx = x[0];
#pragma unroll
    for (int k = 1; k < 4; ++k) mx = (x[k] > mx || isnan(x[k])) ? x[k] : mx;
#pragma unroll
    for (int k = 0; k < 4; ++k) x[k] = expf(x[k] - mx);
    const float r = fast_rcp((x[0] + x[1]) + (x[2] + x[3]));
#pragma unroll
    for (int k = 0; k < 4; ++k) x[k] = fmaf(x[k], r, eps);
  }
  for (int it = 0; it < kIters; ++it) {
    if (it > 0) {
      const float r = fast_rcp(((x[0] + x[1]) + (x[2] + x[3])) + eps);
#pragma unroll
      for (int k = 0; k < 4; ++k) x[k] *= r;
    }
    float s[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) s[k] = x[k] + __shfl_xor_sync(0xffffffffu, x[k], 1);
#pragma unroll
    for (int k = 0; k < 4; ++k) s[k] = s[k] + __shfl_xor_sync(0xffffffffu, s[k], 2);
#pragma unroll
    for (int k = 0; k < 4; ++k) x[k] *= fast_rcp(s[k] + eps);
  }
}

__global__ void run(const float* in, float* out, long long* cycles, int form) {
  const int lane = threadIdx.x;
  for (int cs = 0; cs < kCases; ++cs) {
    long long dt = 0;
    if (form == 2) {
      float x[4];
      const int row = lane & 3;
#pragma unroll
      for (int k = 0; k < 4; ++k) x[k] = in[cs * 16 + row * 4 + k];
      __syncwarp();
      const long long t0 = clock64();
      sinkhorn_lanes(x, kEps);
      __syncwarp();
      dt = clock64() - t0;
      if (lane < 4) {
#pragma unroll
        for (int k = 0; k < 4; ++k) out[cs * 16 + lane * 4 + k] = x[k];
      }
    } else if (lane == 0) {
      float c[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) c[i] = in[cs * 16 + i];
      const long long t0 = clock64();
      if (form == 0) sinkhorn<4>(c, kIters, kEps);
      if (form == 1) sinkhorn_unrolled(c, kEps);
      if (form == 3) sinkhorn_pair(c, kEps);
      if (form == 4) sinkhorn_lines(c, kEps);
      if (form == 5) sinkhorn_scale(c, kEps);
      if (form == 6) sinkhorn_quad(c, kEps);
      if (form == 7) sinkhorn_norcp(c, kEps);
      if (form == 8) sinkhorn_cols(c, kEps);
      if (form == 9) sinkhorn_fma(c, kEps);
      dt = clock64() - t0;
#pragma unroll
      for (int i = 0; i < 16; ++i) out[cs * 16 + i] = c[i];
    }
    if (lane == 0) cycles[cs] = dt;
  }
}

// The spec's iteration in float64.
void reference(const float* in, double* c) {
  for (int j = 0; j < 4; ++j) {
    double mx = in[j * 4];
    for (int k = 1; k < 4; ++k) mx = std::fmax(mx, in[j * 4 + k]);
    double s = 0;
    for (int k = 0; k < 4; ++k) s += (c[j * 4 + k] = std::exp(in[j * 4 + k] - mx));
    for (int k = 0; k < 4; ++k) c[j * 4 + k] = c[j * 4 + k] / s + kEps;
  }
  for (int it = 0; it < kIters; ++it) {
    if (it > 0) {
      for (int j = 0; j < 4; ++j) {
        double s = 0;
        for (int k = 0; k < 4; ++k) s += c[j * 4 + k];
        for (int k = 0; k < 4; ++k) c[j * 4 + k] /= s + kEps;
      }
    }
    for (int k = 0; k < 4; ++k) {
      double s = 0;
      for (int j = 0; j < 4; ++j) s += c[j * 4 + k];
      for (int j = 0; j < 4; ++j) c[j * 4 + k] /= s + kEps;
    }
  }
}

int main() {
  std::vector<float> h_in(kCases * 16);
  unsigned state = 12345u;
  for (float& v : h_in) {
    state = state * 1664525u + 1013904223u;
    v = (static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * 16.0f;  // logits in [-8, 8)
  }
  std::vector<double> ref(kCases * 16);
  for (int cs = 0; cs < kCases; ++cs) reference(&h_in[cs * 16], &ref[cs * 16]);
  float *in, *out;
  long long* cycles;
  cudaMalloc(&in, h_in.size() * 4);
  cudaMalloc(&out, h_in.size() * 4);
  cudaMalloc(&cycles, kCases * 8);
  cudaMemcpy(in, h_in.data(), h_in.size() * 4, cudaMemcpyHostToDevice);
  const char* names[] = {"shipped", "unroll", "lanes", "pair", "lines", "scale", "quad", "norcp*", "cols*", "fma"};
  std::vector<float> shipped(kCases * 16), got(kCases * 16);
  for (int form = 0; form < 10; ++form) {
    run<<<1, 32>>>(in, out, cycles, form);
    std::vector<long long> cyc(kCases);
    if (cudaMemcpy(got.data(), out, got.size() * 4, cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaMemcpy(cyc.data(), cycles, kCases * 8, cudaMemcpyDeviceToHost) != cudaSuccess) {
      std::printf("error: %s\n", cudaGetErrorString(cudaGetLastError()));
      return 1;
    }
    if (form == 0) shipped = got;
    double worst_rel = 0, worst_abs = 0;
    int differ = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double e = std::fabs(got[i] - ref[i]);
      worst_abs = std::fmax(worst_abs, e);
      worst_rel = std::fmax(worst_rel, e / std::fmax(std::fabs(ref[i]), 1e-30));
      if (std::memcmp(&got[i], &shipped[i], 4) != 0) ++differ;
    }
    std::vector<long long> sorted(cyc.begin() + 16, cyc.end());
    std::sort(sorted.begin(), sorted.end());
    std::printf("%-8s %6lld cycles (median of %d warm cases)  max |err| %.3g  max rel err %.3g  "
                "%d of %zu values differ from shipped\n",
                names[form], sorted[sorted.size() / 2], kCases - 16, worst_abs, worst_rel, differ, got.size());
  }
  return 0;
}

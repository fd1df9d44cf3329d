// bench/probes/op_latency.cu - the dependent-issue latency, in cycles, of the instructions on the
// epilogue's serial chain (the Sinkhorn of decode's phase 2): FADD, FMUL, FFMA, MUFU.RCP
// (rcp.approx.ftz), MUFU.EX2 and one product-form Sinkhorn iteration (sinkhorn_iterations<4> with
// 21 against 1 iterations, divided by 20). One thread, warm, clock64 around chains of kChain
// dependent instructions (each result feeds the next), so cycles / kChain is the latency of one.
// The SASS of the Sinkhorn's loop is ~76 instructions an iteration (session 29); with 4 cycles an
// FP32 instruction and ~18 a MUFU its chain would be ~100 cycles, where sinkhorn_forms.cu measured
// ~185: this says which latency is larger than assumed. Also, for the Sinkhorn's other forms
// (sinkhorn_forms.cu): 4 independent MUFU.RCP chains stepped together (whether the chain's 4
// reciprocals an iteration pipeline or queue at the multi-function unit), and, on a full warp,
// SHFL.BFLY (a form that spreads the 4 x 4 matrix over 16 lanes pays one a butterfly level). Each
// runs on one thread and on a full warp (the epilogue's chain runs with one lane active).
// Standalone probe, from the repository root:
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -I. -Iinclude -o /tmp/op_latency \
//        bench/probes/op_latency.cu && /tmp/op_latency
#include <cstdio>

#include "src/cuda/epilogue.cuh"

using namespace mhc::cuda;

constexpr int kChain = 1024;

// One asm statement a step, so the compiler can neither reorder nor merge the chain. ptxas folds
// a reciprocal of a reciprocal, and a run of butterflies into one permutation (the SASS of the
// first form of this probe, session 31, had no MUFU.RCP and no SHFL chain), so both are steps of
// (the instruction, FADD) pairs, reported as pairs and less the FADD chain's latency.
__device__ __forceinline__ float step(int op, float x, float y) {
  float r;
  switch (op) {
    case 0: asm volatile("add.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y)); break;
    case 1: asm volatile("mul.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y)); break;
    case 2: asm volatile("fma.rn.f32 %0, %1, %2, %2;" : "=f"(r) : "f"(x), "f"(y)); break;
    case 3: asm volatile("rcp.approx.ftz.f32 %0, %1;\n\tadd.f32 %0, %0, %2;" : "=f"(r) : "f"(x), "f"(y)); break;
    case 4: asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); break;
    case 5: asm volatile("shfl.sync.bfly.b32 %0, %1, 1, 0x1f, 0xffffffff;\n\tadd.f32 %0, %0, %2;" : "=f"(r) : "f"(x), "f"(y)); break;
    case 6: asm volatile("shfl.sync.bfly.b32 %0, %1, 2, 0x1f, 0xffffffff;\n\tadd.f32 %0, %0, %2;" : "=f"(r) : "f"(x), "f"(y)); break;
    case 7: asm volatile("shfl.sync.bfly.b32 %0, %1, 4, 0x1f, 0xffffffff;\n\tadd.f32 %0, %0, %2;" : "=f"(r) : "f"(x), "f"(y)); break;
    case 8: asm volatile("shfl.sync.bfly.b32 %0, %1, 8, 0x1f, 0xffffffff;\n\tadd.f32 %0, %0, %2;" : "=f"(r) : "f"(x), "f"(y)); break;
    default: asm volatile("shfl.sync.bfly.b32 %0, %1, 16, 0x1f, 0xffffffff;\n\tadd.f32 %0, %0, %2;" : "=f"(r) : "f"(x), "f"(y)); break;
  }
  return r;
}

// 4 independent (reciprocal, add) chains stepped together: cycles a step.
__device__ long long rcp4(float (&x)[4], float y) {
  const long long t0 = clock64();
#pragma unroll 16
  for (int i = 0; i < kChain; ++i) {
#pragma unroll
    for (int k = 0; k < 4; ++k) x[k] = step(3, x[k], y);
  }
  return clock64() - t0;
}

template <int kOp>
__device__ long long chain(float& x, float y) {
  const long long t0 = clock64();
#pragma unroll 64
  for (int i = 0; i < kChain; ++i) x = step(kOp, x, y);
  return clock64() - t0;
}

// A chain of (butterfly, add) pairs, the lane masks cycling 1, 2, 4, 8, 16 (kChain / 5 x 5 steps).
__device__ long long shfl_chain(float& x, float y) {
  const long long t0 = clock64();
#pragma unroll 4
  for (int i = 0; i < kChain / 5; ++i) {
#pragma unroll
    for (int m = 5; m < 10; ++m) x = step(m, x, y);
  }
  return clock64() - t0;
}

constexpr int kResults = 8;

__global__ void probe(const float* in, float* out, long long* cycles) {
  float x = in[0] + 1e-7f * static_cast<float>(threadIdx.x);  // per lane: ptxas drops shuffles of a warp-uniform value
  const float y = in[1];
  long long r[kResults] = {};
  for (int rep = 0; rep < 2; ++rep) {  // the second repetition is timed warm
    r[0] = chain<0>(x, y);
    r[1] = chain<1>(x, y);
    r[2] = chain<2>(x, y);
    r[3] = chain<3>(x, y);
    r[4] = chain<4>(x, y);
    if (blockDim.x == 32) r[5] = shfl_chain(x, y);  // every lane of the warp takes part
    float x4[4] = {x, x + 1.0f, x + 2.0f, x + 3.0f};
    r[6] = rcp4(x4, y);
    x += x4[0] + x4[1] + x4[2] + x4[3];
    float c[16], d[16];
    for (int i = 0; i < 16; ++i) c[i] = d[i] = in[2 + i] + x * 1e-30f;
    long long t0 = clock64();
    sinkhorn_iterations<4>(c, 1, 1e-6f);
    const long long one = clock64() - t0;
    t0 = clock64();
    sinkhorn_iterations<4>(d, 21, 1e-6f);
    const long long many = clock64() - t0;
    r[7] = many - one;
    for (int i = 0; i < 16; ++i) x += c[i] + d[i];
  }
  out[threadIdx.x] = x;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kResults; ++i) cycles[i] = r[i];
  }
}

int main() {
  float h_in[18];
  h_in[0] = 1.0001f;
  h_in[1] = 0.9999f;
  for (int i = 0; i < 16; ++i) h_in[2 + i] = 0.05f + 0.01f * static_cast<float>(i);
  float *d_in = nullptr, *d_out = nullptr;
  long long* d_cycles = nullptr;
  cudaMalloc(&d_in, sizeof(h_in));
  cudaMalloc(&d_out, 32 * sizeof(float));
  cudaMalloc(&d_cycles, kResults * sizeof(long long));
  cudaMemcpy(d_in, h_in, sizeof(h_in), cudaMemcpyHostToDevice);
  const char* names[kResults] = {"FADD", "FMUL", "FFMA", "RCP+FADD", "MUFU.EX2", "SHFL+FADD", "4 x (RCP+FADD)"};
  for (int threads : {1, 32}) {
    probe<<<1, threads>>>(d_in, d_out, d_cycles);
    long long c[kResults];
    if (cudaMemcpy(c, d_cycles, sizeof(c), cudaMemcpyDeviceToHost) != cudaSuccess) {
      std::printf("op_latency: %s\n", cudaGetErrorString(cudaGetLastError()));
      return 1;
    }
    const int steps[kResults - 1] = {kChain, kChain, kChain, kChain, kChain, kChain / 5 * 5, kChain};
    for (int i = 0; i < kResults - 1; ++i) {
      if (i == 5 && threads == 1) continue;  // a butterfly needs the whole warp
      std::printf("[op_latency] %2d lanes: %-14s %6.2f cycles a step (a chain of %d)\n", threads, names[i],
                  static_cast<double>(c[i]) / steps[i], steps[i]);
    }
    std::printf("[op_latency] %2d lanes: MUFU.RCP alone (RCP+FADD less FADD) %.2f cycles\n", threads,
                static_cast<double>(c[3] - c[0]) / kChain);
    if (threads == 32) {
      std::printf("[op_latency] %2d lanes: SHFL.BFLY alone (SHFL+FADD less FADD) %.2f cycles\n", threads,
                  static_cast<double>(c[5]) / steps[5] - static_cast<double>(c[0]) / kChain);
    }
    std::printf("[op_latency] %2d lanes: one product-form Sinkhorn iteration %.1f cycles (21 - 1 iterations, / 20)\n",
                threads, static_cast<double>(c[kResults - 1]) / 20.0);
  }
  return 0;
}

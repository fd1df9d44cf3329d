// bench/probes/sinkhorn_latency.cu - how many cycles the shared epilogue's serial chain takes on
// one thread (the decode critical path: decode_chunk_kernel's phase 2 runs it on one lane):
// sinkhorn<4> alone (20 iterations) and the whole mixes_epilogue<4> (sigmoids, Sinkhorn, stores),
// warm, timed with clock64 around the call. Standalone probe, from the repository root:
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -I. -Iinclude -o /tmp/sinkhorn_probe \
//        bench/probes/sinkhorn_latency.cu && /tmp/sinkhorn_probe
#include <cstdio>

#include "src/cuda/epilogue.cuh"

using namespace mhc::cuda;

__global__ void probe(const float* in, float* out, long long* cycles, EpilogueParams e, int iters) {
  float c[16];
  for (int i = 0; i < 16; ++i) c[i] = in[i];
  for (int rep = 0; rep < 3; ++rep) {  // the last repetition is timed warm
    float x[16];
    for (int i = 0; i < 16; ++i) x[i] = c[i] + rep * 1e-3f;
    const long long t0 = clock64();
    sinkhorn<4>(x, iters, 1e-6f);
    const long long t1 = clock64();
    for (int i = 0; i < 16; ++i) out[i] = x[i];
    cycles[0] = t1 - t0;
  }
  float dot[25];
  for (int i = 0; i < 25; ++i) dot[i] = in[16 + i];
  for (int rep = 0; rep < 3; ++rep) {
    float pre[4];
    dot[0] += rep * 1e-3f;
    const long long t0 = clock64();
    mixes_epilogue<4>(e, dot, dot[24], 1.0f / 16384, rep, pre);
    const long long t1 = clock64();
    out[16 + rep] = pre[0];
    cycles[1] = t1 - t0;
  }
}

int main() {
  float h_in[41];
  for (int i = 0; i < 41; ++i) h_in[i] = 0.37f * ((i * 7919) % 23) - 3.1f;
  h_in[40] = 900.0f;  // sum of squares
  float *in, *out, *scale, *base, *mix_out;
  long long* cycles;
  cudaMalloc(&in, sizeof(h_in));
  cudaMalloc(&out, 64 * sizeof(float));
  cudaMalloc(&cycles, 2 * sizeof(long long));
  cudaMalloc(&scale, 3 * sizeof(float));
  cudaMalloc(&base, 24 * sizeof(float));
  cudaMalloc(&mix_out, 3 * 64 * sizeof(float));
  cudaMemcpy(in, h_in, sizeof(h_in), cudaMemcpyHostToDevice);
  cudaMemcpy(scale, h_in, 3 * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(base, h_in + 3, 24 * sizeof(float), cudaMemcpyHostToDevice);
  EpilogueParams e{};
  e.scale = scale;
  e.base = base;
  e.pre_eps = 1e-6f;
  e.sinkhorn_eps = 1e-6f;
  e.post_scale = 2.0f;
  e.norm_eps = 1e-6f;
  e.sinkhorn_iters = 20;
  e.pre_mix_out = mix_out;
  e.pre_mix_out_stride = 4;
  e.post_mix_out = mix_out + 64;
  e.post_mix_out_stride = 4;
  e.comb_mix_out = mix_out + 128;
  e.comb_mix_out_stride = 16;
  probe<<<1, 1>>>(in, out, cycles, e, 20);
  long long h_cycles[2];
  if (cudaMemcpy(h_cycles, cycles, sizeof(h_cycles), cudaMemcpyDeviceToHost) != cudaSuccess) {
    std::printf("error: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  std::printf("sinkhorn<4>, 20 iterations: %lld cycles; mixes_epilogue<4>: %lld cycles (one thread, warm)\n",
              h_cycles[0], h_cycles[1]);
  return 0;
}

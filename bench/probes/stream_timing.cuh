// bench/probes/stream_timing.cuh - what the streaming probes (access_pattern.cu, post_stream.cu,
// l2_lag.cu) time with: the best of 10 timed runs after 2 warm ones (CUDA events on the default stream),
// and the copy bandwidth of a 1 GiB cudaMemcpyAsync (read + write bytes) they report against.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>

struct StreamTimer {
  cudaEvent_t e0, e1;
  StreamTimer() {
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
  }
  // The best time of f() in milliseconds over runs 3..12.
  template <typename F>
  float best_ms(F&& f) {
    float best = 1e30f;
    for (int r = 0; r < 12; ++r) {
      cudaEventRecord(e0);
      f();
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (r >= 2 && ms < best) best = ms;
    }
    return best;
  }
  // GB/s of a 1 GiB device-to-device copy between two buffers of its own, printed.
  double copy_gbs() {
    void *x = nullptr, *y = nullptr;
    cudaMalloc(&x, 1 << 30);
    cudaMalloc(&y, 1 << 30);
    cudaMemset(x, 1, 1 << 30);
    const float ms = best_ms([&] { cudaMemcpyAsync(y, x, 1 << 30, cudaMemcpyDeviceToDevice); });
    cudaFree(x);
    cudaFree(y);
    const double gbs = 2.0 * (1 << 30) / ms / 1e6;
    std::printf("copy (1 GiB, read + write): %.1f GB/s\n", gbs);
    return gbs;
  }
};

// The streaming probes' buffers: two of 1 GiB (x filled with 0x01 bytes) and a word the kernels
// write only under an impossible condition (so the compiler keeps their loads).
struct StreamBuffers {
  unsigned char* x = nullptr;
  unsigned char* y = nullptr;
  unsigned* sink = nullptr;
  StreamBuffers() {
    cudaMalloc(&x, 1 << 30);
    cudaMalloc(&y, 1 << 30);
    cudaMalloc(&sink, 4);
    cudaMemset(x, 1, 1 << 30);
  }
};

inline int sm_count() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  return sms;
}

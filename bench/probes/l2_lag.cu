// bench/probes/l2_lag.cu - can a pass that re-reads data another pass read a moment before be
// served by L2, and at what window? The question behind a "lagged" design for the normal mode's
// pre (the GEMM stage reads a token's 4 streams, 8 H bytes, and the collapse reads them again
// once the token's pre exists, writing 2 H): if the collapse's read hits L2, the pre op moves
// 10 H of DRAM bytes a token instead of 18 H. The window is what such a kernel must keep between
// a token's first read and its re-read (the tiles in flight, the wait for the slowest chunk's
// partial, the finalize); this probe measures the price of the re-read as a function of it.
//
// The stream: 512 MiB (T = 16384 tokens at H = 4096) read in 8 KB steps, each warp of a
// persistent grid taking steps gw, gw + W, gw + 2 W, .. (W warps in all; one block of 12 warps a
// multiprocessor, 150 registers: a lane's 16 new and 16 re-read 16-byte loads in flight at once,
// ld.global.cg: L2 only, as the GEMM stage's cp.async.cg). Forms:
//   read         the stream once (the DRAM read rate of this loop);
//   read+write   and 2 KB written a step (the pre op's DRAM bytes, 10 H: the floor of a lagged pre);
//   lag D        read+write, and with step s the warp also re-reads step s - D, its loads issued
//                beside the new ones: the L2 window between a step's read and its re-read is
//                ~D x 10 KB. D a multiple of W re-reads the warp's own step (the same
//                multiprocessor); any other D another warp's, mostly on another multiprocessor
//                (the lagged design's collapse runs on another one);
//   hot          a 16 MiB region read over and over (the L2 read rate, for the count).
// Reported: us, GB/s of DRAM bytes (each byte once), % of a 1 GiB copy in the same run, and the
// ratio to read+write. A lag form close to read+write means the re-read is nearly free at that
// window.
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/l2lag bench/probes/l2_lag.cu && /tmp/l2lag
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "stream_timing.cuh"

constexpr int64_t kBytes = int64_t{16384} * 32768;  // the stream: 512 MiB
constexpr int kStep = 8192;                         // bytes a warp step reads
constexpr int64_t kSteps = kBytes / kStep;
constexpr int kOutStep = kStep / 4;                 // bytes a step writes (2 H of 8 H)
constexpr int kWarps = 12, kThreads = kWarps * 32;  // one block a multiprocessor: 96 KB of each read in flight
constexpr int kVecs = kStep / 16 / 32;              // 16-byte loads a lane and step: 16

__device__ __forceinline__ uint4 load_cg(const void* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

struct Form {
  int64_t lag;  // D: with step s, step s - D is re-read (0: none)
  bool write;   // 2 KB written a step
};

__global__ void __launch_bounds__(kThreads, 1) lagged(const unsigned char* x, unsigned char* y, Form f, unsigned* sink) {
  const int lane = threadIdx.x & 31;
  const int64_t W = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t gw = blockIdx.x * int64_t{kWarps} + (threadIdx.x >> 5);
  unsigned acc = 0;
  for (int64_t k = 0; gw + k * W < kSteps; ++k) {
    const int64_t s = gw + k * W;
    const unsigned char* src = x + s * kStep + lane * 16;
    uint4 v[kVecs], r[kVecs];
#pragma unroll
    for (int i = 0; i < kVecs; ++i) v[i] = load_cg(src + i * 512);
    const bool reread = f.lag > 0 && s >= f.lag;
    if (reread) {
      const unsigned char* old = x + (s - f.lag) * kStep + lane * 16;
#pragma unroll
      for (int i = 0; i < kVecs; ++i) r[i] = load_cg(old + i * 512);
    }
    unsigned mix[kVecs / 4];
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      unsigned w = v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
      if (reread) w += r[i].x ^ r[i].y ^ r[i].z ^ r[i].w;
      acc ^= w;
      if (i % 4 == 0) mix[i / 4] = w;
    }
    if (f.write) {
      uint4* dst = reinterpret_cast<uint4*>(y + s * kOutStep) + lane;
#pragma unroll
      for (int i = 0; i < kVecs / 4; ++i) __stcs(dst + i * 32, make_uint4(mix[i], acc, mix[i] + 1, acc + 1));
    }
  }
  if (acc == 0x12345678u) sink[0] = acc;  // keeps the loads; practically never true
}

// The L2 read rate: `rounds` passes of every warp over a 16 MiB region (the same loop's loads).
__global__ void __launch_bounds__(kThreads) hot(const unsigned char* x, int rounds, unsigned* sink) {
  constexpr int64_t kHotSteps = (int64_t{16} << 20) / kStep;
  const int lane = threadIdx.x & 31;
  const int64_t W = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t gw = blockIdx.x * int64_t{kWarps} + (threadIdx.x >> 5);
  unsigned acc = 0;
  for (int64_t k = 0; k < rounds * kHotSteps; k += W) {
    const unsigned char* src = x + ((gw + k) % kHotSteps) * kStep + lane * 16;
    uint4 v[kVecs];
#pragma unroll
    for (int i = 0; i < kVecs; ++i) v[i] = load_cg(src + i * 512);
#pragma unroll
    for (int i = 0; i < kVecs; ++i) acc ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

int main() {
  const StreamBuffers buf;
  StreamTimer timer;
  const double copy_gbs = timer.copy_gbs();
  {
    const int grid = sm_count();
    const int64_t W = int64_t{grid} * kWarps;
    const double step_mb = double(kStep + kOutStep) / (1 << 20);
    auto run = [&](Form f) { return timer.best_ms([&] { lagged<<<grid, kThreads>>>(buf.x, buf.y, f, buf.sink); }); };
    const float read_ms = run({0, false});
    const double read_gbs = kBytes / read_ms / 1e6;
    std::printf("%d blocks of %d warps (W = %lld): read %.1f us %.1f GB/s %.1f%% of copy\n", grid, kWarps, static_cast<long long>(W),
                read_ms * 1e3, read_gbs, 100 * read_gbs / copy_gbs);
    const double rw_bytes = 1.25 * kBytes;
    const float rw_ms = run({0, true});
    std::printf("  read+write: %.1f us %.1f%% of copy\n", rw_ms * 1e3, 100 * rw_bytes / rw_ms / 1e6 / copy_gbs);
    for (const int64_t lag : {W / 8, W / 4, W / 2, W, 2 * W, 3 * W, 4 * W, 6 * W}) {
      const float ms = run({lag, true});
      std::printf("  lag %5lld steps (window ~%5.1f MiB, %-9s): %.1f us %.1f%% of copy on the DRAM bytes, %.2fx read+write\n",
                  static_cast<long long>(lag), lag * step_mb, lag % W ? "other SM" : "same warp", ms * 1e3,
                  100 * rw_bytes / ms / 1e6 / copy_gbs, ms / rw_ms);
    }
    const int rounds = 32;
    const float hot_ms = timer.best_ms([&] { hot<<<grid, kThreads>>>(buf.x, rounds, buf.sink); });
    std::printf("  hot 16 MiB x %d: %.1f us, %.1f GB/s from L2 (%.2fx copy)\n", rounds, hot_ms * 1e3,
                rounds * double(16 << 20) / hot_ms / 1e6, rounds * double(16 << 20) / hot_ms / 1e6 / copy_gbs);
  }
  const cudaError_t err = cudaDeviceSynchronize();
  std::printf("status: %s\n", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}

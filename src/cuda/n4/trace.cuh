// src/cuda/n4/trace.cuh - the diagnostics build's (-DMHC_GEMM_PROBE) timeline of the kernels that
// run the GEMM stage, the finalize and the collapse at once (overlap_tail_kernel beside
// gemm_kernel's overlapped form): when each 32-token tile's counter was seen complete and its pre
// stored, and when each token's collapse started and ended, from the global timer (ns). Each
// including file has its own buffers (an unnamed namespace); trace_timeline prints the summary
// lines. Release builds include nothing of it.
#pragma once

#ifdef MHC_GEMM_PROBE
#include <algorithm>
#include <cstdio>
#include <vector>

#include "src/cuda/n4/config.cuh"

namespace mhc::cuda::n4 {

namespace {

constexpr int kTraceTiles = 1024;
constexpr int kTraceTokens = kTraceTiles * kTile;
__device__ unsigned long long g_trace_tile[kTraceTiles][2];    // counted, pre stored
__device__ unsigned long long g_trace_token[kTraceTokens][2];  // collapse start, end

__device__ __forceinline__ unsigned long long trace_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// p10 / p50 / p90 of v (us), as "[trace name: p10 .. p50 .. p90 .. us, n ..]".
void print_quantiles(const char* name, std::vector<double> v) {
  if (v.empty()) return;
  std::sort(v.begin(), v.end());
  auto q = [&](double f) { return v[static_cast<size_t>(f * static_cast<double>(v.size() - 1))]; };
  std::printf("[trace %s: p10 %.2f p50 %.2f p90 %.2f us, n %zu]\n", name, q(0.1), q(0.5), q(0.9), v.size());
}

/// After the traced launch has completed: its tiles' and tokens' lines (T tokens, H for the
/// label; collapse: whether the launch collapsed). Returns the first count's time (ns) and the
/// span of the counts (ns) through first / span, or false where the buffers could not be read.
bool trace_timeline(int64_t T, int64_t H, bool collapse, double* first, double* span) {
  if (T <= 0 || cudaDeviceSynchronize() != cudaSuccess) return false;
  const int64_t tiles = std::min<int64_t>((T + kTile - 1) / kTile, kTraceTiles);
  const int64_t tokens = std::min<int64_t>(T, kTraceTokens);
  std::vector<unsigned long long> tile(static_cast<size_t>(kTraceTiles) * 2);
  std::vector<unsigned long long> token(static_cast<size_t>(kTraceTokens) * 2);
  if (cudaMemcpyFromSymbol(tile.data(), g_trace_tile, tile.size() * 8) != cudaSuccess ||
      cudaMemcpyFromSymbol(token.data(), g_trace_token, token.size() * 8) != cudaSuccess) {
    return false;
  }
  const double t0 = static_cast<double>(*std::min_element(tile.begin(), tile.begin() + 2 * tiles, [](auto a, auto b) {
    return a != 0 && (b == 0 || a < b);
  }));
  std::vector<double> pre, lag, dur;
  double last_tile = 0, last_end = 0;
  for (int64_t k = 0; k < tiles; ++k) {
    pre.push_back((static_cast<double>(tile[2 * k + 1]) - static_cast<double>(tile[2 * k])) / 1e3);
    last_tile = std::max(last_tile, static_cast<double>(tile[2 * k]) - t0);
  }
  for (int64_t t = 0; collapse && t < tokens; ++t) {
    lag.push_back((static_cast<double>(token[2 * t]) - static_cast<double>(tile[2 * (t / kTile)])) / 1e3);
    dur.push_back((static_cast<double>(token[2 * t + 1]) - static_cast<double>(token[2 * t])) / 1e3);
    last_end = std::max(last_end, static_cast<double>(token[2 * t + 1]) - t0);
  }
  std::printf("[trace H %lld T %lld: tiles counted over %.1f us from the first, collapses done at %.1f us]\n",
              static_cast<long long>(H), static_cast<long long>(T), last_tile / 1e3, last_end / 1e3);
  print_quantiles("pre stored after its tile was counted", pre);
  print_quantiles("collapse start less its tile's count", lag);
  print_quantiles("collapse duration", dur);
  *first = t0;
  *span = last_tile;
  return true;
}

}  // namespace

}  // namespace mhc::cuda::n4
#endif

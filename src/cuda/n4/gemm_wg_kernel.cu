// src/cuda/n4/gemm_wg_kernel.cu - the mixes stage of the n = 4 path on Hopper's warpgroup MMA
// (wgmma, sm_90a): for p.T tokens of the streams p.residual, the partials [token][chunk][25]
// (the 24 dots against fn over the chunk's 512 k's, then the chunk's sum of squares), the same
// bits as gemm_kernel and mix_kernel.
//
// Why: gemm_kernel (mma.sync) issues ~115 instructions per KB of x and streams at ~60% of DRAM
// bandwidth with 2 warps per scheduler (Nsight Compute, bench/results/2026-12-01-h200-s7). Here
// one wgmma.m64n72k16 does what 18 mma.sync, 2 ldmatrix and 9 shared loads do there.
//
// Grid mapping: at most one 256-thread block per multiprocessor, each with an equal contiguous
// range of the (chunk, 64-token tile) items in chunk-major order; warpgroup g takes the block's
// items g, g + 2, .. An item runs as 4 steps, one per stream j: the warpgroup's cp.async ring
// (kStagesWg stages of 64 tokens x 128 columns, 16 KB, in the no-swizzle core-matrix layout of
// src/cuda/n4/wgmma.cuh) is filled kStagesWg steps ahead across item and chunk boundaries; a step waits for
// its stage, runs 8 wgmma (k16 steps in order, accumulating from zero) against the chunk's B in
// shared memory (72 KB, rebuilt from fn_frag when the block's range enters the next chunk) and,
// while the tensor cores work, the square sums of the stage: thread (warp w, lane) continues the
// fmaf chains of token 16 w + lane % 16, vectors 2 i + lane / 16, i = 0..7, over the 4 streams.
// Accumulation: per (token, chunk, stream, n-tile) a chain over the 8 k16 steps in order from
// zero: the bits of mma.sync.m16n8k16 chains (bench/probes/wgmma_vs_mma.cu: 0 of 1048576
// elements differ on the H200); v = hi + (mid + lo); the stream partials ((v_0 + v_1) + v_2) +
// v_3; the square sums: fmaf chains over streams then elements, then the butterfly xor 8, 4, 2,
// 1 of the canonical order as a tree in each thread (even vectors, odd vectors) and one shuffle.
// Envelope: a device of compute capability 9.0 running this file's sm_90a code
// (configure_gemm_wg_kernel checks both), n = 4, H % 512 == 0, H <= 16384, 16-byte aligned
// rows; 200 KB of dynamic shared memory.
#include "src/cuda/exact_sum.cuh"
#include "src/cuda/launch.cuh"
#include "src/cuda/n4/canonical.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/n4/wgmma.cuh"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda::n4 {

namespace {

constexpr int kGroups = 2;                               // warpgroups per block
constexpr int kThreads = kGroups * kWgThreads;
constexpr int kStagesWg = 4;                             // A stages per warpgroup
constexpr int kSmemWg = kBBytes + kGroups * kStagesWg * kStageBytesWg;

// The device code below exists for sm_90a only (and for the host pass, which needs the names).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
static_assert(kSmemWg <= 227 * 1024, "gemm_wg_kernel shared memory");
static_assert(kWgTile * (kChunkCols / 8) == 8 * kWgThreads, "a stage is 8 copies of 16 bytes per thread");

__device__ __forceinline__ void wg_barrier(int group) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(1 + group), "n"(kWgThreads) : "memory");
}

// The copies of one step into `stage`: stream j of the item's 64 tokens, the chunk's 128
// columns. Thread t copies core-matrix column k_blk = t / 8 of tokens 8 i + t % 8, i = 0..7
// (a warp: 8 tokens x 64 contiguous bytes each); rows past p.T are zero-filled.
__device__ __forceinline__ void issue_step(const N4Params& p, const ChunkTileItems& items, int local, int j,
                                           uint32_t stage, int t) {
  const int chunk = items.chunk(local);
  const int64_t t0 = items.tile(local) * kWgTile;
  const int kb = t >> 3, mr = t & 7;
  const bf16_t* src = p.residual + (t0 + mr) * p.residual_stride + j * p.res_stream_stride +
                      static_cast<int64_t>(chunk) * kChunkCols + kb * 8;
  const uint32_t dst = stage + (kb * 8) * 128 + mr * 16;
#pragma unroll
  for (int i = 0; i < kWgTile / 8; ++i) {
    const bool valid = t0 + 8 * i + mr < p.T;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst + i * 128),
                 "l"(valid ? src + static_cast<int64_t>(8 * i) * p.residual_stride : p.residual), "r"(valid ? 16 : 0)
                 : "memory");
  }
}

// A step's square sums: thread (w, lane) continues sq[i], the chain of token 16 w + lane % 16 and
// vector 2 i + lane / 16 (first: from 0).
__device__ __forceinline__ void square_sums(const unsigned char* stage, int t, bool first, float (&sq)[8]) {
  const int m = (t >> 5) * 16 + (t & 15), par = (t >> 4) & 1;
  const unsigned char* row = stage + (m >> 3) * 128 + (m & 7) * 16;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint4 v = *reinterpret_cast<const uint4*>(row + (2 * i + par) * 8 * 128);
    float f[8];
    unpack8(v, f);
    float s = first ? 0.0f : sq[i];
#pragma unroll
    for (int e = 0; e < 8; ++e) s = fmaf(f[e], f[e], s);
    sq[i] = s;
  }
}

// The item's partials: the dots (store_dots_wg) and the chunk's sum of squares: this thread's
// half of the butterfly, then the other parity's from lane ^ 16.
__device__ __forceinline__ void store_item(const N4Params& p, int chunk, int64_t tile, int t,
                                           const float (&part)[3][4], const float (&sq)[8]) {
  store_dots_wg(p, chunk, tile * kWgTile, t, part);
  const float mine = butterfly_half(sq);
  const float other = __shfl_xor_sync(0xffffffffu, mine, 16);
  const int w = t >> 5, lane = t & 31;
  const int64_t tok = tile * kWgTile + w * 16 + (lane & 15);
  if (lane < 16 && tok < p.T) p.partials[(tok * p.chunks + chunk) * kPartial + kRows] = mine + other;
}

#endif

__global__ void __launch_bounds__(kThreads, 1) gemm_wg_kernel(const N4Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) unsigned char smem[];
  pdl_launch_dependents();
  const ChunkTileItems items(p.T, p.chunks, kWgTile);
  if (items.count <= 0) return;  // block-uniform
  const int group = static_cast<int>(threadIdx.x) / kWgThreads, t = static_cast<int>(threadIdx.x) % kWgThreads;
  const int first_chunk = items.chunk(0), last_chunk = items.chunk(items.count - 1);
  load_b<kThreads>(p, smem, first_chunk);  // weights: before pdl_wait, overlapping the kernel before
  pdl_wait();
  const int mine = items.count > group ? (items.count - group + kGroups - 1) / kGroups : 0;
  const int steps = mine * kN;
  const uint32_t ring = smem_addr(smem + kBBytes + group * kStagesWg * kStageBytesWg);
#pragma unroll
  for (int s = 0; s < kStagesWg; ++s) {
    if (s < steps) issue_step(p, items, group + kGroups * (s / kN), s % kN, ring + s * kStageBytesWg, t);
    cp_async_commit();
  }
  float part[3][4];
  float sq[8];
  int s = 0;
  for (int chunk = first_chunk; chunk <= last_chunk; ++chunk) {
    if (chunk != first_chunk) {
      __syncthreads();  // both warpgroups are done with the previous chunk's B
      load_b<kThreads>(p, smem, chunk);
    }
    fence_proxy_async();  // B's generic-proxy stores, before wgmma reads them
    __syncthreads();
    const uint32_t b_base = smem_addr(smem);
#pragma unroll 1
    for (; s < steps; ++s) {
      const int local = group + kGroups * (s / kN);
      if (items.chunk(local) != chunk) break;
      const int j = s % kN;
      const uint32_t stage = ring + (s % kStagesWg) * kStageBytesWg;
      cp_async_wait<kStagesWg - 1>();  // this thread's copies of step s have landed
      fence_proxy_async();
      wg_barrier(group);               // and every thread's
      stream_dots_wg(stage, b_base, j, part, [&] { square_sums(smem + (stage - smem_addr(smem)), t, j == 0, sq); });
      if (j == kN - 1) store_item(p, chunk, items.tile(local), t, part, sq);
      wg_barrier(group);  // every thread is done reading the stage
      const int next = s + kStagesWg;
      if (next < steps) issue_step(p, items, group + kGroups * (next / kN), next % kN, stage, t);
      cp_async_commit();
    }
  }
#else
  __trap();  // configure_gemm_wg_kernel never lets this build's code run
#endif
}

// 1 where this binary's code for the device has the sm_90a path (wgmma), else 0.
__global__ void gemm_wg_compiled(int* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *out = 1;
#else
  *out = 0;
#endif
}

}  // namespace

bool configure_gemm_wg_kernel(int device) {
  int major = 0, minor = 0;
  MHC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  MHC_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major != 9 || minor != 0) return false;
  int* flag = nullptr;
  MHC_CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
  int compiled = 0;
  gemm_wg_compiled<<<1, 1>>>(flag);
  const cudaError_t launched = cudaGetLastError();
  if (launched == cudaSuccess) MHC_CUDA_CHECK(cudaMemcpy(&compiled, flag, sizeof(int), cudaMemcpyDeviceToHost));
  MHC_CUDA_CHECK(cudaFree(flag));
  if (launched != cudaSuccess || compiled != 1) return false;
  return allow_dynamic_smem(gemm_wg_kernel, device, kSmemWg);
}

void launch_gemm_wg_kernel(const N4Params& p, const LaunchCtx& ctx) {
  if (p.T <= 0) return;
  const unsigned blocks = item_grid((p.T + kWgTile - 1) / kWgTile * p.chunks, ctx.num_sms, "gemm_wg_kernel");
  launch_kernel(gemm_wg_kernel, dim3(blocks), kThreads, kSmemWg, ctx, p);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_gemm_wg_kernels(KernelList& out) {
  add_kernel(out, gemm_wg_kernel, "n4::gemm_wg_kernel");
  add_kernel(out, gemm_wg_compiled, "n4::gemm_wg_compiled (Workspace::create's check)");
}

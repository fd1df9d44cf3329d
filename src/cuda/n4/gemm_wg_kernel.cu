// src/cuda/n4/gemm_wg_kernel.cu - the mixes stage of the n = 4 path on Hopper's warpgroup MMA
// (wgmma, sm_90a) fed by the tensor memory accelerator (TMA): for p.T tokens of the streams
// p.residual, the partials [chunk][token][25] (the 24 dots against fn over the chunk's 512 k's,
// then the chunk's sum of squares), the same bits as gemm_kernel and mix_kernel.
//
// Why: gemm_kernel (mma.sync) issues ~115 instructions per KB of x and streams at ~52% of copy
// (bench/results/2026-12-01-h200-s9); one wgmma.m64n72k16 does what 18 mma.sync, 2 ldmatrix and
// 9 shared loads do there. This kernel's first form fed wgmma with cp.async (8 copies of 16
// bytes per thread and step, a warpgroup barrier per stage) and stalled on long scoreboard with
// DRAM at 33% (Nsight Compute, session 7); here one thread per warpgroup issues the step's two
// TMA boxes and the warpgroup waits on the stage's mbarrier, so no thread spends instructions
// on copies.
//
// Grid mapping: at most one 256-thread block per multiprocessor, each with an equal contiguous
// range of the (chunk, 64-token tile) items in chunk-major order; warpgroup g takes the block's
// items g, g + 2, .. An item runs as 4 steps, one per stream j. Each warpgroup has its own ring
// of kStagesWg stages (64 tokens x 128 columns of one stream, 16 KB: two TMA boxes of 64 tokens
// x 64 columns in the 128-byte swizzle), filled kStagesWg steps ahead across item and chunk
// boundaries by the warpgroup's thread 0, each stage completing its own mbarrier (expect-tx of
// 16 KB; tokens past p.T arrive as zeros). A step waits for its stage's barrier phase, runs 8
// wgmma (k16 steps in order, accumulating from zero) against the chunk's B in shared memory
// (72 KB, no swizzle, rebuilt from fn_frag when the block's range enters the next chunk) and,
// while the tensor cores work, the square sums of the stage: thread (warp w, lane) continues
// the fmaf chains of token 16 w + lane % 16, vectors 2 i + lane / 16, i = 0..7, over the 4
// streams. A warpgroup barrier then frees the stage and thread 0 issues the step kStagesWg on.
// Accumulation: per (token, chunk, stream, n-tile) a chain over the 8 k16 steps in order from
// zero: the bits of mma.sync.m16n8k16 chains (bench/probes/wgmma_vs_mma.cu: 0 of 1048576
// elements differ on the H200; the shared-memory layout of A does not enter the arithmetic);
// v = hi + (mid + lo); the stream partials ((v_0 + v_1) + v_2) + v_3; the square sums: fmaf
// chains over streams then elements, then the butterfly xor 8, 4, 2, 1 of the canonical order
// as a tree in each thread (even vectors, odd vectors) and one shuffle.
// Envelope: a device of compute capability 9.0 running this file's sm_90a code with the
// driver's cuTensorMapEncodeTiled (configure_gemm_wg_kernel checks all three), n = 4, H % 512
// == 0, H <= 16384, a stream stride of H (no broadcast) and a token stride that is a multiple
// of 8 elements (16-byte aligned rows), T < 2^31; 202 KB of dynamic shared memory. The TMA
// tensor map is encoded on the host at each launch (it carries the slice's base pointer) and
// travels in the kernel's parameters, so a captured graph replays it as launched.
// Status: bit-equal to gemm_kernel on the H200 (GpuFamily, session 11 call 1; the TMA layout
// probe bench/probes/tma_swizzle.cu exact) but slower (44-46% of copy against 53%), so the
// staged_wg rows are never the dispatcher's first choice.
#include <cuda.h>
#include <cudaTypedefs.h>

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
constexpr int kBoxCols = 64;                             // a TMA box: 64 tokens x 64 columns = 128-byte rows
constexpr int kBoxBytes = kWgTile * kBoxCols * 2;        // 8 KB
constexpr int kSmemAlign = 1024;                         // the 128-byte swizzle's period
constexpr int kRingBytes = kGroups * kStagesWg * kStageBytesWg;
constexpr int kSmemWg = kSmemAlign + kBBytes + kRingBytes + kGroups * kStagesWg * 8;
static_assert(kStageBytesWg == 2 * kBoxBytes && kChunkCols == 2 * kBoxCols && kBoxBytes == static_cast<int>(kABoxBytes),
              "a step is two boxes (wgmma.cuh's A layout)");
static_assert(kBBytes % kSmemAlign == 0 && kStageBytesWg % kSmemAlign == 0, "stages on the swizzle period");

/// The kernel's parameters: the n4 params and the TMA map of p.residual (dims H, 4 streams, T).
struct GemmWgParams {
  N4Params p;
  CUtensorMap x_map;
};

// The device code below exists for sm_90a only (and for the host pass, which needs the names).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
static_assert(kSmemWg <= 227 * 1024, "gemm_wg_kernel shared memory");

__device__ __forceinline__ void wg_barrier(int group) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(1 + group), "n"(kWgThreads) : "memory");
}

// Step `s` of the warpgroup into its stage: stream j of the item's 64 tokens, the chunk's 128
// columns, as two boxes of 64 columns. Thread 0 of the warpgroup only.
__device__ __forceinline__ void issue_step(const GemmWgParams& w, const ChunkTileItems& items, int local, int j,
                                           uint32_t stage, uint32_t bar) {
  const int chunk = items.chunk(local);
  const int t0 = static_cast<int>(items.tile(local)) * kWgTile;
  mbar_expect_tx(bar, kStageBytesWg);
#pragma unroll
  for (int b = 0; b < 2; ++b) tma_load_box(stage + b * kBoxBytes, &w.x_map, chunk * kChunkCols + b * kBoxCols, j, t0, bar);
}

// A step's square sums: thread (w, lane) continues sq[i], the chain of token 16 w + lane % 16 and
// vector 2 i + lane / 16 (first: from 0). Vector v of row m lies in box v / 8 at 16-byte slot
// (v % 8) ^ (m % 8) (the 128-byte swizzle); a quarter warp reads 8 rows' distinct slots.
__device__ __forceinline__ void square_sums(const unsigned char* stage, int t, bool first, float (&sq)[8]) {
  const int m = (t >> 5) * 16 + (t & 15), par = (t >> 4) & 1;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint4 x = *reinterpret_cast<const uint4*>(stage + a_vector_offset_sw128(m, 2 * i + par));
    float f[8];
    unpack8(x, f);
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
  if (lane < 16 && tok < p.T) partial_at(p, tok, chunk)[kRows] = mine + other;
}

#endif

__global__ void __launch_bounds__(kThreads, 1) gemm_wg_kernel(const __grid_constant__ GemmWgParams w) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) unsigned char smem_raw[];
  pdl_launch_dependents();
  const N4Params& p = w.p;
  const ChunkTileItems items(p.T, p.chunks, kWgTile);
  if (items.count <= 0) return;  // block-uniform
  const int group = static_cast<int>(threadIdx.x) / kWgThreads, t = static_cast<int>(threadIdx.x) % kWgThreads;
  // B, then the rings, on the swizzle's 1024-byte period; the stage barriers after them.
  const uint32_t raw = smem_addr(smem_raw);
  unsigned char* smem = smem_raw + ((kSmemAlign - (raw & (kSmemAlign - 1))) & (kSmemAlign - 1));
  const uint32_t base = smem_addr(smem);
  const uint32_t ring = base + kBBytes + group * kStagesWg * kStageBytesWg;
  const uint32_t bars = base + kBBytes + kRingBytes + group * kStagesWg * 8;
  if (threadIdx.x == 0) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&w.x_map)) : "memory");
    for (int i = 0; i < kGroups * kStagesWg; ++i) mbar_init(base + kBBytes + kRingBytes + i * 8, 1);
    mbar_init_fence();
  }
  const int first_chunk = items.chunk(0), last_chunk = items.chunk(items.count - 1);
  load_b<kThreads>(p, smem, first_chunk);  // weights: before pdl_wait, overlapping the kernel before
  __syncthreads();                         // the barriers are initialised
  pdl_wait();
  const int mine = items.count > group ? (items.count - group + kGroups - 1) / kGroups : 0;
  const int steps = mine * kN;
  if (t == 0) {
    for (int s = 0; s < kStagesWg && s < steps; ++s)
      issue_step(w, items, group + kGroups * (s / kN), s % kN, ring + s * kStageBytesWg, bars + s * 8);
  }
  float part[3][4];
  float sq[8];
  int s = 0;
  for (int chunk = first_chunk; chunk <= last_chunk; ++chunk) {
    if (chunk != first_chunk) {
      __syncthreads();  // both warpgroups are done with the previous chunk's B
      load_b<kThreads>(p, smem, chunk);
    }
    fence_proxy_async_shared();  // B's generic-proxy stores, before wgmma reads them
    __syncthreads();
#pragma unroll 1
    for (; s < steps; ++s) {
      const int local = group + kGroups * (s / kN);
      if (items.chunk(local) != chunk) break;
      const int j = s % kN, slot = s % kStagesWg;
      const uint32_t stage = ring + slot * kStageBytesWg;
      mbar_wait(bars + slot * 8, (s / kStagesWg) & 1);  // the stage's boxes have landed
      stream_dots_wg_sw128(stage, base, j, part,
                           [&] { square_sums(smem + (stage - base), t, j == 0, sq); });
      if (j == kN - 1) store_item(p, chunk, items.tile(local), t, part, sq);
      // this thread's reads of the stage (square_sums) before the TMA refill's writes
      fence_proxy_async_shared();
      wg_barrier(group);  // every thread is done reading the stage (wgmma waited for)
      const int next = s + kStagesWg;
      if (t == 0 && next < steps)
        issue_step(w, items, group + kGroups * (next / kN), next % kN, stage, bars + slot * 8);
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

namespace {

// The driver's cuTensorMapEncodeTiled, looked up once (the first configure_gemm_wg_kernel, from
// Workspace::create); null where the driver has none.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
    if (e != cudaSuccess || found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// The streams TMA can map: 16-byte multiples for both strides, no broadcast (stride 0).
bool gemm_wg_supports(int64_t stream_stride, int64_t token_stride) {
  return stream_stride > 0 && stream_stride % 8 == 0 && token_stride % 8 == 0;
}

}  // namespace

bool configure_gemm_wg_kernel(int device) {
  int major = 0, minor = 0;
  MHC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  MHC_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major != 9 || minor != 0 || tensor_map_encoder() == nullptr) return false;
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
  MHC_CHECK(gemm_wg_supports(p.res_stream_stride, p.residual_stride) && p.T < (int64_t{1} << 31),
            "gemm_wg_kernel: the streams need a stream stride of a multiple of 8 elements (not a broadcast) and "
            "16-byte aligned token rows");
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  MHC_CHECK(encode != nullptr, "gemm_wg_kernel: the driver has no cuTensorMapEncodeTiled");
  GemmWgParams w{};
  w.p = p;
  // Dims innermost first: columns, streams, tokens. With one token the token stride is never
  // followed; it only has to be a valid one.
  const int64_t token_stride = p.T == 1 && p.residual_stride < kN * p.res_stream_stride ? kN * p.res_stream_stride
                                                                                       : p.residual_stride;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(p.H), static_cast<cuuint64_t>(kN), static_cast<cuuint64_t>(p.T)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(p.res_stream_stride) * 2, static_cast<cuuint64_t>(token_stride) * 2};
  const cuuint32_t box[3] = {kBoxCols, 1, kWgTile};
  const cuuint32_t unit[3] = {1, 1, 1};
  const CUresult made = encode(&w.x_map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<bf16_t*>(p.residual), dims, strides,
                               box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  MHC_CHECK(made == CUDA_SUCCESS, "gemm_wg_kernel: cuTensorMapEncodeTiled failed (", static_cast<int>(made),
            ") for H = ", p.H, ", T = ", p.T, ", strides ", p.res_stream_stride, ", ", p.residual_stride);
  const unsigned blocks = item_grid((p.T + kWgTile - 1) / kWgTile * p.chunks, ctx.num_sms, "gemm_wg_kernel");
  launch_kernel(gemm_wg_kernel, dim3(blocks), kThreads, kSmemWg, ctx, w);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_gemm_wg_kernels(KernelList& out) {
  add_kernel(out, gemm_wg_kernel, "n4::gemm_wg_kernel");
  add_kernel(out, gemm_wg_compiled, "n4::gemm_wg_compiled (Workspace::create's check)");
}

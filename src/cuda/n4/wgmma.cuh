// src/cuda/n4/wgmma.cuh - Hopper warpgroup MMA (wgmma, sm_90a) for the n = 4 mixes: the shared
// memory layouts, descriptors and instruction wrappers of gemm_wg_kernel, and the load of a
// chunk's B operand from fn_frag.
//
// Layouts (K-major, 16-byte rows of 8 consecutive k's):
//   A (64 tokens x 128 k's of one stream, as TMA writes it): two boxes of 64 tokens x 64 k's,
//     each 64 rows of 128 bytes in the 128-byte swizzle (16-byte slot q of row m at q ^ (m % 8)),
//     on a 1024-byte boundary; the descriptor's stride between 8-row groups is 1024 bytes, and
//     k16 step ks starts in box ks / 4 at byte 32 (ks % 4) (the hardware applies the swizzle
//     to the address it forms, as TMA did).
//   B (72 n = 3 parts x 24 rows, 128 k's of one stream): no swizzle, core matrix (8 rows x 16
//     bytes, 128 contiguous bytes) (k_blk, n_blk) at (k_blk * 9 + n_blk) * 128.
// A chain of wgmma.m64n72k16 over a stream's 8 k16 steps from zero gives the bits of the
// mma.sync.m16n8k16 chains of the canonical order (config.cuh; bench/probes/wgmma_vs_mma.cu: 0
// of 1048576 elements differ on the H200); the layouts only say where wgmma finds its operands.
// Everything here compiles to nothing outside sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); the kernels
// that use it are launched only where configure_gemm_wg_kernel found that code.
#pragma once

#include <cstdint>

#include "src/cuda/n4/config.cuh"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda::n4 {

constexpr int kWgTile = 64;                              // tokens per item: the wgmma M
constexpr int kWgThreads = 128;                          // a warpgroup
constexpr int kStageBytesWg = kWgTile * kChunkCols * 2;  // one stream's A: 16 KB
constexpr int kBStreamBytes = kNTiles * 8 * kChunkCols * 2;  // one stream's B: 72 n x 128 k, 18 KB
constexpr int kBBytes = kN * kBStreamBytes;              // a chunk's B: 72 KB
constexpr uint32_t kABoxBytes = kWgTile * 128;           // A: one box of 64 rows x 128 bytes
constexpr uint32_t kASbo = 8 * 128;                      // A: 8-row groups of the swizzled box
constexpr uint32_t kBLbo = kNTiles * 128, kBSbo = 128;   // B: K-direction and N-direction core strides
static_assert(kBBytes == kFragBytes, "B holds one chunk's fragments");
static_assert(2 * kABoxBytes == kStageBytesWg && kBLbo == kNTiles * 128 && kBSbo == 128, "A: two boxes; B: core matrices of 128 bytes");

#ifdef __CUDACC__
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// A shared-memory matrix descriptor: start address, leading and stride byte offsets (16-byte
// units), base offset 0 (operands on 1024-byte boundaries), and the swizzle mode in bits 62-63
// (0: none, 1: 128-byte).
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo, uint64_t swizzle = 0) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (swizzle << 62);
}
// A's descriptor for k16 step ks of a stage (the leading offset is unused in the swizzled
// K-major form: a k16 step never leaves its 128-byte row).
__device__ __forceinline__ uint64_t a_desc_sw128(uint32_t a_stage, int ks) {
  return wg_desc(a_stage + (ks >> 2) * kABoxBytes + (ks & 3) * 32, 16, kASbo, 1);
}

// One k16 step: d (64 x 72, fp32) += A (64 x 16) B (16 x 72); accumulate = false starts from zero.
__device__ __forceinline__ void wgmma_k16(float (&d)[36], uint64_t a, uint64_t b, bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n72k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
      "%28,%29,%30,%31,%32,%33,%34,%35}, %36, %37, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35])
      : "l"(a), "l"(b), "r"(accumulate ? 1 : 0));
#endif
}

__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit_and_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}

// TMA loads (gemm_wg_kernel's stages; bench/probes/tma_swizzle.cu; the mbarriers are in ptx.cuh).
// One box of a 3-D tensor map at (column, stream, token) into shared memory at dst, completing `bar`.
// `map` is a __grid_constant__ kernel parameter (or in constant or global memory).
__device__ __forceinline__ void tma_load_box(uint32_t dst, const void* map, int col, int stream, int token,
                                             uint32_t bar) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(stream), "r"(token), "r"(bar)
      : "memory");
#endif
}
/// The byte offset, in a stage, of 16-byte vector v (columns 8 v .. 8 v + 7) of token row m: box
/// v / 8, slot (v % 8) ^ (m % 8) of the row's 128 bytes (the 128-byte swizzle TMA writes).
__device__ __forceinline__ int a_vector_offset_sw128(int m, int v) {
  return (v >> 3) * static_cast<int>(kABoxBytes) + m * 128 + (((v & 7) ^ (m & 7)) << 4);
}

// The chunk's B: fn_frag's mma fragments [stream][ks][n-tile][lane] (uint2: k 2q, 2q+1 and 2q+8,
// 2q+9 of column n = 8 nt + lane / 4) scattered into the K-major core-matrix layout, by the
// block's last kThreads threads (all of them, or a kernel's MMA warpgroup), 12 loads in flight
// per thread.
template <int kThreads>
__device__ __forceinline__ void load_b(const N4Params& p, unsigned char* smem, int chunk) {
  const uint2* src = p.fn_frag + static_cast<int64_t>(chunk) * kFragWords;
  const int t = static_cast<int>(threadIdx.x) - (static_cast<int>(blockDim.x) - kThreads);
  constexpr int kPerThread = kFragWords / kThreads, kBatch = 12;
  static_assert(kFragWords % kThreads == 0 && kPerThread % kBatch == 0, "load_b batches");
#pragma unroll 1
  for (int b0 = 0; b0 < kPerThread; b0 += kBatch) {
    uint2 v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) v[u] = __ldg(src + t + (b0 + u) * kThreads);
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = t + (b0 + u) * kThreads;
      const int lane = i & 31, rest = i >> 5;
      const int nt = rest % kNTiles, ks = (rest / kNTiles) % kMmaSteps, j = rest / (kNTiles * kMmaSteps);
      unsigned char* at = smem + j * kBStreamBytes + (2 * ks * kNTiles + nt) * 128 + (lane >> 2) * 16 + (lane & 3) * 4;
      *reinterpret_cast<uint32_t*>(at) = v[u].x;
      *reinterpret_cast<uint32_t*>(at + kNTiles * 128) = v[u].y;
    }
  }
}

/// One stream's dots of a 64-token item: the chain of 8 wgmma k16 steps from zero (A: the
/// stream's swizzled tile at a_stage; B: stream j of the chunk at b_base), then per (token, row)
/// v = hi + (mid + lo) into part (first stream: part = v, else part + v). `during` runs while
/// the tensor cores work (the caller's other work on the same stage, or nothing).
/// part[blk][e]: rows 8 blk + 2q (+1), tokens g, g + 8 of the warp's 16 (the C-fragment layout).
template <typename During>
__device__ __forceinline__ void stream_dots_wg_sw128(uint32_t a_stage, uint32_t b_base, int j, float (&part)[3][4],
                                                     During during) {
  float d[36];
#pragma unroll
  for (int i = 0; i < 36; ++i) d[i] = 0.0f;  // (the first k16 step ignores them)
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kMmaSteps; ++ks) {
    wgmma_k16(d, a_desc_sw128(a_stage, ks), wg_desc(b_base + j * kBStreamBytes + ks * 2 * kBLbo, kBLbo, kBSbo),
              ks > 0);
  }
  during();
  wgmma_commit_and_wait();
  // n-tile nb holds columns 8 nb ..: part nb / 3 of rows (nb % 3) * 8 ..: hi, mid, lo.
#pragma unroll
  for (int blk = 0; blk < 3; ++blk) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float v = d[4 * blk + e] + (d[4 * (3 + blk) + e] + d[4 * (6 + blk) + e]);
      part[blk][e] = j == 0 ? v : part[blk][e] + v;
    }
  }
}

/// The 24 dots of the item's valid tokens from part (thread t of the warpgroup: warp t / 32 owns
/// tokens tok0 + 16 (t / 32) ..).
__device__ __forceinline__ void store_dots_wg(const N4Params& p, int chunk, int64_t tok0, int t,
                                              const float (&part)[3][4]) {
  const int w = t >> 5, lane = t & 31, g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int64_t tok = tok0 + w * 16 + g + 8 * hh;
    if (tok < p.T) {
      float* out = partial_at(p, tok, chunk) + 2 * q;
#pragma unroll
      for (int blk = 0; blk < 3; ++blk) {
        out[blk * 8] = part[blk][2 * hh];
        out[blk * 8 + 1] = part[blk][2 * hh + 1];
      }
    }
  }
}

#endif
#endif  // __CUDACC__

}  // namespace mhc::cuda::n4

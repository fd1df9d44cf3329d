// src/cuda/n4/gemm_kernel.cu - the mixes stage of the n = 4 path alone: for p.T tokens of the
// streams p.residual, the partials [token][chunk][25] (the 24 dots against fn over the chunk's
// 512 k's, then the chunk's sum of squares), the same bits as mix_kernel without a post stage.
//
// Grid mapping: at most one 256-thread block per multiprocessor, each with an equal contiguous
// range of the (chunk, 32-token tile) items in chunk-major order, as mix_kernel. The B fragments
// of the block's current chunk (72 KB, all 4 streams) stay in shared memory; where the range
// enters the next chunk, the block reloads them between two __syncthreads (where chunks <= SMs,
// every H of the envelope on an H200, a range spans 2 chunks at most: one reload).
// Warps: all 8 do the same work on their own items (block-local items w, w + 8, ..), with no
// block barrier in the steady state. An item runs as 4 steps, one per stream j in order; a step
// reads one slot of 32 tokens x 128 columns of stream j (8 KB) from the warp's private ring of
// kGemmSlots slots, which cp.async fills kGemmSlots steps ahead (the copies cross item and
// chunk boundaries, so DRAM stays busy through a reload). A step is:
//   the square sums: lane (h, cv) continues the fmaf chains of the units (token 2u + h, vector
//     cv), u = 0..15, over the stream's 8 columns (16-byte shared loads);
//   the dots: 2 m16 tiles x 9 n-tiles x 8 k16 steps = 144 mma.m16n8k16; each A fragment
//     (ldmatrix x4) serves the 9 n-tiles and each B fragment (shared memory) both m16 tiles,
//     72 fp32 accumulators; then v = hi + (mid + lo) per row, added to the item's partial in
//     registers in stream order.
// After the 4th step the square sums are reduced across the 16 vectors (shuffle butterfly) and
// the item's partials are stored. Slots are swizzled by 16-byte vector (vector ^ (row & 7)), so
// the copies, ldmatrix and the square sums' loads are free of bank conflicts.
// Per step and multiprocessor: shared memory moves 42 KB (8 KB copied in, 8 KB by ldmatrix,
// 8 KB by the square sums, 18 KB of B fragments: ~340 cycles at 128 B/cycle) and the tensor
// cores run 144 mma (~250 cycles), against ~540 cycles of DRAM time for the step's 8.8 KB
// (x and its partials) at a 1/132 share of 4.26 TB/s (H200, 1.98 GHz).
// Accumulation: the canonical order of src/cuda/n4/config.cuh, identical to mix_kernel: per
// (token, chunk, stream) one mma chain per n-tile from zero over the 8 k16 steps in order, the
// same A rows and B fragments; v = hi + (mid + lo); ((v_0 + v_1) + v_2) + v_3; the square sums
// as fmaf chains over streams then elements from 0, then the xor 8, 4, 2, 1 butterfly.
// gemm_kernel<false> (p.post_squares: the staged post_pre plan, whose post_kernel already wrote
// each chunk's sum of squares in this order) runs the dots alone and leaves partials[..][24].
// Envelope: n = 4, H % 512 == 0, H <= 16384, 16-byte aligned rows (any stream stride, 0 for a
// broadcast residual); 200 KB of dynamic shared memory (configure_gemm_kernel).
#include "src/cuda/exact_sum.cuh"
#include "src/cuda/launch.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda::n4 {

namespace {

constexpr int kGemmWarps = 8;
constexpr int kGemmThreads = kGemmWarps * 32;
constexpr int kGemmSlots = 2;                          // ring slots per warp (steps in flight)
constexpr int kSlotRowBytes = kChunkCols * 2;          // one token's 128 columns of a stream
constexpr int kSlotVecs = kSlotRowBytes / 16;          // 16-byte vectors per slot row
constexpr int kSlotBytes = kTile * kSlotRowBytes;      // 8 KB
constexpr int kUnits = kTile * kSlotVecs / 32;         // square-sum units per lane and item
constexpr int kGemmSmem = kFragBytes + kGemmWarps * kGemmSlots * kSlotBytes;  // 200 KB
static_assert(kSlotVecs == 16 && kUnits == 16, "a warp copy covers two slot rows; a lane's vector is lane % 16");
static_assert(kMmaSteps * 16 == kChunkCols && kNTiles == 9, "the step's mma shape");
static_assert(kFragBytes % (16 * kGemmThreads) == 0, "B fragments: equal 16-byte copies per thread");
static_assert(kGemmSmem <= 227 * 1024, "gemm_kernel shared memory");


__device__ __forceinline__ uint32_t shared_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared (L2 only, default eviction: in a composition the collapse re-reads
// these streams); valid = false writes zeros and reads nothing.
__device__ __forceinline__ void copy16_or_zero(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}

// The chunk's B fragments ([stream][ks][nt][lane] uint2, 72 KB) into shared memory, by every thread.
__device__ __forceinline__ void load_fragments(const N4Params& p, unsigned char* smem, int chunk) {
  const uint4* src = reinterpret_cast<const uint4*>(p.fn_frag + static_cast<int64_t>(chunk) * kFragWords);
  uint4* dst = reinterpret_cast<uint4*>(smem);
#pragma unroll
  for (int v = 0; v < kFragBytes / 16 / kGemmThreads; ++v) {
    const int i = v * kGemmThreads + static_cast<int>(threadIdx.x);
    cp_async16_keep(dst + i, src + i);
  }
}

// The copies of one step into `slot`: stream j of the item's 32 tokens, the chunk's 128 columns.
// Lane (h, vec) copies vector vec of rows 2 rr + h; a row past p.T is zero-filled.
__device__ __forceinline__ void issue_step(const N4Params& p, const ChunkTileItems& items, int local, int j,
                                           unsigned char* slot, int lane) {
  const int chunk = items.chunk(local);
  const int64_t tile = items.tile(local);
  const int h = lane >> 4, vec = lane & 15;
  const int64_t t0 = tile * kTile + h;
  const int64_t left = p.T - t0;  // rows 2 rr + h < p.T: 2 rr < left
  const int rows = static_cast<int>(left < kTile ? left : kTile);
  const bf16_t* src = p.residual + t0 * p.residual_stride + j * p.res_stream_stride +
                      static_cast<int64_t>(chunk) * kChunkCols + vec * 8;
  const int64_t step = 2 * p.residual_stride;
  const uint32_t dst = shared_addr(slot) + h * kSlotRowBytes;
#pragma unroll
  for (int rr = 0; rr < kTile / 2; ++rr) {
    // row 2 rr + h: its swizzled vector is vec ^ (row & 7) = (vec ^ h) ^ (2 rr & 6)
    const bool valid = 2 * rr < rows;
    copy16_or_zero(dst + rr * 2 * kSlotRowBytes + (((vec ^ h) ^ (2 * rr & 6)) << 4), valid ? src : p.residual, valid);
    src += step;
  }
}

// A step's square sums: lane (h, cv) continues sq[u], the fmaf chain of (token 2u + h, vector cv)
// over streams then elements (first: the chain starts at 0).
__device__ __forceinline__ void square_sums(const unsigned char* slot, int lane, bool first, float (&sq)[kUnits]) {
  const int h = lane >> 4, cv = lane & 15;
  const unsigned char* base = slot + h * kSlotRowBytes;
#pragma unroll
  for (int u = 0; u < kUnits; ++u) {
    const uint4 v =
        *reinterpret_cast<const uint4*>(base + u * 2 * kSlotRowBytes + (((cv ^ h) ^ (2 * u & 6)) << 4));
    float f[8];
    unpack8(v, f);
    float s = first ? 0.0f : sq[u];
#pragma unroll
    for (int e = 0; e < 8; ++e) s = fmaf(f[e], f[e], s);
    sq[u] = s;
  }
}

// A step's dots: the 24 dots of the 32 tokens over the chunk's 128 columns of stream j (B: that
// stream's fragments bj), then part = v (first) or part + v, v = hi + (mid + lo).
// part[m][blk][c]: m16 tile m, rows blk * 8 + 2q (+1), C-fragment element c (tokens g, g + 8).
__device__ __forceinline__ void stream_dots(const unsigned char* slot, const uint2* bj, int lane, bool first,
                                            float (&part)[kMTiles][3][4]) {
  // A: lane's row m * 16 + lane % 16 and vector 2 ks + lane / 16, swizzled: (2 ks) ^ lv.
  const int lv = (lane >> 4) ^ (lane & 7);
  const uint32_t a_row = shared_addr(slot) + (lane & 15) * kSlotRowBytes;
  float acc[kMTiles][kNTiles][4];
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) acc[m][nt][0] = acc[m][nt][1] = acc[m][nt][2] = acc[m][nt][3] = 0.0f;
  }
#pragma unroll
  for (int ks = 0; ks < kMmaSteps; ++ks) {
    uint32_t a[kMTiles][4];
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) {
      ldmatrix_x4(a_row + m * 16 * kSlotRowBytes + (((2 * ks) ^ lv) << 4), a[m][0], a[m][1], a[m][2], a[m][3]);
    }
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
      const uint2 b = bj[(ks * kNTiles + nt) * 32 + lane];
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) mma_bf16(acc[m][nt], a[m][0], a[m][1], a[m][2], a[m][3], b.x, b.y);
    }
  }
  // n-tile nt is part nt / 3 of rows (nt % 3) * 8 ..: hi = blk, mid = 3 + blk, lo = 6 + blk.
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
    for (int blk = 0; blk < 3; ++blk) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float v = acc[m][blk][c] + (acc[m][3 + blk][c] + acc[m][6 + blk][c]);
        part[m][blk][c] = first ? v : part[m][blk][c] + v;
      }
    }
  }
}

// The item's partials: the dots of its valid tokens, and the square sums reduced over the 16
// vectors of each token (xor 8, 4, 2, 1 within the 16 lanes of a half-warp, as mix_kernel).
template <bool kSquares>
__device__ __forceinline__ void store_item(const N4Params& p, int chunk, int64_t tile, int lane,
                                           const float (&part)[kMTiles][3][4], float (&sq)[kUnits]) {
  const int g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int64_t t = tile * kTile + m * 16 + g + 8 * hh;
      if (t < p.T) {
        float* out = p.partials + (t * p.chunks + chunk) * kPartial + 2 * q;
#pragma unroll
        for (int blk = 0; blk < 3; ++blk) {
          out[blk * 8] = part[m][blk][2 * hh];
          out[blk * 8 + 1] = part[m][blk][2 * hh + 1];
        }
      }
    }
  }
  if constexpr (kSquares) {  // else post_kernel wrote them (p.post_squares)
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) {
#pragma unroll
      for (int u = 0; u < kUnits; ++u) sq[u] += __shfl_xor_sync(0xffffffffu, sq[u], off);
    }
    // Every lane of a half-warp now holds the same sums; lane cv stores unit u = cv (token 2 cv + h).
    const int h = lane >> 4, cv = lane & 15;
    float mine = sq[0];
#pragma unroll
    for (int u = 1; u < kUnits; ++u) mine = cv == u ? sq[u] : mine;
    const int64_t t = tile * kTile + 2 * cv + h;
    if (t < p.T) p.partials[(t * p.chunks + chunk) * kPartial + kRows] = mine;
  }
}

template <bool kSquares>
__global__ void __launch_bounds__(kGemmThreads, 1) gemm_kernel(const N4Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  pdl_launch_dependents();
  const ChunkTileItems items(p.T, p.chunks);
  if (items.count <= 0) return;  // block-uniform
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int first_chunk = items.chunk(0), last_chunk = items.chunk(items.count - 1);
  // The first chunk's fragments are weights: their copies overlap the end of the kernel before.
  load_fragments(p, smem, first_chunk);
  cp_async_commit();
  pdl_wait();
  // This warp's items are block-local w + kGemmWarps * k; step s is stream s % 4 of item s / 4.
  const int mine = items.count > warp ? (items.count - warp + kGemmWarps - 1) / kGemmWarps : 0;
  const int steps = mine * kN;
  unsigned char* ring = smem + kFragBytes + warp * kGemmSlots * kSlotBytes;
#pragma unroll
  for (int s = 0; s < kGemmSlots; ++s) {
    if (s < steps) issue_step(p, items, warp + kGemmWarps * (s / kN), s % kN, ring + s * kSlotBytes, lane);
    cp_async_commit();
  }
  float part[kMTiles][3][4];
  float sq[kUnits];
  int s = 0;
  for (int chunk = first_chunk; chunk <= last_chunk; ++chunk) {
    if (chunk != first_chunk) {
      __syncthreads();  // every warp is done with the previous chunk's fragments
      load_fragments(p, smem, chunk);
      cp_async_commit();
      cp_async_wait<0>();
    } else {
      cp_async_wait<kGemmSlots>();  // the fragments (the ring's first copies may still be in flight)
    }
    __syncthreads();  // the chunk's fragments are visible to every warp
    const uint2* frag = reinterpret_cast<const uint2*>(smem);
#pragma unroll 1
    for (; s < steps; ++s) {
      const int local = warp + kGemmWarps * (s / kN);
      if (items.chunk(local) != chunk) break;
      const int j = s % kN;
      unsigned char* slot = ring + (s % kGemmSlots) * kSlotBytes;
      cp_async_wait<kGemmSlots - 1>();  // this lane's copies of step s have landed
      __syncwarp();                     // and the other lanes'
      if (kSquares) square_sums(slot, lane, j == 0, sq);
      stream_dots(slot, frag + j * kMmaSteps * kNTiles * 32, lane, j == 0, part);
      if (j == kN - 1) store_item<kSquares>(p, chunk, items.tile(local), lane, part, sq);
      __syncwarp();  // every lane is done reading the slot
      const int next = s + kGemmSlots;
      if (next < steps) issue_step(p, items, warp + kGemmWarps * (next / kN), next % kN, slot, lane);
      cp_async_commit();
    }
  }
}

}  // namespace

bool configure_gemm_kernel(int device) {
  return allow_dynamic_smem(gemm_kernel<true>, device, kGemmSmem) && allow_dynamic_smem(gemm_kernel<false>, device, kGemmSmem);
}

void launch_gemm_kernel(const N4Params& p, const LaunchCtx& ctx) {
  if (p.T <= 0) return;
  // At most one block per multiprocessor, each with an equal range of the (chunk, tile) items.
  const unsigned blocks = item_grid((p.T + kTile - 1) / kTile * p.chunks, ctx.num_sms, "gemm_kernel");
  launch_kernel(p.post_squares ? gemm_kernel<false> : gemm_kernel<true>, dim3(blocks), kGemmThreads, kGemmSmem, ctx, p);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_gemm_kernels(KernelList& out) {
  add_kernel(out, gemm_kernel<true>, "n4::gemm_kernel<true>");
  add_kernel(out, gemm_kernel<false>, "n4::gemm_kernel<false> (sums of squares from post_kernel)");
}

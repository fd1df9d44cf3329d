// src/cuda/n4/mix_kernel.cu - phase A of the n = 4 path: the post stage (optional) and the
// tensor-core dots of every (token, chunk), written as partials [chunk][token][25].
//
// Grid mapping: one 640-thread block per multiprocessor, each with an equal contiguous range of
// the (chunk, 32-token tile) items in chunk-major order (a chunk is 128 hidden columns of all
// 4 streams, a 512-wide K-slice), so every multiprocessor has the same share at any H.
// Warp-specialised:
//   16 post warps (512 threads): one (token, 8-column vector) unit of all 4 streams each per
//     tile. They fill a ring of kStages tiles with cp.async, run the post stage (post8), write
//     the new residual to residual_out and back into the stage in place (it is then the mma A
//     operand), and each token's sum of squares.
//   4 mma warps (128 threads): warp mw owns the 128 k's of stream mw of the chunk (8 k16 steps)
//     for both m16 tiles; the chunk's B fragments (72 KB) stay in shared memory for all the
//     block's tiles of that chunk. Their partial dots go to red and are summed over the 4 warps
//     in warp order.
// Hand-over: one __syncthreads per item i, which the post warps reach when stage i % 3 holds
// item i's new residual and the mma warps when they are done with item i - 1 (and its stage).
// The post stage of i + 1 then overlaps the mma of i, and the stage of i - 1 is refilled with
// i + 2. Both roles run one item loop with the barrier outside the role branches, each role's
// work being a function called before and one after it (compute-sanitizer synccheck reports a
// block-wide barrier reached inside role branches as divergent). kMmaBar syncs the mma warps.
// Accumulation: mma.m16n8k16 bf16 (x is exact in bf16) against fn split into three bf16 parts
// (hi + mid + lo reproduce fp32 to ~2^-24), fp32 accumulate: the canonical order of
// src/cuda/n4/config.cuh.
// Envelope: n = 4, H % 512 == 0, H <= 16384, 16-byte aligned rows; 225 KB of shared memory.
#include "src/cuda/launch.cuh"
#include "src/cuda/n4/canonical.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/n4/post8.cuh"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda::n4 {

namespace {


// Post thread (tt, cv): token row tt of the tile, 8-column vector cv. It reads from a stage
// exactly the 16-byte vectors it copied there; a token's mixes are copied by its 16 lanes (one
// warp half) and read after a __syncwarp.
__device__ __forceinline__ void issue_tile(const N4Params& p, unsigned char* stage, int64_t tile, int chunk,
                                           int tt, int cv) {
  const uint64_t policy = evict_first_policy();  // made here: not held in registers across the post stage
  const int streams = p.res_stream_stride == 0 ? 1 : kN;  // broadcast: one row, used n times
  const int64_t col0 = static_cast<int64_t>(chunk) * kChunkCols + cv * 8;
  const int64_t t = tile * kTile + tt;
  const bool valid = t < p.T;
  const int64_t tc = valid ? t : 0;  // an address inside the tensor for the zero-fill copies
  bf16_t* res_s = reinterpret_cast<bf16_t*>(stage) + tt * kXStride + cv * 8;
  const bf16_t* res = p.residual + tc * p.residual_stride + col0;
  for (int j = 0; j < streams; ++j) cp_async16(res_s + j * kChunkCols, res + j * p.res_stream_stride, valid, policy);
  if (p.has_post) {
    uint4* lo_s = reinterpret_cast<uint4*>(stage + kStageRes);
    cp_async16(&lo_s[tt * 16 + cv], p.layer_output + tc * p.layer_output_stride + col0, valid, policy);
    float* mix_s = reinterpret_cast<float*>(stage + kStageRes + kStageLo) + tt * (kN + kN * kN);
    if (cv < kN) cp_async4(mix_s + cv, p.post_mix + tc * p.post_mix_stride + cv, valid);
    cp_async4(mix_s + kN + cv, p.comb_mix + tc * p.comb_mix_stride + cv, valid);
  }
}

// The post warps' first kStages - 1 items into the ring.
__device__ __forceinline__ void mix_post_prologue(const N4Params& p, unsigned char* smem, const ChunkTileItems& items) {
  const int tid = thread_index();
  const int tt = tid >> 4, cv = tid & 15;
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < items.count) issue_tile(p, smem + i * kStageBytes, items.tile(i), items.chunk(i), tt, cv);
    cp_async_commit();
  }
}

// A post thread's part of item i before the hand-over: the post stage in place in stage i % 3,
// residual_out, and the token's sum of squares.
__device__ __forceinline__ void mix_post_item(const N4Params& p, unsigned char* smem, const ChunkTileItems& items, int i) {
  const int tid = thread_index();
  const int tt = tid >> 4, cv = tid & 15;  // token row and 8-column vector (issue_tile)
  // p.res_stream_stride == 0: a broadcast residual, one row for the 4 streams (tested where used:
  // a hoisted flag cost ptxas a spill at the 96-register bound).
  const int s = i % kStages;
  const int chunk = items.chunk(i);
  unsigned char* stage = smem + s * kStageBytes;
  cp_async_wait<kStages - 2>();  // this thread's copies of item i have landed
  __syncwarp();                  // and its token's mixes, copied by the other 15 lanes
  const int64_t t = items.tile(i) * kTile + tt;
  const bool valid = t < p.T;
  bf16_t* xrow = reinterpret_cast<bf16_t*>(stage) + tt * kXStride + cv * 8;
  uint4 x[kN];
  if (p.has_post && !valid) {
    // A padding row (zero-filled, left as is): its dots are never stored. Skipping post8
    // here matters: its all-zero sums never certify in fp32 (-0 vs +0 ends) and would all
    // take the double path.
#pragma unroll
    for (int j = 0; j < kN; ++j) x[j] = make_uint4(0, 0, 0, 0);
  } else if (p.has_post) {
    uint4 r[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) r[j] = ld16(xrow + (p.res_stream_stride == 0 ? 0 : j * kChunkCols));
    const uint4 lo = reinterpret_cast<const uint4*>(stage + kStageRes)[tt * 16 + cv];
    const float* mix = reinterpret_cast<const float*>(stage + kStageRes + kStageLo) + tt * (kN + kN * kN);
    post8(post_weights(mix, mix + kN), r, lo, x);
#pragma unroll
    for (int j = 0; j < kN; ++j) *reinterpret_cast<uint4*>(xrow + j * kChunkCols) = x[j];
  } else {
#pragma unroll
    for (int j = 0; j < kN; ++j) x[j] = ld16(xrow + (p.res_stream_stride == 0 ? 0 : j * kChunkCols));
    if (p.res_stream_stride == 0) {
#pragma unroll
      for (int j = 1; j < kN; ++j) *reinterpret_cast<uint4*>(xrow + j * kChunkCols) = x[j];
    }
  }
  if (valid && p.residual_out != nullptr) {
    bf16_t* out = p.residual_out + t * p.residual_out_stride + static_cast<int64_t>(chunk) * kChunkCols + cv * 8;
#pragma unroll
    for (int j = 0; j < kN; ++j) st16(out + j * p.H, x[j]);
  }
  // The token's 16 threads are 16 consecutive lanes: fixed-order butterfly.
  const float sq = chunk_squares_butterfly(vector_squares(x));
  if (cv == 0 && valid) partial_at(p, t, chunk)[kRows] = sq;
}

// After the hand-over of item i: the stage of item i - 1 is refilled with item i + 2.
__device__ __forceinline__ void mix_post_refill(const N4Params& p, unsigned char* smem, const ChunkTileItems& items, int i) {
  const int tid = thread_index();
  const int tt = tid >> 4, cv = tid & 15;
  const int next = i + kStages - 1;
  if (next < items.count) {
    issue_tile(p, smem + (next % kStages) * kStageBytes, items.tile(next), items.chunk(next), tt, cv);
  }
  cp_async_commit();
}

// The chunk's B fragments ([mw][ks][nt][lane] uint2, 72 KB) into shared memory, by the mma warps.
__device__ __forceinline__ void load_fragments(const N4Params& p, unsigned char* smem, int chunk, int tid) {
  const uint4* src = reinterpret_cast<const uint4*>(p.fn_frag + static_cast<int64_t>(chunk) * kFragWords);
  uint4* dst = reinterpret_cast<uint4*>(smem + kStages * kStageBytes);
  for (int v = tid; v < kFragBytes / 16; v += kMmaThreads) cp_async16_keep(dst + v, src + v);
}

// The mma warps before the hand-over of item i: where item i starts a chunk, its B fragments
// (the first chunk's were requested before pdl_wait; the previous chunk's were last read before
// the kMmaBar barrier of the previous item).
__device__ __forceinline__ void mix_mma_prepare(const N4Params& p, unsigned char* smem, const ChunkTileItems& items, int i,
                                                int& loaded) {
  const int chunk = items.chunk(i);
  if (chunk != loaded) {
    if (i > 0) load_fragments(p, smem, chunk, thread_index() - kPostThreads);
    cp_async_commit();
    cp_async_wait<0>();
    named_sync(kMmaBar, kMmaThreads);
    loaded = chunk;
  }
}

// The mma warps' part of item i after the hand-over: the tile's 24 dots of every token.
__device__ __forceinline__ void mix_mma_item(const N4Params& p, unsigned char* smem, const ChunkTileItems& items, int i) {
  const int tid = thread_index() - kPostThreads;  // 0..127
  const int lane = tid & 31, mw = tid >> 5;
  const int g = lane >> 2, q = lane & 3;
  const uint2* bs = reinterpret_cast<const uint2*>(smem + kStages * kStageBytes);
  float* red = reinterpret_cast<float*>(smem + kStages * kStageBytes + kFragBytes) + (i % 2) * kRedFloats;
  const int s = i % kStages;
  const int chunk = items.chunk(i);
  const int64_t tile = items.tile(i);
  const uint32_t xs = static_cast<uint32_t>(__cvta_generic_to_shared(smem + s * kStageBytes));
  // Per block of 8 rows (blk): both m16 tiles against the three parts of fn (n-tiles blk,
  // 3 + blk, 6 + blk): 6 independent accumulators, few enough registers that the fragment
  // loads of a k-step are issued together.
#pragma unroll
  for (int blk = 0; blk < 3; ++blk) {
    float acc[kMTiles][3][4];
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
      for (int pp = 0; pp < 3; ++pp) acc[m][pp][0] = acc[m][pp][1] = acc[m][pp][2] = acc[m][pp][3] = 0.0f;
    }
#pragma unroll
    for (int ks = 0; ks < kMmaSteps; ++ks) {
      const uint2* b = bs + ((mw * kMmaSteps + ks) * kNTiles + blk) * 32 + lane;
      uint2 bf[3];
#pragma unroll
      for (int pp = 0; pp < 3; ++pp) bf[pp] = b[pp * 3 * 32];
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) {
        // A: rows m*16 + (lane % 16), k = mw*128 + ks*16 + (lane / 16)*8 (ldmatrix x4 gives the
        // m16k16 fragment a0..a3).
        const int row = m * 16 + (lane & 15);
        const int k = mw * kChunkCols + ks * 16 + (lane >> 4) * 8;
        uint32_t a0, a1, a2, a3;
        ldmatrix_x4(xs + static_cast<uint32_t>((row * kXStride + k) * 2), a0, a1, a2, a3);
#pragma unroll
        for (int pp = 0; pp < 3; ++pp) mma_bf16(acc[m][pp], a0, a1, a2, a3, bf[pp].x, bf[pp].y);
      }
    }
    // The three parts summed in registers, hi + (mid + lo); red[warp][token][row] with
    // row = blk * 8 + 2q (+1).
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float2 v;
        v.x = acc[m][0][2 * h] + (acc[m][1][2 * h] + acc[m][2][2 * h]);
        v.y = acc[m][0][2 * h + 1] + (acc[m][1][2 * h + 1] + acc[m][2][2 * h + 1]);
        const int token = m * 16 + g + 8 * h;
        *reinterpret_cast<float2*>(&red[(mw * kTile + token) * kRows + blk * 8 + 2 * q]) = v;
      }
    }
  }
  named_sync(kMmaBar, kMmaThreads);
  // The tile's dots: the 4 warps' values in warp order. red[i % 2] is written again by item
  // i + 2, after the kMmaBar barrier of item i + 1, which every mma thread reaches after this.
#pragma unroll
  for (int k = 0; k < kTile * kRows / kMmaThreads; ++k) {
    const int idx = tid + k * kMmaThreads;
    const int token = idx / kRows, r = idx % kRows;
    const int64_t tok = tile * kTile + token;
    float v = red[token * kRows + r];
#pragma unroll
    for (int w = 1; w < kMmaWarps; ++w) v += red[(w * kTile + token) * kRows + r];
    if (tok < p.T) partial_at(p, tok, chunk)[r] = v;
  }
}

__global__ void __launch_bounds__(kThreadsA, 1) mix_kernel(const N4Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  pdl_launch_dependents();
  const ChunkTileItems items(p.T, p.chunks);
  if (threadIdx.x >= kPostThreads && items.count > 0) {
    // The first chunk's fragments are weights: their copies overlap the end of the kernel before.
    load_fragments(p, smem, items.chunk(0), threadIdx.x - kPostThreads);
  }
  pdl_wait();
  const bool post = threadIdx.x < kPostThreads;  // warp-uniform
  if (post) mix_post_prologue(p, smem, items);
  int loaded = -1;  // the chunk whose B fragments are in shared memory (mma warps)
  for (int i = 0; i < items.count; ++i) {
    if (post) {
      mix_post_item(p, smem, items, i);
    } else {
      mix_mma_prepare(p, smem, items, i, loaded);
    }
    __syncthreads();  // the hand-over of item i
    if (post) {
      mix_post_refill(p, smem, items, i);
    } else {
      mix_mma_item(p, smem, items, i);
    }
  }
}

}  // namespace

bool configure_mix_kernel(int device) { return allow_dynamic_smem(mix_kernel, device, kMixSmem); }

void launch_mix_kernel(const N4Params& p, const LaunchCtx& ctx) {
  // One block per multiprocessor, each with an equal range of the (chunk, tile) items.
  const unsigned blocks = item_grid((p.T + kTile - 1) / kTile * p.chunks, ctx.num_sms, "mix_kernel");
  launch_kernel(mix_kernel, dim3(blocks), kThreadsA, kMixSmem, ctx, p);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_mix_kernels(KernelList& out) { add_kernel(out, mix_kernel, "n4::mix_kernel"); }

// src/cuda/n4/decode_phase1.cuh - phase 1 of decode_chunk_kernel: for the rows of a block's run,
// the post stage (post8), residual_out, the A tiles, the chunk's sum of squares and the chunk
// partials (24 dots, sum of squares) in the canonical order of config.cuh.
//
// A run is `groups` groups of 16 rows; row r of group r / 16 is one token's 128 columns of one
// chunk, all 4 streams. Which token and which chunk a row holds is the caller's (Rows):
// decode_chunk_kernel's are one chunk, rows = consecutive tokens (RunRows).
// Block: kDecodeBlock = 384 threads, warp w = (stream j = w / 3, row block b = w % 3) in the mma.
// The post: by item (row, 8-column vector), post8 per thread (16 items a row); or, in column-pair
// mode (unstaged runs of one row: T = 1), by item (row, vector, column pair):
// thread 64 r + 4 v + i runs post8_column for pair i of vector v of row r and writes its 4 words
// to residual_out and the A tile, then after a barrier the vector items read their vectors back.
// Why: at one row the vector items are 16 of 384 threads, each a long dependent chain (4 column
// pairs in turn), and phase 1 is latency bound; one pair a thread is a quarter of the chain at 4
// times the threads, for one barrier (H200, session 23: post_pre T = 1 -0.3 us; at T = 4, 4 rows,
// +0.6 / +2.1 us at H = 4096 / 7168, so the mode stops at one row). Same bits: a column pair is
// self-contained.
#pragma once

#include "src/cuda/n4/canonical.cuh"
#include "src/cuda/n4/config.cuh"
#include "src/cuda/n4/post8.cuh"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda::n4 {

constexpr int kDecodeWarps = 12;                      // 4 streams x 3 row blocks
constexpr int kDecodeBlock = kDecodeWarps * 32;       // 384 threads
constexpr int kGroup = 16;                            // rows per group: one m16 tile
constexpr int kAStride = kSliceK + 8;                 // A row: 4 streams x 128 columns, padded (ldmatrix)
constexpr int kMixes = kN + kN * kN;                  // post[4], comb[16] of a token
static_assert(kDecodeWarps == kN * 3, "warp = (stream, row block)");
static_assert(kThreadsB == kGroup * (kChunkCols / 8), "phase 1: 256 items (row, 8-column vector) a group");
constexpr int kPairItems = 4 * (kChunkCols / 8);      // column-pair mode: items (vector, column pair) a row
constexpr int kPairRows = 1;                           // ... for runs of this many rows at most
static_assert(kPairRows * kPairItems <= kDecodeBlock, "a thread an item");

// The dynamic shared memory of a run of G groups (run_smem_bytes(G) bytes):
//   s_in  [16 G][kAStride] bf16: the run's residual rows (4 streams x 128 columns), staged by
//         cp.async, then in place each row's new streams: the A tiles of the mma chains
//   then, in one region: s_lo [16 G][128] bf16 and s_mix [16 G][20] f32 (the post's inputs), and
//         after the post s_red [G][4][16][24] f32 (the per-stream dots)
//   s_sq  [16 G] f32: the chunk's sum of squares per row
__host__ __device__ constexpr int run_in_bytes(int g) { return g * kGroup * kAStride * 2; }
__host__ __device__ constexpr int run_post_bytes(int g) { return g * kGroup * (kChunkCols * 2 + kMixes * 4); }
__host__ __device__ constexpr int run_red_bytes(int g) { return g * kN * kGroup * kRows * 4; }
__host__ __device__ constexpr int run_mid_bytes(int g) {
  return run_post_bytes(g) > run_red_bytes(g) ? run_post_bytes(g) : run_red_bytes(g);
}
__host__ __device__ constexpr int run_smem_bytes(int g) { return run_in_bytes(g) + run_mid_bytes(g) + g * kGroup * 4; }
static_assert(run_in_bytes(1) % 16 == 0 && run_mid_bytes(1) % 16 == 0 && (kGroup * kChunkCols * 2) % 16 == 0,
              "16-byte aligned regions");

#ifdef __CUDACC__

/// decode_chunk_kernel's rows: chunk `chunk`, tokens first + r for r < ntok.
struct RunRows {
  int64_t first;
  int ntok, chunk;
  __device__ int count() const { return ntok; }
  __device__ int row(int k) const { return k; }
  __device__ bool valid(int r) const { return r < ntok; }
  __device__ int64_t token(int r) const { return first + r; }
  __device__ int64_t col0(int) const { return static_cast<int64_t>(chunk) * kChunkCols; }
};

/// Phase 1 of a run: the post, the A tiles and the sums of squares of all its groups, then the
/// mma chains of each group (b(grp, bg) puts the warp's B fragments of the group's chunk in bg),
/// then sink(r, k, v) for each valid row r and partial k (24 dots, then the sum of squares).
/// kStaged: every input of the run is first staged in shared memory at once, so the run pays one
/// memory latency; otherwise each item loads its inputs straight into registers, which saves the
/// staging's barrier and shared-memory round trip (session 8 call 5: 0.1-0.5 us at G = 1). The
/// same arithmetic either way. Called by all kDecodeBlock threads (block barriers).
template <bool kPost, bool kStaged, typename Rows, typename BFrag, typename Sink>
__device__ __forceinline__ void phase1_run(const N4Params& p, const Rows& rows, int groups, BFrag b,
                                           unsigned char* smem, Sink sink) {
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
  bf16_t* s_in = reinterpret_cast<bf16_t*>(smem);
  bf16_t* s_lo = reinterpret_cast<bf16_t*>(smem + run_in_bytes(groups));
  float* s_mix = reinterpret_cast<float*>(smem + run_in_bytes(groups) + groups * kGroup * kChunkCols * 2);
  float* s_red = reinterpret_cast<float*>(smem + run_in_bytes(groups));  // after the post: over s_lo, s_mix
  float* s_sq = reinterpret_cast<float*>(smem + run_in_bytes(groups) + run_mid_bytes(groups));
  // The inputs: 16-byte pieces of the residual rows (and layer_output rows), through L2 (another
  // kernel wrote them); the mixes by plain L2 loads (their rows need not be 16-byte aligned).
  constexpr int kPieces = (kPost ? kN + 1 : kN) * (kChunkCols / 8);
  const int nrows = rows.count();
  for (int i = tid; kStaged && i < nrows * kPieces; i += kDecodeBlock) {
    const int tl = rows.row(i / kPieces), q = i % kPieces, s = q / (kChunkCols / 8), cv = q % (kChunkCols / 8);
    const int64_t t = rows.token(tl), col0 = rows.col0(tl);
    if (s < kN) {
      cp_async16_keep(s_in + tl * kAStride + s * kChunkCols + cv * 8,
                      p.residual + t * p.residual_stride + s * p.res_stream_stride + col0 + cv * 8);
    } else {
      cp_async16_keep(s_lo + tl * kChunkCols + cv * 8, p.layer_output + t * p.layer_output_stride + col0 + cv * 8);
    }
  }
  if (kStaged) cp_async_commit();
  if (kPost && kStaged) {
    for (int i = tid; i < nrows * kMixes; i += kDecodeBlock) {
      const int tl = rows.row(i / kMixes), m = i % kMixes;
      const int64_t t = rows.token(tl);
      s_mix[tl * kMixes + m] =
          m < kN ? __ldcg(p.post_mix + t * p.post_mix_stride + m) : __ldcg(p.comb_mix + t * p.comb_mix_stride + m - kN);
    }
  }
  if (kStaged) {
    cp_async_wait<0>();
    __syncthreads();
  }
  // Column-pair mode (unstaged runs of kPairRows rows at most): the post and
  // residual_out by item (row, vector, column pair), 4 items a vector, 64 a row, one thread each
  // (threads 0 .. 64 nrows - 1: item = thread), post8_column for pair i = item & 3; each output's
  // bf16x2 word goes to residual_out and to its place in the row's A tile (s_in). The barrier
  // orders those words before the vector loop below reads its vectors back from s_in.
  const bool pairs = kPost && !kStaged && nrows <= kPairRows;  // block-uniform
  if (pairs) {
    if (tid < nrows * kPairItems) {
      const int tl = rows.row(tid / kPairItems), cv = (tid / 4) % (kChunkCols / 8), i = tid & 3;
      const int64_t t = rows.token(tl), col0 = rows.col0(tl);
      const bf16_t* res = p.residual + t * p.residual_stride + col0 + cv * 8;
      // the terms in the order of the weights: layer output, then the 4 streams (as post8)
      uint4 terms[kN + 1];
      terms[0] = ldcg16(p.layer_output + t * p.layer_output_stride + col0 + cv * 8);
#pragma unroll
      for (int s = 0; s < kN; ++s) terms[s + 1] = ldcg16(res + s * p.res_stream_stride);
      uint32_t x[kN];
      post8_column(token_post_weights(p, t), terms, i, x);
      uint32_t* row = reinterpret_cast<uint32_t*>(s_in + tl * kAStride + cv * 8) + i;
#pragma unroll
      for (int s = 0; s < kN; ++s) row[s * kChunkCols / 2] = x[s];
      if (p.residual_out != nullptr) {
        bf16_t* out = p.residual_out + t * p.residual_out_stride + col0 + cv * 8 + 2 * i;
#pragma unroll
        for (int s = 0; s < kN; ++s) st4(out + s * p.H, x[s]);
      }
    }
    __syncthreads();
  }
  // The post (unless column-pair mode has formed it), residual_out, the A tiles (in place) and
  // the sums of squares: item (row, 8-column vector), 16 items a row; a warp's 32 items are two
  // whole rows (the butterfly's lanes), so every warp runs each pass whole; invalid rows are zero
  // rows.
  for (int it = tid; it < groups * kThreadsB; it += kDecodeBlock) {
    const int tl = it / (kChunkCols / 8), cv = it % (kChunkCols / 8);
    bf16_t* row = s_in + tl * kAStride + cv * 8;
    uint4 x[kN];
    if (pairs && rows.valid(tl)) {
#pragma unroll
      for (int s = 0; s < kN; ++s) x[s] = *reinterpret_cast<const uint4*>(row + s * kChunkCols);
    } else if (rows.valid(tl)) {
      const int64_t t = rows.token(tl), col0 = rows.col0(tl);
      uint4 r[kN];
      if (kStaged) {
#pragma unroll
        for (int s = 0; s < kN; ++s) r[s] = *reinterpret_cast<const uint4*>(row + s * kChunkCols);
      } else {
        const bf16_t* res = p.residual + t * p.residual_stride + col0 + cv * 8;
#pragma unroll
        for (int s = 0; s < kN; ++s) r[s] = ldcg16(res + s * p.res_stream_stride);
      }
      if (kPost && kStaged) {
        const uint4 lo = *reinterpret_cast<const uint4*>(s_lo + tl * kChunkCols + cv * 8);
        const float* mix = s_mix + tl * kMixes;
        post8(post_weights(mix, mix + kN), r, lo, x);
      } else if (kPost) {
        const uint4 lo = ldcg16(p.layer_output + t * p.layer_output_stride + col0 + cv * 8);
        post8(token_post_weights(p, t), r, lo, x);
      } else {
#pragma unroll
        for (int s = 0; s < kN; ++s) x[s] = r[s];
      }
      if (p.residual_out != nullptr) {
#pragma unroll
        for (int s = 0; s < kN; ++s) st16(p.residual_out + t * p.residual_out_stride + s * p.H + col0 + cv * 8, x[s]);
      }
    } else {
#pragma unroll
      for (int s = 0; s < kN; ++s) x[s] = make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int s = 0; s < kN; ++s) *reinterpret_cast<uint4*>(row + s * kChunkCols) = x[s];
    const float sq = chunk_squares_butterfly(vector_squares(x));
    if (cv == 0) s_sq[tl] = sq;
  }
  __syncthreads();
  {
    // Warp (j, blk): per group, the hi, mid and lo chains of rows 8 blk .. 8 blk + 7 over stream
    // j's 128 columns.
    const int j = w / 3, blk = w % 3, g = lane >> 2, q = lane & 3;
    for (int grp = 0; grp < groups; ++grp) {
      uint2 bg[3][kMmaSteps];
      b(grp, bg);
      float acc[3][4];
#pragma unroll
      for (int part = 0; part < 3; ++part) acc[part][0] = acc[part][1] = acc[part][2] = acc[part][3] = 0.0f;
      const uint32_t a_base =
          static_cast<uint32_t>(__cvta_generic_to_shared(s_in)) +
          static_cast<uint32_t>(((grp * kGroup + (lane & 15)) * kAStride + j * kChunkCols + (lane >> 4) * 8) * 2);
#pragma unroll
      for (int ks = 0; ks < kMmaSteps; ++ks) {
        uint32_t a0, a1, a2, a3;
        ldmatrix_x4(a_base + ks * 32, a0, a1, a2, a3);
#pragma unroll
        for (int part = 0; part < 3; ++part) mma_bf16(acc[part], a0, a1, a2, a3, bg[part][ks].x, bg[part][ks].y);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int tok = g + 8 * (e >> 1), row = blk * 8 + 2 * q + (e & 1);
        s_red[((grp * kN + j) * kGroup + tok) * kRows + row] = acc[0][e] + (acc[1][e] + acc[2][e]);
      }
    }
  }
  __syncthreads();
  for (int idx = tid; idx < nrows * kPartial; idx += kDecodeBlock) {
    const int tl = rows.row(idx / kPartial), r = idx % kPartial, grp = tl / kGroup, tt = tl % kGroup;
    float v;
    if (r == kRows) {
      v = s_sq[tl];
    } else {
      v = s_red[(grp * kN * kGroup + tt) * kRows + r];
#pragma unroll
      for (int j = 1; j < kN; ++j) v += s_red[((grp * kN + j) * kGroup + tt) * kRows + r];
    }
    sink(tl, r, v);
  }
}

/// phase1_run's BFrag for a block whose groups all belong to one chunk: every group gets the
/// fragments b the warp loaded once (load_warp_fragments).
__device__ __forceinline__ auto same_fragments(const uint2 (&b)[3][kMmaSteps]) {
  return [&b](int, uint2(&bg)[3][kMmaSteps]) {
#pragma unroll
    for (int part = 0; part < 3; ++part) {
#pragma unroll
      for (int ks = 0; ks < kMmaSteps; ++ks) bg[part][ks] = b[part][ks];
    }
  };
}

/// The B fragments of warp (j, blk) for chunk c: the hi, mid, lo n-tiles of row block blk of stream
/// j over the 8 k16 steps (weights: callers load them before pdl_wait).
__device__ __forceinline__ void load_warp_fragments(const N4Params& p, int c, uint2 (&b)[3][kMmaSteps]) {
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int j = w / 3, blk = w % 3;
  const uint2* base = p.fn_frag + static_cast<int64_t>(c) * kFragWords + j * kMmaSteps * kNTiles * 32 + lane;
#pragma unroll
  for (int part = 0; part < 3; ++part) {
#pragma unroll
    for (int ks = 0; ks < kMmaSteps; ++ks) b[part][ks] = __ldg(base + (ks * kNTiles + part * 3 + blk) * 32);
  }
}

#endif  // __CUDACC__

}  // namespace mhc::cuda::n4

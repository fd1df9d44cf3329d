// src/cuda/n4/decode_kernel.cu - every n = 4 operator with a mixes stage in ONE launch, for small
// T (decode and speculative verify: T <= decode_tokens of the workspace, at most 128).
//
// What it computes: the same outputs, bit for bit, as the cuda_n4 plan (mix_kernel ->
// collapse_kernel): optional post stage, the mixes in the canonical order of config.cuh, the
// epilogue (epilogue.cuh), the collapse and RMSNorm fold (collapse_row.cuh).
// Grid mapping: 256-thread blocks, one per phase-1 unit plus one per phase-2 task. A block's
// role comes from a ticket it takes when it starts (an atomic counter in the workspace), not
// from blockIdx, so a block that waits knows that every block it waits for is already running:
// no co-residency is needed and two such kernels on two streams cannot deadlock.
//   Phase 1, tickets 0 .. 4 * H/128 - 1, one (chunk c, stream j) unit each: for each group of 64
//     tokens, the post stage of the chunk's 128 columns (post8 for all 4 streams of a (token,
//     8-column vector); the unit keeps stream j), residual_out of stream j, the chunk's sum of
//     squares (j = 0), then the 24 dots of stream j on tensor cores: warp w owns n-tile w (warp
//     0 also n-tile 8), its B fragments of (c, j) in registers (loaded before pdl_wait: they
//     are weights), A from the shared-memory tile by ldmatrix. The per-stream values
//     v = hi + (mid + lo) go to the workspace [token][chunk][stream][25]; then the unit arrives.
//   Phase 2, the next tickets: one block per token for the collapse (canonical sum of the
//     partials, the fresh pre, collapse_row) and one per token for the epilogue outputs (post,
//     comb: the Sinkhorn chain), so a token's two serial parts run side by side. They wait for
//     every unit to arrive; the last to finish resets the counters for the next launch (the
//     workspace's counters are zeroed once by Workspace::create; graph replays reuse them).
// Accumulation: mma.m16n8k16 bf16 x three bf16 parts of fn, fp32 (as mix_kernel); fp32 sums in
// the canonical order; exact sums for post and collapse.
// Envelope: n4_supports(), an op with a mixes stage, 1 <= T <= decode_tokens (the workspace's).
#include "src/cuda/launch.cuh"
#include "src/cuda/n4/canonical.cuh"
#include "src/cuda/n4/collapse_row.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/n4/post8.cuh"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda::n4 {

namespace {

constexpr int kWarps = kDecodeThreads / 32;
constexpr int kGroup = 64;                    // tokens per phase-1 pass (4 m16 tiles)
constexpr int kDXStride = kChunkCols + 8;     // padded A row: conflict-free ldmatrix
constexpr int kUnitPartial = kN * kPartial;   // floats per (token, chunk): [stream][25]
constexpr int kTileBytes = kGroup * kDXStride * 2;
constexpr int kRedBytes = kNTiles * kGroup * 8 * 4;  // [n-tile][token][8 rows] fp32
constexpr int kRowBytes = kMaxH * 2;                 // the collapsed row / RMSNorm weight
constexpr int kRowRegs = 4;  // vectors per thread a collapse block holds in registers (H <= 8192)
static_assert(kDecodeThreads == kThreadsB, "collapse_row's fold order needs kThreadsB threads");
static_assert(kDecodeThreads == 16 * 16, "phase 1: thread (token row, 8-column vector) of a 16-token pass");
static_assert(kNTiles == kWarps + 1, "warp 0 takes the ninth n-tile");
static_assert(kTileBytes % 16 == 0 && kRedBytes % 16 == 0, "smem layout");

struct DecodeParams {
  N4Params p;
  float* dp;          // [T][chunks][4][25] per-stream partials (workspace scratch)
  uint32_t* counters; // [3]: tickets taken, units arrived, phase-2 blocks done (0 between launches)
  int32_t units;      // phase-1 blocks: 4 * chunks
  int32_t collapse_blocks, epilogue_blocks;  // phase-2 blocks: T each (or 0)
};

enum Counter { kTickets = 0, kArrived = 1, kDone = 2 };

// A unit's arrival, after all its threads' partial and residual_out writes: the block barrier
// orders them before thread 0's release add (cumulative), which the thread does not wait for.
__device__ __forceinline__ void arrive(uint32_t* counters) {
  __syncthreads();
  if (threadIdx.x == 0) red_add_release_gpu(counters + kArrived, 1u);
}

// Phase 2 starts once every unit has arrived (acquire); the units hold lower tickets, so they
// are all running or done.
__device__ __forceinline__ void wait_for_units(uint32_t* counters, uint32_t units) {
  if (threadIdx.x == 0) {
    while (ld_acquire_gpu(counters + kArrived) < units) {
    }
    __threadfence();
  }
  __syncthreads();
}

// The last block to finish resets the counters for the next launch (nothing reads them after).
__device__ __forceinline__ void finish(uint32_t* counters, uint32_t blocks_waited_for) {
  __syncthreads();
  if (threadIdx.x == 0 && atom_add_acq_rel_gpu(counters + kDone, 1u) == blocks_waited_for - 1) {
    counters[kTickets] = 0;
    counters[kArrived] = 0;
    counters[kDone] = 0;
    __threadfence();
  }
}

// B fragments of unit (c, j) for warp w's n-tiles, 8 k16 steps each.
__device__ __forceinline__ void load_b(const N4Params& p, int c, int j, int w, int lane, uint2 (&b)[2][kMmaSteps]) {
  const uint2* base = p.fn_frag + static_cast<int64_t>(c) * kFragWords + j * kMmaSteps * kNTiles * 32;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int nt = i == 0 ? w : kNTiles - 1;
    if (i == 1 && w != 0) break;
#pragma unroll
    for (int ks = 0; ks < kMmaSteps; ++ks) b[i][ks] = __ldg(base + (ks * kNTiles + nt) * 32 + lane);
  }
}

// v[j] for a runtime j without indexing a register array (which would go to local memory).
__device__ __forceinline__ uint4 pick(const uint4 (&v)[kN], int j) {
  return j == 0 ? v[0] : j == 1 ? v[1] : j == 2 ? v[2] : v[3];
}

// Phase 1 of unit (c, j) for tokens [g0, g0 + kGroup).
__device__ __forceinline__ void unit_group(const DecodeParams& d, int c, int j, int64_t g0, const uint2 (&b)[2][kMmaSteps],
                                           unsigned char* smem) {
  const N4Params& p = d.p;
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
  const int tt = tid >> 4, cv = tid & 15;
  bf16_t* tile = reinterpret_cast<bf16_t*>(smem);
  float* red = reinterpret_cast<float*>(smem + kTileBytes);
  const int64_t col0 = static_cast<int64_t>(c) * kChunkCols + cv * 8;
  const int64_t left = p.T - g0;
  const int ntok = static_cast<int>(left < kGroup ? left : kGroup);
  // Post stage (or the input streams) into the A tile, as mix_post_item computes it.
  for (int pass = 0; pass < (ntok + 15) / 16; ++pass) {
    const int tl = pass * 16 + tt;
    const int64_t t = g0 + tl;
    const bool valid = tl < ntok;
    uint4 x[kN];
    if (valid) {
      const bf16_t* res = p.residual + t * p.residual_stride + col0;
      uint4 r[kN];
#pragma unroll
      for (int s = 0; s < kN; ++s) r[s] = ldcg16(res + s * p.res_stream_stride);
      if (p.has_post) {
        const uint4 lo = ldcg16(p.layer_output + t * p.layer_output_stride + col0);
        post8(token_post_weights(p, t), r, lo, x);
        x[0] = x[j];
      } else {
#pragma unroll
        for (int s = 0; s < kN; ++s) x[s] = r[s];
        x[0] = pick(r, j);
      }
      if (p.residual_out != nullptr) st16(p.residual_out + t * p.residual_out_stride + j * p.H + col0, x[0]);
    } else {
#pragma unroll
      for (int s = 0; s < kN; ++s) x[s] = make_uint4(0, 0, 0, 0);
    }
    *reinterpret_cast<uint4*>(tile + tl * kDXStride + cv * 8) = x[0];
    if (j == 0) {
      // x[0] is stream 0 here (j = 0), x[1..3] the other streams, as mix_post_item sums them.
      const float sq = chunk_squares_butterfly(vector_squares(x));
      if (cv == 0 && valid) d.dp[(t * p.chunks + c) * kUnitPartial + kRows] = sq;
    }
  }
  __syncthreads();
  // The dots of stream j: warp w, n-tile w (and 8), every m16 tile of the group.
  const int g = lane >> 2, q = lane & 3;
  const uint32_t tile_s = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  const int mtiles = (ntok + 15) / 16;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (i == 1 && w != 0) break;
    const int nt = i == 0 ? w : kNTiles - 1;
    for (int m = 0; m < mtiles; ++m) {
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int ks = 0; ks < kMmaSteps; ++ks) {
        const int row = m * 16 + (lane & 15);
        const int k = ks * 16 + (lane >> 4) * 8;
        uint32_t a0, a1, a2, a3;
        ldmatrix_x4(tile_s + static_cast<uint32_t>((row * kDXStride + k) * 2), a0, a1, a2, a3);
        mma_bf16(acc, a0, a1, a2, a3, b[i][ks].x, b[i][ks].y);
      }
      float* rr = red + (nt * kGroup + m * 16 + g) * 8 + 2 * q;
      rr[0] = acc[0];
      rr[1] = acc[1];
      rr[8 * 8] = acc[2];
      rr[8 * 8 + 1] = acc[3];
    }
  }
  __syncthreads();
  // v = hi + (mid + lo) per (token, row), as mix_mma_item sums the parts.
  for (int idx = tid; idx < ntok * kRows; idx += kDecodeThreads) {
    const int tl = idx / kRows, r = idx % kRows;
    const int blk = r / 8, col = r % 8;
    const float hi = red[(blk * kGroup + tl) * 8 + col];
    const float mid = red[((3 + blk) * kGroup + tl) * 8 + col];
    const float lo = red[((6 + blk) * kGroup + tl) * 8 + col];
    d.dp[((g0 + tl) * p.chunks + c) * kUnitPartial + j * kPartial + r] = hi + (mid + lo);
  }
  __syncthreads();  // the tile and red are rewritten by the next group
}

// The token's 24 dots and sum of squares in the canonical order (collapse_kernel's partial sum:
// the chunk partial ((v_0 + v_1) + v_2) + v_3, then 8 interleaved groups of chunks, then the
// groups in order) into s_dot[25]. All threads call it.
__device__ __forceinline__ void token_sums(const DecodeParams& d, int64_t t, float (*s_part)[kPartial], float* s_dot) {
  const N4Params& p = d.p;
  const int tid = threadIdx.x;
  if (tid < kPartialSplit * kPartial) {
    const int part = tid / kPartial, r = tid % kPartial;
    const float* src = d.dp + t * p.chunks * kUnitPartial + r;
    // The chunk partial ((v_0 + v_1) + v_2) + v_3 of the 4 streams' values (the sum of squares
    // sits in stream 0's slot alone).
    const float s = chunk_group_sum(part, p.chunks, [&](int c) {
      const float* u = src + c * kUnitPartial;
      if (r == kRows) return __ldcg(u);
      float v = __ldcg(u);
#pragma unroll
      for (int j = 1; j < kN; ++j) v += __ldcg(u + j * kPartial);
      return v;
    });
    s_part[part][r] = s;
  }
  __syncthreads();
  if (tid < kPartial) s_dot[tid] = groups_total(s_part, tid);
  __syncthreads();
}

// The fresh pre of token t into s_pre (computed), or its carried pre; s_dot holds its sums.
__device__ __forceinline__ void collapse_weights(const N4Params& p, int64_t t, bool computed, const float* s_dot,
                                                 float* s_pre) {
  const int tid = threadIdx.x;
  if (computed) {
    if (tid == 0) {
      float pre[kN];
      mixes_pre<kN>(p.epi, s_dot, s_dot[kRows], p.inv_k, pre);
#pragma unroll
      for (int j = 0; j < kN; ++j) s_pre[j] = pre[j];
    }
  } else if (p.pre_source == PreSource::kCarried && tid < kN) {
    s_pre[tid] = __ldcg(p.pre_mix_in + t * p.pre_mix_in_stride + tid);
  }
}

__global__ void __launch_bounds__(kDecodeThreads, 2) decode_kernel(const DecodeParams d) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float scratch[kDecodeThreads / 32];
  __shared__ float s_part[kPartialSplit][kPartial];
  __shared__ float s_dot[kPartial];
  __shared__ float s_pre[kN];
  __shared__ int s_ticket;
  const N4Params& p = d.p;
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
  pdl_launch_dependents();  // every block is running once the next kernel may start
  // B fragments of the unit this block most likely gets (its ticket is usually blockIdx.x):
  // weights, so loaded before pdl_wait, overlapping the kernel before.
  uint2 b[2][kMmaSteps];
  const int guess = static_cast<int>(blockIdx.x);
  if (guess < d.units) load_b(p, guess >> 2, guess & 3, w, lane, b);
  pdl_wait();  // the counters, the inputs and the scratch belong to this launch from here on
  if (tid == 0) s_ticket = static_cast<int>(atomicAdd(d.counters + kTickets, 1u));
  __syncthreads();
  const int ticket = s_ticket;
  const uint32_t phase2_blocks = static_cast<uint32_t>(d.collapse_blocks + d.epilogue_blocks);

  if (ticket < d.units) {
    if (ticket != guess) load_b(p, ticket >> 2, ticket & 3, w, lane, b);
    for (int64_t g0 = 0; g0 < p.T; g0 += kGroup) unit_group(d, ticket >> 2, ticket & 3, g0, b, smem);
    arrive(d.counters);
    if (phase2_blocks == 0) finish(d.counters, static_cast<uint32_t>(d.units));
    return;
  }
  const int task = ticket - d.units;
  const bool collapse_task = task < d.collapse_blocks;
  const int64_t t = collapse_task ? task : task - d.collapse_blocks;
  const bool fold = p.rmsnorm_weight != nullptr;
  const int64_t vecs = p.H / 8;
  const bool from_registers = vecs <= kRowRegs * kDecodeThreads;  // H <= 8192
  uint4* w_smem = reinterpret_cast<uint4*>(smem);
  if (collapse_task && fold && from_registers) {
    // The RMSNorm weight (a weight: no dependence on the units) while the units run.
    for (int64_t v = tid; v < vecs; v += kDecodeThreads) cp_async16_keep(w_smem + v, p.rmsnorm_weight + v * 8);
  }
  cp_async_commit();
  wait_for_units(d.counters, static_cast<uint32_t>(d.units));
  const bool computed = p.pre_source == PreSource::kComputed && !p.head_mean;
  if (from_registers && collapse_task) {
    // Every load of the token issued before any arithmetic: its streams, then its partials.
    uint4 r[kRowRegs][kN];
    load_row<kRowRegs>(p, t, r, false);
    if (computed) token_sums(d, t, s_part, s_dot);
    collapse_weights(p, t, computed, s_dot, s_pre);
    cp_async_wait<0>();
    __syncthreads();
    uint4 wr[kRowRegs];
#pragma unroll
    for (int i = 0; i < kRowRegs; ++i) {
      const int64_t v = tid + i * kDecodeThreads;
      wr[i] = fold && v < vecs ? w_smem[v] : make_uint4(0, 0, 0, 0);
    }
    collapse_loaded<kRowRegs>(p, t, s_pre, r, wr, scratch);
  } else if (collapse_task) {
    if (computed) token_sums(d, t, s_part, s_dot);
    collapse_weights(p, t, computed, s_dot, s_pre);
    __syncthreads();
    collapse_row<true>(p, t, s_pre, smem, scratch);
  } else {
    token_sums(d, t, s_part, s_dot);
    if (tid == 0) {
      float pre[kN];
      mixes_epilogue<kN>(p.epi, s_dot, s_dot[kRows], p.inv_k, t, pre);
    }
  }
  finish(d.counters, phase2_blocks);
}

}  // namespace

constexpr size_t kDecodeSmem = static_cast<size_t>(kTileBytes) + kRedBytes > kRowBytes
                                   ? static_cast<size_t>(kTileBytes) + kRedBytes
                                   : static_cast<size_t>(kRowBytes);
static_assert(kDecodeSmem <= 48 * 1024, "decode_kernel: no opt-in shared memory needed");

size_t decode_scratch_bytes(int64_t tokens) {
  return static_cast<size_t>(tokens) * kMaxChunks * kUnitPartial * sizeof(float);
}

void launch_decode_kernel(const N4Params& p, float* scratch, uint32_t* counters, const LaunchCtx& ctx) {
  DecodeParams d{};
  d.p = p;
  d.dp = scratch;
  d.counters = counters;
  d.units = kN * p.chunks;
  d.collapse_blocks = p.has_collapse ? static_cast<int32_t>(p.T) : 0;
  d.epilogue_blocks = p.epi.head ? 0 : static_cast<int32_t>(p.T);
  const int32_t blocks = d.units + d.collapse_blocks + d.epilogue_blocks;
  launch_kernel(decode_kernel, dim3(static_cast<unsigned>(blocks)), kDecodeThreads, kDecodeSmem, ctx, d);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_decode_kernels(KernelList& out) {
  add_kernel(out, decode_kernel, "n4::decode_kernel");
}

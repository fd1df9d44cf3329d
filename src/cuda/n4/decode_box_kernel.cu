// src/cuda/n4/decode_box_kernel.cu - every n = 4 operator with a mixes stage but pre_broadcast in
// ONE launch for 1 <= T <= 16 (decode), with no arrival counter: the chunk partials go through a
// poisoned mailbox and each token's block forms its own new residual.
//
// What it computes: the same outputs, bit for bit, as every other n4 variant (decode_chunk_kernel's
// phase 1 and phase 2, split differently over the blocks).
// Grid mapping: chunks + T blocks of 384 threads. Block c < chunks (phase 1) runs decode_chunk_kernel's
// phase 1 for chunk c and all T tokens (one group: decode_phase1.cuh; at T = 1 its column-pair
// mode): post8, residual_out, the A tile, the mma chains, and then stores each chunk partial
// with a relaxed store into the mailbox ([T][chunks][25] floats in the workspace, every float
// kBoxPoison between launches), and exits. Block chunks + t (phase 2) serves token t:
//   - warps 0-7 load the token's inputs right after pdl_wait and form its new residual themselves
//     (post8 of every vector, the same arithmetic as phase 1's, so the same bits), or load its
//     streams where the op has no post; then, with the pre (carried, computed by warp 9, or none),
//     collapse and fold from registers (collapse_loaded);
//   - warps 8-11 poll the token's words of the mailbox until none is the poison, put the poison
//     back, sum the partials in the canonical order (8 interleaved chunk groups, then the groups),
//     and run the epilogue: warp 8 the comb's Sinkhorn chain (kCombLanes: on 16 of its lanes,
//     mixes_comb_lanes, the same bits; else on lane 0), warp 9 the fresh pre (for the collapse)
//     and the pre and post outputs.
// Why: decode_chunk_kernel's handoff is a chain of three L2 round trips after phase 1 (the
// arrival's release and atomic, then the partials and the new residual read back); here the
// partials' own stores are the signal (each float is stored once a launch and tested against the
// poison), and the new residual never crosses blocks, so a token's collapse needs nothing from
// phase 1 but its pre. Nothing is counted or reset: each phase-2 block restores the poison of the
// words it read, and the next launch stores them only after its pdl_wait (this grid complete).
// Phase-2 blocks spin; phase-1 blocks never wait, so they find multiprocessors as long as the
// spinning blocks (T <= 16 a launch, one block a multiprocessor at 156 registers) leave some free.
// The envelope also keeps the whole grid within one wave (chunks + T <= the multiprocessors).
// Accumulation: as decode_chunk_kernel (mma chains from zero per (token, chunk, stream, n-tile),
// fp32 sums in the canonical order, exact sums for post and collapse).
// Envelope: decode_box_supports(): H <= 8192 (H / 128 <= 64 chunks: the mailbox, the row in
// registers), T <= 16 (one group a phase-1 block; T = 0 launches nothing), chunks + T <= the multiprocessors.
#include "src/cuda/launch.cuh"
#include "src/cuda/n4/canonical.cuh"
#include "src/cuda/n4/collapse_row.cuh"
#include "src/cuda/n4/decode_phase1.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/n4/post8.cuh"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda::n4 {

namespace {

constexpr int kThreads = kDecodeBlock;            // 384: warp = (stream, row block) in phase 1
constexpr int kCollapseWarps = kThreadsB / 32;    // 8: collapse_loaded's fold order needs 256 threads
constexpr int kPollThreads = kThreads - kThreadsB;  // warps 8-11: the mailbox, then the epilogue
constexpr int kCombWarp = kCollapseWarps;         // warp 8: the comb's Sinkhorn chain
constexpr int kPreWarp = kCollapseWarps + 1;      // warp 9: the fresh pre, the pre and post outputs
constexpr int kRowRegs = 4;                       // row vectors a collapse thread: H <= 8192
constexpr int kBoxTerms = kBoxMaxChunks / kPartialSplit;  // 8: chunks a group at most
constexpr int kItems = kPartialSplit * kPartial;  // 200 (chunk group, row) sums a token
constexpr int kItemsPerThread = (kItems + kPollThreads - 1) / kPollThreads;  // 2
constexpr int kPreBar = 2;   // s_pre written: warps 0-7 wait, warp 9 arrives (computed pre)
constexpr int kPollBar = 3;  // warps 8-11: s_part, then s_dot, written
static_assert(kBoxMaxChunks * kChunkCols == kRowRegs * kThreadsB * 8, "the envelope's H: the row in registers");
static_assert(kBoxTokens <= kGroup, "a phase-1 block serves all tokens as one group");
static_assert(run_smem_bytes(1) >= kBoxMaxChunks * kChunkCols * 2, "phase 2: the RMSNorm weight row in the dynamic shared memory");

struct BoxDecodeParams {
  N4Params p;
  float* box;  // [T][chunks][25]: every float kBoxPoison between launches
};

__device__ __forceinline__ bool poisoned(float v) { return __float_as_uint(v) == kBoxPoison; }

// Phase 1 for chunk c: decode_chunk_kernel's, with the partials stored into the mailbox.
template <bool kPost>
__device__ __forceinline__ void box_phase1(const BoxDecodeParams& d, int c, unsigned char* smem) {
  const N4Params& p = d.p;
  uint2 b[3][kMmaSteps];
  load_warp_fragments(p, c, b);  // weights: before pdl_wait, overlapping the kernel before
  pdl_wait();
  const RunRows rows{0, static_cast<int>(p.T), c};
  phase1_run<kPost, false>(
      p, rows, 1,
      same_fragments(b),
      smem, [&](int tl, int r, float v) { st_relaxed_gpu(d.box + (static_cast<int64_t>(tl) * p.chunks + c) * kPartial + r, v); });
}

// Warps 8-11 of token t's block: the token's 25 sums from the mailbox (polled until every word is
// stored, then poisoned again), in the order of chunk_group_sum and groups_total, into s_dot.
__device__ __forceinline__ void box_partials(const BoxDecodeParams& d, int64_t t, float (*s_part)[kPartial],
                                             float* s_dot) {
  const N4Params& p = d.p;
  const int q = static_cast<int>(threadIdx.x) - kThreadsB;
  float* token_box = d.box + t * p.chunks * kPartial;
  float v[kItemsPerThread][kBoxTerms];
  auto word = [&](int k, int i) -> float* {  // item q + k * kPollThreads, term i; null if none
    const int item = q + k * kPollThreads, part = item / kPartial, row = item % kPartial, c = part + i * kPartialSplit;
    return item < kItems && c < p.chunks ? token_box + c * kPartial + row : nullptr;
  };
#pragma unroll
  for (int k = 0; k < kItemsPerThread; ++k) {
#pragma unroll
    for (int i = 0; i < kBoxTerms; ++i) v[k][i] = word(k, i) != nullptr ? ld_relaxed_gpu(word(k, i)) : 0.0f;
  }
  for (;;) {
    bool pending = false;
#pragma unroll
    for (int k = 0; k < kItemsPerThread; ++k) {
#pragma unroll
      for (int i = 0; i < kBoxTerms; ++i) pending |= poisoned(v[k][i]);
    }
    if (!pending) break;
    __nanosleep(32);
#pragma unroll
    for (int k = 0; k < kItemsPerThread; ++k) {
#pragma unroll
      for (int i = 0; i < kBoxTerms; ++i) {
        if (poisoned(v[k][i])) v[k][i] = ld_relaxed_gpu(word(k, i));
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kItemsPerThread; ++k) {
    const int item = q + k * kPollThreads;
    if (item >= kItems) continue;
#pragma unroll
    for (int i = 0; i < kBoxTerms; ++i) {
      if (word(k, i) != nullptr) st_relaxed_gpu(word(k, i), __uint_as_float(kBoxPoison));
    }
    const int part = item / kPartial;
    s_part[part][item % kPartial] =
        chunk_group_sum(part, p.chunks, [&](int cc) {
          const int i = (cc - part) / kPartialSplit;  // cc < chunks <= kBoxMaxChunks: i < kBoxTerms
          return i < kBoxTerms ? v[k][i] : 0.0f;
        });
  }
  named_sync(kPollBar, kPollThreads);
  if (q < kPartial) s_dot[q] = groups_total(s_part, q);
  named_sync(kPollBar, kPollThreads);
}

// Warps 0-7 of token t's block: the token's new residual (post8 of every vector) or its streams,
// into r (vector tid + i * 256 in r[i]).
template <bool kPost>
__device__ __forceinline__ void box_row(const N4Params& p, int64_t t, uint4 (&r)[kRowRegs][kN]) {
  if constexpr (!kPost) {
    load_row<kRowRegs>(p, t, r, false);
  } else {
    const int64_t vecs = p.H / 8;
    uint4 lo[kRowRegs];
#pragma unroll
    for (int i = 0; i < kRowRegs; ++i) {
      const int64_t v = threadIdx.x + i * kThreadsB;
      if (v >= vecs) continue;
      const bf16_t* res = p.residual + t * p.residual_stride + v * 8;
#pragma unroll
      for (int s = 0; s < kN; ++s) r[i][s] = ldcg16(res + s * p.res_stream_stride);
      lo[i] = ldcg16(p.layer_output + t * p.layer_output_stride + v * 8);
    }
    const PostWeights pw = token_post_weights(p, t);
#pragma unroll
    for (int i = 0; i < kRowRegs; ++i) {
      if (threadIdx.x + i * kThreadsB >= vecs) continue;
      uint4 x[kN];
      post8(pw, r[i], lo[i], x);
#pragma unroll
      for (int s = 0; s < kN; ++s) r[i][s] = x[s];
    }
  }
}

template <bool kPost, bool kCombLanes>
__global__ void __launch_bounds__(kThreads, 1) decode_box_kernel(const BoxDecodeParams d) {
  extern __shared__ __align__(16) unsigned char smem[];  // run_smem_bytes(1): phase 1's run
  __shared__ float s_part[kPartialSplit][kPartial];
  __shared__ float s_dot[kPartial];
  __shared__ float s_pre[kN];
  __shared__ float s_scratch[kCollapseWarps];
  __shared__ float s_scale[3], s_base[kRows];
  const N4Params& p = d.p;
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
  pdl_launch_dependents();
  if (static_cast<int>(blockIdx.x) < p.chunks) {
    box_phase1<kPost>(d, static_cast<int>(blockIdx.x), smem);
    return;
  }
  // Phase 2, token t. The weights first (before pdl_wait): the epilogue's scale and base, and
  // each collapse thread's vectors of the RMSNorm weight (by cp.async into the dynamic shared
  // memory, which phase 2 does not otherwise use: in registers they would spill beside the post's
  // operands).
  const int64_t t = static_cast<int64_t>(blockIdx.x) - p.chunks;
  if (tid < (p.epi.head ? 1 : 3)) s_scale[tid] = p.epi.scale[tid];
  if (tid >= 32 && tid < 32 + (p.epi.head ? kN : kRows)) s_base[tid - 32] = p.epi.base[tid - 32];
  const bool fold = p.has_collapse && p.rmsnorm_weight != nullptr;
  const int64_t vecs = p.H / 8;
  uint4* s_weight = reinterpret_cast<uint4*>(smem);
#pragma unroll
  for (int i = 0; i < kRowRegs; ++i) {
    const int64_t v = tid + i * kThreadsB;
    if (fold && tid < kThreadsB && v < vecs) cp_async16_keep(s_weight + v, p.rmsnorm_weight + v * 8);
  }
  cp_async_commit();
  pdl_wait();
  __syncthreads();  // s_scale, s_base written
  const bool computed = p.has_collapse && p.pre_source == PreSource::kComputed && !p.head_mean;
  if (w < kCollapseWarps) {
    if (!p.has_collapse) return;
    const bool carried = p.pre_source == PreSource::kCarried && tid < kN;
    const float carried_pre = carried ? __ldcg(p.pre_mix_in + t * p.pre_mix_in_stride + tid) : 0.0f;  // with the row's loads
    uint4 r[kRowRegs][kN];
    box_row<kPost>(p, t, r);
    if (carried) s_pre[tid] = carried_pre;
    named_sync(kPreBar, kThreadsB + (computed ? 32 : 0));  // s_pre is written (carried: by threads 0-3)
    cp_async_wait<0>();  // this thread's own copies of the RMSNorm weight
    uint4 wr[kRowRegs];
#pragma unroll
    for (int i = 0; i < kRowRegs; ++i) {
      const int64_t v = tid + i * kThreadsB;
      wr[i] = fold && v < vecs ? s_weight[v] : make_uint4(0, 0, 0, 0);
    }
    collapse_loaded<kRowRegs, kCollapseWarps>(p, t, s_pre, r, wr, s_scratch);
    return;
  }
  box_partials(d, t, s_part, s_dot);
  EpilogueParams epi = p.epi;  // the same arithmetic on the shared-memory copies of the weights
  epi.scale = s_scale;
  epi.base = s_base;
  if (w == kPreWarp) {
    if (computed) {
      if (lane == 0) {
        float pre[kN];
        mixes_pre<kN>(epi, s_dot, s_dot[kRows], p.inv_k, pre);
#pragma unroll
        for (int j = 0; j < kN; ++j) s_pre[j] = pre[j];
      }
      __syncwarp();
      named_arrive(kPreBar, kThreadsB + 32);  // the whole warp: the collapse may start
    }
    if (lane == 0 && !p.epi.head) {
      float pre[kN];
      mixes_epilogue<kN>(epi, s_dot, s_dot[kRows], p.inv_k, t, pre, kEpiPrePost);
    }
  } else if (w == kCombWarp && kCombLanes) {
    mixes_comb_lanes(epi, s_dot, s_dot[kRows], p.inv_k, t);
  } else if (w == kCombWarp && lane == 0 && !p.epi.head) {
    float pre[kN];
    mixes_epilogue<kN>(epi, s_dot, s_dot[kRows], p.inv_k, t, pre, kEpiComb);
  }
}

}  // namespace

bool decode_box_supports(int64_t H, int64_t T, int num_sms) {
  const int64_t chunks = H / kChunkCols;
  return H % kSliceK == 0 && chunks <= kBoxMaxChunks && T >= 0 && T <= kBoxTokens && chunks + T <= num_sms;
}

void launch_decode_box_kernel(const N4Params& p, float* box, bool comb_lanes, const LaunchCtx& ctx) {
  if (p.T <= 0) return;
  const BoxDecodeParams d{p, box};
  auto kernel = comb_lanes ? (p.has_post ? decode_box_kernel<true, true> : decode_box_kernel<false, true>)
                           : (p.has_post ? decode_box_kernel<true, false> : decode_box_kernel<false, false>);
  launch_kernel(kernel, dim3(static_cast<unsigned>(p.chunks + p.T)), kThreads, static_cast<size_t>(run_smem_bytes(1)),
                ctx, d);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_decode_box_kernels(KernelList& out) {
  add_kernel(out, decode_box_kernel<false, false>, "n4::decode_box_kernel<false, false>");
  add_kernel(out, decode_box_kernel<true, false>, "n4::decode_box_kernel<true, false> (post)");
  add_kernel(out, decode_box_kernel<false, true>, "n4::decode_box_kernel<false, true> (comb on 16 lanes)");
  add_kernel(out, decode_box_kernel<true, true>, "n4::decode_box_kernel<true, true> (post, comb on 16 lanes)");
}

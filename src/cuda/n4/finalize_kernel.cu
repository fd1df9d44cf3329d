// src/cuda/n4/finalize_kernel.cu - the mixes epilogue of the staged n = 4 plan
// (src/cuda/n4/staged.cu): from the partials [chunk][token][25] of p.T tokens (partial_at), or
// from gemm_group_kernel's group runs [group][tiles x 32][25] (each group's chunks already
// summed in order), each token's 24 dot products and sum of squares in the canonical order
// (src/cuda/n4/config.cuh), then mixes_epilogue<4> (src/cuda/epilogue.cuh: sigmoids, Sinkhorn),
// writing the requested mixes and, for a collapse that follows, the fresh pre into a [T][4]
// buffer of the workspace: the scratch, or the pre mailbox that collapse_stream_kernel polls, so
// a token's pre is stored before its comb's Sinkhorn chain.
//
// Grid mapping: a 256-thread block per run of up to kFinTokens tokens over chunk partials
// (kFinGroupTokens over group runs; fewer where T is small, so that every multiprocessor has a
// block). The block's partials of one run are count x 25 consecutive floats; thread tid sums
// the elements e = tid, tid + 256, .. of that run (element e is row e % 25 of token e / 25) over
// every run, kept as 8 group sums, so each load instruction of the block reads consecutive
// floats and a thread has a group's worth of runs (8 loads an element) in flight. Over chunk
// partials of more than 4 rounds (H > 4096) and at most 2 x SMs x 10 tokens, the round-batched
// form: kFinRoundTokens = 10 tokens a block, one element a thread, 8 rounds of its runs (64
// loads) in flight at once instead of one round at a time. Then thread t
// runs the epilogue of token t: the serial chains of 32 (64) tokens share one (two) warps, and
// several blocks per multiprocessor overlap theirs.
// The poll form (the cuda_n4_overlap rows, launch_finalize_poll_kernel): persistent blocks take
// the 32-token tiles in turn, each once the GEMM stage running beside it has counted all the
// tile's chunks in the workspace's tile counters (see finalize_kernel's kPoll).
// Accumulation: the sums of collapse_kernel, bit for bit: group g is the 16 terms chunk g,
// g + 8, ... in order with 0.0f for chunks >= p.chunks, then the 8 groups in order from group 0
// (see finish_group for the zero terms; a group run is the sum of the group's real terms in
// that order, so both layouts give the same bits). The epilogue is the shared code path, so the
// mixes are the bits of the cuda_n4 rows.
// Envelope: n = 4, H % 512 == 0, H <= 16384 (the n4 envelope); p.partials of p.T tokens.
#include <cstdlib>

#include "src/cuda/launch.cuh"
#include "src/cuda/n4/canonical.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda::n4 {

namespace {

constexpr int kFinTokens = 32;       // tokens per block at most over chunk partials (one warp of epilogues)
constexpr int kFinGroupTokens = 64;  // ... over group runs (8 loads a token and row: two warps of epilogues)
constexpr int kFinThreads = 256;
constexpr int kFinRoundTokens = kFinThreads / kPartial;  // 10: one element a thread (the round-batched form)
constexpr int kRoundBatch = 8;      // the round-batched form's rounds in flight at once (8 x 8 loads)
// Elements (token, row) a thread sums for a block of kTokens tokens.
constexpr int elems_of(int tokens) { return (tokens * kPartial + kFinThreads - 1) / kFinThreads; }
constexpr int kGroupTerms = kMaxChunks / kPartialSplit; // 16 terms per group

struct FinalizeParams {
  N4Params p;
  float* pre;         // [p.T][4] fresh pre for the collapse, or null
  int32_t per_block;  // tokens per block, 1 .. the kernel's kTokens
};

// Group g's sum once its real terms (chunks g, g + 8, .. < chunks, n_real of them) are added in
// order: collapse_kernel adds all 16 terms, the missing ones as 0.0f; adding +0.0f k >= 1 times
// equals adding it once (x + 0 = x except -0 + 0 = +0, and a NaN stays the canonical NaN), so
// one +0.0f where a zero term exists, and 0.0f for a group without real terms. (No nsz: without
// fast-math the compiler keeps x + 0.0f.)
__device__ __forceinline__ float finish_group(float s, int n_real) {
  if (n_real == 0) return 0.0f;
  return n_real < kGroupTerms ? s + 0.0f : s;
}

// kTokens tokens a block at most; kMinBlocks resident blocks a multiprocessor; kBatch of the
// thread's kElems elements summed at a time (kBatch x 8 loads in flight); kGrouped: p.partials
// holds gemm_group_kernel's group runs. The default over chunk partials is <32, 2, kElems> (all
// at once); the diagnostics build (-DMHC_GEMM_PROBE, MHC_FINALIZE_PROBE) also has <32, 4, 2>,
// fewer registers so that a T = 16384 slice's 512 blocks are one wave. Over group runs <64, 2,
// kElems, true>: 8 loads an element, so a block can take 64 tokens (two warps of epilogues)
// and a T = 16384 slice is one wave of 256 blocks. kRounds > 0 (the round-batched form, chunk
// partials of up to kFinRoundTokens tokens a block): one element a thread, its rounds kRounds at
// a time, so that a round's loads do not wait for the round before (the other form makes one
// dependent L2 round trip a round: 7 at H = 7168). Every element's arithmetic is the same in all.
// kPoll (the poll form, <32, 4, 2>, over chunk partials): the block takes the 32-token tiles
// blockIdx.x, + gridDim.x, .. in turn; thread 0 waits until the tile's counter
// (p.tile_arrivals) reaches p.chunks, the GEMM stage's items of the tile having arrived, and
// puts it back to 0 (nothing else touches it in this launch); the block's barrier then orders
// the tile's loads after that acquire. It does not wait for the GEMM stage to complete, except
// at its end, so that its completion implies the GEMM stage's.
template <int kTokens, int kMinBlocks, int kBatch, bool kGrouped = false, int kRounds = 0, bool kPoll = false>
__global__ void __launch_bounds__(kFinThreads, kMinBlocks) finalize_kernel(const FinalizeParams f) {
  constexpr int kElems = elems_of(kTokens);
  static_assert(kElems % kBatch == 0, "finalize_kernel: whole element batches");
  static_assert(kRounds == 0 || (kElems == 1 && !kGrouped), "the round-batched form: one element a thread");
  static_assert(kTokens <= kFinThreads, "finalize_kernel: a thread an epilogue");
  static_assert(!kPoll || (kTokens == kTile && !kGrouped && kRounds == 0), "the poll form: a tile of chunk partials");
  __shared__ float s_dot[kTokens][kPartial];         // [token][row]: 24 dots, sum of squares
  const N4Params& p = f.p;
  pdl_launch_dependents();
  if (!kPoll) pdl_wait();  // the partials come from the kernel before this one
  const int tid = threadIdx.x;
  const int64_t tiles = kPoll ? (p.T + kTile - 1) / kTile : 1;
#pragma unroll 1
  for (int64_t it = kPoll ? blockIdx.x : 0; it < tiles; it += kPoll ? gridDim.x : 1) {
    if constexpr (kPoll) {
      if (tid == 0) {
        uint32_t* counter = p.tile_arrivals + it;
        while (ld_acquire_gpu(counter) < static_cast<uint32_t>(p.chunks)) {
        }
        *counter = 0u;
      }
      __syncthreads();  // the tile's loads after thread 0's acquire; s_dot's last readers are done
    }
    // This block's tokens: [t0, t0 + count), 1 <= count <= per_block.
    const int64_t t0 = kPoll ? it * kTile : static_cast<int64_t>(blockIdx.x) * f.per_block;
    const int count = static_cast<int>(p.T - t0 < f.per_block ? p.T - t0 : f.per_block);
    const int run = count * kPartial;                  // the block's floats of one chunk
    const float* base = partial_at(p, t0, 0);
    // Chunk partials: chunks in rounds of 8 (one per group), round i holding chunks 8 i .. 8 i + 7,
    // term i of each group. Group runs: one round, run k holding group k's real terms summed.
    const int64_t run_tokens = kGrouped ? (p.T + kTile - 1) / kTile * kTile : p.T;
    const int64_t chunk_stride = run_tokens * kPartial;  // floats from one run to the next
    const int rounds = kGrouped ? 1 : (p.chunks + kPartialSplit - 1) / kPartialSplit;
    const int runs = kGrouped && p.chunks > kPartialSplit ? kPartialSplit : p.chunks;
    if constexpr (kRounds > 0) {
      if (tid < run) {
        float g[kPartialSplit];                        // the thread's group sums
#pragma unroll 1
        for (int i0 = 0; i0 < rounds; i0 += kRounds) {
          float v[kRounds][kPartialSplit];
#pragma unroll
          for (int b = 0; b < kRounds; ++b) {
#pragma unroll
            for (int k = 0; k < kPartialSplit; ++k) {
              const int c = (i0 + b) * kPartialSplit + k;
              v[b][k] = i0 + b < rounds && c < runs ? __ldcg(base + c * chunk_stride + tid) : 0.0f;
            }
          }
#pragma unroll
          for (int b = 0; b < kRounds; ++b) {
#pragma unroll
            for (int k = 0; k < kPartialSplit; ++k) {
              if (i0 + b < rounds) g[k] = i0 + b == 0 ? v[b][k] : g[k] + v[b][k];
            }
          }
        }
        float s = finish_group(g[0], group_chunks(0, p.chunks));
#pragma unroll
        for (int k = 1; k < kPartialSplit; ++k) s += finish_group(g[k], group_chunks(k, p.chunks));
        s_dot[tid / kPartial][tid % kPartial] = s;
      }
    }
#pragma unroll 1
    for (int e0 = 0; e0 < (kRounds > 0 ? 0 : kElems); e0 += kBatch) {
      float g[kBatch][kPartialSplit];                  // group sums of this batch's elements
      for (int i = 0; i < rounds; ++i) {
        float v[kBatch][kPartialSplit];
#pragma unroll
        for (int k = 0; k < kPartialSplit; ++k) {
          const int c = i * kPartialSplit + k;
#pragma unroll
          for (int e = 0; e < kBatch; ++e) {
            const int idx = tid + (e0 + e) * kFinThreads;
            v[e][k] = c < runs && idx < run ? __ldcg(base + c * chunk_stride + idx) : 0.0f;
          }
        }
#pragma unroll
        for (int e = 0; e < kBatch; ++e) {
#pragma unroll
          for (int k = 0; k < kPartialSplit; ++k) g[e][k] = i == 0 ? v[e][k] : g[e][k] + v[e][k];
        }
      }
#pragma unroll
      for (int e = 0; e < kBatch; ++e) {
        const int idx = tid + (e0 + e) * kFinThreads;
        if (idx < run) {
          // The 8 group sums in order from group 0.
          float s = finish_group(g[e][0], group_chunks(0, p.chunks));
#pragma unroll
          for (int k = 1; k < kPartialSplit; ++k) s += finish_group(g[e][k], group_chunks(k, p.chunks));
          s_dot[idx / kPartial][idx % kPartial] = s;
        }
      }
    }
    __syncthreads();
    if (tid < count) {
      const int64_t t = t0 + tid;
      // The pre and post outputs, then the fresh pre into the buffer, then the comb's Sinkhorn
      // chain: a collapse may be polling for the pre (the pre mailbox: a NaN is stored as the
      // canonical NaN, never the mailbox's poison).
      float pre[kN];
      mixes_epilogue<kN>(p.epi, s_dot[tid], s_dot[tid][kRows], p.inv_k, t, pre, kEpiPrePost);
      if (f.pre != nullptr) {
#pragma unroll
        for (int j = 0; j < kN; ++j) pre[j] = isnan(pre[j]) ? __int_as_float(0x7fffffff) : pre[j];
        *reinterpret_cast<float4*>(f.pre + t * kN) = make_float4(pre[0], pre[1], pre[2], pre[3]);
      }
      mixes_epilogue<kN>(p.epi, s_dot[tid], s_dot[tid][kRows], p.inv_k, t, pre, kEpiComb);
    }
  }  // the tiles (one pass unless kPoll)
  if (kPoll) pdl_wait();  // complete only after the GEMM stage (see above)
}

}  // namespace

void launch_finalize_poll_kernel(const N4Params& p, float* pre, const LaunchCtx& ctx) {
  if (p.T <= 0) return;
  MHC_CHECK(p.tile_arrivals != nullptr, "finalize_kernel (poll): no tile counters");
  MHC_CHECK(pre == nullptr || (reinterpret_cast<uintptr_t>(pre) & 15u) == 0, "finalize_kernel: pre buffer alignment");
  // A block every second multiprocessor by default, each taking every blocks-th tile. Counted,
  // not measured: a tile's loads are 8 (H = 4096) to 14 (7168) dependent L2 round trips, ~1 us
  // each under load, then its epilogue's ~2 us chain, so ~10-16 us a tile; at ~2.6 tiles a us
  // (pre at H = 4096, T = 16384 in 200 us) ~40 blocks keep up. Fewer blocks leave room for a
  // second collapse block beside the GEMM block on the others (64 registers x 256 threads each,
  // the GEMM block 181 x 128). The diagnostics build's MHC_OVERLAP_FINALIZE_BLOCKS sets it.
  const int64_t tiles = (p.T + kTile - 1) / kTile;
  int64_t blocks = ctx.num_sms > 1 ? (ctx.num_sms + 1) / 2 : 1;
#ifdef MHC_GEMM_PROBE
  if (const char* env = std::getenv("MHC_OVERLAP_FINALIZE_BLOCKS"); env != nullptr && std::atoi(env) > 0) {
    blocks = std::atoi(env);
  }
#endif
  blocks = blocks > tiles ? tiles : blocks;
  const FinalizeParams f{p, pre, kTile};
  launch_kernel(finalize_kernel<kTile, 4, 2, false, 0, true>, dim3(static_cast<unsigned>(blocks)), kFinThreads, 0, ctx,
                f);
}

void launch_finalize_kernel(const N4Params& p, float* pre, bool grouped, const LaunchCtx& ctx) {
  if (p.T <= 0) return;
  // Tokens per block: enough blocks for every multiprocessor, at most the kernel's kTokens.
  // The per-token arithmetic does not depend on this choice (batch invariance).
  // Over chunk partials of more than 4 rounds (H > 4096), up to two blocks a multiprocessor of
  // kFinRoundTokens tokens (one wave at kMinBlocks 2) take the round-batched form. On the H200
  // (session 28 calls 5-6) it took 1.4-2 us off mixes, pre and post_pre at H = 7168, T = 512-2048,
  // and left H = 4096 (4 rounds) level at T = 1024 and 0.7-1 us slower at 2048.
  const int64_t sms = ctx.num_sms > 0 ? ctx.num_sms : 1;
  const bool batched_rounds = !grouped && p.chunks > 4 * kPartialSplit && p.T <= 2 * sms * kFinRoundTokens;
  const int64_t most = grouped ? kFinGroupTokens : batched_rounds ? kFinRoundTokens : kFinTokens;
  int64_t per_block = (p.T + sms - 1) / sms;
  per_block = per_block < 1 ? 1 : per_block > most ? most : per_block;
  const int64_t blocks = (p.T + per_block - 1) / per_block;
  MHC_CHECK(blocks < (int64_t{1} << 31), "finalize_kernel: too many tokens in one slice");
  MHC_CHECK(pre == nullptr || (reinterpret_cast<uintptr_t>(pre) & 15u) == 0, "finalize_kernel: pre buffer alignment");
  const FinalizeParams f{p, pre, static_cast<int32_t>(per_block)};
  const dim3 grid(static_cast<unsigned>(blocks));
  if (grouped) {
    launch_kernel(finalize_kernel<kFinGroupTokens, 2, elems_of(kFinGroupTokens), true>, grid, kFinThreads, 0, ctx, f);
    return;
  }
  if (batched_rounds) {
    launch_kernel(finalize_kernel<kFinRoundTokens, 2, 1, false, kRoundBatch>, grid, kFinThreads, 0, ctx, f);
    return;
  }
#ifdef MHC_GEMM_PROBE
  if (const char* probe = std::getenv("MHC_FINALIZE_PROBE"); probe != nullptr && *probe == '1') {
    launch_kernel(finalize_kernel<kFinTokens, 4, 2>, grid, kFinThreads, 0, ctx, f);
    return;
  }
#endif
  launch_kernel(finalize_kernel<kFinTokens, 2, elems_of(kFinTokens)>, grid, kFinThreads, 0, ctx, f);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_finalize_kernels(KernelList& out) {
  add_kernel(out, finalize_kernel<kFinTokens, 2, elems_of(kFinTokens)>, "n4::finalize_kernel");
  add_kernel(out, finalize_kernel<kFinGroupTokens, 2, elems_of(kFinGroupTokens), true>, "n4::finalize_kernel<group runs>");
  add_kernel(out, finalize_kernel<kFinRoundTokens, 2, 1, false, kRoundBatch>, "n4::finalize_kernel<rounds batched>");
  add_kernel(out, finalize_kernel<kTile, 4, 2, false, 0, true>, "n4::finalize_kernel<poll>");
}

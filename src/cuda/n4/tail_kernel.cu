// src/cuda/n4/tail_kernel.cu - the overlap plan's tail (src/cuda/n4/staged.cu): for the slice's
// tokens, the mixes epilogue and the collapse, each group of kTailTokens tokens as soon as
// gemm_kernel<ordered> has stored its tile's partials, so that the collapse reads the streams
// the GEMM has just read while they are still in L2 (the staged plan reads them from DRAM twice).
//
// Grid mapping: one 256-thread block per kTailTokens tokens, blockIdx in token order, the order
// in which the ordered GEMM completes its tiles. The kernel is launched with programmatic
// dependent launch right after the GEMM and does not wait for the GEMM to end: its blocks run
// beside the GEMM's (a 200 KB GEMM block per multiprocessor leaves room for one of these). A
// block's thread 0 waits until tile_arrive[tile] == chunks (acquire); then the block sums its
// tokens' partials (finalize_sums), warp 0 runs their epilogues (mixes_epilogue: the requested
// mixes, and the fresh pre into shared memory), and the block collapses the tokens in order
// (collapse_stream_token). The GEMM's blocks started before any of these (it triggers the launch
// after its own pdl_wait) and never wait for them, so the wait cannot deadlock. The last block
// to finish resets tile_arrive and its own counter for the next launch (zeroed once by
// Workspace::create), as decode_kernel does with its counters.
// Accumulation: finalize_kernel's sums and epilogue, collapse_stream_kernel's collapse and fold:
// the bits of the staged plan.
// Envelope: n = 4 with a computed pre and a collapse (pre, learned head, post_pre), H % 512 == 0,
// H <= 16384, at most kOverlapMaxTiles tiles a launch.
#include <cstdio>
#include <cstdlib>

#include "src/cuda/launch.cuh"
#include "src/cuda/n4/collapse_stream.cuh"
#include "src/cuda/n4/finalize.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda::n4 {

namespace {

constexpr int kTailTokens = 8;  // tokens a block: the wait-to-collapse time a tile's streams must stay in L2

struct TailParams {
  N4Params p;          // p.tile_arrive: [tiles] chunk items stored per tile
  uint32_t* done;      // blocks finished (the last resets the counters)
  int32_t tiles;
};

// 72 registers: one block of 256 threads fits beside a gemm_kernel block (184 x 256 of the 64 K);
// the fold's vectors of H > 4096 spill a little, of H > 8192 more.
// kTokens: kTailTokens (other values in the diagnostics build only).
template <int kVecs, int kTokens = kTailTokens>
__global__ void __maxnreg__(72) tail_kernel(const TailParams tp) {
  static_assert(kTile % kTokens == 0, "a tail block's tokens lie in one tile");
  __shared__ float s_dot[kTokens][kPartial];  // [token][row]: 24 dots, sum of squares
  __shared__ float s_pre[kTokens][kN];
  __shared__ float scratch[kThreadsB / 32];
  const N4Params& p = tp.p;
  pdl_launch_dependents();
  const int tid = threadIdx.x;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTokens;
  const int count = static_cast<int>(p.T - t0 < kTokens ? p.T - t0 : kTokens);
  if (tid == 0) {
    const uint32_t* arrived = p.tile_arrive + t0 / kTile;
    while (ld_acquire_gpu(arrived) < static_cast<uint32_t>(p.chunks)) __nanosleep(200);
    __threadfence();
  }
  __syncthreads();
  finalize_sums<fin_elems(kTokens), fin_elems(kTokens)>(p, t0, count, s_dot);
  __syncthreads();
  if (tid < count) {
    float pre[kN];
    mixes_epilogue<kN>(p.epi, s_dot[tid], s_dot[tid][kRows], p.inv_k, t0 + tid, pre);
#pragma unroll
    for (int j = 0; j < kN; ++j) s_pre[tid][j] = pre[j];
  }
  __syncthreads();
  for (int i = 0; i < count; ++i) {
    float pre[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) pre[j] = s_pre[i][j];
    collapse_stream_token<kVecs>(p, t0 + i, CollapseKind::kWeighted, pre, scratch);
  }
  __syncthreads();
  if (tid == 0 && atom_add_acq_rel_gpu(tp.done, 1u) == gridDim.x - 1) {
    for (int t = 0; t < tp.tiles; ++t) p.tile_arrive[t] = 0;
    *tp.done = 0;
    __threadfence();
  }
}

}  // namespace

void launch_tail_kernel(const N4Params& p, uint32_t* done, const LaunchCtx& ctx) {
  MHC_CHECK(p.has_mixes && p.has_collapse && p.pre_source == PreSource::kComputed && !p.head_mean,
            "tail_kernel: a collapse with the computed pre");
  MHC_CHECK(p.tile_arrive != nullptr && done != nullptr, "tail_kernel: no tile counters");
  MHC_CHECK(p.H % kSliceK == 0 && p.H <= kMaxH, "tail_kernel: H = ", p.H, " outside the n4 envelope");
  if (p.T <= 0) return;
  const int64_t tiles = (p.T + kTile - 1) / kTile;
  MHC_CHECK(tiles <= kOverlapMaxTiles, "tail_kernel: ", tiles, " tiles in one launch (at most ", kOverlapMaxTiles, ")");
  const TailParams tp{p, done, static_cast<int32_t>(tiles)};
  const int64_t vecs = (p.H / 8 + kThreadsB - 1) / kThreadsB;  // per thread
#ifdef MHC_GEMM_PROBE
  // MHC_OVERLAP_FORM="keep tokens": tokens 4 or 16 a block (gemm_kernel.cu reads keep).
  int keep = 0, tokens = 0;
  if (const char* form = std::getenv("MHC_OVERLAP_FORM"); form != nullptr && std::sscanf(form, "%d %d", &keep, &tokens) == 2 &&
      (tokens == 4 || tokens == 16) && vecs <= 4) {
    const dim3 g(static_cast<unsigned>((p.T + tokens - 1) / tokens));
    if (tokens == 4) {
      vecs <= 2 ? launch_kernel(tail_kernel<2, 4>, g, kThreadsB, 0, ctx, tp) : launch_kernel(tail_kernel<4, 4>, g, kThreadsB, 0, ctx, tp);
    } else {
      vecs <= 2 ? launch_kernel(tail_kernel<2, 16>, g, kThreadsB, 0, ctx, tp) : launch_kernel(tail_kernel<4, 16>, g, kThreadsB, 0, ctx, tp);
    }
    return;
  }
#endif
  const dim3 grid(static_cast<unsigned>((p.T + kTailTokens - 1) / kTailTokens));
  if (vecs <= 2) {
    launch_kernel(tail_kernel<2>, grid, kThreadsB, 0, ctx, tp);
  } else if (vecs <= 4) {
    launch_kernel(tail_kernel<4>, grid, kThreadsB, 0, ctx, tp);
  } else {
    launch_kernel(tail_kernel<8>, grid, kThreadsB, 0, ctx, tp);
  }
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_tail_kernels(KernelList& out) {
  add_kernel(out, tail_kernel<2>, "n4::tail_kernel<2>");
  add_kernel(out, tail_kernel<4>, "n4::tail_kernel<4>");
  add_kernel(out, tail_kernel<8>, "n4::tail_kernel<8>");
}

// src/cuda/n4/finalize_kernel.cu - the mixes epilogue of the staged n = 4 plan
// (src/cuda/n4/staged.cu): from the partials [chunk][token][25] of p.T tokens (partial_at),
// each token's 24 dot products and sum of squares in the canonical order
// (src/cuda/n4/config.cuh), then mixes_epilogue<4> (src/cuda/epilogue.cuh: sigmoids, Sinkhorn),
// writing the requested mixes and, for a collapse that follows, the fresh pre into a [T][4]
// buffer of the workspace.
//
// Grid mapping: a 256-thread block per run of up to kFinTokens tokens (fewer where T is small,
// so that every multiprocessor has a block): the canonical sums of its tokens (finalize_sums,
// src/cuda/n4/finalize.cuh: consecutive floats a load instruction, 8 loads an element in
// flight), then thread t (warp 0) runs the epilogue of token t: the serial chains of 32 tokens
// share one warp, and several blocks per multiprocessor overlap theirs.
// Accumulation: the sums of collapse_kernel, bit for bit (finalize.cuh). The epilogue is the
// shared code path, so the mixes are the bits of the cuda_n4 rows.
// Envelope: n = 4, H % 512 == 0, H <= 16384 (the n4 envelope); p.partials of p.T tokens.
#include <cstdlib>

#include "src/cuda/launch.cuh"
#include "src/cuda/n4/finalize.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda::n4 {

namespace {

constexpr int kElems = fin_elems(kFinTokens);           // elements a thread sums
static_assert(kFinTokens <= 32, "finalize_kernel: one warp of epilogues");

struct FinalizeParams {
  N4Params p;
  float* pre;         // [p.T][4] fresh pre for the collapse, or null
  int32_t per_block;  // tokens per block, 1 .. kFinTokens
};

// kMinBlocks resident blocks a multiprocessor; kBatch of the thread's kElems elements summed at a
// time (kBatch x 8 loads in flight). The default <2, kElems> sums all at once; the diagnostics
// build (-DMHC_GEMM_PROBE, MHC_FINALIZE_PROBE) also has <4, 2>, fewer registers so that a
// T = 16384 slice's 512 blocks are one wave: every element's arithmetic is the same in both.
template <int kMinBlocks, int kBatch>
__global__ void __launch_bounds__(kFinThreads, kMinBlocks) finalize_kernel(const FinalizeParams f) {
  static_assert(kElems % kBatch == 0, "finalize_kernel: whole element batches");
  __shared__ float s_dot[kFinTokens][kPartial];      // [token][row]: 24 dots, sum of squares
  const N4Params& p = f.p;
  pdl_launch_dependents();
  pdl_wait();  // the partials come from the kernel before this one
  const int tid = threadIdx.x;
  // This block's tokens: [t0, t0 + count), 1 <= count <= per_block.
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * f.per_block;
  const int count = static_cast<int>(p.T - t0 < f.per_block ? p.T - t0 : f.per_block);
  finalize_sums<kElems, kBatch>(p, t0, count, s_dot);
  __syncthreads();
  if (tid < count) {
    const int64_t t = t0 + tid;
    float pre[kN];
    mixes_epilogue<kN>(p.epi, s_dot[tid], s_dot[tid][kRows], p.inv_k, t, pre);
    if (f.pre != nullptr) *reinterpret_cast<float4*>(f.pre + t * kN) = make_float4(pre[0], pre[1], pre[2], pre[3]);
  }
}

}  // namespace

void launch_finalize_kernel(const N4Params& p, float* pre, const LaunchCtx& ctx) {
  if (p.T <= 0) return;
  // Tokens per block: enough blocks for every multiprocessor, at most kFinTokens per block.
  // The per-token arithmetic does not depend on this choice (batch invariance).
  const int64_t sms = ctx.num_sms > 0 ? ctx.num_sms : 1;
  int64_t per_block = (p.T + sms - 1) / sms;
  per_block = per_block < 1 ? 1 : per_block > kFinTokens ? kFinTokens : per_block;
  const int64_t blocks = (p.T + per_block - 1) / per_block;
  MHC_CHECK(blocks < (int64_t{1} << 31), "finalize_kernel: too many tokens in one slice");
  MHC_CHECK(pre == nullptr || (reinterpret_cast<uintptr_t>(pre) & 15u) == 0, "finalize_kernel: pre buffer alignment");
  const FinalizeParams f{p, pre, static_cast<int32_t>(per_block)};
#ifdef MHC_GEMM_PROBE
  if (const char* probe = std::getenv("MHC_FINALIZE_PROBE"); probe != nullptr && *probe == '1') {
    launch_kernel(finalize_kernel<4, 2>, dim3(static_cast<unsigned>(blocks)), kFinThreads, 0, ctx, f);
    return;
  }
#endif
  launch_kernel(finalize_kernel<2, kElems>, dim3(static_cast<unsigned>(blocks)), kFinThreads, 0, ctx, f);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_finalize_kernels(KernelList& out) { add_kernel(out, finalize_kernel<2, kElems>, "n4::finalize_kernel"); }

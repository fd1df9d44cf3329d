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
// Accumulation: the sums of collapse_kernel, bit for bit: group g is the 16 terms chunk g,
// g + 8, ... in order with 0.0f for chunks >= p.chunks, then the 8 groups in order from group 0
// (see finish_group for the zero terms; a group run is the sum of the group's real terms in
// that order, so both layouts give the same bits). The epilogue is the shared code path, so the
// mixes are the bits of the cuda_n4 rows. A block's run is finalize_run (finalize_run.cuh), which
// overlap_tail_kernel's finalize role runs too.
// Envelope: n = 4, H % 512 == 0, H <= 16384 (the n4 envelope); p.partials of p.T tokens.
#include <cstdlib>

#include "src/cuda/launch.cuh"
#include "src/cuda/n4/finalize_run.cuh"
#include "src/cuda/n4/kernels.hpp"

namespace mhc::cuda::n4 {

namespace {

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
template <int kTokens, int kMinBlocks, int kBatch, bool kGrouped = false, int kRounds = 0>
__global__ void __launch_bounds__(kFinThreads, kMinBlocks) finalize_kernel(const FinalizeParams f) {
  constexpr int kElems = elems_of(kTokens);
  static_assert(kElems % kBatch == 0, "finalize_kernel: whole element batches");
  static_assert(kRounds == 0 || (kElems == 1 && !kGrouped), "the round-batched form: one element a thread");
  static_assert(kTokens <= kFinThreads, "finalize_kernel: a thread an epilogue");
  __shared__ float s_dot[kTokens][kPartial];         // [token][row]: 24 dots, sum of squares
  const N4Params& p = f.p;
  pdl_launch_dependents();
  pdl_wait();  // the partials come from the kernel before this one
  // This block's tokens: [t0, t0 + count), 1 <= count <= per_block.
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * f.per_block;
  const int count = static_cast<int>(p.T - t0 < f.per_block ? p.T - t0 : f.per_block);
  finalize_run<kTokens, kBatch, kGrouped, kRounds>(f, t0, count, s_dot);
}

}  // namespace

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
}

// src/cuda/n4/finalize_kernel.cu - the mixes epilogue of the staged n = 4 plan
// (src/cuda/n4/staged.cu): from the partials [token][chunk][25] of p.T tokens, each token's 24
// dot products and sum of squares in the canonical order (src/cuda/n4/config.cuh), then
// mixes_epilogue<4> (src/cuda/epilogue.cuh: sigmoids, Sinkhorn), writing the requested mixes
// and, for a collapse that follows, the fresh pre into a [T][4] buffer of the workspace.
//
// Grid mapping: a 256-thread block per run of up to kFinTokens tokens (fewer where T is small,
// so that every multiprocessor has a block). Thread (g, r) = (tid / 25, tid % 25), tid < 200,
// sums chunk group g of row r for each of the block's tokens: for a fixed term i it reads
// partial[t][g + 8i][r] = the float at offset tid + 200 i of token t, so the 200 threads read
// 200 consecutive floats (coalesced), and the block's tokens are independent loads in flight.
// Then thread (t, r) adds the 8 group sums in order, and thread t (warp 0) runs the epilogue of
// token t: the serial chains of 32 tokens share one warp, and several blocks per multiprocessor
// overlap theirs.
// Accumulation: the sums of collapse_kernel, bit for bit: group g is the 16 terms
// chunk g, g + 8, ... in order with 0.0f for chunks >= p.chunks, then the 8 groups in order
// from group 0 (see group_sum for the zero terms). The epilogue is the shared code path, so the
// mixes are the bits of the cuda_n4 rows.
// Envelope: n = 4, H % 512 == 0, H <= 16384 (the n4 envelope); p.partials of p.T tokens.
#include "src/cuda/launch.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda::n4 {

namespace {

constexpr int kFinTokens = 32;                          // tokens per block at most (one warp of epilogues)
constexpr int kFinThreads = 256;
constexpr int kGroupRows = kPartialSplit * kPartial;    // 200 (group, row) sums per token
constexpr int kGroupTerms = kMaxChunks / kPartialSplit; // 16 terms per group
static_assert(kGroupRows <= kFinThreads && kFinTokens <= 32, "finalize_kernel mapping");

struct FinalizeParams {
  N4Params p;
  float* pre;         // [p.T][4] fresh pre for the collapse, or null
  int32_t per_block;  // tokens per block, 1 .. kFinTokens
};

__global__ void __launch_bounds__(kFinThreads, 2) finalize_kernel(const FinalizeParams f) {
  __shared__ float s_group[kFinTokens][kGroupRows];  // [token][group][row]
  __shared__ float s_dot[kFinTokens][kPartial];      // [token][row]: 24 dots, sum of squares
  const N4Params& p = f.p;
  pdl_launch_dependents();
  pdl_wait();  // the partials come from the kernel before this one
  const int tid = threadIdx.x;
  // This block's tokens: [t0, t0 + count), 1 <= count <= per_block.
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * f.per_block;
  const int count = static_cast<int>(p.T - t0 < f.per_block ? p.T - t0 : f.per_block);

  if (tid < kGroupRows) {
    // Group g of row r: terms i = 0 .. 15 are chunks g + 8i; the chunks that exist come first
    // (n_real of them), the rest are 0.0f. collapse_kernel adds all 16 terms; adding +0.0f k >= 1
    // times equals adding it once (x + 0 = x except -0 + 0 = +0, and a NaN stays the canonical
    // NaN), so the real terms are added in order and then, where a zero term exists, one +0.0f.
    // (No nsz: without fast-math the compiler keeps x + 0.0f.)
    const int g = tid / kPartial;
    const int n_real = g < p.chunks ? (p.chunks - g + kPartialSplit - 1) / kPartialSplit : 0;
    const float* src = p.partials + t0 * p.chunks * kPartial + tid;
    const int64_t token_stride = static_cast<int64_t>(p.chunks) * kPartial;
    float s[kFinTokens];
#pragma unroll
    for (int t = 0; t < kFinTokens; ++t) s[t] = t < count && n_real > 0 ? __ldcg(src + t * token_stride) : 0.0f;
    for (int i = 1; i < n_real; ++i) {
      const float* at = src + i * kGroupRows;
      float v[kFinTokens];
#pragma unroll
      for (int t = 0; t < kFinTokens; ++t) v[t] = t < count ? __ldcg(at + t * token_stride) : 0.0f;
#pragma unroll
      for (int t = 0; t < kFinTokens; ++t) s[t] += v[t];
    }
    if (n_real < kGroupTerms) {
#pragma unroll
      for (int t = 0; t < kFinTokens; ++t) s[t] += 0.0f;
    }
#pragma unroll
    for (int t = 0; t < kFinTokens; ++t) {
      if (t < count) s_group[t][tid] = s[t];
    }
  }
  __syncthreads();
  // The 8 group sums of (token, row) in order from group 0.
  for (int idx = tid; idx < count * kPartial; idx += kFinThreads) {
    const int t = idx / kPartial, r = idx % kPartial;
    float s = s_group[t][r];
#pragma unroll
    for (int i = 1; i < kPartialSplit; ++i) s += s_group[t][i * kPartial + r];
    s_dot[t][r] = s;
  }
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
  launch_kernel(finalize_kernel, dim3(static_cast<unsigned>(blocks)), kFinThreads, 0, ctx,
                FinalizeParams{p, pre, static_cast<int32_t>(per_block)});
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_finalize_kernels(KernelList& out) { add_kernel(out, finalize_kernel, "n4::finalize_kernel"); }

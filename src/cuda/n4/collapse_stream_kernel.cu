// src/cuda/n4/collapse_stream_kernel.cu - the collapse stage alone for n = 4, streaming:
// layer_input[t] = bf16(sum_j pre[t,j] * x[t,j,:]) with the carried pre (p.pre_mix_in: a
// caller's pre_mix, or the staged plan's finalize buffer), stream 0 bit for bit (identity), or
// the mean head bf16(sum_j x[t,j,:] / 4); optionally RMSNorm-folded.
//
// Grid mapping: one block per token, in one of two shapes (a template choice by H):
//   256 threads: thread tid owns the 8-column vectors tid, tid + 256, .. (at most kVecs of
//     them), loading the 4 streams of kCollapseBatch = 2 vectors at once;
//   wide (kWide): H / 16 threads, thread tid owns vectors tid and tid + H / 16 and loads both at
//     once. At H = 5120 the 256-thread shape gives half the threads a third vector in a second
//     batch of loads: 230-233 us at T = 16384 against 213-216 wide; at H = 7168 (2 resident
//     448-thread blocks a multiprocessor) wide was the slower, 306 against 296 (session 20
//     call 2); H = 4096 is one batch of two either way.
// Loads are 16-byte streaming loads (read once), issued before any arithmetic; a thread keeps
// its collapsed vectors in registers for the fold.
// Accumulation: the arithmetic of collapse_kernel's collapse, bit for bit: exact_sum_bf16x2 with
// the same weights and bounds (weighted), the double sum (mean), and the fold's sum of squares
// in collapse_kernel's order (256 fmaf chains, chain c over vectors c, c + 256, .. in order, then
// block_sum over those 256 values: in the 256-thread shape each thread's own chain, in the wide
// shape the collapsed row goes through shared memory and the first 256 threads form them), 1 /
// sqrtf(sum / H + eps), bf16(u * inv * w).
// With p.copy_x_out (pre_broadcast by fn_b: x is the embedding at stream stride 0), the thread
// also stores each vector it loaded to the n streams of residual_out, so the materialised
// residual costs its writes and no second read of the embedding.
// With kPost (the staged post_pre in shifted mode, whose collapse uses the carried pre_mix_in
// and so does not wait for the mixes, where post_collapse_kernel does not run: H > 7168 or no
// bulk copies), the thread loads the input streams p.residual and the
// layer output instead of x, forms the post of each vector (post8: the bits of post_kernel and
// post_bulk_kernel), stores it to residual_out and collapses it: the post and the collapse in
// one pass over the token, 20 H bytes a token where the two kernels move 28 H (the GEMM stage
// then reads residual_out as before). Always the 256-thread shape; 3 resident blocks up to 4
// vectors a thread (MHC_POST_COLLAPSE_BLOCKS).
// With kPoll (p.pre_poll: the staged plan's computed pre through the workspace's pre mailbox),
// the block does not wait for the kernel before it (finalize_kernel, launched after the streams
// were written): once its first loads are issued it polls its token's pre in the mailbox until
// finalize_kernel has stored it (before that token's Sinkhorn chain), waits for finalize_kernel to
// complete only at its end, and then puts the mailbox's poison back for the next call. Its loads
// and its first tokens' collapse thus overlap finalize_kernel (session 29: -1 to -3.5 us at
// T = 1024, up to -10 at 16384). The body is collapse_token (collapse_token.cuh), which
// overlap_tail_kernel's collapse role runs too; its kKeep (the overlap rows, where the GEMM stage
// runs beside the collapse and may read a token's streams after it) keeps L2's default eviction
// for the streams' loads instead of the streaming hint, so that a line the collapse reads first
// is not among the first evicted before the GEMM stage's read.
// Envelope: n = 4, H % 512 == 0, H <= 16384, 16-byte aligned rows (the n4 envelope).
#include "src/cuda/launch.cuh"
#include "src/cuda/n4/collapse_token.cuh"
#include "src/cuda/n4/kernels.hpp"

namespace mhc::cuda::n4 {

namespace {

constexpr int kWideThreadsMax = kMaxH / 16;  // 1024

// The post mode's resident blocks: 3 (80 registers) up to 4 vectors a thread (H <= 8192),
// where ptxas spills 32 bytes at 4 vectors; 2 above. With 4 vectors, 3 blocks against 2 took
// shifted post_pre 751 against 789 us at H = 5120 and 1050 against 1041 at H = 7168 (T = 16384);
// a 448-thread shape of 2 vectors a thread (2 blocks, 72 registers) 783 / 1045 (session 24).
#define MHC_POST_COLLAPSE_BLOCKS(vecs) ((vecs) <= 4 ? 3 : 2)

// The 256-thread shape's resident blocks (MHC_COLLAPSE_STREAM_BLOCKS) are in collapse_token.cuh.
template <int kVecs, bool kWide, bool kPost = false, bool kPoll = false>
__global__ void __launch_bounds__(kWide ? kWideThreadsMax : kThreadsB,
                                  kWide ? 1 : kPost ? MHC_POST_COLLAPSE_BLOCKS(kVecs) : MHC_COLLAPSE_STREAM_BLOCKS(kVecs))
    collapse_stream_kernel(const N4Params p) {
  extern __shared__ uint4 s_row[];  // the wide shape's collapsed row, for the fold's chains
  __shared__ float scratch[(kWide ? kWideThreadsMax : kThreadsB) / 32];  // block_sum: a float a warp
  pdl_launch_dependents();
  collapse_token<kVecs, kWide, kPost, kPoll>(p, blockIdx.x, s_row, scratch);
}

// The 256-thread shape with enough vectors a thread for p.H.
template <bool kPost, bool kPoll = false>
void launch_256(const N4Params& p, const LaunchCtx& ctx, dim3 grid) {
  const int64_t vecs = (p.H / 8 + kThreadsB - 1) / kThreadsB;  // per thread
  if (vecs <= 2) {
    launch_kernel(collapse_stream_kernel<2, false, kPost, kPoll>, grid, kThreadsB, 0, ctx, p);
  } else if (vecs <= 4) {
    launch_kernel(collapse_stream_kernel<4, false, kPost, kPoll>, grid, kThreadsB, 0, ctx, p);
  } else {
    launch_kernel(collapse_stream_kernel<8, false, kPost, kPoll>, grid, kThreadsB, 0, ctx, p);
  }
}

// The collapse alone in its shape for p.H (see the header), the pre read or polled.
template <bool kPoll>
void launch_collapse(const N4Params& p, const LaunchCtx& ctx, dim3 grid) {
  if (p.H > 4096 && p.H <= 6144) {  // the wide shape (see the header)
    const int threads = static_cast<int>(p.H / 16);
    const size_t row_bytes = p.rmsnorm_weight != nullptr ? static_cast<size_t>(p.H / 8) * 16 : 0;
    launch_kernel(collapse_stream_kernel<kCollapseBatch, true, false, kPoll>, grid, threads, row_bytes, ctx, p);
    return;
  }
  launch_256<false, kPoll>(p, ctx, grid);
}

}  // namespace

void launch_collapse_stream_kernel(const N4Params& p, const LaunchCtx& ctx, bool post) {
  MHC_CHECK(p.pre_source != PreSource::kComputed || p.head_mean,
            "collapse_stream_kernel: a computed pre is passed as pre_mix_in (carried)");
  MHC_CHECK(!p.pre_poll || (!post && p.pre_source == PreSource::kCarried && !p.head_mean && p.pre_mix_in != nullptr &&
                            p.pre_mix_in_stride == kN && (reinterpret_cast<uintptr_t>(p.pre_mix_in) & 15u) == 0),
            "collapse_stream_kernel: the polled pre is the mailbox's [T][4] of the collapse alone");
  MHC_CHECK(p.H % kSliceK == 0 && p.H <= kMaxH, "collapse_stream_kernel: H = ", p.H, " outside the n4 envelope");
  MHC_CHECK(p.T < (int64_t{1} << 31), "collapse_stream_kernel: too many tokens in one launch");
  MHC_CHECK(!p.copy_x_out || (p.x_stream_stride == 0 && p.residual_out != nullptr),
            "collapse_stream_kernel: copies of x need a broadcast x and a residual_out");
  MHC_CHECK(!post || (p.has_post && p.pre_source == PreSource::kCarried && !p.copy_x_out && p.residual_out != nullptr &&
                            p.residual != nullptr && p.layer_output != nullptr),
            "collapse_stream_kernel: the post mode needs a carried pre, the post's inputs and a residual_out");
  if (p.T <= 0) return;
  const dim3 grid(static_cast<unsigned>(p.T));
  if (post) {  // the post mode (see the header): the 256-thread shape at every H
    launch_256<true>(p, ctx, grid);
    return;
  }
  if (p.pre_poll) {
    launch_collapse<true>(p, ctx, grid);
  } else {
    launch_collapse<false>(p, ctx, grid);
  }
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_collapse_stream_kernels(KernelList& out) {
  add_kernel(out, collapse_stream_kernel<2, false>, "n4::collapse_stream_kernel<2>");
  add_kernel(out, collapse_stream_kernel<4, false>, "n4::collapse_stream_kernel<4>");
  add_kernel(out, collapse_stream_kernel<8, false>, "n4::collapse_stream_kernel<8>");
  add_kernel(out, collapse_stream_kernel<kCollapseBatch, true>, "n4::collapse_stream_kernel<2, wide>");
  add_kernel(out, collapse_stream_kernel<2, false, true>, "n4::collapse_stream_kernel<2, post>");
  add_kernel(out, collapse_stream_kernel<4, false, true>, "n4::collapse_stream_kernel<4, post>");
  add_kernel(out, collapse_stream_kernel<8, false, true>, "n4::collapse_stream_kernel<8, post>");
  add_kernel(out, collapse_stream_kernel<2, false, false, true>, "n4::collapse_stream_kernel<2, poll>");
  add_kernel(out, collapse_stream_kernel<4, false, false, true>, "n4::collapse_stream_kernel<4, poll>");
  add_kernel(out, collapse_stream_kernel<8, false, false, true>, "n4::collapse_stream_kernel<8, poll>");
  add_kernel(out, collapse_stream_kernel<kCollapseBatch, true, false, true>, "n4::collapse_stream_kernel<2, wide, poll>");
}

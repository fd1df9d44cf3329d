// src/cuda/n4/collapse_stream_kernel.cu - the collapse stage alone for n = 4, streaming:
// layer_input[t] = bf16(sum_j pre[t,j] * x[t,j,:]) with the carried pre (p.pre_mix_in: a
// caller's pre_mix, or the staged plan's finalize buffer), stream 0 bit for bit (identity), or
// the mean head bf16(sum_j x[t,j,:] / 4); optionally RMSNorm-folded.
//
// Grid mapping: one block per token, in one of two shapes (a template choice by H):
//   256 threads: thread tid owns the 8-column vectors tid, tid + 256, .. (at most kVecs of
//     them), loading the 4 streams of kBatch = 2 vectors at once;
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
// T = 1024, up to -10 at 16384). kKeep (p.x_keep, the overlap rows, where the GEMM stage runs
// beside this kernel and may read a token's streams after it): the streams' loads keep L2's
// default eviction (ld.global.cg) rather than the streaming hint, so that a line this kernel
// reads first is not the first evicted before the GEMM stage's read.
// Envelope: n = 4, H % 512 == 0, H <= 16384, 16-byte aligned rows (the n4 envelope).
#include "src/cuda/n4/collapse_row.cuh"
#include "src/cuda/launch.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/n4/post8.cuh"
#include "src/cuda/ptx.cuh"
#include "src/cuda/reduce.cuh"

namespace mhc::cuda::n4 {

namespace {

constexpr int kBatch = 2;  // vectors per thread whose loads are issued together
constexpr int kWideThreadsMax = kMaxH / 16;  // 1024

// Resident blocks per SM of the 256-thread shape by vectors per thread: on Hopper 4 / 3 / 2 (64
// / 85 / 128 registers); one fewer elsewhere where ptxas spills at those bounds (sm_80 at 64,
// sm_120a's double path at 85). The wide shape has 64 (a 1024-thread block; sm_80 spills 8
// bytes there, as the 256-thread shape's <2> does at 80).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
#define MHC_COLLAPSE_STREAM_BLOCKS(vecs) ((vecs) <= 2 ? 4 : (vecs) <= 4 ? 3 : 2)
#else
#define MHC_COLLAPSE_STREAM_BLOCKS(vecs) ((vecs) <= 2 ? 3 : 2)
#endif

// The post mode's resident blocks: 3 (80 registers) up to 4 vectors a thread (H <= 8192),
// where ptxas spills 32 bytes at 4 vectors; 2 above. With 4 vectors, 3 blocks against 2 took
// shifted post_pre 751 against 789 us at H = 5120 and 1050 against 1041 at H = 7168 (T = 16384);
// a 448-thread shape of 2 vectors a thread (2 blocks, 72 registers) 783 / 1045 (session 24).
#define MHC_POST_COLLAPSE_BLOCKS(vecs) ((vecs) <= 4 ? 3 : 2)

// The pre mailbox's poison (every float between calls; finalize_kernel never stores it).
constexpr uint32_t kPrePoison = 0xffffffffu;

// Token t's pre from the mailbox (p.pre_poll): polled until finalize_kernel has stored it (none of
// its 4 floats is the poison; each float is stored once, so 4 non-poison floats are the token's).
__device__ __forceinline__ void poll_pre(const float* box, float (&pre)[kN]) {
  for (;;) {
    float4 v;
    asm volatile("ld.volatile.global.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(box));
    if (__float_as_uint(v.x) != kPrePoison && __float_as_uint(v.y) != kPrePoison &&
        __float_as_uint(v.z) != kPrePoison && __float_as_uint(v.w) != kPrePoison) {
      pre[0] = v.x;
      pre[1] = v.y;
      pre[2] = v.z;
      pre[3] = v.w;
      return;
    }
    __nanosleep(64);
  }
}

// A 16-byte load of the streams: streaming (the last read), or kKeep's default eviction.
template <bool kKeep>
__device__ __forceinline__ uint4 load_x(const bf16_t* p) {
  if constexpr (kKeep) {
    return ldcg16(p);
  } else {
    return ldcs16(p);
  }
}

template <int kVecs, bool kWide, bool kPost = false, bool kPoll = false, bool kKeep = false>
__global__ void __launch_bounds__(kWide ? kWideThreadsMax : kThreadsB,
                                  kWide ? 1 : kPost ? MHC_POST_COLLAPSE_BLOCKS(kVecs) : MHC_COLLAPSE_STREAM_BLOCKS(kVecs))
    collapse_stream_kernel(const N4Params p) {
  static_assert(!kWide || kVecs == kBatch, "the wide shape: two vectors a thread, one batch");
  static_assert(!(kWide && kPost), "the post mode runs the 256-thread shape");
  static_assert(!(kPost && kPoll), "the post mode collapses with the carried pre");
  static_assert(!kKeep || kPoll, "kKeep: the overlap rows' polling collapse");
  extern __shared__ uint4 s_row[];  // the wide shape's collapsed row, for the fold's chains
  __shared__ float scratch[kThreadsB / 32];
  pdl_launch_dependents();
  // The streams and the pre come from the kernels before this one. kPoll: the kernel before
  // (finalize_kernel) started after the streams were written, and its pre is polled below.
  if (!kPoll) pdl_wait();
  const int tid = threadIdx.x;
  const int threads = kWide ? static_cast<int>(blockDim.x) : kThreadsB;
  const int64_t t = blockIdx.x;
  const int64_t vecs = p.H / 8;
  const CollapseKind mode = collapse_kind(p);
  const int streams = mode == CollapseKind::kIdentity ? 1 : kN;
  const bool fold = p.rmsnorm_weight != nullptr;
  float pre[kN];
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    pre[j] = mode == CollapseKind::kWeighted && !kPoll ? __ldcg(p.pre_mix_in + t * p.pre_mix_in_stride + j) : 0.0f;
  }
  // kPost: the token's 20 mixes are loaded here and turned into post weights (and the pre into
  // its error scale) once the first batch's loads are issued, so that no data load waits on
  // them whatever the compiler schedules (session 24: the same time as computing them first).
  float mix[kPost ? kN + kN * kN : 1];
  if constexpr (kPost) {
#pragma unroll
    for (int s = 0; s < kN; ++s) mix[s] = __ldcg(p.post_mix + t * p.post_mix_stride + s);
#pragma unroll
    for (int s = 0; s < kN * kN; ++s) mix[kN + s] = __ldcg(p.comb_mix + t * p.comb_mix_stride + s);
  }
  float pre_scale = kPost || kPoll ? 0.0f : sum_error_scale(pre);
  const bf16_t* x = p.x + t * p.x_stride;
  bf16_t* dst = p.layer_input + t * p.layer_input_stride;
  bf16_t* copies = p.copy_x_out ? p.residual_out + t * p.residual_out_stride : nullptr;
  // kPost: the token's input streams, layer output and new residual.
  PostWeights pw;
  const bf16_t* res = nullptr;
  const bf16_t* lo_row = nullptr;
  bf16_t* res_out = nullptr;
  if constexpr (kPost) {
    res = p.residual + t * p.residual_stride;
    lo_row = p.layer_output + t * p.layer_output_stride;
    res_out = p.residual_out + t * p.residual_out_stride;
  }
  uint4 u[kVecs];  // this thread's collapsed vectors (kept for the fold)
  float sq[1] = {0.0f};
#pragma unroll
  for (int b = 0; b < kVecs; b += kBatch) {
    uint4 r[kBatch][kN], lo[kBatch];
#pragma unroll
    for (int q = 0; q < kBatch; ++q) {
      const int64_t v = tid + static_cast<int64_t>(b + q) * threads;
      if constexpr (kPost) {
#pragma unroll
        for (int j = 0; j < kN; ++j) {
          r[q][j] = v < vecs ? ldcs16(res + j * p.res_stream_stride + v * 8) : make_uint4(0, 0, 0, 0);
        }
        lo[q] = v < vecs ? ldcs16(lo_row + v * 8) : make_uint4(0, 0, 0, 0);
      } else {
#pragma unroll
        for (int j = 0; j < kN; ++j) {
          r[q][j] = v < vecs && j < streams ? load_x<kKeep>(x + j * p.x_stream_stride + v * 8) : make_uint4(0, 0, 0, 0);
        }
      }
    }
    if constexpr (kPost) {
      if (b == 0) {
        pw = post_weights(mix, mix + kN);
        pre_scale = sum_error_scale(pre);
      }
    }
    if constexpr (kPoll) {
      // The pre once the first batch's loads are in flight.
      if (b == 0 && mode == CollapseKind::kWeighted) {
        poll_pre(p.pre_mix_in + t * p.pre_mix_in_stride, pre);
        pre_scale = sum_error_scale(pre);
      }
    }
#pragma unroll
    for (int q = 0; q < kBatch; ++q) {
      const int64_t v = tid + static_cast<int64_t>(b + q) * threads;
      if (v < vecs) {
        if constexpr (kPost) {
          uint4 out[kN];
          post8(pw, r[q], lo[q], out);
#pragma unroll
          for (int j = 0; j < kN; ++j) {
            st16(res_out + j * p.H + v * 8, out[j]);
            r[q][j] = out[j];
          }
        }
        if (copies != nullptr) {
#pragma unroll
          for (int j = 0; j < kN; ++j) st16(copies + j * p.H + v * 8, r[q][0]);
        }
        u[b + q] = collapse_vec(mode, pre, pre_scale, r[q]);
        if (!fold) {
          st16(dst + v * 8, u[b + q]);
        } else if constexpr (kWide) {
          s_row[v] = u[b + q];
        } else {
          add_squares(u[b + q], sq[0]);
        }
      }
    }
  }
  // kPoll: complete only after finalize_kernel, and put the poison back once every thread has
  // read the token's pre (the next call's finalize_kernel starts after this kernel completes).
  auto release_pre = [&] {
    if constexpr (kPoll) {
      pdl_wait();
      __syncthreads();
      if (tid == 0 && mode == CollapseKind::kWeighted) {
        const uint32_t x = kPrePoison;
        asm volatile("st.global.v4.u32 [%0], {%1, %1, %1, %1};" ::"l"(p.pre_mix_in + t * p.pre_mix_in_stride), "r"(x)
                     : "memory");
      }
    }
  };
  if (!fold) {  // block-uniform
    release_pre();
    return;
  }
  float inv;
  if constexpr (!kWide) {
    block_sum(sq, scratch);
    inv = 1.0f / sqrtf(sq[0] / static_cast<float>(p.H) + p.rmsnorm_eps);
  } else {
    __shared__ float s_inv;
    __syncthreads();  // the row is in shared memory
    if (tid < kThreadsB) {
      for (int64_t v = tid; v < vecs; v += kThreadsB) add_squares(s_row[v], sq[0]);
      block_sum<1, kThreadsB / 32>(sq, scratch);
      if (tid == 0) s_inv = 1.0f / sqrtf(sq[0] / static_cast<float>(p.H) + p.rmsnorm_eps);
    }
    __syncthreads();
    inv = s_inv;
  }
#pragma unroll
  for (int q = 0; q < kVecs; ++q) {
    const int64_t v = tid + static_cast<int64_t>(q) * threads;
    if (v < vecs) st16(dst + v * 8, fold_vec(u[q], ld16(p.rmsnorm_weight + v * 8), inv));
  }
  release_pre();
}

// The 256-thread shape with enough vectors a thread for p.H.
template <bool kPost, bool kPoll = false, bool kKeep = false>
void launch_256(const N4Params& p, const LaunchCtx& ctx, dim3 grid) {
  const int64_t vecs = (p.H / 8 + kThreadsB - 1) / kThreadsB;  // per thread
  if (vecs <= 2) {
    launch_kernel(collapse_stream_kernel<2, false, kPost, kPoll, kKeep>, grid, kThreadsB, 0, ctx, p);
  } else if (vecs <= 4) {
    launch_kernel(collapse_stream_kernel<4, false, kPost, kPoll, kKeep>, grid, kThreadsB, 0, ctx, p);
  } else {
    launch_kernel(collapse_stream_kernel<8, false, kPost, kPoll, kKeep>, grid, kThreadsB, 0, ctx, p);
  }
}

// The collapse alone in its shape for p.H (see the header), the pre read or polled.
template <bool kPoll, bool kKeep = false>
void launch_collapse(const N4Params& p, const LaunchCtx& ctx, dim3 grid) {
  if (p.H > 4096 && p.H <= 6144) {  // the wide shape (see the header)
    const int threads = static_cast<int>(p.H / 16);
    const size_t row_bytes = p.rmsnorm_weight != nullptr ? static_cast<size_t>(p.H / 8) * 16 : 0;
    launch_kernel(collapse_stream_kernel<kBatch, true, false, kPoll, kKeep>, grid, threads, row_bytes, ctx, p);
    return;
  }
  launch_256<false, kPoll, kKeep>(p, ctx, grid);
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
  if (p.pre_poll && p.x_keep) {
    launch_collapse<true, true>(p, ctx, grid);
  } else if (p.pre_poll) {
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
  add_kernel(out, collapse_stream_kernel<kBatch, true>, "n4::collapse_stream_kernel<2, wide>");
  add_kernel(out, collapse_stream_kernel<2, false, true>, "n4::collapse_stream_kernel<2, post>");
  add_kernel(out, collapse_stream_kernel<4, false, true>, "n4::collapse_stream_kernel<4, post>");
  add_kernel(out, collapse_stream_kernel<8, false, true>, "n4::collapse_stream_kernel<8, post>");
  add_kernel(out, collapse_stream_kernel<2, false, false, true>, "n4::collapse_stream_kernel<2, poll>");
  add_kernel(out, collapse_stream_kernel<4, false, false, true>, "n4::collapse_stream_kernel<4, poll>");
  add_kernel(out, collapse_stream_kernel<8, false, false, true>, "n4::collapse_stream_kernel<8, poll>");
  add_kernel(out, collapse_stream_kernel<kBatch, true, false, true>, "n4::collapse_stream_kernel<2, wide, poll>");
  add_kernel(out, collapse_stream_kernel<2, false, false, true, true>, "n4::collapse_stream_kernel<2, poll, keep>");
  add_kernel(out, collapse_stream_kernel<4, false, false, true, true>, "n4::collapse_stream_kernel<4, poll, keep>");
  add_kernel(out, collapse_stream_kernel<8, false, false, true, true>, "n4::collapse_stream_kernel<8, poll, keep>");
  add_kernel(out, collapse_stream_kernel<kBatch, true, false, true, true>, "n4::collapse_stream_kernel<2, wide, poll, keep>");
}

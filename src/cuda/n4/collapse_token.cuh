// src/cuda/n4/collapse_token.cuh - the collapse of one token by one block, as
// collapse_stream_kernel runs it (its header says what it computes and how): the body of that
// kernel, and the collapse role of overlap_tail_kernel, so both give the same bits from one code.
// Also the pre mailbox's poison and its poll.
#pragma once

#include "src/cuda/n4/collapse_row.cuh"
#include "src/cuda/n4/config.cuh"
#include "src/cuda/n4/post8.cuh"
#include "src/cuda/ptx.cuh"
#include "src/cuda/reduce.cuh"

namespace mhc::cuda::n4 {

constexpr int kCollapseBatch = 2;  // vectors per thread whose loads are issued together

// Resident blocks per SM of the 256-thread shape by vectors per thread (collapse_stream_kernel's
// and overlap_tail_kernel's launch bounds): on Hopper 4 / 3 / 2 (64 / 85 / 128 registers); one
// fewer elsewhere where ptxas spills at those bounds (sm_80 at 64, sm_120a's double path at 85).
// The wide shape has 64 (a 1024-thread block; sm_80 spills 8 bytes there, as the 256-thread
// shape's <2> does at 80).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
#define MHC_COLLAPSE_STREAM_BLOCKS(vecs) ((vecs) <= 2 ? 4 : (vecs) <= 4 ? 3 : 2)
#else
#define MHC_COLLAPSE_STREAM_BLOCKS(vecs) ((vecs) <= 2 ? 3 : 2)
#endif

// The pre mailbox's poison (every float between calls; finalize_kernel and early_pre never store
// it: a NaN pre goes in as the canonical NaN).
constexpr uint32_t kPrePoison = 0xffffffffu;

// Token t's pre from the mailbox (p.pre_poll): polled until finalize_kernel (or overlap_tail_kernel's
// finalize role) has stored it (none of its 4 floats is the poison; each float is stored once, so
// 4 non-poison floats are the token's).
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

/// The collapse of token t by one block (collapse_stream_kernel's header says what each template
/// parameter selects). s_row: the wide shape's collapsed row (H / 8 vectors of dynamic shared
/// memory, with the fold); scratch: kThreadsB / 32 floats of shared memory for block_sum.
template <int kVecs, bool kWide, bool kPost = false, bool kPoll = false, bool kKeep = false>
__device__ __forceinline__ void collapse_token(const N4Params& p, int64_t t, uint4* s_row, float* scratch) {
  static_assert(!kWide || kVecs == kCollapseBatch, "the wide shape: two vectors a thread, one batch");
  static_assert(!(kWide && kPost), "the post mode runs the 256-thread shape");
  static_assert(!(kPost && kPoll), "the post mode collapses with the carried pre");
  static_assert(!kKeep || kPoll, "kKeep: the overlap rows' polling collapse");
  // The streams and the pre come from the kernels before this one. kPoll: the kernel (or role)
  // that writes the pre started after the streams were written (finalize_kernel, launched after
  // the GEMM stage completed; overlap_tail_kernel, started by the GEMM stage after its own wait),
  // and the pre is polled below.
  if (!kPoll) pdl_wait();
  const int tid = threadIdx.x;
  const int threads = kWide ? static_cast<int>(blockDim.x) : kThreadsB;
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
  for (int b = 0; b < kVecs; b += kCollapseBatch) {
    uint4 r[kCollapseBatch][kN], lo[kCollapseBatch];
#pragma unroll
    for (int q = 0; q < kCollapseBatch; ++q) {
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
    for (int q = 0; q < kCollapseBatch; ++q) {
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
        // the poison back into the mailbox (pre_mix_in is the mailbox here, written by this kernel)
        st16_relaxed_gpu(const_cast<float*>(p.pre_mix_in + t * p.pre_mix_in_stride), x, x, x, x);
      }
    }
  };
  if (!fold) {  // block-uniform
    release_pre();
    return;
  }
  if constexpr (kWide) {
    // The first 256 threads form the chains from the row in shared memory; every warp of the
    // block then takes part in block_sum (warps 8.. add +0.0f after the 8 warps' sums, which
    // changes no bit of a sum of squares): no barrier with a partial thread count, beside which
    // racecheck reports a hazard in race-free code (bench/probes/racecheck_named_barriers.cu).
    // It costs ~0.7% of the wide collapse at H = 5120 (docs/performance.md). scratch:
    // blockDim.x / 32 floats.
    __syncthreads();  // the row is in shared memory
    if (tid < kThreadsB) {
      for (int64_t v = tid; v < vecs; v += kThreadsB) add_squares(s_row[v], sq[0]);
    }
  }
  block_sum(sq, scratch);
  const float inv = fold_factor(p, sq[0]);
#pragma unroll
  for (int q = 0; q < kVecs; ++q) {
    const int64_t v = tid + static_cast<int64_t>(q) * threads;
    if (v < vecs) st16(dst + v * 8, fold_vec(u[q], ld16(p.rmsnorm_weight + v * 8), inv));
  }
  release_pre();
}

}  // namespace mhc::cuda::n4

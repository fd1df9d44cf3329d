// src/cuda/n4/post_kernel.cu - post alone for n = 4: residual_out[t,k,:] =
// bf16(post[k] * layer_output[t,:] + sum_j comb[j,k] * residual[t,j,:]).
//
// Three forms of one computation (launch_post_kernel's `variant`, src/cuda/n4/kernels.hpp;
// kPostAuto is kPostFlat, and kPostBulk runs post_bulk_kernel.cu's kernel, the plans' choice on
// sm_90+); each output is post8's exact sum rounded once, so all give the same bits:
//   kPostFlat       one thread per (token, 8-column vector) of all 4 streams, grid-stride over
//                   tokens x vectors (at most 16 blocks of 256 threads per multiprocessor), one
//                   step at a time (3 resident blocks) or, for large T, two steps at a time
//                   (2 resident blocks); the token's 20 mixes are read per vector.
//   kPostRows       a block per token row (grid-stride over tokens): thread tid owns vectors
//                   v = tid, tid + 256, ...; the token's mixes and post weights once per row; the
//                   loads of kPostBatch vectors issued before any arithmetic.
//   kPostPipelined  kPostRows, each thread's (token, vector) steps in sequence with the loads of
//                   the next step (and the next token's mixes) in flight during this step's
//                   arithmetic.
// kPostRows and kPostPipelined stream the residual and layer_output with evict-first loads;
// kPostFlat loads them normally (evict-first measured slower there, session 16 call 1);
// residual_out is stored normally (the staged plan re-reads it).
// Accumulation: post8 (src/cuda/n4/post8.cuh), each output the exact sum rounded once.
// Envelope: n = 4, H % 8 == 0 within the n = 4 envelope, 16-byte aligned rows; the residual may
// be the broadcast [T,H] form (res_stream_stride 0).
#include <cstdlib>

#include "src/cuda/launch.cuh"
#include "src/cuda/n4/canonical.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/n4/post8.cuh"
#include "src/cuda/ptx.cuh"
#include "src/cuda/row_walk.cuh"

namespace mhc::cuda::n4 {

namespace {

constexpr int kPostBatch = 2;        // kPostRows: vectors per thread whose loads are issued together
constexpr int kPostRowsBlocks = 2;   // kPostRows / kPostPipelined: resident blocks per multiprocessor
constexpr int kMixes = kN + kN * kN; // post[4], comb[16] of a token
constexpr int kPostOneStep = 8;      // post_flat_kernel's one-step form (kForm bit 3)
constexpr int kPostOneStepBlocks = 3;  // its resident blocks per multiprocessor (85 registers)
constexpr int kPostTwoStepBlocks = 2;  // the two-step and pipelined forms' (128 registers)
constexpr int64_t kPostTwoStepItems = 16;  // items per one-step thread from which the two-step form runs

/// post_flat_kernel<kForm>'s rare path (out of line, so the streaming loop keeps nothing live
/// for it): the pairs of `failed` that post8_fast did not certify, formed again from reloaded
/// terms and weights and stored over the thread's own stores of them.
__device__ __noinline__ void post_flat_fix(const bf16_t* res, int64_t res_stream_stride, const bf16_t* layer_output,
                                           const float* post_mix, const float* comb_mix, bf16_t* dst, int64_t H,
                                           uint32_t failed) {
  uint4 r[kN];
#pragma unroll
  for (int j = 0; j < kN; ++j) r[j] = ld16(res + j * res_stream_stride);
  const uint4 lo = ld16(layer_output);
  float mix[kMixes];
#pragma unroll
  for (int j = 0; j < kN; ++j) mix[j] = __ldcg(post_mix + j);
#pragma unroll
  for (int j = 0; j < kN * kN; ++j) mix[kN + j] = __ldcg(comb_mix + j);
  const PostWeights pw = post_weights(mix, mix + kN);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      if ((failed >> (4 * i + k) & 1u) != 0) st4(dst + k * H + 2 * i, post8_pair(pw, r, lo, i, k));
    }
  }
}

/// post alone, kPostFlat: one thread per (token, 8 columns) item of all 4 streams, grid-stride.
/// kForm 0 (large T) takes two stride steps at a time: both items' loads are issued before
/// either's arithmetic (twice the bytes in flight per thread, two resident blocks a
/// multiprocessor for the registers); kForm 8 (kPostOneStep, smaller T) one step at a time with
/// three resident blocks. The grid stride steps (token, vector) without a division (dt tokens
/// and dv vectors a step). launch_post_kernel picks the form by the items per thread.
/// The diagnostics build (-DMHC_GEMM_PROBE, MHC_POST_FLAT_FORM) also has other forms, to time
/// them apart (every form gives the same bits): bit 0 evict-first loads of the residual and
/// layer output, bit 2 post8_fast with the uncertified pairs redone by post_flat_fix, bit 3 one
/// stride step at a time (three resident blocks), bits 3 and 1 together the one-step form with
/// each item's (token, vector) by a 64-bit division (the kernel before session 16), bit 4 the
/// next step's loads issued before this step's arithmetic (software pipelined, two resident
/// blocks).
template <int kForm = 0>
__global__ void __launch_bounds__(kThreadsB, (kForm & 8) != 0 ? kPostOneStepBlocks : kPostTwoStepBlocks)
    post_flat_kernel(const N4Params p) {
  constexpr bool kEvictFirst = (kForm & 1) != 0, kNoDivision = (kForm & 2) == 0, kFastCert = (kForm & 4) != 0,
                 kPipelined = (kForm & 16) != 0, kTwo = (kForm & 8) == 0 && !kPipelined;
  pdl_launch_dependents();
  pdl_wait();
  struct In {
    uint4 r[kN], lo;
    float post[kN], comb[kN * kN];
  };
  auto load = [&](int64_t t, int64_t v) {
    In in;
    const bf16_t* res = p.residual + t * p.residual_stride + v * 8;
#pragma unroll
    for (int j = 0; j < kN; ++j) in.r[j] = kEvictFirst ? ldcs16(res + j * p.res_stream_stride) : ld16(res + j * p.res_stream_stride);
    const bf16_t* lo_src = p.layer_output + t * p.layer_output_stride + v * 8;
    in.lo = kEvictFirst ? ldcs16(lo_src) : ld16(lo_src);
#pragma unroll
    for (int j = 0; j < kN; ++j) in.post[j] = __ldcg(p.post_mix + t * p.post_mix_stride + j);
#pragma unroll
    for (int j = 0; j < kN * kN; ++j) in.comb[j] = __ldcg(p.comb_mix + t * p.comb_mix_stride + j);
    return in;
  };
  auto finish = [&](int64_t t, int64_t v, const In& in) {
    const uint4(&r)[kN] = in.r;
    const uint4& lo = in.lo;
    const float(&post)[kN] = in.post;
    const float(&comb)[kN * kN] = in.comb;
    const bf16_t* res = p.residual + t * p.residual_stride + v * 8;
    const bf16_t* lo_src = p.layer_output + t * p.layer_output_stride + v * 8;
    bf16_t* dst = p.residual_out + t * p.residual_out_stride + v * 8;
    if constexpr (kFastCert) {
      uint32_t w[kN][4];
      const uint32_t failed = post8_fast(post_weights(post, comb), r, lo, w);
#pragma unroll
      for (int k = 0; k < kN; ++k) st16(dst + k * p.H, make_uint4(w[k][0], w[k][1], w[k][2], w[k][3]));
      if (failed != 0) {
        post_flat_fix(res, p.res_stream_stride, lo_src, p.post_mix + t * p.post_mix_stride,
                      p.comb_mix + t * p.comb_mix_stride, dst, p.H, failed);
      }
    } else {
      uint4 out[kN];
      post8(post_weights(post, comb), r, lo, out);
#pragma unroll
      for (int j = 0; j < kN; ++j) st16(dst + j * p.H, out[j]);
    }
  };
  auto item = [&](int64_t t, int64_t v) { finish(t, v, load(t, v)); };
  if constexpr (kTwo || kPipelined || kNoDivision) {
    // (token, vector) items, a grid's threads apart (H <= kMaxH: H / 8 fits an int)
    RowWalk w(static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, static_cast<int64_t>(gridDim.x) * blockDim.x,
              static_cast<int>(p.H / 8));
    if constexpr (kPipelined) {
      if (w.row >= p.T) return;
      In cur = load(w.row, w.col);
      while (true) {
        RowWalk w2 = w;
        w2.next();
        const bool more = w2.row < p.T;
        const In next = load(more ? w2.row : w.row, more ? w2.col : w.col);  // the last step reloads its own item
        finish(w.row, w.col, cur);
        if (!more) break;
        cur = next;
        w = w2;
      }
    } else if constexpr (kTwo) {
      // Two steps at a time: both items' loads are issued before either's arithmetic.
      while (w.row < p.T) {
        RowWalk w2 = w;
        w2.next();
        const bool two = w2.row < p.T;
        const In a = load(w.row, w.col);
        const In b = load(two ? w2.row : w.row, two ? w2.col : w.col);
        finish(w.row, w.col, a);
        if (two) finish(w2.row, w2.col, b);
        w = w2;
        w.next();
      }
    } else {
      for (; w.row < p.T; w.next()) item(w.row, w.col);
    }
  } else {
    const int64_t vecs = p.H / 8;
    const int64_t total = p.T * vecs;
    const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total; i += threads) {
      item(i / vecs, i % vecs);
    }
  }
}

// The loaded terms of one (token, vector): the 4 streams and the layer output.
struct PostIn {
  uint4 r[kN];
  uint4 lo;
};

// Streaming loads of vector v of token t (a broadcast residual is one row, loaded once).
__device__ __forceinline__ PostIn load_post_in(const N4Params& p, int64_t t, int64_t v) {
  PostIn in;
  const bf16_t* res = p.residual + t * p.residual_stride + v * 8;
  if (p.res_stream_stride == 0) {
    in.r[0] = ldcs16(res);
#pragma unroll
    for (int j = 1; j < kN; ++j) in.r[j] = in.r[0];
  } else {
#pragma unroll
    for (int j = 0; j < kN; ++j) in.r[j] = ldcs16(res + j * p.res_stream_stride);
  }
  in.lo = ldcs16(p.layer_output + t * p.layer_output_stride + v * 8);
  return in;
}

__device__ __forceinline__ void load_mixes(const N4Params& p, int64_t t, float (&mix)[kMixes]) {
#pragma unroll
  for (int j = 0; j < kN; ++j) mix[j] = __ldcg(p.post_mix + t * p.post_mix_stride + j);
#pragma unroll
  for (int j = 0; j < kN * kN; ++j) mix[kN + j] = __ldcg(p.comb_mix + t * p.comb_mix_stride + j);
}

__device__ __forceinline__ void post_store(const N4Params& p, int64_t t, int64_t v, const uint4 (&out)[kN]) {
  bf16_t* dst = p.residual_out + t * p.residual_out_stride + v * 8;
#pragma unroll
  for (int j = 0; j < kN; ++j) st16(dst + j * p.H, out[j]);
}

/// post alone, kPostRows: a block per token row, the row's weights once.
__global__ void __launch_bounds__(kThreadsB, kPostRowsBlocks) post_rows_kernel(const N4Params p) {
  pdl_launch_dependents();
  pdl_wait();
  const int tid = threadIdx.x;
  const int64_t vecs = p.H / 8;
  for (int64_t t = blockIdx.x; t < p.T; t += gridDim.x) {
    float mix[kMixes];
    load_mixes(p, t, mix);
    const PostWeights pw = post_weights(mix, mix + kN);
    for (int64_t v0 = tid; v0 < vecs; v0 += kPostBatch * kThreadsB) {
      PostIn in[kPostBatch];
#pragma unroll
      for (int q = 0; q < kPostBatch; ++q) {
        const int64_t v = v0 + q * kThreadsB;
        in[q] = load_post_in(p, t, v < vecs ? v : v0);
      }
#pragma unroll
      for (int q = 0; q < kPostBatch; ++q) {
        const int64_t v = v0 + q * kThreadsB;
        if (v < vecs) {
          uint4 out[kN];
          post8(pw, in[q].r, in[q].lo, out);
          post_store(p, t, v, out);
        }
      }
    }
  }
}

/// post alone, kPostPipelined: thread tid's steps (token t, vector tid + 256 q) in sequence,
/// tokens t = blockIdx.x, blockIdx.x + gridDim.x, ...; step s + 1's loads are issued before
/// step s's arithmetic, and the next token's mixes with the last step of a row.
__global__ void __launch_bounds__(kThreadsB, kPostRowsBlocks) post_pipelined_kernel(const N4Params p) {
  pdl_launch_dependents();
  pdl_wait();
  const int tid = threadIdx.x;
  const int64_t vecs = p.H / 8;
  int64_t t = blockIdx.x;
  if (tid >= vecs || t >= p.T) return;  // no block barriers in this kernel
  const int steps = static_cast<int>((vecs - tid + kThreadsB - 1) / kThreadsB);  // vectors per row, >= 1
  int q = 0;
  PostIn cur = load_post_in(p, t, tid);
  float mix[kMixes];
  load_mixes(p, t, mix);
  PostWeights pw = post_weights(mix, mix + kN);
  while (true) {
    int64_t tn = t;
    int qn = q + 1;
    if (qn == steps) {
      qn = 0;
      tn += gridDim.x;
    }
    const bool more = tn < p.T;
    const bool next_row = more && tn != t;
    // The next step's loads (the last step reloads its own vector: a valid address, unused).
    const PostIn next = load_post_in(p, more ? tn : t, tid + static_cast<int64_t>(more ? qn : q) * kThreadsB);
    if (next_row) load_mixes(p, tn, mix);
    uint4 out[kN];
    post8(pw, cur.r, cur.lo, out);
    post_store(p, t, tid + static_cast<int64_t>(q) * kThreadsB, out);
    if (!more) break;
    if (next_row) pw = post_weights(mix, mix + kN);
    cur = next;
    t = tn;
    q = qn;
  }
}

}  // namespace

void launch_post_kernel(const N4Params& p, const LaunchCtx& ctx, int variant) {
  if (p.T <= 0) return;
  if (variant == kPostAuto) variant = kPostFlat;
  if (variant == kPostBulk) {
    launch_post_bulk_kernel(p, ctx);
    return;
  }
  const int64_t row_blocks = static_cast<int64_t>(ctx.num_sms > 0 ? ctx.num_sms : 1) * kPostRowsBlocks;
  if (variant == kPostFlat) {
    const int64_t total = p.T * (p.H / 8);
    const int64_t blocks_needed = (total + kThreadsB - 1) / kThreadsB;
    const int64_t cap = static_cast<int64_t>(ctx.num_sms) * kPostBlocksPerSm;
    const dim3 grid(static_cast<unsigned>(blocks_needed < cap ? blocks_needed : cap));
#ifdef MHC_GEMM_PROBE
    if (const char* form = std::getenv("MHC_POST_FLAT_FORM"); form != nullptr && *form != '\0') {
      const int f = std::atoi(form);
      constexpr int kForms[] = {0, 1, 4, 8, 10, 16};
      constexpr void (*forms[])(N4Params) = {post_flat_kernel<0>, post_flat_kernel<1>, post_flat_kernel<4>,
                                             post_flat_kernel<8>, post_flat_kernel<10>, post_flat_kernel<16>};
      int k = 0;
      while (k < 6 && kForms[k] != f) ++k;
      MHC_CHECK(k < 6, "MHC_POST_FLAT_FORM: one of 0, 1, 4, 8, 10, 16");
      launch_kernel(forms[k], grid, kThreadsB, 0, ctx, p);
      return;
    }
#endif
    // Two steps at a time where each one-step thread of a full wave would take at least
    // kPostTwoStepItems items (H = 4096: T >= 3168 on 132 multiprocessors); below that the
    // one-step form (three resident blocks) keeps more items in flight. Both forms give the
    // same bits (post8 per item). Session 16: two-step 318.5 against 327.3 us at T = 16384,
    // H = 4096, a tie at T = 4096, 33.2 against 26.1 us at T = 1024.
    const int64_t one_step_threads =
        static_cast<int64_t>(ctx.num_sms > 0 ? ctx.num_sms : 1) * kPostOneStepBlocks * kThreadsB;
    const bool two_step = total >= kPostTwoStepItems * one_step_threads;
    launch_kernel(two_step ? post_flat_kernel<0> : post_flat_kernel<kPostOneStep>, grid, kThreadsB, 0, ctx, p);
    return;
  }
  // A block per row at a time, every resident block busy: at most kPostRowsBlocks per SM.
  const dim3 grid(static_cast<unsigned>(p.T < row_blocks ? p.T : row_blocks));
  MHC_CHECK(variant == kPostRows || variant == kPostPipelined, "launch_post_kernel: unknown variant ", variant);
  launch_kernel(variant == kPostRows ? post_rows_kernel : post_pipelined_kernel, grid, kThreadsB, 0, ctx, p);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_post_kernels(KernelList& out) {
  add_kernel(out, post_flat_kernel<0>, "n4::post_flat_kernel<0> (two steps at a time)");
  add_kernel(out, post_flat_kernel<kPostOneStep>, "n4::post_flat_kernel<8> (one step at a time)");
  add_kernel(out, post_rows_kernel, "n4::post_rows_kernel");
  add_kernel(out, post_pipelined_kernel, "n4::post_pipelined_kernel");
}

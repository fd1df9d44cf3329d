// src/cuda/n4/post_collapse_kernel.cu - the post and the collapse with the carried pre in one
// pass, for n = 4 (the staged post_pre in shifted mode): residual_out[t,k,:] = post of token t
// (post8: the bits of post_kernel and post_bulk_kernel), then layer_input[t] = the collapse of
// those rounded outputs with pre_mix_in[t] (collapse_vec: the bits of collapse_stream_kernel),
// optionally RMSNorm-folded. 20 H bytes a token, where a post kernel and a collapse kernel move 28 H.
//
// Why: collapse_stream_kernel's post mode (one block a token, its loads to registers) computes
// the same bits, but each block waits for its loads once or twice a token and ends in the fold's
// barriers with nothing in flight behind them. Here bulk copies keep the next tokens' rows in
// shared memory while the block works on one, as post_bulk_kernel does; a stage is refilled as
// soon as it is read, and a token costs one block barrier (docs/performance.md has the rows).
//
// Grid mapping: persistent blocks, tokens blockIdx.x + k gridDim.x: with the fold, two 256-thread
// blocks per multiprocessor where each fits 2 stages and the RMSNorm weight (H <= 5120: two or
// three vectors a thread, so a thread's per-token work (its mixes, post weights, barrier) covers
// more columns, and one block's barrier wait overlaps the other's work; Nsight Compute: 394
// against 430 us at T = 16384, H = 4096), else one block of 512 threads (without the fold the
// two-block shape measured 5 us slower: the pass then streams more than it issues, and a block's
// ring is shallower). A stage holds token t's 4 stream rows and its layer-output row (5 bulk
// copies of 2 H bytes, one mbarrier); 3 stages where they fit (one block: H <= 6144; two:
// H <= 3072), else 2. Thread tid takes the 8-column vectors tid, tid + kThreads, .. of the row.
// Token k: wait for its stage, read the thread's vectors into registers, `fence.proxy.async` (the
// reads before any later bulk copy into the stage), the block barrier, thread 0 refills the stage
// with the token that many on; then the fold of an earlier token, then token k's post (post8;
// residual_out stored) and collapse (collapse_vec), stored to layer_input without the fold.
// The fold, 512 threads: the upper 256 threads form token k - 1's fold chains from its collapsed
// row (row buffer (k - 1) % 2) into warp sums (buffer (k - 1) % 2), every thread folds token
// k - 2 (row buffer k % 2, its own vectors, the 8 warp sums, the weight copied to shared memory
// once), and token k's collapse goes to row buffer k % 2; after the last token, two barriers
// and the last two folds. 256 threads: thread c's vectors are exactly chain c's, so each thread
// keeps its collapsed vectors of token k in registers, forms its chain and its warp's sum
// (buffer k % 2) at once, and folds them after the next token's barrier (no rows in shared
// memory); after the last token, one barrier and the last fold. The token's 24 mix values
// (post, comb, carried pre) come from shared memory, loaded by 24 threads during the token
// before (their L2 latency off the token's path).
// Accumulation: post8 and collapse_vec (exact sums rounded once). The fold's sum of squares is
// collapse_kernel's: 256 fmaf chains, chain c over vectors c, c + 256, .. in order, each warp's 32
// summed by the xor butterfly 16, 8, 4, 2, 1, then the 8 warp sums in order from 0 (block_sum's
// order), 1 / sqrtf(sum / H + eps), bf16(u * inv * w).
// Envelope: sm_90+ (bulk copies, mbarriers), n = 4, H % 512 == 0, H <= kPostCollapseMaxH (the
// stages and the rows fit in shared memory), a carried pre, 16-byte aligned rows; the residual
// may be the broadcast [T,H] form (res_stream_stride 0: its row is copied 4 times).
#include <algorithm>

#include "src/cuda/launch.cuh"
#include "src/cuda/n4/collapse_row.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/n4/post8.cuh"
#include "src/cuda/ptx.cuh"
#include "src/cuda/reduce.cuh"

namespace mhc::cuda::n4 {

namespace {

constexpr int kSmThreads = 512;          // threads a multiprocessor: one block of 512 or two of 256
constexpr int kMaxStages = 3;
constexpr int kBarBytes = 128;           // the stages' mbarriers
constexpr int kFoldThreads = kThreadsB;  // the fold's 256 chains (collapse_kernel's)
constexpr int kFoldWarps = kFoldThreads / 32;
constexpr int64_t kSmemLimit = 227 * 1024;      // one block a multiprocessor
constexpr int64_t kSmemLimitPair = 113 * 1024 - 512;  // each of two: 228 KB less 1 KB reserved and the static arrays a block

// Bytes a block keeps besides its stages, in units of H: one block of 512 threads two collapsed
// rows (2 H each, for the deferred fold) and the RMSNorm weight (2 H); a 256-thread block only the
// weight (its threads fold their own vectors from registers).
__host__ __device__ constexpr int post_collapse_tail(int blocks) { return blocks == 1 ? 6 : 2; }
// Whether the barriers, `stages` stages of 10 H bytes and the tail fit each of `blocks` blocks a
// multiprocessor.
__host__ __device__ inline bool post_collapse_fits(int64_t H, int blocks, int stages) {
  return kBarBytes + (stages * 10 + post_collapse_tail(blocks)) * H <= (blocks == 1 ? kSmemLimit : kSmemLimitPair);
}
// Stages at H for `blocks` blocks a multiprocessor: 3 where they and the tail fit, else 2.
__host__ __device__ inline int post_collapse_stages(int64_t H, int blocks) {
  return post_collapse_fits(H, blocks, kMaxStages) ? kMaxStages : 2;
}
// Dynamic shared memory at H: the barriers, the stages, the tail.
size_t post_collapse_smem(int64_t H, int blocks) {
  return kBarBytes + static_cast<size_t>(post_collapse_stages(H, blocks) * 10 + post_collapse_tail(blocks)) * H;
}
// Two 256-thread blocks a multiprocessor where each fits 2 stages and the weight (H <= 5120).
bool post_collapse_narrow_fits(int64_t H) { return post_collapse_fits(H, 2, 2); }

// The 5 copies of token t's rows into stage `st`, completing `bar`.
__device__ __forceinline__ void fill_token(const N4Params& p, int64_t t, uint32_t st, uint32_t bar) {
  const uint32_t row = static_cast<uint32_t>(p.H * 2);
  mbar_expect_tx(bar, 5 * row);
  const bf16_t* res = p.residual + t * p.residual_stride;
#pragma unroll
  for (int j = 0; j < kN; ++j) bulk_load(st + j * row, res + j * p.res_stream_stride, row, bar);
  bulk_load(st + kN * row, p.layer_output + t * p.layer_output_stride, row, bar);
}

constexpr int kMixes = kPostMixes + kN;  // the post's and the carried pre (token_mix_value)

// The fold's 256 chains of one token's collapsed row, by the block's upper 256 threads (those
// with the fewest vectors where H / 8 is not a multiple of kThreads): chain c = tid - (kThreads -
// 256) over vectors c, c + 256, .. in order, each warp's 32 summed by warp_sum, into sums[c / 32].
template <int kThreads>
__device__ __forceinline__ void chains(const uint4* row, int64_t vecs, float* sums) {
  const int c = threadIdx.x - (kThreads - kFoldThreads);
  if (c < 0) return;
  float sq = 0.0f;
  for (int64_t v = c; v < vecs; v += kFoldThreads) add_squares(row[v], sq);
  sq = warp_sum(sq);
  if ((c & 31) == 0) sums[c >> 5] = sq;
}

// 1 / RMS of a token from its fold's 8 warp sums, added in order (block_sum's tail).
__device__ __forceinline__ float fold_inv(const N4Params& p, const float* sums) {
  const float4 lo = reinterpret_cast<const float4*>(sums)[0], hi = reinterpret_cast<const float4*>(sums)[1];
  const float s = lo.x + lo.y + lo.z + lo.w + hi.x + hi.y + hi.z + hi.w;  // 0..7 in order, as block_sum
  return fold_factor(p, s);
}

// The fold of one token by every thread: its vectors v = tid + kStride i, bf16(u * inv * w) (wgt:
// the RMSNorm weight, copied to shared memory once, each thread its own vectors), u = vec(i, v):
// from the collapsed row in shared memory (512 threads) or from the thread's registers (256
// threads, whose vectors are their own chains').
template <int kStride, int kVecs, class Vec>
__device__ __forceinline__ void fold_vectors(const N4Params& p, bf16_t* dst, const float* sums, const uint4* wgt,
                                             Vec vec) {
  const float inv = fold_inv(p, sums);
  const int64_t vecs = p.H / 8;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int64_t v = threadIdx.x + static_cast<int64_t>(i) * kStride;
    if (v < vecs) st16(dst + v * 8, fold_vec(vec(i, v), wgt[v], inv));
  }
}
template <int kThreads, int kVecs>
__device__ __forceinline__ void fold_token(const N4Params& p, bf16_t* dst, const float* sums, const uint4* row,
                                           const uint4* wgt) {
  fold_vectors<kThreads, kVecs>(p, dst, sums, wgt, [row](int, int64_t v) { return row[v]; });
}
template <int kVecs>
__device__ __forceinline__ void fold_own(const N4Params& p, bf16_t* dst, const float* sums, const uint4 (&u)[kVecs],
                                         const uint4* wgt) {
  fold_vectors<kFoldThreads, kVecs>(p, dst, sums, wgt, [&u](int i, int64_t) { return u[i]; });
}

// kThreads: 512 (one block a multiprocessor) or 256 (two); kVecs: vectors a thread,
// ceil(H / 8 / kThreads).
template <int kThreads, int kVecs>
__global__ void __launch_bounds__(kThreads, kSmThreads / kThreads) post_collapse_kernel(const N4Params p) {
  constexpr int kBlocks = kSmThreads / kThreads;
  constexpr bool kOwnFold = kThreads == kFoldThreads;  // each thread's chain is its own vectors
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(16) float sums[2][kFoldWarps];  // the fold's warp sums of token k (k % 2)
  __shared__ float mixes[2][kMixes];     // token k's post, comb and carried pre mixes (k % 2)
  pdl_launch_dependents();
  const int tid = threadIdx.x;
  const int64_t vecs = p.H / 8;
  const int stages_n = post_collapse_stages(p.H, kBlocks);
  const uint32_t row_bytes = static_cast<uint32_t>(p.H * 2), stage_bytes = 5 * row_bytes;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t stages = base + kBarBytes;
  uint4* rows = reinterpret_cast<uint4*>(smem + kBarBytes + stages_n * stage_bytes);  // [2][vecs], 512 threads
  uint4* wgt = kOwnFold ? rows : rows + 2 * vecs;                                      // [vecs]
  const bool fold = p.rmsnorm_weight != nullptr;
  if (tid == 0) {
    for (int s = 0; s < stages_n; ++s) mbar_init(base + s * 8, 1);
    mbar_init_fence();
  }
  __syncthreads();
  pdl_wait();  // the residual and the mixes may come from the kernel before this one
  const int64_t first = blockIdx.x, step = gridDim.x;
  if (tid == 0) {
    for (int s = 0; s < stages_n && first + s * step < p.T; ++s) {
      fill_token(p, first + s * step, stages + s * stage_bytes, base + s * 8);
    }
  }
  bf16_t* dst1 = nullptr;  // layer_input of tokens k - 1 and k - 2, for their folds
  bf16_t* dst2 = nullptr;
  uint4 u_prev[kVecs];  // 256 threads: the thread's collapsed vectors of token k - 1
  int s = 0;  // the token's stage, and the parity of its barrier's phase
  uint32_t parity = 0;
  int k = 0;
  if (tid < kMixes && first < p.T) mixes[0][tid] = token_mix_value(p, first, tid);
  if (fold) {  // the thread's own vectors of the weight: it alone reads them
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int64_t v = tid + static_cast<int64_t>(i) * kThreads;
      if (v < vecs) wgt[v] = ld16(p.rmsnorm_weight + v * 8);
    }
  }
  for (int64_t t = first; t < p.T; t += step, ++k) {
    // token k + 1's mix value of this thread, stored to its buffer before the next barrier
    const bool next_mix = tid < kMixes && t + step < p.T;
    const float nmix = next_mix ? token_mix_value(p, t + step, tid) : 0.0f;
    mbar_wait(base + s * 8, parity);
    const uint4* st = reinterpret_cast<const uint4*>(smem + kBarBytes + s * stage_bytes);
    uint4 r[kVecs][kN], lo[kVecs];
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int64_t v = tid + static_cast<int64_t>(i) * kThreads;
      if (v < vecs) {
#pragma unroll
        for (int j = 0; j < kN; ++j) r[i][j] = st[j * vecs + v];
        lo[i] = st[kN * vecs + v];
      }
    }
    fence_proxy_async_shared();  // this thread's reads of the stage before the refill's copies
    // Every thread has read the stage; token k - 1's collapsed row is complete; token k - 2's warp
    // sums are written.
    __syncthreads();
    float mix[kPostMixes], pre[kN];
    const float* m = mixes[k & 1];
#pragma unroll
    for (int j = 0; j < kPostMixes; ++j) mix[j] = m[j];
#pragma unroll
    for (int j = 0; j < kN; ++j) pre[j] = m[kPostMixes + j];
    if (tid == 0 && t + stages_n * step < p.T) {
      fill_token(p, t + stages_n * step, stages + s * stage_bytes, base + s * 8);
    }
    if (fold && kOwnFold) {  // block-uniform: token k - 1's fold, its warp sums written before the barrier
      if (k >= 1) fold_own<kVecs>(p, dst1, sums[(k - 1) & 1], u_prev, wgt);
    } else if (fold) {
      if (k >= 1) chains<kThreads>(rows + ((k - 1) & 1) * vecs, vecs, sums[(k - 1) & 1]);  // token k - 1's
      // token k - 2's fold, from its row (this buffer, which token k overwrites below: each
      // thread reads and writes only its own vectors there)
      if (k >= 2) fold_token<kThreads, kVecs>(p, dst2, sums[(k - 2) & 1], rows + (k & 1) * vecs, wgt);
    }
    const PostWeights pw = post_weights(mix, mix + kN);
    const float pre_scale = sum_error_scale(pre);
    bf16_t* res_out = p.residual_out + t * p.residual_out_stride;
    bf16_t* dst = p.layer_input + t * p.layer_input_stride;
    uint4* row = rows + (k & 1) * vecs;
    float sq = 0.0f;  // 256 threads: the fold's chain of this thread (its vectors in order)
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int64_t v = tid + static_cast<int64_t>(i) * kThreads;
      if (v < vecs) {
        uint4 out[kN];
        post8(pw, r[i], lo[i], out);
#pragma unroll
        for (int j = 0; j < kN; ++j) st16(res_out + j * p.H + v * 8, out[j]);
        const uint4 u = collapse_vec(CollapseKind::kWeighted, pre, pre_scale, out);
        if (fold && kOwnFold) {
          u_prev[i] = u;
          add_squares(u, sq);
        } else if (fold) {
          row[v] = u;
        } else {
          st16(dst + v * 8, u);
        }
      }
    }
    if (fold && kOwnFold) {
      sq = warp_sum(sq);
      if ((tid & 31) == 0) sums[k & 1][tid >> 5] = sq;
    }
    if (next_mix) mixes[(k + 1) & 1][tid] = nmix;
    dst2 = dst1;
    dst1 = dst;
    if (++s == stages_n) {
      s = 0;
      parity ^= 1u;
    }
  }
  if (fold && kOwnFold && k > 0) {  // the last token's fold
    __syncthreads();  // its warp sums written
    fold_own<kVecs>(p, dst1, sums[(k - 1) & 1], u_prev, wgt);
  } else if (fold && k > 0) {  // the last two tokens' folds
    __syncthreads();  // the last token's collapsed row is complete, the warp sums before it written
    chains<kThreads>(rows + ((k - 1) & 1) * vecs, vecs, sums[(k - 1) & 1]);
    if (k >= 2) fold_token<kThreads, kVecs>(p, dst2, sums[(k - 2) & 1], rows + (k & 1) * vecs, wgt);
    __syncthreads();
    fold_token<kThreads, kVecs>(p, dst1, sums[(k - 1) & 1], rows + ((k - 1) & 1) * vecs, wgt);
  }
}

}  // namespace

bool configure_post_collapse_kernel(int device) {
  size_t narrow = 0, wide = 0;  // the largest need of each shape over the H it runs
  for (int64_t H = kSliceK; H <= kPostCollapseMaxH; H += kSliceK) {
    if (post_collapse_narrow_fits(H)) narrow = std::max(narrow, post_collapse_smem(H, 2));
    wide = std::max(wide, post_collapse_smem(H, 1));
  }
  const int n = static_cast<int>(narrow), w = static_cast<int>(wide);
  return allow_dynamic_smem(post_collapse_kernel<256, 1>, device, n) &&
         allow_dynamic_smem(post_collapse_kernel<256, 2>, device, n) &&
         allow_dynamic_smem(post_collapse_kernel<256, 3>, device, n) &&
         allow_dynamic_smem(post_collapse_kernel<512, 1>, device, w) &&
         allow_dynamic_smem(post_collapse_kernel<512, 2>, device, w);
}

bool post_collapse_supports(int64_t H) { return H % kSliceK == 0 && H <= kPostCollapseMaxH; }

void launch_post_collapse_kernel(const N4Params& p, const LaunchCtx& ctx) {
  MHC_CHECK(post_collapse_supports(p.H), "post_collapse_kernel: H = ", p.H, " outside its envelope");
  MHC_CHECK(p.has_post && p.pre_source == PreSource::kCarried && !p.head_mean && p.residual_out != nullptr &&
                p.layer_input != nullptr,
            "post_collapse_kernel: needs the post's inputs and outputs and a carried pre");
  if (p.T <= 0) return;
  const bool narrow = p.rmsnorm_weight != nullptr && post_collapse_narrow_fits(p.H);
  const int threads = narrow ? kFoldThreads : kSmThreads, per_sm = kSmThreads / threads;
  const int64_t blocks = (ctx.num_sms > 0 ? ctx.num_sms : 1) * per_sm;
  const dim3 grid(static_cast<unsigned>(p.T < blocks ? p.T : blocks));
  const int smem = static_cast<int>(post_collapse_smem(p.H, per_sm));
  const int64_t per = (p.H / 8 + threads - 1) / threads;  // vectors a thread
  void (*kernel)(N4Params) = !narrow   ? (per == 1 ? post_collapse_kernel<512, 1> : post_collapse_kernel<512, 2>)
                             : per == 1 ? post_collapse_kernel<256, 1>
                             : per == 2 ? post_collapse_kernel<256, 2>
                                        : post_collapse_kernel<256, 3>;
  launch_kernel(kernel, grid, threads, smem, ctx, p);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_post_collapse_kernels(KernelList& out) {
  add_kernel(out, post_collapse_kernel<256, 1>, "n4::post_collapse_kernel<256, 1>");
  add_kernel(out, post_collapse_kernel<256, 2>, "n4::post_collapse_kernel<256, 2>");
  add_kernel(out, post_collapse_kernel<256, 3>, "n4::post_collapse_kernel<256, 3>");
  add_kernel(out, post_collapse_kernel<512, 1>, "n4::post_collapse_kernel<512, 1>");
  add_kernel(out, post_collapse_kernel<512, 2>, "n4::post_collapse_kernel<512, 2>");
}

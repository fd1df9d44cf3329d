// src/cuda/n4/post_collapse_kernel.cu - the post and the collapse with the carried pre in one
// pass, for n = 4 (the staged post_pre in shifted mode): residual_out[t,k,:] = post of token t
// (post8: the bits of post_kernel and post_bulk_kernel), then layer_input[t] = the collapse of
// those rounded outputs with pre_mix_in[t] (collapse_vec: the bits of collapse_stream_kernel),
// optionally RMSNorm-folded. 20 H bytes a token, where a post kernel and a collapse kernel move 28 H.
//
// Why: collapse_stream_kernel's post mode (one block a token, its loads to registers) does the
// same at 76-83% of copy (session 24): each block waits for its loads once or twice a token and
// ends in the fold's barriers, with nothing in flight behind them. Here bulk copies keep the
// next tokens' rows in shared memory while the block works on one, as post_bulk_kernel does.
//
// Grid mapping: one 512-thread block per multiprocessor (persistent), tokens blockIdx.x +
// k gridDim.x. A stage holds token t's 4 stream rows and its layer-output row (5 bulk copies of
// 2 H bytes, one mbarrier); kStages stages, refilled by thread 0 with the token kStages on once
// every thread has read the stage (the block barrier after the reads). Thread tid takes the
// 8-column vectors tid, tid + 512, .. of the row.
// Accumulation: post8 and collapse_vec (exact sums rounded once). The fold's sum of squares is
// collapse_kernel's: 256 fmaf chains, chain c over vectors c, c + 256, .. in order (the first 256
// threads, from the collapsed row in shared memory), then block_sum over them, 1 / sqrtf(sum / H
// + eps), bf16(u * inv * w).
// Envelope: sm_90+ (bulk copies, mbarriers), n = 4, H % 512 == 0, H <= kPostCollapseMaxH (the
// stages and the row fit in shared memory), a carried pre, 16-byte aligned rows; the residual
// may be the broadcast [T,H] form (res_stream_stride 0: its row is copied 4 times).
#include "src/cuda/launch.cuh"
#include "src/cuda/n4/collapse_row.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/n4/post8.cuh"
#include "src/cuda/ptx.cuh"
#include "src/cuda/reduce.cuh"

namespace mhc::cuda::n4 {

namespace {

constexpr int kPcThreads = 512;
constexpr int kStages = 3;
constexpr int kBarBytes = 128;  // the stages' mbarriers
constexpr int kFoldThreads = kThreadsB;  // the fold's chains (collapse_kernel's 256)

// Dynamic shared memory at H: the barriers, kStages rows of 10 H bytes, the collapsed row (2 H).
size_t post_collapse_smem(int64_t H) { return kBarBytes + static_cast<size_t>(kStages * 10 + 2) * H; }

// The 5 copies of token t's rows into stage `st`, completing `bar`.
__device__ __forceinline__ void fill_token(const N4Params& p, int64_t t, uint32_t st, uint32_t bar) {
  const uint32_t row = static_cast<uint32_t>(p.H * 2);
  mbar_expect_tx(bar, 5 * row);
  const bf16_t* res = p.residual + t * p.residual_stride;
#pragma unroll
  for (int j = 0; j < kN; ++j) bulk_load(st + j * row, res + j * p.res_stream_stride, row, bar);
  bulk_load(st + kN * row, p.layer_output + t * p.layer_output_stride, row, bar);
}

// kVecs: vectors a thread, ceil(H / 8 / 512).
template <int kVecs>
__global__ void __launch_bounds__(kPcThreads, 1) post_collapse_kernel(const N4Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float scratch[kFoldThreads / 32];
  __shared__ float s_inv;
  pdl_launch_dependents();
  const int tid = threadIdx.x;
  const int64_t vecs = p.H / 8;
  const uint32_t row_bytes = static_cast<uint32_t>(p.H * 2), stage_bytes = 5 * row_bytes;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t stages = base + kBarBytes;
  uint4* s_row = reinterpret_cast<uint4*>(smem + kBarBytes + kStages * stage_bytes);
  const bool fold = p.rmsnorm_weight != nullptr;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(base + s * 8, 1);
    mbar_init_fence();
  }
  __syncthreads();
  pdl_wait();  // the residual and the mixes may come from the kernel before this one
  const int64_t first = blockIdx.x, step = gridDim.x;
  if (tid == 0) {
    for (int s = 0; s < kStages && first + s * step < p.T; ++s) {
      fill_token(p, first + s * step, stages + s * stage_bytes, base + s * 8);
    }
  }
  uint4 wr[kVecs];  // this thread's vectors of the RMSNorm weight (the same for every token)
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int64_t v = tid + static_cast<int64_t>(i) * kPcThreads;
    wr[i] = fold && v < vecs ? ld16(p.rmsnorm_weight + v * 8) : make_uint4(0, 0, 0, 0);
  }
  int s = 0;  // the token's stage, and the parity of its barrier's phase
  uint32_t parity = 0;
  for (int64_t t = first; t < p.T; t += step) {
    float mix[kN + kN * kN], pre[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) mix[j] = __ldcg(p.post_mix + t * p.post_mix_stride + j);
#pragma unroll
    for (int j = 0; j < kN * kN; ++j) mix[kN + j] = __ldcg(p.comb_mix + t * p.comb_mix_stride + j);
#pragma unroll
    for (int j = 0; j < kN; ++j) pre[j] = __ldcg(p.pre_mix_in + t * p.pre_mix_in_stride + j);
    mbar_wait(base + s * 8, parity);
    const uint4* st = reinterpret_cast<const uint4*>(smem + kBarBytes + s * stage_bytes);
    uint4 r[kVecs][kN], lo[kVecs];
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int64_t v = tid + static_cast<int64_t>(i) * kPcThreads;
      if (v < vecs) {
#pragma unroll
        for (int j = 0; j < kN; ++j) r[i][j] = st[j * vecs + v];
        lo[i] = st[kN * vecs + v];
      }
    }
    // Every thread has read the stage (and, from the token before, the collapsed row and s_inv):
    // thread 0 refills it with the token kStages on.
    __syncthreads();
    if (tid == 0 && t + kStages * step < p.T) {
      fill_token(p, t + kStages * step, stages + s * stage_bytes, base + s * 8);
    }
    const PostWeights pw = post_weights(mix, mix + kN);
    const float pre_scale = sum_error_scale(pre);
    bf16_t* res_out = p.residual_out + t * p.residual_out_stride;
    bf16_t* dst = p.layer_input + t * p.layer_input_stride;
    uint4 u[kVecs];
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int64_t v = tid + static_cast<int64_t>(i) * kPcThreads;
      if (v < vecs) {
        uint4 out[kN];
        post8(pw, r[i], lo[i], out);
#pragma unroll
        for (int j = 0; j < kN; ++j) st16(res_out + j * p.H + v * 8, out[j]);
        u[i] = collapse_vec(CollapseKind::kWeighted, pre, pre_scale, out);
        if (fold) {
          s_row[v] = u[i];
        } else {
          st16(dst + v * 8, u[i]);
        }
      }
    }
    if (fold) {  // block-uniform
      __syncthreads();  // the collapsed row is in shared memory
      if (tid < kFoldThreads) {
        float sq[1] = {0.0f};
        for (int64_t v = tid; v < vecs; v += kFoldThreads) add_squares(s_row[v], sq[0]);
        block_sum<1, kFoldThreads / 32>(sq, scratch);
        if (tid == 0) s_inv = 1.0f / sqrtf(sq[0] / static_cast<float>(p.H) + p.rmsnorm_eps);
      }
      __syncthreads();
      const float inv = s_inv;
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int64_t v = tid + static_cast<int64_t>(i) * kPcThreads;
        if (v < vecs) st16(dst + v * 8, fold_vec(u[i], wr[i], inv));
      }
    }
    if (++s == kStages) {
      s = 0;
      parity ^= 1u;
    }
  }
}

}  // namespace

bool configure_post_collapse_kernel(int device) {
  const int bytes = static_cast<int>(post_collapse_smem(kPostCollapseMaxH));
  return allow_dynamic_smem(post_collapse_kernel<1>, device, bytes) &&
         allow_dynamic_smem(post_collapse_kernel<2>, device, bytes);
}

bool post_collapse_supports(int64_t H) { return H % kSliceK == 0 && H <= kPostCollapseMaxH; }

void launch_post_collapse_kernel(const N4Params& p, const LaunchCtx& ctx) {
  MHC_CHECK(post_collapse_supports(p.H), "post_collapse_kernel: H = ", p.H, " outside its envelope");
  MHC_CHECK(p.has_post && p.pre_source == PreSource::kCarried && !p.head_mean && p.residual_out != nullptr &&
                p.layer_input != nullptr,
            "post_collapse_kernel: needs the post's inputs and outputs and a carried pre");
  if (p.T <= 0) return;
  const int64_t sms = ctx.num_sms > 0 ? ctx.num_sms : 1;
  const dim3 grid(static_cast<unsigned>(p.T < sms ? p.T : sms));
  const int smem = static_cast<int>(post_collapse_smem(p.H));
  if (p.H / 8 <= kPcThreads) {
    launch_kernel(post_collapse_kernel<1>, grid, kPcThreads, smem, ctx, p);
  } else {
    launch_kernel(post_collapse_kernel<2>, grid, kPcThreads, smem, ctx, p);
  }
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_post_collapse_kernels(KernelList& out) {
  add_kernel(out, post_collapse_kernel<1>, "n4::post_collapse_kernel<1>");
  add_kernel(out, post_collapse_kernel<2>, "n4::post_collapse_kernel<2>");
}

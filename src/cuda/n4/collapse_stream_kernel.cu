// src/cuda/n4/collapse_stream_kernel.cu - the collapse stage alone for n = 4, streaming:
// layer_input[t] = bf16(sum_j pre[t,j] * x[t,j,:]) with the carried pre (p.pre_mix_in: a
// caller's pre_mix, or the staged plan's finalize buffer), stream 0 bit for bit (identity), or
// the mean head bf16(sum_j x[t,j,:] / 4); optionally RMSNorm-folded.
//
// Grid mapping: one block per token, threads = max(256, H / 16): thread tid owns the 8-column
// vectors tid and tid + threads (so from H = 4096 on every thread has exactly two, and no
// thread waits on a third batch of loads), loads the 4 streams of both at once (16-byte
// streaming loads, read once) before any arithmetic, and keeps its collapsed vectors in
// registers for the fold.
// Accumulation: the arithmetic of collapse_kernel's collapse, bit for bit: exact_sum_bf16x2 with
// the same weights and bounds (weighted), the double sum (mean), and the fold's sum of squares
// in collapse_kernel's order (256 fmaf chains, chain c over vectors c, c + 256, .. in order, then
// block_sum over those 256 values: with 256 threads each thread's own chain, with more the
// collapsed row goes through shared memory and the first 256 threads form the chains), 1 /
// sqrtf(sum / H + eps), bf16(u * inv * w).
// With p.copy_x_out (pre_broadcast by fn_b: x is the embedding at stream stride 0), the thread
// also stores each vector it loaded to the n streams of residual_out, so the materialised
// residual costs its writes and no second read of the embedding.
// Envelope: n = 4, H % 512 == 0, H <= 16384, 16-byte aligned rows (the n4 envelope).
#include "src/cuda/n4/collapse_row.cuh"
#include "src/cuda/launch.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/ptx.cuh"
#include "src/cuda/reduce.cuh"

namespace mhc::cuda::n4 {

namespace {

constexpr int kStreamVecs = 2;                          // vectors a thread
constexpr int kMaxStreamThreads = kMaxH / 8 / kStreamVecs;  // 1024
static_assert(kThreadsB * kStreamVecs * 8 <= 4096 && kMaxStreamThreads <= 1024, "block shape");

// 64 registers a thread at most (a 1024-thread block): 4 resident 256-thread blocks a
// multiprocessor at H <= 4096, 3 at H = 5120, 2 at H = 7168.
__global__ void __launch_bounds__(kMaxStreamThreads, 1) collapse_stream_kernel(const N4Params p) {
  extern __shared__ uint4 s_row[];  // the collapsed row, where the fold's chains are not the threads' own
  __shared__ float scratch[kThreadsB / 32];
  __shared__ float s_inv;
  pdl_launch_dependents();
  pdl_wait();  // the streams and the pre come from the kernels before this one
  const int tid = threadIdx.x, threads = blockDim.x;
  const int64_t t = blockIdx.x;
  const int64_t vecs = p.H / 8;
  const CollapseKind mode = collapse_kind(p);
  const int streams = mode == CollapseKind::kIdentity ? 1 : kN;
  const bool fold = p.rmsnorm_weight != nullptr;
  const bool own_chains = threads == kThreadsB;  // vectors tid, tid + 256: the canonical chains
  float pre[kN];
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    pre[j] = mode == CollapseKind::kWeighted ? __ldcg(p.pre_mix_in + t * p.pre_mix_in_stride + j) : 0.0f;
  }
  const float pre_scale = sum_error_scale(pre);
  const bf16_t* x = p.x + t * p.x_stride;
  bf16_t* dst = p.layer_input + t * p.layer_input_stride;
  bf16_t* copies = p.copy_x_out ? p.residual_out + t * p.residual_out_stride : nullptr;
  uint4 r[kStreamVecs][kN];
#pragma unroll
  for (int q = 0; q < kStreamVecs; ++q) {
    const int64_t v = tid + static_cast<int64_t>(q) * threads;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      r[q][j] = v < vecs && j < streams ? ldcs16(x + j * p.x_stream_stride + v * 8) : make_uint4(0, 0, 0, 0);
    }
  }
  uint4 u[kStreamVecs];  // this thread's collapsed vectors (kept for the fold)
  float sq[1] = {0.0f};
#pragma unroll
  for (int q = 0; q < kStreamVecs; ++q) {
    const int64_t v = tid + static_cast<int64_t>(q) * threads;
    if (v < vecs) {
      if (copies != nullptr) {
#pragma unroll
        for (int j = 0; j < kN; ++j) st16(copies + j * p.H + v * 8, r[q][0]);
      }
      u[q] = collapse_vec(mode, pre, pre_scale, r[q]);
      if (!fold) {
        st16(dst + v * 8, u[q]);
      } else if (own_chains) {
        add_squares(u[q], sq[0]);
      } else {
        s_row[v] = u[q];
      }
    }
  }
  if (!fold) return;  // block-uniform
  float inv;
  if (own_chains) {
    block_sum(sq, scratch);
    inv = 1.0f / sqrtf(sq[0] / static_cast<float>(p.H) + p.rmsnorm_eps);
  } else {
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
  for (int q = 0; q < kStreamVecs; ++q) {
    const int64_t v = tid + static_cast<int64_t>(q) * threads;
    if (v < vecs) st16(dst + v * 8, fold_vec(u[q], ld16(p.rmsnorm_weight + v * 8), inv));
  }
}

}  // namespace

void launch_collapse_stream_kernel(const N4Params& p, const LaunchCtx& ctx) {
  MHC_CHECK(p.pre_source != PreSource::kComputed || p.head_mean,
            "collapse_stream_kernel: a computed pre is passed as pre_mix_in (carried)");
  MHC_CHECK(p.H % kSliceK == 0 && p.H <= kMaxH, "collapse_stream_kernel: H = ", p.H, " outside the n4 envelope");
  MHC_CHECK(p.T < (int64_t{1} << 31), "collapse_stream_kernel: too many tokens in one launch");
  MHC_CHECK(!p.copy_x_out || (p.x_stream_stride == 0 && p.residual_out != nullptr),
            "collapse_stream_kernel: copies of x need a broadcast x and a residual_out");
  if (p.T <= 0) return;
  const dim3 grid(static_cast<unsigned>(p.T));
  const int64_t half = p.H / 8 / kStreamVecs;
  const int threads = static_cast<int>(half > kThreadsB ? half : kThreadsB);
  const bool row_smem = p.rmsnorm_weight != nullptr && threads != kThreadsB;
  launch_kernel(collapse_stream_kernel, grid, threads, row_smem ? static_cast<size_t>(p.H / 8) * 16 : 0, ctx, p);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_collapse_stream_kernels(KernelList& out) {
  add_kernel(out, collapse_stream_kernel, "n4::collapse_stream_kernel");
}

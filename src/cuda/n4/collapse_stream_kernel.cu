// src/cuda/n4/collapse_stream_kernel.cu - the collapse stage alone for n = 4, streaming:
// layer_input[t] = bf16(sum_j pre[t,j] * x[t,j,:]) with the carried pre (p.pre_mix_in: a
// caller's pre_mix, or the staged plan's finalize buffer), stream 0 bit for bit (identity), or
// the mean head bf16(sum_j x[t,j,:] / 4); optionally RMSNorm-folded.
//
// Grid mapping: one 256-thread block per token, running collapse_stream_token
// (src/cuda/n4/collapse_stream.cuh: thread tid owns the 8-column vectors tid, tid + 256, ..,
// its loads issued two vectors at a time before any arithmetic, the collapsed vectors kept in
// registers for the fold).
// Accumulation: collapse_kernel's collapse and fold, bit for bit (collapse_stream.cuh).
// Envelope: n = 4, H % 512 == 0, H <= 16384, 16-byte aligned rows (the n4 envelope).
#include "src/cuda/launch.cuh"
#include "src/cuda/n4/collapse_stream.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda::n4 {

namespace {

// Resident blocks per SM by vectors per thread: on Hopper 4 / 3 / 2 (64 / 85 / 128 registers);
// one fewer elsewhere where ptxas spills at those bounds (sm_80 at 64, sm_120a's double path at
// 85).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
#define MHC_COLLAPSE_STREAM_BLOCKS(vecs) ((vecs) <= 2 ? 4 : (vecs) <= 4 ? 3 : 2)
#else
#define MHC_COLLAPSE_STREAM_BLOCKS(vecs) ((vecs) <= 2 ? 3 : 2)
#endif

template <int kVecs>
__global__ void __launch_bounds__(kThreadsB, MHC_COLLAPSE_STREAM_BLOCKS(kVecs)) collapse_stream_kernel(const N4Params p) {
  __shared__ float scratch[kThreadsB / 32];
  pdl_launch_dependents();
  pdl_wait();  // the streams and the pre come from the kernels before this one
  const int64_t t = blockIdx.x;
  const CollapseKind mode = collapse_kind(p);
  float pre[kN];
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    pre[j] = mode == CollapseKind::kWeighted ? __ldcg(p.pre_mix_in + t * p.pre_mix_in_stride + j) : 0.0f;
  }
  collapse_stream_token<kVecs>(p, t, mode, pre, scratch);
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
  const int64_t vecs = (p.H / 8 + kThreadsB - 1) / kThreadsB;  // per thread
  if (vecs <= 2) {
    launch_kernel(collapse_stream_kernel<2>, grid, kThreadsB, 0, ctx, p);
  } else if (vecs <= 4) {
    launch_kernel(collapse_stream_kernel<4>, grid, kThreadsB, 0, ctx, p);
  } else {
    launch_kernel(collapse_stream_kernel<8>, grid, kThreadsB, 0, ctx, p);
  }
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_collapse_stream_kernels(KernelList& out) {
  add_kernel(out, collapse_stream_kernel<2>, "n4::collapse_stream_kernel<2>");
  add_kernel(out, collapse_stream_kernel<4>, "n4::collapse_stream_kernel<4>");
  add_kernel(out, collapse_stream_kernel<8>, "n4::collapse_stream_kernel<8>");
}

// src/cuda/n4/post_bulk_kernel.cu - post alone for n = 4 (as post_kernel.cu), its loads through a
// ring of bulk copies: residual_out[t,k,:] = bf16(post[k] * layer_output[t,:] + sum_j comb[j,k] *
// residual[t,j,:]), each output post8's exact sum rounded once (the bits of post_kernel.cu).
//
// Why: post's accesses stream at 96-97% of copy where enough bytes are in flight (session 17,
// bench/probes/post_stream.cu), while post_flat_kernel, whose loads go to registers, keeps
// fewer in flight at the occupancy its registers allow (89%). Bulk copies keep them in shared
// memory instead, at any occupancy: 90.7 / 93.2% of copy at T = 16384, H = 4096 / 7168 on the
// H200 (post_flat_kernel 89.0 / 89.0%).
//
// Grid mapping: one block per multiprocessor (persistent), kGroups groups of consumer threads,
// 512 threads in all. A tile is token t's segment c of kSegCols columns of the 4 streams and the
// layer output (5 bulk copies of kSegCols x 2 bytes); the block's tiles are blockIdx.x +
// k gridDim.x, tile k taken by group k % kGroups, each group with its own kPerGroup stages
// refilled by its thread 0 (so no group waits for another), consumer thread i of a group taking
// vector i of the segment. A stage's `full` barrier counts the copies' bytes; once every thread
// of the group has read the stage (each thread's `fence.proxy.async` after its reads, then a named
// barrier of the group), thread 0 refills it with the group's tile kPerGroup ahead. Outputs are
// stored by the consumers (16-byte stores; the staged plan reads residual_out back from L2).
// Accumulation: post8 (src/cuda/n4/post8.cuh), the token's 20 mixes read per vector as
// post_flat_kernel does.
// Envelope: sm_90+ (bulk copies, mbarriers), n = 4, H % 512 == 0, 16-byte aligned rows; the
// residual may be the broadcast [T,H] form (res_stream_stride 0: its row is copied 4 times).
#include "src/cuda/launch.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/n4/post8.cuh"
#include "src/cuda/ptx.cuh"
#include "src/cuda/row_walk.cuh"

namespace mhc::cuda::n4 {

namespace {

constexpr int kBulkThreads = 512;
constexpr int kPerGroup = 3;                          // stages a group: one consumed, two in flight
constexpr int kRingCols = kBulkThreads * 8;           // the groups' segments side by side, any width
constexpr int kBarBytes = 256;                        // full[] of every stage (8 groups x 3 at most)
constexpr int kBulkSmem = kBarBytes + kPerGroup * 5 * kRingCols * 2;  // 120.25 KB
static_assert((kBulkThreads / 64) * kPerGroup * 8 <= kBarBytes, "barriers");

// The 5 copies of tile (t, c) into stage `st`, completing `bar`.
template <int kSegCols>
__device__ __forceinline__ void fill_stage(const N4Params& p, int64_t t, int c, uint32_t st, uint32_t bar) {
  constexpr int kSegBytes = kSegCols * 2;
  mbar_expect_tx(bar, 5 * kSegBytes);
  const bf16_t* res = p.residual + t * p.residual_stride + static_cast<int64_t>(c) * kSegCols;
#pragma unroll
  for (int j = 0; j < kN; ++j) bulk_load(st + j * kSegBytes, res + j * p.res_stream_stride, kSegBytes, bar);
  bulk_load(st + kN * kSegBytes, p.layer_output + t * p.layer_output_stride + static_cast<int64_t>(c) * kSegCols, kSegBytes,
            bar);
}

template <int kSegCols>
__global__ void __launch_bounds__(kBulkThreads, 1) post_bulk_kernel(const N4Params p) {
  constexpr int kSegVecs = kSegCols / 8, kGroups = kBulkThreads / kSegVecs, kStageBytes = 5 * kSegCols * 2;
  extern __shared__ __align__(128) unsigned char smem[];
  pdl_launch_dependents();
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int g = threadIdx.x / kSegVecs, me = threadIdx.x % kSegVecs;
  const uint32_t full = base + g * kPerGroup * 8, stages = base + kBarBytes + g * kPerGroup * kStageBytes;
  if (me == 0) {
    for (int s = 0; s < kPerGroup; ++s) mbar_init(full + s * 8, 1);
    mbar_init_fence();
  }
  __syncthreads();
  pdl_wait();  // the residual and the mixes may come from the kernel before this one
  const int segs = static_cast<int>(p.H / kSegCols);
  const int64_t tiles = p.T * segs;
  const int64_t step = static_cast<int64_t>(kGroups) * gridDim.x;
  const int64_t first = blockIdx.x + static_cast<int64_t>(g) * gridDim.x;
  if (me == 0) {  // the group's first kPerGroup tiles
    RowWalk w(first, step, segs);
    for (int s = 0; s < kPerGroup && first + s * step < tiles; ++s, w.next()) {
      fill_stage<kSegCols>(p, w.row, w.col, stages + s * kStageBytes, full + s * 8);
    }
  }
  RowWalk w(first, step, segs), ahead(first + kPerGroup * step, step, segs);
  const unsigned char* my_stages = smem + kBarBytes + g * kPerGroup * kStageBytes;
  int s = 0;           // the stage of this tile, and the parity of its barrier's phase
  uint32_t parity = 0;
  for (int64_t tile = first; tile < tiles; tile += step, w.next(), ahead.next()) {
    float post[kN], comb[kN * kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) post[j] = __ldcg(p.post_mix + w.row * p.post_mix_stride + j);
#pragma unroll
    for (int j = 0; j < kN * kN; ++j) comb[j] = __ldcg(p.comb_mix + w.row * p.comb_mix_stride + j);
    mbar_wait(full + s * 8, parity);
    const uint4* st = reinterpret_cast<const uint4*>(my_stages + s * kStageBytes);
    uint4 r[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) r[j] = st[j * kSegVecs + me];
    const uint4 lo = st[kN * kSegVecs + me];
    // This thread's reads of the stage before the refill's bulk copies into it (the async proxy:
    // the group barrier alone does not order them), as post_collapse_kernel and gemm_group_kernel do.
    fence_proxy_async_shared();
    // Every thread of the group has read the stage: its thread 0 refills it.
    named_sync(1 + g, kSegVecs);
    if (me == 0 && tile + kPerGroup * step < tiles) fill_stage<kSegCols>(p, ahead.row, ahead.col, stages + s * kStageBytes, full + s * 8);
    uint4 out[kN];
    post8(post_weights(post, comb), r, lo, out);
    bf16_t* dst = p.residual_out + w.row * p.residual_out_stride + static_cast<int64_t>(w.col) * kSegCols + me * 8;
#pragma unroll
    for (int j = 0; j < kN; ++j) st16(dst + j * p.H, out[j]);
    if (++s == kPerGroup) {
      s = 0;
      parity ^= 1u;
    }
  }
}

}  // namespace

bool configure_post_bulk_kernel(int device) {
  return allow_dynamic_smem(post_bulk_kernel<1024>, device, kBulkSmem) && allow_dynamic_smem(post_bulk_kernel<512>, device, kBulkSmem);
}

void launch_post_bulk_kernel(const N4Params& p, const LaunchCtx& ctx) {
  MHC_CHECK(p.H % 512 == 0 && p.H <= kMaxH, "post_bulk_kernel: H = ", p.H, " outside the n4 envelope");
  if (p.T <= 0) return;
  const bool wide = p.H % 1024 == 0;  // 1024-column segments where H allows
  const int64_t tiles = p.T * (p.H / (wide ? 1024 : 512));
  const int64_t sms = ctx.num_sms > 0 ? ctx.num_sms : 1;
  const dim3 grid(static_cast<unsigned>(tiles < sms ? tiles : sms));
  launch_kernel(wide ? post_bulk_kernel<1024> : post_bulk_kernel<512>, grid, kBulkThreads, kBulkSmem, ctx, p);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_post_bulk_kernels(KernelList& out) {
  add_kernel(out, post_bulk_kernel<1024>, "n4::post_bulk_kernel<1024>");
  add_kernel(out, post_bulk_kernel<512>, "n4::post_bulk_kernel<512>");
}

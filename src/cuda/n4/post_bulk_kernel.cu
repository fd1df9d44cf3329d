// src/cuda/n4/post_bulk_kernel.cu - post alone for n = 4 (as post_kernel.cu), its loads through a
// ring of bulk copies: residual_out[t,k,:] = bf16(post[k] * layer_output[t,:] + sum_j comb[j,k] *
// residual[t,j,:]), each output post8's exact sum rounded once (the bits of post_kernel.cu).
//
// Why: post's accesses stream at 96-97% of copy where enough bytes are in flight (session 17,
// bench/probes/post_stream.cu), while post_flat_kernel, whose loads go to registers, keeps
// fewer in flight at the occupancy its registers allow (89%). Bulk copies keep them in shared
// memory instead, at any occupancy.
//
// Grid mapping: one block per multiprocessor (persistent), 1 producer warp + kGroups groups of
// 64 consumer threads. A tile is token t's 512-column segment c of the 4 streams and the layer
// output (5 bulk copies of 1 KB, a 5 KB stage); the block's tiles are blockIdx.x + k gridDim.x
// in order of k, tile k in stage k % kStages (two stages a group) and consumed by group
// k % kGroups, consumer thread i of a group taking vector i of the segment. Lane 0 of the
// producer refills a stage once its group has arrived on the stage's `empty` barrier; a group
// waits on the stage's `full` barrier (the copies' transaction count). Outputs are stored by
// the consumers (16-byte stores; the staged plan reads residual_out back from L2).
// Accumulation: post8 (src/cuda/n4/post8.cuh), the token's 20 mixes read per vector as
// post_flat_kernel does.
// Envelope: sm_90+ (bulk copies, mbarriers), n = 4, H % 512 == 0, 16-byte aligned rows; the
// residual may be the broadcast [T,H] form (res_stream_stride 0: its row is copied 4 times).
#include "src/cuda/launch.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/n4/post8.cuh"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda::n4 {

namespace {

constexpr int kSegCols = 512;                        // columns a tile
constexpr int kSegVecs = kSegCols / 8;               // 64: the consumers of a group
constexpr int kSegBytes = kSegCols * 2;              // 1 KB a stream
constexpr int kBulkStageBytes = 5 * kSegBytes;       // 4 streams + the layer output
constexpr int kGroups = 8;                           // consumer groups
constexpr int kStages = 2 * kGroups;                 // two a group: one consumed, one filling
constexpr int kBulkThreads = 32 + kGroups * kSegVecs;  // 544
constexpr int kBarBytes = 2 * kStages * 8;           // full[], empty[]
constexpr int kBulkSmem = kBarBytes + kStages * kBulkStageBytes;  // 80.25 KB
static_assert(kBarBytes % 16 == 0, "stages 16-byte aligned");

/// Steps (token, segment) through a block's tiles without a division: `step` tiles at a time.
struct TileWalk {
  int64_t t;
  int c, segs, dt, dc;
  __device__ TileWalk(int64_t first, int64_t step, int segs_) : segs(segs_) {
    t = first / segs;
    c = static_cast<int>(first - t * segs);
    dt = static_cast<int>(step / segs);
    dc = static_cast<int>(step - static_cast<int64_t>(dt) * segs);
  }
  __device__ void next() {
    t += dt;
    c += dc;
    if (c >= segs) {
      c -= segs;
      ++t;
    }
  }
};

__global__ void __launch_bounds__(kBulkThreads, 1) post_bulk_kernel(const N4Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  pdl_launch_dependents();
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t full = base, empty = base + kStages * 8, stages = base + kBarBytes;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full + s * 8, 1);
      mbar_init(empty + s * 8, kSegVecs);
    }
    mbar_init_fence();
  }
  __syncthreads();
  pdl_wait();  // the residual and the mixes may come from the kernel before this one
  const int segs = static_cast<int>(p.H / kSegCols);
  const int64_t tiles = p.T * segs;
  if (threadIdx.x < 32) {
    if (threadIdx.x != 0) return;
    TileWalk w(blockIdx.x, gridDim.x, segs);
    for (int64_t k = 0, tile = blockIdx.x; tile < tiles; ++k, tile += gridDim.x, w.next()) {
      const int s = static_cast<int>(k % kStages);
      if (k >= kStages) mbar_wait(empty + s * 8, static_cast<uint32_t>((k / kStages - 1) & 1));
      const uint32_t st = stages + s * kBulkStageBytes, bar = full + s * 8;
      mbar_expect_tx(bar, kBulkStageBytes);
      const bf16_t* res = p.residual + w.t * p.residual_stride + static_cast<int64_t>(w.c) * kSegCols;
#pragma unroll
      for (int j = 0; j < kN; ++j) bulk_load(st + j * kSegBytes, res + j * p.res_stream_stride, kSegBytes, bar);
      bulk_load(st + kN * kSegBytes, p.layer_output + w.t * p.layer_output_stride + static_cast<int64_t>(w.c) * kSegCols,
                kSegBytes, bar);
    }
    return;
  }
  const int g = (threadIdx.x - 32) / kSegVecs, me = (threadIdx.x - 32) % kSegVecs;
  const unsigned char* stage_ptr = smem + kBarBytes;
  TileWalk w(blockIdx.x + static_cast<int64_t>(g) * gridDim.x, static_cast<int64_t>(kGroups) * gridDim.x, segs);
  for (int64_t k = g, tile = blockIdx.x + static_cast<int64_t>(g) * gridDim.x; tile < tiles;
       k += kGroups, tile += static_cast<int64_t>(kGroups) * gridDim.x, w.next()) {
    const int s = static_cast<int>(k % kStages);
    float post[kN], comb[kN * kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) post[j] = __ldcg(p.post_mix + w.t * p.post_mix_stride + j);
#pragma unroll
    for (int j = 0; j < kN * kN; ++j) comb[j] = __ldcg(p.comb_mix + w.t * p.comb_mix_stride + j);
    mbar_wait(full + s * 8, static_cast<uint32_t>((k / kStages) & 1));
    const uint4* st = reinterpret_cast<const uint4*>(stage_ptr + s * kBulkStageBytes);
    uint4 r[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) r[j] = st[j * kSegVecs + me];
    const uint4 lo = st[kN * kSegVecs + me];
    mbar_arrive(empty + s * 8);  // this thread's reads of the stage are done
    uint4 out[kN];
    post8(post_weights(post, comb), r, lo, out);
    bf16_t* dst = p.residual_out + w.t * p.residual_out_stride + static_cast<int64_t>(w.c) * kSegCols + me * 8;
#pragma unroll
    for (int j = 0; j < kN; ++j) st16(dst + j * p.H, out[j]);
  }
}

}  // namespace

bool configure_post_bulk_kernel(int device) { return allow_dynamic_smem(post_bulk_kernel, device, kBulkSmem); }

void launch_post_bulk_kernel(const N4Params& p, const LaunchCtx& ctx) {
  MHC_CHECK(p.H % kSegCols == 0 && p.H <= kMaxH, "post_bulk_kernel: H = ", p.H, " outside the n4 envelope");
  if (p.T <= 0) return;
  const int64_t tiles = p.T * (p.H / kSegCols);
  const int64_t sms = ctx.num_sms > 0 ? ctx.num_sms : 1;
  launch_kernel(post_bulk_kernel, dim3(static_cast<unsigned>(tiles < sms ? tiles : sms)), kBulkThreads, kBulkSmem, ctx, p);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_post_bulk_kernels(KernelList& out) { add_kernel(out, post_bulk_kernel, "n4::post_bulk_kernel"); }

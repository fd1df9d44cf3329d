// src/cuda/n4/cluster_pre_kernel.cu - pre (computed pre, normal mode) and the learned head for
// n = 4 at H = 4096 in one pass over the streams: each 16-token tile is read from DRAM once, and
// its mixes, epilogue, collapse and RMSNorm fold are formed on chip by a 16-block thread-block
// cluster, the blocks exchanging partials through distributed shared memory (spec performance
// notes: "everything on chip"; 10 H bytes a token against the staged plan's 18 H).
//
// What it computes: the same outputs, bit for bit, as every other n4 variant of pre and head: the
// mixes in the canonical order of config.cuh (phase1_run's chunk partials, chunk_group_sum,
// groups_total), mixes_epilogue's post, comb and pre (a learned head: the pre alone, its
// fragments' rows past 4 being zero), and collapse_row's collapse and fold.
// Grid mapping: persistent 16-block clusters (as many as are resident, at most the tiles);
// cluster k takes tiles k, k + clusters, ..; block r of a cluster owns columns [256 r, 256 r +
// 256) of every stream (chunks 2 r and 2 r + 1) and token r of each tile. Per tile:
//   1. phase1_run (decode_phase1.cuh) over the rows (token, chunk) of the block's 2 chunks: the
//      streams' slice staged in shared memory (kept for the collapse), each chunk's 24 dots and
//      sum of squares, stored into the owner block's inbox (distributed shared memory);
//   2. the owner of token r sums its 32 chunks' partials in the canonical order; warp 0 forms the
//      pre (and the pre and post outputs) and stores the pre into every block; the sums wait in a
//      queue, and once kCombQueue tokens are queued (and at the end) warp 1 runs their comb's
//      Sinkhorn a lane each, so that chain is on the path once per kCombQueue tiles;
//   3. every block collapses its slice of the tile's tokens from shared memory; without the fold
//      it stores layer_input; with it, it stores the collapsed vectors into the owner's row
//      inbox, and the owner folds its token's whole row as collapse_loaded does (thread i's fmaf
//      chain over vectors i and i + 256, block_sum over 8 warps) and stores it.
// Each step's inbox is written before a cluster barrier and read after it, and rewritten only
// after the next barrier, so one set of inboxes serves every tile. Each tile first prefetches
// the block's slice of the cluster's next tile into L2 (bulk prefetches), so a tile's staging
// waits on L2 rather than DRAM.
// Accumulation: phase1_run's mma chains and sums of squares (decode_chunk_kernel's), fp32 sums
// in the canonical order, exact sums for the collapse (collapse_vec), the fold's fmaf chains and
// block_sum in collapse_loaded's order.
// Envelope: compute capability 9.0 (16-block clusters, a non-portable size), n = 4, H = 4096,
// pre with the computed pre (normal mode) or the learned head, 16-byte aligned rows; ~204 KB of
// shared memory a block (both chunks' B fragments, 144 KB, and the tile's slice).
// Status: built without a GPU (session 39); explicit rows only (`pre.cuda_n4_cluster`,
// `head.cuda_n4_cluster`), never the dispatcher's first choice until measured. Its tiles run one
// after another (each tile's exchanges are on the cluster's path: two cluster barriers, three
// with the fold), so it shows the bits and the exchange protocol of the on-chip design, not yet
// its speed: bench/results/2026-12-05-nodevice-s39/README.md counts what a pipelined form needs.
#include <cooperative_groups.h>

#include "src/cuda/launch.cuh"
#include "src/cuda/n4/canonical.cuh"
#include "src/cuda/n4/collapse_row.cuh"
#include "src/cuda/n4/decode_phase1.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/reduce.cuh"

namespace mhc::cuda::n4 {

namespace {

namespace cg = cooperative_groups;

constexpr int kCluster = 16;                       // blocks a cluster (non-portable size)
constexpr int kClusterH = 4096;                    // the one H: 2 chunks a block
constexpr int kBlockChunks = 2;
constexpr int kClusterChunks = kCluster * kBlockChunks;  // 32 = H / 128
constexpr int kSliceVecs = kBlockChunks * kChunkCols / 8;  // 32 vectors of 8 columns a block
constexpr int kRowVecs = kClusterH / 8;            // 512 vectors of 8 columns a token row
constexpr int kFoldBarrier = 1;                    // the owner's fold: block_sum over warps 0..7
constexpr int kThreads = kDecodeBlock;             // 384: phase1_run's warps (stream, row block)
constexpr int kCombQueue = 32;                     // owned tokens whose comb waits for one warp's pass
static_assert(kClusterChunks * kChunkCols == kClusterH, "a cluster spans the row");
static_assert(kCluster * kSliceVecs == kRowVecs && kRowVecs % kThreadsB == 0, "the owner's row: 2 vectors a fold thread");
// Dynamic shared memory: phase1_run's run of 2 groups, then the 2 chunks' B fragments.
constexpr int kBOffset = run_smem_bytes(kBlockChunks);
constexpr int kClusterSmem = kBOffset + kBlockChunks * kFragBytes;
static_assert(kBOffset % 16 == 0, "B fragments 16-byte aligned");

struct ClusterPreParams {
  N4Params p;
  int32_t tiles;  // ceil(T / 16)
};

// phase1_run's rows: row k < 16 is token first + k of chunk 2 r, row 16 + k the same token of
// chunk 2 r + 1; rows of tokens past the tile's ntok are invalid (zero rows).
struct ClusterRows {
  int64_t first;
  int ntok, chunk0;
  __device__ int count() const { return kBlockChunks * ntok; }
  __device__ int row(int k) const { return k < ntok ? k : kGroup + (k - ntok); }
  __device__ bool valid(int r) const { return r % kGroup < ntok; }
  __device__ int64_t token(int r) const { return first + r % kGroup; }
  __device__ int64_t col0(int r) const { return static_cast<int64_t>(chunk0 + r / kGroup) * kChunkCols; }
};

template <bool kFold>
__global__ void __launch_bounds__(kThreads, 1) cluster_pre_kernel(const ClusterPreParams d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float s_parts[kClusterChunks][kPartial];  // owner's inbox: its token's chunk partials
  __shared__ float s_part[kPartialSplit][kPartial];
  __shared__ float s_dot[kPartial];
  __shared__ float s_own[kN];                          // owner: its token's pre
  __shared__ float s_pre[kGroup][kN];                  // inbox: the tile's pre, every token
  __shared__ uint4 s_urow[kFold ? kRowVecs : 1];      // owner's inbox (fold): its token's collapsed row
  __shared__ float s_scratch[kThreadsB / 32];          // the fold's block_sum
  __shared__ float s_q[kCombQueue][kPartial];          // owned tokens' sums, waiting for the comb
  __shared__ int64_t s_qt[kCombQueue];                 // ... and their token indices
  const N4Params& p = d.p;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
  pdl_launch_dependents();
  // The B fragments of chunks 2 r and 2 r + 1 (weights: before pdl_wait), in fn_frag's layout.
  uint2* s_b = reinterpret_cast<uint2*>(smem + kBOffset);
  {
    const uint4* src = reinterpret_cast<const uint4*>(p.fn_frag + static_cast<int64_t>(kBlockChunks * rank) * kFragWords);
    uint4* dst = reinterpret_cast<uint4*>(s_b);
    for (int i = tid; i < kBlockChunks * kFragWords / 2; i += kThreads) dst[i] = __ldg(src + i);
  }
  pdl_wait();  // the streams and the outputs belong to this launch from here on
  cluster.sync();  // every block of the cluster has started (and loaded s_b) before any store into it
  const bf16_t* s_in = reinterpret_cast<const bf16_t*>(smem);  // phase1_run's rows: the streams' slice
  const int clusters = static_cast<int>(gridDim.x) / kCluster;
  int queued = 0;  // entries of s_q (block-uniform)
  // The comb outputs of the queued tokens, a lane each (warp 1): mixes_epilogue's Sinkhorn, once
  // per kCombQueue tiles instead of on every tile's path.
  auto flush_combs = [&] {
    if (w == 1 && lane < queued) {
      float unused[kN];
      mixes_epilogue<kN>(p.epi, s_q[lane], s_q[lane][kRows], p.inv_k, s_qt[lane], unused, kEpiComb);
    }
    queued = 0;
  };
  for (int tile = static_cast<int>(blockIdx.x) / kCluster; tile < d.tiles; tile += clusters) {
    const int64_t first = static_cast<int64_t>(tile) * kGroup;
    const int ntok = p.T - first < kGroup ? static_cast<int>(p.T - first) : kGroup;
    const bool owner = rank < ntok;  // block-uniform
    __syncthreads();                 // the tile before has read s_in
    // The cluster's next tile into L2 (this block's slice: 512 bytes of each token and stream),
    // so that its staging in phase1_run waits on L2, not on DRAM.
    if (tile + clusters < d.tiles && tid < kGroup * kN) {
      const int64_t tok = static_cast<int64_t>(tile + clusters) * kGroup + tid / kN;
      if (tok < p.T) {
        bulk_prefetch_l2(p.residual + tok * p.residual_stride + (tid % kN) * p.res_stream_stride + rank * (kSliceVecs * 8),
                         kSliceVecs * 16);
      }
    }
    // 1. The chunk partials of the block's 2 chunks into each token's owner.
    phase1_run<false, true>(
        p, ClusterRows{first, ntok, kBlockChunks * rank}, kBlockChunks,
        [&](int grp, uint2(&bg)[3][kMmaSteps]) {
          const int j = w / 3, blk = w % 3;
          const uint2* base = s_b + grp * kFragWords + j * kMmaSteps * kNTiles * 32 + lane;
#pragma unroll
          for (int part = 0; part < 3; ++part) {
#pragma unroll
            for (int ks = 0; ks < kMmaSteps; ++ks) bg[part][ks] = base[(ks * kNTiles + part * 3 + blk) * 32];
          }
        },
        smem,
        [&](int tl, int r, float v) {
          float* inbox = cluster.map_shared_rank(&s_parts[0][0], tl % kGroup);
          inbox[(kBlockChunks * rank + tl / kGroup) * kPartial + r] = v;
        });
    cluster.sync();
    // 2. The owner's sums, epilogue and pre.
    if (owner) {
      const int64_t t = first + rank;
      if (tid < kPartialSplit * kPartial) {
        const int part = tid / kPartial, row = tid % kPartial;
        s_part[part][row] = chunk_group_sum(part, kClusterChunks, [&](int cc) { return s_parts[cc][row]; });
      }
      __syncthreads();
      if (tid < kPartial) s_dot[tid] = groups_total(s_part, tid);
      __syncthreads();
      if (tid < kPartial) s_q[queued][tid] = s_dot[tid];
      if (tid == kPartial) s_qt[queued] = t;
      if (w == 0) {
        if (lane == 0) {
          float pre[kN];
          mixes_epilogue<kN>(p.epi, s_dot, s_dot[kRows], p.inv_k, t, pre, kEpiPrePost);
#pragma unroll
          for (int j = 0; j < kN; ++j) s_own[j] = pre[j];
        }
        __syncwarp();
        for (int k = lane; k < kCluster * kN; k += 32) cluster.map_shared_rank(&s_pre[0][0], k / kN)[rank * kN + k % kN] = s_own[k % kN];
      }
      __syncthreads();  // the queue's new entry
      if (++queued == kCombQueue) flush_combs();
    }
    cluster.sync();
    // 3. The collapse of the block's slice: item (token tt, vector v).
    for (int it = tid; it < kGroup * kSliceVecs; it += kThreads) {
      const int tt = it / kSliceVecs, v = it % kSliceVecs;
      if (tt >= ntok) continue;
      const bf16_t* row = s_in + ((v / 16) * kGroup + tt) * kAStride + (v % 16) * 8;
      uint4 x[kN];
#pragma unroll
      for (int s = 0; s < kN; ++s) x[s] = *reinterpret_cast<const uint4*>(row + s * kChunkCols);
      float pre[kN];
      const float pre_scale = collapse_pre(CollapseKind::kWeighted, s_pre[tt], pre);
      const uint4 u = collapse_vec(CollapseKind::kWeighted, pre, pre_scale, x);
      if constexpr (!kFold) {
        st16(p.layer_input + (first + tt) * p.layer_input_stride + rank * (kSliceVecs * 8) + v * 8, u);
      } else {
        cluster.map_shared_rank(s_urow, tt)[rank * kSliceVecs + v] = u;  // vector 32 r + v of the row
      }
    }
    if constexpr (kFold) {
      cluster.sync();
      // The owner folds its token's row as collapse_loaded does: thread i's fmaf chain over
      // vectors i and i + 256, block_sum over the 8 warps, the factor, the folded row.
      if (owner && tid < kThreadsB) {
        float sq[1] = {0.0f};
#pragma unroll
        for (int i = 0; i < kRowVecs / kThreadsB; ++i) add_squares(s_urow[tid + i * kThreadsB], sq[0]);
        block_sum<1, kThreadsB / 32, kFoldBarrier>(sq, s_scratch);
        const float inv = fold_factor(p, sq[0]);
        bf16_t* dst = p.layer_input + (first + rank) * p.layer_input_stride;
#pragma unroll
        for (int i = 0; i < kRowVecs / kThreadsB; ++i) {
          const int v = tid + i * kThreadsB;
          st16(dst + v * 8, fold_vec(s_urow[v], ld16(p.rmsnorm_weight + v * 8), inv));
        }
      }
    }
  }
  flush_combs();
  cluster.sync();  // no block leaves while another may still store into its shared memory
#else
  __trap();  // configure_cluster_pre_kernel never lets this build's code run
#endif
}

}  // namespace

bool cluster_pre_supports(int64_t H) { return H == kClusterH; }

int configure_cluster_pre_kernel(int device) {
  int major = 0, minor = 0;
  MHC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  MHC_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major != 9 || minor != 0) return 0;
  if (!allow_dynamic_smem(cluster_pre_kernel<false>, device, kClusterSmem) ||
      !allow_dynamic_smem(cluster_pre_kernel<true>, device, kClusterSmem))
    return 0;
  // 16-block clusters are a non-portable size: a device (or a partition of one) that refuses them
  // leaves the cluster rows off rather than failing Workspace::create.
  if (cudaFuncSetAttribute(cluster_pre_kernel<false>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess ||
      cudaFuncSetAttribute(cluster_pre_kernel<true>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  // Resident clusters: the fewer of the two instantiations' (they differ in static memory).
  int fewest = 0;
  for (auto kernel : {cluster_pre_kernel<false>, cluster_pre_kernel<true>}) {
    cudaLaunchAttribute attr = cluster_attribute(kCluster);
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(kCluster * 8);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = kClusterSmem;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    fewest = fewest == 0 || clusters < fewest ? clusters : fewest;
  }
  return fewest;
}

void launch_cluster_pre_kernel(const N4Params& p, int clusters, const LaunchCtx& ctx) {
  if (p.T <= 0) return;
  MHC_CHECK(p.H == kClusterH && clusters > 0, "cluster_pre_kernel: H = ", p.H, " (needs ", kClusterH,
            ") or no resident cluster");
  MHC_CHECK(p.T <= int64_t{kGroup} * ((int64_t{1} << 31) - 1), "cluster_pre_kernel: too many tokens in one call");
  ClusterPreParams d{};
  d.p = p;
  d.tiles = static_cast<int32_t>((p.T + kGroup - 1) / kGroup);
  const int grid_clusters = d.tiles < clusters ? d.tiles : clusters;
  const bool fold = p.rmsnorm_weight != nullptr;
  launch_kernel(fold ? cluster_pre_kernel<true> : cluster_pre_kernel<false>, dim3(static_cast<unsigned>(grid_clusters * kCluster)),
                kThreads, kClusterSmem, ctx, d, false, kCluster);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_cluster_pre_kernels(KernelList& out) {
  add_kernel(out, cluster_pre_kernel<false>, "n4::cluster_pre_kernel<false>");
  add_kernel(out, cluster_pre_kernel<true>, "n4::cluster_pre_kernel<true> (RMSNorm fold)");
}

// src/cuda/n4/decode_cluster_kernel.cu - every n = 4 operator with a mixes stage in ONE launch of
// thread-block clusters, for small T at H <= 4096: the blocks of a cluster hand their partials
// to each other through distributed shared memory, with no grid-wide handoff.
//
// What it computes: the same outputs, bit for bit, as every other n4 variant: the optional post
// stage (post8), residual_out, the mixes in the canonical order of config.cuh, the epilogue
// (epilogue.cuh) and the collapse with its RMSNorm fold in collapse_loaded's order.
// Why: decode_chunk_kernel's handoff (an acq_rel arrival counter in global memory, then phase 2
// reading the partials back from L2) cost 1.29 + 0.87 us of its 8.4 at T = 1 (session 8 call
// 3); here a cluster barrier and shared-memory reads replace both, and the collapse of a token
// is spread over the blocks that already hold its columns on chip.
// Grid mapping: a cluster of CS blocks (CS = 16, or 8 where the device cannot place 16; CS
// divides 16) per group of 16 tokens; block `rank` of a cluster owns the chunks rank, rank + CS
// (chunks <= 2 CS, so at most 2), all 384 threads:
//   phase 1 (decode_phase1.cuh, the rows of its chunks for the group's tokens): post, residual_out,
//     A tiles, mma chains, the chunk partials into this block's shared memory; cluster barrier;
//   phase 2: every block reduces, in the canonical order (8 interleaved chunk groups, then the
//     groups), the partials it needs from all blocks' shared memory: the pre rows (0..3) and the
//     sum of squares of every token when the pre is computed, all 25 rows of its epilogue tokens
//     (token i with i % CS == rank); warp 8 then runs the comb's Sinkhorn and warp 9 the pre and
//     post outputs of those tokens while warps 0..7 collapse the block's own columns of every
//     token from shared memory. The fold's sum of squares keeps collapse_loaded's order: thread
//     tid's fmaf chain over the vectors tid, tid + 256, .. lies in chunks tid / 16 + 16 i, all
//     owned by block (tid / 16) % CS, so each block forms the chains of its 256 / CS threads; a
//     second cluster barrier; then every block gathers the 256 chains of each token, runs
//     block_sum's butterflies and warp sum, and folds and stores its columns. A last cluster
//     barrier keeps every block's shared memory alive until the others have read it.
// Accumulation: as decode_chunk_kernel (phase 1 is its code); fp32 sums in the canonical order;
// exact sums for post and collapse.
// Envelope: n4_supports(), an op with a mixes stage, H <= 2 CS x 128 (4096 at CS = 16), 1 <= T <=
// the workspace's decode limit; compute capability 9.0+ with cluster launch (configure checks
// that a cluster of CS blocks with this kernel's 212 KB of shared memory can be placed).
// Status: compiles for every CI architecture; NOT yet run on a GPU (session 10 had no device time).
#include "src/cuda/launch.cuh"
#include "src/cuda/n4/canonical.cuh"
#include "src/cuda/n4/collapse_row.cuh"
#include "src/cuda/n4/decode_phase1.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda::n4 {

namespace {

constexpr int kThreads = kDecodeBlock;           // 384
constexpr int kOwn = 2;                          // chunks per block at most
constexpr int kMaxCluster = 16;
constexpr int kCollapseWarps = kThreadsB / 32;   // 8: collapse_loaded's 256-thread fold order
constexpr int kCombWarp = kCollapseWarps;        // warp 8: the comb's Sinkhorn chain
constexpr int kPrePostWarp = kCollapseWarps + 1; // warp 9: the pre and post outputs
constexpr int kMinCluster = 4;                   // the smallest CS (chains per block: 256 / CS <= 64)

struct ClusterDecodeParams {
  N4Params p;
  int32_t cs;      // blocks per cluster: 16, 8 or 4 (divides 16)
};

// Dynamic shared memory, in order (16-byte aligned pieces):
constexpr int kFragRegion = kOwn * kFragBytes;                   // B of the owned chunks (144 KB)
constexpr int kRunRegion = run_smem_bytes(kOwn);                 // phase 1's run (decode_phase1.cuh)
constexpr int kPartRegion = kOwn * kGroup * kPartial * 4;        // [q][token][25]: read by the cluster
constexpr int kGsumRegion = kGroup * kPartialSplit * kPartial * 4;  // [token][group][25]
constexpr int kDotRegion = kGroup * kPartial * 4;                // [token][25]
constexpr int kChainRegion = kGroup * (kThreadsB / kMinCluster) * 4;  // [token][256 / CS]: read by the cluster
constexpr int kSmallRegion = kGroup * kN * 4 + kGroup * kCollapseWarps * 4 + kGroup * 4 + kOwn * kChunkCols * 2 +
                             (3 + kRows) * 4;  // pre, warp sums, inv, RMSNorm weight, scale + base
constexpr int kClusterSmem = kFragRegion + kRunRegion + kPartRegion + kGsumRegion + kDotRegion + kChainRegion +
                             (kSmallRegion + 15) / 16 * 16;
static_assert(kFragRegion % 16 == 0 && kRunRegion % 16 == 0 && kPartRegion % 16 == 0 && kGsumRegion % 16 == 0 &&
                  kDotRegion % 16 == 0 && kChainRegion % 16 == 0,
              "16-byte aligned regions");
static_assert(kClusterSmem <= 227 * 1024, "decode_cluster_kernel shared memory");

struct Smem {
  uint2* frag;      // [q][kFragWords]
  unsigned char* run;
  float* part;      // [q][16][25]
  float* gsum;      // [16][8][25]
  float* dot;       // [16][25]
  float* chain;     // [16][256 / CS]
  float* pre;       // [16][4]
  float* wsum;      // [16][8]
  float* inv;       // [16]
  bf16_t* norm_w;   // [q][128]
  float* scale;     // [3]
  float* base;      // [24]
  __device__ explicit Smem(unsigned char* s) {
    frag = reinterpret_cast<uint2*>(s);
    s += kFragRegion;
    run = s;
    s += kRunRegion;
    part = reinterpret_cast<float*>(s);
    s += kPartRegion;
    gsum = reinterpret_cast<float*>(s);
    s += kGsumRegion;
    dot = reinterpret_cast<float*>(s);
    s += kDotRegion;
    chain = reinterpret_cast<float*>(s);
    s += kChainRegion;
    pre = reinterpret_cast<float*>(s);
    wsum = pre + kGroup * kN;
    inv = wsum + kGroup * kCollapseWarps;
    norm_w = reinterpret_cast<bf16_t*>(inv + kGroup);
    scale = reinterpret_cast<float*>(norm_w + kOwn * kChunkCols);
    base = scale + 3;
  }
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

// The cluster's PTX (sm_90+): this block's rank, the barrier's two halves (every thread of every
// block of the cluster arrives; arrive releases this thread's writes, wait acquires the others'),
// and a float of block `rank`'s shared memory at the offset of `local` in this block's.
__device__ __forceinline__ int cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return static_cast<int>(r);
}
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}
__device__ __forceinline__ float cluster_load(const float* local, int rank) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(local));
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(a), "r"(rank));
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(remote) : "memory");
  return v;
}

// The rows of the reduction a block needs: kind 0 the pre rows 0..3 and the sum of squares of
// every token (when the collapse computes its pre), kind 1 the other rows of its epilogue tokens
// (all 25 when kind 0 is absent). Item i of `count()` -> (token, row).
struct NeededRows {
  int ntok, rank, cs, epi_tokens;
  bool pre_rows;  // kind 0 present
  __device__ int per_epi() const { return pre_rows ? kPartial - 5 : kPartial; }
  __device__ int count() const { return (pre_rows ? ntok * 5 : 0) + epi_tokens * per_epi(); }
  __device__ void at(int i, int& tl, int& r) const {
    const int na = pre_rows ? ntok * 5 : 0;
    if (i < na) {
      tl = i / 5;
      const int k = i % 5;
      r = k < kN ? k : kRows;
      return;
    }
    i -= na;
    tl = rank + cs * (i / per_epi());
    const int k = i % per_epi();
    r = pre_rows ? kN + k : k;  // rows 4..23 after the pre rows, or 0..24
  }
};

#endif

template <bool kPost, bool kStaged>
__global__ void __launch_bounds__(kThreads, 1) decode_cluster_kernel(const ClusterDecodeParams d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const N4Params& p = d.p;
  const Smem s(smem_raw);
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
  const int cs = d.cs, rank = cluster_rank();
  const int64_t first = static_cast<int64_t>(blockIdx.x / cs) * kGroup;  // the cluster's first token
  const int64_t left = p.T - first;
  const int ntok = static_cast<int>(left < kGroup ? left : kGroup);
  const int owned = rank + cs < p.chunks ? 2 : 1;  // chunks rank, rank + cs (rank < chunks: cs <= chunks)
  const bool fold = p.has_collapse && p.rmsnorm_weight != nullptr;
  const CollapseKind kind = collapse_kind(p);
  pdl_launch_dependents();
  // Weights before pdl_wait (they overlap the kernel before): the owned chunks' B fragments, the
  // epilogue's scale and base, the RMSNorm weight of the owned columns.
  for (int q = 0; q < owned; ++q) {
    const uint4* src = reinterpret_cast<const uint4*>(p.fn_frag + static_cast<int64_t>(rank + cs * q) * kFragWords);
    uint4* dst = reinterpret_cast<uint4*>(s.frag + q * kFragWords);
    for (int i = tid; i < kFragBytes / 16; i += kThreads) cp_async16_keep(dst + i, src + i);
  }
  cp_async_commit();
  if (tid < (p.epi.head ? 1 : 3)) s.scale[tid] = p.epi.scale[tid];
  if (tid >= 32 && tid < 32 + (p.epi.head ? kN : kRows)) s.base[tid - 32] = p.epi.base[tid - 32];
  if (fold && tid < owned * (kChunkCols / 8)) {
    const int q = tid / (kChunkCols / 8), cv = tid % (kChunkCols / 8);
    *reinterpret_cast<uint4*>(s.norm_w + q * kChunkCols + cv * 8) =
        ld16(p.rmsnorm_weight + static_cast<int64_t>(rank + cs * q) * kChunkCols + cv * 8);
  }
  pdl_wait();  // the inputs belong to this launch from here on
  if (p.pre_source == PreSource::kCarried && p.has_collapse && tid < ntok * kN) {
    s.pre[tid] = __ldcg(p.pre_mix_in + (first + tid / kN) * p.pre_mix_in_stride + tid % kN);
  }
  cp_async_wait<0>();
  __syncthreads();  // the fragments (and the carried pre) are in place

  // Phase 1: the rows of the owned chunks for the group's tokens; partials into s.part.
  const ClusterRows rows{first, ntok, owned, rank, cs};
  phase1_run<kPost, kStaged>(
      p, rows, owned,
      [&](int q, uint2(&bg)[3][kMmaSteps]) {
        const int j = w / 3, blk = w % 3;
        const uint2* f = s.frag + q * kFragWords + j * kMmaSteps * kNTiles * 32 + lane;
#pragma unroll
        for (int part = 0; part < 3; ++part) {
#pragma unroll
          for (int ks = 0; ks < kMmaSteps; ++ks) bg[part][ks] = f[(ks * kNTiles + part * 3 + blk) * 32];
        }
      },
      s.run, [&](int row, int r, float v) { s.part[row * kPartial + r] = v; });
  cluster_sync();  // every block's partials are written (release / acquire at cluster scope)

  // Phase 2, the reduction: the group sums of the needed rows from every block's partials, then
  // their totals (chunk cc of the group's tokens: block cc % cs, its chunk cc / cs).
  const bool computed = p.pre_source == PreSource::kComputed && !p.head_mean;
  const bool epi_outputs = !p.epi.head;
  const int epi_tokens = epi_outputs && rank < ntok ? (ntok - rank + cs - 1) / cs : 0;
  const NeededRows need{ntok, rank, cs, epi_tokens, computed && p.has_collapse};
  for (int i = tid; i < need.count() * kPartialSplit; i += kThreads) {
    int tl, r;
    need.at(i / kPartialSplit, tl, r);
    const int g = i % kPartialSplit;
    s.gsum[(tl * kPartialSplit + g) * kPartial + r] = chunk_group_sum(g, p.chunks, [&](int cc) {
      return cluster_load(s.part + ((cc / cs) * kGroup + tl) * kPartial + r, cc % cs);
    });
  }
  __syncthreads();
  for (int i = tid; i < need.count(); i += kThreads) {
    int tl, r;
    need.at(i, tl, r);
    s.dot[tl * kPartial + r] =
        groups_total(reinterpret_cast<const float(*)[kPartial]>(s.gsum + tl * kPartialSplit * kPartial), r);
  }
  __syncthreads();
  EpilogueParams epi = p.epi;  // the same arithmetic on the shared-memory copies of the weights
  epi.scale = s.scale;
  epi.base = s.base;
  if (need.pre_rows && tid < ntok) {
    float pre[kN];
    mixes_pre<kN>(epi, s.dot + tid * kPartial, s.dot[tid * kPartial + kRows], p.inv_k, pre);
#pragma unroll
    for (int j = 0; j < kN; ++j) s.pre[tid * kN + j] = pre[j];
  }
  __syncthreads();  // s.pre is complete

  const int chains = kThreadsB / cs;  // the fold chains this block forms per token
  if (w == kCombWarp || w == kPrePostWarp) {
    if (fold) cluster_arrive();  // nothing of theirs is in the chain exchange
    if (lane == 0 && epi_outputs) {
      for (int e = 0; e < epi_tokens; ++e) {
        const int tl = rank + cs * e;
        float pre[kN];
        mixes_epilogue<kN>(epi, s.dot + tl * kPartial, s.dot[tl * kPartial + kRows], p.inv_k, first + tl, pre,
                           w == kCombWarp ? kEpiComb : kEpiPrePost);
      }
    }
    __syncwarp();
    if (fold) cluster_wait();
  } else if (w < kCollapseWarps && p.has_collapse) {
    // The collapse of the owned columns of every token, in place of stream 0 of the A tiles.
    // Item it = (owned chunk q, token tl, vector cv); vec(q, tl, cv) is its place in the A tiles
    // and out(q, tl, cv) in layer_input.
    bf16_t* s_in = reinterpret_cast<bf16_t*>(s.run);
    constexpr int kVecs = kChunkCols / 8;
    const int items = owned * ntok * kVecs;
    auto vec = [&](int q, int tl, int cv) { return s_in + (q * kGroup + tl) * kAStride + cv * 8; };
    auto out = [&](int q, int tl, int cv) {
      return p.layer_input + (first + tl) * p.layer_input_stride + static_cast<int64_t>(rank + cs * q) * kChunkCols + cv * 8;
    };
    for (int it = tid; it < items; it += kThreadsB) {
      const int q = it / (ntok * kVecs), tl = it % (ntok * kVecs) / kVecs, cv = it % kVecs;
      bf16_t* row = vec(q, tl, cv);
      uint4 r[kN];
#pragma unroll
      for (int j = 0; j < kN; ++j) r[j] = *reinterpret_cast<const uint4*>(row + j * kChunkCols);
      float pre[kN];
      const float pre_scale = collapse_pre(kind, s.pre + tl * kN, pre);
      const uint4 u = collapse_vec(kind, pre, pre_scale, r);
      if (fold) {
        *reinterpret_cast<uint4*>(row) = u;
      } else {
        st16(out(q, tl, cv), u);
      }
    }
    if (fold) {
      named_sync(1, kThreadsB);  // the collapsed vectors are in place
      // Chain c of this block is thread vt = 16 (rank + cs m) + l (c = 16 m + l) of the canonical
      // 256: its vectors vt + 256 i lie in chunk vt / 16 + 16 i = this block's chunk q = that / cs.
      const int64_t vecs = p.H / 8;
      for (int it = tid; it < ntok * chains; it += kThreadsB) {
        const int tl = it / chains, c = it % chains;
        const int vt = kGroup * (rank + cs * (c / kGroup)) + c % kGroup;
        float sq = 0.0f;
        for (int i = 0; vt + kThreadsB * i < vecs; ++i) {
          const int q = (vt / kGroup + kGroup * i) / cs;
          add_squares(*reinterpret_cast<const uint4*>(vec(q, tl, vt % kGroup)), sq);
        }
        s.chain[tl * chains + c] = sq;
      }
      cluster_arrive();  // this block's chains are written
      cluster_wait();
      // block_sum of each token over the 256 chains: virtual warp vw's lane l is chain vt = 32 vw
      // + l, in block (vt / 16) % cs at c = 16 (vt / 16 / cs) + vt % 16; the butterfly xor 16 .. 1
      // in a real warp, then the warps in order.
      for (int pair = w; pair < ntok * kCollapseWarps; pair += kCollapseWarps) {
        const int tl = pair / kCollapseWarps, vw = pair % kCollapseWarps;
        const int vt = 32 * vw + lane, owner = (vt / kGroup) % cs, c = kGroup * (vt / kGroup / cs) + vt % kGroup;
        float v = cluster_load(s.chain + tl * (kThreadsB / cs) + c, owner);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0) s.wsum[tl * kCollapseWarps + vw] = v;
      }
      named_sync(1, kThreadsB);
      if (tid < ntok) {
        float sum = 0.0f;
        for (int k = 0; k < kCollapseWarps; ++k) sum += s.wsum[tid * kCollapseWarps + k];
        s.inv[tid] = 1.0f / sqrtf(sum / static_cast<float>(p.H) + p.rmsnorm_eps);
      }
      named_sync(1, kThreadsB);
      for (int it = tid; it < items; it += kThreadsB) {
        const int q = it / (ntok * kVecs), tl = it % (ntok * kVecs) / kVecs, cv = it % kVecs;
        const uint4 u = *reinterpret_cast<const uint4*>(vec(q, tl, cv));
        const uint4 wv = *reinterpret_cast<const uint4*>(s.norm_w + q * kChunkCols + cv * 8);
        st16(out(q, tl, cv), fold_vec(u, wv, s.inv[tl]));
      }
    }
  } else if (fold) {
    cluster_arrive();  // warps 10 and 11: nothing in the chain exchange
    cluster_wait();
  }
  cluster_sync();  // no block leaves while another may still read its shared memory
#else
  __trap();  // configure_decode_cluster_kernel never lets this build's code run
#endif
}

using ClusterKernel = void (*)(ClusterDecodeParams);

ClusterKernel cluster_kernel(bool post, bool staged) {
  return post ? (staged ? decode_cluster_kernel<true, true> : decode_cluster_kernel<true, false>)
              : (staged ? decode_cluster_kernel<false, true> : decode_cluster_kernel<false, false>);
}

}  // namespace

int configure_decode_cluster_kernel(int device) {
  int major = 0;
  MHC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  int launchable = 0;
  MHC_CUDA_CHECK(cudaDeviceGetAttribute(&launchable, cudaDevAttrClusterLaunch, device));
  int found = 0;
  if (major >= 9 && launchable != 0) {
    bool ok = true;
    for (int k = 0; k < 4 && ok; ++k) {
      const ClusterKernel kernel = cluster_kernel(k & 1, k & 2);
      ok = allow_dynamic_smem(kernel, device, kClusterSmem) &&
           cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
    }
    (void)cudaGetLastError();
    for (int cs = kMaxCluster; ok && cs >= kMinCluster && found == 0; cs /= 2) {
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(static_cast<unsigned>(cs));
      cfg.blockDim = dim3(kThreads);
      cfg.dynamicSmemBytes = kClusterSmem;
      cudaLaunchAttribute attr = cluster_attribute(static_cast<unsigned>(cs));
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, cluster_kernel(true, true), &cfg) == cudaSuccess && clusters > 0) {
        found = cs;
      }
      (void)cudaGetLastError();
    }
  }
  return found;
}

bool decode_cluster_supports(int cluster_size, int64_t H) {
  return cluster_size >= kMinCluster && H / kChunkCols <= kOwn * static_cast<int64_t>(cluster_size) &&
         H / kChunkCols >= cluster_size;
}

int decode_cluster_size(int cluster_size, int64_t H) {
  // The largest power of two <= the chunks, capped by what the device can place.
  int cs = cluster_size;
  while (cs > kMinCluster && H / kChunkCols < cs) cs /= 2;
  return cs;
}

void launch_decode_cluster_kernel(const N4Params& p, int cluster_size, const LaunchCtx& ctx) {
  if (p.T <= 0) return;
  const int cs = decode_cluster_size(cluster_size, p.H);
  MHC_CHECK(decode_cluster_supports(cs, p.H), "decode_cluster_kernel: H = ", p.H, " outside its envelope at clusters of ",
            cs);
  ClusterDecodeParams d{};
  d.p = p;
  d.cs = cs;
  const int64_t clusters = (p.T + kGroup - 1) / kGroup;
  // Staged loads where a group has more than half its tokens (one memory latency for all).
  const bool staged = p.T > kGroup / 2;
  launch_kernel(cluster_kernel(p.has_post, staged), dim3(static_cast<unsigned>(clusters * cs)), kThreads, kClusterSmem,
                ctx, d, false, static_cast<unsigned>(cs));
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_decode_cluster_kernels(KernelList& out) {
  add_kernel(out, decode_cluster_kernel<false, false>, "n4::decode_cluster_kernel<false, false>");
  add_kernel(out, decode_cluster_kernel<true, false>, "n4::decode_cluster_kernel<true, false> (post)");
  add_kernel(out, decode_cluster_kernel<false, true>, "n4::decode_cluster_kernel<false, true> (staged)");
  add_kernel(out, decode_cluster_kernel<true, true>, "n4::decode_cluster_kernel<true, true> (post, staged)");
}

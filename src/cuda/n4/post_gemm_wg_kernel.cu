// src/cuda/n4/post_gemm_wg_kernel.cu - post_pre's post stage fused with the mixes stage on
// Hopper's warpgroup MMA (sm_90a): for p.T tokens, residual_out = post(layer_output, residual,
// post_mix, comb_mix) (post8: each output the exact sum rounded once) and the partials
// [token][chunk][25] of the new residual, which feeds the MMA from shared memory instead of being
// read back from DRAM (28 H bytes a token for the boundary with the collapse after it, against
// the staged plan's 36 H).
//
// Grid mapping: at most one 384-thread block per multiprocessor, each with an equal contiguous
// range of the (chunk, 64-token tile) items in chunk-major order. Warpgroups 0 and 1 (post)
// form an item's post stage: for its 64 tokens x 16 8-column vectors (4 passes of 256 threads;
// a warp is 8 tokens x 4 vectors), the 4 input streams, layer_output and the token's 20 mixes
// (staged in shared memory), post8, residual_out, the 4 streams' A tiles (wgmma.cuh layout) and
// each vector's sum of squares; then they signal the item's buffer full. Warpgroup 2 (MMA) waits
// for it, runs the 4 streams' wgmma chains against the chunk's B (rebuilt from fn_frag where its
// range enters the next chunk), stores the dots and the chunk's sums of squares, and signals the
// buffer empty. Two buffers: the post warpgroups form item i + 1 while the MMA runs item i.
// Accumulation: post8 (post_kernel's bits); the dots as gemm_wg_kernel (per stream a chain of 8
// k16 steps from zero: the canonical mma.sync bits; v = hi + (mid + lo); ((v_0 + v_1) + v_2) +
// v_3); the sums of squares: vector_squares (fmaf over streams then elements) and the
// butterfly xor 8, 4, 2, 1 of the canonical order evaluated as its tree by one thread per token.
// Envelope: as gemm_wg_kernel (compute capability 9.0 with this file's sm_90a code, n = 4,
// H % 512 == 0, H <= 16384, 16-byte aligned rows), a post stage; 218 KB of shared memory.
#include "src/cuda/exact_sum.cuh"
#include "src/cuda/launch.cuh"
#include "src/cuda/n4/canonical.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/n4/post8.cuh"
#include "src/cuda/n4/wgmma.cuh"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda::n4 {

namespace {

constexpr int kPostThreadsWg = 2 * kWgThreads;          // the post warpgroups
constexpr int kThreads = kPostThreadsWg + kWgThreads;   // + the MMA warpgroup
constexpr int kBufs = 2;                                // items in flight
constexpr int kMixes = kN + kN * kN;                    // post[4], comb[16] per token
constexpr int kABytes = kN * kStageBytesWg;             // an item's A: 4 streams, 64 KB
constexpr int kMixBytes = kWgTile * kMixes * 4;         // 5 KB
constexpr int kSqBytes = kWgTile * (kChunkCols / 8) * 4;  // [token][vector] sums of squares, 4 KB
constexpr int kBufBytes = kABytes + kMixBytes + kSqBytes;
constexpr int kSmemFused = kBBytes + kBufs * kBufBytes;
constexpr int kPasses = kWgTile * (kChunkCols / 8) / kPostThreadsWg;  // 4
enum Barrier { kBarFull = 1, kBarEmpty = 3, kBarPost = 5, kBarMma = 6 };  // + buffer for full/empty
static_assert(kSmemFused <= 227 * 1024, "post_gemm_wg_kernel shared memory");
static_assert(kPasses == 4 && kBufBytes % 128 == 0, "layout");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)

__device__ __forceinline__ void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// The post warpgroups' share of item (chunk, tile) into buffer `buf`.
__device__ __forceinline__ void post_item(const N4Params& p, int chunk, int64_t tile, unsigned char* buf, int tid) {
  const int64_t t0 = tile * kWgTile;
  float* mix = reinterpret_cast<float*>(buf + kABytes);
  float* sq = reinterpret_cast<float*>(buf + kABytes + kMixBytes);
  for (int i = tid; i < kWgTile * kMixes; i += kPostThreadsWg) {
    const int m = i / kMixes, e = i % kMixes;
    const int64_t t = t0 + m;
    mix[i] = t >= p.T ? 0.0f
             : e < kN ? __ldcg(p.post_mix + t * p.post_mix_stride + e)
                      : __ldcg(p.comb_mix + t * p.comb_mix_stride + (e - kN));
  }
  bar_sync(kBarPost, kPostThreadsWg);
  // Two passes' loads in flight ahead of the arithmetic (4 streams + layer_output each).
  uint4 r[2][kN], lo[2];
  auto unit = [&](int ps, int& m, int& cv) {
    const int u = ps * kPostThreadsWg + tid;
    m = (u >> 7) * 8 + (u & 7);
    cv = (u >> 3) & 15;
  };
  auto load = [&](int ps, int slot) {
    int m, cv;
    unit(ps, m, cv);
    const int64_t t = t0 + m;
    if (t < p.T) {
      const bf16_t* res = p.residual + t * p.residual_stride + static_cast<int64_t>(chunk) * kChunkCols + cv * 8;
#pragma unroll
      for (int s = 0; s < kN; ++s) r[slot][s] = ldcg16(res + s * p.res_stream_stride);
      lo[slot] = ldcg16(p.layer_output + t * p.layer_output_stride + static_cast<int64_t>(chunk) * kChunkCols + cv * 8);
    }
  };
  load(0, 0);
  load(1, 1);
#pragma unroll
  for (int ps = 0; ps < kPasses; ++ps) {
    const int slot = ps & 1;
    int m, cv;
    unit(ps, m, cv);
    const int64_t t = t0 + m;
    uint4 x[kN];
    if (t < p.T) {
      post8(post_weights(mix + m * kMixes, mix + m * kMixes + kN), r[slot], lo[slot], x);
      const int64_t col0 = static_cast<int64_t>(chunk) * kChunkCols + cv * 8;
#pragma unroll
      for (int s = 0; s < kN; ++s) st16(p.residual_out + t * p.residual_out_stride + s * p.H + col0, x[s]);
    } else {
#pragma unroll
      for (int s = 0; s < kN; ++s) x[s] = make_uint4(0, 0, 0, 0);
    }
    if (ps + 2 < kPasses) load(ps + 2, slot);
#pragma unroll
    for (int s = 0; s < kN; ++s) *reinterpret_cast<uint4*>(buf + s * kStageBytesWg + a_offset(m, cv)) = x[s];
    sq[m * (kChunkCols / 8) + cv] = vector_squares(x);
  }
  fence_proxy_async();  // the A tiles' generic-proxy stores, before wgmma reads them
}

// The MMA warpgroup's share of item (chunk, tile) from buffer `buf` (thread t of 128): the 4
// streams' dots, then the chunk's sums of squares, one token per thread t < 64 (the butterfly
// xor 8, 4, 2, 1 over its 16 vectors as butterfly_half of each parity).
__device__ __forceinline__ void mma_item(const N4Params& p, int chunk, int64_t tile, const unsigned char* buf,
                                         uint32_t b_base, int t) {
  const uint32_t a_base = smem_addr(buf);
  float part[3][4];
#pragma unroll 1
  for (int j = 0; j < kN; ++j) stream_dots_wg(a_base + j * kStageBytesWg, b_base, j, part, [] {});
  store_dots_wg(p, chunk, tile * kWgTile, t, part);
  if (t < kWgTile) {
    const float* a = reinterpret_cast<const float*>(buf + kABytes + kMixBytes) + t * (kChunkCols / 8);
    float even[8], odd[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      even[i] = a[2 * i];
      odd[i] = a[2 * i + 1];
    }
    const int64_t tok = tile * kWgTile + t;
    if (tok < p.T) p.partials[(tok * p.chunks + chunk) * kPartial + kRows] = butterfly_half(even) + butterfly_half(odd);
  }
}

#endif

__global__ void __launch_bounds__(kThreads, 1) post_gemm_wg_kernel(const N4Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) unsigned char smem[];
  pdl_launch_dependents();
  const ChunkTileItems items(p.T, p.chunks, kWgTile);
  if (items.count <= 0) return;  // block-uniform
  const int tid = static_cast<int>(threadIdx.x);
  unsigned char* bufs = smem + kBBytes;
  if (tid < kPostThreadsWg) {
    pdl_wait();  // the inputs come from the kernels before this one
    for (int i = 0; i < items.count; ++i) {
      unsigned char* buf = bufs + (i & 1) * kBufBytes;
      if (i >= kBufs) bar_sync(kBarEmpty + (i & 1), kThreads);  // the MMA is done with this buffer
      post_item(p, items.chunk(i), items.tile(i), buf, tid);
      bar_arrive(kBarFull + (i & 1), kThreads);
    }
    // The MMA warpgroup's last arrivals, so that every barrier completes.
    for (int i = items.count > kBufs ? items.count - kBufs : 0; i < items.count; ++i) {
      bar_sync(kBarEmpty + (i & 1), kThreads);
    }
  } else {
    const int t = tid - kPostThreadsWg;
    int loaded = items.chunk(0);
    load_b<kWgThreads>(p, smem, loaded);  // weights: before pdl_wait
    pdl_wait();                           // the partials may still be read by the kernel before
    fence_proxy_async();
    bar_sync(kBarMma, kWgThreads);
    const uint32_t b_base = smem_addr(smem);
    for (int i = 0; i < items.count; ++i) {
      const int chunk = items.chunk(i);
      if (chunk != loaded) {
        load_b<kWgThreads>(p, smem, chunk);  // every wgmma of the previous chunk has completed
        fence_proxy_async();
        bar_sync(kBarMma, kWgThreads);
        loaded = chunk;
      }
      const unsigned char* buf = bufs + (i & 1) * kBufBytes;
      bar_sync(kBarFull + (i & 1), kThreads);
      mma_item(p, chunk, items.tile(i), buf, b_base, t);
      bar_arrive(kBarEmpty + (i & 1), kThreads);
    }
  }
#else
  __trap();  // configure_post_gemm_wg_kernel never lets this build's code run
#endif
}

}  // namespace

bool configure_post_gemm_wg_kernel(int device) { return allow_dynamic_smem(post_gemm_wg_kernel, device, kSmemFused); }

void launch_post_gemm_wg_kernel(const N4Params& p, const LaunchCtx& ctx) {
  MHC_CHECK(p.has_post, "post_gemm_wg_kernel: a post stage is required");
  if (p.T <= 0) return;
  const unsigned blocks = item_grid((p.T + kWgTile - 1) / kWgTile * p.chunks, ctx.num_sms, "post_gemm_wg_kernel");
  launch_kernel(post_gemm_wg_kernel, dim3(blocks), kThreads, kSmemFused, ctx, p);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_post_gemm_wg_kernels(KernelList& out) {
  add_kernel(out, post_gemm_wg_kernel, "n4::post_gemm_wg_kernel");
}

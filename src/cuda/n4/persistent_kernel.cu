// src/cuda/n4/persistent_kernel.cu - the persistent rows' one kernel (cuda_n4_persistent,
// staged.cu): gemm_kernel's overlapped items, finalize_kernel's work and collapse_stream_kernel's
// work for one slice, the three roles as warps of one block on every multiprocessor, so that the
// collapse re-reads a tile's streams from L2 shortly after the GEMM warps read them, whatever the
// block scheduler would have done with separate kernels (docs/performance.md, "The overlap rows").
//
// What it computes: the same outputs, bit for bit, as gemm_kernel, finalize_kernel and
// collapse_stream_kernel with the pre mailbox (the overlap rows' overlap_tail_kernel computes them
// the same way): each 32-token tile's chunk partials, their canonical sums and the mixes
// epilogue (finalize_run.cuh), each token's fresh pre through the workspace's pre mailbox, and
// each token's collapse with the fresh pre and its RMSNorm fold.
// Grid mapping: G = gridDim.x <= the multiprocessors, one 384-thread block each (200 KB of dynamic
// shared memory and every register: never two blocks on one multiprocessor), all resident at once.
//   Warps 8-11 (the GEMM warps, warpgroup 2): the first gemm_groups x chunks blocks run
//     gemm_kernel's overlapped form on them (block b keeps chunk b % chunks and takes the tiles
//     g, g + gemm_groups, .. of group g = b / chunks; run_owner_steps, the block's 4 warps with a
//     ring of 4 slots each), counting each (chunk, tile) item in the tile's counter once stored.
//   Warps 0-7 (the tail, warpgroups 0 and 1, 256 threads on named barrier 1): block b finalizes
//     the tiles b, b + G, .. (take_tile, then the tile's pre into the mailbox first (early_pre),
//     then the rest of finalize_run) and collapses the tokens b, b + G, .. two at a time (the pair
//     t, t + G: both tokens' loads in flight together, one block_sum for both folds), each pre
//     polled in the mailbox. The tail takes its items in the order of the tile they wait for
//     (a finalize before the collapses of its tile: TailOrder, tail_order.hpp), so the item that
//     waits on the lowest tile always runs: nothing waits in a cycle (tests/test_schedule.cpp),
//     and no item waits for a block that is not resident.
// Registers: ptxas gives the block 168 a thread (384 x 168 of 64 K); setmaxnreg then moves them
// to 184 for the GEMM warps (gemm_kernel's overlapped form took 181; no spill) and 160 for the
// tail (ptxas spills 68 bytes there with 4 vectors a thread, none with 2).
// PDL: every warp waits for the kernel before (pdl_wait) before it reads the streams or touches a
// counter or the mailbox, then lets the kernel after it start.
// Accumulation: gemm_kernel's, finalize_kernel's and collapse_stream_kernel's (their headers): the
// pair's collapse keeps collapse_token's order for each token (thread tid's fmaf chain over its
// vectors tid, tid + 256, .. in order, block_sum over the 8 warps in order).
// Envelope: the n4 envelope with H <= 8192 (at most 4 vectors a thread of the collapse), chunks <=
// the multiprocessors (every GEMM block resident with the tail that waits on it), the pre mailbox,
// p.T <= the workspace's tile counters x 32; compute capability 9.0 with this binary's sm_90a
// code (setmaxnreg): configure_persistent_kernel.
#include <algorithm>
#include <cstdlib>

#include "src/cuda/launch.cuh"
#include "src/cuda/n4/collapse_token.cuh"
#include "src/cuda/n4/finalize_run.cuh"
#include "src/cuda/n4/gemm_step.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/n4/tail_order.hpp"
#include "src/cuda/n4/trace.cuh"

namespace mhc::cuda::n4 {

namespace {

using namespace gemm_step;

constexpr int kTailWarps = 8;                         // warps 0-7: finalize and collapse
constexpr int kTailThreads = kTailWarps * 32;         // 256
static_assert(kTailThreads == kFinThreads && kTailThreads == kThreadsB, "the tail runs the 256-thread shapes");

/// The block's shape by its GEMM warps (warps 8 ..): 4 (the release shape, 384 threads) with 4
/// ring slots each (one more than gemm_kernel's overlapped form, which left room for the tail
/// kernel's blocks beside it: 96 KB of streams in flight a multiprocessor), registers 168 at
/// launch, 184 for the GEMM warps and 160 for the tail, which collapses two tokens at a time; or 8
/// (the diagnostics build's MHC_PERSISTENT_GEMM_WARPS=8: gemm_kernel's own 8 x 2 shape, 512
/// threads) with 128 at launch, 176 and 80, one token at a time. 200 KB of slots and fragments.
template <int kGemmWarps>
struct PShape {
  static constexpr int kSlots = kGemmWarps == 4 ? 4 : 2;
  static constexpr int kThreads = kTailThreads + kGemmWarps * 32;
  static constexpr int kSmem = kFragBytes + kGemmWarps * kSlots * kSlotBytes;
  static constexpr int kLaunchRegs = kGemmWarps == 4 ? 168 : 128;
  static constexpr int kGemmRegs = kGemmWarps == 4 ? 184 : 176;
  static constexpr int kTailRegs = kGemmWarps == 4 ? 160 : 80;
  static constexpr int kPerItem = kGemmWarps == 4 ? 2 : 1;  // tokens a collapse item
  static_assert(kPerItem == 1 || kPerItem == 2, "collapse_pair: one token or a pair");
  static_assert(kTailThreads * kTailRegs + kGemmWarps * 32 * kGemmRegs <= kThreads * kLaunchRegs &&
                    kThreads * kLaunchRegs <= 65536,
                "setmaxnreg moves registers within the block's allocation");
  static_assert(kSmem + 4 * 1024 <= 227 * 1024, "persistent_kernel shared memory");
};
constexpr int kReleaseGemmWarps = 4;

// Diagnostics build (-DMHC_GEMM_PROBE) with MHC_OVERLAP_TRACE=1 in the environment: the last
// launch's timeline (trace.cuh: each tile's count and pre, each token's collapse start and end)
// and each block's roles' spans (g_trace_role), printed at the process's exit. Release builds
// record nothing.
#ifdef MHC_GEMM_PROBE
constexpr int kTraceRoleBlocks = 1024;
__device__ unsigned long long g_trace_role[kTraceRoleBlocks][4];  // GEMM warps start, end; tail start, end
#define MHC_TRACE(statement) statement
#else
#define MHC_TRACE(statement)
#endif

struct PersistentParams {
  FinalizeParams f;     // the GEMM's and the finalize's params (the streams as p.residual), the mailbox as f.pre
  N4Params c;           // the collapse's params (the mailbox as its polled pre)
  int32_t gemm_groups;  // the GEMM runs on blocks 0 .. gemm_groups x chunks - 1
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr int kTailBar = 1, kGemmBar = 2;  // named barriers (0 is __syncthreads)

struct TailBarrier {
  __device__ __forceinline__ void operator()() const {
    asm volatile("bar.sync %0, %1;\n" ::"n"(kTailBar), "n"(kTailThreads) : "memory");
  }
};
template <int kGemmWarps>
struct GemmBarrier {
  __device__ __forceinline__ void operator()() const {
    asm volatile("bar.sync %0, %1;\n" ::"n"(kGemmBar), "n"(kGemmWarps * 32) : "memory");
  }
};

template <int kRegs>
__device__ __forceinline__ void regs_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void regs_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// The GEMM warps (warp 0 .. kGemmWarps - 1 of the role, thread tid): gemm_kernel's overlapped form.
template <int kGemmWarps>
__device__ __forceinline__ void gemm_role(const N4Params& p, int gemm_groups, unsigned char* smem, int warp, int lane,
                                          int tid) {
  const GroupTileItems items(p.T, p.chunks, gemm_groups);
  if (items.count <= 0) {  // uniform over the role's warps
    pdl_wait();
    pdl_launch_dependents();
    return;
  }
  // The first chunk's fragments are weights: their copies overlap the end of the kernel before.
  load_fragments<kGemmWarps * 32>(p, smem, items.chunk(0), tid);
  cp_async_commit();
  pdl_wait();
  pdl_launch_dependents();
  MHC_TRACE(if (tid == 0 && blockIdx.x < kTraceRoleBlocks) g_trace_role[blockIdx.x][0] = trace_now());
  run_owner_steps<kGemmWarps, PShape<kGemmWarps>::kSlots, 0, true>(p, items, smem, warp, lane, tid,
                                                                   GemmBarrier<kGemmWarps>{});
  MHC_TRACE(if (lane == 0 && blockIdx.x < kTraceRoleBlocks) atomicMax(&g_trace_role[blockIdx.x][1], trace_now()));
}

// The collapse of tokens t0 and t1 (t1 < 0: t0 alone; kTok 1: always) with the weighted pre polled
// in the mailbox, by the 256 tail threads: collapse_token's arithmetic for each token (its
// header), the tokens' first loads issued before either pre is polled. Then the mailbox's poison
// back for both, once every thread has read them.
template <int kVecs, int kTok>
__device__ __forceinline__ void collapse_pair(const N4Params& c, int64_t t0, int64_t t1, float* scratch) {
  static_assert(kTok == 1 || kTok == 2, "one token or a pair");
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t vecs = c.H / 8;
  const bool fold = c.rmsnorm_weight != nullptr;
  const int64_t tok[2] = {t0, t1 >= 0 ? t1 : t0};
  const int nt = kTok == 2 && t1 >= 0 ? 2 : 1;
  MHC_TRACE(const unsigned long long start = trace_now());
  float pre[kTok][kN], scale[kTok] = {}, sq[kTok] = {};
  uint4 u[kTok][kVecs];
#pragma unroll
  for (int b = 0; b < kVecs; b += kCollapseBatch) {
    uint4 r[kTok][kCollapseBatch][kN];
#pragma unroll
    for (int k = 0; k < kTok; ++k) {
      const bf16_t* x = c.x + tok[k] * c.x_stride;
#pragma unroll
      for (int q = 0; q < kCollapseBatch; ++q) {
        const int64_t v = tid + static_cast<int64_t>(b + q) * kTailThreads;
#pragma unroll
        for (int j = 0; j < kN; ++j) {
          r[k][q][j] = k < nt && v < vecs ? ldcs16(x + j * c.x_stream_stride + v * 8) : make_uint4(0, 0, 0, 0);
        }
      }
    }
    if (b == 0) {
#pragma unroll
      for (int k = 0; k < kTok; ++k) {
        if (k < nt) {
          poll_pre(c.pre_mix_in + tok[k] * c.pre_mix_in_stride, pre[k]);
          scale[k] = sum_error_scale(pre[k]);
        }
      }
    }
#pragma unroll
    for (int k = 0; k < kTok; ++k) {
      bf16_t* dst = c.layer_input + tok[k] * c.layer_input_stride;
      bf16_t* copies = c.copy_x_out ? c.residual_out + tok[k] * c.residual_out_stride : nullptr;
#pragma unroll
      for (int q = 0; q < kCollapseBatch; ++q) {
        const int64_t v = tid + static_cast<int64_t>(b + q) * kTailThreads;
        if (k < nt && v < vecs) {
          if (copies != nullptr) {
#pragma unroll
            for (int j = 0; j < kN; ++j) st16(copies + j * c.H + v * 8, r[k][q][0]);
          }
          u[k][b + q] = collapse_vec(CollapseKind::kWeighted, pre[k], scale[k], r[k][q]);
          if (!fold) {
            st16(dst + v * 8, u[k][b + q]);
          } else {
            add_squares(u[k][b + q], sq[k]);
          }
        }
      }
    }
  }
  if (fold) {  // uniform
    block_sum<kTok, kTailWarps, kTailBar>(sq, scratch);
    float inv[kTok];
#pragma unroll
    for (int k = 0; k < kTok; ++k) inv[k] = 1.0f / sqrtf(sq[k] / static_cast<float>(c.H) + c.rmsnorm_eps);
#pragma unroll
    for (int q = 0; q < kVecs; ++q) {
      const int64_t v = tid + static_cast<int64_t>(q) * kTailThreads;
      if (v < vecs) {
        const uint4 w = ld16(c.rmsnorm_weight + v * 8);
#pragma unroll
        for (int k = 0; k < kTok; ++k) {
          if (k < nt) st16(c.layer_input + tok[k] * c.layer_input_stride + v * 8, fold_vec(u[k][q], w, inv[k]));
        }
      }
    }
  }
  TailBarrier{}();  // every tail thread has read both pres
  MHC_TRACE(if (tid < nt && tok[tid] < kTraceTokens) {
    g_trace_token[tok[tid]][0] = start;
    g_trace_token[tok[tid]][1] = trace_now();
  });
  if (tid < nt) {
    const uint32_t poison = kPrePoison;
    const int64_t t = tid == 0 ? t0 : t1;
    asm volatile("st.global.v4.u32 [%0], {%1, %1, %1, %1};" ::"l"(c.pre_mix_in + t * c.pre_mix_in_stride),
                 "r"(poison)
                 : "memory");
  }
}

// The tail warps: this block's finalize tiles and collapse pairs in TailOrder's order (tail_order.hpp
// says why nothing then waits in a cycle).
template <int kVecs, int kPerItem>
__device__ __forceinline__ void tail_role(const PersistentParams& d, float (*s_dot)[kPartial],
                                          float (*s_pre)[kN + 1], float* scratch) {
  pdl_wait();
  pdl_launch_dependents();
  MHC_TRACE(if (threadIdx.x == 0 && blockIdx.x < kTraceRoleBlocks) g_trace_role[blockIdx.x][2] = trace_now());
  FinalizeParams rest = d.f;  // finalize_run after early_pre: the pre is in the mailbox already
  rest.pre = nullptr;
  TailOrder order(d.f.p.T, gridDim.x, blockIdx.x, kTile, kPerItem);
#pragma unroll 1
  for (TailItem item = order.next(); item.kind != TailItem::kDone; item = order.next()) {
    if (item.kind == TailItem::kFinalize) {
      const int64_t tile = item.tile;
      finalize_tile(
          d.f, rest, tile, s_dot, s_pre, TailBarrier{},
          [&] { MHC_TRACE(if (threadIdx.x == 0 && tile < kTraceTiles) g_trace_tile[tile][0] = trace_now()); },
          [&] { MHC_TRACE(if (threadIdx.x == 0 && tile < kTraceTiles) g_trace_tile[tile][1] = trace_now()); });
    } else {
      collapse_pair<kVecs, kPerItem>(d.c, item.t0, item.t1, scratch);
    }
  }
  MHC_TRACE(if (threadIdx.x == 0 && blockIdx.x < kTraceRoleBlocks) g_trace_role[blockIdx.x][3] = trace_now());
}
#endif

template <int kVecs, int kGemmWarps = kReleaseGemmWarps>
__global__ void __launch_bounds__(PShape<kGemmWarps>::kThreads, 1)
    persistent_kernel(const __grid_constant__ PersistentParams d) {
  using Shape = PShape<kGemmWarps>;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float s_dot[kTile][kPartial];
  __shared__ float s_pre[kTile][kN + 1];
  __shared__ float scratch[2 * kTailWarps];
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  if (warp >= kTailWarps) {
    regs_inc<Shape::kGemmRegs>();
    gemm_role<kGemmWarps>(d.f.p, d.gemm_groups, smem, warp - kTailWarps, lane, static_cast<int>(threadIdx.x) - kTailThreads);
  } else {
    regs_dec<Shape::kTailRegs>();
    tail_role<kVecs, Shape::kPerItem>(d, s_dot, s_pre, scratch);
  }
#else
  (void)d;
  __trap();  // configure_persistent_kernel never lets this build's code run
#endif
}

#ifdef MHC_GEMM_PROBE
struct PersistentTrace {
  int64_t T = 0, H = 0, blocks = 0;
};
PersistentTrace g_ptrace;  // the last traced launch

// At exit: the last traced launch's timeline (trace.cuh), then when the blocks' GEMM warps and
// tails finished, from the first tile's count.
void dump_persistent_trace() {
  const PersistentTrace s = g_ptrace;
  double t0 = 0, span = 0;
  if (!trace_timeline(s.T, s.H, true, &t0, &span)) return;
  std::vector<unsigned long long> role(static_cast<size_t>(kTraceRoleBlocks) * 4);
  if (cudaMemcpyFromSymbol(role.data(), g_trace_role, role.size() * 8) != cudaSuccess) return;
  std::vector<double> gemm_end, tail_end;
  for (int64_t b = 0; b < s.blocks && b < kTraceRoleBlocks; ++b) {
    if (role[4 * b + 1] != 0) gemm_end.push_back((static_cast<double>(role[4 * b + 1]) - t0) / 1e3);
    tail_end.push_back((static_cast<double>(role[4 * b + 3]) - t0) / 1e3);
  }
  print_quantiles("GEMM warps done, from the first count", gemm_end);
  print_quantiles("tails done, from the first count", tail_end);
}
#endif

}  // namespace

bool configure_persistent_kernel(int device, bool sm90a) {
  if (!sm90a) return false;
  constexpr int kSmem = PShape<kReleaseGemmWarps>::kSmem;
  return allow_dynamic_smem(persistent_kernel<2>, device, kSmem) && allow_dynamic_smem(persistent_kernel<4>, device, kSmem);
}

bool persistent_supports(int64_t H, int32_t chunks, int32_t num_sms) {
  return H <= 8192 && chunks <= num_sms;
}

void launch_persistent_kernel(const N4Params& m, float* pre, const N4Params& c, const LaunchCtx& ctx) {
  if (m.T <= 0) return;
  MHC_CHECK(persistent_supports(c.H, m.chunks, ctx.num_sms), "persistent_kernel: H = ", c.H, " with ", m.chunks,
            " chunks on ", ctx.num_sms, " multiprocessors is outside its envelope");
  MHC_CHECK(m.tile_arrivals != nullptr, "persistent_kernel: no tile counters");
  MHC_CHECK(pre != nullptr && (reinterpret_cast<uintptr_t>(pre) & 15u) == 0, "persistent_kernel: pre mailbox alignment");
  MHC_CHECK(c.pre_poll && c.T == m.T && c.pre_mix_in == pre && c.pre_source != PreSource::kIdentity && !c.head_mean,
            "persistent_kernel: the collapse polls the finalize's mailbox with the weighted pre");
  const int64_t groups = overlap_groups(m.T, m.chunks, ctx.num_sms);
  const int64_t gemm_blocks = groups * m.chunks;
  // Every multiprocessor where there are as many tokens (the tails' share), never fewer blocks than
  // the GEMM's; at most the multiprocessors (persistent_supports), so all are resident at once.
  const int64_t blocks = std::max<int64_t>(gemm_blocks, std::min<int64_t>(m.T, ctx.num_sms));
  PersistentParams d{};
  d.f = FinalizeParams{m, pre, kTile};
  d.c = c;
  d.gemm_groups = static_cast<int32_t>(groups);
#ifdef MHC_GEMM_PROBE
  if (std::getenv("MHC_OVERLAP_TRACE") != nullptr) {
    static const bool registered = std::atexit(dump_persistent_trace) == 0;
    (void)registered;
    g_ptrace = PersistentTrace{m.T, c.H, blocks};
    // the GEMM warps' ends are maxima over the block's warps: start from 0 each launch
    static std::vector<unsigned long long> zeros(static_cast<size_t>(kTraceRoleBlocks) * 4, 0);
    MHC_CUDA_CHECK(cudaMemcpyToSymbolAsync(g_trace_role, zeros.data(), zeros.size() * 8, 0, cudaMemcpyHostToDevice,
                                           ctx.stream));
  }
#endif
  const bool two = (c.H / 8 + kThreadsB - 1) / kThreadsB <= 2;  // vectors a tail thread
#ifdef MHC_GEMM_PROBE
  // MHC_PERSISTENT_GEMM_WARPS=8: the 8-GEMM-warp shape (PShape), for A/B timing.
  if (const char* env = std::getenv("MHC_PERSISTENT_GEMM_WARPS"); env != nullptr && std::atoi(env) == 8) {
    using Shape8 = PShape<8>;
    int device = 0;
    MHC_CUDA_CHECK(cudaGetDevice(&device));
    static const bool allowed = allow_dynamic_smem(persistent_kernel<2, 8>, device, Shape8::kSmem) &&
                                allow_dynamic_smem(persistent_kernel<4, 8>, device, Shape8::kSmem);
    MHC_CHECK(allowed, "persistent_kernel (8 GEMM warps): shared memory");
    launch_kernel(two ? persistent_kernel<2, 8> : persistent_kernel<4, 8>, dim3(static_cast<unsigned>(blocks)),
                  Shape8::kThreads, Shape8::kSmem, ctx, d);
    return;
  }
#endif
  using Shape = PShape<kReleaseGemmWarps>;
  launch_kernel(two ? persistent_kernel<2> : persistent_kernel<4>, dim3(static_cast<unsigned>(blocks)), Shape::kThreads,
                Shape::kSmem, ctx, d);
}

}  // namespace mhc::cuda::n4

#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_persistent_kernels(KernelList& out) {
  add_kernel(out, persistent_kernel<2>, "n4::persistent_kernel<2>");
  add_kernel(out, persistent_kernel<4>, "n4::persistent_kernel<4>");
}

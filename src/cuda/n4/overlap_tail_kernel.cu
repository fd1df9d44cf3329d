// src/cuda/n4/overlap_tail_kernel.cu - the overlap rows' second kernel (cuda_n4_overlap,
// staged.cu): finalize_kernel's work and collapse_stream_kernel's work in one launch, running
// beside gemm_kernel's overlapped form, tile by tile.
//
// What it computes: the same outputs, bit for bit, as finalize_kernel then collapse_stream_kernel
// with the pre mailbox: the canonical sums of each 32-token tile's chunk partials and the mixes
// epilogue (finalize_run.cuh), each token's fresh pre stored in the mailbox before its comb's
// Sinkhorn chain, and each token's collapse with its RMSNorm fold (collapse_token.cuh, the
// 256-thread shape at every H), which polls its pre there.
// Grid mapping: fin_blocks + (collapse ? T : 0) blocks of 256 threads. A block's role is its
// ticket (an atomic add on the workspace's ticket counter as it starts), not its index, so a block
// only ever waits for blocks that started before it:
//   tickets 0 .. fin_blocks - 1: the finalize role, persistent, tiles ticket, ticket + fin_blocks,
//     ..; each once its counter counts every chunk (take_tile), the GEMM kernel's items of the tile
//     having been stored: first the tile's pre alone into the mailbox (early_pre: 5 of each
//     token's 25 sums, ~4 x fewer loads on that path), then the rest of finalize_kernel's work;
//   the others: the collapse role, token ticket - fin_blocks: its streams' loads first, then its
//     pre polled in the mailbox (a finalize-role block, started earlier, stores it), the collapse,
//     the fold.
// The GEMM kernel starts this one (programmatic dependent launch) only once every GEMM block has
// started and the kernel before the GEMM has completed, so nothing here waits on a block that is
// not running. Each role ends with pdl_wait, so this kernel completes after the GEMM kernel; the
// last block to finish puts the ticket counters back to 0 for the next launch.
// Accumulation: finalize_kernel's and collapse_stream_kernel's (their headers).
// Envelope: the n4 envelope; p.T <= the workspace's tile counters x 32; the pre mailbox for the
// collapse role.
#include <cstdlib>
#ifdef MHC_GEMM_PROBE
#include <algorithm>
#include <cstdio>
#include <vector>
#endif

#include "src/cuda/launch.cuh"
#include "src/cuda/n4/collapse_token.cuh"
#include "src/cuda/n4/finalize_run.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/n4/trace.cuh"

namespace mhc::cuda::n4 {

namespace {

static_assert(kFinThreads == kThreadsB, "one block shape for both roles");

// Diagnostics build (-DMHC_GEMM_PROBE) with MHC_OVERLAP_TRACE=1 in the environment: the last
// launch's timeline, from the global timer (ns), printed at the process's exit as "[trace ...]"
// lines (dump_trace): when each tile's counter was seen complete and its pre stored (finalize
// role), and when each token's collapse started (its streams' loads) and ended. The collapse's
// start less its tile's completion is how long after the GEMM stage's read of the streams the
// collapse re-reads them. Also each block's multiprocessor and span, summed up as the tail blocks
// running at the midpoint of the tiles' counts, by multiprocessor. MHC_OVERLAP_CARVEOUT=n sets the
// tail kernel's preferred shared-memory carveout (n percent). Release builds record nothing.
#ifdef MHC_GEMM_PROBE
constexpr int kTraceBlocks = kTraceTokens + 1024;
__device__ unsigned long long g_trace_block[kTraceBlocks][3];  // by ticket: start, end, 2 x SM + role
#define MHC_TRACE(statement) statement
#else
#define MHC_TRACE(statement)
#endif

struct TailParams {
  FinalizeParams f;   // the mixes' params (the GEMM stage's slice), the mailbox, kTile tokens a run
  N4Params c;         // the collapse's params (the mailbox as its polled pre)
  uint32_t* tickets;  // [2]: tickets handed out, blocks finished; 0 between launches
  int32_t fin_blocks; // blocks of the finalize role (the collapse role's: T, where it runs)
};

// Registers: beside a GEMM block (184 x 128 threads allocated) the register file holds two
// 256-thread blocks of at most 80 registers each; the bound of 3 blocks caps them at 80 (<8>, H >
// 8192, needs more: one block there). That is the count; measured (session 35, H100), the collapse
// role's blocks ran after the GEMM kernel, not beside it (docs/performance.md, "The overlap rows").
template <int kVecs, bool kKeep>
__global__ void __launch_bounds__(kThreadsB, kVecs <= 4 ? 3 : 2) overlap_tail_kernel(const TailParams d) {
  __shared__ float s_dot[kTile][kPartial];
  __shared__ float s_pre[kTile][kN + 1];
  __shared__ float scratch[kThreadsB / 32];
  __shared__ uint32_t s_ticket;
  pdl_launch_dependents();
  if (threadIdx.x == 0) s_ticket = atomicAdd(d.tickets, 1u);
  __syncthreads();
  const uint32_t ticket = s_ticket;
  MHC_TRACE(const unsigned long long block_start = trace_now());
  if (ticket < static_cast<uint32_t>(d.fin_blocks)) {
    const N4Params& p = d.f.p;
    const int64_t tiles = (p.T + kTile - 1) / kTile;
    FinalizeParams rest = d.f;  // finalize_run after early_pre: the pre is in the mailbox already
    rest.pre = nullptr;
#pragma unroll 1
    for (int64_t tile = ticket; tile < tiles; tile += d.fin_blocks) {
      finalize_tile(
          d.f, rest, tile, s_dot, s_pre,
          [&] { MHC_TRACE(if (threadIdx.x == 0 && tile < kTraceTiles) g_trace_tile[tile][0] = trace_now()); },
          [&] { MHC_TRACE(if (threadIdx.x == 0 && tile < kTraceTiles) g_trace_tile[tile][1] = trace_now()); });
    }
    pdl_wait();  // complete only after the GEMM kernel
  } else {
    // The collapse role (collapse_token ends with pdl_wait and puts the mailbox's poison back).
    const int64_t token = static_cast<int64_t>(ticket) - d.fin_blocks;
    MHC_TRACE(if (threadIdx.x == 0 && token < kTraceTokens) g_trace_token[token][0] = trace_now());
    collapse_token<kVecs, false, false, true, kKeep>(d.c, token, nullptr, scratch);
    MHC_TRACE(if (threadIdx.x == 0 && token < kTraceTokens) g_trace_token[token][1] = trace_now());
  }
  __syncthreads();
  MHC_TRACE(if (threadIdx.x == 0 && ticket < kTraceBlocks) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    g_trace_block[ticket][0] = block_start;
    g_trace_block[ticket][1] = trace_now();
    g_trace_block[ticket][2] = 2ull * sm + (ticket < static_cast<uint32_t>(d.fin_blocks) ? 0u : 1u);
  });
  if (threadIdx.x == 0 && atomicAdd(d.tickets + 1, 1u) == gridDim.x - 1) {
    d.tickets[0] = 0u;  // every block has taken its ticket and finished: visible to the next launch
    d.tickets[1] = 0u;
  }
}

template <int kVecs>
void launch_tail_as(const TailParams& d, unsigned blocks, bool keep, const LaunchCtx& ctx) {
  if (keep) {
    launch_kernel(overlap_tail_kernel<kVecs, true>, dim3(blocks), kThreadsB, 0, ctx, d);
  } else {
    launch_kernel(overlap_tail_kernel<kVecs, false>, dim3(blocks), kThreadsB, 0, ctx, d);
  }
}

#ifdef MHC_GEMM_PROBE
struct TraceShape {
  int64_t T = 0, H = 0, blocks = 0;
  int sms = 0;
  bool collapse = false;
};
TraceShape g_trace_shape;  // the last traced launch

// At exit: the last traced launch's timeline (trace.cuh), then where the tail's blocks ran.
void dump_trace() {
  const TraceShape s = g_trace_shape;
  double t0 = 0, last_tile = 0;
  if (!trace_timeline(s.T, s.H, s.collapse, &t0, &last_tile)) return;
  // Where the tail's blocks ran while the GEMM kernel did: the blocks running at the midpoint of
  // the tiles' counts, by multiprocessor and role.
  std::vector<unsigned long long> blk(static_cast<size_t>(kTraceBlocks) * 3);
  if (cudaMemcpyFromSymbol(blk.data(), g_trace_block, blk.size() * 8) != cudaSuccess) return;
  const int64_t blocks = std::min<int64_t>(s.blocks, kTraceBlocks);
  const double mid = t0 + last_tile / 2;
  std::vector<int> per_sm(1024, 0);
  int running[2] = {0, 0}, hist[4] = {0, 0, 0, 0};
  double first_collapse = 1e30;
  for (int64_t b = 0; b < blocks; ++b) {
    const double b0 = static_cast<double>(blk[3 * b]), b1 = static_cast<double>(blk[3 * b + 1]);
    const int role = static_cast<int>(blk[3 * b + 2] & 1u), sm = static_cast<int>(blk[3 * b + 2] >> 1);
    if (role == 1) first_collapse = std::min(first_collapse, b0 - t0);
    if (b0 <= mid && mid < b1 && sm < 1024) {
      ++running[role];
      ++per_sm[sm];
    }
  }
  for (int k = 0; k < s.sms && k < 1024; ++k) ++hist[std::min(per_sm[k], 3)];
  std::printf("[trace at the counts' midpoint (%.1f us): tail blocks running %d finalize, %d collapse; "
              "multiprocessors with 0 / 1 / 2 / 3+ of them: %d / %d / %d / %d; first collapse-role start %.1f us]\n",
              last_tile / 2e3, running[0], running[1], hist[0], hist[1], hist[2], hist[3], first_collapse / 1e3);
}
#endif

}  // namespace

void launch_overlap_tail_kernel(const N4Params& m, float* pre, const N4Params* collapse, uint32_t* tickets,
                                const LaunchCtx& ctx) {
  if (m.T <= 0) return;
  MHC_CHECK(m.tile_arrivals != nullptr && tickets != nullptr, "overlap_tail_kernel: no tile counters");
  MHC_CHECK(pre == nullptr || (reinterpret_cast<uintptr_t>(pre) & 15u) == 0, "overlap_tail_kernel: pre alignment");
  MHC_CHECK(collapse == nullptr || (collapse->pre_poll && collapse->T == m.T && collapse->pre_mix_in == pre),
            "overlap_tail_kernel: the collapse role polls the finalize role's mailbox");
  // Finalize-role blocks: every second multiprocessor by default. Counted, not measured: a tile's
  // loads are 8 (H = 4096) to 14 (7168) dependent L2 round trips, ~1 us each under load, then its
  // epilogue's ~2 us chain, so ~10-16 us a tile; at ~2.6 tiles a us (pre at H = 4096, T = 16384 in
  // 200 us) ~40 blocks keep up. The diagnostics build's MHC_OVERLAP_FINALIZE_BLOCKS sets it.
  const int64_t tiles = (m.T + kTile - 1) / kTile;
  int64_t fin = ctx.num_sms > 1 ? (ctx.num_sms + 1) / 2 : 1;
#ifdef MHC_GEMM_PROBE
  if (const char* env = std::getenv("MHC_OVERLAP_FINALIZE_BLOCKS"); env != nullptr && std::atoi(env) > 0) {
    fin = std::atoi(env);
  }
#endif
  fin = fin > tiles ? tiles : fin;
  TailParams d{};
  d.f = FinalizeParams{m, pre, kTile};
  if (collapse != nullptr) d.c = *collapse;
  d.tickets = tickets;
  d.fin_blocks = static_cast<int32_t>(fin);
  const int64_t blocks = fin + (collapse != nullptr ? m.T : 0);
  MHC_CHECK(blocks < (int64_t{1} << 31), "overlap_tail_kernel: too many tokens in one launch");
  const bool keep = collapse != nullptr && collapse->x_keep;
#ifdef MHC_GEMM_PROBE
  if (std::getenv("MHC_OVERLAP_TRACE") != nullptr) {
    static const bool registered = std::atexit(dump_trace) == 0;
    (void)registered;
    g_trace_shape = TraceShape{m.T, collapse != nullptr ? collapse->H : m.H, blocks, ctx.num_sms, collapse != nullptr};
  }
  // MHC_OVERLAP_CARVEOUT=n: the tail's preferred shared-memory carveout, n percent (A/B).
  if (const char* env = std::getenv("MHC_OVERLAP_CARVEOUT"); env != nullptr) {
    static const bool set = [](int pct) {
      for (auto k : {overlap_tail_kernel<2, false>, overlap_tail_kernel<4, false>, overlap_tail_kernel<8, false>,
                     overlap_tail_kernel<2, true>, overlap_tail_kernel<4, true>, overlap_tail_kernel<8, true>}) {
        MHC_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, pct));
      }
      return true;
    }(std::atoi(env));
    (void)set;
  }
#endif
  // The collapse role's shape: collapse_stream_kernel's 256-thread shape for H (vectors a thread).
  const int64_t h_vecs = collapse != nullptr ? (collapse->H / 8 + kThreadsB - 1) / kThreadsB : 2;
  if (h_vecs <= 2) {
    launch_tail_as<2>(d, static_cast<unsigned>(blocks), keep, ctx);
  } else if (h_vecs <= 4) {
    launch_tail_as<4>(d, static_cast<unsigned>(blocks), keep, ctx);
  } else {
    launch_tail_as<8>(d, static_cast<unsigned>(blocks), keep, ctx);
  }
}

}  // namespace mhc::cuda::n4

#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_overlap_tail_kernels(KernelList& out) {
  add_kernel(out, overlap_tail_kernel<2, false>, "n4::overlap_tail_kernel<2>");
  add_kernel(out, overlap_tail_kernel<4, false>, "n4::overlap_tail_kernel<4>");
  add_kernel(out, overlap_tail_kernel<8, false>, "n4::overlap_tail_kernel<8>");
  add_kernel(out, overlap_tail_kernel<2, true>, "n4::overlap_tail_kernel<2, keep>");
  add_kernel(out, overlap_tail_kernel<4, true>, "n4::overlap_tail_kernel<4, keep>");
  add_kernel(out, overlap_tail_kernel<8, true>, "n4::overlap_tail_kernel<8, keep>");
}

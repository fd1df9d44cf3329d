// src/cuda/n4/decode_chunk_kernel.cu - every n = 4 operator with a mixes stage in ONE launch with
// one block per (chunk, 16-token group), plus phase-2-only blocks where T exceeds those, for small
// T (decode and speculative verify).
//
// What it computes: the same outputs, bit for bit, as every other n4 variant: the optional post
// stage (post8), residual_out, the mixes in the canonical order of config.cuh, the epilogue
// (epilogue.cuh) and the collapse with its RMSNorm fold (collapse_row.cuh, collapse_loaded).
// Grid mapping: one 384-thread block per (128-column chunk c, run of G consecutive groups of 16
// tokens): H / 128 x ceil(ceil(T / 16) / G) phase-1 blocks, block b = (c = b % chunks, run
// b / chunks), where G is the fewest groups per block (at most 4) that keep the grid within one
// wave (blocks <= the multiprocessors; G = 1 up to T = 16 x floor(SMs / chunks)). Phase 1: the
// block stages the run's inputs in shared memory at once (cp.async of the residual and
// layer_output rows, L2 loads of the mixes), so the run pays one memory latency; then items
// (token, 8-column vector), 384 at a time, form the post of all 4 streams (post8), write
// residual_out, put the 4 x 128 columns in place as the A tile and form the chunk's sum of
// squares (fmaf chain, butterfly) (G = 1 with one token, T = 1: the post runs first by (token,
// vector, column pair) items, 4 threads a vector, into residual_out and the A tile;
// decode_phase1.cuh's column-pair mode);
// then warp w = (stream j = w / 3, row block b = w % 3) runs, per group, the three mma chains of
// n-tiles b, 3 + b, 6 + b (hi, mid, lo parts of rows 8b..8b+7, B fragments in registers, loaded
// before pdl_wait since they are weights) and forms v = hi + (mid + lo); the chunk partial
// ((v_0 + v_1) + v_2) + v_3 and the sum of squares go to the workspace ([T][chunks][25]: a
// token's chunks side by side for phase 2; the staged plans use [chunks][T][25]). Then each block
// takes an arrival number (one acq_rel atomic). P = min(T, SMs - 1) blocks do phase 2, block k for
// tokens k, k + P, ..: the last to arrive and, where T exceeds the phase-1 blocks, P - blocks more
// blocks after them that skip phase 1 (so a block serves one token up to T = SMs - 1). They wait
// until every block has arrived (the blocks they wait for are running, done, or waiting for one of
// the multiprocessors that P spinning blocks leave free; the kernel after this one cannot
// start before every block of this one has), then per token reduce the partials in the
// canonical order (8 interleaved chunk groups, then the groups), and warps 0..7 collapse the
// token from registers (its new residual loaded from L2 right after the wait, the RMSNorm weight
// before it) while warp 8 runs the epilogue's serial chain (the comb's Sinkhorn) and warp 9 the pre
// and post sigmoids, each writing its mixes. At T = 1 the last block goes straight on: no block
// ever spins. The last phase-2 block to finish resets the counters (zeroed once by
// Workspace::create), so graph replays reuse them.
// Accumulation: mma.m16n8k16 bf16 x the three bf16 parts of fn, fp32, from zero per (token,
// chunk, stream, n-tile) over the 8 k16 steps in order (as mix_kernel, gemm_kernel and
// decode_kernel); fp32 sums in the canonical order; exact sums for post and collapse.
// Envelope: n4_supports(), an op with a mixes stage, H <= 8192 (the row in registers), 1 <= T <=
// the workspace's decode limit (at most 128).
#include <cstdlib>

#include "src/cuda/launch.cuh"
#include "src/cuda/n4/canonical.cuh"
#include "src/cuda/n4/collapse_row.cuh"
#include "src/cuda/n4/decode_phase1.cuh"
#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/n4/post8.cuh"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda::n4 {

namespace {

constexpr int kThreads = kDecodeBlock;             // 384: warp = (stream, row block) in phase 1
constexpr int kCollapseWarps = kThreadsB / 32;     // 8: collapse_loaded's fold order needs 256 threads
constexpr int kCombWarp = kCollapseWarps;          // phase 2: warp 8 runs the comb's Sinkhorn chain,
constexpr int kPrePostWarp = kCollapseWarps + 1;   // warp 9 the pre and post outputs
constexpr int kRowRegs = 4;                        // row vectors per collapse thread: H <= 8192
constexpr int kMaxDecodeH = kRowRegs * kThreadsB * 8;
static_assert(kPartialSplit * kPartial <= kThreads, "phase 2: a thread per (chunk group, row)");

enum Counter { kArrived = 1, kDone = 2 };  // the workspace's counters (decode_kernel's layout)

struct ChunkDecodeParams {
  N4Params p;
  float* dp;           // [T][chunks][25] chunk partials (workspace scratch)
  uint32_t* counters;  // the workspace's [3] counters, 0 between launches
  int32_t blocks;      // chunks x runs: block b runs chunk b % chunks, groups [G (b / chunks), + G)
  int32_t run;         // G: token groups per block
  int32_t phase2;      // P = min(T, SMs - 1) phase-2 blocks; blocks blockIdx.x >= `blocks` (P - blocks
                       // where P > blocks) are phase-2-only
  int32_t probe;       // diagnostics builds only (MHC_DECODE_PROBE, see probe_level): where to stop
};

// Diagnostics (a build with -DMHC_DECODE_PROBE; MHC_DECODE_PROBE=k in the environment): the kernel
// stops early so that a chained benchmark shows what each part costs. 1: after pdl_wait; 2: after
// phase 1; 3: after the arrivals (phase 2 does nothing); 4: phase 2 without collapse and epilogue;
// 5: without the epilogue; 6: without the collapse; 7: as 6, the epilogue run twice (the second
// pass warm: what the first pays for a cold instruction cache). Release builds compile the checks
// away.
#ifdef MHC_DECODE_PROBE
__device__ __forceinline__ int probe_level(const ChunkDecodeParams& d) { return d.probe; }
#else
__device__ __forceinline__ constexpr int probe_level(const ChunkDecodeParams&) { return 0; }
#endif

// The dynamic shared memory of a run of G groups: run_smem_bytes(G) (decode_phase1.cuh).
constexpr int kMaxRun = 4;  // groups per block: 91 KB, within every supported device's opt-in limit
static_assert(run_smem_bytes(kMaxRun) <= 99 * 1024, "decode_chunk_kernel shared memory (sm_120: 99 KB)");

template <bool kPost, bool kStaged>
__global__ void __launch_bounds__(kThreads, 1) decode_chunk_kernel(const ChunkDecodeParams d) {
  extern __shared__ __align__(16) unsigned char smem[];  // run_smem_bytes(d.run)
  __shared__ float s_part[kPartialSplit][kPartial];
  __shared__ float s_dot[kPartial];
  __shared__ float s_pre[kN];
  __shared__ float s_scratch[kCollapseWarps];
  __shared__ float s_scale[3], s_base[kRows];
  __shared__ uint32_t s_arrival;
  const N4Params& p = d.p;
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
  const bool only2 = static_cast<int>(blockIdx.x) >= d.blocks;  // block-uniform: a phase-2-only block
  const int c = static_cast<int>(blockIdx.x) % p.chunks;
  const int64_t first = static_cast<int64_t>(blockIdx.x / p.chunks) * d.run * kGroup;  // the run's first token
  pdl_launch_dependents();
  // The epilogue's weights (scale, base: a learned head has 1 and 4) into shared memory now, so
  // phase 2's serial chains start without a global load.
  if (tid < (p.epi.head ? 1 : 3)) s_scale[tid] = p.epi.scale[tid];
  if (tid >= 32 && tid < 32 + (p.epi.head ? kN : kRows)) s_base[tid - 32] = p.epi.base[tid - 32];
  // This warp's B fragments (weights: loaded before pdl_wait, overlapping the kernel before).
  uint2 b[3][kMmaSteps];
  if (!only2) load_warp_fragments(p, c, b);
  pdl_wait();  // the inputs, the scratch and the counters belong to this launch from here on
  const int probe = probe_level(d);
  if (probe == 1) return;
  if (!only2) {
    const int64_t left_groups = (p.T - first + kGroup - 1) / kGroup;
    const int groups = static_cast<int>(left_groups < d.run ? left_groups : d.run);
    const int64_t left = p.T - first;
    const RunRows rows{first, static_cast<int>(left < groups * kGroup ? left : groups * kGroup), c};
    phase1_run<kPost, kStaged>(
        p, rows, groups,
        same_fragments(b),
        smem,
        [&](int tl, int r, float v) { d.dp[((first + tl) * p.chunks + c) * kPartial + r] = v; });
  }
  if (probe == 2) return;
  // Arrival: the block barrier orders every thread's partial and residual_out writes before
  // thread 0's acq_rel add (cumulative release). Phase-2-only blocks take phase-2 numbers 0 ..
  // P - blocks - 1 where P > blocks; the last min(P, blocks) phase-1 blocks to arrive the others.
  if (!only2) {
    __syncthreads();
    if (tid == 0) s_arrival = atom_add_acq_rel_gpu(d.counters + kArrived, 1u);
    __syncthreads();
  }
  const int k2 = only2 ? static_cast<int>(blockIdx.x) - d.blocks
                       : static_cast<int>(s_arrival) - (d.blocks - d.phase2);
  if (k2 < 0) return;  // block-uniform: not one of the last min(P, blocks) to arrive

  // Phase 2. The RMSNorm weight (a weight) first, then wait for the other arrivals.
  const bool fold = p.has_collapse && p.rmsnorm_weight != nullptr;
  const int64_t vecs = p.H / 8;
  uint4 wr[kRowRegs];
#pragma unroll
  for (int i = 0; i < kRowRegs; ++i) {
    const int64_t v = tid + i * kThreadsB;
    wr[i] = fold && tid < kThreadsB && v < vecs ? ld16(p.rmsnorm_weight + v * 8) : make_uint4(0, 0, 0, 0);
  }
  if (tid == 0 && (only2 || s_arrival != static_cast<uint32_t>(d.blocks) - 1)) {
    while (ld_acquire_gpu(d.counters + kArrived) < static_cast<uint32_t>(d.blocks)) {
    }
  }
  __syncthreads();  // orders the other threads' reads after thread 0's acquire
  const bool computed = p.pre_source == PreSource::kComputed && !p.head_mean;
  EpilogueParams epi = p.epi;  // the same arithmetic on the shared-memory copies of the weights
  epi.scale = s_scale;
  epi.base = s_base;
  for (int64_t t = k2; t < p.T && probe != 3; t += d.phase2) {
    // Every load of the token before any arithmetic: its streams (collapse threads), its partials.
    uint4 r[kRowRegs][kN];
    if (p.has_collapse && tid < kThreadsB) load_row<kRowRegs>(p, t, r, false);
    if (tid < kPartialSplit * kPartial) {
      const int part = tid / kPartial, row = tid % kPartial;
      const float* src = d.dp + t * p.chunks * kPartial + row;
      s_part[part][row] = chunk_group_sum(part, p.chunks, [&](int cc) { return __ldcg(src + cc * kPartial); });
    }
    __syncthreads();
    if (tid < kPartial) s_dot[tid] = groups_total(s_part, tid);
    __syncthreads();
    if (w == kCombWarp || w == kPrePostWarp) {
      if (lane == 0 && !p.epi.head && probe != 4 && probe != 5) {
        float pre[kN];
        // Probe 7 runs the same instructions twice: the second pass from a warm instruction cache.
        for (int pass = 0; pass < (probe == 7 ? 2 : 1); ++pass)
          mixes_epilogue<kN>(epi, s_dot, s_dot[kRows], p.inv_k, t, pre, w == kCombWarp ? kEpiComb : kEpiPrePost);
      }
    } else if (w < kCollapseWarps && p.has_collapse && probe != 4 && probe != 6 && probe != 7) {
      if (computed && tid == 0) {
        float pre[kN];
        mixes_pre<kN>(epi, s_dot, s_dot[kRows], p.inv_k, pre);
#pragma unroll
        for (int j = 0; j < kN; ++j) s_pre[j] = pre[j];
      } else if (p.pre_source == PreSource::kCarried && tid < kN) {
        s_pre[tid] = __ldcg(p.pre_mix_in + t * p.pre_mix_in_stride + tid);
      }
      named_sync(2, kThreadsB);  // s_pre is written
      collapse_loaded<kRowRegs, kCollapseWarps>(p, t, s_pre, r, wr, s_scratch);
    }
    __syncthreads();  // s_part, s_dot, s_pre and s_scratch are reused by the next token
  }
  // The last phase-2 block to finish resets the counters for the next launch (a single phase-2
  // block, T = 1, knows it is the last without counting).
  if (tid == 0 && (d.phase2 == 1 || atom_add_acq_rel_gpu(d.counters + kDone, 1u) == static_cast<uint32_t>(d.phase2) - 1)) {
    d.counters[kArrived] = 0;  // visible to the next launch once this grid completes (pdl_wait)
    d.counters[kDone] = 0;
  }
}


// The instantiation for a call: post or not, staged runs or not.
auto chunk_kernel(bool post, bool staged) {
  return post ? (staged ? decode_chunk_kernel<true, true> : decode_chunk_kernel<true, false>)
              : (staged ? decode_chunk_kernel<false, true> : decode_chunk_kernel<false, false>);
}

}  // namespace

bool decode_chunk_supports(int64_t H) { return H <= kMaxDecodeH; }

void launch_decode_chunk_kernel(const N4Params& p, float* scratch, uint32_t* counters, const LaunchCtx& ctx) {
  if (p.T <= 0) return;
  ChunkDecodeParams d{};
  d.p = p;
  d.dp = scratch;
  d.counters = counters;
  // G: the fewest groups per block (at most kMaxRun) that keep chunks x runs within one wave.
  const int64_t groups = (p.T + kGroup - 1) / kGroup;
  const int64_t slots = ctx.num_sms / p.chunks > 0 ? ctx.num_sms / p.chunks : 1;
  const int64_t run = (groups + slots - 1) / slots;
  d.run = static_cast<int32_t>(run < kMaxRun ? run : kMaxRun);
  d.blocks = static_cast<int32_t>((groups + d.run - 1) / d.run * p.chunks);
  // P phase-2 blocks spin until every block has arrived: fewer than the multiprocessors, so that a
  // block not yet scheduled always finds one. P = min(T, SMs - 1), a token each where T allows:
  // where the phase-1 blocks are fewer (e.g. T = 113-128 at H = 7168: 112 blocks), P - blocks
  // phase-2-only blocks join them, so that no block serves a second token after its first (each
  // token's phase 2 is a chain of ~2.5 us); the grid is then P <= SMs - 1 blocks, all resident.
  const int64_t spin_limit = ctx.num_sms > 1 ? ctx.num_sms - 1 : 1;
  const int64_t phase2 = p.T < spin_limit ? p.T : spin_limit;
  d.phase2 = static_cast<int32_t>(phase2);
#ifdef MHC_DECODE_PROBE
  const char* probe = std::getenv("MHC_DECODE_PROBE");
  d.probe = probe != nullptr ? std::atoi(probe) : 0;
#endif
  // The staged phase 1 only where a block has several groups (see chunk_run).
  const bool staged = d.run > 1;
  launch_kernel(chunk_kernel(p.has_post, staged), dim3(static_cast<unsigned>(phase2 > d.blocks ? phase2 : d.blocks)), kThreads, static_cast<size_t>(run_smem_bytes(d.run)), ctx, d);
}

bool configure_decode_chunk_kernel(int device) {
  return allow_dynamic_smem(decode_chunk_kernel<false, true>, device, run_smem_bytes(kMaxRun)) &&
         allow_dynamic_smem(decode_chunk_kernel<true, true>, device, run_smem_bytes(kMaxRun));
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_decode_chunk_kernels(KernelList& out) {
  add_kernel(out, decode_chunk_kernel<false, false>, "n4::decode_chunk_kernel<false, false>");
  add_kernel(out, decode_chunk_kernel<true, false>, "n4::decode_chunk_kernel<true, false> (post)");
  add_kernel(out, decode_chunk_kernel<false, true>, "n4::decode_chunk_kernel<false, true> (staged runs)");
  add_kernel(out, decode_chunk_kernel<true, true>, "n4::decode_chunk_kernel<true, true> (post, staged runs)");
}

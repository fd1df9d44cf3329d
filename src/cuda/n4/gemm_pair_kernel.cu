// src/cuda/n4/gemm_pair_kernel.cu - the mixes stage of the n = 4 path with the dots and the
// square sums on different warps: for p.T tokens of the streams p.residual, the partials
// [token][chunk][25], the same bits as gemm_kernel (every value comes from gemm_step.cuh).
//
// Why: gemm_kernel runs at 60% of DRAM peak bound by issue and latency (Nsight Compute, session
// 11 call 5: 1.95 warps a scheduler, 0.51 eligible, 5.1 cycles an instruction, 944
// instructions a warp per 8 KB step, a third of them the square sums). Here each of kPairs
// pairs of warps shares one ring: the pair's squares warp issues the copies and forms the
// square sums, its dots warp runs the mma chains, so a warp's step is about half as long and a
// scheduler has 3.5 warps instead of 2.
//
// Grid mapping: at most one 384-thread block per multiprocessor, each with an equal contiguous
// range of the (chunk, 32-token tile) items in chunk-major order (as gemm_kernel); pair q takes
// the block-local items q, q + kPairs, ..; warp q is its dots warp, warp kPairs + q its squares
// warp. A step (stream j of an item) passes through the pair's ring of kPairSlots 8 KB slots:
//   squares warp: cp.async wait for the step's copies, arrive on the pair's `full` barrier, the
//     square sums, wait on `empty` (the dots warp is done with the slot), refill it with the step
//     kPairSlots ahead;
//   dots warp: wait on `full`, the step's dots, arrive on `empty`.
// Named barriers 1 + 2q (full) and 2 + 2q (empty), 64 threads each: one arrival and one wait of
// each per step, so their phases alternate strictly. The chunk's B fragments (72 KB) stay in
// shared memory as in gemm_kernel, reloaded between two __syncthreads where the range enters the
// next chunk.
// Accumulation: gemm_kernel's (gemm_step.cuh): the canonical order of config.cuh.
// gemm_pair_kernel<false> (p.post_squares) leaves the square sums to post_kernel.
// Envelope: gemm_kernel's: n = 4, H % 512 == 0, H <= 16384, 16-byte aligned rows (any stream
// stride); 216 KB of dynamic shared memory (configure_gemm_pair_kernel).
// Status: compiles; NOT yet run on a GPU (written after session 11's last device call), so the
// rows that use it are explicit only.
#include "src/cuda/launch.cuh"
#include "src/cuda/n4/gemm_step.cuh"
#include "src/cuda/n4/kernels.hpp"

namespace mhc::cuda::n4 {

namespace {

using namespace gemm_step;

constexpr int kPairs = 6;                        // 384 threads: 168 registers a thread (7 pairs spill at 128)
constexpr int kPairThreads = 2 * kPairs * 32;    // 384
constexpr int kPairSlots = 3;                    // ring slots per pair (2 steps in flight while one is read)
constexpr int kPairSmem = kFragBytes + kPairs * kPairSlots * kSlotBytes;  // 216 KB
static_assert(kPairSmem <= 227 * 1024, "gemm_pair_kernel shared memory");
static_assert(2 * kPairs + 1 <= 16, "two named barriers a pair");

template <bool kSquares>
__global__ void __launch_bounds__(kPairThreads, 1) gemm_pair_kernel(const N4Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  pdl_launch_dependents();
  const ChunkTileItems items(p.T, p.chunks);
  if (items.count <= 0) return;  // block-uniform
  const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31;
  const bool dots = warp < kPairs;
  const int pair = dots ? warp : warp - kPairs;
  const int full = 1 + 2 * pair, empty = 2 + 2 * pair;
  const int first_chunk = items.chunk(0), last_chunk = items.chunk(items.count - 1);
  load_fragments<kPairThreads>(p, smem, first_chunk, tid);  // weights: before pdl_wait
  cp_async_commit();
  pdl_wait();
  const OwnerSteps steps(items, pair, kPairs);  // this pair's steps
  unsigned char* ring = smem + kFragBytes + pair * kPairSlots * kSlotBytes;
  if (!dots) {
#pragma unroll
    for (int s = 0; s < kPairSlots; ++s) {
      if (s < steps.count) issue_step(p, items, steps.item(s), s % kN, ring + s * kSlotBytes, lane);
      cp_async_commit();
    }
  }
  float part[kMTiles][3][4];
  float sq[kUnits];
  int s = 0;
  for (int chunk = first_chunk; chunk <= last_chunk; ++chunk) {
    if (chunk != first_chunk) {
      __syncthreads();  // every warp is done with the previous chunk's fragments
      load_fragments<kPairThreads>(p, smem, chunk, tid);
      cp_async_commit();
      cp_async_wait<0>();
    } else if (dots) {
      cp_async_wait<0>();  // the fragments: a dots warp has no other copies
    } else {
      cp_async_wait<kPairSlots>();  // the fragments (the ring's first copies may still be in flight)
    }
    __syncthreads();  // the chunk's fragments are visible to every warp
    const uint2* frag = reinterpret_cast<const uint2*>(smem);
#pragma unroll 1
    for (; s < steps.count; ++s) {
      const int local = steps.item(s);
      if (items.chunk(local) != chunk) break;
      const int j = s % kN;
      unsigned char* slot = ring + (s % kPairSlots) * kSlotBytes;
      if (dots) {
        named_sync(full, 64);  // the step's copies have landed
        stream_dots(slot, frag + j * kMmaSteps * kNTiles * 32, lane, j == 0, part);
        if (j == kN - 1) store_dots(p, chunk, items.tile(local), lane, part);
        named_arrive(empty, 64);  // done reading the slot
      } else {
        cp_async_wait<kPairSlots - 1>();  // this lane's copies of step s have landed
        __syncwarp();                     // and the other lanes'
        named_arrive(full, 64);
        if constexpr (kSquares) {
          square_sums(slot, lane, j == 0, sq);
          if (j == kN - 1) store_squares(p, chunk, items.tile(local), lane, sq);
        }
        named_sync(empty, 64);  // the dots warp is done with the slot
        const int next = s + kPairSlots;
        if (next < steps.count) issue_step(p, items, steps.item(next), next % kN, slot, lane);
        cp_async_commit();
      }
    }
  }
}

}  // namespace

bool configure_gemm_pair_kernel(int device) {
  return allow_dynamic_smem(gemm_pair_kernel<true>, device, kPairSmem) &&
         allow_dynamic_smem(gemm_pair_kernel<false>, device, kPairSmem);
}

void launch_gemm_pair_kernel(const N4Params& p, const LaunchCtx& ctx) {
  if (p.T <= 0) return;
  // At most one block per multiprocessor, each with an equal range of the (chunk, tile) items.
  const unsigned blocks = item_grid((p.T + kTile - 1) / kTile * p.chunks, ctx.num_sms, "gemm_pair_kernel");
  launch_kernel(p.post_squares ? gemm_pair_kernel<false> : gemm_pair_kernel<true>, dim3(blocks), kPairThreads, kPairSmem,
                ctx, p);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_gemm_pair_kernels(KernelList& out) {
  add_kernel(out, gemm_pair_kernel<true>, "n4::gemm_pair_kernel<true>");
  add_kernel(out, gemm_pair_kernel<false>, "n4::gemm_pair_kernel<false> (sums of squares from post_kernel)");
}

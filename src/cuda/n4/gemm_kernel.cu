// src/cuda/n4/gemm_kernel.cu - the mixes stage of the n = 4 path alone: for p.T tokens of the
// streams p.residual, the partials [chunk][token][25] (the 24 dots against fn over the chunk's
// 512 k's, then the chunk's sum of squares), the same bits as mix_kernel without a post stage.
//
// Grid mapping: at most one 256-thread block per multiprocessor, each with an equal contiguous
// range of the (chunk, 32-token tile) items in chunk-major order, as mix_kernel. The B fragments
// of the block's current chunk (72 KB, all 4 streams) stay in shared memory; where the range
// enters the next chunk, the block reloads them between two __syncthreads (where chunks <= SMs,
// every H of the envelope on an H200, a range spans 2 chunks at most: one reload).
// Warps: all 8 do the same work on their own items (block-local items w, w + 8, ..), with no
// block barrier in the steady state. An item runs as 4 steps, one per stream j in order; a step
// reads one slot of 32 tokens x 128 columns of stream j (8 KB) from the warp's private ring of
// kGemmSlots slots, which cp.async fills kGemmSlots steps ahead (the copies cross item and
// chunk boundaries, so DRAM stays busy through a reload). A step is:
//   the square sums: lane (h, cv) continues the fmaf chains of the units (token 2u + h, vector
//     cv), u = 0..15, over the stream's 8 columns (16-byte shared loads);
//   the dots: 2 m16 tiles x 9 n-tiles x 8 k16 steps = 144 mma.m16n8k16; each A fragment
//     (ldmatrix x4) serves the 9 n-tiles and each B fragment (shared memory) both m16 tiles,
//     72 fp32 accumulators; then v = hi + (mid + lo) per row, added to the item's partial in
//     registers in stream order.
// After the 4th step the square sums are reduced across the 16 vectors (shuffle butterfly) and
// the item's partials go through that step's slot to one contiguous run in global memory
// (store_item: coalesced stores). Slots are swizzled by 16-byte vector (vector ^ (row & 7)), so
// the copies, ldmatrix and the square sums' loads are free of bank conflicts.
// Per step and multiprocessor: shared memory moves 42 KB (8 KB copied in, 8 KB by ldmatrix,
// 8 KB by the square sums, 18 KB of B fragments: ~340 cycles at 128 B/cycle) and the tensor
// cores run 144 mma (~250 cycles), against ~540 cycles of DRAM time for the step's 8.8 KB
// (x and its partials) at a 1/132 share of 4.26 TB/s (H200, 1.98 GHz).
// Accumulation: the canonical order of src/cuda/n4/config.cuh, identical to mix_kernel: per
// (token, chunk, stream) one mma chain per n-tile from zero over the 8 k16 steps in order, the
// same A rows and B fragments; v = hi + (mid + lo); ((v_0 + v_1) + v_2) + v_3; the square sums
// as fmaf chains over streams then elements from 0, then the xor 8, 4, 2, 1 butterfly.
// The overlapped form (kOverlap, the cuda_n4_overlap rows: staged.cu): 4 warps, 168 KB, so that
// two of overlap_tail_kernel's blocks fit beside it on each multiprocessor and run while it
// does. Block b keeps chunk b % chunks and takes the tiles g, g + G, .. of group
// g = b / chunks (GroupTileItems): the grid walks the tiles in order. After an item's partials
// are stored, lane 0 of its warp adds 1 to the tile's counter (p.tile_arrivals, a release at GPU
// scope after __syncwarp), which overlap_tail_kernel waits on. It lets the kernel after it start
// (programmatic dependent launch) only once the kernel before it has completed (pdl_wait
// first), so that kernel may read what the one before wrote without waiting itself. Same
// per-item arithmetic, so the same bits.
// Envelope: n = 4, H % 512 == 0, H <= 16384, 16-byte aligned rows (any stream stride, 0 for a
// broadcast residual); 200 KB of dynamic shared memory (configure_gemm_kernel), 168 KB for the
// overlapped form.
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "src/cuda/launch.cuh"
#include "src/cuda/n4/gemm_step.cuh"
#include "src/cuda/n4/kernels.hpp"

namespace mhc::cuda::n4 {

namespace {

constexpr int kGemmWarps = 8;
constexpr int kGemmSlots = 2;                          // ring slots per warp (steps in flight)
using namespace gemm_step;
constexpr int gemm_smem(int warps, int slots) { return kFragBytes + warps * slots * kSlotBytes; }
constexpr int kGemmSmem = gemm_smem(kGemmWarps, kGemmSlots);  // 200 KB
static_assert(kGemmSmem <= 227 * 1024, "gemm_kernel shared memory");
constexpr int kOverlapWarps = 4;  // the overlapped form: half the warps, the others' room on the SM
constexpr int kOverlapSlots = 3;  // 96 KB of streams in flight a multiprocessor (the 8 x 2 shape's 128)
constexpr int kOverlapSmem = gemm_smem(kOverlapWarps, kOverlapSlots);  // 168 KB

// Diagnostics (a build with -DMHC_GEMM_PROBE; MHC_GEMM_PROBE="part warps slots" in the
// environment, see launch_gemm_kernel): kPart 0 is the kernel; 1 the copies alone, 2 the copies
// and the square sums, 3 the copies and the dots, 4 the dots and square sums on whatever the
// slots hold, with no copies; 5 the copies and 6 the arithmetic without copies, neither storing
// partials; 7 the kernel with the square sums on the tensor cores (stream_dots<true>: the
// diagonal of x x^T from the A fragments, in place of the fmaf chains; not the canonical order,
// to measure what such a change would buy). Only 0 gives correct partials.
template <int kWarps = kGemmWarps, int kSlots = kGemmSlots, int kPart = 0, bool kOverlap = false>
__global__ void __launch_bounds__(kWarps * 32, 1) gemm_kernel(const N4Params p) {
  static_assert(!kOverlap || kPart == 0, "the overlapped form stores its partials");
  extern __shared__ __align__(128) unsigned char smem[];
  if (!kOverlap) pdl_launch_dependents();
  using Items = std::conditional_t<kOverlap, GroupTileItems, ChunkTileItems>;
  const Items items(p.T, p.chunks);
  if (items.count <= 0) return;  // block-uniform (an exited block counts as triggered)
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  // The first chunk's fragments are weights: their copies overlap the end of the kernel before.
  load_fragments<kWarps * 32>(p, smem, items.chunk(0), static_cast<int>(threadIdx.x));
  cp_async_commit();
  pdl_wait();
  if (kOverlap) pdl_launch_dependents();  // after the kernel before has completed (see the header)
  run_owner_steps<kWarps, kSlots, kPart, kOverlap>(p, items, smem, warp, lane, static_cast<int>(threadIdx.x));
}

}  // namespace

bool configure_gemm_kernel(int device) {
  return allow_dynamic_smem(gemm_kernel<>, device, kGemmSmem) &&
         allow_dynamic_smem(gemm_kernel<kOverlapWarps, kOverlapSlots, 0, true>, device, kOverlapSmem);
}

#ifdef MHC_GEMM_PROBE
// MHC_GEMM_PROBE="part warps slots" (see gemm_kernel): one of the listed shapes, for the
// diagnostics build only.
template <int kPart, int kWarps, int kSlots>
bool launch_gemm_probe_as(const N4Params& p, const LaunchCtx& ctx, int part, int warps, int slots) {
  if (part != kPart || warps != kWarps || slots != kSlots) return false;
  constexpr int kSmem = gemm_smem(kWarps, kSlots);
  static_assert(kSmem <= 227 * 1024, "probe shape's shared memory");
  int device = 0;
  MHC_CUDA_CHECK(cudaGetDevice(&device));
  static const bool allowed = allow_dynamic_smem(gemm_kernel<kWarps, kSlots, kPart>, device, kSmem);
  MHC_CHECK(allowed, "gemm probe: shared memory");
  const unsigned blocks = item_grid((p.T + kTile - 1) / kTile * p.chunks, ctx.num_sms, "gemm_kernel");
  launch_kernel(gemm_kernel<kWarps, kSlots, kPart>, dim3(blocks), kWarps * 32, kSmem, ctx, p);
  return true;
}

template <int kPart>
bool launch_gemm_probe_part(const N4Params& p, const LaunchCtx& ctx, int part, int warps, int slots) {
  return launch_gemm_probe_as<kPart, 8, 2>(p, ctx, part, warps, slots) ||
         launch_gemm_probe_as<kPart, 6, 3>(p, ctx, part, warps, slots) ||
         launch_gemm_probe_as<kPart, 4, 4>(p, ctx, part, warps, slots) ||
         launch_gemm_probe_as<kPart, 8, 1>(p, ctx, part, warps, slots) ||
         launch_gemm_probe_as<kPart, 4, 2>(p, ctx, part, warps, slots);
}

bool launch_gemm_probe(const N4Params& p, const LaunchCtx& ctx) {
  const char* env = std::getenv("MHC_GEMM_PROBE");
  if (env == nullptr) return false;
  int part = 0, warps = 8, slots = 2;
  if (std::sscanf(env, "%d %d %d", &part, &warps, &slots) != 3) return false;
  const bool ok = launch_gemm_probe_part<0>(p, ctx, part, warps, slots) || launch_gemm_probe_part<1>(p, ctx, part, warps, slots) ||
                  launch_gemm_probe_part<2>(p, ctx, part, warps, slots) || launch_gemm_probe_part<3>(p, ctx, part, warps, slots) ||
                  launch_gemm_probe_part<4>(p, ctx, part, warps, slots) || launch_gemm_probe_as<5, 8, 2>(p, ctx, part, warps, slots) ||
                  launch_gemm_probe_as<6, 8, 2>(p, ctx, part, warps, slots) || launch_gemm_probe_as<7, 8, 2>(p, ctx, part, warps, slots);
  MHC_CHECK(ok, "MHC_GEMM_PROBE: no such shape: ", env);
  return true;
}
#endif

void launch_gemm_kernel(const N4Params& p, const LaunchCtx& ctx) {
  if (p.T <= 0) return;
  // At most one block per multiprocessor, each with an equal range of the (chunk, tile) items.
  const unsigned blocks = item_grid((p.T + kTile - 1) / kTile * p.chunks, ctx.num_sms, "gemm_kernel");
#ifdef MHC_GEMM_PROBE
  if (launch_gemm_probe(p, ctx)) return;
#endif
  launch_kernel(gemm_kernel<>, dim3(blocks), kGemmWarps * 32, kGemmSmem, ctx, p);
}

void launch_gemm_overlap_kernel(const N4Params& p, const LaunchCtx& ctx) {
  if (p.T <= 0) return;
  MHC_CHECK(p.tile_arrivals != nullptr, "gemm_kernel (overlapped): no tile counters");
  // Nothing in the kernel waits, so a grid larger than one wave is slower, not wrong.
  const int64_t groups = overlap_groups(p.T, p.chunks, ctx.num_sms);
  MHC_CHECK(groups * p.chunks < (int64_t{1} << 31), "gemm_kernel (overlapped): grid too large");
#ifdef MHC_GEMM_PROBE
  // Diagnostics: MHC_OVERLAP_GEMM_WARPS=8 runs the overlapped form in gemm_kernel's own shape (8
  // warps, 200 KB), which leaves the other kernels of the plan less room beside it.
  if (const char* env = std::getenv("MHC_OVERLAP_GEMM_WARPS"); env != nullptr && std::atoi(env) == kGemmWarps) {
    int device = 0;
    MHC_CUDA_CHECK(cudaGetDevice(&device));
    static const bool allowed = allow_dynamic_smem(gemm_kernel<kGemmWarps, kGemmSlots, 0, true>, device, kGemmSmem);
    MHC_CHECK(allowed, "gemm_kernel (overlapped, 8 warps): shared memory");
    launch_kernel(gemm_kernel<kGemmWarps, kGemmSlots, 0, true>, dim3(static_cast<unsigned>(groups * p.chunks)),
                  kGemmWarps * 32, kGemmSmem, ctx, p);
    return;
  }
#endif
  launch_kernel(gemm_kernel<kOverlapWarps, kOverlapSlots, 0, true>, dim3(static_cast<unsigned>(groups * p.chunks)),
                kOverlapWarps * 32, kOverlapSmem, ctx, p);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_gemm_kernels(KernelList& out) {
  add_kernel(out, gemm_kernel<>, "n4::gemm_kernel");
  add_kernel(out, gemm_kernel<kOverlapWarps, kOverlapSlots, 0, true>, "n4::gemm_kernel<overlap>");
}

// src/cuda/n4/gemm_kernel.cu - the mixes stage of the n = 4 path alone: for p.T tokens of the
// streams p.residual, the partials [token][chunk][25] (the 24 dots against fn over the chunk's
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
// the item's partials are stored. Slots are swizzled by 16-byte vector (vector ^ (row & 7)), so
// the copies, ldmatrix and the square sums' loads are free of bank conflicts.
// Per step and multiprocessor: shared memory moves 42 KB (8 KB copied in, 8 KB by ldmatrix,
// 8 KB by the square sums, 18 KB of B fragments: ~340 cycles at 128 B/cycle) and the tensor
// cores run 144 mma (~250 cycles), against ~540 cycles of DRAM time for the step's 8.8 KB
// (x and its partials) at a 1/132 share of 4.26 TB/s (H200, 1.98 GHz).
// Accumulation: the canonical order of src/cuda/n4/config.cuh, identical to mix_kernel: per
// (token, chunk, stream) one mma chain per n-tile from zero over the 8 k16 steps in order, the
// same A rows and B fragments; v = hi + (mid + lo); ((v_0 + v_1) + v_2) + v_3; the square sums
// as fmaf chains over streams then elements from 0, then the xor 8, 4, 2, 1 butterfly.
// gemm_kernel<false> (p.post_squares: post_pre's staged_sq row, whose post_kernel already wrote
// each chunk's sum of squares in this order) runs the dots alone and leaves partials[..][24].
// Envelope: n = 4, H % 512 == 0, H <= 16384, 16-byte aligned rows (any stream stride, 0 for a
// broadcast residual); 200 KB of dynamic shared memory (configure_gemm_kernel).
#include <cstdio>
#include <cstdlib>

#include "src/cuda/launch.cuh"
#include "src/cuda/n4/gemm_step.cuh"
#include "src/cuda/n4/kernels.hpp"
#ifdef MHC_GEMM_PROBE
#include "src/cuda/n4/wgmma.cuh"
#endif

namespace mhc::cuda::n4 {

namespace {

constexpr int kGemmWarps = 8;
constexpr int kGemmSlots = 2;                          // ring slots per warp (steps in flight)
using namespace gemm_step;
constexpr int gemm_smem(int warps, int slots) { return kFragBytes + warps * slots * kSlotBytes; }
constexpr int kGemmSmem = gemm_smem(kGemmWarps, kGemmSlots);  // 200 KB
static_assert(kGemmSmem <= 227 * 1024, "gemm_kernel shared memory");

#ifdef MHC_GEMM_PROBE
// Diagnostics only: gemm_kernel's copies by other means, nothing computed (the partials get
// zeros). kPart 5: one 256-byte bulk copy (TMA, cp.async.bulk) per row and lane into rows
// padded to 272 bytes, kSlots slots a warp completing on an mbarrier each; kPart 6: 16-byte
// ld.global.cg into registers, then st.shared (one step in flight a warp). gemm_kernel runs it
// for those parts.
constexpr int kCopyProbeRow = 272;  // a padded slot row: 256 bytes of data + 16
// The ring (rows of kCopyProbeRow bytes) and one mbarrier per slot.
constexpr int copy_probe_smem(int warps, int slots) { return warps * slots * (kTile * kCopyProbeRow + 8); }

__device__ __forceinline__ void bulk_row(uint32_t dst, const void* src, uint32_t bar) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 256, [%2];\n" ::"r"(dst),
               "l"(src), "r"(bar)
               : "memory");
#endif
}

template <int kWarps, int kSlots, int kPart>
__device__ __forceinline__ void gemm_copy_probe(const N4Params& p) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kRow = kCopyProbeRow, kSlot = kTile * kRow;
  pdl_launch_dependents();
  const ChunkTileItems items(p.T, p.chunks);
  if (items.count <= 0) return;
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  unsigned char* ring = smem + warp * kSlots * kSlot;
  const uint32_t bars = shared_addr(smem + kWarps * kSlots * kSlot) + warp * kSlots * 8;
  pdl_wait();
  const OwnerSteps steps(items, warp, kWarps);
  float part[kMTiles][3][4];
  for (auto& m : part) for (auto& b : m) for (float& c : b) c = 0.0f;
  auto row_src = [&](int s, int r, bool& valid) {
    const int local = steps.item(s);
    const int64_t t = items.tile(local) * kTile + r;
    valid = t < p.T;
    return p.residual + (valid ? t : 0) * p.residual_stride + (s % kN) * p.res_stream_stride +
           static_cast<int64_t>(items.chunk(local)) * kChunkCols;
  };
  if constexpr (kPart == 5) {
    if (lane < kSlots) mbar_init(bars + lane * 8, 1);
    __syncwarp();
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    auto issue = [&](int s) {
      const uint32_t bar = bars + (s % kSlots) * 8;
      bool valid;
      const bf16_t* src = row_src(s, lane, valid);
      const unsigned ballot = __ballot_sync(0xffffffffu, valid);
      if (lane == 0) mbar_expect_tx(bar, __popc(ballot) * 256);
      __syncwarp();
      if (valid) bulk_row(shared_addr(ring + (s % kSlots) * kSlot + lane * kRow), src, bar);
    };
    for (int s = 0; s < kSlots && s < steps.count; ++s) issue(s);
    for (int s = 0; s < steps.count; ++s) {
      mbar_wait(bars + (s % kSlots) * 8, (s / kSlots) & 1);
      if (s % kN == kN - 1) {
        const int local = steps.item(s);
        store_dots(p, items.chunk(local), items.tile(local), lane, part);
      }
      __syncwarp();
      if (s + kSlots < steps.count) issue(s + kSlots);
    }
  } else {
    const int h = lane >> 4, vec = lane & 15;
    for (int s = 0; s < steps.count; ++s) {
      uint4 v[kTile / 2];
#pragma unroll
      for (int rr = 0; rr < kTile / 2; ++rr) {
        bool valid;
        const bf16_t* src = row_src(s, 2 * rr + h, valid) + vec * 8;
        asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v[rr].x), "=r"(v[rr].y), "=r"(v[rr].z), "=r"(v[rr].w) : "l"(src));
      }
      unsigned char* slot = ring + (s % kSlots) * kSlot;
#pragma unroll
      for (int rr = 0; rr < kTile / 2; ++rr) *reinterpret_cast<uint4*>(slot + (2 * rr + h) * kRow + vec * 16) = v[rr];
      if (s % kN == kN - 1) {
        const int local = steps.item(s);
        store_dots(p, items.chunk(local), items.tile(local), lane, part);
      }
    }
  }
}
#endif

// Diagnostics (a build with -DMHC_GEMM_PROBE; MHC_GEMM_PROBE="part warps slots" in the
// environment, see launch_gemm_kernel): kPart 0 is the kernel; 1 the copies alone, 2 the copies
// and the square sums, 3 the copies and the dots, 4 the dots and square sums on whatever the
// slots hold, with no copies; 5 and 6 the copies by other means (gemm_copy_probe); 7 the copies
// and 8 the arithmetic without copies, neither storing partials; 9 the kernel storing its
// partials chunk-major ([chunk][t][25], 3200 contiguous bytes an item, where the real layout
// scatters an item's tokens 100 bytes apart at a token stride). Only 0 gives correct partials.
template <bool kSquares, int kWarps = kGemmWarps, int kSlots = kGemmSlots, int kPart = 0>
__global__ void __launch_bounds__(kWarps * 32, 1) gemm_kernel(const N4Params p) {
  constexpr int kGemmThreads = kWarps * 32;
  constexpr bool kCopies = kPart != 4 && kPart != 8, kDoSquares = kSquares && kPart != 1 && kPart != 3 && kPart != 7,
                 kDots = kPart != 1 && kPart != 2 && kPart != 7, kStores = kPart != 7 && kPart != 8,
                 kChunkMajor = kPart == 9;
#ifdef MHC_GEMM_PROBE
  if constexpr (kPart == 5 || kPart == 6) {
    gemm_copy_probe<kWarps, kSlots, kPart>(p);
    return;
  }
#endif
  extern __shared__ __align__(128) unsigned char smem[];
  pdl_launch_dependents();
  const ChunkTileItems items(p.T, p.chunks);
  if (items.count <= 0) return;  // block-uniform
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int first_chunk = items.chunk(0), last_chunk = items.chunk(items.count - 1);
  // The first chunk's fragments are weights: their copies overlap the end of the kernel before.
  load_fragments<kGemmThreads>(p, smem, first_chunk, static_cast<int>(threadIdx.x));
  cp_async_commit();
  pdl_wait();
  const OwnerSteps steps(items, warp, kWarps);  // this warp's steps
  unsigned char* ring = smem + kFragBytes + warp * kSlots * kSlotBytes;
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    if (kCopies && s < steps.count) issue_step(p, items, steps.item(s), s % kN, ring + s * kSlotBytes, lane);
    cp_async_commit();
  }
  float part[kMTiles][3][4];
  float sq[kUnits];
  int s = 0;
  for (int chunk = first_chunk; chunk <= last_chunk; ++chunk) {
    if (chunk != first_chunk) {
      __syncthreads();  // every warp is done with the previous chunk's fragments
      load_fragments<kGemmThreads>(p, smem, chunk, static_cast<int>(threadIdx.x));
      cp_async_commit();
      cp_async_wait<0>();
    } else {
      cp_async_wait<kSlots>();  // the fragments (the ring's first copies may still be in flight)
    }
    __syncthreads();  // the chunk's fragments are visible to every warp
    const uint2* frag = reinterpret_cast<const uint2*>(smem);
#pragma unroll 1
    for (; s < steps.count; ++s) {
      const int local = steps.item(s);
      if (items.chunk(local) != chunk) break;
      const int j = s % kN;
      unsigned char* slot = ring + (s % kSlots) * kSlotBytes;
      cp_async_wait<kSlots - 1>();  // this lane's copies of step s have landed
      __syncwarp();                     // and the other lanes'
      if constexpr (kDoSquares) square_sums(slot, lane, j == 0, sq);
      if constexpr (kDots) {
        stream_dots(slot, frag + j * kMmaSteps * kNTiles * 32, lane, j == 0, part);
      } else if (j == 0) {
        for (auto& m : part) for (auto& b : m) for (float& c : b) c = 0.0f;
      }
      if (j == kN - 1 && (kStores || p.T < 0)) {  // p.T < 0 never: parts 7, 8 keep their arithmetic
        store_dots<kChunkMajor>(p, chunk, items.tile(local), lane, part);
        if constexpr (kDoSquares) store_squares<kChunkMajor>(p, chunk, items.tile(local), lane, sq);
      }
      __syncwarp();  // every lane is done reading the slot
      const int next = s + kSlots;
      if (kCopies && next < steps.count) issue_step(p, items, steps.item(next), next % kN, slot, lane);
      cp_async_commit();
    }
  }
}

}  // namespace

bool configure_gemm_kernel(int device) {
  return allow_dynamic_smem(gemm_kernel<true>, device, kGemmSmem) && allow_dynamic_smem(gemm_kernel<false>, device, kGemmSmem);
}

#ifdef MHC_GEMM_PROBE
// MHC_GEMM_PROBE="part warps slots" (see gemm_kernel): one of the listed shapes, for the
// diagnostics build only.
template <int kPart, int kWarps, int kSlots>
bool launch_gemm_probe_as(const N4Params& p, const LaunchCtx& ctx, int part, int warps, int slots) {
  if (part != kPart || warps != kWarps || slots != kSlots) return false;
  constexpr int kSmem = kPart == 5 || kPart == 6 ? copy_probe_smem(kWarps, kSlots) : gemm_smem(kWarps, kSlots);
  static_assert(kSmem <= 227 * 1024, "probe shape's shared memory");
  int device = 0;
  MHC_CUDA_CHECK(cudaGetDevice(&device));
  static const bool allowed = allow_dynamic_smem(gemm_kernel<true, kWarps, kSlots, kPart>, device, kSmem);
  MHC_CHECK(allowed, "gemm probe: shared memory");
  const unsigned blocks = item_grid((p.T + kTile - 1) / kTile * p.chunks, ctx.num_sms, "gemm_kernel");
  launch_kernel(gemm_kernel<true, kWarps, kSlots, kPart>, dim3(blocks), kWarps * 32, kSmem, ctx, p);
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
  if (env == nullptr || p.post_squares) return false;
  int part = 0, warps = 8, slots = 2;
  if (std::sscanf(env, "%d %d %d", &part, &warps, &slots) != 3) return false;
  const bool ok = launch_gemm_probe_part<0>(p, ctx, part, warps, slots) || launch_gemm_probe_part<1>(p, ctx, part, warps, slots) ||
                  launch_gemm_probe_part<2>(p, ctx, part, warps, slots) || launch_gemm_probe_part<3>(p, ctx, part, warps, slots) ||
                  launch_gemm_probe_part<4>(p, ctx, part, warps, slots) || launch_gemm_probe_as<7, 8, 2>(p, ctx, part, warps, slots) ||
                  launch_gemm_probe_as<8, 8, 2>(p, ctx, part, warps, slots) || launch_gemm_probe_as<9, 8, 2>(p, ctx, part, warps, slots) ||
                  launch_gemm_probe_as<5, 8, 2>(p, ctx, part, warps, slots) || launch_gemm_probe_as<5, 8, 3>(p, ctx, part, warps, slots) ||
                  launch_gemm_probe_as<5, 4, 4>(p, ctx, part, warps, slots) || launch_gemm_probe_as<5, 4, 6>(p, ctx, part, warps, slots) ||
                  launch_gemm_probe_as<5, 6, 4>(p, ctx, part, warps, slots) ||
                  launch_gemm_probe_as<6, 8, 1>(p, ctx, part, warps, slots) || launch_gemm_probe_as<6, 16, 1>(p, ctx, part, warps, slots);
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
  launch_kernel(p.post_squares ? gemm_kernel<false> : gemm_kernel<true>, dim3(blocks), kGemmWarps * 32, kGemmSmem, ctx, p);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_gemm_kernels(KernelList& out) {
  add_kernel(out, gemm_kernel<true>, "n4::gemm_kernel<true>");
  add_kernel(out, gemm_kernel<false>, "n4::gemm_kernel<false> (sums of squares from post_kernel)");
}

// src/cuda/n4/gemm_group_kernel.cu - the mixes stage of the n = 4 path, its partials summed by
// chunk group on the way out: for p.T tokens of the streams p.residual, the group partials
// [group][tiles x 32][25] (group_run): group g's sum of its chunks' partials (chunks g, g + 8,
// .. in order, the canonical group sum of config.cuh without its zero terms), so that the
// partial runs written to DRAM and read back by finalize_kernel are min(chunks, 8) a token
// instead of `chunks` (32 at H = 4096, 56 at H = 7168).
//
// Grid mapping: min(chunks, 8) groups x per_group 256-thread blocks, per_group = the
// multiprocessors / groups (16 on an H200: 128 blocks, one a multiprocessor), at most the tiles;
// block i of group g takes the group's i-th share of the 32-token tiles (GroupRange). It makes
// one pass per chunk of the group in chunk order, warp w running the items (chunk, tile) for its
// tiles w, w + 8, .. of the share exactly as gemm_kernel runs an item (gemm_step.cuh: 4 steps,
// one per stream, from a private ring of cp.async slots that crosses item and pass boundaries).
// The chunk's B fragments (72 KB) lie in shared memory as 4 stream quarters of 18 KB, each with
// an mbarrier: the last warp to be done with a quarter in a pass (a shared counter) reloads it
// for the next pass by one bulk copy, so no block barrier stops the warps between passes and a
// pass's first steps overlap the last steps of the pass before. Every lane of a done warp also
// arrives on the quarter's `empty` mbarrier, and the reloading lane waits for that phase (already
// complete: each warp arrives before it counts) before its proxy fence: the same order as the
// counter's acquire-release, in the form compute-sanitizer's racecheck follows (it does not follow
// the counter, nor a __syncwarp before one lane's arrival: both report the reload against the
// other warps' reads of the pass before; docs/performance.md). The same
// warp owns a tile in every pass, so the running group sum of a tile is its own: the first pass
// stores the chunk's partials, a later pass copies the run the same warp wrote in the pass
// before (cp.async into the warp's 3200-byte run buffer, issued after that store and a
// __syncwarp) and stores run + partial. A block spans one group only: a share across two groups would leave half the warps
// idle in each pass where the shares are short. Where chunks % 8 != 0 the groups have unequal
// chunk counts and the blocks of the shorter groups finish early.
// Accumulation: every chunk partial is gemm_kernel's (the same steps and stage_item), and a
// group's run is ((c_g + c_{g+8}) + c_{g+16}) + .. in chunk order: the terms of
// chunk_group_sum before its zero terms, which finalize_kernel adds (finish_group). The bits
// of finalize_kernel's sums are therefore the same from either GEMM kernel.
// Envelope: gemm_kernel's (n = 4, H % 512 == 0, H <= 16384, 16-byte aligned rows); the group
// runs need min(chunks, 8) x tiles x 32 x 25 floats of p.partials, 16-byte aligned; sm_90+ (bulk
// copies, mbarriers) with 225 KB of dynamic shared memory (configure_gemm_group_kernel).
// Speed on the H200: docs/performance.md (the mixes stage row; the staged plan takes this kernel
// from kGroupedTokens a slice, staged.cu).
#include "src/cuda/launch.cuh"
#include "src/cuda/n4/canonical.cuh"
#include "src/cuda/n4/gemm_step.cuh"
#include "src/cuda/n4/kernels.hpp"

namespace mhc::cuda::n4 {

namespace {

using namespace gemm_step;
constexpr int kGroupWarps = 8;
constexpr int kGroupSlots = 2;                              // ring slots per warp (steps in flight)
constexpr int kRunBytes = kRunFloats * 4;                   // 3200
constexpr int kRunVecs = kRunBytes / 16;                    // 200
// The step of an item that carries the copy of the run its store adds to: issued during the
// item's first step, so after this warp stored that run in the pass before and after the item
// before it has read the run buffer.
constexpr int kRunCopyStep = kGroupSlots;
constexpr int kStreamFragBytes = kFragBytes / kN;          // one stream's B fragments: 18 KB
constexpr int kWarpBytes = kGroupSlots * kSlotBytes + kRunBytes;
// After the fragments and the warps' rings: full[4] and empty[4] mbarriers, then done[4] counters.
constexpr int kBarOffset = kFragBytes + kGroupWarps * kWarpBytes;
constexpr int kGroupSmem = kBarOffset + 2 * kN * 8 + kN * 4;  // 225 KB + 80 bytes
static_assert(kGroupSmem <= 227 * 1024, "gemm_group_kernel shared memory");
static_assert(kStreamFragBytes % 16 == 0 && kBarOffset % 8 == 0, "bulk copies and mbarriers");
static_assert(kRunCopyStep < kN && kRunBytes % 16 == 0, "the run copy rides on a later step of the item");

/// A warp's walk over its steps in the order the block runs them: the group's passes (chunks)
/// in order, the warp's tiles, the 4 streams.
struct StepCursor {
  const GroupRange& r;
  int warp, items, passes;
  int pass = 0, k = 0, j = 0;  // current step: pass (chunk g + 8 pass), the warp's k-th tile, stream
  bool valid;
  __device__ StepCursor(const GroupRange& range, int w)
      : r(range), warp(w), items(range.items(w, kGroupWarps)), passes(group_chunks(range.g, range.chunks)), valid(items > 0) {}
  __device__ void advance() {
    if (++j < kN) return;
    j = 0;
    if (++k < items) return;
    k = 0;
    valid = ++pass < passes;
  }
  __device__ int chunk() const { return r.g + kPartialSplit * pass; }
  __device__ int64_t tile() const { return r.t0 + warp + static_cast<int64_t>(kGroupWarps) * k; }
};

// The copies of the step at the cursor into `slot` (issue_rows) and, on the item's
// kRunCopyStep-th step in a pass after the first, the copy of the item's run into the warp's run
// buffer.
__device__ __forceinline__ void issue_cursor(const N4Params& p, const StepCursor& c, unsigned char* slot,
                                             unsigned char* run_buf, int lane) {
  const int64_t tile = c.tile();
  issue_rows(p, c.chunk(), tile, c.j, slot, lane);
  if (c.j == kRunCopyStep && c.pass > 0) {
    const float* run = group_run(p, c.r.g, tile, c.r.tiles);
    const int vecs = (tile_tokens(p, tile) * kPartial + 3) / 4;
    const uint32_t rdst = shared_addr(run_buf);
    // Only the run's vectors: a zero-filling copy past them would still write its 16 bytes.
#pragma unroll
    for (int v = lane; v < (kRunVecs + 31) / 32 * 32; v += 32) {
      if (v < vecs) copy16_or_zero(rdst + v * 16, run + 4 * v, true);
    }
  }
}

// Stream j's B fragments of chunk `chunk` into their quarter of the fragment buffer by one bulk
// copy, completing full[j].
__device__ __forceinline__ void load_stream_fragments(const N4Params& p, uint32_t frag, uint32_t full, int chunk, int j) {
  mbar_expect_tx(full + 8 * j, kStreamFragBytes);
  bulk_load(frag + j * kStreamFragBytes,
            p.fn_frag + static_cast<int64_t>(chunk) * kFragWords + j * (kFragWords / kN), kStreamFragBytes,
            full + 8 * j);
}

__global__ void __launch_bounds__(kGroupWarps * 32, 1) gemm_group_kernel(const N4Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  pdl_launch_dependents();
  const GroupRange range(p);
  if (range.count <= 0) return;  // block-uniform
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const uint32_t frag_addr = shared_addr(smem), full = frag_addr + kBarOffset, empty = full + kN * 8,
                 done = empty + kN * 8;
  const int passes = group_chunks(range.g, range.chunks);
  // The warps with tiles, each of which reports once a pass that it is done with a stream's
  // fragments; the last of them to report reloads that stream's quarter for the next pass.
  const uint32_t active = static_cast<uint32_t>(range.count < kGroupWarps ? range.count : kGroupWarps);
  if (threadIdx.x == 0) {
    for (int j = 0; j < kN; ++j) {
      mbar_init(full + 8 * j, 1);
      mbar_init(empty + 8 * j, active * 32);
      reinterpret_cast<uint32_t*>(smem + kBarOffset + 2 * kN * 8)[j] = 0;
    }
    mbar_init_fence();
  }
  __syncthreads();
  // The first chunk's fragments are weights: their copies overlap the end of the kernel before.
  if (threadIdx.x == 0) {
    fence_proxy_async_shared();
    for (int j = 0; j < kN; ++j) load_stream_fragments(p, frag_addr, full, range.g, j);
  }
  pdl_wait();
  unsigned char* ring = smem + kFragBytes + warp * kWarpBytes;
  unsigned char* run_buf = ring + kGroupSlots * kSlotBytes;
  StepCursor issue(range, warp);
#pragma unroll
  for (int s = 0; s < kGroupSlots; ++s) {
    if (issue.valid) {
      issue_cursor(p, issue, ring + s * kSlotBytes, run_buf, lane);
      issue.advance();
    }
    cp_async_commit();
  }
  float part[kMTiles][3][4];
  float sq[kUnits];
  float unused[kMTiles][2][4];
  const int items = range.items(warp, kGroupWarps);
  const uint2* frag = reinterpret_cast<const uint2*>(smem);
  int s = 0;
#pragma unroll 1
  for (int pass = 0; pass < passes; ++pass) {
#pragma unroll 1
    for (int k = 0; k < items; ++k) {
      const int64_t tile = range.t0 + warp + static_cast<int64_t>(kGroupWarps) * k;
#pragma unroll 1
      for (int j = 0; j < kN; ++j, ++s) {
        unsigned char* slot = ring + (s % kGroupSlots) * kSlotBytes;
        cp_async_wait<kGroupSlots - 1>();  // this lane's copies of step s have landed
        __syncwarp();                      // and the other lanes'
        if (k == 0) mbar_wait(full + 8 * j, static_cast<uint32_t>(pass) & 1u);  // this pass's stream-j fragments
        square_sums(slot, lane, j == 0, sq);
        stream_dots(slot, frag + j * kMmaSteps * kNTiles * 32, lane, j == 0, part, unused);
        if (j == kN - 1) {
          stage_item<true>(lane, slot, part, sq, unused);
          const float* staged = reinterpret_cast<const float*>(slot);
          const float* prev = reinterpret_cast<const float*>(run_buf);
          float* dst = group_run(p, range.g, tile, range.tiles);
          const int n = tile_tokens(p, tile) * kPartial;
          if (pass == 0) {
#pragma unroll 5
            for (int i = lane; i < n; i += 32) dst[i] = staged[i];
          } else {
#pragma unroll 5
            for (int i = lane; i < n; i += 32) dst[i] = prev[i] + staged[i];
          }
        }
        __syncwarp();  // every lane is done reading the slot, the run buffer and stream j's fragments
        if (k == items - 1 && pass + 1 < passes) {
          // This warp's last use of stream j's fragments in this pass: every lane arrives on
          // empty[j], then the last warp to count itself (release / acquire through the counter)
          // waits for the phase and hands the quarter to the bulk-copy engine.
          mbar_arrive(empty + 8 * j);
          if (lane == 0) {
            const uint32_t old = atom_add_acq_rel_cta_shared(done + 4 * j, 1);
            if (old % active == active - 1) {
              mbar_wait(empty + 8 * j, static_cast<uint32_t>(pass) & 1u);
              fence_proxy_async_shared();
              load_stream_fragments(p, frag_addr, full, range.g + kPartialSplit * (pass + 1), j);
            }
          }
        }
        if (issue.valid) {
          issue_cursor(p, issue, slot, run_buf, lane);
          issue.advance();
        }
        cp_async_commit();
      }
    }
  }
}

}  // namespace

bool configure_gemm_group_kernel(int device) {
  int major = 0;
  MHC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 9 && allow_dynamic_smem(gemm_group_kernel, device, kGroupSmem);  // bulk copies: sm_90+
}

bool gemm_group_fits(int64_t T, int chunks, size_t partial_floats) {
  const int64_t tiles = (T + kTile - 1) / kTile;
  const int64_t groups = chunks < kPartialSplit ? chunks : kPartialSplit;
  return static_cast<size_t>(groups * tiles * kRunFloats) <= partial_floats;
}

unsigned group_blocks(const N4Params& p, int num_sms) {
  // The same number of blocks for every group: as many as the multiprocessors allow (16 of 132
  // on an H200: 128 blocks), at most one a tile.
  const int64_t groups = p.chunks < kPartialSplit ? p.chunks : kPartialSplit;
  const int64_t tiles = (p.T + kTile - 1) / kTile;
  int64_t per_group = num_sms / groups;
  per_group = per_group < 1 ? 1 : per_group > tiles ? tiles : per_group;
  return static_cast<unsigned>(groups * per_group);  // <= max(num_sms, 8)
}

void launch_gemm_group_kernel(const N4Params& p, const LaunchCtx& ctx) {
  if (p.T <= 0) return;
  MHC_CHECK((reinterpret_cast<uintptr_t>(p.partials) & 15u) == 0, "gemm_group_kernel: partials alignment");
  launch_kernel(gemm_group_kernel, dim3(group_blocks(p, ctx.num_sms)), kGroupWarps * 32, kGroupSmem, ctx, p);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_gemm_group_kernels(KernelList& out) {
  add_kernel(out, gemm_group_kernel, "n4::gemm_group_kernel");
}

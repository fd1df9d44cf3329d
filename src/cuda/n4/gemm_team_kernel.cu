// src/cuda/n4/gemm_team_kernel.cu - the overlap rows' GEMM stage in its team form (the
// cuda_n4_overlap_team rows, staged.cu): gemm_kernel's partials, bit for bit, with the 4 warps of
// a block on one (chunk, tile) item together, one stream each.
//
// Why: in gemm_kernel's overlapped form each warp takes its own item, so the grid has 4 tiles in
// flight per group (16 at H = 4096), and the collapse that re-reads a token's streams from L2
// comes that much later. Here a group has one tile in flight, so the tile front and with it the
// distance between the GEMM's read of a line and the collapse's re-read shrink about 4x.
// Grid mapping: as the overlapped form (GroupTileItems, overlap_groups): G = SMs / chunks groups of
// `chunks` 128-thread blocks; block b keeps chunk b % chunks (its B fragments in shared memory)
// and takes the tiles g, g + G, .. of group g = b / chunks in order. Warp j owns stream j: a ring
// of kTeamSlots slots (8 KB, gemm_step's swizzled layout) that cp.async fills kTeamSlots items
// ahead. An item:
//   block barrier (every warp's slot landed; the previous item's stores done, so thread 0
//     releases that tile's counter now);
//   the square sums: warp w continues the chains of tokens 8 w .. 8 w + 7 (units 4 w .. 4 w + 3)
//     over the 4 streams' slots in order, then the butterfly; the dots: warp j's mma chains over
//     its slot (stream_dots), v_j into shared memory;
//   block barrier; each warp refills its slot with the item kTeamSlots on; the block sums
//     ((v_0 + v_1) + v_2) + v_3 for each (token, row) beside the sums of squares;
//   block barrier; the item's valid tokens x 25 floats stored as one run (partial_at).
// Accumulation: the canonical order of config.cuh, as gemm_kernel: the same mma chains (from
// zero over the 8 k16 steps, v = hi + (mid + lo)), the streams' v summed in stream order, the
// square sums as fmaf chains over streams then elements from 0, then the xor 8, 4, 2, 1
// butterfly.
// Envelope: gemm_kernel's; 183 KB of dynamic shared memory (configure_gemm_kernel).
#include <cstdlib>

#include "src/cuda/launch.cuh"
#include "src/cuda/n4/gemm_step.cuh"
#include "src/cuda/n4/kernels.hpp"

namespace mhc::cuda::n4 {

namespace {

using namespace gemm_step;
constexpr int kTeamWarps = kN;   // warp j: stream j
constexpr int kTeamThreads = kTeamWarps * 32;
constexpr int kTeamSlots = 3;    // items in flight per warp's ring
constexpr int kTeamUnits = kUnits / kTeamWarps;  // square-sum units of a lane and item: 4
constexpr int kVFloats = kN * kTile * kRows;     // v_j of an item: [stream][token][row]
constexpr int kOutFloats = kTile * kPartial;     // the item's partials: [token][25]
constexpr int kTeamSmem = kFragBytes + kTeamWarps * kTeamSlots * kSlotBytes + (kVFloats + kOutFloats) * 4;
static_assert(kTeamSmem <= 227 * 1024, "gemm_team_kernel shared memory");
static_assert(kTeamUnits * kTeamWarps == kUnits, "the warps share the item's square-sum units");

__global__ void __launch_bounds__(kTeamThreads, 1) gemm_team_kernel(const N4Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const GroupTileItems items(p.T, p.chunks);
  if (items.count <= 0) return;  // block-uniform (an exited block counts as triggered)
  const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31;
  const int chunk = items.chunk(0);
  load_fragments<kTeamThreads>(p, smem, chunk, tid);
  cp_async_commit();
  pdl_wait();
  pdl_launch_dependents();  // after the kernel before has completed (gemm_kernel.cu's overlapped form)
  unsigned char* rings = smem + kFragBytes;  // [warp][slot]
  float* s_v = reinterpret_cast<float*>(rings + kTeamWarps * kTeamSlots * kSlotBytes);
  float* s_out = s_v + kVFloats;
  auto slot_of = [&](int w, int i) { return rings + (w * kTeamSlots + i % kTeamSlots) * kSlotBytes; };
#pragma unroll
  for (int s = 0; s < kTeamSlots; ++s) {
    if (s < items.count) issue_rows(p, chunk, items.tile(s), warp, slot_of(warp, s), lane);
    cp_async_commit();
  }
  const uint2* frag = reinterpret_cast<const uint2*>(smem) + warp * kMmaSteps * kNTiles * 32;
  const int g = lane >> 2, q = lane & 3, h = lane >> 4, cv = lane & 15;
  int64_t pending = -1;  // the tile whose stores the next barrier completes
#pragma unroll 1
  for (int i = 0; i < items.count; ++i) {
    const int64_t tile = items.tile(i);
    cp_async_wait<kTeamSlots - 1>();  // this thread's copies of item i (and the fragments) landed
    __syncthreads();                  // every warp's: item i's 4 slots and the fragments visible
    if (pending >= 0 && tid == 0) red_add_release_gpu(p.tile_arrivals + pending, 1u);
    // The square sums of tokens 8 warp .. 8 warp + 7 over the streams in order, then the butterfly.
    float sq[kTeamUnits];
#pragma unroll
    for (int s = 0; s < kN; ++s) square_units<kTeamUnits>(slot_of(s, i), lane, s == 0, warp * kTeamUnits, sq);
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) {
#pragma unroll
      for (int u = 0; u < kTeamUnits; ++u) sq[u] += __shfl_xor_sync(0xffffffffu, sq[u], off);
    }
    if (cv < kTeamUnits) {
      float mine = sq[0];
#pragma unroll
      for (int u = 1; u < kTeamUnits; ++u) mine = cv == u ? sq[u] : mine;
      s_out[(2 * (warp * kTeamUnits + cv) + h) * kPartial + kRows] = mine;  // token 2 u + h, u = 4 warp + cv
    }
    // The dots of stream `warp`: v = hi + (mid + lo) per (token, row), into s_v[warp].
    float part[kMTiles][3][4];
    float unused[kMTiles][2][4];
    stream_dots(slot_of(warp, i), frag, lane, true, part, unused);
    float* v = s_v + warp * kTile * kRows;
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
      for (int blk = 0; blk < 3; ++blk) {
#pragma unroll
        for (int c = 0; c < 4; ++c) v[(m * 16 + g + 8 * (c >> 1)) * kRows + blk * 8 + 2 * q + (c & 1)] = part[m][blk][c];
      }
    }
    __syncthreads();  // every read of item i's slots done; s_v and the sums of squares written
    if (i + kTeamSlots < items.count) issue_rows(p, chunk, items.tile(i + kTeamSlots), warp, slot_of(warp, i), lane);
    cp_async_commit();
    for (int e = tid; e < kTile * kRows; e += kTeamThreads) {
      const int t = e / kRows, r = e % kRows;
      s_out[t * kPartial + r] = ((s_v[e] + s_v[kTile * kRows + e]) + s_v[2 * kTile * kRows + e]) + s_v[3 * kTile * kRows + e];
    }
    __syncthreads();  // the item's 32 x 25 floats staged
    const int valid = tile_tokens(p, tile);
    float* dst = partial_at(p, tile * kTile, chunk);
    for (int e = tid; e < valid * kPartial; e += kTeamThreads) dst[e] = s_out[e];
    pending = tile;
  }
  __syncthreads();  // the last item's stores before thread 0's release
  if (tid == 0) red_add_release_gpu(p.tile_arrivals + pending, 1u);
}

}  // namespace

bool configure_gemm_team_kernel(int device) { return allow_dynamic_smem(gemm_team_kernel, device, kTeamSmem); }

void launch_gemm_team_kernel(const N4Params& p, const LaunchCtx& ctx) {
  if (p.T <= 0) return;
  MHC_CHECK(p.tile_arrivals != nullptr, "gemm_team_kernel: no tile counters");
  const int64_t groups = overlap_groups(p.T, p.chunks, ctx.num_sms);
  MHC_CHECK(groups * p.chunks < (int64_t{1} << 31), "gemm_team_kernel: grid too large");
  launch_kernel(gemm_team_kernel, dim3(static_cast<unsigned>(groups * p.chunks)), kTeamThreads, kTeamSmem, ctx, p);
}

}  // namespace mhc::cuda::n4

#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_gemm_team_kernels(KernelList& out) {
  add_kernel(out, gemm_team_kernel, "n4::gemm_team_kernel");
}

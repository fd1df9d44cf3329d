// src/cuda/n4/gemm_rb_kernel.cu - the mixes stage of the n = 4 path with its B fragments in
// registers: gemm_group_kernel's output (the group runs [group][tiles x 32][25], group_run) and
// bits, with the 72 KB of fragments that kernel keeps in shared memory moved into the registers of
// 12 warps, so that the shared memory holds a ring of 6 tiles (192 KB, 5 tiles in flight while
// one is computed) where gemm_group_kernel keeps 8 warps x 2 slots of 8 KB (one slot a warp in
// flight while the other is computed), and no B fragment loads from shared memory. gemm_group_kernel
// runs at ~79% of copy under Nsight Compute (session 28); session 12's copies alone reached full
// bandwidth only with ~128 KB in flight a multiprocessor, while session 23 found that neither half
// steps nor more warps made gemm_kernel faster: whether bytes in flight are its limit is what this
// kernel tests (docs/performance-history.md, session 30).
//
// Grid mapping: gemm_group_kernel's (group_blocks, GroupRange): min(chunks, 8) groups x per-group
// blocks, block i of group g taking the group's i-th share of the 32-token tiles, one pass per
// chunk of the group (chunks g, g + 8, ..), the same tiles in every pass. A block is 13 warps:
//   - warp 12, the producer, copies each tile of the walk (pass-major, tiles in order) into the
//     next ring entry: the tile's 4 stream slots of 8 KB (issue_rows: the swizzled slot layout of
//     gemm_step.cuh, rows past p.T zero-filled), completing the entry's `full` mbarrier
//     (cp.async.mbarrier.arrive.noinc), after the entry's `empty` mbarrier says the compute
//     warps are done with the tile it held before;
//   - warp w < 12, a compute warp, is (stream j = w / 3, row block blk = w % 3) and holds, for
//     the pass's chunk, stream j's B fragments of the three n-tiles of row block blk (hi: blk,
//     mid: 3 + blk, lo: 6 + blk) for the 8 k16 steps: 24 uint2 = 48 registers (128 a thread: 4
//     of the 13 warps share a scheduler), loaded once a pass: the next pass's during a pass's
//     last tile, each step's right after that step's mma, so no pass waits for them.
// Per tile, all 12 compute warps: the dots of their (stream, row block) (mma chains over the 8
// k16 steps from 0, v = hi + (mid + lo)) into shared memory, and the square sums of 1 or 2
// (token pair, vector) units each (units w and w + 12 of 16); `empty` arrival; a named barrier;
// warps 0-2 sum the 4 streams' v of their row block, ((v_0 + v_1) + v_2) + v_3, into the tile's
// staged partials [32][25] (stage_item's layout); a named barrier; the 384 threads store the
// run (pass 0: the partials; later passes: the run this thread stored in the pass before, loaded
// at the tile's start, + the partials).
// Accumulation: gemm_kernel's item arithmetic split across warps without changing a value: each
// of a token's 24 dots is the same mma chain over the same k16 steps (an accumulator's chain is
// independent of the others in stream_dots), the stream sum is stream_dots' part + v in stream
// order, the square sums are vector_squares and chunk_squares_butterfly (the chain over streams
// then elements, the xor 8, 4, 2, 1 butterfly), and the runs are gemm_group_kernel's prev + part.
// So the runs, and finalize_kernel's sums of them, have gemm_group_kernel's bits
// (Modes/GpuFamily compares the staged_rb rows with the others).
// Envelope: gemm_group_kernel's (n = 4, H % 512 == 0, H <= 16384, 16-byte aligned rows, the group
// runs' floats in p.partials: gemm_group_fits); sm_90+ (mbarriers) with kRbSmem of dynamic shared
// memory (configure_gemm_rb_kernel). An explicit variant until the H200 says where it is faster.
#include <cstdlib>

#include "src/cuda/launch.cuh"
#include "src/cuda/n4/canonical.cuh"
#include "src/cuda/n4/gemm_step.cuh"
#include "src/cuda/n4/kernels.hpp"

namespace mhc::cuda::n4 {

namespace {

using namespace gemm_step;
constexpr int kRowBlocks = 3;                          // row blocks of 8 mixes: the warps of a stream
constexpr int kRbWarps = kN * kRowBlocks;              // 12 compute warps
constexpr int kRbCompute = kRbWarps * 32;              // 384 threads
constexpr int kRbThreads = kRbCompute + 32;            // and the producer warp
constexpr int kRbStages = 6;                           // ring entries, one tile each (kStages)
constexpr int kEntryBytes = kN * kSlotBytes;           // a tile's 4 stream slots: 32 KB
constexpr int kVFloats = kMTiles * 4;                  // a lane's v of its row block
constexpr int kVBytes = kRbWarps * kVFloats * 32 * 4;  // 12 KB
constexpr int kStagedBytes = kRunFloats * 4;           // a tile's partials: 3200
constexpr int kUnitsPerTile = kTile / 2;               // square-sum units (token pairs) of a tile: 16
constexpr int kStoreRounds = (kRunFloats + kRbCompute - 1) / kRbCompute;  // run floats a thread: 3
// Shared memory of a ring of kStages entries: the ring, the v exchange, the staged partials by tile
// parity, then full[kStages] and empty[kStages] mbarriers.
__host__ __device__ constexpr int v_offset(int stages) { return stages * kEntryBytes; }
__host__ __device__ constexpr int staged_offset(int stages) { return v_offset(stages) + kVBytes; }
__host__ __device__ constexpr int bar_offset(int stages) { return staged_offset(stages) + 2 * kStagedBytes; }
__host__ __device__ constexpr int rb_smem(int stages) { return bar_offset(stages) + 2 * stages * 8; }  // 210.3 KB at 6
constexpr int kCombineBar = 1, kStoreBar = 2;          // named barriers of the 384 compute threads
static_assert(rb_smem(kRbStages) <= 227 * 1024, "gemm_rb_kernel shared memory");
static_assert(kNTiles == kRowBlocks * 3 && kUnitsPerTile == kUnits, "row blocks of 3 parts; 16 units a tile");
static_assert(kRbWarps < kUnitsPerTile && 2 * kRbWarps >= kUnitsPerTile, "one or two square-sum units a warp");
static_assert(staged_offset(1) % 16 == 0 && bar_offset(1) % 8 == 0 && kEntryBytes % 16 == 0, "layout");

/// Stream j's B fragments of `chunk` (stream_dots' bj).
__device__ __forceinline__ const uint2* stream_b(const N4Params& p, int chunk, int j) {
  return p.fn_frag + static_cast<int64_t>(chunk) * kFragWords + j * kMmaSteps * kNTiles * 32;
}

/// This lane's fragment of k16 step ks and part `part` of row block blk: n-tile part * 3 + blk
/// (stream_dots' bj[(ks * kNTiles + nt) * 32 + lane]).
__device__ __forceinline__ uint2 b_at(const uint2* bj, int ks, int part, int blk, int lane) {
  return __ldg(bj + (ks * kNTiles + part * kRowBlocks + blk) * 32 + lane);
}

/// The dots of one (stream slot, row block): stream_dots' chains of n-tiles blk, 3 + blk, 6 + blk
/// (slot_chains), then v = hi + (mid + lo) (v[m][c]: C-fragment element c of m16 tile m). Where
/// `next` is not null (a pass's last tile), step ks's fragments are reloaded from it right after
/// the step's mma: the next pass's fragments arrive while the rest of the tile runs, in the same
/// registers.
__device__ __forceinline__ void row_block_dots(const unsigned char* slot, uint2 (&b)[kMmaSteps][3], int lane,
                                               int blk, const uint2* next, float (&v)[kMTiles][4]) {
  float acc[kMTiles][3][4];
  slot_chains<3>(
      slot, lane, [&](int ks, int part) { return b[ks][part]; },
      [&](int ks, const uint32_t(&)[kMTiles][4]) {
        if (next != nullptr) {
#pragma unroll
          for (int part = 0; part < 3; ++part) b[ks][part] = b_at(next, ks, part, blk, lane);
        }
      },
      acc);
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
    for (int c = 0; c < 4; ++c) v[m][c] = acc[m][0][c] + (acc[m][1][c] + acc[m][2][c]);
  }
}

/// The square sum of unit u of the tile in `entry` (tokens 2 u and 2 u + 1, lane (h, cv): token
/// 2 u + h, vector cv of the chunk's 16): vector_squares over the 4 stream slots, then the
/// butterfly; lanes 0 and 16 store their token's sum as row 24 of the staged partials.
__device__ __forceinline__ void unit_squares(const unsigned char* entry, int u, int lane, float* staged) {
  const int h = lane >> 4, cv = lane & 15, row = 2 * u + h;
  uint4 x[kN];
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    x[j] = *reinterpret_cast<const uint4*>(entry + j * kSlotBytes + row * kSlotRowBytes + ((cv ^ (row & 7)) << 4));
  }
  const float sq = chunk_squares_butterfly(vector_squares(x));
  if (cv == 0) staged[row * kPartial + kRows] = sq;
}

template <int kStages>
__global__ void __launch_bounds__(kRbThreads, 1) gemm_rb_kernel(const N4Params p) {
  constexpr int kVOffset = v_offset(kStages), kStagedOffset = staged_offset(kStages);
  extern __shared__ __align__(128) unsigned char smem[];
  pdl_launch_dependents();
  const GroupRange range(p);
  if (range.count <= 0) return;  // block-uniform
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const uint32_t full = shared_addr(smem) + bar_offset(kStages), empty = full + kStages * 8;
  if (threadIdx.x == 0) {
    for (int e = 0; e < kStages; ++e) {
      mbar_init(full + 8 * e, 32);           // the producer's lanes, once their copies landed
      mbar_init(empty + 8 * e, kRbCompute);  // every compute thread, done reading the entry
    }
    mbar_init_fence();
  }
  __syncthreads();
  const int passes = group_chunks(range.g, range.chunks);
  const int64_t steps = static_cast<int64_t>(passes) * range.count;  // the walk: (pass, tile)
  if (warp == kRbWarps) {
    // The producer: the streams are the kernel before's output.
    pdl_wait();
    for (int64_t q = 0; q < steps; ++q) {
      const int e = static_cast<int>(q % kStages);
      if (q >= kStages) mbar_wait(empty + 8 * e, static_cast<uint32_t>(q / kStages - 1) & 1u);
      const int chunk = range.g + kPartialSplit * static_cast<int>(q / range.count);
      const int64_t tile = range.t0 + q % range.count;
      unsigned char* entry = smem + e * kEntryBytes;
#pragma unroll 1
      for (int j = 0; j < kN; ++j) issue_rows(p, chunk, tile, j, entry + j * kSlotBytes, lane);
      cp_async_mbar_arrive_noinc(full + 8 * e);
    }
    cp_async_wait<0>();
    return;
  }
  const int j = warp / kRowBlocks, blk = warp % kRowBlocks, tid = static_cast<int>(threadIdx.x);
  float* v_all = reinterpret_cast<float*>(smem + kVOffset);
  // The pass's B fragments: the first pass's loaded here (weights: before the wait for the kernel
  // before), each later pass's during the last tile of the pass before (row_block_dots).
  uint2 b[kMmaSteps][3];
  {
    const uint2* bj = stream_b(p, range.g, j);
#pragma unroll
    for (int ks = 0; ks < kMmaSteps; ++ks) {
#pragma unroll
      for (int part = 0; part < 3; ++part) b[ks][part] = b_at(bj, ks, part, blk, lane);
    }
  }
  pdl_wait();  // the runs: the kernel before may still read p.partials
  int64_t q = 0;
#pragma unroll 1
  for (int pass = 0; pass < passes; ++pass) {
#pragma unroll 1
    for (int64_t k = 0; k < range.count; ++k, ++q) {
      const uint2* next =
          k == range.count - 1 && pass + 1 < passes ? stream_b(p, range.g + kPartialSplit * (pass + 1), j) : nullptr;
      const int64_t tile = range.t0 + k;
      float* dst = group_run(p, range.g, tile, range.tiles);
      const int n = tile_tokens(p, tile) * kPartial;
      // The run this thread stored in the pass before (the same thread stores the same floats of
      // a tile in every pass), loaded now so that its latency hides behind the tile's dots.
      float prev[kStoreRounds];
#pragma unroll
      for (int r = 0; r < kStoreRounds; ++r) {
        const int i = tid + r * kRbCompute;
        prev[r] = pass > 0 && i < n ? __ldcg(dst + i) : 0.0f;
      }
      const int e = static_cast<int>(q % kStages);
      const unsigned char* entry = smem + e * kEntryBytes;
      float* staged = reinterpret_cast<float*>(smem + kStagedOffset + (q & 1) * kStagedBytes);
      mbar_wait(full + 8 * e, static_cast<uint32_t>(q / kStages) & 1u);
      float v[kMTiles][4];
      row_block_dots(entry + j * kSlotBytes, b, lane, blk, next, v);
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
        for (int c = 0; c < 4; ++c) v_all[((warp * kMTiles + m) * 4 + c) * 32 + lane] = v[m][c];
      }
      unit_squares(entry, warp, lane, staged);
      if (warp + kRbWarps < kUnitsPerTile) unit_squares(entry, warp + kRbWarps, lane, staged);
      mbar_arrive(empty + 8 * e);  // this thread is done with the entry
      named_sync(kCombineBar, kRbCompute);
      if (warp < kRowBlocks) {
        // Row block `warp`: part = ((v_0 + v_1) + v_2) + v_3 over the streams, staged as
        // stage_item stages part[m][blk][c].
        const int g = lane >> 2, qd = lane & 3;
#pragma unroll
        for (int m = 0; m < kMTiles; ++m) {
          float part[4];
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            part[c] = v_all[((warp * kMTiles + m) * 4 + c) * 32 + lane];
#pragma unroll
            for (int s = 1; s < kN; ++s) part[c] = part[c] + v_all[(((s * kRowBlocks + warp) * kMTiles + m) * 4 + c) * 32 + lane];
          }
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            float* row = staged + (m * 16 + g + 8 * hh) * kPartial + 2 * qd + warp * 8;
            row[0] = part[2 * hh];
            row[1] = part[2 * hh + 1];
          }
        }
      }
      named_sync(kStoreBar, kRbCompute);
#pragma unroll
      for (int r = 0; r < kStoreRounds; ++r) {
        const int i = tid + r * kRbCompute;
        if (i < n) dst[i] = pass == 0 ? staged[i] : prev[r] + staged[i];
      }
    }
  }
}

}  // namespace

// The diagnostics build (-DMHC_GEMM_PROBE) also has a 3-entry ring, which MHC_RB_STAGES=3 picks:
// the same kernel with 2 tiles in flight instead of 5, to tell whether bytes in flight set its
// speed. Elsewhere the 6-entry ring alone.
#ifdef MHC_GEMM_PROBE
namespace {
constexpr int kProbeStages = 3;
bool probe_ring() {
  const char* v = std::getenv("MHC_RB_STAGES");
  return v != nullptr && std::atoi(v) == kProbeStages;
}
}  // namespace
#endif

bool configure_gemm_rb_kernel(int device) {
  int major = 0;
  MHC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  bool ok = major >= 9 && allow_dynamic_smem(gemm_rb_kernel<kRbStages>, device, rb_smem(kRbStages));  // sm_90+
#ifdef MHC_GEMM_PROBE
  ok = ok && allow_dynamic_smem(gemm_rb_kernel<kProbeStages>, device, rb_smem(kProbeStages));
#endif
  return ok;
}

void launch_gemm_rb_kernel(const N4Params& p, const LaunchCtx& ctx) {
  if (p.T <= 0) return;
  MHC_CHECK((reinterpret_cast<uintptr_t>(p.partials) & 15u) == 0, "gemm_rb_kernel: partials alignment");
  const dim3 grid(group_blocks(p, ctx.num_sms));
#ifdef MHC_GEMM_PROBE
  if (probe_ring()) {
    launch_kernel(gemm_rb_kernel<kProbeStages>, grid, kRbThreads, rb_smem(kProbeStages), ctx, p);
    return;
  }
#endif
  launch_kernel(gemm_rb_kernel<kRbStages>, grid, kRbThreads, rb_smem(kRbStages), ctx, p);
}

}  // namespace mhc::cuda::n4

// The kernels this file launches, for warmup (src/cuda/kernel_list.cuh; tests/test_engine.cpp checks
// that every launched kernel is listed).
#include "src/cuda/kernel_list.cuh"
void mhc::cuda::n4::list_gemm_rb_kernels(KernelList& out) {
  add_kernel(out, gemm_rb_kernel<kRbStages>, "n4::gemm_rb_kernel");
#ifdef MHC_GEMM_PROBE
  add_kernel(out, gemm_rb_kernel<kProbeStages>, "n4::gemm_rb_kernel<3 stages>");
#endif
}

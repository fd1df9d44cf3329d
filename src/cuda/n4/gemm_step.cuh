// src/cuda/n4/gemm_step.cuh - the pieces of one step of gemm_kernel's mma.sync GEMM stage: a
// step is stream j of an item's 32 tokens x the chunk's 128 columns (8 KB of bf16 in a swizzled
// shared-memory slot), copied by cp.async, then its square sums (fmaf chains) and its 24 dots
// (mma.m16n8k16 chains against the chunk's B fragments); an item's partials (partial_at) are
// stored after its 4th step (store_item). Every value is computed in the canonical order of
// config.cuh. Also the group runs' layout and a block's share of them (group_run, GroupRange),
// which gemm_group_kernel and gemm_rb_kernel share, the slot's mma chains (slot_chains),
// which stream_dots and gemm_rb_kernel's row blocks share, and a warp's loop over its steps
// (run_owner_steps), gemm_kernel's.
#pragma once

#include "src/cuda/exact_sum.cuh"
#include "src/cuda/n4/config.cuh"
#include "src/cuda/ptx.cuh"

namespace mhc::cuda::n4::gemm_step {

constexpr int kSlotRowBytes = kChunkCols * 2;          // one token's 128 columns of a stream
constexpr int kSlotVecs = kSlotRowBytes / 16;          // 16-byte vectors per slot row
constexpr int kSlotBytes = kTile * kSlotRowBytes;      // 8 KB
constexpr int kUnits = kTile * kSlotVecs / 32;         // square-sum units per lane and item
static_assert(kSlotVecs == 16 && kUnits == 16, "a warp copy covers two slot rows; a lane's vector is lane % 16");
static_assert(kMmaSteps * 16 == kChunkCols && kNTiles == 9, "the step's mma shape");

/// The steps of one owner of a ring (a warp of gemm_kernel): its
/// block-local items are owner + owners * k, and step s is stream s % 4 of item s / 4. Items:
/// ChunkTileItems or any type with its count, chunk(i) and tile(i).
struct OwnerSteps {
  int owner, owners, count;  // count: the owner's steps
  template <typename Items>
  __device__ OwnerSteps(const Items& items, int owner_, int owners_) : owner(owner_), owners(owners_) {
    const int mine = items.count > owner ? (items.count - owner + owners - 1) / owners : 0;
    count = mine * kN;
  }
  __device__ int item(int s) const { return owner + owners * (s / kN); }
};

__device__ __forceinline__ uint32_t shared_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared (L2 only, default eviction: in a composition the collapse re-reads
// these streams); valid = false writes zeros and reads nothing.
__device__ __forceinline__ void copy16_or_zero(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}

// The chunk's B fragments ([stream][ks][nt][lane] uint2, 72 KB) into shared memory, by the
// block's kThreads threads (thread `tid`).
template <int kThreads>
__device__ __forceinline__ void load_fragments(const N4Params& p, unsigned char* smem, int chunk, int tid) {
  const uint4* src = reinterpret_cast<const uint4*>(p.fn_frag + static_cast<int64_t>(chunk) * kFragWords);
  uint4* dst = reinterpret_cast<uint4*>(smem);
  if constexpr (kFragBytes % (16 * kThreads) == 0) {
#pragma unroll
    for (int v = 0; v < kFragBytes / 16 / kThreads; ++v) {
      const int i = v * kThreads + tid;
      cp_async16_keep(dst + i, src + i);
    }
  } else {
    for (int i = tid; i < kFragBytes / 16; i += kThreads) cp_async16_keep(dst + i, src + i);
  }
}

// The copies of one step into `slot`: stream j of tile `tile`'s 32 tokens, chunk `chunk`'s 128
// columns. Lane (h, vec) copies vector vec of rows 2 rr + h; a row past p.T is zero-filled.
__device__ __forceinline__ void issue_rows(const N4Params& p, int chunk, int64_t tile, int j, unsigned char* slot,
                                          int lane) {
  const int h = lane >> 4, vec = lane & 15;
  const int64_t t0 = tile * kTile + h;
  const int64_t left = p.T - t0;  // rows 2 rr + h < p.T: 2 rr < left
  const int rows = static_cast<int>(left < kTile ? left : kTile);
  const bf16_t* src = p.residual + t0 * p.residual_stride + j * p.res_stream_stride +
                      static_cast<int64_t>(chunk) * kChunkCols + vec * 8;
  const int64_t step = 2 * p.residual_stride;
  const uint32_t dst = shared_addr(slot) + h * kSlotRowBytes;
  if (p.T - tile * kTile >= kTile) {
    // A full tile (every tile but a batch's last): no row test, no source select.
#pragma unroll
    for (int rr = 0; rr < kTile / 2; ++rr) {
      copy16_or_zero(dst + rr * 2 * kSlotRowBytes + (((vec ^ h) ^ (2 * rr & 6)) << 4), src + rr * step, true);
    }
    return;
  }
#pragma unroll
  for (int rr = 0; rr < kTile / 2; ++rr) {
    // row 2 rr + h: its swizzled vector is vec ^ (row & 7) = (vec ^ h) ^ (2 rr & 6)
    const bool valid = 2 * rr < rows;
    copy16_or_zero(dst + rr * 2 * kSlotRowBytes + (((vec ^ h) ^ (2 * rr & 6)) << 4), valid ? src : p.residual, valid);
    src += step;
  }
}

/// The overlap rows' items (gemm_kernel's overlapped form): block b keeps chunk
/// b % chunks and takes the tiles group, group + groups, .. (group = b / chunks, groups =
/// gridDim.x / chunks: the launchers' grids are a whole number of groups). The interface of
/// ChunkTileItems.
struct GroupTileItems {
  int count, chunk_, group, groups;
  __device__ GroupTileItems(int64_t T, int chunks) {
    const int64_t tiles = (T + kTile - 1) / kTile;
    groups = static_cast<int>(gridDim.x) / chunks;
    chunk_ = static_cast<int>(blockIdx.x) % chunks;
    group = static_cast<int>(blockIdx.x) / chunks;
    count = group < tiles ? static_cast<int>((tiles - group + groups - 1) / groups) : 0;
  }
  __device__ int chunk(int) const { return chunk_; }
  __device__ int64_t tile(int i) const { return group + static_cast<int64_t>(i) * groups; }
};

/// The overlap rows' grid: groups of `chunks` blocks, as many as fit the multiprocessors (at least
/// one; no more than the tiles).
inline int64_t overlap_groups(int64_t T, int chunks, int32_t num_sms) {
  const int64_t tiles = (T + kTile - 1) / kTile;
  const int64_t groups = (num_sms > 0 ? num_sms : 1) / chunks;
  return groups < 1 ? 1 : groups > tiles ? tiles : groups;
}

// issue_rows for block-local item `local` of `items`.
template <typename Items>
__device__ __forceinline__ void issue_step(const N4Params& p, const Items& items, int local, int j,
                                           unsigned char* slot, int lane) {
  issue_rows(p, items.chunk(local), items.tile(local), j, slot, lane);
}

// The square sums of kNU units u0 .. u0 + kNU - 1 (sq[i]: unit u0 + i), as square_sums below.
template <int kNU>
__device__ __forceinline__ void square_units(const unsigned char* slot, int lane, bool first, int u0,
                                             float (&sq)[kNU]) {
  const int h = lane >> 4, cv = lane & 15;
  const unsigned char* base = slot + h * kSlotRowBytes;
#pragma unroll
  for (int i = 0; i < kNU; ++i) {
    const int u = u0 + i;
    const uint4 v =
        *reinterpret_cast<const uint4*>(base + u * 2 * kSlotRowBytes + (((cv ^ h) ^ (2 * u & 6)) << 4));
    float f[8];
    unpack8(v, f);
    float s = first ? 0.0f : sq[i];
#pragma unroll
    for (int e = 0; e < 8; ++e) s = fmaf(f[e], f[e], s);
    sq[i] = s;
  }
}

// A step's square sums: lane (h, cv) continues sq[u], the fmaf chain of (token 2u + h, vector cv)
// over streams then elements (first: the chain starts at 0).
__device__ __forceinline__ void square_sums(const unsigned char* slot, int lane, bool first, float (&sq)[kUnits]) {
  square_units<kUnits>(slot, lane, first, 0, sq);
}

// The mma chains of one slot (stream j of 32 tokens x 128 columns): acc[m][i] for m16 tile m and
// n-tile i of kNT is the chain over the kMmaSteps k16 steps in order, from 0, of A (the slot's
// rows by ldmatrix) x b_at(ks, i) (this lane's uint2 B fragment of n-tile i at step ks), the
// n-tiles' mma in i order after each step's A loads; after_step(ks, a) then sees the step's A
// fragments. Every chain is independent of the others, so a kernel that splits a slot's n-tiles
// between warps (gemm_rb_kernel) computes each accumulator as stream_dots does.
template <int kNT, typename BAt, typename AfterStep>
__device__ __forceinline__ void slot_chains(const unsigned char* slot, int lane, BAt b_at, AfterStep after_step,
                                            float (&acc)[kMTiles][kNT][4]) {
  // A: lane's row m * 16 + lane % 16 and vector 2 ks + lane / 16, swizzled: (2 ks) ^ lv.
  const int lv = (lane >> 4) ^ (lane & 7);
  const uint32_t a_row = shared_addr(slot) + (lane & 15) * kSlotRowBytes;
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
    for (int i = 0; i < kNT; ++i) acc[m][i][0] = acc[m][i][1] = acc[m][i][2] = acc[m][i][3] = 0.0f;
  }
#pragma unroll
  for (int ks = 0; ks < kMmaSteps; ++ks) {
    uint32_t a[kMTiles][4];
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) {
      ldmatrix_x4(a_row + m * 16 * kSlotRowBytes + (((2 * ks) ^ lv) << 4), a[m][0], a[m][1], a[m][2], a[m][3]);
    }
#pragma unroll
    for (int i = 0; i < kNT; ++i) {
      const uint2 b = b_at(ks, i);
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) mma_bf16(acc[m][i], a[m][0], a[m][1], a[m][2], a[m][3], b.x, b.y);
    }
    after_step(ks, a);
  }
}

// A step's dots: the 24 dots of the 32 tokens over the chunk's 128 columns of stream j (B: that
// stream's fragments bj), then part = v (first) or part + v, v = hi + (mid + lo).
// part[m][blk][c]: m16 tile m, rows blk * 8 + 2q (+1), C-fragment element c (tokens g, g + 8).
// kMmaSquares (diagnostics part 7 of gemm_kernel only: not the canonical order): also the
// square sums on the tensor cores, sqmma[m][h] += X X^T over the step's k16 blocks, X the m16
// tile's rows and X^T's columns its tokens 8 h .. 8 h + 7, whose B fragments are the A
// fragment's registers (a0, a2) and (a1, a3); a token's sum is that product's diagonal.
template <bool kMmaSquares = false>
__device__ __forceinline__ void stream_dots(const unsigned char* slot, const uint2* bj, int lane, bool first,
                                            float (&part)[kMTiles][3][4], float (&sqmma)[kMTiles][2][4]) {
  float acc[kMTiles][kNTiles][4];
  slot_chains<kNTiles>(
      slot, lane, [&](int ks, int nt) { return bj[(ks * kNTiles + nt) * 32 + lane]; },
      [&](int ks, const uint32_t(&a)[kMTiles][4]) {
        if constexpr (kMmaSquares) {
#pragma unroll
          for (int m = 0; m < kMTiles; ++m) {
            if (first && ks == 0) {
#pragma unroll
              for (int h = 0; h < 2; ++h) sqmma[m][h][0] = sqmma[m][h][1] = sqmma[m][h][2] = sqmma[m][h][3] = 0.0f;
            }
            mma_bf16(sqmma[m][0], a[m][0], a[m][1], a[m][2], a[m][3], a[m][0], a[m][2]);
            mma_bf16(sqmma[m][1], a[m][0], a[m][1], a[m][2], a[m][3], a[m][1], a[m][3]);
          }
        } else {
          (void)ks, (void)a, (void)sqmma;
        }
      },
      acc);
  // n-tile nt is part nt / 3 of rows (nt % 3) * 8 ..: hi = blk, mid = 3 + blk, lo = 6 + blk.
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
    for (int blk = 0; blk < 3; ++blk) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float v = acc[m][blk][c] + (acc[m][3 + blk][c] + acc[m][6 + blk][c]);
        part[m][blk][c] = first ? v : part[m][blk][c] + v;
      }
    }
  }
}

// The item's partials, staged in the slot of its last step: after the square sums' butterfly
// (xor 8, 4, 2, 1 within the 16 lanes of a half-warp, as mix_kernel) and once every lane is done
// reading the slot, each lane writes its dots and square sum at [token][25] floats there
// (stage_item); then the warp copies the valid tokens' 25 floats each to one run of consecutive
// floats, 32 of them per store instruction (stored in place from the C fragments, a store
// instruction would touch 8 tokens' rows 100 bytes apart): store_item to partial_at(first
// token, chunk), gemm_group_kernel to its group run. The caller's __syncwarp before the slot's
// next copies orders them after these reads. kSquares false (diagnostics parts without the
// square sums) leaves row 24 unwritten.
template <bool kSquares, bool kMmaSquares = false>
__device__ __forceinline__ void stage_item(int lane, unsigned char* slot, const float (&part)[kMTiles][3][4],
                                           float (&sq)[kUnits], const float (&sqmma)[kMTiles][2][4]) {
  if constexpr (kSquares) {
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) {
#pragma unroll
      for (int u = 0; u < kUnits; ++u) sq[u] += __shfl_xor_sync(0xffffffffu, sq[u], off);
    }
  }
  __syncwarp();  // every lane is done reading the slot
  float* staged = reinterpret_cast<float*>(slot);
  const int g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float* row = staged + (m * 16 + g + 8 * hh) * kPartial + 2 * q;
#pragma unroll
      for (int blk = 0; blk < 3; ++blk) {
        row[blk * 8] = part[m][blk][2 * hh];
        row[blk * 8 + 1] = part[m][blk][2 * hh + 1];
      }
    }
  }
  if constexpr (kSquares) {
    // Every lane of a half-warp holds the same sums; lane cv stages unit u = cv (token 2 cv + h).
    const int h = lane >> 4, cv = lane & 15;
    float mine = sq[0];
#pragma unroll
    for (int u = 1; u < kUnits; ++u) mine = cv == u ? sq[u] : mine;
    staged[(2 * cv + h) * kPartial + kRows] = mine;
  }
  if constexpr (kMmaSquares) {
    // The diagonals: token m16 + g at (row g, column g) of sqmma[m][0], token m16 + 8 + g at
    // (row g + 8, column g) of sqmma[m][1]; lane (g, q = g / 2) holds both.
    if (q == (g >> 1)) {
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) {
        staged[(m * 16 + g) * kPartial + kRows] = (g & 1) ? sqmma[m][0][1] : sqmma[m][0][0];
        staged[(m * 16 + 8 + g) * kPartial + kRows] = (g & 1) ? sqmma[m][1][3] : sqmma[m][1][2];
      }
    }
  }
  __syncwarp();
}

/// The group runs (gemm_group_kernel, gemm_rb_kernel): the run of (group g, tile) is the running
/// sum of the group's chunk partials of the tile's 32 tokens x 25 floats, 3200-byte aligned.
constexpr int kRunFloats = kTile * kPartial;  // 800
__device__ __forceinline__ float* group_run(const N4Params& p, int g, int64_t tile, int64_t tiles) {
  return p.partials + (static_cast<int64_t>(g) * tiles + tile) * kRunFloats;
}

/// A block's share of the group runs: tiles [t0, t0 + count) of group g. Each group has
/// gridDim.x / groups blocks (group_blocks makes that a whole number), splitting the group's
/// tiles evenly; the block makes one pass a chunk of the group (group_chunks), the same tiles
/// in every pass.
struct GroupRange {
  int chunks, groups, g;
  int64_t tiles, t0, count;
  __device__ explicit GroupRange(const N4Params& p)
      : chunks(p.chunks), groups(p.chunks < kPartialSplit ? p.chunks : kPartialSplit) {
    tiles = (p.T + kTile - 1) / kTile;
    const int per_group = static_cast<int>(gridDim.x) / groups;
    g = static_cast<int>(blockIdx.x) / per_group;
    const int i = static_cast<int>(blockIdx.x) - g * per_group;
    t0 = tiles * i / per_group;
    count = tiles * (i + 1) / per_group - t0;
  }
  // The tiles of owner w of `owners` that deal the range round robin: t0 + w, t0 + w + owners, ..
  __device__ int items(int w, int owners) const {
    return count > w ? static_cast<int>((count - w + owners - 1) / owners) : 0;
  }
};

/// Tokens of tile `tile` below p.T (1 .. kTile).
__device__ __forceinline__ int tile_tokens(const N4Params& p, int64_t tile) {
  const int64_t left = p.T - tile * kTile;
  return static_cast<int>(left < kTile ? left : kTile);
}

template <bool kSquares, bool kMmaSquares = false>
__device__ __forceinline__ void store_item(const N4Params& p, int chunk, int64_t tile, int lane, unsigned char* slot,
                                           const float (&part)[kMTiles][3][4], float (&sq)[kUnits],
                                           const float (&sqmma)[kMTiles][2][4]) {
  stage_item<kSquares, kMmaSquares>(lane, slot, part, sq, sqmma);
  const float* staged = reinterpret_cast<const float*>(slot);
  const int valid = tile_tokens(p, tile);
  float* dst = partial_at(p, tile * kTile, chunk);
#pragma unroll 5
  for (int i = lane; i < valid * kPartial; i += 32) dst[i] = staged[i];
}

/// The steps of warp `warp` of a GEMM block of kWarps warps (gemm_kernel) over the block's items,
/// each warp with its ring of kSlots slots after the chunk's B fragments in `smem`: the caller has
/// issued and committed the copies of the first chunk's fragments (one cp.async group) and waited
/// for the kernel before; block barriers around the fragments' reload between chunks. kPart: gemm_kernel's
/// diagnostics part (0: the kernel). kCount: after an item's partials are stored, lane 0 adds 1 to
/// its tile's counter (p.tile_arrivals, a release at GPU scope after __syncwarp).
template <int kWarps, int kSlots, int kPart, bool kCount, typename Items>
__device__ __forceinline__ void run_owner_steps(const N4Params& p, const Items& items, unsigned char* smem, int warp,
                                                int lane, int tid) {
  constexpr bool kCopies = kPart != 4 && kPart != 6, kDoSquares = kPart != 1 && kPart != 3 && kPart != 5 && kPart != 7,
                 kDots = kPart != 1 && kPart != 2 && kPart != 5, kStores = kPart != 5 && kPart != 6,
                 kMmaSquares = kPart == 7;
  static_assert(!kCount || kPart == 0, "a counted item stores its partials");
  const int first_chunk = items.chunk(0), last_chunk = items.chunk(items.count - 1);
  const OwnerSteps steps(items, warp, kWarps);  // this warp's steps
  unsigned char* ring = smem + kFragBytes + warp * kSlots * kSlotBytes;
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    if (kCopies && s < steps.count) issue_step(p, items, steps.item(s), s % kN, ring + s * kSlotBytes, lane);
    cp_async_commit();
  }
  float part[kMTiles][3][4];
  float sq[kUnits];
  float sqmma[kMTiles][2][4];  // part 7 only
  int s = 0;
  for (int chunk = first_chunk; chunk <= last_chunk; ++chunk) {
    if (chunk != first_chunk) {
      __syncthreads();  // every warp is done with the previous chunk's fragments
      load_fragments<kWarps * 32>(p, smem, chunk, tid);
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
        stream_dots<kMmaSquares>(slot, frag + j * kMmaSteps * kNTiles * 32, lane, j == 0, part, sqmma);
      } else if (j == 0) {
        for (auto& m : part) for (auto& b : m) for (float& c : b) c = 0.0f;
      }
      if (j == kN - 1 && (kStores || p.T < 0)) {  // p.T < 0 never: parts 5, 6 keep their arithmetic
        store_item<kDoSquares, kMmaSquares>(p, chunk, items.tile(local), lane, slot, part, sq, sqmma);
        if constexpr (kCount) {
          __syncwarp();  // every lane's stores of the item come before lane 0's release
          if (lane == 0) red_add_release_gpu(p.tile_arrivals + items.tile(local), 1u);
        }
      }
      __syncwarp();  // every lane is done reading the slot
      const int next = s + kSlots;
      if (kCopies && next < steps.count) issue_step(p, items, steps.item(next), next % kN, slot, lane);
      cp_async_commit();
    }
  }
}

}  // namespace mhc::cuda::n4::gemm_step

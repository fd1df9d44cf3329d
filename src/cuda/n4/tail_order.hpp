// src/cuda/n4/tail_order.hpp - the order in which persistent_kernel's tail warps take their
// items (device code), in a form the CPU tests can run too (tests/test_schedule.cpp simulates
// every block of a launch with it and checks that every item runs once and nothing waits in a
// cycle).
//
// Block b of G finalizes the 32-token tiles b, b + G, .. and collapses the tokens b, b + G, .. two
// at a time (the pair t, t + G; the last may be one token), or one at a time. A finalize needs only the GEMM warps'
// items of its tile; a pair needs the finalize of both its tokens' tiles (their pre). The block
// takes them in the order of the tile each waits for last, a finalize before a pair that waits
// for the same tile. So the item that waits for the lowest tile of all not yet run always can:
// a finalize waits only for the GEMM, and a pair's finalizes come before it in every block's
// order.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MHC_TAIL_FN __host__ __device__ __forceinline__
#else
#define MHC_TAIL_FN inline
#endif

namespace mhc::cuda::n4 {

struct TailItem {
  enum Kind { kDone, kFinalize, kCollapse };
  Kind kind;
  int64_t tile;    // kFinalize: the tile
  int64_t t0, t1;  // kCollapse: the pair (t1 < 0: t0 alone)
};

/// Block `block`'s items among `blocks` for T tokens in tiles of `tile_tokens`, one at a time;
/// per_item 2 (pairs) or 1 (a token an item: t1 always < 0).
struct TailOrder {
  int64_t T, tiles, G, tile_tokens, per_item;
  int64_t tile, t0;  // the next tile to finalize; the next pair's first token
  MHC_TAIL_FN TailOrder(int64_t T_, int64_t blocks, int64_t block, int64_t tile_tokens_, int64_t per_item_)
      : T(T_), tiles((T_ + tile_tokens_ - 1) / tile_tokens_), G(blocks), tile_tokens(tile_tokens_), per_item(per_item_),
        tile(block), t0(block) {}
  MHC_TAIL_FN TailItem next() {
    const bool pair = t0 < T;
    const int64_t t1 = per_item == 2 && t0 + G < T ? t0 + G : -1;
    const int64_t waits = (t1 >= 0 ? t1 : t0) / tile_tokens;  // the tile whose pre the pair waits for last
    if (tile < tiles && (!pair || tile <= waits)) {
      const TailItem item{TailItem::kFinalize, tile, -1, -1};
      tile += G;
      return item;
    }
    if (pair) {
      const TailItem item{TailItem::kCollapse, -1, t0, t1};
      t0 += per_item * G;
      return item;
    }
    return TailItem{TailItem::kDone, -1, -1, -1};
  }
};

}  // namespace mhc::cuda::n4

// tests/test_schedule.cpp - the cross-block schedules of the device kernels, run on the CPU with
// the code the kernels run:
//
//   TailOrder.*   persistent_kernel's tail warps (src/cuda/n4/tail_order.hpp): over many launch
//                 shapes (pairs and single tokens), every tile is finalized once and every token collapsed once, by the
//                 block the kernel's mapping names, and a simulation of all blocks at once, each
//                 running its items in order and waiting where the kernel waits (a finalize for
//                 its tile's GEMM items, a pair for both its tiles' finalizes), never stops short:
//                 nothing waits in a cycle, whatever order the GEMM completes its tiles in.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "src/cuda/n4/tail_order.hpp"

namespace {

using mhc::cuda::n4::TailItem;
using mhc::cuda::n4::TailOrder;

constexpr int64_t kTileTokens = 32;

struct Shape {
  int64_t T, G, per_item;
};

std::vector<Shape> shapes() {
  std::vector<Shape> out;
  for (int64_t T : {1, 2, 31, 32, 33, 63, 64, 65, 100, 264, 265, 1000, 1024, 4097, 16384}) {
    for (int64_t G : {1, 2, 3, 7, 32, 33, 64, 112, 128, 132}) {
      out.push_back({T, G, 2});
      out.push_back({T, G, 1});
    }
  }
  return out;
}

std::string label(const Shape& s) {
  return "T " + std::to_string(s.T) + ", G " + std::to_string(s.G) + ", " + std::to_string(s.per_item) + " a collapse";
}

// Every block's item list, in order.
std::vector<std::vector<TailItem>> items_of(const Shape& s) {
  std::vector<std::vector<TailItem>> out(static_cast<size_t>(s.G));
  for (int64_t b = 0; b < s.G; ++b) {
    TailOrder order(s.T, s.G, b, kTileTokens, s.per_item);
    for (TailItem item = order.next(); item.kind != TailItem::kDone; item = order.next()) {
      out[static_cast<size_t>(b)].push_back(item);
    }
  }
  return out;
}

TEST(TailOrder, EveryTileAndTokenOnceByItsBlock) {
  for (const Shape& s : shapes()) {
    const int64_t tiles = (s.T + kTileTokens - 1) / kTileTokens;
    std::vector<int> finalized(static_cast<size_t>(tiles), 0), collapsed(static_cast<size_t>(s.T), 0);
    const auto all = items_of(s);
    for (int64_t b = 0; b < s.G; ++b) {
      for (const TailItem& item : all[static_cast<size_t>(b)]) {
        if (item.kind == TailItem::kFinalize) {
          ASSERT_TRUE(item.tile >= 0 && item.tile < tiles) << label(s);
          EXPECT_EQ(item.tile % s.G, b) << label(s);
          ++finalized[static_cast<size_t>(item.tile)];
        } else {
          ASSERT_TRUE(item.t0 >= 0 && item.t0 < s.T && item.t1 < s.T) << label(s);
          EXPECT_EQ(item.t0 % s.G, b) << label(s);
          ++collapsed[static_cast<size_t>(item.t0)];
          if (item.t1 >= 0) {
            EXPECT_EQ(s.per_item, 2) << label(s);
            EXPECT_EQ(item.t1, item.t0 + s.G) << label(s);
            ++collapsed[static_cast<size_t>(item.t1)];
          }
        }
      }
    }
    EXPECT_TRUE(std::all_of(finalized.begin(), finalized.end(), [](int n) { return n == 1; })) << label(s);
    EXPECT_TRUE(std::all_of(collapsed.begin(), collapsed.end(), [](int n) { return n == 1; })) << label(s);
  }
}

// All blocks at once, block b running all[b] in order: each step, the GEMM completes its next
// tile (in `gemm_order`) and every block whose current item can run runs it. True where the
// launch ends with every item run.
bool runs_to_the_end(const Shape& s, const std::vector<std::vector<TailItem>>& all,
                     const std::vector<int64_t>& gemm_order, std::string* why) {
  const int64_t tiles = (s.T + kTileTokens - 1) / kTileTokens;
  std::vector<size_t> next(static_cast<size_t>(s.G), 0);
  std::vector<bool> counted(static_cast<size_t>(tiles), false), pre(static_cast<size_t>(tiles), false);
  size_t left = 0;
  for (const auto& list : all) left += list.size();
  size_t gemm = 0;
  for (;;) {
    bool moved = false;
    if (gemm < gemm_order.size()) {
      counted[static_cast<size_t>(gemm_order[gemm++])] = true;
      moved = true;
    }
    for (int64_t b = 0; b < s.G; ++b) {
      const auto& list = all[static_cast<size_t>(b)];
      size_t& i = next[static_cast<size_t>(b)];
      while (i < list.size()) {
        const TailItem& item = list[i];
        if (item.kind == TailItem::kFinalize) {
          if (!counted[static_cast<size_t>(item.tile)]) break;
          pre[static_cast<size_t>(item.tile)] = true;
        } else {
          const bool ready = pre[static_cast<size_t>(item.t0 / kTileTokens)] &&
                             (item.t1 < 0 || pre[static_cast<size_t>(item.t1 / kTileTokens)]);
          if (!ready) break;
        }
        ++i;
        --left;
        moved = true;
      }
    }
    if (left == 0) return true;
    if (!moved) {
      *why = std::to_string(left) + " items wait in a cycle";
      return false;
    }
  }
}

TEST(TailOrder, NothingWaitsInACycle) {
  std::mt19937_64 rng(36);
  for (const Shape& s : shapes()) {
    const int64_t tiles = (s.T + kTileTokens - 1) / kTileTokens;
    std::vector<int64_t> order(static_cast<size_t>(tiles));
    for (int64_t k = 0; k < tiles; ++k) order[static_cast<size_t>(k)] = k;
    std::vector<std::vector<int64_t>> orders = {order};  // the GEMM's groups walk the tiles in order
    std::reverse(order.begin(), order.end());
    orders.push_back(order);
    std::shuffle(order.begin(), order.end(), rng);
    orders.push_back(order);
    for (const auto& o : orders) {
      std::string why;
      EXPECT_TRUE(runs_to_the_end(s, items_of(s), o, &why)) << label(s) << ": " << why;
    }
  }
}

// The simulation can fail: the same items with every block taking its pairs before any finalize
// (a wrong order) wait in a cycle.
TEST(TailOrder, TheSimulationSeesACycle) {
  const Shape s{1024, 7, 2};
  auto wrong = items_of(s);
  for (auto& list : wrong) {
    std::stable_partition(list.begin(), list.end(), [](const TailItem& i) { return i.kind == TailItem::kCollapse; });
  }
  std::vector<int64_t> order(static_cast<size_t>((s.T + kTileTokens - 1) / kTileTokens));
  for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int64_t>(k);
  std::string why;
  EXPECT_FALSE(runs_to_the_end(s, wrong, order, &why)) << "the wrong order should wait in a cycle at " << label(s);
  EXPECT_TRUE(runs_to_the_end(s, items_of(s), order, &why)) << why;
}

}  // namespace

// src/cuda/n4/fragments.cu - prepare()'s n = 4 layout of fn: three bf16 parts (hi, mid, lo:
// each the bf16 rounding of what the previous parts leave) in mma.m16n8k16 B-fragment order,
// [chunk][mma warp = stream][k16 step][n-tile][lane], so a warp loads its fragments with
// coalesced 8-byte reads; and the same layout of fn_b viewed as 4 quarter-rows of H / 4 columns
// (pre_broadcast's mixes as n = 4 mixes over H / 4 columns a stream: staged.cu). Host code, run
// once per weight set.
#include <vector>

#include "src/core/bf16.hpp"
#include "src/cuda/n4/config.cuh"
#include "src/cuda/variants.hpp"

namespace mhc::cuda {

using namespace n4;

namespace {

// The fragments of a weight f [w.rows][4 Hv] (row stride 4 Hv) as n = 4 mixes over Hv columns a
// stream: fn itself (Hv = H), or fn_b viewed as 4 quarter-rows (Hv = H / 4).
std::vector<uint32_t> fragments_of(const detail::HostFloats& f, int rows, int64_t Hv) {
  const int64_t K = kN * Hv, chunks = Hv / kChunkCols;
  // part(r, k, pp): the pp-th bf16 term of f[r, k] (rows past `rows` are zero: a learned head).
  auto part = [&](int r, int64_t k, int pp) -> uint16_t {
    if (r >= rows) return 0;
    float rem = f[r * K + k];
    uint16_t b = 0;
    for (int i = 0; i <= pp; ++i) {
      b = detail::float_to_bf16(rem);
      rem -= detail::bf16_to_float(b);
    }
    return b;
  };
  // [chunk][mw][ks][nt][lane]: mma warp mw's B fragment (m16n8k16, col) of k16 step ks of
  // stream mw, n-tile nt (part nt / 3 of rows (nt % 3) * 8 ..), for lane (g, q).
  std::vector<uint32_t> out(static_cast<size_t>(chunks) * kFragWords * 2);
  size_t idx = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    for (int mw = 0; mw < kMmaWarps; ++mw) {
      for (int ks = 0; ks < kMmaSteps; ++ks) {
        for (int nt = 0; nt < kNTiles; ++nt) {
          const int pp = nt / 3;
          for (int lane = 0; lane < 32; ++lane) {
            const int g = lane / 4, q = lane % 4;
            const int r = (nt % 3) * 8 + g;
            const int64_t k0 = mw * Hv + c * kChunkCols + ks * 16 + 2 * q;
            out[idx++] = part(r, k0, pp) | (static_cast<uint32_t>(part(r, k0 + 1, pp)) << 16);
            out[idx++] = part(r, k0 + 8, pp) | (static_cast<uint32_t>(part(r, k0 + 9, pp)) << 16);
          }
        }
      }
    }
  }
  return out;
}

bool n4_weights(const PreparedWeights::Impl& w) { return w.n == kN && w.H % kSliceK == 0 && w.H <= kMaxH; }

}  // namespace

std::vector<uint32_t> n4_fragments(const PreparedWeights::Impl& w) {
  return n4_weights(w) ? fragments_of(w.fn, w.rows, w.H) : std::vector<uint32_t>{};
}

std::vector<uint32_t> n4_broadcast_fragments(const PreparedWeights::Impl& w) {
  return n4_weights(w) && !w.head ? fragments_of(w.fn_b, w.rows, w.H / kN) : std::vector<uint32_t>{};
}

}  // namespace mhc::cuda

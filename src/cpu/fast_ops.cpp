// src/cpu/fast_ops.cpp - the fast CPU path of every operator with a mixes or collapse stage
// (mixes, collapse, pre, pre_broadcast, post_pre, head: *.cpu_fast), n = 4, any H >= 1.
//
// Each token runs the oracle's pipeline (src/core/problem.hpp): post (fast_post.cpp: the
// oracle's bits) -> mixes (fast_mixes.cpp: fp32 chunked dots in the canonical order and the sum of
// squares as x's dot with itself in that order, ss_of; then the oracle's own double epilogue,
// reference_mixes_epilogue) -> collapse. The collapse is the exact
// bf16 sum of exact_sum.hpp (the oracle's bits for a carried, identity or mean pre; with a
// computed pre its fp32-rounded weights are the only difference from the oracle). The RMSNorm
// fold: sum(u^2) in double (cpu::sumsq), inv = 1/sqrt(mean + eps) in double, y = (u * inv) * w in
// fp32 with the bound 5 u |y|, certified as in exact_sum.hpp, else y in double as the oracle
// forms it, rounded once: within 1 ulp of the oracle, and its bits wherever both inv agree.
// pre_broadcast's mixes read the embedding [T,H] against the pre-summed fn_b (spec 4.4), with
// sum(x^2) = n sum(e^2) over the K = nH copies.  Every level of cpu::isa() gives the same bits.
//
// Threading (OpenMP, static schedules): T > kPhasedMaxT: one work item per tile of kTile tokens,
// the whole pipeline per tile (its residual_out stays in cache for the mixes and the collapse);
// where there is no post stage and the pre is computed (head learned, pre normal; AVX-512), each
// thread takes a contiguous range of tiles and runs the collapse of tile k - 1 in pieces between
// the dot chunks of tile k (CollapseJob), so the residual keeps streaming in during the collapse.
// T <= kPhasedMaxT (decode): three phases, split over H where there are few tokens: post over
// (token, column block), the dots over (token tile, pair of weight rows), then the epilogue and
// the collapse per token. No reduction crosses a work item and every value's arithmetic is fixed
// (fast.hpp: cpu::dots), so the bits do not depend on the thread count, the path, T, or a
// token's place in the batch.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "src/cpu/simd.hpp"

#include "src/core/bf16.hpp"
#include "src/core/prepared.hpp"
#include "src/cpu/exact_sum.hpp"
#include "src/cpu/fast.hpp"
#include "src/cpu/reference.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

#ifdef _OPENMP
// Parallel over the loop that follows when the local bool `par` is true.
#define MHC_OMP_FOR_IF_PAR _Pragma("omp parallel for schedule(static) if (par)")
#else
#define MHC_OMP_FOR_IF_PAR (void)par;
#endif

namespace mhc::detail {

namespace {

using cpu::kLane;
using cpu::kTile;

constexpr int kN = 4;
constexpr int kMaxRows = (kN + 2) * kN;
constexpr int64_t kPhasedMaxT = 32;
constexpr int kRowsPerItem = 2;  // weight rows per dot work item at small T: a multiple of this

int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}
static_assert(kMaxRows <= cpu::kMaxDotRows, "cpu::dots takes every weight row in one call");

bool fast_op(Op op) {
  return op == Op::kMixes || op == Op::kCollapse || op == Op::kPre || op == Op::kPreBroadcast ||
         op == Op::kPostPre || op == Op::kHead;
}

// The bf16 row the mixes of token t read, and its length (K, or H for a broadcast input).
const bf16_t* mixes_row(const Problem& p, int64_t t) {
  if (p.has_post_stage()) return p.residual_out + t * p.residual_out_stride;
  return p.residual + t * p.residual_stride;
}

struct WeightRows {
  const float* fn = nullptr;  // [rows, len]
  int64_t len = 0;
  int rows = 0;
};

WeightRows weight_rows(const Problem& p) {
  WeightRows w;
  if (!p.has_mixes_stage()) return w;
  w.rows = p.weights->rows;
  if (p.op == Op::kPreBroadcast) {
    w.fn = p.weights->fn_b.data();
    w.len = p.H;
  } else {
    w.fn = p.weights->fn.data();
    w.len = p.K();
  }
  return w;
}

// sum(x^2) over the mixes' input of token t from its self-dot (cpu::selfdot: fp32 squares, the
// dots' order): used where it lies in [2^-60, inf), where no square can have overflowed and the
// underflowed ones (each off by < 2^-149) do not matter; otherwise the double sum (cpu::sumsq).
// The broadcast input counts each of its H values n times.
double ss_of(const Problem& p, int64_t t, double selfdot) {
  const bool bcast = p.op == Op::kPreBroadcast;
  double ss = selfdot;
  if (!(ss >= 0x1p-60 && ss < static_cast<double>(FLT_MAX))) ss = cpu::sumsq(mixes_row(p, t), bcast ? p.H : p.K());
  return bcast ? static_cast<double>(kN) * ss : ss;
}

// Epilogue of token t from its raw dots and sum of squares: r, m = dot * r, then the oracle's
// epilogue. Returns pre.
void mixes_epilogue(const Problem& p, int64_t t, const double* dot, double ss, double (&pre)[kN]) {
  const int rows = p.weights->rows;
  const double K = static_cast<double>(p.K());
  const double r = 1.0 / std::sqrt(ss / K + static_cast<double>(p.norm_eps));
  double m[kMaxRows];
  for (int i = 0; i < rows; ++i) m[i] = dot[i] * r;
  reference_mixes_epilogue(p, t, m, pre);
}

// The oracle's float64 form of the fold of one column, rounded once (the rare path).
bf16_t fold_double(bf16_t u, bf16_t w, double inv) {
  return cpu::round_double_bf16(static_cast<double>(bf16_to_float(u)) * inv * static_cast<double>(bf16_to_float(w)));
}

// The fold of columns [0, H16) (H16 % 16 == 0) with AVX-512: the same fp32 y = (u * inv) * w and
// bound as fold_rmsnorm's scalar loop, s -/+ e rounded by the BF16 instruction (as in
// exact_sum_lane_avx512), so the same certified bits; the rest in double. u from src, the result
// to dst (src == dst allowed); stream: by non-temporal stores (dst 64-byte aligned).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma"))) void fold_avx512(
    const bf16_t* src, bf16_t* dst, const bf16_t* w, int64_t H16, float inv_f, double inv, bool stream) {
  const __m512 vinv = _mm512_set1_ps(inv_f), ue = _mm512_set1_ps(5.0f * 0x1p-24f), tiny = _mm512_set1_ps(0x1p-126f);
  const __m512 fmax = _mm512_set1_ps(FLT_MAX);
  const __m512i idx_lo = cpu::widen32_index(0), idx_hi = cpu::widen32_index(16);
  const __m512i expmask = _mm512_set1_epi16(0x7f80);
  const int64_t H32 = H16 & ~int64_t{31};
  // 32 columns at a time: u and w widened by cpu::widen32, both ends of the 32 y rounded by one
  // BF16 instruction each; certified where the ends agree and are finite (an inf or NaN end has
  // exponent 0xff, and |y| + e overflows only where y + e or y - e does), as exact_sums_avx512.
  for (int64_t h = 0; h < H32; h += 32) {
    __m512 u[2], wv[2], lo_end[2], hi_end[2];
    cpu::widen32(src + h, idx_lo, idx_hi, u[0], u[1]);
    cpu::widen32(w + h, idx_lo, idx_hi, wv[0], wv[1]);
    for (int g = 0; g < 2; ++g) {
      const __m512 y = _mm512_mul_ps(_mm512_mul_ps(u[g], vinv), wv[g]);
      const __m512 e = _mm512_fmadd_ps(_mm512_abs_ps(y), ue, tiny);
      lo_end[g] = _mm512_sub_ps(y, e);
      hi_end[g] = _mm512_add_ps(y, e);
    }
    __m512i lo = (__m512i)(_mm512_cvtne2ps_pbh(lo_end[1], lo_end[0]));
    const __m512i hi = (__m512i)(_mm512_cvtne2ps_pbh(hi_end[1], hi_end[0]));
    const __mmask32 ok = _mm512_mask_cmpneq_epi16_mask(_mm512_cmpeq_epi16_mask(lo, hi), _mm512_and_si512(lo, expmask), expmask);
    uint32_t bad = ~static_cast<uint32_t>(ok);
    if (bad != 0) {
      alignas(64) bf16_t out[32];
      _mm512_store_si512(out, lo);
      for (; bad != 0; bad &= bad - 1) {
        const int i = __builtin_ctz(bad);
        out[i] = fold_double(src[h + i], w[h + i], inv);
      }
      lo = _mm512_load_si512(out);
    }
    if (stream) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + h), lo);
    } else {
      _mm512_storeu_si512(dst + h, lo);
    }
  }
  for (int64_t h = H32; h < H16; h += 16) {
    const __m512 u = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + h))), 16));
    const __m512 wv = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + h))), 16));
    const __m512 y = _mm512_mul_ps(_mm512_mul_ps(u, vinv), wv);
    const __m512 e = _mm512_add_ps(_mm512_mul_ps(_mm512_abs_ps(y), ue), tiny);
    __m256i lo = (__m256i)(_mm512_cvtneps_pbh(_mm512_sub_ps(y, e)));
    const __m256i hi = (__m256i)(_mm512_cvtneps_pbh(_mm512_add_ps(y, e)));
    const __mmask16 fin = _mm512_cmp_ps_mask(_mm512_add_ps(_mm512_abs_ps(y), e), fmax, _CMP_LE_OQ);
    const __mmask16 ok = _mm256_mask_cmpeq_epi16_mask(fin, lo, hi);
    uint32_t bad = static_cast<uint16_t>(~ok);
    if (bad != 0) {
      alignas(32) bf16_t out[16];
      _mm256_store_si256(reinterpret_cast<__m256i*>(out), lo);
      for (; bad != 0; bad &= bad - 1) {
        const int i = __builtin_ctz(bad);
        out[i] = fold_double(src[h + i], w[h + i], inv);
      }
      lo = _mm256_load_si256(reinterpret_cast<const __m256i*>(out));
    }
    if (stream) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + h), lo);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + h), lo);
    }
  }
}

// The fold's 1/sqrt(mean(u^2) + eps) of one row u (H values), in double.
double fold_inv(const Problem& p, const bf16_t* u) {
  const double ss = cpu::sumsq(u, p.H);
  return 1.0 / std::sqrt(ss / static_cast<double>(p.H) + static_cast<double>(p.rmsnorm_eps));
}

// The fold of columns [h_begin, h_end) of one row: dst[h] = bf16(u[h] * inv * w[h]), u = src (src ==
// dst allowed); stream as in fold_avx512 (AVX-512 only; dst + h_begin 64-byte aligned). Each column's
// arithmetic is its own, so any split of the columns gives the same bits.
void fold_columns(const Problem& p, const bf16_t* src, bf16_t* dst, int64_t h_begin, int64_t h_end, double inv,
                  bool stream) {
  const float inv_f = static_cast<float>(inv);
  const bf16_t* w = p.rmsnorm_weight;
  if (cpu::use_avx512()) {
    const int64_t h16 = h_begin + ((h_end - h_begin) & ~int64_t{15});
    fold_avx512(src + h_begin, dst + h_begin, w + h_begin, h16 - h_begin, inv_f, inv, stream);
    h_begin = h16;
  }
  for (int64_t h0 = h_begin; h0 < h_end; h0 += kLane) {
    const int64_t len = std::min<int64_t>(kLane, h_end - h0);
    for (int64_t i = 0; i < len; ++i) {
      const bf16_t u = src[h0 + i];
      const float y = (bf16_to_float(u) * inv_f) * bf16_to_float(w[h0 + i]);
      const float e = std::fabs(y) * (5.0f * 0x1p-24f) + 0x1p-126f;
      const uint32_t lo = cpu::round_bf16_finite(y - e);
      const uint32_t hi = cpu::round_bf16_finite(y + e);
      const bool ok = lo == hi && std::fabs(y) + e <= FLT_MAX;
      dst[h0 + i] = ok ? static_cast<bf16_t>(lo) : fold_double(u, w[h0 + i], inv);
    }
  }
}

// RMSNorm fold of one row: dst[h] = bf16(u[h] * inv * w[h]), u = src (src == dst allowed); stream
// as in fold_avx512 (AVX-512 only).
void fold_rmsnorm(const Problem& p, const bf16_t* src, bf16_t* dst, bool stream) {
  fold_columns(p, src, dst, 0, p.H, fold_inv(p, src), stream);
}

// Columns of a row that collapse_token keeps in a stack buffer between the collapse and the fold.
constexpr int64_t kScratchColumns = 16384;

// Whether the call's bf16 output goes out by non-temporal stores (cpu::kStreamMinBytes): head only,
// whose output nothing in the call reads again.
bool stream_output(const Problem& p) {
  return p.op == Op::kHead && cpu::use_avx512() &&
         p.T * p.K() * static_cast<int64_t>(sizeof(bf16_t)) >= cpu::kStreamMinBytes;
}

// The collapse weights of token t: a quarter (mean head), the carried pre, or the computed pre.
void collapse_weights(const Problem& p, int64_t t, const double (&pre)[kN], float (&w)[kN]) {
  if (p.mean_head()) {
    for (float& v : w) v = 0.25f;  // bf16(sum / 4) = bf16(sum of x / 4): scaling by 2^-2 is exact
  } else if (p.pre_source == PreSource::kCarried) {
    const float* src = p.pre_mix_in + t * p.pre_mix_in_stride;
    for (int j = 0; j < kN; ++j) w[j] = src[j];
  } else {
    for (int j = 0; j < kN; ++j) w[j] = static_cast<float>(pre[j]);
  }
}

// The first stream of token t's collapse input (the mixes' row: residual_out after a post stage).
const bf16_t* collapse_base(const Problem& p, int64_t t) {
  return p.has_post_stage() ? p.residual_out + t * p.residual_out_stride : p.residual + t * p.residual_stride;
}

// Columns [h_begin, h_end) of token t's collapse with the weights w into u (h_begin a multiple of
// 32): AVX-512 over the whole multiples of 32 (stream: by non-temporal stores, u + h_begin 64-byte
// aligned), then lanes. Each column's bits are its own, so any split of the columns gives the same.
void collapse_columns(const Problem& p, int64_t t, const float (&w)[kN], bf16_t* u, int64_t h_begin, int64_t h_end,
                      bool stream) {
  const bf16_t* base = collapse_base(p, t);
  const bool bcast = p.residual_broadcast && !p.has_post_stage();
  const bf16_t* rows[kN];
  for (int j = 0; j < kN; ++j) rows[j] = bcast ? base : base + j * p.H;
  if (cpu::use_avx512()) {
    const int64_t h32 = h_begin + ((h_end - h_begin) & ~int64_t{31});
    const float(*wk)[kN] = &w;
    bf16_t* const dsts[1] = {u};
    const float scale_fma = cpu::sum_error_scale<kN, cpu::Chain::kFma>(w);
    cpu::exact_sums_avx512<kN, 1, true>(rows, wk, &scale_fma, dsts, h_begin, h32, stream);
    h_begin = h32;
  }
  if (h_begin >= h_end) return;
  const float scale = cpu::sum_error_scale<kN>(w);
  for (int64_t h0 = h_begin; h0 < h_end; h0 += kLane) {
    const int64_t len = std::min<int64_t>(kLane, h_end - h0);
    float v[kN][kLane];
    float abs_sum[kLane];
    cpu::load_lane<kN>(rows, h0, len, v, abs_sum);
    cpu::exact_sum_lane<kN, true>(w, scale, v, abs_sum, len, u + h0);
  }
}

// Collapse of token t with the weights `pre` (ignored for identity), then the optional fold. With
// AVX-512 and a fold, the collapse goes to a stack buffer and the fold reads it from there.
// stream: the row's final values by non-temporal stores where the row is 64-byte aligned.
void collapse_token(const Problem& p, int64_t t, const double (&pre)[kN], bool stream) {
  bf16_t* dst = p.layer_input + t * p.layer_input_stride;
  stream = stream && reinterpret_cast<uintptr_t>(dst) % 64 == 0;
  const bool fold = p.rmsnorm_weight != nullptr;
  alignas(64) bf16_t scratch[kScratchColumns];
  bf16_t* u = fold && cpu::use_avx512() && p.H <= kScratchColumns ? scratch : dst;  // the collapse's row
  if (p.pre_source == PreSource::kIdentity && !p.mean_head()) {
    std::memcpy(u, collapse_base(p, t), static_cast<size_t>(p.H) * sizeof(bf16_t));  // stream 0, bit for bit
  } else {
    float w[kN];
    collapse_weights(p, t, pre, w);
    collapse_columns(p, t, w, u, 0, p.H, stream && u == dst);
  }
  if (fold) fold_rmsnorm(p, u, dst, stream);
}

// pre_broadcast's optional residual_out: n bit-exact copies of the embedding.
void broadcast_copies(const Problem& p, int64_t t) {
  if (p.op != Op::kPreBroadcast || p.residual_out == nullptr) return;
  const bf16_t* src = p.residual + t * p.residual_stride;
  bf16_t* dst = p.residual_out + t * p.residual_out_stride;
  for (int j = 0; j < kN; ++j) std::memcpy(dst + j * p.H, src, static_cast<size_t>(p.H) * sizeof(bf16_t));
}

// After the dots: the epilogue (if any) and the collapse (if any) of token t; selfdot is
// cpu::selfdot of its mixes' input.
void finish_token(const Problem& p, int64_t t, const double* dot, double selfdot, bool stream) {
  double pre[kN] = {0, 0, 0, 0};
  if (p.has_mixes_stage()) mixes_epilogue(p, t, dot, ss_of(p, t, selfdot), pre);
  if (p.has_collapse_stage()) collapse_token(p, t, pre, stream);
}

// The whole pipeline for tokens [t0, t0 + tb), tb <= kTile.
void run_tile(const Problem& p, const WeightRows& wr, int64_t t0, int tb) {
  for (int i = 0; i < tb; ++i) {
    if (p.has_post_stage()) fast_post_token(p, t0 + i);
    broadcast_copies(p, t0 + i);
  }
  double dot[kTile * kMaxRows];
  double ss[kTile] = {};
  if (wr.rows > 0) {
    const bf16_t* x[kTile] = {};
    for (int i = 0; i < tb; ++i) x[i] = mixes_row(p, t0 + i);
    cpu::dots(x, tb, wr.fn, wr.len, 0, wr.rows, dot, kMaxRows, ss);
  }
  const bool stream = stream_output(p);
  for (int i = 0; i < tb; ++i) finish_token(p, t0 + i, dot + i * kMaxRows, ss[i], stream);
  if (stream) _mm_sfence();  // this thread's non-temporal stores, before the region's barrier
}

// The collapse (and fold) of one tile's tokens cut into pieces of kPieceColumns columns, run from
// the caches between the dot chunks of the thread's next tile (cpu::dots' between hook): the next
// tile's residual streams in from memory while this one's collapse runs. Token by token: the
// collapse pieces (into the scratch row where there is a fold), then the fold's sum of squares and
// its pieces. Each column's arithmetic is collapse_token's, so the bits are the same.
constexpr int64_t kPieceColumns = 512;

struct CollapseJob {
  const Problem* p = nullptr;
  int64_t t0 = 0;
  int tb = 0;
  bool stream = false;
  float w[kTile][kN] = {};
  int64_t per_call = 1;    // pieces per between() call
  int i = 0;               // the token in progress
  int phase = 0;           // 0: collapse, 1: fold
  int64_t h = 0;           // its next column
  double inv = 0.0;        // the fold's 1/rms of token i
  alignas(64) bf16_t scratch[kScratchColumns];

  bool done() const { return i >= tb; }

  // One piece of the work; false when there is none left.
  bool piece() {
    if (i >= tb) return false;
    const Problem& q = *p;
    const int64_t t = t0 + i;
    bf16_t* dst = q.layer_input + t * q.layer_input_stride;
    const bool fold = q.rmsnorm_weight != nullptr;
    const bool st = stream && reinterpret_cast<uintptr_t>(dst) % 64 == 0;
    const int64_t h_end = std::min(q.H, h + kPieceColumns);
    if (phase == 0) {
      collapse_columns(q, t, w[i], fold ? scratch : dst, h, h_end, st && !fold);
      h = h_end;
      if (h < q.H) return true;
      if (!fold) {
        ++i;
        h = 0;
        return true;
      }
      inv = fold_inv(q, scratch);
      phase = 1;
      h = 0;
      return true;
    }
    fold_columns(q, scratch, dst, h, h_end, inv, st);
    h = h_end;
    if (h >= q.H) {
      ++i;
      phase = 0;
      h = 0;
    }
    return true;
  }

  static void between(void* ctx) {
    CollapseJob& job = *static_cast<CollapseJob*>(ctx);
    for (int64_t k = 0; k < job.per_call && job.piece(); ++k) {
    }
  }
};

// Whether the tiles of this call run pipelined (CollapseJob): a mixes and a collapse stage with a
// computed pre and no post stage (head learned, pre), AVX-512, rows that fit the scratch.
bool pipelined(const Problem& p, const WeightRows& wr) {
  return cpu::use_avx512() && !p.has_post_stage() && wr.rows > 0 && p.has_collapse_stage() &&
         p.pre_source == PreSource::kComputed && !p.mean_head() && !p.residual_broadcast && p.H <= kScratchColumns;
}

// Tiles [begin, end) of one thread, pipelined: the dots of tile k run the collapse of tile k - 1
// between their chunks; whatever is left of it runs after them.
void run_tiles_pipelined(const Problem& p, const WeightRows& wr, int64_t begin, int64_t end) {
  const bool stream = stream_output(p);
  const int64_t chunks = (wr.len + cpu::kChunk - 1) / cpu::kChunk;
  const int64_t pieces_per_row = (p.H + kPieceColumns - 1) / kPieceColumns * (p.rmsnorm_weight != nullptr ? 2 : 1);
  CollapseJob job;
  job.p = &p;
  job.stream = stream;
  for (int64_t tile = begin; tile < end; ++tile) {
    const int64_t t0 = tile * kTile;
    const int tb = static_cast<int>(std::min<int64_t>(kTile, p.T - t0));
    double dot[kTile * kMaxRows];
    double ss[kTile] = {};
    const bf16_t* x[kTile] = {};
    for (int i = 0; i < tb; ++i) x[i] = mixes_row(p, t0 + i);
    cpu::dots(x, tb, wr.fn, wr.len, 0, wr.rows, dot, kMaxRows, ss, job.done() ? nullptr : &CollapseJob::between, &job);
    while (job.piece()) {
    }
    job.t0 = t0;
    job.tb = tb;
    job.i = 0;
    job.phase = 0;
    job.h = 0;
    job.per_call = (tb * pieces_per_row + chunks - 1) / chunks;
    for (int i = 0; i < tb; ++i) {
      double pre[kN] = {0, 0, 0, 0};
      mixes_epilogue(p, t0 + i, dot + i * kMaxRows, ss_of(p, t0 + i, ss[i]), pre);
      collapse_weights(p, t0 + i, pre, job.w[i]);
    }
  }
  while (job.piece()) {
  }
  if (stream) _mm_sfence();  // this thread's non-temporal stores, before the region's barrier
}

void run_phased(const Problem& p, const WeightRows& wr) {
  const int64_t T = p.T;
  if (p.has_post_stage()) fast_post_run(p);
  for (int64_t t = 0; t < T; ++t) broadcast_copies(p, t);
  double dot[kPhasedMaxT * kMaxRows];
  if (wr.rows > 0) {
    const int64_t tiles = (T + kTile - 1) / kTile;
    // Enough items for two per thread; fewer rows per item would repeat the widening of x.
    const int64_t want = (2 * static_cast<int64_t>(max_threads()) + tiles - 1) / tiles;
    const int64_t max_groups = (wr.rows + kRowsPerItem - 1) / kRowsPerItem;
    const int64_t groups = std::max<int64_t>(1, std::min(want, max_groups));
    const int rows_per = static_cast<int>((max_groups + groups - 1) / groups) * kRowsPerItem;
    const int64_t items = tiles * groups;
    const bool par = items > 1;
    MHC_OMP_FOR_IF_PAR
    for (int64_t item = 0; item < items; ++item) {
      const int64_t t0 = (item / groups) * kTile;
      const int r0 = std::min(wr.rows, static_cast<int>(item % groups) * rows_per);
      const int r1 = std::min(wr.rows, r0 + rows_per);
      const int tb = static_cast<int>(std::min<int64_t>(kTile, T - t0));
      const bf16_t* x[kTile];
      for (int i = 0; i < tb; ++i) x[i] = mixes_row(p, t0 + i);
      cpu::dots(x, tb, wr.fn, wr.len, r0, r1, dot + t0 * kMaxRows, kMaxRows);
    }
  }
  const bool par = T > 1;
  MHC_OMP_FOR_IF_PAR
  for (int64_t t = 0; t < T; ++t) {
    const double selfdot = wr.rows > 0 ? cpu::selfdot(mixes_row(p, t), wr.len) : 0.0;
    finish_token(p, t, dot + t * kMaxRows, selfdot, false);
  }
}

}  // namespace

bool fast_ops_supports(const Problem& p) {
  return p.device.type == DeviceType::kCPU && fast_op(p.op) && p.n == kN &&
         (!p.has_mixes_stage() || (p.weights != nullptr && p.weights->rows <= kMaxRows));
}

void fast_ops_run(const Problem& p) {
  if (p.T <= 0 || p.H <= 0) return;
  const WeightRows wr = weight_rows(p);
  if (p.T <= kPhasedMaxT) return run_phased(p, wr);
  const int64_t tiles = (p.T + kTile - 1) / kTile;
  const bool par = tiles > 1;
  if (pipelined(p, wr)) {
#ifdef _OPENMP
#pragma omp parallel if (par)
    {
      // The static split by hand: thread i takes the i-th of nthreads nearly equal tile ranges.
      const int64_t nthreads = omp_get_num_threads(), i = omp_get_thread_num();
      const int64_t base = tiles / nthreads, extra = tiles % nthreads;
      const int64_t begin = i * base + (i < extra ? i : extra);
      run_tiles_pipelined(p, wr, begin, begin + base + (i < extra ? 1 : 0));
    }
#else
    run_tiles_pipelined(p, wr, 0, tiles);
#endif
    return;
  }
  MHC_OMP_FOR_IF_PAR
  for (int64_t i = 0; i < tiles; ++i) {
    const int64_t t0 = i * kTile;
    run_tile(p, wr, t0, static_cast<int>(std::min<int64_t>(kTile, p.T - t0)));
  }
}

}  // namespace mhc::detail

// src/cuda/n4.cu - the n = 4 fast path of every operator (H % 512 == 0, H <= 16384).
//
// What it computes: the same per-token pipeline as the generic path (post -> mixes ->
// collapse), in two kernels:
//   mix_kernel (phase A)     grid (C = H/128 chunks, token groups). A block owns one chunk of
//                            128 hidden columns of all 4 streams (a 512-wide K-slice) and walks
//                            32-token tiles, fed by a 3-stage cp.async ring. Per tile: the post
//                            stage (16-byte vectors; the new residual goes to residual_out and
//                            to shared memory), then the tile's 24 dot products over the K-slice
//                            on tensor cores: mma.m16n8k16 bf16 with x (exact in bf16) against
//                            fn split into three bf16 parts (hi + mid + lo), fp32 accumulate;
//                            plus each token's sum of squares. Partials go to the workspace
//                            [token][chunk][25].
//   collapse_kernel (phase B) one block per token: sums the partials over chunks in a fixed
//                            order, runs the epilogue (sigmoids, Sinkhorn) on one thread, then
//                            the collapse and the RMSNorm fold with 16-byte vectors.
// post alone uses post_kernel (16-byte vectors, one thread per 8 columns of all 4 streams).
// Post and collapse sums: exact_sum_bf16 (common.cuh), the exact sum rounded once.
// Determinism / batch invariance: every token's partial for a chunk comes from the same
// instruction sequence wherever the token sits in a tile, chunks are summed in a fixed order,
// and dispatch does not depend on T: a token's outputs do not depend on the batch.
// B fragments of a block's K-slice stay in registers for all its tiles (72 x 32-bit).
// Launches: programmatic dependent launch on sm_90+ (see pdl_wait). Tokens run in slices that
// fit the workspace's partials and, when the collapse re-reads the streams, half the L2.
// Envelope: n = 4, H % 512 == 0, H <= 16384, 16-byte aligned bf16 rows (pointers and row
// strides).
#include <vector>

#include "src/core/bf16.hpp"
#include "src/cuda/check.cuh"
#include "src/cuda/common.cuh"
#include "src/cuda/variants.hpp"

namespace mhc::cuda {

namespace {

constexpr int kN = 4;
constexpr int kRows = 24;                 // (n+2)*n
constexpr int kChunkCols = 128;           // hidden columns per chunk (a 512-wide K-slice)
constexpr int kSubCols = 16;              // a sub-block: 16 columns of each stream, 4 k16 steps
constexpr int kSubs = kChunkCols / kSubCols;  // 8 sub-blocks per chunk
constexpr int kHalfSubs = kSubs / 2;      // sub-blocks per half-chunk
constexpr int kSteps = kN * kSubs;        // 32 k16 steps per chunk
constexpr int kNTiles = 9;                // 3 parts x 24 rows / 8
constexpr int kMTok = 16;                 // tokens of an m-tile
constexpr int kPartial = kRows + 1;       // 24 dots + sum of squares
constexpr int kFragUint2 = kSteps * kNTiles * 32;  // B fragments of one chunk (uint2 per lane)
constexpr int kFragBytes = kFragUint2 * 8;         // 72 KB
constexpr int kXsWarp = kN * kMTok * kSubCols;     // bf16 of one warp's A staging (2 KB)
constexpr int kWarpsA = 8;                // mix_kernel: warps per block (one block per SM)
constexpr int kThreadsA = kWarpsA * 32;
constexpr int kMixSmem = kFragBytes + kWarpsA * kXsWarp * 2;
constexpr int kWarpsD = kHalfSubs;        // mix_small_kernel: one warp per sub-block of a half
constexpr int kThreadsD = kWarpsD * 32;
constexpr int64_t kSmallMaxT = 256;       // mix_small_kernel up to here, mix_kernel above
constexpr int kMaxChunks = 16384 / kChunkCols;  // 128
constexpr int kPartialSplit = 8;          // chunk groups the collapse sums in parallel
static_assert(kMixSmem <= 227 * 1024, "smem layout");

__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w[i] = static_cast<uint32_t>(float_to_bf16_bits(f[2 * i])) |
           (static_cast<uint32_t>(float_to_bf16_bits(f[2 * i + 1])) << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

/// Per-token weights of the post sum new[k] = post[k]*o + sum_j comb[j,k]*x[j], in the order of
/// its terms, with the error scale of each output (exact_sum_bf16, common.cuh).
struct PostWeights {
  float w[kN][kN + 1];  // w[k] = (post[k], comb[0,k], .., comb[3,k])
  float scale[kN];
};

__device__ __forceinline__ PostWeights post_weights(const float* post, const float* comb) {
  PostWeights pw;
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    pw.w[k][0] = post[k];
#pragma unroll
    for (int j = 0; j < kN; ++j) pw.w[k][j + 1] = comb[j * kN + k];
    pw.scale[k] = sum_error_scale(pw.w[k]);
  }
  return pw;
}

/// new[k] for 8 columns, each rounded once from the exact sum: the same bits as the generic path.
/// Adjacent columns share one certification (exact_sum_bf16x2).
__device__ __forceinline__ uint32_t word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

/// The 5 terms (layer output, then the 4 streams) of columns 2i and 2i + 1: the two bf16 halves
/// of word i of each vector, with their absolute sums.
__device__ __forceinline__ void post_terms(const uint4 (&res)[kN], const uint4& lo, int i, float (&v0)[kN + 1],
                                           float (&v1)[kN + 1], float& abs0, float& abs1) {
  const uint32_t ol = word(lo, i);
  v0[0] = __uint_as_float(ol << 16);
  v1[0] = __uint_as_float(ol & 0xffff0000u);
  abs0 = fabsf(v0[0]);
  abs1 = fabsf(v1[0]);
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    const uint32_t xw = word(res[j], i);
    v0[j + 1] = __uint_as_float(xw << 16);
    v1[j + 1] = __uint_as_float(xw & 0xffff0000u);
    abs0 += fabsf(v0[j + 1]);
    abs1 += fabsf(v1[j + 1]);
  }
}

/// new[k] for 8 columns, each rounded once from the exact sum: the same bits as the generic path.
/// Per column pair, the 4 outputs run the branch-free fast path together (8 independent chains)
/// and are tested once; the rare uncertified ones (about 1 pair in 500) are redone in double.
__device__ __forceinline__ void post8(const PostWeights& pw, const uint4 (&res)[kN], const uint4& lo,
                                      uint4 (&out)[kN]) {
  uint32_t w[kN][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float v0[kN + 1], v1[kN + 1], abs0, abs1;
    post_terms(res, lo, i, v0, v1, abs0, abs1);
    bool certified[kN];
    bool all = true;
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      w[k][i] = sum_bf16x2_fast(pw.w[k], v0, v1, sum_error_bound(pw.scale[k], abs0),
                                sum_error_bound(pw.scale[k], abs1), certified[k]);
      all = all && certified[k];
    }
    if (!all) {
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        if (!certified[k]) {
          SumTerms t{};
#pragma unroll
          for (int j = 0; j <= kN; ++j) {
            t.w[j] = pw.w[k][j];
            t.v0[j] = v0[j];
            t.v1[j] = v1[j];
          }
          w[k][i] = exact_sum_bf16x2_slow<kN + 1>(t);
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kN; ++k) out[k] = make_uint4(w[k][0], w[k][1], w[k][2], w[k][3]);
}

__device__ __forceinline__ uint4 ld16(const bf16_t* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ uint4 ldcs16(const bf16_t* p) { return __ldcs(reinterpret_cast<const uint4*>(p)); }
// One 16-byte store (written in PTX: nvcc split some uint4 stores into four 32-bit ones).
__device__ __forceinline__ void st16(bf16_t* p, const uint4& v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Programmatic dependent launch (sm_90+): a kernel launched with the programmatic
// serialization attribute may start while the kernel before it in the stream finishes;
// pdl_wait() returns once that kernel has completed and its writes are visible, so every read
// of a predecessor's output (and every write a predecessor might still read) comes after it.
// pdl_launch_dependents() lets the next kernel start once every block of this one has run it.
// Both are no-ops before sm_90 and for launches without the attribute.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Asynchronous global -> shared 16-byte copies (sm_80+), for the B fragments of a chunk.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
}

/// Four 8x8 bf16 matrices from shared memory; lane l gives the row address of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(const void* smem, uint32_t (&a)[4]) {
  const uint32_t src = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(src));
}

struct N4Params {
  int64_t T;                 // tokens in this launch (a slice)
  int64_t H;
  int32_t chunks;            // H / 128
  int32_t parts;             // partials per (token, chunk): 1 (mix_kernel) or 2 (mix_small_kernel)
  int32_t collapse_wpt;      // collapse_kernel: warps per token, 1 or 4
  // phase A inputs
  bool has_post;
  const bf16_t* residual; int64_t residual_stride; int64_t res_stream_stride;  // 0: broadcast
  const bf16_t* layer_output; int64_t layer_output_stride;
  const float* post_mix; int64_t post_mix_stride;
  const float* comb_mix; int64_t comb_mix_stride;
  const uint2* fn_frag;      // [chunks][32 steps][9 ntiles][32 lanes]
  bf16_t* residual_out; int64_t residual_out_stride;  // post output, or materialised copies
  float* partials;           // [T][chunks][parts][25]
  // phase B
  bool has_mixes, has_collapse;
  PreSource pre_source;
  bool head_mean;
  const float* pre_mix_in; int64_t pre_mix_in_stride;
  const bf16_t* x; int64_t x_stride; int64_t x_stream_stride;  // the streams the collapse reads
  const bf16_t* rmsnorm_weight; float rmsnorm_eps;
  bf16_t* layer_input; int64_t layer_input_stride;
  EpilogueParams epi;
  float inv_k;
};

// ---- Phase A: post stage + the 24 dot products and the sum of squares, per chunk ----
//
// The unit of work is a sub-block: 16 tokens (an m-tile) x 16 columns of each of the 4
// streams. Lane l of a warp owns token l / 2 and columns 8 * (l % 2) .. + 8 of the sub-block:
// it loads its 4 stream vectors (and the layer output), runs the post stage, stores the new
// residual, and writes it to the warp's A staging buffer, from which ldmatrix builds the mma
// A fragments of the sub-block's 4 k16 steps (one per stream). The dots use fn split in three
// bf16 parts (hi, mid, lo); all three parts of a row block go into one fp32 accumulator, so a
// sub-block's result D is 3 row blocks x 4 floats per lane (mma C layout), and its sum of
// squares is each lane pair's.
//
// Summation structure (fixed; it is what makes a token's mixes independent of T and of the
// kernel that ran): per chunk, Q_h = (((0 + D_4h) + D_4h+1) + D_4h+2) + D_4h+3 for the two
// halves h, and the chunk's partial is Q_0 + Q_1 (the same for the sums of squares).
// mix_kernel forms both Q_h in one warp; mix_small_kernel forms each in one block and leaves
// Q_0 + Q_1 to the collapse (parts = 2).

/// One lane's inputs of a sub-block.
struct SubIn {
  uint4 r[kN];
  uint4 lo;
};

__device__ __forceinline__ void load_sub(const N4Params& p, int64_t t, bool valid, int64_t col, SubIn& in) {
  if (!valid) {
#pragma unroll
    for (int j = 0; j < kN; ++j) in.r[j] = make_uint4(0, 0, 0, 0);
    in.lo = make_uint4(0, 0, 0, 0);
    return;
  }
  const bf16_t* res = p.residual + t * p.residual_stride + col;
  if (p.has_post) {
    // Read once: streaming loads, so the new residual the collapse re-reads stays in L2.
#pragma unroll
    for (int j = 0; j < kN; ++j) in.r[j] = ldcs16(res + j * p.res_stream_stride);
    in.lo = ldcs16(p.layer_output + t * p.layer_output_stride + col);
  } else if (p.res_stream_stride == 0) {
    const uint4 v = ld16(res);  // broadcast: one row, used n times
#pragma unroll
    for (int j = 0; j < kN; ++j) in.r[j] = v;
  } else {
    // The collapse re-reads these streams: normal caching.
#pragma unroll
    for (int j = 0; j < kN; ++j) in.r[j] = ld16(res + j * p.res_stream_stride);
  }
}

/// The token's 20 post/comb weights (raw), for post_weights.
struct MixIn {
  float post[kN];
  float comb[kN * kN];
};

__device__ __forceinline__ void load_mix(const N4Params& p, int64_t t, bool valid, MixIn& m) {
  if (!p.has_post) return;
  const int64_t tc = valid ? t : 0;
#pragma unroll
  for (int j = 0; j < kN; ++j) m.post[j] = valid ? __ldg(p.post_mix + tc * p.post_mix_stride + j) : 0.0f;
#pragma unroll
  for (int j = 0; j < kN * kN; ++j) m.comb[j] = valid ? __ldg(p.comb_mix + tc * p.comb_mix_stride + j) : 0.0f;
}

/// B fragments of a chunk in shared memory (mix_kernel) ...
struct SmemB {
  const uint2* frag;  // [32 steps][9][32]
  int sub, lane;
  __device__ __forceinline__ uint2 operator()(int j, int nt) const { return frag[((j * kSubs + sub) * kNTiles + nt) * 32 + lane]; }
};
/// ... or of one sub-block in registers (mix_small_kernel).
struct RegB {
  const uint2 (&b)[kN][kNTiles];
  __device__ __forceinline__ uint2 operator()(int j, int nt) const { return b[j][nt]; }
};

/// One sub-block: post stage (when the op has one), new residual out, the lane pair's sum of
/// squares `sq` and the dots `d` (see above). `t` / `valid`: this lane's token; `col`: its first
/// column. Every lane of the warp calls it.
template <class B>
__device__ __forceinline__ void sub_block(const N4Params& p, const SubIn& in, const PostWeights& pw, int64_t t,
                                          bool valid, int64_t col, bf16_t* xs, int lane, const B& b,
                                          float (&d)[3][4], float& sq) {
  uint4 x[kN];
  if (p.has_post && valid) {
    post8(pw, in.r, in.lo, x);
  } else {
    // no post stage (x is the input), or a padding row (zeros; its dots are never stored, and
    // post8 is skipped: all-zero sums never certify in fp32 and would take the double path)
#pragma unroll
    for (int j = 0; j < kN; ++j) x[j] = in.r[j];
  }
  if (valid && p.residual_out != nullptr) {
    bf16_t* out = p.residual_out + t * p.residual_out_stride + col;
#pragma unroll
    for (int j = 0; j < kN; ++j) st16(out + j * p.H, x[j]);
  }
  // sum of squares: one FMA chain per stream, then ((0 + 1) + (2 + 3)), then the lane pair's
  float sj[kN];
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    float f[8];
    unpack8(x[j], f);
    sj[j] = f[0] * f[0];
#pragma unroll
    for (int e = 1; e < 8; ++e) sj[j] = fmaf(f[e], f[e], sj[j]);
  }
  const float s = (sj[0] + sj[1]) + (sj[2] + sj[3]);
  sq = s + __shfl_xor_sync(0xffffffffu, s, 1);
  // A staging: [stream][token][two halves of 8 columns]; the halves are swapped for tokens with
  // bit 2 set, so that the 8 rows of every ldmatrix phase hit distinct banks.
  const int tt = lane >> 1, hv = lane & 1;
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    *reinterpret_cast<uint4*>(xs + (j * kMTok + tt) * kSubCols + ((hv ^ ((tt >> 2) & 1)) * 8)) = x[j];
  }
  __syncwarp();
  // 9 accumulators (part x row block), each a chain of 4 mma over the streams; then per row
  // block hi + (mid + lo).
  const int mi = lane >> 3, row = (lane & 7) + 8 * (mi & 1), half = mi >> 1;
  float acc[3][3][4];
#pragma unroll
  for (int part = 0; part < 3; ++part) {
#pragma unroll
    for (int blk = 0; blk < 3; ++blk) acc[part][blk][0] = acc[part][blk][1] = acc[part][blk][2] = acc[part][blk][3] = 0.0f;
  }
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    // all 9 fragments of the step first, so their loads overlap (not one load per mma)
    uint2 f[kNTiles];
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) f[nt] = b(j, nt);
    uint32_t a[4];
    ldmatrix_x4(xs + (j * kMTok + row) * kSubCols + ((half ^ ((row >> 2) & 1)) * 8), a);
#pragma unroll
    for (int part = 0; part < 3; ++part) {
#pragma unroll
      for (int blk = 0; blk < 3; ++blk) {
        mma_bf16(acc[part][blk], a[0], a[1], a[2], a[3], f[part * 3 + blk].x, f[part * 3 + blk].y);
      }
    }
  }
#pragma unroll
  for (int blk = 0; blk < 3; ++blk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) d[blk][i] = acc[0][blk][i] + (acc[1][blk][i] + acc[2][blk][i]);
  }
  __syncwarp();  // the staging buffer is rewritten by the next sub-block
}

/// Stores one m-tile's partial (part `h` of `parts`) of chunk `chunk`: the dots from the mma C
/// layout (lane g*4+q: tokens g and g+8, rows blk*8 + 2q, +1), the sums of squares from the
/// even lanes.
__device__ __forceinline__ void store_partial(const N4Params& p, int64_t mt, int64_t chunk, int h, int lane,
                                              const float (&q)[3][4], float sq) {
  const int g = lane >> 2, qq = lane & 3;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int64_t tok = mt * kMTok + g + 8 * hh;
    if (tok >= p.T) continue;
    float* dst = p.partials + ((tok * p.chunks + chunk) * p.parts + h) * kPartial;
#pragma unroll
    for (int blk = 0; blk < 3; ++blk) {
      dst[blk * 8 + 2 * qq] = q[blk][2 * hh];
      dst[blk * 8 + 2 * qq + 1] = q[blk][2 * hh + 1];
    }
  }
  const int64_t t = mt * kMTok + (lane >> 1);
  if ((lane & 1) == 0 && t < p.T) p.partials[((t * p.chunks + chunk) * p.parts + h) * kPartial + kRows] = sq;
}

// mix_kernel (large T): one block per SM; the items (chunk, m-tile), chunk-major, are split into
// equal contiguous ranges, one per block. A block copies a chunk's B fragments (72 KB) into
// shared memory, then each warp takes the chunk's items of its range in turn and walks the 8
// sub-blocks of an item in order, loading the next sub-block (and the next item's mixes) while
// it computes this one. No block barrier inside a chunk.
__global__ void __launch_bounds__(kThreadsA, 1) mix_kernel(const N4Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const uint2* frag_s = reinterpret_cast<const uint2*>(smem);
  bf16_t* xs = reinterpret_cast<bf16_t*>(smem + kFragBytes) + warp * kXsWarp;
  const int tt = lane >> 1;
  pdl_launch_dependents();
  const int64_t mtiles = (p.T + kMTok - 1) / kMTok;
  const int64_t items = mtiles * p.chunks;
  const int64_t first = items * blockIdx.x / gridDim.x, last = items * (blockIdx.x + 1) / gridDim.x;
  bool waited = false;
  for (int64_t seg = first; seg < last;) {
    const int64_t chunk = seg / mtiles;
    const int64_t seg_end = last < (chunk + 1) * mtiles ? last : (chunk + 1) * mtiles;
    __syncthreads();  // every warp is done with the previous chunk's fragments
    // Weights, not a predecessor's output: the first copy overlaps the kernel before this one.
    const uint4* src = reinterpret_cast<const uint4*>(p.fn_frag + chunk * kFragUint2);
    for (int i = tid; i < kFragBytes / 16; i += kThreadsA) cp_async16(smem + 16 * i, src + i);
    if (!waited) {
      pdl_wait();
      waited = true;
    }
    // The first item's loads go out while the fragments arrive. Loads run two sub-blocks ahead
    // (n1, n2), across item boundaries; the next item's mixes load at the start of an item.
    const int64_t col = chunk * kChunkCols + (lane & 1) * 8;  // this lane's columns in sub-block 0
    const int64_t base = chunk * mtiles;
    int64_t it = seg + warp;
    SubIn n1, n2;
    MixIn mix;
    if (it < seg_end) {
      const int64_t t = (it - base) * kMTok + tt;
      load_mix(p, t, t < p.T, mix);
      load_sub(p, t, t < p.T, col, n1);
      load_sub(p, t, t < p.T, col + kSubCols, n2);
    }
    cp_async_wait_all();
    __syncthreads();

    for (; it < seg_end; it += kWarpsA) {
      const int64_t mt = it - base;
      const int64_t t = mt * kMTok + tt;
      const bool valid = t < p.T;
      PostWeights pw;
      if (p.has_post) pw = post_weights(mix.post, mix.comb);
      const int64_t it_next = it + kWarpsA;
      const int64_t t_next = (it_next - base) * kMTok + tt;
      const bool has_next = it_next < seg_end, valid_next = has_next && t_next < p.T;
      if (has_next) load_mix(p, t_next, valid_next, mix);
      float q[3][4] = {}, q0[3][4], sq = 0.0f, sq0 = 0.0f;
      for (int sub = 0; sub < kSubs; ++sub) {
        const SubIn cur = n1;
        n1 = n2;
        if (sub + 2 < kSubs) {
          load_sub(p, t, valid, col + (sub + 2) * kSubCols, n2);
        } else if (has_next) {
          load_sub(p, t_next, valid_next, col + (sub + 2 - kSubs) * kSubCols, n2);
        }
        float d[3][4], s;
        sub_block(p, cur, pw, t, valid, col + sub * kSubCols, xs, lane, SmemB{frag_s, sub, lane}, d, s);
        if (sub == kHalfSubs) {
#pragma unroll
          for (int blk = 0; blk < 3; ++blk) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              q0[blk][i] = q[blk][i];
              q[blk][i] = 0.0f;
            }
          }
          sq0 = sq;
          sq = 0.0f;
        }
#pragma unroll
        for (int blk = 0; blk < 3; ++blk) {
#pragma unroll
          for (int i = 0; i < 4; ++i) q[blk][i] += d[blk][i];
        }
        sq += s;
      }
#pragma unroll
      for (int blk = 0; blk < 3; ++blk) {
#pragma unroll
        for (int i = 0; i < 4; ++i) q[blk][i] = q0[blk][i] + q[blk][i];
      }
      store_partial(p, mt, chunk, 0, lane, q, sq0 + sq);
    }
    seg = seg_end;
  }
}

// mix_small_kernel (decode, small T): block (chunk, half) x token group; warp w owns sub-block
// half * 4 + w and keeps its B fragments (72 registers) for all its m-tiles. Per m-tile the 4
// warps' D go through shared memory and warp 0 forms Q_half in sub-block order: partials with
// parts = 2, whose sum the collapse forms.
__global__ void __launch_bounds__(kThreadsD, 2) mix_small_kernel(const N4Params p) {
  __shared__ __align__(16) bf16_t xs_all[kWarpsD * kXsWarp];
  __shared__ float red[kWarpsD][13][32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t chunk = blockIdx.x / 2;
  const int half = blockIdx.x % 2, sub = half * kHalfSubs + warp;
  bf16_t* xs = xs_all + warp * kXsWarp;
  const int tt = lane >> 1;
  pdl_launch_dependents();
  uint2 breg[kN][kNTiles];
  {
    const uint2* src = p.fn_frag + chunk * kFragUint2;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) breg[j][nt] = src[((j * kSubs + sub) * kNTiles + nt) * 32 + lane];
    }
  }
  pdl_wait();
  const int64_t mtiles = (p.T + kMTok - 1) / kMTok;
  const int64_t col = chunk * kChunkCols + sub * kSubCols + (lane & 1) * 8;
  int64_t mt = blockIdx.y;
  SubIn nxt;
  MixIn mix;
  if (mt < mtiles) {
    const int64_t t = mt * kMTok + tt;
    load_mix(p, t, t < p.T, mix);
    load_sub(p, t, t < p.T, col, nxt);
  }
  for (; mt < mtiles; mt += gridDim.y) {
    const int64_t t = mt * kMTok + tt;
    const bool valid = t < p.T;
    PostWeights pw;
    if (p.has_post) pw = post_weights(mix.post, mix.comb);
    const SubIn cur = nxt;
    const int64_t t_next = (mt + gridDim.y) * kMTok + tt;
    if (mt + gridDim.y < mtiles) {
      load_mix(p, t_next, t_next < p.T, mix);
      load_sub(p, t_next, t_next < p.T, col, nxt);
    }
    float d[3][4], s;
    sub_block(p, cur, pw, t, valid, col, xs, lane, RegB{breg}, d, s);
#pragma unroll
    for (int blk = 0; blk < 3; ++blk) {
#pragma unroll
      for (int i = 0; i < 4; ++i) red[warp][blk * 4 + i][lane] = d[blk][i];
    }
    red[warp][12][lane] = s;
    __syncthreads();
    if (warp == 0) {
      float q[3][4] = {}, sq = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarpsD; ++w) {
#pragma unroll
        for (int blk = 0; blk < 3; ++blk) {
#pragma unroll
          for (int i = 0; i < 4; ++i) q[blk][i] += red[w][blk * 4 + i][lane];
        }
        sq += red[w][12][lane];
      }
      store_partial(p, mt, chunk, half, lane, q, sq);
    }
    __syncthreads();  // red is rewritten by the next m-tile
  }
}

// collapse_kernel (phase B): 4 warps; kCollapseTokens / wpt tokens per block, wpt warps per
// token (p.collapse_wpt: 1 at large T, 4 at small T). Per token:
//   1. the block's threads sum its partials in a fixed order: chunk groups g = 0..7 (chunks
//      g, g + 8, .. in order), then the groups in order;
//   2. lanes 0.. of warp 0 run the epilogue (sigmoids, Sinkhorn) of the block's tokens, one
//      token per lane, side by side;
//   3. its warps collapse the row, 16-byte vectors v; vector v belongs to slot v % 128. The
//      RMSNorm fold keeps the rounded row in shared memory and sums its squares per slot
//      (vectors in order), then over the 32 slots of each group g = slot / 32 (fixed butterfly),
//      then ((g0 + g1) + g2) + g3: the same arithmetic for wpt = 1 (one warp: 4 slot sums per
//      lane) and wpt = 4 (warp g: one), so the choice never changes a token's result.
constexpr int kCollapseWarps = 4;
constexpr int kThreadsB = kCollapseWarps * 32;
constexpr int kSlots = kCollapseWarps * 32;  // 128

/// Collapsed (not yet normed) bf16 row vector v of token row `x` with weights `pre`.
__device__ __forceinline__ uint4 collapse8(const N4Params& p, const bf16_t* x, int64_t v, bool weighted,
                                           const float (&pre)[kN], float pre_scale) {
  if (p.pre_source == PreSource::kIdentity) return ld16(x + v * 8);
  if (weighted) {
    // Each output rounded once from the exact sum; the streams are read for the last time
    // here (streaming loads).
    uint4 r[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) r[j] = ldcs16(x + j * p.x_stream_stride + v * 8);
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float v0[kN], v1[kN], abs0 = 0.0f, abs1 = 0.0f;
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        const uint32_t xw = word(r[j], i);
        v0[j] = __uint_as_float(xw << 16);
        v1[j] = __uint_as_float(xw & 0xffff0000u);
        abs0 += fabsf(v0[j]);
        abs1 += fabsf(v1[j]);
      }
      w[i] = exact_sum_bf16x2(pre, v0, v1, sum_error_bound(pre_scale, abs0), sum_error_bound(pre_scale, abs1));
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
  // the mean head: the exact sum (double), divided by n, rounded once
  double acc[8];
  float f[8];
  unpack8(ld16(x + v * 8), f);
#pragma unroll
  for (int e = 0; e < 8; ++e) acc[e] = f[e];
#pragma unroll
  for (int j = 1; j < kN; ++j) {
    unpack8(ld16(x + j * p.x_stream_stride + v * 8), f);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] += f[e];
  }
  uint32_t w[4];
#pragma unroll
  for (int e = 0; e < 8; e += 2) {
    w[e / 2] = static_cast<uint32_t>(double_to_bf16_bits(acc[e] / kN)) |
               (static_cast<uint32_t>(double_to_bf16_bits(acc[e + 1] / kN)) << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ float sum_squares8(const uint4& u, float acc) {
  float f[8];
  unpack8(u, f);
#pragma unroll
  for (int e = 0; e < 8; ++e) acc = fmaf(f[e], f[e], acc);
  return acc;
}

__device__ __forceinline__ float warp_butterfly(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__global__ void __launch_bounds__(kThreadsB) collapse_kernel(const N4Params p) {
  extern __shared__ __align__(16) unsigned char row_smem[];  // rounded rows (RMSNorm fold)
  __shared__ float s_part[kCollapseWarps][kPartialSplit][kPartial];
  __shared__ float s_dot[kCollapseWarps][kPartial];
  __shared__ float s_pre[kCollapseWarps][kN];
  __shared__ float s_grp[kCollapseWarps][kCollapseWarps];
  pdl_launch_dependents();
  pdl_wait();  // the partials (and the streams) come from the kernels before this one
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wpt = p.collapse_wpt, tokens = kCollapseWarps / wpt;
  const int tl = warp / wpt, sw = warp % wpt;  // this warp's token in the block, its part of it
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * tokens;
  const int64_t t = t0 + tl;
  const bool valid = t < p.T;
  if (p.has_mixes) {
    // Task (token, group g, row r) sums the chunks g, g + 8, .. in order (all its loads in
    // flight at once); then (token, r) adds the 8 group sums in order. A chunk's partial is
    // Q_0 + Q_1 when the mix kernel left its two halves (parts = 2).
    for (int task = tid; task < tokens * kPartialSplit * kPartial; task += kThreadsB) {
      const int k = task / (kPartialSplit * kPartial), g = task / kPartial % kPartialSplit, r = task % kPartial;
      if (t0 + k >= p.T) continue;
      const float* src = p.partials + (t0 + k) * p.chunks * p.parts * kPartial + r;
      float v[kMaxChunks / kPartialSplit];
#pragma unroll
      for (int i = 0; i < kMaxChunks / kPartialSplit; ++i) {
        const int c = g + i * kPartialSplit;
        if (c >= p.chunks) {
          v[i] = 0.0f;
        } else if (p.parts == 2) {
          v[i] = src[2 * c * kPartial] + src[(2 * c + 1) * kPartial];
        } else {
          v[i] = src[c * kPartial];
        }
      }
      float sum = v[0];
#pragma unroll
      for (int i = 1; i < kMaxChunks / kPartialSplit; ++i) sum += v[i];
      s_part[k][g][r] = sum;
    }
    __syncthreads();
    for (int task = tid; task < tokens * kPartial; task += kThreadsB) {
      const int k = task / kPartial, r = task % kPartial;
      float sum = s_part[k][0][r];
#pragma unroll
      for (int g = 1; g < kPartialSplit; ++g) sum += s_part[k][g][r];
      s_dot[k][r] = sum;
    }
  }
  if (warp == 0 && lane < tokens && t0 + lane < p.T) {
    const int64_t tk = t0 + lane;
    if (p.has_mixes) {
      float pre[kN];
      mixes_epilogue<kN>(p.epi, s_dot[lane], s_dot[lane][kRows], p.inv_k, tk, pre);
#pragma unroll
      for (int j = 0; j < kN; ++j) s_pre[lane][j] = pre[j];
    }
    if (p.pre_source == PreSource::kCarried) {
#pragma unroll
      for (int j = 0; j < kN; ++j) s_pre[lane][j] = p.pre_mix_in[tk * p.pre_mix_in_stride + j];
    }
  }
  if (!p.has_collapse) return;
  __syncthreads();
  const int64_t vecs = p.H / 8;
  const bool fold = p.rmsnorm_weight != nullptr;
  const bool weighted = p.pre_source != PreSource::kIdentity && !p.head_mean;
  float pre[kN];
#pragma unroll
  for (int j = 0; j < kN; ++j) pre[j] = weighted ? s_pre[tl][j] : 0.0f;
  const float pre_scale = weighted ? sum_error_scale(pre) : 0.0f;
  const bf16_t* x = p.x + (valid ? t : 0) * p.x_stride;
  bf16_t* dst = p.layer_input + (valid ? t : 0) * p.layer_input_stride;
  uint4* row = reinterpret_cast<uint4*>(row_smem) + tl * vecs;
  // This warp's vectors: v = m * 32 + lane for m = sw, sw + wpt, ..; slot group g = m % 4.
  float acc[kCollapseWarps] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (valid) {
    for (int64_t m0 = 0; m0 * 32 < vecs; m0 += kCollapseWarps) {
#pragma unroll
      for (int g = 0; g < kCollapseWarps; ++g) {
        const int64_t v = (m0 + g) * 32 + lane;
        if ((wpt == 1 || g == sw) && v < vecs) {
          const uint4 u = collapse8(p, x, v, weighted, pre, pre_scale);
          if (fold) {
            row[v] = u;  // read back below by this lane only
            acc[g] = sum_squares8(u, acc[g]);
          } else {
            st16(dst + v * 8, u);
          }
        }
      }
    }
  }
  if (!fold) return;
  float total;
  if (wpt == 1) {
    total = ((warp_butterfly(acc[0]) + warp_butterfly(acc[1])) + warp_butterfly(acc[2])) + warp_butterfly(acc[3]);
  } else {
    const float b = warp_butterfly(acc[sw]);
    if (lane == 0) s_grp[tl][sw] = b;
    __syncthreads();
    total = ((s_grp[tl][0] + s_grp[tl][1]) + s_grp[tl][2]) + s_grp[tl][3];
  }
  if (!valid) return;
  const float inv = 1.0f / sqrtf(total / static_cast<float>(p.H) + p.rmsnorm_eps);
  for (int64_t m = sw; m * 32 < vecs; m += wpt) {
    const int64_t v = m * 32 + lane;
    if (v >= vecs) break;
    float f[8], w[8], y[8];
    unpack8(row[v], f);
    unpack8(ld16(p.rmsnorm_weight + v * 8), w);
#pragma unroll
    for (int e = 0; e < 8; ++e) y[e] = f[e] * inv * w[e];
    st16(dst + v * 8, pack8(y));
  }
}

/// post alone: one thread per (token, 8 columns), all 4 streams.
__global__ void __launch_bounds__(256, 3) post_kernel(const N4Params p) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t vecs = p.H / 8;
  const int64_t total = p.T * vecs;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / vecs, v = i % vecs;
    const bf16_t* res = p.residual + t * p.residual_stride + v * 8;
    uint4 r[kN], out[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) r[j] = ld16(res + j * p.res_stream_stride);
    const uint4 lo = ld16(p.layer_output + t * p.layer_output_stride + v * 8);
    float post[kN], comb[kN * kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) post[j] = __ldg(p.post_mix + t * p.post_mix_stride + j);
#pragma unroll
    for (int j = 0; j < kN * kN; ++j) comb[j] = __ldg(p.comb_mix + t * p.comb_mix_stride + j);
    post8(post_weights(post, comb), r, lo, out);
    bf16_t* dst = p.residual_out + t * p.residual_out_stride + v * 8;
#pragma unroll
    for (int j = 0; j < kN; ++j) st16(dst + j * p.H, out[j]);
  }
}

// Launches `kernel(p)`, with programmatic dependent launch where the device has it (sm_90+):
// the kernel's prologue (weight loads, block scheduling) overlaps the end of the one before.
template <typename Kernel>
void launch(Kernel kernel, dim3 grid, int threads, size_t smem, const detail::Problem& problem, const N4Params& p) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = static_cast<cudaStream_t>(problem.stream);
  cfg.attrs = &attr;
  cfg.numAttrs = problem.workspace->cc_major >= 9 ? 1 : 0;
  MHC_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
}

// collapse_kernel over k.T tokens: four warps per token up to 8 blocks per multiprocessor's
// worth of tokens (an L2 slice of the large-T path, decode), else one. Same bits either way.
void launch_collapse(const detail::Problem& problem, N4Params k) {
  const int64_t sms = problem.workspace->num_sms;
  k.collapse_wpt = k.T > 8 * sms * kCollapseWarps ? 1 : kCollapseWarps;
  const int64_t tokens = kCollapseWarps / k.collapse_wpt;
  const int64_t blocks = (k.T + tokens - 1) / tokens;
  const size_t row_bytes = k.has_collapse && k.rmsnorm_weight != nullptr ? static_cast<size_t>(tokens * k.H * 2) : 0;
  launch(collapse_kernel, dim3(static_cast<unsigned>(blocks)), kThreadsB, row_bytes, problem, k);
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }
bool rows16(const void* ptr, int64_t stride) { return ptr == nullptr || (aligned16(ptr) && stride % 8 == 0); }

// Offsets every token-indexed pointer of `p` by `t0` tokens.
N4Params slice(N4Params p, int64_t t0, int64_t count) {
  p.T = count;
  if (p.residual) p.residual += t0 * p.residual_stride;
  if (p.layer_output) p.layer_output += t0 * p.layer_output_stride;
  if (p.post_mix) p.post_mix += t0 * p.post_mix_stride;
  if (p.comb_mix) p.comb_mix += t0 * p.comb_mix_stride;
  if (p.residual_out) p.residual_out += t0 * p.residual_out_stride;
  if (p.pre_mix_in) p.pre_mix_in += t0 * p.pre_mix_in_stride;
  if (p.x) p.x += t0 * p.x_stride;
  if (p.layer_input) p.layer_input += t0 * p.layer_input_stride;
  if (p.epi.pre_mix_out) p.epi.pre_mix_out += t0 * p.epi.pre_mix_out_stride;
  if (p.epi.post_mix_out) p.epi.post_mix_out += t0 * p.epi.post_mix_out_stride;
  if (p.epi.comb_mix_out) p.epi.comb_mix_out += t0 * p.epi.comb_mix_out_stride;
  return p;
}

}  // namespace

bool n4_supports(const detail::Problem& p) {
  if (p.device.type != DeviceType::kCUDA || p.n != kN || p.H % 512 != 0 || p.H > 16384) return false;
  if (p.has_mixes_stage() && (p.weights == nullptr || p.weights->d_fn_frag == nullptr)) return false;
  return rows16(p.residual, p.residual_stride) && rows16(p.layer_output, p.layer_output_stride) &&
         rows16(p.residual_out, p.residual_out_stride) && rows16(p.layer_input, p.layer_input_stride) &&
         (p.rmsnorm_weight == nullptr || aligned16(p.rmsnorm_weight));
}

void n4_run(const detail::Problem& p) {
  MHC_CHECK(n4_supports(p), detail::op_name(p.op), ": cuda_n4 does not support this call");
  MHC_CHECK(p.workspace != nullptr && p.workspace->scratch != nullptr, detail::op_name(p.op),
            ": cuda_n4 needs a workspace (mhc::Workspace::create)");
  N4Params k{};
  k.T = p.T;
  k.H = p.H;
  k.chunks = static_cast<int32_t>(p.H / kChunkCols);
  k.has_post = p.has_post_stage();
  k.residual = p.residual;
  k.residual_stride = p.residual_stride;
  k.res_stream_stride = p.residual_broadcast ? 0 : p.H;
  k.layer_output = p.layer_output;
  k.layer_output_stride = p.layer_output_stride;
  k.post_mix = p.post_mix;
  k.post_mix_stride = p.post_mix_stride;
  k.comb_mix = p.comb_mix;
  k.comb_mix_stride = p.comb_mix_stride;
  k.residual_out = p.residual_out;
  k.residual_out_stride = p.residual_out_stride;
  k.has_mixes = p.has_mixes_stage();
  k.has_collapse = p.has_collapse_stage();
  k.pre_source = p.pre_source;
  k.head_mean = p.mean_head();
  k.pre_mix_in = p.pre_mix_in;
  k.pre_mix_in_stride = p.pre_mix_in_stride;
  // The collapse reads the new residual (post_pre), or the input streams.
  if (k.has_post) {
    k.x = p.residual_out;
    k.x_stride = p.residual_out_stride;
    k.x_stream_stride = p.H;
  } else {
    k.x = p.residual;
    k.x_stride = p.residual_stride;
    k.x_stream_stride = k.res_stream_stride;
  }
  k.rmsnorm_weight = p.rmsnorm_weight;
  k.rmsnorm_eps = p.rmsnorm_eps;
  k.layer_input = p.layer_input;
  k.layer_input_stride = p.layer_input_stride;
  k.epi = make_epilogue(p);
  k.inv_k = 1.0f / static_cast<float>(kN * p.H);
  if (p.weights != nullptr) k.fn_frag = reinterpret_cast<const uint2*>(p.weights->d_fn_frag);
  k.partials = static_cast<float*>(p.workspace->scratch);

  if (p.op == detail::Op::kPost) {
    const int64_t total = p.T * (p.H / 8);
    const int64_t blocks_needed = (total + 255) / 256;
    const int64_t cap = static_cast<int64_t>(p.workspace->num_sms) * 16;
    launch(post_kernel, dim3(static_cast<unsigned>(blocks_needed < cap ? blocks_needed : cap)), 256, 0, p, k);
    return;
  }
  const int64_t capacity = static_cast<int64_t>(p.workspace->scratch_bytes / sizeof(float));
  if (k.has_mixes && p.T <= kSmallMaxT && p.T * k.chunks * 2 * kPartial <= capacity) {
    // Small T: mix_small_kernel, about three blocks per multiprocessor, one launch for all T
    // tokens (n4_scratch_bytes reserves their partials up to max_tokens). Both paths give the
    // same bits, so the choice never changes a token's result.
    k.parts = 2;
    const int64_t mtiles = (p.T + kMTok - 1) / kMTok;
    int64_t groups = 3 * static_cast<int64_t>(p.workspace->num_sms) / (2 * k.chunks);
    groups = groups < 1 ? 1 : (groups < mtiles ? groups : mtiles);
    launch(mix_small_kernel, dim3(static_cast<unsigned>(2 * k.chunks), static_cast<unsigned>(groups)), kThreadsD, 0,
           p, k);
    launch_collapse(p, k);
    return;
  }
  // Large T: token slices that fit the workspace's partials (whole m-tiles).
  k.parts = 1;
  int64_t slice_tokens = capacity / (static_cast<int64_t>(k.chunks) * kPartial);
  slice_tokens -= slice_tokens % kMTok;
  MHC_CHECK(slice_tokens >= kMTok || !k.has_mixes, detail::op_name(p.op), ": workspace too small for H = ", p.H);
  if (!k.has_mixes) slice_tokens = p.T;
  // When the collapse re-reads the streams the mixes just read (or wrote), a slice's streams
  // (8H bytes a token) fit in half the L2, so the collapse reads them from L2, not DRAM. The
  // slice is a whole number of rounds of mix_kernel's warps (items = chunks x m-tiles), so that
  // every warp of a slice has the same number of items. Slicing never changes a token's result
  // (batch invariance): each token's arithmetic is the same in every slice.
  const int64_t slots = static_cast<int64_t>(p.workspace->num_sms) * kWarpsA;
  if (k.has_mixes && k.has_collapse && p.workspace->l2_bytes > 0) {
    const int64_t l2_tokens = static_cast<int64_t>(p.workspace->l2_bytes) / 2 / (8 * p.H);
    int64_t rounds = l2_tokens / kMTok * k.chunks / slots;
    rounds = rounds < 1 ? 1 : rounds;
    const int64_t tokens = rounds * slots / k.chunks * kMTok;
    if (tokens >= kMTok && tokens < slice_tokens) slice_tokens = tokens;
  }
  for (int64_t t0 = 0; t0 < p.T; t0 += slice_tokens) {
    const int64_t count = p.T - t0 < slice_tokens ? p.T - t0 : slice_tokens;
    const N4Params s = slice(k, t0, count);
    if (s.has_mixes) {
      const int64_t items = (count + kMTok - 1) / kMTok * k.chunks;
      const int64_t blocks = items < p.workspace->num_sms ? items : p.workspace->num_sms;
      launch(mix_kernel, dim3(static_cast<unsigned>(blocks)), kThreadsA, kMixSmem, p, s);
    }
    launch_collapse(p, s);
  }
}

void n4_configure_device() {
  MHC_CUDA_CHECK(cudaFuncSetAttribute(mix_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMixSmem));
  // collapse_kernel: up to 4 rounded rows of H = 16384 (RMSNorm fold)
  MHC_CUDA_CHECK(cudaFuncSetAttribute(collapse_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      kCollapseWarps * 16384 * 2));
}

size_t n4_scratch_bytes(int64_t max_tokens) {
  // One slice holds up to min(max_tokens, 16384) tokens at H = 7168 (56 chunks); larger H or T
  // run as several slices. Never less than one m-tile at the largest H.
  // The small-T path keeps two partials per chunk for up to kSmallMaxT tokens at any H.
  int64_t tokens = max_tokens < 16384 ? max_tokens : 16384;
  const int64_t floats = tokens * 56 * kPartial;
  const int64_t small = max_tokens < kSmallMaxT ? max_tokens : kSmallMaxT;
  int64_t minimum = small * kMaxChunks * 2 * kPartial;
  if (minimum < kMTok * kMaxChunks * kPartial) minimum = kMTok * kMaxChunks * kPartial;
  return static_cast<size_t>(floats > minimum ? floats : minimum) * sizeof(float);
}

std::vector<uint32_t> n4_fragments(const PreparedWeights::Impl& w) {
  if (w.n != kN || w.H % 512 != 0 || w.H > 16384) return {};
  const int64_t H = w.H, K = kN * H, chunks = H / kChunkCols;
  // part(r, k, pp): the pp-th bf16 term of fn[r, k] (rows past w.rows are zero: a learned head).
  auto part = [&](int r, int64_t k, int pp) -> uint16_t {
    if (r >= w.rows) return 0;
    float rem = w.fn[r * K + k];
    uint16_t b = 0;
    for (int i = 0; i <= pp; ++i) {
      b = detail::float_to_bf16(rem);
      rem -= detail::bf16_to_float(b);
    }
    return b;
  };
  std::vector<uint32_t> out(static_cast<size_t>(chunks * kFragUint2 * 2));
  size_t idx = 0;
  // [chunk][step S][n-tile][lane]: step S = j * 8 + sub covers columns sub * 16 .. + 16 of the
  // chunk in stream j; n-tile nt holds part nt / 3 of rows (nt % 3) * 8 .. + 8 (mma B layout:
  // lane g*4+q has k = 2q, 2q+1 and 2q+8, 2q+9 of row g).
  for (int64_t c = 0; c < chunks; ++c) {
    for (int S = 0; S < kSteps; ++S) {
      const int j = S / kSubs;
      const int64_t hl = (S % kSubs) * kSubCols;
      for (int nt = 0; nt < kNTiles; ++nt) {
        const int pp = nt / 3;
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, q = lane % 4;
          const int r = (nt % 3) * 8 + g;
          const int64_t k0 = j * H + c * kChunkCols + hl + 2 * q;
          out[idx++] = part(r, k0, pp) | (static_cast<uint32_t>(part(r, k0 + 1, pp)) << 16);
          out[idx++] = part(r, k0 + 8, pp) | (static_cast<uint32_t>(part(r, k0 + 9, pp)) << 16);
        }
      }
    }
  }
  return out;
}

}  // namespace mhc::cuda

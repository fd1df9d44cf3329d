// src/cuda/n4.cu - the n = 4 fast path of every operator (H % 512 == 0, H <= 16384).
//
// What it computes: the same per-token pipeline as the generic path (post -> mixes ->
// collapse), in two kernels:
//   mix_kernel (phase A)     one block per multiprocessor, each with an equal range of the
//                            (chunk, 32-token tile) items; a chunk is 128 hidden columns of all
//                            4 streams (a 512-wide K-slice). Warp-specialised: 16 post warps
//                            fill a 3-stage cp.async ring and run the post stage (16-byte
//                            vectors; the new residual goes to residual_out and back into the
//                            stage); 4 mma warps take the tile's 24 dot products over the
//                            K-slice on tensor cores: mma.m16n8k16 bf16 with x (exact in bf16)
//                            against fn split into three bf16 parts (hi + mid + lo), fp32
//                            accumulate. Plus each token's sum of squares. Partials go to the
//                            workspace [token][chunk][25].
//   collapse_kernel (phase B) one block per token: sums the partials over chunks in a fixed
//                            order, runs the epilogue (sigmoids, Sinkhorn) on one thread, then
//                            the collapse and the RMSNorm fold with 16-byte vectors.
// post alone uses post_kernel (16-byte vectors, one thread per 8 columns of all 4 streams).
// Post and collapse sums: exact_sum_bf16x2 (common.cuh), the exact sum rounded once, two
// adjacent columns certified together.
// Determinism / batch invariance: every token's partial for a chunk comes from the same
// instruction sequence wherever the token sits in a tile, chunks are summed in a fixed order,
// and dispatch does not depend on T: a token's outputs do not depend on the batch.
// B fragments of a block's K-slice stay in shared memory (72 KB) for all its tiles of that chunk.
// Launches: programmatic dependent launch on sm_90+ (see pdl_wait). Tokens run in slices that
// fit the workspace's partials, of kSliceTokens where a collapse follows (n4_run).
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
constexpr int kRows = 24;             // (n+2)*n
constexpr int kChunkCols = 128;       // hidden columns per chunk
constexpr int kSliceK = kN * kChunkCols;  // 512
constexpr int kTile = 32;             // tokens per block iteration (two m16 mma tiles)
constexpr int kMTiles = kTile / 16;
constexpr int kNTiles = 9;            // 3 parts x 24 rows / 8
constexpr int kXStride = kSliceK + 8; // padded smem row (conflict-free 32-bit fragment loads)
constexpr int kPartial = kRows + 1;   // 24 dots + sum of squares
constexpr int kThreadsB = 256;
constexpr int kMaxChunks = 16384 / kChunkCols;  // 128
constexpr int kSliceTokens = 1920;  // tokens a slice with a collapse (n4_run)
constexpr int kPartialSplit = 8;      // chunk groups the collapse sums in parallel

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

__device__ __forceinline__ uint32_t word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

/// The terms of columns 2i and 2i + 1 of M vectors of 8 bf16 (the two halves of word i of each),
/// with their absolute sums in vector order.
template <int M>
__device__ __forceinline__ void column_pair(const uint4 (&vec)[M], int i, float (&v0)[M], float (&v1)[M],
                                            float& abs0, float& abs1) {
#pragma unroll
  for (int j = 0; j < M; ++j) {
    const uint32_t xw = word(vec[j], i);
    v0[j] = __uint_as_float(xw << 16);
    v1[j] = __uint_as_float(xw & 0xffff0000u);
    abs0 = j == 0 ? fabsf(v0[j]) : abs0 + fabsf(v0[j]);
    abs1 = j == 0 ? fabsf(v1[j]) : abs1 + fabsf(v1[j]);
  }
}

/// new[k] for 8 columns, each rounded once from the exact sum: the same bits as the generic path.
/// Per column pair, the 4 outputs run the branch-free fast path together (8 independent chains)
/// and are tested once; the rare uncertified ones (about 1 pair in 500) are redone in double.
__device__ __forceinline__ void post8(const PostWeights& pw, const uint4 (&res)[kN], const uint4& lo,
                                      uint4 (&out)[kN]) {
  // the terms in the order of the weights: layer output, then the 4 streams
  const uint4 terms[kN + 1] = {lo, res[0], res[1], res[2], res[3]};
  uint32_t w[kN][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float v0[kN + 1], v1[kN + 1], abs0, abs1;
    column_pair(terms, i, v0, v1, abs0, abs1);
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
        if (!certified[k]) w[k][i] = exact_sum_bf16x2_redo(pw.w[k], v0, v1);
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

// Asynchronous global -> shared copies (sm_80+). A copy with valid = false writes zeros and
// reads nothing. Streamed inputs carry an L2 evict-first hint (read once), so the new residual
// that the collapse re-reads stays in L2 longer.
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid, uint64_t policy) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(gmem),
               "r"(valid ? 16 : 0), "l"(policy)
               : "memory");
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, bool valid) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

struct N4Params {
  int64_t T;                 // tokens in this launch (a slice)
  int64_t H;
  int32_t chunks;            // H / 128
  // phase A inputs
  bool has_post;
  const bf16_t* residual; int64_t residual_stride; int64_t res_stream_stride;  // 0: broadcast
  const bf16_t* layer_output; int64_t layer_output_stride;
  const float* post_mix; int64_t post_mix_stride;
  const float* comb_mix; int64_t comb_mix_stride;
  const uint2* fn_frag;      // [chunks][4 mma warps][8 k16 steps][9 ntiles][32 lanes]
  bf16_t* residual_out; int64_t residual_out_stride;  // post output, or materialised copies
  float* partials;           // [T][chunks][25]
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

// mix_kernel: one block per multiprocessor, warp-specialised.
//   16 post warps (512 threads): one (token, 8-column vector) unit of all 4 streams each per
//     tile. They fill a ring of kStages tiles with cp.async, run the post stage, write the new
//     residual to residual_out and back into the stage in place (it is then the mma A operand),
//     and each token's sum of squares.
//   4 mma warps (128 threads): warp mw owns the 128 k's of stream mw of the chunk (8 k16 steps)
//     for both m16 tiles; B fragments of the chunk in shared memory. Their partial dots go to
//     red and are summed over the 4 warps in warp order.
// Hand-over: one __syncthreads per item i, which the post warps reach when stage i % 3 holds
// item i's new residual and the mma warps when they are done with item i - 1 (and its stage).
// The post stage of i + 1 then overlaps the mma of i, and the stage of i - 1 is refilled with
// i + 2. Both roles run one item loop (mix_kernel) with the barrier outside the role branches,
// each role's work being a function called before and one after it: compute-sanitizer
// synccheck reports a block-wide barrier reached inside role branches as divergent (H200:
// two __syncthreads sites, bar.sync 1, 640 at two sites, one non-inlined __syncthreads called
// from both roles). kMmaBar syncs the 4 mma warps.
// Work: the (chunk, tile) items in chunk-major order, split into equal contiguous ranges, one
// per block, so every multiprocessor has the same share at any H; a block reloads B when its
// range crosses into the next chunk.
constexpr int kPostWarps = 16;
constexpr int kPostThreads = kPostWarps * 32;
constexpr int kMmaWarps = kN;          // one per stream of the chunk
constexpr int kMmaThreads = kMmaWarps * 32;
constexpr int kThreadsA = kPostThreads + kMmaThreads;  // 640
constexpr int kMmaSteps = kChunkCols / 16;             // k16 steps per mma warp
constexpr int kStages = 3;
constexpr int kMmaBar = 1;  // the mma warps' named barrier (0 is __syncthreads)
// A stage: the streams [32 tokens][kXStride] (bf16, row = the 512 k's of the chunk, padded),
// layer_output [32][16 vectors], mixes [32][20] (post[4], comb[16]).
constexpr int kStageRes = kTile * kXStride * 2;            // 32.5 KB
constexpr int kStageLo = kTile * kChunkCols * 2;           // 8 KB
constexpr int kStageMix = kTile * (kN + kN * kN) * 4;      // 2.5 KB
constexpr int kStageBytes = kStageRes + kStageLo + kStageMix;
constexpr int kFragWords = kMmaWarps * kMmaSteps * kNTiles * 32;  // uint2 per chunk (72 KB)
constexpr int kFragBytes = kFragWords * 8;
constexpr int kRedFloats = kMmaWarps * kTile * kRows;      // [4 warps][32 tokens][24]
constexpr int kMixSmem = kStages * kStageBytes + kFragBytes + 2 * kRedFloats * 4;
static_assert(kStageBytes % 16 == 0 && kFragBytes % 16 == 0, "smem layout");
static_assert(kMixSmem <= 227 * 1024, "mix_kernel shared memory");
static_assert(kPostThreads == kTile * (kChunkCols / 8), "one post thread per (token, 8 columns)");

__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// threadIdx.x read where it is used (volatile: not hoisted out of mix_kernel's item loop, so the
// two roles' per-thread constants are not all live across the loop at once).
__device__ __forceinline__ int thread_index() {
  int t;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
  return t;
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& a0, uint32_t& a1, uint32_t& a2, uint32_t& a3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3)
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void cp_async16_keep(void* smem, const void* gmem) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem) : "memory");
}

// The (chunk, tile) items of this block: [begin, begin + count) in chunk-major order (32-bit:
// n4_run keeps tiles x chunks of a launch below 2^31).
struct MixItems {
  int tiles, begin, count;
  __device__ MixItems(int64_t T, int chunks) {
    tiles = static_cast<int>((T + kTile - 1) / kTile);
    const int64_t items = static_cast<int64_t>(tiles) * chunks;
    begin = static_cast<int>(items * blockIdx.x / gridDim.x);
    count = static_cast<int>(items * (blockIdx.x + 1) / gridDim.x) - begin;
  }
  __device__ int chunk(int i) const { return (begin + i) / tiles; }
  __device__ int64_t tile(int i) const { return begin + i - chunk(i) * tiles; }
};

// Post thread (tt, cv): token row tt of the tile, 8-column vector cv. It reads from a stage
// exactly the 16-byte vectors it copied there; a token's mixes are copied by its 16 lanes (one
// warp half) and read after a __syncwarp.
__device__ __forceinline__ void issue_tile(const N4Params& p, unsigned char* stage, int64_t tile, int chunk,
                                           int tt, int cv) {
  const uint64_t policy = evict_first_policy();  // made here: not held in registers across the post stage
  const int streams = p.res_stream_stride == 0 ? 1 : kN;  // broadcast: one row, used n times
  const int64_t col0 = static_cast<int64_t>(chunk) * kChunkCols + cv * 8;
  const int64_t t = tile * kTile + tt;
  const bool valid = t < p.T;
  const int64_t tc = valid ? t : 0;  // an address inside the tensor for the zero-fill copies
  bf16_t* res_s = reinterpret_cast<bf16_t*>(stage) + tt * kXStride + cv * 8;
  const bf16_t* res = p.residual + tc * p.residual_stride + col0;
  for (int j = 0; j < streams; ++j) cp_async16(res_s + j * kChunkCols, res + j * p.res_stream_stride, valid, policy);
  if (p.has_post) {
    uint4* lo_s = reinterpret_cast<uint4*>(stage + kStageRes);
    cp_async16(&lo_s[tt * 16 + cv], p.layer_output + tc * p.layer_output_stride + col0, valid, policy);
    float* mix_s = reinterpret_cast<float*>(stage + kStageRes + kStageLo) + tt * (kN + kN * kN);
    if (cv < kN) cp_async4(mix_s + cv, p.post_mix + tc * p.post_mix_stride + cv, valid);
    cp_async4(mix_s + kN + cv, p.comb_mix + tc * p.comb_mix_stride + cv, valid);
  }
}

// The post warps' first kStages - 1 items into the ring.
__device__ __forceinline__ void mix_post_prologue(const N4Params& p, unsigned char* smem, const MixItems& items) {
  const int tid = thread_index();
  const int tt = tid >> 4, cv = tid & 15;
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < items.count) issue_tile(p, smem + i * kStageBytes, items.tile(i), items.chunk(i), tt, cv);
    cp_async_commit();
  }
}

// A post thread's part of item i before the hand-over: the post stage in place in stage i % 3,
// residual_out, and the token's sum of squares.
__device__ __forceinline__ void mix_post_item(const N4Params& p, unsigned char* smem, const MixItems& items, int i) {
  const int tid = thread_index();
  const int tt = tid >> 4, cv = tid & 15;  // token row and 8-column vector (issue_tile)
  // p.res_stream_stride == 0: a broadcast residual, one row for the 4 streams (tested where used:
  // a hoisted flag cost ptxas a spill at the 96-register bound).
  const int s = i % kStages;
  const int chunk = items.chunk(i);
  unsigned char* stage = smem + s * kStageBytes;
  cp_async_wait<kStages - 2>();  // this thread's copies of item i have landed
  __syncwarp();                  // and its token's mixes, copied by the other 15 lanes
  const int64_t t = items.tile(i) * kTile + tt;
  const bool valid = t < p.T;
  bf16_t* xrow = reinterpret_cast<bf16_t*>(stage) + tt * kXStride + cv * 8;
  uint4 x[kN];
  if (p.has_post && !valid) {
    // A padding row (zero-filled, left as is): its dots are never stored. Skipping post8
    // here matters: its all-zero sums never certify in fp32 (-0 vs +0 ends) and would all
    // take the double path.
#pragma unroll
    for (int j = 0; j < kN; ++j) x[j] = make_uint4(0, 0, 0, 0);
  } else if (p.has_post) {
    uint4 r[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) r[j] = ld16(xrow + (p.res_stream_stride == 0 ? 0 : j * kChunkCols));
    const uint4 lo = reinterpret_cast<const uint4*>(stage + kStageRes)[tt * 16 + cv];
    const float* mix = reinterpret_cast<const float*>(stage + kStageRes + kStageLo) + tt * (kN + kN * kN);
    post8(post_weights(mix, mix + kN), r, lo, x);
#pragma unroll
    for (int j = 0; j < kN; ++j) *reinterpret_cast<uint4*>(xrow + j * kChunkCols) = x[j];
  } else {
#pragma unroll
    for (int j = 0; j < kN; ++j) x[j] = ld16(xrow + (p.res_stream_stride == 0 ? 0 : j * kChunkCols));
    if (p.res_stream_stride == 0) {
#pragma unroll
      for (int j = 1; j < kN; ++j) *reinterpret_cast<uint4*>(xrow + j * kChunkCols) = x[j];
    }
  }
  if (valid && p.residual_out != nullptr) {
    bf16_t* out = p.residual_out + t * p.residual_out_stride + static_cast<int64_t>(chunk) * kChunkCols + cv * 8;
#pragma unroll
    for (int j = 0; j < kN; ++j) st16(out + j * p.H, x[j]);
  }
  float sq = 0.0f;
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    float f[8];
    unpack8(x[j], f);
#pragma unroll
    for (int e = 0; e < 8; ++e) sq = fmaf(f[e], f[e], sq);
  }
  // The token's 16 threads are 16 consecutive lanes: fixed-order butterfly.
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, off);
  if (cv == 0 && valid) p.partials[(t * p.chunks + chunk) * kPartial + kRows] = sq;
}

// After the hand-over of item i: the stage of item i - 1 is refilled with item i + 2.
__device__ __forceinline__ void mix_post_refill(const N4Params& p, unsigned char* smem, const MixItems& items, int i) {
  const int tid = thread_index();
  const int tt = tid >> 4, cv = tid & 15;
  const int next = i + kStages - 1;
  if (next < items.count) {
    issue_tile(p, smem + (next % kStages) * kStageBytes, items.tile(next), items.chunk(next), tt, cv);
  }
  cp_async_commit();
}

// The chunk's B fragments ([mw][ks][nt][lane] uint2, 72 KB) into shared memory, by the mma warps.
__device__ __forceinline__ void load_fragments(const N4Params& p, unsigned char* smem, int chunk, int tid) {
  const uint4* src = reinterpret_cast<const uint4*>(p.fn_frag + static_cast<int64_t>(chunk) * kFragWords);
  uint4* dst = reinterpret_cast<uint4*>(smem + kStages * kStageBytes);
  for (int v = tid; v < kFragBytes / 16; v += kMmaThreads) cp_async16_keep(dst + v, src + v);
}

// The mma warps before the hand-over of item i: where item i starts a chunk, its B fragments
// (the first chunk's were requested before pdl_wait; the previous chunk's were last read before
// the kMmaBar barrier of the previous item).
__device__ __forceinline__ void mix_mma_prepare(const N4Params& p, unsigned char* smem, const MixItems& items, int i,
                                                int& loaded) {
  const int chunk = items.chunk(i);
  if (chunk != loaded) {
    if (i > 0) load_fragments(p, smem, chunk, thread_index() - kPostThreads);
    cp_async_commit();
    cp_async_wait<0>();
    named_sync(kMmaBar, kMmaThreads);
    loaded = chunk;
  }
}

// The mma warps' part of item i after the hand-over: the tile's 24 dots of every token.
__device__ __forceinline__ void mix_mma_item(const N4Params& p, unsigned char* smem, const MixItems& items, int i) {
  const int tid = thread_index() - kPostThreads;  // 0..127
  const int lane = tid & 31, mw = tid >> 5;
  const int g = lane >> 2, q = lane & 3;
  const uint2* bs = reinterpret_cast<const uint2*>(smem + kStages * kStageBytes);
  float* red = reinterpret_cast<float*>(smem + kStages * kStageBytes + kFragBytes) + (i % 2) * kRedFloats;
  const int s = i % kStages;
  const int chunk = items.chunk(i);
  const int64_t tile = items.tile(i);
  const uint32_t xs = static_cast<uint32_t>(__cvta_generic_to_shared(smem + s * kStageBytes));
  // Per block of 8 rows (blk): both m16 tiles against the three parts of fn (n-tiles blk,
  // 3 + blk, 6 + blk): 6 independent accumulators, few enough registers that the fragment
  // loads of a k-step are issued together.
#pragma unroll
  for (int blk = 0; blk < 3; ++blk) {
    float acc[kMTiles][3][4];
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
      for (int pp = 0; pp < 3; ++pp) acc[m][pp][0] = acc[m][pp][1] = acc[m][pp][2] = acc[m][pp][3] = 0.0f;
    }
#pragma unroll
    for (int ks = 0; ks < kMmaSteps; ++ks) {
      const uint2* b = bs + ((mw * kMmaSteps + ks) * kNTiles + blk) * 32 + lane;
      uint2 bf[3];
#pragma unroll
      for (int pp = 0; pp < 3; ++pp) bf[pp] = b[pp * 3 * 32];
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) {
        // A: rows m*16 + (lane % 16), k = mw*128 + ks*16 + (lane / 16)*8 (ldmatrix x4 gives the
        // m16k16 fragment a0..a3).
        const int row = m * 16 + (lane & 15);
        const int k = mw * kChunkCols + ks * 16 + (lane >> 4) * 8;
        uint32_t a0, a1, a2, a3;
        ldmatrix_x4(xs + static_cast<uint32_t>((row * kXStride + k) * 2), a0, a1, a2, a3);
#pragma unroll
        for (int pp = 0; pp < 3; ++pp) mma_bf16(acc[m][pp], a0, a1, a2, a3, bf[pp].x, bf[pp].y);
      }
    }
    // The three parts summed in registers, hi + (mid + lo); red[warp][token][row] with
    // row = blk * 8 + 2q (+1).
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float2 v;
        v.x = acc[m][0][2 * h] + (acc[m][1][2 * h] + acc[m][2][2 * h]);
        v.y = acc[m][0][2 * h + 1] + (acc[m][1][2 * h + 1] + acc[m][2][2 * h + 1]);
        const int token = m * 16 + g + 8 * h;
        *reinterpret_cast<float2*>(&red[(mw * kTile + token) * kRows + blk * 8 + 2 * q]) = v;
      }
    }
  }
  named_sync(kMmaBar, kMmaThreads);
  // The tile's dots: the 4 warps' values in warp order. red[i % 2] is written again by item
  // i + 2, after the kMmaBar barrier of item i + 1, which every mma thread reaches after this.
#pragma unroll
  for (int k = 0; k < kTile * kRows / kMmaThreads; ++k) {
    const int idx = tid + k * kMmaThreads;
    const int token = idx / kRows, r = idx % kRows;
    const int64_t tok = tile * kTile + token;
    float v = red[token * kRows + r];
#pragma unroll
    for (int w = 1; w < kMmaWarps; ++w) v += red[(w * kTile + token) * kRows + r];
    if (tok < p.T) p.partials[(tok * p.chunks + chunk) * kPartial + r] = v;
  }
}

__global__ void __launch_bounds__(kThreadsA, 1) mix_kernel(const N4Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  pdl_launch_dependents();
  const MixItems items(p.T, p.chunks);
  if (threadIdx.x >= kPostThreads && items.count > 0) {
    // The first chunk's fragments are weights: their copies overlap the end of the kernel before.
    load_fragments(p, smem, items.chunk(0), threadIdx.x - kPostThreads);
  }
  pdl_wait();
  const bool post = threadIdx.x < kPostThreads;  // warp-uniform
  if (post) mix_post_prologue(p, smem, items);
  int loaded = -1;  // the chunk whose B fragments are in shared memory (mma warps)
  for (int i = 0; i < items.count; ++i) {
    if (post) {
      mix_post_item(p, smem, items, i);
    } else {
      mix_mma_prepare(p, smem, items, i, loaded);
    }
    __syncthreads();  // the hand-over of item i
    if (post) {
      mix_post_refill(p, smem, items, i);
    } else {
      mix_mma_item(p, smem, items, i);
    }
  }
}

// Five blocks per SM on Hopper (48 registers, the build measured on the H200); three elsewhere,
// where ptxas would spill at that bound.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
#define MHC_COLLAPSE_MIN_BLOCKS 5
#else
#define MHC_COLLAPSE_MIN_BLOCKS 3
#endif
__global__ void __launch_bounds__(kThreadsB, MHC_COLLAPSE_MIN_BLOCKS) collapse_kernel(const N4Params p) {
  extern __shared__ __align__(16) unsigned char row_smem[];  // the collapsed row (RMSNorm fold)
  __shared__ float scratch[kThreadsB / 32];
  __shared__ float s_part[kPartialSplit][kPartial];
  __shared__ float s_dot[kPartial];
  __shared__ float s_pre[kN];
  pdl_launch_dependents();
  pdl_wait();  // the partials (and the streams) come from the kernels before this one
  const int tid = threadIdx.x;
  const int64_t t = blockIdx.x;
  if (p.has_mixes) {
    // Sum of the partials over chunks in a fixed order, the same for every token: thread
    // (part, r) adds chunks part, part + 8, ... in order (all its loads in flight at once),
    // then thread r adds the 8 part sums in order.
    if (tid < kPartialSplit * kPartial) {
      const int part = tid / kPartial, r = tid % kPartial;
      const float* src = p.partials + t * p.chunks * kPartial + r;
      float v[kMaxChunks / kPartialSplit];
#pragma unroll
      for (int i = 0; i < kMaxChunks / kPartialSplit; ++i) {
        const int c = part + i * kPartialSplit;
        v[i] = c < p.chunks ? src[c * kPartial] : 0.0f;
      }
      float s = v[0];
#pragma unroll
      for (int i = 1; i < kMaxChunks / kPartialSplit; ++i) s += v[i];
      s_part[part][r] = s;
    }
    __syncthreads();
    if (tid < kPartial) {
      float s = s_part[0][tid];
#pragma unroll
      for (int i = 1; i < kPartialSplit; ++i) s += s_part[i][tid];
      s_dot[tid] = s;
    }
    __syncthreads();
    if (tid == 0) {
      float pre[kN];
      mixes_epilogue<kN>(p.epi, s_dot, s_dot[kRows], p.inv_k, t, pre);
      if (p.pre_source == PreSource::kComputed && !p.head_mean) {
#pragma unroll
        for (int j = 0; j < kN; ++j) s_pre[j] = pre[j];
      }
    }
  }
  if (!p.has_collapse) return;
  if (tid < kN && p.pre_source == PreSource::kCarried) s_pre[tid] = p.pre_mix_in[t * p.pre_mix_in_stride + tid];
  __syncthreads();
  const int64_t vecs = p.H / 8;
  const bf16_t* x = p.x + t * p.x_stride;
  bf16_t* dst = p.layer_input + t * p.layer_input_stride;
  uint4* row = reinterpret_cast<uint4*>(row_smem);
  const bool fold = p.rmsnorm_weight != nullptr;
  const bool weighted = p.pre_source != PreSource::kIdentity && !p.head_mean;
  float pre[kN];
#pragma unroll
  for (int j = 0; j < kN; ++j) pre[j] = weighted ? s_pre[j] : 0.0f;
  const float pre_scale = sum_error_scale(pre);
  float sq[1] = {0.0f};
  for (int64_t v = tid; v < vecs; v += kThreadsB) {
    uint4 u;
    if (p.pre_source == PreSource::kIdentity) {
      u = ld16(x + v * 8);
    } else if (weighted) {
      // Each output rounded once from the exact sum, adjacent columns certified together
      // (exact_sum_bf16x2); the streams are read for the last time here (streaming loads).
      uint4 r[kN];
#pragma unroll
      for (int j = 0; j < kN; ++j) r[j] = ldcs16(x + j * p.x_stream_stride + v * 8);
      uint32_t w[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float v0[kN], v1[kN], abs0, abs1;
        column_pair(r, i, v0, v1, abs0, abs1);
        w[i] = exact_sum_bf16x2(pre, v0, v1, sum_error_bound(pre_scale, abs0), sum_error_bound(pre_scale, abs1));
      }
      u = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
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
      u = make_uint4(w[0], w[1], w[2], w[3]);
    }
    if (!fold) {
      st16(dst + v * 8, u);
    } else {
      row[v] = u;  // read back below by this thread only
      float f[8];
      unpack8(u, f);
#pragma unroll
      for (int e = 0; e < 8; ++e) sq[0] = fmaf(f[e], f[e], sq[0]);
    }
  }
  if (!fold) return;
  block_sum(sq, scratch);
  const float inv = 1.0f / sqrtf(sq[0] / static_cast<float>(p.H) + p.rmsnorm_eps);
  for (int64_t v = tid; v < vecs; v += kThreadsB) {
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
  if (p.has_mixes_stage() && p.workspace != nullptr && !p.workspace->n4_mix) return false;
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
  // Token slices that fit the workspace's partials (multiples of the 32-token tile).
  const int64_t capacity = static_cast<int64_t>(p.workspace->scratch_bytes / sizeof(float));
  int64_t slice_tokens = capacity / (static_cast<int64_t>(k.chunks) * kPartial);
  slice_tokens -= slice_tokens % kTile;
  MHC_CHECK(slice_tokens >= kTile || !k.has_mixes, detail::op_name(p.op),
            ": workspace too small for H = ", p.H);
  if (!k.has_mixes) slice_tokens = p.T;
  // With a collapse, slices of kSliceTokens: of 320-1920 tokens a slice, 1312 and 1920 were the
  // fastest on the H200 (session 5: post_pre 36-39% of copy at T = 16384 against 33-34% with
  // slices whose streams fit in half the L2, pre 25-29% against 22-23%); the items then fill the
  // multiprocessors evenly and the collapse's waves are nearly full. The slicing never changes
  // a token's result (batch invariance): each token's arithmetic is the same in every slice.
  // MHC_N4_SLICE_TOKENS (a tuning override, a multiple of 32 within the partials) replaces it.
  const int64_t forced = k.has_mixes ? p.workspace->n4_slice_tokens / kTile * kTile : 0;
  const int64_t wanted = forced > 0 ? forced : k.has_mixes && k.has_collapse ? kSliceTokens : 0;
  if (wanted > 0 && wanted < slice_tokens) slice_tokens = wanted;
  for (int64_t t0 = 0; t0 < p.T; t0 += slice_tokens) {
    const int64_t count = p.T - t0 < slice_tokens ? p.T - t0 : slice_tokens;
    const N4Params s = slice(k, t0, count);
    if (s.has_mixes) {
      // One block per multiprocessor, each with an equal range of the (chunk, tile) items.
      const int64_t items = (count + kTile - 1) / kTile * k.chunks;
      MHC_CHECK(items < (int64_t{1} << 31), detail::op_name(p.op), ": too many tokens in one slice");
      const int64_t blocks = items < p.workspace->num_sms ? items : p.workspace->num_sms;
      launch(mix_kernel, dim3(static_cast<unsigned>(blocks)), kThreadsA, kMixSmem, p, s);
    }
    const size_t row_bytes = s.has_collapse && s.rmsnorm_weight != nullptr ? static_cast<size_t>(p.H) * 2 : 0;
    launch(collapse_kernel, dim3(static_cast<unsigned>(count)), kThreadsB, row_bytes, p, s);
  }
}

bool n4_configure_device() {
  int device = 0, optin = 0;
  MHC_CUDA_CHECK(cudaGetDevice(&device));
  MHC_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (optin < kMixSmem) return false;
  MHC_CUDA_CHECK(cudaFuncSetAttribute(mix_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMixSmem));
  return true;
}

size_t n4_scratch_bytes(int64_t max_tokens) {
  // One slice holds up to min(max_tokens, 16384) tokens at H = 7168 (56 chunks); larger H or T
  // run as several slices. Never less than one 32-token tile at the largest H.
  int64_t tokens = max_tokens < 16384 ? max_tokens : 16384;
  const int64_t floats = tokens * 56 * kPartial;
  const int64_t minimum = static_cast<int64_t>(kTile) * (16384 / kChunkCols) * kPartial;
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
            const int64_t k0 = mw * H + c * kChunkCols + ks * 16 + 2 * q;
            out[idx++] = part(r, k0, pp) | (static_cast<uint32_t>(part(r, k0 + 1, pp)) << 16);
            out[idx++] = part(r, k0 + 8, pp) | (static_cast<uint32_t>(part(r, k0 + 9, pp)) << 16);
          }
        }
      }
    }
  }
  return out;
}

}  // namespace mhc::cuda

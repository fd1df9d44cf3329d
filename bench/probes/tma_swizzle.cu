// bench/probes/tma_swizzle.cu - do gemm_wg_kernel's TMA copies and its swizzled wgmma operand
// read what the kernel assumes? One warpgroup, the layouts and wrappers of src/cuda/n4/wgmma.cuh:
//   1. a tensor map over x [T = 80][4 streams][H = 256] bf16 (token stride 4 H + 64, so rows are
//      not packed), two boxes of 64 tokens x 64 columns of stream 2 at column 128 from token 32
//      (48 rows in range, 16 past T: zeros) land in shared memory; every element read back
//      through a_vector_offset_sw128 must equal x (or 0 past T);
//   2. the 8 wgmma k16 steps of stream_dots_wg_sw128's chain (A from those boxes, B a known 72 x
//      128 matrix in the no-swizzle core-matrix layout) must give D = A B exactly (small-integer
//      values: every product and sum is exact in fp32).
// It prints the mismatch counts and exits 1 on any. Standalone, from the repository root:
//   nvcc -gencode arch=compute_90a,code=sm_90a -O2 -std=c++17 -I. -Iinclude -o /tmp/tma_probe \
//        bench/probes/tma_swizzle.cu && /tmp/tma_probe
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "src/cuda/n4/wgmma.cuh"

using namespace mhc::cuda;
using namespace mhc::cuda::n4;

constexpr int kT = 80, kH = 256, kStride = 4 * kH + 64, kStream = 2, kCol0 = 128, kTok0 = 32;
constexpr int kNCols = kNTiles * 8;  // 72

struct ProbeParams {
  CUtensorMap map;
  const uint16_t* b;  // [72][128] bf16 bits, B[n][k]
  uint16_t* a_out;    // [64][128] what the stage holds, read through a_vector_offset_sw128
  float* d_out;       // [64][72]
};

__global__ void probe(const __grid_constant__ ProbeParams pp) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // On the swizzle's 1024-byte period, as gemm_wg_kernel places its stages.
  unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  unsigned char* a = smem;                           // 16 KB: two boxes
  unsigned char* b = smem + kStageBytesWg;           // 18 KB: one stream's B
  const uint32_t bar = smem_addr(smem + kStageBytesWg + kBStreamBytes);
  const int t = threadIdx.x;
  // B in the core-matrix layout: (k_blk, n_blk) at (k_blk * 9 + n_blk) * 128, row n % 8, k % 8.
  for (int i = t; i < kNCols * kChunkCols; i += blockDim.x) {
    const int n = i / kChunkCols, k = i % kChunkCols;
    *reinterpret_cast<uint16_t*>(b + ((k / 8) * kNTiles + n / 8) * 128 + (n % 8) * 16 + (k % 8) * 2) = pp.b[i];
  }
  if (t == 0) {
    mbar_init(bar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  fence_proxy_async_shared();
  __syncthreads();
  if (t == 0) {
    mbar_expect_tx(bar, kStageBytesWg);
    for (int box = 0; box < 2; ++box) tma_load_box(smem_addr(a + box * kABoxBytes), &pp.map, kCol0 + 64 * box, kStream, kTok0, bar);
  }
  mbar_wait(bar, 0);
  for (int i = t; i < kWgTile * (kChunkCols / 8); i += blockDim.x) {
    const int m = i / (kChunkCols / 8), v = i % (kChunkCols / 8);
    const uint4 x = *reinterpret_cast<const uint4*>(a + a_vector_offset_sw128(m, v));
    *reinterpret_cast<uint4*>(pp.a_out + m * kChunkCols + v * 8) = x;
  }
  float d[36];
  for (int i = 0; i < 36; ++i) d[i] = 0.0f;
  wgmma_fence();
  for (int ks = 0; ks < kMmaSteps; ++ks) {
    wgmma_k16(d, a_desc_sw128(smem_addr(a), ks), wg_desc(smem_addr(b) + ks * 2 * kBLbo, kBLbo, kBSbo), ks > 0);
  }
  wgmma_commit_and_wait();
  const int w = t >> 5, lane = t & 31, g = lane >> 2, q = lane & 3;
  for (int nt = 0; nt < kNTiles; ++nt) {
    for (int e = 0; e < 4; ++e) {
      const int m = 16 * w + g + 8 * (e >> 1), n = 8 * nt + 2 * q + (e & 1);
      pp.d_out[m * kNCols + n] = d[4 * nt + e];
    }
  }
#endif
}

static uint16_t bf16_bits(float f) {
  const __nv_bfloat16 b = __float2bfloat16(f);
  uint16_t u;
  std::memcpy(&u, &b, 2);
  return u;
}
static float bits_float(uint16_t u) {
  uint32_t w = static_cast<uint32_t>(u) << 16;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      std::printf("%s: %s\n", #x, cudaGetErrorString(e_));                         \
      return 2;                                                                    \
    }                                                                              \
  } while (0)

int main() {
  std::vector<uint16_t> x(static_cast<size_t>(kT) * kStride), bm(kNCols * kChunkCols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = bf16_bits(static_cast<float>(static_cast<int>((i * 7919u) % 17u) - 8));
  for (size_t i = 0; i < bm.size(); ++i) bm[i] = bf16_bits(static_cast<float>(static_cast<int>((i * 104729u) % 9u) - 4));
  uint16_t *dx, *db, *da;
  float* dd;
  CHECK(cudaMalloc(&dx, x.size() * 2));
  CHECK(cudaMalloc(&db, bm.size() * 2));
  CHECK(cudaMalloc(&da, kWgTile * kChunkCols * 2));
  CHECK(cudaMalloc(&dd, kWgTile * kNCols * 4));
  CHECK(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, bm.data(), bm.size() * 2, cudaMemcpyHostToDevice));
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess) {
    std::printf("no cuTensorMapEncodeTiled\n");
    return 2;
  }
  ProbeParams pp{};
  const cuuint64_t dims[3] = {kH, 4, kT};
  const cuuint64_t strides[2] = {kH * 2, kStride * 2};
  const cuuint32_t box[3] = {64, 1, kWgTile}, unit[3] = {1, 1, 1};
  const CUresult made = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn)(
      &pp.map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, dx, dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (made != CUDA_SUCCESS) {
    std::printf("cuTensorMapEncodeTiled: %d\n", static_cast<int>(made));
    return 2;
  }
  pp.b = db;
  pp.a_out = da;
  pp.d_out = dd;
  const int smem = 1024 + kStageBytesWg + kBStreamBytes + 64;
  CHECK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  probe<<<1, kWgThreads, smem>>>(pp);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> a(kWgTile * kChunkCols);
  std::vector<float> d(kWgTile * kNCols);
  CHECK(cudaMemcpy(a.data(), da, a.size() * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost));
  int bad_a = 0, bad_d = 0;
  std::vector<uint16_t> ref(kWgTile * kChunkCols);  // the tile as x holds it (zeros past T)
  for (int m = 0; m < kWgTile; ++m) {
    for (int k = 0; k < kChunkCols; ++k) {
      const int tok = kTok0 + m;
      const uint16_t want = tok < kT ? x[static_cast<size_t>(tok) * kStride + kStream * kH + kCol0 + k] : 0;
      ref[m * kChunkCols + k] = want;
      if (a[m * kChunkCols + k] != want && ++bad_a <= 5) {
        std::printf("A m=%d k=%d: got %04x want %04x\n", m, k, a[m * kChunkCols + k], want);
      }
    }
    for (int n = 0; n < kNCols; ++n) {
      double want = 0;
      for (int k = 0; k < kChunkCols; ++k) want += static_cast<double>(bits_float(ref[m * kChunkCols + k])) * bits_float(bm[n * kChunkCols + k]);
      if (static_cast<double>(d[m * kNCols + n]) != want && ++bad_d <= 5) {
        std::printf("D m=%d n=%d: got %g want %g\n", m, n, d[m * kNCols + n], want);
      }
    }
  }
  std::printf("tma_swizzle: A %d of %d elements differ, D %d of %d differ\n", bad_a, kWgTile * kChunkCols, bad_d,
              kWgTile * kNCols);
  return bad_a == 0 && bad_d == 0 ? 0 : 1;
}

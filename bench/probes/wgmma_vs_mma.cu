// bench/probes/wgmma_vs_mma.cu - does a chain of wgmma.m64n8k16 (bf16 in, fp32 accumulate, A and
// B from shared memory) give the same bits as a chain of mma.sync.m16n8k16 over the same k16 steps?
// The n = 4 mixes' canonical order is defined by mma.m16n8k16 chains (src/cuda/n4/config.cuh); a
// prefill GEMM on wgmma may join the family only if the answer is yes. Standalone probe:
//   nvcc -gencode arch=compute_90a,code=sm_90a -O2 -o /tmp/wgmma_probe bench/probes/wgmma_vs_mma.cu && /tmp/wgmma_probe
// Each block (one warpgroup) draws a random A [64 x 16*S] and B [16*S x 8] (bf16 with exponents
// spread over 2^-12..2^12, signs mixed, some exact cancellations), then computes D = A B three
// ways: mma.sync chains (each warp its 16 rows), wgmma chains with the two possible readings of
// the no-swizzle descriptor's offsets, and a float64 reference. It prints, per way, how many
// D elements differ in bits from the mma chain and the largest relative error against float64.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

constexpr int kM = 64, kN = 8, kSteps = 8, kK = 16 * kSteps;

__device__ uint32_t hash(uint32_t x) {
  x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
  return x;
}
__device__ __nv_bfloat16 draw(uint32_t seed) {
  const uint32_t h = hash(seed);
  const int e = static_cast<int>(h % 25) - 12;
  const float m = 1.0f + static_cast<float>((h >> 8) & 127) / 128.0f;
  float v = ldexpf(m, e) * ((h >> 20) & 1 ? -1.0f : 1.0f);
  if (((h >> 24) & 15) == 0) v = 0.0f;
  return __float2bfloat16(v);
}

__device__ uint64_t desc(const void* smem, uint32_t lbo, uint32_t sbo) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return static_cast<uint64_t>((a & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32);
}

// A element (m, k) of one k16 step in the no-swizzle K-major layout: core matrix (m / 8, k / 8)
// of 8 rows x 16 bytes at ((m / 8) * 2 + k / 8) * 128 bytes; B element (n, k) likewise with one
// core-matrix row (n < 8): (k / 8) * 128.
__device__ int a_off(int m, int k) { return ((m / 8) * 2 + k / 8) * 64 + (m % 8) * 8 + k % 8; }
__device__ int b_off(int n, int k) { return (k / 8) * 64 + n * 8 + k % 8; }

__global__ void probe(float* out_mma, float* out_wg0, float* out_wg1, float* a_out, float* b_out) {
  __shared__ __align__(128) __nv_bfloat16 sa[kSteps + 2][kM * 16];
  __shared__ __align__(128) __nv_bfloat16 sb[kSteps + 2][kN * 16];  // padded: the swapped reading steps past the last
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, q = lane & 3;
  const uint32_t base = blockIdx.x * 1000003u;
  for (int i = tid; i < kM * kK; i += 128) {
    const int m = i / kK, k = i % kK;
    const __nv_bfloat16 v = draw(base + i);
    sa[k / 16][a_off(m, k % 16)] = v;
    a_out[(static_cast<size_t>(blockIdx.x) * kM + m) * kK + k] = __bfloat162float(v);
  }
  for (int i = tid; i < kN * kK; i += 128) {
    const int n = i / kK, k = i % kK;
    __nv_bfloat16 v = draw(base + 7777777u + i);
    sb[k / 16][b_off(n, k % 16)] = v;
    b_out[(static_cast<size_t>(blockIdx.x) * kN + n) * kK + k] = __bfloat162float(v);
  }
  __syncthreads();
  // mma.sync chains: warp w owns rows 16 w .. 16 w + 15.
  {
    float c[4] = {0, 0, 0, 0};
    auto pair = [&](int s, int m, int k) {
      const __nv_bfloat16 lo = sa[s][a_off(m, k)], hi = sa[s][a_off(m, k + 1)];
      return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) | (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
    };
    auto bpair = [&](int s, int n, int k) {
      const __nv_bfloat16 lo = sb[s][b_off(n, k)], hi = sb[s][b_off(n, k + 1)];
      return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) | (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
    };
    for (int s = 0; s < kSteps; ++s) {
      const int r0 = 16 * w + g;
      const uint32_t a0 = pair(s, r0, 2 * q), a1 = pair(s, r0 + 8, 2 * q), a2 = pair(s, r0, 2 * q + 8),
                     a3 = pair(s, r0 + 8, 2 * q + 8);
      const uint32_t b0 = bpair(s, g, 2 * q), b1 = bpair(s, g, 2 * q + 8);
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    float* o = out_mma + static_cast<size_t>(blockIdx.x) * kM * kN;
    o[(16 * w + g) * kN + 2 * q] = c[0];
    o[(16 * w + g) * kN + 2 * q + 1] = c[1];
    o[(16 * w + g + 8) * kN + 2 * q] = c[2];
    o[(16 * w + g + 8) * kN + 2 * q + 1] = c[3];
  }
  // wgmma chains, two readings of (LBO, SBO): (K offset, M/N offset) = (128, 256) or swapped.
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  for (int reading = 0; reading < 2; ++reading) {
    const uint32_t lbo = reading == 0 ? 128 : 256, sbo = reading == 0 ? 256 : 128;
    float d[4] = {0, 0, 0, 0};
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    for (int s = 0; s < kSteps; ++s) {
      const uint64_t da = desc(sa[s], lbo, sbo), db = desc(sb[s], lbo, sbo);
      const int scale_d = s > 0 ? 1 : 0;
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "l"(da), "l"(db), "r"(scale_d));
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    float* o = (reading == 0 ? out_wg0 : out_wg1) + static_cast<size_t>(blockIdx.x) * kM * kN;
    o[(16 * w + g) * kN + 2 * q] = d[0];
    o[(16 * w + g) * kN + 2 * q + 1] = d[1];
    o[(16 * w + g + 8) * kN + 2 * q] = d[2];
    o[(16 * w + g + 8) * kN + 2 * q + 1] = d[3];
  }
}

int main() {
  const int blocks = 2048;
  const size_t nd = static_cast<size_t>(blocks) * kM * kN;
  float *d_mma, *d_w0, *d_w1, *d_a, *d_b;
  cudaMalloc(&d_mma, nd * 4); cudaMalloc(&d_w0, nd * 4); cudaMalloc(&d_w1, nd * 4);
  cudaMalloc(&d_a, static_cast<size_t>(blocks) * kM * kK * 4);
  cudaMalloc(&d_b, static_cast<size_t>(blocks) * kN * kK * 4);
  probe<<<blocks, 128>>>(d_mma, d_w0, d_w1, d_a, d_b);
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) { std::printf("error: %s\n", cudaGetErrorString(err)); return 1; }
  std::vector<float> mma(nd), w0(nd), w1(nd), a(static_cast<size_t>(blocks) * kM * kK), b(static_cast<size_t>(blocks) * kN * kK);
  cudaMemcpy(mma.data(), d_mma, nd * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(w0.data(), d_w0, nd * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(w1.data(), d_w1, nd * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(a.data(), d_a, a.size() * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(b.data(), d_b, b.size() * 4, cudaMemcpyDeviceToHost);
  const float* ways[3] = {mma.data(), w0.data(), w1.data()};
  const char* names[3] = {"mma.sync chain", "wgmma (LBO=K 128, SBO=MN 256)", "wgmma (LBO=256, SBO=128)"};
  for (int wi = 0; wi < 3; ++wi) {
    size_t diff = 0;
    double worst = 0;
    for (int blk = 0; blk < blocks; ++blk) {
      for (int m = 0; m < kM; ++m) {
        for (int n = 0; n < kN; ++n) {
          double ref = 0, mag = 0;
          for (int k = 0; k < kK; ++k) {
            const double p = static_cast<double>(a[(static_cast<size_t>(blk) * kM + m) * kK + k]) *
                             b[(static_cast<size_t>(blk) * kN + n) * kK + k];
            ref += p;
            mag += std::fabs(p);
          }
          const size_t i = (static_cast<size_t>(blk) * kM + m) * kN + n;
          if (std::memcmp(&ways[wi][i], &mma[i], 4) != 0) ++diff;
          if (mag > 0) worst = std::fmax(worst, std::fabs(ways[wi][i] - ref) / mag);
        }
      }
    }
    std::printf("%-32s elements differing in bits from mma.sync: %zu of %zu; max |err| / sum|terms| vs float64: %.3g\n",
                names[wi], diff, nd, worst);
  }
  return 0;
}

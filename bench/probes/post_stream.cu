// bench/probes/post_stream.cu - which memory path lets post's byte mix stream at 95%+ of copy?
// post_flat_kernel runs at 89-90% of copy at T = 16384 (session 16) and a plain stream with its
// bytes reached 90-92% in session 11 (access_pattern.cu's post_like, evict-first loads and
// stores), while the peers' post reaches 96-98.5%. Here post's exact access shape at T = 16384,
// H = 4096 (an item = token t, 8-column vector v: 4 stream loads + 1 layer-output load of 16
// bytes, 4 stores of 16 bytes; the arithmetic replaced by out_k = res_k ^ lo) runs through:
//   plain:  one thread per item, grid-stride, kPer items a thread with their loads first, with
//           default loads and stores, evict-first loads and stores (ld/st .cs), or L2-only loads;
//   bulk:   a persistent block per multiprocessor slot with a ring of kStages stages; one lane
//           fills a stage with 5 bulk copies (cp.async.bulk, 2 KB each: the 4 streams and the
//           layer output of 1024 columns of a token) completing on an mbarrier; 4 consumer warps
//           take a vector each from shared memory and store with default stores (bulk-load) or
//           write the stage's outputs back into shared memory and one lane stores them with 4
//           bulk copies (bulk-both).
// Reported: us, % of a 1 GiB cudaMemcpyAsync (read + write bytes) in the same run, and whether
// every form wrote the same bytes as the plain one.
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/ps bench/probes/post_stream.cu && /tmp/ps
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "stream_timing.cuh"

constexpr int64_t kT = 16384, kH = 4096;         // tokens, hidden size (bf16 columns)
constexpr int64_t kVecs = kH / 8;                // 16-byte vectors a stream row
constexpr int kSeg = 2048;                       // bytes of a row a bulk stage holds (1024 columns)
constexpr int kSegVecs = kSeg / 16;              // 128: one consumer thread each
constexpr int kStageBytes = 5 * kSeg;            // 4 streams + the layer output
constexpr int kConsumers = kSegVecs;             // 4 warps
constexpr int kBulkThreads = 32 + kConsumers;    // a producer warp + the consumers

enum Hint { kDefault, kStreaming, kL2Only };

template <int kHint>
__device__ __forceinline__ uint4 load16(const uint4* p) {
  if constexpr (kHint == kStreaming) return __ldcs(p);
  if constexpr (kHint == kL2Only) return __ldcg(p);
  return *p;
}

template <int kHint>
__device__ __forceinline__ void store16(uint4* p, uint4 v) {
  if constexpr (kHint == kStreaming) {
    __stcs(p, v);
  } else {
    *p = v;
  }
}

__device__ __forceinline__ uint4 xor4(uint4 a, uint4 b) { return make_uint4(a.x ^ b.x, a.y ^ b.y, a.z ^ b.z, a.w ^ b.w); }

// res [T][4][H], lo [T][H], out [T][4][H] as 16-byte vectors; item i = t * kVecs + v.
template <int kPer, int kHint>
__global__ void __launch_bounds__(256) plain_post(const uint4* res, const uint4* lo, uint4* out) {
  const int64_t items = kT * kVecs, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i0 = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i0 < items; i0 += stride * kPer) {
    uint4 r[kPer][4], l[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int64_t i = i0 + k * stride < items ? i0 + k * stride : i0;
      const int64_t t = i / kVecs, v = i % kVecs;
#pragma unroll
      for (int j = 0; j < 4; ++j) r[k][j] = load16<kHint>(res + (t * 4 + j) * kVecs + v);
      l[k] = load16<kHint>(lo + i);
    }
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int64_t i = i0 + k * stride;
      if (i >= items) break;
      const int64_t t = i / kVecs, v = i % kVecs;
#pragma unroll
      for (int j = 0; j < 4; ++j) store16<kHint>(out + (t * 4 + j) * kVecs + v, xor4(r[k][j], l[k]));
    }
  }
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}

__device__ __forceinline__ void bulk_store(void* dst, const void* src, unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(smem_addr(src)), "r"(bytes)
               : "memory");
}

// Tile k of a block: token t, 1024-column segment c of every row; a block takes tiles
// blockIdx.x, blockIdx.x + gridDim.x, ...
template <int kStages, bool kBulkStores>
__global__ void __launch_bounds__(kBulkThreads) bulk_post(const unsigned char* res, const unsigned char* lo,
                                                        unsigned char* out) {
  extern __shared__ __align__(128) unsigned char smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);
  uint64_t* empty = full + kStages;
  unsigned char* stages = smem + 128;
  constexpr int64_t kSegsRow = kH * 2 / kSeg;
  const int64_t tiles = kT * kSegsRow;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kBulkStores ? 1 : kConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp == 0) {
    if (lane != 0) return;
    int k = 0;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++k) {
      const int s = k % kStages;
      if (k >= kStages) mbar_wait(&empty[s], ((k / kStages) - 1) & 1);
      const int64_t t = tile / kSegsRow, c = tile % kSegsRow;
      unsigned char* st = stages + s * kStageBytes;
      mbar_expect_tx(&full[s], kStageBytes);
      for (int j = 0; j < 4; ++j) bulk_load(st + j * kSeg, res + (t * 4 + j) * kH * 2 + c * kSeg, kSeg, &full[s]);
      bulk_load(st + 4 * kSeg, lo + t * kH * 2 + c * kSeg, kSeg, &full[s]);
    }
    return;
  }
  const int me = threadIdx.x - 32;  // the consumer's vector of the segment
  int k = 0;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++k) {
    const int s = k % kStages;
    mbar_wait(&full[s], (k / kStages) & 1);
    const int64_t t = tile / kSegsRow, c = tile % kSegsRow;
    uint4* st = reinterpret_cast<uint4*>(stages + s * kStageBytes);
    const uint4 l = st[4 * kSegVecs + me];
    if constexpr (!kBulkStores) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        *reinterpret_cast<uint4*>(out + (t * 4 + j) * kH * 2 + c * kSeg + me * 16) = xor4(st[j * kSegVecs + me], l);
      }
      mbar_arrive(&empty[s]);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) st[j * kSegVecs + me] = xor4(st[j * kSegVecs + me], l);
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the writes, visible to the bulk copies
      asm volatile("bar.sync 1, %0;" ::"r"(kConsumers) : "memory");
      if (me == 0) {
        for (int j = 0; j < 4; ++j) bulk_store(out + (t * 4 + j) * kH * 2 + c * kSeg, st + j * kSegVecs, kSeg);
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // the stage may be refilled
        mbar_arrive(&empty[s]);
      }
    }
  }
  if constexpr (kBulkStores) {
    if (me == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}

__global__ void count_differences(const uint4* a, const uint4* b, int64_t n, unsigned long long* bad) {
  unsigned long long mine = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    mine += a[i].x != b[i].x || a[i].y != b[i].y || a[i].z != b[i].z || a[i].w != b[i].w;
  }
  if (mine != 0) atomicAdd(bad, mine);
}

int main() {
  const size_t res_bytes = kT * 4 * kH * 2, lo_bytes = kT * kH * 2;
  StreamTimer timer;
  const double copy_gbs = timer.copy_gbs();
  auto best_ms = [&](auto&& f) { return timer.best_ms(f); };
  const int sms = sm_count();
  unsigned char *res, *lo, *out, *ref;
  unsigned long long* bad;
  cudaMalloc(&res, res_bytes);
  cudaMalloc(&lo, lo_bytes);
  cudaMalloc(&out, res_bytes);
  cudaMalloc(&ref, res_bytes);
  cudaMalloc(&bad, sizeof(unsigned long long));
  cudaMemset(res, 0x35, res_bytes);
  cudaMemset(lo, 0x5a, lo_bytes);
  const double bytes = 2.0 * res_bytes + lo_bytes;  // post's 18 H a token
  auto report = [&](const char* name, float ms, const unsigned char* written) {
    cudaMemset(bad, 0, sizeof(unsigned long long));
    count_differences<<<sms * 4, 256>>>(reinterpret_cast<const uint4*>(written), reinterpret_cast<const uint4*>(ref),
                                        static_cast<int64_t>(res_bytes / 16), bad);
    unsigned long long b = 0;
    cudaMemcpy(&b, bad, sizeof b, cudaMemcpyDeviceToHost);
    std::printf("%-34s %8.1f us  %5.1f%% of copy  %s\n", name, ms * 1e3, 100 * bytes / ms / 1e6 / copy_gbs,
                b == 0 ? "same bytes" : "DIFFERENT BYTES");
  };
  const uint4* r4 = reinterpret_cast<const uint4*>(res);
  const uint4* l4 = reinterpret_cast<const uint4*>(lo);
  plain_post<1, kDefault><<<sms * 8, 256>>>(r4, l4, reinterpret_cast<uint4*>(ref));
  cudaDeviceSynchronize();
  for (int blocks : {3, 8, 16}) {
    char name[64];
    const int grid = sms * blocks;
    std::snprintf(name, sizeof name, "plain x1 default, %d blocks/SM", blocks);
    report(name, best_ms([&] { plain_post<1, kDefault><<<grid, 256>>>(r4, l4, reinterpret_cast<uint4*>(out)); }), out);
    std::snprintf(name, sizeof name, "plain x2 default, %d blocks/SM", blocks);
    report(name, best_ms([&] { plain_post<2, kDefault><<<grid, 256>>>(r4, l4, reinterpret_cast<uint4*>(out)); }), out);
    std::snprintf(name, sizeof name, "plain x2 evict-first, %d blocks/SM", blocks);
    report(name, best_ms([&] { plain_post<2, kStreaming><<<grid, 256>>>(r4, l4, reinterpret_cast<uint4*>(out)); }), out);
    std::snprintf(name, sizeof name, "plain x2 L2-only loads, %d blocks/SM", blocks);
    report(name, best_ms([&] { plain_post<2, kL2Only><<<grid, 256>>>(r4, l4, reinterpret_cast<uint4*>(out)); }), out);
  }
  auto run_bulk = [&](auto kernel, int stages, const char* what) {
    const int smem = 128 + stages * kStageBytes;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    for (int blocks : {1, 2}) {
      char name[64];
      std::snprintf(name, sizeof name, "%s, %d stages, %d blocks/SM", what, stages, blocks);
      report(name, best_ms([&] { kernel<<<sms * blocks, kBulkThreads, smem>>>(res, lo, out); }), out);
    }
  };
  run_bulk(bulk_post<4, false>, 4, "bulk-load");
  run_bulk(bulk_post<8, false>, 8, "bulk-load");
  run_bulk(bulk_post<8, true>, 8, "bulk-both");
  const cudaError_t err = cudaDeviceSynchronize();
  std::printf("status: %s\n", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}

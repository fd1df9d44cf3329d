// bench/probes/cluster_capacity.cu - what a thread-block-cluster design of the normal mode's pre
// would get on this card (docs/performance-history.md, session 29's counted design: 16 blocks of
// ~208 KB, one a multiprocessor, a 32-token tile's streams in their shared memory):
//   1. how many clusters can be resident at once (cudaOccupancyMaxActiveClusters), for cluster
//      sizes 2 .. 16 and 100 .. 227 KB of dynamic shared memory a block (256 threads): a GPC's
//      multiprocessors bound a cluster, so 16-block clusters may leave multiprocessors idle;
//   2. the cost of one exchange step: a cluster barrier (arrive.release / wait.acquire) then a
//      read of the next block's shared memory (distributed shared memory), timed by clock64 in
//      every block over 1000 steps, the slowest block's cycles a step reported;
//   3. the part of a split exchange step that work between the arrival and the wait does not
//      hide: barrier.cluster.arrive.release, a dependent chain of `work` FMAs, then
//      barrier.cluster.wait.acquire and the read of the next block's value (double-buffered by
//      step parity, so one barrier a step); cycles a step minus the chain's own cycles;
//   4. the same step as a push: every block stores its value into every block's shared memory by
//      st.async, completing the receiver's mbarrier (bytes), and waits on its own mbarrier: no
//      barrier.cluster, whose release form costs a GPU-scope MEMBAR in the SASS (a streaming
//      kernel's in-flight stores would hold it). Timing only: the two mbarriers (by step parity)
//      keep the phases apart as long as a block's stores land before its next step's;
//   5. that the launch itself works (the 16-block sizes need the non-portable attribute).
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/cc bench/probes/cluster_capacity.cu && /tmp/cc
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "stream_timing.cuh"

namespace cg = cooperative_groups;

constexpr int kThreads = 256;
constexpr int kSteps = 1000;

__global__ void __launch_bounds__(kThreads) exchange(unsigned* out, long long* cycles) {
  extern __shared__ unsigned smem[];
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  const unsigned next = (rank + 1) % cluster.num_blocks();
  if (threadIdx.x == 0) smem[0] = rank;
  cluster.sync();
  const unsigned* peer = cluster.map_shared_rank(smem, next);
  unsigned acc = 0;
  const long long t0 = clock64();
  for (int s = 0; s < kSteps; ++s) {
    if (threadIdx.x == 0) smem[0] = acc + rank;  // this step's value, read by the block before
    cluster.sync();
    acc += peer[0];
    cluster.sync();  // the peer's read is done before its next write
  }
  const long long t = clock64() - t0;
  if (threadIdx.x == 0) {
    out[blockIdx.x] = acc;
    cycles[blockIdx.x] = t;
  }
}

// One split exchange step a loop iteration, `work` dependent FMAs between arrival and wait;
// cycles[block] = the steps' cycles, cycles[gridDim.x + block] = the chain alone (the same loop
// without the barrier, the read and the write).
__global__ void __launch_bounds__(kThreads) exchange_split(unsigned* out, long long* cycles, int work) {
  extern __shared__ unsigned smem[];
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  const unsigned* peer = cluster.map_shared_rank(smem, (rank + 1) % cluster.num_blocks());
  cluster.sync();
  float x = static_cast<float>(threadIdx.x);
  unsigned acc = 0;
  long long t0 = clock64();
  for (int s = 0; s < kSteps; ++s) {
    if (threadIdx.x == 0) smem[s & 1] = acc + rank;
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
    asm volatile("" : "+f"(x));  // the chain starts after the arrival ...
    for (int i = 0; i < work; ++i) x = fmaf(x, 0.999f, 0.5f);
    asm volatile("" : "+f"(x));  // ... and ends before the wait (volatile asm keeps its order)
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
    acc += peer[s & 1];
  }
  const long long split = clock64() - t0;
  t0 = clock64();
  for (int s = 0; s < kSteps; ++s) {
    asm volatile("" : "+f"(x));
    for (int i = 0; i < work; ++i) x = fmaf(x, 0.999f, 0.5f);
    asm volatile("" : "+f"(x));
  }
  const long long alone = clock64() - t0;
  cluster.sync();  // no block leaves while another may still read its shared memory
  if (threadIdx.x == 0) {
    out[blockIdx.x] = acc + (x == 12345.0f);
    cycles[blockIdx.x] = split;
    cycles[gridDim.x + blockIdx.x] = alone;
  }
}

// The push form of step 4: smem words [parity][16] values, then mbarriers at bytes 128 and 136.
__global__ void __launch_bounds__(kThreads) exchange_push(unsigned* out, long long* cycles, int work) {
  extern __shared__ __align__(16) unsigned smem[];
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank(), n = cluster.num_blocks();
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem)), bars = base + 128;
  if (threadIdx.x == 0) {
    for (int b = 0; b < 2; ++b) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bars + 8 * b) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  cluster.sync();
  float x = static_cast<float>(threadIdx.x);
  unsigned acc = 0;
  const long long t0 = clock64();
  for (int s = 0; s < kSteps; ++s) {
    const uint32_t bar = bars + 8 * (s & 1);
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(4 * n) : "memory");
    }
    if (threadIdx.x < n) {  // thread i stores this block's value into block i
      uint32_t rval, rbar;
      const uint32_t lval = base + 4 * ((s & 1) * 16 + rank);
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(rval) : "r"(lval), "r"(threadIdx.x));
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(rbar) : "r"(bar), "r"(threadIdx.x));
      asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%0], %1, [%2];\n" ::"r"(rval),
                   "r"(acc + rank), "r"(rbar)
                   : "memory");
    }
    asm volatile("" : "+f"(x));
    for (int i = 0; i < work; ++i) x = fmaf(x, 0.999f, 0.5f);
    asm volatile("" : "+f"(x));
    asm volatile(
        "{\n.reg .pred done;\nwait_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra wait_%=;\n}\n" ::"r"(bar),
        "r"(static_cast<uint32_t>((s >> 1) & 1))
        : "memory");
    acc += smem[(s & 1) * 16 + (rank + 1) % n];
  }
  const long long t = clock64() - t0;
  cluster.sync();  // no block leaves while another may still store into its shared memory
  if (threadIdx.x == 0) {
    out[blockIdx.x] = acc + (x == 12345.0f);
    cycles[blockIdx.x] = t;
  }
}

// A launch of `size`-block clusters of kThreads threads with `smem` bytes of dynamic shared
// memory a block (the config points at its own attribute: not copyable).
struct ClusterLaunch {
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg = {};
  ClusterLaunch(int size, size_t smem, int blocks) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = size;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.gridDim = dim3(blocks);
  }
  ClusterLaunch(const ClusterLaunch&) = delete;
  ClusterLaunch& operator=(const ClusterLaunch&) = delete;
};

// The kernel may take 16-block clusters and up to 227 KB of shared memory a block.
template <typename Kernel>
void allow_clusters(Kernel kernel) {
  cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024);
}

// The largest of `count` cycle counts at cycles[first ..] (0 where the launch failed).
long long worst_cycles(const long long* cycles, int first, int count, cudaError_t done) {
  long long host[4096] = {}, worst = 0;
  if (done != cudaSuccess) return 0;
  cudaMemcpy(host, cycles + first, count * sizeof(long long), cudaMemcpyDeviceToHost);
  for (int b = 0; b < count; ++b) worst = host[b] > worst ? host[b] : worst;
  return worst;
}

int main() {
  const int sms = sm_count();
  allow_clusters(exchange);
  unsigned* out;
  long long* cycles;
  cudaMalloc(&out, 4096 * sizeof(unsigned));
  cudaMalloc(&cycles, 4096 * sizeof(long long));
  for (int kb : {100, 160, 208, 227}) {
    for (int size : {2, 4, 8, 16}) {
      ClusterLaunch launch_cfg(size, static_cast<size_t>(kb) * 1024, size * (sms / size));
      cudaLaunchConfig_t& cfg = launch_cfg.cfg;
      int clusters = 0;
      const cudaError_t occ = cudaOccupancyMaxActiveClusters(&clusters, exchange, &cfg);
      if (occ != cudaSuccess) {
        std::printf("%3d KB, cluster %2d: occupancy query failed: %s\n", kb, size, cudaGetErrorString(occ));
        cudaGetLastError();
        continue;
      }
      // One wave of resident clusters, each timing its exchange steps.
      cfg.gridDim = dim3(size * (clusters > 0 ? clusters : 1));
      const cudaError_t launch = cudaLaunchKernelEx(&cfg, exchange, out, cycles);
      const cudaError_t done = launch == cudaSuccess ? cudaDeviceSynchronize() : launch;
      const long long worst = worst_cycles(cycles, 0, static_cast<int>(cfg.gridDim.x), done);
      std::printf("%3d KB, cluster %2d: %2d clusters resident (%3d of %d multiprocessors); exchange step %s%.0f cycles\n",
                  kb, size, clusters, clusters * size, sms, done == cudaSuccess ? "" : cudaGetErrorString(done),
                  done == cudaSuccess ? double(worst) / kSteps : 0.0);
      cudaGetLastError();
    }
  }
  // 3. the split step at 16 blocks of 208 KB (the one-pass design's shape), for a few work sizes
  allow_clusters(exchange_split);
  for (int size : {8, 16}) {
    for (int work : {0, 100, 250, 500, 1000}) {
      ClusterLaunch launch_cfg(size, 208 * 1024, size);
      const cudaError_t launch = cudaLaunchKernelEx(&launch_cfg.cfg, exchange_split, out, cycles, work);
      const cudaError_t done = launch == cudaSuccess ? cudaDeviceSynchronize() : launch;
      const long long split = worst_cycles(cycles, 0, size, done), alone = worst_cycles(cycles, size, size, done);
      std::printf("split step, cluster %2d, %4d FMAs between arrive and wait: %.0f cycles a step, the FMAs alone %.0f: "
                  "%.0f exposed %s\n",
                  size, work, double(split) / kSteps, double(alone) / kSteps, double(split - alone) / kSteps,
                  done == cudaSuccess ? "" : cudaGetErrorString(done));
      cudaGetLastError();
    }
  }
  // 4. the push form at the same shapes
  allow_clusters(exchange_push);
  for (int size : {8, 16}) {
    for (int work : {0, 250, 1000}) {
      ClusterLaunch launch_cfg(size, 208 * 1024, size);
      const cudaError_t launch = cudaLaunchKernelEx(&launch_cfg.cfg, exchange_push, out, cycles, work);
      const cudaError_t done = launch == cudaSuccess ? cudaDeviceSynchronize() : launch;
      const long long worst = worst_cycles(cycles, 0, size, done);
      std::printf("push step, cluster %2d, %4d FMAs before the wait: %.0f cycles a step %s\n", size, work,
                  double(worst) / kSteps, done == cudaSuccess ? "" : cudaGetErrorString(done));
      cudaGetLastError();
    }
  }
  const cudaError_t err = cudaDeviceSynchronize();
  std::printf("status: %s\n", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}

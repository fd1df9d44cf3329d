// bench/probes/cluster_capacity.cu - what a thread-block-cluster design of the normal mode's pre
// would get on this card (docs/performance-history.md, session 29's counted design: 16 blocks of
// ~208 KB, one a multiprocessor, a 32-token tile's streams in their shared memory):
//   1. how many clusters can be resident at once (cudaOccupancyMaxActiveClusters), for cluster
//      sizes 2 .. 16 and 100 .. 227 KB of dynamic shared memory a block (256 threads): a GPC's
//      multiprocessors bound a cluster, so 16-block clusters may leave multiprocessors idle;
//   2. the cost of one exchange step: a cluster barrier (arrive.release / wait.acquire) then a
//      read of the next block's shared memory (distributed shared memory), timed by clock64 in
//      every block over 1000 steps, the slowest block's cycles a step reported;
//   3. that the launch itself works (the 16-block sizes need the non-portable attribute).
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

int main() {
  const int sms = sm_count();
  cudaFuncSetAttribute(exchange, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaFuncSetAttribute(exchange, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024);
  unsigned* out;
  long long* cycles;
  cudaMalloc(&out, 4096 * sizeof(unsigned));
  cudaMalloc(&cycles, 4096 * sizeof(long long));
  for (int kb : {100, 160, 208, 227}) {
    for (int size : {2, 4, 8, 16}) {
      cudaLaunchConfig_t cfg = {};
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = size;
      attr[0].val.clusterDim.y = 1;
      attr[0].val.clusterDim.z = 1;
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      cfg.blockDim = dim3(kThreads);
      cfg.dynamicSmemBytes = static_cast<size_t>(kb) * 1024;
      cfg.gridDim = dim3(size * (sms / size));
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
      long long host[4096] = {};
      const int blocks = static_cast<int>(cfg.gridDim.x);
      if (done == cudaSuccess) cudaMemcpy(host, cycles, blocks * sizeof(long long), cudaMemcpyDeviceToHost);
      long long worst = 0;
      for (int b = 0; b < blocks; ++b) worst = host[b] > worst ? host[b] : worst;
      std::printf("%3d KB, cluster %2d: %2d clusters resident (%3d of %d multiprocessors); exchange step %s%.0f cycles\n",
                  kb, size, clusters, clusters * size, sms, done == cudaSuccess ? "" : cudaGetErrorString(done),
                  done == cudaSuccess ? double(worst) / kSteps : 0.0);
      cudaGetLastError();
    }
  }
  const cudaError_t err = cudaDeviceSynchronize();
  std::printf("status: %s\n", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}

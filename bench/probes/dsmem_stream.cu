// bench/probes/dsmem_stream.cu - how fast the SM-to-SM network moves bulk data: the rate at
// which every block of a cluster reads other blocks' shared memory, against the copy bandwidth
// of the same run. The question (bench/results/2026-12-05-nodevice-s39): an "owner-row" form of
// the cluster pre would gather each block's chunk slices of a tile from 16 owners' shared memory,
// i.e. pass all 8 H bytes a token through this network once; it can stream only if the network's
// aggregate rate is well above DRAM's.
// Each block holds a 64 KB buffer. Per iteration every thread reads kVecs 16-byte vectors (all
// issued before any is used) from 512-byte pieces spread over the cluster's blocks: piece k of
// block b comes from block (b + 1 + k) % size (never itself, unless size is 1: the local rate),
// the owner-row gather's pattern (a chunk slice of one token and stream is 512 bytes). Reported
// per cluster size: the resident clusters, GB/s over the whole GPU and per multiprocessor, and
// the ratio to the copy bandwidth.
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/ds bench/probes/dsmem_stream.cu && /tmp/ds
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "stream_timing.cuh"

namespace cg = cooperative_groups;

constexpr int kThreads = 384;
constexpr int kBufBytes = 64 * 1024;
constexpr int kPieceBytes = 512;
constexpr int kVecs = 8;       // loads in flight per thread and iteration
constexpr int kIters = 4000;   // per launch

__global__ void __launch_bounds__(kThreads, 1) gather(unsigned* sink) {
  extern __shared__ __align__(16) unsigned char buf[];
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned size = cluster.num_blocks(), rank = cluster.block_rank();
  for (int i = threadIdx.x; i < kBufBytes / 4; i += kThreads) reinterpret_cast<unsigned*>(buf)[i] = i ^ rank;
  cluster.sync();  // every block's buffer is written before any peer reads it
  // The peers' buffers as generic pointers (distributed shared memory).
  const uint4* peer[16];
  for (unsigned k = 0; k < 16; ++k) {
    const unsigned src = size == 1 ? 0 : (rank + 1 + k % (size - 1)) % size;
    peer[k] = reinterpret_cast<const uint4*>(cluster.map_shared_rank(buf, src));
  }
  constexpr int kPieceVecs = kPieceBytes / 16;  // 32: a warp reads one piece a load
  constexpr int kPieces = kBufBytes / kPieceBytes;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // Load j of warp w reads piece p = it * 96 + 8 w + j, from peer p % 16 = (8 w + j) % 16 (96 is
  // a multiple of 16): each load's peer is fixed, so its pointer is taken once, in registers.
  const uint4* base[kVecs];
#pragma unroll
  for (int j = 0; j < kVecs; ++j) base[j] = peer[(warp * kVecs + j) % 16] + lane;
  unsigned acc = 0;
  for (int it = 0; it < kIters; ++it) {
    uint4 v[kVecs];
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int piece = it * (kThreads / 32) * kVecs + warp * kVecs + j;
      v[j] = base[j][(piece % kPieces) * kPieceVecs];
    }
#pragma unroll
    for (int j = 0; j < kVecs; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // never: keeps the loads
  cluster.sync();  // no block leaves while a peer may still read its buffer
}

int main() {
  StreamTimer timer;
  const double copy = timer.copy_gbs();
  const int sms = sm_count();
  cudaFuncSetAttribute(gather, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaFuncSetAttribute(gather, cudaFuncAttributeMaxDynamicSharedMemorySize, kBufBytes);
  unsigned* sink = nullptr;
  cudaMalloc(&sink, 4);
  for (int size : {1, 2, 4, 8, 16}) {
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = size;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg{};
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = kBufBytes;
    cfg.gridDim = dim3(size * (sms / size));
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, gather, &cfg) != cudaSuccess || clusters == 0) {
      std::printf("cluster %2d: no resident cluster (%s)\n", size, cudaGetErrorString(cudaGetLastError()));
      continue;
    }
    // One block a multiprocessor at most: the resident clusters, once.
    const int per_sm_cap = sms / size;
    const int n = clusters < per_sm_cap ? clusters : per_sm_cap;
    cfg.gridDim = dim3(size * n);
    cudaError_t err = cudaSuccess;
    const float ms = timer.best_ms([&] { err = cudaLaunchKernelEx(&cfg, gather, sink); });
    if (err != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
      std::printf("cluster %2d: launch failed: %s\n", size, cudaGetErrorString(cudaGetLastError()));
      continue;
    }
    const double bytes = static_cast<double>(size) * n * kThreads * kVecs * 16.0 * kIters;
    const double gbs = bytes / ms / 1e6;
    std::printf("cluster %2d: %2d clusters (%3d blocks), %.3f ms, %.1f GB/s (%.1f GB/s a block), %.2f x copy\n", size,
                n, size * n, ms, gbs, gbs / (size * n), gbs / copy);
  }
  return 0;
}

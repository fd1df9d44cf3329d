// bench/probes/racecheck_named_barriers.cu - does compute-sanitizer's racecheck report hazards in
// a program that has none, when some warps of a block also use a named barrier (bar.sync id,
// count) inside a loop that the whole block synchronises with __syncthreads? The pattern is
// decode_chunk_kernel's phase 2: per iteration, threads 0..24 write a slot, __syncthreads, warp 9
// reads it, warps 0..7 meet at a named barrier of 256 threads, __syncthreads at the loop end.
// Every read of a slot is ordered after its write by the __syncthreads between them, and the slots
// alternate by iteration parity, so the program is race-free in every form below.
//   form 0: no named barrier (the control)
//   form 1: warps 0..7 meet at bar.sync 1, 256 once per iteration
//   form 2: form 1, and lane 0 of warp 9 runs a long serial chain on its copy (the epilogue)
// and, in a second kernel, a producer-consumer hand-over through a named barrier (the form of the
// since removed decode_box_kernel's pre): lane 0 of warp 9
// writes 4 floats after a serial chain, the warp arrives at named barrier 2 of 288 threads
// (bar.arrive), warps 0..7 wait there (bar.sync) and read them; one pass a block, race-free:
//   form 3: the producer warp arrives (bar.arrive)
//   form 4: the producer warp waits too (bar.sync: the control)
//   form 5: form 3, and warps 8..11 first meet twice at bar.sync 3, 128 (a poll of a mailbox)
//           and warps 0..7 after their read at bar.sync 1, 256 (the fold's block_sum),
//           after a __syncthreads of the whole block (the weights' barrier)
// Standalone, from the repository root:
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -o /tmp/rc bench/probes/racecheck_named_barriers.cu
//   compute-sanitizer --tool racecheck /tmp/rc 0 ; compute-sanitizer --tool racecheck /tmp/rc 1
#include <cstdio>
#include <cstdlib>

__global__ void pattern(float* out, int iters, int form) {
  __shared__ float slot[2][32];
  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
  float acc = 0.0f;
  for (int it = 0; it < iters; ++it) {
    float* d = slot[it & 1];
    if (tid < 25) d[tid] = static_cast<float>(tid + it);
    __syncthreads();
    if (w == 9) {
      const float v = d[24];  // written by thread 24 before the barrier above
      if (lane == 0) {
        float x = v;
        if (form == 2) {
          for (int i = 0; i < 2000; ++i) x = fmaf(x, 0.999f, 0.001f);
          x = v + (x - x);
        }
        acc += x;
      }
    } else if (w < 8 && form >= 1) {
      asm volatile("bar.sync 1, 256;" ::: "memory");
    }
    __syncthreads();
  }
  if (w == 9 && lane == 0) out[blockIdx.x] = acc;
}

__global__ void handoff(float* out, int form) {
  __shared__ float s_pre[4];
  __shared__ float s_sum[8];
  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
  if (form == 5) __syncthreads();
  if (form == 5 && w >= 8) {
    asm volatile("bar.sync 3, 128;" ::: "memory");
    asm volatile("bar.sync 3, 128;" ::: "memory");
  }
  if (w == 9) {
    if (lane == 0) {
      float x = static_cast<float>(blockIdx.x);
      for (int i = 0; i < 2000; ++i) x = fmaf(x, 0.999f, 0.001f);
      for (int j = 0; j < 4; ++j) s_pre[j] = static_cast<float>(blockIdx.x + j) + (x - x);
    }
    __syncwarp();
    if (form == 3 || form == 5) {
      asm volatile("bar.arrive 2, 288;" ::: "memory");
    } else {
      asm volatile("bar.sync 2, 288;" ::: "memory");
    }
  } else if (w < 8) {
    asm volatile("bar.sync 2, 288;" ::: "memory");
    float sum = 0.0f;
    for (int j = 0; j < 4; ++j) sum += s_pre[j];
    if (form == 5) {
      if (lane == 0) s_sum[w] = sum;
      asm volatile("bar.sync 1, 256;" ::: "memory");
      sum = s_sum[(w + 1) & 7];
    }
    if (tid == 0) out[blockIdx.x] = sum;
  }
}

int main(int argc, char** argv) {
  const int form = argc > 1 ? std::atoi(argv[1]) : 0;
  float* out = nullptr;
  cudaMalloc(&out, 4 * sizeof(float));
  if (form >= 3) {
    handoff<<<4, 384>>>(out, form);
    float h[4] = {};
    const cudaError_t err = cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost);
    // Block b sums b + 0 .. b + 3: 4 b + 6.
    std::printf("form %d: %s, block sums %g %g %g %g (expected 6 10 14 18)\n", form, cudaGetErrorString(err), h[0],
                h[1], h[2], h[3]);
    return err == cudaSuccess && h[0] == 6.0f && h[3] == 18.0f ? 0 : 1;
  }
  pattern<<<4, 384>>>(out, 3, form);
  float h[4] = {};
  const cudaError_t err = cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost);
  // Each block sums d[24] = 24 + it over it = 0, 1, 2: 75.
  std::printf("form %d: %s, block sums %g %g %g %g (expected 75)\n", form, cudaGetErrorString(err), h[0], h[1],
              h[2], h[3]);
  return err == cudaSuccess && h[0] == 75.0f ? 0 : 1;
}

// src/cuda/backend.cu - device-side weight upload, workspace allocation, device queries.
//
// Everything here runs at load time (prepare, Workspace::create), never per call.
#include <vector>

#include "src/core/cuda_hooks.hpp"
#include "src/cuda/check.cuh"
#include "src/cuda/variants.hpp"

namespace mhc::detail {

namespace {

// Makes `id` the current device for a scope.
struct DeviceGuard {
  int previous = 0;
  explicit DeviceGuard(int id) {
    MHC_CUDA_CHECK(cudaGetDevice(&previous));
    MHC_CUDA_CHECK(cudaSetDevice(id));
  }
  ~DeviceGuard() { cudaSetDevice(previous); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
};

// Owns one cudaMalloc'd block on a device; freed on that device.
std::shared_ptr<void> device_alloc(Device device, size_t bytes) {
  void* ptr = nullptr;
  cudaError_t err = cudaSuccess;
  {
    const DeviceGuard guard(device.id);
    err = cudaMalloc(&ptr, bytes == 0 ? 16 : bytes);
  }
  MHC_CHECK(err == cudaSuccess, "cudaMalloc of ", bytes, " bytes on ", device_name(device),
            " failed: ", cudaGetErrorString(err));
  const int id = device.id;
  return std::shared_ptr<void>(ptr, [id](void* p) {
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(id);
    cudaFree(p);
    cudaSetDevice(prev);
  });
}

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

void cuda_upload_weights(PreparedWeights::Impl& w) {
  MHC_CHECK(w.device.id >= 0 && w.device.id < cuda_device_count(), "prepare: device ",
            device_name(w.device), " is not a visible CUDA device (", cuda_device_count(), " visible)");
  const int64_t rows = w.rows, H = w.H, K = w.n * H;
  // Host-side re-layout: transposed copies so that consecutive threads read consecutive k and
  // each thread's rows are contiguous.
  std::vector<float> fn_t(static_cast<size_t>(K * rows)), fn_b_t(static_cast<size_t>(H * rows));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < K; ++k) fn_t[k * rows + r] = w.fn[r * K + k];
    for (int64_t h = 0; h < H; ++h) fn_b_t[h * rows + r] = w.fn_b[r * H + h];
  }
  const std::vector<uint32_t> frag = cuda::n4_fragments(w);
  const size_t n_fn = fn_t.size(), n_fnb = fn_b_t.size(), n_scale = w.scale.size(), n_base = w.base.size();
  const size_t n_frag = (frag.size() + 3) / 4 * 4;  // keep what follows 16-byte aligned
  const size_t total = n_frag + n_fn + n_fnb + n_scale + n_base + 16;
  w.device_memory = device_alloc(w.device, total * sizeof(float));
  float* base_ptr = static_cast<float*>(w.device_memory.get());
  auto* d_frag = reinterpret_cast<uint32_t*>(base_ptr);
  float* d_fn_t = base_ptr + n_frag;
  float* d_fn_b_t = d_fn_t + n_fn;
  float* d_scale = d_fn_b_t + n_fnb;
  float* d_base = d_scale + n_scale;
  MHC_CUDA_CHECK(cudaMemcpy(d_fn_t, fn_t.data(), n_fn * sizeof(float), cudaMemcpyHostToDevice));
  MHC_CUDA_CHECK(cudaMemcpy(d_fn_b_t, fn_b_t.data(), n_fnb * sizeof(float), cudaMemcpyHostToDevice));
  MHC_CUDA_CHECK(cudaMemcpy(d_scale, w.scale.data(), n_scale * sizeof(float), cudaMemcpyHostToDevice));
  MHC_CUDA_CHECK(cudaMemcpy(d_base, w.base.data(), n_base * sizeof(float), cudaMemcpyHostToDevice));
  if (!frag.empty()) {
    MHC_CUDA_CHECK(cudaMemcpy(d_frag, frag.data(), frag.size() * sizeof(uint32_t), cudaMemcpyHostToDevice));
    w.d_fn_frag = d_frag;
  }
  w.d_fn_t = d_fn_t;
  w.d_fn_b_t = d_fn_b_t;
  w.d_scale = d_scale;
  w.d_base = d_base;
}

void cuda_create_workspace(Workspace::Impl& ws) {
  MHC_CHECK(ws.device.id >= 0 && ws.device.id < cuda_device_count(), "Workspace::create: device ",
            device_name(ws.device), " is not a visible CUDA device (", cuda_device_count(), " visible)");
  MHC_CUDA_CHECK(cudaDeviceGetAttribute(&ws.num_sms, cudaDevAttrMultiProcessorCount, ws.device.id));
  MHC_CUDA_CHECK(cudaDeviceGetAttribute(&ws.cc_major, cudaDevAttrComputeCapabilityMajor, ws.device.id));
  {
    const DeviceGuard guard(ws.device.id);
    ws.n4_mix = cuda::n4_configure_device(&ws.n4_gemm);
  }
  // The one-launch decode kernel's token limit (its partials are part of the scratch).
  const int64_t asked = ws.decode_max_tokens == 0 ? cuda::n4_decode_default_tokens() : ws.decode_max_tokens;
  ws.decode_tokens = asked < 0 ? 0 : asked < ws.max_tokens ? asked : ws.max_tokens;
  ws.scratch_bytes = cuda::n4_scratch_bytes(ws.max_tokens, ws.decode_tokens);
  // The decode kernel's counters sit after the scratch, 256-byte aligned, zeroed here once.
  const size_t barrier_offset = (ws.scratch_bytes + 255) / 256 * 256;
  ws.device_memory = device_alloc(ws.device, barrier_offset + 256);
  ws.scratch = ws.device_memory.get();
  ws.decode_counters = reinterpret_cast<uint32_t*>(static_cast<unsigned char*>(ws.device_memory.get()) + barrier_offset);
  {
    const DeviceGuard guard(ws.device.id);
    MHC_CUDA_CHECK(cudaMemset(ws.decode_counters, 0, 256));
    MHC_CUDA_CHECK(cudaDeviceSynchronize());
  }
}

}  // namespace mhc::detail

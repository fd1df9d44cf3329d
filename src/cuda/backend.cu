// src/cuda/backend.cu - device-side weight upload (into memory it allocates or the caller's),
// workspace allocation, warmup (loading every kernel), device queries.
//
// Everything here runs at load time (prepare, Workspace::create, warmup), never per call.
#include <chrono>
#include <vector>

#include "src/core/cuda_hooks.hpp"
#include "src/cuda/check.cuh"
#include "src/cuda/kernel_list.cuh"
#include "src/cuda/n4/config.cuh"
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

namespace {

// The CUDA layout of prepared weights, in floats (32-bit words) from the start of the block:
// [fragments (n4 path only)][fn_b fragments (n4, not a head)][fn_t][fn_b_t][scale][base][16 words
// of slack], each piece starting on 16 bytes.
struct CudaLayout {
  size_t frag = 0, frag_b = 0, fn_t = 0, fn_b_t = 0, scale = 0, base = 0, total = 0;  // offsets; total: size
  size_t frag_words = 0, frag_b_words = 0;  // the fragments' own sizes (unpadded)
};

CudaLayout cuda_layout(int32_t n, int64_t H, int32_t rows, bool head) {
  CudaLayout l;
  // n4_fragments' size (src/cuda/n4/fragments.cu; cuda_upload_weights checks that they agree).
  if (n == cuda::n4::kN && H % cuda::n4::kSliceK == 0 && H <= cuda::n4::kMaxH) {
    l.frag_words = static_cast<size_t>(H / cuda::n4::kChunkCols) * cuda::n4::kFragWords * 2;
    // n4_broadcast_fragments: H / 4 columns a stream, so a quarter of the chunks.
    if (!head) l.frag_b_words = static_cast<size_t>(H / cuda::n4::kSliceK) * cuda::n4::kFragWords * 2;
  }
  const size_t K = static_cast<size_t>(n) * static_cast<size_t>(H);
  l.frag = 0;
  l.frag_b = (l.frag_words + 3) / 4 * 4;  // keep what follows 16-byte aligned
  l.fn_t = l.frag_b + (l.frag_b_words + 3) / 4 * 4;
  l.fn_b_t = l.fn_t + K * static_cast<size_t>(rows);
  l.scale = l.fn_b_t + static_cast<size_t>(H) * static_cast<size_t>(rows);
  l.base = l.scale + (head ? 1 : 3);
  l.total = l.base + static_cast<size_t>(rows) + 16;
  return l;
}

void point_into(PreparedWeights::Impl& w, const void* block, const CudaLayout& l) {
  const float* base_ptr = static_cast<const float*>(block);
  w.d_fn_frag = l.frag_words != 0 ? reinterpret_cast<const uint32_t*>(base_ptr + l.frag) : nullptr;
  w.d_fn_b_frag = l.frag_b_words != 0 ? reinterpret_cast<const uint32_t*>(base_ptr + l.frag_b) : nullptr;
  w.d_fn_t = base_ptr + l.fn_t;
  w.d_fn_b_t = base_ptr + l.fn_b_t;
  w.d_scale = base_ptr + l.scale;
  w.d_base = base_ptr + l.base;
}

}  // namespace

size_t cuda_prepared_bytes(int32_t n, int64_t H, int32_t rows) {
  return cuda_layout(n, H, rows, rows == n).total * sizeof(float);
}

void cuda_attach_weights(PreparedWeights::Impl& w, const void* buffer) {
  MHC_CHECK(w.device.id >= 0 && w.device.id < cuda_device_count(), "attach_prepared: device ",
            device_name(w.device), " is not a visible CUDA device (", cuda_device_count(), " visible)");
  point_into(w, buffer, cuda_layout(w.n, w.H, w.rows, w.head));
}

void cuda_upload_weights(PreparedWeights::Impl& w, void* destination) {
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
  const std::vector<uint32_t> frag = cuda::n4_fragments(w), frag_b = cuda::n4_broadcast_fragments(w);
  const CudaLayout l = cuda_layout(w.n, w.H, w.rows, w.head);
  MHC_CHECK(frag.size() == l.frag_words && frag_b.size() == l.frag_b_words, "prepare: the n4 fragments hold ",
            frag.size(), " and ", frag_b.size(), " words, the layout expects ", l.frag_words, " and ", l.frag_b_words,
            " (src/cuda/backend.cu cuda_layout and src/cuda/n4/fragments.cu disagree)");
  void* block = destination;
  if (block == nullptr) {
    w.device_memory = device_alloc(w.device, l.total * sizeof(float));
    block = w.device_memory.get();
  }
  float* base_ptr = static_cast<float*>(block);
  const DeviceGuard guard(w.device.id);
  MHC_CUDA_CHECK(cudaMemcpy(base_ptr + l.fn_t, fn_t.data(), fn_t.size() * sizeof(float), cudaMemcpyHostToDevice));
  MHC_CUDA_CHECK(cudaMemcpy(base_ptr + l.fn_b_t, fn_b_t.data(), fn_b_t.size() * sizeof(float), cudaMemcpyHostToDevice));
  MHC_CUDA_CHECK(cudaMemcpy(base_ptr + l.scale, w.scale.data(), w.scale.size() * sizeof(float), cudaMemcpyHostToDevice));
  MHC_CUDA_CHECK(cudaMemcpy(base_ptr + l.base, w.base.data(), w.base.size() * sizeof(float), cudaMemcpyHostToDevice));
  if (!frag_b.empty()) {
    MHC_CUDA_CHECK(cudaMemcpy(base_ptr + l.frag_b, frag_b.data(), frag_b.size() * sizeof(uint32_t), cudaMemcpyHostToDevice));
  }
  if (!frag.empty()) {
    MHC_CUDA_CHECK(cudaMemcpy(base_ptr + l.frag, frag.data(), frag.size() * sizeof(uint32_t), cudaMemcpyHostToDevice));
  }
  point_into(w, block, l);
}

std::shared_ptr<void> cuda_zeroed(Device device, size_t bytes) {
  std::shared_ptr<void> p = device_alloc(device, bytes);
  const DeviceGuard guard(device.id);
  MHC_CUDA_CHECK(cudaMemset(p.get(), 0, bytes == 0 ? 16 : bytes));
  MHC_CUDA_CHECK(cudaDeviceSynchronize());
  return p;
}

void cuda_sync(Device device, void* stream) {
  const DeviceGuard guard(device.id);
  MHC_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

WarmupReport cuda_warmup(Device device, std::vector<const void*>* loaded) {
  MHC_CHECK(device.id >= 0 && device.id < cuda_device_count(), "warmup: device ", device_name(device),
            " is not a visible CUDA device (", cuda_device_count(), " visible)");
  const auto t0 = std::chrono::steady_clock::now();
  const DeviceGuard guard(device.id);
  WarmupReport r;
  for (const cuda::KernelEntry& k : cuda::all_kernels()) {
    ++r.kernels;
    // cudaFuncGetAttributes makes the lazy loader load the kernel's module and function.
    cudaFuncAttributes attr{};
    const cudaError_t err = cudaFuncGetAttributes(&attr, k.fn);
    if (err == cudaSuccess) {
      ++r.loaded;
      if (loaded != nullptr) loaded->push_back(k.fn);
    } else if (err == cudaErrorInvalidDeviceFunction || err == cudaErrorNoKernelImageForDevice) {
      cudaGetLastError();  // no image for this architecture: the kernel cannot run here
    } else {
      MHC_FAIL("warmup: loading ", k.name, " on ", device_name(device), " failed: ", cudaGetErrorName(err), " (",
               cudaGetErrorString(err), ")");
    }
  }
  // One launch as the launchers make it (the first such launch in a process costs tens of us).
  int cc_major = 0;
  MHC_CUDA_CHECK(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, device.id));
  cuda::launch_warm_kernel(cc_major >= 9);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::vector<KernelName> cuda_kernel_names() {
  std::vector<KernelName> out;
  for (const cuda::KernelEntry& k : cuda::all_kernels()) out.push_back(KernelName{k.fn, k.name});
  return out;
}

void cuda_create_workspace(Workspace::Impl& ws) {
  MHC_CHECK(ws.device.id >= 0 && ws.device.id < cuda_device_count(), "Workspace::create: device ",
            device_name(ws.device), " is not a visible CUDA device (", cuda_device_count(), " visible)");
  MHC_CUDA_CHECK(cudaDeviceGetAttribute(&ws.num_sms, cudaDevAttrMultiProcessorCount, ws.device.id));
  MHC_CUDA_CHECK(cudaDeviceGetAttribute(&ws.cc_major, cudaDevAttrComputeCapabilityMajor, ws.device.id));
  {
    const DeviceGuard guard(ws.device.id);
    ws.n4_mix =
        cuda::n4_configure_device(&ws.n4_gemm, &ws.n4_gemm_group, &ws.n4_gemm_wg, &ws.n4_gemm_rb, &ws.n4_post_bulk);
  }
  // The one-launch decode kernel's token limit (its partials are part of the scratch).
  const int64_t asked = ws.decode_max_tokens == 0 ? cuda::n4_decode_default_tokens() : ws.decode_max_tokens;
  ws.decode_tokens = asked < 0 ? 0 : asked < ws.max_tokens ? asked : ws.max_tokens;
  ws.scratch_bytes = cuda::n4_scratch_bytes(ws.max_tokens, ws.decode_tokens);
  // The decode kernel's counters sit after the scratch, 256-byte aligned, zeroed here once; the
  // staged plan's pre mailbox after them, poisoned here once (every byte 0xff: kPrePoison); the
  // overlap rows' counters last, zeroed: one a 32-token tile of the mailbox's tokens, then 2 tickets.
  const size_t barrier_offset = (ws.scratch_bytes + 255) / 256 * 256;
  ws.pre_mailbox_tokens = cuda::n4_pre_mailbox_tokens(ws.max_tokens);
  const size_t mailbox_bytes = static_cast<size_t>(ws.pre_mailbox_tokens) * 4 * sizeof(float);
  ws.tile_arrival_tiles = (ws.pre_mailbox_tokens + 31) / 32;
  const size_t tile_bytes =
      ws.tile_arrival_tiles > 0 ? static_cast<size_t>(ws.tile_arrival_tiles + 2) * sizeof(uint32_t) : 0;
  ws.device_memory = device_alloc(ws.device, barrier_offset + 256 + mailbox_bytes + tile_bytes);
  unsigned char* base = static_cast<unsigned char*>(ws.device_memory.get());
  ws.scratch = base;
  ws.decode_counters = reinterpret_cast<uint32_t*>(base + barrier_offset);
  ws.pre_mailbox = mailbox_bytes > 0 ? reinterpret_cast<float*>(base + barrier_offset + 256) : nullptr;
  unsigned char* counters = base + barrier_offset + 256 + mailbox_bytes;
  ws.tile_arrivals = tile_bytes > 0 ? reinterpret_cast<uint32_t*>(counters) : nullptr;
  ws.overlap_tickets = tile_bytes > 0 ? ws.tile_arrivals + ws.tile_arrival_tiles : nullptr;
  {
    const DeviceGuard guard(ws.device.id);
    MHC_CUDA_CHECK(cudaMemset(ws.decode_counters, 0, 256));
    if (mailbox_bytes > 0) MHC_CUDA_CHECK(cudaMemset(ws.pre_mailbox, 0xff, mailbox_bytes));
    if (tile_bytes > 0) MHC_CUDA_CHECK(cudaMemset(ws.tile_arrivals, 0, tile_bytes));
    MHC_CUDA_CHECK(cudaDeviceSynchronize());
  }
  if (ws.warmup) cuda_warmup(ws.device);
}

}  // namespace mhc::detail

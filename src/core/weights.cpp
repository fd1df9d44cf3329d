// src/core/weights.cpp - prepare(), prepare_head() (into memory they allocate or into the
// caller's), prepared_bytes(), attach_prepared() and Workspace::create().
#include "mhc/weights.hpp"

#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__linux__)
#include <link.h>
#include <unistd.h>
#endif

#include "mhc/error.hpp"
#include "src/core/cuda_hooks.hpp"
#include "src/core/warm_calls.hpp"
#include "src/core/prepared.hpp"
#include "src/registry/registry.hpp"

namespace mhc {

int32_t PreparedWeights::n() const { return impl_->n; }
int64_t PreparedWeights::H() const { return impl_->H; }
int32_t PreparedWeights::rows() const { return impl_->rows; }
bool PreparedWeights::is_head() const { return impl_->head; }
Device PreparedWeights::device() const { return impl_->device; }

Device Workspace::device() const { return impl_->device; }
bool Workspace::bound() const { return impl_->bind_stream; }
void* Workspace::stream() const { return impl_->stream; }
int64_t Workspace::max_tokens() const { return impl_->max_tokens; }
int32_t Workspace::max_n() const { return impl_->max_n; }

namespace {

// Copies a contiguous fp32 host tensor of the given shape; names it in every error.
std::vector<float> host_copy(const TensorView& t, const char* name, std::initializer_list<int64_t> shape) {
  MHC_CHECK(t.present(), name, ": required tensor is absent");
  MHC_CHECK(t.rank == static_cast<int>(shape.size()), name, ": expected rank ", shape.size(),
            ", got rank ", t.rank, " (shape ", shape_string(t), ")");
  int i = 0;
  for (int64_t s : shape) {
    MHC_CHECK(t.shape[i] == s, name, ": expected dimension ", i, " to be ", s, ", got ", t.shape[i],
              " (shape ", shape_string(t), ")");
    ++i;
  }
  MHC_CHECK(t.dtype == DType::kFloat32, name, ": expected dtype fp32, got ", dtype_name(t.dtype));
  MHC_CHECK(t.device.type == DeviceType::kCPU, name,
            ": prepare reads checkpoint tensors from host memory, got a tensor on ",
            device_name(t.device));
  MHC_CHECK(t.is_contiguous(), name, ": expected a contiguous tensor");
  MHC_CHECK(t.data != nullptr || t.numel() == 0, name, ": null data pointer");
  MHC_CHECK(reinterpret_cast<uintptr_t>(t.data) % alignof(float) == 0, name,
            ": data pointer is not 4-byte aligned");
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (!out.empty()) std::memcpy(out.data(), t.data, out.size() * sizeof(float));
  return out;
}

void check_dims(int32_t n, int64_t H) {
  MHC_CHECK(n >= 1 && n <= kMaxStreams, "prepare: n must be in 1..", kMaxStreams, ", got ", n);
  MHC_CHECK(H >= 1 && H <= kMaxHidden, "prepare: H must be in 1..", kMaxHidden, " (mhc::kMaxHidden), got ", H);
}

PreparedWeights finish(std::shared_ptr<PreparedWeights::Impl> w, Device device, void* destination) {
  // fn_b[r, h] = sum_j fn[r, j*H + h]: the weight of a broadcast (n identical streams) input.
  const int64_t H = w->H, K = w->n * H;
  std::vector<float> fn_b(static_cast<size_t>(w->rows * H), 0.0f);
  for (int32_t r = 0; r < w->rows; ++r) {
    for (int64_t h = 0; h < H; ++h) {
      double sum = 0.0;
      for (int32_t j = 0; j < w->n; ++j) sum += w->fn[r * K + j * H + h];
      fn_b[r * H + h] = static_cast<float>(sum);
    }
  }
  w->fn_b = std::move(fn_b);
  w->device = device;
  if (device.type == DeviceType::kCUDA) {
    detail::cuda_upload_weights(*w, destination);
    w->caller_memory = destination != nullptr;
  } else {
    MHC_CHECK(device.type == DeviceType::kCPU, "prepare: unsupported device ", device_name(device));
    if (destination != nullptr) {
      // The CPU layout [fn][fn_b][scale][base] in the caller's memory; the weights view it.
      float* dst = static_cast<float*>(destination);
      detail::HostFloats* parts[] = {&w->fn, &w->fn_b, &w->scale, &w->base};
      for (detail::HostFloats* part : parts) {
        const size_t count = part->size();
        if (count != 0) std::memcpy(dst, part->data(), count * sizeof(float));
        *part = detail::HostFloats(dst, count);
        dst += count;
      }
      w->caller_memory = true;
    }
  }
  return PreparedWeights(std::move(w));
}

int32_t block_rows(int32_t n, bool head) { return head ? n : (n + 2) * n; }

// Floats of the CPU layout: fn [rows, n*H], fn_b [rows, H], scale [3 | 1], base [rows].
size_t cpu_prepared_floats(int32_t n, int64_t H, bool head) {
  const int64_t rows = block_rows(n, head);
  return static_cast<size_t>(rows * n * H + rows * H + (head ? 1 : 3) + rows);
}

// Checks a caller's buffer for prepared weights of this shape; returns its data pointer.
void* check_buffer(const TensorView& t, const char* op, const char* name, int32_t n, int64_t H, bool head) {
  MHC_CHECK(t.present(), op, ": ", name, ": required tensor is absent");
  MHC_CHECK(t.device.type == DeviceType::kCPU || t.device.type == DeviceType::kCUDA, op, ": ", name,
            ": unsupported device ", device_name(t.device));
  MHC_CHECK(t.is_contiguous(), op, ": ", name, ": expected a contiguous tensor (shape ", shape_string(t), ")");
  const size_t need = prepared_bytes(n, H, head, t.device);
  int64_t have = 0;
  MHC_CHECK(mul_fits(t.numel(), dtype_size(t.dtype), &have), op, ": ", name, ": size overflows");
  MHC_CHECK(static_cast<size_t>(have) >= need, op, ": ", name, ": holds ", have, " bytes, prepared weights of n = ", n,
            ", H = ", H, (head ? " (head)" : ""), " on ", device_name(t.device), " need ", need,
            " (mhc::prepared_bytes)");
  MHC_CHECK(t.data != nullptr, op, ": ", name, ": null data pointer");
  MHC_CHECK(reinterpret_cast<uintptr_t>(t.data) % 16 == 0, op, ": ", name, ": data pointer is not 16-byte aligned");
  return t.data;
}

}  // namespace

namespace {

std::shared_ptr<PreparedWeights::Impl> mix_impl(const MixWeightsView& weights, int32_t n, int64_t H) {
  check_dims(n, H);
  auto w = std::make_shared<PreparedWeights::Impl>();
  w->n = n;
  w->H = H;
  w->rows = (n + 2) * n;
  w->head = false;
  w->fn = host_copy(weights.fn, "fn", {w->rows, n * H});
  w->scale = host_copy(weights.scale, "scale", {3});
  w->base = host_copy(weights.base, "base", {w->rows});
  return w;
}

std::shared_ptr<PreparedWeights::Impl> head_impl(const HeadWeightsView& weights, int32_t n, int64_t H) {
  check_dims(n, H);
  auto w = std::make_shared<PreparedWeights::Impl>();
  w->n = n;
  w->H = H;
  w->rows = n;
  w->head = true;
  w->fn = host_copy(weights.fn, "fn_head", {n, n * H});
  w->scale = host_copy(weights.scale, "scale_head", {1});
  w->base = host_copy(weights.base, "base_head", {n});
  return w;
}

}  // namespace

PreparedWeights prepare(const MixWeightsView& weights, int32_t n, int64_t H, Device device) {
  return finish(mix_impl(weights, n, H), device, nullptr);
}

PreparedWeights prepare_head(const HeadWeightsView& weights, int32_t n, int64_t H, Device device) {
  return finish(head_impl(weights, n, H), device, nullptr);
}

PreparedWeights prepare(const MixWeightsView& weights, int32_t n, int64_t H, const TensorView& destination) {
  check_dims(n, H);
  void* dst = check_buffer(destination, "prepare", "destination", n, H, false);
  return finish(mix_impl(weights, n, H), destination.device, dst);
}

PreparedWeights prepare_head(const HeadWeightsView& weights, int32_t n, int64_t H, const TensorView& destination) {
  check_dims(n, H);
  void* dst = check_buffer(destination, "prepare_head", "destination", n, H, true);
  return finish(head_impl(weights, n, H), destination.device, dst);
}

size_t prepared_bytes(int32_t n, int64_t H, bool head, Device device) {
  check_dims(n, H);
  if (device.type == DeviceType::kCUDA) return detail::cuda_prepared_bytes(n, H, block_rows(n, head));
  MHC_CHECK(device.type == DeviceType::kCPU, "prepared_bytes: unsupported device ", device_name(device));
  return cpu_prepared_floats(n, H, head) * sizeof(float);
}

PreparedWeights attach_prepared(const TensorView& buffer, int32_t n, int64_t H, bool head) {
  check_dims(n, H);
  void* data = check_buffer(buffer, "attach_prepared", "buffer", n, H, head);
  auto w = std::make_shared<PreparedWeights::Impl>();
  w->n = n;
  w->H = H;
  w->rows = block_rows(n, head);
  w->head = head;
  w->device = buffer.device;
  w->caller_memory = true;
  if (buffer.device.type == DeviceType::kCUDA) {
    detail::cuda_attach_weights(*w, data);
  } else {
    const float* src = static_cast<const float*>(data);
    const size_t rows = static_cast<size_t>(w->rows);
    const size_t sizes[] = {rows * static_cast<size_t>(n * H), rows * static_cast<size_t>(H), head ? 1u : 3u, rows};
    detail::HostFloats* parts[] = {&w->fn, &w->fn_b, &w->scale, &w->base};
    for (int i = 0; i < 4; ++i) {
      *parts[i] = detail::HostFloats(src, sizes[i]);
      src += sizes[i];
    }
  }
  return PreparedWeights(std::move(w));
}

namespace {

#if defined(__linux__)
// The executable code of the object that holds this library (the program where it is linked
// statically, or the shared library): one read per page, so that the first call of each
// operator does not take the page faults of code it runs for the first time (measured: the
// first operator call of a process, 40-130 us above its steady state on the H200 and on the CPU,
// with every kernel already loaded).
int touch_code_pages(dl_phdr_info* info, size_t, void* data) {
  const auto self = reinterpret_cast<uintptr_t>(data);
  bool mine = false;
  for (int i = 0; i < info->dlpi_phnum && !mine; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    mine = ph.p_type == PT_LOAD && self >= start && self < start + ph.p_memsz;
  }
  if (!mine) return 0;
  const long page = sysconf(_SC_PAGESIZE);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || (ph.p_flags & PF_X) == 0 || page <= 0) continue;
    const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    unsigned sum = 0;
    for (uintptr_t a = start - start % static_cast<uintptr_t>(page); a < start + ph.p_memsz; a += page) {
      if (a >= start) sum += *reinterpret_cast<const volatile unsigned char*>(a);
    }
    (void)sum;
  }
  return 1;  // found: stop iterating
}
#endif

void prefault_code() {
#if defined(__linux__)
  dl_iterate_phdr(touch_code_pages, reinterpret_cast<void*>(&prefault_code));
#endif
}

// The CPU backend's warmup: its OpenMP thread team is created by the first parallel region, which
// would otherwise be the first call's (milliseconds on a loaded machine).
void cpu_start_threads() {
#ifdef _OPENMP
  int threads = 0;
#pragma omp parallel
  {
#pragma omp atomic
    ++threads;
  }
  (void)threads;
#endif
}

}  // namespace

Workspace Workspace::create(Device device, int64_t max_tokens, int32_t max_n) {
  WorkspaceOptions o;
  o.max_tokens = max_tokens;
  o.max_n = max_n;
  return create(device, o);
}

Workspace Workspace::create(Device device, const WorkspaceOptions& o) {
  MHC_CHECK(o.max_tokens >= 0 && o.max_tokens <= kMaxTokens, "Workspace::create: max_tokens must be in 0..",
            kMaxTokens, ", got ", o.max_tokens);
  MHC_CHECK(o.max_n >= 1 && o.max_n <= kMaxStreams, "Workspace::create: max_n must be in 1..",
            kMaxStreams, ", got ", o.max_n);
  MHC_CHECK(o.n4_slice_tokens >= 0 && o.n4_slice_tokens % 32 == 0,
            "Workspace::create: n4_slice_tokens must be 0 or a positive multiple of 32, got ", o.n4_slice_tokens);
  MHC_CHECK(o.decode_max_tokens >= -1 && o.decode_max_tokens <= kMaxDecodeTokens,
            "Workspace::create: decode_max_tokens must be in -1..", kMaxDecodeTokens, ", got ", o.decode_max_tokens);
  Workspace ws;
  ws.impl_ = std::make_shared<Impl>();
  ws.impl_->device = device;
  ws.impl_->max_tokens = o.max_tokens;
  ws.impl_->max_n = o.max_n;
  ws.impl_->n4_slice_tokens = o.n4_slice_tokens;
  ws.impl_->decode_max_tokens = o.decode_max_tokens;
  ws.impl_->warmup = o.warmup;
  ws.impl_->bind_stream = o.bind_stream;
  ws.impl_->stream = o.stream;
  MHC_CHECK(o.stream == nullptr || o.bind_stream,
            "Workspace::create: stream is given but bind_stream is false (set bind_stream to bind the workspace)");
  if (device.type == DeviceType::kCUDA) detail::cuda_create_workspace(*ws.impl_);
  if (o.warmup) {
    prefault_code();
    if (device.type == DeviceType::kCPU) cpu_start_threads();
    (void)detail::variants();  // the dispatcher's table, built once, here rather than in the first call
    detail::warm_calls(ws);     // CUDA: one call of each operator, so the first real one costs what later ones do
  }
  return ws;
}

WarmupReport warmup(Device device) {
  if (device.type == DeviceType::kCPU) {
    cpu_start_threads();
    return WarmupReport{};
  }
  MHC_CHECK(device.type == DeviceType::kCUDA, "warmup: unsupported device ", device_name(device));
  return detail::cuda_warmup(device);
}

}  // namespace mhc

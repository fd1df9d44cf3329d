// src/core/prepared.hpp - what prepare() produces, and the workspace internals.
//
// Host copies are always kept in fp32 (they are small next to a model's activations and let
// the CPU backend and the checks read the exact weights). Device copies exist for CUDA:
//   fn     [rows, K] fp32, row-major as in the checkpoint
//   fn_t   [K, rows] fp32, transposed: a thread reading k reads all rows contiguously
//   fn_b_t [H, rows] fp32, broadcast sum fn_b[:, h] = sum_j fn[:, j*H + h], transposed
//   scale  [3] (head: [1]), base [rows]
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "mhc/weights.hpp"

namespace mhc {

namespace detail {

/// A host fp32 array the prepared weights own (prepare) or view (the caller's memory: prepare
/// into a destination, attach_prepared). Reads like the std::vector it replaces.
class HostFloats {
 public:
  HostFloats() = default;
  HostFloats(std::vector<float> v) : owned_(std::move(v)), ptr_(owned_.data()), size_(owned_.size()) {}  // NOLINT
  HostFloats(const float* ptr, size_t size) : ptr_(ptr), size_(size) {}
  HostFloats(HostFloats&&) = default;  // a moved vector keeps its buffer: ptr_ stays valid
  HostFloats& operator=(HostFloats&&) = default;
  HostFloats(const HostFloats&) = delete;
  HostFloats& operator=(const HostFloats&) = delete;
  const float* data() const { return ptr_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  float operator[](size_t i) const { return ptr_[i]; }
  /// True when the array lives in memory the weights do not own.
  bool is_view() const { return owned_.empty() && ptr_ != nullptr; }

 private:
  std::vector<float> owned_;
  const float* ptr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace detail

struct PreparedWeights::Impl {
  int32_t n = 0;
  int64_t H = 0;
  int32_t rows = 0;  // M for a mix block, n for a head
  bool head = false;
  Device device{};

  // host copies (fp32, exact). For CPU weights prepared into a destination (or attached) they
  // view the caller's buffer, laid out [fn][fn_b][scale][base] (prepared_bytes); CUDA weights in
  // a caller's buffer keep them only where prepare computed them (attach_prepared has none, and
  // no CUDA call reads them).
  detail::HostFloats fn;    // [rows, K]
  detail::HostFloats fn_b;  // [rows, H]
  detail::HostFloats scale; // [3] or [1]
  detail::HostFloats base;  // [rows]

  // device copies (CUDA only; owned by `device_memory`)
  const float* d_fn_t = nullptr;    // [K, rows]
  const float* d_fn_b_t = nullptr;  // [H, rows]
  const float* d_scale = nullptr;   // [3] or [1]
  const float* d_base = nullptr;    // [rows]
  // n = 4 tensor-core path (src/cuda/n4/fragments.cu): fn split into three bf16 parts (hi + mid + lo
  // reproduces fp32 to ~2^-24), laid out in mma.m16n8k16 B-fragment order so each warp loads
  // its fragments with coalesced 8-byte reads. Null when the shape is outside that path.
  const uint32_t* d_fn_frag = nullptr;
  // fn_b in that layout as a weight over 4 quarter-rows of H / 4 columns (pre_broadcast's
  // cuda_n4b_staged plan; n4_broadcast_fragments). Null for a head or outside the n4 path.
  const uint32_t* d_fn_b_frag = nullptr;
  std::shared_ptr<void> device_memory;  // null where the copies live in the caller's memory
  bool caller_memory = false;           // prepared into a destination / attached
};

struct Workspace::Impl {
  Device device{};
  int64_t max_tokens = 0;
  int32_t max_n = 0;
  void* scratch = nullptr;       // device scratch for split-K partials (fp32)
  size_t scratch_bytes = 0;
  int32_t num_sms = 0;           // multiprocessors of the device, read at creation
  int32_t cc_major = 0;          // compute capability (major) of the device
  bool n4_mix = false;           // the device has the shared memory of the n = 4 mix kernel
  bool n4_gemm = false;          // ... and of gemm_kernel (the staged plan's GEMM stage)
  bool n4_gemm_group = false;    // ... and of gemm_group_kernel (the GEMM stage at large T)
  bool n4_gemm_wg = false;       // ... and runs gemm_wg_kernel (sm_90a wgmma: the staged_wg rows)
  bool n4_gemm_rb = false;       // ... and of gemm_rb_kernel (sm_90+, B fragments in registers: the staged_rb rows)
  bool n4_post_bulk = false;     // ... and post_bulk_kernel, post_collapse_kernel (sm_90+ bulk copies)
  int64_t n4_slice_tokens = 0;   // WorkspaceOptions::n4_slice_tokens; 0: the default
  int64_t decode_max_tokens = 0; // WorkspaceOptions::decode_max_tokens as asked (0 default, -1 off)
  // The one-launch decode kernel (src/cuda/n4/decode_kernel.cu), set by cuda_create_workspace:
  int64_t decode_tokens = 0;     // largest T it takes with this workspace (0: none)
  uint32_t* decode_counters = nullptr;  // [3] its tickets / arrivals / done counters (zeroed once)
  // The staged plan's pre mailbox (src/cuda/n4/staged.cu): [pre_mailbox_tokens][4] floats, every
  // float the poison kPrePoison between calls (set here once, restored by each collapse that read it).
  float* pre_mailbox = nullptr;
  int64_t pre_mailbox_tokens = 0;
  // The overlap rows' counters (staged.cu): tile_arrivals [tile_arrival_tiles] (N4Params::
  // tile_arrivals), then overlap_tail_kernel's 2 ticket counters (overlap_tickets); uint32, zeroed
  // by Workspace::create, zero again after each call.
  uint32_t* tile_arrivals = nullptr;
  int64_t tile_arrival_tiles = 0;
  uint32_t* overlap_tickets = nullptr;
  bool warmup = true;            // WorkspaceOptions::warmup: load every kernel at creation
  bool bind_stream = false;      // WorkspaceOptions::bind_stream: calls on another stream throw
  void* stream = nullptr;        // WorkspaceOptions::stream: the stream it is bound to
  std::shared_ptr<void> device_memory;
};

}  // namespace mhc

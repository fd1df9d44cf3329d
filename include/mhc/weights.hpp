// mhc/weights.hpp - weight preparation (spec section 4, op 8) and the explicit workspace.
//
// prepare() runs once at load time: it copies the checkpoint tensors into whatever layout the
// target backend wants (including the pre-summed broadcast weight fn_b used by
// pre_broadcast). Per-call work never re-derives any of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "mhc/config.hpp"
#include "mhc/tensor.hpp"

namespace mhc {

/// @brief The checkpoint tensors of one mHC block (an attention or FFN boundary).
struct MixWeightsView {
  TensorView fn;     ///< [M, K] fp32, contiguous (hc_attn_fn / hc_ffn_fn)
  TensorView scale;  ///< [3] fp32: alpha_pre, alpha_post, alpha_comb (hc_attn_scale / hc_ffn_scale)
  TensorView base;   ///< [M] fp32 (hc_attn_base / hc_ffn_base)
};

/// @brief The checkpoint tensors of the learned head (V4).
struct HeadWeightsView {
  TensorView fn;     ///< [n, K] fp32, contiguous (hc_head_fn)
  TensorView scale;  ///< [1] fp32 (hc_head_scale)
  TensorView base;   ///< [n] fp32 (hc_head_base)
};

/// @brief Weights prepared for one device. Immutable, cheap to copy (shared ownership).
class PreparedWeights {
 public:
  struct Impl;  ///< backend-private layout (src/core/prepared.hpp)
  PreparedWeights() = default;
  explicit PreparedWeights(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

  /// @brief True once prepared.
  bool valid() const { return impl_ != nullptr; }
  /// @brief Streams the weights were prepared for.
  int32_t n() const;
  /// @brief Hidden size the weights were prepared for.
  int64_t H() const;
  /// @brief Rows of fn: M for a mix block, n for a head.
  int32_t rows() const;
  /// @brief True for head weights (prepare_head), false for a mix block (prepare).
  bool is_head() const;
  /// @brief Where the prepared copies live.
  Device device() const;
  /// @brief Backend-private layout.
  const Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<const Impl> impl_;
};

/// @brief Prepares the weights of one mix block for `device`.
/// @param w      fn [M,K], scale [3], base [M], fp32, on the CPU or on `device`
/// @param n      streams, 1..8
/// @param H      hidden size, >= 1
/// @param device where the prepared copies will live (CPU or a CUDA device)
/// @throws mhc::Error on a wrong shape, dtype or layout
PreparedWeights prepare(const MixWeightsView& w, int32_t n, int64_t H, Device device);

/// @brief Prepares the learned head weights (fn [n,K], scale [1], base [n]) for `device`.
PreparedWeights prepare_head(const HeadWeightsView& w, int32_t n, int64_t H, Device device);

/// @brief Bytes of the caller's memory that prepare(..., destination) and attach_prepared need
/// for a mix block (head = false) or a learned head of n streams and hidden size H on `device`
/// (the layouts differ between the CPU and CUDA; the figure is exact, never an upper bound).
/// @throws mhc::Error on n or H out of range or an unsupported device
size_t prepared_bytes(int32_t n, int64_t H, bool head, Device device);

/// @brief prepare() into memory the caller owns: `destination` (any dtype, contiguous, 16-byte
/// aligned, at least prepared_bytes(n, H, false, destination.device) bytes, on the CPU or a CUDA
/// device) receives the prepared copies, and the returned weights read them from there (an
/// engine keeps the buffer as its own, counts it, saves and loads it). Keep the memory alive and
/// unchanged while the weights are in use. Synchronous (the copies are complete on return).
/// @throws mhc::Error on a wrong shape, dtype or layout of a weight or the destination
PreparedWeights prepare(const MixWeightsView& w, int32_t n, int64_t H, const TensorView& destination);
/// @brief prepare_head() into memory the caller owns (see the overload of prepare above).
PreparedWeights prepare_head(const HeadWeightsView& w, int32_t n, int64_t H, const TensorView& destination);

/// @brief Weights over a buffer that prepare(..., destination) filled for the same n, H, head
/// and device type, e.g. in another process or after loading the buffer from a checkpoint of the
/// engine: nothing is copied or computed (cheap enough to call per operator call). The bytes are
/// not checked (they are the caller's); their size, alignment and device are.
/// @throws mhc::Error on a buffer too small, misaligned, not contiguous or on an unsupported device
PreparedWeights attach_prepared(const TensorView& buffer, int32_t n, int64_t H, bool head);

/// @brief How a workspace is made: its capacity and the tuning knobs of the CUDA kernels (the
/// one place they are set; docs/performance.md says what each measured). Results never depend
/// on the knobs: every variant gives the same bits for any slicing (batch invariance).
struct WorkspaceOptions {
  int64_t max_tokens = 0;        ///< largest T a call takes in one piece (larger T run in slices)
  int32_t max_n = kMaxStreams;   ///< largest n of the calls it serves (checked at each call)
  /// Tokens per slice of the n = 4 mix kernels where a collapse follows (a multiple of 32); 0:
  /// the default (1920).
  int64_t n4_slice_tokens = 0;
  /// Largest T of the one-launch decode kernel (n = 4); 0: the default (128); -1: decode off, the
  /// dispatcher then runs the multi-kernel plans at every T.
  int64_t decode_max_tokens = 0;
  /// Load every CUDA kernel the device can run at creation (mhc::warmup), so that no call pays
  /// the lazy module load at its first launch. On by default.
  bool warmup = true;
  /// Bind the workspace to `stream`: a call on another stream throws mhc::Error instead of
  /// racing. Unbound (the default), the rule is: one stream at a time; a call on another stream
  /// must be ordered after the previous stream's calls by the caller (an event), or use another
  /// workspace (one workspace per stream; docs/integration.md).
  bool bind_stream = false;
  void* stream = nullptr;  ///< cudaStream_t the workspace is bound to (null: the default stream)
};

/// @brief Device scratch memory for the split reductions of the CUDA kernels.
///
/// Created explicitly, before use (spec section 7): operators never allocate, so they work on
/// a stream that is capturing a CUDA graph from the first call on; creation also loads every
/// kernel (WorkspaceOptions::warmup), so the first call costs what later ones do. One workspace
/// serves one stream at a time: give each concurrent stream its own (bind_stream makes a call on
/// another stream an error; unbound, a move to another stream must be ordered by the caller, e.g.
/// with an event). CPU operators need none.
class Workspace {
 public:
  struct Impl;
  Workspace() = default;

  /// @brief Allocates scratch for calls of up to `max_tokens` tokens with up to `n` streams on
  /// `device`, and initialises it (synchronously: call this before capturing a graph).
  static Workspace create(Device device, int64_t max_tokens, int32_t max_n = kMaxStreams);
  /// @brief The same, with every option named (WorkspaceOptions).
  static Workspace create(Device device, const WorkspaceOptions& options);

  bool valid() const { return impl_ != nullptr; }
  Device device() const;
  int64_t max_tokens() const;
  int32_t max_n() const;
  /// True when bound to one stream (WorkspaceOptions::bind_stream); stream() is that stream.
  bool bound() const;
  void* stream() const;
  Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

/// @brief What mhc::warmup did.
struct WarmupReport {
  int32_t kernels = 0;  ///< CUDA kernels of the library (src/cuda/kernel_list.cuh)
  int32_t loaded = 0;   ///< of them, loaded for the device (the rest have no image for its architecture)
  double seconds = 0;   ///< wall time of the call
};

/// @brief Loads every CUDA kernel of the library that `device` can run (CUDA loads modules
/// lazily, at a kernel's first launch, otherwise: a first call then costs several times a later
/// one). Workspace::create does it (WorkspaceOptions::warmup); call it yourself to warm a device
/// before its workspaces exist. Idempotent; a CPU device has nothing to load (all zeros).
/// @throws mhc::Error on a device that is not visible or a build without CUDA asked for CUDA
WarmupReport warmup(Device device);

}  // namespace mhc

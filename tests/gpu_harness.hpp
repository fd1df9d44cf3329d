// tests/gpu_harness.hpp - the pieces of the GPU test suite that are not about one operator:
// device memory, streams and graphs (thin RAII over the CUDA runtime), host tensors with a
// device mirror and row padding, seeded random fills, and the comparisons of spec section 6.
//
// Every CUDA runtime call sits behind #ifdef MHC_WITH_CUDA; in a build without CUDA the same
// functions exist and throw, and the tests never reach them because they skip first
// (MHC_REQUIRE_GPU). Failures of the runtime throw std::runtime_error naming the call, which
// gtest reports as a failure of the test that hit it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mhc/mhc.hpp"
#include "src/core/bf16.hpp"
#include "tools/model.hpp"

#ifdef MHC_WITH_CUDA
#include <cuda_runtime.h>
#endif

#ifdef _OPENMP
#define MHC_TEST_PARALLEL_FOR _Pragma("omp parallel for schedule(static)")
#else
#define MHC_TEST_PARALLEL_FOR
#endif

/// First statement of every GPU test: without a visible CUDA device (or without the CUDA
/// backend) the test reports SKIPPED, never a silent pass.
#define MHC_REQUIRE_GPU()                                                                   \
  do {                                                                                      \
    if (!mhc::cuda_available()) {                                                           \
      GTEST_SKIP() << "no CUDA device visible (or mhc built without CUDA): GPU test skipped"; \
    }                                                                                       \
  } while (0)

namespace mhc_test {

using mhc::DType;
using mhc::TensorView;

// ---------------------------------------------------------------------------------------------
// CUDA runtime, thinly wrapped.

[[noreturn]] inline void no_cuda(const char* what) {
  throw std::runtime_error(std::string(what) + ": this build of the tests has no CUDA runtime");
}

#ifdef MHC_WITH_CUDA
inline void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorName(err) + " (" +
                             cudaGetErrorString(err) + ")");
  }
}
#endif

/// The CUDA device every test uses.
inline mhc::Device gpu() { return mhc::Device{mhc::DeviceType::kCUDA, 0}; }
inline mhc::Device cpu() { return mhc::Device{mhc::DeviceType::kCPU, 0}; }

/// Waits for all device work and turns an asynchronous fault into an exception naming `what`.
inline void device_sync(const std::string& what) {
#ifdef MHC_WITH_CUDA
  const cudaError_t err = cudaDeviceSynchronize();
  const cudaError_t last = cudaGetLastError();
  if (err != cudaSuccess || last != cudaSuccess) {
    const cudaError_t e = err != cudaSuccess ? err : last;
    throw std::runtime_error("device fault after " + what + ": " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
  }
#else
  (void)what;
  no_cuda("cudaDeviceSynchronize");
#endif
}

/// Free and total device memory in bytes.
inline void device_memory(size_t& free_bytes, size_t& total_bytes) {
#ifdef MHC_WITH_CUDA
  cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
#else
  free_bytes = total_bytes = 0;
  no_cuda("cudaMemGetInfo");
#endif
}

/// One cudaMalloc'd block (move-only).
class DevMem {
 public:
  DevMem() = default;
  explicit DevMem(size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
#ifdef MHC_WITH_CUDA
    cuda_check(cudaMalloc(&ptr_, bytes), ("cudaMalloc(" + std::to_string(bytes) + " bytes)").c_str());
#else
    no_cuda("cudaMalloc");
#endif
  }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  DevMem(DevMem&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; o.bytes_ = 0; }
  DevMem& operator=(DevMem&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  ~DevMem() { release(); }

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void release() {
#ifdef MHC_WITH_CUDA
    if (ptr_ != nullptr) cudaFree(ptr_);
#endif
    ptr_ = nullptr;
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

inline void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
#ifdef MHC_WITH_CUDA
  cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
#else
  (void)dst;
  (void)src;
  no_cuda("cudaMemcpy");
#endif
}

inline void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
#ifdef MHC_WITH_CUDA
  cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
#else
  (void)dst;
  (void)src;
  no_cuda("cudaMemcpy");
#endif
}

inline void copy_on_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
#ifdef MHC_WITH_CUDA
  cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy D2D");
#else
  (void)dst;
  (void)src;
  no_cuda("cudaMemcpy");
#endif
}

/// Fills device bytes with 0xFF (a NaN in bf16 and in fp32) and waits for it.
inline void poison_device(void* dst, size_t bytes) {
  if (bytes == 0) return;
#ifdef MHC_WITH_CUDA
  cuda_check(cudaMemset(dst, 0xFF, bytes), "cudaMemset");
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after cudaMemset");
#else
  (void)dst;
  no_cuda("cudaMemset");
#endif
}

/// A fresh non-blocking stream (move-only); no call has ever been made on it.
class Stream {
 public:
  Stream() {
#ifdef MHC_WITH_CUDA
    cudaStream_t s = nullptr;
    cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    handle_ = s;
#else
    no_cuda("cudaStreamCreate");
#endif
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
#ifdef MHC_WITH_CUDA
    if (handle_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
#endif
  }
  void* get() const { return handle_; }
  void sync(const std::string& what) const {
#ifdef MHC_WITH_CUDA
    cuda_check(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)),
               ("cudaStreamSynchronize after " + what).c_str());
#else
    (void)what;
    no_cuda("cudaStreamSynchronize");
#endif
  }

 private:
  void* handle_ = nullptr;
};

/// Which cudaStreamCaptureMode a capture uses.
enum class CaptureMode { kThreadLocal, kGlobal };
inline const char* to_string(CaptureMode m) { return m == CaptureMode::kGlobal ? "global" : "thread_local"; }

/// An instantiated CUDA graph made by capturing `body` on `stream` (move-only).
class Graph {
 public:
  /// Captures `body()` (which must enqueue its work on `stream`) and instantiates the graph.
  /// If `body` throws, the capture is ended and the exception propagates.
  template <typename Body>
  static Graph capture(const Stream& stream, CaptureMode mode, Body&& body) {
    Graph g;
#ifdef MHC_WITH_CUDA
    auto s = static_cast<cudaStream_t>(stream.get());
    cuda_check(cudaStreamBeginCapture(s, mode == CaptureMode::kGlobal ? cudaStreamCaptureModeGlobal
                                                                       : cudaStreamCaptureModeThreadLocal),
               "cudaStreamBeginCapture");
    cudaGraph_t graph = nullptr;
    try {
      body();
    } catch (...) {
      cudaStreamEndCapture(s, &graph);
      if (graph != nullptr) cudaGraphDestroy(graph);
      cudaGetLastError();
      throw;
    }
    cuda_check(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture (was the capture invalidated?)");
    g.graph_ = graph;
    cudaGraphExec_t exec = nullptr;
    cuda_check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    g.exec_ = exec;
#else
    (void)stream;
    (void)mode;
    (void)body;
    no_cuda("cudaStreamBeginCapture");
#endif
    return g;
  }
  Graph(Graph&& o) noexcept : graph_(o.graph_), exec_(o.exec_) { o.graph_ = o.exec_ = nullptr; }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph& operator=(Graph&&) = delete;
  ~Graph() {
#ifdef MHC_WITH_CUDA
    if (exec_ != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    if (graph_ != nullptr) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
#endif
  }
  /// Number of nodes in the captured graph.
  size_t nodes() const {
#ifdef MHC_WITH_CUDA
    size_t count = 0;
    cuda_check(cudaGraphGetNodes(static_cast<cudaGraph_t>(graph_), nullptr, &count), "cudaGraphGetNodes");
    return count;
#else
    return 0;
#endif
  }
  /// Launches the graph on `stream` and waits for it.
  void replay(const Stream& stream) const {
#ifdef MHC_WITH_CUDA
    cuda_check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(stream.get())),
               "cudaGraphLaunch");
    stream.sync("graph replay");
#else
    (void)stream;
    no_cuda("cudaGraphLaunch");
#endif
  }

 private:
  Graph() = default;
  void* graph_ = nullptr;
  void* exec_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Seeds and random values.

/// splitmix64 finaliser: combines a seed with one more value.
inline uint64_t mix_seed(uint64_t seed, uint64_t value) {
  uint64_t z = seed ^ (value + 0x9e3779b97f4a7c15ull + (seed << 6) + (seed >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint16_t to_bf16(double v) { return mhc::detail::float_to_bf16(static_cast<float>(v)); }
inline float from_bf16(uint16_t b) { return mhc::detail::bf16_to_float(b); }

constexpr uint16_t kBf16Nan = 0x7fc0, kBf16PosInf = 0x7f80, kBf16NegInf = 0xff80;
constexpr uint16_t kPoison16 = 0xffff;
constexpr uint32_t kPoison32 = 0xffffffffu;

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// ---------------------------------------------------------------------------------------------
// Tensors: host storage (input data, or the reference's output), a device mirror, and the
// downloaded device result. Dimension 0 is tokens with a row stride >= the row length; the
// padding between rows is part of the allocation (poisoned, and checked on outputs).

struct Tensor {
  DType dtype = DType::kBFloat16;
  std::vector<int64_t> shape;  // rank 1 (a weight, no token dimension) or 2..3 (token-major)
  int64_t stride0 = 0;         // elements between rows; row_len() for rank 1
  bool output = false;
  std::vector<uint16_t> h16, g16;  // bf16: host (input / reference output), downloaded device copy
  std::vector<float> h32, g32;     // fp32: the same
  DevMem dev;

  bool token_major() const { return shape.size() >= 2; }
  int64_t rows() const { return token_major() ? shape[0] : 1; }
  int64_t row_len() const {
    if (!token_major()) return shape[0];
    int64_t len = 1;
    for (size_t d = 1; d < shape.size(); ++d) len *= shape[d];
    return len;
  }
  int64_t stride() const { return token_major() ? stride0 : row_len(); }
  size_t elems() const { return static_cast<size_t>(rows() * stride()); }
  size_t esize() const { return dtype == DType::kBFloat16 ? 2 : 4; }
  size_t bytes() const { return elems() * esize(); }
  bool padded() const { return stride() > row_len(); }

  void* host() { return dtype == DType::kBFloat16 ? static_cast<void*>(h16.data()) : static_cast<void*>(h32.data()); }
  void* got() { return dtype == DType::kBFloat16 ? static_cast<void*>(g16.data()) : static_cast<void*>(g32.data()); }

  /// A view of rows [row0, row0 + nrows) (nrows < 0: to the end) of the host or device copy.
  TensorView view(bool on_device, int64_t row0 = 0, int64_t nrows = -1) {
    return view_of(on_device ? dev.get() : host(), on_device ? gpu() : cpu(), row0, nrows);
  }
  /// A host view of the downloaded device result.
  TensorView view_got() { return view_of(got(), cpu(), 0, -1); }

  TensorView view_of(void* data, mhc::Device device, int64_t row0, int64_t nrows) const {
    TensorView v;
    const size_t offset = static_cast<size_t>(row0 * stride()) * esize();
    char* base = static_cast<char*>(data);
    v.data = base == nullptr ? nullptr : base + offset;
    v.dtype = dtype;
    v.device = device;
    v.rank = static_cast<int32_t>(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) v.shape[d] = shape[d];
    if (token_major()) v.shape[0] = nrows < 0 ? shape[0] - row0 : nrows;
    int64_t s = 1;
    for (int d = v.rank - 1; d >= 1; --d) {
      v.strides[d] = s;
      s *= shape[static_cast<size_t>(d)];
    }
    v.strides[0] = token_major() ? stride0 : 1;
    return v;
  }

  /// Fills the host copy with poison (outputs before the reference runs).
  void poison_host() {
    if (dtype == DType::kBFloat16) {
      std::fill(h16.begin(), h16.end(), kPoison16);
    } else {
      std::fill(h32.begin(), h32.end(), bits_f32(kPoison32));
    }
  }
  void poison_dev() { poison_device(dev.get(), bytes()); }
  void upload() { copy_to_device(dev.get(), host(), bytes()); }
  void download() { copy_to_host(got(), dev.get(), bytes()); }
};

/// A tensor of `shape` whose rows are `pad` elements longer than their length; host storage
/// (poisoned, so input padding reads as NaN) unless `host_storage` is false, device storage
/// when `on_device`.
inline Tensor make_tensor(DType dtype, std::vector<int64_t> shape, int64_t pad, bool output,
                          bool on_device = true, bool host_storage = true) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.output = output;
  t.stride0 = t.row_len() + (t.token_major() ? pad : 0);
  if (!host_storage) {
    // device only (the 64-bit indexing test): no host copies
  } else if (dtype == DType::kBFloat16) {
    t.h16.assign(t.elems(), kPoison16);
    if (output) t.g16.assign(t.elems(), 0);
  } else {
    t.h32.assign(t.elems(), bits_f32(kPoison32));
    if (output) t.g32.assign(t.elems(), 0.0f);
  }
  if (on_device) t.dev = DevMem(t.bytes());
  return t;
}

/// bf16 N(0, sigma^2) in every logical element (rows seeded independently, filled in parallel).
inline void fill_normal(Tensor& t, uint64_t seed, double sigma = 1.0) {
  const int64_t rows = t.rows(), len = t.row_len(), stride = t.stride();
  MHC_TEST_PARALLEL_FOR
  for (int64_t r = 0; r < rows; ++r) {
    mhc::tools::Rng rng(mix_seed(seed, static_cast<uint64_t>(r)));
    for (int64_t i = 0; i < len; ++i) {
      const double v = rng.normal() * sigma;
      if (t.dtype == DType::kBFloat16) {
        t.h16[static_cast<size_t>(r * stride + i)] = to_bf16(v);
      } else {
        t.h32[static_cast<size_t>(r * stride + i)] = static_cast<float>(v);
      }
    }
  }
}

/// Uniform [lo, hi) in every logical element.
inline void fill_uniform(Tensor& t, uint64_t seed, double lo, double hi) {
  const int64_t rows = t.rows(), len = t.row_len(), stride = t.stride();
  MHC_TEST_PARALLEL_FOR
  for (int64_t r = 0; r < rows; ++r) {
    mhc::tools::Rng rng(mix_seed(seed, static_cast<uint64_t>(r)));
    for (int64_t i = 0; i < len; ++i) {
      const double v = lo + (hi - lo) * rng.uniform();
      if (t.dtype == DType::kBFloat16) {
        t.h16[static_cast<size_t>(r * stride + i)] = to_bf16(v);
      } else {
        t.h32[static_cast<size_t>(r * stride + i)] = static_cast<float>(v);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Comparisons (spec section 6).

/// How an output is judged against its expected value.
enum class Check {
  kF32,    // |got - ref| <= 1e-5 |ref| + 1e-8
  kBF16,   // within 1 bf16 ulp (or, under cancellation, 1e-5 x the row's RMS), >= 99.9% bit-equal
  kBF16Twice,  // the same with 2 ulps: an output behind two bf16 rounding points (see below)
  kExact,  // bit-equal (identity collapse, materialised copies, GPU-vs-GPU invariance checks)
};

constexpr double kRelTol = 1e-5, kAbsTol = 1e-8, kBitEqualFraction = 0.999;

// Why bf16 outputs get a cancellation allowance. A bf16 output is the rounding of a sum of
// O(1) terms (collapse: sum_j pre_j x_j; post: post_k o + sum_j comb_jk x_j). Where the terms
// cancel, the exact sum is far below the terms (seen: 5e-7 from terms of size 1), and any fp32
// evaluation, or pre weights that carry the spec's own fp32-level error, lands many bf16 ulps of
// that tiny value away from the float64 result although its absolute error is ~1e-7 of the
// row's scale. Such an element passes when |got - ref| <= kRelTol * RMS(reference row): the
// spec's fp32-level 1e-5, taken relative to the row's scale. That is never looser than 1 ulp
// for an element above 1/256 of the row's RMS, so wrong streams, weights or indices (errors of
// the row's own size) still fail. Elements passed this way are counted (Tally::cancel) and
// still count as not bit-equal.
//
// Why a folded RMSNorm output gets 2 ulps (Check::kBF16Twice). Its value is
// bf16(u * inv * w) where u is itself the bf16-rounded collapse. An fp32 collapse lands on the
// other side of a bf16 rounding boundary from the float64 one now and then (the spec allows
// that: 1 ulp), and that 1-ulp step of u (relative 2^-8) carries through the product into the
// output before its own rounding: up to 2 ulps from the float64 value, seen on the first H200
// run for carried pre (exact inputs) at a rate of ~2e-6 of the elements. An identity collapse
// with a norm has one rounding point (u is stream 0 bit for bit) and keeps 1 ulp.

/// Monotonic integer of a bf16 pattern (+0 and -0 both map to 0).
inline int32_t bf16_order(uint16_t b) {
  return (b & 0x8000u) ? -static_cast<int32_t>(b & 0x7fffu) : static_cast<int32_t>(b);
}
inline bool bf16_isnan(uint16_t b) { return (b & 0x7fffu) > 0x7f80u; }

/// What one comparison (or a sweep of them) found for one output.
struct Tally {
  int64_t elems = 0;      // logical elements compared
  int64_t equal = 0;      // bit-equal ones
  int64_t bad = 0;        // outside tolerance (or not bit-equal for kExact)
  int64_t unwritten = 0;  // still poison where a value was expected
  int64_t cancel = 0;     // bf16 elements > 1 ulp off that passed by the cancellation allowance
  int64_t pad_bad = 0;    // padding elements that lost their poison
  double worst = 0.0;     // ulps (bf16 / exact) or error / allowed (fp32)
  std::string worst_where;
  std::string pad_where;

  void merge(const Tally& o) {
    elems += o.elems;
    equal += o.equal;
    bad += o.bad;
    unwritten += o.unwritten;
    cancel += o.cancel;
    pad_bad += o.pad_bad;
    if (o.worst > worst) {
      worst = o.worst;
      worst_where = o.worst_where;
    } else if (worst_where.empty()) {
      worst_where = o.worst_where;
    }
    if (pad_where.empty()) pad_where = o.pad_where;
  }
  double equal_fraction() const { return elems == 0 ? 1.0 : static_cast<double>(equal) / static_cast<double>(elems); }
};

inline std::string describe_bf16(uint16_t b) {
  std::ostringstream os;
  os << from_bf16(b) << " (0x" << std::hex << b << ")";
  return os.str();
}
inline std::string describe_f32(float f) {
  std::ostringstream os;
  os.precision(9);
  os << f << " (0x" << std::hex << f32_bits(f) << ")";
  return os.str();
}

/// Compares `rows` rows of `len` elements: expected at `e` (row stride se), got at `g` (row
/// stride sg). `label` prefixes the location of the worst element ("T=19 token 3 ...").
/// `first_token` is the token number of the first compared row (for the message).
inline Tally compare_rows(DType dtype, Check check, const void* e, int64_t se, const void* g, int64_t sg,
                          int64_t rows, int64_t len, const std::string& label, int64_t first_token = 0) {
  struct Partial {
    int64_t equal = 0, bad = 0, unwritten = 0, cancel = 0;
    double worst = -1.0;
    int64_t col = -1;
    uint32_t eb = 0, gb = 0;
  };
  std::vector<Partial> part(static_cast<size_t>(std::max<int64_t>(rows, 0)));
  const bool bf = dtype == DType::kBFloat16;
  MHC_TEST_PARALLEL_FOR
  for (int64_t r = 0; r < rows; ++r) {
    Partial p;
    double slack = 0.0;  // the cancellation allowance of this row (bf16, kBF16 only)
    const double max_ulp = check == Check::kBF16Twice ? 2.0 : 1.0;
    if (bf && (check == Check::kBF16 || check == Check::kBF16Twice) && len > 0) {
      double sum = 0.0;
      int64_t count = 0;
      for (int64_t i = 0; i < len; ++i) {
        const double x = from_bf16(static_cast<const uint16_t*>(e)[r * se + i]);
        if (std::isfinite(x)) {
          sum += x * x;
          ++count;
        }
      }
      slack = count == 0 ? 0.0 : kRelTol * std::sqrt(sum / static_cast<double>(count));
    }
    for (int64_t i = 0; i < len; ++i) {
      double err = 0.0;
      bool ok = true, equal = false, unwritten = false;
      uint32_t eb = 0, gb = 0;
      if (bf) {
        const uint16_t x = static_cast<const uint16_t*>(e)[r * se + i];
        const uint16_t y = static_cast<const uint16_t*>(g)[r * sg + i];
        eb = x;
        gb = y;
        equal = x == y;
        if (!equal) {
          if (check == Check::kExact) {
            ok = false;
            err = bf16_isnan(x) || bf16_isnan(y) ? 1e9 : std::abs(bf16_order(x) - bf16_order(y));
          } else if (bf16_isnan(x) || bf16_isnan(y)) {
            ok = bf16_isnan(x) && bf16_isnan(y);
            err = ok ? 0.0 : 1e9;
          } else {
            err = std::abs(bf16_order(x) - bf16_order(y));
            ok = err <= max_ulp;
            if (!ok && std::abs(static_cast<double>(from_bf16(x)) - from_bf16(y)) <= slack) {
              ok = true;
              err = max_ulp;
              ++p.cancel;
            }
          }
          unwritten = !ok && y == kPoison16;
        }
      } else {
        const float x = static_cast<const float*>(e)[r * se + i];
        const float y = static_cast<const float*>(g)[r * sg + i];
        eb = f32_bits(x);
        gb = f32_bits(y);
        equal = eb == gb;
        if (!equal) {
          if (check == Check::kExact) {
            ok = false;
            err = std::isnan(x) || std::isnan(y) ? 1e9 : std::abs(static_cast<double>(x) - y);
          } else if (std::isnan(x) || std::isnan(y)) {
            ok = std::isnan(x) && std::isnan(y);
            err = ok ? 0.0 : 1e9;
          } else if (std::isinf(x) || std::isinf(y)) {
            ok = x == y;
            err = ok ? 0.0 : 1e9;
          } else {
            err = std::abs(static_cast<double>(y) - static_cast<double>(x)) /
                  (kRelTol * std::abs(static_cast<double>(x)) + kAbsTol);
            ok = err <= 1.0;
          }
          unwritten = !ok && gb == kPoison32;
        }
      }
      if (!ok && err <= 0.0) err = 0.5;  // e.g. +0 against -0 where bits must match
      p.equal += equal ? 1 : 0;
      p.bad += ok ? 0 : 1;
      p.unwritten += unwritten ? 1 : 0;
      if (err > p.worst) {
        p.worst = err;
        p.col = i;
        p.eb = eb;
        p.gb = gb;
      }
    }
    part[static_cast<size_t>(r)] = p;
  }
  Tally t;
  t.elems = rows * len;
  int64_t worst_row = -1;
  const Partial* worst = nullptr;
  for (int64_t r = 0; r < rows; ++r) {
    const Partial& p = part[static_cast<size_t>(r)];
    t.equal += p.equal;
    t.bad += p.bad;
    t.unwritten += p.unwritten;
    t.cancel += p.cancel;
    if (p.col >= 0 && (worst == nullptr || p.worst > worst->worst)) {
      worst = &p;
      worst_row = r;
    }
  }
  if (worst != nullptr && worst->worst > 0.0) {
    t.worst = worst->worst;
    std::ostringstream os;
    os << label << " token " << (first_token + worst_row) << " element " << worst->col << ": expected "
       << (bf ? describe_bf16(static_cast<uint16_t>(worst->eb)) : describe_f32(bits_f32(worst->eb)))
       << ", got "
       << (bf ? describe_bf16(static_cast<uint16_t>(worst->gb)) : describe_f32(bits_f32(worst->gb)));
    t.worst_where = os.str();
  }
  return t;
}

/// Checks that the padding of every row of a downloaded output still holds poison.
inline Tally check_padding(Tensor& t, const std::string& label) {
  Tally tally;
  if (!t.padded()) return tally;
  const int64_t rows = t.rows(), len = t.row_len(), stride = t.stride();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = len; i < stride; ++i) {
      const size_t k = static_cast<size_t>(r * stride + i);
      const bool poisoned = t.dtype == DType::kBFloat16 ? t.g16[k] == kPoison16 : f32_bits(t.g32[k]) == kPoison32;
      if (!poisoned) {
        if (tally.pad_bad == 0) {
          std::ostringstream os;
          os << label << " row " << r << " padding element " << (i - len) << " was overwritten";
          tally.pad_where = os.str();
        }
        ++tally.pad_bad;
      }
    }
  }
  return tally;
}

/// Formats a number of elements with a percentage.
inline std::string percent(int64_t part, int64_t whole) {
  std::ostringstream os;
  os.precision(5);
  os << (whole == 0 ? 100.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole)) << "%";
  return os.str();
}

/// Reports a tally as gtest failures; `what` names the variant and the output.
inline void expect_tally(const Tally& t, Check check, const std::string& what) {
  EXPECT_EQ(t.unwritten, 0) << what << ": " << t.unwritten << " elements never written (still NaN poison); worst at "
                            << t.worst_where;
  EXPECT_EQ(t.bad, 0) << what << ": " << t.bad << " of " << t.elems << " elements outside tolerance ("
                      << (check == Check::kF32          ? "rel 1e-5"
                          : check == Check::kBF16      ? "1 bf16 ulp, or 1e-5 x row RMS"
                          : check == Check::kBF16Twice ? "2 bf16 ulp (two rounding points), or 1e-5 x row RMS"
                                                       : "bit-equal")
                      << "); worst " << t.worst << (check == Check::kF32 ? "x the allowed error" : " ulp") << " at "
                      << t.worst_where;
  if (check == Check::kBF16 || check == Check::kBF16Twice) {
    EXPECT_GE(t.equal_fraction(), kBitEqualFraction)
        << what << ": only " << percent(t.equal, t.elems) << " of " << t.elems
        << " bf16 elements bit-equal (need 99.9%); worst mismatch " << t.worst << " ulp at " << t.worst_where;
  }
  EXPECT_EQ(t.pad_bad, 0) << what << ": " << t.pad_bad << " padding elements overwritten; first: " << t.pad_where;
}

}  // namespace mhc_test

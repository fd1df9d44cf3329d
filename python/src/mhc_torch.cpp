// python/src/mhc_torch.cpp - the torch operators torch.ops.mhc.* registered from C++
// (TORCH_LIBRARY), so that one call costs the dispatcher and a few conversions, not a Python
// function. Loaded by mhc.torch (torch.ops.load_library) where the package was built with it
// (MHC_BUILD_TORCH, python/CMakeLists.txt); the schemas are mhc.torch.SCHEMAS, the fake
// implementations are registered in Python (mhc/torch.py), and tests/python/test_torch_ops.py
// checks that both registrations agree.
//
// The library itself is not linked in: every call goes through the function table of the
// nanobind extension mhc._mhc (python/src/api_table.hpp, handed over by mhc_torch_set_api), so a
// process has one copy of it (the kernels that warmup loaded, the workspaces mhc.torch.init
// registered). CUDA calls run on torch's current stream of the tensors' device with the
// workspace registered for that stream, else the device's default.
//
// The config travels as one `float[] config` (mhc.torch.config_values: n, H, norm_eps, pre_eps,
// sinkhorn_eps, sinkhorn_iters, post_scale, rmsnorm_eps): torch converts a Python scalar argument
// in about 0.28 us and a list in about 0.7 us, so one list in place of eight scalars takes ~1.4 us
// off every call.
#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <cstdio>
#include <type_traits>
#include <string>
#include <tuple>
#include <utility>

#include "api_table.hpp"

namespace {

using at::Tensor;
using OptTensor = std::optional<Tensor>;
using Str = c10::string_view;

const mhc::pyext::ApiTable* g_api = nullptr;

// Raises a RuntimeError "python/src/mhc_torch.cpp:LINE: message" (mhc.torch turns a message with
// a location into mhc.MhcError). The message is formed without iostreams: with this module's
// hidden visibility, GCC 13 in C++20 mode instantiated std::ostream's numeric insertion here,
// with its own copy of the locale facet ids, and inserting a number crashed in a wrong facet
// (session 8 on the H200, torch 2.11: every error of these checks; a native backtrace showed
// std::ostream::_M_insert<long> in this module calling into codecvt).
#define MHC_TORCH_CHECK(cond, ...)                                                                 \
  do {                                                                                             \
    if (!(cond)) raise_message(__LINE__, __VA_ARGS__);                                             \
  } while (0)

inline void append_part(std::string& out, const char* s) { out += s; }
inline void append_part(std::string& out, const std::string& s) { out += s; }
inline void append_part(std::string& out, c10::Device d) { out += d.str(); }
inline void append_part(std::string& out, c10::ScalarType t) { out += c10::toString(t); }
inline void append_part(std::string& out, double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  out += buf;
}
template <typename Int, typename = std::enable_if_t<std::is_integral_v<Int>>>
void append_part(std::string& out, Int v) {
  out += std::to_string(v);
}

template <typename... Parts>
[[noreturn]] void raise_message(int line, const Parts&... parts) {
  static thread_local std::string message;
  message = "python/src/mhc_torch.cpp:" + std::to_string(line) + ": ";
  (append_part(message, parts), ...);
  const char* text = message.c_str();
  TORCH_CHECK(false, text);
  __builtin_unreachable();
}

// A library error (already "file:line: message") as a RuntimeError.
inline void check_api(const char* error) {
  if (error != nullptr) TORCH_CHECK(false, error);
}

inline const mhc::pyext::ApiTable& api() {
  MHC_TORCH_CHECK(g_api != nullptr, "the mhc torch operators were loaded without mhc.torch (import mhc.torch)");
  return *g_api;
}

mhc::DType dtype_of(const Tensor& t, const char* op, const char* name) {
  switch (t.scalar_type()) {
    case at::kBFloat16: return mhc::DType::kBFloat16;
    case at::kHalf: return mhc::DType::kFloat16;
    case at::kFloat: return mhc::DType::kFloat32;
    case at::kDouble: return mhc::DType::kFloat64;
    case at::kInt: return mhc::DType::kInt32;
    case at::kLong: return mhc::DType::kInt64;
    case at::kByte: return mhc::DType::kUInt8;
    default: break;
  }
  MHC_TORCH_CHECK(false, op, ": ", name, ": unsupported dtype ", t.scalar_type(), " (mhc operators take bf16 and fp32)");
  return mhc::DType::kFloat32;
}

// A tensor as a TensorView (pointer and metadata; the library validates the rest).
mhc::TensorView view(const Tensor& t, const char* op, const char* name) {
  mhc::TensorView v;
  const c10::Device d = t.device();
  MHC_TORCH_CHECK(d.is_cpu() || d.is_cuda(), op, ": ", name, ": unsupported device ", d,
                  " (mhc takes cpu and cuda tensors)");
  MHC_TORCH_CHECK(t.layout() == at::kStrided, op, ": ", name, ": expected a strided (dense) tensor");
  MHC_TORCH_CHECK(t.dim() <= mhc::kMaxRank, op, ": ", name, ": rank ", t.dim(), " exceeds ", mhc::kMaxRank);
  v.dtype = dtype_of(t, op, name);
  v.device.type = d.is_cuda() ? mhc::DeviceType::kCUDA : mhc::DeviceType::kCPU;
  v.device.id = d.is_cuda() ? d.index() : 0;
  v.rank = static_cast<int32_t>(t.dim());
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  int64_t numel = 1;
  for (int i = 0; i < v.rank; ++i) {
    v.shape[i] = sizes[i];
    v.strides[i] = strides[i];
    numel *= sizes[i];
  }
  if (numel == 0) {  // no elements, no layout: row-major strides (as the nanobind binding does)
    int64_t stride = 1;
    for (int i = v.rank - 1; i >= 0; --i) {
      v.strides[i] = stride;
      stride *= v.shape[i] > 0 ? v.shape[i] : 1;
    }
  }
  v.data = t.data_ptr();
  return v;
}

mhc::TensorView view(const OptTensor& t, const char* op, const char* name) {
  return t.has_value() ? view(*t, op, name) : mhc::TensorView{};
}

// True when v is an integer in lo..hi (config values arrive as doubles).
bool integer_in(double v, double lo, double hi) { return v >= lo && v <= hi && v == static_cast<double>(static_cast<int64_t>(v)); }

constexpr size_t kConfigValues = 8;

mhc::Config config_of(const c10::List<double>& list, const char* op) {
  // Read in place: a list argument taken as ArrayRef<double> is copied into a std::vector (a
  // heap allocation) by the boxed-to-unboxed wrapper on every call; a c10::List shares the list.
  double v[kConfigValues] = {};
  const size_t size = list.size();
  for (size_t i = 0; i < size && i < kConfigValues; ++i) v[i] = list.get(i);
  MHC_TORCH_CHECK(size == kConfigValues, op, ": config: expected ", kConfigValues,
                  " values (n, H, norm_eps, pre_eps, sinkhorn_eps, sinkhorn_iters, post_scale, rmsnorm_eps: "
                  "mhc.torch.config_values), got ", size);
  MHC_TORCH_CHECK(integer_in(v[0], 1, mhc::kMaxStreams), op, ": config: n must be an integer in 1..",
                  mhc::kMaxStreams, ", got ", v[0]);
  MHC_TORCH_CHECK(integer_in(v[1], 1, static_cast<double>(mhc::kMaxHidden)), op,
                  ": config: H must be an integer in 1..", mhc::kMaxHidden, ", got ", v[1]);
  MHC_TORCH_CHECK(integer_in(v[5], 1, mhc::kMaxSinkhornIters), op, ": config: sinkhorn_iters must be an integer in 1..",
                  mhc::kMaxSinkhornIters, ", got ", v[5]);
  mhc::Config c;
  c.n = static_cast<int32_t>(v[0]);
  c.H = static_cast<int64_t>(v[1]);
  c.norm_eps = static_cast<float>(v[2]);
  c.pre_eps = static_cast<float>(v[3]);
  c.sinkhorn_eps = static_cast<float>(v[4]);
  c.sinkhorn_iters = static_cast<int32_t>(v[5]);
  c.post_scale = static_cast<float>(v[6]);
  c.rmsnorm_eps = static_cast<float>(v[7]);
  return c;
}

mhc::PreSource pre_source_of(Str s, const char* op) {
  if (s == "computed") return mhc::PreSource::kComputed;
  if (s == "carried") return mhc::PreSource::kCarried;
  if (s == "identity") return mhc::PreSource::kIdentity;
  MHC_TORCH_CHECK(false, op, ": pre_source: expected 'computed', 'carried' or 'identity', got '", std::string(s), "'");
  return mhc::PreSource::kComputed;
}

mhc::HeadKind head_kind_of(Str s) {
  if (s == "learned") return mhc::HeadKind::kLearned;
  if (s == "carried") return mhc::HeadKind::kCarried;
  if (s == "mean") return mhc::HeadKind::kMean;
  MHC_TORCH_CHECK(false, "head: kind: expected 'learned', 'carried' or 'mean', got '", std::string(s), "'");
  return mhc::HeadKind::kLearned;
}

// Weights attached to a buffer, cached per thread. attach_prepared reads only the buffer's
// address, device, dtype, rank and size (and n, H, head); the weights view the buffer's memory,
// which the call then reads. So an entry with the same key is what a fresh attach would return
// (the Python registration caches the same way); only contiguous strided buffers, the ones
// attach accepts, are cached. Saves the attach (a heap allocation and its checks) per call.
struct AttachKey {
  const void* data = nullptr;
  int64_t numel = -1;
  int64_t H = 0;
  int32_t n = 0;
  int16_t device = 0;  // (type << 8) | index
  int8_t dtype = 0;
  int8_t dim = 0;
  bool head = false;
  bool operator==(const AttachKey& o) const {
    return data == o.data && numel == o.numel && H == o.H && n == o.n && device == o.device && dtype == o.dtype &&
           dim == o.dim && head == o.head;
  }
};

struct AttachCache {
  static constexpr int kSlots = 8;  // an engine's layers share a few buffers per thread at a time
  AttachKey key[kSlots];
  mhc::PreparedWeights weights[kSlots];
  int next = 0;  // the slot the next miss fills (round robin)
  mhc::PreparedWeights uncached;  // the weights of a call whose buffer is not cached
};

thread_local AttachCache t_attached;

// The weights over the operator's buffer argument (null where it is absent).
const mhc::PreparedWeights* attach(const OptTensor& buffer, const mhc::Config& c, bool head, const char* op) {
  if (!buffer.has_value()) return nullptr;
  const Tensor& t = *buffer;
  const bool cacheable = t.layout() == at::kStrided && t.is_contiguous();
  AttachKey key;
  if (cacheable) {
    const c10::Device d = t.device();
    key.data = t.data_ptr();
    key.numel = t.numel();
    key.H = c.H;
    key.n = c.n;
    key.device = static_cast<int16_t>((static_cast<int>(d.type()) << 8) | (d.index() & 0xff));
    key.dtype = static_cast<int8_t>(t.scalar_type());
    key.dim = static_cast<int8_t>(t.dim());
    key.head = head;
    for (int i = 0; i < AttachCache::kSlots; ++i) {
      if (t_attached.key[i] == key) return &t_attached.weights[i];
    }
  }
  mhc::PreparedWeights w;
  check_api(api().attach(view(t, op, "weights"), c.n, c.H, head, &w));
  if (!cacheable) {  // where torch and mhc judge contiguity differently: attached per call
    t_attached.uncached = std::move(w);
    return &t_attached.uncached;
  }
  const int slot = t_attached.next;
  t_attached.next = (slot + 1) % AttachCache::kSlots;
  t_attached.key[slot] = key;
  t_attached.weights[slot] = std::move(w);
  return &t_attached.weights[slot];
}

// Where a call runs: torch's current stream of the primary tensor's device, the workspace
// registered for it (a handle held for the call, so unregistering it meanwhile frees nothing
// the call uses), and that device made current for the call where it is not already.
struct Context {
  mhc::Exec exec;
  mhc::Workspace workspace;
  c10::OptionalDeviceGuard guard;
  Context(const Tensor& primary, const char* op) {
    const c10::Device d = primary.device();
    if (!d.is_cuda()) return;
    const c10::impl::DeviceGuardImplInterface* cuda = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    exec.stream = cuda->getStream(d).native_handle();
    // The workspace is looked up (and a missing one reported) before the device is touched.
    MHC_TORCH_CHECK(api().workspace_for(d.index(), exec.stream, &workspace), op, ": no mhc workspace for cuda:",
                    static_cast<int>(d.index()), ": call mhc.torch.init('cuda:", static_cast<int>(d.index()),
                    "', max_tokens) once before the first call (and before any CUDA-graph capture)");
    exec.workspace = &workspace;
    if (cuda->getDevice() != d) guard.reset_device(d);
  }
};

at::Tensor empty_like_dev(at::IntArrayRef shape, at::ScalarType dt, const Tensor& like) {
  return at::empty(shape, at::TensorOptions().dtype(dt).device(like.device()));
}

using ConfigValues = const c10::List<double>&;

// ---- destination-passing forms -----------------------------------------------------------------

void mixes_out(const Tensor& residual, const Tensor& weights, const Tensor& pre_mix, const Tensor& post_mix,
               const Tensor& comb_mix, ConfigValues config) {
  const char* op = "mixes";
  mhc::MixesArgs a;
  a.config = config_of(config, op);
  a.residual = view(residual, op, "residual");
  a.weights = attach(weights, a.config, false, op);
  a.pre_mix = view(pre_mix, op, "pre_mix");
  a.post_mix = view(post_mix, op, "post_mix");
  a.comb_mix = view(comb_mix, op, "comb_mix");
  Context ctx(residual, op);
  a.exec = ctx.exec;
  check_api(api().mixes(a));
}

void collapse_out(const Tensor& residual, const OptTensor& pre_mix, const OptTensor& rmsnorm_weight, Str pre_source,
                  const Tensor& layer_input, ConfigValues config) {
  const char* op = "collapse";
  mhc::CollapseArgs a;
  a.config = config_of(config, op);
  a.pre_source = pre_source_of(pre_source, op);
  a.residual = view(residual, op, "residual");
  a.pre_mix = view(pre_mix, op, "pre_mix");
  a.rmsnorm_weight = view(rmsnorm_weight, op, "rmsnorm_weight");
  a.layer_input = view(layer_input, op, "layer_input");
  Context ctx(residual, op);
  a.exec = ctx.exec;
  check_api(api().collapse(a));
}

void pre_out(const Tensor& residual, const Tensor& weights, const OptTensor& pre_mix_in,
             const OptTensor& rmsnorm_weight, Str pre_source, const Tensor& layer_input, const Tensor& post_mix,
             const Tensor& comb_mix, const OptTensor& pre_mix_out, ConfigValues config) {
  const char* op = "pre";
  mhc::PreArgs a;
  a.config = config_of(config, op);
  a.pre_source = pre_source_of(pre_source, op);
  a.residual = view(residual, op, "residual");
  a.weights = attach(weights, a.config, false, op);
  a.pre_mix_in = view(pre_mix_in, op, "pre_mix_in");
  a.rmsnorm_weight = view(rmsnorm_weight, op, "rmsnorm_weight");
  a.layer_input = view(layer_input, op, "layer_input");
  a.post_mix = view(post_mix, op, "post_mix");
  a.comb_mix = view(comb_mix, op, "comb_mix");
  a.pre_mix_out = view(pre_mix_out, op, "pre_mix_out");
  Context ctx(residual, op);
  a.exec = ctx.exec;
  check_api(api().pre(a));
}

void pre_broadcast_out(const Tensor& embedding, const Tensor& weights, const OptTensor& pre_mix_in,
                       const OptTensor& rmsnorm_weight, Str pre_source, const Tensor& layer_input,
                       const Tensor& post_mix, const Tensor& comb_mix, const OptTensor& pre_mix_out,
                       const OptTensor& residual_out, ConfigValues config) {
  const char* op = "pre_broadcast";
  mhc::PreBroadcastArgs a;
  a.config = config_of(config, op);
  a.pre_source = pre_source_of(pre_source, op);
  a.embedding = view(embedding, op, "embedding");
  a.weights = attach(weights, a.config, false, op);
  a.pre_mix_in = view(pre_mix_in, op, "pre_mix_in");
  a.rmsnorm_weight = view(rmsnorm_weight, op, "rmsnorm_weight");
  a.layer_input = view(layer_input, op, "layer_input");
  a.post_mix = view(post_mix, op, "post_mix");
  a.comb_mix = view(comb_mix, op, "comb_mix");
  a.pre_mix_out = view(pre_mix_out, op, "pre_mix_out");
  a.residual_out = view(residual_out, op, "residual_out");
  Context ctx(embedding, op);
  a.exec = ctx.exec;
  check_api(api().pre_broadcast(a));
}

void post_out(const Tensor& layer_output, const Tensor& residual, const Tensor& post_mix, const Tensor& comb_mix,
              const Tensor& residual_out, ConfigValues config) {
  const char* op = "post";
  mhc::PostArgs a;
  a.config = config_of(config, op);
  a.layer_output = view(layer_output, op, "layer_output");
  a.residual = view(residual, op, "residual");
  a.post_mix = view(post_mix, op, "post_mix");
  a.comb_mix = view(comb_mix, op, "comb_mix");
  a.residual_out = view(residual_out, op, "residual_out");
  Context ctx(layer_output, op);
  a.exec = ctx.exec;
  check_api(api().post(a));
}

void post_pre_out(const Tensor& layer_output, const Tensor& residual, const Tensor& post_mix, const Tensor& comb_mix,
                  const Tensor& weights, const OptTensor& pre_mix_in, const OptTensor& rmsnorm_weight, Str pre_source,
                  const Tensor& residual_out, const Tensor& layer_input, const Tensor& post_mix_out,
                  const Tensor& comb_mix_out, const OptTensor& pre_mix_out, ConfigValues config) {
  const char* op = "post_pre";
  mhc::PostPreArgs a;
  a.config = config_of(config, op);
  a.pre_source = pre_source_of(pre_source, op);
  a.layer_output = view(layer_output, op, "layer_output");
  a.residual = view(residual, op, "residual");
  a.post_mix = view(post_mix, op, "post_mix");
  a.comb_mix = view(comb_mix, op, "comb_mix");
  a.weights = attach(weights, a.config, false, op);
  a.pre_mix_in = view(pre_mix_in, op, "pre_mix_in");
  a.rmsnorm_weight = view(rmsnorm_weight, op, "rmsnorm_weight");
  a.residual_out = view(residual_out, op, "residual_out");
  a.layer_input = view(layer_input, op, "layer_input");
  a.post_mix_out = view(post_mix_out, op, "post_mix_out");
  a.comb_mix_out = view(comb_mix_out, op, "comb_mix_out");
  a.pre_mix_out = view(pre_mix_out, op, "pre_mix_out");
  Context ctx(layer_output, op);
  a.exec = ctx.exec;
  check_api(api().post_pre(a));
}

void head_out(const Tensor& residual, const OptTensor& weights, const OptTensor& pre_mix_in,
              const OptTensor& rmsnorm_weight, Str kind, const Tensor& output, ConfigValues config) {
  const char* op = "head";
  mhc::HeadArgs a;
  a.config = config_of(config, op);
  a.kind = head_kind_of(kind);
  a.residual = view(residual, op, "residual");
  a.weights = attach(weights, a.config, true, op);
  a.pre_mix_in = view(pre_mix_in, op, "pre_mix_in");
  a.rmsnorm_weight = view(rmsnorm_weight, op, "rmsnorm_weight");
  a.output = view(output, op, "output");
  Context ctx(residual, op);
  a.exec = ctx.exec;
  check_api(api().head(a));
}

// ---- functional forms: the outputs allocated, then the destination-passing form ---------------

// n and H of a config (checked), for the output shapes.
std::pair<int64_t, int64_t> dims_of(ConfigValues config, const char* op) {
  const mhc::Config c = config_of(config, op);
  return {c.n, c.H};
}

std::tuple<Tensor, Tensor, Tensor> mixes(const Tensor& residual, const Tensor& weights, ConfigValues config) {
  const auto [n, H] = dims_of(config, "mixes");
  const int64_t T = residual.size(0);
  Tensor pre = empty_like_dev({T, n}, at::kFloat, residual), post = empty_like_dev({T, n}, at::kFloat, residual);
  Tensor comb = empty_like_dev({T, n, n}, at::kFloat, residual);
  mixes_out(residual, weights, pre, post, comb, config);
  return {pre, post, comb};
}

Tensor collapse(const Tensor& residual, const OptTensor& pre_mix, const OptTensor& rmsnorm_weight, Str pre_source,
                ConfigValues config) {
  const auto [n, H] = dims_of(config, "collapse");
  Tensor out = empty_like_dev({residual.size(0), H}, at::kBFloat16, residual);
  collapse_out(residual, pre_mix, rmsnorm_weight, pre_source, out, config);
  return out;
}

std::tuple<Tensor, Tensor, Tensor, Tensor> pre(const Tensor& residual, const Tensor& weights,
                                               const OptTensor& pre_mix_in, const OptTensor& rmsnorm_weight,
                                               Str pre_source, ConfigValues config) {
  const auto [n, H] = dims_of(config, "pre");
  const int64_t T = residual.size(0);
  Tensor li = empty_like_dev({T, H}, at::kBFloat16, residual), pm = empty_like_dev({T, n}, at::kFloat, residual);
  Tensor cm = empty_like_dev({T, n, n}, at::kFloat, residual), pmo = empty_like_dev({T, n}, at::kFloat, residual);
  pre_out(residual, weights, pre_mix_in, rmsnorm_weight, pre_source, li, pm, cm, pmo, config);
  return {li, pm, cm, pmo};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> pre_broadcast(const Tensor& embedding, const Tensor& weights,
                                                                 const OptTensor& pre_mix_in,
                                                                 const OptTensor& rmsnorm_weight, Str pre_source,
                                                                 bool materialize_residual, ConfigValues config) {
  const auto [n, H] = dims_of(config, "pre_broadcast");
  const int64_t T = embedding.size(0);
  Tensor li = empty_like_dev({T, H}, at::kBFloat16, embedding), pm = empty_like_dev({T, n}, at::kFloat, embedding);
  Tensor cm = empty_like_dev({T, n, n}, at::kFloat, embedding), pmo = empty_like_dev({T, n}, at::kFloat, embedding);
  Tensor ro = empty_like_dev({materialize_residual ? T : 0, n, H}, at::kBFloat16, embedding);
  pre_broadcast_out(embedding, weights, pre_mix_in, rmsnorm_weight, pre_source, li, pm, cm, pmo,
                    materialize_residual ? OptTensor(ro) : OptTensor(), config);
  return {li, pm, cm, pmo, ro};
}

Tensor post(const Tensor& layer_output, const Tensor& residual, const Tensor& post_mix, const Tensor& comb_mix,
            ConfigValues config) {
  const auto [n, H] = dims_of(config, "post");
  Tensor out = empty_like_dev({layer_output.size(0), n, H}, at::kBFloat16, layer_output);
  post_out(layer_output, residual, post_mix, comb_mix, out, config);
  return out;
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> post_pre(const Tensor& layer_output, const Tensor& residual,
                                                            const Tensor& post_mix, const Tensor& comb_mix,
                                                            const Tensor& weights, const OptTensor& pre_mix_in,
                                                            const OptTensor& rmsnorm_weight, Str pre_source,
                                                            ConfigValues config) {
  const auto [n, H] = dims_of(config, "post_pre");
  const int64_t T = layer_output.size(0);
  Tensor ro = empty_like_dev({T, n, H}, at::kBFloat16, layer_output);
  Tensor li = empty_like_dev({T, H}, at::kBFloat16, layer_output);
  Tensor pm = empty_like_dev({T, n}, at::kFloat, layer_output), cm = empty_like_dev({T, n, n}, at::kFloat, layer_output);
  Tensor pmo = empty_like_dev({T, n}, at::kFloat, layer_output);
  post_pre_out(layer_output, residual, post_mix, comb_mix, weights, pre_mix_in, rmsnorm_weight, pre_source, ro, li, pm,
               cm, pmo, config);
  return {ro, li, pm, cm, pmo};
}

Tensor head(const Tensor& residual, const OptTensor& weights, const OptTensor& pre_mix_in,
            const OptTensor& rmsnorm_weight, Str kind, ConfigValues config) {
  const auto [n, H] = dims_of(config, "head");
  Tensor out = empty_like_dev({residual.size(0), H}, at::kBFloat16, residual);
  head_out(residual, weights, pre_mix_in, rmsnorm_weight, kind, out, config);
  return out;
}

// ---- the boxed entry of the destination-passing forms -----------------------------------------
//
// A call from Python reaches the operator boxed: torch puts the arguments on a stack of IValues
// and releases the GIL. Each tensor on the stack is a second reference to a tensor that Python
// owns, and dropping it (2 -> 1) makes torch release that reference of the Python object, taking
// the GIL for it: once per tensor argument, about 0.12 us each (post_pre has up to 10; session 10's
// profile on the CPU: a quarter of the operator's time inside torch). Here the arguments are
// read in place and dropped under one GIL hold instead. The GIL is taken only where torch would
// take it anyway (a tensor whose Python object the drop would release), so a caller without
// Python objects never waits for it.

// Python's C API, resolved at load time from the interpreter that loaded this module; weak, so
// a process without Python has none of them (null) and drops the arguments as torch does.
extern "C" {
__attribute__((weak)) int Py_IsInitialized(void);
__attribute__((weak)) int PyGILState_Check(void);
__attribute__((weak)) int PyGILState_Ensure(void);  // returns PyGILState_STATE, an enum
__attribute__((weak)) void PyGILState_Release(int);
}

// True when dropping this reference releases the tensor's Python object (the scheme of torch
// >= 2.10, c10::impl::PyObjectSlot::load_pyobj; false on a torch without it).
template <typename Slot, typename = void>
struct HasLoadPyobj : std::false_type {};
template <typename Slot>
struct HasLoadPyobj<Slot, std::void_t<decltype(std::declval<const Slot&>().load_pyobj())>> : std::true_type {};

template <typename Slot = c10::impl::PyObjectSlot>
bool releases_python_object(const c10::IValue& v) {
  if constexpr (HasLoadPyobj<Slot>::value) {
    if (!v.isTensor()) return false;
    const Tensor& t = v.toTensor();
    // Through Slot, so the call is compiled only where the branch is (a torch with load_pyobj).
    const Slot* slot = t.unsafeGetTensorImpl()->pyobj_slot();
    return t.defined() && t.use_count() == 2 && slot->load_pyobj() != nullptr;
  } else {
    return false;
  }
}

void drop_arguments(torch::jit::Stack& stack, size_t count) {
  bool take_gil = PyGILState_Ensure != nullptr && PyGILState_Release != nullptr && PyGILState_Check != nullptr &&
                  Py_IsInitialized != nullptr && Py_IsInitialized() != 0 && PyGILState_Check() == 0;
  if (take_gil) {
    take_gil = false;
    for (size_t i = stack.size() - count; i < stack.size() && !take_gil; ++i) take_gil = releases_python_object(stack[i]);
  }
  if (!take_gil) {
    torch::jit::drop(stack, count);
    return;
  }
  const int state = PyGILState_Ensure();
  torch::jit::drop(stack, count);
  PyGILState_Release(state);
}

// An argument of the stack as the operator function takes it (the tensors by reference, in place).
template <typename T>
struct StackArg;
template <>
struct StackArg<const Tensor&> {
  static const Tensor& get(const c10::IValue& v) { return v.toTensor(); }
};
template <>
struct StackArg<const OptTensor&> {
  static OptTensor get(const c10::IValue& v) { return v.isNone() ? OptTensor() : OptTensor(v.toTensor()); }
};
template <>
struct StackArg<Str> {
  static Str get(const c10::IValue& v) { return v.toStringView(); }
};
template <>
struct StackArg<ConfigValues> {
  static c10::List<double> get(const c10::IValue& v) { return v.toDoubleList(); }
};

// The boxed kernel of a destination-passing operator function Fn (no returns). On an error the
// arguments stay on the stack, as with torch's own boxed wrapper (the caller's stack owns them).
template <auto Fn>
struct Boxed;
template <typename... A, void (*Fn)(A...)>
struct Boxed<Fn> {
  template <size_t... I>
  static void invoke(const c10::IValue* args, std::index_sequence<I...>) {
    Fn(StackArg<A>::get(args[I])...);
  }
  static void call(const c10::OperatorHandle&, torch::jit::Stack* stack) {
    constexpr size_t kArgs = sizeof...(A);
    TORCH_CHECK(stack->size() >= kArgs, "mhc operators: ", kArgs, " arguments expected on the stack");
    invoke(stack->data() + (stack->size() - kArgs), std::index_sequence_for<A...>{});
    drop_arguments(*stack, kArgs);
  }
  static torch::CppFunction function() { return torch::CppFunction::makeFromBoxedFunction<&call>(); }
};

}  // namespace

/// Hands the nanobind extension's function table to this library (mhc.torch calls it once, right
/// after torch.ops.load_library). Returns null, or why the table does not fit this build.
extern "C" __attribute__((visibility("default"))) const char* mhc_torch_set_api(const void* table) {
  const auto* t = static_cast<const mhc::pyext::ApiTable*>(table);
  if (t == nullptr) return "mhc_torch_set_api: null table";
  if (t->version != mhc::pyext::kApiVersion || t->size != sizeof(mhc::pyext::ApiTable)) {
    return "mhc_torch_set_api: the torch extension and mhc._mhc come from different builds (api table mismatch)";
  }
  g_api = t;
  return nullptr;
}

#define MHC_S "float[] config"

TORCH_LIBRARY(mhc, m) {
  m.def("mixes(Tensor residual, Tensor weights, " MHC_S ") -> (Tensor, Tensor, Tensor)");
  m.def("mixes_out(Tensor residual, Tensor weights, Tensor(a!) pre_mix, Tensor(b!) post_mix, Tensor(c!) comb_mix, "
        MHC_S ") -> ()");
  m.def("collapse(Tensor residual, Tensor? pre_mix, Tensor? rmsnorm_weight, str pre_source, " MHC_S ") -> Tensor");
  m.def("collapse_out(Tensor residual, Tensor? pre_mix, Tensor? rmsnorm_weight, str pre_source, "
        "Tensor(a!) layer_input, " MHC_S ") -> ()");
  m.def("pre(Tensor residual, Tensor weights, Tensor? pre_mix_in, Tensor? rmsnorm_weight, str pre_source, " MHC_S
        ") -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("pre_out(Tensor residual, Tensor weights, Tensor? pre_mix_in, Tensor? rmsnorm_weight, str pre_source, "
        "Tensor(a!) layer_input, Tensor(b!) post_mix, Tensor(c!) comb_mix, Tensor(d!)? pre_mix_out, " MHC_S ") -> ()");
  m.def("pre_broadcast(Tensor embedding, Tensor weights, Tensor? pre_mix_in, Tensor? rmsnorm_weight, str pre_source, "
        "bool materialize_residual, " MHC_S ") -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("pre_broadcast_out(Tensor embedding, Tensor weights, Tensor? pre_mix_in, Tensor? rmsnorm_weight, "
        "str pre_source, Tensor(a!) layer_input, Tensor(b!) post_mix, Tensor(c!) comb_mix, Tensor(d!)? pre_mix_out, "
        "Tensor(e!)? residual_out, " MHC_S ") -> ()");
  m.def("post(Tensor layer_output, Tensor residual, Tensor post_mix, Tensor comb_mix, " MHC_S ") -> Tensor");
  m.def("post_out(Tensor layer_output, Tensor residual, Tensor post_mix, Tensor comb_mix, Tensor(a!) residual_out, "
        MHC_S ") -> ()");
  m.def("post_pre(Tensor layer_output, Tensor residual, Tensor post_mix, Tensor comb_mix, Tensor weights, "
        "Tensor? pre_mix_in, Tensor? rmsnorm_weight, str pre_source, " MHC_S
        ") -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("post_pre_out(Tensor layer_output, Tensor residual, Tensor post_mix, Tensor comb_mix, Tensor weights, "
        "Tensor? pre_mix_in, Tensor? rmsnorm_weight, str pre_source, Tensor(a!) residual_out, "
        "Tensor(b!) layer_input, Tensor(c!) post_mix_out, Tensor(d!) comb_mix_out, Tensor(e!)? pre_mix_out, " MHC_S
        ") -> ()");
  m.def("head(Tensor residual, Tensor? weights, Tensor? pre_mix_in, Tensor? rmsnorm_weight, str kind, " MHC_S
        ") -> Tensor");
  m.def("head_out(Tensor residual, Tensor? weights, Tensor? pre_mix_in, Tensor? rmsnorm_weight, str kind, "
        "Tensor(a!) output, " MHC_S ") -> ()");
}

// The functional forms: unboxed kernels (they allocate, then call the destination-passing form).
#define MHC_IMPLS(m)                                                 \
  m.impl("mixes", &mixes);                                           \
  m.impl("collapse", &collapse);                                     \
  m.impl("pre", &pre);                                               \
  m.impl("pre_broadcast", &pre_broadcast);                           \
  m.impl("post", &post);                                             \
  m.impl("post_pre", &post_pre);                                     \
  m.impl("head", &head)

// The destination-passing forms: boxed kernels (Boxed above). (Kernels at the autograd keys, to
// skip torch's autograd fallback, about 0.1 us per call, would run before the Python key and so
// take the tensor subclasses of torch.compile's tracing: opcheck's test_aot_dispatch_dynamic.)
#define MHC_OUT_IMPLS(m)                                             \
  m.impl("mixes_out", Boxed<&mixes_out>::function());                \
  m.impl("collapse_out", Boxed<&collapse_out>::function());          \
  m.impl("pre_out", Boxed<&pre_out>::function());                    \
  m.impl("pre_broadcast_out", Boxed<&pre_broadcast_out>::function()); \
  m.impl("post_out", Boxed<&post_out>::function());                  \
  m.impl("post_pre_out", Boxed<&post_pre_out>::function());          \
  m.impl("head_out", Boxed<&head_out>::function())

TORCH_LIBRARY_IMPL(mhc, CPU, m) {
  MHC_IMPLS(m);
  MHC_OUT_IMPLS(m);
}
TORCH_LIBRARY_IMPL(mhc, CUDA, m) {
  MHC_IMPLS(m);
  MHC_OUT_IMPLS(m);
}

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
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>

#include "api_table.hpp"

namespace {

using at::Tensor;
using OptTensor = std::optional<Tensor>;
using Str = c10::string_view;

const mhc::pyext::ApiTable* g_api = nullptr;

// Raises a RuntimeError "python/src/mhc_torch.cpp:LINE: message" (mhc.torch turns a message with
// a location into mhc.MhcError).
#define MHC_TORCH_CHECK(cond, ...)                                                                 \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::ostringstream mhc_os_;                                                                  \
      mhc_os_ << "python/src/mhc_torch.cpp:" << __LINE__ << ": ";                                  \
      stream_all(mhc_os_, __VA_ARGS__);                                                            \
      TORCH_CHECK(false, mhc_os_.str());                                                           \
    }                                                                                              \
  } while (0)

template <typename... Parts>
void stream_all(std::ostringstream& os, const Parts&... parts) {
  (os << ... << parts);
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

mhc::Config config_of(int64_t n, int64_t H, double norm_eps, double pre_eps, double sinkhorn_eps,
                      int64_t sinkhorn_iters, double post_scale, double rmsnorm_eps) {
  MHC_TORCH_CHECK(n >= 1 && n <= mhc::kMaxStreams, "config: n must be in 1..", mhc::kMaxStreams, ", got ", n);
  MHC_TORCH_CHECK(sinkhorn_iters >= 1 && sinkhorn_iters <= mhc::kMaxSinkhornIters,
                  "config: sinkhorn_iters must be in 1..", mhc::kMaxSinkhornIters, ", got ", sinkhorn_iters);
  mhc::Config c;
  c.n = static_cast<int32_t>(n);
  c.H = H;
  c.norm_eps = static_cast<float>(norm_eps);
  c.pre_eps = static_cast<float>(pre_eps);
  c.sinkhorn_eps = static_cast<float>(sinkhorn_eps);
  c.sinkhorn_iters = static_cast<int32_t>(sinkhorn_iters);
  c.post_scale = static_cast<float>(post_scale);
  c.rmsnorm_eps = static_cast<float>(rmsnorm_eps);
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

// The weights over the operator's buffer argument.
struct Weights {
  mhc::PreparedWeights w;
  const mhc::PreparedWeights* ptr = nullptr;
  Weights(const OptTensor& buffer, const mhc::Config& c, bool head, const char* op) {
    if (!buffer.has_value()) return;
    check_api(api().attach(view(*buffer, op, "weights"), c.n, c.H, head, &w));
    ptr = &w;
  }
};

// Where a call runs: torch's current stream of the primary tensor's device, the workspace
// registered for it, and that device made current for the call.
struct Context {
  mhc::Exec exec;
  c10::OptionalDeviceGuard guard;
  Context(const Tensor& primary, const char* op) {
    const c10::Device d = primary.device();
    if (!d.is_cuda()) return;
    guard.reset_device(d);
    const c10::Stream s = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(d);
    exec.stream = s.native_handle();
    exec.workspace = api().workspace_for(d.index(), exec.stream);
    MHC_TORCH_CHECK(exec.workspace != nullptr, op, ": no mhc workspace for ", d, ": call mhc.torch.init('", d,
                    "', max_tokens) once before the first call (and before any CUDA-graph capture)");
  }
};

at::Tensor empty_like_dev(at::IntArrayRef shape, at::ScalarType dt, const Tensor& like) {
  return at::empty(shape, at::TensorOptions().dtype(dt).device(like.device()));
}

#define MHC_SCALARS_PARAMS                                                                           \
  int64_t n, int64_t H, double norm_eps, double pre_eps, double sinkhorn_eps, int64_t sinkhorn_iters, \
      double post_scale, double rmsnorm_eps
#define MHC_SCALARS n, H, norm_eps, pre_eps, sinkhorn_eps, sinkhorn_iters, post_scale, rmsnorm_eps

// ---- destination-passing forms -----------------------------------------------------------------

void mixes_out(const Tensor& residual, const Tensor& weights, const Tensor& pre_mix, const Tensor& post_mix,
               const Tensor& comb_mix, MHC_SCALARS_PARAMS) {
  const char* op = "mixes";
  mhc::MixesArgs a;
  a.config = config_of(MHC_SCALARS);
  Weights w(weights, a.config, false, op);
  a.residual = view(residual, op, "residual");
  a.weights = w.ptr;
  a.pre_mix = view(pre_mix, op, "pre_mix");
  a.post_mix = view(post_mix, op, "post_mix");
  a.comb_mix = view(comb_mix, op, "comb_mix");
  Context ctx(residual, op);
  a.exec = ctx.exec;
  check_api(api().mixes(a));
}

void collapse_out(const Tensor& residual, const OptTensor& pre_mix, const OptTensor& rmsnorm_weight, Str pre_source,
                  const Tensor& layer_input, MHC_SCALARS_PARAMS) {
  const char* op = "collapse";
  mhc::CollapseArgs a;
  a.config = config_of(MHC_SCALARS);
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
             const Tensor& comb_mix, const OptTensor& pre_mix_out, MHC_SCALARS_PARAMS) {
  const char* op = "pre";
  mhc::PreArgs a;
  a.config = config_of(MHC_SCALARS);
  a.pre_source = pre_source_of(pre_source, op);
  Weights w(weights, a.config, false, op);
  a.residual = view(residual, op, "residual");
  a.weights = w.ptr;
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
                       const OptTensor& residual_out, MHC_SCALARS_PARAMS) {
  const char* op = "pre_broadcast";
  mhc::PreBroadcastArgs a;
  a.config = config_of(MHC_SCALARS);
  a.pre_source = pre_source_of(pre_source, op);
  Weights w(weights, a.config, false, op);
  a.embedding = view(embedding, op, "embedding");
  a.weights = w.ptr;
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
              const Tensor& residual_out, MHC_SCALARS_PARAMS) {
  const char* op = "post";
  mhc::PostArgs a;
  a.config = config_of(MHC_SCALARS);
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
                  const Tensor& comb_mix_out, const OptTensor& pre_mix_out, MHC_SCALARS_PARAMS) {
  const char* op = "post_pre";
  mhc::PostPreArgs a;
  a.config = config_of(MHC_SCALARS);
  a.pre_source = pre_source_of(pre_source, op);
  Weights w(weights, a.config, false, op);
  a.layer_output = view(layer_output, op, "layer_output");
  a.residual = view(residual, op, "residual");
  a.post_mix = view(post_mix, op, "post_mix");
  a.comb_mix = view(comb_mix, op, "comb_mix");
  a.weights = w.ptr;
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
              const OptTensor& rmsnorm_weight, Str kind, const Tensor& output, MHC_SCALARS_PARAMS) {
  const char* op = "head";
  mhc::HeadArgs a;
  a.config = config_of(MHC_SCALARS);
  a.kind = head_kind_of(kind);
  Weights w(weights, a.config, true, op);
  a.residual = view(residual, op, "residual");
  a.weights = w.ptr;
  a.pre_mix_in = view(pre_mix_in, op, "pre_mix_in");
  a.rmsnorm_weight = view(rmsnorm_weight, op, "rmsnorm_weight");
  a.output = view(output, op, "output");
  Context ctx(residual, op);
  a.exec = ctx.exec;
  check_api(api().head(a));
}

// ---- functional forms: the outputs allocated, then the destination-passing form ---------------

std::tuple<Tensor, Tensor, Tensor> mixes(const Tensor& residual, const Tensor& weights, MHC_SCALARS_PARAMS) {
  const int64_t T = residual.size(0);
  Tensor pre = empty_like_dev({T, n}, at::kFloat, residual), post = empty_like_dev({T, n}, at::kFloat, residual);
  Tensor comb = empty_like_dev({T, n, n}, at::kFloat, residual);
  mixes_out(residual, weights, pre, post, comb, MHC_SCALARS);
  return {pre, post, comb};
}

Tensor collapse(const Tensor& residual, const OptTensor& pre_mix, const OptTensor& rmsnorm_weight, Str pre_source,
                MHC_SCALARS_PARAMS) {
  Tensor out = empty_like_dev({residual.size(0), H}, at::kBFloat16, residual);
  collapse_out(residual, pre_mix, rmsnorm_weight, pre_source, out, MHC_SCALARS);
  return out;
}

std::tuple<Tensor, Tensor, Tensor, Tensor> pre(const Tensor& residual, const Tensor& weights,
                                               const OptTensor& pre_mix_in, const OptTensor& rmsnorm_weight,
                                               Str pre_source, MHC_SCALARS_PARAMS) {
  const int64_t T = residual.size(0);
  Tensor li = empty_like_dev({T, H}, at::kBFloat16, residual), pm = empty_like_dev({T, n}, at::kFloat, residual);
  Tensor cm = empty_like_dev({T, n, n}, at::kFloat, residual), pmo = empty_like_dev({T, n}, at::kFloat, residual);
  pre_out(residual, weights, pre_mix_in, rmsnorm_weight, pre_source, li, pm, cm, pmo, MHC_SCALARS);
  return {li, pm, cm, pmo};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> pre_broadcast(const Tensor& embedding, const Tensor& weights,
                                                                 const OptTensor& pre_mix_in,
                                                                 const OptTensor& rmsnorm_weight, Str pre_source,
                                                                 bool materialize_residual, MHC_SCALARS_PARAMS) {
  const int64_t T = embedding.size(0);
  Tensor li = empty_like_dev({T, H}, at::kBFloat16, embedding), pm = empty_like_dev({T, n}, at::kFloat, embedding);
  Tensor cm = empty_like_dev({T, n, n}, at::kFloat, embedding), pmo = empty_like_dev({T, n}, at::kFloat, embedding);
  Tensor ro = empty_like_dev({materialize_residual ? T : 0, n, H}, at::kBFloat16, embedding);
  pre_broadcast_out(embedding, weights, pre_mix_in, rmsnorm_weight, pre_source, li, pm, cm, pmo,
                    materialize_residual ? OptTensor(ro) : OptTensor(), MHC_SCALARS);
  return {li, pm, cm, pmo, ro};
}

Tensor post(const Tensor& layer_output, const Tensor& residual, const Tensor& post_mix, const Tensor& comb_mix,
            MHC_SCALARS_PARAMS) {
  Tensor out = empty_like_dev({layer_output.size(0), n, H}, at::kBFloat16, layer_output);
  post_out(layer_output, residual, post_mix, comb_mix, out, MHC_SCALARS);
  return out;
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> post_pre(const Tensor& layer_output, const Tensor& residual,
                                                            const Tensor& post_mix, const Tensor& comb_mix,
                                                            const Tensor& weights, const OptTensor& pre_mix_in,
                                                            const OptTensor& rmsnorm_weight, Str pre_source,
                                                            MHC_SCALARS_PARAMS) {
  const int64_t T = layer_output.size(0);
  Tensor ro = empty_like_dev({T, n, H}, at::kBFloat16, layer_output);
  Tensor li = empty_like_dev({T, H}, at::kBFloat16, layer_output);
  Tensor pm = empty_like_dev({T, n}, at::kFloat, layer_output), cm = empty_like_dev({T, n, n}, at::kFloat, layer_output);
  Tensor pmo = empty_like_dev({T, n}, at::kFloat, layer_output);
  post_pre_out(layer_output, residual, post_mix, comb_mix, weights, pre_mix_in, rmsnorm_weight, pre_source, ro, li, pm,
               cm, pmo, MHC_SCALARS);
  return {ro, li, pm, cm, pmo};
}

Tensor head(const Tensor& residual, const OptTensor& weights, const OptTensor& pre_mix_in,
            const OptTensor& rmsnorm_weight, Str kind, MHC_SCALARS_PARAMS) {
  Tensor out = empty_like_dev({residual.size(0), H}, at::kBFloat16, residual);
  head_out(residual, weights, pre_mix_in, rmsnorm_weight, kind, out, MHC_SCALARS);
  return out;
}

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

#define MHC_S \
  "int n, int H, float norm_eps, float pre_eps, float sinkhorn_eps, int sinkhorn_iters, float post_scale, float rmsnorm_eps"

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

#define MHC_IMPLS(m)                                    \
  m.impl("mixes", &mixes);                              \
  m.impl("mixes_out", &mixes_out);                      \
  m.impl("collapse", &collapse);                        \
  m.impl("collapse_out", &collapse_out);                \
  m.impl("pre", &pre);                                  \
  m.impl("pre_out", &pre_out);                          \
  m.impl("pre_broadcast", &pre_broadcast);              \
  m.impl("pre_broadcast_out", &pre_broadcast_out);      \
  m.impl("post", &post);                                \
  m.impl("post_out", &post_out);                        \
  m.impl("post_pre", &post_pre);                        \
  m.impl("post_pre_out", &post_pre_out);                \
  m.impl("head", &head);                                \
  m.impl("head_out", &head_out)

TORCH_LIBRARY_IMPL(mhc, CPU, m) { MHC_IMPLS(m); }
TORCH_LIBRARY_IMPL(mhc, CUDA, m) { MHC_IMPLS(m); }

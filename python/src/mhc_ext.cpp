// python/src/mhc_ext.cpp - the nanobind extension mhc._mhc: a thin layer over include/mhc.
//
// It also holds the workspace registry (workspaces registered per CUDA device and stream, for
// mhc.torch) and the function table the torch extension calls the library through
// (python/src/api_table.hpp).
//
// Tensors arrive as any of
//   - an object speaking DLPack or the buffer protocol (numpy, torch, CuPy, JAX, ...), read
//     through nb::ndarray<> without conversion or copy;
//   - a numpy array of dtype ml_dtypes.bfloat16 (viewed as its raw uint16 bits, tagged bf16);
//   - a Bf16View, the explicit wrapper of a uint16 array holding raw bf16 bits;
//   - a RawTensor (pointer, dtype, device, shape, strides), which the Python torch layer builds
//     from a torch.Tensor without going through __dlpack__ (cheaper, and legal on tensors that
//     require grad and inside CUDA-graph capture);
//   - None, for an absent optional tensor.
// Each becomes an mhc::TensorView; the library validates everything else (shape, dtype,
// device, layout) and names the tensor in its errors. The GIL is released while an operator
// runs. mhc::Error surfaces in Python as mhc.MhcError (a RuntimeError) with the same text.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mhc/mhc.hpp"
#include "api_table.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

PyObject* g_error_type = nullptr;  // mhc._mhc.MhcError, created at module init, never freed

// Raises mhc.MhcError carrying str = e.what() ("file:line: message") and the attributes
// message, file and line.
void raise_mhc_error(const mhc::Error& e) {
  PyObject* exc = PyObject_CallFunction(g_error_type, "s", e.what());
  if (exc == nullptr) return;  // the constructor itself raised; keep that error
  PyObject_SetAttrString(exc, "message", nb::str(e.message().c_str()).ptr());
  PyObject_SetAttrString(exc, "file", nb::str(e.file()).ptr());
  PyObject_SetAttrString(exc, "line", nb::int_(e.line()).ptr());
  PyErr_SetObject(g_error_type, exc);
  Py_DECREF(exc);
}

// Raw bf16 bits: a uint16 array that the caller explicitly declared to hold bf16 values.
struct Bf16View {
  nb::object bits;
};

// A tensor described by its pointer and metadata (no DLPack exchange).
struct RawTensor {
  mhc::TensorView view;
  nb::object owner;  // the producer (e.g. the torch.Tensor); kept alive with the view
};

const char* device_type_name(int code) {
  switch (code) {
    case 1: return "cpu";
    case 2: return "cuda";
    case 3: return "cuda_host (pinned host memory)";
    case 13: return "cuda_managed";
    default: return "a non-CPU/CUDA device";
  }
}

std::string dlpack_dtype_name(nb::dlpack::dtype dt) {
  std::string base;
  switch (static_cast<nb::dlpack::dtype_code>(dt.code)) {
    case nb::dlpack::dtype_code::Int: base = "int"; break;
    case nb::dlpack::dtype_code::UInt: base = "uint"; break;
    case nb::dlpack::dtype_code::Float: base = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: base = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: base = "complex"; break;
    case nb::dlpack::dtype_code::Bool: base = "bool"; break;
    default: base = "dlpack_code" + std::to_string(dt.code) + "_"; break;
  }
  std::string name = base + std::to_string(dt.bits);
  if (dt.lanes != 1) name += "x" + std::to_string(dt.lanes);
  return name;
}

// An array without elements has no layout; producers report arbitrary strides for it (numpy's
// DLPack export gives 0). Give it the row-major strides of its shape so that layout checks,
// which exist for arrays with data, pass.
void normalize_empty(mhc::TensorView& v) {
  if (v.numel() != 0) return;
  int64_t stride = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.strides[d] = stride;
    stride *= v.shape[d] > 0 ? v.shape[d] : 1;
  }
}

std::string py_type_name(nb::handle obj) { return nb::type_name(obj.type()).c_str(); }

// Converts Python tensor arguments into TensorViews for one call and keeps what backs them
// alive until the call returns.
class Binder {
 public:
  explicit Binder(const char* op) : op_(op) {}

  mhc::TensorView in(nb::handle obj, const char* name) { return convert(obj, name, false); }
  mhc::TensorView out(nb::handle obj, const char* name) { return convert(obj, name, true); }

 private:
  mhc::TensorView convert(nb::handle obj, const char* name, bool writable) {
    if (obj.is_none()) return mhc::TensorView{};
    if (nb::isinstance<RawTensor>(obj)) return nb::cast<const RawTensor&>(obj).view;
    if (nb::isinstance<Bf16View>(obj)) {
      nb::handle bits = nb::cast<const Bf16View&>(obj).bits;
      mhc::TensorView v = from_array(bits, name, writable, /*bf16_bits=*/true);
      return v;
    }
    return from_array(obj, name, writable, false);
  }

  mhc::TensorView from_array(nb::handle obj, const char* name, bool writable, bool bf16_bits) {
    if (writable) {
      nb::ndarray<> arr;
      if (nb::try_cast(obj, arr, false)) {
        rw_.push_back(arr);
        return view_of(arr, name, bf16_bits);
      }
    } else {
      nb::ndarray<nb::ro> arr;
      if (nb::try_cast(obj, arr, false)) {
        ro_.push_back(arr);
        return view_of(arr, name, bf16_bits);
      }
    }
    PyErr_Clear();
    if (!bf16_bits && is_ml_dtypes_bf16(obj)) {
      // numpy cannot export ml_dtypes' bfloat16 through DLPack or the buffer protocol: read the
      // same memory as uint16 and tag it bf16.
      nb::object bits = nb::borrow(obj).attr("view")(nb::module_::import_("numpy").attr("uint16"));
      keep_.push_back(bits);
      return from_array(bits, name, writable, true);
    }
    if (writable) {
      nb::ndarray<nb::ro> ro;
      if (nb::try_cast(obj, ro, false)) {
        MHC_FAIL(op_, ": ", name, ": expected a writable array, got a read-only ", py_type_name(obj));
      }
      PyErr_Clear();
    }
    MHC_FAIL(op_, ": ", name, ": expected an array (DLPack or buffer protocol: numpy, torch, CuPy, ...), got ",
             py_type_name(obj));
  }

  static bool is_ml_dtypes_bf16(nb::handle obj) {
    if (!nb::hasattr(obj, "dtype") || !nb::hasattr(obj, "view")) return false;
    nb::object dtype = nb::borrow(obj).attr("dtype");
    if (!nb::hasattr(dtype, "name")) return false;
    nb::object dname = dtype.attr("name");
    return nb::isinstance<nb::str>(dname) && std::string(nb::str(dname).c_str()) == "bfloat16";
  }

  template <typename Array>
  mhc::TensorView view_of(const Array& arr, const char* name, bool bf16_bits) {
    mhc::TensorView v;
    const nb::dlpack::dtype dt = arr.dtype();
    const auto code = static_cast<nb::dlpack::dtype_code>(dt.code);
    bool known = dt.lanes == 1;
    if (bf16_bits) {
      MHC_CHECK(code == nb::dlpack::dtype_code::UInt && dt.bits == 16 && dt.lanes == 1, op_, ": ", name,
                ": mhc.bf16_view expects a uint16 array of raw bf16 bits, got ", dlpack_dtype_name(dt));
      v.dtype = mhc::DType::kBFloat16;
    } else if (known && code == nb::dlpack::dtype_code::Bfloat && dt.bits == 16) {
      v.dtype = mhc::DType::kBFloat16;
    } else if (known && code == nb::dlpack::dtype_code::Float && dt.bits == 16) {
      v.dtype = mhc::DType::kFloat16;
    } else if (known && code == nb::dlpack::dtype_code::Float && dt.bits == 32) {
      v.dtype = mhc::DType::kFloat32;
    } else if (known && code == nb::dlpack::dtype_code::Float && dt.bits == 64) {
      v.dtype = mhc::DType::kFloat64;
    } else if (known && code == nb::dlpack::dtype_code::Int && dt.bits == 32) {
      v.dtype = mhc::DType::kInt32;
    } else if (known && code == nb::dlpack::dtype_code::Int && dt.bits == 64) {
      v.dtype = mhc::DType::kInt64;
    } else if (known && code == nb::dlpack::dtype_code::UInt && dt.bits == 8) {
      v.dtype = mhc::DType::kUInt8;
    } else if (known && code == nb::dlpack::dtype_code::UInt && dt.bits == 16) {
      MHC_FAIL(op_, ": ", name, ": got a uint16 array; if it holds raw bf16 bits, pass mhc.bf16_view(array)");
    } else {
      MHC_FAIL(op_, ": ", name, ": unsupported dtype ", dlpack_dtype_name(dt),
               " (mhc operators take bf16 and fp32)");
    }
    const int dev = arr.device_type();
    MHC_CHECK(dev == 1 || dev == 2, op_, ": ", name, ": unsupported device ", device_type_name(dev),
              " (mhc takes cpu and cuda tensors)");
    v.device.type = dev == 1 ? mhc::DeviceType::kCPU : mhc::DeviceType::kCUDA;
    v.device.id = dev == 1 ? 0 : arr.device_id();
    MHC_CHECK(arr.ndim() <= static_cast<size_t>(mhc::kMaxRank), op_, ": ", name, ": rank ", arr.ndim(),
              " exceeds the largest supported rank ", mhc::kMaxRank);
    v.rank = static_cast<int32_t>(arr.ndim());
    for (int i = 0; i < v.rank; ++i) {
      v.shape[i] = static_cast<int64_t>(arr.shape(static_cast<size_t>(i)));
      v.strides[i] = arr.stride(static_cast<size_t>(i));
    }
    v.data = const_cast<void*>(static_cast<const void*>(arr.data()));
    normalize_empty(v);
    return v;
  }

  const char* op_;
  std::vector<nb::ndarray<nb::ro>> ro_;
  std::vector<nb::ndarray<>> rw_;
  std::vector<nb::object> keep_;
};

mhc::PreSource parse_pre_source(const std::string& s, const char* op) {
  if (s == "computed") return mhc::PreSource::kComputed;
  if (s == "carried") return mhc::PreSource::kCarried;
  if (s == "identity") return mhc::PreSource::kIdentity;
  MHC_FAIL(op, ": pre_source: expected 'computed', 'carried' or 'identity', got '", s, "'");
}

mhc::HeadKind parse_head_kind(const std::string& s) {
  if (s == "learned") return mhc::HeadKind::kLearned;
  if (s == "carried") return mhc::HeadKind::kCarried;
  if (s == "mean") return mhc::HeadKind::kMean;
  MHC_FAIL("head: kind: expected 'learned', 'carried' or 'mean', got '", s, "'");
}

// "cpu", "cuda", "cuda:N" (also anything whose str() reads so, e.g. a torch.device).
mhc::Device parse_device(nb::handle obj) {
  const std::string s = nb::str(obj).c_str();
  mhc::Device d;
  if (s == "cpu") return d;
  if (s == "cuda") {
    d.type = mhc::DeviceType::kCUDA;
    return d;
  }
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.find_first_not_of("0123456789", 5) == std::string::npos &&
      s.size() < 15) {
    d.type = mhc::DeviceType::kCUDA;
    d.id = std::stoi(s.substr(5));
    return d;
  }
  MHC_FAIL("device: expected 'cpu', 'cuda' or 'cuda:N', got '", s, "'");
}

mhc::Exec make_exec(uintptr_t stream, const mhc::Workspace* ws, const std::optional<std::string>& variant) {
  mhc::Exec e;
  e.stream = reinterpret_cast<void*>(stream);
  e.workspace = const_cast<mhc::Workspace*>(ws);
  e.variant = variant ? variant->c_str() : nullptr;
  return e;
}

// Runs an operator with the GIL released, or only reports the variant it would pick.
template <typename Args, typename Run, typename Select>
nb::object finish(const Args& a, bool select_only, Run run, Select select) {
  if (select_only) return nb::str(select(a).c_str());
  {
    nb::gil_scoped_release release;
    run(a);
  }
  return nb::none();
}

RawTensor make_raw(uintptr_t data, int dtype, int device_type, int device_id, const std::vector<int64_t>& shape,
                   const std::vector<int64_t>& strides, nb::object owner) {
  MHC_CHECK(shape.size() == strides.size(), "RawTensor: shape has ", shape.size(), " dimensions, strides ",
            strides.size());
  MHC_CHECK(shape.size() <= static_cast<size_t>(mhc::kMaxRank), "RawTensor: rank ", shape.size(),
            " exceeds the largest supported rank ", mhc::kMaxRank);
  MHC_CHECK(dtype >= 0 && dtype <= static_cast<int>(mhc::DType::kUInt8), "RawTensor: unknown dtype code ", dtype);
  MHC_CHECK(device_type == 1 || device_type == 2, "RawTensor: unsupported device type ", device_type);
  RawTensor r;
  r.view.data = reinterpret_cast<void*>(data);
  r.view.dtype = static_cast<mhc::DType>(dtype);
  r.view.device.type = static_cast<mhc::DeviceType>(device_type);
  r.view.device.id = device_type == 1 ? 0 : device_id;
  r.view.rank = static_cast<int32_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    r.view.shape[i] = shape[i];
    r.view.strides[i] = strides[i];
  }
  normalize_empty(r.view);
  r.owner = std::move(owner);
  return r;
}

// ---- workspace registry and the torch extension's function table ---------------------------

// Workspaces registered for a CUDA device (its default) or for one (device, stream) pair.
// Never destroyed: its workspaces are freed by unregistering, not after the CUDA runtime has
// shut down at exit.
struct WorkspaceRegistry {
  std::mutex mu;
  std::map<std::pair<int32_t, uintptr_t>, mhc::Workspace> by_stream;
  std::map<int32_t, mhc::Workspace> by_device;
};

WorkspaceRegistry& workspace_registry() {
  static WorkspaceRegistry* r = new WorkspaceRegistry;
  return *r;
}

// The workspace registered for (device, stream), else the device's default, copied under the
// lock: the copy (a handle) keeps it alive however the registry changes afterwards.
bool registered_workspace(int32_t device, void* stream, mhc::Workspace* out) {
  WorkspaceRegistry& r = workspace_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.by_stream.empty()) {
    auto it = r.by_stream.find({device, reinterpret_cast<uintptr_t>(stream)});
    if (it != r.by_stream.end()) {
      *out = it->second;
      return true;
    }
  }
  auto it = r.by_device.find(device);
  if (it == r.by_device.end()) return false;
  *out = it->second;
  return true;
}

thread_local std::string t_api_error;

template <typename Args, void (*Op)(const Args&)>
const char* api_call(const Args& a) {
  try {
    Op(a);
    return nullptr;
  } catch (const std::exception& e) {
    t_api_error = e.what();
    return t_api_error.c_str();
  }
}

const char* api_attach(const mhc::TensorView& buffer, int32_t n, int64_t H, bool head, mhc::PreparedWeights* out) {
  try {
    *out = mhc::attach_prepared(buffer, n, H, head);
    return nullptr;
  } catch (const std::exception& e) {
    t_api_error = e.what();
    return t_api_error.c_str();
  }
}

const mhc::pyext::ApiTable g_api_table = {
    mhc::pyext::kApiVersion,
    sizeof(mhc::pyext::ApiTable),
    api_call<mhc::MixesArgs, mhc::mixes>,
    api_call<mhc::CollapseArgs, mhc::collapse>,
    api_call<mhc::PreArgs, mhc::pre>,
    api_call<mhc::PreBroadcastArgs, mhc::pre_broadcast>,
    api_call<mhc::PostArgs, mhc::post>,
    api_call<mhc::PostPreArgs, mhc::post_pre>,
    api_call<mhc::HeadArgs, mhc::head>,
    api_attach,
    registered_workspace,
};

}  // namespace

NB_MODULE(_mhc, m) {
  m.doc() = "mhc native extension (use the mhc package, not this module directly)";

  g_error_type = PyErr_NewExceptionWithDoc(
      "mhc.MhcError",
      "Error raised by mhc: invalid arguments (names the tensor, the expected and the actual value) or a "
      "backend failure. str(e) is 'file:line: message'; e.message, e.file and e.line hold the parts.",
      PyExc_RuntimeError, nullptr);
  m.attr("MhcError") = nb::handle(g_error_type);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const mhc::Error& e) {
      raise_mhc_error(e);
    }
  });

  // ---- small types -------------------------------------------------------------------------
  nb::class_<mhc::Config>(m, "NativeConfig")
      .def(nb::init<>())
      .def_rw("n", &mhc::Config::n)
      .def_rw("H", &mhc::Config::H)
      .def_rw("norm_eps", &mhc::Config::norm_eps)
      .def_rw("pre_eps", &mhc::Config::pre_eps)
      .def_rw("sinkhorn_eps", &mhc::Config::sinkhorn_eps)
      .def_rw("sinkhorn_iters", &mhc::Config::sinkhorn_iters)
      .def_rw("post_scale", &mhc::Config::post_scale)
      .def_rw("rmsnorm_eps", &mhc::Config::rmsnorm_eps);

  m.def("validate_config", &mhc::validate_config, "config"_a);

  m.def("model_presets", [] {
    nb::list out;
    for (const mhc::ModelPreset& p : mhc::model_presets()) {
      out.append(nb::make_tuple(p.name, p.config, p.num_layers, mhc::to_string(p.mode), mhc::to_string(p.head)));
    }
    return out;
  });
  m.def("model_preset", [](const std::string& name) {
    const mhc::ModelPreset& p = mhc::model_preset(name);
    return nb::make_tuple(p.name, p.config, p.num_layers, mhc::to_string(p.mode), mhc::to_string(p.head));
  }, "name"_a);

  m.def("list_variants", [] {
    nb::list out;
    for (const mhc::VariantInfo& v : mhc::list_variants()) {
      out.append(nb::make_tuple(v.id, v.device, v.envelope, v.kernels, v.family));
    }
    return out;
  });
  m.def("cuda_available", &mhc::cuda_available);
  // The input limits (mhc/config.hpp), for the Python layer's own range checks.
  m.attr("MAX_STREAMS") = mhc::kMaxStreams;
  m.attr("MAX_HIDDEN") = mhc::kMaxHidden;
  m.attr("MAX_TOKENS") = mhc::kMaxTokens;
  m.attr("MAX_SINKHORN_ITERS") = mhc::kMaxSinkhornIters;
  m.def("version", &mhc::version, "The library version (the CMake project version): mhc.__version__.");

  m.def("device_of", [](nb::handle device) {
    const mhc::Device d = parse_device(device);
    return nb::make_tuple(static_cast<int>(d.type), d.id);
  }, "device"_a, "Parses 'cpu' / 'cuda' / 'cuda:N' into (device_type, ordinal), DLPack numbering.");

  nb::class_<Bf16View>(m, "Bf16View",
                       "Raw bf16 bits in a uint16 array, declared bf16 explicitly (see mhc.bf16_view).")
      .def_prop_ro("bits", [](const Bf16View& v) { return v.bits; }, "the uint16 array holding the bits")
      .def_prop_ro("shape", [](const Bf16View& v) { return v.bits.attr("shape"); })
      .def_prop_ro("dtype", [](const Bf16View&) { return "bf16"; })
      .def("__repr__", [](const Bf16View& v) {
        return "Bf16View(shape=" + std::string(nb::repr(v.bits.attr("shape")).c_str()) + ")";
      });
  m.def("bf16_view", [](nb::object bits) {
    nb::ndarray<nb::ro> arr;
    MHC_CHECK(nb::try_cast(bits, arr, false), "bf16_view: expected a uint16 array, got ", py_type_name(bits));
    const nb::dlpack::dtype dt = arr.dtype();
    MHC_CHECK(dt.code == static_cast<uint8_t>(nb::dlpack::dtype_code::UInt) && dt.bits == 16 && dt.lanes == 1,
              "bf16_view: expected a uint16 array, got dtype ", dlpack_dtype_name(dt));
    return Bf16View{std::move(bits)};
  }, "bits"_a);

  nb::class_<RawTensor>(m, "RawTensor",
                        "A tensor by pointer and metadata (internal: built by mhc.torch from torch.Tensor).")
      .def("__init__", [](RawTensor* self, uintptr_t data, int dtype, int device_type, int device_id,
                          const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                          nb::object owner) {
        new (self) RawTensor(make_raw(data, dtype, device_type, device_id, shape, strides, std::move(owner)));
      }, "data"_a, "dtype"_a, "device_type"_a, "device_id"_a, "shape"_a, "strides"_a, "owner"_a = nb::none());

  // ---- weights and workspace ---------------------------------------------------------------
  nb::class_<mhc::PreparedWeights>(m, "PreparedWeights",
                                   "Weights prepared once at load time (mhc.prepare / mhc.prepare_head). Opaque.")
      .def_prop_ro("n", &mhc::PreparedWeights::n)
      .def_prop_ro("H", &mhc::PreparedWeights::H)
      .def_prop_ro("rows", &mhc::PreparedWeights::rows)
      .def_prop_ro("is_head", &mhc::PreparedWeights::is_head)
      .def_prop_ro("device", [](const mhc::PreparedWeights& w) { return mhc::device_name(w.device()); })
      .def("__repr__", [](const mhc::PreparedWeights& w) {
        return std::string("PreparedWeights(") + (w.is_head() ? "head, " : "") + "n=" + std::to_string(w.n()) +
               ", H=" + std::to_string(w.H()) + ", device='" + mhc::device_name(w.device()) + "')";
      });

  m.def("prepare", [](nb::handle fn, nb::handle scale, nb::handle base, int32_t n, int64_t H, nb::handle device,
                      nb::handle out) {
    Binder b("prepare");
    mhc::MixWeightsView w;
    w.fn = b.in(fn, "fn");
    w.scale = b.in(scale, "scale");
    w.base = b.in(base, "base");
    if (!out.is_none()) {
      const mhc::TensorView dst = b.out(out, "out");
      nb::gil_scoped_release release;
      return mhc::prepare(w, n, H, dst);
    }
    const mhc::Device d = parse_device(device);
    nb::gil_scoped_release release;
    return mhc::prepare(w, n, H, d);
  }, "fn"_a, "scale"_a, "base"_a, nb::kw_only(), "n"_a, "H"_a, "device"_a, "out"_a.none() = nb::none(),
     "Prepares one mix block for device, or into out (a buffer the caller owns, prepared_bytes long).");

  m.def("prepare_head", [](nb::handle fn, nb::handle scale, nb::handle base, int32_t n, int64_t H,
                           nb::handle device, nb::handle out) {
    Binder b("prepare_head");
    mhc::HeadWeightsView w;
    w.fn = b.in(fn, "fn_head");
    w.scale = b.in(scale, "scale_head");
    w.base = b.in(base, "base_head");
    if (!out.is_none()) {
      const mhc::TensorView dst = b.out(out, "out");
      nb::gil_scoped_release release;
      return mhc::prepare_head(w, n, H, dst);
    }
    const mhc::Device d = parse_device(device);
    nb::gil_scoped_release release;
    return mhc::prepare_head(w, n, H, d);
  }, "fn"_a, "scale"_a, "base"_a, nb::kw_only(), "n"_a, "H"_a, "device"_a, "out"_a.none() = nb::none());

  m.def("prepared_bytes", [](int32_t n, int64_t H, bool head, nb::handle device) {
    return mhc::prepared_bytes(n, H, head, parse_device(device));
  }, "n"_a, "H"_a, "head"_a, "device"_a, "Bytes of a buffer prepare(..., out=) / attach_prepared need.");

  m.def("attach_prepared", [](nb::handle buffer, int32_t n, int64_t H, bool head) {
    Binder b("attach_prepared");
    return mhc::attach_prepared(b.in(buffer, "buffer"), n, H, head);
  }, "buffer"_a, "n"_a, "H"_a, "head"_a, "Weights over a buffer that prepare(..., out=) filled (no copy).");

  m.def("warmup", [](nb::handle device) {
    const mhc::Device d = parse_device(device);
    mhc::WarmupReport r;
    {
      nb::gil_scoped_release release;
      r = mhc::warmup(d);
    }
    return nb::make_tuple(r.kernels, r.loaded, r.seconds);
  }, "device"_a, "Loads every CUDA kernel the device can run: (kernels, loaded, seconds).");

  nb::class_<mhc::Workspace>(m, "Workspace",
                             "Scratch for CUDA calls, created explicitly before use (never inside a graph capture).")
      .def_static("create", [](nb::handle device, int64_t max_tokens, int32_t max_n, std::optional<uintptr_t> stream,
                               bool warmup, int64_t decode_max_tokens, int64_t n4_slice_tokens) {
        const mhc::Device d = parse_device(device);
        mhc::WorkspaceOptions o;
        o.max_tokens = max_tokens;
        o.max_n = max_n;
        o.warmup = warmup;
        o.decode_max_tokens = decode_max_tokens;
        o.n4_slice_tokens = n4_slice_tokens;
        if (stream) {
          o.bind_stream = true;
          o.stream = reinterpret_cast<void*>(*stream);
        }
        nb::gil_scoped_release release;
        return mhc::Workspace::create(d, o);
      }, "device"_a, "max_tokens"_a, "max_n"_a = mhc::kMaxStreams, nb::kw_only(), "stream"_a.none() = nb::none(),
         "warmup"_a = true, "decode_max_tokens"_a = 0, "n4_slice_tokens"_a = 0,
         "Allocates and initialises scratch for calls of up to max_tokens tokens on device (synchronous) and\n"
         "loads every kernel (warmup). With stream (a cudaStream_t as int) it is bound to that stream: calls on\n"
         "another stream raise.")
      .def_prop_ro("device", [](const mhc::Workspace& w) { return mhc::device_name(w.device()); })
      .def_prop_ro("max_tokens", &mhc::Workspace::max_tokens)
      .def_prop_ro("bound", &mhc::Workspace::bound)
      .def_prop_ro("stream", [](const mhc::Workspace& w) -> std::optional<uintptr_t> {
        if (!w.bound()) return std::nullopt;
        return reinterpret_cast<uintptr_t>(w.stream());
      })
      .def("__repr__", [](const mhc::Workspace& w) {
        return "Workspace(device='" + mhc::device_name(w.device()) + "', max_tokens=" +
               std::to_string(w.max_tokens()) + ")";
      });

  m.def("register_workspace", [](const mhc::Workspace& ws, std::optional<uintptr_t> stream) {
    MHC_CHECK(ws.valid() && ws.device().type == mhc::DeviceType::kCUDA,
              "register_workspace: expected a CUDA workspace, got one on ", mhc::device_name(ws.device()));
    WorkspaceRegistry& r = workspace_registry();
    std::lock_guard<std::mutex> lock(r.mu);
    if (stream) {
      r.by_stream[{ws.device().id, *stream}] = ws;
    } else {
      r.by_device[ws.device().id] = ws;
    }
  }, "workspace"_a, "stream"_a.none() = nb::none(),
     "Registers a CUDA workspace as its device's default, or for one stream (what mhc.torch looks up).");
  m.def("clear_registered_workspaces", [] {
    WorkspaceRegistry& r = workspace_registry();
    std::vector<mhc::Workspace> dropped;  // freed outside the lock
    {
      std::lock_guard<std::mutex> lock(r.mu);
      for (auto& kv : r.by_stream) dropped.push_back(std::move(kv.second));
      for (auto& kv : r.by_device) dropped.push_back(std::move(kv.second));
      r.by_stream.clear();
      r.by_device.clear();
    }
  });
  m.def("registered_workspace", [](int32_t device, uintptr_t stream) -> std::optional<mhc::Workspace> {
    mhc::Workspace w;
    if (!registered_workspace(device, reinterpret_cast<void*>(stream), &w)) return std::nullopt;
    return w;
  }, "device"_a, "stream"_a);
  m.def("api_table_address", [] { return reinterpret_cast<uintptr_t>(&g_api_table); },
        "Address of the function table the torch extension calls the library through (internal).");

  // ---- operators (destination passing; every output is given by the caller) ----------------
  m.def("mixes", [](const mhc::Config& config, nb::handle residual, const mhc::PreparedWeights* weights,
                    nb::handle pre_mix, nb::handle post_mix, nb::handle comb_mix, uintptr_t stream,
                    const mhc::Workspace* workspace, std::optional<std::string> variant, bool select_only) {
    MHC_CHECK(!select_only, "mixes: selecting a variant without running is not offered for mixes");
    Binder b("mixes");
    mhc::MixesArgs a;
    a.config = config;
    a.residual = b.in(residual, "residual");
    a.weights = weights;
    a.pre_mix = b.out(pre_mix, "pre_mix");
    a.post_mix = b.out(post_mix, "post_mix");
    a.comb_mix = b.out(comb_mix, "comb_mix");
    a.exec = make_exec(stream, workspace, variant);
    return finish(a, false, [](const mhc::MixesArgs& x) { mhc::mixes(x); },
                  [](const mhc::MixesArgs&) { return std::string(); });
  }, nb::kw_only(), "config"_a, "residual"_a.none(), "weights"_a.none(), "pre_mix"_a.none(), "post_mix"_a.none(),
     "comb_mix"_a.none(), "stream"_a = 0, "workspace"_a.none() = nb::none(), "variant"_a.none() = nb::none(),
     "select_only"_a = false);

  m.def("collapse", [](const mhc::Config& config, const std::string& pre_source, nb::handle residual,
                       nb::handle pre_mix, nb::handle rmsnorm_weight, nb::handle layer_input, uintptr_t stream,
                       const mhc::Workspace* workspace, std::optional<std::string> variant, bool select_only) {
    MHC_CHECK(!select_only, "collapse: selecting a variant without running is not offered for collapse");
    Binder b("collapse");
    mhc::CollapseArgs a;
    a.config = config;
    a.pre_source = parse_pre_source(pre_source, "collapse");
    a.residual = b.in(residual, "residual");
    a.pre_mix = b.in(pre_mix, "pre_mix");
    a.rmsnorm_weight = b.in(rmsnorm_weight, "rmsnorm_weight");
    a.layer_input = b.out(layer_input, "layer_input");
    a.exec = make_exec(stream, workspace, variant);
    return finish(a, false, [](const mhc::CollapseArgs& x) { mhc::collapse(x); },
                  [](const mhc::CollapseArgs&) { return std::string(); });
  }, nb::kw_only(), "config"_a, "pre_source"_a, "residual"_a.none(), "pre_mix"_a.none(),
     "rmsnorm_weight"_a.none(), "layer_input"_a.none(), "stream"_a = 0, "workspace"_a.none() = nb::none(),
     "variant"_a.none() = nb::none(), "select_only"_a = false);

  m.def("pre", [](const mhc::Config& config, const std::string& pre_source, nb::handle residual,
                  const mhc::PreparedWeights* weights, nb::handle pre_mix_in, nb::handle rmsnorm_weight,
                  nb::handle layer_input, nb::handle post_mix, nb::handle comb_mix, nb::handle pre_mix_out,
                  uintptr_t stream, const mhc::Workspace* workspace, std::optional<std::string> variant,
                  bool select_only) {
    Binder b("pre");
    mhc::PreArgs a;
    a.config = config;
    a.pre_source = parse_pre_source(pre_source, "pre");
    a.residual = b.in(residual, "residual");
    a.weights = weights;
    a.pre_mix_in = b.in(pre_mix_in, "pre_mix_in");
    a.rmsnorm_weight = b.in(rmsnorm_weight, "rmsnorm_weight");
    a.layer_input = b.out(layer_input, "layer_input");
    a.post_mix = b.out(post_mix, "post_mix");
    a.comb_mix = b.out(comb_mix, "comb_mix");
    a.pre_mix_out = b.out(pre_mix_out, "pre_mix_out");
    a.exec = make_exec(stream, workspace, variant);
    return finish(a, select_only, [](const mhc::PreArgs& x) { mhc::pre(x); },
                  [](const mhc::PreArgs& x) { return mhc::selected_variant(x); });
  }, nb::kw_only(), "config"_a, "pre_source"_a, "residual"_a.none(), "weights"_a.none(), "pre_mix_in"_a.none(),
     "rmsnorm_weight"_a.none(), "layer_input"_a.none(), "post_mix"_a.none(), "comb_mix"_a.none(),
     "pre_mix_out"_a.none(), "stream"_a = 0, "workspace"_a.none() = nb::none(), "variant"_a.none() = nb::none(),
     "select_only"_a = false);

  m.def("pre_broadcast", [](const mhc::Config& config, const std::string& pre_source, nb::handle embedding,
                            const mhc::PreparedWeights* weights, nb::handle pre_mix_in, nb::handle rmsnorm_weight,
                            nb::handle layer_input, nb::handle post_mix, nb::handle comb_mix,
                            nb::handle pre_mix_out, nb::handle residual_out, uintptr_t stream,
                            const mhc::Workspace* workspace, std::optional<std::string> variant, bool select_only) {
    Binder b("pre_broadcast");
    mhc::PreBroadcastArgs a;
    a.config = config;
    a.pre_source = parse_pre_source(pre_source, "pre_broadcast");
    a.embedding = b.in(embedding, "embedding");
    a.weights = weights;
    a.pre_mix_in = b.in(pre_mix_in, "pre_mix_in");
    a.rmsnorm_weight = b.in(rmsnorm_weight, "rmsnorm_weight");
    a.layer_input = b.out(layer_input, "layer_input");
    a.post_mix = b.out(post_mix, "post_mix");
    a.comb_mix = b.out(comb_mix, "comb_mix");
    a.pre_mix_out = b.out(pre_mix_out, "pre_mix_out");
    a.residual_out = b.out(residual_out, "residual_out");
    a.exec = make_exec(stream, workspace, variant);
    return finish(a, select_only, [](const mhc::PreBroadcastArgs& x) { mhc::pre_broadcast(x); },
                  [](const mhc::PreBroadcastArgs& x) { return mhc::selected_variant(x); });
  }, nb::kw_only(), "config"_a, "pre_source"_a, "embedding"_a.none(), "weights"_a.none(), "pre_mix_in"_a.none(),
     "rmsnorm_weight"_a.none(), "layer_input"_a.none(), "post_mix"_a.none(), "comb_mix"_a.none(),
     "pre_mix_out"_a.none(), "residual_out"_a.none(), "stream"_a = 0, "workspace"_a.none() = nb::none(),
     "variant"_a.none() = nb::none(), "select_only"_a = false);

  m.def("post", [](const mhc::Config& config, nb::handle layer_output, nb::handle residual, nb::handle post_mix,
                   nb::handle comb_mix, nb::handle residual_out, uintptr_t stream, const mhc::Workspace* workspace,
                   std::optional<std::string> variant, bool select_only) {
    Binder b("post");
    mhc::PostArgs a;
    a.config = config;
    a.layer_output = b.in(layer_output, "layer_output");
    a.residual = b.in(residual, "residual");
    a.post_mix = b.in(post_mix, "post_mix");
    a.comb_mix = b.in(comb_mix, "comb_mix");
    a.residual_out = b.out(residual_out, "residual_out");
    a.exec = make_exec(stream, workspace, variant);
    return finish(a, select_only, [](const mhc::PostArgs& x) { mhc::post(x); },
                  [](const mhc::PostArgs& x) { return mhc::selected_variant(x); });
  }, nb::kw_only(), "config"_a, "layer_output"_a.none(), "residual"_a.none(), "post_mix"_a.none(),
     "comb_mix"_a.none(), "residual_out"_a.none(), "stream"_a = 0, "workspace"_a.none() = nb::none(),
     "variant"_a.none() = nb::none(), "select_only"_a = false);

  m.def("post_pre", [](const mhc::Config& config, const std::string& pre_source, nb::handle layer_output,
                       nb::handle residual, nb::handle post_mix, nb::handle comb_mix,
                       const mhc::PreparedWeights* weights, nb::handle pre_mix_in, nb::handle rmsnorm_weight,
                       nb::handle residual_out, nb::handle layer_input, nb::handle post_mix_out,
                       nb::handle comb_mix_out, nb::handle pre_mix_out, uintptr_t stream,
                       const mhc::Workspace* workspace, std::optional<std::string> variant, bool select_only) {
    Binder b("post_pre");
    mhc::PostPreArgs a;
    a.config = config;
    a.pre_source = parse_pre_source(pre_source, "post_pre");
    a.layer_output = b.in(layer_output, "layer_output");
    a.residual = b.in(residual, "residual");
    a.post_mix = b.in(post_mix, "post_mix");
    a.comb_mix = b.in(comb_mix, "comb_mix");
    a.weights = weights;
    a.pre_mix_in = b.in(pre_mix_in, "pre_mix_in");
    a.rmsnorm_weight = b.in(rmsnorm_weight, "rmsnorm_weight");
    a.residual_out = b.out(residual_out, "residual_out");
    a.layer_input = b.out(layer_input, "layer_input");
    a.post_mix_out = b.out(post_mix_out, "post_mix_out");
    a.comb_mix_out = b.out(comb_mix_out, "comb_mix_out");
    a.pre_mix_out = b.out(pre_mix_out, "pre_mix_out");
    a.exec = make_exec(stream, workspace, variant);
    return finish(a, select_only, [](const mhc::PostPreArgs& x) { mhc::post_pre(x); },
                  [](const mhc::PostPreArgs& x) { return mhc::selected_variant(x); });
  }, nb::kw_only(), "config"_a, "pre_source"_a, "layer_output"_a.none(), "residual"_a.none(), "post_mix"_a.none(),
     "comb_mix"_a.none(), "weights"_a.none(), "pre_mix_in"_a.none(), "rmsnorm_weight"_a.none(),
     "residual_out"_a.none(), "layer_input"_a.none(), "post_mix_out"_a.none(), "comb_mix_out"_a.none(),
     "pre_mix_out"_a.none(), "stream"_a = 0, "workspace"_a.none() = nb::none(), "variant"_a.none() = nb::none(),
     "select_only"_a = false);

  m.def("head", [](const mhc::Config& config, const std::string& kind, nb::handle residual,
                   const mhc::PreparedWeights* weights, nb::handle pre_mix_in, nb::handle rmsnorm_weight,
                   nb::handle output, uintptr_t stream, const mhc::Workspace* workspace,
                   std::optional<std::string> variant, bool select_only) {
    Binder b("head");
    mhc::HeadArgs a;
    a.config = config;
    a.kind = parse_head_kind(kind);
    a.residual = b.in(residual, "residual");
    a.weights = weights;
    a.pre_mix_in = b.in(pre_mix_in, "pre_mix_in");
    a.rmsnorm_weight = b.in(rmsnorm_weight, "rmsnorm_weight");
    a.output = b.out(output, "output");
    a.exec = make_exec(stream, workspace, variant);
    return finish(a, select_only, [](const mhc::HeadArgs& x) { mhc::head(x); },
                  [](const mhc::HeadArgs& x) { return mhc::selected_variant(x); });
  }, nb::kw_only(), "config"_a, "kind"_a, "residual"_a.none(), "weights"_a.none(), "pre_mix_in"_a.none(),
     "rmsnorm_weight"_a.none(), "output"_a.none(), "stream"_a = 0, "workspace"_a.none() = nb::none(),
     "variant"_a.none() = nb::none(), "select_only"_a = false);
}

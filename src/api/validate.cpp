// src/api/validate.cpp - shared argument checks (spec section 7).
#include "src/api/validate.hpp"

#include <cmath>

#include "mhc/error.hpp"
#include "src/core/prepared.hpp"
#include "src/registry/registry.hpp"

namespace mhc {

void validate_config(const Config& c) {
  MHC_CHECK(c.n >= 1 && c.n <= kMaxStreams, "config: n must be in 1..", kMaxStreams, ", got ", c.n);
  MHC_CHECK(c.H >= 1 && c.H <= kMaxHidden, "config: H must be in 1..", kMaxHidden, ", got ", c.H);
  MHC_CHECK(c.sinkhorn_iters >= 1 && c.sinkhorn_iters <= kMaxSinkhornIters, "config: sinkhorn_iters must be in 1..",
            kMaxSinkhornIters, ", got ", c.sinkhorn_iters);
  const struct { const char* name; float value; } eps[] = {
      {"norm_eps", c.norm_eps},       {"pre_eps", c.pre_eps},
      {"sinkhorn_eps", c.sinkhorn_eps}, {"rmsnorm_eps", c.rmsnorm_eps},
  };
  for (const auto& e : eps) {
    MHC_CHECK(std::isfinite(e.value) && e.value >= 0.0f, "config: ", e.name,
              " must be finite and >= 0, got ", e.value);
  }
  MHC_CHECK(std::isfinite(c.post_scale), "config: post_scale must be finite, got ", c.post_scale);
}

namespace detail {

namespace {
struct ByteRange {
  uintptr_t begin, end;
};
// The bytes a checked view (extents >= 0, strides positive where the extent exceeds 1) of
// `count` elements spans, from its first element to one past its last. False when that does not
// fit the address space.
bool byte_range(const TensorView& t, int64_t count, ByteRange* out) {
  const auto begin = reinterpret_cast<uintptr_t>(t.data);
  *out = {begin, begin};
  if (count == 0) return true;
  int64_t last = 0, term = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (!mul_fits(t.shape[d] - 1, t.strides[d], &term) || __builtin_add_overflow(last, term, &last)) return false;
  }
  int64_t bytes = 0;
  if (__builtin_add_overflow(last, int64_t{1}, &last) || !mul_fits(last, dtype_size(t.dtype), &bytes)) return false;
  uintptr_t end = 0;
  if (__builtin_add_overflow(begin, static_cast<uintptr_t>(bytes), &end)) return false;
  out->end = end;
  return true;
}
}  // namespace

Checker::Checker(Op op, const Config& config) : op_(op), op_name_(detail::op_name(op)), config_(config) {
  try {
    validate_config(config);
  } catch (const Error& e) {
    throw Error(std::string(op_name_) + ": " + e.message(), e.file(), e.line());
  }
}

void Checker::tensor(const TensorView& t, const char* name, DType dtype,
                     std::initializer_list<int64_t> shape) {
  MHC_CHECK(t.present(), op_name_, ": ", name, ": required tensor is absent");
  MHC_CHECK(t.rank == static_cast<int>(shape.size()), op_name_, ": ", name, ": expected rank ",
            shape.size(), ", got rank ", t.rank, " (shape ", shape_string(t), ")");
  int i = 0;
  for (int64_t s : shape) {
    MHC_CHECK(t.shape[i] == s, op_name_, ": ", name, ": expected dimension ", i, " to be ", s,
              ", got ", t.shape[i], " (shape ", shape_string(t), ")");
    ++i;
  }
  MHC_CHECK(t.dtype == dtype, op_name_, ": ", name, ": expected dtype ", dtype_name(dtype), ", got ",
            dtype_name(t.dtype));
  for (int d = 0; d < t.rank; ++d) {
    MHC_CHECK(t.shape[d] >= 0, op_name_, ": ", name, ": expected extents >= 0, got ", t.shape[d], " in dimension ",
              d, " (shape ", shape_string(t), ")");
  }
  MHC_CHECK(t.rank == 0 || t.shape[0] <= kMaxTokens, op_name_, ": ", name, ": expected at most ", kMaxTokens,
            " tokens (mhc::kMaxTokens), got ", t.shape[0]);
  int64_t count = 0;
  try {
    count = t.numel();
  } catch (const Error& e) {
    MHC_FAIL(op_name_, ": ", name, ": ", e.message());
  }
  if (!device_set_) {
    MHC_CHECK(t.device.type == DeviceType::kCPU || t.device.type == DeviceType::kCUDA, op_name_, ": ",
              name, ": unsupported device ", device_name(t.device));
    device_ = t.device;
    device_set_ = true;
  }
  MHC_CHECK(t.device == device_, op_name_, ": ", name, ": expected device ", device_name(device_),
            " (the device of the first tensor), got ", device_name(t.device));
  MHC_CHECK(t.data != nullptr || count == 0, op_name_, ": ", name, ": null data pointer for ",
            count, " elements");
  const auto esize = static_cast<uintptr_t>(dtype_size(dtype));
  // Element sizes are powers of two: a mask, not a 64-bit division (a division per tensor was a
  // quarter of this function's time on the CPU, session 10).
  MHC_CHECK((reinterpret_cast<uintptr_t>(t.data) & (esize - 1)) == 0, op_name_, ": ", name,
            ": data pointer is not ", esize, "-byte aligned");
  // inner dimensions contiguous
  int64_t expected = 1;
  for (int d = t.rank - 1; d >= 1; --d) {
    MHC_CHECK(t.shape[d] <= 1 || t.strides[d] == expected, op_name_, ": ", name,
              ": expected contiguous inner dimensions, dimension ", d, " has stride ", t.strides[d],
              " (expected ", expected, ")");
    expected *= t.shape[d];
  }
  if (t.rank == 1) {
    MHC_CHECK(t.shape[0] <= 1 || t.strides[0] == 1, op_name_, ": ", name,
              ": expected a contiguous tensor, got stride ", t.strides[0]);
  } else if (t.rank >= 2 && t.shape[0] > 1) {
    MHC_CHECK(t.strides[0] >= expected, op_name_, ": ", name, ": expected a row stride >= ", expected,
              " (the row length), got ", t.strides[0]);
  }
  ByteRange range{};
  MHC_CHECK(byte_range(t, count, &range), op_name_, ": ", name, ": shape ", shape_string(t), " with row stride ",
            t.strides[0], " spans more bytes than the address space holds");
  uint64_t row_bytes = 0, stride_bytes = 0;
  if (t.rank >= 2 && t.shape[0] > 1) {
    row_bytes = static_cast<uint64_t>(expected) * esize;
    stride_bytes = static_cast<uint64_t>(t.strides[0]) * esize;
  }
  MHC_CHECK(num_seen_ < kMaxSeen, op_name_, ": ", name, ": more than ", kMaxSeen,
            " tensors in one call (src/api/validate.hpp kMaxSeen)");
  seen_[num_seen_++] = {name, range.begin, range.end, false, row_bytes, stride_bytes};
}

void Checker::optional(const TensorView& t, const char* name, DType dtype,
                       std::initializer_list<int64_t> shape) {
  if (t.present()) tensor(t, name, dtype, shape);
}

void Checker::absent(const TensorView& t, const char* name, const char* why) {
  MHC_CHECK(!t.present(), op_name_, ": ", name, ": expected absent (", why, "), got a tensor of shape ",
            shape_string(t));
}

void Checker::weights(const PreparedWeights* w, const char* name, bool head) {
  MHC_CHECK(w != nullptr && w->valid(), op_name_, ": ", name,
            ": expected prepared weights (mhc::prepare), got none");
  MHC_CHECK(w->is_head() == head, op_name_, ": ", name, ": expected ",
            head ? "head weights (prepare_head)" : "mix-block weights (prepare)", ", got ",
            w->is_head() ? "head weights" : "mix-block weights");
  MHC_CHECK(w->n() == config_.n, op_name_, ": ", name, ": expected weights for n = ", config_.n,
            ", got n = ", w->n());
  MHC_CHECK(w->H() == config_.H, op_name_, ": ", name, ": expected weights for H = ", config_.H,
            ", got H = ", w->H());
  MHC_CHECK(w->device() == device_, op_name_, ": ", name, ": expected weights on ",
            device_name(device_), ", got weights prepared for ", device_name(w->device()));
}


void Checker::output(const TensorView& t, const char* name, DType dtype,
                     std::initializer_list<int64_t> shape) {
  tensor(t, name, dtype, shape);
  seen_[num_seen_ - 1].output = true;
}

void Checker::optional_output(const TensorView& t, const char* name, DType dtype,
                              std::initializer_list<int64_t> shape) {
  if (t.present()) output(t, name, dtype, shape);
}

void Checker::exec(const Exec& e) {
  const Seen* const end = seen_ + num_seen_;
  for (const Seen* po = seen_; po != end; ++po) {
    const Seen& out = *po;
    if (!out.output) continue;
    for (const Seen* pt = seen_; pt != end; ++pt) {
      const Seen& other = *pt;
      if (&other == &out || (other.output && &other < &out)) continue;  // each output pair once
      bool overlap = out.begin < other.end && other.begin < out.end;
      if (overlap && out.stride_bytes != 0 && out.stride_bytes == other.stride_bytes) {
        // Same row stride S: rows at a + iS and b + jS never meet when, with d = (b - a) mod S,
        // the first row fits before d and the second between d and S.
        const Seen& lo = out.begin <= other.begin ? out : other;
        const Seen& hi = &lo == &out ? other : out;
        const uint64_t d = (hi.begin - lo.begin) % out.stride_bytes;
        overlap = !(lo.row_bytes <= d && d + hi.row_bytes <= out.stride_bytes);
      }
      MHC_CHECK(!overlap, op_name_, ": ", out.name, ": expected an output that does not overlap ",
                other.output ? "output " : "input ", other.name);
    }
  }
  if (device_.type == DeviceType::kCUDA) {
    MHC_CHECK(e.workspace != nullptr && e.workspace->valid(), op_name_,
              ": exec.workspace: expected a workspace (mhc::Workspace::create) for a CUDA call, got none");
    MHC_CHECK(e.workspace->device() == device_, op_name_, ": exec.workspace: expected a workspace on ",
              device_name(device_), ", got one on ", device_name(e.workspace->device()));
    MHC_CHECK(config_.n <= e.workspace->max_n(), op_name_, ": exec.workspace: made for n <= ",
              e.workspace->max_n(), " (WorkspaceOptions::max_n), got a call with n = ", config_.n);
    // A workspace bound to a stream serves that stream only (one workspace per stream).
    MHC_CHECK(!e.workspace->bound() || e.workspace->stream() == e.stream, op_name_,
              ": exec.workspace: bound to stream ", e.workspace->stream(), " (WorkspaceOptions::bind_stream), got a call on stream ",
              e.stream, ": create one workspace per stream");
  }
}

Problem Checker::problem(int64_t T, const Exec& e) const {
  Problem p;
  p.op = op_;
  p.device = device_;
  p.T = T;
  p.n = config_.n;
  p.H = config_.H;
  p.norm_eps = config_.norm_eps;
  p.pre_eps = config_.pre_eps;
  p.sinkhorn_eps = config_.sinkhorn_eps;
  p.sinkhorn_iters = config_.sinkhorn_iters;
  p.post_scale = config_.post_scale;
  p.rmsnorm_eps = config_.rmsnorm_eps;
  p.stream = e.stream;
  p.workspace = e.workspace != nullptr && e.workspace->valid() ? &e.workspace->impl() : nullptr;
  return p;
}

int64_t row_stride(const TensorView& t) {
  if (!t.present() || t.rank == 0) return 0;
  if (t.shape[0] <= 1) {  // any stride is legal for a single row; use the row length
    int64_t inner = 1;
    for (int d = 1; d < t.rank; ++d) inner *= t.shape[d];
    return inner;
  }
  return t.strides[0];
}

void lower_pre_stage(Checker& c, const PreStage& s, int64_t T, Problem& p) {
  const int64_t n = p.n, H = p.H;
  c.weights(s.weights, "weights", false);
  if (s.pre_source == PreSource::kCarried) {
    c.tensor(*s.pre_mix_in, "pre_mix_in", DType::kFloat32, {T, n});
  } else {
    c.absent(*s.pre_mix_in, "pre_mix_in",
             s.pre_source == PreSource::kComputed ? "pre_source is computed; pass pre_source=carried to use it"
                                                  : "pre_source is identity");
  }
  c.optional(*s.rmsnorm_weight, "rmsnorm_weight", DType::kBFloat16, {H});
  c.output(*s.layer_input, "layer_input", DType::kBFloat16, {T, H});
  c.output(*s.post_mix, s.post_mix_name, DType::kFloat32, {T, n});
  c.output(*s.comb_mix, s.comb_mix_name, DType::kFloat32, {T, n, n});
  c.optional_output(*s.pre_mix_out, "pre_mix_out", DType::kFloat32, {T, n});

  p.pre_source = s.pre_source;
  p.weights = &s.weights->impl();
  if (s.pre_source == PreSource::kCarried) bind(*s.pre_mix_in, p.pre_mix_in, p.pre_mix_in_stride);
  p.rmsnorm_weight = ptr<const bf16_t>(*s.rmsnorm_weight);
  bind(*s.layer_input, p.layer_input, p.layer_input_stride);
  bind(*s.post_mix, p.post_mix_out, p.post_mix_out_stride);
  bind(*s.comb_mix, p.comb_mix_out, p.comb_mix_out_stride);
  bind(*s.pre_mix_out, p.pre_mix_out, p.pre_mix_out_stride);
}

void execute(const Problem& p, const char* forced_variant) {
  const Variant& v = select_variant(p, forced_variant);
  if (p.T == 0) return;
  v.run(p);
}

std::string select_id(const Problem& p, const char* forced_variant) {
  return select_variant(p, forced_variant).id;
}

}  // namespace detail
}  // namespace mhc

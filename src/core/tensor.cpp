// src/core/tensor.cpp - TensorView helpers.
#include "mhc/tensor.hpp"

#include <sstream>

#include "mhc/error.hpp"

namespace mhc {

int dtype_size(DType t) {
  switch (t) {
    case DType::kBFloat16:
    case DType::kFloat16: return 2;
    case DType::kFloat32:
    case DType::kInt32: return 4;
    case DType::kFloat64:
    case DType::kInt64: return 8;
    case DType::kUInt8: return 1;
  }
  return 1;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kBFloat16: return "bf16";
    case DType::kFloat16: return "fp16";
    case DType::kFloat32: return "fp32";
    case DType::kFloat64: return "fp64";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt8: return "uint8";
  }
  return "?";
}

std::string device_name(Device d) {
  if (d.type == DeviceType::kCPU) return "cpu";
  if (d.type == DeviceType::kCUDA) return "cuda:" + std::to_string(d.id);
  return "device(" + std::to_string(static_cast<int>(d.type)) + ")";
}

int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t out = 0;
  MHC_CHECK(mul_fits(a, b, &out), what, ": ", a, " * ", b, " overflows int64");
  return out;
}

int64_t TensorView::numel() const {
  if (rank < 0) return 0;
  int64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    MHC_CHECK(shape[i] >= 0, "tensor of shape ", shape_string(*this), ": negative extent in dimension ", i);
  }
  for (int i = 0; i < rank; ++i) {
    MHC_CHECK(mul_fits(count, shape[i], &count), "tensor of shape ", shape_string(*this),
              ": the element count overflows int64");
  }
  return count;
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device) {
  MHC_CHECK(static_cast<int>(shape.size()) <= kMaxRank, "make_view: rank ", shape.size(),
            " exceeds ", kMaxRank);
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = static_cast<int32_t>(shape.size());
  int i = 0;
  for (int64_t s : shape) {
    MHC_CHECK(s >= 0, "make_view: negative extent ", s, " in dimension ", i);
    t.shape[i++] = s;
  }
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.strides[d] = stride;
    MHC_CHECK(mul_fits(stride, t.shape[d], &stride), "make_view: shape ", shape_string(t),
              ": the strides overflow int64");
  }
  return t;
}

std::string shape_string(const TensorView& t) {
  if (!t.present()) return "absent";
  std::ostringstream os;
  os << "[";
  for (int i = 0; i < t.rank; ++i) os << (i ? ", " : "") << t.shape[i];
  os << "]";
  return os.str();
}

}  // namespace mhc

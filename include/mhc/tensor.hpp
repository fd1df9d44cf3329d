// mhc/tensor.hpp - a non-owning, DLPack-shaped view of a tensor.
//
// The library never allocates or copies caller tensors: operators read and write through
// these views. Strides are in elements (as in DLPack), 64-bit.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

namespace mhc {

/// @brief Element types a view can describe (the operators accept only kBFloat16 and kFloat32;
/// the others exist so that a wrong dtype can be named in an error).
enum class DType : uint8_t { kBFloat16, kFloat16, kFloat32, kFloat64, kInt32, kInt64, kUInt8 };

/// @brief Device kinds, numbered as in DLPack (kDLCPU = 1, kDLCUDA = 2).
enum class DeviceType : int32_t { kCPU = 1, kCUDA = 2 };

/// @brief A device: type plus ordinal.
struct Device {
  DeviceType type = DeviceType::kCPU;  ///< kCPU or kCUDA
  int32_t id = 0;                      ///< device ordinal (0 for the CPU)
  bool operator==(const Device& o) const { return type == o.type && id == o.id; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

/// @brief Size in bytes of one element of `t`.
int dtype_size(DType t);
/// @brief Name of a dtype as used in error messages ("bf16", "fp32", ...).
const char* dtype_name(DType t);
/// @brief "cpu" or "cuda:N".
std::string device_name(Device d);

/// @brief a*b into *out; false when the product does not fit in int64. The one checked multiply
/// used wherever sizes multiply (numel, byte ranges, make_view, prepare, the command line).
inline bool mul_fits(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }
/// @brief a*b; throws mhc::Error "<what>: a * b overflows int64" when it does not fit.
int64_t checked_mul(int64_t a, int64_t b, const char* what);

/// @brief Largest rank a view can have.
constexpr int kMaxRank = 4;

/// @brief Non-owning tensor view (data pointer, dtype, device, shape, strides in elements).
///
/// A default-constructed view is "absent" (rank -1): optional operator arguments are left
/// absent to mean "not given".
struct TensorView {
  void* data = nullptr;            ///< first element; may be null only when numel() == 0
  DType dtype = DType::kFloat32;   ///< element type
  Device device{};                 ///< where `data` lives
  int32_t rank = -1;               ///< number of dimensions; -1 means absent
  int64_t shape[kMaxRank] = {};    ///< extent of each dimension
  int64_t strides[kMaxRank] = {};  ///< stride of each dimension, in elements

  /// @brief True when the view was given (rank >= 0).
  bool present() const { return rank >= 0; }
  /// @brief Product of the extents (1 for rank 0, 0 when absent). Throws mhc::Error when an
  /// extent is negative or the product overflows int64.
  int64_t numel() const;
  /// @brief True when the strides are the row-major strides of the shape.
  bool is_contiguous() const;
};

/// @brief A contiguous (row-major) view of `data` with the given shape. Throws mhc::Error for a
/// negative extent or when the strides overflow int64.
TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> shape,
                     Device device = Device{});
/// @brief Same, with a pointer to const (the view itself is untyped).
inline TensorView make_view(const void* data, DType dtype, std::initializer_list<int64_t> shape,
                            Device device = Device{}) {
  return make_view(const_cast<void*>(data), dtype, shape, device);
}

/// @brief Human-readable "[a, b, c]" of a view's shape.
std::string shape_string(const TensorView& t);

}  // namespace mhc

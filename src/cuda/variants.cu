// src/cuda/variants.cu - the CUDA variant list, in priority order: the first row whose
// supports() accepts a problem runs it. Ids are "<op>.<variant>".
#include "src/cuda/variants.hpp"

namespace mhc::detail {

std::vector<Variant> cuda_variants() {
  using namespace mhc::cuda;
  constexpr const char* kGeneric = "CUDA tensors, any n in 1..8, any H >= 1, strided rows";
  constexpr const char* kN4 =
      "CUDA, n = 4, H % 512 == 0, H <= 16384, 16-byte aligned bf16 rows (tensor-core mixes)";
  return {
      {"mixes.cuda_n4", Op::kMixes, DeviceType::kCUDA, kN4, n4_supports, n4_run},
      {"collapse.cuda_n4", Op::kCollapse, DeviceType::kCUDA, kN4, n4_supports, n4_run},
      {"pre.cuda_n4", Op::kPre, DeviceType::kCUDA, kN4, n4_supports, n4_run},
      {"pre_broadcast.cuda_n4", Op::kPreBroadcast, DeviceType::kCUDA, kN4, n4_supports, n4_run},
      {"post.cuda_n4", Op::kPost, DeviceType::kCUDA, kN4, n4_supports, n4_run},
      {"post_pre.cuda_n4", Op::kPostPre, DeviceType::kCUDA, kN4, n4_supports, n4_run},
      {"head.cuda_n4", Op::kHead, DeviceType::kCUDA, kN4, n4_supports, n4_run},
      {"mixes.cuda_generic", Op::kMixes, DeviceType::kCUDA, kGeneric, generic_supports, generic_run},
      {"collapse.cuda_generic", Op::kCollapse, DeviceType::kCUDA, kGeneric, generic_supports, generic_run},
      {"pre.cuda_generic", Op::kPre, DeviceType::kCUDA, kGeneric, generic_supports, generic_run},
      {"pre_broadcast.cuda_generic", Op::kPreBroadcast, DeviceType::kCUDA, kGeneric, generic_supports, generic_run},
      {"post.cuda_generic", Op::kPost, DeviceType::kCUDA, kGeneric, generic_supports, generic_run},
      {"post_pre.cuda_generic", Op::kPostPre, DeviceType::kCUDA, kGeneric, generic_supports, generic_run},
      {"head.cuda_generic", Op::kHead, DeviceType::kCUDA, kGeneric, generic_supports, generic_run},
  };
}

}  // namespace mhc::detail

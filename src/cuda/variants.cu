// src/cuda/variants.cu - the CUDA variant list, in priority order: the first row whose
// supports() accepts a problem runs it. Ids are "<op>.<variant>".
#include "src/cuda/variants.hpp"

namespace mhc::detail {

std::vector<Variant> cuda_variants() {
  using namespace mhc::cuda;
  constexpr const char* kGeneric = "CUDA tensors, any n in 1..8, any H >= 1, strided rows";
  return {
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

// src/cuda/variants.cu - the CUDA variant list.
#include "src/cuda/variants.hpp"

namespace mhc::detail {

std::vector<Variant> cuda_variants() { return {}; }

}  // namespace mhc::detail

// mhc/mhc.hpp - umbrella header of the mhc library.
#pragma once

#include "mhc/config.hpp"
#include "mhc/error.hpp"
#include "mhc/ops.hpp"
#include "mhc/tensor.hpp"
#include "mhc/weights.hpp"

namespace mhc {

/// @brief The library's version, "major.minor.patch" (the CMake project version).
const char* version();

}  // namespace mhc

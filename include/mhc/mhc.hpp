// mhc/mhc.hpp - umbrella header of the mhc library.
#pragma once

#include "mhc/config.hpp"
#include "mhc/error.hpp"
#include "mhc/ops.hpp"
#include "mhc/tensor.hpp"
#include "mhc/weights.hpp"

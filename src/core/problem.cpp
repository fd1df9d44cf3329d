// src/core/problem.cpp - names of the operators, as in variant ids and error messages.
#include "src/core/problem.hpp"

namespace mhc::detail {

const char* op_name(Op op) {
  switch (op) {
    case Op::kMixes: return "mixes";
    case Op::kCollapse: return "collapse";
    case Op::kPre: return "pre";
    case Op::kPreBroadcast: return "pre_broadcast";
    case Op::kPost: return "post";
    case Op::kPostPre: return "post_pre";
    case Op::kHead: return "head";
  }
  return "?";
}

}  // namespace mhc::detail

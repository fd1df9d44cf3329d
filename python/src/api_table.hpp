// python/src/api_table.hpp - the function table through which the torch extension
// (mhc_torch.cpp, loaded by torch.ops.load_library) calls the library inside the nanobind
// extension mhc._mhc, so that one process has one copy of the library: one kernel registration
// (what warmup loads is what the torch operators launch), one workspace registry.
//
// Every entry catches the library's exceptions and returns their text (null: success), so no
// exception crosses the shared-object boundary. Plain C++ types of include/mhc only; the table's
// size and version are checked by the torch extension before use.
#pragma once

#include <cstdint>

#include "mhc/mhc.hpp"

namespace mhc::pyext {

constexpr uint32_t kApiVersion = 2;

struct ApiTable {
  uint32_t version;
  uint32_t size;  // sizeof(ApiTable) of the nanobind extension
  const char* (*mixes)(const MixesArgs&);
  const char* (*collapse)(const CollapseArgs&);
  const char* (*pre)(const PreArgs&);
  const char* (*pre_broadcast)(const PreBroadcastArgs&);
  const char* (*post)(const PostArgs&);
  const char* (*post_pre)(const PostPreArgs&);
  const char* (*head)(const HeadArgs&);
  /// Weights over a prepared buffer (attach_prepared), into *out.
  const char* (*attach)(const TensorView& buffer, int32_t n, int64_t H, bool head, PreparedWeights* out);
  /// The workspace registered for (CUDA device, stream), else the device's default, copied into
  /// *out (a handle: the caller holds it for the call); false: none.
  bool (*workspace_for)(int32_t device, void* stream, Workspace* out);
};

}  // namespace mhc::pyext

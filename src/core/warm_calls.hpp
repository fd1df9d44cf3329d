// src/core/warm_calls.hpp - one call of every operator on a small problem, made by
// Workspace::create (with WorkspaceOptions::warmup) on a CUDA device.
#pragma once

#include "mhc/weights.hpp"

namespace mhc::detail {

/// Runs each operator once (n = 4, H = 512, T = 1, every output given, the RMSNorm folded;
/// post_pre and head in each of their modes) on zeroed device memory, on the workspace's stream
/// (its bound stream, else the legacy default stream), and waits for them. The first call of an
/// operator in a process pays one-time host work in the driver and the runtime (tens of us);
/// here it is paid before the caller's first call. Nothing is done where the workspace cannot
/// take such a call (max_tokens = 0, max_n < 4) or for a CPU workspace.
void warm_calls(Workspace& ws);

}  // namespace mhc::detail

// tools/decode_step.hpp - the whole-model decode-step figure (`mhc run --graph-step`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/model.hpp"

namespace mhc::tools {

/// One row: the mHC path of one decode step of `T` tokens, timed as one CUDA graph.
struct DecodeStepRow {
  int64_t T = 0;
  int64_t ops = 0;           // operator calls in the step (pre_broadcast, post_pre..., post, head)
  int64_t graph_nodes = 0;   // kernels captured
  double step_us = 0, p10_us = 0, p90_us = 0;  // median and spread over replays
  std::string boundary_variant;                // what post_pre ran (the dispatcher's pick, or forced)
  std::string forced;                          // the ops whose variant `family` forced, comma-separated
};

/// Builds the step for `model` (every boundary its own prepared weights), captures it in one
/// graph per T and replays it `replays` times. `family` (may be empty): each op of the step that
/// has a variant <op>.family runs it, the others the dispatcher's choice; an error if none has.
/// CUDA builds only.
std::vector<DecodeStepRow> time_decode_step(const HostModel& model, const std::vector<int64_t>& tokens, int replays,
                                            const std::string& family);

}  // namespace mhc::tools

// tools/checkpoint_model.hpp - a HostModel from a real checkpoint, and a writer of small
// example checkpoints (for docs, demos and by-hand tests of `mhc inspect` / `mhc run`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mhc/checkpoint.hpp"
#include "tools/model.hpp"

namespace mhc::tools {

/// A model loaded from a checkpoint, plus where it came from.
struct CheckpointModel {
  HostModel model;                                ///< layers capped by max_layers
  ModelConfig config;                             ///< config.json as mapped (num_layers: the checkpoint's)
  NamingScheme scheme = NamingScheme::kDeepSeek;  ///< detected naming scheme
  std::vector<std::string> files;                 ///< safetensors files of the checkpoint
  int32_t mtp_blocks = 0;                         ///< MTP blocks found (not used by run_model)
};

/// Reads config.json and the mHC tensors of the checkpoint at `path` (a directory, an index
/// .json or a .safetensors file; config.json is looked for in its directory).
/// @param force_preset  preset whose mode and head are used regardless of model_type ("": map it)
/// @param max_layers    load only the first max_layers layers (-1: all)
CheckpointModel load_checkpoint_model(const std::string& path, const std::string& force_preset = "",
                                      int32_t max_layers = -1);

/// How write_checkpoint lays the model out.
struct WriteOptions {
  NamingScheme scheme = NamingScheme::kDeepSeek;  ///< tensor names
  int32_t shards = 1;                             ///< 1: model.safetensors; more: an index and shards
  std::string fn_dtype = "F32";                   ///< storage of fn/scale/base: F32 or BF16 (rounded)
  std::string norm_dtype = "BF16";                ///< storage of the RMSNorm weights: BF16 or F32
  int32_t mtp = 0;                                ///< MTP blocks to add (copies of layer i mod layers)
};

/// Writes `model` as config.json plus safetensors into directory `dir` (created if needed),
/// with one non-mHC tensor (embed.weight, [8, H] bf16) that readers must skip. model_type is
/// deepseek_v4 (normal, learned), deepseek_v4_1 (shifted, carried) or glm5_next (normal, mean).
void write_checkpoint(const std::string& dir, const HostModel& model, const WriteOptions& options);

}  // namespace mhc::tools

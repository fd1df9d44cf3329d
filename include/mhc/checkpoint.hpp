// mhc/checkpoint.hpp - reading the mHC tensors of a model checkpoint (config.json + safetensors).
//
// A checkpoint is a directory with config.json and either one model.safetensors or a
// model.safetensors.index.json naming the shards. Files are memory-mapped; only the mHC
// tensors (mix weights, the sublayer and final RMSNorm weights, the learned head, and the
// MTP blocks' own copies) are ever read. Two naming schemes are understood: DeepSeek's own
// (`layers.0.hc_attn_fn`) and Hugging Face transformers' (`model.layers.0.attn_hc.fn`); the
// one mapping table is in src/io/checkpoint.cpp and docs/checkpoints.md.
//
// Damaged input fails closed: every problem throws mhc::Error naming the file and, where one
// is involved, the tensor. Nothing here touches a GPU; the result is host memory in the dtypes
// the API wants (fp32 mix weights, bf16 RMSNorm weights), ready for mhc::prepare().
//
// A Checkpoint opens shards lazily from const methods and is not safe to share between
// threads without a lock.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mhc/config.hpp"

namespace mhc {

/// @brief The mHC part of a model's config.json, mapped onto the library's Config.
///
/// model_type mapping: `deepseek_v4` -> normal mode, learned head; `deepseek_v4_1` (or
/// `deepseek_v41`, or any deepseek_v4* type with `"hc_shifted": true`) -> shifted mode,
/// carried head; `glm5_next` and every other `glm*` type -> normal mode, mean head.
/// Anything else is refused unless a preset is forced.
struct ModelConfig {
  Config config;                       ///< n = hc_mult, H = hidden_size, eps = hc_eps / rms_norm_eps
  int32_t num_layers = 0;              ///< num_hidden_layers
  Mode mode = Mode::kNormal;           ///< from model_type, or the forced preset
  HeadKind head = HeadKind::kLearned;  ///< from model_type, or the forced preset
  int32_t mtp_layers = 0;              ///< num_nextn_predict_layers (0 when absent)
  std::string model_type;              ///< config.json's model_type ("" when absent)
  std::string family;                  ///< preset that supplied mode, head and missing scalars
  bool forced = false;                 ///< true when `family` was forced by the caller (--model)
  std::vector<std::string> defaulted;  ///< config.json keys that were absent (value from `family`)
  std::string source;                  ///< the config.json path or label it was parsed from
};

/// @brief Parses config.json text. `source` names the file in error messages.
/// @param force_preset a preset name (model_presets()) whose mode and head replace the
///        model_type mapping; "" to map model_type (unknown types then fail).
/// @throws mhc::Error on invalid JSON, a missing or mistyped key, an out-of-range value or an
///         unknown model_type.
ModelConfig parse_model_config(const std::string& json_text, const std::string& source,
                               const std::string& force_preset = "");

/// @brief Reads `path`/config.json (or `path` itself when it names a .json file).
ModelConfig read_model_config(const std::string& path, const std::string& force_preset = "");

/// @brief Tensor naming convention of a checkpoint.
enum class NamingScheme : uint8_t {
  kDeepSeek,     ///< DeepSeek's release: layers.{i}.hc_attn_fn, hc_head_fn, norm.weight, mtp.{i}.*
  kHuggingFace,  ///< transformers: model.layers.{i}.attn_hc.fn, model.hc_head.fn, model.norm.weight
};
/// @brief "deepseek" or "hf".
const char* to_string(NamingScheme s);

/// @brief What an mHC tensor is for.
enum class TensorRole : uint8_t {
  kAttnFn, kAttnScale, kAttnBase,  ///< attention boundary mix weights: fn [M,K], scale [3], base [M]
  kFfnFn, kFfnScale, kFfnBase,     ///< FFN boundary mix weights
  kAttnNorm, kFfnNorm,             ///< sublayer RMSNorm weights [H]
  kHeadFn, kHeadScale, kHeadBase,  ///< learned head: fn [n,K], scale [1], base [n]
  kFinalNorm,                      ///< final RMSNorm weight [H]
};
/// @brief Short label of a role, e.g. "attn fn", "final norm".
const char* to_string(TensorRole r);

/// @brief Where a tensor lives: a main layer, the top level (head, final norm), an MTP block.
enum class TensorScope : uint8_t { kLayer, kTop, kMtp };

/// @brief The checkpoint name of a tensor, e.g. (kDeepSeek, kLayer, 3, kFfnBase) ->
/// "layers.3.hc_ffn_base". Layer scope accepts only layer roles, top scope only head and final
/// norm roles, MTP scope every role.
std::string tensor_name(NamingScheme scheme, TensorScope scope, int32_t index, TensorRole role);

/// @brief One tensor of a safetensors header.
struct TensorInfo {
  std::string name;            ///< tensor name
  std::string file;            ///< path of the safetensors file that holds it
  std::string dtype;           ///< safetensors dtype string: "F32", "BF16", "F16", ...
  std::vector<int64_t> shape;  ///< extents
  uint64_t nbytes = 0;         ///< size of its data
};

/// @brief A memory-mapped safetensors checkpoint, single file or sharded.
class Checkpoint {
 public:
  struct Impl;

  /// @brief Opens a directory (model.safetensors.index.json preferred over model.safetensors),
  /// an index .json file or a single .safetensors file. A single file is mapped and its header
  /// validated now; for a sharded checkpoint every shard named in the index must exist now, and
  /// each is mapped and validated the first time one of its tensors is asked for.
  /// @throws mhc::Error naming the file (and the tensor) on any damage
  static Checkpoint open(const std::string& path);

  /// @brief Directory holding the checkpoint (where config.json is looked for).
  const std::string& directory() const;
  /// @brief Path of the index file; "" for a single-file checkpoint.
  const std::string& index_file() const;
  /// @brief Paths of the safetensors files, in index order.
  const std::vector<std::string>& files() const;
  /// @brief Every tensor name (index keys, or the single file's header), sorted.
  const std::vector<std::string>& tensor_names() const;
  /// @brief True when the checkpoint lists `name` (the shard is not opened).
  bool contains(const std::string& name) const;
  /// @brief Header entry of `name`; opens its shard if needed.
  /// @throws mhc::Error when the tensor is missing or its shard is damaged or disagrees with
  ///         the index
  TensorInfo info(const std::string& name) const;
  /// @brief The tensor as fp32 (stored F32 copied, BF16/F16 widened exactly).
  /// @throws mhc::Error (naming file and tensor) on another dtype or a shape other than `shape`
  std::vector<float> read_f32(const std::string& name, const std::vector<int64_t>& shape) const;
  /// @brief The tensor as bf16 bits (stored BF16 copied, F32/F16 rounded to nearest even).
  /// @throws mhc::Error (naming file and tensor) on another dtype or a shape other than `shape`
  std::vector<uint16_t> read_bf16(const std::string& name, const std::vector<int64_t>& shape) const;
  /// @brief The naming scheme, from which spelling of layer 0's attention fn is present.
  /// @throws mhc::Error when neither or both are present
  NamingScheme scheme() const;
  /// @brief Indices i of the MTP blocks that have any mHC tensor, sorted.
  std::vector<int32_t> mtp_indices(NamingScheme scheme) const;

 private:
  std::shared_ptr<Impl> impl_;
};

/// @brief One expected mHC tensor and what the checkpoint has under its name.
struct TensorCheck {
  std::string group;                    ///< "layer 3", "top", "mtp 0"
  TensorRole role = TensorRole::kAttnFn;  ///< what it is for
  std::string name;                     ///< checkpoint name
  bool required = true;                 ///< false: not needed by the model (listed because present,
                                        ///< or because the rest of its fn/scale/base trio is)
  std::vector<int64_t> expected_shape;  ///< from the config
  bool present = false;                 ///< the checkpoint has it
  TensorInfo info;                      ///< header entry (when present)
  std::string problem;                  ///< empty when it checks out; else the reason
};

/// @brief Result of checking a checkpoint against its config.
struct CheckpointReport {
  NamingScheme scheme = NamingScheme::kDeepSeek;  ///< detected naming scheme
  int32_t layers_checked = 0;                    ///< main layers covered by `tensors`
  std::vector<int32_t> mtp;                      ///< MTP block indices found
  std::vector<TensorCheck> tensors;              ///< every expected or optional-present tensor
  std::vector<std::string> notes;                ///< observations that are not problems
  /// @brief Number of tensors with a problem.
  int problems() const;
};

/// @brief Checks names, dtypes and shapes of the mHC tensors against `config` (n, H, M, K).
/// Reads headers only. Missing or mismatching tensors are reported, not thrown; file damage
/// throws. `max_layers` >= 0 limits the main layers checked.
CheckpointReport check_checkpoint(const Checkpoint& ckpt, const ModelConfig& config,
                                  int32_t max_layers = -1);

/// @brief Host copies of one mix block (fn [rows,K], scale [3] or [1], base [rows]), fp32.
struct BlockWeights {
  std::vector<float> fn;     ///< [rows, K]
  std::vector<float> scale;  ///< [3] (head: [1])
  std::vector<float> base;   ///< [rows]
};

/// @brief The mHC tensors of one transformer layer.
struct LayerWeights {
  BlockWeights attn;                ///< attention boundary
  BlockWeights ffn;                 ///< FFN boundary
  std::vector<uint16_t> attn_norm;  ///< [H] bf16
  std::vector<uint16_t> ffn_norm;   ///< [H] bf16
};

/// @brief An MTP block's own copies (head and norm are empty when the checkpoint lacks them).
struct MtpWeights {
  int32_t index = 0;           ///< i of mtp.{i}
  LayerWeights layer;          ///< its transformer layer
  BlockWeights head;           ///< its learned head (empty when absent)
  std::vector<uint16_t> norm;  ///< its final norm [H] bf16 (empty when absent)
};

/// @brief Everything mhc needs of a model, in host memory.
struct ModelWeights {
  ModelConfig config;                             ///< as read (num_layers is the checkpoint's)
  NamingScheme scheme = NamingScheme::kDeepSeek;  ///< detected naming scheme
  std::vector<LayerWeights> layers;               ///< loaded layers (at most max_layers)
  BlockWeights head;                              ///< learned head (empty for carried/mean heads)
  std::vector<uint16_t> final_norm;               ///< [H] bf16
  std::vector<MtpWeights> mtp;                    ///< MTP blocks present (when loaded)
};

/// @brief Options of load_model_weights().
struct LoadOptions {
  int32_t max_layers = -1;  ///< load only the first max_layers layers; -1: all
  bool mtp = true;          ///< also load the MTP blocks that are present
};

/// @brief Checks (check_checkpoint) and loads the mHC tensors.
/// @throws mhc::Error with the first problem (file and tensor named)
ModelWeights load_model_weights(const Checkpoint& ckpt, const ModelConfig& config,
                                const LoadOptions& options = LoadOptions{});

}  // namespace mhc

// mhc/config.hpp - the scalars of an mHC block and the shipped model presets.
//
// Vocabulary (spec section 2): n streams, H hidden size, K = n*H, M = (n+2)*n mixes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mhc {

// The limits of every input (docs/spec.md section 7 states the same numbers). Each is checked
// where the value enters: the operators' validation, prepare(), config.json, the safetensors
// header, the index and the command line.

/// @brief Largest supported stream count n.
constexpr int kMaxStreams = 8;
/// @brief Largest hidden size H (so K = n*H <= 2^23 and every per-token size fits easily).
constexpr int64_t kMaxHidden = int64_t{1} << 20;
/// @brief Largest token count T of one call (tensor byte sizes are also checked for overflow).
constexpr int64_t kMaxTokens = int64_t{1} << 40;
/// @brief Largest sinkhorn_iters (the same cap as config.json's hc_sinkhorn_iters).
constexpr int32_t kMaxSinkhornIters = 1 << 20;
/// @brief Largest num_hidden_layers of a config.json, and of `mhc run --layers`.
constexpr int32_t kMaxLayers = 1024;
/// @brief Largest num_nextn_predict_layers of a config.json.
constexpr int32_t kMaxMtpLayers = 1024;
/// @brief Deepest nesting of arrays and objects in any JSON input (header, config, index).
constexpr int kMaxJsonDepth = 64;
/// @brief Largest WorkspaceOptions::decode_max_tokens (the one-launch decode kernel's T limit).
constexpr int64_t kMaxDecodeTokens = 128;
/// @brief Largest safetensors header (the safetensors reference implementation's bound).
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
/// @brief Largest config.json or model.safetensors.index.json read.
constexpr uint64_t kMaxJsonFileBytes = uint64_t{100} << 20;

/// @brief Every scalar of an mHC block. Named fields only: never pass these positionally.
struct Config {
  int32_t n = 4;                 ///< streams (hc_mult), 1..kMaxStreams
  int64_t H = 4096;              ///< hidden size, 1..kMaxHidden
  float norm_eps = 1e-6f;        ///< eps inside the stream RMS used for the mixes (rms_norm_eps)
  float pre_eps = 1e-6f;         ///< added after the pre sigmoid (hc_eps)
  float sinkhorn_eps = 1e-6f;    ///< Sinkhorn eps (hc_eps)
  int32_t sinkhorn_iters = 20;   ///< Sinkhorn iterations (hc_sinkhorn_iters), 1..kMaxSinkhornIters
  float post_scale = 2.0f;       ///< post = post_scale * sigmoid(..)
  float rmsnorm_eps = 1e-6f;     ///< eps of the folded sublayer RMSNorm

  /// @brief K = n*H, the flattened stream width.
  int64_t K() const { return static_cast<int64_t>(n) * H; }
  /// @brief M = (n+2)*n, mixes per token (24 for n = 4).
  int32_t M() const { return (n + 2) * n; }
};

/// @brief Where a sublayer's collapse weights come from (spec section 4, op 2).
enum class PreSource {
  kComputed,  ///< the fresh pre of the same residual (normal mode: V4, GLM-5-Next)
  kCarried,   ///< a pre_mix passed in (shifted mode: V4.1)
  kIdentity,  ///< select stream 0 bit for bit, no arithmetic (V4.1 first layer)
};

/// @brief Forward mode of a model (spec section 5).
enum class Mode {
  kNormal,   ///< collapse with the fresh pre (PreSource::kComputed)
  kShifted,  ///< collapse with the previous sublayer's pre (PreSource::kCarried)
};

/// @brief How the final collapse after the last layer is weighted (spec section 4, op 7).
enum class HeadKind {
  kLearned,  ///< own weights fn_head [n,K], scale_head [1], base_head [n] (V4)
  kCarried,  ///< the last FFN boundary's pre (V4.1)
  kMean,     ///< bf16(mean over streams) (GLM-5-Next)
};

/// @brief A shipped model: its scalars, layer count, mode and head.
struct ModelPreset {
  std::string name;       ///< e.g. "deepseek-v4-flash"
  Config config;          ///< every scalar of spec section 2
  int32_t num_layers;     ///< transformer layers (2 boundaries each)
  Mode mode;              ///< normal or shifted forward
  HeadKind head;          ///< head kind
};

/// @brief All presets: deepseek-v4-flash, deepseek-v4-pro, deepseek-v4.1-flash, glm-5-next.
const std::vector<ModelPreset>& model_presets();
/// @brief The preset with this name; throws mhc::Error listing the known names otherwise.
const ModelPreset& model_preset(const std::string& name);

const char* to_string(PreSource s);
const char* to_string(Mode m);
const char* to_string(HeadKind h);

}  // namespace mhc

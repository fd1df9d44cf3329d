// src/io/model_config.cpp - config.json -> mhc::ModelConfig (the model_type mapping lives here).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mhc/checkpoint.hpp"
#include "mhc/error.hpp"
#include "mhc/ops.hpp"
#include "src/io/json_input.hpp"

namespace mhc {

namespace {

using nlohmann::json;

// How a model_type maps onto mode, head and the preset that supplies missing scalars.
struct TypeMapping {
  const char* family;  // preset name
  Mode mode;
  HeadKind head;
};

// The one model_type table (docs/checkpoints.md repeats it).
//   deepseek_v4                  -> normal, learned head   (defaults: deepseek-v4-flash)
//   deepseek_v4_1, deepseek_v41  -> shifted, carried head  (defaults: deepseek-v4.1-flash)
//   glm5_next, glm*              -> normal, mean head      (defaults: glm-5-next)
// "hc_shifted": true|false in config.json selects between the two DeepSeek rows for any
// deepseek_v4* type; it is refused on other types.
bool map_model_type(const std::string& type, bool* is_deepseek, TypeMapping* out) {
  static const TypeMapping kV4{"deepseek-v4-flash", Mode::kNormal, HeadKind::kLearned};
  static const TypeMapping kV41{"deepseek-v4.1-flash", Mode::kShifted, HeadKind::kCarried};
  static const TypeMapping kGlm{"glm-5-next", Mode::kNormal, HeadKind::kMean};
  *is_deepseek = false;
  if (type == "deepseek_v4") {
    *is_deepseek = true;
    *out = kV4;
    return true;
  }
  if (type == "deepseek_v4_1" || type == "deepseek_v41") {
    *is_deepseek = true;
    *out = kV41;
    return true;
  }
  if (type == "glm5_next" || type.rfind("glm", 0) == 0) {
    *out = kGlm;
    return true;
  }
  return false;
}

// Reads the keys of one config.json; every failure names the file and the key.
class KeyReader {
 public:
  KeyReader(const json& j, const std::string& source, bool lenient, std::vector<std::string>* defaulted)
      : j_(j), source_(source), lenient_(lenient), defaulted_(defaulted) {}

  // An integer key in [lo, hi]. Absent: `fallback` if allowed (recorded), else an error.
  int64_t integer(const char* key, bool required, int64_t fallback, int64_t lo, int64_t hi) {
    if (!j_.contains(key) || j_[key].is_null()) {
      MHC_CHECK(!required || lenient_, source_, ": required key \"", key, "\" is missing");
      defaulted_->push_back(key);
      return fallback;
    }
    const json& v = j_[key];
    MHC_CHECK(v.is_number_integer(), source_, ": key \"", key, "\" must be an integer, got ", io::describe(v));
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      MHC_CHECK(u >= static_cast<uint64_t>(lo) && u <= static_cast<uint64_t>(hi), source_, ": key \"", key, "\" must be in ", lo, "..", hi,
                ", got ", io::describe(v));
      return static_cast<int64_t>(u);
    }
    const int64_t x = v.get<int64_t>();
    MHC_CHECK(x >= lo && x <= hi, source_, ": key \"", key, "\" must be in ", lo, "..", hi, ", got ", x);
    return x;
  }

  // A finite, non-negative number that survives the conversion to float. Absent: `fallback`.
  float epsilon(const char* key, float fallback) {
    if (!j_.contains(key) || j_[key].is_null()) {
      defaulted_->push_back(key);
      return fallback;
    }
    const json& v = j_[key];
    MHC_CHECK(v.is_number(), source_, ": key \"", key, "\" must be a number, got ", io::describe(v));
    const double x = v.get<double>();
    MHC_CHECK(std::isfinite(x) && x >= 0.0, source_, ": key \"", key, "\" must be finite and >= 0, got ", io::describe(v));
    MHC_CHECK(x <= std::numeric_limits<float>::max(), source_, ": key \"", key, "\" = ", io::describe(v),
              " does not fit in fp32");
    const float f = static_cast<float>(x);
    MHC_CHECK(x == 0.0 || f != 0.0f, source_, ": key \"", key, "\" = ", io::describe(v), " underflows to 0 in fp32");
    return f;
  }

 private:
  const json& j_;
  const std::string& source_;
  bool lenient_;
  std::vector<std::string>* defaulted_;
};

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& source,
                               const std::string& force_preset) {
  const json j = io::parse_untrusted_json(json_text, source, "JSON");
  MHC_CHECK(j.is_object(), source, ": expected a JSON object at the top level, got ", j.type_name());

  ModelConfig mc;
  mc.source = source;
  if (j.contains("model_type")) {
    MHC_CHECK(j["model_type"].is_string(), source, ": key \"model_type\" must be a string, got ",
              io::describe(j["model_type"]));
    mc.model_type = j["model_type"].get<std::string>();
  }
  bool has_shifted_flag = false, shifted_flag = false;
  if (j.contains("hc_shifted")) {
    MHC_CHECK(j["hc_shifted"].is_boolean(), source, ": key \"hc_shifted\" must be true or false, got ",
              io::describe(j["hc_shifted"]));
    has_shifted_flag = true;
    shifted_flag = j["hc_shifted"].get<bool>();
  }

  const ModelPreset* family = nullptr;
  if (!force_preset.empty()) {
    family = &model_preset(force_preset);  // throws, listing the known names
    mc.forced = true;
    mc.mode = family->mode;
    mc.head = family->head;
  } else {
    bool is_deepseek = false;
    TypeMapping m{};
    MHC_CHECK(!mc.model_type.empty(), source,
              ": no \"model_type\"; known: deepseek_v4, deepseek_v4_1 (or deepseek_v41), glm5_next (or any glm*); "
              "pass --model NAME to force a preset");
    MHC_CHECK(map_model_type(mc.model_type, &is_deepseek, &m), source, ": unknown model_type '", mc.model_type,
              "'; known: deepseek_v4, deepseek_v4_1 (or deepseek_v41), glm5_next (or any glm*); pass --model NAME "
              "to force a preset");
    if (has_shifted_flag) {
      MHC_CHECK(is_deepseek || !shifted_flag, source, ": \"hc_shifted\": true is only defined for deepseek_v4 types, not '",
                mc.model_type, "'");
      if (is_deepseek) {
        bool unused = false;
        map_model_type(shifted_flag ? "deepseek_v4_1" : "deepseek_v4", &unused, &m);
      }
    }
    family = &model_preset(m.family);
    mc.mode = m.mode;
    mc.head = m.head;
  }
  mc.family = family->name;

  // Scalars: config.json wins; what it lacks comes from the family preset (recorded).
  const Config& d = family->config;
  KeyReader keys(j, source, mc.forced, &mc.defaulted);
  Config& c = mc.config;
  c.H = keys.integer("hidden_size", true, d.H, 1, kMaxHidden);
  c.n = static_cast<int32_t>(keys.integer("hc_mult", false, d.n, 1, kMaxStreams));
  mc.num_layers = static_cast<int32_t>(keys.integer("num_hidden_layers", true, family->num_layers, 1, kMaxLayers));
  c.sinkhorn_iters = static_cast<int32_t>(keys.integer("hc_sinkhorn_iters", false, d.sinkhorn_iters, 1, kMaxSinkhornIters));
  const float hc_eps = keys.epsilon("hc_eps", d.pre_eps);
  c.pre_eps = hc_eps;
  c.sinkhorn_eps = hc_eps;
  const float rms_eps = keys.epsilon("rms_norm_eps", d.norm_eps);
  c.norm_eps = rms_eps;
  c.rmsnorm_eps = rms_eps;
  c.post_scale = d.post_scale;
  if (j.contains("num_nextn_predict_layers") && !j["num_nextn_predict_layers"].is_null()) {
    std::vector<std::string> ignored;
    KeyReader optional(j, source, false, &ignored);
    mc.mtp_layers = static_cast<int32_t>(optional.integer("num_nextn_predict_layers", false, 0, 0, kMaxMtpLayers));
  }
  try {
    validate_config(c);
  } catch (const Error& e) {
    MHC_FAIL(source, ": ", e.message());
  }
  return mc;
}

ModelConfig read_model_config(const std::string& path, const std::string& force_preset) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string file = fs::is_directory(path, ec) ? (fs::path(path) / "config.json").string() : path;
  return parse_model_config(io::read_regular_file(file, kMaxJsonFileBytes, "model config (config.json next to the weights)"),
                            file, force_preset);
}

}  // namespace mhc

// src/core/config.cpp - model presets (spec section 2) and enum names.
#include "mhc/config.hpp"
#include "mhc/mhc.hpp"

#include "mhc/error.hpp"

namespace mhc {

namespace {
Config make_config(int64_t H, float norm_eps, float rmsnorm_eps) {
  Config c;
  c.n = 4;
  c.H = H;
  c.norm_eps = norm_eps;
  c.pre_eps = 1e-6f;
  c.sinkhorn_eps = 1e-6f;
  c.sinkhorn_iters = 20;
  c.post_scale = 2.0f;
  c.rmsnorm_eps = rmsnorm_eps;
  return c;
}
}  // namespace

const std::vector<ModelPreset>& model_presets() {
  // Layer counts: V4-Flash 43 and V4-Pro 61 follow from the spec's 86 / 122 boundaries per
  // token. V4.1-Flash and GLM-5-Next use 43 and 78 until a config.json says otherwise
  // (mhc run --checkpoint reads the real value).
  static const std::vector<ModelPreset> presets = {
      {"deepseek-v4-flash", make_config(4096, 1e-6f, 1e-6f), 43, Mode::kNormal, HeadKind::kLearned},
      {"deepseek-v4-pro", make_config(7168, 1e-6f, 1e-6f), 61, Mode::kNormal, HeadKind::kLearned},
      {"deepseek-v4.1-flash", make_config(5120, 1e-20f, 1e-20f), 43, Mode::kShifted, HeadKind::kCarried},
      {"glm-5-next", make_config(4096, 1e-5f, 1e-5f), 78, Mode::kNormal, HeadKind::kMean},
  };
  return presets;
}

const ModelPreset& model_preset(const std::string& name) {
  std::string known;
  for (const ModelPreset& p : model_presets()) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  MHC_FAIL("unknown model '", name, "'; known models: ", known);
}

const char* to_string(PreSource s) {
  switch (s) {
    case PreSource::kComputed: return "computed";
    case PreSource::kCarried: return "carried";
    case PreSource::kIdentity: return "identity";
  }
  return "?";
}

const char* to_string(Mode m) { return m == Mode::kNormal ? "normal" : "shifted"; }

const char* to_string(HeadKind h) {
  switch (h) {
    case HeadKind::kLearned: return "learned";
    case HeadKind::kCarried: return "carried";
    case HeadKind::kMean: return "mean";
  }
  return "?";
}

}  // namespace mhc

namespace mhc {

const char* version() { return MHC_VERSION_STRING; }

}  // namespace mhc

// tests/test_checkpoint.cpp - config.json and safetensors reading (issue 6).
//
// Every checkpoint here is written by the test itself, with its own tiny safetensors writer
// and its own copy of the tensor names, so the reader is never checked against itself.
// Small shapes (n = 4, H = 64, 2 layers) keep it fast.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "mhc/checkpoint.hpp"
#include "mhc/error.hpp"
#include "src/core/bf16.hpp"
#include "tools/checkpoint_model.hpp"
#include "tools/model.hpp"

namespace fs = std::filesystem;
using mhc::detail::bf16_to_float;
using mhc::detail::float_to_bf16;

namespace {

// ---- the test's own safetensors writer ------------------------------------------------------

struct Raw {
  std::string name;
  std::string dtype;  // "F32", "BF16", "F16", "I32"
  std::vector<int64_t> shape;
  std::string bytes;
};

std::string shape_json(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

// The header of `ts` laid out back to back (no padding: data offsets stay unaligned).
std::string header_of(const std::vector<Raw>& ts) {
  std::string h = "{\"__metadata__\":{\"format\":\"pt\"}";
  uint64_t off = 0;
  for (const Raw& t : ts) {
    h += ",\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":" + shape_json(t.shape) +
         ",\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + t.bytes.size()) + "]}";
    off += t.bytes.size();
  }
  return h + "}";
}

std::string file_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out + header + data;
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

void write_file(const fs::path& path, const std::vector<Raw>& ts) {
  std::string data;
  for (const Raw& t : ts) data += t.bytes;
  write_bytes(path, file_bytes(header_of(ts), data));
}

// float -> f16 bits, for values already quantised to f16 (see f16_exact).
uint16_t half_bits(float v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(v));
  if (a == 0.0) return sign;
  int e = 0;
  const double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const int E = e + 14;                // biased f16 exponent of a = (2m) * 2^(e-1)
  if (E <= 0) return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::lround(a * 16777216.0)));
  return static_cast<uint16_t>(sign | (E << 10) | static_cast<uint16_t>(std::lround((2.0 * m - 1.0) * 1024.0)));
}

// The nearest value with an exact f16 encoding (11 significant bits, subnormals below 2^-14).
float f16_exact(float v) {
  const double a = static_cast<double>(v);
  if (std::fabs(a) < std::ldexp(1.0, -14)) return static_cast<float>(std::nearbyint(a * 16777216.0) / 16777216.0);
  int e = 0;
  const double m = std::frexp(a, &e);
  return static_cast<float>(std::ldexp(std::nearbyint(m * 2048.0) / 2048.0, e));
}

Raw f32_raw(const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape, const std::string& dtype) {
  Raw r{name, dtype, std::move(shape), {}};
  for (float x : v) {
    if (dtype == "F32") {
      r.bytes.append(reinterpret_cast<const char*>(&x), 4);
    } else {
      const uint16_t b = dtype == "BF16" ? float_to_bf16(x) : half_bits(x);
      r.bytes.append(reinterpret_cast<const char*>(&b), 2);
    }
  }
  return r;
}

Raw bf16_raw(const std::string& name, const std::vector<uint16_t>& v, std::vector<int64_t> shape,
             const std::string& dtype) {
  Raw r{name, dtype, std::move(shape), {}};
  for (uint16_t b : v) {
    if (dtype == "BF16") {
      r.bytes.append(reinterpret_cast<const char*>(&b), 2);
    } else if (dtype == "F32") {
      const float x = bf16_to_float(b);
      r.bytes.append(reinterpret_cast<const char*>(&x), 4);
    } else {
      const uint16_t h = half_bits(bf16_to_float(b));
      r.bytes.append(reinterpret_cast<const char*>(&h), 2);
    }
  }
  return r;
}

// ---- the test's own copy of the naming table ------------------------------------------------

enum class Scheme { kDeepSeek, kHF };

std::string layer_name(Scheme s, const std::string& scope, const std::string& what) {
  static const std::map<std::string, std::string> hf = {
      {"hc_attn_fn", "attn_hc.fn"},         {"hc_attn_scale", "attn_hc.scale"}, {"hc_attn_base", "attn_hc.base"},
      {"hc_ffn_fn", "ffn_hc.fn"},           {"hc_ffn_scale", "ffn_hc.scale"},   {"hc_ffn_base", "ffn_hc.base"},
      {"attn_norm.weight", "input_layernorm.weight"}, {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"hc_head_fn", "hc_head.fn"},         {"hc_head_scale", "hc_head.scale"}, {"hc_head_base", "hc_head.base"},
      {"norm.weight", "norm.weight"},
  };
  // scope: "layers.3", "mtp.0" or "" (top level)
  if (s == Scheme::kDeepSeek) return scope.empty() ? what : scope + "." + what;
  return (scope.empty() ? "model." : "model." + scope + ".") + hf.at(what);
}

struct WriteSpec {
  Scheme scheme = Scheme::kDeepSeek;
  int shards = 1;
  std::string fn_dtype = "F32";
  std::string norm_dtype = "BF16";
  int mtp = 0;            // MTP blocks (copies of layer 0, own head and norm)
  bool mtp_head = true;   // write the MTP blocks' head trio and norm
  std::string model_type = "deepseek_v4";
  std::string extra_config;  // appended inside config.json's object
};

// All tensors of `m` under `spec`'s names, plus two tensors mhc must skip.
std::vector<Raw> tensors_of(const mhc::tools::HostModel& m, const WriteSpec& spec) {
  const mhc::Config& c = m.config;
  const std::vector<int64_t> fn{c.M(), c.K()}, base{c.M()}, norm{c.H};
  std::vector<Raw> ts;
  ts.push_back(bf16_raw(spec.scheme == Scheme::kHF ? "model.embed_tokens.weight" : "embed.weight",
                        std::vector<uint16_t>(static_cast<size_t>(3 * c.H), 0x3f80), {3, c.H}, "BF16"));
  ts.push_back(Raw{"layers.0.attn.wq_a.weight", "I8", {5}, std::string(5, '\x7f')});
  auto layer = [&](const std::string& scope, int l) {
    auto nm = [&](const char* w) { return layer_name(spec.scheme, scope, w); };
    ts.push_back(f32_raw(nm("hc_attn_fn"), m.attn[l].fn, fn, spec.fn_dtype));
    ts.push_back(f32_raw(nm("hc_attn_scale"), m.attn[l].scale, {3}, spec.fn_dtype));
    ts.push_back(f32_raw(nm("hc_attn_base"), m.attn[l].base, base, spec.fn_dtype));
    ts.push_back(f32_raw(nm("hc_ffn_fn"), m.ffn[l].fn, fn, spec.fn_dtype));
    ts.push_back(f32_raw(nm("hc_ffn_scale"), m.ffn[l].scale, {3}, spec.fn_dtype));
    ts.push_back(f32_raw(nm("hc_ffn_base"), m.ffn[l].base, base, spec.fn_dtype));
    ts.push_back(bf16_raw(nm("attn_norm.weight"), m.attn_norm[l], norm, spec.norm_dtype));
    ts.push_back(bf16_raw(nm("ffn_norm.weight"), m.ffn_norm[l], norm, spec.norm_dtype));
  };
  auto head = [&](const std::string& scope) {
    ts.push_back(f32_raw(layer_name(spec.scheme, scope, "hc_head_fn"), m.head_block.fn, {c.n, c.K()}, spec.fn_dtype));
    ts.push_back(f32_raw(layer_name(spec.scheme, scope, "hc_head_scale"), m.head_block.scale, {1}, spec.fn_dtype));
    ts.push_back(f32_raw(layer_name(spec.scheme, scope, "hc_head_base"), m.head_block.base, {c.n}, spec.fn_dtype));
  };
  for (int l = 0; l < m.layers; ++l) layer("layers." + std::to_string(l), l);
  if (m.head == mhc::HeadKind::kLearned) head("");
  ts.push_back(bf16_raw(layer_name(spec.scheme, "", "norm.weight"), m.final_norm, norm, spec.norm_dtype));
  for (int i = 0; i < spec.mtp; ++i) {
    const std::string scope = "mtp." + std::to_string(i);
    layer(scope, 0);
    if (spec.mtp_head) {
      head(scope);
      ts.push_back(bf16_raw(layer_name(spec.scheme, scope, "norm.weight"), m.final_norm, norm, spec.norm_dtype));
    }
  }
  return ts;
}

std::string config_json(const mhc::tools::HostModel& m, const WriteSpec& spec) {
  std::ostringstream os;
  os.precision(17);
  os << "{\"model_type\": \"" << spec.model_type << "\", \"hidden_size\": " << m.config.H
     << ", \"num_hidden_layers\": " << m.layers << ", \"hc_mult\": " << m.config.n
     << ", \"hc_eps\": " << static_cast<double>(m.config.pre_eps)
     << ", \"hc_sinkhorn_iters\": " << m.config.sinkhorn_iters
     << ", \"rms_norm_eps\": " << static_cast<double>(m.config.norm_eps)
     << ", \"num_nextn_predict_layers\": " << spec.mtp << ", \"vocab_size\": 129280" << spec.extra_config << "}";
  return os.str();
}

// Writes config.json and the safetensors file(s); returns the shard file names.
std::vector<std::string> write_checkpoint(const fs::path& dir, const mhc::tools::HostModel& m, const WriteSpec& spec) {
  fs::create_directories(dir);
  {
    std::ofstream cfg(dir / "config.json");
    cfg << config_json(m, spec);
  }
  const std::vector<Raw> ts = tensors_of(m, spec);
  std::vector<std::string> files;
  if (spec.shards == 1) {
    write_file(dir / "model.safetensors", ts);
    return {"model.safetensors"};
  }
  std::string map;
  for (int k = 0; k < spec.shards; ++k) {
    const std::string file = "model-0000" + std::to_string(k + 1) + "-of-0000" + std::to_string(spec.shards) + ".safetensors";
    std::vector<Raw> part;
    // Interleaved, so every shard holds part of every layer.
    for (size_t i = static_cast<size_t>(k); i < ts.size(); i += static_cast<size_t>(spec.shards)) {
      part.push_back(ts[i]);
      map += std::string(map.empty() ? "" : ",") + "\"" + ts[i].name + "\":\"" + file + "\"";
    }
    write_file(dir / file, part);
    files.push_back(file);
  }
  std::ofstream idx(dir / "model.safetensors.index.json");
  idx << "{\"metadata\":{\"total_size\":0},\"weight_map\":{" << map << "}}";
  return files;
}

// ---- fixtures -------------------------------------------------------------------------------

class TempDir {
 public:
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "mhc_ckpt_XXXXXX").string();
    const char* made = ::mkdtemp(templ.data());
    if (made == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

mhc::tools::HostModel small_model(const std::string& preset_name, int layers = 2, uint64_t seed = 7) {
  mhc::ModelPreset p = mhc::model_preset(preset_name);
  p.config.H = 64;
  return mhc::tools::synthetic_model(p, layers, seed);
}

// Applies `q` to every fp32 value of the model (e.g. rounding to what a dtype stores exactly).
void quantise(mhc::tools::HostModel& m, const std::function<float(float)>& q) {
  auto blk = [&](mhc::tools::HostBlock& b) {
    for (auto* v : {&b.fn, &b.scale, &b.base}) {
      for (float& x : *v) x = q(x);
    }
  };
  for (auto& b : m.attn) blk(b);
  for (auto& b : m.ffn) blk(b);
  blk(m.head_block);
}

void expect_same_model(const mhc::tools::HostModel& a, const mhc::tools::HostModel& b) {
  ASSERT_EQ(a.layers, b.layers);
  EXPECT_EQ(a.config.n, b.config.n);
  EXPECT_EQ(a.config.H, b.config.H);
  EXPECT_EQ(a.config.norm_eps, b.config.norm_eps);
  EXPECT_EQ(a.config.pre_eps, b.config.pre_eps);
  EXPECT_EQ(a.config.sinkhorn_eps, b.config.sinkhorn_eps);
  EXPECT_EQ(a.config.sinkhorn_iters, b.config.sinkhorn_iters);
  EXPECT_EQ(a.config.rmsnorm_eps, b.config.rmsnorm_eps);
  EXPECT_EQ(a.config.post_scale, b.config.post_scale);
  EXPECT_EQ(a.mode, b.mode);
  EXPECT_EQ(a.head, b.head);
  for (int l = 0; l < a.layers; ++l) {
    EXPECT_EQ(a.attn[l].fn, b.attn[l].fn) << "layer " << l;
    EXPECT_EQ(a.attn[l].scale, b.attn[l].scale) << "layer " << l;
    EXPECT_EQ(a.attn[l].base, b.attn[l].base) << "layer " << l;
    EXPECT_EQ(a.ffn[l].fn, b.ffn[l].fn) << "layer " << l;
    EXPECT_EQ(a.ffn[l].scale, b.ffn[l].scale) << "layer " << l;
    EXPECT_EQ(a.ffn[l].base, b.ffn[l].base) << "layer " << l;
    EXPECT_EQ(a.attn_norm[l], b.attn_norm[l]) << "layer " << l;
    EXPECT_EQ(a.ffn_norm[l], b.ffn_norm[l]) << "layer " << l;
  }
  if (a.head == mhc::HeadKind::kLearned) {
    EXPECT_EQ(a.head_block.fn, b.head_block.fn);
    EXPECT_EQ(a.head_block.scale, b.head_block.scale);
    EXPECT_EQ(a.head_block.base, b.head_block.base);
  }
  EXPECT_EQ(a.final_norm, b.final_norm);
}

// The message of the mhc::Error `fn` throws ("" and a failure when it does not throw).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const mhc::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an mhc::Error: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error was thrown";
  return "";
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

// ---- config.json ----------------------------------------------------------------------------

TEST(CheckpointConfig, ModelTypeMapping) {
  const std::string body = R"("hidden_size": 64, "num_hidden_layers": 3, "hc_mult": 4, "hc_eps": 1e-6,
                              "hc_sinkhorn_iters": 20, "rms_norm_eps": 1e-6)";
  struct Case {
    std::string type, extra;
    mhc::Mode mode;
    mhc::HeadKind head;
  } cases[] = {
      {"deepseek_v4", "", mhc::Mode::kNormal, mhc::HeadKind::kLearned},
      {"deepseek_v4_1", "", mhc::Mode::kShifted, mhc::HeadKind::kCarried},
      {"deepseek_v41", "", mhc::Mode::kShifted, mhc::HeadKind::kCarried},
      {"deepseek_v4", R"(, "hc_shifted": true)", mhc::Mode::kShifted, mhc::HeadKind::kCarried},
      {"deepseek_v4_1", R"(, "hc_shifted": false)", mhc::Mode::kNormal, mhc::HeadKind::kLearned},
      {"glm5_next", "", mhc::Mode::kNormal, mhc::HeadKind::kMean},
      {"glm_moe_dsa", "", mhc::Mode::kNormal, mhc::HeadKind::kMean},
  };
  for (const Case& c : cases) {
    const mhc::ModelConfig mc =
        mhc::parse_model_config("{\"model_type\": \"" + c.type + "\", " + body + c.extra + "}", "cfg.json");
    EXPECT_EQ(mc.mode, c.mode) << c.type << c.extra;
    EXPECT_EQ(mc.head, c.head) << c.type << c.extra;
    EXPECT_EQ(mc.num_layers, 3);
    EXPECT_EQ(mc.config.H, 64);
    EXPECT_EQ(mc.config.n, 4);
    EXPECT_FALSE(mc.forced);
    EXPECT_TRUE(mc.defaulted.empty());
  }
}

TEST(CheckpointConfig, ScalarsComeFromTheRightKeys) {
  const mhc::ModelConfig mc = mhc::parse_model_config(
      R"({"model_type": "deepseek_v4_1", "hidden_size": 5120, "num_hidden_layers": 43, "hc_mult": 2,
          "hc_eps": 3e-6, "hc_sinkhorn_iters": 7, "rms_norm_eps": 1e-20, "num_nextn_predict_layers": 1})",
      "cfg.json");
  EXPECT_EQ(mc.config.n, 2);
  EXPECT_EQ(mc.config.H, 5120);
  EXPECT_EQ(mc.num_layers, 43);
  EXPECT_EQ(mc.config.pre_eps, 3e-6f);
  EXPECT_EQ(mc.config.sinkhorn_eps, 3e-6f);
  EXPECT_EQ(mc.config.sinkhorn_iters, 7);
  EXPECT_EQ(mc.config.norm_eps, 1e-20f);
  EXPECT_EQ(mc.config.rmsnorm_eps, 1e-20f);
  EXPECT_EQ(mc.config.post_scale, 2.0f);
  EXPECT_EQ(mc.mtp_layers, 1);
  EXPECT_EQ(mc.family, "deepseek-v4.1-flash");
}

TEST(CheckpointConfig, MissingOptionalScalarsAreDefaultedAndRecorded) {
  const mhc::ModelConfig mc =
      mhc::parse_model_config(R"({"model_type": "glm5_next", "hidden_size": 64, "num_hidden_layers": 2})", "cfg.json");
  EXPECT_EQ(mc.config.norm_eps, 1e-5f);  // glm-5-next preset
  EXPECT_EQ(mc.config.n, 4);
  EXPECT_EQ(mc.defaulted, (std::vector<std::string>{"hc_mult", "hc_sinkhorn_iters", "hc_eps", "rms_norm_eps"}));
}

TEST(CheckpointConfig, FailsClosed) {
  auto err = [](const std::string& text, const std::string& force = "") {
    return error_of([&] { mhc::parse_model_config(text, "/x/config.json", force); });
  };
  const std::string ok = R"("hidden_size": 64, "num_hidden_layers": 2)";
  std::string m = err(R"({"model_type": "llama", )" + ok + "}");
  EXPECT_CONTAINS(m, "/x/config.json");
  EXPECT_CONTAINS(m, "unknown model_type 'llama'");
  EXPECT_CONTAINS(m, "--model");
  EXPECT_CONTAINS(err("{" + ok + "}"), "no \"model_type\"");
  EXPECT_CONTAINS(err(R"({"model_type": "deepseek_v4", "hidden_size": 64,)"), "invalid JSON");
  EXPECT_CONTAINS(err("[1, 2]"), "JSON object");
  EXPECT_CONTAINS(err(R"({"model_type": "deepseek_v4", "num_hidden_layers": 2})"), "\"hidden_size\" is missing");
  EXPECT_CONTAINS(err(R"({"model_type": "deepseek_v4", "hidden_size": "64", "num_hidden_layers": 2})"),
                  "\"hidden_size\" must be an integer");
  EXPECT_CONTAINS(err(R"({"model_type": "deepseek_v4", "hidden_size": 64.5, "num_hidden_layers": 2})"),
                  "\"hidden_size\" must be an integer");
  EXPECT_CONTAINS(err(R"({"model_type": "deepseek_v4", "hc_mult": 9, )" + ok + "}"), "\"hc_mult\" must be in 1..8");
  EXPECT_CONTAINS(err(R"({"model_type": "deepseek_v4", "hc_sinkhorn_iters": 0, )" + ok + "}"), "hc_sinkhorn_iters");
  EXPECT_CONTAINS(err(R"({"model_type": "deepseek_v4", "hc_eps": -1e-6, )" + ok + "}"), "\"hc_eps\" must be finite");
  EXPECT_CONTAINS(err(R"({"model_type": "deepseek_v4", "rms_norm_eps": 1e-60, )" + ok + "}"), "underflows");
  EXPECT_CONTAINS(err(R"({"model_type": "glm5_next", "hc_shifted": true, )" + ok + "}"), "hc_shifted");
  EXPECT_CONTAINS(err(R"({"model_type": "deepseek_v4", "hc_shifted": 1, )" + ok + "}"), "true or false");
  EXPECT_CONTAINS(err(R"({"model_type": "llama", )" + ok + "}", "no-such-preset"), "unknown model 'no-such-preset'");
}

TEST(CheckpointConfig, ForcedPresetAcceptsUnknownTypes) {
  const mhc::ModelConfig mc = mhc::parse_model_config(
      R"({"model_type": "my_experiment", "hidden_size": 64, "rms_norm_eps": 1e-7})", "cfg.json", "deepseek-v4.1-flash");
  EXPECT_TRUE(mc.forced);
  EXPECT_EQ(mc.mode, mhc::Mode::kShifted);
  EXPECT_EQ(mc.head, mhc::HeadKind::kCarried);
  EXPECT_EQ(mc.config.H, 64);           // from config.json
  EXPECT_EQ(mc.config.norm_eps, 1e-7f);  // from config.json
  EXPECT_EQ(mc.num_layers, 43);         // from the preset
  EXPECT_EQ(mc.model_type, "my_experiment");
}

// ---- naming table ---------------------------------------------------------------------------

TEST(CheckpointNames, BothSchemes) {
  using mhc::NamingScheme;
  using mhc::TensorRole;
  using mhc::TensorScope;
  EXPECT_EQ(mhc::tensor_name(NamingScheme::kDeepSeek, TensorScope::kLayer, 3, TensorRole::kAttnFn), "layers.3.hc_attn_fn");
  EXPECT_EQ(mhc::tensor_name(NamingScheme::kDeepSeek, TensorScope::kLayer, 0, TensorRole::kFfnNorm), "layers.0.ffn_norm.weight");
  EXPECT_EQ(mhc::tensor_name(NamingScheme::kDeepSeek, TensorScope::kTop, 0, TensorRole::kHeadScale), "hc_head_scale");
  EXPECT_EQ(mhc::tensor_name(NamingScheme::kDeepSeek, TensorScope::kTop, 0, TensorRole::kFinalNorm), "norm.weight");
  EXPECT_EQ(mhc::tensor_name(NamingScheme::kDeepSeek, TensorScope::kMtp, 1, TensorRole::kHeadFn), "mtp.1.hc_head_fn");
  EXPECT_EQ(mhc::tensor_name(NamingScheme::kHuggingFace, TensorScope::kLayer, 3, TensorRole::kAttnBase),
            "model.layers.3.attn_hc.base");
  EXPECT_EQ(mhc::tensor_name(NamingScheme::kHuggingFace, TensorScope::kLayer, 2, TensorRole::kAttnNorm),
            "model.layers.2.input_layernorm.weight");
  EXPECT_EQ(mhc::tensor_name(NamingScheme::kHuggingFace, TensorScope::kLayer, 2, TensorRole::kFfnNorm),
            "model.layers.2.post_attention_layernorm.weight");
  EXPECT_EQ(mhc::tensor_name(NamingScheme::kHuggingFace, TensorScope::kTop, 0, TensorRole::kHeadFn), "model.hc_head.fn");
  EXPECT_EQ(mhc::tensor_name(NamingScheme::kHuggingFace, TensorScope::kTop, 0, TensorRole::kFinalNorm), "model.norm.weight");
  EXPECT_EQ(mhc::tensor_name(NamingScheme::kHuggingFace, TensorScope::kMtp, 0, TensorRole::kFfnFn), "model.mtp.0.ffn_hc.fn");
  EXPECT_THROW(mhc::tensor_name(NamingScheme::kDeepSeek, TensorScope::kLayer, 0, TensorRole::kHeadFn), mhc::Error);
  EXPECT_THROW(mhc::tensor_name(NamingScheme::kDeepSeek, TensorScope::kTop, 0, TensorRole::kAttnFn), mhc::Error);
}

// ---- loading --------------------------------------------------------------------------------

struct LoadCase {
  const char* preset;
  Scheme scheme;
  int shards;
  const char* fn_dtype;
  const char* norm_dtype;
  const char* model_type;
};

void PrintTo(const LoadCase& c, std::ostream* os) {
  *os << c.model_type << (c.scheme == Scheme::kHF ? " hf " : " deepseek ") << c.shards << " shard(s) fn " << c.fn_dtype
      << " norm " << c.norm_dtype;
}

class CheckpointLoad : public ::testing::TestWithParam<LoadCase> {};

TEST_P(CheckpointLoad, RoundTripsAndRunsBitEqual) {
  const LoadCase& p = GetParam();
  mhc::tools::HostModel m = small_model(p.preset);
  const std::string fn_dtype = p.fn_dtype, norm_dtype = p.norm_dtype;
  // Keep the in-memory weights to what the storage dtype holds exactly.
  if (fn_dtype == "BF16") quantise(m, [](float x) { return bf16_to_float(float_to_bf16(x)); });
  if (fn_dtype == "F16") quantise(m, f16_exact);
  if (norm_dtype == "F16") {
    for (auto* v : {&m.attn_norm, &m.ffn_norm}) {
      for (auto& w : *v) {
        for (auto& b : w) b = float_to_bf16(f16_exact(bf16_to_float(b)));
      }
    }
  }
  TempDir tmp;
  WriteSpec spec;
  spec.scheme = p.scheme;
  spec.shards = p.shards;
  spec.fn_dtype = fn_dtype;
  spec.norm_dtype = norm_dtype;
  spec.model_type = p.model_type;
  write_checkpoint(tmp.path(), m, spec);

  const mhc::tools::CheckpointModel loaded = mhc::tools::load_checkpoint_model(tmp.path().string());
  EXPECT_EQ(loaded.scheme, p.scheme == Scheme::kHF ? mhc::NamingScheme::kHuggingFace : mhc::NamingScheme::kDeepSeek);
  EXPECT_EQ(loaded.files.size(), static_cast<size_t>(p.shards));
  expect_same_model(loaded.model, m);

  // The run on the loaded weights equals the run on the in-memory ones, bit for bit.
  mhc::tools::Rng rng(99);
  const int64_t T = 5;
  const std::vector<uint16_t> emb = mhc::tools::random_bf16(static_cast<size_t>(T * m.config.H), rng);
  const mhc::Device cpu{};
  const mhc::tools::RunResult a = mhc::tools::run_model(loaded.model, emb, T, cpu);
  const mhc::tools::RunResult b = mhc::tools::run_model(m, emb, T, cpu);
  ASSERT_EQ(a.output.size(), static_cast<size_t>(T * m.config.H));
  EXPECT_EQ(a.output, b.output);

  // --layers caps what is loaded: the first layer only.
  const mhc::tools::CheckpointModel one = mhc::tools::load_checkpoint_model(tmp.path().string(), "", 1);
  EXPECT_EQ(one.model.layers, 1);
  EXPECT_EQ(one.config.num_layers, 2);
  EXPECT_EQ(one.model.attn[0].fn, m.attn[0].fn);
}

INSTANTIATE_TEST_SUITE_P(
    Checkpoint, CheckpointLoad,
    ::testing::Values(LoadCase{"deepseek-v4-flash", Scheme::kDeepSeek, 1, "F32", "BF16", "deepseek_v4"},
                      LoadCase{"deepseek-v4-flash", Scheme::kHF, 3, "F32", "BF16", "deepseek_v4"},
                      LoadCase{"deepseek-v4-flash", Scheme::kDeepSeek, 2, "BF16", "F32", "deepseek_v4"},
                      LoadCase{"deepseek-v4.1-flash", Scheme::kDeepSeek, 1, "F32", "BF16", "deepseek_v4_1"},
                      LoadCase{"deepseek-v4.1-flash", Scheme::kHF, 2, "BF16", "BF16", "deepseek_v4_1"},
                      LoadCase{"glm-5-next", Scheme::kHF, 1, "F32", "F32", "glm5_next"},
                      LoadCase{"glm-5-next", Scheme::kDeepSeek, 4, "F16", "F16", "glm5_next"}),
    [](const ::testing::TestParamInfo<LoadCase>& pi) {
      std::string name = std::string(pi.param.model_type) + (pi.param.scheme == Scheme::kHF ? "_hf_" : "_ds_") +
                         std::to_string(pi.param.shards) + "shard_" + pi.param.fn_dtype + "_" + pi.param.norm_dtype;
      return name;
    });

TEST(Checkpoint, RoundingConversions) {
  // F32 norm weights are rounded to nearest even bf16; F16 fn values widen exactly.
  TempDir tmp;
  const float x = 1.0f + 3.0f / 512.0f;  // halfway between two bf16 values: 1 + 3*2^-9 -> 1 + 2*2^-8 (even)
  std::vector<Raw> ts = {
      f32_raw("norm_f32", {x, -x, 0.1f}, {3}, "F32"),
      f32_raw("fn_f16", {0.5f, -0.25f, std::ldexp(1.0f, -20)}, {3}, "F16"),  // last one is f16-subnormal
      f32_raw("fn_bf16", {0.1f}, {1}, "BF16"),
  };
  write_file(tmp.path() / "model.safetensors", ts);
  const mhc::Checkpoint ck = mhc::Checkpoint::open((tmp.path() / "model.safetensors").string());
  const std::vector<uint16_t> n = ck.read_bf16("norm_f32", {3});
  EXPECT_EQ(n[0], float_to_bf16(x));
  EXPECT_EQ(bf16_to_float(n[0]), 1.0f + 4.0f / 512.0f);
  EXPECT_EQ(n[1], float_to_bf16(-x));
  EXPECT_EQ(n[2], float_to_bf16(0.1f));
  EXPECT_EQ(ck.read_f32("fn_f16", {3}), (std::vector<float>{0.5f, -0.25f, std::ldexp(1.0f, -20)}));
  EXPECT_EQ(ck.read_f32("fn_bf16", {1}), std::vector<float>{bf16_to_float(float_to_bf16(0.1f))});
  EXPECT_CONTAINS(error_of([&] { ck.read_f32("fn_f16", {1, 3}); }), "shape [3], expected [1, 3]");
}

TEST(Checkpoint, OpensDirectoryIndexOrFile) {
  mhc::tools::HostModel m = small_model("deepseek-v4-flash");
  TempDir tmp;
  WriteSpec spec;
  spec.shards = 2;
  const std::vector<std::string> files = write_checkpoint(tmp.path(), m, spec);
  const mhc::Checkpoint by_dir = mhc::Checkpoint::open(tmp.path().string());
  const mhc::Checkpoint by_index = mhc::Checkpoint::open((tmp.path() / "model.safetensors.index.json").string());
  EXPECT_EQ(by_dir.files(), by_index.files());
  EXPECT_EQ(by_dir.tensor_names().size(), by_index.tensor_names().size());
  EXPECT_FALSE(by_dir.index_file().empty());
  // A shard opened on its own is a single-file checkpoint with part of the tensors.
  const mhc::Checkpoint shard = mhc::Checkpoint::open((tmp.path() / files[0]).string());
  EXPECT_TRUE(shard.index_file().empty());
  EXPECT_LT(shard.tensor_names().size(), by_dir.tensor_names().size());
  const mhc::TensorInfo info = by_dir.info("layers.1.hc_ffn_fn");
  EXPECT_EQ(info.dtype, "F32");
  EXPECT_EQ(info.shape, (std::vector<int64_t>{24, 256}));
  EXPECT_EQ(info.nbytes, 24u * 256u * 4u);
}

TEST(Checkpoint, MtpBlocksAreListedAndLoaded) {
  mhc::tools::HostModel m = small_model("deepseek-v4-flash");
  for (Scheme scheme : {Scheme::kDeepSeek, Scheme::kHF}) {
    TempDir tmp;
    WriteSpec spec;
    spec.scheme = scheme;
    spec.mtp = 2;
    write_checkpoint(tmp.path(), m, spec);
    const mhc::Checkpoint ck = mhc::Checkpoint::open(tmp.path().string());
    const mhc::ModelConfig mc = mhc::read_model_config(tmp.path().string());
    const mhc::CheckpointReport report = mhc::check_checkpoint(ck, mc);
    EXPECT_EQ(report.mtp, (std::vector<int32_t>{0, 1}));
    EXPECT_EQ(report.problems(), 0);
    EXPECT_TRUE(report.notes.empty());
    const mhc::ModelWeights w = mhc::load_model_weights(ck, mc);
    ASSERT_EQ(w.mtp.size(), 2u);
    EXPECT_EQ(w.mtp[1].index, 1);
    EXPECT_EQ(w.mtp[1].layer.attn.fn, m.attn[0].fn);
    EXPECT_EQ(w.mtp[1].layer.ffn_norm, m.ffn_norm[0]);
    EXPECT_EQ(w.mtp[0].head.fn, m.head_block.fn);
    EXPECT_EQ(w.mtp[0].norm, m.final_norm);
  }
  // Without their head and norm, MTP blocks still load (those parts stay empty).
  TempDir tmp;
  WriteSpec spec;
  spec.mtp = 1;
  spec.mtp_head = false;
  write_checkpoint(tmp.path(), m, spec);
  const mhc::ModelWeights w =
      mhc::load_model_weights(mhc::Checkpoint::open(tmp.path().string()), mhc::read_model_config(tmp.path().string()));
  ASSERT_EQ(w.mtp.size(), 1u);
  EXPECT_TRUE(w.mtp[0].head.fn.empty());
  EXPECT_TRUE(w.mtp[0].norm.empty());
  EXPECT_EQ(w.mtp[0].layer.attn.base, m.attn[0].base);
}

TEST(Checkpoint, ToolsWriterRoundTrips) {
  for (const char* preset : {"deepseek-v4-flash", "deepseek-v4.1-flash", "glm-5-next"}) {
    const mhc::tools::HostModel m = small_model(preset, 3, 11);
    TempDir tmp;
    mhc::tools::WriteOptions options;
    options.scheme = mhc::NamingScheme::kHuggingFace;
    options.shards = 3;
    options.mtp = 1;
    mhc::tools::write_checkpoint(tmp.path().string(), m, options);
    const mhc::tools::CheckpointModel loaded = mhc::tools::load_checkpoint_model(tmp.path().string());
    expect_same_model(loaded.model, m);
    EXPECT_EQ(loaded.mtp_blocks, 1);
  }
}

// ---- damage ---------------------------------------------------------------------------------

class CheckpointDamage : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = small_model("deepseek-v4-flash");
    tensors_ = tensors_of(model_, WriteSpec{});
    std::ofstream cfg(dir() / "config.json");
    cfg << config_json(model_, WriteSpec{});
  }
  fs::path dir() const { return tmp_.path(); }
  fs::path file() const { return tmp_.path() / "model.safetensors"; }
  std::string data() const {
    std::string d;
    for (const Raw& t : tensors_) d += t.bytes;
    return d;
  }
  Raw& tensor(const std::string& name) {
    for (Raw& t : tensors_) {
      if (t.name == name) return t;
    }
    throw std::runtime_error("no tensor " + name);
  }
  // The error of loading the directory.
  std::string load_error() {
    return error_of([&] { mhc::tools::load_checkpoint_model(dir().string()); });
  }

  TempDir tmp_;
  mhc::tools::HostModel model_;
  std::vector<Raw> tensors_;
};

TEST_F(CheckpointDamage, TruncatedData) {
  const std::string good = file_bytes(header_of(tensors_), data());
  write_bytes(file(), good.substr(0, good.size() - 100));
  const std::string m = load_error();
  EXPECT_CONTAINS(m, file().string());
  EXPECT_CONTAINS(m, "tensor 'norm.weight'");  // the last tensor of the file
  EXPECT_CONTAINS(m, "out of range");
}

TEST_F(CheckpointDamage, TooShortForTheLengthField) {
  write_bytes(file(), std::string("\x10\x00\x00", 3));
  const std::string m = load_error();
  EXPECT_CONTAINS(m, file().string());
  EXPECT_CONTAINS(m, "truncated");
}

TEST_F(CheckpointDamage, HeaderLengthPastTheEnd) {
  const std::string good = file_bytes(header_of(tensors_), data());
  write_bytes(file(), good.substr(0, 8 + 40));  // cut inside the header
  const std::string m = load_error();
  EXPECT_CONTAINS(m, file().string());
  EXPECT_CONTAINS(m, "header length");
  EXPECT_CONTAINS(m, "past the end");
}

TEST_F(CheckpointDamage, InvalidHeaderJson) {
  std::string header = header_of(tensors_);
  header[header.size() / 2] = '\x01';  // a control character is invalid in and out of strings
  write_bytes(file(), file_bytes(header, data()));
  const std::string m = load_error();
  EXPECT_CONTAINS(m, file().string());
  EXPECT_CONTAINS(m, "invalid header JSON");
}

TEST_F(CheckpointDamage, HeaderIsNotAnObject) {
  write_bytes(file(), file_bytes("[1,2,3]", data()));
  EXPECT_CONTAINS(load_error(), "expected a JSON object");
}

TEST_F(CheckpointDamage, DuplicateName) {
  std::string header = header_of(tensors_);
  header.pop_back();
  header += ",\"norm.weight\":{\"dtype\":\"BF16\",\"shape\":[0],\"data_offsets\":[0,0]}}";
  write_bytes(file(), file_bytes(header, data()));
  const std::string m = load_error();
  EXPECT_CONTAINS(m, file().string());
  EXPECT_CONTAINS(m, "key 'norm.weight' appears twice in the top-level object");
}

TEST_F(CheckpointDamage, OffsetsOutOfRange) {
  // A consistent header whose last tensor claims bytes past the data region.
  std::string header = header_of(tensors_);
  const std::string d = data();
  const std::string last = "\"data_offsets\":[" + std::to_string(d.size() - tensor("norm.weight").bytes.size()) + "," +
                           std::to_string(d.size()) + "]";
  const std::string moved = "\"data_offsets\":[" + std::to_string(d.size() + 64 - tensor("norm.weight").bytes.size()) +
                            "," + std::to_string(d.size() + 64) + "]";
  ASSERT_NE(header.find(last), std::string::npos);
  header.replace(header.find(last), last.size(), moved);
  write_bytes(file(), file_bytes(header, d));
  const std::string m = load_error();
  EXPECT_CONTAINS(m, file().string());
  EXPECT_CONTAINS(m, "tensor 'norm.weight'");
  EXPECT_CONTAINS(m, "out of range");
}

TEST_F(CheckpointDamage, OffsetsRunBackwards) {
  std::string header = header_of(tensors_);
  const std::string d = data();
  const uint64_t end = d.size(), begin = end - tensor("norm.weight").bytes.size();
  const std::string last = "[" + std::to_string(begin) + "," + std::to_string(end) + "]";
  header.replace(header.rfind(last), last.size(), "[" + std::to_string(end) + "," + std::to_string(begin) + "]");
  write_bytes(file(), file_bytes(header, d));
  EXPECT_CONTAINS(load_error(), "run backwards");
}

TEST_F(CheckpointDamage, OverlappingOffsets) {
  // Two tensors of the same size; the second is made to start inside the first.
  std::vector<Raw> ts = {f32_raw("a", {1, 2, 3, 4}, {4}, "F32"), f32_raw("b", {5, 6, 7, 8}, {4}, "F32"),
                         f32_raw("c", {9, 10}, {2}, "F32")};
  std::string header = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]},"
                       "\"c\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]}}";
  write_bytes(file(), file_bytes(header, ts[0].bytes + ts[1].bytes + ts[2].bytes));
  const std::string m = error_of([&] { mhc::Checkpoint::open(file().string()); });
  EXPECT_CONTAINS(m, file().string());
  EXPECT_CONTAINS(m, "tensor 'b'");
  EXPECT_CONTAINS(m, "overlaps tensor 'a'");
}

TEST_F(CheckpointDamage, SizeDisagreesWithShape) {
  Raw& t = tensor("layers.0.hc_attn_base");
  t.bytes.resize(t.bytes.size() - 4);  // 23 floats for shape [24]
  write_file(file(), tensors_);
  const std::string m = load_error();
  EXPECT_CONTAINS(m, file().string());
  EXPECT_CONTAINS(m, "tensor 'layers.0.hc_attn_base'");
  EXPECT_CONTAINS(m, "needs 96");
}

TEST_F(CheckpointDamage, WrongDtype) {
  Raw& t = tensor("layers.1.hc_ffn_fn");
  t.dtype = "I32";  // same byte count, wrong type
  write_file(file(), tensors_);
  const std::string m = load_error();
  EXPECT_CONTAINS(m, file().string());
  EXPECT_CONTAINS(m, "tensor 'layers.1.hc_ffn_fn'");
  EXPECT_CONTAINS(m, "dtype I32");
  // check_checkpoint reports it without throwing, as mhc inspect needs.
  const mhc::CheckpointReport r =
      mhc::check_checkpoint(mhc::Checkpoint::open(dir().string()), mhc::read_model_config(dir().string()));
  EXPECT_EQ(r.problems(), 1);
}

TEST_F(CheckpointDamage, WrongShape) {
  Raw& t = tensor("layers.0.hc_attn_fn");
  t.shape = {24, 128};
  t.bytes.resize(24 * 128 * 4);
  write_file(file(), tensors_);
  const std::string m = load_error();
  EXPECT_CONTAINS(m, file().string());
  EXPECT_CONTAINS(m, "tensor 'layers.0.hc_attn_fn'");
  EXPECT_CONTAINS(m, "shape [24, 128], expected [24, 256]");
}

TEST_F(CheckpointDamage, WrongNormShape) {
  Raw& t = tensor("layers.1.attn_norm.weight");
  t.shape = {32};
  t.bytes.resize(64);
  write_file(file(), tensors_);
  EXPECT_CONTAINS(load_error(), "tensor 'layers.1.attn_norm.weight' (layer 1 attn norm): shape [32], expected [64]");
}

TEST_F(CheckpointDamage, ConfigDisagreesWithTensors) {
  // config.json says hc_mult 2: every fn is then the wrong shape.
  write_file(file(), tensors_);
  std::ofstream(dir() / "config.json") << R"({"model_type": "deepseek_v4", "hidden_size": 64, "num_hidden_layers": 2,
      "hc_mult": 2})";
  const std::string m = load_error();
  EXPECT_CONTAINS(m, "expected [8, 128]");
  EXPECT_CONTAINS(m, "more problem(s)");
}

TEST_F(CheckpointDamage, MissingTensor) {
  tensors_.erase(tensors_.begin() + 5);  // some tensor of layer 0
  const std::string gone = tensors_of(model_, WriteSpec{})[5].name;
  write_file(file(), tensors_);
  const std::string m = load_error();
  EXPECT_CONTAINS(m, file().string());
  EXPECT_CONTAINS(m, "tensor '" + gone + "'");
  EXPECT_CONTAINS(m, "is missing");
}

TEST_F(CheckpointDamage, MissingLayer) {
  // config.json says 3 layers; the checkpoint has 2.
  write_file(file(), tensors_);
  std::ofstream(dir() / "config.json") << R"({"model_type": "deepseek_v4", "hidden_size": 64, "num_hidden_layers": 3})";
  const std::string m = load_error();
  EXPECT_CONTAINS(m, "tensor 'layers.2.hc_attn_fn' (layer 2 attn fn) is missing");
  // Capped to the layers that exist, it loads.
  EXPECT_EQ(mhc::tools::load_checkpoint_model(dir().string(), "", 2).model.layers, 2);
}

TEST_F(CheckpointDamage, MissingLearnedHead) {
  auto drop = [&](const std::string& name) {
    tensors_.erase(std::remove_if(tensors_.begin(), tensors_.end(), [&](const Raw& t) { return t.name == name; }),
                   tensors_.end());
  };
  drop("hc_head_base");
  write_file(file(), tensors_);
  EXPECT_CONTAINS(load_error(), "tensor 'hc_head_base' (top head base) is missing");
  // A carried head (forced V4.1 preset) does not use the head, but a partial trio is still damage.
  EXPECT_CONTAINS(error_of([&] { mhc::tools::load_checkpoint_model(dir().string(), "deepseek-v4.1-flash"); }),
                  "tensor 'hc_head_base' (top head base) is missing");
  // Without any head tensor it loads.
  drop("hc_head_fn");
  drop("hc_head_scale");
  write_file(file(), tensors_);
  const mhc::tools::CheckpointModel m = mhc::tools::load_checkpoint_model(dir().string(), "deepseek-v4.1-flash");
  EXPECT_EQ(m.model.head, mhc::HeadKind::kCarried);
  EXPECT_TRUE(m.model.head_block.fn.empty());
}

TEST_F(CheckpointDamage, PartialMtpHead) {
  WriteSpec spec;
  spec.mtp = 1;
  tensors_ = tensors_of(model_, spec);
  tensors_.erase(std::remove_if(tensors_.begin(), tensors_.end(), [](const Raw& t) { return t.name == "mtp.0.hc_head_scale"; }),
                 tensors_.end());
  write_file(file(), tensors_);
  EXPECT_CONTAINS(load_error(), "tensor 'mtp.0.hc_head_scale' (mtp 0 head scale) is missing");
}

TEST_F(CheckpointDamage, NoMhcTensorsAtAll) {
  write_file(file(), {f32_raw("something.else", {1}, {1}, "F32")});
  const std::string m = load_error();
  EXPECT_CONTAINS(m, file().string());
  EXPECT_CONTAINS(m, "no mHC tensors");
}

TEST_F(CheckpointDamage, ShardNamedInIndexButAbsent) {
  WriteSpec spec;
  spec.shards = 3;
  const std::vector<std::string> files = write_checkpoint(dir(), model_, spec);
  fs::remove(dir() / files[1]);
  const std::string m = load_error();
  EXPECT_CONTAINS(m, (dir() / "model.safetensors.index.json").string());
  EXPECT_CONTAINS(m, files[1]);
  EXPECT_CONTAINS(m, "does not exist");
  EXPECT_CONTAINS(m, "tensor '");
}

TEST_F(CheckpointDamage, TensorInIndexButNotInItsShard) {
  WriteSpec spec;
  spec.shards = 2;
  const std::vector<std::string> files = write_checkpoint(dir(), model_, spec);
  // Rewrite the first shard without one of its mHC tensors; the index still points there.
  std::vector<Raw> all = tensors_of(model_, spec), part;
  std::string dropped;
  for (size_t i = 0; i < all.size(); i += 2) {
    if (dropped.empty() && all[i].name.find("hc_ffn_scale") != std::string::npos) {
      dropped = all[i].name;
      continue;
    }
    part.push_back(all[i]);
  }
  ASSERT_FALSE(dropped.empty());
  write_file(dir() / files[0], part);
  const std::string m = load_error();
  EXPECT_CONTAINS(m, (dir() / files[0]).string());
  EXPECT_CONTAINS(m, "tensor '" + dropped + "'");
  EXPECT_CONTAINS(m, "missing from this shard");
}

TEST_F(CheckpointDamage, InvalidIndex) {
  write_file(file(), tensors_);  // present but ignored: the index wins
  const fs::path index = dir() / "model.safetensors.index.json";
  std::ofstream(index) << "{\"weight_map\": {\"layers.0.hc_attn_fn\": ";
  std::string m = load_error();
  EXPECT_CONTAINS(m, index.string());
  EXPECT_CONTAINS(m, "invalid index JSON");
  std::ofstream(index) << R"({"weight_map": {"layers.0.hc_attn_fn": 3}})";
  m = load_error();
  EXPECT_CONTAINS(m, "tensor 'layers.0.hc_attn_fn'");
  EXPECT_CONTAINS(m, "shard must be a file name");
  std::ofstream(index) << R"({"weight_map": {"layers.0.hc_attn_fn": "../../etc/model.safetensors"}})";
  EXPECT_CONTAINS(load_error(), "must be a relative path inside the checkpoint directory");
  std::ofstream(index) << R"({"metadata": {}})";
  EXPECT_CONTAINS(load_error(), "weight_map");
}

TEST_F(CheckpointDamage, MissingConfigOrWeights) {
  EXPECT_CONTAINS(load_error(), "found neither model.safetensors.index.json nor model.safetensors");
  write_file(file(), tensors_);
  fs::remove(dir() / "config.json");
  EXPECT_CONTAINS(load_error(), (dir() / "config.json").string());
  EXPECT_CONTAINS(error_of([&] { mhc::Checkpoint::open((dir() / "nope").string()); }), "no such file");
}

TEST_F(CheckpointDamage, BothNamingSchemes) {
  WriteSpec hf;
  hf.scheme = Scheme::kHF;
  std::vector<Raw> both = tensors_of(model_, hf);
  both.push_back(tensor("layers.0.hc_attn_fn"));
  write_file(file(), both);
  EXPECT_CONTAINS(load_error(), "both naming schemes");
}

TEST_F(CheckpointDamage, NonFiniteValuesAreReadAsStored) {
  // The reader converts; it does not judge values (mhc inspect --values does).
  Raw& t = tensor("layers.0.hc_attn_base");
  const float nan = std::nanf("");
  std::memcpy(t.bytes.data(), &nan, 4);
  write_file(file(), tensors_);
  const mhc::tools::CheckpointModel m = mhc::tools::load_checkpoint_model(dir().string());
  EXPECT_TRUE(std::isnan(m.model.attn[0].base[0]));
}

// ---- hostile input (issue 17) ---------------------------------------------------------------

// Finding 1: a header entry, a config.json value or an index value nested 100000 deep crashed
// the reader (the error message called the recursive json::dump()).
TEST_F(CheckpointDamage, DeeplyNestedJsonIsRejected) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  write_bytes(file(), file_bytes("{\"x\":{\"dtype\":\"F32\",\"shape\":" + deep + ",\"data_offsets\":[0,0]}}", ""));
  std::string m = load_error();
  EXPECT_CONTAINS(m, file().string());
  EXPECT_CONTAINS(m, "nest deeper than 64 levels");

  m = error_of([&] { mhc::parse_model_config("{\"model_type\": " + deep + "}", "/x/config.json", ""); });
  EXPECT_CONTAINS(m, "/x/config.json");
  EXPECT_CONTAINS(m, "nest deeper than 64 levels");

  write_file(file(), tensors_);
  const fs::path index = dir() / "model.safetensors.index.json";
  std::ofstream(index) << "{\"weight_map\": {\"layers.0.hc_attn_fn\": " + deep + "}}";
  m = load_error();
  EXPECT_CONTAINS(m, index.string());
  EXPECT_CONTAINS(m, "nest deeper than 64 levels");
  // 64 levels are fine: the error is about the value, not the nesting.
  const std::string ok_deep = std::string(62, '[') + std::string(62, ']');
  std::ofstream(index) << "{\"weight_map\": {\"layers.0.hc_attn_fn\": " + ok_deep + "}}";
  EXPECT_CONTAINS(load_error(), "shard must be a file name, got an array of 1 element(s)");
}

// Finding 5: a FIFO as model file, config.json or index blocked the reader forever.
TEST_F(CheckpointDamage, FifoIsRefusedNotWaitedOn) {
  ASSERT_EQ(::mkfifo(file().c_str(), 0600), 0);
  std::string m = load_error();
  EXPECT_CONTAINS(m, file().string());
  EXPECT_CONTAINS(m, "not a regular file (a FIFO)");
  fs::remove(file());

  write_file(file(), tensors_);
  fs::remove(dir() / "config.json");
  ASSERT_EQ(::mkfifo((dir() / "config.json").c_str(), 0600), 0);
  m = load_error();
  EXPECT_CONTAINS(m, (dir() / "config.json").string());
  EXPECT_CONTAINS(m, "not a regular file (a FIFO)");

  const fs::path index = dir() / "model.safetensors.index.json";
  ASSERT_EQ(::mkfifo(index.c_str(), 0600), 0);
  m = load_error();
  EXPECT_CONTAINS(m, index.string());
  EXPECT_CONTAINS(m, "not a regular file (a FIFO)");
}

// Finding 6: "num_hidden_layers": 1048576 took 6.7 GB and 28 s before anything failed.
TEST(CheckpointConfig, LayerCountIsCapped) {
  const std::string m = error_of([&] {
    mhc::parse_model_config(R"({"model_type": "deepseek_v4", "hidden_size": 64, "num_hidden_layers": 1048576})",
                            "/x/config.json", "");
  });
  EXPECT_CONTAINS(m, "/x/config.json");
  EXPECT_CONTAINS(m, "\"num_hidden_layers\" must be in 1..1024");
  EXPECT_CONTAINS(error_of([&] {
                    mhc::parse_model_config(R"({"model_type": "deepseek_v4", "hidden_size": 1048577,
                                                "num_hidden_layers": 2})", "/x/config.json", "");
                  }),
                  "\"hidden_size\" must be in 1..1048576");
}

// Finding 7: a file truncated after it was opened raised SIGBUS through the mapping.
TEST_F(CheckpointDamage, FileTruncatedAfterOpening) {
  write_file(file(), tensors_);
  const mhc::Checkpoint ckpt = mhc::Checkpoint::open(file().string());
  const mhc::TensorInfo info = ckpt.info("layers.0.hc_attn_fn");
  fs::resize_file(file(), 100);
  const std::string m = error_of([&] { (void)ckpt.read_f32("layers.0.hc_attn_fn", info.shape); });
  EXPECT_CONTAINS(m, file().string());
  EXPECT_CONTAINS(m, "truncated");
}

// Finding 8: duplicate keys (the last or the first silently won) and a UTF-8 byte order mark.
TEST_F(CheckpointDamage, DuplicateKeysAndByteOrderMarksAreRejected) {
  std::string header = header_of(tensors_);
  const size_t at = header.find("\"dtype\":\"F32\"");
  ASSERT_NE(at, std::string::npos);
  std::string dup = header;
  dup.insert(at, "\"dtype\":\"I32\",");
  write_bytes(file(), file_bytes(dup, data()));
  std::string m = load_error();
  EXPECT_CONTAINS(m, file().string());
  EXPECT_CONTAINS(m, "key 'dtype' appears twice in '");

  write_bytes(file(), file_bytes("\xEF\xBB\xBF" + header, data()));
  m = load_error();
  EXPECT_CONTAINS(m, file().string());
  EXPECT_CONTAINS(m, "byte order mark");

  const std::string cfg = R"({"model_type": "deepseek_v4", "hidden_size": 64, "hidden_size": 128, "num_hidden_layers": 2})";
  m = error_of([&] { mhc::parse_model_config(cfg, "/x/config.json", ""); });
  EXPECT_CONTAINS(m, "/x/config.json");
  EXPECT_CONTAINS(m, "key 'hidden_size' appears twice");
  m = error_of([&] {
    mhc::parse_model_config("\xEF\xBB\xBF{\"model_type\": \"deepseek_v4\", \"hidden_size\": 64, \"num_hidden_layers\": 2}",
                            "/x/config.json", "");
  });
  EXPECT_CONTAINS(m, "byte order mark");

  write_file(file(), tensors_);
  const fs::path index = dir() / "model.safetensors.index.json";
  std::ofstream(index) << R"({"weight_map": {"layers.0.hc_attn_fn": "nope.safetensors", "layers.0.hc_attn_fn": "model.safetensors"}})";
  m = load_error();
  EXPECT_CONTAINS(m, index.string());
  EXPECT_CONTAINS(m, "key 'layers.0.hc_attn_fn' appears twice in 'weight_map'");
}

// Finding 14: a directory that cannot be searched was reported as holding neither file.
TEST_F(CheckpointDamage, UnsearchableDirectoryIsNamed) {
  if (::geteuid() == 0) GTEST_SKIP() << "root searches every directory";
  write_file(file(), tensors_);
  fs::permissions(dir(), fs::perms::owner_read, fs::perm_options::replace);
  const std::string m = error_of([&] { mhc::Checkpoint::open(dir().string()); });
  fs::permissions(dir(), fs::perms::owner_all, fs::perm_options::replace);
  EXPECT_CONTAINS(m, "cannot look inside the directory");
}

}  // namespace

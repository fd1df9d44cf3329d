// tools/checkpoint_model.cpp - HostModel <-> checkpoint directory.
#include "tools/checkpoint_model.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mhc/error.hpp"
#include "src/core/bf16.hpp"

namespace mhc::tools {

namespace fs = std::filesystem;
using nlohmann::json;

CheckpointModel load_checkpoint_model(const std::string& path, const std::string& force_preset, int32_t max_layers) {
  const Checkpoint ckpt = Checkpoint::open(path);
  CheckpointModel out;
  out.config = read_model_config(ckpt.directory(), force_preset);
  LoadOptions options;
  options.max_layers = max_layers;
  ModelWeights w = load_model_weights(ckpt, out.config, options);
  out.scheme = w.scheme;
  out.files = ckpt.files();
  out.mtp_blocks = static_cast<int32_t>(w.mtp.size());

  HostModel& m = out.model;
  m.config = out.config.config;
  m.mode = out.config.mode;
  m.head = out.config.head;
  m.layers = static_cast<int32_t>(w.layers.size());
  for (LayerWeights& lw : w.layers) {
    m.attn.push_back(HostBlock{std::move(lw.attn.fn), std::move(lw.attn.scale), std::move(lw.attn.base)});
    m.ffn.push_back(HostBlock{std::move(lw.ffn.fn), std::move(lw.ffn.scale), std::move(lw.ffn.base)});
    m.attn_norm.push_back(std::move(lw.attn_norm));
    m.ffn_norm.push_back(std::move(lw.ffn_norm));
  }
  m.head_block = HostBlock{std::move(w.head.fn), std::move(w.head.scale), std::move(w.head.base)};
  m.final_norm = std::move(w.final_norm);
  return out;
}

namespace {

struct PendingTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

PendingTensor f32_tensor(const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape,
                         const std::string& dtype) {
  PendingTensor t{name, dtype, std::move(shape), {}};
  if (dtype == "F32") {
    t.bytes.resize(v.size() * 4);
    if (!v.empty()) std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  } else {
    MHC_CHECK(dtype == "BF16", "write_checkpoint: fn dtype must be F32 or BF16, got ", dtype);
    t.bytes.resize(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t b = detail::float_to_bf16(v[i]);
      std::memcpy(t.bytes.data() + 2 * i, &b, 2);
    }
  }
  return t;
}

PendingTensor bf16_tensor(const std::string& name, const std::vector<uint16_t>& v, std::vector<int64_t> shape,
                          const std::string& dtype) {
  PendingTensor t{name, dtype, std::move(shape), {}};
  if (dtype == "BF16") {
    t.bytes.resize(v.size() * 2);
    if (!v.empty()) std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  } else {
    MHC_CHECK(dtype == "F32", "write_checkpoint: norm dtype must be BF16 or F32, got ", dtype);
    t.bytes.resize(v.size() * 4);
    for (size_t i = 0; i < v.size(); ++i) {
      const float f = detail::bf16_to_float(v[i]);
      std::memcpy(t.bytes.data() + 4 * i, &f, 4);
    }
  }
  return t;
}

void write_safetensors(const std::string& path, const std::vector<const PendingTensor*>& tensors) {
  json header = json::object();
  uint64_t offset = 0;
  for (const PendingTensor* t : tensors) {
    header[t->name] = {{"dtype", t->dtype}, {"shape", t->shape}, {"data_offsets", {offset, offset + t->bytes.size()}}};
    offset += t->bytes.size();
  }
  header["__metadata__"] = {{"format", "pt"}, {"writer", "mhc write_checkpoint"}};
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');  // keep the data region 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  MHC_CHECK(out.good(), path, ": cannot create");
  const uint64_t len = text.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const PendingTensor* t : tensors) {
    out.write(reinterpret_cast<const char*>(t->bytes.data()), static_cast<std::streamsize>(t->bytes.size()));
  }
  out.close();
  MHC_CHECK(out.good(), path, ": write failed");
}

// The shortest decimal that reads back as `v` (config.json then shows 1e-06, not 9.99999997e-07).
double shortest_decimal(float v) {
  char buf[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return std::strtod(buf, nullptr);
}

}  // namespace

void write_checkpoint(const std::string& dir, const HostModel& model, const WriteOptions& options) {
  const Config& c = model.config;
  MHC_CHECK(options.shards >= 1, "write_checkpoint: shards must be >= 1, got ", options.shards);
  MHC_CHECK(model.layers >= 1, "write_checkpoint: the model has no layers");
  std::string model_type;
  if (model.mode == Mode::kNormal && model.head == HeadKind::kLearned) model_type = "deepseek_v4";
  if (model.mode == Mode::kShifted && model.head == HeadKind::kCarried) model_type = "deepseek_v4_1";
  if (model.mode == Mode::kNormal && model.head == HeadKind::kMean) model_type = "glm5_next";
  MHC_CHECK(!model_type.empty(), "write_checkpoint: no model_type has mode ", to_string(model.mode), " with a ",
            to_string(model.head), " head");
  std::error_code ec;
  fs::create_directories(dir, ec);
  MHC_CHECK(fs::is_directory(dir), dir, ": cannot create the directory: ", ec.message());

  const NamingScheme s = options.scheme;
  const std::vector<int64_t> fn_shape{c.M(), c.K()}, base_shape{c.M()}, norm_shape{c.H};
  std::vector<PendingTensor> tensors;
  {
    // A tensor mhc does not read, as every real checkpoint has thousands of.
    std::vector<uint16_t> embed(static_cast<size_t>(8 * c.H), detail::float_to_bf16(0.25f));
    tensors.push_back(bf16_tensor(s == NamingScheme::kHuggingFace ? "model.embed_tokens.weight" : "embed.weight",
                                  embed, {8, c.H}, "BF16"));
  }
  auto add_layer = [&](TensorScope scope, int32_t index, int32_t l) {
    auto name = [&](TensorRole r) { return tensor_name(s, scope, index, r); };
    tensors.push_back(f32_tensor(name(TensorRole::kAttnFn), model.attn[l].fn, fn_shape, options.fn_dtype));
    tensors.push_back(f32_tensor(name(TensorRole::kAttnScale), model.attn[l].scale, {3}, options.fn_dtype));
    tensors.push_back(f32_tensor(name(TensorRole::kAttnBase), model.attn[l].base, base_shape, options.fn_dtype));
    tensors.push_back(f32_tensor(name(TensorRole::kFfnFn), model.ffn[l].fn, fn_shape, options.fn_dtype));
    tensors.push_back(f32_tensor(name(TensorRole::kFfnScale), model.ffn[l].scale, {3}, options.fn_dtype));
    tensors.push_back(f32_tensor(name(TensorRole::kFfnBase), model.ffn[l].base, base_shape, options.fn_dtype));
    tensors.push_back(bf16_tensor(name(TensorRole::kAttnNorm), model.attn_norm[l], norm_shape, options.norm_dtype));
    tensors.push_back(bf16_tensor(name(TensorRole::kFfnNorm), model.ffn_norm[l], norm_shape, options.norm_dtype));
  };
  auto add_head = [&](TensorScope scope, int32_t index) {
    tensors.push_back(f32_tensor(tensor_name(s, scope, index, TensorRole::kHeadFn), model.head_block.fn, {c.n, c.K()},
                                 options.fn_dtype));
    tensors.push_back(f32_tensor(tensor_name(s, scope, index, TensorRole::kHeadScale), model.head_block.scale, {1},
                                 options.fn_dtype));
    tensors.push_back(f32_tensor(tensor_name(s, scope, index, TensorRole::kHeadBase), model.head_block.base, {c.n},
                                 options.fn_dtype));
  };
  for (int32_t l = 0; l < model.layers; ++l) add_layer(TensorScope::kLayer, l, l);
  if (model.head == HeadKind::kLearned) add_head(TensorScope::kTop, 0);
  tensors.push_back(bf16_tensor(tensor_name(s, TensorScope::kTop, 0, TensorRole::kFinalNorm), model.final_norm,
                                norm_shape, options.norm_dtype));
  for (int32_t i = 0; i < options.mtp; ++i) {
    add_layer(TensorScope::kMtp, i, i % model.layers);
    if (model.head == HeadKind::kLearned) add_head(TensorScope::kMtp, i);
    tensors.push_back(bf16_tensor(tensor_name(s, TensorScope::kMtp, i, TensorRole::kFinalNorm), model.final_norm,
                                  norm_shape, options.norm_dtype));
  }

  // Files: contiguous runs of the tensor list.
  const size_t shards = static_cast<size_t>(options.shards);
  MHC_CHECK(shards <= tensors.size(), "write_checkpoint: ", shards, " shards for ", tensors.size(), " tensors");
  json weight_map = json::object();
  for (size_t k = 0; k < shards; ++k) {
    const size_t lo = tensors.size() * k / shards, hi = tensors.size() * (k + 1) / shards;
    std::vector<const PendingTensor*> part;
    for (size_t i = lo; i < hi; ++i) part.push_back(&tensors[i]);
    char file[64];
    if (shards == 1) {
      std::snprintf(file, sizeof file, "model.safetensors");
    } else {
      std::snprintf(file, sizeof file, "model-%05zu-of-%05zu.safetensors", k + 1, shards);
    }
    write_safetensors((fs::path(dir) / file).string(), part);
    for (const PendingTensor* t : part) weight_map[t->name] = file;
  }
  if (shards > 1) {
    uint64_t total = 0;
    for (const PendingTensor& t : tensors) total += t.bytes.size();
    const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    std::ofstream out((fs::path(dir) / "model.safetensors.index.json").string(), std::ios::trunc);
    out << index.dump(2) << "\n";
    MHC_CHECK(out.good(), dir, "/model.safetensors.index.json: write failed");
  }

  json config = {
      {"model_type", model_type},
      {"hidden_size", c.H},
      {"num_hidden_layers", model.layers},
      {"hc_mult", c.n},
      {"hc_eps", shortest_decimal(c.pre_eps)},
      {"hc_sinkhorn_iters", c.sinkhorn_iters},
      {"rms_norm_eps", shortest_decimal(c.norm_eps)},
      {"num_nextn_predict_layers", options.mtp},
  };
  std::ofstream out((fs::path(dir) / "config.json").string(), std::ios::trunc);
  out << config.dump(2) << "\n";
  MHC_CHECK(out.good(), dir, "/config.json: write failed");
}

}  // namespace mhc::tools

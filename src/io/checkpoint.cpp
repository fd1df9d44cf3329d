// src/io/checkpoint.cpp - the mHC tensors of a checkpoint: naming table, shard index, checks,
// dtype conversion and loading.
#include "mhc/checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "mhc/error.hpp"
#include "src/core/bf16.hpp"
#include "src/io/json_input.hpp"
#include "src/io/safetensors.hpp"

namespace mhc {

namespace fs = std::filesystem;
using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// The naming table. Full name = scope prefix + role suffix.
//
//   role         DeepSeek suffix    Hugging Face suffix
//   attn fn      hc_attn_fn         attn_hc.fn
//   attn scale   hc_attn_scale      attn_hc.scale
//   attn base    hc_attn_base       attn_hc.base
//   ffn fn       hc_ffn_fn          ffn_hc.fn
//   ffn scale    hc_ffn_scale       ffn_hc.scale
//   ffn base     hc_ffn_base        ffn_hc.base
//   attn norm    attn_norm.weight   input_layernorm.weight
//   ffn norm     ffn_norm.weight    post_attention_layernorm.weight
//   head fn      hc_head_fn         hc_head.fn
//   head scale   hc_head_scale      hc_head.scale
//   head base    hc_head_base       hc_head.base
//   final norm   norm.weight        norm.weight
//
//   scope        DeepSeek prefix    Hugging Face prefix
//   layer i      layers.{i}.        model.layers.{i}.
//   top          (none)             model.
//   mtp i        mtp.{i}.           model.mtp.{i}.
// ---------------------------------------------------------------------------------------------
namespace {

struct RoleRow {
  TensorRole role;
  const char* label;
  const char* deepseek;
  const char* hf;
  bool layer_role;  // true: in a layer (and MTP); false: top level (and MTP)
};

constexpr RoleRow kRoles[] = {
    {TensorRole::kAttnFn, "attn fn", "hc_attn_fn", "attn_hc.fn", true},
    {TensorRole::kAttnScale, "attn scale", "hc_attn_scale", "attn_hc.scale", true},
    {TensorRole::kAttnBase, "attn base", "hc_attn_base", "attn_hc.base", true},
    {TensorRole::kFfnFn, "ffn fn", "hc_ffn_fn", "ffn_hc.fn", true},
    {TensorRole::kFfnScale, "ffn scale", "hc_ffn_scale", "ffn_hc.scale", true},
    {TensorRole::kFfnBase, "ffn base", "hc_ffn_base", "ffn_hc.base", true},
    {TensorRole::kAttnNorm, "attn norm", "attn_norm.weight", "input_layernorm.weight", true},
    {TensorRole::kFfnNorm, "ffn norm", "ffn_norm.weight", "post_attention_layernorm.weight", true},
    {TensorRole::kHeadFn, "head fn", "hc_head_fn", "hc_head.fn", false},
    {TensorRole::kHeadScale, "head scale", "hc_head_scale", "hc_head.scale", false},
    {TensorRole::kHeadBase, "head base", "hc_head_base", "hc_head.base", false},
    {TensorRole::kFinalNorm, "final norm", "norm.weight", "norm.weight", false},
};

const RoleRow& role_row(TensorRole r) {
  for (const RoleRow& row : kRoles) {
    if (row.role == r) return row;
  }
  MHC_FAIL("unknown tensor role ", static_cast<int>(r));
}

std::string scope_prefix(NamingScheme scheme, TensorScope scope, int32_t index) {
  const bool hf = scheme == NamingScheme::kHuggingFace;
  switch (scope) {
    case TensorScope::kLayer: return (hf ? "model.layers." : "layers.") + std::to_string(index) + ".";
    case TensorScope::kTop: return hf ? "model." : "";
    case TensorScope::kMtp: return (hf ? "model.mtp." : "mtp.") + std::to_string(index) + ".";
  }
  return "";
}

constexpr TensorRole kLayerRoles[] = {TensorRole::kAttnFn,   TensorRole::kAttnScale, TensorRole::kAttnBase,
                                      TensorRole::kFfnFn,    TensorRole::kFfnScale,  TensorRole::kFfnBase,
                                      TensorRole::kAttnNorm, TensorRole::kFfnNorm};
constexpr TensorRole kHeadRoles[] = {TensorRole::kHeadFn, TensorRole::kHeadScale, TensorRole::kHeadBase};

bool is_norm(TensorRole r) {
  return r == TensorRole::kAttnNorm || r == TensorRole::kFfnNorm || r == TensorRole::kFinalNorm;
}

// "12." at `pos` of `name` -> 12 and the position after the dot; false otherwise.
bool parse_index(const std::string& name, size_t pos, int32_t* index, size_t* after) {
  size_t i = pos;
  int64_t v = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9' && i - pos < 9) v = v * 10 + (name[i++] - '0');
  if (i == pos || i >= name.size() || name[i] != '.') return false;
  if (name[pos] == '0' && i - pos > 1) return false;  // "01" is not how any writer spells 1
  *index = static_cast<int32_t>(v);
  *after = i + 1;
  return true;
}

// The index i when `name` is an mHC tensor of scope `scope` (layer or MTP) in `scheme`.
bool mhc_index_of(const std::string& name, NamingScheme scheme, TensorScope scope, int32_t* index) {
  const std::string prefix = scope_prefix(scheme, scope, 0);
  const std::string stem = prefix.substr(0, prefix.size() - 2);  // "layers." / "model.mtp." ...
  size_t after = 0;
  if (name.compare(0, stem.size(), stem) != 0 || !parse_index(name, stem.size(), index, &after)) return false;
  const std::string suffix = name.substr(after);
  for (const RoleRow& row : kRoles) {
    if (scope == TensorScope::kLayer && !row.layer_role) continue;
    if (suffix == (scheme == NamingScheme::kHuggingFace ? row.hf : row.deepseek)) return true;
  }
  return false;
}

// fp16 bits -> float, exactly.
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t word = 0;
  if (exp == 0x1f) {
    word = sign | 0x7f800000u | (mant << 13);  // inf / NaN (payload kept)
  } else if (exp != 0) {
    word = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    word = sign;
  } else {
    // Subnormal: value = mant * 2^-24, exact in fp32.
    float f = std::ldexp(static_cast<float>(mant), -24);
    if (sign) f = -f;
    return f;
  }
  float f;
  std::memcpy(&f, &word, sizeof f);
  return f;
}

template <typename T>
T load_unaligned(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}


}  // namespace

std::vector<std::pair<std::string, std::string>> io::parse_index_json(const std::string& text,
                                                                      const std::string& source) {
  const json index = io::parse_untrusted_json(text, source, "index JSON");
  MHC_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(), source,
            ": invalid index: expected an object with a \"weight_map\" object");
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& item : index["weight_map"].items()) {
    const std::string& name = item.key();
    MHC_CHECK(item.value().is_string(), source, ": tensor '", name, "': shard must be a file name, got ",
              io::describe(item.value()));
    const std::string shard = item.value().get<std::string>();
    const fs::path sp(shard);
    bool escapes = shard.empty() || sp.is_absolute();
    for (const auto& part : sp) escapes = escapes || part == "..";
    MHC_CHECK(!escapes, source, ": tensor '", name, "': shard '", shard,
              "' must be a relative path inside the checkpoint directory");
    out.emplace_back(name, shard);
  }
  return out;
}

const char* to_string(NamingScheme s) { return s == NamingScheme::kHuggingFace ? "hf" : "deepseek"; }

const char* to_string(TensorRole r) { return role_row(r).label; }

std::string tensor_name(NamingScheme scheme, TensorScope scope, int32_t index, TensorRole role) {
  const RoleRow& row = role_row(role);
  MHC_CHECK(scope != TensorScope::kLayer || row.layer_role, "tensor_name: ", row.label, " is not a layer tensor");
  MHC_CHECK(scope != TensorScope::kTop || !row.layer_role, "tensor_name: ", row.label, " is not a top-level tensor");
  return scope_prefix(scheme, scope, index) + (scheme == NamingScheme::kHuggingFace ? row.hf : row.deepseek);
}

// ---------------------------------------------------------------------------------------------
// Checkpoint
// ---------------------------------------------------------------------------------------------

struct Checkpoint::Impl {
  std::string directory;
  std::string index_file;                         // "" for a single file
  std::vector<std::string> files;                 // full paths
  std::vector<std::string> names;                 // sorted
  std::map<std::string, size_t> file_of;          // tensor -> index into files
  mutable std::vector<std::unique_ptr<io::SafetensorsFile>> opened;  // lazily, per file

  // The file whose absence of a tensor is reported: the index, or the single file.
  const std::string& listing() const { return index_file.empty() ? files.front() : index_file; }

  const io::SafetensorsFile& file(size_t i) const {
    if (!opened[i]) opened[i] = std::make_unique<io::SafetensorsFile>(files[i]);
    return *opened[i];
  }

  // The file and header entry of `name`; throws naming the file and tensor.
  std::pair<const io::SafetensorsFile*, const io::SafetensorsEntry*> locate(const std::string& name) const {
    auto it = file_of.find(name);
    MHC_CHECK(it != file_of.end(), listing(), ": tensor '", name, "' is missing");
    const io::SafetensorsFile& f = file(it->second);
    const io::SafetensorsEntry* e = f.find(name);
    MHC_CHECK(e != nullptr, f.path(), ": tensor '", name, "' is missing from this shard, but ", index_file,
              " places it here");
    return {&f, e};
  }
};

Checkpoint Checkpoint::open(const std::string& path) {
  auto impl = std::make_shared<Impl>();
  std::error_code ec;
  MHC_CHECK(fs::exists(path, ec), path, ": no such file or directory");
  std::string single;
  if (fs::is_directory(path, ec)) {
    impl->directory = path;
    const fs::path index = fs::path(path) / "model.safetensors.index.json";
    const fs::path file = fs::path(path) / "model.safetensors";
    const bool has_index = fs::exists(index, ec);
    MHC_CHECK(!ec, path, ": cannot look inside the directory: ", ec.message());
    const bool has_file = !has_index && fs::exists(file, ec);
    MHC_CHECK(!ec, path, ": cannot look inside the directory: ", ec.message());
    if (has_index) {
      impl->index_file = index.string();
    } else if (has_file) {
      single = file.string();
    } else {
      MHC_FAIL(path, ": found neither model.safetensors.index.json nor model.safetensors");
    }
  } else {
    const fs::path p(path);
    impl->directory = p.has_parent_path() ? p.parent_path().string() : ".";
    if (p.extension() == ".json") {
      impl->index_file = path;
    } else {
      single = path;
    }
  }

  if (!single.empty()) {
    impl->files.push_back(single);
    impl->opened.resize(1);
    const io::SafetensorsFile& f = impl->file(0);
    for (const auto& kv : f.entries()) {
      impl->names.push_back(kv.first);
      impl->file_of[kv.first] = 0;
    }
  } else {
    const std::string& index_path = impl->index_file;
    std::map<std::string, size_t> shard_ids;
    std::vector<std::string> first_tensor;  // a tensor of each shard, for messages
    for (const auto& [name, shard] : io::parse_index_json(io::read_regular_file(index_path, kMaxJsonFileBytes, "index"),
                                                      index_path)) {
      const fs::path sp(shard);
      auto it = shard_ids.find(shard);
      if (it == shard_ids.end()) {
        it = shard_ids.emplace(shard, impl->files.size()).first;
        impl->files.push_back((fs::path(impl->directory) / sp).string());
        first_tensor.push_back(name);
      }
      impl->names.push_back(name);
      impl->file_of[name] = it->second;
    }
    MHC_CHECK(!impl->files.empty(), index_path, ": the weight_map is empty");
    for (size_t i = 0; i < impl->files.size(); ++i) {
      MHC_CHECK(fs::is_regular_file(impl->files[i], ec), index_path, ": shard '", impl->files[i],
                "' (holding tensor '", first_tensor[i], "') does not exist");
    }
    impl->opened.resize(impl->files.size());
  }
  std::sort(impl->names.begin(), impl->names.end());
  Checkpoint c;
  c.impl_ = std::move(impl);
  return c;
}

const std::string& Checkpoint::directory() const { return impl_->directory; }
const std::string& Checkpoint::index_file() const { return impl_->index_file; }
const std::vector<std::string>& Checkpoint::files() const { return impl_->files; }
const std::vector<std::string>& Checkpoint::tensor_names() const { return impl_->names; }
bool Checkpoint::contains(const std::string& name) const { return impl_->file_of.count(name) != 0; }

TensorInfo Checkpoint::info(const std::string& name) const {
  const auto [f, e] = impl_->locate(name);
  TensorInfo t;
  t.name = name;
  t.file = f->path();
  t.dtype = e->dtype;
  t.shape = e->shape;
  t.nbytes = e->end - e->begin;
  return t;
}

std::vector<float> Checkpoint::read_f32(const std::string& name, const std::vector<int64_t>& shape) const {
  const auto [f, e] = impl_->locate(name);
  MHC_CHECK(e->shape == shape, f->path(), ": tensor '", name, "': shape ", io::shape_text(e->shape), ", expected ",
            io::shape_text(shape));
  const size_t count = static_cast<size_t>(e->end - e->begin) / std::max(1, io::safetensors_dtype_size(e->dtype));
  MHC_CHECK(e->dtype == "F32" || e->dtype == "BF16" || e->dtype == "F16", f->path(), ": tensor '", name, "': dtype ",
            e->dtype, " cannot be read as fp32 (expected F32, BF16 or F16)");
  const std::vector<uint8_t> bytes = f->bytes(*e);
  const uint8_t* p = bytes.data();
  std::vector<float> out(count);
  if (e->dtype == "F32") {
    if (count) std::memcpy(out.data(), p, count * 4);
  } else if (e->dtype == "BF16") {
    for (size_t i = 0; i < count; ++i) out[i] = detail::bf16_to_float(load_unaligned<uint16_t>(p + 2 * i));
  } else if (e->dtype == "F16") {
    for (size_t i = 0; i < count; ++i) out[i] = half_to_float(load_unaligned<uint16_t>(p + 2 * i));
  } else {
    MHC_FAIL(f->path(), ": tensor '", name, "': dtype ", e->dtype, " cannot be read as fp32 (expected F32, BF16 or F16)");
  }
  return out;
}

std::vector<uint16_t> Checkpoint::read_bf16(const std::string& name, const std::vector<int64_t>& shape) const {
  const auto [f, e] = impl_->locate(name);
  MHC_CHECK(e->shape == shape, f->path(), ": tensor '", name, "': shape ", io::shape_text(e->shape), ", expected ",
            io::shape_text(shape));
  const size_t count = static_cast<size_t>(e->end - e->begin) / std::max(1, io::safetensors_dtype_size(e->dtype));
  MHC_CHECK(e->dtype == "BF16" || e->dtype == "F32" || e->dtype == "F16", f->path(), ": tensor '", name, "': dtype ",
            e->dtype, " cannot be read as bf16 (expected BF16, F32 or F16)");
  const std::vector<uint8_t> bytes = f->bytes(*e);
  const uint8_t* p = bytes.data();
  std::vector<uint16_t> out(count);
  if (e->dtype == "BF16") {
    if (count) std::memcpy(out.data(), p, count * 2);
  } else if (e->dtype == "F32") {
    for (size_t i = 0; i < count; ++i) out[i] = detail::float_to_bf16(load_unaligned<float>(p + 4 * i));
  } else if (e->dtype == "F16") {
    for (size_t i = 0; i < count; ++i) out[i] = detail::float_to_bf16(half_to_float(load_unaligned<uint16_t>(p + 2 * i)));
  } else {
    MHC_FAIL(f->path(), ": tensor '", name, "': dtype ", e->dtype, " cannot be read as bf16 (expected BF16, F32 or F16)");
  }
  return out;
}

NamingScheme Checkpoint::scheme() const {
  const std::string ds = tensor_name(NamingScheme::kDeepSeek, TensorScope::kLayer, 0, TensorRole::kAttnFn);
  const std::string hf = tensor_name(NamingScheme::kHuggingFace, TensorScope::kLayer, 0, TensorRole::kAttnFn);
  const bool has_ds = contains(ds), has_hf = contains(hf);
  MHC_CHECK(!(has_ds && has_hf), impl_->listing(), ": both naming schemes are present ('", ds, "' and '", hf,
            "'); refusing to guess");
  MHC_CHECK(has_ds || has_hf, impl_->listing(), ": no mHC tensors: neither '", ds, "' (DeepSeek naming) nor '", hf,
            "' (Hugging Face naming) is present among ", impl_->names.size(), " tensors");
  return has_hf ? NamingScheme::kHuggingFace : NamingScheme::kDeepSeek;
}

std::vector<int32_t> Checkpoint::mtp_indices(NamingScheme scheme) const {
  std::set<int32_t> found;
  for (const std::string& name : impl_->names) {
    int32_t i = 0;
    if (mhc_index_of(name, scheme, TensorScope::kMtp, &i)) found.insert(i);
  }
  return {found.begin(), found.end()};
}

// ---------------------------------------------------------------------------------------------
// Checks and loading
// ---------------------------------------------------------------------------------------------

int CheckpointReport::problems() const {
  int count = 0;
  for (const TensorCheck& t : tensors) count += t.problem.empty() ? 0 : 1;
  return count;
}

namespace {

std::vector<int64_t> expected_shape(TensorRole r, const Config& c) {
  switch (r) {
    case TensorRole::kAttnFn:
    case TensorRole::kFfnFn: return {c.M(), c.K()};
    case TensorRole::kAttnScale:
    case TensorRole::kFfnScale: return {3};
    case TensorRole::kAttnBase:
    case TensorRole::kFfnBase: return {c.M()};
    case TensorRole::kAttnNorm:
    case TensorRole::kFfnNorm:
    case TensorRole::kFinalNorm: return {c.H};
    case TensorRole::kHeadFn: return {c.n, c.K()};
    case TensorRole::kHeadScale: return {1};
    case TensorRole::kHeadBase: return {c.n};
  }
  return {};
}

// What the expected shape is made of, for messages.
std::string shape_meaning(TensorRole r, const Config& c) {
  std::ostringstream os;
  switch (r) {
    case TensorRole::kAttnFn:
    case TensorRole::kFfnFn: os << "[M, K] with M = (n+2)*n = " << c.M() << ", K = n*H = " << c.K(); break;
    case TensorRole::kAttnBase:
    case TensorRole::kFfnBase: os << "[M] with M = (n+2)*n = " << c.M(); break;
    case TensorRole::kAttnNorm:
    case TensorRole::kFfnNorm:
    case TensorRole::kFinalNorm: os << "[H] with H = " << c.H; break;
    case TensorRole::kHeadFn: os << "[n, K] with n = " << c.n << ", K = n*H = " << c.K(); break;
    case TensorRole::kHeadBase: os << "[n] with n = " << c.n; break;
    case TensorRole::kAttnScale:
    case TensorRole::kFfnScale: os << "alpha_pre, alpha_post, alpha_comb"; break;
    case TensorRole::kHeadScale: os << "alpha_head"; break;
  }
  return os.str();
}

class Checker {
 public:
  Checker(const Checkpoint& ckpt, const ModelConfig& mc, CheckpointReport* report)
      : ckpt_(ckpt), mc_(mc), report_(report) {}

  // Adds the entry for one tensor. `required`: the model needs it. `expected`: its absence is a
  // problem (true for required tensors, and for every member of a partly present trio).
  void add(const std::string& group, TensorScope scope, int32_t index, TensorRole role, bool required,
           bool expected) {
    TensorCheck t;
    t.group = group;
    t.role = role;
    t.name = tensor_name(report_->scheme, scope, index, role);
    t.required = required;
    t.expected_shape = expected_shape(role, mc_.config);
    t.present = ckpt_.contains(t.name);
    if (!t.present && !expected) return;
    const std::string what = "tensor '" + t.name + "' (" + group + " " + to_string(role) + ")";
    if (!t.present) {
      const std::string& where = ckpt_.index_file().empty() ? ckpt_.files().front() : ckpt_.index_file();
      t.problem = where + ": " + what + " is missing";
    } else {
      t.info = ckpt_.info(t.name);  // file damage throws here
      const std::string& dt = t.info.dtype;
      const bool dtype_ok = dt == "F32" || dt == "BF16" || dt == "F16";
      std::ostringstream p;
      if (!dtype_ok) {
        p << t.info.file << ": " << what << ": dtype " << dt << ", expected "
          << (is_norm(role) ? "BF16 (F32 and F16 are rounded to bf16)" : "F32 (BF16 and F16 are widened exactly)");
      } else if (t.info.shape != t.expected_shape) {
        p << t.info.file << ": " << what << ": shape " << io::shape_text(t.info.shape) << ", expected "
          << io::shape_text(t.expected_shape) << " (" << shape_meaning(role, mc_.config) << ")";
      }
      t.problem = p.str();
    }
    report_->tensors.push_back(std::move(t));
  }

  // A group of three (fn, scale, base): all required, or all optional unless one is present.
  void add_trio(const std::string& group, TensorScope scope, int32_t index, const TensorRole (&roles)[3],
                bool required) {
    bool any = required;
    for (TensorRole r : roles) any = any || ckpt_.contains(tensor_name(report_->scheme, scope, index, r));
    for (TensorRole r : roles) add(group, scope, index, r, required, any);
  }

 private:
  const Checkpoint& ckpt_;
  const ModelConfig& mc_;
  CheckpointReport* report_;
};

}  // namespace

CheckpointReport check_checkpoint(const Checkpoint& ckpt, const ModelConfig& mc, int32_t max_layers) {
  CheckpointReport report;
  report.scheme = ckpt.scheme();
  report.layers_checked = max_layers >= 0 ? std::min(max_layers, mc.num_layers) : mc.num_layers;
  Checker check(ckpt, mc, &report);

  for (int32_t l = 0; l < report.layers_checked; ++l) {
    for (TensorRole r : kLayerRoles) check.add("layer " + std::to_string(l), TensorScope::kLayer, l, r, true, true);
  }
  check.add_trio("top", TensorScope::kTop, 0, kHeadRoles, mc.head == HeadKind::kLearned);
  check.add("top", TensorScope::kTop, 0, TensorRole::kFinalNorm, true, true);

  report.mtp = ckpt.mtp_indices(report.scheme);
  for (int32_t i : report.mtp) {
    const std::string group = "mtp " + std::to_string(i);
    for (TensorRole r : kLayerRoles) check.add(group, TensorScope::kMtp, i, r, true, true);
    check.add_trio(group, TensorScope::kMtp, i, kHeadRoles, false);
    check.add(group, TensorScope::kMtp, i, TensorRole::kFinalNorm, false, false);
  }

  // Observations.
  if (report.layers_checked < mc.num_layers) {
    report.notes.push_back("checked the first " + std::to_string(report.layers_checked) + " of " +
                           std::to_string(mc.num_layers) + " layers");
  }
  std::set<int32_t> extra;
  for (const std::string& name : ckpt.tensor_names()) {
    int32_t i = 0;
    if (mhc_index_of(name, report.scheme, TensorScope::kLayer, &i) && i >= mc.num_layers) extra.insert(i);
  }
  if (!extra.empty()) {
    report.notes.push_back("layers " + std::to_string(*extra.begin()) + ".." + std::to_string(*extra.rbegin()) +
                           " have mHC tensors beyond num_hidden_layers = " + std::to_string(mc.num_layers) +
                           " (not used)");
  }
  if (static_cast<int32_t>(report.mtp.size()) != mc.mtp_layers) {
    report.notes.push_back("config.json says num_nextn_predict_layers = " + std::to_string(mc.mtp_layers) +
                           "; the checkpoint has mHC tensors for " + std::to_string(report.mtp.size()) +
                           " MTP block(s)");
  }
  if (mc.head != HeadKind::kLearned && ckpt.contains(tensor_name(report.scheme, TensorScope::kTop, 0, TensorRole::kHeadFn))) {
    report.notes.push_back(std::string("the checkpoint has learned-head tensors, but a ") + to_string(mc.head) +
                           " head does not use them");
  }
  return report;
}

ModelWeights load_model_weights(const Checkpoint& ckpt, const ModelConfig& mc, const LoadOptions& options) {
  const CheckpointReport report = check_checkpoint(ckpt, mc, options.max_layers);
  const int problems = report.problems();
  for (const TensorCheck& t : report.tensors) {
    MHC_CHECK(t.problem.empty(), t.problem,
              problems > 1 ? " (and " + std::to_string(problems - 1) + " more problem(s): see mhc inspect)" : "");
  }
  const Config& c = mc.config;
  const NamingScheme s = report.scheme;
  ModelWeights w;
  w.config = mc;
  w.scheme = s;
  auto block = [&](TensorScope scope, int32_t i, TensorRole fn, TensorRole scale, TensorRole base) {
    BlockWeights b;
    b.fn = ckpt.read_f32(tensor_name(s, scope, i, fn), expected_shape(fn, c));
    b.scale = ckpt.read_f32(tensor_name(s, scope, i, scale), expected_shape(scale, c));
    b.base = ckpt.read_f32(tensor_name(s, scope, i, base), expected_shape(base, c));
    return b;
  };
  auto norm = [&](TensorScope scope, int32_t i, TensorRole r) {
    return ckpt.read_bf16(tensor_name(s, scope, i, r), expected_shape(r, c));
  };
  auto layer = [&](TensorScope scope, int32_t i) {
    LayerWeights lw;
    lw.attn = block(scope, i, TensorRole::kAttnFn, TensorRole::kAttnScale, TensorRole::kAttnBase);
    lw.ffn = block(scope, i, TensorRole::kFfnFn, TensorRole::kFfnScale, TensorRole::kFfnBase);
    lw.attn_norm = norm(scope, i, TensorRole::kAttnNorm);
    lw.ffn_norm = norm(scope, i, TensorRole::kFfnNorm);
    return lw;
  };
  for (int32_t l = 0; l < report.layers_checked; ++l) w.layers.push_back(layer(TensorScope::kLayer, l));
  if (mc.head == HeadKind::kLearned) {
    w.head = block(TensorScope::kTop, 0, TensorRole::kHeadFn, TensorRole::kHeadScale, TensorRole::kHeadBase);
  }
  w.final_norm = norm(TensorScope::kTop, 0, TensorRole::kFinalNorm);
  if (options.mtp) {
    for (int32_t i : report.mtp) {
      MtpWeights m;
      m.index = i;
      m.layer = layer(TensorScope::kMtp, i);
      if (ckpt.contains(tensor_name(s, TensorScope::kMtp, i, TensorRole::kHeadFn))) {
        m.head = block(TensorScope::kMtp, i, TensorRole::kHeadFn, TensorRole::kHeadScale, TensorRole::kHeadBase);
      }
      if (ckpt.contains(tensor_name(s, TensorScope::kMtp, i, TensorRole::kFinalNorm))) {
        m.norm = norm(TensorScope::kMtp, i, TensorRole::kFinalNorm);
      }
      w.mtp.push_back(std::move(m));
    }
  }
  return w;
}

}  // namespace mhc

// tools/cmd_inspect.cpp - `mhc inspect PATH`: the mHC tensors of a checkpoint, checked against
// its config.json; and `mhc inspect --write-example-checkpoint DIR`, a small synthetic one.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "mhc/checkpoint.hpp"
#include "mhc/error.hpp"
#include "src/core/bf16.hpp"
#include "tools/checkpoint_model.hpp"
#include "tools/cli.hpp"
#include "tools/model.hpp"

namespace mhc::cli {

namespace {

const char* kInspectHelp =
    "usage: mhc inspect PATH [--model NAME] [--values]\n"
    "       mhc inspect --write-example-checkpoint DIR [--model NAME] [--hidden H] [--layers N]\n"
    "                   [--scheme deepseek|hf] [--shards N] [--fn-dtype F32|BF16] [--mtp N] [--seed S]\n"
    "\n"
    "Lists the mHC tensors of a checkpoint (PATH: a directory with config.json and\n"
    "model.safetensors or model.safetensors.index.json + shards; or the index / .safetensors\n"
    "file itself) per layer, with dtype, shape and file, and checks them against config.json:\n"
    "fn [M, K], scale [3], base [M], RMSNorm weights [H], learned head fn [n, K], scale [1],\n"
    "base [n], with M = (n+2)*n and K = n*H. MTP blocks (mtp.{i}.*) are listed when present.\n"
    "Exits with status 1 when anything is missing, mistyped or misshapen, or the files are\n"
    "damaged. docs/checkpoints.md describes the names, the model_type mapping and the dtypes.\n"
    "\n"
    "options:\n"
    "  --model NAME   force a preset's mode and head (and its defaults for missing scalars)\n"
    "                 instead of mapping config.json's model_type\n"
    "  --values       also read every listed tensor and report non-finite values (and min/max)\n"
    "\n"
    "--write-example-checkpoint DIR writes seeded synthetic weights (as mhc run uses) as a\n"
    "checkpoint into DIR, then inspects it:\n"
    "  --model NAME   preset for n, eps, mode and head (default deepseek-v4-flash)\n"
    "  --hidden H     hidden size (default 64)\n"
    "  --layers N     layers (default 2)\n"
    "  --scheme S     deepseek (default) or hf tensor names\n"
    "  --shards N     1 (default): model.safetensors; more: an index and N shards\n"
    "  --fn-dtype D   storage of fn/scale/base: F32 (default) or BF16\n"
    "  --mtp N        MTP blocks to add (default 1)\n"
    "  --seed S       seed of the weights (default 1)\n";

std::string file_label(const std::string& file, const std::string& dir) {
  std::error_code ec;
  const std::string rel = std::filesystem::relative(file, dir, ec).string();
  return ec || rel.empty() ? file : rel;
}

// Non-finite count and range of a tensor, read through the converting readers.
struct ValueStats {
  int64_t non_finite = 0;
  double lo = INFINITY, hi = -INFINITY;
};

template <typename Vec, typename ToFloat>
ValueStats stats_of(const Vec& v, ToFloat to_float) {
  ValueStats s;
  for (const auto& x : v) {
    const double d = to_float(x);
    if (!std::isfinite(d)) {
      ++s.non_finite;
      continue;
    }
    s.lo = d < s.lo ? d : s.lo;
    s.hi = d > s.hi ? d : s.hi;
  }
  return s;
}

bool is_norm_role(TensorRole r) {
  return r == TensorRole::kAttnNorm || r == TensorRole::kFfnNorm || r == TensorRole::kFinalNorm;
}

int inspect(const std::string& path, const std::string& force, bool values) {
  const Checkpoint ckpt = Checkpoint::open(path);
  const ModelConfig mc = read_model_config(ckpt.directory(), force);
  const Config& c = mc.config;
  const std::string& dir = ckpt.directory();

  std::printf("checkpoint: %s\n", path.c_str());
  if (ckpt.index_file().empty()) {
    std::printf("  file:     %s (%zu tensors)\n", file_label(ckpt.files().front(), dir).c_str(),
                ckpt.tensor_names().size());
  } else {
    std::printf("  index:    %s (%zu tensors in %zu shards)\n", file_label(ckpt.index_file(), dir).c_str(),
                ckpt.tensor_names().size(), ckpt.files().size());
  }
  std::printf("  config:   %s: model_type '%s' -> mode %s, head %s (%s %s)\n", mc.source.c_str(),
              mc.model_type.c_str(), to_string(mc.mode), to_string(mc.head), mc.forced ? "forced preset" : "family",
              mc.family.c_str());
  std::printf("            n=%d H=%lld K=n*H=%lld M=(n+2)*n=%d, %d layers, num_nextn_predict_layers %d\n", c.n,
              static_cast<long long>(c.H), static_cast<long long>(c.K()), c.M(), mc.num_layers, mc.mtp_layers);
  std::printf("            norm_eps=%g pre_eps=%g sinkhorn_eps=%g sinkhorn_iters=%d post_scale=%g rmsnorm_eps=%g\n",
              c.norm_eps, c.pre_eps, c.sinkhorn_eps, c.sinkhorn_iters, c.post_scale, c.rmsnorm_eps);
  if (!mc.defaulted.empty()) {
    std::string keys;
    for (const std::string& k : mc.defaulted) keys += (keys.empty() ? "" : ", ") + k;
    std::printf("            absent from config.json, taken from %s: %s\n", mc.family.c_str(), keys.c_str());
  }

  CheckpointReport report = check_checkpoint(ckpt, mc);
  std::printf("  naming:   %s\n", to_string(report.scheme));

  int value_problems = 0;
  std::string group;
  for (TensorCheck& t : report.tensors) {
    if (t.group != group) {
      group = t.group;
      std::printf("\n%s\n", group.c_str());
    }
    std::string status = t.problem.empty() ? "ok" : "PROBLEM";
    std::string range;
    if (values && t.present && t.problem.empty()) {
      ValueStats s;
      if (is_norm_role(t.role)) {
        s = stats_of(ckpt.read_bf16(t.name, t.expected_shape), [](uint16_t b) { return detail::bf16_to_float(b); });
      } else {
        s = stats_of(ckpt.read_f32(t.name, t.expected_shape), [](float f) { return static_cast<double>(f); });
      }
      char buf[96];
      std::snprintf(buf, sizeof buf, "  [%.4g, %.4g]", s.lo, s.hi);
      range = buf;
      if (s.non_finite > 0) {
        t.problem = t.info.file + ": tensor '" + t.name + "': " + std::to_string(s.non_finite) + " non-finite value(s)";
        status = "PROBLEM";
        ++value_problems;
      }
    }
    std::string shape = "-";
    if (t.present) {
      shape = "[";
      for (size_t i = 0; i < t.info.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(t.info.shape[i]);
      shape += "]";
    }
    std::printf("  %-11s %-44s %-5s %-12s %-34s %s%s%s\n", to_string(t.role), t.name.c_str(),
                t.present ? t.info.dtype.c_str() : "-", shape.c_str(),
                t.present ? file_label(t.info.file, dir).c_str() : "(missing)", status.c_str(), range.c_str(),
                t.required ? "" : "  (optional)");
  }
  if (report.mtp.empty()) std::printf("\nmtp: no MTP blocks with mHC tensors\n");

  if (!report.notes.empty()) {
    std::printf("\nnotes:\n");
    for (const std::string& n : report.notes) std::printf("  - %s\n", n.c_str());
  }
  const int problems = report.problems();
  if (problems == 0) {
    std::printf("\nOK: %zu mHC tensors checked (%d layers, %zu MTP blocks), no problems\n", report.tensors.size(),
                report.layers_checked, report.mtp.size());
    return 0;
  }
  std::printf("\n%d problem(s):\n", problems);
  for (const TensorCheck& t : report.tensors) {
    if (!t.problem.empty()) std::printf("  - %s\n", t.problem.c_str());
  }
  return 1;
}

}  // namespace

int cmd_inspect(Args& args) {
  if (args.has("help")) {
    std::fputs(kInspectHelp, stdout);
    return 0;
  }
  const std::string force = args.get("model", "");
  // The flag parser gives a bare flag the next word as its value: `--values PATH` is a flag
  // followed by the path.
  std::string values_word = args.get("values", "");
  const bool values = !values_word.empty();
  if (values_word == "1") values_word.clear();
  const std::string example_dir = args.get("write-example-checkpoint", "");
  if (!example_dir.empty()) {
    const long long hidden = args.get_int("hidden", 64);
    const long long layers = args.get_int("layers", 2);
    const long long shards = args.get_int("shards", 1);
    const long long mtp = args.get_int("mtp", 1);
    const long long seed = args.get_int("seed", 1);
    const std::string scheme = args.get("scheme", "deepseek");
    const std::string fn_dtype = args.get("fn-dtype", "F32");
    args.finish("inspect");
    MHC_CHECK(positional(args).empty() && values_word.empty(), "mhc inspect --write-example-checkpoint takes no PATH");
    MHC_CHECK(hidden >= 1 && hidden <= (1 << 16), "--hidden: expected 1..65536, got ", hidden);
    MHC_CHECK(layers >= 1 && layers <= 1000, "--layers: expected 1..1000, got ", layers);
    MHC_CHECK(shards >= 1 && shards <= 1000, "--shards: expected 1..1000, got ", shards);
    MHC_CHECK(mtp >= 0 && mtp <= 8, "--mtp: expected 0..8, got ", mtp);
    MHC_CHECK(scheme == "deepseek" || scheme == "hf", "--scheme: expected deepseek or hf, got '", scheme, "'");
    MHC_CHECK(fn_dtype == "F32" || fn_dtype == "BF16", "--fn-dtype: expected F32 or BF16, got '", fn_dtype, "'");
    ModelPreset preset = model_preset(force.empty() ? "deepseek-v4-flash" : force);
    preset.config.H = hidden;
    const tools::HostModel model =
        tools::synthetic_model(preset, static_cast<int32_t>(layers), static_cast<uint64_t>(seed));
    tools::WriteOptions options;
    options.scheme = scheme == "hf" ? NamingScheme::kHuggingFace : NamingScheme::kDeepSeek;
    options.shards = static_cast<int32_t>(shards);
    options.fn_dtype = fn_dtype;
    options.mtp = static_cast<int32_t>(mtp);
    tools::write_checkpoint(example_dir, model, options);
    std::printf("wrote an example checkpoint of %s (H=%lld, %lld layers, seed %lld) to %s\n\n", preset.name.c_str(),
                hidden, layers, seed, example_dir.c_str());
    return inspect(example_dir, "", values);
  }
  args.finish("inspect");
  std::vector<std::string> paths = positional(args);
  if (!values_word.empty()) paths.insert(paths.begin(), values_word);
  MHC_CHECK(paths.size() == 1, "usage: mhc inspect PATH (see mhc inspect --help); got ", paths.size(), " paths");
  return inspect(paths.front(), force, values);
}

}  // namespace mhc::cli

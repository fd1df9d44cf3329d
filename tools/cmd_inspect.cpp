// tools/cmd_inspect.cpp - `mhc inspect PATH`: the mHC tensors of a checkpoint, checked against
// its config.json; and `mhc inspect --write-example-checkpoint DIR`, a small synthetic one.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "mhc/checkpoint.hpp"
#include "mhc/error.hpp"
#include "src/core/bf16.hpp"
#include "tools/checkpoint_model.hpp"
#include "tools/cli.hpp"
#include "tools/model.hpp"

namespace mhc::cli {

namespace {

const char* kInspectFooter =
    "mhc inspect PATH lists the mHC tensors of a checkpoint (PATH: a directory with config.json\n"
    "and model.safetensors or model.safetensors.index.json + shards; or the index / .safetensors\n"
    "file itself) per layer, with dtype, shape and file, and checks them against config.json:\n"
    "fn [M, K], scale [3], base [M], RMSNorm weights [H], learned head fn [n, K], scale [1],\n"
    "base [n], with M = (n+2)*n and K = n*H. MTP blocks (mtp.{i}.*) are listed when present.\n"
    "Exits with status 1 when anything is missing, mistyped or misshapen, or the files are\n"
    "damaged (2 for a bad command line). docs/checkpoints.md describes the names, the\n"
    "model_type mapping and the dtypes; docs/spec.md section 7 the limits (JSON nesting <= 64,\n"
    "header <= 100 MiB, no duplicate keys, regular files only).\n"
    "\n"
    "mhc inspect --write-example-checkpoint DIR writes seeded synthetic weights (as mhc run uses)\n"
    "as a checkpoint into DIR, then inspects it.\n";

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

struct InspectOptions {
  std::string path, model, example_dir, scheme = "deepseek", fn_dtype = "F32";
  bool values = false;
  long long hidden = 64, layers = 2, shards = 1, mtp = 1;
  unsigned long long seed = 1;
};

int cmd_inspect(const InspectOptions& o) {
  if (o.example_dir.empty()) {
    MHC_CHECK(!o.path.empty(), "usage: mhc inspect PATH (see mhc inspect --help)");
    return inspect(o.path, o.model, o.values);
  }
  MHC_CHECK(o.path.empty(), "mhc inspect --write-example-checkpoint takes no PATH");
  ModelPreset preset = model_preset(o.model.empty() ? "deepseek-v4-flash" : o.model);
  preset.config.H = o.hidden;
  const tools::HostModel model =
      tools::synthetic_model(preset, static_cast<int32_t>(o.layers), static_cast<uint64_t>(o.seed));
  tools::WriteOptions options;
  options.scheme = o.scheme == "hf" ? NamingScheme::kHuggingFace : NamingScheme::kDeepSeek;
  options.shards = static_cast<int32_t>(o.shards);
  options.fn_dtype = o.fn_dtype;
  options.mtp = static_cast<int32_t>(o.mtp);
  tools::write_checkpoint(o.example_dir, model, options);
  std::printf("wrote an example checkpoint of %s (H=%lld, %lld layers, seed %llu) to %s\n\n", preset.name.c_str(),
              o.hidden, o.layers, o.seed, o.example_dir.c_str());
  return inspect(o.example_dir, "", o.values);
}

Action setup_inspect(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  app.footer(kInspectFooter);
  app.add_option("PATH", o->path, "checkpoint directory, index or .safetensors file");
  app.add_option("--model", o->model,
                 "force a preset's mode and head (and its defaults for missing scalars) instead of mapping "
                 "config.json's model_type; with --write-example-checkpoint: the preset for n, eps, mode and head "
                 "(default deepseek-v4-flash)")
      ->type_name("NAME");
  app.add_flag("--values", o->values, "also read every listed tensor and report non-finite values (and min/max)");
  CLI::Option* dir = app.add_option("--write-example-checkpoint", o->example_dir,
                                    "write a small synthetic checkpoint into DIR, then inspect it")
                         ->type_name("DIR");
  auto needs_dir = [&](CLI::Option* opt) { opt->needs(dir); };
  needs_dir(app.add_option("--hidden", o->hidden, "example: hidden size (default 64)")
                ->type_name("H")->transform(decimal())->check(CLI::Range(1LL, 65536LL)));
  needs_dir(app.add_option("--layers", o->layers, "example: layers (default 2)")
                ->type_name("N")->transform(decimal())->check(CLI::Range(1LL, static_cast<long long>(kMaxLayers))));
  needs_dir(app.add_option("--scheme", o->scheme, "example: deepseek (default) or hf tensor names")
                ->type_name("S")->check(CLI::IsMember({"deepseek", "hf"})));
  needs_dir(app.add_option("--shards", o->shards, "example: 1 (default): model.safetensors; more: an index and N shards")
                ->type_name("N")->transform(decimal())->check(CLI::Range(1LL, 1000LL)));
  needs_dir(app.add_option("--fn-dtype", o->fn_dtype, "example: storage of fn/scale/base: F32 (default) or BF16")
                ->type_name("D")->check(CLI::IsMember({"F32", "BF16"})));
  needs_dir(app.add_option("--mtp", o->mtp, "example: MTP blocks to add (default 1)")
                ->type_name("N")->transform(decimal())->check(CLI::Range(0LL, 8LL)));
  needs_dir(app.add_option("--seed", o->seed, "example: seed of the weights (default 1)")
                ->type_name("S")->transform(decimal()));
  app.parse_complete_callback([o] {
    if (o->example_dir.empty() && o->path.empty()) throw CLI::RequiredError("PATH (or --write-example-checkpoint DIR)");
    if (!o->example_dir.empty() && !o->path.empty()) {
      throw CLI::ValidationError("PATH", "--write-example-checkpoint takes no PATH, got '" + o->path + "'");
    }
  });
  return [o] { return cmd_inspect(*o); };
}

}  // namespace mhc::cli

// tools/cmd_run.cpp - `mhc run`: the mHC residual path of a whole model, end to end.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <limits>
#include <memory>
#include <new>
#include <vector>
#include <string>

#include "mhc/mhc.hpp"
#include "src/core/bf16.hpp"
#include "tools/checkpoint_model.hpp"
#include "tools/cli.hpp"
#include "tools/decode_step.hpp"
#include "tools/model.hpp"

namespace mhc::cli {

namespace {

const char* kRunFooter =
    "Runs the mHC residual path of a model (spec section 5): the first-layer broadcast pre,\n"
    "a post_pre boundary around every sublayer, the final post and the head, in the model's\n"
    "mode (normal for DeepSeek-V4 and GLM-5-Next, shifted for DeepSeek-V4.1).\n"
    "\n"
    "Weights are synthetic and seeded (fn ~ N(0, 1/K), scale in [0.5, 1.5), base ~ N(0, 0.25),\n"
    "RMSNorm weights ~ 1 + N(0, 0.01)); the embedding is N(0, 1) in bf16. The sublayers\n"
    "(attention, FFN) are outside mhc: a deterministic stand-in replaces each one,\n"
    "    layer_output[t,h] = bf16(0.5 * sin(1.5 * layer_input[t,h] + 0.1 * (s mod 7)))\n"
    "where s counts sublayers from 0.\n"
    "\n"
    "With --device cuda the same run is repeated on the CPU reference backend and the final\n"
    "outputs are compared: every element within 2 bf16 ulps of max(|reference|, reference rms)\n"
    "and >= 90% bit-equal after the whole chain (each operator's own contract, 1 ulp and\n"
    ">= 99.9% bit-equal, is checked per operator by the GPU test suite); a mismatch exits 3.\n"
    "Prints what ran, the time per operator (synchronous, host clock: use `mhc bench` for\n"
    "kernel timings) and a checksum of the final output.\n"
    "\n"
    "Limits (docs/spec.md section 7): --tokens up to 2^40, and T*n*H*2 bytes per residual must\n"
    "fit in 64 bits and in memory; --layers up to 1024. A checkpoint file truncated while it is\n"
    "being read gives an error naming it (the files are read, not mapped).\n"
    "Exit status: 0 success, 1 failure, 2 bad command line, 3 GPU/CPU mismatch.\n";

// `--graph-step`: the whole-model decode figure (tools/decode_step.cpp).
int run_graph_step(const std::string& model_name, long long layers, long long seed, const std::string& list,
                   const std::string& family) {
#ifdef MHC_WITH_CUDA
  MHC_CHECK(cuda_available(), "--graph-step: no CUDA device is visible");
  const ModelPreset& preset = model_preset(model_name);
  const int32_t L = layers > 0 ? static_cast<int32_t>(layers) : preset.num_layers;
  std::vector<int64_t> tokens;
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t comma = list.find(',', pos);
    const std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    MHC_CHECK(!item.empty() && end != nullptr && *end == '\0' && v >= 1 && v <= 4096,
              "--graph-step: expected token counts in 1..4096, got '", item, "'");
    tokens.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  const tools::HostModel model = tools::synthetic_model(preset, L, static_cast<uint64_t>(seed));
  std::printf("mhc run --graph-step: %s, %d layers: pre_broadcast, %d post_pre, post, head per step "
              "(sublayers left out), one CUDA graph, median of 50 replays\n",
              preset.name.c_str(), L, 2 * L - 1);
  for (const tools::DecodeStepRow& r : tools::time_decode_step(model, tokens, 50, family)) {
    std::printf("  T=%-5lld %9.1f us per step (p10 %.1f, p90 %.1f), %6.2f us per op, %lld ops, %lld kernels, "
                "post_pre variant %s%s%s\n",
                static_cast<long long>(r.T), r.step_us, r.p10_us, r.p90_us, r.step_us / static_cast<double>(r.ops),
                static_cast<long long>(r.ops), static_cast<long long>(r.graph_nodes), r.boundary_variant.c_str(),
                r.forced.empty() ? "" : ", forced: ", r.forced.c_str());
    std::printf("{\"kind\": \"decode_step\", \"model\": \"%s\", \"layers\": %d, \"T\": %lld, \"step_us\": %.2f, "
                "\"p10_us\": %.2f, \"p90_us\": %.2f, \"ops\": %lld, \"graph_nodes\": %lld, \"variant\": \"%s\", "
                "\"forced\": \"%s\"}\n",
                preset.name.c_str(), L, static_cast<long long>(r.T), r.step_us, r.p10_us, r.p90_us,
                static_cast<long long>(r.ops), static_cast<long long>(r.graph_nodes), r.boundary_variant.c_str(),
                r.forced.c_str());
  }
  return 0;
#else
  (void)model_name;
  (void)layers;
  (void)seed;
  (void)list;
  (void)family;
  MHC_FAIL("--graph-step: this build has no CUDA backend");
#endif
}

}  // namespace

struct RunOptions {
  std::string checkpoint, model, device, family, graph_step;
  long long layers = 4, tokens = 16;
  unsigned long long seed = 1;
  bool layers_given = false;
};

int cmd_run(const RunOptions& o) {
  const std::string& checkpoint = o.checkpoint;
  const std::string& model_arg = o.model;
  const std::string model_name = model_arg.empty() ? "deepseek-v4-flash" : model_arg;
  const bool layers_given = o.layers_given;
  long long layers = o.layers;
  const long long tokens = o.tokens;
  const long long seed = static_cast<long long>(o.seed);
  const std::string device_arg = o.device.empty() ? (cuda_available() ? "cuda" : "cpu") : o.device;
  const std::string& family = o.family;
  if (!o.graph_step.empty()) {
    return run_graph_step(model_name, layers_given ? layers : -1, seed, o.graph_step, family);
  }
  const Device device{device_arg == "cuda" ? DeviceType::kCUDA : DeviceType::kCPU, 0};
  MHC_CHECK(device.type == DeviceType::kCPU || cuda_available(),
            "--device cuda: no CUDA device is visible, or this build has no CUDA backend");

  tools::HostModel model;
  std::string model_label;
  if (checkpoint.empty()) {
    const ModelPreset& preset = model_preset(model_name);
    model_label = preset.name;
    model = tools::synthetic_model(preset, static_cast<int32_t>(layers), static_cast<uint64_t>(seed));
  } else {
    tools::CheckpointModel loaded =
        tools::load_checkpoint_model(checkpoint, model_arg, layers_given ? static_cast<int32_t>(layers) : -1);
    model_label = "checkpoint " + checkpoint + " [model_type '" + loaded.config.model_type + "', " +
                  (loaded.config.forced ? "forced " : "") + loaded.config.family + ", " + to_string(loaded.scheme) +
                  " names, " + std::to_string(loaded.config.num_layers) + " layers in the checkpoint]";
    model = std::move(loaded.model);
    layers = model.layers;
  }
  // The largest buffer of the run is one residual, T*n*H bf16 values.
  const int64_t residual_bytes = checked_mul(checked_mul(tokens, model.config.K(), "--tokens * n*H"), 2,
                                             "--tokens * n*H * 2 bytes");
  // Refused before allocating: an allocation the kernel overcommits would fail later, when
  // touched (the OOM killer), and one under AddressSanitizer aborts instead of throwing.
  const int64_t needed = checked_mul(residual_bytes, 3, "--tokens: host memory of the run");
  const int64_t physical = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGE_SIZE);
  MHC_CHECK(physical <= 0 || needed <= physical, "--tokens ", tokens, ": not enough memory: the run needs about ",
            needed, " bytes of host memory (2 residuals of T*n*H bf16 and the [T, H] buffers), this machine has ",
            physical);
  tools::Rng rng(static_cast<uint64_t>(seed) * 7919u + 17u);
  std::vector<uint16_t> embedding;
  tools::RunResult r;
  try {
    embedding = tools::random_bf16(static_cast<size_t>(tokens * model.config.H), rng);
  } catch (const std::bad_alloc&) {
    MHC_FAIL("--tokens ", tokens, ": not enough memory (one residual alone is ", residual_bytes, " bytes)");
  }

  const Config& c = model.config;
  std::printf("mhc run: model %s (n=%d, H=%lld, mode %s, head %s), %lld layers (%lld boundaries), "
              "T=%lld tokens, device %s, seed %lld\n",
              model_label.c_str(), c.n, static_cast<long long>(c.H), to_string(model.mode),
              to_string(model.head), layers, 2 * layers, tokens, device_name(device).c_str(), seed);
  std::printf("  scalars: norm_eps=%g pre_eps=%g sinkhorn_eps=%g sinkhorn_iters=%d post_scale=%g rmsnorm_eps=%g\n",
              c.norm_eps, c.pre_eps, c.sinkhorn_eps, c.sinkhorn_iters, c.post_scale, c.rmsnorm_eps);
  std::printf("  stand-in sublayer: bf16(0.5*sin(1.5*x + 0.1*(s mod 7))) (see mhc run --help)\n\n");

  try {
    r = tools::run_model(model, embedding, tokens, device, family);
  } catch (const std::bad_alloc&) {
    MHC_FAIL("--tokens ", tokens, ": not enough memory (one residual alone is ", residual_bytes, " bytes)");
  }
  std::printf("  %-14s %6s %12s %12s  %s\n", "operator", "calls", "total us", "us/call", "variant");
  for (const auto& kv : r.op_us) {
    const int calls = r.op_calls.at(kv.first);
    std::printf("  %-14s %6d %12.1f %12.2f  %s\n", kv.first.c_str(), calls, kv.second, kv.second / calls,
                r.variants.at(kv.first).c_str());
  }
  double sum = 0.0, sum_abs = 0.0;
  for (uint16_t v : r.output) {
    const double x = detail::bf16_to_float(v);
    sum += x;
    sum_abs += std::fabs(x);
  }
  std::printf("\n  output [%lld, %lld] bf16: sum %.6f, sum|x| %.6f, checksum %016llx\n", tokens,
              static_cast<long long>(c.H), sum, sum_abs,
              static_cast<unsigned long long>(tools::checksum(r.output)));

  if (device.type == DeviceType::kCUDA) {
    const tools::RunResult ref = tools::run_model(model, embedding, tokens, Device{});
    // Chained over every boundary, a 1-ulp difference of one operator (allowed by the contract,
    // checked per operator by the test suite) propagates; the whole-model check therefore asks
    // each element to be within 2 bf16 ulps of max(|reference|, reference rms) and >= 90% of
    // the elements to be bit-equal.
    int64_t equal = 0, outside = 0;
    double max_abs = 0.0, ref_sq = 0.0;
    for (uint16_t v : ref.output) {
      const double b = detail::bf16_to_float(v);
      ref_sq += b * b;
    }
    const double ref_rms = ref.output.empty() ? 0.0 : std::sqrt(ref_sq / ref.output.size());
    for (size_t i = 0; i < r.output.size(); ++i) {
      equal += r.output[i] == ref.output[i];
      const double a = detail::bf16_to_float(r.output[i]), b = detail::bf16_to_float(ref.output[i]);
      const double d = std::fabs(a - b);
      max_abs = std::fmax(max_abs, d);
      outside += !(d <= std::ldexp(std::fmax(std::fabs(b), ref_rms), -6));
    }
    const double frac = r.output.empty() ? 1.0 : static_cast<double>(equal) / r.output.size();
    const bool ok = outside == 0 && frac >= 0.90;
    std::printf("  check against the CPU reference: %.4f%% bit-equal, max |gpu - cpu| %.3g (reference rms %.3g), "
                "%lld elements beyond 2 ulps: %s\n",
                100.0 * frac, max_abs, ref_rms, static_cast<long long>(outside), ok ? "OK" : "MISMATCH");
    if (!ok) return 3;
  }
  return 0;
}

Action setup_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  app.footer(kRunFooter);
  app.add_option("--model", o->model,
                 "deepseek-v4-flash (default), deepseek-v4-pro, deepseek-v4.1-flash, glm-5-next; with --checkpoint: "
                 "force a preset's mode and head for an unknown model_type")
      ->type_name("NAME");
  app.add_option("--checkpoint", o->checkpoint,
                 "use the mHC weights of a real checkpoint (directory with config.json and safetensors; see "
                 "docs/checkpoints.md) instead of synthetic ones; n, H, eps, mode and head come from its "
                 "config.json. The embedding stays synthetic.")
      ->type_name("PATH");
  CLI::Option* layers = app.add_option("--layers", o->layers,
                                       "transformer layers to run (default 4; each has 2 boundaries; with "
                                       "--checkpoint: all of the checkpoint's layers, or at most N)")
                            ->type_name("N")
                            ->transform(decimal())
                            ->check(CLI::Range(1LL, static_cast<long long>(kMaxLayers)));
  app.add_option("--tokens", o->tokens, "tokens in the batch (default 16, at most 2^40)")
      ->type_name("T")
      ->transform(decimal())
      ->check(CLI::Range(0LL, static_cast<long long>(kMaxTokens)));
  app.add_option("--device", o->device, "cpu or cuda (default: cuda when a GPU is present, else cpu)")
      ->type_name("D")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--seed", o->seed, "seed of the synthetic weights and embedding (default 1)")
      ->type_name("S")
      ->transform(decimal())
      ->check(CLI::Range(0ULL, static_cast<unsigned long long>(std::numeric_limits<long long>::max())));
  app.add_option("--family", o->family,
                 "force every operator's variant <op>.F (e.g. cuda_generic, cuda_n4, cpu_ref; `mhc variants` lists "
                 "them); default: the dispatcher's choice. With --graph-step: each operator of the step that has "
                 "<op>.F runs it, the others the dispatcher's choice (e.g. cuda_n4_decode)")
      ->type_name("F");
  app.add_option("--graph-step", o->graph_step,
                 "CUDA only: instead of the checked run, time the mHC path of one decode step of the model "
                 "(--layers, default all of the preset's layers; sublayers left out) captured in one CUDA graph, "
                 "for each token count in L (e.g. 1,4,16): median of 50 replays, per step and per boundary; one "
                 "JSON line per T")
      ->type_name("L");
  return [o, layers] {
    o->layers_given = layers->count() > 0;
    return cmd_run(*o);
  };
}

}  // namespace mhc::cli

// tools/cmd_bench.cpp - `mhc bench`: option parsing and help. The measurement is in
// tools/bench_gpu.cpp, the output helpers in tools/bench_common.cpp.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "mhc/error.hpp"
#include "tools/bench.hpp"
#include "tools/cli.hpp"

namespace mhc::cli {

namespace {

const char* kBenchFooter =
    "Times the mHC operators on a CUDA device with the benchmark protocol of\n"
    "docs/performance-spec.md (how to run it and read the results: docs/performance.md):\n"
    "  1. calibration, in this process: device-to-device copy bandwidth (1 GiB, read + write\n"
    "     bytes counted, median of 10 cudaMemcpyAsync timed with events) and the per-node cost\n"
    "     of a CUDA graph of 1000 empty kernels (median replay time / 1000);\n"
    "  2. per op, mode and shape: enough distinct prepared weight sets that the weights one call\n"
    "     reads (fn; fn_b for pre_broadcast; fn_head for head) exceed 2x the L2 size, and at least\n"
    "     --min-sets (86 = the boundaries of V4-Flash); the op is chained over them (each output\n"
    "     residual feeds the next call, mixes too for post_pre), the chain is captured in one CUDA\n"
    "     graph on a non-default stream, replayed --reps times after 3 untimed replays;\n"
    "     time per op = replay time / chained calls; median and spread over the replays;\n"
    "  3. per row: us per op, ideal bytes, GB/s on ideal bytes, % of the copy bandwidth, the\n"
    "     generic target 1.3 x max(5 us, ideal / (0.85 x copy)), and the variant dispatched.\n"
    "\n"
    "Inputs are random (seeded synthetic weights: fn ~ N(0, 1/K); activations N(0, 1) bf16),\n"
    "never zeros. Memory stays bounded: the activations rotate through a ring of slots that is\n"
    "large enough to exceed 2x L2 when that is cheap (small T) and shrinks to 2 slots (ping-pong)\n"
    "when one slot is big (--act-gib); at large T one call streams far more than the L2 anyway,\n"
    "and the chain covers every weight set unless one replay would then take more than\n"
    "--graph-ms (the time per call comes from a pilot graph of 3 calls); a shorter chain still\n"
    "streams at least 2x L2 per replay, and rotates over its first `chain` weight sets only,\n"
    "which matters little since fn is then a small part of the traffic.\n"
    "\n"
    "Modes per op (--modes): post_pre: normal, normal_fold, shifted, shifted_fold; pre,\n"
    "pre_broadcast: normal_fold; post: full; head: learned_fold; mixes: plain; collapse:\n"
    "carried_fold.\n"
    "\n"
    "Needs the CUDA backend and a CUDA device; fails with an error otherwise.\n";

}  // namespace

struct BenchArgs {
  std::string ops = "post_pre,pre,pre_broadcast,post,head", modes, H, T;
  tools::bench::Options o;
  long long reps = 20, min_sets = 86, slice_tokens = 0, decode_max_tokens = 0, device = 0;
  std::string device_text = "0";  // "cpu", or a CUDA ordinal
  unsigned long long seed = 1;
  bool ops_given = false;
};

int cmd_bench(BenchArgs& a) {
  namespace tb = mhc::tools::bench;
  tb::Options& o = a.o;
  const std::string default_ops = "post_pre,pre,pre_broadcast,post,head";
  const bool ops_given = a.ops_given;
  o.ops = tb::split_list(a.ops, "ops");
  if (!a.modes.empty()) o.modes = tb::split_list(a.modes, "modes");
  o.Hs = tb::split_ints(a.H.empty() ? (o.quick ? "4096" : "4096,5120,7168") : a.H, "H");
  o.Ts = tb::split_ints(a.T.empty() ? (o.quick ? "1,16,128,1024,16384"
                                               : "1,2,4,8,16,32,64,128,256,512,1024,2048,4096,8192,16384,65536")
                                    : a.T,
                        "T");
  o.reps = static_cast<int>(a.reps);
  o.min_sets = static_cast<int>(a.min_sets);
  o.slice_tokens = a.slice_tokens;
  o.decode_max_tokens = a.decode_max_tokens;
  const bool on_cpu = a.device_text == "cpu";
  if (!on_cpu) {
    char* end = nullptr;
    a.device = std::strtoll(a.device_text.c_str(), &end, 10);
    MHC_CHECK(end != nullptr && *end == '\0' && a.device >= 0 && a.device <= 1024, "--device: expected cpu or 0..1024, got '",
              a.device_text, "'");
  }
  o.device = static_cast<int>(a.device);
  o.seed = static_cast<uint64_t>(a.seed);

  MHC_CHECK(o.reps >= 1 && o.reps <= 100000, "--reps: expected 1..100000, got ", o.reps);
  MHC_CHECK(o.graph_ms > 0, "--graph-ms: expected > 0, got ", o.graph_ms);
  MHC_CHECK(o.min_sets >= 1 && o.min_sets <= 100000, "--min-sets: expected 1..100000, got ", o.min_sets);
  MHC_CHECK(o.act_gib > 0, "--act-gib: expected > 0, got ", o.act_gib);
  MHC_CHECK(o.budget_s >= 0, "--budget-s: expected >= 0, got ", o.budget_s);
  MHC_CHECK(o.slice_tokens >= 0 && o.slice_tokens % 32 == 0, "--slice-tokens: expected a multiple of 32, got ",
            o.slice_tokens);
  for (const std::string& op : o.ops) {
    const auto& list = tb::op_modes();
    MHC_CHECK(std::any_of(list.begin(), list.end(), [&](const tb::OpMode& m) { return op == m.op; }),
              "--ops: unknown op '", op, "' (known: ", default_ops, ",mixes,collapse)");
  }
  for (const std::string& mode : o.modes) {
    const auto& list = tb::op_modes();
    MHC_CHECK(std::any_of(list.begin(), list.end(), [&](const tb::OpMode& m) { return mode == m.mode; }),
              "--modes: unknown mode '", mode, "' (see mhc bench --help)");
  }
  if (!o.variant.empty()) {
    // A forced id names its op ("post_pre.cuda_generic"): bench that op only.
    const std::string op = o.variant.substr(0, o.variant.find('.'));
    MHC_CHECK(std::find(o.ops.begin(), o.ops.end(), op) != o.ops.end(), "--variant ", o.variant,
              ": its op '", op, "' is not among --ops");
    if (!ops_given || o.ops.size() > 1) {
      std::fprintf(stderr, "mhc bench: --variant %s: benching op %s only\n", o.variant.c_str(), op.c_str());
    }
    o.ops = {op};
  }
  if (o.reps < 20) {
    std::fprintf(stderr, "mhc bench: warning: --reps %d is below the protocol's 20 replays\n", o.reps);
  }
  return on_cpu ? tb::run_cpu(o) : tb::run_gpu(o);
}

Action setup_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  tools::bench::Options& o = a->o;
  app.footer(kBenchFooter);
  CLI::Option* ops = app.add_option("--ops", a->ops,
                                    "post_pre,pre,pre_broadcast,post,head (default: these), and the stage rows mixes "
                                    "(ideal T*(8H + 4M) + 4MK) and collapse (carried pre, RMSNorm folded: ideal "
                                    "T*(8H + 2H + 4n) + 2H)")
                         ->type_name("LIST");
  app.add_option("--modes", a->modes, "only these modes (default: every mode of each op; listed below)")
      ->type_name("LIST");
  app.add_option("--H", a->H, "hidden sizes (default 4096,5120,7168)")->type_name("LIST");
  app.add_option("--T", a->T, "token counts (default 1,2,4,8,16,32,64,128,256,512,1024,2048,4096,8192,16384,65536)")
      ->type_name("LIST");
  app.add_flag("--quick", o.quick, "a small subset: H 4096, T 1,16,128,1024,16384 (--H/--T still override)");
  app.add_option("--out", o.out,
                 "JSON lines: one \"env\" object (device, L2, SMs, copy bandwidth, graph node cost), then one "
                 "\"row\" object per measurement")
      ->type_name("FILE");
  app.add_option("--reps", a->reps, "timed replays per row (default 20; the protocol needs >= 20)")
      ->type_name("N")->transform(decimal())->check(CLI::Range(1LL, 100000LL));
  app.add_option("--variant", o.variant, "force a variant (as listed by mhc variants); only its op is benched")
      ->type_name("ID");
  app.add_option("--graph-ms", o.graph_ms, "target duration of one graph replay, caps the chain (default 50)")
      ->type_name("X")->check(CLI::PositiveNumber);
  app.add_option("--min-sets", a->min_sets, "weight sets at least (default 86)")
      ->type_name("N")->transform(decimal())->check(CLI::Range(1LL, 100000LL));
  app.add_option("--act-gib", o.act_gib,
                 "memory for the rotating activation slots of one row (default 8; at least 2 slots are always "
                 "used: T=65536, H=7168 needs about 11 GiB)")
      ->type_name("X")->check(CLI::PositiveNumber);
  app.add_option("--budget-s", o.budget_s,
                 "start no new row after X seconds (default 0: no limit); skipped rows are listed at the end")
      ->type_name("X")->check(CLI::NonNegativeNumber);
  app.add_option("--slice-tokens", a->slice_tokens,
                 "tokens per slice of the n = 4 plans where a collapse follows the mixes "
                 "(WorkspaceOptions::n4_slice_tokens, a multiple of 32; default 0: each plan's own default); "
                 "results do not depend on it")
      ->type_name("N")->transform(decimal())->check(CLI::Range(0LL, 1LL << 30));
  app.add_option("--decode-max-tokens", a->decode_max_tokens,
                 "the workspace's one-launch decode limit (WorkspaceOptions::decode_max_tokens, 1..128; -1: no "
                 "decode kernel; default 0: the library's default); results do not depend on it")
      ->type_name("N")->transform(decimal())->check(CLI::Range(-1LL, 128LL));
  app.add_option("--device", a->device_text,
                 "CUDA device ordinal (default 0), or cpu: the same protocol on the CPU (tools/bench_cpu.cpp: "
                 "memcpy bandwidth over the OpenMP threads as the ceiling, weight sets > 2x the last-level cache)")
      ->type_name("N|cpu");
  app.add_option("--seed", a->seed, "seed of the synthetic weights and activations (default 1)")
      ->type_name("S")->transform(decimal());
  return [a, ops] {
    a->ops_given = ops->count() > 0;
    return cmd_bench(*a);
  };
}

}  // namespace mhc::cli

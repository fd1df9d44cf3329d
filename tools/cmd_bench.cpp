// tools/cmd_bench.cpp - `mhc bench`: option parsing and help. The measurement is in
// tools/bench_gpu.cpp, the output helpers in tools/bench_common.cpp.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "mhc/error.hpp"
#include "tools/bench.hpp"
#include "tools/cli.hpp"

namespace mhc::cli {

namespace {

const char* kBenchHelp =
    "usage: mhc bench [--ops LIST] [--modes LIST] [--H LIST] [--T LIST] [--out FILE] [--reps N]\n"
    "                 [--variant ID] [--quick] [more options below]\n"
    "\n"
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
    "options:\n"
    "  --ops LIST      post_pre,pre,pre_broadcast,post,head (default: these), and the stage rows\n"
    "                  mixes (ideal T*(8H + 4M) + 4MK) and collapse (carried pre, RMSNorm folded:\n"
    "                  ideal T*(8H + 2H + 4n) + 2H)\n"
    "  --modes LIST    only these modes (default: every mode of each op):\n"
    "                    post_pre: normal, normal_fold, shifted, shifted_fold\n"
    "                    pre, pre_broadcast: normal_fold   post: full   head: learned_fold\n"
    "                    mixes: plain   collapse: carried_fold\n"
    "  --H LIST        hidden sizes (default 4096,5120,7168)\n"
    "  --T LIST        token counts (default 1,2,4,8,16,32,64,128,256,512,1024,2048,4096,8192,\n"
    "                  16384,65536)\n"
    "  --quick         a small subset: H 4096, T 1,16,128,1024,16384 (--H/--T still override)\n"
    "  --out FILE      JSON lines: one \"env\" object (device, L2, SMs, copy bandwidth, graph\n"
    "                  node cost), then one \"row\" object per measurement\n"
    "  --reps N        timed replays per row (default 20; the protocol needs >= 20)\n"
    "  --variant ID    force a variant (as listed by mhc variants); only its op is benched\n"
    "  --graph-ms X    target duration of one graph replay, caps the chain (default 50)\n"
    "  --min-sets N    weight sets at least (default 86)\n"
    "  --act-gib X     memory for the rotating activation slots of one row (default 8; at least\n"
    "                  2 slots are always used: T=65536, H=7168 needs about 11 GiB)\n"
    "  --budget-s X    start no new row after X seconds (default 0: no limit); skipped rows\n"
    "                  are listed at the end\n"
    "  --slice-tokens N  tokens per slice of the n = 4 plans where a collapse follows the\n"
    "                  mixes (WorkspaceOptions::n4_slice_tokens, a multiple of 32; default 0:\n"
    "                  each plan's own default); results do not depend on it\n"
    "  --device N      CUDA device ordinal (default 0)\n"
    "  --seed S        seed of the synthetic weights and activations (default 1)\n"
    "\n"
    "Needs the CUDA backend and a CUDA device; fails with an error otherwise.\n";

double get_double(Args& args, const char* name, const char* fallback) {
  const std::string v = args.get(name, fallback);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  MHC_CHECK(!v.empty() && end != nullptr && *end == '\0', "--", name, ": expected a number, got '", v, "'");
  return x;
}

}  // namespace

int cmd_bench(Args& args) {
  if (args.has("help")) {
    std::fputs(kBenchHelp, stdout);
    return 0;
  }
  namespace tb = mhc::tools::bench;
  tb::Options o;
  o.quick = args.has("quick");
  const std::string default_ops = "post_pre,pre,pre_broadcast,post,head";
  const std::string default_H = o.quick ? "4096" : "4096,5120,7168";
  const std::string default_T =
      o.quick ? "1,16,128,1024,16384" : "1,2,4,8,16,32,64,128,256,512,1024,2048,4096,8192,16384,65536";
  const bool ops_given = args.has("ops");
  o.ops = tb::split_list(args.get("ops", default_ops), "ops");
  if (args.has("modes")) o.modes = tb::split_list(args.get("modes", ""), "modes");
  o.Hs = tb::split_ints(args.get("H", default_H), "H");
  o.Ts = tb::split_ints(args.get("T", default_T), "T");
  o.out = args.get("out", "");
  o.variant = args.get("variant", "");
  o.reps = static_cast<int>(args.get_int("reps", 20));
  o.graph_ms = get_double(args, "graph-ms", "50");
  o.min_sets = static_cast<int>(args.get_int("min-sets", 86));
  o.act_gib = get_double(args, "act-gib", "8");
  o.budget_s = get_double(args, "budget-s", "0");
  o.slice_tokens = args.get_int("slice-tokens", 0);
  o.device = static_cast<int>(args.get_int("device", 0));
  o.seed = static_cast<uint64_t>(args.get_int("seed", 1));
  args.finish("bench");

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
  return tb::run_gpu(o);
}

}  // namespace mhc::cli

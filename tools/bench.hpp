// tools/bench.hpp - `mhc bench`: options, the op/mode table, ideal bytes, statistics and the
// JSON-lines/table output. The CUDA measurement itself lives in tools/bench_gpu.cpp (built only
// with the CUDA backend); everything declared here also builds without CUDA.
//
// Protocol: docs/performance-spec.md (the copy of /spec/performance.md); how to run it and
// where results go: docs/performance.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "mhc/mhc.hpp"
#include "tools/model.hpp"

namespace mhc::tools::bench {

/// Everything `mhc bench` was asked to do.
struct Options {
  std::vector<std::string> ops;    // post_pre, pre, pre_broadcast, post, head; stages mixes, collapse
  std::vector<std::string> modes;  // empty: every mode of each op (see kOpModes)
  std::vector<int64_t> Hs;         // hidden sizes
  std::vector<int64_t> Ts;         // token counts
  std::string out;                 // JSON-lines file ("" = none)
  std::string variant;             // forced variant id ("" = the dispatcher's choice)
  int reps = 20;                   // timed graph replays per row (protocol: >= 20)
  int warmup = 3;                  // untimed graph replays before the timed ones
  double graph_ms = 50.0;          // cap on one replay: chained calls per graph follow from it
  int min_sets = 86;               // weight sets at least (86 = the boundaries of V4-Flash)
  double act_gib = 8.0;            // budget for the rotating activation buffers of one row
  double budget_s = 0.0;           // stop starting new rows after this many seconds (0: none)
  int64_t slice_tokens = 0;        // WorkspaceOptions::n4_slice_tokens (0: the default)
  int64_t decode_max_tokens = 0;   // WorkspaceOptions::decode_max_tokens (0: the default)
  int device = 0;                  // CUDA device ordinal
  uint64_t seed = 1;               // seed of the synthetic weights and activations
  bool quick = false;              // the --quick subset was asked for
};

/// One (op, mode) pair the benchmark knows, with its meaning.
struct OpMode {
  const char* op;
  const char* mode;
  const char* meaning;
};
/// Every (op, mode) pair, in sweep order.
const std::vector<OpMode>& op_modes();

/// Bytes an ideal implementation moves (docs/performance-spec.md), n streams, M = (n+2)*n.
double ideal_bytes(const std::string& op, int64_t T, int64_t H, int64_t n);
/// Bytes of the weights one call of `op` must read: the part that has to come from DRAM when
/// the weight sets rotate (fn for post_pre/pre, fn_b for pre_broadcast, fn_head for head).
double weight_bytes(const std::string& op, int64_t H, int64_t n);
/// The generic target of the spec: 1.3 x max(5 us, ideal bytes / (0.85 x copy bandwidth)).
double target_us(double ideal, double copy_gbps);

/// Median, spread and percentiles of per-op times (microseconds).
struct Stats {
  double median = 0, min = 0, max = 0, p10 = 0, p90 = 0;
};
Stats summarize(std::vector<double> values);

/// The measured machine and the two calibration numbers of protocol step 1.
struct EnvInfo {
  std::string device_name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int64_t l2_bytes = 0;
  int64_t memory_bytes = 0;
  int runtime_version = 0, driver_version = 0;
  double copy_gbps = 0;          // median D2D copy, read + write bytes
  Stats copy_gbps_spread;        // the same, every sample
  int64_t copy_bytes = 0;        // bytes of one copy (each direction)
  double graph_node_us = 0;      // median per-node time of a graph of empty kernels
  int graph_nodes = 0;           // nodes in that graph
  std::string command;           // the command that produced the file
};

/// One measured (or failed) row.
struct Row {
  std::string op, mode;
  int64_t H = 0, T = 0, n = 4;
  Stats us;                      // per-op microseconds over the replays
  double ideal = 0;              // ideal bytes
  double gbps = 0;               // ideal bytes / median time
  double pct_copy = 0;           // gbps / copy bandwidth, in percent
  double target = 0;             // target_us()
  std::string variant;           // dispatcher's choice (or the forced id)
  int chain = 0;                 // calls chained in one graph
  int sets = 0;                  // distinct weight sets the chain rotates over
  int ring = 0;                  // distinct activation slots the chain rotates over
  int reps = 0;                  // timed replays
  std::string error;             // non-empty: the row failed, the timing fields are meaningless
  std::string command;           // command line reproducing the row
};

/// Writes the JSON-lines file (first the environment object, then one object per row).
class JsonWriter {
 public:
  explicit JsonWriter(const std::string& path);  // "" = write nothing
  ~JsonWriter();
  JsonWriter(const JsonWriter&) = delete;
  JsonWriter& operator=(const JsonWriter&) = delete;
  void env(const EnvInfo& e);
  void row(const EnvInfo& e, const Row& r);
  void note(const std::string& text);

 private:
  FILE* f_ = nullptr;
};

/// Prints the final table (one line per row) to `out`.
void print_table(FILE* out, const EnvInfo& e, const std::vector<Row>& rows);
/// The command line reproducing the whole run: "mhc bench", then `device_flag` (" --device cpu"
/// for the CPU bench, "" for the GPU one), then --ops, --modes, --H, --T, --reps and every other
/// option that differs from its default.
std::string run_command(const Options& o, const std::string& device_flag);
/// The command line reproducing one row.
std::string row_command(const Options& o, const Row& r);

/// Parses "a,b,c" into strings / integers; names the option in errors.
std::vector<std::string> split_list(const std::string& text, const char* option);
std::vector<int64_t> split_ints(const std::string& text, const char* option);

/// The tensors of one slot of a chain's activation ring (host or device memory, by
/// ChainCall::device); null where the op does not use them.
struct SlotPtrs {
  const void* residual = nullptr;      // [T,n,H] bf16
  const void* layer_output = nullptr;  // [T,H] bf16
  const void* layer_input = nullptr;   // [T,H] bf16 (head: the output)
  const void* embedding = nullptr;     // [T,H] bf16
  const void* post_mix = nullptr;      // [T,n] fp32
  const void* comb_mix = nullptr;      // [T,n,n] fp32
  const void* pre_mix = nullptr;       // [T,n] fp32
};

/// One call of a row's chain: the op and mode, the shapes, where it runs, its weight set.
struct ChainCall {
  std::string op;
  bool shifted = false;  // post_pre: the V4.1 mode (carried pre in, fresh pre out)
  Config config;
  int64_t T = 0;
  Device device{};
  Exec exec;
  const PreparedWeights* mix = nullptr;   // post_pre, pre, pre_broadcast, mixes
  const PreparedWeights* head = nullptr;  // head
  const void* norm = nullptr;             // [H] bf16 RMSNorm weight, or null (no fold)
};

/// Whether `op` reads a mix weight set / a head weight set.
bool uses_mix_weights(const std::string& op);
/// Runs the call (run = true), reading slot `in` and writing the chain's next slot `next` (the
/// residual and the mixes the next call reads), or returns the variant the dispatcher picks for
/// it (run = false). The same calls for the GPU and the CPU bench.
std::string chain_call(const ChainCall& c, const SlotPtrs& in, const SlotPtrs& next, bool run);

/// chain_call with weight set w of `pool` (either bench's pool: mix(w), head(w), norm(w)); the
/// RMSNorm weight only where `fold`.
template <typename WeightPool>
std::string chain_call(ChainCall c, const WeightPool& pool, int w, bool fold, const SlotPtrs& in, const SlotPtrs& next,
                       bool run) {
  c.mix = uses_mix_weights(c.op) ? &pool.mix(w) : nullptr;
  c.head = c.op == "head" ? &pool.head(w) : nullptr;
  c.norm = fold ? pool.norm(w) : nullptr;
  return chain_call(c, in, next, run);
}

/// A random n x n matrix made (almost) doubly stochastic by a few Sinkhorn steps, like the
/// comb_mix an op produces: the residual of a post chain then neither grows nor fades.
void doubly_stochastic(float* c, size_t n, Rng& rng);

/// Runs the whole protocol on a CUDA device (tools/bench_gpu.cpp); returns the exit status.
/// In a build without CUDA it throws mhc::Error.
int run_gpu(const Options& options);
/// The same protocol on the CPU (tools/bench_cpu.cpp, `--device cpu`); returns the exit status.
int run_cpu(const Options& options);

}  // namespace mhc::tools::bench

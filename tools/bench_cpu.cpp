// tools/bench_cpu.cpp - `mhc bench --device cpu`: the benchmark protocol of
// docs/performance-spec.md on the CPU, with the rows and JSON fields of the GPU bench.
//
// Step 1 (calibration, same process): the memory copy bandwidth of the machine (1 GiB, split over
// the OpenMP threads, read + write bytes counted, median of 10 after 2 warm-ups); it is the
// ceiling each row's % refers to ("copy_gbps"). The env object's sm_count holds the thread
// count and l2_bytes the last-level cache; graph_node_us is 0 (no graphs on the CPU). A note
// object records the CPU model, threads and the load average at the start and the end.
// Step 2, per row (op, mode, H, T): distinct prepared weight sets whose bytes exceed 2x the last-level
// cache (and >= --min-sets); a ring of activation slots (2x the cache where cheap, else >= 2, within
// --act-gib), random bf16 (a seeded pattern of odd length, tiled) and valid fp32 mixes; call i
// reads slot i % R and weight set i % S and writes slot (i + 1) % R (as the GPU bench); one
// untimed call, a pilot of 3 calls sizes the chain (all sets unless a pass would exceed --graph-ms,
// never less than 2x the cache of traffic), --reps timed passes after 1 warm-up pass; us per op =
// pass time / chain, median and spread over the passes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "mhc/mhc.hpp"
#include "src/core/bf16.hpp"
#include "tools/bench.hpp"
#include "tools/model.hpp"

namespace mhc::tools::bench {

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t c = line.find(':');
      return c == std::string::npos ? line : line.substr(c + 2);
    }
  }
  return "unknown CPU";
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

int64_t llc_bytes() {
  long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (v <= 0) v = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return v > 0 ? v : 32 << 20;
}

// Memory copy bandwidth: each thread copies its part of 1 GiB; read + write bytes counted.
void measure_copy(EnvInfo& env) {
  const size_t bytes = size_t{1} << 30;
  std::vector<char> src(bytes), dst(bytes);
  Rng rng(7);
  for (size_t i = 0; i < bytes; i += 4096) src[i] = static_cast<char>(rng.next());
  auto copy = [&] {
    const int nt = threads();
    const size_t part = bytes / static_cast<size_t>(nt);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < nt; ++i) std::memcpy(dst.data() + i * part, src.data() + i * part, part);
  };
  copy();
  copy();
  std::vector<double> gbps;
  for (int r = 0; r < 10; ++r) {
    const auto t0 = Clock::now();
    copy();
    gbps.push_back(2.0 * static_cast<double>(bytes) / seconds_since(t0) / 1e9);
  }
  env.copy_gbps_spread = summarize(gbps);
  env.copy_gbps = env.copy_gbps_spread.median;
  env.copy_bytes = static_cast<int64_t>(bytes);
}

// Random bf16 from one seeded pattern of odd length, tiled.
void fill_bf16(uint16_t* dst, size_t count, uint64_t salt) {
  static const std::vector<uint16_t> pattern = [] {
    Rng rng(12345);
    return random_bf16((size_t{1} << 20) + 4099, rng, 1.0);
  }();
  size_t at = static_cast<size_t>(salt * 2654435761u) % pattern.size();
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(count - done, pattern.size() - at);
    std::memcpy(dst + done, pattern.data() + at, n * 2);
    done += n;
    at = 0;
  }
}

struct Slot {
  std::vector<uint16_t> residual, layer_output, layer_input, embedding;
  std::vector<float> post, comb, pre;
};

class Pool {
 public:
  Pool(const Options& o, int64_t H) : o_(o), H_(H) {}
  const PreparedWeights& mix(int i) const { return mix_[static_cast<size_t>(i)]; }
  const PreparedWeights& head(int i) const { return head_[static_cast<size_t>(i)]; }
  const uint16_t* norm(int i) const { return norm_[static_cast<size_t>(i)].data(); }
  void ensure(bool head_sets, int count) {
    std::vector<PreparedWeights>& list = head_sets ? head_ : mix_;
    const int32_t rows = head_sets ? 4 : 24;
    const int64_t K = 4 * H_;
    const auto t0 = Clock::now();
    const int have = static_cast<int>(list.size());
    while (static_cast<int>(list.size()) < count) {
      const uint64_t idx = list.size();
      Rng rng(o_.seed * 1000003u + static_cast<uint64_t>(H_) * 7919u + (head_sets ? 104729u : 0u) + idx * 0x9e3779b97f4a7c15ull);
      // fn ~ N(0, 1/K) from a tiled random pattern (generation of every value would dominate).
      std::vector<float> fn(static_cast<size_t>(rows * K));
      const std::vector<float> pat = random_f32(65537, rng, 1.0 / std::sqrt(static_cast<double>(K)));
      const size_t off = static_cast<size_t>(rng.next() % pat.size());
      for (size_t i = 0; i < fn.size(); ++i) fn[i] = pat[(i + off) % pat.size()];
      std::vector<float> scale(head_sets ? 1 : 3);
      for (float& s : scale) s = static_cast<float>(0.5 + rng.uniform());
      const std::vector<float> base = random_f32(static_cast<size_t>(rows), rng, 0.5);
      const TensorView fv = make_view(fn.data(), DType::kFloat32, {rows, K});
      const TensorView sv = make_view(scale.data(), DType::kFloat32, {static_cast<int64_t>(scale.size())});
      const TensorView bv = make_view(base.data(), DType::kFloat32, {rows});
      if (head_sets) {
        HeadWeightsView v;
        v.fn = fv;
        v.scale = sv;
        v.base = bv;
        list.push_back(prepare_head(v, 4, H_, Device{}));
      } else {
        MixWeightsView v;
        v.fn = fv;
        v.scale = sv;
        v.base = bv;
        list.push_back(prepare(v, 4, H_, Device{}));
      }
    }
    if (count > have) {
      std::fprintf(stderr, "  prepared %d %s weight sets for H=%lld (%.1f s)\n", count - have, head_sets ? "head" : "mix",
                   static_cast<long long>(H_), seconds_since(t0));
    }
    ensure_norms(count);
  }
  void ensure_norms(int count) {
    Rng rng(o_.seed * 31u + static_cast<uint64_t>(H_));
    while (static_cast<int>(norm_.size()) < count) {
      std::vector<uint16_t> w(static_cast<size_t>(H_));
      for (uint16_t& v : w) v = detail::float_to_bf16(static_cast<float>(1.0 + 0.1 * rng.normal()));
      norm_.push_back(std::move(w));
    }
  }

 private:
  const Options& o_;
  int64_t H_;
  std::vector<PreparedWeights> mix_, head_;
  std::vector<std::vector<uint16_t>> norm_;
};

struct Chain {
  std::string op;
  bool shifted = false, fold = false;
  Config config;
  int64_t T = 0;
  const Pool* pool = nullptr;
  std::vector<Slot>* ring = nullptr;
  int sets = 1;
  Exec exec;

  std::string call(int i, bool run) const {
    ChainCall c;
    c.op = op;
    c.shifted = shifted;
    c.config = config;
    c.T = T;
    c.exec = exec;
    const Slot& in = (*ring)[static_cast<size_t>(i) % ring->size()];
    const Slot& next = (*ring)[static_cast<size_t>(i + 1) % ring->size()];
    return chain_call(c, *pool, i % sets, fold, ptrs(in), ptrs(next), run);
  }

  static SlotPtrs ptrs(const Slot& s) {
    SlotPtrs p;
    p.residual = s.residual.data();
    p.layer_output = s.layer_output.data();
    p.layer_input = s.layer_input.data();
    p.embedding = s.embedding.data();
    p.post_mix = s.post.data();
    p.comb_mix = s.comb.data();
    p.pre_mix = s.pre.data();
    return p;
  }
};

void measure_row(const Options& o, const EnvInfo& env, Pool& pool, const OpMode& om, int64_t H, int64_t T, Row& row,
                 uint64_t salt) {
  Chain ch;
  ch.op = om.op;
  ch.shifted = std::string(om.mode).rfind("shifted", 0) == 0;
  ch.fold = std::string(om.mode).find("fold") != std::string::npos;
  ch.config = model_preset(ch.shifted ? "deepseek-v4.1-flash" : "deepseek-v4-flash").config;
  ch.config.H = H;
  ch.T = T;
  ch.exec.variant = o.variant.empty() ? nullptr : o.variant.c_str();
  const double llc2 = 2.0 * static_cast<double>(env.l2_bytes);
  const double wb = weight_bytes(ch.op, H, 4);
  int sets = o.min_sets;
  if (wb > 0) sets = std::max(sets, static_cast<int>(std::ceil(llc2 / wb)) + 1);
  if (ch.op == "collapse") {
    pool.ensure_norms(sets);
  } else if (ch.op != "post") {
    pool.ensure(ch.op == "head", sets);
  } else {
    pool.ensure_norms(sets);
  }
  ch.pool = &pool;
  ch.sets = sets;
  row.sets = sets;

  const size_t t = static_cast<size_t>(T), h = static_cast<size_t>(H);
  const double slot_bytes = static_cast<double>(t * h * 2 * (4 + 3) + t * 4 * (4 + 16 + 4));
  int R = static_cast<int>(std::ceil(llc2 / slot_bytes)) + 1;
  R = std::min(R, sets + 1);
  R = std::min(R, static_cast<int>(o.act_gib * kGiB / slot_bytes));
  R = std::max(R, 2);
  std::vector<Slot> ring(static_cast<size_t>(R));
  Rng rng(o.seed * 6364136223846793005ull + salt);
  for (size_t r = 0; r < ring.size(); ++r) {
    Slot& s = ring[r];
    s.residual.resize(t * 4 * h);
    s.layer_output.resize(t * h);
    s.layer_input.resize(t * h);
    s.embedding.resize(t * h);
    fill_bf16(s.residual.data(), s.residual.size(), salt * 131 + r * 7 + 1);
    fill_bf16(s.layer_output.data(), s.layer_output.size(), salt * 131 + r * 7 + 2);
    fill_bf16(s.embedding.data(), s.embedding.size(), salt * 131 + r * 7 + 3);
    fill_bf16(s.layer_input.data(), s.layer_input.size(), salt * 131 + r * 7 + 4);
    s.post.resize(t * 4);
    s.comb.resize(t * 16);
    s.pre.resize(t * 4);
    for (float& v : s.post) v = static_cast<float>(0.2 + 1.6 * rng.uniform());
    for (size_t k = 0; k < t; ++k) doubly_stochastic(&s.comb[k * 16], 4, rng);
    for (float& v : s.pre) v = static_cast<float>(0.2 + 0.8 * rng.uniform());
  }
  ch.ring = &ring;
  row.ring = R;
  row.variant = ch.call(0, false);

  ch.call(0, true);
  const int P = std::min(3, sets);
  auto t0 = Clock::now();
  for (int i = 0; i < P; ++i) ch.call(i, true);
  const double per_call_ms = seconds_since(t0) * 1e3 / P;
  const double l_time = std::floor(o.graph_ms / std::max(per_call_ms, 1e-6));
  const double l_cold = std::ceil(llc2 / std::max(row.ideal, 1.0));
  const int L = static_cast<int>(std::max(1.0, std::min(static_cast<double>(sets), std::max(l_time, l_cold))));
  for (int i = 1; i < L; ++i) ch.call(i, false);
  row.chain = L;
  auto pass = [&] {
    const auto p0 = Clock::now();
    for (int i = 0; i < L; ++i) ch.call(i, true);
    return seconds_since(p0);
  };
  pass();
  std::vector<double> us;
  for (int r = 0; r < o.reps; ++r) us.push_back(pass() * 1e6 / L);
  row.us = summarize(us);
  row.reps = o.reps;
  row.gbps = row.ideal / (row.us.median * 1e-6) / 1e9;
  row.pct_copy = 100.0 * row.gbps / env.copy_gbps;
}

}  // namespace

int run_cpu(const Options& o) {
  const auto t_start = Clock::now();
  EnvInfo env;
  env.device_name = cpu_model();
  env.sm_count = threads();
  env.l2_bytes = llc_bytes();
  env.memory_bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  env.command = run_command(o, " --device cpu");
  const std::string load0 = load_average();
  measure_copy(env);
  std::fprintf(stderr, "mhc bench: %s, %d threads, LLC %.1f MiB: copy %.1f GB/s (read+write, min %.1f, max %.1f), load %s\n",
               env.device_name.c_str(), env.sm_count, static_cast<double>(env.l2_bytes) / (1 << 20), env.copy_gbps,
               env.copy_gbps_spread.min, env.copy_gbps_spread.max, load0.c_str());
  JsonWriter json(o.out);
  json.env(env);
  json.note("cpu: " + env.device_name + "; threads " + std::to_string(env.sm_count) + "; load average at start " +
            load0 + "; sm_count = threads, l2_bytes = last-level cache, copy_gbps = memcpy over the threads");

  std::vector<const OpMode*> plan;
  for (const std::string& op : o.ops) {
    for (const OpMode& m : op_modes()) {
      if (op != m.op) continue;
      if (!o.modes.empty() && std::find(o.modes.begin(), o.modes.end(), m.mode) == o.modes.end()) continue;
      plan.push_back(&m);
    }
  }
  MHC_CHECK(!plan.empty(), "mhc bench: no (op, mode) pair left after --ops/--modes");
  std::vector<Row> rows;
  std::vector<std::string> skipped;
  uint64_t salt = 100;
  for (int64_t H : o.Hs) {
    Pool pool(o, H);
    for (const OpMode* m : plan) {
      for (int64_t T : o.Ts) {
        Row row;
        row.op = m->op;
        row.mode = m->mode;
        row.H = H;
        row.T = T;
        row.ideal = ideal_bytes(row.op, T, H, 4);
        row.target = target_us(row.ideal, env.copy_gbps);
        row.command = row_command(o, row) + " --device cpu";
        if (o.budget_s > 0 && seconds_since(t_start) > o.budget_s) {
          skipped.push_back(row.op + "/" + row.mode + " H=" + std::to_string(H) + " T=" + std::to_string(T));
          continue;
        }
        try {
          measure_row(o, env, pool, *m, H, T, row, salt++);
        } catch (const std::exception& e) {
          row.error = e.what();
        }
        json.row(env, row);
        if (row.error.empty()) {
          std::fprintf(stderr, "%s %s H=%lld T=%lld: %.2f us (p10 %.2f, p90 %.2f), %.1f%% of copy, %s, chain %d, load %s\n",
                       row.op.c_str(), row.mode.c_str(), static_cast<long long>(H), static_cast<long long>(T),
                       row.us.median, row.us.p10, row.us.p90, row.pct_copy, row.variant.c_str(), row.chain,
                       load_average().c_str());
        } else {
          std::fprintf(stderr, "%s %s H=%lld T=%lld: error: %s\n", row.op.c_str(), row.mode.c_str(),
                       static_cast<long long>(H), static_cast<long long>(T), row.error.c_str());
        }
        rows.push_back(row);
      }
    }
  }
  json.note("load average at end " + load_average());
  print_table(stdout, env, rows);
  int failed = 0;
  for (const Row& r : rows) failed += !r.error.empty();
  std::printf("%zu rows measured, %d failed, %zu skipped, %.0f s; load average %s -> %s\n", rows.size() - failed, failed,
              skipped.size(), seconds_since(t_start), load0.c_str(), load_average().c_str());
  return failed == 0 ? 0 : 4;
}

}  // namespace mhc::tools::bench

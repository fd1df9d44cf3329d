// tools/bench_common.cpp - the parts of `mhc bench` that need no GPU: the op/mode table, ideal
// bytes, statistics, the JSON-lines writer, the final table, and the chained calls and comb
// matrices both the GPU and the CPU bench use.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "mhc/error.hpp"
#include "tools/bench.hpp"

namespace mhc::tools::bench {

const std::vector<OpMode>& op_modes() {
  static const std::vector<OpMode> list = {
      {"post_pre", "normal", "V4/GLM boundary: collapse with the fresh pre, no RMSNorm fold"},
      {"post_pre", "normal_fold", "V4/GLM boundary with the sublayer RMSNorm folded in"},
      {"post_pre", "shifted", "V4.1 boundary: collapse with the carried pre, fresh pre out, no fold"},
      {"post_pre", "shifted_fold", "V4.1 boundary with the sublayer RMSNorm folded in"},
      {"pre", "normal_fold", "mixes + collapse with the fresh pre, RMSNorm folded"},
      {"pre_broadcast", "normal_fold", "first layer from the embedding [T,H], fresh pre, RMSNorm folded"},
      {"post", "full", "post with a full [T,n,H] residual"},
      {"head", "learned_fold", "learned head (V4) with the final RMSNorm folded"},
      {"mixes", "plain", "the mixes stage alone: fp32-exact mixes of the streams (pre, post, comb out)"},
      {"collapse", "carried_fold", "the collapse stage alone: carried pre, RMSNorm folded"},
  };
  return list;
}

double ideal_bytes(const std::string& op, int64_t T, int64_t H, int64_t n) {
  const double t = static_cast<double>(T), h = static_cast<double>(H), nn = static_cast<double>(n);
  const double M = (nn + 2.0) * nn, K = nn * h;
  if (op == "post_pre") return t * (20.0 * h + 4.0 * M) + 4.0 * M * K;
  if (op == "pre") return t * (10.0 * h + 4.0 * M) + 4.0 * M * K;
  if (op == "post") return t * (18.0 * h + 4.0 * (nn + nn * nn));
  if (op == "pre_broadcast") return t * (4.0 * h + 4.0 * M) + 4.0 * M * h;
  // head: read the residual (2nH = 8H for n = 4), write the output (2H), read fn_head once.
  if (op == "head") return t * (2.0 * nn * h + 2.0 * h) + 4.0 * nn * K;
  // mixes: read the residual (8H), write pre/post/comb (4M), read fn once.
  if (op == "mixes") return t * (2.0 * nn * h + 4.0 * M) + 4.0 * M * K;
  // collapse: read the residual (8H) and the carried pre (4n), write layer_input (2H), read the
  // RMSNorm weight once (2H).
  if (op == "collapse") return t * (2.0 * nn * h + 2.0 * h + 4.0 * nn) + 2.0 * h;
  MHC_FAIL("bench: unknown op '", op, "'");
}

double weight_bytes(const std::string& op, int64_t H, int64_t n) {
  const double h = static_cast<double>(H), nn = static_cast<double>(n), M = (nn + 2.0) * nn;
  if (op == "post_pre" || op == "pre" || op == "mixes") return 4.0 * M * nn * h;
  if (op == "pre_broadcast") return 4.0 * M * h;
  if (op == "head") return 4.0 * nn * nn * h;
  return 0.0;  // post reads no weights; collapse only the RMSNorm weight [H] (one per set)
}

double target_us(double ideal, double copy_gbps) {
  const double stream_us = copy_gbps > 0 ? ideal / (0.85 * copy_gbps * 1e9) * 1e6 : 0.0;
  return 1.3 * std::max(5.0, stream_us);
}

namespace {
// Linear interpolation between the closest ranks of a sorted sample.
double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] * (1.0 - frac) + sorted[hi] * frac;
}
}  // namespace

Stats summarize(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  s.median = percentile(v, 0.5);
  s.p10 = percentile(v, 0.1);
  s.p90 = percentile(v, 0.9);
  return s;
}

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

// Builds one JSON object, key by key, in insertion order.
class Obj {
 public:
  Obj& str(const char* key, const std::string& v) { return raw(key, json_string(v)); }
  Obj& num(const char* key, double v) { return raw(key, json_number(v)); }
  Obj& integer(const char* key, int64_t v) { return raw(key, std::to_string(v)); }
  Obj& null(const char* key) { return raw(key, "null"); }
  Obj& raw(const char* key, const std::string& v) {
    body_ += (body_.empty() ? "" : ", ") + json_string(key) + ": " + v;
    return *this;
  }
  std::string text() const { return "{" + body_ + "}"; }

 private:
  std::string body_;
};

}  // namespace

JsonWriter::JsonWriter(const std::string& path) {
  if (path.empty()) return;
  f_ = std::fopen(path.c_str(), "w");
  MHC_CHECK(f_ != nullptr, "--out: cannot open '", path, "' for writing");
}

JsonWriter::~JsonWriter() {
  if (f_ != nullptr) std::fclose(f_);
}

void JsonWriter::env(const EnvInfo& e) {
  if (f_ == nullptr) return;
  Obj o;
  o.str("kind", "env").str("impl", "mhc").str("device", e.device_name);
  o.str("compute_capability", std::to_string(e.cc_major) + "." + std::to_string(e.cc_minor));
  o.integer("sm_count", e.sm_count).integer("l2_bytes", e.l2_bytes).integer("memory_bytes", e.memory_bytes);
  o.integer("cuda_runtime", e.runtime_version).integer("cuda_driver", e.driver_version);
  o.num("copy_gbps", e.copy_gbps).num("copy_gbps_min", e.copy_gbps_spread.min);
  o.num("copy_gbps_max", e.copy_gbps_spread.max).integer("copy_bytes", e.copy_bytes);
  o.num("graph_node_us", e.graph_node_us).integer("graph_nodes", e.graph_nodes);
  o.str("cmd", e.command);
  std::fprintf(f_, "%s\n", o.text().c_str());
  std::fflush(f_);
}

void JsonWriter::row(const EnvInfo& e, const Row& r) {
  if (f_ == nullptr) return;
  Obj o;
  o.str("kind", "row").str("impl", "mhc").str("device", e.device_name);
  o.str("op", r.op).str("mode", r.mode).integer("n", r.n).integer("H", r.H).integer("T", r.T);
  if (r.error.empty()) {
    o.num("us", r.us.median).num("us_min", r.us.min).num("us_max", r.us.max);
    o.num("us_p10", r.us.p10).num("us_p90", r.us.p90);
  } else {
    o.null("us");
  }
  o.num("ideal_bytes", r.ideal);
  if (r.error.empty()) {
    o.num("gbps", r.gbps).num("pct_copy", r.pct_copy);
  } else {
    o.null("gbps").null("pct_copy");
  }
  o.num("copy_gbps", e.copy_gbps).num("target_us", r.target);
  if (r.error.empty()) {
    o.raw("meets_target", r.us.median <= r.target ? "true" : "false");
  }
  o.str("variant", r.variant).integer("chain", r.chain).integer("sets", r.sets);
  o.integer("ring", r.ring).integer("reps", r.reps);
  if (!r.error.empty()) o.str("error", r.error);
  o.str("cmd", r.command);
  std::fprintf(f_, "%s\n", o.text().c_str());
  std::fflush(f_);
}

void JsonWriter::note(const std::string& text) {
  if (f_ == nullptr) return;
  Obj o;
  o.str("kind", "note").str("impl", "mhc").str("text", text);
  std::fprintf(f_, "%s\n", o.text().c_str());
  std::fflush(f_);
}

void print_table(FILE* out, const EnvInfo& e, const std::vector<Row>& rows) {
  std::fprintf(out, "\nmhc bench on %s (%d SMs, L2 %.1f MiB): copy %.1f GB/s (read+write), "
                    "graph node %.2f us\n",
               e.device_name.c_str(), e.sm_count, static_cast<double>(e.l2_bytes) / (1 << 20),
               e.copy_gbps, e.graph_node_us);
  std::fprintf(out, "%-13s %-12s %5s %6s %10s %10s %10s %9s %6s %9s %-4s %s\n", "op", "mode", "H", "T",
               "us/op", "p10", "p90", "GB/s", "%copy", "target", "ok", "variant");
  for (const Row& r : rows) {
    if (!r.error.empty()) {
      std::fprintf(out, "%-13s %-12s %5lld %6lld  error: %s\n", r.op.c_str(), r.mode.c_str(),
                   static_cast<long long>(r.H), static_cast<long long>(r.T), r.error.c_str());
      continue;
    }
    std::fprintf(out, "%-13s %-12s %5lld %6lld %10.2f %10.2f %10.2f %9.1f %6.1f %9.2f %-4s %s\n",
                 r.op.c_str(), r.mode.c_str(), static_cast<long long>(r.H), static_cast<long long>(r.T),
                 r.us.median, r.us.p10, r.us.p90, r.gbps, r.pct_copy, r.target,
                 r.us.median <= r.target ? "yes" : "NO", r.variant.c_str());
  }
  std::fprintf(out, "(us/op: median over replays of graph time / chained calls; target = 1.3 x max(5 us, "
                    "ideal bytes / (0.85 x copy bandwidth)))\n");
}

std::string run_command(const Options& o, const std::string& device_flag) {
  std::ostringstream cmd;
  cmd << "mhc bench" << device_flag << " --ops ";
  for (size_t i = 0; i < o.ops.size(); ++i) cmd << (i ? "," : "") << o.ops[i];
  if (!o.modes.empty()) {
    cmd << " --modes ";
    for (size_t i = 0; i < o.modes.size(); ++i) cmd << (i ? "," : "") << o.modes[i];
  }
  cmd << " --H ";
  for (size_t i = 0; i < o.Hs.size(); ++i) cmd << (i ? "," : "") << o.Hs[i];
  cmd << " --T ";
  for (size_t i = 0; i < o.Ts.size(); ++i) cmd << (i ? "," : "") << o.Ts[i];
  cmd << " --reps " << o.reps;
  if (!o.variant.empty()) cmd << " --variant " << o.variant;
  if (o.device != 0) cmd << " --device " << o.device;
  if (o.seed != 1) cmd << " --seed " << o.seed;
  if (o.graph_ms != 50.0) cmd << " --graph-ms " << o.graph_ms;
  if (o.min_sets != 86) cmd << " --min-sets " << o.min_sets;
  if (o.act_gib != 8.0) cmd << " --act-gib " << o.act_gib;
  if (o.budget_s > 0) cmd << " --budget-s " << o.budget_s;
  if (o.slice_tokens > 0) cmd << " --slice-tokens " << o.slice_tokens;
  if (!o.out.empty()) cmd << " --out " << o.out;
  return cmd.str();
}

std::string row_command(const Options& o, const Row& r) {
  std::ostringstream os;
  os << "mhc bench --ops " << r.op << " --modes " << r.mode << " --H " << r.H << " --T " << r.T
     << " --reps " << o.reps;
  if (!o.variant.empty()) os << " --variant " << o.variant;
  if (o.device != 0) os << " --device " << o.device;
  if (o.seed != 1) os << " --seed " << o.seed;
  if (o.graph_ms != 50.0) os << " --graph-ms " << o.graph_ms;
  if (o.min_sets != 86) os << " --min-sets " << o.min_sets;
  if (o.act_gib != 8.0) os << " --act-gib " << o.act_gib;
  if (o.slice_tokens > 0) os << " --slice-tokens " << o.slice_tokens;
  return os.str();
}

std::vector<std::string> split_list(const std::string& text, const char* option) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream is(text);
  while (std::getline(is, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  MHC_CHECK(!out.empty(), "--", option, ": expected a comma-separated list, got '", text, "'");
  return out;
}

std::vector<int64_t> split_ints(const std::string& text, const char* option) {
  std::vector<int64_t> out;
  for (const std::string& item : split_list(text, option)) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    MHC_CHECK(end != nullptr && *end == '\0' && v >= 1, "--", option,
              ": expected positive integers, got '", item, "'");
    out.push_back(v);
  }
  return out;
}

#ifndef MHC_WITH_CUDA
int run_gpu(const Options&) {
  MHC_FAIL("mhc bench needs the CUDA backend, and this build has none (configured with "
           "-DMHC_ENABLE_CUDA=OFF or without nvcc): rebuild with CUDA to benchmark");
}
#endif

bool uses_mix_weights(const std::string& op) {
  return op == "post_pre" || op == "pre" || op == "pre_broadcast" || op == "mixes";
}

std::string chain_call(const ChainCall& c, const SlotPtrs& in, const SlotPtrs& next, bool run) {
  const int64_t n = c.config.n, H = c.config.H, T = c.T;
  auto bf = [&](const void* p, std::initializer_list<int64_t> shape) {
    return make_view(p, DType::kBFloat16, shape, c.device);
  };
  auto f32 = [&](const void* p, std::initializer_list<int64_t> shape) {
    return make_view(p, DType::kFloat32, shape, c.device);
  };
  const TensorView norm = c.norm != nullptr ? bf(c.norm, {H}) : TensorView{};
  const std::string& op = c.op;
  if (op == "post_pre") {
    PostPreArgs a;
    a.config = c.config;
    a.pre_source = c.shifted ? PreSource::kCarried : PreSource::kComputed;
    a.layer_output = bf(in.layer_output, {T, H});
    a.residual = bf(in.residual, {T, n, H});
    a.post_mix = f32(in.post_mix, {T, n});
    a.comb_mix = f32(in.comb_mix, {T, n, n});
    a.weights = c.mix;
    if (c.shifted) {
      a.pre_mix_in = f32(in.pre_mix, {T, n});
      a.pre_mix_out = f32(next.pre_mix, {T, n});
    }
    a.rmsnorm_weight = norm;
    a.residual_out = bf(next.residual, {T, n, H});
    a.layer_input = bf(in.layer_input, {T, H});
    a.post_mix_out = f32(next.post_mix, {T, n});
    a.comb_mix_out = f32(next.comb_mix, {T, n, n});
    a.exec = c.exec;
    if (!run) return selected_variant(a);
    post_pre(a);
  } else if (op == "pre") {
    PreArgs a;
    a.config = c.config;
    a.pre_source = PreSource::kComputed;
    a.residual = bf(in.residual, {T, n, H});
    a.weights = c.mix;
    a.rmsnorm_weight = norm;
    a.layer_input = bf(in.layer_input, {T, H});
    a.post_mix = f32(in.post_mix, {T, n});
    a.comb_mix = f32(in.comb_mix, {T, n, n});
    a.exec = c.exec;
    if (!run) return selected_variant(a);
    pre(a);
  } else if (op == "pre_broadcast") {
    PreBroadcastArgs a;
    a.config = c.config;
    a.pre_source = PreSource::kComputed;
    a.embedding = bf(in.embedding, {T, H});
    a.weights = c.mix;
    a.rmsnorm_weight = norm;
    a.layer_input = bf(in.layer_input, {T, H});
    a.post_mix = f32(in.post_mix, {T, n});
    a.comb_mix = f32(in.comb_mix, {T, n, n});
    a.exec = c.exec;
    if (!run) return selected_variant(a);
    pre_broadcast(a);
  } else if (op == "post") {
    PostArgs a;
    a.config = c.config;
    a.layer_output = bf(in.layer_output, {T, H});
    a.residual = bf(in.residual, {T, n, H});
    a.post_mix = f32(in.post_mix, {T, n});
    a.comb_mix = f32(in.comb_mix, {T, n, n});
    a.residual_out = bf(next.residual, {T, n, H});
    a.exec = c.exec;
    if (!run) return selected_variant(a);
    post(a);
  } else if (op == "mixes") {
    MixesArgs a;
    a.config = c.config;
    a.residual = bf(in.residual, {T, n, H});
    a.weights = c.mix;
    a.pre_mix = f32(next.pre_mix, {T, n});
    a.post_mix = f32(next.post_mix, {T, n});
    a.comb_mix = f32(next.comb_mix, {T, n, n});
    a.exec = c.exec;
    if (!run) return selected_variant(a);
    mixes(a);
  } else if (op == "collapse") {
    CollapseArgs a;
    a.config = c.config;
    a.pre_source = PreSource::kCarried;
    a.residual = bf(in.residual, {T, n, H});
    a.pre_mix = f32(in.pre_mix, {T, n});
    a.rmsnorm_weight = norm;
    a.layer_input = bf(in.layer_input, {T, H});
    a.exec = c.exec;
    if (!run) return selected_variant(a);
    collapse(a);
  } else if (op == "head") {
    HeadArgs a;
    a.config = c.config;
    a.kind = HeadKind::kLearned;
    a.residual = bf(in.residual, {T, n, H});
    a.weights = c.head;
    a.rmsnorm_weight = norm;
    a.output = bf(in.layer_input, {T, H});
    a.exec = c.exec;
    if (!run) return selected_variant(a);
    head(a);
  } else {
    MHC_FAIL("bench: unknown op '", op, "'");
  }
  return std::string();
}

void doubly_stochastic(float* c, size_t n, Rng& rng) {
  for (size_t i = 0; i < n * n; ++i) c[i] = static_cast<float>(0.5 + rng.uniform());
  for (int it = 0; it < 8; ++it) {
    for (size_t j = 0; j < n; ++j) {
      float s = 0;
      for (size_t k = 0; k < n; ++k) s += c[j * n + k];
      for (size_t k = 0; k < n; ++k) c[j * n + k] /= s;
    }
    for (size_t k = 0; k < n; ++k) {
      float s = 0;
      for (size_t j = 0; j < n; ++j) s += c[j * n + k];
      for (size_t j = 0; j < n; ++j) c[j * n + k] /= s;
    }
  }
}

}  // namespace mhc::tools::bench

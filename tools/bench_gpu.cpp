// tools/bench_gpu.cpp - the measurement of `mhc bench` on a CUDA device (protocol:
// docs/performance-spec.md; options and memory policy: `mhc bench --help`).
//
// Per row (op, mode, H, T):
//   weights     a pool of distinct prepared weight sets per H, grown on demand until the bytes
//               one call reads from them exceed 2x L2 (and at least --min-sets);
//   activations one device allocation holding a ring of R slots (residual, layer_output,
//               layer_input, embedding, mixes), random bf16 / valid fp32 mixes, never zeros;
//   chain       call i reads slot i%R and weight set i%S; post and post_pre write their new
//               residual (post_pre: also the mixes) into slot (i+1)%R, which call i+1 reads
//               (mixes writes its mixes there; the stage rows mixes / collapse read slot i%R);
//   timing      one eager call, then a pilot graph of 3 calls sizes the chain (all sets, unless
//               a replay would exceed --graph-ms; never less than 2x L2 of traffic per
//               replay); the chain is captured once (global capture mode: an op that
//               allocates or synchronises invalidates the capture and fails the row), 3 replays
//               warm up, --reps replays are timed with events; per op = replay / chain.
#ifdef MHC_WITH_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <thread>

#include "mhc/mhc.hpp"
#include "src/core/bf16.hpp"
#include "tools/bench.hpp"
#include "tools/model.hpp"

namespace mhc::tools::bench {

/// tools/bench_kernels.cu: launches one empty kernel on `stream`.
cudaError_t launch_empty_kernel(cudaStream_t stream);

namespace {

#define BENCH_CUDA(expr)                                                                   \
  do {                                                                                     \
    const cudaError_t bench_err_ = (expr);                                                 \
    MHC_CHECK(bench_err_ == cudaSuccess, #expr, " failed: ", cudaGetErrorName(bench_err_), \
              " (", cudaGetErrorString(bench_err_), ")");                                  \
  } while (0)

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr size_t kAlign = 256;

size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// One cudaMalloc'd block, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    const cudaError_t err = cudaMalloc(&ptr_, bytes == 0 ? kAlign : bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      MHC_FAIL("cudaMalloc of ", bytes / kGiB, " GiB failed (", cudaGetErrorString(err), "; ",
               free_b / kGiB, " GiB free of ", total_b / kGiB, ")");
    }
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  char* get() const { return static_cast<char*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A captured and instantiated graph, destroyed on scope exit.
struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
};

// Captures `body` (which enqueues work on `stream`) into `g`. Global capture mode: any
// unsafe call during capture (an allocation, a synchronisation, the legacy stream) from any
// thread invalidates it, which is how an op that breaks the spec's graph rule shows up here.
void capture(cudaStream_t stream, Graph& g, const std::function<void()>& body) {
  BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  try {
    body();
  } catch (...) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream, &partial);
    if (partial != nullptr) cudaGraphDestroy(partial);
    cudaGetLastError();
    throw;
  }
  const cudaError_t err = cudaStreamEndCapture(stream, &g.graph);
  if (err != cudaSuccess) {
    cudaGetLastError();
    MHC_FAIL("stream capture failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
             "): the op allocated, synchronised or touched another stream while capturing");
  }
  BENCH_CUDA(cudaGraphInstantiate(&g.exec, g.graph, 0));
  BENCH_CUDA(cudaGraphUpload(g.exec, stream));
}

// Start/stop event pairs, reused across rows.
class Events {
 public:
  explicit Events(size_t pairs) : start_(pairs), stop_(pairs) {
    for (size_t i = 0; i < pairs; ++i) {
      BENCH_CUDA(cudaEventCreate(&start_[i]));
      BENCH_CUDA(cudaEventCreate(&stop_[i]));
    }
  }
  ~Events() {
    for (size_t i = 0; i < start_.size(); ++i) {
      cudaEventDestroy(start_[i]);
      cudaEventDestroy(stop_[i]);
    }
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  size_t size() const { return start_.size(); }
  cudaEvent_t start(size_t i) const { return start_[i]; }
  cudaEvent_t stop(size_t i) const { return stop_[i]; }
  // Milliseconds between start(i) and stop(i); call after the stream has been synchronised.
  double ms(size_t i) const {
    float t = 0;
    BENCH_CUDA(cudaEventElapsedTime(&t, start_[i], stop_[i]));
    return static_cast<double>(t);
  }

 private:
  std::vector<cudaEvent_t> start_, stop_;
};

// Times `count` back-to-back runs of `enqueue` on `stream`; returns milliseconds per run.
std::vector<double> time_runs(cudaStream_t stream, Events& ev, int count, const std::function<void()>& enqueue) {
  MHC_CHECK(static_cast<size_t>(count) <= ev.size(), "bench: internal: not enough events");
  for (int i = 0; i < count; ++i) {
    BENCH_CUDA(cudaEventRecord(ev.start(i), stream));
    enqueue();
    BENCH_CUDA(cudaEventRecord(ev.stop(i), stream));
  }
  BENCH_CUDA(cudaStreamSynchronize(stream));
  std::vector<double> ms(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) ms[i] = ev.ms(i);
  return ms;
}

// ---------------------------------------------------------------------------------------------
// Random device data. Random bf16 comes from one seeded host pattern of an odd length (so rows
// of any width do not repeat in step), uploaded once and tiled on the device by doubling
// copies: a 10 GB ring fills in milliseconds and is random and non-zero everywhere.
class RandomSource {
 public:
  RandomSource(uint64_t seed, cudaStream_t stream) : stream_(stream) {
    Rng rng(seed * 0x9e3779b97f4a7c15ull + 12345u);
    const size_t count = (size_t{1} << 22) + 4099;  // ~8 MiB of bf16, odd length
    const std::vector<uint16_t> host = random_bf16(count, rng, 1.0);
    pattern_ = DeviceBuffer(count * 2);
    BENCH_CUDA(cudaMemcpy(pattern_.get(), host.data(), count * 2, cudaMemcpyHostToDevice));
  }
  // Fills `bytes` (even) at `dst` with random bf16; `salt` picks the starting offset.
  void fill_bf16(char* dst, size_t bytes, uint64_t salt) {
    if (bytes == 0) return;
    const size_t elems = pattern_.bytes() / 2;
    const size_t offset = static_cast<size_t>((salt * 2654435761u) % (elems / 2)) * 2;
    const size_t first = std::min(bytes, pattern_.bytes() - offset);
    BENCH_CUDA(cudaMemcpyAsync(dst, pattern_.get() + offset, first, cudaMemcpyDeviceToDevice, stream_));
    for (size_t done = first; done < bytes;) {
      const size_t chunk = std::min(done, bytes - done);
      BENCH_CUDA(cudaMemcpyAsync(dst + done, dst, chunk, cudaMemcpyDeviceToDevice, stream_));
      done += chunk;
    }
  }

 private:
  cudaStream_t stream_;
  DeviceBuffer pattern_;
};

// ---------------------------------------------------------------------------------------------
// Protocol step 1: copy bandwidth and graph node cost.

void measure_copy(cudaStream_t stream, Events& ev, RandomSource& rnd, EnvInfo& env) {
  const size_t bytes = size_t{1} << 30;  // 1 GiB each way
  DeviceBuffer src(bytes), dst(bytes);
  rnd.fill_bf16(src.get(), bytes, 1);
  auto copy = [&] {
    BENCH_CUDA(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, stream));
  };
  time_runs(stream, ev, 2, copy);  // warm-up
  const std::vector<double> ms = time_runs(stream, ev, 10, copy);
  std::vector<double> gbps;
  for (double t : ms) gbps.push_back(2.0 * static_cast<double>(bytes) / (t * 1e-3) / 1e9);
  env.copy_gbps_spread = summarize(gbps);
  env.copy_gbps = env.copy_gbps_spread.median;
  env.copy_bytes = static_cast<int64_t>(bytes);
}

void measure_graph_node(cudaStream_t stream, Events& ev, EnvInfo& env) {
  const int nodes = 1000;
  Graph g;
  capture(stream, g, [&] {
    for (int i = 0; i < nodes; ++i) BENCH_CUDA(launch_empty_kernel(stream));
  });
  auto replay = [&] { BENCH_CUDA(cudaGraphLaunch(g.exec, stream)); };
  time_runs(stream, ev, 3, replay);
  const Stats s = summarize(time_runs(stream, ev, 20, replay));
  env.graph_node_us = s.median * 1e3 / nodes;
  env.graph_nodes = nodes;
}

// ---------------------------------------------------------------------------------------------
// Weight sets of one hidden size, grown on demand. Mix sets serve post_pre, pre and
// pre_broadcast; head sets serve head; one RMSNorm weight [H] per set index.
class WeightPool {
 public:
  WeightPool(const Options& o, Device device, int64_t H, int32_t n)
      : o_(o), device_(device), H_(H), n_(n) {}

  const PreparedWeights& mix(int i) const { return mix_[static_cast<size_t>(i)]; }
  const PreparedWeights& head(int i) const { return head_[static_cast<size_t>(i)]; }
  const void* norm(int i) const { return norm_ptrs_[static_cast<size_t>(i)]; }

  void ensure(bool head_sets, int count) {
    std::vector<PreparedWeights>& list = head_sets ? head_ : mix_;
    const int have = static_cast<int>(list.size());
    if (count > have) {
      const auto t0 = std::chrono::steady_clock::now();
      const int32_t rows = head_sets ? n_ : (n_ + 2) * n_;
      const int64_t K = n_ * H_;
      // Generation (the expensive part) in parallel, one seeded Rng per set; preparation serial.
      std::vector<HostBlock> blocks(static_cast<size_t>(count - have));
      const unsigned hw = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
      std::vector<std::thread> threads;
      for (unsigned t = 0; t < hw; ++t) {
        threads.emplace_back([&, t] {
          for (size_t b = t; b < blocks.size(); b += hw) {
            const uint64_t idx = static_cast<uint64_t>(have) + b;
            Rng rng(o_.seed * 1000003u + static_cast<uint64_t>(H_) * 7919u + (head_sets ? 1u : 0u) * 104729u +
                    idx * 0x9e3779b97f4a7c15ull);
            HostBlock& hb = blocks[b];
            hb.fn = random_f32(static_cast<size_t>(rows) * static_cast<size_t>(K), rng,
                               1.0 / std::sqrt(static_cast<double>(K)));
            hb.scale.resize(head_sets ? 1 : 3);
            for (float& s : hb.scale) s = static_cast<float>(0.5 + rng.uniform());
            hb.base = random_f32(static_cast<size_t>(rows), rng, 0.5);
          }
        });
      }
      for (std::thread& th : threads) th.join();
      for (HostBlock& hb : blocks) {
        if (head_sets) {
          HeadWeightsView v;
          v.fn = make_view(hb.fn.data(), DType::kFloat32, {n_, K});
          v.scale = make_view(hb.scale.data(), DType::kFloat32, {1});
          v.base = make_view(hb.base.data(), DType::kFloat32, {n_});
          list.push_back(prepare_head(v, n_, H_, device_));
        } else {
          MixWeightsView v;
          v.fn = make_view(hb.fn.data(), DType::kFloat32, {rows, K});
          v.scale = make_view(hb.scale.data(), DType::kFloat32, {3});
          v.base = make_view(hb.base.data(), DType::kFloat32, {rows});
          list.push_back(prepare(v, n_, H_, device_));
        }
        hb = HostBlock{};
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "  prepared %d %s weight sets for H=%lld (%.1f s)\n", count - have,
                   head_sets ? "head" : "mix", static_cast<long long>(H_), s);
    }
    ensure_norms(count);
  }

  // The RMSNorm weights [H] of `count` sets only (collapse reads no mix weights).
  void ensure_norms(int count) {
    const int have = static_cast<int>(norm_ptrs_.size());
    if (count <= have) return;
    const size_t sets = static_cast<size_t>(count - have), H = static_cast<size_t>(H_);
    Rng rng(o_.seed * 31u + static_cast<uint64_t>(have) * 1000033u + static_cast<uint64_t>(H_));
    std::vector<uint16_t> host(sets * H);
    for (uint16_t& w : host) w = detail::float_to_bf16(static_cast<float>(1.0 + 0.1 * rng.normal()));
    norm_chunks_.emplace_back(sets * H * 2);
    BENCH_CUDA(cudaMemcpy(norm_chunks_.back().get(), host.data(), host.size() * 2, cudaMemcpyHostToDevice));
    for (size_t s = 0; s < sets; ++s) norm_ptrs_.push_back(norm_chunks_.back().get() + s * H * 2);
  }

 private:

  const Options& o_;
  Device device_;
  int64_t H_;
  int32_t n_;
  std::vector<PreparedWeights> mix_, head_;
  std::vector<DeviceBuffer> norm_chunks_;
  std::vector<const void*> norm_ptrs_;
};

// ---------------------------------------------------------------------------------------------
// The activations of one row: a ring of R slots carved out of one allocation. bf16 buffers
// first (filled with random bf16 in one go), then the fp32 mixes (valid values: post in
// (0.2, 1.8), comb doubly stochastic, pre in (0.2, 1)).
struct Slot {
  char* residual = nullptr;      // [T,n,H] bf16
  char* layer_output = nullptr;  // [T,H] bf16
  char* layer_input = nullptr;   // [T,H] bf16 (head: the output)
  char* embedding = nullptr;     // [T,H] bf16
  char* post_mix = nullptr;      // [T,n] fp32
  char* comb_mix = nullptr;      // [T,n,n] fp32
  char* pre_mix = nullptr;       // [T,n] fp32
};

struct SlotNeeds {
  bool residual = false, layer_output = false, layer_input = false, embedding = false;
  bool mixes = false, pre_mix = false;
};

SlotNeeds needs_of(const std::string& op, bool shifted) {
  SlotNeeds s;
  s.residual = op != "pre_broadcast";
  s.layer_output = op == "post_pre" || op == "post";
  s.layer_input = op != "post" && op != "mixes";
  s.embedding = op == "pre_broadcast";
  s.mixes = op != "head" && op != "collapse";
  s.pre_mix = (op == "post_pre" && shifted) || op == "mixes" || op == "collapse";
  return s;
}

struct SlotSizes {
  size_t residual, row, post, comb, pre;
  size_t bf16_bytes(const SlotNeeds& s) const {
    return (s.residual ? residual : 0) + (s.layer_output ? row : 0) + (s.layer_input ? row : 0) +
           (s.embedding ? row : 0);
  }
  size_t f32_bytes(const SlotNeeds& s) const { return (s.mixes ? post + comb : 0) + (s.pre_mix ? pre : 0); }
};

SlotSizes slot_sizes(int64_t T, int64_t H, int64_t n) {
  const size_t t = static_cast<size_t>(T), h = static_cast<size_t>(H), nn = static_cast<size_t>(n);
  return {align_up(t * nn * h * 2), align_up(t * h * 2), align_up(t * nn * 4), align_up(t * nn * nn * 4),
          align_up(t * nn * 4)};
}

class Ring {
 public:
  Ring(const SlotNeeds& needs, const SlotSizes& sz, int slots, int64_t T, int64_t n, RandomSource& rnd,
       uint64_t seed, cudaStream_t stream) {
    const size_t bf = sz.bf16_bytes(needs), f32 = sz.f32_bytes(needs);
    const size_t R = static_cast<size_t>(slots);
    mem_ = DeviceBuffer(R * (bf + f32));
    char* p = mem_.get();
    slots_.resize(R);
    auto take = [&p](bool want, size_t bytes) -> char* {
      if (!want) return nullptr;
      char* q = p;
      p += bytes;
      return q;
    };
    for (Slot& s : slots_) {
      s.residual = take(needs.residual, sz.residual);
      s.layer_output = take(needs.layer_output, sz.row);
      s.layer_input = take(needs.layer_input, sz.row);
      s.embedding = take(needs.embedding, sz.row);
    }
    char* f32_begin = p;
    for (Slot& s : slots_) {
      s.post_mix = take(needs.mixes, sz.post);
      s.comb_mix = take(needs.mixes, sz.comb);
      s.pre_mix = take(needs.pre_mix, sz.pre);
    }
    rnd.fill_bf16(mem_.get(), R * bf, seed);
    if (f32 > 0) {
      // Host values for the whole fp32 part, slot by slot, in the same order as carved above.
      std::vector<float> host(R * f32 / 4, 0.0f);
      Rng rng(seed * 6364136223846793005ull + 1442695040888963407ull);
      const size_t nn = static_cast<size_t>(n), tokens = static_cast<size_t>(T);
      size_t at = 0;
      for (size_t r = 0; r < R; ++r) {
        if (needs.mixes) {
          for (size_t i = 0; i < tokens * nn; ++i) host[at + i] = static_cast<float>(0.2 + 1.6 * rng.uniform());
          at += sz.post / 4;
          for (size_t t = 0; t < tokens; ++t) doubly_stochastic(&host[at + t * nn * nn], nn, rng);
          at += sz.comb / 4;
        }
        if (needs.pre_mix) {
          for (size_t i = 0; i < tokens * nn; ++i) host[at + i] = static_cast<float>(0.2 + 0.8 * rng.uniform());
          at += sz.pre / 4;
        }
      }
      BENCH_CUDA(cudaMemcpyAsync(f32_begin, host.data(), host.size() * 4, cudaMemcpyHostToDevice, stream));
    }
    BENCH_CUDA(cudaStreamSynchronize(stream));
  }
  const Slot& operator[](int i) const { return slots_[static_cast<size_t>(i)]; }
  int size() const { return static_cast<int>(slots_.size()); }

 private:
  DeviceBuffer mem_;
  std::vector<Slot> slots_;
};

// ---------------------------------------------------------------------------------------------
// One row's chained calls.
struct Chain {
  std::string op;
  bool shifted = false, fold = false;
  Config config;
  int64_t T = 0;
  Device device{};
  const WeightPool* pool = nullptr;
  const Ring* ring = nullptr;
  int sets = 0;
  Exec exec;

  // Builds call i; runs it (run = true) or returns the variant the dispatcher picks for it.
  std::string call(int i, bool run) const {
    ChainCall c;
    c.op = op;
    c.shifted = shifted;
    c.config = config;
    c.T = T;
    c.device = device;
    c.exec = exec;
    const Slot& in = (*ring)[i % ring->size()];
    const Slot& next = (*ring)[(i + 1) % ring->size()];
    return chain_call(c, *pool, i % sets, fold, ptrs(in), ptrs(next), run);
  }

  static SlotPtrs ptrs(const Slot& s) {
    SlotPtrs p;
    p.residual = s.residual;
    p.layer_output = s.layer_output;
    p.layer_input = s.layer_input;
    p.embedding = s.embedding;
    p.post_mix = s.post_mix;
    p.comb_mix = s.comb_mix;
    p.pre_mix = s.pre_mix;
    return p;
  }
};

// ---------------------------------------------------------------------------------------------

struct Context {
  Context(const Options& options, Device dev) : o(options), device(dev) {}
  const Options& o;
  Device device;
  cudaStream_t stream = nullptr;
  EnvInfo env;
  Workspace workspace;
  std::unique_ptr<RandomSource> rnd;
  std::unique_ptr<Events> events;
  uint64_t salt = 100;
};

void measure_row(Context& cx, WeightPool& pool, const OpMode& om, int64_t H, int64_t T, Row& row) {
  const Options& o = cx.o;
  const std::string op = om.op, mode = om.mode;
  const bool shifted = mode.rfind("shifted", 0) == 0;
  const bool fold = mode.find("fold") != std::string::npos;
  Chain ch;
  ch.op = op;
  ch.shifted = shifted;
  ch.fold = fold;
  ch.config = model_preset(shifted ? "deepseek-v4.1-flash" : "deepseek-v4-flash").config;
  ch.config.H = H;
  ch.T = T;
  ch.device = cx.device;
  ch.exec.stream = cx.stream;
  ch.exec.workspace = &cx.workspace;
  ch.exec.variant = o.variant.empty() ? nullptr : o.variant.c_str();
  const int64_t n = ch.config.n;
  row.n = n;
  const double l2x2 = 2.0 * static_cast<double>(cx.env.l2_bytes);

  // Weight sets: the bytes one call reads from them, over all sets, exceed 2x L2.
  const double wb = weight_bytes(op, H, n);
  int sets = o.min_sets;
  if (wb > 0) sets = std::max(sets, static_cast<int>(std::ceil(l2x2 / wb)) + 1);
  if (op == "collapse") {
    pool.ensure_norms(sets);
  } else if (op != "post") {
    pool.ensure(op == "head", sets);
  }
  ch.pool = &pool;
  ch.sets = sets;
  row.sets = sets;

  // Activation ring: 2x L2 of slots where that is cheap, else as many as --act-gib allows, >= 2.
  const SlotNeeds needs = needs_of(op, shifted);
  const SlotSizes sz = slot_sizes(T, H, n);
  const double slot_bytes = static_cast<double>(sz.bf16_bytes(needs) + sz.f32_bytes(needs));
  int R = static_cast<int>(std::ceil(l2x2 / slot_bytes)) + 1;
  R = std::min(R, sets + 1);
  R = std::min(R, static_cast<int>(o.act_gib * kGiB / slot_bytes));
  R = std::max(R, 2);
  size_t free_b = 0, total_b = 0;
  BENCH_CUDA(cudaMemGetInfo(&free_b, &total_b));
  MHC_CHECK(R * slot_bytes + 0.5 * kGiB < static_cast<double>(free_b), "activations need ",
            R * slot_bytes / kGiB, " GiB (", R, " slots), only ", free_b / kGiB, " GiB free");
  Ring ring(needs, sz, R, T, n, *cx.rnd, o.seed * 977u + cx.salt++, cx.stream);
  ch.ring = &ring;
  row.ring = R;

  // Validate every call of the longest possible chain and record the dispatcher's choice.
  row.variant = ch.call(0, false);

  // One eager call (errors surface here, outside any capture), then a pilot graph of a few
  // calls measures the GPU time per call (no launch overhead), which sizes the chain: all the
  // weight sets, unless one replay would then exceed --graph-ms; never fewer calls than stream
  // 2x L2 per replay, so that a replay never finds the previous one's data in L2.
  ch.call(0, true);
  BENCH_CUDA(cudaStreamSynchronize(cx.stream));
  double per_call_ms = 0;
  {
    const int P = std::min(3, sets);
    Graph pilot;
    capture(cx.stream, pilot, [&] {
      for (int i = 0; i < P; ++i) ch.call(i, true);
    });
    auto replay = [&] { BENCH_CUDA(cudaGraphLaunch(pilot.exec, cx.stream)); };
    time_runs(cx.stream, *cx.events, 1, replay);
    per_call_ms = time_runs(cx.stream, *cx.events, 1, replay)[0] / P;
  }
  const double l_time = std::floor(o.graph_ms / std::max(per_call_ms, 1e-6));
  const double l_cold = std::ceil(l2x2 / std::max(row.ideal, 1.0));
  const int L = static_cast<int>(std::max(1.0, std::min(static_cast<double>(sets), std::max(l_time, l_cold))));
  for (int i = 1; i < L; ++i) ch.call(i, false);  // validation of every call, outside capture
  row.chain = L;

  Graph g;
  capture(cx.stream, g, [&] {
    for (int i = 0; i < L; ++i) ch.call(i, true);
  });
  auto replay = [&] { BENCH_CUDA(cudaGraphLaunch(g.exec, cx.stream)); };
  time_runs(cx.stream, *cx.events, o.warmup, replay);
  std::vector<double> us = time_runs(cx.stream, *cx.events, o.reps, replay);
  for (double& t : us) t = t * 1e3 / L;
  row.us = summarize(us);
  row.reps = o.reps;
  row.gbps = row.ideal / (row.us.median * 1e-6) / 1e9;
  row.pct_copy = 100.0 * row.gbps / cx.env.copy_gbps;
}

}  // namespace

int run_gpu(const Options& o) {
  MHC_CHECK(cuda_available(), "mhc bench: no CUDA device is visible (this build has the CUDA backend)");
  int count = 0;
  BENCH_CUDA(cudaGetDeviceCount(&count));
  MHC_CHECK(o.device >= 0 && o.device < count, "--device: expected 0..", count - 1, ", got ", o.device);
  BENCH_CUDA(cudaSetDevice(o.device));
  std::fprintf(stderr, "mhc bench: %zu ops, %zu hidden sizes, %zu token counts\n", o.ops.size(), o.Hs.size(),
               o.Ts.size());
  const auto t_start = std::chrono::steady_clock::now();
  auto elapsed_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count(); };

  Context cx(o, Device{DeviceType::kCUDA, o.device});
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, o.device));
  cx.env.device_name = prop.name;
  cx.env.cc_major = prop.major;
  cx.env.cc_minor = prop.minor;
  cx.env.sm_count = prop.multiProcessorCount;
  cx.env.l2_bytes = prop.l2CacheSize;
  cx.env.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  BENCH_CUDA(cudaRuntimeGetVersion(&cx.env.runtime_version));
  BENCH_CUDA(cudaDriverGetVersion(&cx.env.driver_version));
  cx.env.command = run_command(o, "");

  BENCH_CUDA(cudaStreamCreateWithFlags(&cx.stream, cudaStreamNonBlocking));
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } stream_guard{cx.stream};
  cx.events = std::make_unique<Events>(static_cast<size_t>(std::max(o.reps, 32)));
  cx.rnd = std::make_unique<RandomSource>(o.seed, cx.stream);

  // Protocol step 1.
  measure_copy(cx.stream, *cx.events, *cx.rnd, cx.env);
  measure_graph_node(cx.stream, *cx.events, cx.env);
  std::fprintf(stderr, "mhc bench: %s, %d SMs, L2 %.1f MiB: copy %.1f GB/s (read+write, min %.1f, max %.1f), "
                       "graph node %.3f us\n",
               cx.env.device_name.c_str(), cx.env.sm_count, static_cast<double>(cx.env.l2_bytes) / (1 << 20),
               cx.env.copy_gbps, cx.env.copy_gbps_spread.min, cx.env.copy_gbps_spread.max, cx.env.graph_node_us);
  JsonWriter json(o.out);
  json.env(cx.env);

  // One workspace for every call, created before any capture.
  const int64_t max_T = *std::max_element(o.Ts.begin(), o.Ts.end());
  WorkspaceOptions wo;
  wo.max_tokens = max_T;
  wo.max_n = 4;
  wo.n4_slice_tokens = o.slice_tokens;
  wo.decode_max_tokens = o.decode_max_tokens;
  cx.workspace = Workspace::create(cx.device, wo);

  std::vector<const OpMode*> plan;
  for (const std::string& op : o.ops) {
    for (const OpMode& m : op_modes()) {
      if (op != m.op) continue;
      if (!o.modes.empty() && std::find(o.modes.begin(), o.modes.end(), m.mode) == o.modes.end()) continue;
      plan.push_back(&m);
    }
  }
  MHC_CHECK(!plan.empty(), "mhc bench: no (op, mode) pair left after --ops/--modes");
  const size_t total = plan.size() * o.Hs.size() * o.Ts.size();
  std::vector<Row> rows;
  std::vector<std::string> skipped;
  size_t index = 0;
  for (int64_t H : o.Hs) {
    WeightPool pool(o, cx.device, H, 4);
    for (const OpMode* m : plan) {
      for (int64_t T : o.Ts) {
        ++index;
        Row row;
        row.op = m->op;
        row.mode = m->mode;
        row.H = H;
        row.T = T;
        row.ideal = ideal_bytes(row.op, T, H, 4);
        row.target = target_us(row.ideal, cx.env.copy_gbps);
        row.command = row_command(o, row);
        if (o.budget_s > 0 && elapsed_s() > o.budget_s) {
          skipped.push_back(row.op + "/" + row.mode + " H=" + std::to_string(H) + " T=" + std::to_string(T));
          continue;
        }
        try {
          measure_row(cx, pool, *m, H, T, row);
        } catch (const std::exception& e) {
          row.error = e.what();
          cudaGetLastError();
          const cudaError_t sticky = cudaDeviceSynchronize();
          if (sticky != cudaSuccess) {
            json.row(cx.env, row);
            MHC_FAIL("CUDA context is broken after ", row.op, "/", row.mode, " H=", H, " T=", T, ": ",
                     cudaGetErrorString(sticky), " (row error: ", row.error, ")");
          }
        }
        json.row(cx.env, row);
        if (row.error.empty()) {
          std::fprintf(stderr, "[%zu/%zu] %s %s H=%lld T=%lld: %.2f us (p10 %.2f, p90 %.2f), %.1f%% of copy, "
                               "%s, chain %d, sets %d, ring %d (%.0f s)\n",
                       index, total, row.op.c_str(), row.mode.c_str(), static_cast<long long>(H),
                       static_cast<long long>(T), row.us.median, row.us.p10, row.us.p90, row.pct_copy,
                       row.variant.c_str(), row.chain, row.sets, row.ring, elapsed_s());
        } else {
          std::fprintf(stderr, "[%zu/%zu] %s %s H=%lld T=%lld: error: %s\n", index, total, row.op.c_str(),
                       row.mode.c_str(), static_cast<long long>(H), static_cast<long long>(T), row.error.c_str());
        }
        rows.push_back(row);
      }
    }
  }

  print_table(stdout, cx.env, rows);
  int failed = 0;
  for (const Row& r : rows) failed += !r.error.empty();
  if (!skipped.empty()) {
    std::printf("\n--budget-s %.0f reached: %zu rows not run (first: %s, last: %s)\n", o.budget_s, skipped.size(),
                skipped.front().c_str(), skipped.back().c_str());
    json.note("budget reached: " + std::to_string(skipped.size()) + " rows not run, from " + skipped.front() +
              " to " + skipped.back());
  }
  std::printf("%zu rows measured, %d failed, %zu skipped, %.0f s\n", rows.size() - failed, failed,
              skipped.size(), elapsed_s());
  return failed == 0 ? 0 : 4;
}

}  // namespace mhc::tools::bench

#endif  // MHC_WITH_CUDA

// tools/cmd_warmup.cpp - `mhc warmup`: how long Workspace::create (with its warmup: every kernel
// loaded) takes for a model preset and max tokens, and, with --first-call, the first call of
// each operator against its steady state in this (fresh) process: the startup row of
// docs/performance-spec.md (< 100 ms at max_tokens = 65536; first call within 1.5x).
//
//   mhc warmup [--model NAME] [--max-tokens N] [--device cuda:0] [--first-call] [--tokens T]
//              [--no-warmup] [--ops OP ...] [--out FILE.jsonl]
//
// --no-warmup creates the workspace without loading the kernels, to show the stall it removes.
// The CUDA context is created first and timed apart (an engine has one already); --busy-ms of
// memsets run before the first calls so that they are not timed at the idle GPU clock (into a
// buffer allocated before the workspace; --busy-alloc each: a fresh one per busy period).
// --out appends one JSON object per line (the create row, then one row per operator).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "mhc/mhc.hpp"
#include "tools/bench.hpp"
#include "tools/cli.hpp"
#include "tools/model.hpp"

#ifdef MHC_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace mhc::cli {

namespace {

struct WarmupOptions {
  std::string model = "deepseek-v4-flash";
  int64_t max_tokens = 65536;
  std::string device = "cuda:0";
  bool first_call = false;
  int64_t tokens = 1;
  bool no_warmup = false;
  double busy_ms = 50.0;  // GPU work (not mhc's) before the first calls, so the clocks have ramped up
  std::string busy_alloc = "once";  // once: the busy buffer is allocated before the workspace; each: per busy period
  std::vector<std::string> ops = {"pre_broadcast", "post_pre", "pre", "post", "head"};  // timed in this order
  std::string out;
};

// Page faults (minor + major) and context switches (voluntary + involuntary) of the process.
struct Usage {
  long faults = 0, switches = 0;
};
Usage usage_now() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return Usage{r.ru_minflt + r.ru_majflt, r.ru_nvcsw + r.ru_nivcsw};
}

#ifdef MHC_WITH_CUDA
constexpr size_t kBusyBytes = size_t{256} << 20;  // busy_gpu's buffer
#endif

double now_ms() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device{};
  if (s == "cuda") return Device{DeviceType::kCUDA, 0};
  MHC_CHECK(s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.size() < 12 &&
                s.find_first_not_of("0123456789", 5) == std::string::npos,
            "--device: expected cpu, cuda or cuda:N, got '", s, "'");
  return Device{DeviceType::kCUDA, std::stoi(s.substr(5))};
}

void sync(bool gpu) {
  (void)gpu;
#ifdef MHC_WITH_CUDA
  if (!gpu) return;
  const cudaError_t err = cudaDeviceSynchronize();
  MHC_CHECK(err == cudaSuccess, "cudaDeviceSynchronize failed: ", cudaGetErrorString(err));
#endif
}

// The CUDA context of the device, created before anything is timed: an engine has one already,
// and its creation (tens of ms) is the driver's, not the workspace's. Returns its time in ms.
double create_context(const Device& device) {
#ifdef MHC_WITH_CUDA
  if (device.type != DeviceType::kCUDA) return 0.0;
  const double t0 = now_ms();
  MHC_CHECK(cudaSetDevice(device.id) == cudaSuccess && cudaFree(nullptr) == cudaSuccess,
            "warmup: cannot create the CUDA context of ", device.id);
  return now_ms() - t0;
#else
  (void)device;
  return 0.0;
#endif
}

// The buffer of busy_gpu's memsets (256 MB), or none off the GPU.
std::shared_ptr<void> busy_buffer(const Device& device) {
#ifdef MHC_WITH_CUDA
  if (device.type != DeviceType::kCUDA) return nullptr;
  void* buf = nullptr;
  MHC_CHECK(cudaMalloc(&buf, kBusyBytes) == cudaSuccess, "warmup: cudaMalloc for --busy-ms failed");
  return std::shared_ptr<void>(buf, [](void* p) { cudaFree(p); });
#else
  (void)device;
  return nullptr;
#endif
}

// Keeps the GPU busy with memsets of `buf` (no mhc kernel) for about `ms`, so that a first call is
// not timed at the idle clock (an idle H200 reports 345 MHz and ramps up under load).
void busy_gpu(const std::shared_ptr<void>& buf, double ms) {
#ifdef MHC_WITH_CUDA
  if (buf == nullptr || ms <= 0) return;
  const double t0 = now_ms();
  while (now_ms() - t0 < ms) {
    MHC_CHECK(cudaMemset(buf.get(), 1, kBusyBytes) == cudaSuccess, "warmup: cudaMemset failed");
    MHC_CHECK(cudaDeviceSynchronize() == cudaSuccess, "warmup: cudaDeviceSynchronize failed");
  }
#else
  (void)buf;
  (void)ms;
#endif
}

// The medians of 21 back-to-back calls of `timed` (returns the wall time with the synchronisation
// and sets the host part through its argument).
struct Steady {
  double wall_us = 0.0, host_us = 0.0;
};
template <class F>
Steady steady_of(F&& timed) {
  std::vector<double> wall, host;
  for (int i = 0; i < 21; ++i) {
    double host_us = 0.0;
    wall.push_back(timed(host_us));
    host.push_back(host_us);
  }
  std::sort(wall.begin(), wall.end());
  std::sort(host.begin(), host.end());
  return Steady{wall[wall.size() / 2], host[host.size() / 2]};
}

// Device (or host) memory for one tensor, filled with `bytes` of host data.
struct Mem {
  void* ptr = nullptr;
  bool gpu = false;
  std::vector<uint8_t> host;
  Mem(const void* src, size_t bytes, bool on_gpu) : gpu(on_gpu) {
    if (!gpu) {
      host.assign(static_cast<const uint8_t*>(src), static_cast<const uint8_t*>(src) + bytes);
      ptr = host.data();
      return;
    }
#ifdef MHC_WITH_CUDA
    MHC_CHECK(cudaMalloc(&ptr, bytes == 0 ? 16 : bytes) == cudaSuccess, "cudaMalloc of ", bytes, " bytes failed");
    MHC_CHECK(cudaMemcpy(ptr, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess, "cudaMemcpy failed");
#endif
  }
  Mem(const Mem&) = delete;
  Mem& operator=(const Mem&) = delete;
  ~Mem() {
#ifdef MHC_WITH_CUDA
    if (gpu && ptr != nullptr) cudaFree(ptr);
#endif
  }
};

void emit(const WarmupOptions& o, const std::string& json) {
  std::printf("%s\n", json.c_str());
  if (o.out.empty()) return;
  std::ofstream f(o.out, std::ios::app);
  MHC_CHECK(f.good(), "--out: cannot append to ", o.out);
  f << json << "\n";
}

int run_warmup(const WarmupOptions& o) {
  const ModelPreset& preset = model_preset(o.model);
  const Config c = preset.config;
  const Device device = parse_device(o.device);
  MHC_CHECK(device.type == DeviceType::kCPU || cuda_available(), "warmup: ", o.device,
            " requested, but no CUDA device is visible (or mhc was built without CUDA)");
  MHC_CHECK(o.max_tokens >= 1, "--max-tokens: expected >= 1, got ", o.max_tokens);
  MHC_CHECK(o.tokens >= 1 && o.tokens <= o.max_tokens, "--tokens: expected 1..max-tokens, got ", o.tokens);

  // Everything timed is the first thing of its kind in this process.
  WorkspaceOptions wo;
  wo.max_tokens = o.max_tokens;
  wo.max_n = c.n;
  wo.warmup = !o.no_warmup;
  const double context_ms = create_context(device);
  // Allocated before the workspace, as an engine allocates its own memory at startup, so that
  // with "once" no allocation of the tool's comes between a busy period and a timed call.
  std::shared_ptr<void> busy_buf = o.busy_alloc == "once" ? busy_buffer(device) : nullptr;
  const double t0 = now_ms();
  Workspace ws = Workspace::create(device, wo);
  const double create_ms = now_ms() - t0;
  const double t1 = now_ms();
  const WarmupReport again = warmup(device);  // after create: everything is loaded already
  const double again_ms = now_ms() - t1;
  char line[768];
  std::snprintf(line, sizeof line,
                "{\"what\": \"workspace_create\", \"model\": \"%s\", \"device\": \"%s\", \"max_tokens\": %lld, "
                "\"warmup\": %s, \"context_ms\": %.3f, \"create_ms\": %.3f, \"kernels\": %d, \"loaded\": %d, "
                "\"warmup_again_ms\": %.3f, \"version\": \"%s\"}",
                preset.name.c_str(), o.device.c_str(), static_cast<long long>(o.max_tokens),
                o.no_warmup ? "false" : "true", context_ms, create_ms, again.kernels, again.loaded, again_ms, version());
  emit(o, line);
  std::fprintf(stderr,
               "mhc warmup: Workspace::create(%s, max_tokens %lld)%s: %.2f ms after the CUDA context (%.2f ms); "
               "%d of %d kernels loaded\n",
               o.device.c_str(), static_cast<long long>(o.max_tokens), o.no_warmup ? " without warmup" : "",
               create_ms, context_ms, again.loaded, again.kernels);
  if (!o.first_call) return 0;

  // The first call of each operator, then the median of later ones (wall clock with sync).
  const bool gpu = device.type == DeviceType::kCUDA;
  const int64_t T = o.tokens, n = c.n, H = c.H, K = c.K(), rows = c.M();
  tools::Rng rng(7);
  const std::vector<uint16_t> res_h = tools::random_bf16(static_cast<size_t>(T * n * H), rng);
  const std::vector<uint16_t> x_h = tools::random_bf16(static_cast<size_t>(T * H), rng);
  const std::vector<uint16_t> norm_h = tools::random_bf16(static_cast<size_t>(H), rng, 0.1);
  std::vector<float> post_h(static_cast<size_t>(T * n), 0.5f), comb_h(static_cast<size_t>(T * n * n), 0.25f);
  const std::vector<float> fn = tools::random_f32(static_cast<size_t>(rows * K), rng, 0.01);
  const std::vector<float> scale = {1.0f, 1.0f, 1.0f}, base(static_cast<size_t>(rows), 0.1f);
  const std::vector<float> hfn = tools::random_f32(static_cast<size_t>(n * K), rng, 0.01);
  const std::vector<float> hscale = {1.0f}, hbase(static_cast<size_t>(n), 0.1f);
  const PreparedWeights w = prepare({make_view(fn.data(), DType::kFloat32, {rows, K}),
                                     make_view(scale.data(), DType::kFloat32, {3}),
                                     make_view(base.data(), DType::kFloat32, {rows})},
                                    c.n, H, device);
  const PreparedWeights hw = prepare_head({make_view(hfn.data(), DType::kFloat32, {n, K}),
                                           make_view(hscale.data(), DType::kFloat32, {1}),
                                           make_view(hbase.data(), DType::kFloat32, {n})},
                                          c.n, H, device);
  Mem residual(res_h.data(), res_h.size() * 2, gpu), x(x_h.data(), x_h.size() * 2, gpu);
  Mem norm(norm_h.data(), norm_h.size() * 2, gpu), post(post_h.data(), post_h.size() * 4, gpu);
  Mem comb(comb_h.data(), comb_h.size() * 4, gpu);
  Mem residual_out(res_h.data(), res_h.size() * 2, gpu), layer_input(x_h.data(), x_h.size() * 2, gpu);
  Mem post_out(post_h.data(), post_h.size() * 4, gpu), comb_out(comb_h.data(), comb_h.size() * 4, gpu);
  Mem pre_out(post_h.data(), post_h.size() * 4, gpu);
  // Each operator's call as the benchmark makes it (tools/bench_common.cpp), normal mode, folded.
  tools::bench::SlotPtrs in, next;
  in.residual = residual.ptr;
  in.layer_output = x.ptr;
  in.embedding = x.ptr;
  in.layer_input = layer_input.ptr;
  in.post_mix = post.ptr;
  in.comb_mix = comb.ptr;
  next.residual = residual_out.ptr;
  next.post_mix = post_out.ptr;
  next.comb_mix = comb_out.ptr;
  next.pre_mix = pre_out.ptr;
  tools::bench::ChainCall call;
  call.config = c;
  call.T = T;
  call.device = device;
  call.exec.workspace = gpu ? &ws : nullptr;
  call.mix = &w;
  call.head = &hw;
  call.norm = norm.ptr;
  sync(gpu);
  // "each": a fresh buffer per busy period, held through the timed calls (freed after them: a
  // cudaFree just before them would be timed too).
  auto busy_period = [&]() {
    if (o.busy_alloc == "each") busy_buf = busy_buffer(device);
    busy_gpu(busy_buf, o.busy_ms);
  };
  busy_period();
  // One call: its wall time with the synchronisation, and the host part (until the call returns).
  // `faults` / `switches`: the page faults and context switches of the process during the host
  // part (getrusage), to tell a first call's extra host time apart.
  long faults = 0, switches = 0;
  auto timed_call = [&](double& host_us) {
    const Usage u0 = usage_now();
    const double c0 = now_ms();
    tools::bench::chain_call(call, in, next, true);
    host_us = (now_ms() - c0) * 1000.0;
    const Usage u1 = usage_now();
    faults = u1.faults - u0.faults;
    switches = u1.switches - u0.switches;
    sync(gpu);
    return (now_ms() - c0) * 1000.0;
  };
  for (const std::string& name : o.ops) {
    call.op = name;
    double first_host_us = 0.0;
    const double first_us = timed_call(first_host_us);
    const long first_faults = faults, first_switches = switches;
    const Steady steady = steady_of(timed_call);
    const double steady_us = steady.wall_us;
    // The control: one more call after another busy period, when the call is no longer the
    // first. What it costs above steady is the idle period's, not the first call's (cold host
    // caches after the busy loop's other API calls, the GPU's wake-up).
    double again_host_us = 0.0;
    double again_us = 0.0;
    {
      const std::shared_ptr<void> previous = busy_buf;  // with "each": freed after the timed call
      busy_period();
      again_us = timed_call(again_host_us);
    }
    std::snprintf(line, sizeof line,
                  "{\"what\": \"first_call\", \"op\": \"%s\", \"model\": \"%s\", \"T\": %lld, \"warmup\": %s, "
                  "\"busy_alloc\": \"%s\", "
                  "\"first_us\": %.2f, \"steady_us\": %.2f, \"ratio\": %.3f, \"first_host_us\": %.2f, "
                  "\"steady_host_us\": %.2f, \"after_busy_us\": %.2f, \"after_busy_host_us\": %.2f, "
                  "\"first_page_faults\": %ld, \"first_context_switches\": %ld, \"after_busy_page_faults\": %ld, "
                  "\"after_busy_context_switches\": %ld}",
                  name.c_str(), preset.name.c_str(), static_cast<long long>(T), o.no_warmup ? "false" : "true",
                  o.busy_alloc.c_str(), first_us, steady_us, steady_us > 0 ? first_us / steady_us : 0.0, first_host_us,
                  steady.host_us, again_us, again_host_us, first_faults, first_switches, faults,
                  switches);
    emit(o, line);
  }
  // The driver's own control, after every operator: a 256-byte cudaMemsetAsync (no mhc code) after
  // a busy period against its steady state, the same pattern as the calls above: what the platform
  // adds to a plain driver call after a busy period.
#ifdef MHC_WITH_CUDA
  if (gpu && busy_buf != nullptr) {
    // One row: `work` once after a busy period, then its back-to-back medians.
    auto control_row = [&](const char* what, auto&& work) {
      auto timed = [&](double& host_us) {
        const double c0 = now_ms();
        work();
        host_us = (now_ms() - c0) * 1000.0;
        sync(gpu);
        return (now_ms() - c0) * 1000.0;
      };
      busy_period();
      double after_host_us = 0.0;
      const double after_us = timed(after_host_us);
      const Steady steady = steady_of(timed);
      std::snprintf(line, sizeof line,
                    "{\"what\": \"driver_control\", \"call\": \"%s\", \"busy_alloc\": \"%s\", "
                    "\"after_busy_us\": %.2f, \"after_busy_host_us\": %.2f, \"steady_us\": %.2f, \"steady_host_us\": %.2f}",
                    what, o.busy_alloc.c_str(), after_us, after_host_us, steady.wall_us, steady.host_us);
      emit(o, line);
    };
    control_row("cudaMemsetAsync 256 B", [&] {
      MHC_CHECK(cudaMemsetAsync(busy_buf.get(), 0, 256, nullptr) == cudaSuccess, "warmup: cudaMemsetAsync failed");
    });
    // The same with mhc::warmup (the library's kernel attribute queries and one empty kernel
    // launched with the programmatic-serialization attribute, as every operator launches): does a
    // launch of that kind pay more after a busy period than the driver's memset?
    control_row("mhc::warmup", [&] { warmup(device); });
  }
#endif
  return 0;
}

}  // namespace

Action setup_warmup(CLI::App& app) {
  auto o = std::make_shared<WarmupOptions>();
  app.add_option("--model", o->model, "model preset (mhc run --help lists them)")->capture_default_str();
  app.add_option("--max-tokens", o->max_tokens, "the workspace's max_tokens")->check(decimal())->capture_default_str();
  app.add_option("--device", o->device, "cuda, cuda:N or cpu")->capture_default_str();
  app.add_flag("--first-call", o->first_call, "also time each operator's first call against its steady state");
  app.add_option("--tokens", o->tokens, "T of the --first-call calls")->check(decimal())->capture_default_str();
  app.add_flag("--no-warmup", o->no_warmup, "create the workspace without loading the kernels (shows the stall)");
  app.add_option("--busy-ms", o->busy_ms,
                 "ms of GPU memsets (no mhc kernel) before the first calls, so they are not timed at the idle "
                 "clock; 0: none")
      ->capture_default_str();
  app.add_option("--busy-alloc", o->busy_alloc,
                 "once: the busy buffer is allocated before the workspace (as an engine's memory); each: a fresh "
                 "one per busy period, so every timed call follows a fresh cudaMalloc")
      ->check(CLI::IsMember({"once", "each"}))
      ->capture_default_str();
  app.add_option("--ops", o->ops, "the operators of --first-call, timed in this order")
      ->delimiter(',')
      ->check(CLI::IsMember({"pre_broadcast", "post_pre", "pre", "post", "head"}))
      ->capture_default_str();
  app.add_option("--out", o->out, "append the rows as JSON lines to this file");
  app.footer("Prints one JSON line for Workspace::create (which loads every kernel the device can run; timed\n"
             "after the CUDA context is created, which is reported apart as context_ms) and,\n"
             "with --first-call, one per operator: its first call and the median of 21 later ones (wall\n"
             "clock with a device synchronisation). Run it in a fresh process: what it times happens once.");
  return [o] { return run_warmup(*o); };
}

}  // namespace mhc::cli

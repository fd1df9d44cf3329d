// tests/test_engine.cpp - what an inference engine needs beyond the kernels (issue 16):
//
//   EngineWeights.*   prepare into the caller's memory (size query, destination passing,
//                     attach_prepared), on the CPU here and on the GPU: the same bits as the
//                     allocating prepare, and the operators really read the caller's buffer
//   EngineWarmup.*    the kernel list (src/cuda/kernel_list.cuh); warmup loads it; exact coverage:
//                     every variant of the variant table is run over representative shapes with
//                     a launch recorder, and every kernel launched must be in the warmed set
//   EngineStreams.*   one workspace per stream (two streams at once, bit-equal to sequential
//                     runs); a bound workspace rejects another stream; the rule for an unbound
//                     one (another stream ordered after the first by an event) gives the same bits
//
// The GPU cases form the suite EngineGpu.* (ctest label gpu); they start with MHC_REQUIRE_GPU()
// and report SKIPPED without a device. The rest run anywhere (label cpu).
#include <cctype>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_harness.hpp"
#include "mhc/mhc.hpp"
#include "src/core/cuda_hooks.hpp"
#include "src/core/launch_record.hpp"

namespace {

using namespace mhc_test;
using mhc::Config;
using mhc::Device;
using mhc::DeviceType;
using mhc::HeadKind;
using mhc::PreSource;

// ---------------------------------------------------------------------------------------------
// One tensor: host bytes, and a device mirror where the case runs on the GPU.

struct Buf {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> host;
  DevMem dev;
  bool on_gpu = false;

  size_t bytes() const { return host.size(); }
  TensorView view() const {
    TensorView v;
    v.dtype = dtype;
    v.device = on_gpu ? gpu() : cpu();
    v.rank = static_cast<int32_t>(shape.size());
    int64_t stride = 1;
    for (int d = v.rank - 1; d >= 0; --d) {
      v.shape[d] = shape[d];
      v.strides[d] = stride;
      stride *= shape[d];
    }
    v.data = on_gpu ? dev.get() : const_cast<uint8_t*>(host.data());
    return v;
  }
  void upload() {
    if (on_gpu) copy_to_device(dev.get(), host.data(), host.size());
  }
  std::vector<uint8_t> fetch() const {
    if (!on_gpu) return host;
    std::vector<uint8_t> out(host.size());
    copy_to_host(out.data(), dev.get(), out.size());
    return out;
  }
};

Buf make_buf(DType dtype, std::vector<int64_t> shape, bool on_gpu) {
  Buf b;
  b.dtype = dtype;
  b.shape = std::move(shape);
  int64_t n = 1;
  for (int64_t s : b.shape) n *= s;
  b.host.assign(static_cast<size_t>(n) * static_cast<size_t>(mhc::dtype_size(dtype)), 0);
  b.on_gpu = on_gpu;
  if (on_gpu) b.dev = DevMem(b.host.size());
  return b;
}

void fill_bf16(Buf& b, mhc::tools::Rng& rng, double sigma) {
  auto* p = reinterpret_cast<uint16_t*>(b.host.data());
  for (size_t i = 0; i < b.host.size() / 2; ++i) p[i] = to_bf16(sigma * rng.normal());
  b.upload();
}

void fill_f32(Buf& b, mhc::tools::Rng& rng, double lo, double hi) {
  auto* p = reinterpret_cast<float*>(b.host.data());
  for (size_t i = 0; i < b.host.size() / 4; ++i) p[i] = static_cast<float>(lo + (hi - lo) * rng.uniform());
  b.upload();
}

// ---------------------------------------------------------------------------------------------
// Every tensor of every operator for one (n, H, T), with a call per operator mode.

struct Mode {
  const char* op;          // "pre", "post_pre", ...
  PreSource pre = PreSource::kComputed;
  HeadKind head = HeadKind::kLearned;
  bool norm = false;       // fold the RMSNorm
  bool broadcast = false;  // post / post_pre: the [T,H] residual; pre_broadcast: materialise streams
};

// The modes run per operator: between them every stage kernel form a plan has (carried,
// identity, computed pre; learned, carried, mean heads; with and without the norm fold).
std::vector<Mode> modes_of(const std::string& op) {
  if (op == "mixes") return {{"mixes"}};
  if (op == "collapse") return {{"collapse", PreSource::kCarried, HeadKind::kLearned, true},
                                {"collapse", PreSource::kIdentity}};
  if (op == "pre") return {{"pre", PreSource::kComputed, HeadKind::kLearned, true}, {"pre", PreSource::kCarried},
                           {"pre", PreSource::kIdentity}};
  if (op == "pre_broadcast") return {{"pre_broadcast", PreSource::kComputed, HeadKind::kLearned, true, true},
                                     {"pre_broadcast", PreSource::kIdentity}};
  if (op == "post") return {{"post"}, {"post", PreSource::kComputed, HeadKind::kLearned, false, true}};
  if (op == "post_pre") return {{"post_pre", PreSource::kComputed, HeadKind::kLearned, true},
                                {"post_pre", PreSource::kCarried}};
  if (op == "head") return {{"head", PreSource::kComputed, HeadKind::kLearned, true},
                            {"head", PreSource::kComputed, HeadKind::kCarried},
                            {"head", PreSource::kComputed, HeadKind::kMean}};
  return {};
}

struct Case {
  Config config;
  int64_t T = 0;
  bool on_gpu = false;
  mhc::tools::HostBlock block, head_block;
  mhc::PreparedWeights weights, head_weights;
  Buf residual, embedding, layer_output, post_mix, comb_mix, pre_mix_in, norm;  // inputs
  Buf residual_out, layer_input, post_mix_out, comb_mix_out, pre_mix_out;      // outputs

  Case(int32_t n, int64_t H, int64_t tokens, bool gpu_case, uint64_t seed) : T(tokens), on_gpu(gpu_case) {
    config.n = n;
    config.H = H;
    mhc::tools::Rng rng(seed);
    const int64_t rows = config.M(), K = config.K();
    block.fn = mhc::tools::random_f32(static_cast<size_t>(rows * K), rng, 1.0 / std::sqrt(static_cast<double>(K)));
    block.scale = {0.9f, 1.1f, 0.7f};
    block.base = mhc::tools::random_f32(static_cast<size_t>(rows), rng, 0.5);
    head_block.fn = mhc::tools::random_f32(static_cast<size_t>(n * K), rng, 1.0 / std::sqrt(static_cast<double>(K)));
    head_block.scale = {1.2f};
    head_block.base = mhc::tools::random_f32(static_cast<size_t>(n), rng, 0.5);
    const Device dev = on_gpu ? gpu() : cpu();
    weights = mhc::prepare(mix_view(), n, H, dev);
    head_weights = mhc::prepare_head(head_view(), n, H, dev);
    residual = make_buf(DType::kBFloat16, {T, n, H}, on_gpu);
    embedding = make_buf(DType::kBFloat16, {T, H}, on_gpu);
    layer_output = make_buf(DType::kBFloat16, {T, H}, on_gpu);
    post_mix = make_buf(DType::kFloat32, {T, n}, on_gpu);
    comb_mix = make_buf(DType::kFloat32, {T, n, n}, on_gpu);
    pre_mix_in = make_buf(DType::kFloat32, {T, n}, on_gpu);
    norm = make_buf(DType::kBFloat16, {H}, on_gpu);
    fill_bf16(residual, rng, 1.0);
    fill_bf16(embedding, rng, 1.0);
    fill_bf16(layer_output, rng, 0.5);
    fill_f32(post_mix, rng, 0.0, 2.0);
    fill_f32(comb_mix, rng, 0.0, 0.5);
    fill_f32(pre_mix_in, rng, 0.1, 1.0);
    fill_bf16(norm, rng, 0.1);
    residual_out = make_buf(DType::kBFloat16, {T, n, H}, on_gpu);
    layer_input = make_buf(DType::kBFloat16, {T, H}, on_gpu);
    post_mix_out = make_buf(DType::kFloat32, {T, n}, on_gpu);
    comb_mix_out = make_buf(DType::kFloat32, {T, n, n}, on_gpu);
    pre_mix_out = make_buf(DType::kFloat32, {T, n}, on_gpu);
  }

  mhc::MixWeightsView mix_view() const {
    const int64_t rows = config.M(), K = config.K();
    return {mhc::make_view(block.fn.data(), DType::kFloat32, {rows, K}),
            mhc::make_view(block.scale.data(), DType::kFloat32, {3}),
            mhc::make_view(block.base.data(), DType::kFloat32, {rows})};
  }
  mhc::HeadWeightsView head_view() const {
    const int64_t n = config.n, K = config.K();
    return {mhc::make_view(head_block.fn.data(), DType::kFloat32, {n, K}),
            mhc::make_view(head_block.scale.data(), DType::kFloat32, {1}),
            mhc::make_view(head_block.base.data(), DType::kFloat32, {n})};
  }

  // Runs one operator mode with `exec` and the weights given (the case's own by default).
  void run(const Mode& m, const mhc::Exec& exec, const mhc::PreparedWeights* w = nullptr,
           const mhc::PreparedWeights* hw = nullptr) {
    w = w != nullptr ? w : &weights;
    hw = hw != nullptr ? hw : &head_weights;
    const std::string op = m.op;
    const TensorView nw = m.norm ? norm.view() : TensorView{};
    if (op == "mixes") {
      mhc::MixesArgs a{config, residual.view(), w, pre_mix_out.view(), post_mix_out.view(), comb_mix_out.view(), exec};
      mhc::mixes(a);
    } else if (op == "collapse") {
      mhc::CollapseArgs a;
      a.config = config;
      a.pre_source = m.pre;
      a.residual = residual.view();
      if (m.pre == PreSource::kCarried) a.pre_mix = pre_mix_in.view();
      a.rmsnorm_weight = nw;
      a.layer_input = layer_input.view();
      a.exec = exec;
      mhc::collapse(a);
    } else if (op == "pre") {
      mhc::PreArgs a;
      a.config = config;
      a.pre_source = m.pre;
      a.residual = residual.view();
      a.weights = w;
      if (m.pre == PreSource::kCarried) a.pre_mix_in = pre_mix_in.view();
      a.rmsnorm_weight = nw;
      a.layer_input = layer_input.view();
      a.post_mix = post_mix_out.view();
      a.comb_mix = comb_mix_out.view();
      a.pre_mix_out = pre_mix_out.view();
      a.exec = exec;
      mhc::pre(a);
    } else if (op == "pre_broadcast") {
      mhc::PreBroadcastArgs a;
      a.config = config;
      a.pre_source = m.pre;
      a.embedding = embedding.view();
      a.weights = w;
      a.rmsnorm_weight = nw;
      a.layer_input = layer_input.view();
      a.post_mix = post_mix_out.view();
      a.comb_mix = comb_mix_out.view();
      a.pre_mix_out = pre_mix_out.view();
      if (m.broadcast) a.residual_out = residual_out.view();
      a.exec = exec;
      mhc::pre_broadcast(a);
    } else if (op == "post") {
      mhc::PostArgs a;
      a.config = config;
      a.layer_output = layer_output.view();
      a.residual = m.broadcast ? embedding.view() : residual.view();
      a.post_mix = post_mix.view();
      a.comb_mix = comb_mix.view();
      a.residual_out = residual_out.view();
      a.exec = exec;
      mhc::post(a);
    } else if (op == "post_pre") {
      mhc::PostPreArgs a;
      a.config = config;
      a.pre_source = m.pre;
      a.layer_output = layer_output.view();
      a.residual = m.broadcast ? embedding.view() : residual.view();
      a.post_mix = post_mix.view();
      a.comb_mix = comb_mix.view();
      a.weights = w;
      if (m.pre == PreSource::kCarried) a.pre_mix_in = pre_mix_in.view();
      a.rmsnorm_weight = nw;
      a.residual_out = residual_out.view();
      a.layer_input = layer_input.view();
      a.post_mix_out = post_mix_out.view();
      a.comb_mix_out = comb_mix_out.view();
      a.pre_mix_out = pre_mix_out.view();
      a.exec = exec;
      mhc::post_pre(a);
    } else if (op == "head") {
      mhc::HeadArgs a;
      a.config = config;
      a.kind = m.head;
      a.residual = residual.view();
      if (m.head == HeadKind::kLearned) a.weights = hw;
      if (m.head == HeadKind::kCarried) a.pre_mix_in = pre_mix_in.view();
      a.rmsnorm_weight = nw;
      a.output = layer_input.view();
      a.exec = exec;
      mhc::head(a);
    } else {
      FAIL() << "unknown op " << op;
    }
  }

  // Every output's bytes (what a call may have written), concatenated.
  std::vector<uint8_t> outputs() const {
    std::vector<uint8_t> out;
    for (const Buf* b : {&residual_out, &layer_input, &post_mix_out, &comb_mix_out, &pre_mix_out}) {
      const std::vector<uint8_t> v = b->fetch();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
  void clear_outputs() {
    for (Buf* b : {&residual_out, &layer_input, &post_mix_out, &comb_mix_out, &pre_mix_out}) {
      std::fill(b->host.begin(), b->host.end(), uint8_t{0});
      b->upload();
    }
  }
};

const std::vector<Mode> kWeightModes = {
    {"pre", PreSource::kComputed, HeadKind::kLearned, true},
    {"pre_broadcast", PreSource::kComputed, HeadKind::kLearned, true, true},
    {"post_pre", PreSource::kCarried},
    {"mixes"},
    {"head", PreSource::kComputed, HeadKind::kLearned, true},
};

// ---------------------------------------------------------------------------------------------
// Weights in the caller's memory.

TEST(EngineWeights, PreparedBytesIsTheCpuLayout) {
  // [fn rows*K][fn_b rows*H][scale][base], fp32.
  const int32_t n = 4;
  const int64_t H = 24, rows = 24, K = 96;
  EXPECT_EQ(mhc::prepared_bytes(n, H, false, cpu()), static_cast<size_t>(rows * K + rows * H + 3 + rows) * 4);
  EXPECT_EQ(mhc::prepared_bytes(n, H, true, cpu()), static_cast<size_t>(n * K + n * H + 1 + n) * 4);
  EXPECT_THROW(mhc::prepared_bytes(0, H, false, cpu()), mhc::Error);
  EXPECT_THROW(mhc::prepared_bytes(n, 0, false, cpu()), mhc::Error);
}

TEST(EngineWeights, PreparedBytesOfCudaNeedsNoDevice) {
#ifdef MHC_WITH_CUDA
  // The n = 4 envelope adds the tensor-core fragments (3 bf16 parts of fn: 6 bytes a weight).
  const size_t plain = mhc::prepared_bytes(4, 1000, false, gpu());
  const size_t n4 = mhc::prepared_bytes(4, 1024, false, gpu());
  EXPECT_GE(plain, static_cast<size_t>(24 * 4000 + 24 * 1000 + 3 + 24) * 4);
  EXPECT_GE(n4, static_cast<size_t>(24 * 4096 + 24 * 1024) * 4 + static_cast<size_t>(24 * 4096) * 6);
#else
  EXPECT_THROW(mhc::prepared_bytes(4, 1024, false, gpu()), mhc::Error);
#endif
}

// Prepares into a caller buffer, checks the bits against the allocating prepare, then shows the
// operators read the buffer: attach a copy, then change the copy's scale.
void check_caller_memory(bool on_gpu) {
  Case c(4, on_gpu ? 1024 : 40, 7, on_gpu, 11);
  mhc::Workspace ws;
  mhc::Exec exec;
  if (on_gpu) {
    ws = mhc::Workspace::create(gpu(), c.T);
    exec.workspace = &ws;
  }
  const Device dev = on_gpu ? gpu() : cpu();
  const size_t bytes = mhc::prepared_bytes(4, c.config.H, false, dev);
  const size_t head_bytes = mhc::prepared_bytes(4, c.config.H, true, dev);
  Buf dst = make_buf(DType::kUInt8, {static_cast<int64_t>(bytes)}, on_gpu);
  Buf head_dst = make_buf(DType::kUInt8, {static_cast<int64_t>(head_bytes)}, on_gpu);
  const mhc::PreparedWeights w = mhc::prepare(c.mix_view(), 4, c.config.H, dst.view());
  const mhc::PreparedWeights hw = mhc::prepare_head(c.head_view(), 4, c.config.H, head_dst.view());
  EXPECT_EQ(w.device(), dev);
  EXPECT_EQ(w.rows(), 24);
  EXPECT_TRUE(hw.is_head());
  for (const Mode& m : kWeightModes) {
    c.clear_outputs();
    c.run(m, exec);
    if (on_gpu) device_sync(m.op);
    const std::vector<uint8_t> expected = c.outputs();
    c.clear_outputs();
    c.run(m, exec, &w, &hw);
    if (on_gpu) device_sync(m.op);
    EXPECT_EQ(c.outputs(), expected) << m.op << ": weights in the caller's memory give other bits";
  }
  // attach_prepared over a copy of the buffer: the same bits.
  Buf copy = make_buf(DType::kUInt8, {static_cast<int64_t>(bytes)}, on_gpu);
  copy.host = dst.fetch();
  copy.upload();
  const mhc::PreparedWeights attached = mhc::attach_prepared(copy.view(), 4, c.config.H, false);
  const Mode pre_mode = kWeightModes[0];
  c.clear_outputs();
  c.run(pre_mode, exec, &w);
  if (on_gpu) device_sync("pre");
  const std::vector<uint8_t> expected = c.outputs();
  c.clear_outputs();
  c.run(pre_mode, exec, &attached);
  if (on_gpu) device_sync("pre");
  EXPECT_EQ(c.outputs(), expected) << "attach_prepared over a copy gives other bits";
  // The operators read the buffer: zero it and the outputs change.
  std::fill(copy.host.begin(), copy.host.end(), uint8_t{0});
  copy.upload();
  c.clear_outputs();
  c.run(pre_mode, exec, &attached);
  if (on_gpu) device_sync("pre");
  EXPECT_NE(c.outputs(), expected) << "zeroing the attached buffer changed nothing: it is not what the call reads";
}

TEST(EngineWeights, PrepareIntoCallerMemoryCpu) { check_caller_memory(false); }

TEST(EngineGpu, PrepareIntoCallerMemory) {
  MHC_REQUIRE_GPU();
  check_caller_memory(true);
}

TEST(EngineWeights, DestinationErrors) {
  Case c(4, 16, 2, false, 3);
  const size_t bytes = mhc::prepared_bytes(4, 16, false, cpu());
  std::vector<float> storage(bytes / 4 + 8);
  // Too small.
  TensorView small = mhc::make_view(storage.data(), DType::kFloat32, {static_cast<int64_t>(bytes / 4) - 1});
  try {
    mhc::prepare(c.mix_view(), 4, 16, small);
    ADD_FAILURE() << "a destination one float short was accepted";
  } catch (const mhc::Error& e) {
    EXPECT_NE(std::string(e.what()).find("prepared_bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("src/core/weights.cpp:"), std::string::npos) << e.what();
  }
  // Misaligned.
  TensorView misaligned = mhc::make_view(reinterpret_cast<uint8_t*>(storage.data()) + 4, DType::kUInt8,
                                         {static_cast<int64_t>(bytes)});
  EXPECT_THROW(mhc::prepare(c.mix_view(), 4, 16, misaligned), mhc::Error);
  // Not contiguous.
  TensorView strided = mhc::make_view(storage.data(), DType::kFloat32, {static_cast<int64_t>(bytes / 8), 2});
  strided.shape[0] = static_cast<int64_t>(bytes / 8);
  strided.strides[0] = 4;
  EXPECT_THROW(mhc::prepare(c.mix_view(), 4, 16, strided), mhc::Error);
  // Absent.
  EXPECT_THROW(mhc::prepare(c.mix_view(), 4, 16, TensorView{}), mhc::Error);
  // A head buffer is smaller than a block's: attach checks the size of what it is told.
  const size_t head_bytes = mhc::prepared_bytes(4, 16, true, cpu());
  TensorView head_sized = mhc::make_view(storage.data(), DType::kUInt8, {static_cast<int64_t>(head_bytes)});
  EXPECT_NO_THROW(mhc::attach_prepared(head_sized, 4, 16, true));
  EXPECT_THROW(mhc::attach_prepared(head_sized, 4, 16, false), mhc::Error);
  // Nothing is written when the destination is rejected.
  std::vector<float> untouched(storage.size(), 7.0f);
  TensorView short_view = mhc::make_view(untouched.data(), DType::kFloat32, {static_cast<int64_t>(bytes / 4) - 1});
  EXPECT_THROW(mhc::prepare(c.mix_view(), 4, 16, short_view), mhc::Error);
  for (float v : untouched) ASSERT_EQ(v, 7.0f);
}

// ---------------------------------------------------------------------------------------------
// Warmup.

TEST(EngineWarmup, KernelListIsUniqueAndNamed) {
  const std::vector<mhc::detail::KernelName> list = mhc::detail::cuda_kernel_names();
#ifdef MHC_WITH_CUDA
  ASSERT_GE(list.size(), 8u + 1u) << "the generic path alone has 8 kernels";
#else
  EXPECT_TRUE(list.empty());
#endif
  std::set<const void*> fns;
  std::set<std::string> names;
  for (const auto& k : list) {
    EXPECT_NE(k.fn, nullptr) << k.name;
    EXPECT_TRUE(fns.insert(k.fn).second) << k.name << " is listed twice";
    EXPECT_TRUE(names.insert(k.name).second) << "two kernels named " << k.name;
  }
}

// The names of the __global__ functions defined in `text` (a .cu file): the identifier before
// the parameter list, skipping __launch_bounds__(...) with its nested parentheses.
std::vector<std::string> kernels_defined_in(const std::string& text) {
  std::vector<std::string> names;
  for (size_t at = text.find("__global__"); at != std::string::npos; at = text.find("__global__", at + 1)) {
    size_t i = at + std::strlen("__global__");
    std::string last;
    while (i < text.size()) {
      const char c = text[i];
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') {
        const size_t j = i;
        while (i < text.size() && (std::isalnum(static_cast<unsigned char>(text[i])) || text[i] == '_')) ++i;
        last = text.substr(j, i - j);
        continue;
      }
      if (c == '(') {
        if (last != "__launch_bounds__") break;
        int depth = 0;
        do {
          depth += text[i] == '(' ? 1 : text[i] == ')' ? -1 : 0;
          ++i;
        } while (i < text.size() && depth > 0);
        last.clear();
        continue;
      }
      if (c == ';' || c == '{') break;
      ++i;
    }
    if (!last.empty()) names.push_back(last);
  }
  return names;
}

// Without a GPU (CI): every __global__ function under src/cuda must be in the kernel list, so a
// kernel someone adds is caught here before it reaches a device (EngineGpu.EveryLaunchedKernelIsWarmed
// checks what is actually launched there). The fix the message names: a list_*_kernels function in
// the kernel's file (src/cuda/kernel_list.cuh says how).
TEST(EngineWarmup, EveryKernelInTheSourcesIsListed) {
  const std::vector<mhc::detail::KernelName> list = mhc::detail::cuda_kernel_names();
  if (list.empty()) GTEST_SKIP() << "built without CUDA: no kernel list";
  std::set<std::string> listed;  // "n4::decode_chunk_kernel<true> (post)" -> "decode_chunk_kernel"
  for (const auto& k : list) {
    std::string name = k.name;
    name = name.substr(0, name.find_first_of("< "));  // the template arguments, the note
    const size_t colon = name.rfind("::");
    if (colon != std::string::npos) name = name.substr(colon + 2);  // the namespace
    listed.insert(name);
  }
  const std::filesystem::path root = std::filesystem::path(MHC_SOURCE_DIR) / "src" / "cuda";
  ASSERT_TRUE(std::filesystem::is_directory(root)) << root;
  int files = 0, kernels = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    if (entry.path().extension() != ".cu") continue;
    std::ifstream f(entry.path());
    std::stringstream text;
    text << f.rdbuf();
    ++files;
    for (const std::string& kernel : kernels_defined_in(text.str())) {
      ++kernels;
      EXPECT_TRUE(listed.count(kernel)) << "kernel " << kernel << " (" << entry.path().lexically_relative(MHC_SOURCE_DIR).string()
                                        << ") is not in the warmup kernel list: add a list_*_kernels function to its file "
                                           "and call it in src/cuda/kernel_list.cu (src/cuda/kernel_list.cuh)";
    }
  }
  EXPECT_GE(files, 10);
  EXPECT_GE(kernels, 10) << "the scan found too few kernels: kernels_defined_in is broken";
}

TEST(EngineWarmup, KernelScanReadsLaunchBounds) {
  const std::string text =
      "template <int kVecs>\n__global__ void __launch_bounds__(kThreadsB, BLOCKS(kVecs)) collapse_stream_kernel(const P p) {}\n"
      "__global__ void plain(int x);\nstatic __global__ void\n  spaced_kernel (float* y) {}\n";
  EXPECT_EQ(kernels_defined_in(text), (std::vector<std::string>{"collapse_stream_kernel", "plain", "spaced_kernel"}));
}

TEST(EngineWarmup, CpuDeviceHasNothingToLoad) {
  const mhc::WarmupReport r = mhc::warmup(cpu());
  EXPECT_EQ(r.kernels, 0);
  EXPECT_EQ(r.loaded, 0);
#ifndef MHC_WITH_CUDA
  EXPECT_THROW(mhc::warmup(gpu()), mhc::Error);
#endif
}

TEST(EngineGpu, WarmupLoadsEveryKernelTheDeviceCanRun) {
  MHC_REQUIRE_GPU();
  std::vector<const void*> loaded;
  const mhc::WarmupReport r = mhc::detail::cuda_warmup(gpu(), &loaded);
  EXPECT_EQ(r.kernels, static_cast<int32_t>(mhc::detail::cuda_kernel_names().size()));
  EXPECT_EQ(r.loaded, static_cast<int32_t>(loaded.size()));
  EXPECT_GE(r.loaded, 8) << "the generic kernels run on every architecture";
  const mhc::WarmupReport again = mhc::warmup(gpu());
  EXPECT_EQ(again.loaded, r.loaded);
  EXPECT_LT(again.seconds, 0.05) << "a second warmup should find everything loaded";
}

struct Recorded {
  std::set<const void*> kernels;
};

void record_launch(const void* kernel, void* user) { static_cast<Recorded*>(user)->kernels.insert(kernel); }

// Exact coverage: every CUDA variant the dispatcher can pick (the whole variant table), forced,
// over shapes that reach every form its plan has (n 1..8, H in each collapse_stream_kernel
// bracket, T = 1 (decode), 33 (a partial tile), 600 (several slices with a small workspace
// slice)); every kernel launched must be one warmup loaded. A kernel someone adds without
// listing it (src/cuda/kernel_list.cuh) fails here, named by the variant that launched it.
TEST(EngineGpu, EveryLaunchedKernelIsWarmed) {
  MHC_REQUIRE_GPU();
  std::vector<const void*> loaded;
  mhc::detail::cuda_warmup(gpu(), &loaded);
  const std::set<const void*> warmed(loaded.begin(), loaded.end());
  std::map<const void*, std::string> names;
  for (const auto& k : mhc::detail::cuda_kernel_names()) names[k.fn] = k.name;

  struct Shape {
    int32_t n;
    int64_t H, T;
  };
  std::vector<Shape> shapes = {{4, 4096, 1}, {4, 4096, 33}, {4, 4096, 600}, {4, 7168, 1}, {4, 7168, 600},
                               {4, 12288, 1}, {4, 12288, 600}};
  for (int32_t n = 1; n <= mhc::kMaxStreams; ++n) shapes.push_back({n, 64, 5});

  Recorded rec;
  std::map<std::string, int> runs;                     // variant -> calls that ran
  std::map<const void*, std::set<std::string>> by;     // kernel -> variants that launched it
  mhc::detail::set_launch_recorder(record_launch, &rec);
  struct Unset {
    ~Unset() { mhc::detail::set_launch_recorder(nullptr, nullptr); }
  } unset;
  for (const Shape& s : shapes) {
    Case c(s.n, s.H, s.T, true, 100 + s.n + s.H + s.T);
    mhc::WorkspaceOptions o;
    o.max_tokens = s.T;
    o.n4_slice_tokens = 256;  // several slices at T = 600
    mhc::Workspace ws = mhc::Workspace::create(gpu(), o);
    for (const mhc::VariantInfo& v : mhc::list_variants()) {
      if (v.device != "cuda") continue;
      const std::string op = v.id.substr(0, v.id.find('.'));
      for (const Mode& m : modes_of(op)) {
        mhc::Exec exec;
        exec.workspace = &ws;
        exec.variant = v.id.c_str();
        rec.kernels.clear();
        try {
          c.run(m, exec);
        } catch (const mhc::Error&) {
          continue;  // outside this variant's envelope (supports() declined)
        }
        device_sync(v.id);
        ++runs[v.id];
        for (const void* k : rec.kernels) by[k].insert(v.id);
      }
    }
  }
  for (const mhc::VariantInfo& v : mhc::list_variants()) {
    if (v.device == "cuda") {
      EXPECT_GT(runs[v.id], 0) << v.id << ": no shape of this test is in its envelope";
    }
  }
  ASSERT_FALSE(by.empty()) << "the launch recorder saw no launch";
  for (const auto& [kernel, variants] : by) {
    if (warmed.count(kernel)) continue;
    std::string who;
    for (const std::string& id : variants) who += " " + id;
    ADD_FAILURE() << "kernel " << (names.count(kernel) ? names[kernel] : std::string("(not in the kernel list)"))
                  << " launched by" << who
                  << " was not loaded by warmup: add it to its file's list_*_kernels (src/cuda/kernel_list.cuh)";
  }
}

// ---------------------------------------------------------------------------------------------
// Streams.

TEST(EngineStreams, StreamWithoutBindingIsRejected) {
  mhc::WorkspaceOptions o;
  o.max_tokens = 8;
  int dummy = 0;
  o.stream = &dummy;
  EXPECT_THROW(mhc::Workspace::create(cpu(), o), mhc::Error);
}

#ifdef MHC_WITH_CUDA
// The ops of a decoder step on `c` (post_pre, pre, head), the outputs after each appended.
std::vector<uint8_t> step(Case& c, const mhc::Exec& exec) {
  std::vector<uint8_t> out;
  for (const Mode& m : {Mode{"post_pre", PreSource::kComputed, HeadKind::kLearned, true}, Mode{"pre"},
                        Mode{"head", PreSource::kComputed, HeadKind::kLearned, true}}) {
    c.run(m, exec);
    cuda_check(cudaStreamSynchronize(static_cast<cudaStream_t>(exec.stream)), "cudaStreamSynchronize");
    const std::vector<uint8_t> o = c.outputs();
    out.insert(out.end(), o.begin(), o.end());
  }
  return out;
}

// Enqueues post_pre then pre on `exec`'s stream without waiting.
void enqueue(Case& c, const mhc::Exec& exec, int repeats) {
  for (int i = 0; i < repeats; ++i) {
    c.run(Mode{"post_pre", PreSource::kComputed, HeadKind::kLearned, true}, exec);
    c.run(Mode{"pre"}, exec);
  }
}
#endif

TEST(EngineGpu, TwoStreamsTwoWorkspacesAtOnceBitEqualSequential) {
  MHC_REQUIRE_GPU();
#ifdef MHC_WITH_CUDA
  for (int64_t T : {int64_t{1}, int64_t{37}, int64_t{600}}) {
    Case a(4, 4096, T, true, 1), b(4, 4096, T, true, 2);
    Stream sa, sb;
    mhc::WorkspaceOptions oa, ob;
    oa.max_tokens = ob.max_tokens = T;
    oa.bind_stream = ob.bind_stream = true;
    oa.stream = sa.get();
    ob.stream = sb.get();
    mhc::Workspace wa = mhc::Workspace::create(gpu(), oa), wb = mhc::Workspace::create(gpu(), ob);
    mhc::Exec ea, eb;
    ea.stream = sa.get();
    ea.workspace = &wa;
    eb.stream = sb.get();
    eb.workspace = &wb;
    // Sequential first.
    enqueue(a, ea, 1);
    sa.sync("stream a");
    const std::vector<uint8_t> ref_a = a.outputs();
    enqueue(b, eb, 1);
    sb.sync("stream b");
    const std::vector<uint8_t> ref_b = b.outputs();
    // Then both streams at once, many times over, interleaved on the host.
    a.clear_outputs();
    b.clear_outputs();
    for (int i = 0; i < 20; ++i) {
      enqueue(a, ea, 1);
      enqueue(b, eb, 1);
    }
    sa.sync("stream a");
    sb.sync("stream b");
    device_sync("two streams");
    EXPECT_EQ(a.outputs(), ref_a) << "T = " << T << ": stream a differs from its sequential run";
    EXPECT_EQ(b.outputs(), ref_b) << "T = " << T << ": stream b differs from its sequential run";
  }
#endif
}

TEST(EngineGpu, BoundWorkspaceRejectsAnotherStream) {
  MHC_REQUIRE_GPU();
  Case c(4, 4096, 4, true, 5);
  Stream s1, s2;
  mhc::WorkspaceOptions o;
  o.max_tokens = 4;
  o.bind_stream = true;
  o.stream = s1.get();
  mhc::Workspace ws = mhc::Workspace::create(gpu(), o);
  EXPECT_TRUE(ws.bound());
  EXPECT_EQ(ws.stream(), s1.get());
  mhc::Exec exec;
  exec.workspace = &ws;
  exec.stream = s2.get();
  c.clear_outputs();
  try {
    c.run(Mode{"pre"}, exec);
    ADD_FAILURE() << "a workspace bound to one stream ran a call on another";
  } catch (const mhc::Error& e) {
    EXPECT_NE(std::string(e.what()).find("one workspace per stream"), std::string::npos) << e.what();
  }
  device_sync("rejected call");
  EXPECT_EQ(c.outputs(), std::vector<uint8_t>(c.outputs().size(), 0)) << "the rejected call wrote its outputs";
  exec.stream = s1.get();
  EXPECT_NO_THROW(c.run(Mode{"pre"}, exec));
  device_sync("bound call");
}

// The documented rule for an unbound workspace: one stream at a time; moving to another stream
// is fine once that stream waits for the first (an event). Same bits as on one stream.
TEST(EngineGpu, UnboundWorkspaceMovesStreamsBehindAnEvent) {
  MHC_REQUIRE_GPU();
#ifdef MHC_WITH_CUDA
  Case c(4, 4096, 16, true, 9);
  Stream s1, s2;
  mhc::Workspace ws = mhc::Workspace::create(gpu(), 16);
  mhc::Exec e1, e2;
  e1.workspace = e2.workspace = &ws;
  e1.stream = s1.get();
  e2.stream = s2.get();
  const std::vector<uint8_t> ref = step(c, e1);
  c.clear_outputs();
  std::vector<uint8_t> got;
  for (int i = 0; i < 10; ++i) {
    cudaEvent_t ev = nullptr;
    cuda_check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    enqueue(c, e1, 2);
    cuda_check(cudaEventRecord(ev, static_cast<cudaStream_t>(s1.get())), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(static_cast<cudaStream_t>(s2.get()), ev, 0), "cudaStreamWaitEvent");
    got = step(c, e2);
    cuda_check(cudaEventDestroy(ev), "cudaEventDestroy");
  }
  EXPECT_EQ(got, ref);
#endif
}

}  // namespace

// tools/model.cpp - synthetic weights and the spec section 5 forward driver.
#include "tools/model.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>

#include "src/core/bf16.hpp"
#ifdef MHC_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace mhc::tools {

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }

double Rng::normal() {
  const double u1 = 1.0 - uniform(), u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

std::vector<uint16_t> random_bf16(size_t count, Rng& rng, double sigma) {
  std::vector<uint16_t> v(count);
  for (auto& x : v) x = detail::float_to_bf16(static_cast<float>(rng.normal() * sigma));
  return v;
}

std::vector<float> random_f32(size_t count, Rng& rng, double sigma) {
  std::vector<float> v(count);
  for (auto& x : v) x = static_cast<float>(rng.normal() * sigma);
  return v;
}

namespace {

HostBlock random_block(int32_t rows, int64_t K, int32_t scales, Rng& rng) {
  HostBlock b;
  // fn ~ N(0, 1/K): with an RMS-normalised input, x @ fn^T * r is O(1) per row.
  b.fn = random_f32(static_cast<size_t>(rows * K), rng, 1.0 / std::sqrt(static_cast<double>(K)));
  b.scale.resize(static_cast<size_t>(scales));
  for (auto& s : b.scale) s = static_cast<float>(0.5 + rng.uniform());
  b.base = random_f32(static_cast<size_t>(rows), rng, 0.5);
  return b;
}

std::vector<uint16_t> norm_weight(int64_t H, Rng& rng) {
  std::vector<uint16_t> w(static_cast<size_t>(H));
  for (auto& x : w) x = detail::float_to_bf16(static_cast<float>(1.0 + 0.1 * rng.normal()));
  return w;
}

}  // namespace

HostModel synthetic_model(const ModelPreset& preset, int32_t layers, uint64_t seed) {
  HostModel m;
  m.config = preset.config;
  m.mode = preset.mode;
  m.head = preset.head;
  m.layers = layers;
  Rng rng(seed);
  const int32_t n = m.config.n, M = m.config.M();
  const int64_t H = m.config.H, K = m.config.K();
  for (int32_t l = 0; l < layers; ++l) {
    m.attn.push_back(random_block(M, K, 3, rng));
    m.ffn.push_back(random_block(M, K, 3, rng));
    m.attn_norm.push_back(norm_weight(H, rng));
    m.ffn_norm.push_back(norm_weight(H, rng));
  }
  m.head_block = random_block(n, K, 1, rng);
  m.final_norm = norm_weight(H, rng);
  return m;
}

std::vector<uint16_t> standin_sublayer(const std::vector<uint16_t>& x, int index) {
  std::vector<uint16_t> out(x.size());
  const float phase = 0.1f * static_cast<float>(index % 7);
  for (size_t i = 0; i < x.size(); ++i) {
    out[i] = detail::float_to_bf16(0.5f * std::sin(1.5f * detail::bf16_to_float(x[i]) + phase));
  }
  return out;
}

uint64_t checksum(const std::vector<uint16_t>& values) {
  uint64_t h = 14695981039346656037ull;  // the 64-bit FNV offset basis
  for (uint16_t v : values) {
    for (int b = 0; b < 2; ++b) {
      h ^= static_cast<uint64_t>((v >> (8 * b)) & 0xff);
      h *= 1099511628211ull;
    }
  }
  return h;
}

namespace {

// A buffer on the run's device (host memory for the CPU backend).
class Buffer {
 public:
  Buffer(Device device, size_t bytes) : device_(device), bytes_(bytes) {
#ifdef MHC_WITH_CUDA
    if (device.type == DeviceType::kCUDA) {
      void* p = nullptr;
      MHC_CHECK(cudaMalloc(&p, bytes ? bytes : 16) == cudaSuccess, "cudaMalloc of ", bytes, " bytes failed");
      ptr_ = std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
      MHC_CHECK(cudaMemset(p, 0xff, bytes) == cudaSuccess, "cudaMemset failed");  // NaN poison
      return;
    }
#endif
    MHC_CHECK(device.type == DeviceType::kCPU, "run: device ", device_name(device),
              " needs the CUDA backend, which this build does not have");
    ptr_ = std::shared_ptr<void>(new char[bytes ? bytes : 16], [](void* q) { delete[] static_cast<char*>(q); });
    std::memset(ptr_.get(), 0xff, bytes);
  }
  void* get() const { return ptr_.get(); }
  void upload(const void* src, size_t bytes) {
#ifdef MHC_WITH_CUDA
    if (device_.type == DeviceType::kCUDA) {
      MHC_CHECK(cudaMemcpy(ptr_.get(), src, bytes, cudaMemcpyHostToDevice) == cudaSuccess, "upload failed");
      return;
    }
#endif
    std::memcpy(ptr_.get(), src, bytes);
  }
  void download(void* dst, size_t bytes) const {
#ifdef MHC_WITH_CUDA
    if (device_.type == DeviceType::kCUDA) {
      MHC_CHECK(cudaMemcpy(dst, ptr_.get(), bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "download failed");
      return;
    }
#endif
    std::memcpy(dst, ptr_.get(), bytes);
  }
  size_t bytes() const { return bytes_; }

 private:
  Device device_;
  size_t bytes_;
  std::shared_ptr<void> ptr_;
};

void sync(Device device) {
#ifdef MHC_WITH_CUDA
  if (device.type == DeviceType::kCUDA) {
    const cudaError_t err = cudaDeviceSynchronize();
    MHC_CHECK(err == cudaSuccess, "CUDA error after an operator: ", cudaGetErrorString(err));
  }
#else
  (void)device;
#endif
}

PreparedWeights prepare_block(const HostBlock& b, const Config& c, Device device) {
  MixWeightsView v;
  v.fn = make_view(b.fn.data(), DType::kFloat32, {c.M(), c.K()});
  v.scale = make_view(b.scale.data(), DType::kFloat32, {3});
  v.base = make_view(b.base.data(), DType::kFloat32, {c.M()});
  return prepare(v, c.n, c.H, device);
}

}  // namespace

RunResult run_model(const HostModel& model, const std::vector<uint16_t>& embedding, int64_t T, Device device,
                    const std::string& family) {
  const Config& c = model.config;
  const int64_t n = c.n, H = c.H;
  MHC_CHECK(static_cast<int64_t>(embedding.size()) == T * H, "run: embedding has ", embedding.size(),
            " values, expected T*H = ", T * H);
  MHC_CHECK(model.layers >= 1, "run: at least one layer is needed, got ", model.layers);
  RunResult result;

  // Weights, prepared once (load time).
  std::vector<PreparedWeights> attn, ffn;
  std::vector<Buffer> attn_norm, ffn_norm;
  for (int32_t l = 0; l < model.layers; ++l) {
    attn.push_back(prepare_block(model.attn[l], c, device));
    ffn.push_back(prepare_block(model.ffn[l], c, device));
    attn_norm.emplace_back(device, H * 2);
    attn_norm.back().upload(model.attn_norm[l].data(), H * 2);
    ffn_norm.emplace_back(device, H * 2);
    ffn_norm.back().upload(model.ffn_norm[l].data(), H * 2);
  }
  PreparedWeights head_w;
  if (model.head == HeadKind::kLearned) {
    HeadWeightsView hv;
    hv.fn = make_view(model.head_block.fn.data(), DType::kFloat32, {n, c.K()});
    hv.scale = make_view(model.head_block.scale.data(), DType::kFloat32, {1});
    hv.base = make_view(model.head_block.base.data(), DType::kFloat32, {n});
    head_w = prepare_head(hv, c.n, H, device);
  }
  Buffer final_norm(device, H * 2);
  final_norm.upload(model.final_norm.data(), H * 2);

  // Activations.
  Buffer emb(device, T * H * 2), res_a(device, T * n * H * 2), res_b(device, T * n * H * 2);
  Buffer layer_in(device, T * H * 2), layer_out(device, T * H * 2), out(device, T * H * 2);
  Buffer post_a(device, T * n * 4), post_b(device, T * n * 4), comb_a(device, T * n * n * 4),
      comb_b(device, T * n * n * 4), pre_a(device, T * n * 4), pre_b(device, T * n * 4);
  emb.upload(embedding.data(), embedding.size() * 2);
  Workspace ws;
  Exec exec;
  if (device.type == DeviceType::kCUDA) {
    ws = Workspace::create(device, T, c.n);
    exec.workspace = &ws;
  }
  // Forced variant ids, one per operator (kept alive for the Exec pointers).
  std::map<std::string, std::string> forced;
  auto exec_for = [&](const char* op) {
    Exec e = exec;
    if (!family.empty()) {
      forced[op] = std::string(op) + "." + family;
      e.variant = forced[op].c_str();
    }
    return e;
  };
  const bool shifted = model.mode == Mode::kShifted;
  auto bf = [](const Buffer& b, std::initializer_list<int64_t> shape, Device d) {
    return make_view(b.get(), DType::kBFloat16, shape, d);
  };
  auto f32 = [](const Buffer& b, std::initializer_list<int64_t> shape, Device d) {
    return make_view(b.get(), DType::kFloat32, shape, d);
  };
  std::vector<uint16_t> host_in(static_cast<size_t>(T * H));
  int sublayer = 0;
  auto timed = [&](const char* op, const std::string& variant, const std::function<void()>& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    sync(device);
    const auto t1 = std::chrono::steady_clock::now();
    result.op_us[op] += std::chrono::duration<double, std::micro>(t1 - t0).count();
    result.op_calls[op] += 1;
    result.variants[op] = variant;
  };
  auto run_sublayer = [&] {
    layer_in.download(host_in.data(), host_in.size() * 2);
    const std::vector<uint16_t> y = standin_sublayer(host_in, sublayer++);
    layer_out.upload(y.data(), y.size() * 2);
  };

  // Layer 0, attention: first-layer broadcast pre (identity collapse in shifted mode).
  {
    PreBroadcastArgs a;
    a.config = c;
    a.pre_source = shifted ? PreSource::kIdentity : PreSource::kComputed;
    a.embedding = bf(emb, {T, H}, device);
    a.weights = &attn[0];
    a.rmsnorm_weight = bf(attn_norm[0], {H}, device);
    a.layer_input = bf(layer_in, {T, H}, device);
    a.post_mix = f32(post_a, {T, n}, device);
    a.comb_mix = f32(comb_a, {T, n, n}, device);
    if (shifted) a.pre_mix_out = f32(pre_a, {T, n}, device);
    a.exec = exec_for("pre_broadcast");
    timed("pre_broadcast", selected_variant(a), [&] { pre_broadcast(a); });
    run_sublayer();
  }
  // Boundaries 1 .. 2L-1: post of the previous sublayer, pre of the next.
  Buffer* res_cur = nullptr;  // null: the residual is still the broadcast embedding
  Buffer* res_next = &res_a;
  for (int32_t b = 1; b < 2 * model.layers; ++b) {
    const int32_t l = b / 2;
    const bool is_ffn = (b % 2) == 1;
    PostPreArgs a;
    a.config = c;
    a.pre_source = shifted ? PreSource::kCarried : PreSource::kComputed;
    a.layer_output = bf(layer_out, {T, H}, device);
    a.residual = res_cur ? bf(*res_cur, {T, n, H}, device) : bf(emb, {T, H}, device);
    a.post_mix = f32(post_a, {T, n}, device);
    a.comb_mix = f32(comb_a, {T, n, n}, device);
    a.weights = is_ffn ? &ffn[l] : &attn[l];
    if (shifted) a.pre_mix_in = f32(pre_a, {T, n}, device);
    a.rmsnorm_weight = bf(is_ffn ? ffn_norm[l] : attn_norm[l], {H}, device);
    a.residual_out = bf(*res_next, {T, n, H}, device);
    a.layer_input = bf(layer_in, {T, H}, device);
    a.post_mix_out = f32(post_b, {T, n}, device);
    a.comb_mix_out = f32(comb_b, {T, n, n}, device);
    if (shifted) a.pre_mix_out = f32(pre_b, {T, n}, device);
    a.exec = exec_for("post_pre");
    timed("post_pre", selected_variant(a), [&] { post_pre(a); });
    std::swap(post_a, post_b);
    std::swap(comb_a, comb_b);
    std::swap(pre_a, pre_b);
    res_cur = res_next;
    res_next = (res_next == &res_a) ? &res_b : &res_a;
    run_sublayer();
  }
  // Final post, then the head.
  {
    PostArgs a;
    a.config = c;
    a.layer_output = bf(layer_out, {T, H}, device);
    a.residual = res_cur ? bf(*res_cur, {T, n, H}, device) : bf(emb, {T, H}, device);
    a.post_mix = f32(post_a, {T, n}, device);
    a.comb_mix = f32(comb_a, {T, n, n}, device);
    a.residual_out = bf(*res_next, {T, n, H}, device);
    a.exec = exec_for("post");
    timed("post", selected_variant(a), [&] { post(a); });
  }
  {
    HeadArgs a;
    a.config = c;
    a.kind = model.head;
    a.residual = bf(*res_next, {T, n, H}, device);
    if (model.head == HeadKind::kLearned) a.weights = &head_w;
    if (model.head == HeadKind::kCarried) a.pre_mix_in = f32(pre_a, {T, n}, device);
    a.rmsnorm_weight = bf(final_norm, {H}, device);
    a.output = bf(out, {T, H}, device);
    a.exec = exec_for("head");
    timed("head", selected_variant(a), [&] { head(a); });
  }
  result.output.resize(static_cast<size_t>(T * H));
  out.download(result.output.data(), result.output.size() * 2);
  return result;
}

}  // namespace mhc::tools

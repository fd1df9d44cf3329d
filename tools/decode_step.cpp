// tools/decode_step.cpp - `mhc run --graph-step T,...`: the mHC path of one whole decode step on
// the GPU, captured in one CUDA graph and timed by replay (issue: the whole-model decode figure).
//
// The step is the model's spec section 5 sequence with the sublayers left out (each sublayer's
// output is its input, so every op still depends on the one before): layer 0's pre_broadcast,
// a post_pre at each of the 2 * layers - 1 later boundaries, the final post and the head. Every
// boundary has its own prepared weights (86 sets for V4-Flash: more than twice the L2), as in a
// model. Reported: the median over replays of the graph time, per step and per boundary.
#ifdef MHC_WITH_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "mhc/mhc.hpp"
#include "tools/decode_step.hpp"

namespace mhc::tools {

namespace {

#define STEP_CUDA(expr)                                                                                   \
  do {                                                                                                    \
    const cudaError_t step_err_ = (expr);                                                                 \
    MHC_CHECK(step_err_ == cudaSuccess, #expr, " failed: ", cudaGetErrorString(step_err_));              \
  } while (0)

// One device buffer, freed on scope exit.
struct Buffer {
  void* ptr = nullptr;
  explicit Buffer(size_t bytes) { STEP_CUDA(cudaMalloc(&ptr, bytes == 0 ? 16 : bytes)); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : ptr(o.ptr) { o.ptr = nullptr; }
  ~Buffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
};

Buffer upload(const void* src, size_t bytes) {
  Buffer b(bytes);
  STEP_CUDA(cudaMemcpy(b.ptr, src, bytes, cudaMemcpyHostToDevice));
  return b;
}

PreparedWeights prepare_block(const HostBlock& b, const Config& c, bool head, Device device) {
  const int64_t K = static_cast<int64_t>(c.n) * c.H, rows = head ? c.n : (c.n + 2) * c.n;
  const Device host{};
  if (head) {
    return prepare_head({make_view(b.fn.data(), DType::kFloat32, {rows, K}, host),
                         make_view(b.scale.data(), DType::kFloat32, {1}, host),
                         make_view(b.base.data(), DType::kFloat32, {rows}, host)},
                        c.n, c.H, device);
  }
  return prepare({make_view(b.fn.data(), DType::kFloat32, {rows, K}, host),
                  make_view(b.scale.data(), DType::kFloat32, {3}, host),
                  make_view(b.base.data(), DType::kFloat32, {rows}, host)},
                 c.n, c.H, device);
}

}  // namespace

std::vector<DecodeStepRow> time_decode_step(const HostModel& model, const std::vector<int64_t>& tokens, int replays,
                                            const std::string& family) {
  const Device dev{DeviceType::kCUDA, 0};
  // The forced variant ids, by op: <op>.family where the variant list has it.
  std::map<std::string, std::string> forced;
  std::string forced_ops;
  if (!family.empty()) {
    for (const char* op : {"pre_broadcast", "post_pre", "post", "head"}) {
      const std::string id = std::string(op) + "." + family;
      for (const VariantInfo& v : list_variants()) {
        if (v.id != id) continue;
        forced[op] = id;
        forced_ops += (forced_ops.empty() ? "" : ",") + std::string(op);
      }
    }
    MHC_CHECK(!forced.empty(), "--family ", family, ": no operator of the decode step has a variant <op>.", family,
              " (mhc variants lists them)");
  }
  const Config& c = model.config;
  const int64_t n = c.n, H = c.H;
  const int boundaries = 2 * model.layers;  // boundary 0 is layer 0's pre_broadcast
  std::vector<PreparedWeights> w(static_cast<size_t>(boundaries));
  std::vector<Buffer> norms;
  for (int b = 0; b < boundaries; ++b) {
    const int l = b / 2;
    w[static_cast<size_t>(b)] = prepare_block(b % 2 == 0 ? model.attn[l] : model.ffn[l], c, false, dev);
    const std::vector<uint16_t>& nw = b % 2 == 0 ? model.attn_norm[l] : model.ffn_norm[l];
    norms.push_back(upload(nw.data(), nw.size() * 2));
  }
  const bool learned = model.head == HeadKind::kLearned;
  PreparedWeights head_w;
  if (learned) head_w = prepare_block(model.head_block, c, true, dev);
  Buffer final_norm = upload(model.final_norm.data(), model.final_norm.size() * 2);
  const bool shifted = model.mode == Mode::kShifted;

  std::vector<DecodeStepRow> rows;
  for (int64_t T : tokens) {
    MHC_CHECK(T >= 1, "--graph-step: token counts must be >= 1, got ", T);
    Workspace ws = Workspace::create(dev, T);
    Rng rng(static_cast<uint64_t>(T) * 131u + 7u);
    const std::vector<uint16_t> emb_host = random_bf16(static_cast<size_t>(T * H), rng);
    Buffer emb = upload(emb_host.data(), emb_host.size() * 2);
    Buffer res[2] = {Buffer(static_cast<size_t>(T * n * H) * 2), Buffer(static_cast<size_t>(T * n * H) * 2)};
    Buffer li[2] = {Buffer(static_cast<size_t>(T * H) * 2), Buffer(static_cast<size_t>(T * H) * 2)};
    Buffer post_m[2] = {Buffer(static_cast<size_t>(T * n) * 4), Buffer(static_cast<size_t>(T * n) * 4)};
    Buffer comb_m[2] = {Buffer(static_cast<size_t>(T * n * n) * 4), Buffer(static_cast<size_t>(T * n * n) * 4)};
    Buffer pre_m[2] = {Buffer(static_cast<size_t>(T * n) * 4), Buffer(static_cast<size_t>(T * n) * 4)};
    Buffer out(static_cast<size_t>(T * H) * 2);
    cudaStream_t stream = nullptr;
    STEP_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    Exec ex;
    ex.stream = stream;
    ex.workspace = &ws;
    auto exec_for = [&](const char* op) {
      Exec e = ex;
      const auto it = forced.find(op);
      if (it != forced.end()) e.variant = it->second.c_str();
      return e;
    };
    auto bf = [&](void* p, std::initializer_list<int64_t> s) { return make_view(p, DType::kBFloat16, s, dev); };
    auto f32 = [&](void* p, std::initializer_list<int64_t> s) { return make_view(p, DType::kFloat32, s, dev); };
    std::string boundary_variant;
    // Enqueues one decode step: buffers ping-pong (index i & 1 written by op i).
    auto step = [&] {
      PreBroadcastArgs a;
      a.config = c;
      a.pre_source = shifted ? PreSource::kIdentity : PreSource::kComputed;
      a.embedding = bf(emb.ptr, {T, H});
      a.weights = &w[0];
      a.rmsnorm_weight = bf(norms[0].ptr, {H});
      a.layer_input = bf(li[0].ptr, {T, H});
      a.post_mix = f32(post_m[0].ptr, {T, n});
      a.comb_mix = f32(comb_m[0].ptr, {T, n, n});
      if (shifted) a.pre_mix_out = f32(pre_m[0].ptr, {T, n});
      a.exec = exec_for("pre_broadcast");
      pre_broadcast(a);
      for (int b = 1; b < boundaries; ++b) {
        const int in = (b - 1) & 1, o = b & 1;
        PostPreArgs p;
        p.config = c;
        p.pre_source = shifted ? PreSource::kCarried : PreSource::kComputed;
        p.layer_output = bf(li[in].ptr, {T, H});  // the sublayer left out: its output is its input
        p.residual = b == 1 ? bf(emb.ptr, {T, H}) : bf(res[in].ptr, {T, n, H});
        p.post_mix = f32(post_m[in].ptr, {T, n});
        p.comb_mix = f32(comb_m[in].ptr, {T, n, n});
        p.weights = &w[static_cast<size_t>(b)];
        if (shifted) {
          p.pre_mix_in = f32(pre_m[in].ptr, {T, n});
          p.pre_mix_out = f32(pre_m[o].ptr, {T, n});
        }
        p.rmsnorm_weight = bf(norms[static_cast<size_t>(b)].ptr, {H});
        p.residual_out = bf(res[o].ptr, {T, n, H});
        p.layer_input = bf(li[o].ptr, {T, H});
        p.post_mix_out = f32(post_m[o].ptr, {T, n});
        p.comb_mix_out = f32(comb_m[o].ptr, {T, n, n});
        p.exec = exec_for("post_pre");
        if (b == 2 && boundary_variant.empty()) boundary_variant = selected_variant(p);
        post_pre(p);
      }
      const int last = (boundaries - 1) & 1, fin = boundaries & 1;
      PostArgs q;
      q.config = c;
      q.layer_output = bf(li[last].ptr, {T, H});
      q.residual = bf(res[last].ptr, {T, n, H});
      q.post_mix = f32(post_m[last].ptr, {T, n});
      q.comb_mix = f32(comb_m[last].ptr, {T, n, n});
      q.residual_out = bf(res[fin].ptr, {T, n, H});
      q.exec = exec_for("post");
      post(q);
      HeadArgs h;
      h.config = c;
      h.kind = model.head;
      h.residual = bf(res[fin].ptr, {T, n, H});
      if (learned) h.weights = &head_w;
      if (model.head == HeadKind::kCarried) h.pre_mix_in = f32(pre_m[last].ptr, {T, n});
      h.rmsnorm_weight = bf(final_norm.ptr, {H});
      h.output = bf(out.ptr, {T, H});
      h.exec = exec_for("head");
      head(h);
    };
    step();  // eager once: every input of the graph is defined
    STEP_CUDA(cudaStreamSynchronize(stream));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    STEP_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    step();
    STEP_CUDA(cudaStreamEndCapture(stream, &graph));
    STEP_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    STEP_CUDA(cudaGraphLaunch(exec, stream));  // warm
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    STEP_CUDA(cudaEventCreate(&e0));
    STEP_CUDA(cudaEventCreate(&e1));
    std::vector<float> ms;
    for (int r = 0; r < replays; ++r) {
      STEP_CUDA(cudaEventRecord(e0, stream));
      STEP_CUDA(cudaGraphLaunch(exec, stream));
      STEP_CUDA(cudaEventRecord(e1, stream));
      STEP_CUDA(cudaEventSynchronize(e1));
      float t = 0.0f;
      STEP_CUDA(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    size_t nodes = 0;
    STEP_CUDA(cudaGraphGetNodes(graph, nullptr, &nodes));
    DecodeStepRow row;
    row.T = T;
    row.ops = boundaries + 2;
    row.graph_nodes = static_cast<int64_t>(nodes);
    row.step_us = ms[ms.size() / 2] * 1e3;
    row.p10_us = ms[ms.size() / 10] * 1e3;
    row.p90_us = ms[ms.size() * 9 / 10] * 1e3;
    row.boundary_variant = boundary_variant;
    row.forced = forced_ops;
    rows.push_back(row);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
  return rows;
}

}  // namespace mhc::tools

#endif  // MHC_WITH_CUDA

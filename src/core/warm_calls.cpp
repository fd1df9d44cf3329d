// src/core/warm_calls.cpp - Workspace::create's warm calls (src/core/warm_calls.hpp).
#include "src/core/warm_calls.hpp"

#include <cstdint>
#include <vector>

#include "mhc/ops.hpp"
#include "src/core/cuda_hooks.hpp"

namespace mhc::detail {

void warm_calls(Workspace& ws) {
  const Device device = ws.device();
  if (device.type != DeviceType::kCUDA || ws.max_tokens() < 1 || ws.max_n() < 4) return;
  Config c;
  c.n = 4;
  c.H = 512;
  const int64_t n = c.n, H = c.H, rows = c.M();
  // The weights: zeros (every sum is then exact and finite), on the device.
  const std::vector<float> fn(static_cast<size_t>(rows * n * H), 0.0f), scale(3, 1.0f), base(static_cast<size_t>(rows), 0.0f);
  const PreparedWeights w = prepare({make_view(fn.data(), DType::kFloat32, {rows, n * H}),
                                     make_view(scale.data(), DType::kFloat32, {3}),
                                     make_view(base.data(), DType::kFloat32, {rows})},
                                    c.n, H, device);
  const PreparedWeights hw = prepare_head({make_view(fn.data(), DType::kFloat32, {n, n * H}),
                                           make_view(scale.data(), DType::kFloat32, {1}),
                                           make_view(base.data(), DType::kFloat32, {n})},
                                          c.n, H, device);
  // One zeroed block for every tensor of one token, each at a 256-byte boundary.
  size_t used = 0;
  std::vector<size_t> offsets;
  auto part = [&](size_t bytes) {
    offsets.push_back(used);
    used += (bytes + 255) / 256 * 256;
    return offsets.size() - 1;
  };
  const size_t bf_row = static_cast<size_t>(H) * 2, bf_streams = static_cast<size_t>(n * H) * 2;
  const size_t f_n = static_cast<size_t>(n) * 4, f_nn = static_cast<size_t>(n * n) * 4;
  const size_t i_res = part(bf_streams), i_y = part(bf_row), i_norm = part(bf_row), i_post = part(f_n),
               i_comb = part(f_nn), i_pre = part(f_n), i_res_out = part(bf_streams), i_li = part(bf_row),
               i_post_out = part(f_n), i_comb_out = part(f_nn), i_pre_out = part(f_n);
  const std::shared_ptr<void> mem = cuda_zeroed(device, used);
  auto at = [&](size_t i) { return static_cast<void*>(static_cast<uint8_t*>(mem.get()) + offsets[i]); };
  auto bf = [&](size_t i, std::initializer_list<int64_t> shape) { return make_view(at(i), DType::kBFloat16, shape, device); };
  auto f32 = [&](size_t i, std::initializer_list<int64_t> shape) { return make_view(at(i), DType::kFloat32, shape, device); };
  Exec exec;
  exec.workspace = &ws;
  exec.stream = ws.bound() ? ws.stream() : nullptr;
  const int64_t T = 1;
  const TensorView residual = bf(i_res, {T, n, H}), norm = bf(i_norm, {H}), layer_output = bf(i_y, {T, H});
  const TensorView post_mix = f32(i_post, {T, n}), comb_mix = f32(i_comb, {T, n, n}), pre_mix = f32(i_pre, {T, n});
  const TensorView layer_input = bf(i_li, {T, H}), residual_out = bf(i_res_out, {T, n, H});
  const TensorView post_out = f32(i_post_out, {T, n}), comb_out = f32(i_comb_out, {T, n, n}), pre_out = f32(i_pre_out, {T, n});

  mixes(MixesArgs{c, residual, &w, pre_out, post_out, comb_out, exec});
  collapse(CollapseArgs{c, PreSource::kCarried, residual, pre_mix, norm, layer_input, exec});
  pre(PreArgs{c, PreSource::kComputed, residual, &w, {}, norm, layer_input, post_out, comb_out, pre_out, exec});
  pre_broadcast(PreBroadcastArgs{c, PreSource::kComputed, layer_output, &w, {}, norm, layer_input, post_out, comb_out,
                                 pre_out, {}, exec});
  post(PostArgs{c, layer_output, residual, post_mix, comb_mix, residual_out, exec});
  for (const PreSource source : {PreSource::kComputed, PreSource::kCarried}) {
    post_pre(PostPreArgs{c, source, layer_output, residual, post_mix, comb_mix, &w,
                         source == PreSource::kCarried ? pre_mix : TensorView{}, norm, residual_out, layer_input,
                         post_out, comb_out, pre_out, exec});
  }
  head(HeadArgs{c, HeadKind::kLearned, residual, &hw, {}, norm, layer_input, exec});
  head(HeadArgs{c, HeadKind::kCarried, residual, nullptr, pre_mix, norm, layer_input, exec});
  head(HeadArgs{c, HeadKind::kMean, residual, nullptr, {}, norm, layer_input, exec});
  cuda_sync(device, exec.stream);
}

}  // namespace mhc::detail

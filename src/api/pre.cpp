// src/api/pre.cpp - pre (mixes + collapse) and pre_broadcast (first layer, embedding input).
#include "mhc/error.hpp"
#include "mhc/ops.hpp"
#include "src/api/validate.hpp"

namespace mhc {

namespace {

// Shared by pre and pre_broadcast: everything but the residual input and residual_out.
template <typename Args>
detail::Problem lower_pre(detail::Checker& c, const Args& a, int64_t T) {
  const int64_t n = a.config.n, H = a.config.H;
  c.weights(a.weights, "weights", false);
  if (a.pre_source == PreSource::kCarried) {
    c.tensor(a.pre_mix_in, "pre_mix_in", DType::kFloat32, {T, n});
  }
  c.optional(a.rmsnorm_weight, "rmsnorm_weight", DType::kBFloat16, {H});
  c.output(a.layer_input, "layer_input", DType::kBFloat16, {T, H});
  c.output(a.post_mix, "post_mix", DType::kFloat32, {T, n});
  c.output(a.comb_mix, "comb_mix", DType::kFloat32, {T, n, n});
  c.optional_output(a.pre_mix_out, "pre_mix_out", DType::kFloat32, {T, n});

  detail::Problem p = c.problem(T, a.exec);
  p.pre_source = a.pre_source;
  p.weights = &a.weights->impl();
  if (a.pre_source == PreSource::kCarried) {
    p.pre_mix_in = detail::ptr<const float>(a.pre_mix_in);
    p.pre_mix_in_stride = detail::row_stride(a.pre_mix_in);
  }
  p.rmsnorm_weight = detail::ptr<const detail::bf16_t>(a.rmsnorm_weight);
  p.layer_input = detail::ptr<detail::bf16_t>(a.layer_input);
  p.layer_input_stride = detail::row_stride(a.layer_input);
  p.post_mix_out = detail::ptr<float>(a.post_mix);
  p.post_mix_out_stride = detail::row_stride(a.post_mix);
  p.comb_mix_out = detail::ptr<float>(a.comb_mix);
  p.comb_mix_out_stride = detail::row_stride(a.comb_mix);
  p.pre_mix_out = detail::ptr<float>(a.pre_mix_out);
  p.pre_mix_out_stride = detail::row_stride(a.pre_mix_out);
  return p;
}

detail::Problem lower(const PreArgs& a) {
  detail::Checker c(detail::Op::kPre, a.config);
  const int64_t T = a.residual.present() ? a.residual.shape[0] : -1;
  c.tensor(a.residual, "residual", DType::kBFloat16, {T, a.config.n, a.config.H});
  detail::Problem p = lower_pre(c, a, T);
  c.exec(a.exec);
  p.residual = detail::ptr<const detail::bf16_t>(a.residual);
  p.residual_stride = detail::row_stride(a.residual);
  return p;
}

detail::Problem lower(const PreBroadcastArgs& a) {
  detail::Checker c(detail::Op::kPreBroadcast, a.config);
  const int64_t T = a.embedding.present() ? a.embedding.shape[0] : -1;
  c.tensor(a.embedding, "embedding", DType::kBFloat16, {T, a.config.H});
  detail::Problem p = lower_pre(c, a, T);
  c.optional_output(a.residual_out, "residual_out", DType::kBFloat16, {T, a.config.n, a.config.H});
  c.exec(a.exec);
  p.residual = detail::ptr<const detail::bf16_t>(a.embedding);
  p.residual_stride = detail::row_stride(a.embedding);
  p.residual_broadcast = true;
  p.residual_out = detail::ptr<detail::bf16_t>(a.residual_out);
  p.residual_out_stride = detail::row_stride(a.residual_out);
  return p;
}

}  // namespace

void pre(const PreArgs& a) { detail::execute(lower(a), a.exec.variant); }
void pre_broadcast(const PreBroadcastArgs& a) { detail::execute(lower(a), a.exec.variant); }
std::string selected_variant(const PreArgs& a) { return detail::select_id(lower(a), a.exec.variant); }
std::string selected_variant(const PreBroadcastArgs& a) {
  return detail::select_id(lower(a), a.exec.variant);
}

}  // namespace mhc

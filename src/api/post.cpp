// src/api/post.cpp - post and post_pre (the sublayer boundary).
#include "mhc/error.hpp"
#include "mhc/ops.hpp"
#include "src/api/validate.hpp"

namespace mhc {

namespace {

// The post half shared by post and post_pre: layer_output, residual (full or broadcast form),
// post_mix, comb_mix -> residual_out.
template <typename Args>
detail::Problem lower_post(detail::Checker& c, const Args& a) {
  const int64_t T = a.layer_output.present() ? a.layer_output.shape[0] : -1;
  const int64_t n = a.config.n, H = a.config.H;
  c.tensor(a.layer_output, "layer_output", DType::kBFloat16, {T, H});
  const bool broadcast = a.residual.present() && a.residual.rank == 2;
  if (broadcast) {
    c.tensor(a.residual, "residual", DType::kBFloat16, {T, H});
  } else {
    c.tensor(a.residual, "residual", DType::kBFloat16, {T, n, H});
  }
  c.tensor(a.post_mix, "post_mix", DType::kFloat32, {T, n});
  c.tensor(a.comb_mix, "comb_mix", DType::kFloat32, {T, n, n});
  c.output(a.residual_out, "residual_out", DType::kBFloat16, {T, n, H});

  detail::Problem p = c.problem(T, a.exec);
  p.layer_output = detail::ptr<const detail::bf16_t>(a.layer_output);
  p.layer_output_stride = detail::row_stride(a.layer_output);
  p.residual = detail::ptr<const detail::bf16_t>(a.residual);
  p.residual_stride = detail::row_stride(a.residual);
  p.residual_broadcast = broadcast;
  p.post_mix = detail::ptr<const float>(a.post_mix);
  p.post_mix_stride = detail::row_stride(a.post_mix);
  p.comb_mix = detail::ptr<const float>(a.comb_mix);
  p.comb_mix_stride = detail::row_stride(a.comb_mix);
  p.residual_out = detail::ptr<detail::bf16_t>(a.residual_out);
  p.residual_out_stride = detail::row_stride(a.residual_out);
  return p;
}

detail::Problem lower(const PostArgs& a) {
  detail::Checker c(detail::Op::kPost, a.config);
  detail::Problem p = lower_post(c, a);
  c.exec(a.exec);
  return p;
}

detail::Problem lower(const PostPreArgs& a) {
  detail::Checker c(detail::Op::kPostPre, a.config);
  MHC_CHECK(a.pre_source != PreSource::kIdentity,
            "post_pre: pre_source: expected computed (normal) or carried (shifted), got identity "
            "(the identity first layer is pre_broadcast)");
  detail::Problem p = lower_post(c, a);
  const int64_t T = p.T, n = a.config.n, H = a.config.H;
  c.weights(a.weights, "weights", false);
  if (a.pre_source == PreSource::kCarried) {
    c.tensor(a.pre_mix_in, "pre_mix_in", DType::kFloat32, {T, n});
  }
  c.optional(a.rmsnorm_weight, "rmsnorm_weight", DType::kBFloat16, {H});
  c.output(a.layer_input, "layer_input", DType::kBFloat16, {T, H});
  c.output(a.post_mix_out, "post_mix_out", DType::kFloat32, {T, n});
  c.output(a.comb_mix_out, "comb_mix_out", DType::kFloat32, {T, n, n});
  c.optional_output(a.pre_mix_out, "pre_mix_out", DType::kFloat32, {T, n});
  c.exec(a.exec);

  p.pre_source = a.pre_source;
  p.weights = &a.weights->impl();
  if (a.pre_source == PreSource::kCarried) {
    p.pre_mix_in = detail::ptr<const float>(a.pre_mix_in);
    p.pre_mix_in_stride = detail::row_stride(a.pre_mix_in);
  }
  p.rmsnorm_weight = detail::ptr<const detail::bf16_t>(a.rmsnorm_weight);
  p.layer_input = detail::ptr<detail::bf16_t>(a.layer_input);
  p.layer_input_stride = detail::row_stride(a.layer_input);
  p.post_mix_out = detail::ptr<float>(a.post_mix_out);
  p.post_mix_out_stride = detail::row_stride(a.post_mix_out);
  p.comb_mix_out = detail::ptr<float>(a.comb_mix_out);
  p.comb_mix_out_stride = detail::row_stride(a.comb_mix_out);
  p.pre_mix_out = detail::ptr<float>(a.pre_mix_out);
  p.pre_mix_out_stride = detail::row_stride(a.pre_mix_out);
  return p;
}

}  // namespace

void post(const PostArgs& a) { detail::execute(lower(a), a.exec.variant); }
void post_pre(const PostPreArgs& a) { detail::execute(lower(a), a.exec.variant); }
std::string selected_variant(const PostArgs& a) { return detail::select_id(lower(a), a.exec.variant); }
std::string selected_variant(const PostPreArgs& a) { return detail::select_id(lower(a), a.exec.variant); }

}  // namespace mhc

// src/api/mixes.cpp - mixes: residual -> pre_mix, post_mix, comb_mix.
#include "mhc/ops.hpp"
#include "src/api/validate.hpp"

namespace mhc {

void mixes(const MixesArgs& a) {
  detail::Checker c(detail::Op::kMixes, a.config);
  const int64_t T = a.residual.present() ? a.residual.shape[0] : -1;
  const int64_t n = a.config.n, H = a.config.H;
  c.tensor(a.residual, "residual", DType::kBFloat16, {T, n, H});
  c.weights(a.weights, "weights", false);
  c.output(a.pre_mix, "pre_mix", DType::kFloat32, {T, n});
  c.output(a.post_mix, "post_mix", DType::kFloat32, {T, n});
  c.output(a.comb_mix, "comb_mix", DType::kFloat32, {T, n, n});
  c.exec(a.exec);

  detail::Problem p = c.problem(T, a.exec);
  p.residual = detail::ptr<const detail::bf16_t>(a.residual);
  p.residual_stride = detail::row_stride(a.residual);
  p.weights = &a.weights->impl();
  p.pre_mix_out = detail::ptr<float>(a.pre_mix);
  p.pre_mix_out_stride = detail::row_stride(a.pre_mix);
  p.post_mix_out = detail::ptr<float>(a.post_mix);
  p.post_mix_out_stride = detail::row_stride(a.post_mix);
  p.comb_mix_out = detail::ptr<float>(a.comb_mix);
  p.comb_mix_out_stride = detail::row_stride(a.comb_mix);
  detail::execute(p, a.exec.variant);
}

}  // namespace mhc

// src/api/mixes.cpp - mixes: residual -> pre_mix, post_mix, comb_mix.
#include "mhc/ops.hpp"
#include "src/api/validate.hpp"

namespace mhc {

namespace {

detail::Problem lower(const MixesArgs& a) {
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
  detail::bind(a.residual, p.residual, p.residual_stride);
  p.weights = &a.weights->impl();
  detail::bind(a.pre_mix, p.pre_mix_out, p.pre_mix_out_stride);
  detail::bind(a.post_mix, p.post_mix_out, p.post_mix_out_stride);
  detail::bind(a.comb_mix, p.comb_mix_out, p.comb_mix_out_stride);
  return p;
}

}  // namespace

void mixes(const MixesArgs& a) { detail::execute(lower(a), a.exec.variant); }
std::string selected_variant(const MixesArgs& a) { return detail::select_id(lower(a), a.exec.variant); }

}  // namespace mhc

// src/api/pre.cpp - pre (mixes + collapse) and pre_broadcast (first layer, embedding input).
#include "mhc/error.hpp"
#include "mhc/ops.hpp"
#include "src/api/validate.hpp"

namespace mhc {

namespace {

// Shared by pre and pre_broadcast: everything but the residual input and residual_out.
template <typename Args>
detail::Problem lower_pre(detail::Checker& c, const Args& a, int64_t T) {
  detail::Problem p = c.problem(T, a.exec);
  detail::lower_pre_stage(c,
                          {a.pre_source, a.weights, &a.pre_mix_in, &a.rmsnorm_weight, &a.layer_input,
                           &a.post_mix, "post_mix", &a.comb_mix, "comb_mix", &a.pre_mix_out},
                          T, p);
  return p;
}

detail::Problem lower(const PreArgs& a) {
  detail::Checker c(detail::Op::kPre, a.config);
  const int64_t T = a.residual.present() ? a.residual.shape[0] : -1;
  c.tensor(a.residual, "residual", DType::kBFloat16, {T, a.config.n, a.config.H});
  detail::Problem p = lower_pre(c, a, T);
  c.exec(a.exec);
  detail::bind(a.residual, p.residual, p.residual_stride);
  return p;
}

detail::Problem lower(const PreBroadcastArgs& a) {
  detail::Checker c(detail::Op::kPreBroadcast, a.config);
  const int64_t T = a.embedding.present() ? a.embedding.shape[0] : -1;
  c.tensor(a.embedding, "embedding", DType::kBFloat16, {T, a.config.H});
  detail::Problem p = lower_pre(c, a, T);
  c.optional_output(a.residual_out, "residual_out", DType::kBFloat16, {T, a.config.n, a.config.H});
  c.exec(a.exec);
  detail::bind(a.embedding, p.residual, p.residual_stride);
  p.residual_broadcast = true;
  detail::bind(a.residual_out, p.residual_out, p.residual_out_stride);
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

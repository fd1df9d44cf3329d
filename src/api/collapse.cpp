// src/api/collapse.cpp - collapse: residual, pre_mix [, rmsnorm_weight] -> layer_input.
#include "mhc/error.hpp"
#include "mhc/ops.hpp"
#include "src/api/validate.hpp"

namespace mhc {

namespace {

detail::Problem lower(const CollapseArgs& a) {
  detail::Checker c(detail::Op::kCollapse, a.config);
  MHC_CHECK(a.pre_source != PreSource::kComputed,
            "collapse: pre_source: expected carried or identity (a computed pre needs mhc::pre), got computed");
  const int64_t T = a.residual.present() ? a.residual.shape[0] : -1;
  const int64_t n = a.config.n, H = a.config.H;
  c.tensor(a.residual, "residual", DType::kBFloat16, {T, n, H});
  if (a.pre_source == PreSource::kCarried) {
    c.tensor(a.pre_mix, "pre_mix", DType::kFloat32, {T, n});
  } else {
    c.absent(a.pre_mix, "pre_mix", "pre_source is identity");
  }
  c.optional(a.rmsnorm_weight, "rmsnorm_weight", DType::kBFloat16, {H});
  c.output(a.layer_input, "layer_input", DType::kBFloat16, {T, H});
  c.exec(a.exec);

  detail::Problem p = c.problem(T, a.exec);
  p.pre_source = a.pre_source;
  detail::bind(a.residual, p.residual, p.residual_stride);
  if (a.pre_source == PreSource::kCarried) {
    detail::bind(a.pre_mix, p.pre_mix_in, p.pre_mix_in_stride);
  }
  p.rmsnorm_weight = detail::ptr<const detail::bf16_t>(a.rmsnorm_weight);
  detail::bind(a.layer_input, p.layer_input, p.layer_input_stride);
  return p;
}

}  // namespace

void collapse(const CollapseArgs& a) { detail::execute(lower(a), a.exec.variant); }
std::string selected_variant(const CollapseArgs& a) { return detail::select_id(lower(a), a.exec.variant); }

}  // namespace mhc

// src/api/head.cpp - head: the final collapse after the last post (learned / carried / mean).
#include "mhc/error.hpp"
#include "mhc/ops.hpp"
#include "src/api/validate.hpp"

namespace mhc {

namespace {

detail::Problem lower(const HeadArgs& a) {
  detail::Checker c(detail::Op::kHead, a.config);
  const int64_t T = a.residual.present() ? a.residual.shape[0] : -1;
  const int64_t n = a.config.n, H = a.config.H;
  c.tensor(a.residual, "residual", DType::kBFloat16, {T, n, H});
  if (a.kind == HeadKind::kLearned) {
    c.weights(a.weights, "weights", true);
  } else {
    MHC_CHECK(a.weights == nullptr, "head: weights: expected none (a ", to_string(a.kind),
              " head has no weights; kind=learned uses them), got prepared weights");
  }
  if (a.kind == HeadKind::kCarried) {
    c.tensor(a.pre_mix_in, "pre_mix_in", DType::kFloat32, {T, n});
  } else {
    c.absent(a.pre_mix_in, "pre_mix_in", a.kind == HeadKind::kLearned ? "a learned head computes its own pre"
                                                                       : "a mean head has no pre");
  }
  c.optional(a.rmsnorm_weight, "rmsnorm_weight", DType::kBFloat16, {H});
  c.output(a.output, "output", DType::kBFloat16, {T, H});
  c.exec(a.exec);

  detail::Problem p = c.problem(T, a.exec);
  p.head_kind = a.kind;
  p.pre_source = a.kind == HeadKind::kCarried ? PreSource::kCarried : PreSource::kComputed;
  detail::bind(a.residual, p.residual, p.residual_stride);
  if (a.kind == HeadKind::kLearned) p.weights = &a.weights->impl();
  if (a.kind == HeadKind::kCarried) {
    detail::bind(a.pre_mix_in, p.pre_mix_in, p.pre_mix_in_stride);
  }
  p.rmsnorm_weight = detail::ptr<const detail::bf16_t>(a.rmsnorm_weight);
  detail::bind(a.output, p.layer_input, p.layer_input_stride);
  return p;
}

}  // namespace

void head(const HeadArgs& a) { detail::execute(lower(a), a.exec.variant); }
std::string selected_variant(const HeadArgs& a) { return detail::select_id(lower(a), a.exec.variant); }

}  // namespace mhc

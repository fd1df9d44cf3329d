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
  detail::bind(a.layer_output, p.layer_output, p.layer_output_stride);
  detail::bind(a.residual, p.residual, p.residual_stride);
  p.residual_broadcast = broadcast;
  detail::bind(a.post_mix, p.post_mix, p.post_mix_stride);
  detail::bind(a.comb_mix, p.comb_mix, p.comb_mix_stride);
  detail::bind(a.residual_out, p.residual_out, p.residual_out_stride);
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
  detail::lower_pre_stage(c,
                          {a.pre_source, a.weights, &a.pre_mix_in, &a.rmsnorm_weight, &a.layer_input,
                           &a.post_mix_out, "post_mix_out", &a.comb_mix_out, "comb_mix_out", &a.pre_mix_out},
                          p.T, p);
  c.exec(a.exec);
  return p;
}

}  // namespace

void post(const PostArgs& a) { detail::execute(lower(a), a.exec.variant); }
void post_pre(const PostPreArgs& a) { detail::execute(lower(a), a.exec.variant); }
std::string selected_variant(const PostArgs& a) { return detail::select_id(lower(a), a.exec.variant); }
std::string selected_variant(const PostPreArgs& a) { return detail::select_id(lower(a), a.exec.variant); }

}  // namespace mhc

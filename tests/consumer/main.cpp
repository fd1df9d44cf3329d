// tests/consumer/main.cpp - uses the installed mhc through its public headers only: a preset,
// the variant list, and one CPU `post` whose answer is exact in bf16. Exits non-zero on any
// wrong result.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <mhc/mhc.hpp>

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "consumer: FAILED: %s\n", what.c_str());
    ++failures;
  }
}

// bf16 bits of a float that bf16 holds exactly (the upper half of its fp32 bits).
uint16_t bf16_of(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace

int main() {
  const mhc::ModelPreset& flash = mhc::model_preset("deepseek-v4-flash");
  expect(flash.config.n == 4 && flash.config.H == 4096, "deepseek-v4-flash preset has n = 4, H = 4096");

  bool has_cpu_post = false;
  for (const mhc::VariantInfo& v : mhc::list_variants()) has_cpu_post |= v.id == "post.cpu_ref" && v.device == "cpu";
  expect(has_cpu_post, "list_variants() names post.cpu_ref");

  // post, T = 1, n = 2, H = 3: new[k,h] = post_mix[k] * layer_output[h] + sum_j comb[j,k] * residual[j,h].
  // Every product and sum is exact in fp32 and every result exact in bf16.
  mhc::Config cfg;
  cfg.n = 2;
  cfg.H = 3;
  const float y[3] = {1.0f, -2.0f, 4.0f};
  const float x[2][3] = {{2.0f, 0.5f, -1.0f}, {8.0f, 3.0f, 0.25f}};
  const float post_mix[2] = {0.5f, 1.5f};
  const float comb[2][2] = {{0.75f, 0.25f}, {0.125f, 0.875f}};  // [source j, destination k]
  std::vector<uint16_t> layer_output(3), residual(6), residual_out(6, 0xffff);
  for (int h = 0; h < 3; ++h) layer_output[h] = bf16_of(y[h]);
  for (int j = 0; j < 2; ++j)
    for (int h = 0; h < 3; ++h) residual[j * 3 + h] = bf16_of(x[j][h]);

  mhc::PostArgs a;
  a.config = cfg;
  a.layer_output = mhc::make_view(layer_output.data(), mhc::DType::kBFloat16, {1, 3});
  a.residual = mhc::make_view(residual.data(), mhc::DType::kBFloat16, {1, 2, 3});
  a.post_mix = mhc::make_view(post_mix, mhc::DType::kFloat32, {1, 2});
  a.comb_mix = mhc::make_view(comb, mhc::DType::kFloat32, {1, 2, 2});
  a.residual_out = mhc::make_view(residual_out.data(), mhc::DType::kBFloat16, {1, 2, 3});
  try {
    mhc::post(a);
  } catch (const mhc::Error& e) {
    std::fprintf(stderr, "consumer: FAILED: post threw: %s\n", e.what());
    return 1;
  }
  for (int k = 0; k < 2; ++k) {
    for (int h = 0; h < 3; ++h) {
      const float want = post_mix[k] * y[h] + comb[0][k] * x[0][h] + comb[1][k] * x[1][h];
      expect(residual_out[k * 3 + h] == bf16_of(want),
             "post residual_out[0," + std::to_string(k) + "," + std::to_string(h) + "] == " + std::to_string(want));
    }
  }

  // Errors reach the caller as mhc::Error: a wrong shape is rejected before anything is written.
  std::vector<uint16_t> untouched = residual_out;
  a.residual_out = mhc::make_view(residual_out.data(), mhc::DType::kBFloat16, {1, 2, 2});
  bool threw = false;
  try {
    mhc::post(a);
  } catch (const mhc::Error&) {
    threw = true;
  }
  expect(threw && residual_out == untouched, "post with a wrong residual_out shape throws mhc::Error, writes nothing");

  if (failures == 0) std::printf("consumer: OK (%zu variants, post exact)\n", mhc::list_variants().size());
  return failures == 0 ? 0 : 1;
}

// tools/model.hpp - host-side model weights and the spec section 5 forward driver.
//
// Used by `mhc run`, `mhc bench` and the end-to-end tests. The sublayers themselves
// (attention, FFN) are outside mhc: the driver calls a cheap deterministic stand-in.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "mhc/mhc.hpp"

namespace mhc::tools {

/// Deterministic, platform-independent random numbers (splitmix64 + Box-Muller).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  double uniform();  // [0, 1)
  double normal();   // N(0, 1)

 private:
  uint64_t state_;
};

/// fp32 weights of one mix block, as in a checkpoint.
struct HostBlock {
  std::vector<float> fn;     // [rows, K]
  std::vector<float> scale;  // [3] (head: [1])
  std::vector<float> base;   // [rows]
};

/// Everything mhc needs of a model.
struct HostModel {
  Config config;
  Mode mode = Mode::kNormal;
  HeadKind head = HeadKind::kLearned;
  int32_t layers = 0;
  std::vector<HostBlock> attn, ffn;                         // [layers]
  std::vector<std::vector<uint16_t>> attn_norm, ffn_norm;   // [layers][H] bf16
  HostBlock head_block;                                     // learned head (V4)
  std::vector<uint16_t> final_norm;                         // [H] bf16
};

/// Seeded synthetic weights with checkpoint-like magnitudes.
HostModel synthetic_model(const ModelPreset& preset, int32_t layers, uint64_t seed);
/// Random bf16 values ~ N(0, sigma^2).
std::vector<uint16_t> random_bf16(size_t count, Rng& rng, double sigma = 1.0);
/// Random fp32 values ~ N(0, sigma^2).
std::vector<float> random_f32(size_t count, Rng& rng, double sigma = 1.0);

/// The stand-in sublayer: out[t,h] = bf16(sin(1.5 * x[t,h] + 0.1 * (index % 7)) * 0.5).
std::vector<uint16_t> standin_sublayer(const std::vector<uint16_t>& layer_input, int index);

/// Result of one forward pass.
struct RunResult {
  std::vector<uint16_t> output;                  // [T,H] bf16, the head's output
  std::map<std::string, double> op_us;           // operator -> total microseconds
  std::map<std::string, int> op_calls;           // operator -> calls
  std::map<std::string, std::string> variants;   // operator -> variant id used
};

/// Runs the spec section 5 forward: pre_broadcast, post_pre at every boundary, post, head.
/// `device` selects the backend (CPU, or a CUDA device when built with CUDA).
/// `family`, when not empty, forces every operator's variant "<op>.<family>" (e.g. "cuda_generic").
RunResult run_model(const HostModel& model, const std::vector<uint16_t>& embedding, int64_t T, Device device,
                    const std::string& family = "");

/// FNV-1a over the bytes of a bf16 buffer.
uint64_t checksum(const std::vector<uint16_t>& values);

}  // namespace mhc::tools

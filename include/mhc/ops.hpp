// mhc/ops.hpp - the mHC operators (spec section 4).
//
// Every operator takes one arguments struct with named fields: the block's Config, the inputs,
// the outputs (owned by the caller: destination passing), and an Exec (stream, workspace,
// optional forced variant). All tensors must be on one device; the backend follows from it.
// Validation happens before anything is written: a call that throws leaves outputs untouched.
//
// Layout rules (spec section 7): dimension 0 (tokens) may have any stride >= the row length;
// inner dimensions must be contiguous. Weights are prepared (mhc/weights.hpp).
// Shapes: T tokens, n streams, H hidden, M = (n+2)*n. bf16 = DType::kBFloat16.
#pragma once

#include <string>
#include <vector>

#include "mhc/config.hpp"
#include "mhc/tensor.hpp"
#include "mhc/weights.hpp"

namespace mhc {

/// @brief Execution context of one call.
struct Exec {
  void* stream = nullptr;          ///< cudaStream_t for CUDA tensors (null = default stream); ignored on the CPU
  Workspace* workspace = nullptr;  ///< scratch for CUDA split reductions (Workspace::create); unused on the CPU
  const char* variant = nullptr;   ///< force a variant id ("post_pre.cuda_generic"); null = dispatcher's choice
};

/// @brief mixes: residual -> pre_mix, post_mix, comb_mix.
struct MixesArgs {
  Config config;                    ///< block scalars
  TensorView residual;              ///< [T,n,H] bf16
  const PreparedWeights* weights = nullptr;  ///< prepare(fn, scale, base)
  TensorView pre_mix;               ///< out [T,n] fp32
  TensorView post_mix;              ///< out [T,n] fp32
  TensorView comb_mix;              ///< out [T,n,n] fp32, [source j, destination k]
  Exec exec;
};

/// @brief collapse: residual, pre_mix [, rmsnorm_weight] -> layer_input.
struct CollapseArgs {
  Config config;
  PreSource pre_source = PreSource::kCarried;  ///< kCarried (use pre_mix) or kIdentity (stream 0)
  TensorView residual;              ///< [T,n,H] bf16
  TensorView pre_mix;               ///< [T,n] fp32 (kCarried only)
  TensorView rmsnorm_weight;        ///< optional [H] bf16: fold the sublayer RMSNorm
  TensorView layer_input;           ///< out [T,H] bf16
  Exec exec;
};

/// @brief pre = mixes + collapse: residual -> layer_input, post_mix, comb_mix [, pre_mix_out].
struct PreArgs {
  Config config;
  PreSource pre_source = PreSource::kComputed;  ///< kComputed (normal), kCarried (shifted), kIdentity
  TensorView residual;              ///< [T,n,H] bf16
  const PreparedWeights* weights = nullptr;
  TensorView pre_mix_in;            ///< [T,n] fp32, required for kCarried
  TensorView rmsnorm_weight;        ///< optional [H] bf16
  TensorView layer_input;           ///< out [T,H] bf16
  TensorView post_mix;              ///< out [T,n] fp32
  TensorView comb_mix;              ///< out [T,n,n] fp32
  TensorView pre_mix_out;           ///< optional out [T,n] fp32: the fresh pre (shifted mode's next pre)
  Exec exec;
};

/// @brief pre_broadcast (first layer): embedding, the n streams are copies of it.
/// Never reads or writes n copies: mixes use the prepared broadcast weight fn_b.
struct PreBroadcastArgs {
  Config config;
  PreSource pre_source = PreSource::kComputed;  ///< kComputed, kCarried or kIdentity
  TensorView embedding;             ///< [T,H] bf16
  const PreparedWeights* weights = nullptr;
  TensorView pre_mix_in;            ///< [T,n] fp32, required for kCarried
  TensorView rmsnorm_weight;        ///< optional [H] bf16
  TensorView layer_input;           ///< out [T,H] bf16
  TensorView post_mix;              ///< out [T,n] fp32
  TensorView comb_mix;              ///< out [T,n,n] fp32
  TensorView pre_mix_out;           ///< optional out [T,n] fp32
  TensorView residual_out;          ///< optional out [T,n,H] bf16: the materialised streams
  Exec exec;
};

/// @brief post: layer_output, residual, post_mix, comb_mix -> residual_out.
struct PostArgs {
  Config config;
  TensorView layer_output;          ///< [T,H] bf16
  TensorView residual;              ///< [T,n,H] bf16, or [T,H] bf16 (broadcast form, first layer)
  TensorView post_mix;              ///< [T,n] fp32
  TensorView comb_mix;              ///< [T,n,n] fp32
  TensorView residual_out;          ///< out [T,n,H] bf16 (must not overlap the inputs)
  Exec exec;
};

/// @brief post_pre (the sublayer boundary): post of sublayer k-1, then pre of sublayer k.
/// The mixes of sublayer k are computed from the bf16-rounded residual_out.
struct PostPreArgs {
  Config config;
  PreSource pre_source = PreSource::kComputed;  ///< kComputed (normal) or kCarried (shifted)
  TensorView layer_output;          ///< [T,H] bf16, output of sublayer k-1
  TensorView residual;              ///< [T,n,H] bf16, or [T,H] broadcast form
  TensorView post_mix;              ///< [T,n] fp32 of sublayer k-1
  TensorView comb_mix;              ///< [T,n,n] fp32 of sublayer k-1
  const PreparedWeights* weights = nullptr;  ///< sublayer k
  TensorView pre_mix_in;            ///< [T,n] fp32, required for kCarried
  TensorView rmsnorm_weight;        ///< optional [H] bf16, sublayer k's RMSNorm
  TensorView residual_out;          ///< out [T,n,H] bf16
  TensorView layer_input;           ///< out [T,H] bf16, input of sublayer k
  TensorView post_mix_out;          ///< out [T,n] fp32 of sublayer k
  TensorView comb_mix_out;          ///< out [T,n,n] fp32 of sublayer k
  TensorView pre_mix_out;           ///< optional out [T,n] fp32, fresh pre of sublayer k
  Exec exec;
};

/// @brief head (after the last post): residual -> output.
struct HeadArgs {
  Config config;
  HeadKind kind = HeadKind::kLearned;
  TensorView residual;              ///< [T,n,H] bf16
  const PreparedWeights* weights = nullptr;  ///< prepare_head(...) for kLearned
  TensorView pre_mix_in;            ///< [T,n] fp32 for kCarried
  TensorView rmsnorm_weight;        ///< optional [H] bf16, the final norm
  TensorView output;                ///< out [T,H] bf16
  Exec exec;
};

void mixes(const MixesArgs& args);
void collapse(const CollapseArgs& args);
void pre(const PreArgs& args);
void pre_broadcast(const PreBroadcastArgs& args);
void post(const PostArgs& args);
void post_pre(const PostPreArgs& args);
void head(const HeadArgs& args);

/// @brief Validates `config` alone (n, H, iterations, eps signs); throws mhc::Error.
void validate_config(const Config& config);

/// @brief One row of the variant list (mhc variants).
struct VariantInfo {
  std::string id;           ///< "<op>.<variant>", as in logs, tests and benchmark JSON
  std::string device;       ///< "cpu" or "cuda"
  std::string envelope;     ///< what supports() accepts, in words
  std::string kernels;      ///< the plan: the kernels it runs, in order
  std::string family;       ///< variants of one family give bit-identical outputs
};
/// @brief Every variant compiled into this build, in dispatch priority order.
std::vector<VariantInfo> list_variants();

/// @brief The id of the variant the dispatcher picks for an operator call (without running it).
std::string selected_variant(const MixesArgs& args);
std::string selected_variant(const CollapseArgs& args);
std::string selected_variant(const PostPreArgs& args);
std::string selected_variant(const PreArgs& args);
std::string selected_variant(const PreBroadcastArgs& args);
std::string selected_variant(const PostArgs& args);
std::string selected_variant(const HeadArgs& args);

/// @brief True when this build has the CUDA backend and a CUDA device is visible.
bool cuda_available();

}  // namespace mhc

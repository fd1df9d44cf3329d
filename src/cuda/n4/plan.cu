// src/cuda/n4/plan.cu - the n = 4 variant's host side: which problems it supports, the one
// N4Params of a problem, and the plan: post alone runs post_kernel; every other operator runs
// mix_kernel (where it has a mixes stage) then collapse_kernel, over token slices that fit the
// workspace's partials.
#include <cstdlib>

#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/variants.hpp"

namespace mhc::cuda::n4 {

// Offsets every token-indexed pointer of `p` by `t0` tokens.
N4Params slice_params(N4Params p, int64_t t0, int64_t count) {
  p.T = count;
  if (p.residual) p.residual += t0 * p.residual_stride;
  if (p.layer_output) p.layer_output += t0 * p.layer_output_stride;
  if (p.post_mix) p.post_mix += t0 * p.post_mix_stride;
  if (p.comb_mix) p.comb_mix += t0 * p.comb_mix_stride;
  if (p.residual_out) p.residual_out += t0 * p.residual_out_stride;
  if (p.pre_mix_in) p.pre_mix_in += t0 * p.pre_mix_in_stride;
  if (p.x) p.x += t0 * p.x_stride;
  if (p.layer_input) p.layer_input += t0 * p.layer_input_stride;
  if (p.epi.pre_mix_out) p.epi.pre_mix_out += t0 * p.epi.pre_mix_out_stride;
  if (p.epi.post_mix_out) p.epi.post_mix_out += t0 * p.epi.post_mix_out_stride;
  if (p.epi.comb_mix_out) p.epi.comb_mix_out += t0 * p.epi.comb_mix_out_stride;
  return p;
}

}  // namespace mhc::cuda::n4

namespace mhc::cuda {

using namespace n4;

namespace {

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }
bool rows16(const void* ptr, int64_t stride) { return ptr == nullptr || (aligned16(ptr) && stride % 8 == 0); }


}  // namespace

LaunchCtx launch_ctx(const detail::Problem& p) {
  LaunchCtx ctx;
  ctx.stream = static_cast<cudaStream_t>(p.stream);
  ctx.pdl = p.workspace->cc_major >= 9;
  ctx.num_sms = p.workspace->num_sms;
#ifdef MHC_GEMM_PROBE
  // Diagnostics build: MHC_NO_PDL launches without programmatic dependent launch.
  if (std::getenv("MHC_NO_PDL") != nullptr) ctx.pdl = false;
#endif
  return ctx;
}

bool n4_supports(const detail::Problem& p) {
  if (p.device.type != DeviceType::kCUDA || p.n != kN || p.H % kSliceK != 0 || p.H > kMaxH) return false;
  if (p.has_mixes_stage() && (p.weights == nullptr || p.weights->d_fn_frag == nullptr)) return false;
  if (p.has_mixes_stage() && p.workspace != nullptr && !p.workspace->n4_mix) return false;
  return rows16(p.residual, p.residual_stride) && rows16(p.layer_output, p.layer_output_stride) &&
         rows16(p.residual_out, p.residual_out_stride) && rows16(p.layer_input, p.layer_input_stride) &&
         (p.rmsnorm_weight == nullptr || aligned16(p.rmsnorm_weight));
}

N4Params n4_params(const detail::Problem& p) {
  N4Params k{};
  fill_common_params(k, p);
  k.chunks = static_cast<int32_t>(p.H / kChunkCols);
  k.res_stream_stride = p.residual_broadcast ? 0 : p.H;
  // The collapse reads the new residual (post_pre), or the input streams.
  if (k.has_post) {
    k.x = p.residual_out;
    k.x_stride = p.residual_out_stride;
    k.x_stream_stride = p.H;
  } else {
    k.x = p.residual;
    k.x_stride = p.residual_stride;
    k.x_stream_stride = k.res_stream_stride;
  }
  k.inv_k = 1.0f / static_cast<float>(kN * p.H);
  if (p.weights != nullptr) k.fn_frag = reinterpret_cast<const uint2*>(p.weights->d_fn_frag);
  k.partials = static_cast<float*>(p.workspace->scratch);
  return k;
}

void n4_run(const detail::Problem& p) {
  MHC_CHECK(n4_supports(p), detail::op_name(p.op), ": cuda_n4 does not support this call");
  MHC_CHECK(p.workspace != nullptr && p.workspace->scratch != nullptr, detail::op_name(p.op),
            ": cuda_n4 needs a workspace (mhc::Workspace::create)");
  const N4Params k = n4_params(p);
  const LaunchCtx ctx = launch_ctx(p);
  if (p.op == detail::Op::kPost) {
    launch_post_kernel(k, ctx, post_form(p));
    return;
  }
  // Token slices that fit the workspace's partials (multiples of the 32-token tile).
  const int64_t capacity = static_cast<int64_t>(p.workspace->scratch_bytes / sizeof(float));
  int64_t slice_tokens = capacity / (static_cast<int64_t>(k.chunks) * kPartial);
  slice_tokens -= slice_tokens % kTile;
  MHC_CHECK(slice_tokens >= kTile || !k.has_mixes, detail::op_name(p.op),
            ": workspace too small for H = ", p.H);
  if (!k.has_mixes) slice_tokens = p.T;
  // With a collapse, slices of kSliceTokens (the fastest measured length, docs/performance.md),
  // or the workspace's slice option. The slicing never changes a token's result (batch
  // invariance): each token's arithmetic is the same in every slice.
  const int64_t forced = k.has_mixes ? p.workspace->n4_slice_tokens / kTile * kTile : 0;
  const int64_t wanted = forced > 0 ? forced : k.has_mixes && k.has_collapse ? kSliceTokens : 0;
  if (wanted > 0 && wanted < slice_tokens) slice_tokens = wanted;
  for (int64_t t0 = 0; t0 < p.T; t0 += slice_tokens) {
    const int64_t count = p.T - t0 < slice_tokens ? p.T - t0 : slice_tokens;
    const N4Params s = slice_params(k, t0, count);
    if (s.has_mixes) launch_mix_kernel(s, ctx);
    launch_collapse_kernel(s, ctx);
  }
}

bool n4_decode_supports(const detail::Problem& p) {
  return n4_supports(p) && p.has_mixes_stage() && p.workspace != nullptr && p.T <= p.workspace->decode_tokens;
}

void n4_decode_run(const detail::Problem& p) {
  MHC_CHECK(n4_decode_supports(p), detail::op_name(p.op), ": cuda_n4_decode does not support this call (T = ", p.T,
            ", the workspace's decode limit ", p.workspace != nullptr ? p.workspace->decode_tokens : 0, ")");
  if (p.T == 0) return;
  launch_decode_kernel(n4_params(p), static_cast<float*>(p.workspace->scratch), p.workspace->decode_counters,
                       launch_ctx(p));
}

bool n4_decode_chunk_supports(const detail::Problem& p) { return n4_decode_supports(p) && decode_chunk_supports(p.H); }

bool n4_decode_prefer(const detail::Problem& p) { return !decode_chunk_supports(p.H); }

void n4_decode_chunk_run(const detail::Problem& p) {
  MHC_CHECK(n4_decode_chunk_supports(p), detail::op_name(p.op), ": cuda_n4_decode_chunk does not support this call");
  if (p.T == 0) return;
  launch_decode_chunk_kernel(n4_params(p), static_cast<float*>(p.workspace->scratch), p.workspace->decode_counters,
                             launch_ctx(p));
}

bool n4_configure_device(bool* gemm, bool* gemm_group, bool* gemm_wg, bool* gemm_rb, bool* post_bulk) {
  int device = 0;
  MHC_CUDA_CHECK(cudaGetDevice(&device));
  *gemm = configure_gemm_kernel(device);
  *gemm_group = *gemm && configure_gemm_group_kernel(device);
  *gemm_wg = configure_gemm_wg_kernel(device);
  *gemm_rb = *gemm && configure_gemm_rb_kernel(device);  // staged_rb takes gemm_kernel where its runs do not fit
  int major = 0;
  MHC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  // bulk copies (sm_90+): post_bulk_kernel and post_collapse_kernel
  *post_bulk = major >= 9 && configure_post_bulk_kernel(device) && configure_post_collapse_kernel(device);
  return configure_mix_kernel(device) && configure_decode_chunk_kernel(device);
}

// post_bulk_kernel wherever the workspace has it: on the H200 (session 17, calls 3-4) it was as
// fast or faster at every T measured, H = 4096 / 7168: T = 1 2.66 / 2.76 us (post_flat_kernel
// 2.66 / 2.75), T = 128 4.76 / 7.17 (5.93 / 8.13), T = 16384 312.2-313.1 / 531.4-533.6
// (318.8-319.2 / 560.7-561.1).
int post_form(const detail::Problem& p) {
  return p.workspace != nullptr && p.workspace->n4_post_bulk ? n4::kPostBulk : n4::kPostFlat;
}

size_t n4_scratch_bytes(int64_t max_tokens, int64_t decode_tokens) {
  // One slice holds up to min(max_tokens, kScratchTokens) tokens at kScratchChunks chunks: their
  // partials and the fresh pre after them (staged.cu; without the pre's 4 floats a token, a
  // 16384-token call at H = 7168 ran as slices of 16320 and 64 tokens). Larger H or T run as
  // several slices. Never less than one tile at the largest H.
  const int64_t tokens = max_tokens < kScratchTokens ? max_tokens : kScratchTokens;
  const int64_t floats = tokens * (kScratchChunks * kPartial + kN);
  const int64_t minimum = static_cast<int64_t>(kTile) * kMaxChunks * kPartial;
  const size_t n4 = static_cast<size_t>(floats > minimum ? floats : minimum) * sizeof(float);
  const size_t decode = decode_scratch_bytes(decode_tokens);
  return n4 > decode ? n4 : decode;
}

int64_t n4_decode_default_tokens() { return kDecodeDefaultTokens; }

int64_t n4_pre_mailbox_tokens(int64_t max_tokens) { return max_tokens < kScratchTokens ? max_tokens : kScratchTokens; }

}  // namespace mhc::cuda

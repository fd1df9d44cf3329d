// src/cuda/variants.hpp - the CUDA rows of the variant list (src/registry/registry.cpp), and
// the supports()/run() pair of every CUDA variant.
#pragma once

#include <cstdint>
#include <vector>

#include "src/core/prepared.hpp"
#include "src/registry/variant.hpp"

namespace mhc::cuda {

// src/cuda/generic.cu: every operator, any n in 1..8, any H.
bool generic_supports(const detail::Problem& p);
void generic_run(const detail::Problem& p);

// src/cuda/n4/plan.cu: every operator for n = 4, H % 512 == 0, H <= 16384, 16-byte aligned rows.
bool n4_supports(const detail::Problem& p);
void n4_run(const detail::Problem& p);
// src/cuda/n4/plan.cu: the one-launch decode_kernel for ops with a mixes stage, T <= the
// workspace's decode_tokens; the same bits as n4_run.
bool n4_decode_supports(const detail::Problem& p);
void n4_decode_run(const detail::Problem& p);
// decode_chunk_kernel (H <= 8192): a block per (chunk, 16 tokens), the same bits.
/// The dispatcher takes it wherever it runs (no prefer(): post_pre's exception at H > 5120, T > 96,
/// from session 8, went in session 38, when it measured 18.60 / 19.27 us at H = 7168, T = 112 /
/// 128 against the fused plan's 24.69 / 25.14 on an H100).
bool n4_decode_chunk_supports(const detail::Problem& p);
/// Where it takes decode_kernel: only where decode_chunk_kernel cannot run (H > 8192).
bool n4_decode_prefer(const detail::Problem& p);
void n4_decode_chunk_run(const detail::Problem& p);
// src/cuda/n4/staged.cu: the staged plan (post_kernel -> GEMM stage -> finalize_kernel ->
// collapse_stream_kernel) for every op but post and pre_broadcast; the same bits as n4_run.
bool n4_staged_supports(const detail::Problem& p);
void n4_staged_run(const detail::Problem& p);
// The same plan with gemm_wg_kernel as its GEMM stage (staged_wg): sm_90a, the same bits.
bool n4_staged_wg_supports(const detail::Problem& p);
void n4_staged_wg_run(const detail::Problem& p);
// The same plan with gemm_rb_kernel as its GEMM stage where the group runs fit (staged_rb):
// sm_90+, the same bits.
bool n4_staged_rb_supports(const detail::Problem& p);
void n4_staged_rb_run(const detail::Problem& p);
// The same plan with the GEMM stage, finalize_kernel and the collapse running at once, tile by
// tile (overlap: gemm_kernel's overlapped form, then overlap_tail_kernel, the workspace's tile
// counters): the same bits.
bool n4_staged_overlap_supports(const detail::Problem& p);
void n4_staged_overlap_run(const detail::Problem& p);
// pre_broadcast by fn_b (staged.cu, family n4b: the mixes of the embedding against fn_b, not of 4
// copies against fn): the mixes of e as 4 quarter-rows (decode_chunk_kernel up to the decode limit, else
// gemm_kernel -> finalize_kernel), then collapse_stream_kernel.
bool n4_staged_b_supports(const detail::Problem& p);
void n4_staged_b_run(const detail::Problem& p);
// The same mixes and collapse in the overlap rows at every T (family n4b).
bool n4_overlap_b_supports(const detail::Problem& p);
void n4_overlap_b_run(const detail::Problem& p);
/// Where the dispatcher prefers the staged plan (T >= kStagedPreferTokens), and for post_pre
/// (T >= kStagedPreferPostPre).
bool n4_staged_prefer(const detail::Problem& p);
bool n4_staged_prefer_post_pre(const detail::Problem& p);
/// Where the dispatcher prefers the overlap rows for pre (kOverlapPreferPre*, staged.cu).
bool n4_overlap_prefer_pre(const detail::Problem& p);
// src/cuda/n4/staged.cu: post alone with one form of post_kernel each (n4_supports).
void n4_post_flat_run(const detail::Problem& p);
void n4_post_rows_run(const detail::Problem& p);
void n4_post_pipelined_run(const detail::Problem& p);
bool n4_post_bulk_supports(const detail::Problem& p);
void n4_post_bulk_run(const detail::Problem& p);
/// fn split into bf16 hi/mid/lo parts in mma B-fragment order (empty outside the n4 envelope).
std::vector<uint32_t> n4_fragments(const PreparedWeights::Impl& w);
/// fn_b [rows][H] in the same layout as n = 4 weights over H / 4 columns a stream (the embedding
/// as 4 quarter-rows: pre_broadcast's staged_b plan); empty outside the n4 envelope and for a head.
std::vector<uint32_t> n4_broadcast_fragments(const PreparedWeights::Impl& w);
/// Sets the kernels' attributes (dynamic shared memory) on the current device; called by
/// Workspace::create, so that no call sets state lazily. Returns false where the device has too
/// little shared memory per block for mix_kernel (225 KB): the n4 variant then declines the
/// ops with a mixes stage and the generic one runs.
bool n4_configure_device(bool* gemm, bool* gemm_group, bool* gemm_wg, bool* gemm_rb, bool* post_bulk);
/// Bytes of workspace scratch the n4 path wants for `max_tokens` (partials of one slice) and
/// decode_kernel for `decode_tokens`.
size_t n4_scratch_bytes(int64_t max_tokens, int64_t decode_tokens);
/// Tokens of the staged plan's pre mailbox for a workspace of max_tokens (slices beyond it take
/// the fresh pre through the scratch instead).
int64_t n4_pre_mailbox_tokens(int64_t max_tokens);
/// decode_kernel's default T limit (WorkspaceOptions::decode_max_tokens = 0).
int64_t n4_decode_default_tokens();

}  // namespace mhc::cuda

namespace mhc::detail {

/// Every CUDA variant, in priority order (fast paths before the generic path).
std::vector<Variant> cuda_variants();

}  // namespace mhc::detail

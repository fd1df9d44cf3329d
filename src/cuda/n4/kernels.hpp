// src/cuda/n4/kernels.hpp - the launchers of the n = 4 kernels, one per kernel file. Each
// takes the plain N4Params (src/cuda/n4/config.cuh) and a LaunchCtx; src/cuda/n4/plan.cu
// decides which run, in which order, over which token slices.
#pragma once

#include "src/cuda/launch.cuh"
#include "src/cuda/n4/config.cuh"

namespace mhc::cuda::n4 {

constexpr int kPostBlocksPerSm = 16;  // post_kernel's grid cap, blocks per multiprocessor

/// `p` for tokens [t0, t0 + count): every token-indexed pointer offset (plan.cu).
N4Params slice_params(N4Params p, int64_t t0, int64_t count);

/// mix_kernel (mix_kernel.cu): post stage (p.has_post) and the partial dots of p.T tokens.
void launch_mix_kernel(const N4Params& p, const LaunchCtx& ctx);
/// Sets mix_kernel's dynamic shared memory limit on `device` (the current device); false where
/// the device has less than kMixSmem per block (the variant then declines the mixes ops).
bool configure_mix_kernel(int device);
/// gemm_kernel (gemm_kernel.cu): the mixes stage alone (no post), p.T tokens' partials.
void launch_gemm_kernel(const N4Params& p, const LaunchCtx& ctx);
/// gemm_kernel's overlapped form (the cuda_n4_overlap rows): the same partials, tile by tile,
/// each (chunk, tile) item counted in p.tile_arrivals once stored (overlap_tail_kernel waits on it).
void launch_gemm_overlap_kernel(const N4Params& p, const LaunchCtx& ctx);
/// Sets gemm_kernel's dynamic shared memory limits (200 KB; 168 KB for the overlapped form) on
/// `device`; false where it has less.
bool configure_gemm_kernel(int device);
/// gemm_group_kernel (gemm_group_kernel.cu): gemm_kernel's dots and square sums, stored as the
/// chunk groups' running sums (finalize_kernel with `grouped`), where p.partials holds
/// min(chunks, 8) x ceil(T / 32) x 32 x 25 floats (gemm_group_fits).
void launch_gemm_group_kernel(const N4Params& p, const LaunchCtx& ctx);
bool configure_gemm_group_kernel(int device);  // 225 KB of shared memory; false where less
bool gemm_group_fits(int64_t T, int chunks, size_t partial_floats);
/// The grid of the group-run kernels: min(chunks, 8) groups x the same number of blocks each.
unsigned group_blocks(const N4Params& p, int num_sms);
/// gemm_rb_kernel (gemm_rb_kernel.cu): gemm_group_kernel's contract and bits (the group runs),
/// its B fragments in registers and its streams through a 6-tile ring (the staged_rb rows).
void launch_gemm_rb_kernel(const N4Params& p, const LaunchCtx& ctx);
bool configure_gemm_rb_kernel(int device);  // 210 KB of shared memory, sm_90+; false where not
/// gemm_wg_kernel (gemm_wg_kernel.cu): gemm_kernel's contract and bits on wgmma (sm_90a).
void launch_gemm_wg_kernel(const N4Params& p, const LaunchCtx& ctx);
/// True where `device` is compute capability 9.0, this binary has gemm_wg_kernel's sm_90a code
/// and 200 KB of shared memory per block (then it also sets that limit).
bool configure_gemm_wg_kernel(int device);
/// collapse_kernel (collapse_kernel.cu): epilogue of the partials (p.has_mixes) and collapse.
void launch_collapse_kernel(const N4Params& p, const LaunchCtx& ctx);
/// post_kernel (post_kernel.cu): post alone. `variant` picks the kernel's form (same bits):
/// kPostFlat one thread per (token, 8 columns), grid-stride; kPostRows a block per token row,
/// the token's weights once; kPostPipelined kPostRows with the next step's loads in flight;
/// kPostAuto kPostFlat, the fastest of the three at every T measured on the H200
/// (docs/performance.md); kPostBulk post_bulk_kernel (below), which the caller may pick only
/// where the workspace configured it (post_form, plan.cu).
enum PostVariant : int { kPostAuto = -1, kPostFlat = 0, kPostRows = 1, kPostPipelined = 2, kPostBulk = 3 };
void launch_post_kernel(const N4Params& p, const LaunchCtx& ctx, int variant = kPostAuto);
/// post_bulk_kernel (post_bulk_kernel.cu): post alone, its loads through a ring of bulk copies
/// (sm_90+, where configure_post_bulk_kernel gave it its 120 KB of shared memory); the same bits.
void launch_post_bulk_kernel(const N4Params& p, const LaunchCtx& ctx);
bool configure_post_bulk_kernel(int device);
/// post_collapse_kernel (post_collapse_kernel.cu): the post and the collapse with the carried pre
/// in one pass, through a ring of bulk copies (sm_90+, where configure_post_collapse_kernel gave
/// it up to 217 KB of shared memory; H <= kPostCollapseMaxH): collapse_stream_kernel's post mode's
/// bits.
constexpr int64_t kPostCollapseMaxH = 7168;
bool post_collapse_supports(int64_t H);
void launch_post_collapse_kernel(const N4Params& p, const LaunchCtx& ctx);
bool configure_post_collapse_kernel(int device);
/// finalize_kernel (finalize_kernel.cu): the canonical sums of the partials of p.T tokens (chunk
/// partials, or gemm_group_kernel's group runs where `grouped`) and the mixes epilogue; writes
/// the requested mixes and, where `pre` is not null, the fresh pre [p.T][4] (slice-relative) for
/// collapse_stream_kernel, each token's before its Sinkhorn chain (the pre mailbox, N4Params::pre_poll).
void launch_finalize_kernel(const N4Params& p, float* pre, bool grouped, const LaunchCtx& ctx);
/// overlap_tail_kernel (overlap_tail_kernel.cu, the cuda_n4_overlap rows): launched right after
/// launch_gemm_overlap_kernel on m (the mixes' params, m.tile_arrivals set), finalize_kernel's
/// work on each 32-token tile once its items are counted (the fresh pre to `pre`, the mailbox,
/// where not null) and, where `collapse` is not null, collapse_stream_kernel's work on each token
/// with its pre polled in `pre` (collapse->pre_poll). tickets: the workspace's [2], 0 between
/// launches.
void launch_overlap_tail_kernel(const N4Params& m, float* pre, const N4Params* collapse, uint32_t* tickets,
                                const LaunchCtx& ctx);
/// collapse_stream_kernel (collapse_stream_kernel.cu): the collapse alone, with the carried
/// (p.pre_mix_in), identity or mean-head pre and the optional RMSNorm fold; with `post`, the
/// post stage first (p.residual, p.layer_output -> p.residual_out) and the collapse of its
/// outputs with the carried pre (the staged post_pre in shifted mode).
void launch_collapse_stream_kernel(const N4Params& p, const LaunchCtx& ctx, bool post = false);
/// decode_kernel (decode_kernel.cu): a whole op with a mixes stage in one launch, T <= 128.
/// scratch: decode_scratch_bytes(T); counters: the workspace's [3] counters, zero between
/// launches (the kernel leaves them so). One launch at a time per workspace.
void launch_decode_kernel(const N4Params& p, float* scratch, uint32_t* counters, const LaunchCtx& ctx);
/// decode_chunk_kernel (decode_chunk_kernel.cu): a whole op with a mixes stage in one launch of
/// H / 128 x ceil(T / 16) blocks (a block per (chunk, 16 tokens); the last min(T, blocks) to finish
/// phase 1 run phase 2),
/// H <= 8192 (decode_chunk_supports). scratch and counters as decode_kernel; the same bits.
void launch_decode_chunk_kernel(const N4Params& p, float* scratch, uint32_t* counters, const LaunchCtx& ctx);
/// Allows decode_chunk_kernel its dynamic shared memory (91 KB for a run of 4 groups) on
/// `device`; false where the device's opt-in limit is smaller.
bool configure_decode_chunk_kernel(int device);
bool decode_chunk_supports(int64_t H);
/// Workspace bytes decode_kernel needs for `tokens` tokens at the largest H.
size_t decode_scratch_bytes(int64_t tokens);

}  // namespace mhc::cuda::n4

namespace mhc::cuda {

// src/cuda/n4/plan.cu: the launch context and the N4Params of a problem (the whole batch).
LaunchCtx launch_ctx(const detail::Problem& p);
n4::N4Params n4_params(const detail::Problem& p);
/// The post kernel's form for the call (the post op and the staged plan's post stage):
/// kPostBulk where the workspace configured post_bulk_kernel (sm_90+), else kPostFlat.
int post_form(const detail::Problem& p);

}  // namespace mhc::cuda

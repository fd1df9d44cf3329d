// src/cuda/n4/staged.cu - the staged n = 4 plan: every operator with a collapse or a mixes
// stage as a chain of stage kernels that each stream on their own, launched back to back with
// programmatic dependent launch over token slices:
//   post_kernel or post_bulk_kernel (post_pre; post_form)  ->  GEMM stage (gemm_kernel, or
//   gemm_group_kernel from kGroupedTokens on, on the new residual or the input streams: the
//   partials [chunk][token][25], or the chunk groups' sums)  ->  finalize_kernel (the
//   canonical sums and the epilogue; the fresh pre into the workspace's pre mailbox, each
//   token's before its Sinkhorn chain)  ->  collapse_stream_kernel (polling its token's pre in
//   the mailbox, so it overlaps finalize_kernel; it completes after it).
// In shifted mode (post_pre with the carried pre) the collapse does not wait for the mixes, and
// collapse_stream_kernel's post mode runs the post and the collapse in one pass first, then the
// GEMM stage and finalize_kernel (28 H bytes a token against 36 H).
// Within a slice the GEMM and the collapse re-read the residual the post stage has just
// written (from L2 where the slice fits). Operators without a mixes stage (collapse, head
// carried / mean) are one collapse_stream_kernel over the whole batch.
//
// Bits: the same as the cuda_n4 rows (family "n4"): the GEMM stage's partials are mix_kernel's
// (the post stage of mix_kernel writes to residual_out exactly the values it feeds the mma, so
// reading them back gives the same dots and sums of squares), finalize_kernel sums them in
// collapse_kernel's order and runs the same epilogue, and collapse_stream_kernel has
// collapse_kernel's collapse arithmetic; post_kernel's outputs are the exact sums rounded once.
// Slicing never changes a token's result (batch invariance).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "src/cuda/n4/kernels.hpp"
#include "src/cuda/variants.hpp"

namespace mhc::cuda {

using namespace n4;

namespace {

// Tokens per slice where a collapse follows the mixes (WorkspaceOptions::n4_slice_tokens
// overrides it; the workspace's partials bound it too). Swept on the H200 (session 12 call 3,
// post_pre T = 16384): 2048 tokens 904 / 1610 us (H = 4096 / 7168), 4096 857 / 1520, 8192
// 820 / 1467, 16384 822 / 1379: a slice's residual (8H bytes a token) outgrows L2 at every
// length worth having, so longer slices only save the per-slice ramp of four launches.
constexpr int64_t kStagedSliceTokens = 16384;
// The dispatcher prefers the staged plan of pre, head and mixes from this T on (at T = 128 the
// cuda_n4 plan was faster on the H200, at T >= 1024 the staged one), and of post_pre from
// kStagedPreferPostPre on (session 22 call 4, normal_fold at H = 4096 / 7168: staged 53.9 / 89.3
// us against the fused mix_kernel's 55.2 / 92.0 at T = 1024, 96.4 / 164.8 against 119.5 / 192.4
// at T = 2048); above H = 4096 from kStagedPreferPostPreWide on (session 29 call 1,
// normal_fold at H = 5120 / 7168: staged 53.5 / 71.1 us against the fused plan's 55.9 / 75.5 at
// T = 768, 59.0 / 79.4 against 61.9 / 81.9 at T = 896, but 48.3 / 59.8 against 44.5 / 57.6 at
// T = 640; at H = 4096 the fused plan still won at T = 768: session 28 call 4).
// In shifted mode (the carried pre) the post and the collapse run as one kernel, and the staged
// plan wins from 768 (session 24 call 2, shifted_fold at H = 4096 / 5120 / 7168: staged 40.8 /
// 52.3 / 71.6 us against 45.1 / 56.9 / 76.7 at T = 768, 36.1 / 48.6 / 61.2 against 35.2 / 44.8 /
// 58.5 at T = 640).
constexpr int64_t kStagedPreferTokens = 512;
constexpr int64_t kStagedPreferPostPre = 1024;
constexpr int64_t kStagedPreferPostPreWide = 768;
constexpr int64_t kStagedPreferPostPreShifted = 768;
// pre (computed pre) takes the overlap rows at 1024 <= T <= 2048, where they save the staged
// chain's third launch (session 35, H100, pre normal_fold, staged against overlap: T = 1024
// 39.62 / 61.29 against 33.23 / 59.96 us at H = 4096 / 7168, T = 2048 68.50 / 111.14 against
// 60.45 / 102.95; T = 512 26.41 / 38.78 against 26.53 / 39.52; T = 4096 113.88 / 198.42 against
// 117.08 / 203.25). Not post_pre (normal_fold even, shifted_fold 13-27% slower there) nor head and
// pre_broadcast (not measured at these T).
constexpr int64_t kOverlapPreferPreFirst = 1024;
constexpr int64_t kOverlapPreferPreLast = 2048;
// gemm_group_kernel runs the GEMM stage of slices of this many tokens or more: below it, a
// block's share of a group's tiles (1/16 on an H200) leaves warps idle in every pass, and
// gemm_kernel's chunk-major ranges keep every warp busy.
constexpr int64_t kGroupedTokens = 4096;


// Which kernel runs the GEMM stage (the same contract and bits): gemm_wg_kernel (wgmma, the
// staged_wg rows), gemm_kernel (mma.sync, where Workspace::create could give it 200 KB of shared
// memory), gemm_rb_kernel (the staged_rb rows: at every T where its group runs fit, else
// gemm_kernel), gemm_kernel's overlapped form followed by overlap_tail_kernel (the overlap
// rows, below), else mix_kernel without its post stage.
enum class Gemm { kWgmma, kMma, kRegs, kOverlap, kMix };

// Whether the GEMM stage of a slice of s.T tokens writes group runs (gemm_group_kernel or
// gemm_rb_kernel), which finalize_kernel must be told.
bool grouped_stage(const detail::Problem& p, const N4Params& s, Gemm gemm, size_t partial_floats) {
  if (gemm == Gemm::kOverlap) return false;
  const bool fits = gemm_group_fits(s.T, s.chunks, partial_floats);
  if (gemm == Gemm::kRegs) return fits;
  return gemm == Gemm::kMma && p.workspace->n4_gemm_group && s.T >= kGroupedTokens && fits;
}

// The GEMM stage of a slice: the partial dots and sums of squares of the streams the collapse
// reads (p.x: the new residual for post_pre, else the input streams), nothing else written.
// The GEMM stage's view of the slice's params s: the streams it reads as its residual, no post.
N4Params gemm_view(const N4Params& s) {
  N4Params g = s;
  g.has_post = false;
  g.residual = s.x;
  g.residual_stride = s.x_stride;
  g.res_stream_stride = s.x_stream_stride;
  g.residual_out = nullptr;
  return g;
}

void launch_gemm_stage(const N4Params& s, const LaunchCtx& ctx, Gemm gemm, bool grouped) {
  const N4Params g = gemm_view(s);
  if (gemm == Gemm::kWgmma) {
    launch_gemm_wg_kernel(g, ctx);
  } else if (gemm == Gemm::kOverlap) {
    launch_gemm_overlap_kernel(g, ctx);
  } else if (grouped && gemm == Gemm::kRegs) {
    launch_gemm_rb_kernel(g, ctx);
  } else if (grouped) {
    launch_gemm_group_kernel(g, ctx);
  } else if (gemm == Gemm::kMma || gemm == Gemm::kRegs) {
    launch_gemm_kernel(g, ctx);
  } else {
    launch_mix_kernel(g, ctx);
  }
}

/// The staged plan over token slices: post (k.has_post), the GEMM stage and finalize_kernel on the
/// mixes' params m (k itself, or pre_broadcast's virtual problem over fn_b), the collapse on k.
// post_form(p) (plan.cu); the diagnostics build's MHC_POST_VARIANT (0 flat, 1 rows, 2 pipelined,
// 3 bulk where configured) picks another.
int post_variant(const detail::Problem& p) {
#ifdef MHC_GEMM_PROBE
  const char* v = std::getenv("MHC_POST_VARIANT");
  const int asked = v != nullptr ? std::atoi(v) : -1;
  if (v != nullptr && (asked != kPostBulk || p.workspace->n4_post_bulk)) return asked;
#endif
  return post_form(p);
}

void staged_slices(const detail::Problem& p, const N4Params& k, const N4Params& m, Gemm gemm);
void staged_run(const detail::Problem& p, Gemm gemm);

/// The collapse params c with the fresh pre [t][stride] that an earlier kernel of the plan wrote
/// as its carried pre (collapse_stream_kernel reads a pre, it does not compute one).
N4Params with_fresh_pre(N4Params c, const float* pre, int64_t stride) {
  c.pre_source = PreSource::kCarried;
  c.pre_mix_in = pre;
  c.pre_mix_in_stride = stride;
  return c;
}

}  // namespace

bool n4_staged_prefer(const detail::Problem& p) { return p.T >= kStagedPreferTokens; }
bool n4_overlap_prefer_pre(const detail::Problem& p) {
  return p.T >= kOverlapPreferPreFirst && p.T <= kOverlapPreferPreLast;
}
bool n4_staged_prefer_post_pre(const detail::Problem& p) {
  if (p.pre_source == PreSource::kCarried) return p.T >= kStagedPreferPostPreShifted;
  return p.T >= (p.H > 4096 ? kStagedPreferPostPreWide : kStagedPreferPostPre);
}

bool n4_staged_supports(const detail::Problem& p) {
  if (p.op == detail::Op::kPreBroadcast || p.op == detail::Op::kPost) return false;
  return n4_supports(p);
}

bool n4_staged_wg_supports(const detail::Problem& p) {
  return n4_staged_supports(p) && p.workspace != nullptr && p.workspace->n4_gemm_wg;
}

void n4_staged_run(const detail::Problem& p) {
  MHC_CHECK(n4_staged_supports(p), detail::op_name(p.op), ": cuda_n4_staged does not support this call");
  staged_run(p, p.workspace != nullptr && p.workspace->n4_gemm ? Gemm::kMma : Gemm::kMix);
}

void n4_staged_wg_run(const detail::Problem& p) {
  MHC_CHECK(n4_staged_wg_supports(p), detail::op_name(p.op), ": cuda_n4_staged_wg does not support this call");
  staged_run(p, Gemm::kWgmma);
}

bool n4_staged_overlap_supports(const detail::Problem& p) {
  return n4_staged_supports(p) && p.workspace != nullptr && p.workspace->n4_gemm &&
         p.workspace->tile_arrivals != nullptr;
}

void n4_staged_overlap_run(const detail::Problem& p) {
  MHC_CHECK(n4_staged_overlap_supports(p), detail::op_name(p.op), ": cuda_n4_overlap does not support this call");
  staged_run(p, Gemm::kOverlap);
}

bool n4_staged_rb_supports(const detail::Problem& p) {
  return n4_staged_supports(p) && p.workspace != nullptr && p.workspace->n4_gemm_rb;
}

void n4_staged_rb_run(const detail::Problem& p) {
  MHC_CHECK(n4_staged_rb_supports(p), detail::op_name(p.op), ": cuda_n4_staged_rb does not support this call");
  staged_run(p, Gemm::kRegs);
}

namespace {

void staged_run(const detail::Problem& p, Gemm gemm) {
  MHC_CHECK(p.workspace != nullptr && p.workspace->scratch != nullptr, detail::op_name(p.op),
            ": cuda_n4_staged needs a workspace (mhc::Workspace::create)");
  if (p.T <= 0) return;
  const N4Params k = n4_params(p);
  if (!k.has_mixes) {
    // collapse (carried, identity), head (carried, mean): the collapse alone.
    launch_collapse_stream_kernel(k, launch_ctx(p));
    return;
  }
  staged_slices(p, k, k, gemm);
}

// Diagnostics build (-DMHC_GEMM_PROBE): MHC_STAGED_SKIP names stages the plan leaves out (p post,
// g GEMM, f finalize, c collapse), to time the plan without each of them; results are then wrong
// (without f the collapse reads whatever pre the workspace holds, which may take its slow path).
// Elsewhere every stage runs.
bool stage_runs(char stage) {
#ifdef MHC_GEMM_PROBE
  const char* skip = std::getenv("MHC_STAGED_SKIP");
  return skip == nullptr || std::strchr(skip, stage) == nullptr;
#else
  (void)stage;
  return true;
#endif
}

// The launch of `stage` (letters as stage_runs) within staged slices. finalize_kernel is
// launched without programmatic dependent launch: with it, the staged post_pre took 763 against
// 680 us at T = 16384, H = 4096 (1312 against 1169 at H = 7168 shifted) and pre 366 against 349,
// and no row was faster (session 14 call 3, docs/performance-history.md); its prologue has
// nothing to overlap (it reads only the GEMM's partials; session 29 call 1 measured it slower
// again). The pre mailbox relies on it: a polling collapse starts once finalize_kernel has
// started, so everything before finalize_kernel must be complete by then. The others keep it
// (launching the GEMM or the collapse without it measured no faster than this). The diagnostics build's
// MHC_NO_PDL_STAGES names further stages to launch without it.
LaunchCtx stage_ctx(const LaunchCtx& ctx, char stage) {
  LaunchCtx c = ctx;
  if (stage == 'f') c.pdl = false;
#ifdef MHC_GEMM_PROBE
  const char* off = std::getenv("MHC_NO_PDL_STAGES");
  if (off != nullptr && std::strchr(off, stage) != nullptr) c.pdl = false;
#endif
  return c;
}

// The post stage (where the op has one) and the GEMM stage of a slice. Diagnostics build:
// MHC_PROBE_SPLIT="P G C" runs the post stage on P multiprocessors and the GEMM stage on G; C = 1
// launches the GEMM on a second stream beside the post (it reads whatever residual_out holds:
// the timing of the two sharing the machine, not a result), C = 0 one after the other.
void post_and_gemm(const detail::Problem& p, const N4Params& s, const N4Params& sm, const LaunchCtx& ctx, Gemm gemm,
                   bool grouped) {
  LaunchCtx cp = stage_ctx(ctx, 'p'), cg = stage_ctx(ctx, 'g');
#ifdef MHC_GEMM_PROBE
  const char* env = std::getenv("MHC_PROBE_SPLIT");
  int P = 0, G = 0, C = 0;
  if (s.has_post && env != nullptr && std::sscanf(env, "%d %d %d", &P, &G, &C) == 3) {
    cp.num_sms = P;
    cg.num_sms = G;
    if (C != 0) {
      static cudaStream_t side = nullptr;
      static cudaEvent_t fork = nullptr, join = nullptr;
      if (side == nullptr) {
        MHC_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
        MHC_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
        MHC_CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
      }
      MHC_CUDA_CHECK(cudaEventRecord(fork, ctx.stream));
      MHC_CUDA_CHECK(cudaStreamWaitEvent(side, fork, 0));
      launch_post_kernel(s, cp, post_variant(p));
      cg.stream = side;
      cg.pdl = false;
      launch_gemm_stage(sm, cg, gemm, grouped);
      MHC_CUDA_CHECK(cudaEventRecord(join, side));
      MHC_CUDA_CHECK(cudaStreamWaitEvent(ctx.stream, join, 0));
      return;
    }
  }
#endif
  if (s.has_post && stage_runs('p')) launch_post_kernel(s, cp, post_variant(p));
  if (stage_runs('g')) launch_gemm_stage(sm, cg, gemm, grouped);
}

// Diagnostics build: whether the environment variable `name` asks (a nonzero number) to leave a
// fused form out, for A/B timing. Elsewhere never.
bool diag_off(const char* name) {
#ifdef MHC_GEMM_PROBE
  const char* v = std::getenv(name);
  return v != nullptr && std::atoi(v) != 0;
#else
  (void)name;
  return false;
#endif
}

// Whether the staged plan fuses a post with a collapse that uses the carried pre
// (MHC_NO_POST_COLLAPSE=1 keeps the two kernels apart), and whether that pass runs as
// post_collapse_kernel (bulk copies) where it fits (MHC_POST_COLLAPSE_REGS=1 keeps
// collapse_stream_kernel's post mode).
bool post_collapse_enabled() { return !diag_off("MHC_NO_POST_COLLAPSE"); }
bool post_collapse_bulk() { return !diag_off("MHC_POST_COLLAPSE_REGS"); }

void staged_slices(const detail::Problem& p, const N4Params& k, const N4Params& m, Gemm gemm) {
  const LaunchCtx ctx = launch_ctx(p);
  // The overlap rows: the GEMM stage (gemm_kernel's overlapped form) counts each tile's items
  // as they are stored, and overlap_tail_kernel, launched right after it with programmatic
  // dependent launch, takes each tile as soon as it is counted (finalize_kernel's work) and
  // collapses each token once its pre is in the mailbox, so the three stages run at the same
  // time, tile by tile. The collapse then re-reads a token's streams shortly after the GEMM stage
  // read them, from L2 rather than DRAM: 10 H bytes a token from DRAM for pre and head where the
  // stages one after another move 18 H. The GEMM stage lets the tail kernel start only once the
  // kernel before it has completed, so the streams it reads are complete (gemm_kernel.cu).
  // Slices: at most the workspace's tile counters.
  const bool overlap = gemm == Gemm::kOverlap;
  MHC_CHECK(!overlap || (stage_runs('g') && stage_runs('f')),
            "cuda_n4_overlap: the GEMM and finalize stages put the tile counters back; neither can be skipped");
  LaunchCtx cf = stage_ctx(ctx, 'f');
  if (overlap) cf.pdl = ctx.pdl;
  // The workspace scratch holds one slice's partials [chunks][slice][25] and, where the collapse
  // uses the fresh pre, its pre [slice][4] after them (16-byte aligned: chunks % 4 == 0). Slices
  // are multiples of the 32-token tile where the scratch holds one (the smallest workspace holds
  // 31 tokens and their pre at H = 16384).
  const bool pre_buffer = k.has_collapse && k.pre_source == PreSource::kComputed && !k.head_mean;
  const int64_t per_token = static_cast<int64_t>(m.chunks) * kPartial + (pre_buffer ? kN : 0);
  const int64_t capacity = static_cast<int64_t>(p.workspace->scratch_bytes / sizeof(float));
  int64_t slice_tokens = capacity / per_token;
  if (slice_tokens >= kTile) slice_tokens -= slice_tokens % kTile;
  MHC_CHECK(slice_tokens >= 1, detail::op_name(p.op), ": workspace too small for H = ", p.H);
  const int64_t forced = p.workspace->n4_slice_tokens / kTile * kTile;
  const int64_t wanted = forced > 0 ? forced : k.has_collapse ? kStagedSliceTokens : 0;
  if (wanted > 0 && wanted < slice_tokens) slice_tokens = wanted;
  if (overlap && slice_tokens > p.workspace->tile_arrival_tiles * kTile) {
    slice_tokens = p.workspace->tile_arrival_tiles * kTile;
  }
  float* pre = pre_buffer ? k.partials + slice_tokens * m.chunks * kPartial : nullptr;
  // The pre mailbox: finalize_kernel stores a token's fresh pre there before its comb's Sinkhorn
  // chain, and collapse_stream_kernel polls it (pre_poll) instead of waiting for finalize_kernel to
  // complete, so the collapse's loads and the first tokens' collapse overlap finalize_kernel. Every
  // float of the mailbox is kPrePoison between calls; each collapse block puts its token's back
  // after reading it, so both kernels must run (the diagnostics build's skips use the scratch, and
  // MHC_NO_PRE_MAILBOX=1 there keeps the scratch for A/B timing).
  // (In the overlap rows the tail kernel is launched with programmatic dependent launch, but only
  // starts once the GEMM stage's kernel before has completed, which is what the mailbox needs.)
  const bool mailbox = pre_buffer && p.workspace->pre_mailbox != nullptr && !diag_off("MHC_NO_PRE_MAILBOX") &&
                       stage_runs('f') && stage_runs('c') && (!cf.pdl || overlap);
  // A post followed by a collapse with the carried pre (post_pre, shifted) runs both in one
  // kernel (collapse_stream_kernel's post mode: 20 H bytes a token against 28 H).
  const bool post_collapse = k.has_post && k.has_collapse && k.pre_source == PreSource::kCarried && !k.head_mean &&
                             post_collapse_enabled();
  for (int64_t t0 = 0; t0 < p.T; t0 += slice_tokens) {
    const int64_t count = p.T - t0 < slice_tokens ? p.T - t0 : slice_tokens;
    const N4Params s = slice_params(k, t0, count);
    N4Params sm = slice_params(m, t0, count);
    if (overlap) sm.tile_arrivals = p.workspace->tile_arrivals;
    const bool grouped = grouped_stage(p, sm, gemm, static_cast<size_t>(slice_tokens * m.chunks * kPartial));
    const bool polled = mailbox && count <= p.workspace->pre_mailbox_tokens;
    float* slice_pre = polled ? p.workspace->pre_mailbox : pre;
    const bool collapse = !post_collapse && s.has_collapse && stage_runs('c');
    N4Params c = pre_buffer ? with_fresh_pre(s, slice_pre, kN) : s;
    c.pre_poll = polled;
    if (post_collapse) {
      // shifted post_pre: the post and the collapse with the carried pre in one pass, then the mixes
      if (stage_runs('p')) {
        if (p.workspace->n4_post_bulk && post_collapse_supports(s.H) && post_collapse_bulk()) {
          launch_post_collapse_kernel(s, stage_ctx(ctx, 'p'));
        } else {
          launch_collapse_stream_kernel(s, stage_ctx(ctx, 'p'), true);
        }
      }
      if (stage_runs('g')) launch_gemm_stage(sm, stage_ctx(ctx, 'g'), gemm, grouped);
    } else {
      post_and_gemm(p, s, sm, ctx, gemm, grouped);
    }
    if (overlap) {
      // overlap_tail_kernel: the finalize role, and the collapse role where it polls the mailbox
      // (its stream loads without the streaming hint: the GEMM stage may read a line after it; the
      // diagnostics build's MHC_OVERLAP_COLLAPSE_CS=1 keeps the hint, for A/B timing).
      c.x_keep = !diag_off("MHC_OVERLAP_COLLAPSE_CS");
      const bool tail_collapse = collapse && polled;
      launch_overlap_tail_kernel(sm, slice_pre, tail_collapse ? &c : nullptr, p.workspace->overlap_tickets, cf);
      if (!collapse || tail_collapse) continue;
      c.x_keep = false;  // a collapse after the tail kernel (no mailbox): collapse_stream_kernel as ever
    } else if (stage_runs('f')) {
      launch_finalize_kernel(sm, slice_pre, grouped, cf);
    }
    if (!collapse) continue;
    launch_collapse_stream_kernel(c, stage_ctx(ctx, 'c'));
  }
}

void post_variant_run(const detail::Problem& p, int variant, const char* name) {
  MHC_CHECK(p.op == detail::Op::kPost && n4_supports(p), "post: ", name, " does not support this call");
  MHC_CHECK(p.workspace != nullptr, "post: ", name, " needs a workspace (mhc::Workspace::create)");
  if (p.T > 0) launch_post_kernel(n4_params(p), launch_ctx(p), variant);
}

}  // namespace

bool n4_staged_b_supports(const detail::Problem& p) {
  return p.op == detail::Op::kPreBroadcast && n4_supports(p) && p.weights != nullptr &&
         p.weights->d_fn_b_frag != nullptr && p.workspace != nullptr && p.workspace->n4_gemm;
}

// pre_broadcast by fn_b (spec section 4.4: the embedding read once, never as n copies): the mixes
// of e against fn_b are n = 4 mixes over H / 4 columns a stream, e viewed as 4 quarter-rows
// (stream stride H / 4) against n4_broadcast_fragments, with the mean of e^2 over H; gemm_kernel
// and finalize_kernel run them as they run any n = 4 mixes (they read only chunks and strides).
// The collapse keeps the real H, the streams e at stride 0, and writes the materialised
// residual_out (where asked for) from the e it loads: e is read twice (mixes, collapse), 14 H
// bytes a token against the op's 12 H. Up to the workspace's decode limit the mixes run in
// decode_chunk_kernel instead of gemm_kernel and finalize_kernel (the same bits).
namespace {

// pre_broadcast's two problems: the collapse's c (the real H, the embedding at stream stride 0,
// the materialised residual_out written from the embedding it loads) and the mixes' m (the
// embedding as 4 quarter-rows against fn_b).
void broadcast_problems(const detail::Problem& p, N4Params& c, N4Params& m) {
  const N4Params k = n4_params(p);
  m = k;
  m.H = k.H / kN;
  m.chunks = static_cast<int32_t>(k.H / kSliceK);
  m.x = k.residual;
  m.x_stride = k.residual_stride;
  m.x_stream_stride = k.H / kN;
  m.residual = m.x;  // decode_chunk_kernel reads the mixes' streams here
  m.res_stream_stride = m.x_stream_stride;
  m.fn_frag = reinterpret_cast<const uint2*>(p.weights->d_fn_b_frag);
  m.inv_k = 1.0f / static_cast<float>(k.H);
  c = k;
  c.copy_x_out = k.residual_out != nullptr;
}

// A pre_broadcast row's checks (`supported`: its supports(); `name` for the message), then its
// problems (broadcast_problems); false where there is nothing to run (T = 0).
bool broadcast_call(const detail::Problem& p, bool supported, const char* name, N4Params& c, N4Params& m) {
  MHC_CHECK(supported, detail::op_name(p.op), ": ", name, " does not support this call");
  MHC_CHECK(p.workspace->scratch != nullptr, detail::op_name(p.op), ": ", name, " needs a workspace");
  if (p.T <= 0) return false;
  broadcast_problems(p, c, m);
  return true;
}

// pre_broadcast through staged_slices with the GEMM stage `gemm` (the overlap rows).
void broadcast_slices(const detail::Problem& p, bool supported, Gemm gemm, const char* name) {
  N4Params c, m;
  if (broadcast_call(p, supported, name, c, m)) staged_slices(p, c, m, gemm);
}

}  // namespace

bool n4_overlap_b_supports(const detail::Problem& p) {
  return n4_staged_b_supports(p) && p.workspace->tile_arrivals != nullptr;
}

// pre_broadcast in the overlap rows: the mixes of the embedding's quarter-rows through
// gemm_kernel's overlapped form and overlap_tail_kernel at every T, the collapse re-reading the
// embedding from L2 (4 H bytes a token from DRAM against 6 H; the same bits, family n4b).
void n4_overlap_b_run(const detail::Problem& p) {
  broadcast_slices(p, n4_overlap_b_supports(p), Gemm::kOverlap, "cuda_n4b_overlap");
}

void n4_staged_b_run(const detail::Problem& p) {
  N4Params c, m;
  if (!broadcast_call(p, n4_staged_b_supports(p), "cuda_n4b_staged", c, m)) return;
  if (p.T > p.workspace->decode_tokens || !decode_chunk_supports(m.H)) {
    staged_slices(p, c, m, Gemm::kMma);
    return;
  }
  // Decode sizes: decode_chunk_kernel forms the mixes of m in one launch (the bits of gemm_kernel
  // and finalize_kernel: family n4), then collapse_stream_kernel. A computed pre reaches the
  // collapse through the caller's pre_mix_out or, where none is asked for, the scratch after the
  // partials.
  const LaunchCtx ctx = launch_ctx(p);
  float* scratch = static_cast<float*>(p.workspace->scratch);
  const int64_t partial_floats = (p.T * m.chunks * kPartial + 3) / 4 * 4;
  MHC_CHECK(static_cast<size_t>(partial_floats + p.T * kN) * sizeof(float) <= p.workspace->scratch_bytes,
            detail::op_name(p.op), ": cuda_n4b_staged: workspace scratch too small for T = ", p.T);
  m.has_collapse = false;
  m.layer_input = nullptr;
  m.residual_out = nullptr;
  const bool computed = c.has_collapse && c.pre_source == PreSource::kComputed;
  if (computed && m.epi.pre_mix_out == nullptr) {
    m.epi.pre_mix_out = scratch + partial_floats;
    m.epi.pre_mix_out_stride = kN;
  }
  launch_decode_chunk_kernel(m, scratch, p.workspace->decode_counters, ctx);
  if (!c.has_collapse) return;
  launch_collapse_stream_kernel(computed ? with_fresh_pre(c, m.epi.pre_mix_out, m.epi.pre_mix_out_stride) : c, ctx);
}

void n4_post_flat_run(const detail::Problem& p) { post_variant_run(p, kPostFlat, "cuda_n4_flat"); }
void n4_post_rows_run(const detail::Problem& p) { post_variant_run(p, kPostRows, "cuda_n4_rows"); }
void n4_post_pipelined_run(const detail::Problem& p) { post_variant_run(p, kPostPipelined, "cuda_n4_pipelined"); }

bool n4_post_bulk_supports(const detail::Problem& p) {
  return p.op == detail::Op::kPost && n4_supports(p) && p.workspace != nullptr && p.workspace->n4_post_bulk;
}

void n4_post_bulk_run(const detail::Problem& p) {
  MHC_CHECK(n4_post_bulk_supports(p), "post: cuda_n4_bulk does not support this call");
  post_variant_run(p, kPostBulk, "cuda_n4_bulk");
}

}  // namespace mhc::cuda

// src/cuda/variants.cu - the CUDA variant list, in priority order per operator: the first row
// whose supports() accepts a problem (and whose prefer(), where it has one, accepts it) runs it.
// Ids are "<op>.<variant>"; the rows of family "n4" give the same bits (tests/test_gpu.cpp,
// GpuFamily), so the order is a speed choice, measured on the H200 (docs/performance.md).
#include "src/cuda/variants.hpp"

namespace mhc::detail {

std::vector<Variant> cuda_variants() {
  using namespace mhc::cuda;
  constexpr const char* kGeneric = "CUDA tensors, any n in 1..8, any H >= 1, strided rows";
  constexpr const char* kN4 =
      "CUDA, n = 4, H % 512 == 0, H <= 16384, 16-byte aligned bf16 rows (tensor-core mixes)";
  constexpr const char* kN4Wg =
      "CUDA compute capability 9.0 (sm_90a code), n = 4, H % 512 == 0, H <= 16384, 16-byte aligned bf16 rows "
      "(wgmma mixes)";
  constexpr const char* kN4Rb =
      "CUDA compute capability 9.0 or later, n = 4, H % 512 == 0, H <= 16384, 16-byte aligned bf16 rows "
      "(mixes with the B fragments in registers)";
  constexpr const char* kN4Decode =
      "CUDA, n = 4, H % 512 == 0, H <= 16384, 16-byte aligned rows, 1 <= T <= the workspace's decode limit "
      "(WorkspaceOptions::decode_max_tokens, default 128)";
  constexpr const char* kN4DecodeChunk =
      "as cuda_n4_decode, H <= 8192";
  constexpr const char* kDecodeChunkPlan =
      "decode_chunk_kernel (one launch: a block per (chunk, 16 tokens) forms the post and the chunk partials; "
      "min(T, SMs - 1) blocks reduce them, collapse and run the epilogue: the last to finish, and blocks that skip "
      "the post where T exceeds the others)";
  constexpr const char* kDecodePlan =
      "decode_kernel (one launch: unit blocks form the post and the dots, then one block per token the "
      "collapse and one the epilogue)";
  // The overlap rows (staged.cu): explicit until measured, after the staged rows.
  constexpr const char* kOverlapMixes =
      "gemm_kernel (overlapped: tile by tile, each tile counted) beside overlap_tail_kernel (finalize_kernel's work on "
      "each tile once counted)";
  constexpr const char* kOverlapPlan =
      "gemm_kernel (overlapped) beside overlap_tail_kernel (finalize_kernel's and collapse_stream_kernel's work, the "
      "collapse polling the pre mailbox): the collapse re-reads the streams from L2";
  constexpr const char* kOverlapPostPre =
      "post_kernel -> gemm_kernel (overlapped) beside overlap_tail_kernel (finalize and collapse); shifted mode: the "
      "post and the collapse in one pass -> gemm_kernel (overlapped) beside overlap_tail_kernel (finalize)";
  constexpr const char* kOverlapHead =
      "gemm_kernel (overlapped) beside overlap_tail_kernel (finalize and collapse) (learned) | collapse_stream_kernel";
  // The rows every operator with a mixes stage has, alike but for id and operator.
  auto decode_chunk = [&](const char* id, Op op) {
    return Variant{id, op, DeviceType::kCUDA, kN4DecodeChunk, n4_decode_chunk_supports, n4_decode_chunk_run, kDecodeChunkPlan, "n4"};
  };
  auto decode = [&](const char* id, Op op) {
    return Variant{id, op, DeviceType::kCUDA, kN4Decode, n4_decode_supports, n4_decode_run, kDecodePlan, "n4", n4_decode_prefer};
  };
  auto generic = [&](const char* id, Op op) {
    return Variant{id, op, DeviceType::kCUDA, kGeneric, generic_supports, generic_run, "generic_kernel<n>", "generic"};
  };
  return {
      // mixes
      decode_chunk("mixes.cuda_n4_decode_chunk", Op::kMixes),
      decode("mixes.cuda_n4_decode", Op::kMixes),
      {"mixes.cuda_n4_staged", Op::kMixes, DeviceType::kCUDA, kN4, n4_staged_supports, n4_staged_run, "gemm_kernel (gemm_group_kernel from 4096 tokens a slice) -> finalize_kernel", "n4", n4_staged_prefer},
      {"mixes.cuda_n4_staged_wg", Op::kMixes, DeviceType::kCUDA, kN4Wg, n4_staged_wg_supports, n4_staged_wg_run, "gemm_wg_kernel -> finalize_kernel", "n4", n4_staged_prefer},
      {"mixes.cuda_n4_staged_rb", Op::kMixes, DeviceType::kCUDA, kN4Rb, n4_staged_rb_supports, n4_staged_rb_run, "gemm_rb_kernel (gemm_kernel where its group runs do not fit) -> finalize_kernel", "n4", n4_staged_prefer},
      {"mixes.cuda_n4_overlap", Op::kMixes, DeviceType::kCUDA, kN4, n4_staged_overlap_supports, n4_staged_overlap_run, kOverlapMixes, "n4", n4_staged_prefer},
      {"mixes.cuda_n4", Op::kMixes, DeviceType::kCUDA, kN4, n4_supports, n4_run, "mix_kernel -> collapse_kernel (epilogue only)", "n4"},
      generic("mixes.cuda_generic", Op::kMixes),
      // collapse: collapse_stream_kernel first, the faster of the two (the same bits) in 16 of 18
      // rows measured on the H200 (docs/performance.md, the collapse row)
      {"collapse.cuda_n4_staged", Op::kCollapse, DeviceType::kCUDA, kN4, n4_staged_supports, n4_staged_run, "collapse_stream_kernel", "n4"},
      {"collapse.cuda_n4", Op::kCollapse, DeviceType::kCUDA, kN4, n4_supports, n4_run, "collapse_kernel", "n4"},
      generic("collapse.cuda_generic", Op::kCollapse),
      // pre
      decode_chunk("pre.cuda_n4_decode_chunk", Op::kPre),
      decode("pre.cuda_n4_decode", Op::kPre),
      {"pre.cuda_n4_overlap", Op::kPre, DeviceType::kCUDA, kN4, n4_staged_overlap_supports, n4_staged_overlap_run, kOverlapPlan, "n4", n4_overlap_prefer_pre},
      {"pre.cuda_n4_staged", Op::kPre, DeviceType::kCUDA, kN4, n4_staged_supports, n4_staged_run, "gemm_kernel (gemm_group_kernel from 4096 tokens a slice) -> finalize_kernel -> collapse_stream_kernel", "n4", n4_staged_prefer},
      {"pre.cuda_n4_staged_wg", Op::kPre, DeviceType::kCUDA, kN4Wg, n4_staged_wg_supports, n4_staged_wg_run, "gemm_wg_kernel -> finalize_kernel -> collapse_stream_kernel", "n4", n4_staged_prefer},
      {"pre.cuda_n4_staged_rb", Op::kPre, DeviceType::kCUDA, kN4Rb, n4_staged_rb_supports, n4_staged_rb_run, "gemm_rb_kernel -> finalize_kernel -> collapse_stream_kernel", "n4", n4_staged_prefer},
      // explicit: after the staged rows, whose prefer() it shares, until measured
      {"pre.cuda_n4", Op::kPre, DeviceType::kCUDA, kN4, n4_supports, n4_run, "mix_kernel -> collapse_kernel", "n4"},
      generic("pre.cuda_generic", Op::kPre),
      // pre_broadcast: by fn_b (spec section 4.4) at every T, so one family serves every batch; the
      // n4 rows below read the n copies against the full fn and run only where asked for by id
      // (or where a workspace has no gemm_kernel)
      {"pre_broadcast.cuda_n4b_staged", Op::kPreBroadcast, DeviceType::kCUDA, kN4, n4_staged_b_supports, n4_staged_b_run,
       "decode_chunk_kernel up to the decode limit, else gemm_kernel (gemm_group_kernel from 4096 tokens a slice) -> "
       "finalize_kernel (the embedding as 4 "
       "quarter-rows against fn_b); then collapse_stream_kernel (writes the materialised residual_out)", "n4b"},
      {"pre_broadcast.cuda_n4b_overlap", Op::kPreBroadcast, DeviceType::kCUDA, kN4, n4_overlap_b_supports, n4_overlap_b_run,
       "gemm_kernel (overlapped) beside overlap_tail_kernel (finalize and collapse), the embedding as 4 quarter-rows "
       "against fn_b at every T: the collapse re-reads the embedding from L2", "n4b"},
      decode_chunk("pre_broadcast.cuda_n4_decode_chunk", Op::kPreBroadcast),
      decode("pre_broadcast.cuda_n4_decode", Op::kPreBroadcast),
      {"pre_broadcast.cuda_n4", Op::kPreBroadcast, DeviceType::kCUDA, kN4, n4_supports, n4_run, "mix_kernel -> collapse_kernel", "n4"},
      generic("pre_broadcast.cuda_generic", Op::kPreBroadcast),
      // post
      {"post.cuda_n4", Op::kPost, DeviceType::kCUDA, kN4, n4_supports, n4_run, "post_bulk_kernel where the workspace has it (sm_90+), else post_kernel (flat)", "n4"},
      {"post.cuda_n4_flat", Op::kPost, DeviceType::kCUDA, kN4, n4_supports, n4_post_flat_run, "post_kernel (flat: a thread per token x 8 columns)", "n4"},
      {"post.cuda_n4_rows", Op::kPost, DeviceType::kCUDA, kN4, n4_supports, n4_post_rows_run, "post_kernel (rows: a block per token row)", "n4"},
      {"post.cuda_n4_pipelined", Op::kPost, DeviceType::kCUDA, kN4, n4_supports, n4_post_pipelined_run, "post_kernel (rows, next loads in flight)", "n4"},
      {"post.cuda_n4_bulk", Op::kPost, DeviceType::kCUDA, "CUDA compute capability 9.0+, n = 4, H % 512 == 0, H <= 16384, 16-byte aligned bf16 rows", n4_post_bulk_supports, n4_post_bulk_run, "post_bulk_kernel (512 threads a multiprocessor in groups of 128, or of 64 where H % 1024 != 0, each fed by its own ring of bulk copies)", "n4"},
      generic("post.cuda_generic", Op::kPost),
      // post_pre
      decode_chunk("post_pre.cuda_n4_decode_chunk", Op::kPostPre),
      decode("post_pre.cuda_n4_decode", Op::kPostPre),
      {"post_pre.cuda_n4_staged", Op::kPostPre, DeviceType::kCUDA, kN4, n4_staged_supports, n4_staged_run, "post_kernel -> gemm_kernel (gemm_group_kernel from 4096 tokens a slice) -> finalize_kernel -> collapse_stream_kernel; shifted mode: collapse_stream_kernel's post mode (post and collapse in one pass) -> GEMM -> finalize_kernel", "n4", n4_staged_prefer_post_pre},
      {"post_pre.cuda_n4_staged_wg", Op::kPostPre, DeviceType::kCUDA, kN4Wg, n4_staged_wg_supports, n4_staged_wg_run, "post_kernel -> gemm_wg_kernel -> finalize_kernel -> collapse_stream_kernel", "n4", n4_staged_prefer_post_pre},
      {"post_pre.cuda_n4_staged_rb", Op::kPostPre, DeviceType::kCUDA, kN4Rb, n4_staged_rb_supports, n4_staged_rb_run, "post_kernel -> gemm_rb_kernel -> finalize_kernel -> collapse_stream_kernel; shifted mode: the post and the collapse in one pass -> gemm_rb_kernel -> finalize_kernel", "n4", n4_staged_prefer_post_pre},
      {"post_pre.cuda_n4_overlap", Op::kPostPre, DeviceType::kCUDA, kN4, n4_staged_overlap_supports, n4_staged_overlap_run, kOverlapPostPre, "n4", n4_staged_prefer_post_pre},
      {"post_pre.cuda_n4", Op::kPostPre, DeviceType::kCUDA, kN4, n4_supports, n4_run, "mix_kernel (post fused) -> collapse_kernel", "n4"},
      generic("post_pre.cuda_generic", Op::kPostPre),
      // head
      decode_chunk("head.cuda_n4_decode_chunk", Op::kHead),
      decode("head.cuda_n4_decode", Op::kHead),
      {"head.cuda_n4_staged", Op::kHead, DeviceType::kCUDA, kN4, n4_staged_supports, n4_staged_run, "gemm_kernel (gemm_group_kernel from 4096 tokens a slice) -> finalize_kernel -> collapse_stream_kernel (learned) | collapse_stream_kernel", "n4", n4_staged_prefer},
      {"head.cuda_n4_staged_wg", Op::kHead, DeviceType::kCUDA, kN4Wg, n4_staged_wg_supports, n4_staged_wg_run, "gemm_wg_kernel -> finalize_kernel -> collapse_stream_kernel (learned) | collapse_stream_kernel", "n4", n4_staged_prefer},
      {"head.cuda_n4_staged_rb", Op::kHead, DeviceType::kCUDA, kN4Rb, n4_staged_rb_supports, n4_staged_rb_run, "gemm_rb_kernel -> finalize_kernel -> collapse_stream_kernel (learned) | collapse_stream_kernel", "n4", n4_staged_prefer},
      {"head.cuda_n4_overlap", Op::kHead, DeviceType::kCUDA, kN4, n4_staged_overlap_supports, n4_staged_overlap_run, kOverlapHead, "n4", n4_staged_prefer},
      {"head.cuda_n4", Op::kHead, DeviceType::kCUDA, kN4, n4_supports, n4_run, "mix_kernel -> collapse_kernel (learned) | collapse_kernel", "n4"},
      generic("head.cuda_generic", Op::kHead),
  };
}

}  // namespace mhc::detail

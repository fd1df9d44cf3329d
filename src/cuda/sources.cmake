# The CUDA sources, listed explicitly: backend and variant list, the generic path, and the
# n = 4 path (one file per kernel, its plan, its weight layout).
set(MHC_CUDA_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/backend.cu
  ${CMAKE_CURRENT_LIST_DIR}/variants.cu
  ${CMAKE_CURRENT_LIST_DIR}/kernel_list.cu
  ${CMAKE_CURRENT_LIST_DIR}/warm_kernel.cu
  ${CMAKE_CURRENT_LIST_DIR}/generic.cu
  ${CMAKE_CURRENT_LIST_DIR}/n4/plan.cu
  ${CMAKE_CURRENT_LIST_DIR}/n4/fragments.cu
  ${CMAKE_CURRENT_LIST_DIR}/n4/mix_kernel.cu
  ${CMAKE_CURRENT_LIST_DIR}/n4/gemm_kernel.cu
  ${CMAKE_CURRENT_LIST_DIR}/n4/gemm_group_kernel.cu
  ${CMAKE_CURRENT_LIST_DIR}/n4/gemm_rb_kernel.cu
  ${CMAKE_CURRENT_LIST_DIR}/n4/gemm_wg_kernel.cu
  ${CMAKE_CURRENT_LIST_DIR}/n4/collapse_kernel.cu
  ${CMAKE_CURRENT_LIST_DIR}/n4/post_kernel.cu
  ${CMAKE_CURRENT_LIST_DIR}/n4/finalize_kernel.cu
  ${CMAKE_CURRENT_LIST_DIR}/n4/overlap_tail_kernel.cu
  ${CMAKE_CURRENT_LIST_DIR}/n4/collapse_stream_kernel.cu
  ${CMAKE_CURRENT_LIST_DIR}/n4/post_bulk_kernel.cu
  ${CMAKE_CURRENT_LIST_DIR}/n4/post_collapse_kernel.cu
  ${CMAKE_CURRENT_LIST_DIR}/n4/staged.cu
  ${CMAKE_CURRENT_LIST_DIR}/n4/decode_kernel.cu
  ${CMAKE_CURRENT_LIST_DIR}/n4/decode_chunk_kernel.cu
)

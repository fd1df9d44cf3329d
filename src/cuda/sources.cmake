# The CUDA kernel sources, listed explicitly (one file per variant family).
set(MHC_CUDA_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/backend.cu
  ${CMAKE_CURRENT_LIST_DIR}/variants.cu
  ${CMAKE_CURRENT_LIST_DIR}/generic.cu
  ${CMAKE_CURRENT_LIST_DIR}/n4.cu
)

// src/cuda/kernel_list.cu - every CUDA kernel of the library, built once from the per-file
// lists (src/cuda/kernel_list.cuh): what Workspace::create and mhc::warmup load.
#include "src/cuda/kernel_list.cuh"

namespace mhc::cuda {

const KernelList& all_kernels() {
  static const KernelList list = [] {
    KernelList out;
    list_generic_kernels(out);
    list_warm_kernels(out);
    n4::list_mix_kernels(out);
    n4::list_gemm_kernels(out);
    n4::list_gemm_group_kernels(out);
    n4::list_gemm_rb_kernels(out);
    n4::list_gemm_wg_kernels(out);
    n4::list_collapse_kernels(out);
    n4::list_post_kernels(out);
    n4::list_finalize_kernels(out);
    n4::list_overlap_tail_kernels(out);
    n4::list_collapse_stream_kernels(out);
    n4::list_post_bulk_kernels(out);
    n4::list_post_collapse_kernels(out);
    n4::list_decode_kernels(out);
    n4::list_decode_chunk_kernels(out);
    return out;
  }();
  return list;
}

}  // namespace mhc::cuda

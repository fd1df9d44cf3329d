// src/cuda/kernel_list.cuh - the list of every CUDA kernel of the library, for warmup.
//
// Workspace::create and mhc::warmup load every kernel the device can run (cudaFuncGetAttributes
// on each forces the lazy module loader to load it), so that no call pays the module load at its
// first launch. The list is built from one function per kernel file, defined next to that file's
// launcher, which appends the file's kernels (every template instance it launches);
// kernel_list.cu calls them all. A new kernel file adds its function here and in kernel_list.cu;
// a kernel that is launched but not listed fails tests/test_engine.cpp (WarmupCoverage), which
// runs every variant of the variant table with a launch recorder (src/core/launch_record.hpp).
#pragma once

#include <vector>

namespace mhc::cuda {

/// One kernel: its host function pointer (what launch_kernel launches) and a name for reports.
struct KernelEntry {
  const void* fn = nullptr;
  const char* name = "";
};
using KernelList = std::vector<KernelEntry>;

/// Appends `kernel` under `name` (any kernel signature).
template <typename... Params>
void add_kernel(KernelList& out, void (*kernel)(Params...), const char* name) {
  out.push_back(KernelEntry{reinterpret_cast<const void*>(kernel), name});
}

// One per kernel file, defined in that file's launcher section.
void list_generic_kernels(KernelList& out);  // src/cuda/generic.cu
void list_warm_kernels(KernelList& out);     // src/cuda/warm_kernel.cu
namespace n4 {
void list_mix_kernels(KernelList& out);              // src/cuda/n4/mix_kernel.cu
void list_gemm_kernels(KernelList& out);             // src/cuda/n4/gemm_kernel.cu
void list_gemm_group_kernels(KernelList& out);       // src/cuda/n4/gemm_group_kernel.cu
void list_gemm_rb_kernels(KernelList& out);          // src/cuda/n4/gemm_rb_kernel.cu
void list_gemm_wg_kernels(KernelList& out);          // src/cuda/n4/gemm_wg_kernel.cu
void list_collapse_kernels(KernelList& out);         // src/cuda/n4/collapse_kernel.cu
void list_post_kernels(KernelList& out);             // src/cuda/n4/post_kernel.cu
void list_finalize_kernels(KernelList& out);         // src/cuda/n4/finalize_kernel.cu
void list_overlap_tail_kernels(KernelList& out);     // src/cuda/n4/overlap_tail_kernel.cu
void list_collapse_stream_kernels(KernelList& out);  // src/cuda/n4/collapse_stream_kernel.cu
void list_post_bulk_kernels(KernelList& out);        // src/cuda/n4/post_bulk_kernel.cu
void list_post_collapse_kernels(KernelList& out);    // src/cuda/n4/post_collapse_kernel.cu
void list_decode_kernels(KernelList& out);           // src/cuda/n4/decode_kernel.cu
void list_decode_chunk_kernels(KernelList& out);     // src/cuda/n4/decode_chunk_kernel.cu
}  // namespace n4

/// Launches warm_kernel twice on the legacy stream the way the launchers launch (PDL where
/// `pdl`) and waits: the first launch of a process costs tens of microseconds more.
void launch_warm_kernel(bool pdl);

/// Every kernel of this build (kernel_list.cu: the functions above, in this order).
const KernelList& all_kernels();

}  // namespace mhc::cuda

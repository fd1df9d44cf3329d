// src/cuda/ptx.cuh - thin wrappers of the PTX instructions the kernels use: 16-byte global
// loads/stores, cp.async copies and their groups, ldmatrix, mma.m16n8k16 (bf16, fp32
// accumulate), named barriers, programmatic dependent launch (griddepcontrol), and acquire /
// release accesses for the grid barrier. Each wrapper is one instruction; the comments say when
// each is valid.
#pragma once

#include <cstdint>

#include "src/core/problem.hpp"

namespace mhc::cuda {

using detail::bf16_t;

__device__ __forceinline__ uint4 ld16(const bf16_t* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ uint4 ldcs16(const bf16_t* p) { return __ldcs(reinterpret_cast<const uint4*>(p)); }
// L2 only (ld.global.cg): for data another block of the same kernel wrote, or that a kernel
// overlapping this one (programmatic dependent launch) may have cached in this SM's L1.
__device__ __forceinline__ uint4 ldcg16(const bf16_t* p) { return __ldcg(reinterpret_cast<const uint4*>(p)); }
// One 16-byte store (written in PTX: nvcc split some uint4 stores into four 32-bit ones).
__device__ __forceinline__ void st16(bf16_t* p, const uint4& v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

// One 16-byte store, relaxed at GPU scope (the pre mailbox: a value another block polls with a
// volatile load while it is stored; both accesses strong, so not a data race in the memory model).
__device__ __forceinline__ void st16_relaxed_gpu(void* p, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  asm volatile("st.relaxed.gpu.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
}

// One 4-byte store (two bf16).
__device__ __forceinline__ void st4(bf16_t* p, uint32_t v) {
  asm volatile("st.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Programmatic dependent launch (sm_90+): a kernel launched with the programmatic
// serialization attribute may start while the kernel before it in the stream finishes;
// pdl_wait() returns once that kernel has completed and its writes are visible, so every read
// of a predecessor's output (and every write a predecessor might still read) comes after it.
// pdl_launch_dependents() lets the next kernel start once every block of this one has run it.
// Both are no-ops before sm_90 and for launches without the attribute.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Asynchronous global -> shared copies (sm_80+). A copy with valid = false writes zeros and
// reads nothing. Streamed inputs carry an L2 evict-first hint (read once), so the new residual
// that the collapse re-reads stays in L2 longer.
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid, uint64_t policy) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(gmem),
               "r"(valid ? 16 : 0), "l"(policy)
               : "memory");
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, bool valid) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// threadIdx.x read where it is used (volatile: not hoisted out of mix_kernel's item loop, so the
// two roles' per-thread constants are not all live across the loop at once).
__device__ __forceinline__ int thread_index() {
  int t;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
  return t;
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& a0, uint32_t& a1, uint32_t& a2, uint32_t& a3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3)
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void cp_async16_keep(void* smem, const void* gmem) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem) : "memory");
}

/// Acquire load / release store / atomic adds at GPU scope (decode_kernel's counters).
__device__ __forceinline__ uint32_t ld_acquire_gpu(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(uint32_t* p, uint32_t v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t atom_add_acq_rel_gpu(uint32_t* p, uint32_t v) {
  uint32_t old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;\n" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// mbarriers (sm_90+; shared-memory addresses as from __cvta_generic_to_shared): the stages of the
// TMA and bulk-copy kernels (gemm_wg, gemm_group, post_bulk, post_collapse), and gemm_group's
// hand-back of a stage to its refill (mbar_arrive).
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#endif
}
// Makes the block's mbarrier inits visible to the bulk-copy engine (once, before a block barrier).
__device__ __forceinline__ void mbar_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// The barrier's current phase completes once `bytes` of bulk or TMA writes have landed (and this arrival).
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
// This thread's arrival on the barrier's current phase (release at CTA scope: its earlier
// shared-memory accesses are ordered before a wait that sees the phase complete).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}
// Returns once the barrier's phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
#endif
}
// An arrival on `bar` once every cp.async this thread issued before has landed (its pending
// count not raised: the arrival counts against the barrier's expected count; sm_80+ PTX,
// used on sm_90 with the mbarriers above).
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
#endif
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global memory into shared
// memory at dst by the bulk-copy engine, completing `bar`'s transaction count (sm_90+).
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
#endif
}

// An acquire-release add on a shared-memory word (CTA scope; address as from
// __cvta_generic_to_shared): gemm_group_kernel's count of the warps done with a buffer.
__device__ __forceinline__ uint32_t atom_add_acq_rel_cta_shared(uint32_t addr, uint32_t v) {
  uint32_t old;
  asm volatile("atom.acq_rel.cta.shared::cta.add.u32 %0, [%1], %2;\n" : "=r"(old) : "r"(addr), "r"(v) : "memory");
  return old;
}
// Orders this thread's (and, through what it acquired, other threads') earlier shared-memory
// accesses before its later bulk copies into the same memory (sm_90+).
__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// A release add whose result is not needed: the thread does not wait for it.
__device__ __forceinline__ void red_add_release_gpu(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

}  // namespace mhc::cuda

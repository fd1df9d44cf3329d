// src/cuda/generic.cu - the generic CUDA path of every operator: any n in 1..8, any H >= 1.
//
// What it computes: the per-token pipeline of src/core/problem.hpp (post -> mixes -> collapse),
// exactly the stages the operator asks for.
// Grid mapping: one 256-thread block per token (grid-stride over tokens). Thread i owns the
// hidden columns h = i, i + 256, ... of all n streams in every stage, so a token's new residual
// is re-read only by the thread that wrote it (no block barrier needed for the data); only the
// reductions (sum of squares, the M dot products, the RMSNorm sum) cross threads, through
// block_sum in a fixed order: deterministic and batch invariant.
// Accumulation: fp32 FMA for the dot products (fn read as fp32 from the transposed copy
// fn_t [K, rows]); fp32 epilogue (epilogue.cuh); the post and collapse sums rounded once to bf16
// from the exact sum (exact_sum_bf16: certified fp32, else double), so cancelling terms still
// give the float64 result.
// Envelope: any n in 1..8, any H, strided rows, broadcast residual. It reads fn from L2 once per
// token, so it is the correctness baseline, not the fast path (see the n = 4 variants).
#include "src/cuda/check.cuh"
#include "src/cuda/epilogue.cuh"
#include "src/cuda/exact_sum.cuh"
#include "src/cuda/kernel_list.cuh"
#include "src/cuda/launch.cuh"
#include "src/cuda/reduce.cuh"
#include "src/cuda/variants.hpp"

namespace mhc::cuda {

namespace {

constexpr int kThreads = 256;

struct GenericParams {
  int64_t T, H;
  int32_t rows;              // mix rows: (n+2)*n, or n for a learned head
  bool has_post, has_mixes, has_collapse;
  PreSource pre_source;
  bool head_mean;
  const bf16_t* residual; int64_t residual_stride; bool residual_broadcast;
  const bf16_t* layer_output; int64_t layer_output_stride;
  const float* post_mix; int64_t post_mix_stride;
  const float* comb_mix; int64_t comb_mix_stride;
  const float* pre_mix_in; int64_t pre_mix_in_stride;
  const bf16_t* rmsnorm_weight; float rmsnorm_eps;
  const float* fn_t;         // [K, rows], or fn_b_t [H, rows] for a broadcast residual
  bf16_t* residual_out; int64_t residual_out_stride;
  bf16_t* layer_input; int64_t layer_input_stride;
  EpilogueParams epi;
};

template <int N>
__global__ void __launch_bounds__(kThreads, 1) generic_kernel(const GenericParams p) {
  constexpr int kMaxRows = (N + 2) * N;
  __shared__ float scratch[(kMaxRows + 1) * (kThreads / 32)];
  __shared__ float s_pre[N], s_post[N], s_comb[N * N];
  const int64_t H = p.H;
  const int tid = threadIdx.x;

  for (int64_t t = blockIdx.x; t < p.T; t += gridDim.x) {
    const bf16_t* res = p.residual + t * p.residual_stride;
    const int64_t res_stream_stride = p.residual_broadcast ? 0 : H;
    // Where stages 2 and 3 read the token's streams from.
    const bf16_t* x = res;
    int64_t x_stream_stride = res_stream_stride;

    // Stage 1: post. new[k,h] = bf16(post[k]*out[h] + sum_j comb[j,k]*res[j,h]).
    if (p.has_post) {
      if (tid < N) s_post[tid] = p.post_mix[t * p.post_mix_stride + tid];
      if (tid < N * N) s_comb[tid] = p.comb_mix[t * p.comb_mix_stride + tid];
      __syncthreads();
      const bf16_t* lo = p.layer_output + t * p.layer_output_stride;
      bf16_t* out = p.residual_out + t * p.residual_out_stride;
      for (int64_t h = tid; h < H; h += kThreads) {
        float v[N + 1];  // (out, x_0 .. x_{n-1}): the terms' values, in the sum's order
        v[0] = bf16_bits_to_float(lo[h]);
        float abs_sum = fabsf(v[0]);
#pragma unroll
        for (int j = 0; j < N; ++j) {
          v[j + 1] = bf16_bits_to_float(res[j * res_stream_stride + h]);
          abs_sum += fabsf(v[j + 1]);
        }
#pragma unroll
        for (int k = 0; k < N; ++k) {
          float w[N + 1];
          w[0] = s_post[k];
#pragma unroll
          for (int j = 0; j < N; ++j) w[j + 1] = s_comb[j * N + k];
          out[k * H + h] = exact_sum_bf16(w, v, sum_error_bound(sum_error_scale(w), abs_sum));
        }
      }
      x = out;
      x_stream_stride = H;
    } else if (p.residual_out != nullptr) {  // pre_broadcast: materialise the n copies
      bf16_t* out = p.residual_out + t * p.residual_out_stride;
      for (int64_t h = tid; h < H; h += kThreads) {
#pragma unroll
        for (int j = 0; j < N; ++j) out[j * H + h] = res[j * res_stream_stride + h];
      }
    }

    // Stage 2: mixes of the (new) streams.
    if (p.has_mixes) {
      float acc[kMaxRows + 1];
#pragma unroll
      for (int r = 0; r <= kMaxRows; ++r) acc[r] = 0.0f;
      const int rows = p.rows;
      const bool bcast = p.residual_broadcast && !p.has_post;
      const int streams = bcast ? 1 : N;  // broadcast: fn_b already sums the n streams
      for (int j = 0; j < streams; ++j) {
        for (int64_t h = tid; h < H; h += kThreads) {
          const float v = bf16_bits_to_float(x[j * x_stream_stride + h]);
          acc[kMaxRows] = fmaf(v, v, acc[kMaxRows]);
          const float* f = p.fn_t + (j * H + h) * rows;
#pragma unroll
          for (int r = 0; r < kMaxRows; ++r) {
            if (r < rows) acc[r] = fmaf(v, f[r], acc[r]);
          }
        }
      }
      block_sum(acc, scratch);
      if (tid == 0) {
        float pre[N];
        const float inv_k = 1.0f / static_cast<float>(bcast ? H : N * H);
        mixes_epilogue<N>(p.epi, acc, acc[kMaxRows], inv_k, t, pre);
#pragma unroll
        for (int j = 0; j < N; ++j) s_pre[j] = pre[j];
      }
      __syncthreads();
    }

    // Stage 3: collapse (+ optional RMSNorm fold).
    if (p.has_collapse) {
      if (p.pre_source == PreSource::kCarried) {
        __syncthreads();
        if (tid < N) s_pre[tid] = p.pre_mix_in[t * p.pre_mix_in_stride + tid];
        __syncthreads();
      }
      bf16_t* dst = p.layer_input + t * p.layer_input_stride;
      float ss[1] = {0.0f};
      for (int64_t h = tid; h < H; h += kThreads) {
        bf16_t u;
        if (p.pre_source == PreSource::kIdentity) {
          u = x[h];  // stream 0, bit for bit
        } else if (p.head_mean) {  // bf16(mean): the exact sum, divided by n
          double acc = 0.0;
#pragma unroll
          for (int j = 0; j < N; ++j) acc += bf16_bits_to_float(x[j * x_stream_stride + h]);
          u = double_to_bf16_bits(acc / N);
        } else {
          float w[N], v[N], abs_sum = 0.0f;
#pragma unroll
          for (int j = 0; j < N; ++j) {
            w[j] = s_pre[j];
            v[j] = bf16_bits_to_float(x[j * x_stream_stride + h]);
            abs_sum += fabsf(v[j]);
          }
          u = exact_sum_bf16(w, v, sum_error_bound(sum_error_scale(w), abs_sum));
        }
        dst[h] = u;
        const float uf = bf16_bits_to_float(u);
        ss[0] = fmaf(uf, uf, ss[0]);
      }
      if (p.rmsnorm_weight != nullptr) {
        block_sum(ss, scratch);
        const float inv = 1.0f / sqrtf(ss[0] / static_cast<float>(H) + p.rmsnorm_eps);
        for (int64_t h = tid; h < H; h += kThreads) {
          const float u = bf16_bits_to_float(dst[h]);  // written by this thread above
          dst[h] = float_to_bf16_bits(u * inv * bf16_bits_to_float(p.rmsnorm_weight[h]));
        }
      }
    }
    __syncthreads();  // shared state is rewritten by the next token
  }
}

GenericParams make_params(const detail::Problem& p) {
  GenericParams g{};
  fill_common_params(g, p);
  g.rows = p.weights != nullptr ? p.weights->rows : 0;
  g.residual_broadcast = p.residual_broadcast;
  if (p.weights != nullptr) {
    g.fn_t = (p.residual_broadcast && !p.has_post_stage()) ? p.weights->d_fn_b_t : p.weights->d_fn_t;
  }
  // residual_out is written by the ops that have one (post, post_pre, the optional materialised
  // streams of pre_broadcast).
  if (p.op != detail::Op::kPost && p.op != detail::Op::kPostPre && p.op != detail::Op::kPreBroadcast) {
    g.residual_out = nullptr;
  }
  return g;
}

template <int N>
void launch(const GenericParams& g, int64_t T, cudaStream_t stream) {
  const int64_t grid = T < 65535 * 16 ? T : 65535 * 16;
  LaunchCtx ctx;  // no programmatic dependent launch: plain stream order
  ctx.stream = stream;
  launch_kernel(generic_kernel<N>, dim3(static_cast<unsigned>(grid)), kThreads, 0, ctx, g);
}

}  // namespace

// The kernels of this file, for warmup (src/cuda/kernel_list.cuh): one per n.
void list_generic_kernels(KernelList& out) {
  add_kernel(out, generic_kernel<1>, "generic_kernel<1>");
  add_kernel(out, generic_kernel<2>, "generic_kernel<2>");
  add_kernel(out, generic_kernel<3>, "generic_kernel<3>");
  add_kernel(out, generic_kernel<4>, "generic_kernel<4>");
  add_kernel(out, generic_kernel<5>, "generic_kernel<5>");
  add_kernel(out, generic_kernel<6>, "generic_kernel<6>");
  add_kernel(out, generic_kernel<7>, "generic_kernel<7>");
  add_kernel(out, generic_kernel<8>, "generic_kernel<8>");
}

bool generic_supports(const detail::Problem& p) {
  return p.device.type == DeviceType::kCUDA && p.n >= 1 && p.n <= kMaxStreams && p.H >= 1;
}

void generic_run(const detail::Problem& p) {
  MHC_CHECK(generic_supports(p), detail::op_name(p.op), ": cuda_generic does not support this call");
  const GenericParams g = make_params(p);
  auto stream = static_cast<cudaStream_t>(p.stream);
  switch (p.n) {
    case 1: launch<1>(g, p.T, stream); break;
    case 2: launch<2>(g, p.T, stream); break;
    case 3: launch<3>(g, p.T, stream); break;
    case 4: launch<4>(g, p.T, stream); break;
    case 5: launch<5>(g, p.T, stream); break;
    case 6: launch<6>(g, p.T, stream); break;
    case 7: launch<7>(g, p.T, stream); break;
    case 8: launch<8>(g, p.T, stream); break;
    default: MHC_FAIL("cuda_generic: n = ", p.n, " out of range");
  }
}

}  // namespace mhc::cuda

// src/cuda/row_walk.cuh - a grid-stride walk over the cells of a row-major [rows x width] grid
// (post_bulk_kernel's (token, segment) tiles, post_flat_kernel's (token, vector) items): the
// flat index first, first + stride, .. as (row, col), without a division per step.
#pragma once

#include <cstdint>

namespace mhc::cuda {

struct RowWalk {
  int64_t row;
  int col;
  int width, drow, dcol;  // stride = drow * width + dcol
  __device__ RowWalk(int64_t first, int64_t stride, int width_) : width(width_) {
    row = first / width;
    col = static_cast<int>(first - row * width);
    drow = static_cast<int>(stride / width);
    dcol = static_cast<int>(stride - static_cast<int64_t>(drow) * width);
  }
  __device__ void next() {
    row += drow;
    col += dcol;
    if (col >= width) {
      col -= width;
      ++row;
    }
  }
};

}  // namespace mhc::cuda

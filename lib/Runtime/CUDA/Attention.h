//===- Attention.h - the softmax kernels of masked attention ---*- C++ -*-===//
//
// masked_attention runs as GEMMs (Gemm.h) around two kernels of its own
// (Attention.cu): the scaled, masked softmax of the scores, in place, and
// the softmax backward, scaled as the scores were. Both give each row of
// scores one block and reduce it in a fixed order.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_ATTENTION_H
#define MERAK_LIB_RUNTIME_CUDA_ATTENTION_H

#include "CudaCommon.h"

namespace merak::runtime::cuda {

/// The mask of scores `[..., t, t]` (`mask` broadcast to that shape, rank
/// >= 2) as its kernel reads it: row `r` of the scores (row-major over the
/// leading dimensions and the query) starts at `rows.offsetOf(r)`, its
/// keys `colStride` apart.
struct MaskRows {
  View rows;
  int64_t colStride = 0;
};
MERAK_HD MaskRows maskRowsOf(const View &mask) {
  MaskRows m;
  m.rows = mask;
  m.rows.rank = mask.rank - 1;
  m.colStride = mask.strides[mask.rank - 1];
  coalesceDims(&m.rows, 1);
  return m;
}

/// Blocks for a kernel that gives each of `rows` rows one block (looping
/// over rows beyond that).
MERAK_HD unsigned rowGrid(int64_t rows, int64_t maxBlocks = 65535LL * 16) {
  return unsigned(rows < 1 ? 1 : (rows < maxBlocks ? rows : maxBlocks));
}

/// Rows of at most 1,024 columns take one warp each, held in registers
/// (`N` columns a lane, `warpRowColumns`), with no barrier between the
/// passes over them; longer rows one block each.
constexpr int kWarpRowMaxColumns = 1024;
/// Warps of a block of the one-warp-per-row kernels.
constexpr int kWarpRowsPerBlock = 8;
/// How many columns each lane of a one-warp-per-row kernel holds for rows
/// of `cols`: 4, 8, 16 or 32 (the fewest that cover the row), or 0 where
/// the row is longer than `kWarpRowMaxColumns` (a block per row).
MERAK_HD int warpRowColumns(int64_t cols) {
  if (cols > kWarpRowMaxColumns)
    return 0;
  int n = 4;
  while (32 * int64_t(n) < cols)
    n *= 2;
  return n;
}
/// Blocks of `kWarpRowsPerBlock` warps for `rows` rows, one warp each (the
/// warps loop over rows beyond `maxBlocks` blocks).
MERAK_HD unsigned warpRowGrid(int64_t rows, int64_t maxBlocks = 65535LL * 16) {
  int64_t blocks = ceilDiv(rows > 0 ? rows : 1, kWarpRowsPerBlock);
  return unsigned(blocks < maxBlocks ? blocks : maxBlocks);
}

/// `scores` (dense `[..., t, t]`, f16/bf16/f32/f64) replaced in place by
/// `softmax(masked(scaled(scores)))` over the last dimension: scaled is
/// `s * scale`, or `s / scale` with `divide`; `mask` (broadcast to the
/// scores' shape, bool or the scores' type) sets `-inf` where false, or is
/// added. Every step computes in the accumulation type (float for bf16 and
/// f16) and the probabilities round to the element type once. A fully
/// masked row gives NaN, as PyTorch's softmax does.
void maskedSoftmax(const View &scores, const View &mask, float scale,
                   bool divide, cudaStream_t stream);

/// `out = scaled(probs * (grad - sum(grad * probs)))` for dense
/// `[rows, cols]` operands (`grad` the gradient of the probabilities), each
/// row's sum over its `cols` in the accumulation type. `out` has `probs`'
/// type and may be `grad`; `grad` has it too, or is f32 (a product of f16
/// or bf16 operands kept in its f32 accumulation, so that the difference
/// is not taken between rounded values).
void softmaxBackwardScaled(const View &grad, const View &probs, const View &out,
                           float scale, bool divide, cudaStream_t stream);

} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_ATTENTION_H

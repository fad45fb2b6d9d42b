//===- Reductions.h - CUDA sum, mean and max over dimensions -------*- C++
//-*-===//
//
// A reduction reads its operand as `[M, K]`: the kept dimensions (`M`
// outputs, in row-major order) and the reduced ones (`K` elements each),
// two views of the same memory with any strides. Each output is reduced
// in a fixed order: in chunks of `chunk` elements, each chunk by one warp
// (rows: the reduced elements are adjacent in memory) or by one thread
// (columns: adjacent outputs are), then the chunks' partial results, in
// scratch memory, by the same scheme again until one is left. The plan
// depends on the sizes alone, so results are the same run after run and
// GPU after GPU. The planning is plain MERAK_HD code, unit-tested on the
// host (unittests/Runtime/CudaShapeTest.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_REDUCTIONS_H
#define MERAK_LIB_RUNTIME_CUDA_REDUCTIONS_H

#include "CudaCommon.h"

namespace merak::runtime::cuda {

enum class ReduceKind : uint8_t { Sum, Mean, Max };

/// `in` split by `reduced` (one flag per dimension) into the views of the
/// kept and of the reduced dimensions, each in its dimensions' order and
/// coalesced.
MERAK_HD void splitReduction(const View &in, const bool *reduced, View &kept,
                             View &reducedView) {
  kept = View();
  reducedView = View();
  kept.data = reducedView.data = in.data;
  kept.type = reducedView.type = in.type;
  for (int d = 0; d < in.rank; ++d) {
    View &v = reduced[d] ? reducedView : kept;
    v.sizes[v.rank] = in.sizes[d];
    v.strides[v.rank] = in.strides[d];
    ++v.rank;
  }
  coalesceDims(&kept, 1);
  coalesceDims(&reducedView, 1);
}

/// The offset of element `i` of `v` (row-major), with one dimension fast.
MERAK_HD int64_t offsetIn(const View &v, int64_t i) {
  return v.rank == 1 ? i * v.strides[0] : v.offsetOf(i);
}

/// Whether outputs go one per thread (columns: the kept elements are
/// adjacent in memory and the reduced ones are not) rather than one per
/// warp (rows).
MERAK_HD bool reduceByColumns(const View &kept, const View &reduced) {
  if (kept.numel() <= 1 || kept.rank == 0)
    return false;
  int64_t keptInner = kept.strides[kept.rank - 1];
  int64_t reducedInner = reduced.rank ? reduced.strides[reduced.rank - 1] : 0;
  return keptInner == 1 && reducedInner != 1;
}

/// Work items a pass aims at (warps for rows, threads for columns), and
/// the fewest elements a chunk has before a reduction is split.
constexpr int64_t kRowTargetItems = 4096;
constexpr int64_t kRowMinChunk = 1024;
constexpr int64_t kColumnTargetItems = 131072;
constexpr int64_t kColumnMinChunk = 64;

/// One pass: every output reduced in `splits` chunks of `chunk` elements
/// (the last one shorter), the last chunk not empty.
struct ReducePass {
  int64_t splits = 1;
  int64_t chunk = 0;
};

/// The pass that reduces `K` elements for each of `M` outputs (both > 0).
MERAK_HD ReducePass planReducePass(int64_t M, int64_t K, bool columns) {
  int64_t target = columns ? kColumnTargetItems : kRowTargetItems;
  int64_t minChunk = columns ? kColumnMinChunk : kRowMinChunk;
  int64_t splits = ceilDiv(target, M);
  int64_t most = ceilDiv(K, minChunk);
  if (splits > most)
    splits = most;
  if (splits < 1)
    splits = 1;
  ReducePass p;
  p.chunk = ceilDiv(K, splits);
  p.splits = ceilDiv(K, p.chunk);
  return p;
}

/// Bytes one accumulator of element type `t` takes (float for the 16-bit
/// types).
MERAK_HD int64_t accElemSize(ElemType t) {
  return t == ElemType::F16 || t == ElemType::BF16 ? 4 : int64_t(elemSize(t));
}

/// Scratch for the partial results of reducing `K` elements for each of
/// `M` outputs: two buffers the passes write in turn (the first pass's
/// partials, then the second's, which are the largest of their turn).
MERAK_HD int64_t reductionScratchBytes(int64_t M, int64_t K, bool columns,
                                       ElemType type) {
  if (M == 0 || K == 0)
    return 0;
  int64_t sizes[2] = {0, 0};
  int turn = 0;
  for (int64_t k = K;;) {
    ReducePass p = planReducePass(M, k, columns);
    if (p.splits == 1)
      break;
    if (sizes[turn] < M * p.splits)
      sizes[turn] = M * p.splits;
    turn ^= 1;
    k = p.splits;
  }
  int64_t acc = accElemSize(type);
  return (sizes[0] * acc + 255) / 256 * 256 + sizes[1] * acc;
}

/// Reduces `in` read as `kept` x `reduced` (views of one memory, `in`'s
/// element type) into dense `dst` (`kept.numel()` elements, the same
/// type): a sum, a mean (the sum divided by `K` in the accumulation type)
/// or a maximum that propagates NaN. `scratch` holds
/// `reductionScratchBytes`. An empty reduction gives 0 (sum), NaN (mean);
/// a maximum over none throws `CudaError`, as ATen's amax does.
void launchReduction(ReduceKind kind, const View &kept, const View &reduced,
                     const View &dst, void *scratch, cudaStream_t stream);

/// cumsum: `dst` (`src`'s shape, any strides) holds the running sums of
/// `src` along `dim`, from the first element (from the last with
/// `reverse`). One thread walks each line in order and accumulates in
/// `Acc<T>` (f32 for bf16/f16; integers in their own type), so results do
/// not depend on the launch. Booleans throw `CudaError`.
void launchCumsum(const View &src, const View &dst, int dim, bool reverse,
                  cudaStream_t stream);

} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_REDUCTIONS_H

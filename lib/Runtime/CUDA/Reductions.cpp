//===- Reductions.cpp - CUDA host kernels: reductions, cumulative sums ----===//
//
// cumsum (one thread per line), and reduce_sum, reduce_mean and reduce_max
// (Reductions.h has the scheme): for the reductions, the
// dimensions of `dims` (all of them when empty, negative ones counted from
// the end), kept as size 1 with `keepdim`; a rank-0 operand is copied, as
// the CPU backend clones it.
//
//===----------------------------------------------------------------------===//

#include "Reductions.h"
#include "Copy.h"
#include "CudaKernels.h"

#include "absl/strings/str_cat.h"

namespace merak::runtime::cuda {

namespace {

void reduceKernel(Ctx &c) {
  const OpAttrs &a = c.a;
  View x = c.view(0);
  CudaTensor &out = c.result(0);
  if (x.rank == 0) {
    copyStrided(x, out.view(), c.stream());
    return;
  }
  bool reduced[kMaxDims] = {};
  for (int d = 0; d < x.rank; ++d)
    reduced[d] = a.dims.empty();
  for (int64_t d : a.dims) {
    int64_t n = d < 0 ? d + x.rank : d;
    if (n < 0 || n >= x.rank)
      throw CudaError(
          absl::StrCat("dimension ", d, " of a tensor of rank ", x.rank));
    reduced[n] = true;
  }
  View kept, reducedView;
  splitReduction(x, reduced, kept, reducedView);
  int64_t bytes =
      reductionScratchBytes(kept.numel(), reducedView.numel(),
                            reduceByColumns(kept, reducedView), x.type);
  void *scratch =
      bytes > 0 ? c.scratch(TensorType{DType::Bool, {bytes}}).data() : nullptr;
  ReduceKind kind = c.inst.kind == OpKind::ReduceSum    ? ReduceKind::Sum
                    : c.inst.kind == OpKind::ReduceMean ? ReduceKind::Mean
                                                        : ReduceKind::Max;
  launchReduction(kind, kept, reducedView, out.view(), scratch, c.stream());
}

void cumsumKernel(Ctx &c) {
  View x = c.view(0);
  CudaTensor &out = c.result(0);
  if (x.rank == 0)
    throw CudaError("cumsum: needs a tensor of rank >= 1");
  int64_t dim = c.a.dim < 0 ? c.a.dim + x.rank : c.a.dim;
  if (dim < 0 || dim >= x.rank)
    throw CudaError(
        absl::StrCat("cumsum: dimension ", c.a.dim, " of rank ", x.rank));
  launchCumsum(x, out.view(), int(dim), c.a.reverse, c.stream());
}

} // namespace

void registerReductionKernels(KernelTable &table) {
  table.add(OpKind::Cumsum, cumsumKernel);
  table.add(OpKind::ReduceSum, reduceKernel);
  table.add(OpKind::ReduceMean, reduceKernel);
  table.add(OpKind::ReduceMax, reduceKernel);
}

} // namespace merak::runtime::cuda

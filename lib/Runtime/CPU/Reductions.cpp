//===- Reductions.cpp - CPU kernels: reductions ---------------------------===//
//
// Sum, mean and max over dimensions; cumulative sums.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"

namespace merak::runtime::cpu {

void registerReductionKernels(KernelTable &table) {
  Kernel reduce = [](Ctx &c) {
    const OpAttrs &a = c.a;
    const at::Tensor &x = c.in(0);
    std::vector<int64_t> dims = a.dims;
    if (dims.empty())
      for (int64_t d = 0; d < x.dim(); ++d)
        dims.push_back(d);
    if (x.dim() == 0)
      return c.set(0, x.clone());
    if (c.inst.kind == OpKind::ReduceSum)
      return c.set(0, at::sum(x, dims, a.keepdim));
    if (c.inst.kind == OpKind::ReduceMean)
      return c.set(0, at::mean(x, dims, a.keepdim));
    return c.set(0, at::amax(x, dims, a.keepdim));
  };
  table.add(OpKind::ReduceSum, reduce);
  table.add(OpKind::ReduceMean, reduce);
  table.add(OpKind::ReduceMax, reduce);
  // Cumulative sum in the operand's own type (at::cumsum would widen
  // i32 to i64); reversed: flipped, summed, flipped back, as PyTorch's
  // cumsum backward computes it.
  table.add(OpKind::Cumsum, [](Ctx &c) {
    const at::Tensor &x = c.in(0);
    int64_t dim = c.a.dim < 0 ? c.a.dim + x.dim() : c.a.dim;
    if (!c.a.reverse)
      return c.set(0, at::cumsum(x, dim, x.scalar_type()));
    c.set(0, at::flip(at::cumsum(at::flip(x, {dim}), dim, x.scalar_type()),
                      {dim}));
  });
}

} // namespace merak::runtime::cpu

//===- Shape.cpp - CPU kernels: shapes, views and indexing ----------------===//
//
// Reshape, permute, slice, select, concat, expand, pad and roll; embedding
// and index lookups; and the backwards of slice and index.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"

#include "absl/strings/str_cat.h"

namespace merak::runtime::cpu {

void registerShapeKernels(KernelTable &table) {
  table.add(OpKind::Embedding, [](Ctx &c) {
    c.set(0, at::embedding(c.in(0), c.in(1), c.a.paddingIdx.value_or(-1)));
  });
  table.add(OpKind::Index, [](Ctx &c) {
    c.set(0, at::index_select(c.in(0), c.a.dim, c.in(1).reshape({-1}))
                 .reshape(c.resultType(0).shape));
  });
  table.add(OpKind::Reshape,
            [](Ctx &c) { c.set(0, c.in(0).reshape(c.resultType(0).shape)); });
  table.add(OpKind::Permute,
            [](Ctx &c) { c.set(0, c.in(0).permute(c.a.permutation)); });
  table.add(OpKind::Slice, [](Ctx &c) {
    const OpAttrs &a = c.a;
    c.set(0, c.in(0).slice(a.dim, a.start, a.end, a.step));
  });
  table.add(OpKind::Select,
            [](Ctx &c) { c.set(0, c.in(0).select(c.a.dim, c.a.index)); });
  table.add(OpKind::Concat, [](Ctx &c) {
    const OpAttrs &a = c.a;
    std::vector<at::Tensor> parts;
    for (size_t k = 0; k < c.inst.operands.size(); ++k)
      parts.push_back(c.in(k));
    return c.set(0, at::cat(parts, a.dim));
  });
  table.add(OpKind::Expand,
            [](Ctx &c) { c.set(0, c.in(0).expand(c.resultType(0).shape)); });
  table.add(OpKind::Pad, [](Ctx &c) {
    const OpAttrs &a = c.a;
    // constant_pad_nd takes (low, high) pairs from the last dimension back.
    std::vector<int64_t> pad;
    for (size_t d = a.low.size(); d-- > 0;) {
      pad.push_back(a.low[d]);
      pad.push_back(a.high[d]);
    }
    return c.set(
        0, at::constant_pad_nd(c.in(0), pad,
                               scalarFor(c.operandType(0).dtype, a.value)));
  });
  table.add(OpKind::UpdateSlice, [](Ctx &c) {
    const at::Tensor &input = c.in(0), &update = c.in(1);
    int64_t dim = c.a.dim < 0 ? c.a.dim + input.dim() : c.a.dim;
    int64_t at = c.in(2).reshape({-1})[0].item<int64_t>();
    int64_t n = update.size(dim), size = input.size(dim);
    if (at < 0 || at > size - n)
      throw std::out_of_range(absl::StrCat(
          "update_slice: position ", at, " for ", n,
          " rows does not fit dimension ", dim, " of size ", size));
    // Into the dying input when planned (a decode step's cache), else a copy.
    at::Tensor target = c.inPlace(0);
    if (!target.defined())
      target = input.clone();
    target.narrow(dim, at, n).copy_(update);
    c.set(0, target);
  });
  table.add(OpKind::Roll,
            [](Ctx &c) { c.set(0, at::roll(c.in(0), c.a.shifts, c.a.dims)); });
  table.add(OpKind::IndexBackward, [](Ctx &c) {
    const OpAttrs &a = c.a;
    // index_add_ accumulates in index order, as embedding_dense_backward
    // and index_select's backward do.
    const at::Tensor &grad = c.in(0), &indices = c.in(1);
    const TensorType &type = c.resultType(0);
    int64_t rank = int64_t(type.shape.size());
    int64_t dim = a.dim < 0 ? a.dim + rank : a.dim;
    std::vector<int64_t> gradShape(type.shape.begin(),
                                   type.shape.begin() + dim);
    gradShape.push_back(indices.numel());
    gradShape.insert(gradShape.end(), type.shape.begin() + dim + 1,
                     type.shape.end());
    at::Tensor result = at::zeros(type.shape, optionsFor(type.dtype));
    result.index_add_(dim, indices.reshape({-1}), grad.reshape(gradShape));
    if (a.paddingIdx)
      result.select(dim, *a.paddingIdx).zero_();
    return c.set(0, result);
  });
  table.add(OpKind::SliceBackward, [](Ctx &c) {
    const OpAttrs &a = c.a;
    c.set(0, at::slice_backward(c.in(0), c.resultType(0).shape, a.dim, a.start,
                                a.end, a.step));
  });
}

} // namespace merak::runtime::cpu

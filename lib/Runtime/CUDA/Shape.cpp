//===- Shape.cpp - CUDA host kernels: shapes, views and indexing ----------===//
//
// Reshape, permute, slice, select and expand return views of their
// operand's storage where the plan makes them views (a reshape whose
// operand's strides do not allow one copies, as PyTorch's does); concat,
// pad, roll and slice_backward copy; embedding and index gather rows and
// index_backward scatter-adds them back in a fixed order (Shape.h).
//
//===----------------------------------------------------------------------===//

#include "Shape.h"
#include "Copy.h"
#include "CudaKernels.h"

#include "absl/strings/str_cat.h"

namespace merak::runtime::cuda {

namespace {

int64_t dimOf(int64_t dim, size_t rank) {
  int64_t d = wrapDim(dim, int64_t(rank));
  if (d < 0)
    throw CudaError(
        absl::StrCat("dimension ", dim, " of a tensor of rank ", rank));
  return d;
}

/// Result 0 as operand 0's elements at `byteOffset` from its data with
/// `strides`: a view where the plan makes it one, else a dense copy.
void viewOrCopy(Ctx &c, int64_t byteOffset, std::vector<int64_t> strides) {
  if (c.inst.storage[0].kind == ResultStorage::Kind::View) {
    c.viewResult(0, 0, byteOffset, std::move(strides));
    return;
  }
  const CudaTensor &x = c.in(0);
  CudaTensor view(x.storage, x.byteOffset + byteOffset, c.resultType(0),
                  std::move(strides));
  copyStrided(view.view(), c.result(0).view(), c.stream());
}

void reshape(Ctx &c) {
  const CudaTensor &x = c.in(0);
  const std::vector<int64_t> &shape = c.resultType(0).shape;
  std::vector<int64_t> strides(shape.size());
  if (c.inst.storage[0].kind == ResultStorage::Kind::View &&
      reshapeStrides(x.type.shape.data(), x.strides.data(),
                     int(x.type.shape.size()), shape.data(), int(shape.size()),
                     strides.data())) {
    c.viewResult(0, 0, 0, std::move(strides));
    return;
  }
  // Read in the operand's own shape, written row-major into the result.
  CudaTensor &out = c.result(0);
  copyStrided(x.view(), denseView(out.data(), x.type), c.stream());
}

void permute(Ctx &c) {
  const CudaTensor &x = c.in(0);
  size_t rank = x.type.shape.size();
  if (c.a.permutation.size() != rank)
    throw CudaError(absl::StrCat("a permutation of ", c.a.permutation.size(),
                                 " dimensions for a tensor of rank ", rank));
  std::vector<int64_t> strides;
  for (int64_t p : c.a.permutation)
    strides.push_back(x.strides[dimOf(p, rank)]);
  viewOrCopy(c, 0, std::move(strides));
}

void slice(Ctx &c) {
  const OpAttrs &a = c.a;
  const CudaTensor &x = c.in(0);
  int64_t dim = dimOf(a.dim, x.type.shape.size());
  if (a.step < 1)
    throw CudaError("slice step must be positive");
  int64_t first, count;
  sliceBounds(x.type.shape[dim], a.start, a.end, a.step, first, count);
  std::vector<int64_t> strides = x.strides;
  strides[dim] *= a.step;
  viewOrCopy(c, first * x.strides[dim] * int64_t(dtypeSize(x.type.dtype)),
             std::move(strides));
}

void select(Ctx &c) {
  const OpAttrs &a = c.a;
  const CudaTensor &x = c.in(0);
  int64_t dim = dimOf(a.dim, x.type.shape.size());
  int64_t size = x.type.shape[dim];
  int64_t index = a.index < 0 ? a.index + size : a.index;
  if (index < 0 || index >= size)
    throw CudaError(absl::StrCat("select: index ", a.index,
                                 " out of range for a dimension of size ",
                                 size));
  std::vector<int64_t> strides = x.strides;
  strides.erase(strides.begin() + dim);
  viewOrCopy(c, index * x.strides[dim] * int64_t(dtypeSize(x.type.dtype)),
             std::move(strides));
}

void expand(Ctx &c) {
  const CudaTensor &x = c.in(0);
  const std::vector<int64_t> &shape = c.resultType(0).shape;
  size_t rank = shape.size(), xRank = x.type.shape.size();
  if (xRank > rank)
    throw CudaError(absl::StrCat("expand: ", x.type.str(), " to rank ", rank));
  std::vector<int64_t> strides(rank, 0);
  size_t shift = rank - xRank;
  for (size_t d = shift; d < rank; ++d) {
    int64_t size = x.type.shape[d - shift];
    if (size == shape[d])
      strides[d] = x.strides[d - shift];
    else if (size != 1)
      throw CudaError(absl::StrCat("expand: ", x.type.str(), " to ",
                                   c.resultType(0).str()));
  }
  viewOrCopy(c, 0, std::move(strides));
}

void concat(Ctx &c) {
  CudaTensor &out = c.result(0);
  View dst = out.view();
  int64_t dim = dimOf(c.a.dim, size_t(dst.rank));
  int64_t at = 0;
  for (size_t k = 0; k < c.inst.operands.size(); ++k) {
    View part = c.view(k);
    // at::cat skips empty parts (of any shape, for the legacy `[0]`).
    if (part.numel() == 0)
      continue;
    if (part.rank != dst.rank)
      throw CudaError(absl::StrCat("concat: operand #", k, " has rank ",
                                   part.rank, ", the result ", dst.rank));
    View piece = dst;
    piece.sizes[dim] = part.sizes[dim];
    piece.data = static_cast<char *>(dst.data) +
                 at * dst.strides[dim] * int64_t(elemSize(dst.type));
    copyStrided(part, piece, c.stream());
    at += part.sizes[dim];
  }
  if (at != dst.sizes[dim])
    throw CudaError(absl::StrCat("concat: the operands fill ", at, " of ",
                                 dst.sizes[dim], " along dimension ", dim));
}

void pad(Ctx &c) {
  const OpAttrs &a = c.a;
  View x = c.view(0);
  if (a.low.size() != a.high.size() || a.low.size() > size_t(x.rank))
    throw CudaError("pad: low and high must have one entry per dimension");
  // constant_pad_nd pads the trailing dimensions.
  int64_t low[kMaxDims] = {};
  size_t shift = size_t(x.rank) - a.low.size();
  for (size_t d = 0; d < a.low.size(); ++d)
    low[shift + d] = a.low[d];
  CudaTensor &out = c.result(0);
  launchPad(x, out.view(), low, a.value, c.stream());
}

void roll(Ctx &c) {
  const OpAttrs &a = c.a;
  View x = c.view(0);
  CudaTensor &out = c.result(0);
  int64_t shifts[kMaxDims] = {};
  if (a.dims.empty()) {
    if (a.shifts.size() != 1)
      throw CudaError("roll: without dims, shifts must have one entry");
    shifts[0] = a.shifts[0];
    launchRoll(x, out.view(), shifts, /*flat=*/true, c.stream());
    return;
  }
  if (a.shifts.size() != a.dims.size())
    throw CudaError("roll: shifts and dims must have the same length");
  // Rolling a dimension twice adds the shifts, as at::roll's recursion does.
  for (size_t i = 0; i < a.dims.size(); ++i)
    shifts[dimOf(a.dims[i], size_t(x.rank))] += a.shifts[i];
  launchRoll(x, out.view(), shifts, /*flat=*/false, c.stream());
}

/// Rows of operand 0 along `dim` picked by operand 1 (index_select).
void gather(Ctx &c, int64_t dim) {
  View src = c.view(0);
  if (src.rank == 0)
    throw CudaError("indexing a tensor of rank 0");
  View indices = c.contiguous(1);
  CudaTensor &out = c.result(0);
  launchGather(src, int(dimOf(dim, size_t(src.rank))), indices.data,
               indices.type, indices.numel(), out.view(), c.stream());
}

void indexBackward(Ctx &c) {
  const OpAttrs &a = c.a;
  const TensorType &type = c.resultType(0);
  int64_t dim = dimOf(a.dim, type.shape.size());
  int64_t outer = 1, inner = 1, dimSize = type.shape[dim];
  for (int64_t d = 0; d < dim; ++d)
    outer *= type.shape[d];
  for (size_t d = size_t(dim) + 1; d < type.shape.size(); ++d)
    inner *= type.shape[d];
  View grad = c.contiguous(0);
  View indices = c.contiguous(1);
  int64_t count = indices.numel();
  if (grad.numel() != outer * count * inner)
    throw CudaError(absl::StrCat("index_backward: a gradient of ", grad.numel(),
                                 " elements for ", count, " indices into ",
                                 type.str()));
  int64_t paddingRow = -1;
  if (a.paddingIdx)
    paddingRow = *a.paddingIdx < 0 ? *a.paddingIdx + dimSize : *a.paddingIdx;
  CudaTensor &out = c.result(0);
  int64_t bytes = type.numElements() > 0 && outer * inner > 0
                      ? scatterAddScratchBytes(count, dimSize)
                      : 0;
  void *scratch =
      bytes > 0 ? c.scratch(TensorType{DType::Bool, {bytes}}).data() : nullptr;
  launchScatterAdd(grad, indices.data, indices.type, count, outer, dimSize,
                   inner, paddingRow, out.view(), scratch, c.stream());
}

void updateSlice(Ctx &c) {
  const CudaTensor &input = c.in(0);
  int64_t dim = dimOf(c.a.dim, input.type.shape.size());
  CudaTensor &out = c.result(0);
  // The dying input's storage when planned (a decode step's cache), else
  // a copy of it first.
  if (out.data() != input.data())
    copyStrided(input.view(), out.view(), c.stream());
  View position = c.contiguous(2);
  if (position.numel() != 1)
    throw CudaError("update_slice: a position of more than one element");
  launchUpdateSlice(c.view(1), int(dim), position.data, position.type,
                    out.view(), c.stream());
}

void sliceBackward(Ctx &c) {
  const OpAttrs &a = c.a;
  CudaTensor &out = c.result(0);
  View dst = out.view();
  int64_t dim = dimOf(a.dim, size_t(dst.rank));
  if (a.step < 1)
    throw CudaError("slice step must be positive");
  if (out.type.byteSize() > 0)
    check(
        cudaMemsetAsync(out.data(), 0, size_t(out.type.byteSize()), c.stream()),
        "slice_backward: zeroing the result");
  int64_t first, count;
  sliceBounds(dst.sizes[dim], a.start, a.end, a.step, first, count);
  View piece = dst;
  piece.sizes[dim] = count;
  piece.strides[dim] *= a.step;
  piece.data = static_cast<char *>(dst.data) +
               first * dst.strides[dim] * int64_t(elemSize(dst.type));
  copyStrided(c.view(0), piece, c.stream());
}

} // namespace

void registerShapeKernels(KernelTable &table) {
  table.add(OpKind::Reshape, reshape);
  table.add(OpKind::Permute, permute);
  table.add(OpKind::Slice, slice);
  table.add(OpKind::Select, select);
  table.add(OpKind::Expand, expand);
  table.add(OpKind::Concat, concat);
  table.add(OpKind::Pad, pad);
  table.add(OpKind::Roll, roll);
  table.add(OpKind::Embedding, [](Ctx &c) { gather(c, 0); });
  table.add(OpKind::Index, [](Ctx &c) { gather(c, c.a.dim); });
  table.add(OpKind::UpdateSlice, updateSlice);
  table.add(OpKind::IndexBackward, indexBackward);
  table.add(OpKind::SliceBackward, sliceBackward);
}

} // namespace merak::runtime::cuda

//===- LinearAlgebra.cpp - CUDA host kernels: linear, matmul --------------===//
//
// `linear`, `matmul` and `linear_weight_backward` as cuBLASLt products
// (Gemm.h): operands read in place where their last two dimensions allow
// it (a transpose is a flag), copied dense otherwise; leading dimensions
// that merge fold into the rows of one product.
//
//===----------------------------------------------------------------------===//

#include "CudaKernels.h"
#include "Gemm.h"

#include "absl/strings/str_cat.h"

#include <algorithm>

namespace merak::runtime::cuda {

GemmDevice gemmDevice(Ctx &c) {
  if (!c.dev.cublasLt)
    throw CudaError("the backend has no cuBLASLt handle");
  GemmDevice d;
  d.cublasLt = c.dev.cublasLt;
  d.workspace = c.dev.gemmWorkspace;
  d.workspaceBytes = c.dev.gemmWorkspaceBytes;
  d.tf32 = c.dev.tf32;
  d.stream = c.stream();
  d.calls = &c.dev.gemmCalls;
  // Freed to the stream-ordered pool after the op: its kernels are queued.
  if (c.dev.gemmStaging)
    d.scratch = [&c](int64_t bytes) {
      return c.scratch(TensorType{DType::I64, {(bytes + 7) / 8}}).data();
    };
  return d;
}

View gemmOperand(Ctx &c, const CudaTensor &t) {
  View v = t.view();
  return gemmReadable(v) ? v : c.contiguous(t);
}

namespace {

/// Operand `k` as a matrix `[leading..., last]` read in place, or a dense
/// copy of it where the leading dimensions do not merge.
View matrixOperand(Ctx &c, size_t k) {
  View m;
  if (asMatrix(c.view(k), m) && gemmReadable(m))
    return m;
  asMatrix(c.contiguous(k), m);
  return m;
}

/// A dense result as a matrix `[leading..., last]`.
View matrixResult(CudaTensor &t) {
  View m;
  asMatrix(t.view(), m);
  return m;
}

/// `v`, a vector of `k` elements, as the matrix `[1, k]` (`row`) or
/// `[k, 1]`.
View vectorAsMatrix(View v, bool row) {
  int64_t size = v.sizes[0], stride = v.strides[0];
  v.rank = 2;
  v.sizes[row ? 0 : 1] = 1;
  v.strides[row ? 0 : 1] = 1;
  v.sizes[row ? 1 : 0] = size;
  v.strides[row ? 1 : 0] = stride;
  return v;
}

/// Operand `k` of matmul (rank >= 1) as a stack of matrices read in place
/// where its last two dimensions allow it: a vector is a row (`lhs`) or a
/// column, as torch.matmul reads it.
View matmulOperand(Ctx &c, size_t k, bool lhs) {
  View v = c.view(k);
  if (v.rank == 1)
    v = vectorAsMatrix(v, lhs);
  if (gemmReadable(v))
    return v;
  v = c.contiguous(k);
  return v.rank == 1 ? vectorAsMatrix(v, lhs) : v;
}

void linear(Ctx &c) {
  CudaTensor &out = c.result(0);
  View x = matrixOperand(c, 0);
  View w = gemmOperand(c, c.in(1));
  if (w.rank != 2)
    throw CudaError(absl::StrCat("linear: a weight of rank ", w.rank));
  const void *bias = nullptr;
  if (c.has(2)) {
    View b = c.contiguous(2);
    if (b.type != out.view().type || b.rank != 1 || b.sizes[0] != w.sizes[0])
      throw CudaError(absl::StrCat("linear: a bias of ", c.in(2).type.str(),
                                   " for a weight of ", c.in(1).type.str()));
    bias = b.data;
  }
  gemm(gemmDevice(c), x, transposeLast(w), matrixResult(out), 1, 0, bias);
}

void matmul(Ctx &c) {
  View a = matmulOperand(c, 0, /*lhs=*/true);
  View b = matmulOperand(c, 1, /*lhs=*/false);
  int batchA = a.rank - 2, batchB = b.rank - 2;
  int batchRank = std::max(batchA, batchB);
  if (batchRank + 2 > kMaxDims)
    throw CudaError(absl::StrCat("matmul: ", batchRank,
                                 " batch dimensions (at most ", kMaxDims - 2,
                                 ")"));
  // The batch dimensions broadcast as NumPy's do, aligned on the right.
  int64_t sizes[kMaxDims];
  for (int d = 0; d < batchRank; ++d) {
    int da = d - (batchRank - batchA), db = d - (batchRank - batchB);
    int64_t sa = da >= 0 ? a.sizes[da] : 1, sb = db >= 0 ? b.sizes[db] : 1;
    if (sa != sb && sa != 1 && sb != 1)
      throw CudaError(absl::StrCat("matmul: batch dimensions of ", sa, " and ",
                                   sb, " do not broadcast"));
    sizes[d] = sa == 1 ? sb : sa;
  }
  int64_t m = a.sizes[a.rank - 2], k = a.sizes[a.rank - 1],
          n = b.sizes[b.rank - 1];
  CudaTensor &out = c.result(0);
  int rank = batchRank + 2;
  sizes[rank - 2] = m;
  sizes[rank - 1] = k;
  View ab, bb;
  bool ok = broadcastView(a, sizes, rank, ab);
  sizes[rank - 2] = k;
  sizes[rank - 1] = n;
  ok = ok && broadcastView(b, sizes, rank, bb);
  if (!ok)
    throw CudaError(absl::StrCat("matmul: ", c.in(0).type.str(), " and ",
                                 c.in(1).type.str(), " do not multiply"));
  sizes[rank - 2] = m;
  // The result, with a vector operand's dimension dropped, is laid out as
  // the stack of matrices.
  View o = out.view();
  int64_t expected = 1;
  for (int d = 0; d < rank; ++d)
    expected *= sizes[d];
  if (o.numel() != expected)
    throw CudaError(absl::StrCat("matmul: a result of ", out.type.str(),
                                 " for ", c.in(0).type.str(), " and ",
                                 c.in(1).type.str()));
  o.rank = rank;
  for (int d = 0; d < rank; ++d)
    o.sizes[d] = sizes[d];
  contiguousStrides(o.sizes, rank, o.strides);
  gemm(gemmDevice(c), ab, bb, o);
}

/// grad [..., N]^T input [..., K] summed over the leading dimensions: the
/// leading dimensions are the product's inner dimension.
void linearWeightBackward(Ctx &c) {
  View g = matrixOperand(c, 0), x = matrixOperand(c, 1);
  CudaTensor &out = c.result(0);
  gemm(gemmDevice(c), transposeLast(g), x, out.view());
}

} // namespace

void registerLinearAlgebraKernels(KernelTable &table) {
  table.add(OpKind::Linear, linear);
  table.add(OpKind::Matmul, matmul);
  table.add(OpKind::LinearWeightBackward, linearWeightBackward);
}

} // namespace merak::runtime::cuda

//===- Gemm.h - matrix products on cuBLASLt ---------------------*- C++ -*-===//
//
// The one way the CUDA kernels multiply matrices (Gemm.cu): row-major
// products of strided views on cuBLASLt, a stack of them as one strided
// batched call (a broadcast operand read with a batch stride of 0), batch
// dimensions that do not merge into one looped over on the host. The
// layout and batching arithmetic is plain host code here, unit-tested
// without a GPU (unittests/Runtime/CudaGemmTest.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_GEMM_H
#define MERAK_LIB_RUNTIME_CUDA_GEMM_H

#include "CudaCommon.h"

#include <functional>

namespace merak::runtime::cuda {

/// How a GEMM reads a `rows x cols` matrix whose element (i, j) is at
/// `i * rowStride + j * colStride`: row-major with leading dimension `ld`
/// (`trans` false), or as the transpose of a row-major `cols x rows`
/// matrix with leading dimension `ld` (`trans` true).
struct MatrixLayout {
  bool trans = false;
  int64_t ld = 1;
};

/// The layout a GEMM reads the matrix in place with; false when it cannot
/// (neither dimension has stride 1, or rows overlap). A dimension of size
/// 1, or an empty matrix, may have any strides.
MERAK_HD bool matrixLayout(int64_t rows, int64_t cols, int64_t rowStride,
                           int64_t colStride, MatrixLayout &out) {
  int64_t r1 = rows > 1 ? rows : 1, c1 = cols > 1 ? cols : 1;
  if (rows == 0 || cols == 0) {
    out.trans = false;
    out.ld = c1;
    return true;
  }
  if ((cols <= 1 || colStride == 1) && (rows <= 1 || rowStride >= c1)) {
    out.trans = false;
    out.ld = rows <= 1 ? c1 : rowStride;
    return true;
  }
  if ((rows <= 1 || rowStride == 1) && (cols <= 1 || colStride >= r1)) {
    out.trans = true;
    out.ld = cols <= 1 ? r1 : colStride;
    return true;
  }
  return false;
}

/// Whether a GEMM reads the last two dimensions of `v` (rank >= 2) in
/// place.
MERAK_HD bool gemmReadable(const View &v) {
  MatrixLayout l;
  return v.rank >= 2 &&
         matrixLayout(v.sizes[v.rank - 2], v.sizes[v.rank - 1],
                      v.strides[v.rank - 2], v.strides[v.rank - 1], l);
}

/// `v` (rank >= 1) as a matrix `[product of the leading sizes, last size]`
/// without copying it: false when the leading dimensions do not merge into
/// one (a permuted view).
MERAK_HD bool asMatrix(const View &v, View &out) {
  if (v.rank < 1)
    return false;
  View lead = v;
  lead.rank = v.rank - 1;
  int64_t rows = lead.numel();
  coalesceDims(&lead, 1);
  if (lead.rank > 1)
    return false;
  out = v;
  out.rank = 2;
  out.sizes[0] = rows;
  out.strides[0] = lead.rank == 1 ? lead.strides[0] : v.sizes[v.rank - 1];
  out.sizes[1] = v.sizes[v.rank - 1];
  out.strides[1] = v.strides[v.rank - 1];
  return true;
}

/// `v` with its last two dimensions swapped (a transpose, read in place).
MERAK_HD View transposeLast(View v) {
  int a = v.rank - 2, b = v.rank - 1;
  int64_t s = v.sizes[a], t = v.strides[a];
  v.sizes[a] = v.sizes[b];
  v.strides[a] = v.strides[b];
  v.sizes[b] = s;
  v.strides[b] = t;
  return v;
}

/// The batch dimensions of a product of stacks `a @ b -> c` (the leading
/// dimensions the three share), merged where all three allow it: the last
/// merged dimension is the batch of one cuBLASLt call, the others a loop
/// on the host. Strides are in elements; 0 where an operand is broadcast.
struct BatchPlan {
  int rank = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strideA[kMaxDims] = {};
  int64_t strideB[kMaxDims] = {};
  int64_t strideC[kMaxDims] = {};

  /// The calls: one per combination of the looped dimensions.
  MERAK_HD int64_t calls() const {
    int64_t n = 1;
    for (int d = 0; d + 1 < rank; ++d)
      n *= sizes[d];
    return n;
  }
  /// Matrices per call.
  MERAK_HD int64_t batch() const { return rank > 0 ? sizes[rank - 1] : 1; }
  /// Element offsets of call `i`'s first matrices.
  MERAK_HD void offsets(int64_t i, int64_t &a, int64_t &b, int64_t &c) const {
    a = b = c = 0;
    for (int d = rank - 2; d >= 0; --d) {
      int64_t k = i % sizes[d];
      i /= sizes[d];
      a += k * strideA[d];
      b += k * strideB[d];
      c += k * strideC[d];
    }
  }
  /// Batch strides of each call.
  MERAK_HD int64_t innerA() const { return rank > 0 ? strideA[rank - 1] : 0; }
  MERAK_HD int64_t innerB() const { return rank > 0 ? strideB[rank - 1] : 0; }
  MERAK_HD int64_t innerC() const { return rank > 0 ? strideC[rank - 1] : 0; }
};

/// The plan of `a [..., m, k] @ b [..., k, n] -> c [..., m, n]`, the three
/// of one rank with equal leading sizes (a broadcast operand has stride 0
/// there).
MERAK_HD BatchPlan planBatch(const View &a, const View &b, const View &c) {
  View v[3] = {a, b, c};
  for (auto &x : v)
    x.rank = c.rank - 2;
  coalesceDims(v, 3);
  BatchPlan p;
  p.rank = v[0].rank;
  for (int d = 0; d < p.rank; ++d) {
    p.sizes[d] = v[0].sizes[d];
    p.strideA[d] = v[0].strides[d];
    p.strideB[d] = v[1].strides[d];
    p.strideC[d] = v[2].strides[d];
  }
  return p;
}

/// Whether a stack of products that all share one `b` (batch stride 0)
/// is one product of `batch * m` rows: `a`'s and `c`'s matrices lie row
/// after row, `ldA` and `ldC` apart, in row-major order.
MERAK_HD bool foldsIntoRows(int64_t batch, int64_t m, const MatrixLayout &a,
                            int64_t strideA, int64_t strideB, int64_t ldC,
                            int64_t strideC) {
  return batch > 1 && strideB == 0 && !a.trans && strideA == m * a.ld &&
         strideC == m * ldC;
}

/// The largest power of two (at most 256) that divides `address`: the
/// alignment cuBLASLt is told a matrix has.
MERAK_HD unsigned alignmentOf(uint64_t address) {
  unsigned a = 1;
  while (a < 256 && address % (2 * a) == 0)
    a *= 2;
  return a;
}

/// The fewest elements of a matrix `gemm` stages (`stagedLeading`).
constexpr int64_t kStageElements = int64_t(1) << 20;

/// cuBLASLt's fast kernels take matrices whose rows start 16 bytes apart; a
/// leading dimension that breaks that (the logits of a vocabulary of
/// 50,257, an odd number of columns) leaves it kernels several times
/// slower. For a stored `rows x cols` matrix `ld` elements of `elemBytes`
/// apart, the leading dimension of the staged copy `gemm` makes of it
/// (copied in, or written there and copied out: two passes over memory,
/// less than the slow kernel loses), or 0 to use it in place: a single
/// row, fewer than `kStageElements` elements, or rows already aligned.
MERAK_HD int64_t stagedLeading(int64_t rows, int64_t cols, int64_t ld,
                               int64_t elemBytes) {
  if (rows <= 1 || cols <= 0 || elemBytes <= 0 || elemBytes > 16 ||
      rows * cols < kStageElements || (ld * elemBytes) % 16 == 0)
    return 0;
  int64_t per = 16 / elemBytes;
  return (cols + per - 1) / per * per;
}

/// What a GEMM needs of the backend: its cuBLASLt handle and workspace,
/// the stream, TF32 for float32, the counter of cuBLASLt calls, and
/// device memory for staged matrices (`stagedLeading`; none staged when
/// null), which stays valid until the op's kernels have run.
struct GemmDevice {
  void *cublasLt = nullptr;
  void *workspace = nullptr;
  size_t workspaceBytes = 0;
  bool tf32 = false;
  cudaStream_t stream = nullptr;
  int64_t *calls = nullptr;
  std::function<void *(int64_t bytes)> scratch;
};

/// `c = alpha * a @ b + beta * c (+ bias)` for stacks of one rank (>= 2)
/// and one element type (f16, bf16, f32 or f64, computed in f32 or f64;
/// `c` may be f32 for products of f16 or bf16, rounded once from the f32
/// accumulation):
/// `a [..., m, k]`, `b [..., k, n]`, `c [..., m, n]` with equal leading
/// sizes (stride 0 where an operand is broadcast), `a` and `b` readable in
/// place (`gemmReadable`), `c` row-major in its last two dimensions.
/// `bias` (`[n]`, `c`'s type, contiguous) is added to every row; only for
/// a single product (rank 2). An empty `k` leaves `beta * c (+ bias)`.
void gemm(const GemmDevice &dev, const View &a, const View &b, const View &c,
          double alpha = 1, double beta = 0, const void *bias = nullptr);

// Host side (LinearAlgebra.cpp), for the host kernels of every family that
// multiplies matrices.
struct Ctx;
class CudaTensor;

/// The GEMM device of `c`'s backend (its calls counted in `gemmCalls`).
GemmDevice gemmDevice(Ctx &c);

/// `t` as `gemm` reads it (rank >= 2): its own view where the last two
/// dimensions can be read in place, else a dense copy made on the stream.
View gemmOperand(Ctx &c, const CudaTensor &t);

} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_GEMM_H

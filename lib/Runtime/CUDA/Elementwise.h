//===- Elementwise.h - CUDA elementwise kernels: launchers and arithmetic -===//
//
// The launchers of Elementwise.cu (unary, binary and ternary maps over
// broadcast, strided operands; clamp; tril/triu; dropout), and what they
// compute element by element, as MERAK_HD functions so that the host unit
// tests (unittests/Runtime/CudaElementwiseTest.cpp) check them without a
// GPU: ATen's scalar formulas (Python-style remainder and floor division,
// NaN-propagating minimum and maximum, integer powers, GELU), the index
// arithmetic of strided operands, and the Philox-4x32-10 generator behind
// dropout.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_ELEMENTWISE_H
#define MERAK_LIB_RUNTIME_CUDA_ELEMENTWISE_H

#include "CudaCommon.h"

#include <math.h>

#include <cstdint>
#include <type_traits>

namespace merak::runtime::cuda {

//===----------------------------------------------------------------------===//
// Launchers (Elementwise.cu)
//===----------------------------------------------------------------------===//

/// Unary maps; the result has the operand's element type.
enum class UnaryOp : uint8_t {
  Neg,
  Abs,
  Exp,
  Log,
  Sin,
  Cos,
  Sqrt,
  Rsqrt,
  Reciprocal,
  Erf,
  Tanh,
  Sigmoid,
  Silu,
  Relu,
  Not,
  Gelu,
  GeluTanh,
};

/// Binary maps with broadcasting. The comparisons give i1; the others the
/// operands' (common) element type. `PowScalar` is `pow` with a rank-0
/// exponent, which PyTorch runs as pow(Tensor, Scalar) with its shortcuts
/// (x * x for 2, sqrt for 0.5, ...).
enum class BinaryOp : uint8_t {
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  PowScalar,
  Remainder,
  FloorDivide,
  Minimum,
  Maximum,
  And,
  Or,
  Eq,
  Ne,
  Lt,
  Le,
  Gt,
  Ge,
  GeluBackward,     // (dy, x)
  GeluTanhBackward, // (dy, x)
};

/// `out = op(in)`: `in` of `out`'s shape, any strides; `out` dense.
void launchUnary(UnaryOp op, const View &in, const View &out,
                 cudaStream_t stream);
/// `out = op(lhs, rhs)`, the operands broadcast to `out`'s shape.
void launchBinary(BinaryOp op, const View &lhs, const View &rhs,
                  const View &out, cudaStream_t stream);
/// `out = condition ? onTrue : onFalse`, all three broadcast to `out`.
void launchWhere(const View &condition, const View &onTrue, const View &onFalse,
                 const View &out, cudaStream_t stream);
/// `out = min(max(in, lo), hi)` with an absent bound skipped; the bounds
/// are first converted to the element type (an integer bound truncated).
void launchClamp(const View &in, const View &out, bool hasLo, double lo,
                 bool hasHi, double hi, cudaStream_t stream);
/// tril (`upper` false) or triu of the last two dimensions.
void launchTriangle(const View &in, const View &out, int64_t diagonal,
                    bool upper, cudaStream_t stream);
/// Dropout with probability `p` in (0, 1]: `out = in * mask` (with `in`) or
/// `out = mask` (`in` null), each element of the mask `1 / (1 - p)` (in the
/// element type) where `philoxKeeps` holds and 0 elsewhere; element `i`
/// draws from counter `offset + i` of `key` (`dropoutCounter`).
void launchDropout(const View *in, const View &out, double p, uint64_t key,
                   uint64_t offset, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Strided operands
//===----------------------------------------------------------------------===//

/// `N` operands of one shape, each with its strides (0 where broadcast):
/// the element offsets of each operand at a row-major position.
template <int N> struct Strided {
  int rank = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};

  MERAK_HD void offsets(int64_t linear, int64_t *off) const {
    for (int k = 0; k < N; ++k)
      off[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      int64_t size = sizes[d];
      int64_t index = linear % size;
      linear /= size;
      for (int k = 0; k < N; ++k)
        off[k] += index * strides[k][d];
    }
  }
};

/// `views` (all of one shape) merged into as few dimensions as they allow;
/// true when every one of them is then dense row-major, so that element
/// `i` of each is at offset `i`.
template <int N> MERAK_HD bool makeStrided(View *views, Strided<N> &s) {
  coalesceDims(views, N);
  s.rank = views[0].rank;
  bool dense = true;
  for (int d = 0; d < s.rank; ++d)
    s.sizes[d] = views[0].sizes[d];
  for (int k = 0; k < N; ++k)
    for (int d = 0; d < s.rank; ++d) {
      s.strides[k][d] = views[k].strides[d];
      dense = dense && s.rank == 1 && views[k].strides[d] == 1;
    }
  return dense;
}

/// Dense operands in packs: each thread of the dense kernels moves
/// `kPack` consecutive elements of every operand with whole-pack loads and
/// stores (one 16-byte access for 2-byte elements), where every operand's
/// address is a multiple of its pack's alignment; the `n % kPack`
/// elements after the last pack go element by element.
constexpr int kPack = 8;
MERAK_HD constexpr size_t packAlignment(size_t elemBytes) {
  return elemBytes * kPack < 16 ? elemBytes * kPack : 16;
}
MERAK_HD bool packAligned(const void *p, size_t elemBytes) {
  return reinterpret_cast<uintptr_t>(p) % packAlignment(elemBytes) == 0;
}
/// `kPack` elements of `T`, loaded and stored as one.
template <typename T> struct alignas(packAlignment(sizeof(T))) Pack {
  T v[kPack];
};

/// Whether tril (`upper` false) or triu keeps the element at `row`, `col`
/// of a matrix: `col - row <= diagonal`, or `>= diagonal`.
MERAK_HD bool triangleKeeps(int64_t row, int64_t col, int64_t diagonal,
                            bool upper) {
  return upper ? col - row >= diagonal : col - row <= diagonal;
}

// Dropout: the Philox-4x32-10 generator and its counters are in
// DeviceMath.h, which the fused kernels read too.

/// How many Philox blocks the `n` counters from `offset` touch.
MERAK_HD int64_t dropoutBlocks(uint64_t offset, int64_t n) {
  return n <= 0 ? 0 : int64_t(((offset & 3) + uint64_t(n) + 3) >> 2);
}

/// The counter offset of the next mask after one of `n` elements drawn at
/// `offset`: the elements' words rounded up to whole blocks.
MERAK_HD uint64_t dropoutOffsetAfter(uint64_t offset, int64_t n) {
  return offset + ((uint64_t(n) + 3) & ~uint64_t(3));
}

/// The threshold below which a uniform 32-bit word keeps its element with
/// probability `keep`: word / 2^32 < keep exactly when word <
/// ceil(keep * 2^32) (the product is exact in a double).
MERAK_HD uint64_t keepThreshold(double keep) {
  if (!(keep > 0))
    return 0;
  if (keep >= 1)
    return uint64_t(1) << 32;
  return uint64_t(ceil(keep * 4294967296.0));
}

} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_ELEMENTWISE_H

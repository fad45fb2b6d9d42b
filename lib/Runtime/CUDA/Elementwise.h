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

//===----------------------------------------------------------------------===//
// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC 2011), the counter-based generator of dropout
//===----------------------------------------------------------------------===//

struct Philox4 {
  uint32_t v[4];
};

MERAK_HD void mulHiLo32(uint32_t a, uint32_t b, uint32_t &hi, uint32_t &lo) {
#if defined(__CUDA_ARCH__)
  hi = __umulhi(a, b);
  lo = a * b;
#else
  uint64_t p = uint64_t(a) * b;
  hi = uint32_t(p >> 32);
  lo = uint32_t(p);
#endif
}

/// One round: two 32x32->64 multiplications, the halves mixed with the
/// other words and the key.
MERAK_HD Philox4 philoxRound(Philox4 c, uint32_t k0, uint32_t k1) {
  uint32_t hi0, lo0, hi1, lo1;
  mulHiLo32(0xD2511F53u, c.v[0], hi0, lo0);
  mulHiLo32(0xCD9E8D57u, c.v[2], hi1, lo1);
  return Philox4{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
}

/// Ten rounds of `counter` under the key (`k0`, `k1`), the key bumped by
/// the Weyl constants between rounds: four independent 32-bit words.
MERAK_HD Philox4 philox4x32_10(Philox4 counter, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    counter = philoxRound(counter, k0, k1);
  }
  return counter;
}

/// Element `i` of a mask drawn at counter offset `offset` takes word
/// `lane` of the Philox block `block`: counter `offset + i` counts 32-bit
/// words, four to a block, so that one call of the generator serves four
/// consecutive elements.
struct DropoutCounter {
  uint64_t block;
  int lane;
};
MERAK_HD DropoutCounter dropoutCounter(uint64_t offset, int64_t i) {
  uint64_t word = offset + uint64_t(i);
  return DropoutCounter{word >> 2, int(word & 3)};
}
/// The Philox counter of `block`: its low and high words, then zeros.
MERAK_HD Philox4 dropoutBlockCounter(uint64_t block) {
  return Philox4{{uint32_t(block), uint32_t(block >> 32), 0u, 0u}};
}

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
MERAK_HD bool philoxKeeps(uint32_t word, uint64_t threshold) {
  return uint64_t(word) < threshold;
}

//===----------------------------------------------------------------------===//
// ATen's formulas, element by element, in the accumulation type (float,
// double, int32_t, int64_t or bool)
//===----------------------------------------------------------------------===//

template <typename V> MERAK_HD bool isNan(V v) { return v != v; }

/// Python's `a % b`: the remainder with the divisor's sign. Integers by
/// zero give 0 (ATen raises ZeroDivisionError, which a kernel cannot);
/// floats by zero NaN.
template <typename V> MERAK_HD V remainderOf(V a, V b) {
  if constexpr (std::is_integral_v<V>) {
    if (b == 0)
      return 0;
    if (b == V(-1)) // a % -1 is 0; the division could overflow
      return 0;
    V r = a % b;
    if (r != 0 && ((r < 0) != (b < 0)))
      r += b;
    return r;
  } else {
    V mod = mathFmod(a, b);
    if (mod != 0 && ((b < 0) != (mod < 0)))
      mod += b;
    return mod;
  }
}

/// Python's `a // b` as `torch.div(a, b, rounding_mode="floor")` computes
/// it: for floats from fmod so that the quotient is the one `a % b` goes
/// with (IEEE's a / b where b is 0); integers by zero give 0 (ATen raises
/// ZeroDivisionError).
template <typename V> MERAK_HD V floorDivideOf(V a, V b) {
  if constexpr (std::is_integral_v<V>) {
    if (b == 0)
      return 0;
    if (b == V(-1)) // -a, wrapping as two's complement does
      return V(0 - std::make_unsigned_t<V>(a));
    if ((a < 0) != (b < 0)) {
      V quot = a / b;
      V rem = a % b;
      return rem ? quot - 1 : quot;
    }
    return a / b;
  } else {
    if (b == 0)
      return a / b;
    V mod = mathFmod(a, b);
    V div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0)))
      div -= V(1);
    V floordiv;
    if (div != 0) {
      floordiv = mathFloor(div);
      if (div - floordiv > V(0.5))
        floordiv += V(1);
    } else {
      floordiv = mathCopysign(V(0), a / b);
    }
    return floordiv;
  }
}

/// torch.minimum / torch.maximum: NaN when either operand is NaN.
template <typename V> MERAK_HD V minimumOf(V a, V b) {
  if constexpr (std::is_same_v<V, bool>) {
    return a && b;
  } else {
    if (isNan(a) || isNan(b))
      return isNan(a) ? a : b;
    return b < a ? b : a;
  }
}
template <typename V> MERAK_HD V maximumOf(V a, V b) {
  if constexpr (std::is_same_v<V, bool>) {
    return a || b;
  } else {
    if (isNan(a) || isNan(b))
      return isNan(a) ? a : b;
    return a < b ? b : a;
  }
}

/// ATen's integer power: exponentiation by squaring; a negative exponent
/// gives 1 for a base of 1, +-1 for -1, else 0.
template <typename V> MERAK_HD V integerPow(V a, V b) {
  if (b < 0) {
    if (a == 1)
      return 1;
    if (a == -1)
      return (-(b + 1)) % 2 == 0 ? V(-1) : V(1); // -1 for an odd exponent
    return 0;
  }
  V result = 1;
  while (b) {
    if (b & 1)
      result *= a;
    b /= 2;
    a *= a;
  }
  return result;
}

/// pow(Tensor, Scalar) for floats: PyTorch's shortcuts for the exponents
/// 0, 1, 0.5, -0.5, -1, 2, 3 and -2, else pow.
template <typename V> MERAK_HD V powScalarFloat(V x, V e) {
  if (e == V(0))
    return V(1);
  if (e == V(1))
    return x;
  if (e == V(0.5))
    return mathSqrt(x);
  if (e == V(-0.5))
    return V(1) / mathSqrt(x);
  if (e == V(-1))
    return V(1) / x;
  if (e == V(2))
    return x * x;
  if (e == V(3))
    return x * x * x;
  if (e == V(-2))
    return V(1) / (x * x);
  return mathPow(x, e);
}

/// relu, NaN kept (ATen's clamp_min(x, 0)).
template <typename V> MERAK_HD V reluOf(V x) { return x < V(0) ? V(0) : x; }

/// PyTorch's logistic sigmoid and SiLU, in the accumulation type.
template <typename V> MERAK_HD V sigmoidOf(V x) {
  return V(1) / (V(1) + mathExp(-x));
}
template <typename V> MERAK_HD V siluOf(V x) {
  return x / (V(1) + mathExp(-x));
}

/// GELU with the exact normal CDF: x / 2 (1 + erf(x / sqrt 2)).
template <typename V> MERAK_HD V geluOf(V x) {
  return x * V(0.5) * (V(1) + mathErf(x * V(0.70710678118654752440)));
}
/// Its derivative times `dy`: dy (Phi(x) + x phi(x)).
template <typename V> MERAK_HD V geluBackwardOf(V dy, V x) {
  V cdf = V(0.5) * (V(1) + mathErf(x * V(0.70710678118654752440)));
  V pdf = V(0.39894228040143267794) * mathExp(V(-0.5) * x * x);
  return dy * (cdf + x * pdf);
}

/// The tanh approximation 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715
/// x^3), as the CPU backend computes it (VectorMath.h): x / (1 + exp(-2u)),
/// without cancellation for negative x; exp's overflow gives a zero of x's
/// sign.
template <typename V> MERAK_HD V geluTanhOf(V x) {
  const V beta = V(0.79788456080286535588), kappa = V(0.044715);
  V u = beta * (x + kappa * (x * x * x));
  return x / (V(1) + mathExp(V(-2) * u));
}
/// Its derivative times `dy`: dy (s + 2 x s (1 - s) du/dx) with s = 1 / (1
/// + exp(-2u)) and s (1 - s) = e s^2 (exp(-2u) clamped at e^80, where the
/// slope is zero to within 1e-30).
template <typename V> MERAK_HD V geluTanhBackwardOf(V dy, V x) {
  const V beta = V(0.79788456080286535588), kappa = V(0.044715);
  V x2 = x * x;
  V u = beta * (x + kappa * (x2 * x));
  V t = V(-2) * u;
  V e = mathExp(t < V(80) ? t : V(80));
  V s = V(1) / (V(1) + e);
  V ds = (e * s) * s;
  V du = beta * (V(1) + V(3) * kappa * x2);
  return dy * (s + V(2) * x * ds * du);
}

} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_ELEMENTWISE_H

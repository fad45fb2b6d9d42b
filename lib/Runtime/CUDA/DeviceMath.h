//===- DeviceMath.h - scalar formulas of the CUDA elementwise kernels -*- C++
//-*-===//
//
// What an elementwise kernel computes for one element, in the accumulation
// type: the math library's function per type (`mathExp`), ATen's scalar
// formulas (Python-style remainder and floor division, NaN-propagating
// minimum and maximum, integer powers, GELU and its gradient), and the
// conversions between a stored bf16 or f16 element and float.
//
// One source for three compilers: nvcc (the kernels of Elementwise.cu),
// the host compiler (the unit tests check the formulas without a GPU), and
// NVRTC, which compiles the fused elementwise kernels at load time
// (FusedKernels.cpp) with this file as their only header. It therefore
// includes no header under NVRTC (`__CUDACC_RTC__`), which has none, and
// uses the few type traits it needs from its own definitions.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_DEVICEMATH_H
#define MERAK_LIB_RUNTIME_CUDA_DEVICEMATH_H

#if defined(__CUDACC_RTC__)
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long int64_t;
typedef unsigned long uint64_t;
typedef unsigned short uint16_t;
typedef unsigned char uint8_t;
#else
#include <math.h>

#include <cstdint>
#include <cstring>
#endif

#if defined(__CUDACC__) || defined(MERAK_CUDA_EMULATION)
#define MERAK_HD __host__ __device__ inline
#define MERAK_DEVICE __device__ inline
#else
#define MERAK_HD inline
#define MERAK_DEVICE inline
#endif

namespace merak::runtime::cuda {

/// The most dimensions a tensor a kernel reads may have.
constexpr int kMaxDims = 8;

//===----------------------------------------------------------------------===//
// Type traits (NVRTC has no <type_traits>)
//===----------------------------------------------------------------------===//

template <typename A, typename B> constexpr bool kIsSame = false;
template <typename A> constexpr bool kIsSame<A, A> = true;

/// std::is_integral's answer for the types kernels compute in.
template <typename V> constexpr bool kIsIntegral = false;
template <> constexpr bool kIsIntegral<bool> = true;
template <> constexpr bool kIsIntegral<char> = true;
template <> constexpr bool kIsIntegral<signed char> = true;
template <> constexpr bool kIsIntegral<unsigned char> = true;
template <> constexpr bool kIsIntegral<short> = true;
template <> constexpr bool kIsIntegral<unsigned short> = true;
template <> constexpr bool kIsIntegral<int> = true;
template <> constexpr bool kIsIntegral<unsigned> = true;
template <> constexpr bool kIsIntegral<long> = true;
template <> constexpr bool kIsIntegral<unsigned long> = true;
template <> constexpr bool kIsIntegral<long long> = true;
template <> constexpr bool kIsIntegral<unsigned long long> = true;

template <typename V> struct MakeUnsignedOf { using type = V; };
template <> struct MakeUnsignedOf<int> { using type = unsigned; };
template <> struct MakeUnsignedOf<long> { using type = unsigned long; };
template <> struct MakeUnsignedOf<long long> {
  using type = unsigned long long;
};
template <typename V> using MakeUnsigned = typename MakeUnsignedOf<V>::type;

//===----------------------------------------------------------------------===//
// Math functions
//===----------------------------------------------------------------------===//

/// The math library's function for the accumulation type: `mathExp(x)`
/// is `expf` for float and `exp` for double, so a template on the
/// accumulation type calls the single-precision one where it can.
MERAK_HD float mathFmod(float a, float b) { return fmodf(a, b); }
MERAK_HD double mathFmod(double a, double b) { return fmod(a, b); }
MERAK_HD float mathFloor(float a) { return floorf(a); }
MERAK_HD double mathFloor(double a) { return floor(a); }
MERAK_HD float mathCopysign(float a, float b) { return copysignf(a, b); }
MERAK_HD double mathCopysign(double a, double b) { return copysign(a, b); }
MERAK_HD float mathExp(float a) { return expf(a); }
MERAK_HD double mathExp(double a) { return exp(a); }
MERAK_HD float mathErf(float a) { return erff(a); }
MERAK_HD double mathErf(double a) { return erf(a); }
MERAK_HD float mathPow(float a, float b) { return powf(a, b); }
MERAK_HD double mathPow(double a, double b) { return pow(a, b); }
MERAK_HD float mathSqrt(float a) { return sqrtf(a); }
MERAK_HD double mathSqrt(double a) { return sqrt(a); }
MERAK_HD float mathLog(float a) { return logf(a); }
MERAK_HD double mathLog(double a) { return log(a); }
MERAK_HD float mathSin(float a) { return sinf(a); }
MERAK_HD double mathSin(double a) { return sin(a); }
MERAK_HD float mathCos(float a) { return cosf(a); }
MERAK_HD double mathCos(double a) { return cos(a); }
MERAK_HD float mathTanh(float a) { return tanhf(a); }
MERAK_HD double mathTanh(double a) { return tanh(a); }
MERAK_HD float mathAbs(float a) { return fabsf(a); }
MERAK_HD double mathAbs(double a) { return fabs(a); }

//===----------------------------------------------------------------------===//
// ATen's formulas, element by element, in the accumulation type (float,
// double, int32_t, int64_t or bool)
//===----------------------------------------------------------------------===//

template <typename V> MERAK_HD bool isNan(V v) { return v != v; }

/// Python's `a % b`: the remainder with the divisor's sign. Integers by
/// zero give 0 (ATen raises ZeroDivisionError, which a kernel cannot);
/// floats by zero NaN.
template <typename V> MERAK_HD V remainderOf(V a, V b) {
  if constexpr (kIsIntegral<V>) {
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
  if constexpr (kIsIntegral<V>) {
    if (b == 0)
      return 0;
    if (b == V(-1)) // -a, wrapping as two's complement does
      return V(0 - MakeUnsigned<V>(a));
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
  if constexpr (kIsSame<V, bool>) {
    return a && b;
  } else {
    if (isNan(a) || isNan(b))
      return isNan(a) ? a : b;
    return b < a ? b : a;
  }
}
template <typename V> MERAK_HD V maximumOf(V a, V b) {
  if constexpr (kIsSame<V, bool>) {
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

//===----------------------------------------------------------------------===//
// Stored 16-bit floats: their bits to float and float rounded to them
// (round to nearest, ties to even), as the hardware's conversions do, in
// plain arithmetic so that the fused kernels need no CUDA header
//===----------------------------------------------------------------------===//

MERAK_HD float floatFromBits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
#endif
}
MERAK_HD uint32_t bitsOfFloat(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return bits;
#endif
}

MERAK_HD float bf16BitsToFloat(uint16_t h) {
  return floatFromBits(uint32_t(h) << 16);
}
/// NaN stays a (quiet) NaN; otherwise round to nearest even.
MERAK_HD uint16_t floatToBf16Bits(float f) {
  uint32_t u = bitsOfFloat(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

MERAK_HD float f16BitsToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) // infinity or NaN
    return floatFromBits(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0)
      return floatFromBits(sign);
    // Subnormal: mant * 2^-24, exact in a float.
    float v = float(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return floatFromBits(sign | ((exp + 112u) << 23) | (mant << 13));
}
/// Round to nearest even; beyond the largest half (65504 plus half a unit)
/// infinity; NaN stays a NaN.
MERAK_HD uint16_t floatToF16Bits(float f) {
  uint32_t u = bitsOfFloat(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u)
    return uint16_t(sign | 0x7e00u);
  if (a >= 0x477ff000u) // >= 65520: rounds to infinity
    return uint16_t(sign | 0x7c00u);
  if (a < 0x38800000u) { // below the smallest normal half, 2^-14
    // In units of 2^-24, rounded to nearest even by the float addition.
    float v = floatFromBits(a) + 0.5f;
    // 0.5 = 2^-1: adding it aligns the units of 2^-24 to the mantissa's
    // last bit, since 0.5 has exponent -1 and a float keeps 23 bits below.
    uint32_t r = bitsOfFloat(v) - 0x3f000000u;
    return uint16_t(sign | r);
  }
  uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
  return uint16_t(sign | ((rounded - 0x38000000u) >> 13));
}

/// A float rounded to the nearest bf16 or f16 and back: what an op on
/// 16-bit floats keeps of the float it computed.
MERAK_HD float roundToBf16(float f) {
  return bf16BitsToFloat(floatToBf16Bits(f));
}
MERAK_HD float roundToF16(float f) { return f16BitsToFloat(floatToF16Bits(f)); }

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

/// Whether a uniform 32-bit word keeps its element under `threshold`
/// (`keepThreshold`, Elementwise.h).
MERAK_HD bool philoxKeeps(uint32_t word, uint64_t threshold) {
  return uint64_t(word) < threshold;
}

//===----------------------------------------------------------------------===//
// Fused elementwise kernels (FusedKernels.cpp generates them): what their
// launcher passes them
//===----------------------------------------------------------------------===//

/// Operands (inputs and outputs together) a fused kernel takes at most.
constexpr int kFusedMaxOperands = 24;
/// Dropout masks a fused kernel draws at most.
constexpr int kFusedMaxDropouts = 4;

/// How a fused kernel draws one dropout member's mask: element `i` keeps
/// its value where word `offset + i` of the step's Philox stream is below
/// `threshold` (as the dropout kernel draws it) and is then `scale`, else
/// 0. A threshold of 2^32 keeps every element without drawing (an
/// evaluation step, or p = 0), one of 0 drops every element (p = 1).
/// `offset` is a multiple of four, so each Philox block serves four
/// consecutive elements of the chain.
struct FusedDropout {
  uint64_t offset;
  uint64_t threshold;
  float scale;
};

/// One launch of a fused kernel over `n` elements of the chain's shape,
/// merged into `rank` dimensions of `sizes`: `data` holds the inputs, then
/// the outputs (dense), and `strides` each input's strides (0 where it is
/// broadcast). With `dense` set every input is dense too and element `i`
/// of each is at offset `i`.
struct FusedParams {
  int64_t n;
  int32_t rank;
  int32_t dense;
  int64_t sizes[kMaxDims];
  void *data[kFusedMaxOperands];
  int64_t strides[kFusedMaxOperands][kMaxDims];
  /// The step's dropout key and the chain's dropout members in order.
  uint64_t key;
  FusedDropout dropout[kFusedMaxDropouts];
};

/// Whether dropout member `k` draws (else every element is `scale`: kept
/// by a threshold of 2^32, dropped by one of 0).
MERAK_HD bool fusedDropoutDraws(const FusedParams &p, int k) {
  return p.dropout[k].threshold > 0 && p.dropout[k].threshold <= 0xffffffffu;
}

/// The Philox block of dropout member `k` that serves the chain's
/// elements `4 * g` to `4 * g + 3` (a mask's offset is a multiple of
/// four: `fusedDropouts`), one generator call for four elements.
MERAK_HD Philox4 fusedDropoutWords(const FusedParams &p, int k, int64_t g) {
  if (!fusedDropoutDraws(p, k))
    return Philox4{{0u, 0u, 0u, 0u}};
  return philox4x32_10(
      dropoutBlockCounter((p.dropout[k].offset >> 2) + uint64_t(g)),
      uint32_t(p.key), uint32_t(p.key >> 32));
}

/// Element `4 * g + lane`'s mask value of dropout member `k`, from its
/// block `r` (`fusedDropoutWords`).
MERAK_HD float fusedDropoutLane(const FusedParams &p, int k, const Philox4 &r,
                                int lane) {
  const FusedDropout &d = p.dropout[k];
  if (!fusedDropoutDraws(p, k))
    return d.threshold == 0 ? 0.0f : d.scale;
  uint32_t word = lane == 0   ? r.v[0]
                  : lane == 1 ? r.v[1]
                  : lane == 2 ? r.v[2]
                              : r.v[3];
  return philoxKeeps(word, d.threshold) ? d.scale : 0.0f;
}

/// The element offsets of the first `inputs` inputs at row-major position
/// `linear` of the chain's shape, its digits found in `Index` arithmetic.
template <typename Index>
MERAK_HD void fusedOffsetsIn(const FusedParams &p, Index linear, int inputs,
                             int64_t *off) {
  for (int k = 0; k < inputs; ++k)
    off[k] = 0;
  for (int d = p.rank - 1; d >= 0; --d) {
    Index size = Index(p.sizes[d]);
    Index index = linear % size;
    linear /= size;
    for (int k = 0; k < inputs; ++k)
      off[k] += int64_t(index) * p.strides[k][d];
  }
}
MERAK_HD void fusedOffsets(const FusedParams &p, int64_t linear, int inputs,
                           int64_t *off) {
  fusedOffsetsIn<int64_t>(p, linear, inputs, off);
}
/// For a chain of at most 2^32 - 1 elements: 32-bit division, several
/// times cheaper on a GPU than 64-bit (the offsets are still summed in 64
/// bits: a strided input may span more than its elements).
MERAK_HD void fusedOffsets32(const FusedParams &p, uint32_t linear, int inputs,
                             int64_t *off) {
  fusedOffsetsIn<uint32_t>(p, linear, inputs, off);
}

} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_DEVICEMATH_H

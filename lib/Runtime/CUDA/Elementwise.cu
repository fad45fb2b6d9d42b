//===- Elementwise.cu - CUDA elementwise kernels --------------------------===//
//
// One grid-stride kernel per arity (unary, binary, ternary), each a map of
// a functor over operands read with their strides (broadcast dimensions
// have stride 0) into a dense result; the functors compute in the
// accumulation type with Elementwise.h's formulas. Also tril/triu and the
// dropout kernels, which need an element's position.
//
//===----------------------------------------------------------------------===//

#include "Copy.h"
#include "Elementwise.h"

namespace merak::runtime::cuda {
namespace {

constexpr int kBlock = 256;

template <typename T>
constexpr bool kIsFloat =
    std::is_same_v<T, float> || std::is_same_v<T, double> ||
    std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <typename T>
constexpr bool kIsInt =
    std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>;
template <typename T> constexpr bool kIsBool = std::is_same_v<T, bool>;

#define MERAK_GRID_STRIDE(i, n)                                                \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n);    \
       i += int64_t(gridDim.x) * blockDim.x)

template <typename F, typename Out, typename A>
__global__ void unaryKernel(F f, Out *out, const A *a, Strided<1> s, bool dense,
                            int64_t n) {
  MERAK_GRID_STRIDE(i, n) {
    int64_t off[1] = {i};
    if (!dense)
      s.offsets(i, off);
    out[i] = f(a[off[0]]);
  }
}

template <typename F, typename Out, typename A, typename B>
__global__ void binaryKernel(F f, Out *out, const A *a, const B *b,
                             Strided<2> s, bool dense, int64_t n) {
  MERAK_GRID_STRIDE(i, n) {
    int64_t off[2] = {i, i};
    if (!dense)
      s.offsets(i, off);
    out[i] = f(a[off[0]], b[off[1]]);
  }
}

template <typename F, typename Out, typename A, typename B, typename C>
__global__ void ternaryKernel(F f, Out *out, const A *a, const B *b, const C *c,
                              Strided<3> s, bool dense, int64_t n) {
  MERAK_GRID_STRIDE(i, n) {
    int64_t off[3] = {i, i, i};
    if (!dense)
      s.offsets(i, off);
    out[i] = f(a[off[0]], b[off[1]], c[off[2]]);
  }
}

/// The dense kernels: element `i` of every operand at offset `i`, `packs`
/// packs of `kPack` elements each (Elementwise.h).
template <typename F, typename Out, typename... In>
__global__ void densePackKernel(F f, Out *out, int64_t packs, const In *...in) {
  MERAK_GRID_STRIDE(i, packs) {
    Pack<Out> y;
    auto apply = [&](const Pack<In> &...x) {
#pragma unroll
      for (int k = 0; k < kPack; ++k)
        y.v[k] = f(x.v[k]...);
    };
    apply(reinterpret_cast<const Pack<In> *>(in)[i]...);
    reinterpret_cast<Pack<Out> *>(out)[i] = y;
  }
}

template <typename F, typename Out, typename... In>
__global__ void denseTailKernel(F f, Out *out, int64_t n, const In *...in) {
  MERAK_GRID_STRIDE(i, n) { out[i] = f(in[i]...); }
}

/// `out = f(in...)` over `n` dense elements when every address allows
/// packs; false (nothing launched) otherwise.
template <typename F, typename Out, typename... In>
bool mapDense(F f, Out *out, int64_t n, cudaStream_t stream, const In *...in) {
  if (!packAligned(out, sizeof(Out)) || !(packAligned(in, sizeof(In)) && ...))
    return false;
  int64_t packs = n / kPack, done = packs * kPack;
  if (packs > 0) {
    Launch l = linearLaunch(packs, kBlock);
    densePackKernel<<<l.grid, l.block, 0, stream>>>(f, out, packs, in...);
  }
  if (done < n) {
    Launch l = linearLaunch(n - done, kBlock);
    denseTailKernel<<<l.grid, l.block, 0, stream>>>(f, out + done, n - done,
                                                    (in + done)...);
  }
  return true;
}

/// `views` broadcast to `out`'s shape (a CudaError naming `what` when one
/// does not broadcast), as the kernels index them.
template <int N>
bool prepare(const View *const (&views)[N], const View &out, const char *what,
             Strided<N> &s) {
  View b[N];
  for (int k = 0; k < N; ++k)
    if (!broadcastView(*views[k], out.sizes, out.rank, b[k]))
      throw CudaError(std::string(what) + ": operand #" + std::to_string(k) +
                      " does not broadcast to the result");
  return makeStrided<N>(b, s);
}

template <typename Out, typename A, typename F>
void mapUnary(F f, const View &a, const View &out, const char *what,
              cudaStream_t stream) {
  int64_t n = out.numel();
  if (n == 0)
    return;
  Strided<1> s;
  bool dense = prepare<1>({&a}, out, what, s);
  if (dense && mapDense(f, out.ptr<Out>(), n, stream, a.ptr<A>()))
    return checkLaunch(what);
  Launch l = linearLaunch(n, kBlock);
  unaryKernel<<<l.grid, l.block, 0, stream>>>(f, out.ptr<Out>(), a.ptr<A>(), s,
                                              dense, n);
  checkLaunch(what);
}

template <typename Out, typename A, typename B, typename F>
void mapBinary(F f, const View &a, const View &b, const View &out,
               const char *what, cudaStream_t stream) {
  int64_t n = out.numel();
  if (n == 0)
    return;
  Strided<2> s;
  bool dense = prepare<2>({&a, &b}, out, what, s);
  if (dense && mapDense(f, out.ptr<Out>(), n, stream, a.ptr<A>(), b.ptr<B>()))
    return checkLaunch(what);
  Launch l = linearLaunch(n, kBlock);
  binaryKernel<<<l.grid, l.block, 0, stream>>>(f, out.ptr<Out>(), a.ptr<A>(),
                                               b.ptr<B>(), s, dense, n);
  checkLaunch(what);
}

template <typename Out, typename A, typename B, typename C, typename F>
void mapTernary(F f, const View &a, const View &b, const View &c,
                const View &out, const char *what, cudaStream_t stream) {
  int64_t n = out.numel();
  if (n == 0)
    return;
  Strided<3> s;
  bool dense = prepare<3>({&a, &b, &c}, out, what, s);
  if (dense && mapDense(f, out.ptr<Out>(), n, stream, a.ptr<A>(), b.ptr<B>(),
                        c.ptr<C>()))
    return checkLaunch(what);
  Launch l = linearLaunch(n, kBlock);
  ternaryKernel<<<l.grid, l.block, 0, stream>>>(
      f, out.ptr<Out>(), a.ptr<A>(), b.ptr<B>(), c.ptr<C>(), s, dense, n);
  checkLaunch(what);
}

//===----------------------------------------------------------------------===//
// Functors: `Op` computes on accumulation-type values; `InAcc` converts
// the stored elements to it and the result back.
//===----------------------------------------------------------------------===//

template <typename T, typename Op> struct UnaryInAcc {
  Op op;
  MERAK_DEVICE T operator()(T x) const { return convertTo<T>(op(toAcc(x))); }
};
template <typename T, typename Op> struct BinaryInAcc {
  Op op;
  MERAK_DEVICE T operator()(T x, T y) const {
    return convertTo<T>(op(toAcc(x), toAcc(y)));
  }
};

#define MERAK_UNARY_FUNCTOR(Name, expr)                                        \
  struct Name {                                                                \
    template <typename V> MERAK_DEVICE V operator()(V x) const {               \
      return expr;                                                             \
    }                                                                          \
  };
MERAK_UNARY_FUNCTOR(NegF, -x)
MERAK_UNARY_FUNCTOR(ExpF, mathExp(x))
MERAK_UNARY_FUNCTOR(LogF, mathLog(x))
MERAK_UNARY_FUNCTOR(SinF, mathSin(x))
MERAK_UNARY_FUNCTOR(CosF, mathCos(x))
MERAK_UNARY_FUNCTOR(SqrtF, mathSqrt(x))
MERAK_UNARY_FUNCTOR(RsqrtF, V(1) / mathSqrt(x))
MERAK_UNARY_FUNCTOR(ReciprocalF, V(1) / x)
MERAK_UNARY_FUNCTOR(ErfF, mathErf(x))
MERAK_UNARY_FUNCTOR(TanhF, mathTanh(x))
MERAK_UNARY_FUNCTOR(SigmoidF, sigmoidOf(x))
MERAK_UNARY_FUNCTOR(SiluF, siluOf(x))
MERAK_UNARY_FUNCTOR(ReluF, reluOf(x))
MERAK_UNARY_FUNCTOR(NotF, !x)
MERAK_UNARY_FUNCTOR(GeluF, geluOf(x))
MERAK_UNARY_FUNCTOR(GeluTanhF, geluTanhOf(x))
#undef MERAK_UNARY_FUNCTOR

struct AbsF {
  template <typename V> MERAK_DEVICE V operator()(V x) const {
    if constexpr (std::is_integral_v<V>)
      return x < V(0) ? V(-x) : x;
    else
      return mathAbs(x);
  }
};

#define MERAK_BINARY_FUNCTOR(Name, expr)                                       \
  struct Name {                                                                \
    template <typename V> MERAK_DEVICE V operator()(V x, V y) const {          \
      return expr;                                                             \
    }                                                                          \
  };
MERAK_BINARY_FUNCTOR(AddF, x + y)
MERAK_BINARY_FUNCTOR(SubF, x - y)
MERAK_BINARY_FUNCTOR(MulF, x *y)
MERAK_BINARY_FUNCTOR(DivF, x / y)
MERAK_BINARY_FUNCTOR(RemainderF, remainderOf(x, y))
MERAK_BINARY_FUNCTOR(FloorDivideF, floorDivideOf(x, y))
MERAK_BINARY_FUNCTOR(MinimumF, minimumOf(x, y))
MERAK_BINARY_FUNCTOR(MaximumF, maximumOf(x, y))
MERAK_BINARY_FUNCTOR(AndF, x &&y)
MERAK_BINARY_FUNCTOR(OrF, x || y)
MERAK_BINARY_FUNCTOR(GeluBackwardF, geluBackwardOf(x, y))
MERAK_BINARY_FUNCTOR(GeluTanhBackwardF, geluTanhBackwardOf(x, y))
#undef MERAK_BINARY_FUNCTOR

/// pow(Tensor, Tensor): pow for floats, ATen's integer power for integers.
struct PowF {
  template <typename V> MERAK_DEVICE V operator()(V x, V y) const {
    if constexpr (std::is_integral_v<V>)
      return integerPow(x, y);
    else
      return mathPow(x, y);
  }
};
/// pow(Tensor, Scalar): PyTorch's shortcuts (an exponent of 0 gives 1, of
/// 1 the base, for integers as well).
struct PowScalarF {
  template <typename V> MERAK_DEVICE V operator()(V x, V y) const {
    if constexpr (std::is_integral_v<V>)
      return y == 0 ? V(1) : y == 1 ? x : integerPow(x, y);
    else
      return powScalarFloat(x, y);
  }
};

template <typename T, BinaryOp Op> struct Compare {
  MERAK_DEVICE bool operator()(T x, T y) const {
    auto a = toAcc(x);
    auto b = toAcc(y);
    switch (Op) {
    case BinaryOp::Eq:
      return a == b;
    case BinaryOp::Ne:
      return a != b;
    case BinaryOp::Lt:
      return a < b;
    case BinaryOp::Le:
      return a <= b;
    case BinaryOp::Gt:
      return a > b;
    default:
      return a >= b;
    }
  }
};

template <typename T> struct WhereF {
  MERAK_DEVICE T operator()(bool c, T x, T y) const { return c ? x : y; }
};

template <typename T> struct ClampF {
  Acc<T> lo, hi;
  bool hasLo, hasHi;
  // NaN stays NaN: neither comparison holds for it.
  MERAK_DEVICE T operator()(T x) const {
    Acc<T> v = toAcc(x);
    if (hasLo && v < lo)
      v = lo;
    if (hasHi && hi < v)
      v = hi;
    return convertTo<T>(v);
  }
};

//===----------------------------------------------------------------------===//
// Dispatch: each op over the element types ATen's kernel takes
//===----------------------------------------------------------------------===//

enum Types : unsigned { kFloats = 1, kInts = 2, kBools = 4 };
template <typename T>
constexpr unsigned kTypeClass = kIsFloat<T> ? kFloats
                                : kIsInt<T> ? kInts
                                            : kBools;

[[noreturn]] void refuse(const char *what, ElemType type) {
  throw CudaError(std::string(what) + ": no kernel for " + elemTypeName(type));
}

template <typename Op, unsigned Accepts>
void unaryOf(const View &in, const View &out, const char *what,
             cudaStream_t stream) {
  MERAK_CUDA_DISPATCH_ALL(in.type, what, T, {
    if constexpr ((kTypeClass<T> & Accepts) != 0)
      mapUnary<T, T>(UnaryInAcc<T, Op>{Op{}}, in, out, what, stream);
    else
      refuse(what, in.type);
  });
}

template <typename Op, unsigned Accepts>
void binaryOf(const View &a, const View &b, const View &out, const char *what,
              cudaStream_t stream) {
  MERAK_CUDA_DISPATCH_ALL(a.type, what, T, {
    if constexpr ((kTypeClass<T> & Accepts) != 0)
      mapBinary<T, T, T>(BinaryInAcc<T, Op>{Op{}}, a, b, out, what, stream);
    else
      refuse(what, a.type);
  });
}

template <BinaryOp Op>
void compareOf(const View &a, const View &b, const View &out,
               cudaStream_t stream) {
  MERAK_CUDA_DISPATCH_ALL(
      a.type, "compare", T,
      mapBinary<bool, T, T>(Compare<T, Op>{}, a, b, out, "compare", stream));
}

const char *unaryName(UnaryOp op) {
  switch (op) {
  case UnaryOp::Neg:
    return "neg";
  case UnaryOp::Abs:
    return "abs";
  case UnaryOp::Exp:
    return "exp";
  case UnaryOp::Log:
    return "log";
  case UnaryOp::Sin:
    return "sin";
  case UnaryOp::Cos:
    return "cos";
  case UnaryOp::Sqrt:
    return "sqrt";
  case UnaryOp::Rsqrt:
    return "rsqrt";
  case UnaryOp::Reciprocal:
    return "reciprocal";
  case UnaryOp::Erf:
    return "erf";
  case UnaryOp::Tanh:
    return "tanh";
  case UnaryOp::Sigmoid:
    return "sigmoid";
  case UnaryOp::Silu:
    return "silu";
  case UnaryOp::Relu:
    return "relu";
  case UnaryOp::Not:
    return "not";
  case UnaryOp::Gelu:
  case UnaryOp::GeluTanh:
    return "gelu";
  }
  return "unary";
}

/// Dropout: one thread per Philox block of four counters.
template <typename T>
__global__ void dropoutKernel(const T *x, Strided<1> s, bool dense, T *out,
                              int64_t n, uint64_t offset, uint32_t k0,
                              uint32_t k1, uint64_t threshold, Acc<T> scale) {
  uint64_t first = offset >> 2;
  int64_t blocks = dropoutBlocks(offset, n);
  MERAK_GRID_STRIDE(g, blocks) {
    uint64_t block = first + uint64_t(g);
    Philox4 r = philox4x32_10(dropoutBlockCounter(block), k0, k1);
    for (int lane = 0; lane < 4; ++lane) {
      uint64_t word = block * 4 + uint64_t(lane);
      if (word < offset || word - offset >= uint64_t(n))
        continue;
      int64_t i = int64_t(word - offset);
      Acc<T> m = philoxKeeps(r.v[lane], threshold) ? scale : Acc<T>(0);
      if (x) {
        int64_t off[1] = {i};
        if (!dense)
          s.offsets(i, off);
        out[i] = convertTo<T>(toAcc(x[off[0]]) * m);
      } else {
        out[i] = convertTo<T>(m);
      }
    }
  }
}

template <typename T>
__global__ void triangleKernel(const T *in, Strided<1> s, bool dense, T *out,
                               int64_t rows, int64_t cols, int64_t diagonal,
                               bool upper, int64_t n) {
  MERAK_GRID_STRIDE(i, n) {
    int64_t col = i % cols;
    int64_t row = (i / cols) % rows;
    if (triangleKeeps(row, col, diagonal, upper)) {
      int64_t off[1] = {i};
      if (!dense)
        s.offsets(i, off);
      out[i] = in[off[0]];
    } else {
      out[i] = convertTo<T>(0);
    }
  }
}

} // namespace

void launchUnary(UnaryOp op, const View &in, const View &out,
                 cudaStream_t stream) {
  const char *what = unaryName(op);
  switch (op) {
  case UnaryOp::Neg:
    return unaryOf<NegF, kFloats | kInts>(in, out, what, stream);
  case UnaryOp::Abs:
    return unaryOf<AbsF, kFloats | kInts>(in, out, what, stream);
  case UnaryOp::Exp:
    return unaryOf<ExpF, kFloats>(in, out, what, stream);
  case UnaryOp::Log:
    return unaryOf<LogF, kFloats>(in, out, what, stream);
  case UnaryOp::Sin:
    return unaryOf<SinF, kFloats>(in, out, what, stream);
  case UnaryOp::Cos:
    return unaryOf<CosF, kFloats>(in, out, what, stream);
  case UnaryOp::Sqrt:
    return unaryOf<SqrtF, kFloats>(in, out, what, stream);
  case UnaryOp::Rsqrt:
    return unaryOf<RsqrtF, kFloats>(in, out, what, stream);
  case UnaryOp::Reciprocal:
    return unaryOf<ReciprocalF, kFloats>(in, out, what, stream);
  case UnaryOp::Erf:
    return unaryOf<ErfF, kFloats>(in, out, what, stream);
  case UnaryOp::Tanh:
    return unaryOf<TanhF, kFloats>(in, out, what, stream);
  case UnaryOp::Sigmoid:
    return unaryOf<SigmoidF, kFloats>(in, out, what, stream);
  case UnaryOp::Silu:
    return unaryOf<SiluF, kFloats>(in, out, what, stream);
  case UnaryOp::Relu:
    return unaryOf<ReluF, kFloats | kInts>(in, out, what, stream);
  case UnaryOp::Not:
    return unaryOf<NotF, kBools>(in, out, what, stream);
  case UnaryOp::Gelu:
    return unaryOf<GeluF, kFloats>(in, out, what, stream);
  case UnaryOp::GeluTanh:
    return unaryOf<GeluTanhF, kFloats>(in, out, what, stream);
  }
}

void launchBinary(BinaryOp op, const View &lhs, const View &rhs,
                  const View &out, cudaStream_t stream) {
  if (lhs.type != rhs.type)
    throw CudaError(std::string("operands of different element types (") +
                    elemTypeName(lhs.type) + " and " + elemTypeName(rhs.type) +
                    ")");
  constexpr unsigned kNumbers = kFloats | kInts;
  constexpr unsigned kAll = kFloats | kInts | kBools;
  switch (op) {
  case BinaryOp::Add:
    return binaryOf<AddF, kAll>(lhs, rhs, out, "add", stream);
  case BinaryOp::Sub:
    return binaryOf<SubF, kNumbers>(lhs, rhs, out, "sub", stream);
  case BinaryOp::Mul:
    return binaryOf<MulF, kAll>(lhs, rhs, out, "mul", stream);
  case BinaryOp::Div:
    // ATen divides integers into floats, which the op's type does not allow.
    return binaryOf<DivF, kFloats>(lhs, rhs, out, "div", stream);
  case BinaryOp::Pow:
    return binaryOf<PowF, kNumbers>(lhs, rhs, out, "pow", stream);
  case BinaryOp::PowScalar:
    return binaryOf<PowScalarF, kNumbers>(lhs, rhs, out, "pow", stream);
  case BinaryOp::Remainder:
    return binaryOf<RemainderF, kNumbers>(lhs, rhs, out, "remainder", stream);
  case BinaryOp::FloorDivide:
    return binaryOf<FloorDivideF, kNumbers>(lhs, rhs, out, "floor_divide",
                                            stream);
  case BinaryOp::Minimum:
    return binaryOf<MinimumF, kAll>(lhs, rhs, out, "minimum", stream);
  case BinaryOp::Maximum:
    return binaryOf<MaximumF, kAll>(lhs, rhs, out, "maximum", stream);
  case BinaryOp::And:
    return binaryOf<AndF, kBools>(lhs, rhs, out, "and", stream);
  case BinaryOp::Or:
    return binaryOf<OrF, kBools>(lhs, rhs, out, "or", stream);
  case BinaryOp::Eq:
    return compareOf<BinaryOp::Eq>(lhs, rhs, out, stream);
  case BinaryOp::Ne:
    return compareOf<BinaryOp::Ne>(lhs, rhs, out, stream);
  case BinaryOp::Lt:
    return compareOf<BinaryOp::Lt>(lhs, rhs, out, stream);
  case BinaryOp::Le:
    return compareOf<BinaryOp::Le>(lhs, rhs, out, stream);
  case BinaryOp::Gt:
    return compareOf<BinaryOp::Gt>(lhs, rhs, out, stream);
  case BinaryOp::Ge:
    return compareOf<BinaryOp::Ge>(lhs, rhs, out, stream);
  case BinaryOp::GeluBackward:
    return binaryOf<GeluBackwardF, kFloats>(lhs, rhs, out, "gelu_backward",
                                            stream);
  case BinaryOp::GeluTanhBackward:
    return binaryOf<GeluTanhBackwardF, kFloats>(lhs, rhs, out, "gelu_backward",
                                                stream);
  }
}

void launchWhere(const View &condition, const View &onTrue, const View &onFalse,
                 const View &out, cudaStream_t stream) {
  if (condition.type != ElemType::Bool)
    throw CudaError(std::string("where: the condition is ") +
                    elemTypeName(condition.type) + ", not i1");
  if (onTrue.type != onFalse.type)
    throw CudaError("where: values of different element types");
  MERAK_CUDA_DISPATCH_ALL(onTrue.type, "where", T,
                          mapTernary<T, bool, T, T>(WhereF<T>{}, condition,
                                                    onTrue, onFalse, out,
                                                    "where", stream));
}

void launchClamp(const View &in, const View &out, bool hasLo, double lo,
                 bool hasHi, double hi, cudaStream_t stream) {
  MERAK_CUDA_DISPATCH_ALL(in.type, "clamp", T, {
    if constexpr (kIsBool<T>) {
      refuse("clamp", in.type);
    } else {
      // The bounds in the element type, as ATen converts its Scalars.
      auto bound = [](double v) {
        if constexpr (kIsInt<T>)
          return Acc<T>(T(int64_t(v)));
        else
          return toAcc(convertTo<T>(v));
      };
      ClampF<T> f{hasLo ? bound(lo) : Acc<T>(0), hasHi ? bound(hi) : Acc<T>(0),
                  hasLo, hasHi};
      mapUnary<T, T>(f, in, out, "clamp", stream);
    }
  });
}

void launchTriangle(const View &in, const View &out, int64_t diagonal,
                    bool upper, cudaStream_t stream) {
  const char *what = upper ? "triu" : "tril";
  if (out.rank < 2)
    throw CudaError(std::string(what) + ": the operand has rank " +
                    std::to_string(out.rank) + ", expected at least 2");
  int64_t n = out.numel();
  if (n == 0)
    return;
  Strided<1> s;
  bool dense = prepare<1>({&in}, out, what, s);
  int64_t rows = out.sizes[out.rank - 2], cols = out.sizes[out.rank - 1];
  Launch l = linearLaunch(n, kBlock);
  MERAK_CUDA_DISPATCH_ALL(
      in.type, what, T,
      triangleKernel<T><<<l.grid, l.block, 0, stream>>>(
          in.ptr<T>(), s, dense, out.ptr<T>(), rows, cols, diagonal, upper, n));
  checkLaunch(what);
}

void launchDropout(const View *in, const View &out, double p, uint64_t key,
                   uint64_t offset, cudaStream_t stream) {
  const char *what = in ? "dropout" : "dropout_mask";
  int64_t n = out.numel();
  if (n == 0)
    return;
  Strided<1> s;
  bool dense = true;
  if (in)
    dense = prepare<1>({in}, out, what, s);
  uint64_t threshold = keepThreshold(1 - p);
  Launch l = linearLaunch(dropoutBlocks(offset, n), kBlock);
  MERAK_CUDA_DISPATCH_FLOAT(out.type, what, T, {
    // The mask's value as the CPU makes it: ones divided by 1 - p in the
    // element type.
    Acc<T> scale =
        p < 1 ? toAcc(convertTo<T>(Acc<T>(1) / Acc<T>(1 - p))) : Acc<T>(0);
    dropoutKernel<T><<<l.grid, l.block, 0, stream>>>(
        in ? in->ptr<T>() : nullptr, s, dense, out.ptr<T>(), n, offset,
        uint32_t(key), uint32_t(key >> 32), threshold, scale);
  });
  checkLaunch(what);
}

} // namespace merak::runtime::cuda

//===- Elementwise.cpp - CPU kernels: elementwise ops ---------------------===//
//
// The unary and binary ops, comparisons, `where`, `clamp`, `cast`, `tril`
// and `triu`, GELU and its gradient (VectorMath.h's kernels for the tanh
// approximation), and dropout with its mask.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"
#include "VectorMath.h"

namespace merak::runtime::cpu {
namespace {

/// Dropout's keep mask, as `at::dropout` draws it on CPU:
/// `empty_like(x).bernoulli_(1 - p)`, then divided by `1 - p`.
at::Tensor dropoutMask(Ctx &c, const TensorType &type, double p) {
  at::TensorOptions opts = optionsFor(type.dtype);
  if (p == 0)
    return at::ones(type.shape, opts);
  if (p == 1)
    return at::zeros(type.shape, opts);
  at::Tensor mask = at::empty(type.shape, opts);
  mask.bernoulli_(1 - p, c.generator);
  mask.div_(1 - p);
  return mask;
}

/// The result of an elementwise kernel on operands shaped like `like`: the
/// buffer of operand 0 where the in-place plan hands it over, else a new
/// tensor (which lands in the kernel's arena slot).
at::Tensor resultLike(Ctx &c, const at::Tensor &like) {
  at::Tensor target = c.inPlace(0);
  return target.defined() ? target : at::empty_like(like);
}

/// Calls `fn(begin, end)` over `[0, count)` elements in blocks on ATen's
/// threads, each block worth the cost of waking a thread.
template <typename Fn> void forElements(int64_t count, Fn fn) {
  forBlocks(count, int64_t(1) << 14, 16, fn);
}

} // namespace

#define MERAK_UNARY(Kind, Fn)                                                  \
  table.add(OpKind::Kind, [](Ctx &c) {                                         \
    elementwise(                                                               \
        c, [&] { return at::Fn(c.in(0)); },                                    \
        [&](at::Tensor &o) { at::Fn##_out(o, c.in(0)); });                     \
  });
#define MERAK_BINARY(Kind, Fn)                                                 \
  table.add(OpKind::Kind, [](Ctx &c) {                                         \
    elementwise(                                                               \
        c, [&] { return at::Fn(c.in(0), c.in(1)); },                           \
        [&](at::Tensor &o) { at::Fn##_out(o, c.in(0), c.in(1)); });            \
  });

void registerElementwiseKernels(KernelTable &table) {
  MERAK_UNARY(Neg, neg)
  MERAK_UNARY(Abs, abs)
  MERAK_UNARY(Exp, exp)
  MERAK_UNARY(Log, log)
  MERAK_UNARY(Sin, sin)
  MERAK_UNARY(Cos, cos)
  MERAK_UNARY(Sqrt, sqrt)
  MERAK_UNARY(Rsqrt, rsqrt)
  MERAK_UNARY(Reciprocal, reciprocal)
  MERAK_UNARY(Erf, erf)
  MERAK_UNARY(Tanh, tanh)
  MERAK_UNARY(Sigmoid, sigmoid)
  MERAK_UNARY(Silu, silu)
  MERAK_UNARY(Not, logical_not)
  MERAK_BINARY(Add, add)
  MERAK_BINARY(Sub, sub)
  MERAK_BINARY(Mul, mul)
  MERAK_BINARY(Div, div)
  MERAK_BINARY(Remainder, remainder)
  MERAK_BINARY(Minimum, minimum)
  MERAK_BINARY(Maximum, maximum)
  MERAK_BINARY(And, logical_and)
  MERAK_BINARY(Or, logical_or)

  table.add(OpKind::Relu, [](Ctx &c) {
    // No out= form; the in-place plan only ever names operand 0.
    if (at::Tensor t = c.inPlace(0); t.defined())
      return c.set(0, at::relu_(t));
    return c.set(0, at::relu(c.in(0)));
  });
  table.add(OpKind::Gelu, [](Ctx &c) {
    const OpAttrs &a = c.a;
    if (a.tanhApproximation && denseFloat(c.in(0))) {
      const at::Tensor &x = c.in(0);
      at::Tensor y = resultLike(c, x);
      const float *px = x.data_ptr<float>();
      float *py = y.data_ptr<float>();
      forElements(x.numel(), [&](int64_t begin, int64_t end) {
        vecmath::geluTanh(px + begin, py + begin, end - begin);
      });
      return c.set(0, y);
    }
    const char *approx = a.tanhApproximation ? "tanh" : "none";
    return elementwise(
        c, [&] { return at::gelu(c.in(0), approx); },
        [&](at::Tensor &o) { at::gelu_out(o, c.in(0), approx); });
  });
  table.add(OpKind::Clamp, [](Ctx &c) {
    const OpAttrs &a = c.a;
    DType dtype = c.operandType(0).dtype;
    c10::optional<at::Scalar> lo, hi;
    if (a.min)
      lo = scalarFor(dtype, *a.min);
    if (a.max)
      hi = scalarFor(dtype, *a.max);
    if (!lo && !hi)
      return c.set(0, c.in(0)); // a view result: nothing to clamp
    return elementwise(
        c, [&] { return at::clamp(c.in(0), lo, hi); },
        [&](at::Tensor &o) { at::clamp_out(o, c.in(0), lo, hi); });
  });
  table.add(OpKind::Cast, [](Ctx &c) {
    c.set(0, c.in(0).to(toAten(c.resultType(0).dtype)));
  });
  table.add(OpKind::Dropout, [](Ctx &c) {
    const OpAttrs &a = c.a;
    if (!a.training || a.p == 0 || c.evaluating())
      return c.set(0, c.in(0));
    at::Tensor mask = dropoutMask(c, c.resultType(0), a.p);
    return elementwise(
        c, [&] { return at::mul(c.in(0), mask); },
        [&](at::Tensor &o) { at::mul_out(o, c.in(0), mask); });
  });
  table.add(OpKind::Tril,
            [](Ctx &c) { c.set(0, at::tril(c.in(0), c.a.diagonal)); });
  table.add(OpKind::Triu,
            [](Ctx &c) { c.set(0, at::triu(c.in(0), c.a.diagonal)); });
  table.add(OpKind::Pow, [](Ctx &c) {
    // A rank-0 exponent came from a Python number: PyTorch then calls
    // pow(Tensor, Scalar), whose fast paths (x*x, sqrt, ...) round
    // differently from pow(Tensor, Tensor).
    const at::Tensor &exponent = c.in(1);
    if (exponent.dim() == 0 && c.operandType(0).shape.size() > 0) {
      at::Scalar e = exponent.item();
      return elementwise(
          c, [&] { return at::pow(c.in(0), e); },
          [&](at::Tensor &o) { at::pow_out(o, c.in(0), e); });
    }
    return elementwise(
        c, [&] { return at::pow(c.in(0), exponent); },
        [&](at::Tensor &o) { at::pow_out(o, c.in(0), exponent); });
  });
  table.add(OpKind::FloorDivide, [](Ctx &c) {
    return elementwise(
        c, [&] { return at::div(c.in(0), c.in(1), "floor"); },
        [&](at::Tensor &o) { at::div_out(o, c.in(0), c.in(1), "floor"); });
  });
  table.add(OpKind::Compare, [](Ctx &c) {
    const OpAttrs &a = c.a;
    const at::Tensor &l = c.in(0), &r = c.in(1);
    switch (a.predicate) {
    case ComparePredicate::Eq:
      return c.set(0, at::eq(l, r));
    case ComparePredicate::Ne:
      return c.set(0, at::ne(l, r));
    case ComparePredicate::Lt:
      return c.set(0, at::lt(l, r));
    case ComparePredicate::Le:
      return c.set(0, at::le(l, r));
    case ComparePredicate::Gt:
      return c.set(0, at::gt(l, r));
    case ComparePredicate::Ge:
      return c.set(0, at::ge(l, r));
    }
  });
  table.add(OpKind::Where, [](Ctx &c) {
    return elementwise(
        c, [&] { return at::where(c.in(0), c.in(1), c.in(2)); },
        [&](at::Tensor &o) { at::where_out(o, c.in(0), c.in(1), c.in(2)); });
  });
  table.add(OpKind::GeluBackward, [](Ctx &c) {
    const OpAttrs &a = c.a;
    if (a.tanhApproximation && denseFloat(c.in(0)) && denseFloat(c.in(1))) {
      const at::Tensor &dy = c.in(0), &x = c.in(1);
      at::Tensor dx = resultLike(c, dy);
      const float *pdy = dy.data_ptr<float>(), *px = x.data_ptr<float>();
      float *pdx = dx.data_ptr<float>();
      forElements(x.numel(), [&](int64_t begin, int64_t end) {
        vecmath::geluTanhBackward(pdy + begin, px + begin, pdx + begin,
                                  end - begin);
      });
      return c.set(0, dx);
    }
    const char *approx = a.tanhApproximation ? "tanh" : "none";
    // LibTorch 1.13's exact GELU kernels compute wrong values when their
    // operands and result are laid out differently (a transposed gradient,
    // or a result written into a transposed view: errors up to 1e37): such
    // a backward runs on contiguous operands into a fresh tensor, copied
    // into the planned one.
    const at::Tensor &dy = c.in(0), &x = c.in(1);
    at::Tensor target = c.inPlace(0);
    bool mixed = dy.strides() != x.strides() ||
                 (target.defined() && target.strides() != x.strides());
    if (!a.tanhApproximation && mixed) {
      at::Tensor dx =
          at::gelu_backward(dy.contiguous(), x.contiguous(), approx);
      if (!target.defined())
        return c.set(0, dx);
      target.copy_(dx);
      return c.set(0, target);
    }
    return elementwise(
        c, [&] { return at::gelu_backward(dy, x, approx); },
        [&](at::Tensor &o) { at::gelu_backward_out(o, dy, x, approx); });
  });
  table.add(OpKind::DropoutMask, [](Ctx &c) {
    c.set(0, dropoutMask(c, c.resultType(0), c.evaluating() ? 0.0 : c.a.p));
  });
}

#undef MERAK_UNARY
#undef MERAK_BINARY

} // namespace merak::runtime::cpu

//===- Elementwise.cpp - CUDA host kernels: elementwise ops ---------------===//
//
// The unary and binary ops, comparisons, `where`, `clamp`, `cast`, `tril`
// and `triu`, GELU and its gradient, and dropout with its mask, as the CPU
// backend (lib/Runtime/CPU/Elementwise.cpp) defines them. Operands are
// read with their strides and broadcast; results are dense. Dropout draws
// from Philox-4x32-10 keyed by the step (Elementwise.h), not from
// PyTorch's CPU generator: its masks have the CPU's distribution, not its
// values.
//
//===----------------------------------------------------------------------===//

#include "Elementwise.h"
#include "Copy.h"
#include "CudaKernels.h"

namespace merak::runtime::cuda {
namespace {

/// Result 0 is operand 0 unchanged: a view of it where the plan says so,
/// else a copy into the result's own storage (a fresh result must not
/// share the operand's).
void identity(Ctx &c) {
  if (!c.inst.storage.empty() &&
      c.inst.storage[0].kind == ResultStorage::Kind::View) {
    c.viewResult(0, 0, 0, c.in(0).strides);
    return;
  }
  View src = c.view(0);
  CudaTensor &out = c.result(0);
  if (out.data() != src.data || !src.isContiguous())
    copyStrided(src, out.view(), c.stream());
}

template <UnaryOp Op> void unary(Ctx &c) {
  View in = c.view(0);
  launchUnary(Op, in, c.result(0).view(), c.stream());
}

template <BinaryOp Op> void binary(Ctx &c) {
  View lhs = c.view(0), rhs = c.view(1);
  launchBinary(Op, lhs, rhs, c.result(0).view(), c.stream());
}

/// Dropout's mask for `p` in (0, 1] into `out` (times `in` when given),
/// from the step's generator; a random mask moves the counter on.
void dropout(Ctx &c, const View *in, const View &out, double p) {
  launchDropout(in, out, p, c.dev.dropoutKey, c.dev.dropoutOffset, c.stream());
  if (p < 1)
    c.dev.dropoutOffset = dropoutOffsetAfter(c.dev.dropoutOffset, out.numel());
}

} // namespace

void registerElementwiseKernels(KernelTable &table) {
  table.add(OpKind::Neg, unary<UnaryOp::Neg>);
  table.add(OpKind::Abs, unary<UnaryOp::Abs>);
  table.add(OpKind::Exp, unary<UnaryOp::Exp>);
  table.add(OpKind::Log, unary<UnaryOp::Log>);
  table.add(OpKind::Sin, unary<UnaryOp::Sin>);
  table.add(OpKind::Cos, unary<UnaryOp::Cos>);
  table.add(OpKind::Sqrt, unary<UnaryOp::Sqrt>);
  table.add(OpKind::Rsqrt, unary<UnaryOp::Rsqrt>);
  table.add(OpKind::Reciprocal, unary<UnaryOp::Reciprocal>);
  table.add(OpKind::Erf, unary<UnaryOp::Erf>);
  table.add(OpKind::Tanh, unary<UnaryOp::Tanh>);
  table.add(OpKind::Sigmoid, unary<UnaryOp::Sigmoid>);
  table.add(OpKind::Silu, unary<UnaryOp::Silu>);
  table.add(OpKind::Relu, unary<UnaryOp::Relu>);
  table.add(OpKind::Not, unary<UnaryOp::Not>);
  table.add(OpKind::Add, binary<BinaryOp::Add>);
  table.add(OpKind::Sub, binary<BinaryOp::Sub>);
  table.add(OpKind::Mul, binary<BinaryOp::Mul>);
  table.add(OpKind::Div, binary<BinaryOp::Div>);
  table.add(OpKind::Remainder, binary<BinaryOp::Remainder>);
  table.add(OpKind::FloorDivide, binary<BinaryOp::FloorDivide>);
  table.add(OpKind::Minimum, binary<BinaryOp::Minimum>);
  table.add(OpKind::Maximum, binary<BinaryOp::Maximum>);
  table.add(OpKind::And, binary<BinaryOp::And>);
  table.add(OpKind::Or, binary<BinaryOp::Or>);

  table.add(OpKind::Gelu, [](Ctx &c) {
    View in = c.view(0);
    launchUnary(c.a.tanhApproximation ? UnaryOp::GeluTanh : UnaryOp::Gelu, in,
                c.result(0).view(), c.stream());
  });
  table.add(OpKind::GeluBackward, [](Ctx &c) {
    View dy = c.view(0), x = c.view(1);
    launchBinary(c.a.tanhApproximation ? BinaryOp::GeluTanhBackward
                                       : BinaryOp::GeluBackward,
                 dy, x, c.result(0).view(), c.stream());
  });
  table.add(OpKind::Pow, [](Ctx &c) {
    // A rank-0 exponent of a tensor came from a Python number: PyTorch
    // runs pow(Tensor, Scalar) and its shortcuts (the CPU kernel's rule).
    bool scalarExponent =
        c.operandType(1).shape.empty() && !c.operandType(0).shape.empty();
    View base = c.view(0), exponent = c.view(1);
    launchBinary(scalarExponent ? BinaryOp::PowScalar : BinaryOp::Pow, base,
                 exponent, c.result(0).view(), c.stream());
  });
  table.add(OpKind::Compare, [](Ctx &c) {
    BinaryOp op = BinaryOp::Eq;
    switch (c.a.predicate) {
    case ComparePredicate::Eq:
      op = BinaryOp::Eq;
      break;
    case ComparePredicate::Ne:
      op = BinaryOp::Ne;
      break;
    case ComparePredicate::Lt:
      op = BinaryOp::Lt;
      break;
    case ComparePredicate::Le:
      op = BinaryOp::Le;
      break;
    case ComparePredicate::Gt:
      op = BinaryOp::Gt;
      break;
    case ComparePredicate::Ge:
      op = BinaryOp::Ge;
      break;
    }
    View lhs = c.view(0), rhs = c.view(1);
    launchBinary(op, lhs, rhs, c.result(0).view(), c.stream());
  });
  table.add(OpKind::Where, [](Ctx &c) {
    View condition = c.view(0), onTrue = c.view(1), onFalse = c.view(2);
    launchWhere(condition, onTrue, onFalse, c.result(0).view(), c.stream());
  });
  table.add(OpKind::Clamp, [](Ctx &c) {
    const OpAttrs &a = c.a;
    if (!a.min && !a.max)
      return identity(c);
    View in = c.view(0);
    launchClamp(in, c.result(0).view(), a.min.has_value(), a.min.value_or(0),
                a.max.has_value(), a.max.value_or(0), c.stream());
  });
  table.add(OpKind::Cast, [](Ctx &c) {
    if (c.operandType(0).dtype == c.resultType(0).dtype)
      return identity(c);
    View in = c.view(0);
    copyStrided(in, c.result(0).view(), c.stream());
  });
  table.add(OpKind::Tril, [](Ctx &c) {
    View in = c.view(0);
    launchTriangle(in, c.result(0).view(), c.a.diagonal, false, c.stream());
  });
  table.add(OpKind::Triu, [](Ctx &c) {
    View in = c.view(0);
    launchTriangle(in, c.result(0).view(), c.a.diagonal, true, c.stream());
  });
  table.add(OpKind::Dropout, [](Ctx &c) {
    const OpAttrs &a = c.a;
    if (!a.training || a.p == 0 || c.evaluating())
      return identity(c);
    View in = c.view(0);
    dropout(c, &in, c.result(0).view(), a.p);
  });
  table.add(OpKind::DropoutMask, [](Ctx &c) {
    double p = c.evaluating() ? 0.0 : c.a.p;
    View out = c.result(0).view();
    if (p == 0)
      return fill(out, 1.0, c.stream());
    dropout(c, nullptr, out, p);
  });
}

} // namespace merak::runtime::cuda

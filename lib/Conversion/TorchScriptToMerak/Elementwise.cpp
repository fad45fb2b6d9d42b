//===- Elementwise.cpp - elementwise aten ops -----------------------------===//
//
// Elementwise arithmetic, comparisons and activations, with PyTorch's
// broadcasting and type promotion.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

namespace merak::torchscript {

void Importer::populateElementwiseConverters(ConverterTable &table) {
  // Elementwise binary with broadcasting and type promotion.
  auto addSub = [](bool sub, bool reverse) {
    return [sub, reverse](Importer &im, jit::Node *n) -> LogicalResult {
      double alpha = 1.0;
      if (n->inputs().size() >= 3) {
        auto a = im.floatArg(n, 2, "alpha");
        TRY(a);
        alpha = *a;
      }
      return im.binary(n, [&](Value l, Value r) -> Value {
        if (alpha != 1.0) {
          Value s = im.materialize(c10::IValue(alpha), im.curLoc,
                                   typeOf(reverse ? l : r).getElementType());
          // alpha scales `other` (the second aten operand).
          if (reverse)
            l = im.make1<MulOp>(l, s);
          else
            r = im.make1<MulOp>(r, s);
          if (!l || !r)
            return {};
        }
        if (!sub)
          return im.make1<AddOp>(l, r);
        return reverse ? im.make1<SubOp>(r, l) : im.make1<SubOp>(l, r);
      });
    };
  };
  table["aten::add"] = table["aten::add_"] = addSub(false, false);
  table["aten::sub"] = table["aten::sub_"] = addSub(true, false);
  table["aten::rsub"] = addSub(true, true);
#define BINARY(KIND, OP, FLOAT)                                                \
  CONVERT(KIND) {                                                              \
    return im.binary(                                                          \
        n, [&](Value l, Value r) { return im.make1<OP>(l, r); }, FLOAT);       \
  };
  BINARY("aten::mul", MulOp, false)
  BINARY("aten::mul_", MulOp, false)
  BINARY("aten::pow", PowOp, false)
  BINARY("aten::remainder", RemainderOp, false)
  BINARY("aten::floor_divide", FloorDivideOp, false)
  BINARY("aten::minimum", MinimumOp, false)
  BINARY("aten::maximum", MaximumOp, false)
  BINARY("aten::logical_and", AndOp, false)
  BINARY("aten::logical_or", OrOp, false)
  BINARY("aten::__and__", AndOp, false)
  BINARY("aten::__or__", OrOp, false)
  BINARY("aten::bitwise_and", AndOp, false)
  BINARY("aten::bitwise_or", OrOp, false)
#undef BINARY
  auto div = [](Importer &im, jit::Node *n) -> LogicalResult {
    std::string mode;
    if (n->inputs().size() >= 3 && !im.isNone(n, 2)) {
      auto m = im.constArg(n, 2, "rounding_mode");
      TRY(m);
      mode = m->toStringRef();
    }
    if (mode == "floor")
      return im.binary(
          n, [&](Value l, Value r) { return im.make1<FloorDivideOp>(l, r); });
    if (!mode.empty())
      return im.unsupported(n, "rounding_mode=" + mode);
    return im.binary(
        n, [&](Value l, Value r) { return im.make1<DivOp>(l, r); },
        /*floatResult=*/true);
  };
  table["aten::div"] = table["aten::div_"] = div;
  table["aten::true_divide"] = div;
  auto minMax = [](bool isMax) {
    return [isMax](Importer &im, jit::Node *n) -> LogicalResult {
      if (n->inputs().size() == 2 && im.in(n, 1).kind != Slot::Kind::Const)
        return im.binary(n, [&](Value l, Value r) {
          return isMax ? im.make1<MaximumOp>(l, r) : im.make1<MinimumOp>(l, r);
        });
      if (n->inputs().size() == 2 && im.in(n, 1).iv.isTensor())
        return im.binary(n, [&](Value l, Value r) {
          return isMax ? im.make1<MaximumOp>(l, r) : im.make1<MinimumOp>(l, r);
        });
      if (!isMax)
        return im.unsupported(n, "reduction");
      if (n->outputs().size() == 2 && n->output(1)->hasUses())
        return im.unsupported(n, "with indices");
      return im.reduce(n, "max");
    };
  };
  table["aten::max"] = minMax(true);
  table["aten::min"] = minMax(false);
  CONVERT("aten::amax") { return im.reduce(n, "max"); };

  auto cmp = [](ComparePredicate p) {
    return [p](Importer &im, jit::Node *n) { return im.compare(n, p); };
  };
  table["aten::eq"] = cmp(ComparePredicate::eq);
  table["aten::ne"] = cmp(ComparePredicate::ne);
  table["aten::lt"] = cmp(ComparePredicate::lt);
  table["aten::le"] = cmp(ComparePredicate::le);
  table["aten::gt"] = cmp(ComparePredicate::gt);
  table["aten::ge"] = cmp(ComparePredicate::ge);

  // Elementwise unary.
  table["aten::neg"] = [](Importer &im, jit::Node *n) {
    return im.unary<NegOp>(n);
  };
  table["aten::abs"] = [](Importer &im, jit::Node *n) {
    return im.unary<AbsOp>(n);
  };
  table["aten::relu"] = table["aten::relu_"] = [](Importer &im, jit::Node *n) {
    return im.unary<ReluOp>(n);
  };
#define FLOAT_UNARY(KIND, OP)                                                  \
  table[KIND] = [](Importer &im, jit::Node *n) { return im.floatUnary<OP>(n); };
  FLOAT_UNARY("aten::exp", ExpOp)
  FLOAT_UNARY("aten::log", LogOp)
  FLOAT_UNARY("aten::sin", SinOp)
  FLOAT_UNARY("aten::cos", CosOp)
  FLOAT_UNARY("aten::sqrt", SqrtOp)
  FLOAT_UNARY("aten::rsqrt", RsqrtOp)
  FLOAT_UNARY("aten::reciprocal", ReciprocalOp)
  FLOAT_UNARY("aten::erf", ErfOp)
  FLOAT_UNARY("aten::tanh", TanhOp)
  FLOAT_UNARY("aten::tanh_", TanhOp)
  FLOAT_UNARY("aten::sigmoid", SigmoidOp)
  FLOAT_UNARY("aten::sigmoid_", SigmoidOp)
  FLOAT_UNARY("aten::silu", SiluOp)
  FLOAT_UNARY("aten::silu_", SiluOp)
#undef FLOAT_UNARY
  auto logicalNot = [](Importer &im, jit::Node *n) -> LogicalResult {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    if (!typeOf(x).getElementType().isInteger(1))
      return im.unsupported(n, "non-boolean operand");
    return im.unary<NotOp>(n);
  };
  table["aten::logical_not"] = table["aten::bitwise_not"] = logicalNot;
  CONVERT("aten::square") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    Value v = im.make1<MulOp>(x, x);
    return im.bind(n, v);
  };
  CONVERT("aten::gelu") {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto approx = GeluApproximation::none;
    if (n->inputs().size() >= 2) {
      auto a = im.constArg(n, 1, "approximate");
      TRY(a);
      if (a->toStringRef() == "tanh")
        approx = GeluApproximation::tanh;
    }
    Value v = im.make1<GeluOp>(x, GeluApproximationAttr::get(im.ctx, approx));
    return im.bind(n, v);
  };
  auto clamp = [](int which) { // 0 clamp, 1 clamp_min, 2 clamp_max
    return [which](Importer &im, jit::Node *n) -> LogicalResult {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      FloatAttr lo, hi;
      auto bound = [&](size_t i, FloatAttr &out) -> LogicalResult {
        if (im.isNone(n, i))
          return success();
        if (!im.in(n, i).isConst() || im.in(n, i).iv.isTensor())
          return im.unsupported(n, "tensor bounds");
        auto v = im.floatArg(n, i, "bound");
        TRY(v);
        out = im.b.getF64FloatAttr(*v);
        return success();
      };
      if (which == 0) {
        TRY(bound(1, lo));
        TRY(bound(2, hi));
      } else {
        TRY(bound(1, which == 1 ? lo : hi));
      }
      Value v = im.make1<ClampOp>(x, lo, hi);
      return im.bind(n, v);
    };
  };
  table["aten::clamp"] = table["aten::clamp_"] = table["aten::clip"] = clamp(0);
  auto hardtanh = [](double lo, double hi, bool fromArgs) {
    return [=](Importer &im, jit::Node *n) -> LogicalResult {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      double l = lo, h = hi;
      if (fromArgs && n->inputs().size() >= 3) {
        auto a = im.floatArg(n, 1, "min_val");
        TRY(a);
        auto c = im.floatArg(n, 2, "max_val");
        TRY(c);
        l = *a;
        h = *c;
      }
      Value v = im.make1<ClampOp>(x, im.b.getF64FloatAttr(l),
                                  im.b.getF64FloatAttr(h));
      return im.bind(n, v);
    };
  };
  table["aten::hardtanh"] = table["aten::hardtanh_"] =
      hardtanh(-1.0, 1.0, true);
  table["aten::relu6"] = table["aten::relu6_"] = hardtanh(0.0, 6.0, false);
  table["aten::clamp_min"] = clamp(1);
  table["aten::clamp_max"] = clamp(2);
  auto triangle = [](bool lower) {
    return [lower](Importer &im, jit::Node *n) -> LogicalResult {
      Value x = im.tensorArg(n, 0);
      if (!x)
        return failure();
      int64_t diag = 0;
      if (n->inputs().size() >= 2) {
        auto d = im.intArg(n, 1, "diagonal");
        TRY(d);
        diag = *d;
      }
      Value v = lower ? im.make1<TrilOp>(x, diag) : im.make1<TriuOp>(x, diag);
      return im.bind(n, v);
    };
  };
  table["aten::tril"] = triangle(true);
  table["aten::triu"] = triangle(false);
  auto dropout = [](Importer &im, jit::Node *n) -> LogicalResult {
    Value x = im.tensorArg(n, 0);
    if (!x)
      return failure();
    auto p = im.floatArg(n, 1, "p");
    TRY(p);
    auto train = im.boolArg(n, 2, "train");
    TRY(train);
    Value v = im.make1<DropoutOp>(x, im.b.getF64FloatAttr(*p),
                                  im.b.getBoolAttr(*train));
    return im.bind(n, v);
  };
  table["aten::dropout"] = table["aten::dropout_"] = dropout;
}

} // namespace merak::torchscript

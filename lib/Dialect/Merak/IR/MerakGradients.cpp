//===- MerakGradients.cpp - vector-Jacobian products of merak ops ---------===//
//
// GradientOpInterface implementations, one per op, next to the op
// definitions. Each builds the gradients of an op's operands from the
// gradients of its results, with PyTorch's autograd formulas, using merak
// ops (and the dedicated `*_backward` ops where a kernel of its own is
// cheaper or more exact).
//
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/IR/MerakOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/STLExtras.h"

#include <cmath>

using namespace mlir;
using namespace merak;

namespace {

RankedTensorType typeOf(Value v) {
  return llvm::cast<RankedTensorType>(v.getType());
}

bool isFloat(Value v) { return isa<FloatType>(typeOf(v).getElementType()); }

/// A rank-0 constant of `elem` type.
Value scalar(OpBuilder &b, Location loc, Type elem, double v) {
  auto type = RankedTensorType::get({}, elem);
  Attribute a = isa<FloatType>(elem)
                    ? Attribute(b.getFloatAttr(elem, v))
                    : Attribute(b.getIntegerAttr(elem, (int64_t)v));
  return b.create<ConstantOp>(loc, type, DenseElementsAttr::get(type, a));
}

Value scalarLike(OpBuilder &b, Location loc, Value like, double v) {
  return scalar(b, loc, typeOf(like).getElementType(), v);
}

Value zerosOf(OpBuilder &b, Location loc, RankedTensorType type) {
  Attribute zero = isa<FloatType>(type.getElementType())
                       ? Attribute(b.getFloatAttr(type.getElementType(), 0.0))
                       : Attribute(b.getIntegerAttr(type.getElementType(), 0));
  return b.create<ConstantOp>(loc, type, DenseElementsAttr::get(type, zero));
}

/// Sums `g` over the dimensions that broadcasting added or stretched, so
/// that it has `target`'s shape.
Value sumToShape(OpBuilder &b, Location loc, Value g, RankedTensorType target) {
  auto gt = typeOf(g);
  if (gt.getShape() == target.getShape())
    return g;
  int64_t diff = gt.getRank() - target.getRank();
  SmallVector<int64_t> dims;
  for (int64_t i = 0; i < gt.getRank(); ++i)
    if (i < diff || (target.getDimSize(i - diff) == 1 && gt.getDimSize(i) != 1))
      dims.push_back(i);
  Value r = g;
  if (!dims.empty())
    r = b.create<ReduceSumOp>(loc, g, dims, false);
  if (typeOf(r).getShape() != target.getShape())
    r = b.create<ReshapeOp>(loc, r, target.getShape());
  return r;
}

Value castTo(OpBuilder &b, Location loc, Value v, Type elem) {
  auto t = typeOf(v);
  if (t.getElementType() == elem)
    return v;
  return b.create<CastOp>(loc, RankedTensorType::get(t.getShape(), elem), v);
}

/// 1.0 where `cond` holds, else 0.0, in `like`'s element type.
Value maskOf(OpBuilder &b, Location loc, Value cond, Value like) {
  return castTo(b, loc, cond, typeOf(like).getElementType());
}

Value mul(OpBuilder &b, Location loc, Value x, Value y) {
  return b.create<MulOp>(loc, x, y);
}
Value add(OpBuilder &b, Location loc, Value x, Value y) {
  return b.create<AddOp>(loc, x, y);
}
Value sub(OpBuilder &b, Location loc, Value x, Value y) {
  return b.create<SubOp>(loc, x, y);
}
Value div(OpBuilder &b, Location loc, Value x, Value y) {
  return b.create<DivOp>(loc, x, y);
}
Value cmp(OpBuilder &b, Location loc, ComparePredicate p, Value x, Value y) {
  return b.create<CompareOp>(loc, p, x, y);
}

/// `dim` counted from 0. I64Attr getters return uint64_t, so a negative
/// `dim` attribute must reach here as int64_t to compare below zero.
int64_t normalizeDim(int64_t dim, int64_t rank) {
  return dim < 0 ? dim + rank : dim;
}

/// Swaps the last two dimensions.
Value transposeLast2(OpBuilder &b, Location loc, Value v) {
  int64_t r = typeOf(v).getRank();
  SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, r));
  std::swap(perm[r - 1], perm[r - 2]);
  return b.create<PermuteOp>(loc, v, perm);
}

} // namespace

#define GRADIENT(OP)                                                           \
  LogicalResult OP::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,  \
                                   SmallVectorImpl<Value> &operandGrads)
#define SETUP()                                                                \
  Location loc = getLoc();                                                     \
  operandGrads.assign(getOperation()->getNumOperands(), Value());              \
  Value g = resultGrads.empty() ? Value() : resultGrads[0];                    \
  if (!g)                                                                      \
    return success();

//===----------------------------------------------------------------------===//
// Elementwise unary
//===----------------------------------------------------------------------===//

GRADIENT(NegOp) {
  SETUP();
  operandGrads[0] = b.create<NegOp>(loc, g);
  return success();
}

GRADIENT(AbsOp) {
  SETUP();
  if (!isFloat(getInput()))
    return success();
  Value zero = scalarLike(b, loc, getInput(), 0.0);
  Value pos =
      maskOf(b, loc, cmp(b, loc, ComparePredicate::gt, getInput(), zero), g);
  Value neg =
      maskOf(b, loc, cmp(b, loc, ComparePredicate::lt, getInput(), zero), g);
  operandGrads[0] = mul(b, loc, g, sub(b, loc, pos, neg));
  return success();
}

GRADIENT(ExpOp) {
  SETUP();
  operandGrads[0] = mul(b, loc, g, getResult());
  return success();
}

GRADIENT(LogOp) {
  SETUP();
  operandGrads[0] = div(b, loc, g, getInput());
  return success();
}

GRADIENT(SinOp) {
  SETUP();
  operandGrads[0] = mul(b, loc, g, b.create<CosOp>(loc, getInput()));
  return success();
}

GRADIENT(CosOp) {
  SETUP();
  operandGrads[0] =
      mul(b, loc, g, b.create<NegOp>(loc, b.create<SinOp>(loc, getInput())));
  return success();
}

GRADIENT(SqrtOp) {
  SETUP();
  // g / (2 * sqrt(x))
  operandGrads[0] =
      div(b, loc, g,
          mul(b, loc, getResult(), scalarLike(b, loc, getResult(), 2.0)));
  return success();
}

GRADIENT(RsqrtOp) {
  SETUP();
  // -0.5 * g * y^3
  Value y = getResult();
  Value y3 = mul(b, loc, mul(b, loc, y, y), y);
  operandGrads[0] =
      mul(b, loc, mul(b, loc, g, y3), scalarLike(b, loc, y, -0.5));
  return success();
}

GRADIENT(ReciprocalOp) {
  SETUP();
  Value y = getResult();
  operandGrads[0] = b.create<NegOp>(loc, mul(b, loc, g, mul(b, loc, y, y)));
  return success();
}

GRADIENT(ErfOp) {
  SETUP();
  Value x = getInput();
  Value e = b.create<ExpOp>(loc, b.create<NegOp>(loc, mul(b, loc, x, x)));
  operandGrads[0] = mul(
      b, loc, g, mul(b, loc, e, scalarLike(b, loc, x, 2.0 / std::sqrt(M_PI))));
  return success();
}

GRADIENT(TanhOp) {
  SETUP();
  Value y = getResult();
  operandGrads[0] = mul(
      b, loc, g, sub(b, loc, scalarLike(b, loc, y, 1.0), mul(b, loc, y, y)));
  return success();
}

GRADIENT(SigmoidOp) {
  SETUP();
  Value y = getResult();
  operandGrads[0] = mul(
      b, loc, g, mul(b, loc, y, sub(b, loc, scalarLike(b, loc, y, 1.0), y)));
  return success();
}

GRADIENT(SiluOp) {
  SETUP();
  // s * (1 + x * (1 - s)), s = sigmoid(x)
  Value x = getInput();
  Value s = b.create<SigmoidOp>(loc, x);
  Value one = scalarLike(b, loc, x, 1.0);
  Value d =
      mul(b, loc, s, add(b, loc, one, mul(b, loc, x, sub(b, loc, one, s))));
  operandGrads[0] = mul(b, loc, g, d);
  return success();
}

GRADIENT(ReluOp) {
  SETUP();
  if (!isFloat(getInput()))
    return success();
  // PyTorch's threshold_backward: gradient where the result is positive.
  Value pos = cmp(b, loc, ComparePredicate::gt, getResult(),
                  scalarLike(b, loc, getResult(), 0.0));
  operandGrads[0] = b.create<WhereOp>(loc, pos, g, scalarLike(b, loc, g, 0.0));
  return success();
}

GRADIENT(NotOp) {
  operandGrads.assign(1, Value());
  return success();
}

GRADIENT(GeluOp) {
  SETUP();
  operandGrads[0] = b.create<GeluBackwardOp>(loc, getType(), g, getInput(),
                                             getApproximateAttr());
  return success();
}

GRADIENT(ClampOp) {
  SETUP();
  if (!isFloat(getInput()))
    return success();
  Value x = getInput();
  Value keep;
  if (auto lo = getMinAttr())
    keep = cmp(b, loc, ComparePredicate::ge, x,
               scalarLike(b, loc, x, lo.getValueAsDouble()));
  if (auto hi = getMaxAttr()) {
    Value h = cmp(b, loc, ComparePredicate::le, x,
                  scalarLike(b, loc, x, hi.getValueAsDouble()));
    keep = keep ? Value(b.create<AndOp>(loc, keep, h)) : h;
  }
  operandGrads[0] =
      keep ? Value(b.create<WhereOp>(loc, keep, g, scalarLike(b, loc, g, 0.0)))
           : g;
  return success();
}

/// A training dropout that draws a mask becomes `x * dropout_mask(x)`, so
/// that backward multiplies by the same mask.
bool DropoutOp::expandForDifferentiation(OpBuilder &b) {
  if (!getTraining() || getP().convertToDouble() <= 0.0)
    return false;
  b.setInsertionPoint(*this);
  Value mask =
      b.create<DropoutMaskOp>(getLoc(), getType(), getInput(), getPAttr());
  Value y = b.create<MulOp>(getLoc(), getInput(), mask);
  getResult().replaceAllUsesWith(y);
  erase();
  return true;
}

GRADIENT(DropoutOp) {
  SETUP();
  if (getTraining() && getP().convertToDouble() > 0.0)
    return emitOpError("with p > 0 in training mode has no gradient of its "
                       "own; expandForDifferentiation turns it into a mask");
  operandGrads[0] = g;
  return success();
}

GRADIENT(DropoutMaskOp) {
  // The mask depends on the input's type only.
  operandGrads.assign(1, Value());
  return success();
}

GRADIENT(TrilOp) {
  SETUP();
  operandGrads[0] = b.create<TrilOp>(loc, g, getDiagonal());
  return success();
}

GRADIENT(TriuOp) {
  SETUP();
  operandGrads[0] = b.create<TriuOp>(loc, g, getDiagonal());
  return success();
}

GRADIENT(CastOp) {
  SETUP();
  if (!isFloat(getInput()) || !isFloat(getResult()))
    return success();
  operandGrads[0] = castTo(b, loc, g, typeOf(getInput()).getElementType());
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise binary
//===----------------------------------------------------------------------===//

namespace {
/// Stores the gradients of a broadcasting binary op, summed back to each
/// operand's shape; integer operands get none.
void setBinaryGrads(OpBuilder &b, Location loc, Operation *op, Value gl,
                    Value gr, SmallVectorImpl<Value> &operandGrads) {
  Value l = op->getOperand(0), r = op->getOperand(1);
  if (gl && isFloat(l))
    operandGrads[0] = sumToShape(b, loc, gl, typeOf(l));
  if (gr && isFloat(r))
    operandGrads[1] = sumToShape(b, loc, gr, typeOf(r));
}
} // namespace

GRADIENT(AddOp) {
  SETUP();
  setBinaryGrads(b, loc, *this, g, g, operandGrads);
  return success();
}

GRADIENT(SubOp) {
  SETUP();
  setBinaryGrads(b, loc, *this, g, b.create<NegOp>(loc, g), operandGrads);
  return success();
}

GRADIENT(MulOp) {
  SETUP();
  if (!isFloat(getLhs()))
    return success();
  setBinaryGrads(b, loc, *this, mul(b, loc, g, getRhs()),
                 mul(b, loc, g, getLhs()), operandGrads);
  return success();
}

GRADIENT(DivOp) {
  SETUP();
  if (!isFloat(getLhs()))
    return success();
  Value gl = div(b, loc, g, getRhs());
  // -g * lhs / rhs^2 = -gl * result / ... written as PyTorch does: -g*a/(b*b)
  Value gr = b.create<NegOp>(loc, div(b, loc, mul(b, loc, g, getLhs()),
                                      mul(b, loc, getRhs(), getRhs())));
  setBinaryGrads(b, loc, *this, gl, gr, operandGrads);
  return success();
}

GRADIENT(PowOp) {
  SETUP();
  if (!isFloat(getLhs()))
    return success();
  Value a = getLhs(), e = getRhs();
  // d/da = e * a^(e-1); d/de = a^e * log(a), zero where a == 0 (PyTorch
  // masks it).
  Value em1 = sub(b, loc, e, scalarLike(b, loc, e, 1.0));
  Value gl = mul(b, loc, g, mul(b, loc, e, b.create<PowOp>(loc, a, em1)));
  Value gr;
  if (!getRhs().getDefiningOp<ConstantOp>()) {
    Value zero = scalarLike(b, loc, a, 0.0);
    Value isZero = cmp(b, loc, ComparePredicate::eq, a, zero);
    Value lg = b.create<WhereOp>(loc, isZero, zero, b.create<LogOp>(loc, a));
    gr = mul(b, loc, g, mul(b, loc, getResult(), lg));
  }
  setBinaryGrads(b, loc, *this, gl, gr, operandGrads);
  return success();
}

GRADIENT(RemainderOp) {
  SETUP();
  if (!isFloat(getLhs()))
    return success();
  Value gr = b.create<NegOp>(
      loc, mul(b, loc, g, b.create<FloorDivideOp>(loc, getLhs(), getRhs())));
  setBinaryGrads(b, loc, *this, g, gr, operandGrads);
  return success();
}

GRADIENT(FloorDivideOp) {
  operandGrads.assign(2, Value());
  return success();
}

namespace {
/// minimum/maximum: the gradient goes to the selected operand, split
/// evenly on ties (PyTorch's rule).
LogicalResult minMaxGrads(OpBuilder &b, Location loc, Operation *op, Value g,
                          bool isMax, SmallVectorImpl<Value> &operandGrads) {
  Value l = op->getOperand(0), r = op->getOperand(1);
  if (!isFloat(l))
    return success();
  Value half = scalarLike(b, loc, g, 0.5);
  Value eq = maskOf(b, loc, cmp(b, loc, ComparePredicate::eq, l, r), g);
  Value lwin = maskOf(
      b, loc,
      cmp(b, loc, isMax ? ComparePredicate::gt : ComparePredicate::lt, l, r),
      g);
  Value rwin = maskOf(
      b, loc,
      cmp(b, loc, isMax ? ComparePredicate::lt : ComparePredicate::gt, l, r),
      g);
  Value tie = mul(b, loc, eq, half);
  setBinaryGrads(b, loc, op, mul(b, loc, g, add(b, loc, lwin, tie)),
                 mul(b, loc, g, add(b, loc, rwin, tie)), operandGrads);
  return success();
}
} // namespace

GRADIENT(MinimumOp) {
  SETUP();
  return minMaxGrads(b, loc, *this, g, false, operandGrads);
}

GRADIENT(MaximumOp) {
  SETUP();
  return minMaxGrads(b, loc, *this, g, true, operandGrads);
}

GRADIENT(AndOp) {
  operandGrads.assign(2, Value());
  return success();
}

GRADIENT(OrOp) {
  operandGrads.assign(2, Value());
  return success();
}

GRADIENT(CompareOp) {
  operandGrads.assign(2, Value());
  return success();
}

GRADIENT(WhereOp) {
  SETUP();
  Value zero = scalarLike(b, loc, g, 0.0);
  Value c = getCondition();
  if (isFloat(getOnTrue()))
    operandGrads[1] = sumToShape(b, loc, b.create<WhereOp>(loc, c, g, zero),
                                 typeOf(getOnTrue()));
  if (isFloat(getOnFalse()))
    operandGrads[2] = sumToShape(b, loc, b.create<WhereOp>(loc, c, zero, g),
                                 typeOf(getOnFalse()));
  return success();
}

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

GRADIENT(LinearOp) {
  SETUP();
  Value x = getInput(), w = getWeight();
  auto xt = typeOf(x), wt = typeOf(w);
  int64_t n = wt.getDimSize(0), k = wt.getDimSize(1);
  if (xt.getRank() > 2) {
    // Leading dimensions kept: whichever of them a mesh axis splits stays
    // split (a flattened [M, K] could be split only along its outermost).
    operandGrads[0] = b.create<MatmulOp>(loc, g, w);
    operandGrads[1] = b.create<LinearWeightBackwardOp>(loc, wt, g, x);
    if (getBias()) {
      SmallVector<int64_t> leading =
          llvm::to_vector(llvm::seq<int64_t>(0, xt.getRank() - 1));
      operandGrads[2] = b.create<ReduceSumOp>(loc, g, leading, false);
    }
    return success();
  }
  int64_t m = xt.getNumElements() / k;
  // Flatten leading dims: g2 [M, N], x2 [M, K].
  Value g2 = b.create<ReshapeOp>(loc, g, ArrayRef<int64_t>{m, n});
  Value x2 = b.create<ReshapeOp>(loc, x, ArrayRef<int64_t>{m, k});
  Value dx2 = b.create<MatmulOp>(loc, g2, w);
  operandGrads[0] = b.create<ReshapeOp>(loc, dx2, xt.getShape());
  operandGrads[1] = b.create<MatmulOp>(loc, transposeLast2(b, loc, g2), x2);
  if (getBias())
    operandGrads[2] =
        b.create<ReduceSumOp>(loc, g2, ArrayRef<int64_t>{0}, false);
  return success();
}

GRADIENT(MatmulOp) {
  SETUP();
  Value l = getLhs(), r = getRhs();
  Value gl = b.create<MatmulOp>(loc, g, transposeLast2(b, loc, r));
  Value gr = b.create<MatmulOp>(loc, transposeLast2(b, loc, l), g);
  operandGrads[0] = sumToShape(b, loc, gl, typeOf(l));
  operandGrads[1] = sumToShape(b, loc, gr, typeOf(r));
  return success();
}

//===----------------------------------------------------------------------===//
// Softmax and normalization
//===----------------------------------------------------------------------===//

GRADIENT(SoftmaxOp) {
  SETUP();
  // y * (g - sum(g * y, dim)), in one op as autograd's
  // _softmax_backward_data.
  Value y = getResult();
  int64_t d = normalizeDim(getDim(), typeOf(y).getRank());
  operandGrads[0] = b.create<SoftmaxBackwardOp>(loc, y.getType(), g, y,
                                                b.getI64IntegerAttr(d));
  return success();
}

GRADIENT(MaskedAttentionOp) {
  Location loc = getLoc();
  operandGrads.assign(getOperation()->getNumOperands(), Value());
  if (resultGrads.size() > 1 && resultGrads[1])
    return emitOpError("cannot differentiate through saved: only result "
                       "may reach the loss");
  Value g = resultGrads.empty() ? Value() : resultGrads[0];
  if (!g)
    return success();
  // The FlashAttention form recomputes the probabilities from the rows'
  // log-sum-exp and reads the output for the softmax backward's row sums.
  Value output = savesLogSumExp() ? getResult() : Value();
  auto op = b.create<MaskedAttentionBackwardOp>(
      loc,
      TypeRange{getQuery().getType(), getKey().getType(), getValue().getType()},
      g, getQuery(), getKey(), getValue(), getMask(), getSaved(), output,
      getScaleAttr(), getDivideAttr());
  operandGrads[0] = op.getGradQuery();
  operandGrads[1] = op.getGradKey();
  operandGrads[2] = op.getGradValue();
  return success();
}

GRADIENT(LogSoftmaxOp) {
  SETUP();
  // g - exp(y) * sum(g, dim)
  Value y = getResult();
  int64_t d = normalizeDim(getDim(), typeOf(y).getRank());
  Value s = b.create<ReduceSumOp>(loc, g, ArrayRef<int64_t>{d}, true);
  operandGrads[0] = sub(b, loc, g, mul(b, loc, b.create<ExpOp>(loc, y), s));
  return success();
}

GRADIENT(LayerNormOp) {
  SETUP();
  auto xt = typeOf(getInput());
  auto pt = RankedTensorType::get(xt.getShape().take_back(getNormalizedRank()),
                                  xt.getElementType());
  auto op = b.create<LayerNormBackwardOp>(
      loc, TypeRange{xt, pt, pt}, g, getInput(), getWeight(), getBias(),
      getNormalizedRankAttr(), getEpsAttr());
  operandGrads[0] = op.getGradInput();
  unsigned next = 1;
  if (getWeight())
    operandGrads[next++] = op.getGradWeight();
  if (getBias())
    operandGrads[next++] = op.getGradBias();
  return success();
}

GRADIENT(RmsNormOp) {
  SETUP();
  // y = x * r * w with r = rsqrt(mean(x^2) + eps) over the normalized dims.
  Value x = getInput();
  auto xt = typeOf(x);
  int64_t rank = xt.getRank(), nr = getNormalizedRank();
  SmallVector<int64_t> normDims = llvm::to_vector(llvm::seq(rank - nr, rank));
  SmallVector<int64_t> leadDims =
      llvm::to_vector(llvm::seq<int64_t>(0, rank - nr));
  Value ms = b.create<ReduceMeanOp>(loc, mul(b, loc, x, x), normDims, true);
  Value r = b.create<RsqrtOp>(
      loc, add(b, loc, ms, scalarLike(b, loc, x, getEps().convertToDouble())));
  Value gw = getWeight() ? mul(b, loc, g, getWeight()) : g;
  // dx = r * gw - x * r^3 * mean(gw * x)
  Value m = b.create<ReduceMeanOp>(loc, mul(b, loc, gw, x), normDims, true);
  Value r3 = mul(b, loc, mul(b, loc, r, r), r);
  operandGrads[0] =
      sub(b, loc, mul(b, loc, r, gw), mul(b, loc, mul(b, loc, x, r3), m));
  if (getWeight()) {
    Value xr = mul(b, loc, mul(b, loc, g, x), r);
    operandGrads[1] =
        leadDims.empty()
            ? xr
            : Value(b.create<ReduceSumOp>(loc, xr, leadDims, false));
  }
  return success();
}

GRADIENT(BatchNormOp) {
  SETUP();
  auto op = b.create<BatchNormBackwardOp>(
      loc,
      TypeRange{getInput().getType(), getWeight().getType(),
                getWeight().getType()},
      g, getInput(), getWeight(), getRunningMean(), getRunningVar(),
      getTrainingAttr(), getEpsAttr());
  operandGrads[0] = op.getGradInput();
  operandGrads[1] = op.getGradWeight();
  operandGrads[2] = op.getGradBias();
  return success();
}

//===----------------------------------------------------------------------===//
// Embedding and indexing
//===----------------------------------------------------------------------===//

GRADIENT(EmbeddingOp) {
  SETUP();
  auto wt = typeOf(getWeight());
  operandGrads[0] = b.create<IndexBackwardOp>(
      loc, wt, g, getIndices(), b.getI64IntegerAttr(0),
      b.getI64IntegerAttr(wt.getDimSize(0)), getPaddingIdxAttr());
  return success();
}

GRADIENT(IndexOp) {
  SETUP();
  if (!isFloat(getInput()))
    return success();
  auto xt = typeOf(getInput());
  int64_t d = normalizeDim(getDim(), xt.getRank());
  operandGrads[0] = b.create<IndexBackwardOp>(
      loc, xt, g, getIndices(), b.getI64IntegerAttr(d),
      b.getI64IntegerAttr(xt.getDimSize(d)), IntegerAttr());
  return success();
}

GRADIENT(UpdateSliceOp) {
  SETUP();
  if (!isFloat(getInput()))
    return success();
  auto ut = typeOf(getUpdate());
  int64_t d = normalizeDim(getDim(), ut.getRank());
  // The input's gradient is `g` with the written rows zero; the update's is
  // those rows of `g`, gathered at position, position + 1, ...
  operandGrads[0] = b.create<UpdateSliceOp>(loc, g, zerosOf(b, loc, ut),
                                            getPosition(), getDimAttr());
  Value position = getPosition();
  auto pt = typeOf(position);
  if (pt.getRank() != 1)
    position = b.create<ReshapeOp>(loc, position, ArrayRef<int64_t>{1});
  int64_t n = ut.getDimSize(d);
  Value rows = position;
  if (n != 1) {
    auto rowsType = RankedTensorType::get({n}, pt.getElementType());
    SmallVector<APInt> offsets;
    for (int64_t i = 0; i < n; ++i)
      offsets.push_back(APInt(pt.getElementType().getIntOrFloatBitWidth(), i));
    Value arange = b.create<ConstantOp>(
        loc, rowsType, DenseElementsAttr::get(rowsType, offsets));
    rows = b.create<AddOp>(loc, position, arange);
  }
  operandGrads[1] = b.create<IndexOp>(loc, g, rows, b.getI64IntegerAttr(d));
  return success();
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

GRADIENT(ReshapeOp) {
  SETUP();
  if (!isFloat(getInput()))
    return success();
  operandGrads[0] = b.create<ReshapeOp>(loc, g, typeOf(getInput()).getShape());
  return success();
}

GRADIENT(PermuteOp) {
  SETUP();
  ArrayRef<int64_t> perm = getPermutation();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [i, p] : llvm::enumerate(perm))
    inverse[p] = i;
  operandGrads[0] = b.create<PermuteOp>(loc, g, inverse);
  return success();
}

GRADIENT(SliceOp) {
  SETUP();
  if (!isFloat(getInput()))
    return success();
  auto xt = typeOf(getInput());
  int64_t d = normalizeDim(getDim(), xt.getRank());
  operandGrads[0] = b.create<SliceBackwardOp>(
      loc, xt, g, b.getI64IntegerAttr(d), getStartAttr(), getEndAttr(),
      getStepAttr(), b.getI64IntegerAttr(xt.getDimSize(d)));
  return success();
}

GRADIENT(SelectOp) {
  SETUP();
  if (!isFloat(getInput()))
    return success();
  auto xt = typeOf(getInput());
  int64_t d = normalizeDim(getDim(), xt.getRank());
  SmallVector<int64_t> shape(xt.getShape());
  shape[d] = 1;
  Value g1 = b.create<ReshapeOp>(loc, g, shape);
  int64_t idx = getIndex();
  operandGrads[0] = b.create<SliceBackwardOp>(
      loc, xt, g1, b.getI64IntegerAttr(d), b.getI64IntegerAttr(idx),
      b.getI64IntegerAttr(idx + 1), b.getI64IntegerAttr(1),
      b.getI64IntegerAttr(xt.getDimSize(d)));
  return success();
}

GRADIENT(ConcatOp) {
  SETUP();
  int64_t rank = typeOf(g).getRank();
  int64_t d = normalizeDim(getDim(), rank);
  int64_t start = 0;
  for (auto [i, v] : llvm::enumerate(getInputs())) {
    int64_t size = typeOf(v).getDimSize(d);
    if (isFloat(v))
      operandGrads[i] = b.create<SliceOp>(loc, g, d, start, start + size, 1);
    start += size;
  }
  return success();
}

GRADIENT(ExpandOp) {
  SETUP();
  if (!isFloat(getInput()))
    return success();
  operandGrads[0] = sumToShape(b, loc, g, typeOf(getInput()));
  return success();
}

GRADIENT(PadOp) {
  SETUP();
  if (!isFloat(getInput()))
    return success();
  Value v = g;
  auto xt = typeOf(getInput());
  for (int64_t i = 0; i < xt.getRank(); ++i) {
    int64_t lo = getLow()[i];
    if (lo == 0 && getHigh()[i] == 0)
      continue;
    v = b.create<SliceOp>(loc, v, i, lo, lo + xt.getDimSize(i), 1);
  }
  operandGrads[0] = v;
  return success();
}

GRADIENT(RollOp) {
  SETUP();
  SmallVector<int64_t> shifts;
  for (int64_t s : getShifts())
    shifts.push_back(-s);
  operandGrads[0] =
      b.create<RollOp>(loc, g, b.getDenseI64ArrayAttr(shifts), getDimsAttr());
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

namespace {
/// The reduced dimensions of a reduction (all when `dims` is empty).
SmallVector<int64_t> reducedDims(ArrayRef<int64_t> dims, int64_t rank) {
  if (dims.empty())
    return llvm::to_vector(llvm::seq<int64_t>(0, rank));
  SmallVector<int64_t> out;
  for (int64_t d : dims)
    out.push_back(d < 0 ? d + rank : d);
  return out;
}

/// Reshapes a reduction's result gradient to keepdim form, then broadcasts
/// it to the input's shape.
Value broadcastBack(OpBuilder &b, Location loc, Value g, RankedTensorType in,
                    ArrayRef<int64_t> reduced) {
  SmallVector<int64_t> keep(in.getShape());
  for (int64_t d : reduced)
    keep[d] = 1;
  Value k = b.create<ReshapeOp>(loc, g, keep);
  if (ArrayRef<int64_t>(keep) == in.getShape())
    return k;
  return b.create<ExpandOp>(loc, k, in.getShape());
}
} // namespace

GRADIENT(ReduceSumOp) {
  SETUP();
  if (!isFloat(getInput()))
    return success();
  auto xt = typeOf(getInput());
  operandGrads[0] =
      broadcastBack(b, loc, g, xt, reducedDims(getDims(), xt.getRank()));
  return success();
}

// d/dx_j of sum_{i<=k} x_i is 1 for every k >= j: the gradient is the
// cumulative sum of g in the other direction (PyTorch's flip-cumsum-flip).
GRADIENT(CumsumOp) {
  SETUP();
  if (!isFloat(getInput()))
    return success();
  operandGrads[0] = b.create<CumsumOp>(loc, g, getDim(), !getReverse());
  return success();
}

GRADIENT(ReduceMeanOp) {
  SETUP();
  auto xt = typeOf(getInput());
  SmallVector<int64_t> dims = reducedDims(getDims(), xt.getRank());
  int64_t count = 1;
  for (int64_t d : dims)
    count *= xt.getDimSize(d);
  Value scaled = div(b, loc, g, scalarLike(b, loc, g, (double)count));
  operandGrads[0] = broadcastBack(b, loc, scaled, xt, dims);
  return success();
}

GRADIENT(ReduceMaxOp) {
  SETUP();
  if (!isFloat(getInput()))
    return success();
  // Split evenly among the maxima (PyTorch's amax rule).
  auto xt = typeOf(getInput());
  SmallVector<int64_t> dims = reducedDims(getDims(), xt.getRank());
  Value y = broadcastBack(b, loc, getResult(), xt, dims);
  Value mask = maskOf(b, loc, cmp(b, loc, ComparePredicate::eq, getInput(), y),
                      getInput());
  Value count = b.create<ReduceSumOp>(loc, mask, dims, true);
  Value gb = broadcastBack(b, loc, g, xt, dims);
  operandGrads[0] = div(b, loc, mul(b, loc, gb, mask), count);
  return success();
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

GRADIENT(Conv2dOp) {
  SETUP();
  auto wt = typeOf(getWeight());
  auto bt = RankedTensorType::get({wt.getDimSize(0)}, wt.getElementType());
  auto op = b.create<Conv2dBackwardOp>(
      loc, TypeRange{getInput().getType(), wt, bt}, g, getInput(), getWeight(),
      getStrideAttr(), getPaddingAttr(), getDilationAttr(), getGroupsAttr());
  operandGrads[0] = op.getGradInput();
  operandGrads[1] = op.getGradWeight();
  if (getBias())
    operandGrads[2] = op.getGradBias();
  return success();
}

GRADIENT(MaxPool2dOp) {
  SETUP();
  operandGrads[0] = b.create<MaxPool2dBackwardOp>(
      loc, getInput().getType(), g, getInput(), getKernelAttr(),
      getStrideAttr(), getPaddingAttr(), getDilationAttr(), getCeilModeAttr());
  return success();
}

GRADIENT(AvgPool2dOp) {
  SETUP();
  operandGrads[0] = b.create<AvgPool2dBackwardOp>(
      loc, getInput().getType(), g, getInput(), getKernelAttr(),
      getStrideAttr(), getPaddingAttr(), getCeilModeAttr(),
      getCountIncludePadAttr());
  return success();
}

GRADIENT(AdaptiveAvgPool2dOp) {
  SETUP();
  operandGrads[0] = b.create<AdaptiveAvgPool2dBackwardOp>(
      loc, getInput().getType(), g, getInput());
  return success();
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

GRADIENT(CrossEntropyOp) {
  SETUP();
  operandGrads[0] = b.create<CrossEntropyBackwardOp>(
      loc, getLogits().getType(), g, getLogits(), getTarget(),
      getIgnoreIndexAttr(), getReductionAttr(), getLabelSmoothingAttr());
  return success();
}

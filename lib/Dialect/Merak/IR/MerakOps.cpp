//===- MerakOps.cpp - shape rules and verifiers of merak ops --------------===//
//
// Each op's result type is inferred here from its operands and attributes;
// the same rule verifies parsed IR, so a mismatch reports the dimension that
// disagrees.
//
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/IR/MerakOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"

#include <cmath>

using namespace mlir;
using namespace merak;

namespace {

RankedTensorType tensorOf(Value v) {
  return llvm::cast<RankedTensorType>(v.getType());
}

std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(shape)) {
    if (i)
      s += ", ";
    s += std::to_string(d);
  }
  return s + "]";
}

/// Normalizes a possibly negative dimension index; fails with a diagnostic
/// when it is out of range for `rank`.
LogicalResult normalizeDim(std::optional<Location> loc, int64_t dim,
                           int64_t rank, int64_t &out, StringRef what = "dim") {
  int64_t d = dim < 0 ? dim + rank : dim;
  if (d < 0 || d >= rank)
    return emitOptionalError(loc, what, " ", dim,
                             " is out of range for a tensor of rank ", rank);
  out = d;
  return success();
}

LogicalResult inferBroadcast(std::optional<Location> loc, Value lhs, Value rhs,
                             Type elementType,
                             SmallVectorImpl<Type> &inferred) {
  auto lt = tensorOf(lhs), rt = tensorOf(rhs);
  SmallVector<int64_t> shape;
  int64_t bad = -1;
  if (!broadcastShapes(lt.getShape(), rt.getShape(), shape, &bad))
    return emitOptionalError(
        loc, "operand shapes ", shapeStr(lt.getShape()), " and ",
        shapeStr(rt.getShape()), " do not broadcast: dimension ", bad,
        " of the broadcast result is ",
        lt.getDimSize(lt.getRank() - (int64_t)shape.size() + bad), " vs ",
        rt.getDimSize(rt.getRank() - (int64_t)shape.size() + bad));
  inferred.push_back(RankedTensorType::get(shape, elementType));
  return success();
}

LogicalResult sameElementType(std::optional<Location> loc, Value a, Value b,
                              StringRef an, StringRef bn) {
  Type ea = tensorOf(a).getElementType(), eb = tensorOf(b).getElementType();
  if (ea != eb)
    return emitOptionalError(loc, an, " element type ", ea, " differs from ",
                             bn, " element type ", eb);
  return success();
}

/// Output extent of a pooling or convolution window.
int64_t windowOutput(int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                     int64_t dilation, bool ceilMode) {
  int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;
  if (span < 0)
    return 0;
  int64_t out = (ceilMode ? (span + stride - 1) / stride : span / stride) + 1;
  // PyTorch: the last window must start inside the input or left padding.
  if (ceilMode && (out - 1) * stride >= in + pad)
    --out;
  return out;
}

LogicalResult checkPair(std::optional<Location> loc, ArrayRef<int64_t> v,
                        StringRef name, int64_t min) {
  if (v.size() != 2)
    return emitOptionalError(loc, name, " must have 2 entries, got ", v.size());
  for (int64_t x : v)
    if (x < min)
      return emitOptionalError(loc, name, " entries must be >= ", min, ", got ",
                               shapeStr(v));
  return success();
}

/// Checks a possibly negative dimension index of a verifier (not a shape
/// rule), so that the diagnostic names the op.
LogicalResult verifyDim(Operation *op, int64_t dim, int64_t rank,
                        StringRef what = "dim") {
  if (dim < -rank || dim >= rank)
    return op->emitOpError()
           << what << " " << dim << " is out of range for a tensor of rank "
           << rank;
  return success();
}

} // namespace

bool merak::broadcastShapes(ArrayRef<int64_t> lhs, ArrayRef<int64_t> rhs,
                            SmallVectorImpl<int64_t> &result, int64_t *badDim) {
  size_t rank = std::max(lhs.size(), rhs.size());
  result.assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    int64_t l = i < rank - lhs.size() ? 1 : lhs[i - (rank - lhs.size())];
    int64_t r = i < rank - rhs.size() ? 1 : rhs[i - (rank - rhs.size())];
    if (l != r && l != 1 && r != 1) {
      if (badDim)
        *badDim = i;
      return false;
    }
    result[i] = l == 1 ? r : l;
  }
  return true;
}

#define MERAK_INFER(OP)                                                        \
  LogicalResult OP::inferReturnTypes(                                          \
      MLIRContext *ctx, std::optional<Location> loc, ValueRange operands,      \
      DictionaryAttr attrs, OpaqueProperties props, RegionRange regions,       \
      SmallVectorImpl<Type> &inferred)

#define MERAK_ADAPTOR(OP) OP::Adaptor a(operands, attrs, props, regions)

//===----------------------------------------------------------------------===//
// Constant
//===----------------------------------------------------------------------===//

MERAK_INFER(ConstantOp) {
  MERAK_ADAPTOR(ConstantOp);
  auto type = llvm::dyn_cast<RankedTensorType>(a.getValue().getType());
  if (!type)
    return emitOptionalError(loc, "constant value must be a ranked tensor");
  inferred.push_back(type);
  return success();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

LogicalResult TrilOp::verify() {
  if (getInput().getType().getRank() < 2)
    return emitOpError("needs a tensor of rank >= 2");
  return success();
}

LogicalResult TriuOp::verify() {
  if (getInput().getType().getRank() < 2)
    return emitOpError("needs a tensor of rank >= 2");
  return success();
}

LogicalResult RollOp::verify() {
  if (getShifts().size() != getDims().size())
    return emitOpError("has ") << getShifts().size() << " shifts but "
                               << getDims().size() << " dims";
  for (int64_t d : getDims())
    if (failed(verifyDim(*this, d, getInput().getType().getRank())))
      return failure();
  return success();
}

LogicalResult CumsumOp::verify() {
  auto type = getInput().getType();
  if (type.getElementType().isInteger(1))
    return emitOpError("needs a numeric tensor, not booleans");
  if (type.getRank() == 0)
    return emitOpError("needs a tensor of rank >= 1");
  return verifyDim(*this, getDim(), type.getRank());
}

LogicalResult CastOp::verify() {
  if (getInput().getType().getShape() != getResult().getType().getShape())
    return emitOpError("changes the shape from ")
           << shapeStr(getInput().getType().getShape()) << " to "
           << shapeStr(getResult().getType().getShape());
  return success();
}

LogicalResult DropoutOp::verify() {
  double p = getP().convertToDouble();
  if (!(p >= 0.0 && p <= 1.0))
    return emitOpError("probability p = ") << p << " is not in [0, 1]";
  return success();
}

#define MERAK_BINARY_INFER(OP)                                                 \
  MERAK_INFER(OP) {                                                            \
    if (failed(sameElementType(loc, operands[0], operands[1], "lhs", "rhs")))  \
      return failure();                                                        \
    return inferBroadcast(loc, operands[0], operands[1],                       \
                          tensorOf(operands[0]).getElementType(), inferred);   \
  }

MERAK_BINARY_INFER(AddOp)
MERAK_BINARY_INFER(SubOp)
MERAK_BINARY_INFER(MulOp)
MERAK_BINARY_INFER(DivOp)
MERAK_BINARY_INFER(PowOp)
MERAK_BINARY_INFER(RemainderOp)
MERAK_BINARY_INFER(FloorDivideOp)
MERAK_BINARY_INFER(MinimumOp)
MERAK_BINARY_INFER(MaximumOp)
MERAK_BINARY_INFER(AndOp)
MERAK_BINARY_INFER(OrOp)

MERAK_INFER(CompareOp) {
  if (failed(sameElementType(loc, operands[0], operands[1], "lhs", "rhs")))
    return failure();
  return inferBroadcast(loc, operands[0], operands[1], IntegerType::get(ctx, 1),
                        inferred);
}

MERAK_INFER(WhereOp) {
  MERAK_ADAPTOR(WhereOp);
  if (failed(sameElementType(loc, a.getOnTrue(), a.getOnFalse(), "on_true",
                             "on_false")))
    return failure();
  SmallVector<Type> tmp;
  if (failed(inferBroadcast(loc, a.getOnTrue(), a.getOnFalse(),
                            tensorOf(a.getOnTrue()).getElementType(), tmp)))
    return failure();
  SmallVector<int64_t> shape;
  auto values = llvm::cast<RankedTensorType>(tmp[0]);
  int64_t bad = -1;
  if (!broadcastShapes(tensorOf(a.getCondition()).getShape(), values.getShape(),
                       shape, &bad))
    return emitOptionalError(loc, "condition shape ",
                             shapeStr(tensorOf(a.getCondition()).getShape()),
                             " does not broadcast with value shape ",
                             shapeStr(values.getShape()), " at dimension ",
                             bad);
  inferred.push_back(RankedTensorType::get(shape, values.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

MERAK_INFER(LinearOp) {
  MERAK_ADAPTOR(LinearOp);
  auto x = tensorOf(a.getInput()), w = tensorOf(a.getWeight());
  if (failed(
          sameElementType(loc, a.getInput(), a.getWeight(), "input", "weight")))
    return failure();
  if (w.getRank() != 2)
    return emitOptionalError(loc, "weight must have rank 2 ([out, in]), got ",
                             shapeStr(w.getShape()));
  if (x.getRank() < 1)
    return emitOptionalError(loc, "input must have rank >= 1");
  if (x.getShape().back() != w.getDimSize(1))
    return emitOptionalError(
        loc, "input's last dimension (", x.getShape().back(),
        ") differs from weight dimension 1 (", w.getDimSize(1), ")");
  if (Value bias = a.getBias()) {
    auto b = tensorOf(bias);
    if (b.getRank() != 1 || b.getDimSize(0) != w.getDimSize(0))
      return emitOptionalError(loc, "bias shape ", shapeStr(b.getShape()),
                               " differs from [", w.getDimSize(0), "]");
    if (failed(sameElementType(loc, a.getInput(), bias, "input", "bias")))
      return failure();
  }
  SmallVector<int64_t> shape(x.getShape());
  shape.back() = w.getDimSize(0);
  inferred.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

MERAK_INFER(MatmulOp) {
  auto l = tensorOf(operands[0]), r = tensorOf(operands[1]);
  if (failed(sameElementType(loc, operands[0], operands[1], "lhs", "rhs")))
    return failure();
  if (l.getRank() < 2 || r.getRank() < 2)
    return emitOptionalError(loc, "operands must have rank >= 2, got ",
                             shapeStr(l.getShape()), " and ",
                             shapeStr(r.getShape()));
  int64_t k1 = l.getShape().back(), k2 = r.getDimSize(r.getRank() - 2);
  if (k1 != k2)
    return emitOptionalError(
        loc, "contracting dimensions differ: lhs dimension ", l.getRank() - 1,
        " is ", k1, ", rhs dimension ", r.getRank() - 2, " is ", k2);
  SmallVector<int64_t> batch;
  int64_t bad = -1;
  if (!broadcastShapes(l.getShape().drop_back(2), r.getShape().drop_back(2),
                       batch, &bad))
    return emitOptionalError(loc, "batch dimensions ",
                             shapeStr(l.getShape().drop_back(2)), " and ",
                             shapeStr(r.getShape().drop_back(2)),
                             " do not broadcast at dimension ", bad);
  batch.push_back(l.getDimSize(l.getRank() - 2));
  batch.push_back(r.getShape().back());
  inferred.push_back(RankedTensorType::get(batch, l.getElementType()));
  return success();
}

LogicalResult LinearWeightBackwardOp::verify() {
  auto g = cast<RankedTensorType>(getGrad().getType());
  auto x = cast<RankedTensorType>(getInput().getType());
  auto w = cast<RankedTensorType>(getType());
  if (g.getElementType() != x.getElementType() ||
      w.getElementType() != x.getElementType())
    return emitOpError("grad, input and result must have one element type, "
                       "got ")
           << g.getElementType() << ", " << x.getElementType() << " and "
           << w.getElementType();
  if (g.getRank() < 1 || g.getRank() != x.getRank() ||
      g.getShape().drop_back() != x.getShape().drop_back())
    return emitOpError("grad ")
           << shapeStr(g.getShape()) << " and input " << shapeStr(x.getShape())
           << " must have the same leading dimensions";
  if (w.getRank() != 2 || w.getDimSize(0) != g.getShape().back() ||
      w.getDimSize(1) != x.getShape().back())
    return emitOpError("result ")
           << shapeStr(w.getShape()) << " must be [" << g.getShape().back()
           << ", " << x.getShape().back() << "]";
  return success();
}

//===----------------------------------------------------------------------===//
// Softmax, normalization
//===----------------------------------------------------------------------===//

LogicalResult SoftmaxOp::verify() {
  return verifyDim(*this, getDim(), getInput().getType().getRank());
}

LogicalResult LogSoftmaxOp::verify() {
  return verifyDim(*this, getDim(), getInput().getType().getRank());
}

LogicalResult SoftmaxBackwardOp::verify() {
  return verifyDim(*this, getDim(),
                   cast<RankedTensorType>(getOutput().getType()).getRank());
}

std::optional<int64_t> ReshapeOp::splitHeads() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getType());
  if (out.getRank() != in.getRank() + 1 || in.getRank() < 3)
    return std::nullopt;
  for (int64_t d = 0; d + 1 < in.getRank(); ++d)
    if (in.getDimSize(d) != out.getDimSize(d))
      return std::nullopt;
  int64_t heads = out.getDimSize(out.getRank() - 2);
  if (heads * out.getDimSize(out.getRank() - 1) !=
      in.getDimSize(in.getRank() - 1))
    return std::nullopt;
  return heads;
}

std::optional<int64_t> ReshapeOp::mergesBatchAndHeads() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getType());
  int64_t rank = in.getRank();
  if (out.getRank() != rank || rank < 2)
    return std::nullopt;
  for (int64_t d = 0; d + 2 < rank; ++d)
    if (in.getDimSize(d) != out.getDimSize(d))
      return std::nullopt;
  int64_t batch = in.getDimSize(rank - 2), headDim = out.getDimSize(rank - 1);
  if (batch <= 0 || headDim <= 0 || out.getDimSize(rank - 2) % batch != 0)
    return std::nullopt;
  int64_t heads = out.getDimSize(rank - 2) / batch;
  if (heads <= 1 || heads * headDim != in.getDimSize(rank - 1))
    return std::nullopt;
  return heads;
}

bool ReshapeOp::mergesHeads() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getType());
  if (in.getRank() != out.getRank() + 1 || out.getRank() < 3)
    return false;
  for (int64_t d = 0; d + 1 < out.getRank(); ++d)
    if (in.getDimSize(d) != out.getDimSize(d))
      return false;
  return true;
}

LogicalResult MaskedAttentionOp::checkOperands(Operation *op, Value query,
                                               Value key, Value value,
                                               Value mask) {
  auto fail = [&](const std::string &message) {
    if (op)
      op->emitOpError(message);
    return failure();
  };
  auto q = tensorOf(query), v = tensorOf(value), m = tensorOf(mask);
  int64_t rank = q.getRank();
  if (rank < 2)
    return fail("query must have rank 2 or more, got " +
                shapeStr(q.getShape()));
  if (tensorOf(key) != q)
    return fail("key shape " + shapeStr(tensorOf(key).getShape()) +
                " differs from the query's " + shapeStr(q.getShape()));
  std::string elem;
  llvm::raw_string_ostream(elem) << q.getElementType();
  if (v.getElementType() != q.getElementType())
    return fail("value must have the query's element type " + elem);
  if (!m.getElementType().isInteger(1) &&
      m.getElementType() != q.getElementType()) {
    std::string got;
    llvm::raw_string_ostream(got) << m.getElementType();
    return fail("an additive mask must have the query's element type " + elem +
                ", got " + got);
  }
  ArrayRef<int64_t> qs = q.getShape();
  int64_t t = qs[rank - 2];
  if (v.getRank() != rank || v.getShape().drop_back() != qs.drop_back())
    return fail("value shape " + shapeStr(v.getShape()) + " must be [..., " +
                std::to_string(t) +
                ", E] with the query's leading "
                "dimensions " +
                shapeStr(qs));
  SmallVector<int64_t> scores(qs.drop_back());
  scores.push_back(t);
  ArrayRef<int64_t> ms = m.getShape();
  bool broadcasts = int64_t(ms.size()) <= rank;
  for (auto [j, size] : llvm::enumerate(ms))
    if (broadcasts && size != 1 && size != scores[rank - ms.size() + j])
      broadcasts = false;
  if (!broadcasts)
    return fail("mask shape " + shapeStr(ms) +
                " does not broadcast to the scores' " + shapeStr(scores));
  return success();
}

/// The operands and `saved` of masked_attention or its backward: the
/// probabilities (`[..., T, T]`, the query's element type) or the rows'
/// log-sum-exp (`[..., T]`, f32).
static LogicalResult checkAttention(Operation *op, Value query, Value key,
                                    Value value, Value mask, Value saved,
                                    double scale, bool divide) {
  if (!std::isfinite(scale) || (divide && scale == 0.0))
    return op->emitOpError("scale must be finite (and non-zero to divide by)");
  if (failed(MaskedAttentionOp::checkOperands(op, query, key, value, mask)))
    return failure();
  auto q = tensorOf(query), p = tensorOf(saved);
  SmallVector<int64_t> rows(q.getShape().drop_back());
  if (p.getRank() == int64_t(rows.size())) {
    if (!p.getElementType().isF32() || p.getShape() != ArrayRef<int64_t>(rows))
      return op->emitOpError("log-sum-exp type ")
             << p << " differs from the rows' "
             << RankedTensorType::get(rows, Float32Type::get(op->getContext()));
    return success();
  }
  SmallVector<int64_t> scores(rows);
  scores.push_back(q.getShape()[q.getRank() - 2]);
  if (p.getElementType() != q.getElementType() ||
      p.getShape() != ArrayRef<int64_t>(scores))
    return op->emitOpError("probs type ")
           << p << " differs from the scores' "
           << RankedTensorType::get(scores, q.getElementType())
           << " (or a log-sum-exp of "
           << RankedTensorType::get(rows, Float32Type::get(op->getContext()))
           << ")";
  return success();
}

LogicalResult MaskedAttentionOp::verify() {
  if (failed(checkAttention(*this, getQuery(), getKey(), getValue(), getMask(),
                            getSaved(), getScale().convertToDouble(),
                            getDivide())))
    return failure();
  if (getResult().getType() != getValue().getType())
    return emitOpError("result type ")
           << getResult().getType() << " differs from the value's "
           << getValue().getType();
  return success();
}

LogicalResult MaskedAttentionBackwardOp::verify() {
  if (failed(checkAttention(*this, getQuery(), getKey(), getValue(), getMask(),
                            getSaved(), getScale().convertToDouble(),
                            getDivide())))
    return failure();
  bool lse = tensorOf(getSaved()).getRank() < tensorOf(getQuery()).getRank();
  if (lse && !getOutput())
    return emitOpError("needs the forward's output with a log-sum-exp");
  if (!lse && getOutput())
    return emitOpError("takes the forward's output only with a log-sum-exp");
  if (getOutput() && getOutput().getType() != getValue().getType())
    return emitOpError("output type ")
           << getOutput().getType() << " differs from the value's "
           << getValue().getType();
  return success();
}

static LogicalResult checkNormalizedShape(std::optional<Location> loc,
                                          Value input, Value param,
                                          int64_t normalizedRank,
                                          StringRef name) {
  auto x = tensorOf(input);
  if (normalizedRank < 1 || normalizedRank > x.getRank())
    return emitOptionalError(loc, "normalized_rank ", normalizedRank,
                             " is not in [1, ", x.getRank(), "]");
  if (!param)
    return success();
  auto p = tensorOf(param);
  ArrayRef<int64_t> trailing = x.getShape().take_back(normalizedRank);
  if (p.getShape() != trailing)
    return emitOptionalError(loc, name, " shape ", shapeStr(p.getShape()),
                             " differs from the normalized shape ",
                             shapeStr(trailing));
  return sameElementType(loc, input, param, "input", name);
}

MERAK_INFER(LayerNormOp) {
  MERAK_ADAPTOR(LayerNormOp);
  int64_t r = a.getNormalizedRank();
  if (failed(checkNormalizedShape(loc, a.getInput(), a.getWeight(), r,
                                  "weight")) ||
      failed(checkNormalizedShape(loc, a.getInput(), a.getBias(), r, "bias")))
    return failure();
  inferred.push_back(a.getInput().getType());
  return success();
}

MERAK_INFER(RmsNormOp) {
  MERAK_ADAPTOR(RmsNormOp);
  if (failed(checkNormalizedShape(loc, a.getInput(), a.getWeight(),
                                  a.getNormalizedRank(), "weight")))
    return failure();
  inferred.push_back(a.getInput().getType());
  return success();
}

MERAK_INFER(BatchNormOp) {
  MERAK_ADAPTOR(BatchNormOp);
  auto x = tensorOf(a.getInput());
  if (x.getRank() < 2)
    return emitOptionalError(loc, "input must have rank >= 2 (N, C, ...)");
  int64_t c = x.getDimSize(1);
  std::pair<Value, StringRef> params[] = {{a.getWeight(), "weight"},
                                          {a.getBias(), "bias"},
                                          {a.getRunningMean(), "running_mean"},
                                          {a.getRunningVar(), "running_var"}};
  for (auto [v, name] : params) {
    auto t = tensorOf(v);
    if (t.getRank() != 1 || t.getDimSize(0) != c)
      return emitOptionalError(loc, name, " shape ", shapeStr(t.getShape()),
                               " differs from [", c,
                               "] (the input's channel dimension 1)");
  }
  inferred.push_back(x);
  inferred.push_back(a.getRunningMean().getType());
  inferred.push_back(a.getRunningVar().getType());
  return success();
}

//===----------------------------------------------------------------------===//
// Embedding and indexing
//===----------------------------------------------------------------------===//

MERAK_INFER(EmbeddingOp) {
  MERAK_ADAPTOR(EmbeddingOp);
  auto w = tensorOf(a.getWeight()), idx = tensorOf(a.getIndices());
  if (w.getRank() != 2)
    return emitOptionalError(loc, "weight must have rank 2, got ",
                             shapeStr(w.getShape()));
  if (std::optional<int64_t> pad = a.getPaddingIdx())
    if (*pad < 0 || *pad >= w.getDimSize(0))
      return emitOptionalError(loc, "padding_idx ", *pad,
                               " is not a row of weight ",
                               shapeStr(w.getShape()));
  SmallVector<int64_t> shape(idx.getShape());
  shape.push_back(w.getDimSize(1));
  inferred.push_back(RankedTensorType::get(shape, w.getElementType()));
  return success();
}

MERAK_INFER(IndexOp) {
  MERAK_ADAPTOR(IndexOp);
  auto x = tensorOf(a.getInput()), idx = tensorOf(a.getIndices());
  int64_t d;
  if (failed(normalizeDim(loc, a.getDim(), x.getRank(), d)))
    return failure();
  SmallVector<int64_t> shape(x.getShape().take_front(d));
  llvm::append_range(shape, idx.getShape());
  llvm::append_range(shape, x.getShape().drop_front(d + 1));
  inferred.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

MERAK_INFER(UpdateSliceOp) {
  MERAK_ADAPTOR(UpdateSliceOp);
  auto x = tensorOf(a.getInput()), u = tensorOf(a.getUpdate());
  auto p = tensorOf(a.getPosition());
  int64_t d;
  if (failed(normalizeDim(loc, a.getDim(), x.getRank(), d)))
    return failure();
  if (u.getElementType() != x.getElementType())
    return emitOptionalError(loc, "update of element type ", u.getElementType(),
                             " for an input of ", x.getElementType());
  bool fits = u.getRank() == x.getRank() && u.getDimSize(d) <= x.getDimSize(d);
  for (int64_t i = 0; fits && i < x.getRank(); ++i)
    fits = i == d || u.getDimSize(i) == x.getDimSize(i);
  if (!fits)
    return emitOptionalError(loc, "update ", shapeStr(u.getShape()),
                             " does not fit input ", shapeStr(x.getShape()),
                             " along dimension ", d);
  if (p.getNumElements() != 1)
    return emitOptionalError(loc, "position must have one element, got ",
                             shapeStr(p.getShape()));
  inferred.push_back(x);
  return success();
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

MERAK_INFER(ReshapeOp) {
  MERAK_ADAPTOR(ReshapeOp);
  auto x = tensorOf(a.getInput());
  int64_t n = 1;
  for (int64_t d : a.getShape()) {
    if (d < 0)
      return emitOptionalError(loc, "target shape ", shapeStr(a.getShape()),
                               " has a negative dimension");
    n *= d;
  }
  if (n != x.getNumElements())
    return emitOptionalError(loc, "cannot reshape ", shapeStr(x.getShape()),
                             " (", x.getNumElements(), " elements) to ",
                             shapeStr(a.getShape()), " (", n, " elements)");
  inferred.push_back(RankedTensorType::get(a.getShape(), x.getElementType()));
  return success();
}

OpFoldResult ReshapeOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return getInput();
  return {};
}

namespace {

/// `reshape(linear(reshape(x -> [M, K])) -> [a..., N])` with `prod(a) == M`
/// is `linear(reshape(x -> [a..., K]))`: a linear acts on each row of its
/// input alone. nn.MultiheadAttention flattens the sequence and the batch
/// into one dimension around its output projection, the batch minor; no
/// block of that dimension is a block of the batch, so data parallelism
/// would have to gather the batch there. Kept as `[a..., K]`, the batch
/// stays a dimension of its own.
struct LinearOverFlattenedRows : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(ReshapeOp outer,
                                PatternRewriter &rewriter) const override {
    auto linear = outer.getInput().getDefiningOp<LinearOp>();
    if (!linear || !linear->hasOneUse())
      return failure();
    auto inner = linear.getInput().getDefiningOp<ReshapeOp>();
    if (!inner)
      return failure();
    auto rows = cast<RankedTensorType>(inner.getType());
    auto result = cast<RankedTensorType>(outer.getType());
    if (rows.getRank() != 2 || result.getRank() < 2 ||
        result.getShape().back() != linear.getType().getShape().back())
      return failure();
    int64_t m = 1;
    for (int64_t d : result.getShape().drop_back())
      m *= d;
    if (m != rows.getDimSize(0))
      return failure();
    SmallVector<int64_t> shape(result.getShape().drop_back());
    shape.push_back(rows.getDimSize(1));
    rewriter.setInsertionPoint(linear);
    auto input =
        rewriter.create<ReshapeOp>(inner.getLoc(), inner.getInput(), shape);
    input->setDiscardableAttrs(inner->getDiscardableAttrDictionary());
    auto replacement = rewriter.create<LinearOp>(
        linear.getLoc(), result, input, linear.getWeight(), linear.getBias());
    replacement->setDiscardableAttrs(linear->getDiscardableAttrDictionary());
    rewriter.replaceOp(outer, replacement.getResult());
    rewriter.eraseOp(linear);
    if (inner->use_empty())
      rewriter.eraseOp(inner);
    return success();
  }
};

} // namespace

void ReshapeOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                            MLIRContext *context) {
  patterns.add<LinearOverFlattenedRows>(context);
}

MERAK_INFER(PermuteOp) {
  MERAK_ADAPTOR(PermuteOp);
  auto x = tensorOf(a.getInput());
  ArrayRef<int64_t> perm = a.getPermutation();
  if ((int64_t)perm.size() != x.getRank())
    return emitOptionalError(loc, "permutation ", shapeStr(perm), " has ",
                             perm.size(), " entries for a tensor of rank ",
                             x.getRank());
  SmallVector<bool> seen(perm.size(), false);
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= x.getRank() || seen[p])
      return emitOptionalError(loc, shapeStr(perm),
                               " is not a permutation of [0, ", x.getRank(),
                               ")");
    seen[p] = true;
    shape.push_back(x.getDimSize(p));
  }
  inferred.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

OpFoldResult PermuteOp::fold(FoldAdaptor) {
  for (auto [i, p] : llvm::enumerate(getPermutation()))
    if ((int64_t)i != p)
      return {};
  return getInput();
}

MERAK_INFER(SliceOp) {
  MERAK_ADAPTOR(SliceOp);
  auto x = tensorOf(a.getInput());
  int64_t d;
  if (failed(normalizeDim(loc, a.getDim(), x.getRank(), d)))
    return failure();
  int64_t size = x.getDimSize(d), start = a.getStart(), end = a.getEnd(),
          step = a.getStep();
  if (step < 1)
    return emitOptionalError(loc, "step must be >= 1, got ", step);
  if (start < 0 || start > end || end > size)
    return emitOptionalError(loc, "slice [", start, ", ", end,
                             ") is not within dimension ", d, " of size ",
                             size);
  SmallVector<int64_t> shape(x.getShape());
  shape[d] = (end - start + step - 1) / step;
  inferred.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

MERAK_INFER(SelectOp) {
  MERAK_ADAPTOR(SelectOp);
  auto x = tensorOf(a.getInput());
  int64_t d;
  if (failed(normalizeDim(loc, a.getDim(), x.getRank(), d)))
    return failure();
  // I64Attr getters return uint64_t: read the index as signed.
  int64_t index = a.getIndex();
  if (index < 0 || index >= x.getDimSize(d))
    return emitOptionalError(loc, "index ", index,
                             " is out of range for dimension ", d, " of size ",
                             x.getDimSize(d));
  SmallVector<int64_t> shape(x.getShape());
  shape.erase(shape.begin() + d);
  inferred.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

MERAK_INFER(ConcatOp) {
  MERAK_ADAPTOR(ConcatOp);
  if (a.getInputs().empty())
    return emitOptionalError(loc, "concat needs at least one input");
  auto first = tensorOf(a.getInputs()[0]);
  int64_t d;
  if (failed(normalizeDim(loc, a.getDim(), first.getRank(), d)))
    return failure();
  SmallVector<int64_t> shape(first.getShape());
  for (auto [i, v] : llvm::enumerate(a.getInputs().drop_front())) {
    auto t = tensorOf(v);
    if (t.getElementType() != first.getElementType())
      return emitOptionalError(loc, "input ", i + 1, " has element type ",
                               t.getElementType(), ", input 0 has ",
                               first.getElementType());
    if (t.getRank() != first.getRank())
      return emitOptionalError(loc, "input ", i + 1, " has rank ", t.getRank(),
                               ", input 0 has rank ", first.getRank());
    for (int64_t k = 0; k < t.getRank(); ++k) {
      if (k == d)
        continue;
      if (t.getDimSize(k) != first.getDimSize(k))
        return emitOptionalError(loc, "input ", i + 1, " dimension ", k, " is ",
                                 t.getDimSize(k), ", input 0 has ",
                                 first.getDimSize(k));
    }
    shape[d] += t.getDimSize(d);
  }
  inferred.push_back(RankedTensorType::get(shape, first.getElementType()));
  return success();
}

MERAK_INFER(ExpandOp) {
  MERAK_ADAPTOR(ExpandOp);
  auto x = tensorOf(a.getInput());
  ArrayRef<int64_t> target = a.getShape();
  if ((int64_t)target.size() < x.getRank())
    return emitOptionalError(loc, "cannot expand rank ", x.getRank(),
                             " to the smaller rank ", target.size());
  for (int64_t t : target)
    if (t < 0)
      return emitOptionalError(loc, "target shape ", shapeStr(target),
                               " has a negative dimension");
  int64_t offset = target.size() - x.getRank();
  for (int64_t i = 0; i < x.getRank(); ++i) {
    int64_t s = x.getDimSize(i), t = target[offset + i];
    if (s != t && s != 1)
      return emitOptionalError(loc, "cannot expand dimension ", i, " of size ",
                               s, " to ", t);
  }
  inferred.push_back(RankedTensorType::get(target, x.getElementType()));
  return success();
}

MERAK_INFER(PadOp) {
  MERAK_ADAPTOR(PadOp);
  auto x = tensorOf(a.getInput());
  if ((int64_t)a.getLow().size() != x.getRank() ||
      (int64_t)a.getHigh().size() != x.getRank())
    return emitOptionalError(loc, "low and high need ", x.getRank(),
                             " entries each");
  SmallVector<int64_t> shape(x.getShape());
  for (int64_t i = 0; i < x.getRank(); ++i) {
    if (a.getLow()[i] < 0 || a.getHigh()[i] < 0)
      return emitOptionalError(loc, "negative padding at dimension ", i);
    shape[i] += a.getLow()[i] + a.getHigh()[i];
  }
  inferred.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

static LogicalResult inferReduction(std::optional<Location> loc, Value input,
                                    ArrayRef<int64_t> dims, bool keepdim,
                                    SmallVectorImpl<Type> &inferred) {
  auto x = tensorOf(input);
  SmallVector<bool> reduced(x.getRank(), dims.empty());
  for (int64_t d : dims) {
    int64_t n;
    if (failed(normalizeDim(loc, d, x.getRank(), n)))
      return failure();
    if (reduced[n])
      return emitOptionalError(loc, "dimension ", d, " is reduced twice");
    reduced[n] = true;
  }
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < x.getRank(); ++i) {
    if (!reduced[i])
      shape.push_back(x.getDimSize(i));
    else if (keepdim)
      shape.push_back(1);
  }
  inferred.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

#define MERAK_REDUCE_INFER(OP)                                                 \
  MERAK_INFER(OP) {                                                            \
    MERAK_ADAPTOR(OP);                                                         \
    return inferReduction(loc, a.getInput(), a.getDims(), a.getKeepdim(),      \
                          inferred);                                           \
  }

MERAK_REDUCE_INFER(ReduceSumOp)
MERAK_REDUCE_INFER(ReduceMeanOp)
MERAK_REDUCE_INFER(ReduceMaxOp)

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

MERAK_INFER(Conv2dOp) {
  MERAK_ADAPTOR(Conv2dOp);
  auto x = tensorOf(a.getInput()), w = tensorOf(a.getWeight());
  if (x.getRank() != 4)
    return emitOptionalError(loc, "input must be NCHW (rank 4), got ",
                             shapeStr(x.getShape()));
  if (w.getRank() != 4)
    return emitOptionalError(loc, "weight must be OIHW (rank 4), got ",
                             shapeStr(w.getShape()));
  if (failed(
          sameElementType(loc, a.getInput(), a.getWeight(), "input", "weight")))
    return failure();
  if (failed(checkPair(loc, a.getStride(), "stride", 1)) ||
      failed(checkPair(loc, a.getPadding(), "padding", 0)) ||
      failed(checkPair(loc, a.getDilation(), "dilation", 1)))
    return failure();
  int64_t g = a.getGroups();
  if (g < 1 || x.getDimSize(1) % g || w.getDimSize(0) % g)
    return emitOptionalError(
        loc, "groups ", g, " must divide the input channels (", x.getDimSize(1),
        ") and output channels (", w.getDimSize(0), ")");
  if (w.getDimSize(1) * g != x.getDimSize(1))
    return emitOptionalError(
        loc, "weight dimension 1 (", w.getDimSize(1), ") times groups (", g,
        ") differs from the input channels (", x.getDimSize(1), ")");
  if (Value bias = a.getBias()) {
    auto b = tensorOf(bias);
    if (b.getRank() != 1 || b.getDimSize(0) != w.getDimSize(0))
      return emitOptionalError(loc, "bias shape ", shapeStr(b.getShape()),
                               " differs from [", w.getDimSize(0), "]");
    if (failed(sameElementType(loc, a.getInput(), bias, "input", "bias")))
      return failure();
  }
  SmallVector<int64_t> shape = {x.getDimSize(0), w.getDimSize(0)};
  for (int i = 0; i < 2; ++i) {
    int64_t o =
        windowOutput(x.getDimSize(2 + i), w.getDimSize(2 + i), a.getStride()[i],
                     a.getPadding()[i], a.getDilation()[i], false);
    if (o < 1)
      return emitOptionalError(loc, "kernel does not fit spatial dimension ",
                               2 + i, " of size ", x.getDimSize(2 + i));
    shape.push_back(o);
  }
  inferred.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

static LogicalResult inferPool(std::optional<Location> loc, Value input,
                               ArrayRef<int64_t> kernel,
                               ArrayRef<int64_t> stride,
                               ArrayRef<int64_t> padding,
                               ArrayRef<int64_t> dilation, bool ceilMode,
                               SmallVectorImpl<Type> &inferred) {
  auto x = tensorOf(input);
  if (x.getRank() != 4 && x.getRank() != 3)
    return emitOptionalError(loc, "input must be NCHW or CHW, got ",
                             shapeStr(x.getShape()));
  if (failed(checkPair(loc, kernel, "kernel", 1)) ||
      failed(checkPair(loc, stride, "stride", 1)) ||
      failed(checkPair(loc, padding, "padding", 0)) ||
      failed(checkPair(loc, dilation, "dilation", 1)))
    return failure();
  for (int i = 0; i < 2; ++i)
    if (padding[i] * 2 > kernel[i])
      return emitOptionalError(loc, "padding ", padding[i],
                               " exceeds half the kernel size ", kernel[i]);
  SmallVector<int64_t> shape(x.getShape().drop_back(2));
  int64_t first = x.getRank() - 2;
  for (int i = 0; i < 2; ++i) {
    int64_t o = windowOutput(x.getDimSize(first + i), kernel[i], stride[i],
                             padding[i], dilation[i], ceilMode);
    if (o < 1)
      return emitOptionalError(loc, "window does not fit spatial dimension ",
                               first + i, " of size ", x.getDimSize(first + i));
    shape.push_back(o);
  }
  inferred.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

MERAK_INFER(MaxPool2dOp) {
  MERAK_ADAPTOR(MaxPool2dOp);
  return inferPool(loc, a.getInput(), a.getKernel(), a.getStride(),
                   a.getPadding(), a.getDilation(), a.getCeilMode(), inferred);
}

MERAK_INFER(AvgPool2dOp) {
  MERAK_ADAPTOR(AvgPool2dOp);
  int64_t ones[] = {1, 1};
  return inferPool(loc, a.getInput(), a.getKernel(), a.getStride(),
                   a.getPadding(), ones, a.getCeilMode(), inferred);
}

MERAK_INFER(AdaptiveAvgPool2dOp) {
  MERAK_ADAPTOR(AdaptiveAvgPool2dOp);
  auto x = tensorOf(a.getInput());
  if (x.getRank() != 4 && x.getRank() != 3)
    return emitOptionalError(loc, "input must be NCHW or CHW, got ",
                             shapeStr(x.getShape()));
  if (failed(checkPair(loc, a.getOutputSize(), "output_size", 1)))
    return failure();
  SmallVector<int64_t> shape(x.getShape().drop_back(2));
  llvm::append_range(shape, a.getOutputSize());
  inferred.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

MERAK_INFER(CrossEntropyOp) {
  MERAK_ADAPTOR(CrossEntropyOp);
  auto x = tensorOf(a.getLogits()), t = tensorOf(a.getTarget());
  if (x.getRank() != 2)
    return emitOptionalError(loc, "logits must be [N, C], got ",
                             shapeStr(x.getShape()));
  if (t.getRank() != 1 || t.getDimSize(0) != x.getDimSize(0))
    return emitOptionalError(loc, "target shape ", shapeStr(t.getShape()),
                             " differs from [", x.getDimSize(0),
                             "] (logits dimension 0)");
  double s = a.getLabelSmoothing().convertToDouble();
  if (!(s >= 0.0 && s <= 1.0))
    return emitOptionalError(loc, "label_smoothing ", s, " is not in [0, 1]");
  SmallVector<int64_t> shape;
  if (a.getReduction() == LossReduction::none)
    shape.push_back(x.getDimSize(0));
  inferred.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

#define GET_OP_CLASSES
#include "merak/Dialect/Merak/IR/MerakOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Facts declared with the ops (MerakOpFacts.inc, from MerakOps.td)
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/IR/MerakOpFacts.inc"

bool merak::isLinearIn(Operation *op, unsigned operand) {
#define MERAK_LINEAR(Op, ...)                                                  \
  if (isa<Op>(op))                                                             \
    return llvm::is_contained({__VA_ARGS__}, operand);
  MERAK_OP_LINEAR_IN(MERAK_LINEAR)
#undef MERAK_LINEAR
  return false;
}

PrecisionPolicy merak::precisionPolicy(Operation *op) {
#define MERAK_PRECISION(Op, policy)                                            \
  if (isa<Op>(op))                                                             \
    return PrecisionPolicy::policy;
  MERAK_OP_PRECISION(MERAK_PRECISION)
#undef MERAK_PRECISION
  return PrecisionPolicy::Promote;
}

double merak::elementFlops(Operation *op) {
#define MERAK_FLOPS(Op, flops)                                                 \
  if (isa<Op>(op))                                                             \
    return flops;
  MERAK_OP_ELEMENT_FLOPS(MERAK_FLOPS)
#undef MERAK_FLOPS
  return 1.0;
}

//===----------------------------------------------------------------------===//
// Backward ops
//===----------------------------------------------------------------------===//

LogicalResult IndexBackwardOp::verify() {
  auto g = getGrad().getType();
  int64_t k = getIndices().getType().getRank();
  int64_t d = getDim();
  if (d < 0 || d + k > g.getRank())
    return emitOpError("dim ")
           << d << " with " << k << " index dimensions does not fit grad rank "
           << g.getRank();
  SmallVector<int64_t> shape(g.getShape().take_front(d));
  shape.push_back(getDimSize());
  llvm::append_range(shape, g.getShape().drop_front(d + k));
  if (getType().getShape() != ArrayRef<int64_t>(shape) ||
      getType().getElementType() != g.getElementType())
    return emitOpError("result must be ")
           << RankedTensorType::get(shape, g.getElementType());
  return success();
}

LogicalResult SliceBackwardOp::verify() {
  auto g = getGrad().getType();
  int64_t d = getDim();
  if (d < 0 || d >= g.getRank())
    return emitOpError("dim ") << d << " is out of range";
  int64_t n =
      getStep() > 0 ? (getEnd() - getStart() + getStep() - 1) / getStep() : -1;
  if (getStart() < 0 || getEnd() > getDimSize() || n != g.getDimSize(d))
    return emitOpError("slice [")
           << getStart() << ", " << getEnd() << ") step " << getStep()
           << " of size " << getDimSize() << " does not give "
           << g.getDimSize(d) << " elements";
  SmallVector<int64_t> shape(g.getShape());
  shape[d] = getDimSize();
  if (getType() != RankedTensorType::get(shape, g.getElementType()))
    return emitOpError("result must be ")
           << RankedTensorType::get(shape, g.getElementType());
  return success();
}

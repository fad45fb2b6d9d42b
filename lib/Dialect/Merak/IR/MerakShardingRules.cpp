//===- MerakShardingRules.cpp - the loop space of every merak op ----------===//
//
// One rule per op family: which loops an op iterates over, how each operand
// and result indexes them, which loops are reductions and which must never
// be split. MerakSharding.cpp turns these into the ShardingInterface.
//
//===----------------------------------------------------------------------===//

#include "MerakSharding.h"

#include "merak/Dialect/Merak/IR/MerakOps.h"

#include "mlir/IR/AffineExpr.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace merak;
using mesh::ReductionKind;
using utils::IteratorType;

SmallVector<IteratorType> LoopSpace::iteratorTypes() const {
  return llvm::map_to_vector(loops, [](const Loop &l) { return l.type; });
}

SmallVector<ReductionKind> LoopSpace::reductionKinds() const {
  SmallVector<ReductionKind> kinds;
  for (const Loop &l : loops)
    if (l.type == IteratorType::reduction)
      kinds.push_back(l.kind);
  return kinds;
}

namespace {

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

int64_t rankOf(Value v) { return shapeOf(v).size(); }

int64_t normalize(int64_t dim, int64_t rank) {
  return dim < 0 ? dim + rank : dim;
}

/// Collects loops and per-value index expressions, then builds the maps.
class SpaceBuilder {
public:
  explicit SpaceBuilder(Operation *op) : op(op), ctx(op->getContext()) {}

  unsigned parallel(bool splittable = true) {
    space.loops.push_back(
        {IteratorType::parallel, ReductionKind::Sum, splittable});
    return space.loops.size() - 1;
  }
  unsigned reduction(ReductionKind kind, bool splittable = true) {
    space.loops.push_back({IteratorType::reduction, kind, splittable});
    return space.loops.size() - 1;
  }
  SmallVector<unsigned> parallels(int64_t n, bool splittable = true) {
    SmallVector<unsigned> ls;
    for (int64_t i = 0; i < n; ++i)
      ls.push_back(parallel(splittable));
    return ls;
  }
  void unsplittable(unsigned loop) { space.loops[loop].splittable = false; }
  void splittable(unsigned loop) { space.loops[loop].splittable = true; }

  AffineExpr d(unsigned loop) const { return getAffineDimExpr(loop, ctx); }
  AffineExpr zero() const { return getAffineConstantExpr(0, ctx); }
  SmallVector<AffineExpr> dims(ArrayRef<unsigned> loops) const {
    return llvm::map_to_vector(loops, [&](unsigned l) { return d(l); });
  }

  /// Index expressions of the next operand or result, in order: all
  /// operands first, then all results.
  void next(ArrayRef<AffineExpr> exprs) { exprs_.emplace_back(exprs); }
  void next(ArrayRef<unsigned> loops) { next(dims(loops)); }

  LoopSpace finish() {
    assert(exprs_.size() == op->getNumOperands() + op->getNumResults() &&
           "one index list per operand and result");
    for (auto &e : exprs_)
      space.maps.push_back(AffineMap::get(space.numLoops(), 0, e, ctx));
    unsigned numOperands = op->getNumOperands();
    for (unsigned r = 0; r < op->getNumResults(); ++r) {
      AffineMap map = space.maps[numOperands + r];
      SmallVector<unsigned> partial;
      for (auto [i, loop] : llvm::enumerate(space.loops))
        if (loop.type == IteratorType::reduction &&
            loop.kind != ReductionKind::Generic && !map.isFunctionOfDim(i))
          partial.push_back(i);
      space.partialLoops.push_back(std::move(partial));
    }
    return std::move(space);
  }

private:
  Operation *op;
  MLIRContext *ctx;
  LoopSpace space;
  SmallVector<SmallVector<AffineExpr>> exprs_;
};

/// Index expressions of an operand of shape `shape` broadcast (aligned
/// right) against the loops `loops` of shape `full`: a missing leading
/// dimension has no expression, a stretched size-1 dimension is constant 0.
SmallVector<AffineExpr> broadcastExprs(SpaceBuilder &b, ArrayRef<int64_t> shape,
                                       ArrayRef<int64_t> full,
                                       ArrayRef<unsigned> loops) {
  SmallVector<AffineExpr> exprs;
  int64_t offset = full.size() - shape.size();
  for (auto [j, size] : llvm::enumerate(shape)) {
    int64_t i = offset + j;
    exprs.push_back(size == 1 && full[i] != 1 ? b.zero() : b.d(loops[i]));
  }
  return exprs;
}

/// Every operand and result indexes the same loops, one per dimension of
/// the first result; rank-0 operands (optimizer scalars) index none.
/// `fixed` dims are never split.
void elementwise(SpaceBuilder &b, Operation *op, ArrayRef<int64_t> fixed = {}) {
  int64_t rank = rankOf(op->getResult(0));
  SmallVector<unsigned> loops = b.parallels(rank);
  for (int64_t f : fixed)
    b.unsplittable(loops[f]);
  for (Value v : op->getOperands())
    b.next(rankOf(v) == 0 ? ArrayRef<unsigned>() : ArrayRef(loops));
  for (unsigned i = 0; i < op->getNumResults(); ++i)
    b.next(loops);
}

/// NumPy broadcasting: one loop per result dimension.
void broadcasting(SpaceBuilder &b, Operation *op) {
  ArrayRef<int64_t> full = shapeOf(op->getResult(0));
  SmallVector<unsigned> loops = b.parallels(full.size());
  for (Value v : op->getOperands())
    b.next(broadcastExprs(b, shapeOf(v), full, loops));
  b.next(loops);
}

void linear(SpaceBuilder &b, LinearOp op) {
  int64_t rank = rankOf(op.getInput());
  SmallVector<unsigned> batch = b.parallels(rank - 1);
  unsigned n = b.parallel();
  unsigned k = b.reduction(ReductionKind::Sum);
  SmallVector<unsigned> x(batch);
  x.push_back(k);
  b.next(x);
  b.next(ArrayRef<unsigned>{n, k});
  if (op.getBias())
    b.next(ArrayRef<unsigned>{n});
  SmallVector<unsigned> y(batch);
  y.push_back(n);
  b.next(y);
}

/// linear_weight_backward(grad[lead..., N], input[lead..., K]) -> [N, K]:
/// every leading loop is summed, so splitting any of them leaves a partial
/// sum.
void linearWeightBackward(SpaceBuilder &b, LinearWeightBackwardOp op) {
  SmallVector<unsigned> lead;
  for (int64_t i = 0; i + 1 < rankOf(op.getInput()); ++i)
    lead.push_back(b.reduction(ReductionKind::Sum));
  unsigned n = b.parallel(), k = b.parallel();
  SmallVector<unsigned> g(lead), x(lead);
  g.push_back(n);
  x.push_back(k);
  b.next(g);
  b.next(x);
  b.next(ArrayRef<unsigned>{n, k});
}

void matmul(SpaceBuilder &b, MatmulOp op) {
  ArrayRef<int64_t> full = shapeOf(op.getResult());
  ArrayRef<int64_t> batchShape = full.drop_back(2);
  SmallVector<unsigned> batch = b.parallels(batchShape.size());
  unsigned m = b.parallel(), n = b.parallel();
  unsigned k = b.reduction(ReductionKind::Sum);
  auto side = [&](Value v, unsigned inner0, unsigned inner1) {
    SmallVector<AffineExpr> e =
        broadcastExprs(b, shapeOf(v).drop_back(2), batchShape, batch);
    e.push_back(b.d(inner0));
    e.push_back(b.d(inner1));
    b.next(e);
  };
  side(op.getLhs(), m, k);
  side(op.getRhs(), k, n);
  SmallVector<unsigned> y(batch);
  y.push_back(m);
  y.push_back(n);
  b.next(y);
}

/// softmax / log_softmax: the normalized dimension is a generic reduction.
void softmaxLike(SpaceBuilder &b, Operation *op, int64_t dim) {
  int64_t rank = rankOf(op->getResult(0));
  dim = normalize(dim, rank);
  SmallVector<unsigned> loops;
  for (int64_t i = 0; i < rank; ++i)
    loops.push_back(i == dim ? b.reduction(ReductionKind::Generic, false)
                             : b.parallel());
  for (unsigned i = 0; i < op->getNumOperands() + op->getNumResults(); ++i)
    b.next(loops);
}

/// masked_attention and its backward: the leading (batch, head) loops are
/// parallel; the query, key and feature loops are never split (the
/// softmax couples a row's keys, and the backward sums over rows).
void attention(SpaceBuilder &b, Value query, Value mask, Value saved,
               bool backward) {
  ArrayRef<int64_t> qs = shapeOf(query);
  ArrayRef<int64_t> batchShape = qs.drop_back(2);
  SmallVector<unsigned> batch = b.parallels(batchShape.size());
  // T and E index the forward's results; the backward sums over them.
  auto resultLoop = [&] {
    return backward ? b.reduction(ReductionKind::Generic, false)
                    : b.parallel(false);
  };
  unsigned t = resultLoop();
  unsigned s = b.reduction(ReductionKind::Generic, false);
  unsigned d = b.reduction(ReductionKind::Generic, false);
  unsigned e = resultLoop();
  auto with = [&](unsigned i, unsigned j) {
    SmallVector<unsigned> l(batch);
    l.push_back(i);
    l.push_back(j);
    return l;
  };
  // The probabilities [..., T, S], or the rows' log-sum-exp [..., T].
  bool lse = shapeOf(saved).size() < qs.size();
  auto savedLoops = [&] {
    SmallVector<unsigned> l(batch);
    l.push_back(t);
    if (!lse)
      l.push_back(s);
    return l;
  };
  int64_t seq = qs[qs.size() - 2];
  SmallVector<int64_t> scores(batchShape);
  scores.append({seq, seq});
  if (backward)
    b.next(with(t, e)); // grad
  b.next(with(t, d));   // query
  b.next(with(s, d));   // key
  b.next(with(s, e));   // value
  b.next(broadcastExprs(b, shapeOf(mask), scores, with(t, s)));
  if (backward) {
    b.next(savedLoops()); // probs or log-sum-exp
    if (lse)
      b.next(with(t, e)); // output
    b.next(with(t, d));   // grad_query
    b.next(with(s, d));   // grad_key
    b.next(with(s, e));   // grad_value
  } else {
    b.next(with(t, e));   // result
    b.next(savedLoops()); // probs or log-sum-exp
  }
}

/// Loops of a tensor normalized over its trailing `normalizedRank` dims:
/// the leading ones of type `lead`, the trailing ones generic reductions
/// that are never split.
SmallVector<unsigned> normLoops(SpaceBuilder &b, int64_t rank,
                                int64_t normalizedRank, bool leadReduction) {
  SmallVector<unsigned> loops;
  for (int64_t i = 0; i < rank; ++i) {
    if (i >= rank - normalizedRank)
      loops.push_back(b.reduction(ReductionKind::Generic, false));
    else if (leadReduction)
      loops.push_back(b.reduction(ReductionKind::Sum));
    else
      loops.push_back(b.parallel());
  }
  return loops;
}

void layerNorm(SpaceBuilder &b, LayerNormOp op) {
  int64_t rank = rankOf(op.getInput()), nr = op.getNormalizedRank();
  SmallVector<unsigned> loops = normLoops(b, rank, nr, false);
  ArrayRef<unsigned> trailing = ArrayRef(loops).take_back(nr);
  b.next(loops);
  if (op.getWeight())
    b.next(trailing);
  if (op.getBias())
    b.next(trailing);
  b.next(loops);
}

void rmsNorm(SpaceBuilder &b, RmsNormOp op) {
  int64_t rank = rankOf(op.getInput()), nr = op.getNormalizedRank();
  SmallVector<unsigned> loops = normLoops(b, rank, nr, false);
  b.next(loops);
  if (op.getWeight())
    b.next(ArrayRef(loops).take_back(nr));
  b.next(loops);
}

/// grad_weight and grad_bias sum over the leading loops; grad_input keeps
/// them, so only the former are partial when a leading loop is split.
void layerNormBackward(SpaceBuilder &b, LayerNormBackwardOp op) {
  int64_t rank = rankOf(op.getInput()), nr = op.getNormalizedRank();
  SmallVector<unsigned> loops = normLoops(b, rank, nr, true);
  ArrayRef<unsigned> trailing = ArrayRef(loops).take_back(nr);
  b.next(loops);
  b.next(loops);
  if (op.getWeight())
    b.next(trailing);
  if (op.getBias())
    b.next(trailing);
  b.next(loops);
  b.next(trailing);
  b.next(trailing);
}

/// Batch norm: loops N, C, spatial... In training the batch statistics
/// couple N and the spatial loops: generic reductions that spmdize
/// completes with all-reduces (synchronized batch norm). In the backward op
/// they are summed by grad_weight and grad_bias.
SmallVector<unsigned> batchNormLoops(SpaceBuilder &b, int64_t rank,
                                     bool training, bool backward) {
  SmallVector<unsigned> loops;
  for (int64_t i = 0; i < rank; ++i) {
    if (i == 1)
      loops.push_back(b.parallel());
    else if (backward)
      loops.push_back(b.reduction(ReductionKind::Sum));
    else if (training)
      loops.push_back(b.reduction(ReductionKind::Generic));
    else
      loops.push_back(b.parallel());
  }
  return loops;
}

void batchNorm(SpaceBuilder &b, BatchNormOp op) {
  SmallVector<unsigned> loops =
      batchNormLoops(b, rankOf(op.getInput()), op.getTraining(), false);
  unsigned c = loops[1];
  b.next(loops);
  for (int i = 0; i < 4; ++i)
    b.next(ArrayRef<unsigned>{c});
  b.next(loops);
  b.next(ArrayRef<unsigned>{c});
  b.next(ArrayRef<unsigned>{c});
}

void batchNormBackward(SpaceBuilder &b, BatchNormBackwardOp op) {
  SmallVector<unsigned> loops =
      batchNormLoops(b, rankOf(op.getInput()), op.getTraining(), true);
  unsigned c = loops[1];
  b.next(loops);
  b.next(loops);
  for (int i = 0; i < 3; ++i)
    b.next(ArrayRef<unsigned>{c});
  b.next(loops);
  b.next(ArrayRef<unsigned>{c});
  b.next(ArrayRef<unsigned>{c});
}

/// embedding(weight[V, H], indices[S...]) -> [S..., H]: V is a sum loop
/// (spmdize masks the rows outside a shard, leaving a partial sum).
void embedding(SpaceBuilder &b, EmbeddingOp op) {
  SmallVector<unsigned> s = b.parallels(rankOf(op.getIndices()));
  unsigned h = b.parallel();
  unsigned v = b.reduction(ReductionKind::Sum);
  b.next(ArrayRef<unsigned>{v, h});
  b.next(s);
  SmallVector<unsigned> y(s);
  y.push_back(h);
  b.next(y);
}

/// index(input, indices, dim): the indexed dimension is a loop of the input
/// only, never split.
void index(SpaceBuilder &b, IndexOp op) {
  int64_t rank = rankOf(op.getInput()), k = rankOf(op.getIndices());
  int64_t dim = normalize(op.getDim(), rank);
  SmallVector<unsigned> pre = b.parallels(dim);
  SmallVector<unsigned> s = b.parallels(k);
  SmallVector<unsigned> post = b.parallels(rank - dim - 1);
  unsigned g = b.reduction(ReductionKind::Sum, false);
  SmallVector<unsigned> x(pre), y(pre);
  x.push_back(g);
  llvm::append_range(x, post);
  llvm::append_range(y, s);
  llvm::append_range(y, post);
  b.next(x);
  b.next(s);
  b.next(y);
}

/// index_backward(grad[pre, S, post], indices[S]) -> [pre, V, post]: the
/// index loops are summed; V may be split (spmdize masks foreign rows).
void indexBackward(SpaceBuilder &b, IndexBackwardOp op) {
  int64_t g = rankOf(op.getGrad()), k = rankOf(op.getIndices());
  int64_t dim = op.getDim();
  SmallVector<unsigned> pre = b.parallels(dim);
  SmallVector<unsigned> s;
  for (int64_t i = 0; i < k; ++i)
    s.push_back(b.reduction(ReductionKind::Sum));
  SmallVector<unsigned> post = b.parallels(g - dim - k);
  unsigned v = b.parallel();
  SmallVector<unsigned> x(pre), y(pre);
  llvm::append_range(x, s);
  llvm::append_range(x, post);
  y.push_back(v);
  llvm::append_range(y, post);
  b.next(x);
  b.next(s);
  b.next(y);
}

/// reshape: groups of input and result dimensions with equal products
/// (size-1 dimensions aside). There is one loop per result dimension; only
/// the major (outermost) dimension of a group may be split, which cuts both
/// sides into the same contiguous blocks. The input's other dimensions of a
/// group, and its size-1 dimensions, index the constant 0.
void reshape(SpaceBuilder &b, ReshapeOp op) {
  ArrayRef<int64_t> in = shapeOf(op.getInput()), out = shapeOf(op.getResult());
  SmallVector<unsigned> loops = b.parallels(out.size(), false);
  SmallVector<AffineExpr> inExprs(in.size(), b.zero());

  SmallVector<int64_t> ins, outs; // dimensions of size other than 1
  for (auto [i, s] : llvm::enumerate(in))
    if (s != 1)
      ins.push_back(i);
  for (auto [i, s] : llvm::enumerate(out))
    if (s != 1)
      outs.push_back(i);
  bool empty = llvm::is_contained(in, 0) || llvm::is_contained(out, 0);

  size_t i = 0, j = 0;
  while (!empty && i < ins.size() && j < outs.size()) {
    int64_t majorIn = ins[i], majorOut = outs[j];
    int64_t pi = in[ins[i]], pj = out[outs[j]];
    while (pi != pj) {
      if (pi < pj) {
        if (++i == ins.size())
          break;
        pi *= in[ins[i]];
      } else {
        if (++j == outs.size())
          break;
        pj *= out[outs[j]];
      }
    }
    if (pi != pj)
      break;
    inExprs[majorIn] = b.d(loops[majorOut]);
    b.splittable(loops[majorOut]);
    ++i;
    ++j;
  }
  b.next(inExprs);
  b.next(loops);
}

/// permute: one loop per result dimension; input dimension perm[i] indexes
/// loop i.
void permute(SpaceBuilder &b, PermuteOp op) {
  ArrayRef<int64_t> perm = op.getPermutation();
  SmallVector<unsigned> loops = b.parallels(perm.size());
  SmallVector<AffineExpr> in(perm.size());
  for (auto [i, p] : llvm::enumerate(perm))
    in[p] = b.d(loops[i]);
  b.next(in);
  b.next(loops);
}

void slice(SpaceBuilder &b, SliceOp op) {
  int64_t rank = rankOf(op.getInput());
  int64_t dim = normalize(op.getDim(), rank);
  int64_t start = op.getStart(), end = op.getEnd(), step = op.getStep();
  bool full = start == 0 && step == 1 && end == shapeOf(op.getInput())[dim];
  elementwise(b, op, full ? ArrayRef<int64_t>() : ArrayRef<int64_t>{dim});
}

void sliceBackward(SpaceBuilder &b, SliceBackwardOp op) {
  int64_t dim = op.getDim();
  int64_t start = op.getStart(), end = op.getEnd(), step = op.getStep();
  bool full = start == 0 && step == 1 && end == (int64_t)op.getDimSize();
  elementwise(b, op, full ? ArrayRef<int64_t>() : ArrayRef<int64_t>{dim});
}

/// select removes `dim`: its loop indexes the input only and is never split.
void select(SpaceBuilder &b, SelectOp op) {
  int64_t rank = rankOf(op.getInput());
  int64_t dim = normalize(op.getDim(), rank);
  SmallVector<unsigned> loops = b.parallels(rank);
  b.unsplittable(loops[dim]);
  b.next(loops);
  SmallVector<unsigned> y(loops);
  y.erase(y.begin() + dim);
  b.next(y);
}

void concat(SpaceBuilder &b, ConcatOp op) {
  int64_t rank = rankOf(op.getResult());
  elementwise(b, op, {normalize(op.getDim(), rank)});
}

/// expand: one loop per result dimension; the input indexes stretched
/// size-1 dimensions with the constant 0.
void expand(SpaceBuilder &b, ExpandOp op) {
  ArrayRef<int64_t> full = shapeOf(op.getResult());
  SmallVector<unsigned> loops = b.parallels(full.size());
  b.next(broadcastExprs(b, shapeOf(op.getInput()), full, loops));
  b.next(loops);
}

void pad(SpaceBuilder &b, PadOp op) {
  SmallVector<int64_t> fixed;
  for (auto [i, lh] : llvm::enumerate(llvm::zip(op.getLow(), op.getHigh())))
    if (std::get<0>(lh) != 0 || std::get<1>(lh) != 0)
      fixed.push_back(i);
  elementwise(b, op, fixed);
}

void roll(SpaceBuilder &b, RollOp op) {
  int64_t rank = rankOf(op.getInput());
  SmallVector<int64_t> fixed;
  for (int64_t d : op.getDims())
    fixed.push_back(normalize(d, rank));
  elementwise(b, op, fixed);
}

/// cumsum: elementwise, the summed dimension never split (a split would
/// need each shard's running total from the shards before it).
void cumsum(SpaceBuilder &b, CumsumOp op) {
  int64_t rank = rankOf(op.getInput());
  elementwise(b, op, {normalize(op.getDim(), rank)});
}

/// update_slice: elementwise over input, update and result, the written
/// dimension never split (its sizes differ); the position is a loop of
/// its own, never split.
void updateSlice(SpaceBuilder &b, UpdateSliceOp op) {
  int64_t rank = rankOf(op.getInput());
  SmallVector<unsigned> loops = b.parallels(rank);
  b.unsplittable(loops[normalize(op.getDim(), rank)]);
  SmallVector<unsigned> p = b.parallels(rankOf(op.getPosition()));
  for (unsigned l : p)
    b.unsplittable(l);
  b.next(loops);
  b.next(loops);
  b.next(p);
  b.next(loops);
}

void tri(SpaceBuilder &b, Operation *op) {
  int64_t rank = rankOf(op->getResult(0));
  elementwise(b, op, {rank - 2, rank - 1});
}

/// Reductions: reduced dimensions are reduction loops of `kind`; with
/// keepdim, each kept size-1 result dimension has a loop of its own.
void reduce(SpaceBuilder &b, Operation *op, ArrayRef<int64_t> dims,
            bool keepdim, ReductionKind kind) {
  int64_t rank = rankOf(op->getOperand(0));
  SmallVector<bool> reduced(rank, dims.empty());
  for (int64_t d : dims)
    reduced[normalize(d, rank)] = true;
  SmallVector<unsigned> loops;
  for (int64_t i = 0; i < rank; ++i)
    loops.push_back(reduced[i] ? b.reduction(kind) : b.parallel());
  SmallVector<unsigned> y;
  for (int64_t i = 0; i < rank; ++i) {
    if (!reduced[i])
      y.push_back(loops[i]);
    else if (keepdim)
      y.push_back(b.parallel(false));
  }
  b.next(loops);
  b.next(y);
}

/// Input coordinate of a window: out * stride + k * dilation - padding.
AffineExpr windowExpr(SpaceBuilder &b, unsigned out, unsigned k, int64_t stride,
                      int64_t dilation, int64_t padding) {
  return b.d(out) * stride + b.d(k) * dilation - padding;
}

/// conv2d(input[N, Cin, H, W], weight[Cout, Cin/g, kh, kw], bias[Cout]):
/// loops N, Cout, oH, oW, Cin (sum), kh, kw (sum). Spatial loops are never
/// split; grouped convolutions keep their channels whole.
void conv2d(SpaceBuilder &b, Conv2dOp op) {
  bool dense = op.getGroups() == 1;
  unsigned n = b.parallel(), cout = b.parallel(dense);
  unsigned oh = b.parallel(false), ow = b.parallel(false);
  unsigned cin = b.reduction(ReductionKind::Sum, dense);
  unsigned kh = b.reduction(ReductionKind::Sum, false);
  unsigned kw = b.reduction(ReductionKind::Sum, false);
  ArrayRef<int64_t> s = op.getStride(), p = op.getPadding(),
                    dl = op.getDilation();
  b.next({b.d(n), b.d(cin), windowExpr(b, oh, kh, s[0], dl[0], p[0]),
          windowExpr(b, ow, kw, s[1], dl[1], p[1])});
  b.next(ArrayRef<unsigned>{cout, cin, kh, kw});
  if (op.getBias())
    b.next(ArrayRef<unsigned>{cout});
  b.next(ArrayRef<unsigned>{n, cout, oh, ow});
}

/// conv2d_backward(grad, input, weight) -> grad_input, grad_weight,
/// grad_bias: N is summed by grad_weight and grad_bias, Cout by grad_input;
/// the input's spatial dimensions are loops of their own.
void conv2dBackward(SpaceBuilder &b, Conv2dBackwardOp op) {
  bool dense = op.getGroups() == 1;
  unsigned n = b.reduction(ReductionKind::Sum);
  unsigned cout = b.reduction(ReductionKind::Sum, dense);
  unsigned cin = b.parallel(dense);
  unsigned oh = b.reduction(ReductionKind::Sum, false);
  unsigned ow = b.reduction(ReductionKind::Sum, false);
  unsigned kh = b.reduction(ReductionKind::Sum, false);
  unsigned kw = b.reduction(ReductionKind::Sum, false);
  unsigned h = b.parallel(false), w = b.parallel(false);
  b.next(ArrayRef<unsigned>{n, cout, oh, ow});
  b.next(ArrayRef<unsigned>{n, cin, h, w});
  b.next(ArrayRef<unsigned>{cout, cin, kh, kw});
  b.next(ArrayRef<unsigned>{n, cin, h, w});
  b.next(ArrayRef<unsigned>{cout, cin, kh, kw});
  b.next(ArrayRef<unsigned>{cout});
}

/// Windowed pooling over the last two dimensions ([N, C, H, W] or
/// [C, H, W]): leading loops parallel, windows never split.
void pool(SpaceBuilder &b, Operation *op, ArrayRef<int64_t> stride,
          ArrayRef<int64_t> padding, ArrayRef<int64_t> dilation,
          ReductionKind kind) {
  int64_t rank = rankOf(op->getOperand(0));
  SmallVector<unsigned> lead = b.parallels(rank - 2);
  unsigned oh = b.parallel(false), ow = b.parallel(false);
  unsigned kh = b.reduction(kind, false), kw = b.reduction(kind, false);
  SmallVector<AffineExpr> in = b.dims(lead);
  in.push_back(windowExpr(b, oh, kh, stride[0], dilation[0], padding[0]));
  in.push_back(windowExpr(b, ow, kw, stride[1], dilation[1], padding[1]));
  b.next(in);
  SmallVector<unsigned> y(lead);
  y.push_back(oh);
  y.push_back(ow);
  b.next(y);
}

void adaptivePool(SpaceBuilder &b, AdaptiveAvgPool2dOp op) {
  int64_t rank = rankOf(op.getInput());
  SmallVector<unsigned> lead = b.parallels(rank - 2);
  unsigned oh = b.parallel(false), ow = b.parallel(false);
  unsigned h = b.reduction(ReductionKind::Average, false);
  unsigned w = b.reduction(ReductionKind::Average, false);
  SmallVector<unsigned> x(lead), y(lead);
  x.push_back(h);
  x.push_back(w);
  y.push_back(oh);
  y.push_back(ow);
  b.next(x);
  b.next(y);
}

/// Pooling gradients (grad[.., oH, oW], input[.., H, W]) -> [.., H, W].
void poolBackward(SpaceBuilder &b, Operation *op) {
  int64_t rank = rankOf(op->getResult(0));
  SmallVector<unsigned> lead = b.parallels(rank - 2);
  unsigned h = b.parallel(false), w = b.parallel(false);
  unsigned oh = b.reduction(ReductionKind::Sum, false);
  unsigned ow = b.reduction(ReductionKind::Sum, false);
  SmallVector<unsigned> g(lead), x(lead);
  g.push_back(oh);
  g.push_back(ow);
  x.push_back(h);
  x.push_back(w);
  b.next(g);
  b.next(x);
  b.next(x);
}

/// cross_entropy(logits[N, C], target[N]): N is a sum (average for `mean`)
/// loop unless reduction = none; C is a generic reduction that spmdize
/// completes with collectives (vocabulary-parallel cross-entropy).
void crossEntropy(SpaceBuilder &b, CrossEntropyOp op) {
  unsigned n;
  switch (op.getReduction()) {
  case LossReduction::none:
    n = b.parallel();
    break;
  case LossReduction::sum:
    n = b.reduction(ReductionKind::Sum);
    break;
  case LossReduction::mean:
    n = b.reduction(ReductionKind::Average);
    break;
  }
  unsigned c = b.reduction(ReductionKind::Generic);
  b.next(ArrayRef<unsigned>{n, c});
  b.next(ArrayRef<unsigned>{n});
  b.next(op.getReduction() == LossReduction::none ? ArrayRef<unsigned>{n}
                                                  : ArrayRef<unsigned>());
}

void crossEntropyBackward(SpaceBuilder &b, CrossEntropyBackwardOp op) {
  unsigned n = b.parallel();
  unsigned c = b.reduction(ReductionKind::Generic);
  b.next(op.getReduction() == LossReduction::none ? ArrayRef<unsigned>{n}
                                                  : ArrayRef<unsigned>());
  b.next(ArrayRef<unsigned>{n, c});
  b.next(ArrayRef<unsigned>{n});
  b.next(ArrayRef<unsigned>{n, c});
}

/// A constant is replicated: propagation never splits it (resharding cuts
/// it with mesh.all_slice where a user wants it split).
void constant(SpaceBuilder &b, ConstantOp op) {
  SmallVector<unsigned> loops = b.parallels(rankOf(op.getResult()), false);
  b.next(loops);
}

} // namespace

std::optional<LoopSpace> merak::getLoopSpace(Operation *op) {
  SpaceBuilder b(op);
  bool known =
      llvm::TypeSwitch<Operation *, bool>(op)
          // Elementwise, same shape everywhere (rank-0 optimizer scalars
          // aside).
          .Case<NegOp, AbsOp, ExpOp, LogOp, SinOp, CosOp, SqrtOp, RsqrtOp,
                ReciprocalOp, ErfOp, TanhOp, SigmoidOp, SiluOp, ReluOp, NotOp,
                GeluOp, ClampOp, CastOp, DropoutOp, DropoutMaskOp,
                GeluBackwardOp, SgdUpdateOp, AdamwUpdateOp>([&](Operation *o) {
            elementwise(b, o);
            return true;
          })
          .Case<TrilOp, TriuOp>([&](Operation *o) {
            tri(b, o);
            return true;
          })
          // Elementwise with broadcasting.
          .Case<AddOp, SubOp, MulOp, DivOp, PowOp, RemainderOp, FloorDivideOp,
                MinimumOp, MaximumOp, AndOp, OrOp, CompareOp, WhereOp>(
              [&](Operation *o) {
                broadcasting(b, o);
                return true;
              })
          // Contractions.
          .Case([&](LinearOp o) {
            linear(b, o);
            return true;
          })
          .Case([&](MatmulOp o) {
            matmul(b, o);
            return true;
          })
          .Case([&](LinearWeightBackwardOp o) {
            linearWeightBackward(b, o);
            return true;
          })
          // Normalizations.
          .Case([&](SoftmaxOp o) {
            softmaxLike(b, o, o.getDim());
            return true;
          })
          .Case([&](LogSoftmaxOp o) {
            softmaxLike(b, o, o.getDim());
            return true;
          })
          .Case([&](SoftmaxBackwardOp o) {
            softmaxLike(b, o, o.getDim());
            return true;
          })
          .Case([&](MaskedAttentionOp o) {
            attention(b, o.getQuery(), o.getMask(), o.getSaved(), false);
            return true;
          })
          .Case([&](MaskedAttentionBackwardOp o) {
            attention(b, o.getQuery(), o.getMask(), o.getSaved(), true);
            return true;
          })
          .Case([&](LayerNormOp o) {
            layerNorm(b, o);
            return true;
          })
          .Case([&](RmsNormOp o) {
            rmsNorm(b, o);
            return true;
          })
          .Case([&](LayerNormBackwardOp o) {
            layerNormBackward(b, o);
            return true;
          })
          .Case([&](BatchNormOp o) {
            batchNorm(b, o);
            return true;
          })
          .Case([&](BatchNormBackwardOp o) {
            batchNormBackward(b, o);
            return true;
          })
          // Gathers and scatters.
          .Case([&](EmbeddingOp o) {
            embedding(b, o);
            return true;
          })
          .Case([&](IndexOp o) {
            index(b, o);
            return true;
          })
          .Case([&](IndexBackwardOp o) {
            indexBackward(b, o);
            return true;
          })
          // Data movement.
          .Case([&](ReshapeOp o) {
            reshape(b, o);
            return true;
          })
          .Case([&](PermuteOp o) {
            permute(b, o);
            return true;
          })
          .Case([&](SliceOp o) {
            slice(b, o);
            return true;
          })
          .Case([&](SliceBackwardOp o) {
            sliceBackward(b, o);
            return true;
          })
          .Case([&](SelectOp o) {
            select(b, o);
            return true;
          })
          .Case([&](ConcatOp o) {
            concat(b, o);
            return true;
          })
          .Case([&](ExpandOp o) {
            expand(b, o);
            return true;
          })
          .Case([&](PadOp o) {
            pad(b, o);
            return true;
          })
          .Case([&](RollOp o) {
            roll(b, o);
            return true;
          })
          .Case([&](UpdateSliceOp o) {
            updateSlice(b, o);
            return true;
          })
          .Case([&](CumsumOp o) {
            cumsum(b, o);
            return true;
          })
          // Reductions.
          .Case([&](ReduceSumOp o) {
            reduce(b, o, o.getDims(), o.getKeepdim(), ReductionKind::Sum);
            return true;
          })
          .Case([&](ReduceMeanOp o) {
            reduce(b, o, o.getDims(), o.getKeepdim(), ReductionKind::Average);
            return true;
          })
          .Case([&](ReduceMaxOp o) {
            reduce(b, o, o.getDims(), o.getKeepdim(), ReductionKind::Max);
            return true;
          })
          // Convolution and pooling.
          .Case([&](Conv2dOp o) {
            conv2d(b, o);
            return true;
          })
          .Case([&](Conv2dBackwardOp o) {
            conv2dBackward(b, o);
            return true;
          })
          .Case([&](MaxPool2dOp o) {
            pool(b, o, o.getStride(), o.getPadding(), o.getDilation(),
                 ReductionKind::Max);
            return true;
          })
          .Case([&](AvgPool2dOp o) {
            int64_t ones[] = {1, 1};
            pool(b, o, o.getStride(), o.getPadding(), ones,
                 ReductionKind::Average);
            return true;
          })
          .Case([&](AdaptiveAvgPool2dOp o) {
            adaptivePool(b, o);
            return true;
          })
          .Case<MaxPool2dBackwardOp, AvgPool2dBackwardOp,
                AdaptiveAvgPool2dBackwardOp>([&](Operation *o) {
            poolBackward(b, o);
            return true;
          })
          // Losses.
          .Case([&](CrossEntropyOp o) {
            crossEntropy(b, o);
            return true;
          })
          .Case([&](CrossEntropyBackwardOp o) {
            crossEntropyBackward(b, o);
            return true;
          })
          .Case([&](ConstantOp o) {
            constant(b, o);
            return true;
          })
          .Default([](Operation *) { return false; });
  if (!known)
    return std::nullopt;
  return b.finish();
}

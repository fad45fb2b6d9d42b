//===- MerakSharding.cpp - mesh::ShardingInterface of every merak op ------===//
//
// One external model serves every merak op. It reads the op's LoopSpace
// (MerakShardingRules.cpp) and implements the upstream interface on it:
//
// - getShardingOption assigns mesh axes to loops from the annotations
//   around the op, then drops the axes of loops the op cannot split (and of
//   loops whose dimensions the axes do not divide), so propagation never
//   picks them; replication only propagates forward;
// - addShardingAnnotations writes `mesh.shard` ops from an option; a result
//   is partial over the split loops that it reduces (per result, so
//   layer_norm_backward's grad_input is split where grad_weight is partial);
// - spmdize checks that the annotations it receives are consistent and
//   supported (or fails with a diagnostic), then builds the rank-local op:
//   usually the op cloned with local operand types and its result types
//   re-inferred, with shape attributes fixed; and local computations with
//   mesh collectives where the op's local form differs (vocabulary-parallel
//   embedding and cross-entropy, mean losses over a split batch, biases of
//   split contractions, synchronized batch norm).
//
// Upstream's default implementations are not used: they reject the
// constant-0 expressions of broadcast and reshape maps, support at most one
// partial result per op, and fail on ops without loops (rank-0 values).
//
//===----------------------------------------------------------------------===//

#include "MerakSharding.h"

#include "merak/Dialect/Merak/IR/MerakOps.h"

#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/Dialect/Mesh/Interfaces/ShardingInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"

#include <string>

using namespace mlir;
using namespace merak;
using mesh::MeshAxis;
using mesh::MeshShardingAttr;
using mesh::ReductionKind;
using mesh::ShardingArray;
using mesh::ShardingOption;

namespace {

//===----------------------------------------------------------------------===//
// Utilities
//===----------------------------------------------------------------------===//

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

std::optional<unsigned> loopOf(AffineExpr e) {
  if (auto d = dyn_cast<AffineDimExpr>(e))
    return d.getPosition();
  return std::nullopt;
}

ArrayRef<MeshAxis> splitAxesOf(MeshShardingAttr s, unsigned dim) {
  ArrayRef<mesh::MeshAxesAttr> split = s.getSplitAxes();
  if (dim < split.size())
    return split[dim].asArrayRef();
  return {};
}

ArrayRef<MeshAxis> axesOf(const ShardingArray &axes, unsigned loop) {
  if (loop < axes.size())
    return axes[loop];
  return {};
}

/// The operands, then the results, of `op`.
SmallVector<Value> valuesOf(Operation *op) {
  SmallVector<Value> values(op->getOperands());
  llvm::append_range(values, op->getResults());
  return values;
}

std::string axesStr(ArrayRef<MeshAxis> axes) {
  std::string s = "[";
  for (auto [i, a] : llvm::enumerate(axes))
    s += (i ? ", " : "") + std::to_string(a);
  return s + "]";
}

std::string valueName(Operation *op, unsigned v) {
  unsigned n = op->getNumOperands();
  return v < n ? "operand #" + std::to_string(v)
               : "result #" + std::to_string(v - n);
}

/// "dimension 1 of operand #0": the first tensor dimension a loop indexes.
std::string loopName(Operation *op, const LoopSpace &space, unsigned loop) {
  for (auto [v, map] : llvm::enumerate(space.maps))
    for (auto [d, e] : llvm::enumerate(map.getResults()))
      if (loopOf(e) == loop)
        return "dimension " + std::to_string(d) + " of " + valueName(op, v);
  return "loop " + std::to_string(loop);
}

/// Whether every tensor dimension that `loop` indexes is divisible by
/// `count` (shards must be equal: mesh.shard cannot express a remainder).
bool divides(Operation *op, const LoopSpace &space, unsigned loop,
             int64_t count) {
  if (ShapedType::isDynamic(count))
    return false;
  for (auto [value, map] : llvm::zip(valuesOf(op), space.maps)) {
    ArrayRef<int64_t> shape = typeOf(value).getShape();
    for (auto [d, e] : llvm::enumerate(map.getResults()))
      if (loopOf(e) == loop && shape[d] % count != 0)
        return false;
  }
  return true;
}

/// The sharding of one operand (`partialLoops` empty) or result under
/// `option`.
FailureOr<MeshShardingAttr> shardingFor(MLIRContext *ctx,
                                        const LoopSpace &space, AffineMap map,
                                        ArrayRef<unsigned> partialLoops,
                                        const ShardingOption &option) {
  SmallVector<SmallVector<MeshAxis>> split;
  for (AffineExpr e : map.getResults()) {
    std::optional<unsigned> loop = loopOf(e);
    split.emplace_back(loop ? axesOf(option.shardingArray, *loop)
                            : ArrayRef<MeshAxis>());
  }
  SmallVector<MeshAxis> partial;
  std::optional<ReductionKind> kind;
  for (unsigned loop : partialLoops) {
    ArrayRef<MeshAxis> axes = axesOf(option.shardingArray, loop);
    if (axes.empty())
      continue;
    if (kind && *kind != space.loops[loop].kind)
      return failure(); // one partial kind per value
    kind = space.loops[loop].kind;
    llvm::append_range(partial, axes);
  }
  // Trailing replicated dimensions are left out, but a ranked tensor keeps
  // one entry: `[[]]` is the only replicated form MLIR 19 parses. A rank-0
  // tensor has none (`[[]]` would make mesh-spmdization index a dimension
  // it does not have).
  mesh::removeTrailingEmptySubArray(split);
  if (split.empty() && map.getNumResults() > 0)
    split.emplace_back();
  return MeshShardingAttr::get(ctx, option.mesh, split, partial,
                               kind.value_or(ReductionKind::Sum));
}

//===----------------------------------------------------------------------===//
// Propagation
//===----------------------------------------------------------------------===//

/// Whether the annotation of operand `i` is one the op must follow (an
/// annotation for its users), or that of result `i` one it must produce (the
/// result's defining annotation), as opposed to a neighbour's wish.
bool isMustOperand(Operation *op, unsigned i) {
  FailureOr<std::pair<bool, MeshShardingAttr>> s =
      mesh::getMeshShardingAttr(op->getOpOperand(i));
  return succeeded(s) && s->first;
}
bool isMustResult(Operation *op, unsigned i) {
  FailureOr<std::pair<bool, MeshShardingAttr>> s =
      mesh::getMeshShardingAttr(op->getResult(i));
  return succeeded(s) && !s->first;
}

/// Propagation's rule. Splits spread to every loop they reach; a loop the
/// op cannot split, or whose dimensions the mesh axes do not divide, drops
/// them. Replication is the default rather than a constraint: an op takes
/// an all-replicated option only when all its operands are known (then it
/// computes replicated) or an annotation it must follow says so, never
/// because a user wished its result replicated. So a replicated parameter
/// at the optimizer update does not replicate the whole backward pass in
/// propagation's reverse sweep; the forward sweep brings the splits (and
/// turns the weight gradient's partial sum into an all-reduce).
FailureOr<ShardingOption>
getShardingOption(Operation *op, ArrayRef<MeshShardingAttr> operandShardings,
                  ArrayRef<MeshShardingAttr> resultShardings) {
  std::optional<LoopSpace> space = getLoopSpace(op);
  if (!space)
    return failure();
  unsigned numOperands = op->getNumOperands();
  ShardingArray axes(space->numLoops());
  // Loops fixed by an annotation the op must follow.
  SmallVector<std::optional<SmallVector<MeshAxis>>> pinned(space->numLoops());
  FlatSymbolRefAttr meshName;
  bool any = false, anyMust = false;

  // Conflicts fail quietly: propagation then tries the next combination of
  // the optional annotations.
  auto useMesh = [&](MeshShardingAttr s) {
    if (meshName && s.getMesh() != meshName)
      return failure();
    meshName = s.getMesh();
    any = true;
    return success();
  };
  auto pin = [&](MeshShardingAttr s, AffineMap map) {
    anyMust = true;
    for (auto [d, e] : llvm::enumerate(map.getResults())) {
      std::optional<unsigned> loop = loopOf(e);
      if (!loop)
        continue;
      ArrayRef<MeshAxis> a = splitAxesOf(s, d);
      if (pinned[*loop] && !llvm::equal(*pinned[*loop], a))
        return failure();
      pinned[*loop] = SmallVector<MeshAxis>(a);
    }
    return success();
  };
  auto assign = [&](unsigned loop, ArrayRef<MeshAxis> a) -> LogicalResult {
    if (a.empty() || pinned[loop])
      return success();
    if (!axes[loop].empty())
      return success(llvm::equal(axes[loop], a));
    axes[loop].assign(a.begin(), a.end());
    return success();
  };
  auto assignSplits = [&](MeshShardingAttr s, AffineMap map) {
    for (auto [d, e] : llvm::enumerate(map.getResults()))
      if (std::optional<unsigned> loop = loopOf(e))
        if (failed(assign(*loop, splitAxesOf(s, d))))
          return failure();
    return success();
  };

  for (auto [r, s] : llvm::enumerate(resultShardings))
    if (s &&
        (failed(useMesh(s)) ||
         (isMustResult(op, r) && failed(pin(s, space->maps[numOperands + r])))))
      return failure();
  bool allOperandsKnown = true;
  for (auto [o, s] : llvm::enumerate(operandShardings)) {
    if (!s) {
      Operation *def = op->getOperand(o).getDefiningOp();
      allOperandsKnown &= def && def->hasTrait<OpTrait::ConstantLike>();
      continue;
    }
    if (failed(useMesh(s)) ||
        (isMustOperand(op, o) && failed(pin(s, space->maps[o]))))
      return failure();
  }
  if (!any)
    return ShardingOption::makeEmpty();

  // Results first (they carry the partial axes), then operands. A split of
  // a constant or window expression is ignored: resharding undoes it.
  SmallVector<std::pair<unsigned, MeshShardingAttr>> partials;
  for (auto [r, s] : llvm::enumerate(resultShardings)) {
    if (!s)
      continue;
    if (failed(assignSplits(s, space->maps[numOperands + r])))
      return failure();
    if (!s.getPartialAxes().empty())
      partials.emplace_back(r, s);
  }
  for (auto [o, s] : llvm::enumerate(operandShardings))
    if (s && failed(assignSplits(s, space->maps[o])))
      return failure();
  for (auto [l, p] : llvm::enumerate(pinned))
    if (p)
      axes[l] = *p;
  // A partial result needs one of its reduction loops split over its
  // partial axes.
  for (auto [r, s] : partials) {
    ArrayRef<unsigned> candidates = space->partialLoops[r];
    if (llvm::any_of(candidates, [&](unsigned l) { return !axes[l].empty(); }))
      continue;
    auto kind = s.getPartialType();
    auto it = llvm::find_if(candidates, [&](unsigned l) {
      return space->loops[l].splittable && !pinned[l] &&
             space->loops[l].kind == kind;
    });
    if (it == candidates.end())
      return failure();
    axes[*it].assign(s.getPartialAxes().begin(), s.getPartialAxes().end());
  }
  // A mesh axis splits one loop at most.
  for (auto [l, a] : llvm::enumerate(axes))
    for (auto [l2, a2] : llvm::enumerate(axes))
      if (l < l2 && llvm::any_of(a, [&, &a2 = a2](MeshAxis x) {
            return llvm::is_contained(a2, x);
          }))
        return failure();

  auto meshOp =
      SymbolTable::lookupNearestSymbolFrom<mesh::MeshOp>(op, meshName);
  if (!meshOp)
    return failure();
  for (auto [l, a] : llvm::enumerate(axes)) {
    if (a.empty())
      continue;
    if (!space->loops[l].splittable ||
        !divides(op, *space, l, mesh::collectiveProcessGroupSize(a, meshOp)))
      a.clear();
  }
  bool anySplit = llvm::any_of(axes, [](auto &a) { return !a.empty(); });
  if (!anySplit && !allOperandsKnown && !anyMust)
    return ShardingOption::makeEmpty();
  mesh::removeTrailingEmptySubArray(axes);
  return ShardingOption(std::move(axes), meshName);
}

FailureOr<SmallVector<MeshShardingAttr>>
getShardingAnnotations(Operation *op, const ShardingOption &option) {
  std::optional<LoopSpace> space = getLoopSpace(op);
  if (!space)
    return failure();
  unsigned numOperands = op->getNumOperands();
  SmallVector<MeshShardingAttr> result;
  for (auto [v, map] : llvm::enumerate(space->maps)) {
    ArrayRef<unsigned> partial;
    if (v >= numOperands)
      partial = space->partialLoops[v - numOperands];
    FailureOr<MeshShardingAttr> s =
        shardingFor(op->getContext(), *space, map, partial, option);
    if (failed(s))
      return failure();
    result.push_back(*s);
  }
  return result;
}

LogicalResult addShardingAnnotations(Operation *op, OpBuilder &b,
                                     const ShardingOption &option) {
  FailureOr<SmallVector<MeshShardingAttr>> shardings =
      getShardingAnnotations(op, option);
  if (failed(shardings))
    return failure();
  unsigned numOperands = op->getNumOperands();
  OpBuilder::InsertionGuard guard(b);
  for (OpResult r : op->getResults()) {
    FailureOr<std::pair<bool, MeshShardingAttr>> existing =
        mesh::getMeshShardingAttr(r);
    if (succeeded(existing) && !existing->first)
      continue; // already annotated by its definition
    b.setInsertionPointAfterValue(r);
    auto shard = b.create<mesh::ShardOp>(
        r.getLoc(), r, (*shardings)[numOperands + r.getResultNumber()],
        /*annotate_for_users=*/false);
    r.replaceAllUsesExcept(shard, shard);
  }
  for (OpOperand &o : op->getOpOperands()) {
    FailureOr<std::pair<bool, MeshShardingAttr>> existing =
        mesh::getMeshShardingAttr(o);
    if (succeeded(existing) && existing->first)
      continue; // already annotated for its users
    b.setInsertionPoint(op);
    auto shard = b.create<mesh::ShardOp>(o.get().getLoc(), o.get(),
                                         (*shardings)[o.getOperandNumber()],
                                         /*annotate_for_users=*/true);
    o.set(shard);
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Spmdization
//===----------------------------------------------------------------------===//

/// Rank-local construction of one op: the loop axes its annotations agree
/// on, the local operands and result types, and builders for the local
/// computation.
class Spmd {
public:
  Spmd(Operation *op, const LoopSpace &space, mesh::MeshOp mesh,
       ShardingArray axes, ArrayRef<Value> operands, OpBuilder &b)
      : op(op), space(space), mesh(mesh), axes(std::move(axes)),
        operands(operands), b(b), loc(op->getLoc()) {
    for (auto [r, result] : llvm::enumerate(op->getResults())) {
      AffineMap map = space.maps[op->getNumOperands() + r];
      SmallVector<int64_t> shape(typeOf(result).getShape());
      for (auto [d, e] : llvm::enumerate(map.getResults()))
        shape[d] /= count(*loopOf(e));
      resultTypes.push_back(
          RankedTensorType::get(shape, typeOf(result).getElementType()));
    }
  }

  Operation *op;
  const LoopSpace &space;
  mesh::MeshOp mesh;
  ShardingArray axes;
  ArrayRef<Value> operands;
  OpBuilder &b;
  Location loc;
  SmallVector<RankedTensorType> resultTypes;
  SmallVector<Value> results;

  ArrayRef<MeshAxis> axesOf(unsigned loop) const {
    return ::axesOf(axes, loop);
  }
  bool isSplit(unsigned loop) const { return !axesOf(loop).empty(); }
  int64_t count(unsigned loop) const {
    return mesh::collectiveProcessGroupSize(axesOf(loop), mesh);
  }

  /// The op cloned onto local operands (`newOperands` where given), with
  /// `fix` adjusting attributes; result types are re-inferred where the op
  /// infers them and must equal the local types of its annotations.
  FailureOr<Operation *>
  cloneLocal(ValueRange newOperands = {},
             function_ref<void(Operation *)> fix = nullptr) {
    IRMapping local;
    local.map(op->getOperands(),
              newOperands.empty() ? ValueRange(operands) : newOperands);
    Operation *n = b.clone(*op, local);
    if (fix)
      fix(n);
    if (auto infer = dyn_cast<InferTypeOpInterface>(n)) {
      SmallVector<Type> inferred;
      if (failed(infer.inferReturnTypes(
              n->getContext(), n->getLoc(), n->getOperands(),
              n->getRawDictionaryAttrs(), n->getPropertiesStorage(),
              n->getRegions(), inferred))) {
        n->erase();
        return failure();
      }
      for (auto [i, t] : llvm::enumerate(inferred))
        if (t != resultTypes[i]) {
          n->erase();
          op->emitOpError("local result #")
              << i << " would be " << t << ", but its sharding gives "
              << resultTypes[i];
          return failure();
        }
    }
    for (auto [r, t] : llvm::zip(n->getResults(), resultTypes))
      r.setType(t);
    if (failed(mlir::verify(n)))
      return failure();
    return n;
  }

  LogicalResult finishClone(FailureOr<Operation *> n) {
    if (failed(n))
      return failure();
    results.assign((*n)->result_begin(), (*n)->result_end());
    return success();
  }

  // Builders of the local computations.
  Value scalar(Type elem, double v) {
    auto type = RankedTensorType::get({}, elem);
    Attribute a = isa<FloatType>(elem)
                      ? Attribute(b.getFloatAttr(elem, v))
                      : Attribute(b.getIntegerAttr(elem, (int64_t)v));
    return b.create<ConstantOp>(loc, type, DenseElementsAttr::get(type, a));
  }
  Value iota(ArrayRef<int64_t> shape, Type elem) {
    auto type = RankedTensorType::get(shape, elem);
    SmallVector<APInt> values;
    for (int64_t i = 0; i < type.getNumElements(); ++i)
      values.emplace_back(elem.getIntOrFloatBitWidth(), i, /*isSigned=*/true);
    return b.create<ConstantOp>(loc, type,
                                DenseElementsAttr::get(type, values));
  }
  /// The first global index of this rank's block of `loop`, whose blocks
  /// have `block` elements: all_slice of [0, block, 2 * block, ...] over
  /// the loop's mesh axes, so no index arithmetic on the process id.
  Value blockOffset(unsigned loop, int64_t block, Type elem) {
    int64_t k = count(loop);
    auto type = RankedTensorType::get({k}, elem);
    SmallVector<APInt> values;
    for (int64_t i = 0; i < k; ++i)
      values.emplace_back(elem.getIntOrFloatBitWidth(), i * block,
                          /*isSigned=*/true);
    Value all =
        b.create<ConstantOp>(loc, type, DenseElementsAttr::get(type, values));
    Value mine =
        b.create<mesh::AllSliceOp>(loc, RankedTensorType::get({1}, elem), all,
                                   mesh.getSymName(), axesOf(loop), 0);
    return reshape(mine, {});
  }
  Value allReduce(Value v, unsigned loop, ReductionKind kind) {
    return allReduce(v, axesOf(loop), kind);
  }
  Value allReduce(Value v, ArrayRef<MeshAxis> meshAxes, ReductionKind kind) {
    return b.create<mesh::AllReduceOp>(loc, v, mesh.getSymName(), meshAxes,
                                       kind);
  }
  Value reshape(Value v, ArrayRef<int64_t> shape) {
    return b.create<ReshapeOp>(loc, v, shape);
  }
  Value cast(Value v, Type elem) {
    auto t = typeOf(v);
    return b.create<CastOp>(loc, RankedTensorType::get(t.getShape(), elem), v);
  }
  Value compare(ComparePredicate p, Value l, Value r) {
    return b.create<CompareOp>(loc, p, l, r);
  }
  template <typename OpTy> Value binary(Value l, Value r) {
    return b.create<OpTy>(loc, l, r);
  }
  Value where(Value c, Value t, Value f) {
    return b.create<WhereOp>(loc, c, t, f);
  }
  Value sum(Value v, ArrayRef<int64_t> dims, bool keepdim) {
    return b.create<ReduceSumOp>(loc, v, dims, keepdim);
  }
  Value max(Value v, ArrayRef<int64_t> dims, bool keepdim) {
    return b.create<ReduceMaxOp>(loc, v, dims, keepdim);
  }
};

/// Derives the mesh axes of every loop from the annotations and checks them
/// against the op's rule.
FailureOr<ShardingArray> loopAxesOf(Operation *op, const LoopSpace &space,
                                    mesh::MeshOp mesh,
                                    ArrayRef<MeshShardingAttr> shardings) {
  ShardingArray axes(space.numLoops());
  SmallVector<bool> known(space.numLoops(), false);
  for (auto [v, s] : llvm::enumerate(shardings)) {
    if (!s)
      continue;
    AffineMap map = space.maps[v];
    for (auto [d, e] : llvm::enumerate(map.getResults())) {
      ArrayRef<MeshAxis> a = splitAxesOf(s, d);
      std::optional<unsigned> loop = loopOf(e);
      if (!loop) {
        if (!a.empty())
          return op->emitOpError("cannot split dimension ")
                 << d << " of " << valueName(op, v)
                 << " (a broadcast, window or non-major reshape dimension)";
        continue;
      }
      if (!known[*loop]) {
        known[*loop] = true;
        axes[*loop].assign(a.begin(), a.end());
      } else if (!llvm::equal(axes[*loop], a)) {
        return op->emitOpError("dimension ")
               << d << " of " << valueName(op, v) << " is split over mesh axes "
               << axesStr(a) << ", but " << loopName(op, space, *loop)
               << " over " << axesStr(axes[*loop]);
      }
    }
  }
  for (auto [l, a] : llvm::enumerate(axes)) {
    if (a.empty())
      continue;
    // Propagation never splits a constant, but a constant annotated split
    // is sliced (see spmdizeConstant).
    if (!space.loops[l].splittable && !isa<ConstantOp>(op))
      return op->emitOpError("cannot be split along ")
             << loopName(op, space, l) << " (mesh axes " << axesStr(a) << ")";
    for (auto [l2, a2] : llvm::enumerate(axes))
      if (l2 != l && llvm::any_of(a, [&, &a2 = a2](MeshAxis x) {
            return llvm::is_contained(a2, x);
          }))
        return op->emitOpError("splits two dimensions over the same mesh axis");
    int64_t k = mesh::collectiveProcessGroupSize(a, mesh);
    if (!divides(op, space, l, k))
      return op->emitOpError("cannot split ")
             << loopName(op, space, l) << " into " << k << " equal shards";
  }
  return axes;
}

/// Checks that every result is annotated partial exactly over the split
/// loops it reduces, and that no operand is partial.
LogicalResult checkPartials(Operation *op, const LoopSpace &space,
                            const ShardingArray &axes,
                            ArrayRef<MeshShardingAttr> operandShardings,
                            ArrayRef<MeshShardingAttr> resultShardings) {
  for (auto [o, s] : llvm::enumerate(operandShardings))
    if (s && !s.getPartialAxes().empty())
      return op->emitOpError("operand #")
             << o << " is partial over mesh axes "
             << axesStr(s.getPartialAxes()) << "; it must be reduced first";
  for (auto [r, s] : llvm::enumerate(resultShardings)) {
    if (!s)
      continue;
    SmallVector<MeshAxis> expected;
    std::optional<ReductionKind> kind;
    for (unsigned l : space.partialLoops[r]) {
      if (axesOf(axes, l).empty())
        continue;
      if (kind && *kind != space.loops[l].kind)
        return op->emitOpError("result #")
               << r << " would be partial with two reduction kinds";
      kind = space.loops[l].kind;
      llvm::append_range(expected, axesOf(axes, l));
    }
    SmallVector<MeshAxis> actual(s.getPartialAxes());
    llvm::sort(expected);
    llvm::sort(actual);
    if (expected != actual ||
        (kind && !actual.empty() && s.getPartialType() != *kind))
      return op->emitOpError("result #")
             << r << " is annotated partial over mesh axes " << axesStr(actual)
             << ", but the op leaves it partial over " << axesStr(expected)
             << (kind ? " (" + mesh::stringifyReductionKind(*kind).str() + ")"
                      : std::string());
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Local forms that differ from a clone
//===----------------------------------------------------------------------===//

/// A contraction whose summed loop is split adds its bias on every shard;
/// each shard adds 1/k of it so that the partial sum holds it once.
LogicalResult spmdizeBiased(Spmd &c, unsigned summed, unsigned biasOperand) {
  if (!c.isSplit(summed) || c.op->getNumOperands() <= biasOperand)
    return c.finishClone(c.cloneLocal());
  SmallVector<Value> ops(c.operands);
  Value bias = ops[biasOperand];
  ops[biasOperand] = c.binary<MulOp>(
      bias, c.scalar(typeOf(bias).getElementType(), 1.0 / c.count(summed)));
  return c.finishClone(c.cloneLocal(ops));
}

/// Shape attributes (reshape, expand) hold the local result shape.
template <typename OpTy> LogicalResult spmdizeShaped(Spmd &c) {
  ArrayRef<int64_t> shape = c.resultTypes[0].getShape();
  return c.finishClone(c.cloneLocal(
      {}, [&](Operation *n) { llvm::cast<OpTy>(n).setShape(shape); }));
}

/// A full slice may be split; its bound is then the local size.
LogicalResult spmdizeSlice(Spmd &c, SliceOp op) {
  // I64Attr getters return uint64_t: read the dimension as signed.
  int64_t dim = op.getDim();
  if (dim < 0)
    dim += typeOf(op.getInput()).getRank();
  int64_t local = c.resultTypes[0].getDimSize(dim);
  bool split = c.isSplit(dim);
  return c.finishClone(c.cloneLocal({}, [&](Operation *n) {
    if (split)
      llvm::cast<SliceOp>(n).setEnd(local);
  }));
}

LogicalResult spmdizeSliceBackward(Spmd &c, SliceBackwardOp op) {
  int64_t dim = op.getDim();
  int64_t local = c.resultTypes[0].getDimSize(dim);
  bool split = c.isSplit(dim);
  return c.finishClone(c.cloneLocal({}, [&](Operation *n) {
    if (split) {
      auto s = llvm::cast<SliceBackwardOp>(n);
      s.setEnd(local);
      s.setDimSize(local);
    }
  }));
}

/// Rows of a split table: whether each index falls into this rank's block
/// of `loop` (`block` rows), and the index shifted into the block.
std::pair<Value, Value> localRows(Spmd &c, unsigned loop, int64_t block,
                                  Value indices) {
  Type ie = typeOf(indices).getElementType();
  Value shifted = c.binary<SubOp>(indices, c.blockOffset(loop, block, ie));
  Value inBlock = c.binary<AndOp>(
      c.compare(ComparePredicate::ge, shifted, c.scalar(ie, 0)),
      c.compare(ComparePredicate::lt, shifted, c.scalar(ie, block)));
  return {inBlock, shifted};
}

/// `shifted` where `inBlock`, else row 0 (a row every rank has).
Value safeRows(Spmd &c, Value inBlock, Value shifted) {
  return c.where(inBlock, shifted,
                 c.scalar(typeOf(shifted).getElementType(), 0));
}

/// Vocabulary-parallel embedding: with V split, each rank looks up the rows
/// it holds and zeroes the others; the result is a partial sum over V's
/// axes. padding_idx only matters to the gradient and is dropped.
LogicalResult spmdizeEmbedding(Spmd &c, EmbeddingOp op) {
  int64_t k = typeOf(op.getIndices()).getRank();
  unsigned v = k + 1;
  if (!c.isSplit(v))
    return c.finishClone(c.cloneLocal());
  Value weight = c.operands[0], indices = c.operands[1];
  auto [inBlock, shifted] =
      localRows(c, v, typeOf(weight).getDimSize(0), indices);
  Value safe = safeRows(c, inBlock, shifted);
  FailureOr<Operation *> n = c.cloneLocal({weight, safe}, [](Operation *n) {
    llvm::cast<EmbeddingOp>(n).removePaddingIdxAttr();
  });
  if (failed(n))
    return failure();
  SmallVector<int64_t> maskShape(typeOf(indices).getShape());
  maskShape.push_back(1);
  Value y = (*n)->getResult(0);
  c.results = {c.where(c.reshape(inBlock, maskShape), y,
                       c.scalar(typeOf(y).getElementType(), 0.0))};
  return success();
}

/// index_backward with the indexed dimension split: each rank scatters the
/// gradient slices whose index falls into its block (padding_idx rows are
/// masked before the shift).
LogicalResult spmdizeIndexBackward(Spmd &c, IndexBackwardOp op) {
  int64_t gradRank = typeOf(op.getGrad()).getRank();
  unsigned v = gradRank; // the last loop
  if (!c.isSplit(v))
    return c.finishClone(c.cloneLocal());
  Value grad = c.operands[0], indices = c.operands[1];
  int64_t dim = op.getDim();
  int64_t block = c.resultTypes[0].getDimSize(dim);
  auto [inBlock, shifted] = localRows(c, v, block, indices);
  Type ie = typeOf(indices).getElementType();
  if (std::optional<int64_t> pad = op.getPaddingIdx())
    inBlock = c.binary<AndOp>(
        inBlock, c.compare(ComparePredicate::ne, indices, c.scalar(ie, *pad)));
  Value safe = safeRows(c, inBlock, shifted);
  ArrayRef<int64_t> idxShape = typeOf(indices).getShape();
  SmallVector<int64_t> maskShape(dim, 1);
  llvm::append_range(maskShape, idxShape);
  maskShape.resize(gradRank, 1);
  Value maskedGrad = c.where(c.reshape(inBlock, maskShape), grad,
                             c.scalar(typeOf(grad).getElementType(), 0.0));
  return c.finishClone(c.cloneLocal({maskedGrad, safe}, [&](Operation *n) {
    auto s = llvm::cast<IndexBackwardOp>(n);
    s.setDimSize(block);
    s.removePaddingIdxAttr();
  }));
}

/// Cross-entropy and its gradient share the batch (N = loop 0) and class
/// (C = loop 1) loops.
struct LossParts {
  Value shifted; // [n, 1] target minus this rank's first class
  Value z;       // [n, c] logits minus the global row maximum
  Value expZ;    // [n, c] exp(z)
  Value sumExp;  // [n, 1] global sum of exp(z)
};

/// The number of targets not ignored, over the global batch.
Value countValid(Spmd &c, Value valid, Type elem) {
  Value n = c.sum(c.cast(valid, elem), {}, false);
  if (c.isSplit(0))
    n = c.allReduce(n, 0, ReductionKind::Sum);
  return n;
}

Value validTargets(Spmd &c, Value target, int64_t ignoreIndex) {
  Type ie = typeOf(target).getElementType();
  return c.compare(ComparePredicate::ne, target, c.scalar(ie, ignoreIndex));
}

/// The global softmax statistics of logits split over C.
LossParts classParallelParts(Spmd &c, Value logits, Value target) {
  auto lt = typeOf(logits);
  int64_t n = lt.getDimSize(0), classes = lt.getDimSize(1);
  Type ie = typeOf(target).getElementType();
  LossParts p;
  p.shifted =
      c.reshape(c.binary<SubOp>(target, c.blockOffset(1, classes, ie)), {n, 1});
  Value rowMax = c.allReduce(c.max(logits, {1}, true), 1, ReductionKind::Max);
  p.z = c.binary<SubOp>(logits, rowMax);
  p.expZ = c.b.create<ExpOp>(c.loc, p.z);
  p.sumExp = c.allReduce(c.sum(p.expZ, {1}, true), 1, ReductionKind::Sum);
  return p;
}

/// One-hot of the shifted targets over this rank's classes: [n, c] i1.
Value localOneHot(Spmd &c, const LossParts &p, int64_t classes) {
  Type ie = typeOf(p.shifted).getElementType();
  return c.compare(ComparePredicate::eq, c.iota({1, classes}, ie), p.shifted);
}

LogicalResult spmdizeCrossEntropy(Spmd &c, CrossEntropyOp op) {
  Value logits = c.operands[0], target = c.operands[1];
  Type fe = typeOf(logits).getElementType();
  LossReduction reduction = op.getReduction();
  bool batchSplit = c.isSplit(0);
  if (!c.isSplit(1) && (reduction != LossReduction::mean || !batchSplit))
    return c.finishClone(c.cloneLocal());
  Value valid = validTargets(c, target, op.getIgnoreIndex());
  // The result of a `mean` over a split batch is a partial average: each
  // rank returns (local sum) * k / (global count) so that the average over
  // the k ranks is the global mean, whatever the ignored targets per rank.
  auto meanOfSum = [&](Value localSum) -> Value {
    Value count = countValid(c, valid, fe);
    if (batchSplit)
      localSum = c.binary<MulOp>(localSum, c.scalar(fe, c.count(0)));
    return c.binary<DivOp>(localSum, count);
  };

  if (!c.isSplit(1)) {
    FailureOr<Operation *> n = c.cloneLocal({}, [](Operation *n) {
      llvm::cast<CrossEntropyOp>(n).setReduction(LossReduction::sum);
    });
    if (failed(n))
      return failure();
    c.results = {meanOfSum((*n)->getResult(0))};
    return success();
  }

  // Vocabulary-parallel (Megatron): global max and sum of exponentials by
  // all-reduce over C's axes, the target's logit picked by the rank that
  // holds it.
  int64_t n = typeOf(logits).getDimSize(0);
  int64_t classes = typeOf(logits).getDimSize(1);
  int64_t globalClasses = typeOf(op.getLogits()).getDimSize(1);
  LossParts p = classParallelParts(c, logits, target);
  Value logSumExp = c.b.create<LogOp>(c.loc, p.sumExp);
  Value picked = c.allReduce(
      c.sum(c.where(localOneHot(c, p, classes), p.z, c.scalar(fe, 0.0)), {1},
            true),
      1, ReductionKind::Sum);
  Value loss = c.binary<SubOp>(logSumExp, picked);
  double s = op.getLabelSmoothing().convertToDouble();
  if (s != 0.0) {
    // (s / C) * sum_c -log p_c = s * (logsumexp - mean_c z_c).
    Value sumZ = c.allReduce(c.sum(p.z, {1}, true), 1, ReductionKind::Sum);
    Value smooth = c.binary<SubOp>(
        logSumExp, c.binary<DivOp>(sumZ, c.scalar(fe, globalClasses)));
    loss = c.binary<AddOp>(c.binary<MulOp>(loss, c.scalar(fe, 1.0 - s)),
                           c.binary<MulOp>(smooth, c.scalar(fe, s)));
  }
  loss = c.where(valid, c.reshape(loss, {n}), c.scalar(fe, 0.0));
  switch (reduction) {
  case LossReduction::none:
    break;
  case LossReduction::sum:
    loss = c.sum(loss, {}, false);
    break;
  case LossReduction::mean:
    loss = meanOfSum(c.sum(loss, {}, false));
    break;
  }
  c.results = {loss};
  return success();
}

LogicalResult spmdizeCrossEntropyBackward(Spmd &c, CrossEntropyBackwardOp op) {
  Value grad = c.operands[0], logits = c.operands[1], target = c.operands[2];
  Type fe = typeOf(logits).getElementType();
  LossReduction reduction = op.getReduction();
  bool batchSplit = c.isSplit(0);
  if (!c.isSplit(1) && (reduction != LossReduction::mean || !batchSplit))
    return c.finishClone(c.cloneLocal());
  Value valid = validTargets(c, target, op.getIgnoreIndex());

  if (!c.isSplit(1)) {
    // The local op would divide by the local count of targets.
    FailureOr<Operation *> n = c.cloneLocal({}, [](Operation *n) {
      llvm::cast<CrossEntropyBackwardOp>(n).setReduction(LossReduction::sum);
    });
    if (failed(n))
      return failure();
    c.results = {c.binary<DivOp>((*n)->getResult(0), countValid(c, valid, fe))};
    return success();
  }

  // d loss / d logits = g * (softmax - smoothed one-hot), zero on ignored
  // rows, with the softmax statistics reduced over C's axes.
  int64_t n = typeOf(logits).getDimSize(0);
  int64_t classes = typeOf(logits).getDimSize(1);
  int64_t globalClasses = typeOf(op.getLogits()).getDimSize(1);
  LossParts p = classParallelParts(c, logits, target);
  Value probs = c.binary<DivOp>(p.expZ, p.sumExp);
  Value hot = c.cast(localOneHot(c, p, classes), fe);
  double s = op.getLabelSmoothing().convertToDouble();
  if (s != 0.0)
    hot = c.binary<AddOp>(c.binary<MulOp>(hot, c.scalar(fe, 1.0 - s)),
                          c.scalar(fe, s / globalClasses));
  Value g = reduction == LossReduction::none ? c.reshape(grad, {n, 1}) : grad;
  if (reduction == LossReduction::mean)
    g = c.binary<DivOp>(g, countValid(c, valid, fe));
  Value dx = c.binary<MulOp>(c.binary<SubOp>(probs, hot), g);
  c.results = {c.where(c.reshape(valid, {n, 1}), dx, c.scalar(fe, 0.0))};
  return success();
}

/// Synchronized batch norm: with the batch (or a spatial dimension) split in
/// training, the statistics are sums over all ranks of those axes. The
/// arithmetic follows PyTorch's CPU kernel (sums accumulated in double for
/// f32, mean and 1/std rounded to the input type, y = x * alpha + beta),
/// so that a data-parallel run matches a single-device one even where the
/// statistics are ill-conditioned (few elements per channel).
struct BatchStats {
  SmallVector<int64_t> dims;  // every dimension but the channels
  SmallVector<MeshAxis> axes; // mesh axes of the split ones
  double count;               // elements per channel, globally
  Type acc;                   // accumulation type
  Value mean;                 // [1, C, 1, ...] in the input type
  Value centered;             // x - mean
  Value invstd;               // 1 / sqrt(var + eps), in the input type
  Value varSum;               // sum of (x - mean)^2, in the input type
};

Type accumulationType(Type elem) {
  MLIRContext *ctx = elem.getContext();
  if (elem.isF32() || elem.isF64())
    return Float64Type::get(ctx);
  return Float32Type::get(ctx);
}

BatchStats batchStats(Spmd &c, Value x, double eps) {
  auto t = typeOf(x);
  Type fe = t.getElementType();
  BatchStats st;
  st.count = 1;
  st.acc = accumulationType(fe);
  for (int64_t d = 0; d < t.getRank(); ++d) {
    if (d == 1)
      continue;
    st.dims.push_back(d);
    llvm::append_range(st.axes, c.axesOf(d));
    st.count *= t.getDimSize(d) * c.count(d);
  }
  Value n = c.scalar(st.acc, st.count);
  auto globalSum = [&](Value v) {
    return c.allReduce(c.sum(c.cast(v, st.acc), st.dims, true), st.axes,
                       ReductionKind::Sum);
  };
  st.mean = c.cast(c.binary<DivOp>(globalSum(x), n), fe);
  st.centered = c.binary<SubOp>(x, st.mean);
  // PyTorch keeps the sum of squares in the input type, divides there, and
  // takes 1 / sqrt(var + eps) in the accumulation type.
  st.varSum = c.cast(globalSum(c.binary<MulOp>(st.centered, st.centered)), fe);
  Value var = c.binary<DivOp>(st.varSum, c.scalar(fe, st.count));
  st.invstd =
      c.cast(c.b.create<RsqrtOp>(c.loc, c.binary<AddOp>(c.cast(var, st.acc),
                                                        c.scalar(st.acc, eps))),
             fe);
  return st;
}

/// [C] -> [1, C, 1, ...] for broadcasting against x.
Value perChannel(Spmd &c, Value v, int64_t rank) {
  SmallVector<int64_t> shape(rank, 1);
  shape[1] = typeOf(v).getDimSize(0);
  return c.reshape(v, shape);
}

bool splitsStatistics(Spmd &c, int64_t rank) {
  for (int64_t d = 0; d < rank; ++d)
    if (d != 1 && c.isSplit(d))
      return true;
  return false;
}

LogicalResult spmdizeBatchNorm(Spmd &c, BatchNormOp op) {
  Value x = c.operands[0], w = c.operands[1], bias = c.operands[2],
        rm = c.operands[3], rv = c.operands[4];
  int64_t rank = typeOf(x).getRank();
  if (!op.getTraining() || !splitsStatistics(c, rank))
    return c.finishClone(c.cloneLocal());
  Type fe = typeOf(x).getElementType();
  double m = op.getMomentum().convertToDouble();
  BatchStats st = batchStats(c, x, op.getEps().convertToDouble());
  Value alpha = c.binary<MulOp>(st.invstd, perChannel(c, w, rank));
  Value beta = c.binary<SubOp>(perChannel(c, bias, rank),
                               c.binary<MulOp>(st.mean, alpha));
  // The kernel rounds x * alpha + beta once (a fused multiply-add) when
  // each channel of a sample is one element, twice otherwise.
  int64_t imageSize = 1;
  for (int64_t d = 2; d < rank; ++d)
    imageSize *= typeOf(op.getInput()).getDimSize(d);
  Value y;
  if (imageSize == 1)
    y = c.cast(c.binary<AddOp>(
                   c.binary<MulOp>(c.cast(x, st.acc), c.cast(alpha, st.acc)),
                   c.cast(beta, st.acc)),
               fe);
  else
    y = c.binary<AddOp>(c.binary<MulOp>(x, alpha), beta);
  // running = momentum * batch + (1 - momentum) * running, the variance
  // unbiased, computed in the accumulation type.
  int64_t channels = typeOf(rm).getDimSize(0);
  auto update = [&](Value running, Value batch) {
    Value b = c.reshape(c.cast(batch, st.acc), {channels});
    Value r = c.binary<AddOp>(
        c.binary<MulOp>(b, c.scalar(st.acc, m)),
        c.binary<MulOp>(c.cast(running, st.acc), c.scalar(st.acc, 1.0 - m)));
    return c.cast(r, fe);
  };
  Value unbiased = c.binary<DivOp>(st.varSum, c.scalar(fe, st.count - 1));
  c.results = {y, update(rm, st.mean), update(rv, unbiased)};
  return success();
}

/// Synchronized batch-norm gradient (PyTorch's CPU formula): grad_input =
/// (g - mean(g) - (x - mean) * dot(x - mean, g) / n * invstd^2) * invstd *
/// w with the sums taken over all ranks; grad_weight = dot * invstd and
/// grad_bias = sum(g) stay this rank's (partial) sums.
LogicalResult spmdizeBatchNormBackward(Spmd &c, BatchNormBackwardOp op) {
  Value g = c.operands[0], x = c.operands[1], w = c.operands[2];
  int64_t rank = typeOf(x).getRank();
  if (!op.getTraining() || !splitsStatistics(c, rank))
    return c.finishClone(c.cloneLocal());
  Type fe = typeOf(x).getElementType();
  BatchStats st = batchStats(c, x, op.getEps().convertToDouble());
  Value centered = st.centered;
  Value localSum = c.sum(c.cast(g, st.acc), st.dims, true);
  Value localDot =
      c.sum(c.cast(c.binary<MulOp>(centered, g), st.acc), st.dims, true);
  Value sum = c.allReduce(localSum, st.axes, ReductionKind::Sum);
  Value dot = c.allReduce(localDot, st.axes, ReductionKind::Sum);
  Value n = c.scalar(fe, st.count);
  Value k = c.binary<DivOp>(
      c.binary<MulOp>(c.binary<MulOp>(c.cast(dot, fe), st.invstd), st.invstd),
      n);
  Value gradMean = c.cast(c.binary<DivOp>(sum, c.scalar(st.acc, st.count)), fe);
  Value dx = c.binary<SubOp>(c.binary<SubOp>(g, gradMean),
                             c.binary<MulOp>(centered, k));
  dx = c.binary<MulOp>(c.binary<MulOp>(dx, st.invstd), perChannel(c, w, rank));
  int64_t channels = typeOf(w).getDimSize(0);
  Value gradWeight =
      c.cast(c.binary<MulOp>(localDot, c.cast(st.invstd, st.acc)), fe);
  c.results = {dx, c.reshape(gradWeight, {channels}),
               c.reshape(c.cast(localSum, fe), {channels})};
  return success();
}

/// A constant annotated split: the global constant, then this rank's slice
/// of every split dimension (mesh.all_slice, no communication).
LogicalResult spmdizeConstant(Spmd &c, ConstantOp op) {
  Value v = c.b.clone(*op)->getResult(0);
  for (auto [d, e] : llvm::enumerate(c.space.maps[0].getResults())) {
    unsigned loop = *loopOf(e);
    if (!c.isSplit(loop))
      continue;
    auto t = typeOf(v);
    SmallVector<int64_t> shape(t.getShape());
    shape[d] /= c.count(loop);
    v = c.b.create<mesh::AllSliceOp>(
        c.loc, RankedTensorType::get(shape, t.getElementType()), v,
        c.mesh.getSymName(), c.axesOf(loop), d);
  }
  c.results = {v};
  return success();
}

LogicalResult spmdizeLocal(Spmd &c) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(c.op)
      .Case([&](ConstantOp op) { return spmdizeConstant(c, op); })
      .Case([&](LinearOp op) {
        return spmdizeBiased(c, c.space.numLoops() - 1, 2);
      })
      .Case([&](Conv2dOp op) { return spmdizeBiased(c, /*Cin=*/4, 2); })
      .Case([&](ReshapeOp) { return spmdizeShaped<ReshapeOp>(c); })
      .Case([&](ExpandOp) { return spmdizeShaped<ExpandOp>(c); })
      .Case([&](SliceOp op) { return spmdizeSlice(c, op); })
      .Case([&](BatchNormOp op) { return spmdizeBatchNorm(c, op); })
      .Case([&](BatchNormBackwardOp op) {
        return spmdizeBatchNormBackward(c, op);
      })
      .Case([&](SliceBackwardOp op) { return spmdizeSliceBackward(c, op); })
      .Case([&](EmbeddingOp op) { return spmdizeEmbedding(c, op); })
      .Case([&](IndexBackwardOp op) { return spmdizeIndexBackward(c, op); })
      .Case([&](CrossEntropyOp op) { return spmdizeCrossEntropy(c, op); })
      .Case([&](CrossEntropyBackwardOp op) {
        return spmdizeCrossEntropyBackward(c, op);
      })
      .Default([&](Operation *) { return c.finishClone(c.cloneLocal()); });
}

LogicalResult spmdize(Operation *op, ArrayRef<Value> spmdizedOperands,
                      ArrayRef<MeshShardingAttr> operandShardings,
                      ArrayRef<MeshShardingAttr> resultShardings,
                      IRMapping &spmdizationMap,
                      SymbolTableCollection &symbolTable, OpBuilder &builder) {
  std::optional<LoopSpace> space = getLoopSpace(op);
  if (!space)
    return op->emitOpError("has no sharding rule");

  SmallVector<MeshShardingAttr> shardings(operandShardings);
  llvm::append_range(shardings, resultShardings);
  FlatSymbolRefAttr meshName;
  for (MeshShardingAttr s : shardings) {
    if (!s)
      continue;
    if (meshName && s.getMesh() != meshName)
      return op->emitOpError("is annotated with two meshes, ")
             << meshName << " and " << s.getMesh();
    meshName = s.getMesh();
  }
  if (!meshName) {
    // Not annotated: the op runs replicated.
    IRMapping local;
    local.map(op->getOperands(), spmdizedOperands);
    Operation *n = builder.clone(*op, local);
    spmdizationMap.map(op->getResults(), n->getResults());
    return success();
  }
  mesh::MeshOp mesh = mesh::getMeshOrNull(op, meshName, symbolTable);
  if (!mesh)
    return op->emitOpError("refers to an unknown mesh ") << meshName;

  FailureOr<ShardingArray> axes = loopAxesOf(op, *space, mesh, shardings);
  if (failed(axes) || failed(checkPartials(op, *space, *axes, operandShardings,
                                           resultShardings)))
    return failure();

  Spmd c(op, *space, mesh, std::move(*axes), spmdizedOperands, builder);
  if (failed(spmdizeLocal(c)))
    return failure();
  for (auto [r, v] : llvm::enumerate(c.results))
    if (v.getType() != c.resultTypes[r])
      return op->emitOpError("local result #")
             << r << " has type " << v.getType() << ", expected "
             << c.resultTypes[r];
  spmdizationMap.map(op->getResults(), c.results);
  return success();
}

//===----------------------------------------------------------------------===//
// The external model
//===----------------------------------------------------------------------===//

template <typename OpTy>
struct MerakShardingModel
    : mesh::ShardingInterface::ExternalModel<MerakShardingModel<OpTy>, OpTy> {
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    if (std::optional<LoopSpace> s = getLoopSpace(op))
      return s->iteratorTypes();
    return {};
  }
  SmallVector<ReductionKind>
  getReductionLoopIteratorKinds(Operation *op) const {
    if (std::optional<LoopSpace> s = getLoopSpace(op))
      return s->reductionKinds();
    return {};
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    if (std::optional<LoopSpace> s = getLoopSpace(op))
      return s->maps;
    return {};
  }
  FailureOr<ShardingOption>
  getShardingOption(Operation *op, ArrayRef<MeshShardingAttr> operandShardings,
                    ArrayRef<MeshShardingAttr> resultShardings) const {
    return ::getShardingOption(op, operandShardings, resultShardings);
  }
  FailureOr<SmallVector<MeshShardingAttr>>
  getShardingAnnotations(Operation *op, const ShardingOption &option) const {
    return ::getShardingAnnotations(op, option);
  }
  LogicalResult addShardingAnnotations(Operation *op, OpBuilder &b,
                                       const ShardingOption &option) const {
    return ::addShardingAnnotations(op, b, option);
  }
  LogicalResult spmdize(Operation *op, ArrayRef<Value> spmdizedOperands,
                        ArrayRef<MeshShardingAttr> operandShardings,
                        ArrayRef<MeshShardingAttr> resultShardings,
                        IRMapping &spmdizationMap,
                        SymbolTableCollection &symbolTable,
                        OpBuilder &builder) const {
    return ::spmdize(op, spmdizedOperands, operandShardings, resultShardings,
                     spmdizationMap, symbolTable, builder);
  }
};

template <typename... Ops> void attachTo(MLIRContext *ctx) {
  (Ops::template attachInterface<MerakShardingModel<Ops>>(*ctx), ...);
}

} // namespace

void merak::attachShardingInterface(MLIRContext *ctx) {
  attachTo<
#define GET_OP_LIST
#include "merak/Dialect/Merak/IR/MerakOps.cpp.inc"
      >(ctx);
}

//===- Spmdize.cpp - one rank's program from an annotated function --------===//
//
// Rewrites every function that carries `mesh.shard` annotations into the
// program of one rank: local shard types, each op replaced by what its
// ShardingInterface::spmdize builds, and collectives (Resharding.cpp)
// wherever a value's sharding differs from what its user expects. Arguments
// and results record their sharding as `merak.sharding`.
//
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"
#include "merak/Dialect/Merak/Transforms/Resharding.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/Dialect/Mesh/Interfaces/ShardingInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"

namespace merak {
#define GEN_PASS_DEF_SPMDIZE
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace mlir::mesh;
using namespace merak;

namespace {

int64_t rankOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getRank();
}

/// The sharding a value is defined with: its result annotation, if any.
FailureOr<MeshShardingAttr> definedSharding(Value v) {
  MeshShardingAttr found;
  for (Operation *user : v.getUsers()) {
    auto shard = dyn_cast<ShardOp>(user);
    if (!shard || shard.getAnnotateForUsers())
      continue;
    if (found && !sameSharding(found, shard.getShard(), rankOf(v))) {
      shard.emitError("value is annotated with two shardings: ")
          << found << " and " << shard.getShard();
      return failure();
    }
    found = shard.getShard();
  }
  return found;
}

struct FunctionPartitioner {
  FunctionPartitioner(func::FuncOp func, bool keepRoles, MeshOp mesh,
                      FlatSymbolRefAttr meshRef, SymbolTableCollection &symbols)
      : func(func), keepRoles(keepRoles), mesh(mesh), meshRef(meshRef),
        symbols(symbols) {}

  func::FuncOp func;
  bool keepRoles;
  MeshOp mesh;
  FlatSymbolRefAttr meshRef;
  SymbolTableCollection &symbols;
  IRMapping map;
  DenseMap<Value, MeshShardingAttr> current;

  MeshShardingAttr repl() { return replicated(func.getContext(), meshRef); }

  MeshShardingAttr shardingOf(Value v) {
    auto it = current.find(v);
    return it == current.end() || !it->second ? repl() : it->second;
  }

  /// Values already moved to a sharding: one collective serves every user
  /// that wants the same sharding (the body is one block built in order,
  /// so an earlier result dominates later uses).
  DenseMap<std::pair<Value, Attribute>, Value> cache;

  /// A parameter split over a mesh axis (ZeRO-3) and gathered for its
  /// readers: each reader gets a gather of its own, so that the whole
  /// parameter lives only around that use, not from the forward use to the
  /// backward one.
  bool gatheredPerUse(Value v, MeshShardingAttr source,
                      MeshShardingAttr target) {
    auto arg = dyn_cast<BlockArgument>(stripShards(v));
    if (!arg || !arg.getOwner()->isEntryBlock() ||
        !func.getArgAttr(arg.getArgNumber(), kParamAttr))
      return false;
    SplitAxes from = splitAxesOf(source, rankOf(v));
    SplitAxes to = splitAxesOf(target, rankOf(v));
    for (auto [f, t] : llvm::zip(from, to))
      if (t.size() < f.size())
        return true;
    return false;
  }

  FailureOr<Value> resharded(OpBuilder &b, Location loc, Value v,
                             MeshShardingAttr target) {
    Value local = map.lookup(v);
    MeshShardingAttr source = shardingOf(v);
    if (sameSharding(source, target, rankOf(v)))
      return local;
    if (gatheredPerUse(v, source, target))
      return reshard(b, loc, mesh, local, rankOf(v), source, target);
    auto key = std::make_pair(local, Attribute(normalize(target, rankOf(v))));
    if (Value cached = cache.lookup(key))
      return cached;
    FailureOr<Value> moved =
        reshard(b, loc, mesh, local, rankOf(v), source, target);
    if (succeeded(moved))
      cache[key] = *moved;
    return moved;
  }

  LogicalResult run() {
    MLIRContext *ctx = func.getContext();
    Block &oldBlock = func.getBody().front();
    auto newBlock = std::make_unique<Block>();
    OpBuilder b(ctx);
    b.setInsertionPointToStart(newBlock.get());

    // Arguments: their local shard types.
    SmallVector<MeshShardingAttr> argShardings;
    for (BlockArgument arg : oldBlock.getArguments()) {
      FailureOr<MeshShardingAttr> s = definedSharding(arg);
      if (failed(s))
        return failure();
      MeshShardingAttr sharding = *s ? normalize(*s, rankOf(arg)) : repl();
      if (!sharding.getPartialAxes().empty())
        return emitError(func.getLoc(), "argument ")
               << arg.getArgNumber() << " cannot be a partial sum";
      FailureOr<RankedTensorType> type =
          localType(cast<RankedTensorType>(arg.getType()), mesh, sharding, [&] {
            return emitError(func.getLoc(), "argument ")
                   << arg.getArgNumber() << ": ";
          });
      if (failed(type))
        return failure();
      BlockArgument local = newBlock->addArgument(*type, arg.getLoc());
      map.map(arg, local);
      current[arg] = sharding;
      argShardings.push_back(sharding);
    }

    for (Operation &op : oldBlock.without_terminator()) {
      Operation *last = newBlock->empty() ? nullptr : &newBlock->back();
      if (auto shard = dyn_cast<ShardOp>(op)) {
        Value src = shard.getSrc();
        MeshShardingAttr target = normalize(shard.getShard(), rankOf(src));
        FailureOr<Value> v = resharded(b, op.getLoc(), src, target);
        if (failed(v))
          return failure();
        map.map(shard.getResult(), *v);
        current[shard.getResult()] = target;
      } else if (failed(partitionOp(b, op))) {
        return failure();
      }
      if (keepRoles)
        giveRole(op,
                 last ? std::next(Block::iterator(last)) : newBlock->begin(),
                 newBlock->end());
    }

    // Results: an updated argument keeps the argument's sharding, a text
    // generator's cache the sharding it is computed with (split by heads
    // under tp, as the cache argument it becomes); every other result (the
    // loss, norms, logits) is replicated.
    auto ret = cast<func::ReturnOp>(oldBlock.getTerminator());
    SmallVector<Value> results;
    SmallVector<MeshShardingAttr> resultShardings;
    for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
      MeshShardingAttr target = repl();
      if (auto idx = func.getResultAttrOfType<IntegerAttr>(i, kUpdateArgAttr))
        target = argShardings[idx.getInt()];
      if (func.getResultAttr(i, kKvCacheAttr))
        target = shardingOf(v);
      FailureOr<Value> local = resharded(b, ret.getLoc(), v, target);
      if (failed(local))
        return failure();
      results.push_back(*local);
      resultShardings.push_back(target);
    }
    b.create<func::ReturnOp>(ret.getLoc(), results);

    // Swap the bodies.
    Region &body = func.getBody();
    oldBlock.dropAllDefinedValueUses();
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(oldBlock)))
      op.erase();
    body.getBlocks().clear();
    body.push_back(newBlock.release());
    Block &nb = body.front();
    func.setFunctionType(FunctionType::get(
        ctx, nb.getArgumentTypes(), nb.getTerminator()->getOperandTypes()));
    for (auto [i, s] : llvm::enumerate(argShardings))
      if (!isReplicated(s))
        func.setArgAttr(i, kShardingAttr, s);
    for (auto [i, s] : llvm::enumerate(resultShardings))
      if (!isReplicated(s))
        func.setResultAttr(i, kShardingAttr, s);
    return success();
  }

  /// The ops built for `op` (its local form, the collectives before it)
  /// take its role: a backward op's `merak.grad_of`; a forward op's
  /// `merak.id` goes to the op computing its first result, unless a clone
  /// of the op carries it already (ids stay unique). The
  /// collectives of an annotation read by backward ops only take the first
  /// reader's `merak.grad_of`. Ops that carry a role already keep it.
  void giveRole(Operation &op, Block::iterator begin, Block::iterator end) {
    if (begin == end)
      return;
    auto untagged = [](Operation &o) {
      return !o.hasAttr(kIdAttr) && !o.hasAttr(kGradOfAttr) &&
             !o.hasTrait<OpTrait::ConstantLike>();
    };
    Attribute gradOf = op.getAttr(kGradOfAttr);
    if (auto shard = dyn_cast<ShardOp>(op)) {
      Operation *first = nullptr;
      for (Operation *user : shard->getUsers()) {
        if (!user->hasAttr(kGradOfAttr))
          return;
        if (!first || user->isBeforeInBlock(first))
          first = user;
      }
      if (!first)
        return;
      gradOf = first->getAttr(kGradOfAttr);
    }
    if (gradOf) {
      for (Operation &o : llvm::make_range(begin, end))
        if (untagged(o))
          o.setAttr(kGradOfAttr, gradOf);
      return;
    }
    Attribute id = op.getAttr(kIdAttr);
    if (!id || op.getNumResults() == 0 ||
        llvm::any_of(llvm::make_range(begin, end),
                     [&](Operation &o) { return o.getAttr(kIdAttr) == id; }))
      return;
    Value result = map.lookupOrNull(op.getResult(0));
    Operation *def = result ? result.getDefiningOp() : nullptr;
    for (Operation &o : llvm::make_range(begin, end))
      if (&o == def && untagged(o))
        o.setAttr(kIdAttr, id);
  }

  static bool isReplicated(MeshShardingAttr s) {
    return !s || (s.getPartialAxes().empty() &&
                  llvm::all_of(s.getSplitAxes(),
                               [](MeshAxesAttr a) { return a.empty(); }));
  }

  /// An op propagation left a partial sum (a sum of partial sums, or a
  /// reshape or permute of an unsplit one) runs on the local partial
  /// values as they are.
  LogicalResult partitionPartialSum(OpBuilder &b, Operation &op,
                                    MeshShardingAttr result) {
    IRMapping operands;
    for (Value operand : op.getOperands()) {
      MeshShardingAttr want =
          isa<AddOp, SubOp>(op)
              ? result
              : makeSharding(op.getContext(), result.getMesh(),
                             SplitAxes(rankOf(operand)),
                             result.getPartialAxes(), ReductionKind::Sum);
      FailureOr<Value> v = resharded(b, op.getLoc(), operand, want);
      if (failed(v))
        return failure();
      operands.map(operand, *v);
    }
    Operation *local = b.clone(op, operands);
    if (isa<AddOp, SubOp>(op))
      local->getResult(0).setType(local->getOperand(0).getType());
    map.map(op.getResult(0), local->getResult(0));
    current[op.getResult(0)] = result;
    return success();
  }

  LogicalResult partitionOp(OpBuilder &b, Operation &op) {
    auto iface = dyn_cast<ShardingInterface>(&op);
    if (!iface)
      return op.emitOpError("has no sharding rule (ShardingInterface)");

    // What the op was annotated with; an op propagation left alone runs
    // replicated.
    SmallVector<MeshShardingAttr> resultShardings;
    bool annotated = false;
    for (OpResult r : op.getResults()) {
      FailureOr<MeshShardingAttr> s = definedSharding(r);
      if (failed(s))
        return failure();
      annotated |= static_cast<bool>(*s);
      resultShardings.push_back(*s ? normalize(*s, rankOf(r)) : repl());
    }
    SmallVector<MeshShardingAttr> operandShardings;
    for (Value operand : op.getOperands())
      operandShardings.push_back(annotated ? shardingOf(operand) : repl());
    if (annotated) {
      // Operands that propagation did not annotate follow the op's option.
      FailureOr<ShardingOption> option =
          iface.getShardingOption(operandShardings, resultShardings);
      if (succeeded(option) && !option->empty) {
        FailureOr<SmallVector<MeshShardingAttr>> all =
            iface.getShardingAnnotations(*option);
        if (succeeded(all) &&
            all->size() == op.getNumOperands() + op.getNumResults()) {
          for (auto [i, operand] : llvm::enumerate(op.getOperands()))
            if (!operand.getDefiningOp<ShardOp>() && (*all)[i])
              operandShardings[i] = normalize((*all)[i], rankOf(operand));
        }
      }
    }

    if (annotated && isa<AddOp, SubOp, ReshapeOp, PermuteOp>(op) &&
        !resultShardings[0].getPartialAxes().empty())
      return partitionPartialSum(b, op, resultShardings[0]);

    SmallVector<Value> locals;
    for (auto [operand, s] : llvm::zip(op.getOperands(), operandShardings)) {
      FailureOr<Value> v = resharded(b, op.getLoc(), operand, s);
      if (failed(v))
        return failure();
      locals.push_back(*v);
    }
    if (failed(iface.spmdize(locals, operandShardings, resultShardings, map,
                             symbols, b)))
      return op.emitOpError("cannot be partitioned with operands ")
             << operandShardings.size() << " sharded as given";
    for (auto [r, s] : llvm::zip(op.getResults(), resultShardings)) {
      if (!map.contains(r))
        return op.emitOpError("sharding rule produced no value for result ")
               << r.getResultNumber();
      current[r] = s;
    }
    return success();
  }
};

struct SpmdizePass : public merak::impl::SpmdizeBase<SpmdizePass> {
  using SpmdizeBase::SpmdizeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTableCollection symbols;
    for (auto func : llvm::to_vector(module.getOps<func::FuncOp>())) {
      ShardOp first;
      func.walk([&](ShardOp s) {
        if (!first)
          first = s;
      });
      if (!first)
        continue;
      if (!func.getBody().hasOneBlock()) {
        emitError(func.getLoc(),
                  "only single-block functions can be partitioned");
        return signalPassFailure();
      }
      FlatSymbolRefAttr meshRef = first.getShard().getMesh();
      auto mesh = symbols.lookupNearestSymbolFrom<MeshOp>(func, meshRef);
      if (!mesh) {
        first.emitError("no mesh named ") << meshRef;
        return signalPassFailure();
      }
      bool oneMesh = true;
      func.walk([&](ShardOp s) {
        if (s.getShard().getMesh() != meshRef) {
          s.emitError("a function can be partitioned over one mesh only");
          oneMesh = false;
        }
      });
      if (!oneMesh)
        return signalPassFailure();
      FunctionPartitioner p(func, keepRoles, mesh, meshRef, symbols);
      if (failed(p.run()))
        return signalPassFailure();
    }
  }
};

} // namespace

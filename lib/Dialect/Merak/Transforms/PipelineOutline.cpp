//===- PipelineOutline.cpp - one function per stage and phase -------------===//
//
// Moves every op of a partitioned @train_step into the function of its
// stage and phase (forward, recompute, backward_input, backward_weight,
// optimizer). A value used in another function becomes a result there and
// an argument here, both tagged `merak.value = N`; values going more than
// one stage forward (or back) pass through the stages in between, so a
// stage only ever talks to its neighbours. @pipeline_step calls the
// functions in order for one micro-batch.
//
//===----------------------------------------------------------------------===//

#include "merak/Analysis/CostModel.h"
#include "merak/Analysis/PipelineAttrNames.h"
#include "merak/Analysis/PipelineInfo.h"
#include "merak/Analysis/TrainStep.h"
#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

#include <map>
#include <memory>

namespace merak {
#define GEN_PASS_DEF_PIPELINEOUTLINE
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace merak;

namespace {

enum class Phase { Forward, Recompute, Backward, Weight, Optimizer };

StringRef phaseName(Phase phase) {
  switch (phase) {
  case Phase::Forward:
    return "forward";
  case Phase::Recompute:
    return "recompute";
  case Phase::Backward:
    return "backward_input";
  case Phase::Weight:
    return "backward_weight";
  case Phase::Optimizer:
    return "optimizer";
  }
  return "?";
}

/// Where an argument of a stage function comes from.
struct ArgSource {
  enum Kind { TrainArg, Value, Grad } kind = TrainArg;
  int trainArg = -1;
  int64_t id = -1;
  std::string grad;
};

/// What a result of a stage function is.
struct ResultInfo {
  mlir::Value value;
  /// The @train_step value it is (values passed by id).
  mlir::Value original;
  NamedAttrList attrs;
  enum Kind { Value, Grad, Other } kind = Other;
  int64_t id = -1;
  std::string grad;
  /// The @train_step result it provides, or -1.
  int trainResult = -1;
};

struct StageFn {
  int64_t stage = 0;
  Phase phase = Phase::Forward;
  func::FuncOp func;
  Block *block = nullptr;
  /// Original value -> its value in this function.
  llvm::DenseMap<mlir::Value, mlir::Value> local;
  /// Original value -> index in `results` (values passed by id).
  llvm::DenseMap<mlir::Value, unsigned> exported;
  std::map<std::string, unsigned> exportedGrads;
  SmallVector<NamedAttrList> argAttrs;
  SmallVector<ArgSource> argSources;
  SmallVector<ResultInfo> results;
  /// The last op of the prologue: constants and invariant ops recomputed
  /// here, ahead of the body.
  Operation *prologueEnd = nullptr;

  mlir::Value addArgument(Type type, NamedAttrList attrs, ArgSource source) {
    argAttrs.push_back(attrs);
    argSources.push_back(source);
    return block->addArgument(type, func.getLoc());
  }
};

struct PipelineOutlinePass
    : public merak::impl::PipelineOutlineBase<PipelineOutlinePass> {
  using PipelineOutlineBase::PipelineOutlineBase;

  ModuleOp module;
  func::FuncOp step;
  int64_t numStages = 1;
  int64_t pp = 1;
  std::vector<std::shared_ptr<StageFn>> fns;
  std::map<std::pair<int64_t, Phase>, StageFn *> fnIndex;
  llvm::DenseMap<Operation *, StageFn *> placedIn;
  llvm::DenseSet<Operation *> weightOps;
  llvm::DenseSet<Operation *> invariant;
  llvm::DenseSet<Operation *> optimizerOps;
  llvm::DenseMap<Operation *, bool> stateDerived;
  int64_t nextId = 0;

  void runOnOperation() override {
    module = getOperation();
    fns.clear();
    fnIndex.clear();
    placedIn.clear();
    nextId = 0;
    step = module.lookupSymbol<func::FuncOp>(kTrainStepName);
    if (!step || step.getBody().empty()) {
      emitError(module.getLoc(), "no @") << kTrainStepName;
      return signalPassFailure();
    }
    std::optional<PipelineInfo> info = PipelineInfo::read(module);
    if (!info) {
      if (!module->hasAttr(kPipelineAttr))
        emitError(module.getLoc(), "no ")
            << kPipelineAttr << "; run --merak-pipeline-partition first";
      return signalPassFailure();
    }
    numStages = info->stages;
    pp = info->pp;
    for (int64_t s = 0; s < numStages; ++s)
      if (module.lookupSymbol(stageName(s, Phase::Forward))) {
        emitError(module.getLoc(), "@")
            << stageName(s, Phase::Forward) << " exists already; outline once";
        return signalPassFailure();
      }
    if (failed(outline()))
      return signalPassFailure();
  }

  std::string stageName(int64_t stage, Phase phase) {
    return ("stage" + Twine(stage) + "_" + phaseName(phase)).str();
  }

  StageFn *fn(int64_t stage, Phase phase) {
    auto it = fnIndex.find({stage, phase});
    return it == fnIndex.end() ? nullptr : it->second;
  }

  void createFunctions(const std::set<int64_t> &recomputing) {
    OpBuilder b(module.getContext());
    Operation *after = step;
    for (int64_t s = 0; s < numStages; ++s)
      for (Phase phase : {Phase::Forward, Phase::Recompute, Phase::Backward,
                          Phase::Weight, Phase::Optimizer}) {
        if (phase == Phase::Recompute && !recomputing.count(s))
          continue;
        auto owned = std::make_shared<StageFn>();
        owned->stage = s;
        owned->phase = phase;
        b.setInsertionPointAfter(after);
        owned->func = b.create<func::FuncOp>(step.getLoc(), stageName(s, phase),
                                             b.getFunctionType({}, {}));
        owned->func->setAttr(kStageAttr, b.getI64IntegerAttr(s));
        owned->func->setAttr(kRankAttr, b.getI64IntegerAttr(s % pp));
        owned->func->setAttr(kPhaseAttr, b.getStringAttr(phaseName(phase)));
        owned->block = owned->func.addEntryBlock();
        after = owned->func;
        fnIndex[{s, phase}] = owned.get();
        fns.push_back(std::move(owned));
      }
  }

  /// The function that holds `op` in the pipeline.
  FailureOr<StageFn *> fnFor(Operation *op) {
    std::optional<int64_t> stage = getStage(op);
    if (!stage || *stage < 0 || *stage >= numStages)
      return op->emitError("has no stage of the partition (")
             << kStageAttr << " between 0 and " << numStages - 1 << ")";
    Phase phase;
    if (getRecomputeOf(op))
      phase = Phase::Recompute;
    else if (getForwardId(op))
      phase = Phase::Forward;
    else if (getGradOf(op))
      phase = weightOps.contains(op) ? Phase::Weight : Phase::Backward;
    else if (isOptimizerUpdate(op))
      phase = Phase::Optimizer;
    else
      return op->emitError("is neither forward (merak.id), backward "
                           "(merak.grad_of) nor an optimizer update; the "
                           "pipeline cannot place it");
    return fn(*stage, phase);
  }

  /// The function a value defined in `from` reaches `to` through: `to`'s
  /// neighbour on the way, or `from` itself.
  FailureOr<StageFn *> predecessor(StageFn *from, StageFn *to,
                                   Operation *user) {
    int64_t s = from->stage, t = to->stage;
    Phase p = from->phase;
    auto bad = [&]() -> FailureOr<StageFn *> {
      return user->emitError("reads a value computed in stage ")
             << s << "'s " << phaseName(p) << ", which stage " << t << "'s "
             << phaseName(to->phase) << " cannot receive in pipeline order";
    };
    switch (to->phase) {
    case Phase::Forward:
      if (p == Phase::Forward && s < t)
        return fn(t - 1, Phase::Forward);
      return bad();
    case Phase::Recompute:
      if (p == Phase::Forward && s <= t)
        return fn(t, Phase::Forward);
      return bad();
    case Phase::Backward:
    case Phase::Weight:
      if (s == t && (p != Phase::Weight || to->phase == Phase::Weight))
        return from;
      if (p == Phase::Forward && s < t)
        return fn(t, Phase::Forward);
      if (s > t && p != Phase::Weight && p != Phase::Optimizer)
        return to->phase == Phase::Weight ? fn(t, Phase::Backward)
                                          : fn(t + 1, Phase::Backward);
      return bad();
    case Phase::Optimizer:
      return bad();
    }
    return bad();
  }

  /// `v` (a value of @train_step) inside `to`: an argument or a clone of a
  /// constant, or the local value.
  FailureOr<Value> valueIn(StageFn *to, Value v, Operation *user) {
    auto it = to->local.find(v);
    if (it != to->local.end())
      return it->second;
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      NamedAttrList attrs(step.getArgAttrDict(arg.getArgNumber()));
      ArgSource source;
      source.kind = ArgSource::TrainArg;
      source.trainArg = arg.getArgNumber();
      Value local = to->addArgument(v.getType(), attrs, source);
      to->local[v] = local;
      return local;
    }
    Operation *def = v.getDefiningOp();
    if (isConstantLike(def) || invariant.contains(def)) {
      // Recomputed here: operands first, then the op, in the prologue.
      IRMapping mapping;
      for (Value operand : def->getOperands()) {
        FailureOr<Value> local = valueIn(to, operand, user);
        if (failed(local))
          return failure();
        mapping.map(operand, *local);
      }
      OpBuilder b = to->prologueEnd
                        ? OpBuilder(to->block,
                                    std::next(Block::iterator(to->prologueEnd)))
                        : OpBuilder::atBlockBegin(to->block);
      Operation *clone = b.clone(*def, mapping);
      to->prologueEnd = clone;
      for (auto [orig, copy] :
           llvm::zip(def->getResults(), clone->getResults()))
        to->local[orig] = copy;
      return to->local.lookup(v);
    }
    StageFn *from = placedIn.lookup(def);
    if (!from)
      return user->emitError("reads a value the pipeline did not place (")
             << def->getName() << ")";
    FailureOr<StageFn *> via = predecessor(from, to, user);
    if (failed(via))
      return failure();
    Value there;
    if (*via == from) {
      there = from->local.lookup(v);
    } else {
      FailureOr<Value> relayed = valueIn(*via, v, user);
      if (failed(relayed))
        return failure();
      there = *relayed;
    }
    int64_t id = exportValue(*via, v, there);
    NamedAttrList attrs;
    attrs.set(kValueAttr, Builder(module).getI64IntegerAttr(id));
    ArgSource source;
    source.kind = ArgSource::Value;
    source.id = id;
    Value local = to->addArgument(v.getType(), attrs, source);
    to->local[v] = local;
    return local;
  }

  int64_t exportValue(StageFn *from, Value v, Value local) {
    auto it = from->exported.find(v);
    if (it != from->exported.end())
      return from->results[it->second].id;
    ResultInfo info;
    info.value = local;
    info.original = v;
    info.kind = ResultInfo::Value;
    info.id = nextId++;
    info.attrs.set(kValueAttr, Builder(module).getI64IntegerAttr(info.id));
    from->exported[v] = from->results.size();
    from->results.push_back(info);
    return info.id;
  }

  /// Stage `owner`'s share of the gradient `g` of parameter `name` as a
  /// result `{merak.grad = name}` of its backward (or weight) function. A
  /// tied parameter's gradient is split at the adds marked merak.tied_sum.
  LogicalResult exportGradient(int64_t owner, StringRef name, Value g,
                               Operation *user) {
    SmallVector<Value> leaves;
    std::function<void(Value)> collect = [&](Value v) {
      Operation *def = v.getDefiningOp();
      if (def && def->hasAttr(kTiedSumAttr)) {
        collect(def->getOperand(0));
        collect(def->getOperand(1));
        return;
      }
      if (def && getStage(def) == owner)
        leaves.push_back(v);
    };
    collect(g);
    if (leaves.empty())
      return user->emitError("stage ")
             << owner << " computes no part of the gradient of " << name;
    StageFn *target = nullptr;
    Value sum;
    if (leaves.size() == 1) {
      Operation *def = leaves[0].getDefiningOp();
      target = placedIn.lookup(def);
      if (!target ||
          (target->phase != Phase::Backward && target->phase != Phase::Weight))
        return user->emitError("the gradient of ")
               << name << " is not computed by a backward op";
      sum = target->local.lookup(leaves[0]);
    } else {
      target = fn(owner, Phase::Weight);
      OpBuilder b = OpBuilder::atBlockEnd(target->block);
      for (Value leaf : leaves) {
        FailureOr<Value> local = valueIn(target, leaf, user);
        if (failed(local))
          return failure();
        sum = sum ? b.create<AddOp>(user->getLoc(), sum, *local).getResult()
                  : *local;
      }
    }
    if (target->exportedGrads.count(name.str()))
      return success();
    ResultInfo info;
    info.value = sum;
    info.kind = ResultInfo::Grad;
    info.grad = name.str();
    info.attrs.set(kGradAttr, Builder(module).getStringAttr(name));
    target->exportedGrads[name.str()] = target->results.size();
    target->results.push_back(info);
    return success();
  }

  /// `v` in optimizer function `opt`: mapped already (the gradient
  /// argument, a clone), an op of the optimizer step cloned after its
  /// operands, or anything else through valueIn.
  FailureOr<Value> optimizerValue(StageFn *opt, Value v, IRMapping &mapping,
                                  Operation *update) {
    if (Value local = mapping.lookupOrNull(v))
      return local;
    Operation *def = v.getDefiningOp();
    if (!def || (!optimizerOps.contains(def) && !fromState(def)))
      return valueIn(opt, v, update);
    if (failed(cloneIntoOptimizer(opt, def, mapping, update, opt->stage)))
      return failure();
    return mapping.lookup(v);
  }

  /// Clones `op` at the end of `opt`, its operands first brought in by
  /// `optimizerValue`, and places the clone on `stage`.
  FailureOr<Operation *> cloneIntoOptimizer(StageFn *opt, Operation *op,
                                            IRMapping &mapping,
                                            Operation *update, int64_t stage) {
    for (Value operand : op->getOperands()) {
      FailureOr<Value> local = optimizerValue(opt, operand, mapping, update);
      if (failed(local))
        return failure();
      mapping.map(operand, *local);
    }
    OpBuilder b = OpBuilder::atBlockEnd(opt->block);
    Operation *clone = b.clone(*op, mapping);
    clone->setAttr(kStageAttr, b.getI64IntegerAttr(stage));
    return clone;
  }

  /// True for a pure op computed from the step's state only (parameters,
  /// buffers, optimizer state, constants; no model input): a slice of a
  /// parameter that backward also reads. The optimizer function computes it
  /// again instead of receiving it.
  bool fromState(Operation *op) {
    auto it = stateDerived.find(op);
    if (it != stateDerived.end())
      return it->second;
    bool result = isMemoryEffectFree(op) && op->getNumRegions() == 0 &&
                  llvm::all_of(op->getOperands(), [&](Value v) {
                    if (auto arg = dyn_cast<BlockArgument>(v))
                      return arg.getOwner() == &step.getBody().front() &&
                             !step.getArgAttr(arg.getArgNumber(), kInputAttr);
                    Operation *def = v.getDefiningOp();
                    return isConstantLike(def) || fromState(def);
                  });
    stateDerived[op] = result;
    return result;
  }

  /// The update of one parameter goes to the optimizer function of every
  /// stage that owns the parameter (one, or the tied ones), with the
  /// optimizer step's collectives around it: the reductions of its gradient
  /// before it (so the gradient argument is this rank's unreduced
  /// contribution, and they run once per step on the accumulated
  /// gradient), ZeRO's gather of the new shard after it.
  LogicalResult placeUpdate(Operation *update,
                            const llvm::DenseMap<Value, int> &returned) {
    auto param = dyn_cast<BlockArgument>(getUpdatedParamSource(update));
    auto name = param ? step.getArgAttrOfType<StringAttr>(param.getArgNumber(),
                                                          kParamAttr)
                      : StringAttr();
    if (!name)
      return update->emitError("updates a value that is not a parameter "
                               "argument");
    SmallVector<int64_t> owners = {*getStage(update)};
    if (auto tied = step.getArgAttrOfType<DenseI64ArrayAttr>(
            param.getArgNumber(), kTiedAttr))
      owners.assign(tied.asArrayRef().begin(), tied.asArrayRef().end());

    // The ops after the update, in block order.
    SmallVector<Operation *> after;
    {
      llvm::SetVector<Operation *> seen;
      SmallVector<Operation *> work = {update};
      while (!work.empty()) {
        Operation *op = work.pop_back_val();
        for (Operation *user : op->getUsers())
          if (optimizerOps.contains(user) && seen.insert(user))
            work.push_back(user);
      }
      after.assign(seen.begin(), seen.end());
      llvm::sort(after, [](Operation *a, Operation *b) {
        return a->isBeforeInBlock(b);
      });
    }

    Value grad = getUpdateGradientSource(update, optimizerOps);
    for (auto [i, owner] : llvm::enumerate(owners)) {
      if (failed(exportGradient(owner, name.getValue(), grad, update)))
        return failure();
      StageFn *opt = fn(owner, Phase::Optimizer);
      IRMapping mapping;
      {
        NamedAttrList attrs;
        attrs.set(kGradAttr, name);
        ArgSource source;
        source.kind = ArgSource::Grad;
        source.grad = name.str();
        mapping.map(grad, opt->addArgument(grad.getType(), attrs, source));
      }
      // (SGD without momentum passes the gradient as its buffer too.)
      if (failed(cloneIntoOptimizer(opt, update, mapping, update, owner)))
        return failure();
      SmallVector<Value> produced(update->getResults());
      for (Operation *op : after) {
        if (failed(cloneIntoOptimizer(opt, op, mapping, update, owner)))
          return failure();
        llvm::append_range(produced, op->getResults());
      }
      // Each new value updates the argument it replaces, in its sharding.
      for (Value result : produced) {
        auto it = returned.find(result);
        if (it == returned.end())
          continue;
        auto target =
            step.getResultAttrOfType<IntegerAttr>(it->second, kUpdateArgAttr);
        if (!target)
          continue;
        FailureOr<Value> arg =
            valueIn(opt, step.getArgument(target.getInt()), update);
        if (failed(arg))
          return failure();
        ResultInfo info;
        info.value = mapping.lookup(result);
        info.attrs = NamedAttrList(step.getResultAttrDict(it->second));
        info.attrs.set(
            kUpdateArgAttr,
            IntegerAttr::get(IntegerType::get(update->getContext(), 64),
                             cast<BlockArgument>(*arg).getArgNumber()));
        info.trainResult = i == 0 ? it->second : -1;
        opt->results.push_back(info);
      }
    }
    return success();
  }

  LogicalResult outline() {
    Block &body = step.getBody().front();
    weightOps = weightGradientOps(step);
    invariant = invariantOps(step);
    optimizerOps = optimizerStepOps(step);
    stateDerived.clear();
    std::set<int64_t> recomputing;
    for (Operation &op : body)
      if (getRecomputeOf(&op))
        recomputing.insert(getStage(&op).value_or(0));
    createFunctions(recomputing);

    auto ret = cast<func::ReturnOp>(body.getTerminator());
    llvm::DenseMap<Value, int> returned;
    for (OpOperand &operand : ret->getOpOperands())
      returned.try_emplace(operand.get(), operand.getOperandNumber());

    for (Operation &op : body.without_terminator()) {
      if (isConstantLike(&op) || invariant.contains(&op) ||
          op.hasAttr(kTiedSumAttr) || optimizerOps.contains(&op))
        continue;
      FailureOr<StageFn *> target = fnFor(&op);
      if (failed(target))
        return failure();
      if (isOptimizerUpdate(&op)) {
        if (failed(placeUpdate(&op, returned)))
          return failure();
        continue;
      }
      IRMapping mapping;
      for (Value operand : op.getOperands()) {
        FailureOr<Value> local = valueIn(*target, operand, &op);
        if (failed(local))
          return failure();
        mapping.map(operand, *local);
      }
      OpBuilder b = OpBuilder::atBlockEnd((*target)->block);
      Operation *clone = b.clone(op, mapping);
      for (auto [orig, copy] : llvm::zip(op.getResults(), clone->getResults()))
        (*target)->local[orig] = copy;
      placedIn[&op] = *target;
    }

    // @train_step's results: the loss, buffer updates, gradients.
    for (OpOperand &operand : ret->getOpOperands()) {
      unsigned index = operand.getOperandNumber();
      Value v = operand.get();
      Operation *def = v.getDefiningOp();
      if (def && (isOptimizerUpdate(def) || optimizerOps.contains(def)))
        continue;
      if (auto name = step.getResultAttrOfType<StringAttr>(index, kGradAttr)) {
        SmallVector<int64_t> owners;
        for (BlockArgument arg : step.getArguments())
          if (step.getArgAttr(arg.getArgNumber(), kParamAttr) == name) {
            if (auto tied = step.getArgAttrOfType<DenseI64ArrayAttr>(
                    arg.getArgNumber(), kTiedAttr))
              owners.assign(tied.asArrayRef().begin(), tied.asArrayRef().end());
          }
        if (owners.empty() && def)
          owners.push_back(getStage(def).value_or(0));
        for (int64_t owner : owners)
          if (failed(exportGradient(owner, name.getValue(), v, ret)))
            return failure();
        continue;
      }
      StageFn *from = def ? placedIn.lookup(def) : nullptr;
      Value local;
      if (def && invariant.contains(def)) {
        // A buffer update the same on every micro-batch (a step counter).
        from = fn(getStage(def).value_or(0), Phase::Forward);
        FailureOr<Value> there = valueIn(from, v, ret);
        if (failed(there))
          return failure();
        local = *there;
      } else if (from && from->phase == Phase::Forward) {
        local = from->local.lookup(v);
      } else {
        return emitError(ret.getLoc(), "result #")
               << index
               << " is neither the loss, a forward buffer update, a "
                  "gradient nor an optimizer update; the pipeline cannot "
                  "place it";
      }
      ResultInfo info;
      info.value = local;
      info.trainResult = index;
      info.attrs = NamedAttrList(step.getResultAttrDict(index));
      if (auto target =
              step.getResultAttrOfType<IntegerAttr>(index, kUpdateArgAttr)) {
        FailureOr<Value> arg =
            valueIn(from, step.getArgument(target.getInt()), ret);
        if (failed(arg))
          return failure();
        info.attrs.set(kUpdateArgAttr,
                       Builder(module).getI64IntegerAttr(
                           cast<BlockArgument>(*arg).getArgNumber()));
      }
      from->results.push_back(info);
    }

    for (auto &f : fns)
      finalize(*f);
    buildForwardKeep();
    if (driver)
      buildDriver();
    return success();
  }

  void finalize(StageFn &f) {
    OpBuilder b = OpBuilder::atBlockEnd(f.block);
    SmallVector<Value> values;
    SmallVector<Type> types;
    for (ResultInfo &r : f.results) {
      values.push_back(r.value);
      types.push_back(r.value.getType());
    }
    b.create<func::ReturnOp>(f.func.getLoc(), values);
    f.func.setType(b.getFunctionType(f.block->getArgumentTypes(), types));
    for (auto [i, attrs] : llvm::enumerate(f.argAttrs))
      f.func.setArgAttrs(i, attrs.getDictionary(module.getContext()));
    for (auto [i, r] : llvm::enumerate(f.results))
      f.func.setResultAttrs(i, r.attrs.getDictionary(module.getContext()));
  }

  /// On a stage that recomputes, a forward that keeps every activation: the
  /// forward returning, besides its own results, the values the recompute
  /// function would return (same merak.value ids), for micro-batches whose
  /// backward follows soon enough (FK tasks of the schedule).
  void buildForwardKeep() {
    Block &body = step.getBody().front();
    llvm::DenseMap<int64_t, Operation *> forwardById;
    for (Operation &op : body)
      if (std::optional<int64_t> id = getForwardId(&op))
        forwardById[*id] = &op;
    for (int64_t s = 0; s < numStages; ++s) {
      StageFn *recompute = fn(s, Phase::Recompute);
      if (!recompute)
        continue;
      StageFn *forward = fn(s, Phase::Forward);
      IRMapping mapping;
      auto keep = cast<func::FuncOp>(forward->func->clone(mapping));
      keep.setSymName(("stage" + Twine(s) + "_forward_keep").str());
      keep->setAttr(kPhaseAttr,
                    StringAttr::get(module.getContext(), "forward_keep"));
      module.insert(std::next(Block::iterator(forward->func)), keep);
      auto ret = cast<func::ReturnOp>(keep.getBody().front().getTerminator());
      SmallVector<Value> values(ret.getOperands());
      SmallVector<DictionaryAttr> attrs;
      for (unsigned i = 0; i < keep.getNumResults(); ++i)
        attrs.push_back(keep.getResultAttrDict(i));
      for (const ResultInfo &result : recompute->results) {
        Value orig = result.original;
        Operation *clone = orig.getDefiningOp();
        Operation *original = forwardById.lookup(*getRecomputeOf(clone));
        Value kept = forward->local.lookup(
            original->getResult(cast<OpResult>(orig).getResultNumber()));
        values.push_back(mapping.lookup(kept));
        attrs.push_back(result.attrs.getDictionary(module.getContext()));
      }
      OpBuilder b(ret);
      b.create<func::ReturnOp>(ret.getLoc(), values);
      ret.erase();
      SmallVector<Type> types;
      for (Value v : values)
        types.push_back(v.getType());
      keep.setType(b.getFunctionType(keep.getArgumentTypes(), types));
      for (auto [i, a] : llvm::enumerate(attrs))
        keep.setResultAttrs(i, a);
    }
  }

  /// @pipeline_step: @train_step's signature; one micro-batch through the
  /// stage functions, gradients of tied parameters summed over owners.
  void buildDriver() {
    OpBuilder b(module.getContext());
    b.setInsertionPointAfter(step);
    auto driverFn = b.create<func::FuncOp>(step.getLoc(), kPipelineDriverName,
                                           step.getFunctionType());
    for (NamedAttribute attr : step->getDiscardableAttrs())
      driverFn->setAttr(attr.getName(), attr.getValue());
    for (unsigned i = 0; i < step.getNumArguments(); ++i)
      driverFn.setArgAttrs(i, step.getArgAttrDict(i));
    for (unsigned i = 0; i < step.getNumResults(); ++i)
      driverFn.setResultAttrs(i, step.getResultAttrDict(i));
    Block *block = driverFn.addEntryBlock();
    b.setInsertionPointToStart(block);

    llvm::DenseMap<int64_t, Value> byId;
    llvm::MapVector<StringRef, SmallVector<Value>> gradParts;
    std::map<std::string, Value> gradSums;
    SmallVector<Value> results(step.getNumResults());
    auto gradSum = [&](const std::string &name) {
      auto it = gradSums.find(name);
      if (it != gradSums.end())
        return it->second;
      Value sum;
      for (Value part : gradParts[name])
        sum =
            sum ? b.create<AddOp>(step.getLoc(), sum, part).getResult() : part;
      gradSums[name] = sum;
      return sum;
    };
    auto call = [&](StageFn *f) {
      if (!f)
        return;
      SmallVector<Value> operands;
      for (const ArgSource &source : f->argSources) {
        switch (source.kind) {
        case ArgSource::TrainArg:
          operands.push_back(block->getArgument(source.trainArg));
          break;
        case ArgSource::Value:
          operands.push_back(byId.lookup(source.id));
          break;
        case ArgSource::Grad:
          operands.push_back(gradSum(source.grad));
          break;
        }
      }
      auto callOp = b.create<func::CallOp>(step.getLoc(), f->func, operands);
      for (auto [r, info] : llvm::enumerate(f->results)) {
        Value v = callOp.getResult(r);
        if (info.kind == ResultInfo::Value)
          byId[info.id] = v;
        else if (info.kind == ResultInfo::Grad)
          gradParts[StringRef(info.grad)].push_back(v);
        if (info.trainResult >= 0)
          results[info.trainResult] = v;
      }
    };
    for (int64_t s = 0; s < numStages; ++s)
      call(fn(s, Phase::Forward));
    for (int64_t s = numStages - 1; s >= 0; --s) {
      call(fn(s, Phase::Recompute));
      call(fn(s, Phase::Backward));
      call(fn(s, Phase::Weight));
    }
    for (int64_t s = 0; s < numStages; ++s)
      call(fn(s, Phase::Optimizer));
    // Gradients returned as such (a step without an optimizer).
    for (unsigned i = 0; i < step.getNumResults(); ++i)
      if (!results[i])
        if (auto name = step.getResultAttrOfType<StringAttr>(i, kGradAttr))
          results[i] = gradSum(name.str());
    b.create<func::ReturnOp>(step.getLoc(), results);
  }
};

} // namespace

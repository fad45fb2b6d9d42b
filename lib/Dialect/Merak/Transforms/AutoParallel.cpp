//===- AutoParallel.cpp - choose a parallel plan and apply it -------------===//
//
// Profiles @train_step for the plan search (lib/Analysis/AutoParallel.h):
// the cost model's figures per layer, and what tensor parallelism does to
// it, learnt by running --merak-tensor-parallel, sharding propagation and
// --merak-spmdize on a copy of the module at tp=2 (what it splits from the
// annotations, the collectives it adds from the partitioned step). Then
// searches, reports, and applies the best plan with --merak-parallelize's
// passes, falling back to the next plan when the passes refuse one.
//
//===----------------------------------------------------------------------===//

#include "merak/Analysis/AutoParallel.h"
#include "merak/Analysis/CostModel.h"
#include "merak/Analysis/Layers.h"
#include "merak/Analysis/PipelineInfo.h"
#include "merak/Analysis/TrainStep.h"
#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"
#include "merak/Dialect/Merak/Transforms/Resharding.h"
#include "merak/Hardware/CollectiveCost.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <set>

namespace merak {
#define GEN_PASS_DEF_AUTOPARALLEL
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace mlir::mesh;
using namespace merak;
using namespace merak::autoparallel;

namespace {

/// Runs `run`, collecting the errors it emits instead of printing them.
/// Returns the errors (empty on success).
std::string collectErrors(MLIRContext *ctx, function_ref<LogicalResult()> run) {
  std::string errors;
  ScopedDiagnosticHandler handler(ctx, [&](Diagnostic &d) {
    if (d.getSeverity() == DiagnosticSeverity::Error)
      errors += (errors.empty() ? "" : "; ") + d.str();
    return success();
  });
  if (failed(run()) && errors.empty())
    errors = "the passes failed";
  return errors;
}

/// What --merak-tensor-parallel and propagation did to a copy of the step.
struct TensorParallelProbe {
  /// Forward op ids tensor parallelism splits.
  llvm::DenseSet<int64_t> splitOps;
  /// Parameter argument numbers it splits.
  llvm::DenseSet<unsigned> splitParams;
  /// Bytes all-reduced and how many all-reduces that is.
  struct Reduce {
    double bytes = 0;
    int count = 0;
    void add(double b, int n = 1) {
      bytes += b;
      count += n;
    }
  };
  using ReduceMap = llvm::DenseMap<int64_t, Reduce>;
  /// Forward op id -> the collectives of the step partitioned at tp=2
  /// that belong to it, in forward and in backward (countCollectives).
  ReduceMap forwardReduce, backwardReduce;
  std::set<int64_t> dims;
};

bool hasAxis(const SplitAxes &split, MeshAxis axis, int64_t *dim = nullptr) {
  for (auto [d, axes] : llvm::enumerate(split))
    if (llvm::is_contained(axes, axis)) {
      if (dim)
        *dim = int64_t(d);
      return true;
    }
  return false;
}

/// The sharding annotation a value gets as a result (not for its users).
MeshShardingAttr resultSharding(Value v) {
  for (Operation *user : v.getUsers())
    if (auto s = dyn_cast<ShardOp>(user); s && !s.getAnnotateForUsers())
      return s.getShard();
  return {};
}

/// The sharding an operand is read with.
MeshShardingAttr operandSharding(Value v) {
  if (auto s = v.getDefiningOp<ShardOp>())
    return s.getShard();
  return resultSharding(v);
}

int64_t rankOf(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t ? t.getRank() : 0;
}

bool splitOnAxis(MeshShardingAttr s, Value v, MeshAxis axis,
                 int64_t *dim = nullptr) {
  return s && hasAxis(splitAxesOf(s, rankOf(v)), axis, dim);
}

bool partialOnAxis(MeshShardingAttr s, MeshAxis axis) {
  return s && llvm::is_contained(s.getPartialAxes(), axis);
}

void readProbe(ModuleOp copy, TensorParallelProbe &probe) {
  auto func = copy.lookupSymbol<func::FuncOp>(kTrainStepName);
  MeshOp mesh = lookupMesh(copy);
  if (!func || !mesh)
    return;
  int64_t idx = meshAxisIndex(mesh, "tp");
  if (idx < 0)
    return;
  auto axis = static_cast<MeshAxis>(idx);
  func.walk([&](ShardOp s) {
    SplitAxes split = splitAxesOf(s.getShard(), rankOf(s.getResult()));
    auto type = dyn_cast<RankedTensorType>(s.getResult().getType());
    for (auto [d, axes] : llvm::enumerate(split))
      if (type && llvm::is_contained(axes, axis))
        probe.dims.insert(type.getDimSize(d));
  });
  for (BlockArgument arg : func.getArguments())
    if (func.getArgAttr(arg.getArgNumber(), kParamAttr) &&
        splitOnAxis(resultSharding(arg), arg, axis))
      probe.splitParams.insert(arg.getArgNumber());
  func.walk([&](Operation *op) {
    std::optional<int64_t> id = getForwardId(op);
    if (!id || isa<ShardOp>(op))
      return;
    bool split = false;
    for (Value r : op->getResults()) {
      MeshShardingAttr s = resultSharding(r);
      split |= splitOnAxis(s, r, axis) || partialOnAxis(s, axis);
    }
    for (Value o : op->getOperands())
      split |= splitOnAxis(operandSharding(o), o, axis);
    if (split)
      probe.splitOps.insert(*id);
  });
}

/// `share` of an op's cost as the plan model's work.
OpWork workOf(const OpCost &cost, bool contraction, double share = 1) {
  OpWork w;
  w.flops = cost.flops * share;
  w.bytes = double(cost.bytes()) * share;
  w.contraction = contraction;
  return w;
}

/// The forward op a collective of the partitioned forward belongs to: its
/// own `merak.id` where it computes that op's result (a vocabulary-parallel
/// embedding's sum), else the nearest op with one that it reads from (a
/// row-split linear's partial sum, a loss's local maximum), looking
/// through the local ops partitioning built.
std::optional<int64_t> forwardOwner(Operation *collective) {
  SmallVector<Operation *> frontier = {collective};
  llvm::SmallPtrSet<Operation *, 16> seen;
  for (int depth = 0; depth < 6 && !frontier.empty(); ++depth) {
    SmallVector<Operation *> next;
    for (Operation *op : frontier) {
      if (std::optional<int64_t> id = getForwardId(op))
        return id;
      for (Value operand : op->getOperands())
        if (Operation *def = operand.getDefiningOp();
            def && seen.insert(def).second)
          next.push_back(def);
    }
    frontier = std::move(next);
  }
  return std::nullopt;
}

/// The collectives the partitioned step has (tensor parallelism alone on
/// the mesh, groups of 2), each by the forward op it belongs to, in forward
/// or, by its `merak.grad_of`, in backward; each as the all-reduce that
/// sends the bytes it sends (collectiveBytes: an all-gather of a tensor
/// sends what an all-reduce of half of it does).
void countCollectives(ModuleOp copy, TensorParallelProbe &probe) {
  auto func = copy.lookupSymbol<func::FuncOp>(kTrainStepName);
  if (!func)
    return;
  TensorParallelProbe::ReduceMap forward, backward;
  // The optimizer step's collectives (a split parameter's update gathered
  // whole) belong to no micro-batch.
  llvm::DenseSet<Operation *> optimizer = optimizerStepOps(func);
  for (Operation &o : func.getBody().front()) {
    Operation *op = &o;
    if (optimizer.contains(op))
      continue;
    CollectiveKind kind;
    if (isa<mesh::AllReduceOp>(op))
      kind = CollectiveKind::AllReduce;
    else if (isa<mesh::AllGatherOp>(op))
      kind = CollectiveKind::AllGather;
    else if (isa<mesh::ReduceScatterOp>(op))
      kind = CollectiveKind::ReduceScatter;
    else if (isa<mesh::AllToAllOp>(op))
      kind = CollectiveKind::AllToAll;
    else
      continue;
    double bytes =
        collectiveBytes(kind, 2,
                        double(tensorBytes(op->getOperand(0).getType())),
                        double(tensorBytes(op->getResult(0).getType()))) /
        collectiveBytes(CollectiveKind::AllReduce, 2, 1, 1);
    if (std::optional<int64_t> of = getGradOf(op))
      backward[*of].add(bytes);
    else if (std::optional<int64_t> id = forwardOwner(op))
      forward[*id].add(bytes);
  }
  probe.forwardReduce = std::move(forward);
  probe.backwardReduce = std::move(backward);
}

struct AutoParallelPass
    : public merak::impl::AutoParallelBase<AutoParallelPass> {
  using AutoParallelBase::AutoParallelBase;

  /// The dialects of every pipeline the pass may run (a plan's passes are
  /// only known once it is chosen).
  void getDependentDialects(DialectRegistry &registry) const override {
    AutoParallelBase::getDependentDialects(registry);
    for (StringRef options :
         {"dp=2 tp=2 zero=3", "dp=2 tp=2 pp=2 "
                              "microbatches=2 recompute=full"}) {
      OpPassManager pm(ModuleOp::getOperationName());
      if (succeeded(buildParallelizePipeline(pm, options)))
        pm.getDependentDialects(registry);
    }
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>(kTrainStepName);
    if (!func || func.getBody().empty()) {
      emitError(module.getLoc(), "no @")
          << kTrainStepName << "; build the training step with --merak-train "
          << "first";
      return signalPassFailure();
    }
    if (lookupMesh(module)) {
      emitError(module.getLoc(),
                "the step is partitioned already; plan a step straight from "
                "--merak-train");
      return signalPassFailure();
    }
    if (devices < 1) {
      emitError(module.getLoc(), "devices must be at least 1");
      return signalPassFailure();
    }
    HardwareProfile hw;
    if (!hardware.empty()) {
      if (std::string error = loadHardwareProfile(hardware, hw);
          !error.empty()) {
        emitError(module.getLoc(), "hardware profile: ") << error;
        return signalPassFailure();
      }
    }
    SearchOptions options;
    options.devices = devices;
    if (batch < 0) {
      emitError(module.getLoc(), "batch must be a number of samples, got ")
          << int64_t(batch);
      return signalPassFailure();
    }
    options.globalBatch = batch;
    if (!(memory >= 0) || !std::isfinite(memory)) {
      emitError(module.getLoc(), "memory must be a non-negative number of "
                                 "GiB, got ")
          << double(memory);
      return signalPassFailure();
    }
    options.memory = memory * double(1ull << 30);
    options.maxTp = maxTp;

    FailureOr<ModelProfile> model = profileModel(module, func, hw);
    if (failed(model))
      return signalPassFailure();
    if (!calibration.empty()) {
      if (std::string error = calibrate(*model, hw, calibration);
          !error.empty()) {
        emitError(module.getLoc(), "calibration: ") << error;
        return signalPassFailure();
      }
    }
    SearchResult result = searchPlans(*model, hw, options);
    double limit = options.memory > 0 ? options.memory : hw.memoryCapacity;
    llvm::SmallVector<StringRef> comparisons;
    StringRef(compare).split(comparisons, ';', -1, /*KeepEmpty=*/false);
    for (StringRef text : comparisons) {
      ScoredPlan c;
      if (std::string error = parsePlan(text.trim().str(), c.plan);
          !error.empty()) {
        emitError(module.getLoc(), "compare: ") << error;
        return signalPassFailure();
      }
      if (c.plan.dp * c.plan.tp * c.plan.pp != devices) {
        emitError(module.getLoc(), "compare: '")
            << text.trim() << "' uses " << c.plan.dp * c.plan.tp * c.plan.pp
            << " devices, not devices=" << int(devices);
        return signalPassFailure();
      }
      c.estimate = evaluatePlan(*model, hw, c.plan, limit);
      result.compared.push_back(std::move(c));
    }

    // Apply the best plan the passes accept.
    bool applied = false;
    for (const ScoredPlan &candidate : result.ranked) {
      std::string opts = candidate.plan.options();
      ModuleOp backup = module.clone();
      std::string errors = collectErrors(&getContext(), [&] {
        OpPassManager pm(ModuleOp::getOperationName());
        if (failed(buildParallelizePipeline(pm, opts)))
          return failure();
        return runPipeline(pm, module);
      });
      if (errors.empty()) {
        backup.erase();
        result.applied = opts;
        applied = true;
        if (candidate.plan.pipelined()) {
          std::optional<PipelineInfo> info = PipelineInfo::read(module);
          if (info && info->layers != int64_t(model->layers.size()))
            result.warnings.push_back(
                "the partitioned step has " + std::to_string(info->layers) +
                " layers where the search saw " +
                std::to_string(model->layers.size()) +
                "; the stage cuts may not be where the search put them");
        }
        break;
      }
      // Put the module back as it was and try the next plan.
      module.getBodyRegion().takeBody(backup.getBodyRegion());
      module->setAttrs(backup->getAttrDictionary());
      backup.erase();
      result.refused.push_back({opts, errors});
    }
    if (applied)
      module->setAttr(kAutoPlanAttr,
                      StringAttr::get(&getContext(), result.applied));

    if (!report.empty()) {
      std::string error;
      std::unique_ptr<llvm::ToolOutputFile> out =
          openOutputFile(report, &error);
      if (!out) {
        emitError(module.getLoc(), "report=") << report << ": " << error;
        return signalPassFailure();
      }
      out->os() << reportJson(*model, hw, options, result);
      out->keep();
    }
    if (!quiet) {
      llvm::errs() << reportText(result, limit);
      for (auto &[opts, error] : result.refused)
        llvm::errs() << "refused by the passes: " << opts << ": " << error
                     << "\n";
      for (const std::string &w : result.warnings)
        llvm::errs() << "warning: " << w << "\n";
    }
    if (!applied) {
      InFlightDiagnostic diag = emitError(module.getLoc(), "auto: ");
      if (result.ranked.empty()) {
        diag << result.error;
        // The fewest devices (doubling, up to 64 times as many) a plan
        // would fit on in the same memory.
        for (int more = 2 * devices; more <= 64 * devices; more *= 2) {
          SearchOptions larger = options;
          larger.devices = more;
          if (!searchPlans(*model, hw, larger).ranked.empty()) {
            diag << "; " << more << " devices would fit";
            break;
          }
        }
      } else
        diag << "the passes refused every plan that fits (first: "
             << result.refused.front().first << ": "
             << result.refused.front().second << ")";
      return signalPassFailure();
    }
  }

  FailureOr<ModelProfile> profileModel(ModuleOp module, func::FuncOp func,
                                       const HardwareProfile &hw) {
    ModelProfile model;
    // The batch: dimension 0 of the first model input.
    bool found = false;
    int64_t params = 0, states = 0;
    for (BlockArgument arg : func.getArguments()) {
      unsigned i = arg.getArgNumber();
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (func.getArgAttr(i, kInputAttr) && type && type.getRank() > 0 &&
          !found) {
        model.batch = type.getDimSize(0);
        found = true;
      }
      params += func.getArgAttr(i, kParamAttr) ? 1 : 0;
      states += func.getArgAttr(i, kOptStateAttr) ? 1 : 0;
    }
    if (!found || model.batch < 1) {
      emitError(func.getLoc(), "auto: @train_step has no batched input to "
                               "split over data-parallel ranks");
      return failure();
    }
    model.optimizerStates =
        params ? int(std::lround(double(states) / double(params))) : 0;
    for (unsigned i = 0; i < func.getNumResults(); ++i)
      model.clipsGradients |= bool(func.getResultAttr(i, kGradNormAttr));
    if (auto options = module->getAttrOfType<StringAttr>(kTrainOptionsAttr))
      if (options.getValue().contains("precision=bf16"))
        model.computeType = "bf16";

    // The step as tensor parallelism sees it: fused projections taken
    // apart by section (--merak-split-fused-projections derives the step
    // again, with new op ids), profiled and probed alike.
    ModuleOp prepared = module.clone();
    auto erasePrepared = llvm::make_scope_exit([&] { prepared.erase(); });
    if (devices > 1) {
      std::string errors = collectErrors(&getContext(), [&] {
        PassManager pm(&getContext(), ModuleOp::getOperationName());
        SplitFusedProjectionsOptions split;
        split.tp = 2;
        pm.addPass(createSplitFusedProjections(split));
        return pm.run(prepared);
      });
      if (!errors.empty()) {
        prepared.erase();
        prepared = module.clone();
      }
    }
    func = prepared.lookupSymbol<func::FuncOp>(kTrainStepName);
    TensorParallelProbe probe = probeTensorParallel(prepared, model);

    CostModel cm(hw);
    LayerAnalysis layers(func, cm);
    llvm::DenseMap<Operation *, const ForwardOpCost *> costOf;
    for (const ForwardOpCost &c : layers.opCosts())
      costOf[c.op] = &c;
    // Each forward op's gradient ops, and those that compute weight
    // gradients only: what the work of its backward stands for.
    llvm::DenseMap<int64_t, SmallVector<Operation *>> gradOps;
    for (Operation &op : func.getBody().front().without_terminator())
      if (std::optional<int64_t> of = getGradOf(&op))
        gradOps[*of].push_back(&op);
    llvm::DenseSet<Operation *> weightOps = weightGradientOps(func);
    // The ops as a profile of a run names them, and each one's share of
    // the predicted time of a list of them.
    llvm::StringMap<int> signatureIndex;
    auto signature = [&](Operation *op) {
      std::string text = op->getName().getStringRef().str() + " ->";
      llvm::raw_string_ostream os(text);
      for (auto [r, type] : llvm::enumerate(op->getResultTypes())) {
        os << (r ? ", " : " ");
        if (auto shaped = dyn_cast<ShapedType>(type)) {
          for (int64_t d : shaped.getShape())
            os << d << 'x';
          os << shaped.getElementType();
        } else {
          os << type;
        }
      }
      auto [it, inserted] =
          signatureIndex.try_emplace(text, int(model.signatures.size()));
      if (inserted)
        model.signatures.push_back(text);
      return it->second;
    };
    auto partsOf = [&](ArrayRef<Operation *> ops) {
      std::vector<std::pair<int, double>> parts;
      double total = 0;
      for (Operation *op : ops) {
        double t = workTime(hw, model.computeType,
                            workOf(estimateOp(op), isContraction(op)));
        parts.emplace_back(signature(op), t);
        total += t;
      }
      for (auto &part : parts)
        part.second = total > 0 ? part.second / total : 1.0 / parts.size();
      return parts;
    };
    llvm::DenseSet<unsigned> seenParams, sectioned;
    // The layers reading each parameter, in order.
    llvm::MapVector<unsigned, SmallVector<int>> readersOf;
    // `v` when it is a parameter of the step, else null.
    auto paramOf = [&](Value v) -> BlockArgument {
      auto arg = dyn_cast<BlockArgument>(v);
      if (!arg || arg.getOwner()->getParentOp() != func ||
          !func.getArgAttr(arg.getArgNumber(), kParamAttr))
        return BlockArgument();
      return arg;
    };
    for (const Layer &layer : layers.layers()) {
      LayerProfile lp;
      lp.firstId = layer.firstId;
      lp.lastId = layer.lastId;
      lp.outBytes = double(layer.outBytes);
      for (unsigned p = layer.begin; p < layer.end; ++p) {
        Operation *op = layers.forwardOps()[p];
        const ForwardOpCost *c = costOf.lookup(op);
        if (!c)
          continue;
        std::optional<int64_t> id = getForwardId(op);
        bool split = id && probe.splitOps.contains(*id);
        bool gemm = isContraction(op);
        auto work = [&](const OpCost &cost, double share,
                        std::vector<std::pair<int, double>> parts) {
          OpWork w = workOf(cost, gemm, share);
          w.split = split;
          w.parts = std::move(parts);
          return w;
        };
        lp.forward.push_back(work(c->forward, 1, partsOf({op})));

        // A contraction's backward is two GEMMs (input and weight
        // gradients), each priced at its own size.
        SmallVector<Operation *> backward, weight;
        if (id)
          for (Operation *g : gradOps.lookup(*id)) {
            backward.push_back(g);
            if (weightOps.contains(g))
              weight.push_back(g);
          }
        int pieces = gemm ? 2 : 1;
        for (int k = 0; k < pieces; ++k)
          lp.backward.push_back(
              work(c->backward, 1.0 / pieces, partsOf(backward)));
        if (c->backwardWeight.flops > 0 || c->backwardWeight.bytes() > 0)
          lp.weight.push_back(work(c->backwardWeight, 1, partsOf(weight)));
        lp.savedBytes += double(c->savedBytes);
        if (split)
          lp.splitSavedBytes += double(c->savedBytes);
        if (id) {
          TensorParallelProbe::Reduce f = probe.forwardReduce.lookup(*id),
                                      b = probe.backwardReduce.lookup(*id);
          lp.tpForwardBytes += f.bytes;
          lp.tpForwardCollectives += f.count;
          lp.tpBackwardBytes += b.bytes;
          lp.tpBackwardCollectives += b.count;
        }
        // Readers as ZeRO-3 gathers for them: one gather per op that
        // reads parameters. A projection taken apart by section reads
        // selects of its fused parameters, which the program ZeRO-3
        // partitions reads whole by one op: the sections' first reader
        // stands for it, the selects themselves read nothing to gather.
        bool reads = false;
        bool selects = isa<SelectOp>(op);
        for (Value operand : op->getOperands()) {
          Value source = stripShards(operand);
          if (auto cast = source.getDefiningOp<CastOp>())
            source = stripShards(cast.getInput());
          BlockArgument arg = paramOf(source);
          if (!arg) {
            if (auto section = source.getDefiningOp<SelectOp>())
              if (BlockArgument fused =
                      paramOf(stripShards(section.getInput()));
                  fused && sectioned.insert(fused.getArgNumber()).second) {
                reads = true;
                lp.gatheredBytes += double(tensorBytes(fused.getType()));
              }
            continue;
          }
          double bytes = double(tensorBytes(arg.getType()));
          SmallVector<int> &readers = readersOf[arg.getArgNumber()];
          if (readers.empty() || readers.back() != int(model.layers.size()))
            readers.push_back(int(model.layers.size()));
          if (!selects) {
            reads = true;
            lp.gatheredBytes += bytes;
          }
          if (!seenParams.insert(arg.getArgNumber()).second)
            continue;
          lp.paramBytes += bytes;
          if (probe.splitParams.contains(arg.getArgNumber()))
            lp.splitParamBytes += bytes;
        }
        lp.paramReaders += reads ? 1 : 0;
      }
      model.layers.push_back(std::move(lp));
    }
    for (auto &[arg, readers] : readersOf)
      if (readers.size() > 1) {
        TiedParam t;
        t.bytes = double(tensorBytes(func.getArgument(arg).getType()));
        t.split = probe.splitParams.contains(arg);
        t.layers.assign(readers.begin(), readers.end());
        model.tied.push_back(std::move(t));
      }
    if (model.layers.empty()) {
      emitError(func.getLoc(), "auto: found no layers (no contraction) in "
                               "@train_step's forward ops");
      return failure();
    }
    return model;
  }

  /// Runs tensor parallelism at tp=2 on a copy: with the vocabulary split,
  /// else without; records in `model` what it splits or why it cannot.
  TensorParallelProbe probeTensorParallel(ModuleOp module,
                                          ModelProfile &model) {
    TensorParallelProbe probe;
    if (devices < 2)
      return probe;
    std::string firstError;
    for (bool vocab : {true, false}) {
      ModuleOp copy = module.clone();
      // The copy is not nested in the module this pass runs on: it gets a
      // pass manager of its own.
      std::string errors = collectErrors(&getContext(), [&] {
        PassManager pm(&getContext(), ModuleOp::getOperationName());
        MeshOptions mesh;
        mesh.tp = 2;
        pm.addPass(createMesh(mesh));
        TensorParallelOptions tensor;
        tensor.vocabParallel = vocab;
        pm.addPass(createTensorParallel(tensor));
        pm.addPass(createShardingPropagation());
        if (failed(pm.run(copy)))
          return failure();
        // What it splits, from the annotations; then the collectives, as
        // the partitioned step has them.
        readProbe(copy, probe);
        PassManager partition(&getContext(), ModuleOp::getOperationName());
        SpmdizeOptions spmdize;
        spmdize.keepRoles = true;
        partition.addPass(createSpmdize(spmdize));
        return partition.run(copy);
      });
      if (errors.empty()) {
        countCollectives(copy, probe);
        copy.erase();
        model.vocabParallel = vocab;
        model.tpDims.assign(probe.dims.begin(), probe.dims.end());
        return probe;
      }
      copy.erase();
      if (firstError.empty())
        firstError = errors;
    }
    model.tpRefusal =
        "tensor parallelism does not apply at tp=2: " + firstError;
    return probe;
  }
};

} // namespace

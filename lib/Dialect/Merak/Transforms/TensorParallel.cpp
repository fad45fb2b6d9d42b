//===- TensorParallel.cpp - Megatron layers found in the graph ------------===//
//
// Finds tensor-parallel layers by the structure of the forward ops of
// @train_step, not by parameter names, and annotates their weights on the
// `tp` mesh axis:
//   - MLP: linear -> elementwise chain (activation, gating product) ->
//     linear: the first ones column-split, the last row-split (SwiGLU has
//     two column-split linears feeding one product);
//   - attention: projections whose result is reshaped into heads are
//     column-split (by heads), the projection of the merged heads row-split;
//   - vocabulary: the embedding looked up by model inputs is split by rows,
//     and the linear whose logits feed a cross-entropy is split by classes
//     (a parallel cross-entropy; full logits are never gathered).
// Propagation and --merak-spmdize place the collectives of forward and
// backward from these seeds.
//
//===----------------------------------------------------------------------===//

#include "merak/Analysis/TrainStep.h"
#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/LayerPatterns.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"
#include "merak/Dialect/Merak/Transforms/Resharding.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

namespace merak {
#define GEN_PASS_DEF_TENSORPARALLEL
#define GEN_PASS_DEF_SEQUENCEPARALLEL
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace mlir::mesh;
using namespace merak;

std::pair<Value, int64_t> merak::weightParam(Value v) {
  v = stripShards(v);
  // A weight read in another precision (--merak-train precision=bf16).
  if (auto cast = v.getDefiningOp<CastOp>())
    v = stripShards(cast.getInput());
  if (auto section = v.getDefiningOp<SelectOp>();
      section && section.getDim() == 0 &&
      isa<BlockArgument>(stripShards(section.getInput())))
    return {stripShards(section.getInput()), 1};
  return {v, 0};
}

std::optional<merak::LoraAdapter> merak::loraAdapterOf(LinearOp base) {
  Value x = stripShards(base.getInput());
  for (Operation *user : base.getResult().getUsers()) {
    // Through the base's result annotation, if any.
    SmallVector<Operation *> readers{user};
    if (auto s = dyn_cast<ShardOp>(user))
      readers.assign(s->getUsers().begin(), s->getUsers().end());
    for (Operation *reader : readers) {
      auto add = dyn_cast<AddOp>(reader);
      if (!add || stripShards(add.getLhs()) != base.getResult())
        continue;
      auto scaled = stripShards(add.getRhs()).getDefiningOp<MulOp>();
      if (!scaled)
        continue;
      auto up = stripShards(scaled.getLhs()).getDefiningOp<LinearOp>();
      if (!up || up.getBias())
        continue;
      auto down = stripShards(up.getInput()).getDefiningOp<LinearOp>();
      if (!down || down.getBias())
        continue;
      Value in = stripShards(down.getInput());
      Operation *entry = down;
      if (auto drop = in.getDefiningOp<DropoutOp>()) {
        entry = drop;
        in = stripShards(drop.getInput());
      }
      if (in != x)
        continue;
      return LoraAdapter{base, down, up, entry, add.getResult()};
    }
  }
  return std::nullopt;
}

namespace {

/// Users of `v`, looking through sharding annotations.
SmallVector<OpOperand *> usesOf(Value v) {
  SmallVector<OpOperand *> uses;
  SmallVector<Value> work{v};
  while (!work.empty()) {
    Value cur = work.pop_back_val();
    for (OpOperand &use : cur.getUses()) {
      if (auto s = dyn_cast<ShardOp>(use.getOwner()))
        work.push_back(s.getResult());
      else
        uses.push_back(&use);
    }
  }
  return uses;
}

bool isForward(Operation *op) { return op->hasAttr(kIdAttr); }

bool isScalar(Value v) {
  return cast<RankedTensorType>(v.getType()).getRank() == 0;
}

/// `v` before a multiplication or division by a scalar: OPT, BART and
/// Whisper scale the query projection before splitting it into heads.
Value unscaled(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (!isForward(def) || !isa<MulOp, DivOp>(def))
      break;
    Value lhs = stripShards(def->getOperand(0));
    Value rhs = stripShards(def->getOperand(1));
    if (isScalar(rhs))
      v = lhs;
    else if (isa<MulOp>(def) && isScalar(lhs))
      v = rhs;
    else
      break;
  }
  return v;
}

int64_t lastDim(Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  return t.getRank() ? t.getDimSize(t.getRank() - 1) : 1;
}

/// A sharding for an activation of `type`: dimension 0 (the batch) split
/// over dp and ep when the mesh has those axes, plus the given splits.
MeshShardingAttr
activationSharding(MeshOp mesh, RankedTensorType type,
                   ArrayRef<std::pair<int64_t, MeshAxis>> splits) {
  SplitAxes split(type.getRank());
  int64_t batchGroup = 1;
  for (StringRef name : {"dp", "ep"}) {
    int64_t idx = meshAxisIndex(mesh, name);
    if (idx < 0 || type.getRank() == 0 || mesh.getShape()[idx] <= 1 ||
        type.getDimSize(0) % (batchGroup * mesh.getShape()[idx]) != 0)
      continue;
    batchGroup *= mesh.getShape()[idx];
    split[0].push_back(static_cast<MeshAxis>(idx));
  }
  for (auto [dim, axis] : splits)
    split[dim].push_back(axis);
  return makeSharding(mesh.getContext(),
                      FlatSymbolRefAttr::get(mesh.getSymNameAttr()), split);
}

/// Whether `v` can be split along `dim` over mesh axis `axis`, given the
/// batch split `activationSharding` adds.
bool splittable(MeshOp mesh, Value v, int64_t dim, MeshAxis axis) {
  auto type = cast<RankedTensorType>(v.getType());
  return dim < type.getRank() &&
         type.getDimSize(dim) % mesh.getShape()[axis] == 0;
}

struct TensorParallelPass
    : public merak::impl::TensorParallelBase<TensorParallelPass> {
  using TensorParallelBase::TensorParallelBase;

  func::FuncOp func;
  MeshOp mesh;
  FlatSymbolRefAttr meshRef;
  MeshAxis axis = 0;
  int64_t size = 1;
  bool failed = false;
  /// A text generator's function (@prefill, @decode): every op is forward.
  bool generation = false;

  bool isForward(Operation *op) const { return generation || ::isForward(op); }

  /// LoRA adapters by their base linear; the ops of their branches that
  /// read the base's input; their outputs; their own linears.
  llvm::MapVector<Operation *, LoraAdapter> adapters;
  DenseMap<Operation *, LinearOp> adapterEntries;
  DenseMap<Value, LinearOp> adapterOutputs;
  llvm::DenseSet<Operation *> adapterLinears;

  void findAdapters() {
    func.walk([&](LinearOp l) {
      if (!isForward(l))
        return;
      if (std::optional<LoraAdapter> a = loraAdapterOf(l)) {
        adapters[l] = *a;
        adapterEntries[a->entry] = l;
        adapterOutputs[a->out] = l;
        adapterLinears.insert(a->down);
        adapterLinears.insert(a->up);
      }
    });
  }

  /// The layer whose output `v` is: a linear, or an adapted linear's sum
  /// with its adapter; null for anything else (an adapter's own linears).
  LinearOp layerOf(Value v) {
    v = stripShards(v);
    if (LinearOp base = adapterOutputs.lookup(v))
      return base;
    auto l = v.getDefiningOp<LinearOp>();
    return l && !adapterLinears.contains(l) ? l : LinearOp();
  }

  /// The layer's output: the adapter's sum for an adapted linear.
  Value outputOf(LinearOp l) {
    auto it = adapters.find(l);
    return it == adapters.end() ? l.getResult() : it->second.out;
  }

  /// The layer `use` is the input of, or null.
  LinearOp readerLayer(OpOperand *use) {
    Operation *user = use->getOwner();
    if (LinearOp base = adapterEntries.lookup(user))
      return base;
    auto l = dyn_cast<LinearOp>(user);
    return l && use->getOperandNumber() == 0 && !adapterLinears.contains(l)
               ? l
               : LinearOp();
  }

  enum class Split { Column, Row, Vocab };
  llvm::MapVector<LinearOp, Split> linears;
  SmallVector<EmbeddingOp> embeddings;
  /// Head reshapes of a fused projection (one linear whose result is
  /// sliced into q, k and v): split by heads after the slice.
  SmallVector<ReshapeOp> fusedHeads;

  StringRef paramName(Value v) {
    auto arg = dyn_cast<BlockArgument>(stripShards(v));
    if (!arg)
      return "";
    if (auto name =
            func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kParamAttr))
      return name.getValue();
    return "";
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp, 2> funcs;
    if (auto step = module.lookupSymbol<func::FuncOp>(kTrainStepName))
      funcs.push_back(step);
    else
      funcs = generationFunctions(module);
    if (funcs.empty()) {
      emitError(module.getLoc(), "no @")
          << kTrainStepName
          << "; run --merak-train first (or --merak-kv-cache for text "
             "generation)";
      return signalPassFailure();
    }
    generation = funcs.front().getSymName() != kTrainStepName;
    mesh = lookupMesh(module);
    if (!mesh)
      mesh = createMesh(module, {{"tp", tp > 0 ? int64_t(tp) : 1}});
    int64_t idx = meshAxisIndex(mesh, "tp");
    size = idx < 0 ? 1 : mesh.getShape()[idx];
    if (tp > 0 && tp != size && !(tp == 1 && idx < 0)) {
      mesh.emitError("tp=")
          << int(tp) << " but the mesh's tp axis has size " << size;
      return signalPassFailure();
    }
    if (size == 1)
      return;
    axis = static_cast<MeshAxis>(idx);
    meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
    for (func::FuncOp f : funcs) {
      func = f;
      linears.clear();
      embeddings.clear();
      fusedHeads.clear();
      adapters.clear();
      adapterEntries.clear();
      adapterOutputs.clear();
      adapterLinears.clear();
      splitLayers();
      if (failed)
        return signalPassFailure();
    }
  }

  void splitLayers() {
    findAdapters();
    findMlps();
    findAttention();
    // A generator's logits stay whole: every rank picks the same token
    // from all of them.
    if (vocabParallel && !generation)
      findVocabulary();
    if (failed)
      return;
    for (auto [linear, split] : linears)
      annotateLinear(linear, split);
    for (EmbeddingOp e : embeddings)
      splitParam(e.getWeight(), 0, "vocabulary-parallel embedding", e);
    for (ReshapeOp r : fusedHeads)
      annotateActivation(r.getResult(), r.getType().getRank() - 2);
    if (failed)
      return;
    stateFollowsParam();
  }

  /// Splits an activation along `dim` over tp; its batch dimension 0 stays
  /// split over dp when the mesh has that axis.
  void annotateActivation(Value v, int64_t dim) {
    annotateResult(cast<OpResult>(v),
                   activationSharding(mesh, cast<RankedTensorType>(v.getType()),
                                      {{dim, axis}}));
  }

  /// Optimizer state takes the sharding of its parameter.
  void stateFollowsParam() {
    func.walk([&](Operation *op) {
      if (!isOptimizerUpdate(op))
        return;
      auto param = dyn_cast<BlockArgument>(stripShards(op->getOperand(0)));
      ShardOp s = param ? argAnnotation(param) : ShardOp();
      if (!s)
        return;
      for (Value operand : op->getOperands().drop_front(2)) {
        auto state = dyn_cast<BlockArgument>(stripShards(operand));
        if (state && func.getArgAttr(state.getArgNumber(), kOptStateAttr) &&
            state.getType() == param.getType())
          annotateArg(state, s.getShard());
      }
    });
  }

  /// linear -> elementwise* -> linear.
  void findMlps() {
    func.walk([&](LinearOp first) {
      if (!isForward(first) || linears.count(first) ||
          adapterLinears.contains(first))
        return;
      int64_t hidden = lastDim(first.getResult());
      SmallVector<Value> work{outputOf(first)};
      llvm::SmallPtrSet<Operation *, 8> seen;
      llvm::SetVector<Operation *> sinks;
      bool chain = true;
      while (!work.empty() && chain) {
        Value v = work.pop_back_val();
        for (OpOperand *use : usesOf(v)) {
          Operation *user = use->getOwner();
          if (!isForward(user))
            continue;
          if (LinearOp next = readerLayer(use)) {
            sinks.insert(next);
            continue;
          }
          if ((isHiddenElementwise(user) || isHiddenArithmetic(user)) &&
              user->getNumResults() == 1 &&
              lastDim(user->getResult(0)) == hidden) {
            if (seen.insert(user).second)
              work.push_back(user->getResult(0));
            continue;
          }
          chain = false;
        }
      }
      if (!chain || sinks.size() != 1 || seen.empty())
        return;
      Value out = outputOf(first);
      for (Operation *op : seen)
        if (isHiddenArithmetic(op))
          for (Value operand : op->getOperands()) {
            operand = stripShards(operand);
            Operation *def = operand.getDefiningOp();
            if (operand != out && !isScalar(operand) && !seen.contains(def))
              return;
          }
      auto last = cast<LinearOp>(sinks.front());
      // Every linear feeding the chain is column-split (SwiGLU's gate and
      // up projections).
      SmallVector<LinearOp> firsts{first};
      for (Operation *op : seen)
        for (Value operand : op->getOperands())
          if (LinearOp other = layerOf(operand);
              other && isForward(other) && !llvm::is_contained(firsts, other))
            firsts.push_back(other);
      for (LinearOp l : firsts)
        if (!canSplit(l, Split::Column)) {
          keepWhole(l, "MLP", l.getWeight(), 0);
          return;
        }
      if (!canSplit(last, Split::Row)) {
        keepWhole(last, "MLP", last.getWeight(), 1);
        return;
      }
      for (LinearOp l : firsts)
        linears[l] = Split::Column;
      linears[last] = Split::Row;
    });
  }

  void findAttention() {
    func.walk([&](ReshapeOp r) {
      if (!isForward(r))
        return;
      if (std::optional<int64_t> heads = r.splitHeads()) {
        Value in = stripShards(r.getInput());
        if (auto slice = in.getDefiningOp<SliceOp>();
            slice && isForward(slice) &&
            stripShards(slice.getInput()).getDefiningOp<LinearOp>()) {
          if (*heads % size != 0) {
            r.emitRemark("fused attention projection stays whole: ")
                << *heads << " heads are not divisible by tp=" << size;
            return;
          }
          fusedHeads.push_back(r);
          return;
        }
        LinearOp proj = layerOf(unscaled(in));
        if (!proj || !isForward(proj) || linears.count(proj))
          return;
        if (*heads % size != 0) {
          proj.emitRemark("attention projection ")
              << paramName(proj.getWeight()) << " stays whole: " << *heads
              << " heads are not divisible by tp=" << size;
          return;
        }
        linears[proj] = Split::Column;
        return;
      }
      if (!r.mergesHeads())
        return;
      // Heads tp does not divide stay whole, and so does their output
      // projection.
      auto merged = cast<RankedTensorType>(r.getInput().getType());
      if (merged.getDimSize(merged.getRank() - 2) % size != 0)
        return;
      // The output projection reads the merged heads, or a reshape of them
      // that keeps the last dimension (nn.MultiheadAttention flattens the
      // sequence and the batch first).
      SmallVector<OpOperand *> uses = usesOf(r.getResult());
      for (size_t i = 0; i < uses.size(); ++i) {
        Operation *user = uses[i]->getOwner();
        if (auto flat = dyn_cast<ReshapeOp>(user);
            flat && isForward(flat) &&
            lastDim(flat.getResult()) == lastDim(r.getResult())) {
          llvm::append_range(uses, usesOf(flat.getResult()));
          continue;
        }
        if (LinearOp out = readerLayer(uses[i]);
            out && isForward(out) && !linears.count(out))
          linears[out] = Split::Row;
      }
    });
  }

  void findVocabulary() {
    func.walk([&](EmbeddingOp e) {
      if (!isForward(e))
        return;
      auto idx = dyn_cast<BlockArgument>(stripShards(e.getIndices()));
      if (!idx || !func.getArgAttr(idx.getArgNumber(), kInputAttr))
        return;
      if (!canSplit(e.getWeight(), 0)) {
        keepWhole(e, "vocabulary-parallel embedding", e.getWeight(), 0);
        return;
      }
      embeddings.push_back(e);
    });
    func.walk([&](CrossEntropyOp ce) {
      if (!isForward(ce))
        return;
      Value logits = stripShards(ce.getLogits());
      // Through reshapes, and the slice of a causal LM's shift (positions
      // 0..T-2 predict tokens 1..T-1), which keeps every class.
      while (Operation *def = logits.getDefiningOp()) {
        if (auto r = dyn_cast<ReshapeOp>(def))
          logits = stripShards(r.getInput());
        else if (auto s = dyn_cast<SliceOp>(def);
                 s && isForward(s) &&
                 s.getDim() + 1 < cast<RankedTensorType>(s.getType()).getRank())
          logits = stripShards(s.getInput());
        else
          break;
      }
      auto head = logits.getDefiningOp<LinearOp>();
      if (!head || !isForward(head))
        return;
      if (!canSplit(head, Split::Vocab)) {
        keepWhole(head, "vocabulary-parallel head", head.getWeight(), 0);
        linears.erase(head);
        return;
      }
      linears[head] = Split::Vocab;
    });
  }

  /// Whether the parameter behind `v` can be split along `dim` over tp
  /// (what `splitParam` would do); a weight computed in the graph can.
  bool canSplit(Value v, int64_t dim) {
    auto [param, offset] = weightParam(v);
    dim += offset;
    auto arg = dyn_cast<BlockArgument>(param);
    if (!arg || !func.getArgAttr(arg.getArgNumber(), kParamAttr))
      return true;
    auto type = cast<RankedTensorType>(arg.getType());
    ShardOp existing = argAnnotation(arg);
    SplitAxes split = splitAxesOf(
        existing ? existing.getShard() : MeshShardingAttr(), type.getRank());
    if (llvm::is_contained(split[dim], axis))
      return true;
    return (type.getDimSize(dim) / groupSize(mesh, split[dim])) % size == 0;
  }

  /// Whether linear `l` can take `split`: its weight's (and bias's) split
  /// dimension divides by tp.
  bool canSplit(LinearOp l, Split split) {
    if (split == Split::Row)
      return canSplit(l.getWeight(), 1);
    return canSplit(l.getWeight(), 0) &&
           (!l.getBias() || canSplit(l.getBias(), 0));
  }

  /// A part of the model tp cannot split stays whole (replicated over tp),
  /// with a remark saying which and why.
  void keepWhole(Operation *at, StringRef what, Value weight, int64_t dim) {
    auto [param, offset] = weightParam(weight);
    at->emitRemark() << what << " stays whole: dimension " << dim + offset
                     << " of parameter " << paramName(param) << " ("
                     << param.getType() << ") is not divisible by tp=" << size;
  }

  /// Splits the parameter behind `v` along `dim` over tp. `v` may be one
  /// section of a parameter, `select(param, 0, s)` (a fused projection that
  /// --merak-split-fused-projections took apart): the parameter is split
  /// along the section's `dim`, every section alike.
  void splitParam(Value v, int64_t dim, StringRef what, Operation *at) {
    auto [param, offset] = weightParam(v);
    dim += offset;
    auto arg = dyn_cast<BlockArgument>(param);
    if (!arg || !func.getArgAttr(arg.getArgNumber(), kParamAttr)) {
      // A weight computed in the graph: propagation decides.
      return;
    }
    auto type = cast<RankedTensorType>(arg.getType());
    ShardOp existing = argAnnotation(arg);
    SplitAxes split = splitAxesOf(
        existing ? existing.getShard() : MeshShardingAttr(), type.getRank());
    if (llvm::is_contained(split[dim], axis))
      return;
    for (auto &axes : split)
      if (llvm::is_contained(axes, axis)) {
        at->emitError() << what << ": parameter " << paramName(arg)
                        << " is split on tp along another dimension already";
        failed = true;
        return;
      }
    int64_t local = type.getDimSize(dim) / groupSize(mesh, split[dim]);
    if (local % size != 0) {
      at->emitError() << what << ": dimension " << dim << " of parameter "
                      << paramName(arg) << " (" << type
                      << ") is not divisible by tp=" << size;
      failed = true;
      return;
    }
    split[dim].push_back(axis);
    annotateArg(arg, makeSharding(func.getContext(), meshRef, split));
  }

  void annotateLinear(LinearOp l, Split split) {
    switch (split) {
    case Split::Column:
    case Split::Vocab: {
      StringRef what = split == Split::Column ? "column-parallel linear"
                                              : "vocabulary-parallel head";
      splitParam(l.getWeight(), 0, what, l);
      if (l.getBias())
        splitParam(l.getBias(), 0, what, l);
      // The adapter's up projection makes the layer's outputs: split alike.
      if (auto a = adapters.find(l); a != adapters.end())
        splitParam(a->second.up.getWeight(), 0, what, l);
      return;
    }
    case Split::Row:
      splitParam(l.getWeight(), 1, "row-parallel linear", l);
      // The adapter's down projection reads the layer's split inputs.
      if (auto a = adapters.find(l); a != adapters.end())
        splitParam(a->second.down.getWeight(), 1, "row-parallel linear", l);
      return;
    }
  }
};

} // namespace

namespace {

struct SequenceParallelPass
    : public merak::impl::SequenceParallelBase<SequenceParallelPass> {
  using SequenceParallelBase::SequenceParallelBase;

  func::FuncOp func;
  MeshOp mesh;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (megatron && ulysses) {
      emitError(module.getLoc(), "choose one of megatron and ulysses");
      return signalPassFailure();
    }
    if (!megatron && !ulysses)
      return;
    func = module.lookupSymbol<func::FuncOp>(kTrainStepName);
    if (!func && !generationFunctions(module).empty()) {
      emitError(module.getLoc(), "text generation (@prefill, @decode) is "
                                 "partitioned by tp alone; drop sp");
      return signalPassFailure();
    }
    mesh = lookupMesh(module);
    StringRef axisName = megatron ? "tp" : "sp";
    int64_t idx = mesh ? meshAxisIndex(mesh, axisName) : -1;
    if (!func || idx < 0) {
      emitError(module.getLoc(),
                megatron ? "Megatron sequence parallelism needs a "
                           "tp mesh axis; run --merak-tensor-parallel "
                           "first"
                         : "Ulysses sequence parallelism needs an sp "
                           "mesh axis; run --merak-mesh=\"sp=N\" "
                           "first");
      return signalPassFailure();
    }
    auto axis = static_cast<MeshAxis>(idx);
    if (failed(megatron ? runMegatron(axis) : runUlysses(axis)))
      signalPassFailure();
  }

  /// The tensor-parallel axis of a parameter's split: the dimension of
  /// `v`'s parameter split over `axis`, or -1.
  int64_t splitDim(Value v, MeshAxis axis) {
    auto [param, offset] = weightParam(v);
    auto arg = dyn_cast<BlockArgument>(param);
    ShardOp s = arg ? argAnnotation(arg) : ShardOp();
    if (!s)
      return -1;
    for (auto [d, axes] : llvm::enumerate(s.getShard().getSplitAxes()))
      if (llvm::is_contained(axes.asArrayRef(), axis))
        return int64_t(d) >= offset ? int64_t(d) - offset : -1;
    return -1;
  }

  /// Everything between a row-parallel output and the next column-parallel
  /// input is split along the sequence over tp: the partial sums of row-
  /// parallel linears and of the vocabulary-parallel embedding are
  /// reduce-scattered into sequence shards (norms, dropouts and residual
  /// adds then run on a shard), and column-parallel linears all-gather
  /// their input.
  LogicalResult runMegatron(MeshAxis axis) {
    int64_t n = mesh.getShape()[axis];
    bool bad = false;
    auto seqSplit = [&](Value v, Operation *at) -> MeshShardingAttr {
      auto type = cast<RankedTensorType>(v.getType());
      if (type.getRank() != 3)
        return nullptr;
      if (type.getDimSize(1) % n != 0) {
        at->emitError("sequence length ")
            << type.getDimSize(1) << " is not divisible by tp=" << n;
        bad = true;
        return nullptr;
      }
      return activationSharding(mesh, type, {{1, axis}});
    };
    auto annotateUses = [&](Value v, MeshShardingAttr s) {
      for (OpOperand *use : usesOf(v)) {
        OpBuilder b(use->getOwner());
        auto shard = b.create<ShardOp>(use->getOwner()->getLoc(), use->get(), s,
                                       /*annotate_for_users=*/true);
        use->set(shard);
      }
    };
    SmallVector<std::pair<Value, MeshShardingAttr>> scatter;
    llvm::MapVector<Value, MeshShardingAttr> gather;
    // Ids of the vocabulary-parallel embeddings whose output is split along
    // the sequence.
    llvm::SmallDenseSet<Attribute> seqEmbeddings;
    // Ids of the column-parallel linears whose input is gathered.
    llvm::SmallDenseSet<Attribute> columnLinears;
    func.walk([&](Operation *op) {
      if (!isForward(op))
        return;
      if (auto linear = dyn_cast<LinearOp>(op)) {
        int64_t d = splitDim(linear.getWeight(), axis);
        if (d == 1) {
          if (MeshShardingAttr s = seqSplit(linear.getResult(), op))
            scatter.push_back({linear.getResult(), s});
        } else if (d == 0) {
          auto type = cast<RankedTensorType>(linear.getInput().getType());
          if (type.getRank() == 3) {
            gather[stripShards(linear.getInput())] =
                activationSharding(mesh, type, {});
            columnLinears.insert(op->getAttr(kIdAttr));
          }
        }
      } else if (auto emb = dyn_cast<EmbeddingOp>(op)) {
        if (splitDim(emb.getWeight(), axis) == 0)
          if (MeshShardingAttr s = seqSplit(emb.getResult(), op)) {
            scatter.push_back({emb.getResult(), s});
            seqEmbeddings.insert(op->getAttr(kIdAttr));
          }
      }
    });
    if (bad)
      return failure();
    // The gradient of such an embedding's table is computed from the whole
    // sequence (its output gradient and ids all-gathered), each rank for
    // its own rows; from the sequence shard it would be a partial sum of
    // the whole table, reduce-scattered.
    func.walk([&](IndexBackwardOp ib) {
      if (!seqEmbeddings.contains(ib->getAttr(kGradOfAttr)))
        return;
      for (OpOperand &use : ib->getOpOperands()) {
        auto type = cast<RankedTensorType>(use.get().getType());
        OpBuilder b(ib);
        auto whole = b.create<ShardOp>(ib.getLoc(), use.get(),
                                       activationSharding(mesh, type, {}),
                                       /*annotate_for_users=*/true);
        use.set(whole);
      }
    });
    for (auto [v, s] : scatter)
      annotateUses(v, s);
    for (auto [v, s] : gather) {
      // Only the column-parallel linears' operand, and their weight
      // gradients' (the gathered input times the output gradient's own
      // columns, as Megatron computes it, rather than the gradient moved to
      // the sequence split and the whole weight's partial sums reduced):
      // other users of the value keep the sequence shard.
      for (OpOperand *use : usesOf(v)) {
        Operation *user = use->getOwner();
        auto linear = dyn_cast<LinearOp>(user);
        auto weightGrad = dyn_cast<LinearWeightBackwardOp>(user);
        if (linear
                ? use->getOperandNumber() != 0 ||
                      splitDim(linear.getWeight(), axis) != 0
                : !weightGrad || use->getOperandNumber() != 1 ||
                      !columnLinears.contains(weightGrad->getAttr(kGradOfAttr)))
          continue;
        OpBuilder b(user);
        auto whole = b.create<ShardOp>(user->getLoc(), use->get(), s,
                                       /*annotate_for_users=*/true);
        use->set(whole);
      }
    }
    return success();
  }

  /// Inputs split along the sequence over sp; attention split by heads.
  LogicalResult runUlysses(MeshAxis axis) {
    int64_t n = mesh.getShape()[axis];
    for (BlockArgument arg : func.getArguments()) {
      if (!func.getArgAttr(arg.getArgNumber(), kInputAttr))
        continue;
      auto type = cast<RankedTensorType>(arg.getType());
      if (type.getRank() < 2)
        continue;
      if (type.getDimSize(1) % n != 0)
        return emitError(func.getLoc(), "input ")
               << func.getArgAttr(arg.getArgNumber(), kInputAttr)
               << ": sequence dimension 1 of " << type
               << " is not divisible by sp=" << n;
      ShardOp existing = argAnnotation(arg);
      SplitAxes split = splitAxesOf(
          existing ? existing.getShard() : MeshShardingAttr(), type.getRank());
      split[1].push_back(axis);
      annotateArg(arg,
                  makeSharding(func.getContext(),
                               FlatSymbolRefAttr::get(mesh.getSymNameAttr()),
                               split));
    }
    bool bad = false;
    func.walk([&](ReshapeOp r) {
      if (!isForward(r))
        return;
      auto out = cast<RankedTensorType>(r.getType());
      if (std::optional<int64_t> heads = r.splitHeads()) {
        if (*heads % n != 0) {
          r.emitError("Ulysses attention: ")
              << *heads << " heads are not divisible by sp=" << n;
          bad = true;
          return;
        }
        annotateResult(
            cast<OpResult>(r.getResult()),
            activationSharding(mesh, out, {{out.getRank() - 2, axis}}));
        return;
      }
      if (r.mergesHeads() && splittable(mesh, r.getInput(), 1, axis)) {
        auto in = cast<RankedTensorType>(r.getInput().getType());
        OpBuilder b(r);
        auto seq = b.create<ShardOp>(r.getLoc(), r.getInput(),
                                     activationSharding(mesh, in, {{1, axis}}),
                                     /*annotate_for_users=*/true);
        r.getInputMutable().assign(seq);
      }
    });
    return failure(bad);
  }
};

} // namespace

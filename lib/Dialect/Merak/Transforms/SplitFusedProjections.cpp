//===- SplitFusedProjections.cpp - fused projections by section ----------===//
//
// GPT-2 computes q, k and v with one linear of weight [3E, E] and slices
// the result; tensor parallelism gives every rank its heads of each, rows
// {q_r, k_r, v_r} of the weight, which is no block of it. Viewed as
// [3, E, E], the same rows are the block [:, r, :] split along dimension 1.
// This pass gives such a parameter that view (the stored tensor keeps its
// shape through merak.stored_shape), computes each section with a linear
// of its own on select(weight, 0, s), and derives @train_step again from
// the changed @forward.
//
//===----------------------------------------------------------------------===//

#include "merak/Analysis/TrainStep.h"
#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/LayerPatterns.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Pass/PassManager.h"

namespace merak {
#define GEN_PASS_DEF_SPLITFUSEDPROJECTIONS
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace merak;

namespace {

/// One fused projection of @forward: its slices in order of their start.
struct Fused {
  LinearOp linear;
  SmallVector<SliceOp> sections;
};

/// Whether tensor parallelism can split a section by what reads it: every
/// reader reshapes it into heads that `tp` divides (q, k, v; the heads in
/// a dimension of their own or, as nn.MultiheadAttention has them, merged
/// with the batch), or every reader is elementwise (a gate or up
/// projection).
bool splitBySection(SliceOp section, int64_t tp) {
  if (section->use_empty())
    return false;
  bool heads = true, elementwise = true;
  for (Operation *user : section->getUsers()) {
    auto r = dyn_cast<ReshapeOp>(user);
    std::optional<int64_t> h = r ? r.splitHeads() : std::nullopt;
    if (r && !h)
      h = r.mergesBatchAndHeads();
    heads &= h && *h % tp == 0;
    elementwise &= isHiddenElementwise(user);
  }
  return heads || elementwise;
}

/// `type` with its dimension `dim` (of size B * heads) as two, `[B, heads]`.
RankedTensorType splitDim(RankedTensorType type, int64_t dim, int64_t heads) {
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] /= heads;
  shape.insert(shape.begin() + dim + 1, heads);
  return RankedTensorType::get(shape, type.getElementType());
}

/// nn.MultiheadAttention's q, k and v are `[T, B * H, D]`: the batch and the
/// heads share a dimension, in which a rank's heads are no block. This
/// rewrites them, and the attention that reads them, to carry the heads in
/// a dimension of their own, `[T, B, H, D]`, the layout GPT-2's attention
/// has and tensor parallelism splits. Starting from the reshapes that merge
/// the batch and the heads, each op that reads a rewritten value is
/// rewritten too where its meaning carries over: permutes (the merged
/// dimension becomes two adjacent ones), dropout, softmax along another
/// dimension, elementwise arithmetic with a value that is rewritten too or
/// only spans dimensions after the merged one, and batched matmuls of two
/// rewritten values. Splitting a dimension in two keeps the elements'
/// order, so any other reader gets the old shape back by a reshape; a
/// reshape that merges the heads again does so in two steps, the heads
/// into the last dimension first (what tensor parallelism recognizes as
/// the input of the output projection).
class SplitBatchHeads {
public:
  explicit SplitBatchHeads(int64_t heads) : heads(heads) {}

  void run(ArrayRef<ReshapeOp> seeds) {
    Operation *first = seeds.front();
    for (ReshapeOp r : seeds) {
      if (r->isBeforeInBlock(first))
        first = r;
      auto type = cast<RankedTensorType>(r.getType());
      int64_t dim = type.getRank() - 2;
      auto split = splitDim(type, dim, heads);
      OpBuilder b(r);
      Value v = b.create<ReshapeOp>(r.getLoc(), split, r.getInput(),
                                    b.getDenseI64ArrayAttr(split.getShape()));
      map[r.getResult()] = {v, dim};
      rewritten.push_back(r);
    }
    llvm::SmallPtrSet<Operation *, 4> seedSet;
    for (ReshapeOp r : seeds)
      seedSet.insert(r);
    for (Operation &op : llvm::make_early_inc_range(llvm::make_range(
             std::next(first->getIterator()), first->getBlock()->end()))) {
      if (seedSet.count(&op) || llvm::none_of(op.getOperands(), [&](Value v) {
            return map.count(v);
          }))
        continue;
      rewrite(&op);
    }
    // Readers left as they were get the old shape back.
    llvm::SmallPtrSet<Operation *, 16> done(rewritten.begin(), rewritten.end());
    for (Operation *op : rewritten) {
      for (Value old : op->getResults()) {
        Value back;
        for (OpOperand &use : llvm::make_early_inc_range(old.getUses())) {
          if (done.count(use.getOwner()))
            continue;
          if (!back) {
            Value v = map[old].value;
            OpBuilder b(v.getContext());
            b.setInsertionPointAfterValue(v);
            back = reshape(b, op->getLoc(), v,
                           cast<RankedTensorType>(old.getType()));
          }
          use.set(back);
        }
      }
    }
    for (Operation *op : llvm::reverse(rewritten))
      op->erase();
  }

private:
  struct Split {
    Value value;
    /// The merged dimension's position in the value it replaces.
    int64_t dim;
  };

  /// `v` reshaped to `type`; where `v` is `[..., H, D]` and `type` ends in
  /// `H * D`, the heads are merged into the last dimension first.
  Value reshape(OpBuilder &b, Location loc, Value v, RankedTensorType type) {
    auto in = cast<RankedTensorType>(v.getType());
    int64_t rank = in.getRank();
    if (in.getDimSize(rank - 2) == heads &&
        type.getShape().back() == heads * in.getShape().back()) {
      SmallVector<int64_t> merged(in.getShape().drop_back(2));
      merged.push_back(type.getShape().back());
      v = b.create<ReshapeOp>(
          loc, RankedTensorType::get(merged, in.getElementType()), v,
          b.getDenseI64ArrayAttr(merged));
    }
    if (v.getType() == type)
      return v;
    return b.create<ReshapeOp>(loc, type, v,
                               b.getDenseI64ArrayAttr(type.getShape()));
  }

  /// Rewrites `op`, which reads a rewritten value, where its meaning carries
  /// over; otherwise leaves it.
  void rewrite(Operation *op) {
    // Masked attention has two results (and probabilities), alike in
    // their batch dimensions; any other op one.
    if (op->getNumResults() != 1 && !isa<MaskedAttentionOp>(op))
      return;
    auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
    if (!type)
      return;
    OpBuilder b(op);
    // A reshape reads the rewritten value in place of the old one.
    if (auto r = dyn_cast<ReshapeOp>(op)) {
      Value v = reshape(b, r.getLoc(), map[r.getInput()].value, type);
      r.getResult().replaceAllUsesWith(v);
      r.erase();
      return;
    }
    std::optional<int64_t> dim = resultDim(op, type.getRank());
    if (!dim)
      return;
    IRMapping operands;
    for (Value v : op->getOperands())
      if (auto it = map.find(v); it != map.end())
        operands.map(v, it->second.value);
    Operation *copy = b.clone(*op, operands);
    for (OpResult r : copy->getResults())
      r.setType(splitDim(cast<RankedTensorType>(r.getType()), *dim, heads));
    if (auto p = dyn_cast<PermuteOp>(copy))
      p.setPermutation(splitPermutation(cast<PermuteOp>(op)));
    if (auto s = dyn_cast<SoftmaxOp>(copy))
      s.setDim(s.getDim() + (s.getDim() > map[op->getOperand(0)].dim));
    for (auto [old, split] : llvm::zip(op->getResults(), copy->getResults()))
      map[old] = {split, *dim};
    rewritten.push_back(op);
  }

  /// Where the merged dimension is in `op`'s result, for an op whose
  /// meaning carries over to the split dimension; none for any other.
  std::optional<int64_t> resultDim(Operation *op, int64_t rank) {
    auto splitOf = [&](Value v) -> std::optional<int64_t> {
      auto it = map.find(v);
      if (it == map.end())
        return std::nullopt;
      return it->second.dim;
    };
    if (auto p = dyn_cast<PermuteOp>(op)) {
      int64_t dim = *splitOf(p.getInput());
      return llvm::find(p.getPermutation(), dim) - p.getPermutation().begin();
    }
    if (isa<DropoutOp>(op))
      return splitOf(op->getOperand(0));
    if (auto s = dyn_cast<SoftmaxOp>(op)) {
      int64_t dim = *splitOf(s.getInput());
      return s.getDim() == dim ? std::nullopt : std::optional(dim);
    }
    if (isa<AddOp, SubOp, MulOp, DivOp, MatmulOp, MaskedAttentionOp>(op)) {
      std::optional<int64_t> dim;
      for (Value v : op->getOperands()) {
        auto t = cast<RankedTensorType>(v.getType());
        if (std::optional<int64_t> d = splitOf(v)) {
          if ((dim && *d != *dim) || t.getRank() != rank)
            return std::nullopt;
          dim = d;
        }
      }
      // An operand not rewritten may only span dimensions after the
      // merged one (a scale, a mask over the last ones), or have size 1 in
      // it and every one before (a causal mask `[1, T, T]`, broadcast over
      // the batch and the heads alike); a matmul needs both operands
      // rewritten, masked attention its query, key and value, and either
      // the merged dimension among its batch.
      auto fits = [&](Value v) {
        auto shape = cast<RankedTensorType>(v.getType()).getShape();
        int64_t merged = int64_t(shape.size()) - (rank - *dim);
        return llvm::all_of(shape.take_front(std::max<int64_t>(merged + 1, 0)),
                            [](int64_t size) { return size == 1; });
      };
      bool products = isa<MatmulOp, MaskedAttentionOp>(op);
      for (auto [i, v] : llvm::enumerate(op->getOperands()))
        if (!splitOf(v) && ((products && i < 3) || !fits(v)))
          return std::nullopt;
      if (products && *dim >= rank - 2)
        return std::nullopt;
      return dim;
    }
    return std::nullopt;
  }

  /// The permutation of `p` over the split dimensions: the merged one's
  /// two parts stay together.
  SmallVector<int64_t> splitPermutation(PermuteOp p) {
    int64_t dim = map[p.getInput()].dim;
    SmallVector<int64_t> perm;
    for (int64_t d : p.getPermutation()) {
      perm.push_back(d + (d > dim));
      if (d == dim)
        perm.push_back(dim + 1);
    }
    return perm;
  }

  int64_t heads;
  llvm::DenseMap<Value, Split> map;
  /// Ops replaced by their rewritten copies, in block order.
  SmallVector<Operation *> rewritten;
};

/// The parameter argument `v` is, when the fused linear is its one reader;
/// `v` may be the parameter cast to the compute precision
/// (--merak-train precision=bf16), the cast read by the linear alone.
BlockArgument soleParam(func::FuncOp func, Value v) {
  if (auto cast = v ? v.getDefiningOp<CastOp>() : CastOp();
      cast && cast->hasOneUse())
    v = cast.getInput();
  auto arg = dyn_cast_or_null<BlockArgument>(v);
  if (!arg || arg.getOwner() != &func.getBody().front() || !arg.hasOneUse() ||
      !func.getArgAttr(arg.getArgNumber(), kParamAttr))
    return {};
  return arg;
}

struct SplitFusedProjectionsPass
    : public merak::impl::SplitFusedProjectionsBase<SplitFusedProjectionsPass> {
  using SplitFusedProjectionsBase::SplitFusedProjectionsBase;

  SmallVector<Fused> find(func::FuncOp forward) {
    SmallVector<Fused> found;
    forward.walk([&](LinearOp l) {
      auto type = cast<RankedTensorType>(l.getType());
      int64_t last = type.getRank() - 1;
      int64_t total = type.getDimSize(last);
      BlockArgument weight = soleParam(forward, l.getWeight());
      if (!weight || (l.getBias() && !soleParam(forward, l.getBias())))
        return;
      Fused f{l, {}};
      // A LoRA adapter's up projection is fused alike: it is viewed by
      // section with the layer.
      std::optional<LoraAdapter> adapter = loraAdapterOf(l);
      if (adapter && !soleParam(forward, adapter->up.getWeight()))
        return;
      Value produced = adapter ? adapter->out : l.getResult();
      for (Operation *user : produced.getUsers()) {
        auto s = dyn_cast<SliceOp>(user);
        if (!s || s.getDim() != last || s.getStep() != 1)
          return;
        f.sections.push_back(s);
      }
      llvm::sort(f.sections, [](SliceOp a, SliceOp b) {
        return a.getStart() < b.getStart();
      });
      int64_t count = f.sections.size();
      if (count < 2 || total % count != 0)
        return;
      int64_t size = total / count;
      if (size % tp != 0)
        return;
      for (auto [s, section] : llvm::enumerate(f.sections))
        if (section.getStart() != int64_t(s) * size ||
            section.getEnd() != int64_t(s + 1) * size ||
            !splitBySection(section, tp))
          return;
      found.push_back(f);
    });
    return found;
  }

  /// Gives `arg` the type `[sections, rest...]` of its `[sections * N,
  /// ...]`, recording the stored shape.
  void viewBySection(func::FuncOp forward, BlockArgument arg,
                     int64_t sections) {
    auto type = cast<RankedTensorType>(arg.getType());
    SmallVector<int64_t> shape{sections, type.getDimSize(0) / sections};
    llvm::append_range(shape, type.getShape().drop_front());
    forward.setArgAttr(arg.getArgNumber(), kStoredShapeAttr,
                       DenseI64ArrayAttr::get(&getContext(), type.getShape()));
    arg.setType(RankedTensorType::get(shape, type.getElementType()));
  }

  void rewrite(func::FuncOp forward, Fused &f) {
    LinearOp l = f.linear;
    int64_t count = f.sections.size();
    BlockArgument weight = soleParam(forward, l.getWeight());
    BlockArgument bias =
        l.getBias() ? soleParam(forward, l.getBias()) : BlockArgument();
    // The casts to the compute precision, if any, move onto the sections.
    auto castOf = [](Value v) {
      return v ? v.getDefiningOp<CastOp>() : CastOp();
    };
    CastOp weightCast = castOf(l.getWeight()), biasCast = castOf(l.getBias());
    viewBySection(forward, weight, count);
    if (bias)
      viewBySection(forward, bias, count);
    std::optional<LoraAdapter> adapter = loraAdapterOf(l);
    BlockArgument up;
    CastOp upCast;
    AddOp sum;
    MulOp scaled;
    if (adapter) {
      up = soleParam(forward, adapter->up.getWeight());
      upCast = castOf(adapter->up.getWeight());
      viewBySection(forward, up, count);
      sum = adapter->out.getDefiningOp<AddOp>();
      scaled = sum.getRhs().getDefiningOp<MulOp>();
    }
    // After the adapter's sum, where its down projection is defined.
    OpBuilder b(l);
    if (adapter)
      b.setInsertionPointAfter(sum);
    auto sectionOf = [&](BlockArgument arg, CastOp toCompute,
                         int64_t s) -> Value {
      auto type = cast<RankedTensorType>(arg.getType());
      auto result = RankedTensorType::get(type.getShape().drop_front(),
                                          type.getElementType());
      Value section =
          b.create<SelectOp>(l.getLoc(), result, arg, b.getI64IntegerAttr(0),
                             b.getI64IntegerAttr(s));
      if (!toCompute)
        return section;
      auto to = cast<RankedTensorType>(toCompute.getType());
      return b.create<CastOp>(
          toCompute.getLoc(),
          RankedTensorType::get(result.getShape(), to.getElementType()),
          section);
    };
    SmallVector<ReshapeOp> merged;
    std::optional<int64_t> heads;
    for (auto [s, section] : llvm::enumerate(f.sections)) {
      Value w = sectionOf(weight, weightCast, s);
      Value bs = bias ? sectionOf(bias, biasCast, s) : Value();
      auto linear = b.create<LinearOp>(section.getLoc(), section.getType(),
                                       l.getInput(), w, bs);
      Value out = linear.getResult();
      if (adapter) {
        // base_s + up_s(down(x)) * scale, section by section.
        auto upLinear = b.create<LinearOp>(section.getLoc(), section.getType(),
                                           adapter->down.getResult(),
                                           sectionOf(up, upCast, s), Value());
        Value part = b.create<MulOp>(scaled.getLoc(), upLinear.getResult(),
                                     scaled.getRhs());
        out = b.create<AddOp>(sum.getLoc(), out, part);
      }
      section.getResult().replaceAllUsesWith(out);
      for (Operation *user : out.getUsers())
        if (auto r = dyn_cast<ReshapeOp>(user))
          if (std::optional<int64_t> h = r.mergesBatchAndHeads();
              h && (!heads || *h == *heads)) {
            heads = h;
            merged.push_back(r);
          }
    }
    // Erased after the loop: the builder inserts before the first of them.
    for (SliceOp section : f.sections)
      section.erase();
    if (adapter) {
      sum.erase();
      scaled.erase();
      adapter->up.erase();
      if (upCast)
        upCast.erase();
    }
    l.erase();
    if (weightCast)
      weightCast.erase();
    if (biasCast)
      biasCast.erase();
    if (!merged.empty())
      SplitBatchHeads(*heads).run(merged);
  }

  /// @train_step printed, for comparing derivations.
  static std::string print(func::FuncOp f) {
    std::string text;
    llvm::raw_string_ostream os(text);
    f.print(os);
    return os.str();
  }

  void runOnOperation() override {
    if (tp < 1) {
      emitError(getOperation().getLoc(), "tp must be >= 1, got ") << int(tp);
      return signalPassFailure();
    }
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    auto step = module.lookupSymbol<func::FuncOp>(kTrainStepName);
    if (tp == 1)
      return;
    // Functions without a training step derived from them (a forward
    // alone, a text generator's @prefill and @decode) are rewritten in
    // place, alike.
    SmallVector<func::FuncOp, 2> alone;
    if (!step && forward && !forward.isExternal())
      alone.push_back(forward);
    if (!step && !forward)
      alone = generationFunctions(module);
    if (!alone.empty()) {
      for (func::FuncOp f : alone) {
        for (Fused &fp : find(f))
          rewrite(f, fp);
        SmallVector<Type> inputs(f.getBody().getArgumentTypes());
        f.setType(FunctionType::get(&getContext(), inputs, f.getResultTypes()));
      }
      return;
    }
    if (!forward || !step || forward.isExternal())
      return;
    SmallVector<Fused> fused = find(forward);
    if (fused.empty())
      return;
    auto recorded = module->getAttrOfType<StringAttr>(kTrainOptionsAttr);
    auto leave = [&](const Twine &why) {
      fused.front().linear.emitWarning()
          << "fused projection left whole (its parameter is replicated under "
             "tp): "
          << why;
    };
    if (!recorded)
      return leave("the module does not record the options --merak-train "
                   "derived @train_step with (merak.train_options)");

    // The recorded options must derive the @train_step the module has; a
    // step changed since (by hand, by other passes) is not derived again.
    OpBuilder b(module.getBody(), module.getBody()->end());
    auto probe = cast<ModuleOp>(b.clone(*module));
    probe->removeAttr(kTrainOptionsAttr);
    probe.lookupSymbol<func::FuncOp>(kTrainStepName).erase();
    OpPassManager derive(ModuleOp::getOperationName());
    if (failed(buildTrainPipeline(derive, recorded.getValue()))) {
      probe.erase();
      return leave(Twine("merak.train_options is not a --merak-train option "
                         "list: ") +
                   recorded.getValue());
    }
    bool same =
        succeeded(runPipeline(derive, probe)) &&
        print(probe.lookupSymbol<func::FuncOp>(kTrainStepName)) == print(step);
    probe.erase();
    if (!same)
      return leave("@train_step is not what --merak-train derives from "
                   "@forward (run --merak-parallelize right after "
                   "--merak-train)");

    for (Fused &f : fused)
      rewrite(forward, f);
    SmallVector<Type> inputs(forward.getBody().getArgumentTypes());
    forward.setType(
        FunctionType::get(&getContext(), inputs, forward.getResultTypes()));
    step.erase();
    OpPassManager again(ModuleOp::getOperationName());
    if (failed(buildTrainPipeline(again, recorded.getValue())) ||
        failed(runPipeline(again, module)))
      return signalPassFailure();
  }
};

} // namespace

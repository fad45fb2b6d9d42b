//===- GradAccumulation.cpp - micro-batches inside the training step ------===//
//
// Replicates the forward/backward body of @train_step once per micro-batch,
// each on its slice of the (now larger) inputs, and averages the losses and
// gradients. The body is specialized to the micro-batch shape, so the model
// is imported at that shape.
//
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/IRMapping.h"

namespace merak {
#define GEN_PASS_DEF_GRADACCUMULATION
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace merak;

namespace {

struct GradAccumulationPass
    : public merak::impl::GradAccumulationBase<GradAccumulationPass> {
  using GradAccumulationBase::GradAccumulationBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (microbatches < 1) {
      emitError(module.getLoc(), "microbatches must be >= 1, got ")
          << int64_t(microbatches);
      return signalPassFailure();
    }
    auto func = module.lookupSymbol<func::FuncOp>(kTrainStepName);
    if (!func) {
      emitError(module.getLoc(), "no @") << kTrainStepName
                                         << "; run --merak-autodiff "
                                            "first";
      return signalPassFailure();
    }
    if (func->hasAttr(kOptimizerAttr)) {
      emitError(func.getLoc(),
                "has an optimizer already; accumulate gradients before "
                "--merak-optimizer");
      return signalPassFailure();
    }
    if (microbatches == 1)
      return;
    if (failed(rewrite(func)))
      signalPassFailure();
  }

  LogicalResult rewrite(func::FuncOp func) {
    MLIRContext *ctx = func.getContext();
    OpBuilder b(ctx);
    int64_t m = microbatches;
    Block &body = func.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());

    // Inputs grow along dimension 0.
    SmallVector<unsigned> inputs;
    SmallVector<Type> argTypes(func.getArgumentTypes());
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      if (!func.getArgAttr(i, kInputAttr))
        continue;
      auto t = cast<RankedTensorType>(argTypes[i]);
      if (t.getRank() == 0) {
        emitError(func.getLoc(), "input ")
            << func.getArgAttr(i, kInputAttr)
            << " has rank 0 and cannot be split into micro-batches";
        return failure();
      }
      SmallVector<int64_t> shape(t.getShape());
      shape[0] *= m;
      argTypes[i] = RankedTensorType::get(shape, t.getElementType());
      inputs.push_back(i);
    }
    if (inputs.empty()) {
      emitError(func.getLoc(), "has no merak.input argument to split");
      return failure();
    }

    // Result roles.
    std::optional<unsigned> lossResult;
    SmallVector<unsigned> gradResults;
    DenseMap<unsigned, unsigned> bufferOfResult; // result -> buffer argument
    for (unsigned r = 0; r < func.getNumResults(); ++r) {
      if (func.getResultAttr(r, kLossAttr))
        lossResult = r;
      else if (func.getResultAttr(r, kGradAttr))
        gradResults.push_back(r);
      else if (auto a =
                   func.getResultAttrOfType<IntegerAttr>(r, kUpdateArgAttr))
        bufferOfResult[r] = a.getInt();
    }
    if (!lossResult) {
      emitError(func.getLoc(), "returns no merak.loss");
      return failure();
    }

    // Move the body aside; the new body slices and replays it.
    auto old = std::make_unique<Block>();
    old->getOperations().splice(old->end(), body.getOperations());
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      func.getArgument(i).setType(argTypes[i]);
    func.setType(FunctionType::get(ctx, argTypes, func.getResultTypes()));

    b.setInsertionPointToEnd(&body);
    Location loc = func.getLoc();
    SmallVector<Value> current(func.getArguments().begin(),
                               func.getArguments().end());
    SmallVector<Value> sums(func.getNumResults());
    SmallVector<Value> last(func.getNumResults());
    auto oldRet = cast<func::ReturnOp>(old->getTerminator());
    for (int64_t k = 0; k < m; ++k) {
      IRMapping map;
      for (unsigned i = 0; i < func.getNumArguments(); ++i)
        map.map(func.getArgument(i), current[i]);
      for (unsigned i : inputs) {
        int64_t size = cast<RankedTensorType>(argTypes[i]).getDimSize(0) / m;
        auto slice = b.create<SliceOp>(loc, func.getArgument(i), 0, k * size,
                                       (k + 1) * size, 1);
        slice->setAttr(kMicrobatchAttr, b.getI64IntegerAttr(k));
        map.map(func.getArgument(i), slice.getResult());
      }
      for (Operation &op : old->without_terminator()) {
        Operation *c = b.clone(op, map);
        c->setAttr(kMicrobatchAttr, b.getI64IntegerAttr(k));
      }
      for (unsigned r = 0; r < func.getNumResults(); ++r) {
        Value v = map.lookup(oldRet.getOperand(r));
        last[r] = v;
        if (r == *lossResult || llvm::is_contained(gradResults, r))
          sums[r] = sums[r] ? Value(b.create<AddOp>(loc, sums[r], v)) : v;
      }
      // The next micro-batch reads the buffers this one wrote.
      for (auto [r, arg] : bufferOfResult)
        current[arg] = map.lookup(oldRet.getOperand(r));
    }
    SmallVector<Value> results;
    for (unsigned r = 0; r < func.getNumResults(); ++r) {
      if (!sums[r]) {
        results.push_back(last[r]);
        continue;
      }
      auto t = cast<RankedTensorType>(sums[r].getType());
      auto st = RankedTensorType::get({}, t.getElementType());
      Value scale = b.create<ConstantOp>(
          loc, st,
          DenseElementsAttr::get(
              st, b.getFloatAttr(t.getElementType(), 1.0 / (double)m)));
      results.push_back(b.create<MulOp>(loc, sums[r], scale));
    }
    b.create<func::ReturnOp>(ret.getLoc(), results);
    old->dropAllDefinedValueUses();
    old->dropAllReferences();
    return success();
  }
};

} // namespace

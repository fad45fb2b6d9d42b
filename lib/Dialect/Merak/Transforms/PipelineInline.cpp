//===- PipelineInline.cpp - inline the pipeline driver's calls ------------===//
//
// merak-exec runs one function without calls; inlining @pipeline_step's
// calls to the stage functions lets it run the outlined pipeline on one
// process, so its losses can be checked against @train_step's.
//
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace merak {
#define GEN_PASS_DEF_PIPELINEINLINE
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;

namespace {

struct PipelineInlinePass
    : public merak::impl::PipelineInlineBase<PipelineInlinePass> {
  using PipelineInlineBase::PipelineInlineBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>(funcName);
    if (!func) {
      emitError(module.getLoc(), "no @")
          << std::string(funcName) << " to inline into";
      return signalPassFailure();
    }
    // Inline until no call is left (a callee may call in turn).
    for (unsigned round = 0;; ++round) {
      SmallVector<func::CallOp> calls;
      func.walk([&](func::CallOp call) { calls.push_back(call); });
      if (calls.empty())
        return;
      if (round == 64) {
        emitError(func.getLoc(), "calls nest more than 64 deep (recursion?)");
        return signalPassFailure();
      }
      for (func::CallOp call : calls) {
        auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee());
        if (!callee || !callee.getBody().hasOneBlock()) {
          call.emitError("calls @")
              << call.getCallee() << ", which is not a one-block function";
          return signalPassFailure();
        }
        Block &body = callee.getBody().front();
        IRMapping mapping;
        mapping.map(body.getArguments(), call.getOperands());
        OpBuilder b(call);
        for (Operation &op : body.without_terminator())
          b.clone(op, mapping);
        auto ret = cast<func::ReturnOp>(body.getTerminator());
        for (auto [result, value] :
             llvm::zip(call.getResults(), ret.getOperands()))
          result.replaceAllUsesWith(mapping.lookupOrDefault(value));
        call.erase();
      }
    }
  }
};

} // namespace

//===- PipelineVerify.cpp - check a module's pipeline schedule ------------===//

#include "merak/Analysis/PipelineAttrNames.h"
#include "merak/Analysis/PipelineInfo.h"
#include "merak/Analysis/PipelineSchedule.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"

namespace merak {
#define GEN_PASS_DEF_PIPELINEVERIFY
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace merak;

namespace {

struct PipelineVerifyPass
    : public merak::impl::PipelineVerifyBase<PipelineVerifyPass> {
  using PipelineVerifyBase::PipelineVerifyBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto dict = module->getAttrOfType<DictionaryAttr>(kPipelineScheduleAttr);
    if (!dict) {
      emitError(module.getLoc(), "no ")
          << kPipelineScheduleAttr << "; run --merak-pipeline-schedule first";
      return signalPassFailure();
    }
    FailureOr<pipeline::Schedule> schedule = scheduleFromAttr(module, dict);
    if (failed(schedule))
      return signalPassFailure();
    if (llvm::Error error = pipeline::verifySchedule(*schedule)) {
      emitError(module.getLoc(), kPipelineScheduleAttr)
          << ": " << llvm::toString(std::move(error));
      return signalPassFailure();
    }
  }
};

} // namespace

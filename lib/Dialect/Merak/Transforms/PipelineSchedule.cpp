//===- PipelineSchedule.cpp - attach a verified pipeline schedule ---------===//
//
// Builds the schedule of the requested kind for the module's pipeline (its
// construction and proof live in lib/Analysis/PipelineSchedule.cpp) and
// records it as `merak.pipeline_schedule`.
//
//===----------------------------------------------------------------------===//

#include "merak/Analysis/PipelineSchedule.h"
#include "merak/Analysis/PipelineAttrNames.h"
#include "merak/Analysis/PipelineInfo.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace merak {
#define GEN_PASS_DEF_PIPELINESCHEDULE
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace merak;
using namespace merak::pipeline;

namespace {

struct PipelineSchedulePass
    : public merak::impl::PipelineScheduleBase<PipelineSchedulePass> {
  using PipelineScheduleBase::PipelineScheduleBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<ScheduleKind> parsed = parseScheduleKind(kind);
    if (!parsed) {
      emitError(module.getLoc(), "unknown schedule kind '")
          << std::string(kind)
          << "'; expected gpipe, 1f1b, interleaved-1f1b, "
             "merak-last-no-recompute, merak-shifted-critical-path, zb-h1 "
             "or dynamic";
      return signalPassFailure();
    }
    PipelineShape shape;
    shape.microbatches = microbatches;
    if (module->hasAttr(kPipelineAttr)) {
      std::optional<PipelineInfo> info = PipelineInfo::read(module);
      if (!info)
        return signalPassFailure();
      if ((pp && pp != info->pp) ||
          (virtualStages && virtualStages != info->virtualStages)) {
        emitError(module.getLoc(), "pp=")
            << (pp ? int(pp) : int(info->pp)) << " virtual="
            << (virtualStages ? int(virtualStages) : int(info->virtualStages))
            << " differ from the partition's pp=" << info->pp
            << " virtual=" << info->virtualStages;
        return signalPassFailure();
      }
      shape.pp = info->pp;
      shape.virtualStages = info->virtualStages;
      shape.recompute = info->recompute;
    } else {
      if (pp < 1) {
        emitError(module.getLoc(), "the module has no ")
            << kPipelineAttr
            << "; run --merak-pipeline-partition first or give pp=N";
        return signalPassFailure();
      }
      shape.pp = pp;
      shape.virtualStages = virtualStages ? virtualStages : 1;
      shape.recompute.assign(shape.stages(), recompute);
    }

    llvm::Expected<Schedule> schedule = buildSchedule(*parsed, shape);
    if (!schedule) {
      emitError(module.getLoc(), llvm::toString(schedule.takeError()));
      return signalPassFailure();
    }
    module->setAttr(kPipelineScheduleAttr,
                    scheduleToAttr(module.getContext(), *schedule));
    if (report)
      printReport(*schedule);
  }

  void printReport(const Schedule &schedule) {
    llvm::raw_ostream &os = llvm::errs();
    const PipelineShape &shape = schedule.shape;
    os << "merak-pipeline-schedule: kind="
       << stringifyScheduleKind(schedule.kind) << " pp=" << shape.pp
       << " virtual=" << shape.virtualStages << " stages=" << shape.stages()
       << " microbatches=" << shape.microbatches << "\n";
    for (int r = 0; r < shape.pp; ++r)
      os << "rank " << r << ": " << formatComputeOrder(schedule, r) << "\n";
    llvm::Expected<Simulation> sim = simulate(schedule);
    if (!sim) {
      llvm::consumeError(sim.takeError());
      return;
    }
    os << llvm::formatv("unit-time makespan {0} (F=1 R=1 B={1} W=1), "
                        "bubble {2:f1}%\n",
                        sim->makespan, schedule.splitBackward ? 1 : 2,
                        100.0 * sim->bubble());
  }
};

} // namespace

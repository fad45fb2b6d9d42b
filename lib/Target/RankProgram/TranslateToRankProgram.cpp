//===- TranslateToRankProgram.cpp - a module to its rank-program file -----===//
//
// Chooses the function a run starts from, lowers it and every pipeline
// rank's share of the schedule, and registers the translation that writes
// the result as a `.mrp` file (`merak-translate --merak-to-rank-program`).
//
//===----------------------------------------------------------------------===//

#include "merak/Analysis/PipelineAttrNames.h"
#include "merak/Dialect/Merak/IR/MerakDialect.h"
#include "merak/Target/RankProgram/RankProgramLowering.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/CommandLine.h"

using namespace mlir;

namespace merak::runtime {

FailureOr<RankPrograms> lowerToRankPrograms(ModuleOp module,
                                            llvm::StringRef entry,
                                            llvm::StringRef source) {
  func::FuncOp func;
  if (!entry.empty()) {
    func = module.lookupSymbol<func::FuncOp>(entry);
    if (!func)
      return emitError(module.getLoc())
             << "the module has no function @" << entry;
  } else {
    func = module.lookupSymbol<func::FuncOp>("train_step");
    if (!func)
      func = module.lookupSymbol<func::FuncOp>("forward");
    if (!func)
      return emitError(module.getLoc())
             << "the module has neither @train_step nor @forward; name the "
                "function to run";
  }
  RankPrograms programs;
  programs.source = source.str();
  FailureOr<Program> step = lowerToProgram(func);
  if (failed(step))
    return failure();
  programs.step = *std::move(step);

  // A pipeline schedule runs on pp × mesh ranks; @train_step (the
  // unpartitioned step, still in the module) tells the state, the inputs
  // and their shardings.
  auto schedule = module->getAttrOfType<DictionaryAttr>(kPipelineScheduleAttr);
  if (!entry.empty() || !schedule)
    return programs;
  if (func.getSymName() != "train_step")
    return emitError(module.getLoc())
           << "the module has a pipeline schedule but no @train_step";
  int64_t pp = 1;
  if (auto attr = schedule.getAs<IntegerAttr>("pp"))
    pp = std::max<int64_t>(1, attr.getInt());
  for (int64_t r = 0; r < pp; ++r) {
    FailureOr<PipelinePlan> plan = lowerPipeline(module, r);
    if (failed(plan))
      return failure();
    programs.pipeline.push_back(*std::move(plan));
  }
  return programs;
}

void registerToRankProgramTranslation() {
  static llvm::cl::opt<std::string> entry(
      "merak-rank-program-entry",
      llvm::cl::desc("--merak-to-rank-program: the function to run (default: "
                     "train_step, else forward)"),
      llvm::cl::init(""));
  TranslateFromMLIRRegistration registration(
      "merak-to-rank-program",
      "write every rank's program, memory plan, collectives, pipeline "
      "schedule and mesh as a rank-program file (.mrp) for merak-exec",
      [](ModuleOp module, llvm::raw_ostream &os) -> LogicalResult {
        std::string source;
        if (auto loc = dyn_cast<FileLineColLoc>(module.getLoc()))
          source = loc.getFilename().str();
        FailureOr<RankPrograms> programs =
            lowerToRankPrograms(module, entry, source);
        if (failed(programs))
          return failure();
        absl::StatusOr<std::string> bytes = serializeRankPrograms(*programs);
        if (!bytes.ok())
          return emitError(module.getLoc())
                 << std::string(bytes.status().message());
        os << *bytes;
        return success();
      },
      [](DialectRegistry &registry) { registerMerakDialects(registry); });
}

} // namespace merak::runtime

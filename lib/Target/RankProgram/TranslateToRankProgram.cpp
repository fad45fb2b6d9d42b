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
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace merak::runtime {

namespace {

/// The function a run starts from: `entry`, else @train_step, else
/// @forward.
FailureOr<func::FuncOp> entryFunction(ModuleOp module, llvm::StringRef entry) {
  func::FuncOp func;
  if (!entry.empty()) {
    func = module.lookupSymbol<func::FuncOp>(entry);
    if (!func)
      return emitError(module.getLoc())
             << "the module has no function @" << entry;
    return func;
  }
  func = module.lookupSymbol<func::FuncOp>("train_step");
  if (!func)
    func = module.lookupSymbol<func::FuncOp>("forward");
  if (!func)
    func = module.lookupSymbol<func::FuncOp>("prefill");
  if (!func)
    return emitError(module.getLoc())
           << "the module has neither @train_step nor @forward (nor a text "
              "generator's @prefill); name the function to run";
  return func;
}

/// A text generator's @decode, lowered, when the run starts from its
/// @prefill (no entry named); else nothing.
FailureOr<std::optional<Program>> decodeOf(ModuleOp module, func::FuncOp func,
                                           llvm::StringRef entry) {
  if (!entry.empty() || func.getSymName() != "prefill")
    return std::optional<Program>();
  auto decode = module.lookupSymbol<func::FuncOp>("decode");
  if (!decode)
    return std::optional<Program>();
  FailureOr<Program> lowered = lowerToProgram(decode);
  if (failed(lowered))
    return failure();
  return std::optional<Program>(*std::move(lowered));
}

/// The pipeline ranks of a run starting from `func`: those of the module's
/// schedule when no entry is named, else 0 (no pipeline). A pipeline
/// schedule runs on pp × mesh ranks; @train_step (the unpartitioned step,
/// still in the module) tells the state, the inputs and their shardings.
FailureOr<int64_t> pipelineRanksOf(ModuleOp module, func::FuncOp func,
                                   llvm::StringRef entry) {
  auto schedule = module->getAttrOfType<DictionaryAttr>(kPipelineScheduleAttr);
  if (!entry.empty() || !schedule)
    return 0;
  if (func.getSymName() != "train_step")
    return emitError(module.getLoc())
           << "the module has a pipeline schedule but no @train_step";
  int64_t pp = 1;
  if (auto attr = schedule.getAs<IntegerAttr>("pp"))
    pp = std::max<int64_t>(1, attr.getInt());
  return pp;
}

} // namespace

FailureOr<RankPrograms> lowerToRankPrograms(ModuleOp module,
                                            llvm::StringRef entry,
                                            llvm::StringRef source) {
  FailureOr<func::FuncOp> func = entryFunction(module, entry);
  if (failed(func))
    return failure();
  RankPrograms programs;
  programs.source = source.str();
  FailureOr<Program> step = lowerToProgram(*func);
  if (failed(step))
    return failure();
  programs.step = *std::move(step);
  FailureOr<std::optional<Program>> decode = decodeOf(module, *func, entry);
  if (failed(decode))
    return failure();
  programs.decode = *std::move(decode);
  FailureOr<int64_t> pp = pipelineRanksOf(module, *func, entry);
  if (failed(pp))
    return failure();
  for (int64_t r = 0; r < *pp; ++r) {
    FailureOr<PipelinePlan> plan = lowerPipeline(module, r);
    if (failed(plan))
      return failure();
    programs.pipeline.push_back(*std::move(plan));
  }
  return programs;
}

namespace {

/// Writes to stderr with a prefix at the start of every line, each line in
/// one write so that the lines of several ranks do not interleave.
class PrefixedErrs final : public llvm::raw_ostream {
public:
  explicit PrefixedErrs(std::string prefix) : prefix(std::move(prefix)) {
    SetUnbuffered();
  }
  ~PrefixedErrs() override {
    flush();
    if (!line.empty())
      llvm::errs() << prefix + line;
  }

private:
  void write_impl(const char *ptr, size_t size) override {
    for (size_t i = 0; i < size; ++i) {
      line += ptr[i];
      if (ptr[i] == '\n') {
        llvm::errs() << prefix + line;
        line.clear();
      }
    }
    position += size;
  }
  uint64_t current_pos() const override { return position; }

  std::string prefix, line;
  uint64_t position = 0;
};

/// A module parsed and its step lowered; each pipeline rank's plan is
/// lowered when asked for. The module, and the handler printing its
/// diagnostics, live as long as the plan.
class ModulePlan final : public CompiledPlan {
public:
  ModulePlan(const std::string &path, const std::string &linePrefix)
      : errs(linePrefix), context(makeRegistry()),
        diagnostics(sourceMgr, &context, errs) {
    context.loadAllAvailableDialects();
    // An error names its op and location; a note printing the op would
    // print the whole step for errors about the function.
    context.printOpOnDiagnostic(false);
    sourceName = path;
  }

  absl::Status load(const std::string &path, const std::string &entry) {
    auto buffer = llvm::MemoryBuffer::getFileOrSTDIN(path);
    if (!buffer)
      return absl::NotFoundError("cannot open " + path + ": " +
                                 buffer.getError().message());
    sourceMgr.AddNewSourceBuffer(std::move(*buffer), llvm::SMLoc());
    module = parseSourceFile<ModuleOp>(sourceMgr, &context);
    // The threads the parser verified functions on are stopped: a launcher
    // forks its ranks from a process that runs no other thread (Launch.h),
    // and the lowering below walks one function.
    context.disableMultithreading();
    if (!module)
      return absl::InvalidArgumentError("");
    FailureOr<func::FuncOp> func = entryFunction(*module, entry);
    if (failed(func))
      return absl::InvalidArgumentError("");
    FailureOr<Program> step = lowerToProgram(*func);
    if (failed(step))
      return absl::InvalidArgumentError("");
    stepProgram = *std::move(step);
    FailureOr<std::optional<Program>> decode = decodeOf(*module, *func, entry);
    if (failed(decode))
      return absl::InvalidArgumentError("");
    decodeProgram = *std::move(decode);
    FailureOr<int64_t> pp = pipelineRanksOf(*module, *func, entry);
    if (failed(pp))
      return absl::InvalidArgumentError("");
    ranks = *pp;
    return absl::OkStatus();
  }

  absl::StatusOr<PipelinePlan> pipelinePlan(int64_t rank) override {
    FailureOr<PipelinePlan> plan = lowerPipeline(*module, rank);
    if (failed(plan))
      return absl::InvalidArgumentError("");
    return *std::move(plan);
  }

private:
  static DialectRegistry makeRegistry() {
    DialectRegistry registry;
    registerMerakDialects(registry);
    return registry;
  }

  PrefixedErrs errs;
  MLIRContext context;
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics;
  OwningOpRef<ModuleOp> module;
};

} // namespace

absl::StatusOr<std::unique_ptr<CompiledPlan>>
compileModuleFile(const std::string &path, const std::string &entry,
                  const std::string &linePrefix) {
  auto plan = std::make_unique<ModulePlan>(path, linePrefix);
  if (absl::Status s = plan->load(path, entry); !s.ok())
    return s;
  return std::unique_ptr<CompiledPlan>(std::move(plan));
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

//===- merak-exec.cpp - runs a merak training step on the CPU ------------===//
//
// Parses a module, lowers `@train_step` (or `@forward`) to a rank program
// and runs it for a number of steps: initial weights from a TorchScript
// archive or a checkpoint, inputs from a batch file, a token file or
// synthetic data, one line per step, JSONL logs and atomic checkpoints.
//
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/IR/MerakDialect.h"
#include "merak/Runtime/CPU/CpuBackend.h"
#include "merak/Runtime/Data.h"
#include "merak/Runtime/Executor.h"
#include "merak/Runtime/LearningRate.h"
#include "merak/Runtime/ProgramLowering.h"
#include "merak/Runtime/Safetensors.h"
#include "merak/Runtime/TorchIO.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sys/resource.h>
#include <unistd.h>

using namespace mlir;
using namespace merak::runtime;
namespace cl = llvm::cl;

static cl::OptionCategory category("merak-exec options");

static cl::opt<std::string> inputFile(cl::Positional, cl::Required,
                                      cl::desc("<step.mlir>"),
                                      cl::cat(category));
static cl::opt<std::string>
    entry("entry",
          cl::desc("Function to run (default: train_step, else forward)"),
          cl::cat(category));
static cl::opt<std::string>
    initFile("init",
             cl::desc("Initial weights: a TorchScript archive (.pt) or a "
                      "safetensors checkpoint"),
             cl::value_desc("file"), cl::cat(category));
static cl::opt<std::string>
    resumeFile("resume",
               cl::desc("Continue a run from a checkpoint written by --save "
                        "(weights, optimizer state, step, seed)"),
               cl::value_desc("ckpt.safetensors"), cl::cat(category));
static cl::opt<std::string>
    dataFile("data",
             cl::desc("Inputs per step: one tensor per model input, first "
                      "dimension indexing steps"),
             cl::value_desc("batches.safetensors"), cl::cat(category));
static cl::opt<std::string>
    tokensFile("tokens", cl::desc("Flat token file to sample windows from"),
               cl::value_desc("file.bin"), cl::cat(category));
static cl::opt<std::string> tokenDType("token-dtype",
                                       cl::desc("Token width: uint16 or int32"),
                                       cl::init("uint16"), cl::cat(category));
static cl::opt<int64_t>
    seqLen("seq-len",
           cl::desc("Window length for --tokens (must match the program)"),
           cl::init(0), cl::cat(category));
static cl::opt<int64_t>
    batchSize("batch",
              cl::desc("Windows per step for --tokens (must match the "
                       "program)"),
              cl::init(0), cl::cat(category));
static cl::opt<int64_t> steps("steps",
                              cl::desc("Last step to run (counted from the "
                                       "start of training, so a resumed run "
                                       "continues up to it)"),
                              cl::init(1), cl::cat(category));
static cl::opt<uint64_t>
    seed("seed", cl::desc("Seed of data sampling and dropout (< 2^31)"),
         cl::init(0), cl::cat(category));
static cl::opt<double>
    learningRate("lr",
                 cl::desc("Peak learning rate (required for a training step "
                          "unless the IR records one)"),
                 cl::cat(category));
static cl::opt<std::string> lrSchedule("lr-schedule",
                                       cl::desc("constant or cosine"),
                                       cl::init("constant"), cl::cat(category));
static cl::opt<int64_t>
    warmupSteps("warmup-steps",
                cl::desc("Linear learning-rate warm-up over this many steps"),
                cl::init(0), cl::cat(category));
static cl::opt<double> minLr("min-lr",
                             cl::desc("Learning rate at the end of the cosine "
                                      "decay"),
                             cl::init(0.0), cl::cat(category));
static cl::opt<int64_t>
    decaySteps("decay-steps",
               cl::desc("Steps over which cosine decays (default: --steps)"),
               cl::init(0), cl::cat(category));
static cl::opt<std::string>
    saveFile("save", cl::desc("Write a checkpoint here at the end"),
             cl::value_desc("ckpt.safetensors"), cl::cat(category));
static cl::opt<std::string> logJsonl("log-jsonl",
                                     cl::desc("Append one JSON object per "
                                              "step to this file"),
                                     cl::value_desc("file"), cl::cat(category));
static cl::opt<bool>
    skipNonFinite("skip-nonfinite",
                  cl::desc("Skip the updates of a step whose loss is NaN or "
                           "infinite instead of stopping"),
                  cl::cat(category));
static cl::opt<bool>
    profileOps("profile",
               cl::desc("Print kernel time per op kind at the end (steps "
                        "after the first)"),
               cl::cat(category));
static cl::opt<bool>
    printProgramOnly("print-program",
                     cl::desc("Print the rank program and its memory plan, "
                              "then exit"),
                     cl::cat(category));

namespace {

constexpr const char *kCheckpointFormat = "merak-checkpoint-v1";

int fail(const std::string &message) {
  std::fflush(stdout);
  llvm::errs() << "merak-exec: error: " << message << "\n";
  return 1;
}

int fail(const absl::Status &status) {
  return fail(std::string(status.message()));
}

bool isTorchScriptArchive(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && magic[0] == 'P' && magic[1] == 'K' &&
         magic[2] == 3 && magic[3] == 4;
}

bool fileExists(const std::string &path) {
  return ::access(path.c_str(), R_OK) == 0;
}

std::optional<int64_t> metadataInt(const SafetensorsFile &file,
                                   const std::string &key) {
  auto it = file.metadata.find(key);
  if (it == file.metadata.end())
    return std::nullopt;
  try {
    return std::stoll(it->second);
  } catch (...) {
    return std::nullopt;
  }
}

/// This process's peak resident set. VmHWM belongs to the address space, so
/// unlike getrusage's ru_maxrss it does not inherit the parent's peak when
/// the process was started by a large one.
int64_t maxRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0)
      return std::stoll(line.substr(6)) * 1024;
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;
}

/// Kernel time per op kind, most expensive first, against the step time.
void printProfile(const OpProfile &profile, double stepMs) {
  std::vector<std::pair<OpKind, OpProfile::Entry>> rows(profile.byKind.begin(),
                                                        profile.byKind.end());
  std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) {
    return a.second.seconds > b.second.seconds;
  });
  double kernelMs = 0;
  for (const auto &row : rows)
    kernelMs += row.second.seconds * 1e3;
  std::printf("kernel time per op kind over %.1f ms of steps "
              "(kernels %.1f ms, %.0f%%):\n",
              stepMs, kernelMs, stepMs > 0 ? 100.0 * kernelMs / stepMs : 0.0);
  std::printf("  %-32s %8s %12s %7s\n", "op", "calls", "ms", "share");
  for (const auto &[kind, e] : rows)
    std::printf("  merak.%-26s %8lld %12.2f %6.1f%%\n", opKindName(kind),
                (long long)e.calls, e.seconds * 1e3,
                kernelMs > 0 ? 100.0 * e.seconds * 1e3 / kernelMs : 0.0);
}

/// The progress bar on stderr, drawn only when stdout is a terminal.
class Progress {
public:
  Progress(int64_t first, int64_t last)
      : enabled(isatty(STDOUT_FILENO)), first(first), last(last),
        start(std::chrono::steady_clock::now()) {}

  void clear() {
    if (enabled)
      std::fprintf(stderr, "\r\033[K");
  }
  void draw(int64_t done) {
    if (!enabled)
      return;
    int64_t total = last - first + 1, count = done - first + 1;
    constexpr int kWidth = 30;
    int filled = int(kWidth * count / std::max<int64_t>(1, total));
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    double eta = count > 0 ? elapsed / count * (total - count) : 0;
    std::string bar(size_t(filled), '#');
    bar.append(size_t(kWidth - filled), '.');
    std::fprintf(stderr, "\r[%s] %lld/%lld  eta %.1fs", bar.c_str(),
                 (long long)done, (long long)last, eta);
    std::fflush(stderr);
  }

private:
  bool enabled;
  int64_t first, last;
  std::chrono::steady_clock::time_point start;
};

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  // libLLVM registers a `--threads` of its own (for an optimizer component
  // merak-exec never runs); it moves aside so ours can take the name.
  auto &registered = cl::getRegisteredOptions();
  if (auto it = registered.find("threads"); it != registered.end()) {
    cl::Option *theirs = it->second;
    theirs->setHiddenFlag(cl::ReallyHidden);
    theirs->setArgStr("llvm-threads");
  }
  cl::opt<int> threads("threads",
                       cl::desc("CPU threads for kernels (default: ATen's "
                                "choice)"),
                       cl::init(0), cl::cat(category));
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(argc, argv,
                              "merak-exec: runs a merak training step\n");

  // Parse the module; MLIR diagnostics print as file:line:col: error.
  DialectRegistry registry;
  merak::registerMerakDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  auto buffer = llvm::MemoryBuffer::getFileOrSTDIN(inputFile);
  if (!buffer)
    return fail("cannot open " + inputFile + ": " +
                buffer.getError().message());
  sourceMgr.AddNewSourceBuffer(std::move(*buffer), llvm::SMLoc());
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!module)
    return 1;

  func::FuncOp func;
  if (!entry.empty()) {
    func = module->lookupSymbol<func::FuncOp>(entry);
    if (!func)
      return fail(inputFile + " has no function @" + entry);
  } else {
    func = module->lookupSymbol<func::FuncOp>("train_step");
    if (!func)
      func = module->lookupSymbol<func::FuncOp>("forward");
    if (!func)
      return fail(inputFile +
                  " has neither @train_step nor @forward; pick one with "
                  "--entry");
  }
  FailureOr<Program> lowered = lowerToProgram(func);
  if (failed(lowered))
    return 1;
  const Program &program = *lowered;
  if (printProgramOnly) {
    std::fputs(printProgram(program).c_str(), stdout);
    return 0;
  }

  // Options that depend on the program.
  if (steps < 1)
    return fail("--steps must be at least 1");
  if (seed >= (uint64_t(1) << 31))
    return fail("--seed must be below 2^31");
  if (!initFile.empty() && !resumeFile.empty())
    return fail("give --init or --resume, not both (a checkpoint holds the "
                "weights)");
  if (!dataFile.empty() && !tokensFile.empty())
    return fail("give --data or --tokens, not both");
  LearningRateSchedule schedule;
  if (lrSchedule == "cosine")
    schedule.kind = LearningRateSchedule::Kind::Cosine;
  else if (lrSchedule != "constant")
    return fail("--lr-schedule must be constant or cosine, not '" + lrSchedule +
                "'");
  schedule.warmupSteps = warmupSteps;
  schedule.min = minLr;
  schedule.decaySteps = decaySteps > 0 ? int64_t(decaySteps) : int64_t(steps);
  if (const Argument *lrArg =
          program.findArgument(ArgumentRole::LearningRate)) {
    if (learningRate.getNumOccurrences())
      schedule.base = learningRate;
    else if (lrArg->defaultLearningRate)
      schedule.base = *lrArg->defaultLearningRate;
    else
      return fail("@" + program.function +
                  " takes a learning rate (merak.lr): pass --lr");
  }

  std::unique_ptr<Backend> backend =
      createCpuBackend(CpuBackendOptions{threads});
  absl::StatusOr<std::unique_ptr<Executor>> created =
      Executor::create(program, *backend);
  if (!created.ok())
    return fail(created.status());
  Executor &executor = **created;

  // Initial state.
  int64_t doneSteps = 0, doneUpdates = 0;
  uint64_t runSeed = seed;
  bool hasState = false;
  for (const Argument &arg : program.arguments)
    hasState |= arg.isState();
  std::string stateSource = !resumeFile.empty() ? resumeFile : initFile;
  if (!stateSource.empty() && !fileExists(stateSource))
    return fail("cannot open " + stateSource);
  if (!stateSource.empty() && resumeFile.empty() &&
      isTorchScriptArchive(stateSource)) {
    absl::StatusOr<std::map<std::string, HostTensor>> weights =
        loadTorchScriptState(stateSource);
    if (!weights.ok())
      return fail(weights.status());
    if (absl::Status s = executor.loadState(*weights, stateSource,
                                            /*requireOptimizerState=*/false);
        !s.ok())
      return fail(s);
  } else if (!stateSource.empty()) {
    absl::StatusOr<SafetensorsFile> ckpt = readSafetensors(stateSource);
    if (!ckpt.ok())
      return fail(ckpt.status());
    bool resuming = !resumeFile.empty();
    if (resuming) {
      auto format = ckpt->metadata.find("format");
      if (format == ckpt->metadata.end() || format->second != kCheckpointFormat)
        return fail(stateSource + " is not a checkpoint written by "
                                  "merak-exec --save (use --init to load "
                                  "its weights)");
    }
    if (absl::Status s = executor.loadState(ckpt->tensors, stateSource,
                                            /*requireOptimizerState=*/resuming);
        !s.ok())
      return fail(s);
    doneSteps = metadataInt(*ckpt, "step").value_or(0);
    doneUpdates = metadataInt(*ckpt, "optimizer_step").value_or(doneSteps);
    if (std::optional<int64_t> saved = metadataInt(*ckpt, "seed")) {
      if (!seed.getNumOccurrences())
        runSeed = uint64_t(*saved);
      else if (uint64_t(*saved) != runSeed)
        llvm::errs() << "merak-exec: note: --seed " << runSeed
                     << " differs from the checkpoint's seed " << *saved
                     << "; data and dropout follow --seed\n";
    }
  } else if (hasState) {
    for (const Argument &arg : program.arguments)
      if (arg.role == ArgumentRole::Param || arg.role == ArgumentRole::Buffer)
        return fail("@" + program.function + " needs initial weights (" +
                    argumentRoleName(arg.role) + " '" + arg.name +
                    "', ...): pass --init model.pt or --resume "
                    "ckpt.safetensors");
    if (absl::Status s = executor.loadState({}, "<nothing>", false); !s.ok())
      return fail(s);
  }

  // Inputs.
  std::vector<InputSpec> inputs;
  for (const Argument *arg : executor.inputArguments())
    inputs.push_back({arg->name, program.values[arg->value].type});
  std::unique_ptr<BatchSource> source;
  if (!dataFile.empty()) {
    absl::StatusOr<std::unique_ptr<BatchSource>> opened =
        openBatchFile(dataFile, inputs, steps);
    if (!opened.ok())
      return fail(opened.status());
    source = *std::move(opened);
  } else if (!tokensFile.empty()) {
    TokenDType width;
    if (tokenDType == "uint16")
      width = TokenDType::U16;
    else if (tokenDType == "int32")
      width = TokenDType::I32;
    else
      return fail("--token-dtype must be uint16 or int32, not '" + tokenDType +
                  "'");
    absl::StatusOr<std::unique_ptr<BatchSource>> opened =
        openTokenFile(tokensFile, width, inputs, runSeed);
    if (!opened.ok())
      return fail(opened.status());
    const merak::runtime::TensorType &type = inputs.front().type;
    if (batchSize && batchSize != type.shape[0])
      return fail("--batch " + std::to_string(batchSize) +
                  " does not match input '" + inputs.front().name + "' (" +
                  type.str() + "); shapes are fixed when the step is built");
    if (seqLen && seqLen != type.shape[1])
      return fail("--seq-len " + std::to_string(seqLen) +
                  " does not match input '" + inputs.front().name + "' (" +
                  type.str() + "); shapes are fixed when the step is built");
    source = *std::move(opened);
  } else {
    source = syntheticBatches(inputs, runSeed);
  }

  // Throughput unit: tokens when an input holds token ids.
  int64_t perStep = 1;
  const char *unit = "samples/s";
  for (const InputSpec &in : inputs)
    if (isInteger(in.type.dtype) && in.type.shape.size() >= 2) {
      perStep = in.type.numElements();
      unit = "tokens/s";
      break;
    }
  if (std::string(unit) == "samples/s" && !inputs.empty() &&
      !inputs.front().type.shape.empty())
    perStep = inputs.front().type.shape[0];

  std::ofstream jsonl;
  if (!logJsonl.empty()) {
    jsonl.open(logJsonl, std::ios::app);
    if (!jsonl)
      return fail("cannot open " + logJsonl + " for writing");
  }

  bool trains = program.trains();
  int64_t first = doneSteps + 1;
  if (first > steps)
    llvm::errs() << "merak-exec: note: the checkpoint is at step " << doneSteps
                 << "; nothing to run up to --steps " << steps << "\n";
  Progress progress(first, steps);
  OpProfile profile;
  double profiledMs = 0;
  for (int64_t step = first; step <= steps; ++step) {
    // The first step warms caches and allocators; profile the others.
    if (profileOps && step == first + 1)
      executor.setProfile(&profile);
    auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<HostTensor>> batch = source->batch(step);
    if (!batch.ok()) {
      progress.clear();
      return fail(batch.status());
    }
    StepContext ctx;
    ctx.globalStep = step;
    ctx.optimizerStep = doneUpdates + 1;
    ctx.learningRate = trains ? learningRateAt(schedule, step) : 0.0;
    ctx.seed = runSeed;
    absl::StatusOr<StepOutcome> outcome =
        executor.runStep(ctx, *batch, skipNonFinite);
    if (!outcome.ok()) {
      progress.clear();
      return fail(outcome.status());
    }
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - start)
                    .count();
    if (!outcome->skipped)
      ++doneUpdates;
    if (profileOps && step > first)
      profiledMs += ms;
    MemoryStats memory = backend->memoryStats();
    double rate = perStep / (ms / 1000.0);

    progress.clear();
    std::string line =
        "step " + std::to_string(step) + "/" + std::to_string(steps);
    char text[256];
    if (outcome->loss) {
      std::snprintf(text, sizeof(text), "  loss %.6f", *outcome->loss);
      line += text;
    }
    if (outcome->gradNorm) {
      std::snprintf(text, sizeof(text), "  grad_norm %.4f", *outcome->gradNorm);
      line += text;
    }
    if (outcome->skipped)
      line += "  (non-finite: updates skipped)";
    double peakMB = memory.peakBytes / 1e6;
    std::snprintf(text, sizeof(text), "  %.1f %s  %.1f ms  peak %.*f MB", rate,
                  unit, ms, peakMB < 1 ? 3 : 1, peakMB);
    line += text;
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    progress.draw(step);

    if (jsonl.is_open()) {
      nlohmann::ordered_json record;
      record["step"] = step;
      if (outcome->loss && std::isfinite(*outcome->loss))
        record["loss"] = *outcome->loss;
      else if (outcome->loss)
        record["loss"] = nullptr;
      if (trains)
        record["lr"] = ctx.learningRate;
      if (outcome->gradNorm)
        record["grad_norm"] = *outcome->gradNorm;
      record["ms"] = ms;
      record[std::string(unit) == "tokens/s" ? "tokens_per_s"
                                             : "samples_per_s"] = rate;
      record["peak_bytes"] = memory.peakBytes;
      record["max_rss_bytes"] = maxRssBytes();
      if (outcome->skipped)
        record["skipped"] = true;
      jsonl << record.dump() << "\n";
      jsonl.flush();
    }
  }
  progress.clear();
  if (profileOps)
    printProfile(profile, profiledMs);

  if (!saveFile.empty()) {
    absl::StatusOr<std::map<std::string, HostTensor>> state =
        executor.stateToHost();
    if (!state.ok())
      return fail(state.status());
    std::map<std::string, std::string> metadata = {
        {"format", kCheckpointFormat},
        {"function", program.function},
        {"step", std::to_string(std::max(doneSteps, int64_t(steps)))},
        {"optimizer_step", std::to_string(doneUpdates)},
        {"seed", std::to_string(runSeed)}};
    if (absl::Status s = writeSafetensors(saveFile, *state, metadata); !s.ok())
      return fail(s);
  }
  return 0;
}

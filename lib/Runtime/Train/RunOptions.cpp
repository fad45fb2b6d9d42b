//===- RunOptions.cpp - a run's data and learning rate from its options ---===//

#include "merak/Runtime/Train/RunOptions.h"

#include "absl/strings/str_cat.h"

#include <cmath>

namespace merak::runtime {

absl::StatusOr<std::unique_ptr<BatchSource>>
openRunBatches(const std::vector<InputSpec> &inputs,
               const DataOptions &options) {
  if (!options.dataFile.empty())
    return openBatchFile(options.dataFile, inputs, options.steps);
  if (options.tokensFile.empty())
    return syntheticBatches(inputs, options.seed);
  TokenDType width;
  if (options.tokenDType == "uint16")
    width = TokenDType::U16;
  else if (options.tokenDType == "int32")
    width = TokenDType::I32;
  else
    return absl::InvalidArgumentError(
        absl::StrCat("--token-dtype must be uint16 or int32, not '",
                     options.tokenDType, "'"));
  absl::StatusOr<std::unique_ptr<BatchSource>> opened = openTokenFile(
      options.tokensFile, width, inputs, options.seed, options.windows);
  if (!opened.ok())
    return opened.status();
  const InputSpec &first = inputs.front();
  auto mismatch = [&](const char *flag, int64_t value) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " ", value, " does not match input '", first.name, "' (",
        first.type.str(), "); shapes are fixed when the step is built"));
  };
  if (options.batchSize && options.batchSize != first.type.shape[0])
    return mismatch("--batch", options.batchSize);
  if (options.seqLen && options.seqLen != first.type.shape[1])
    return mismatch("--seq-len", options.seqLen);
  return opened;
}

absl::StatusOr<LearningRateSchedule>
learningRateSchedule(const ScheduleOptions &options, const Program &step) {
  LearningRateSchedule schedule;
  if (options.kind == "cosine")
    schedule.kind = LearningRateSchedule::Kind::Cosine;
  else if (options.kind != "constant")
    return absl::InvalidArgumentError(absl::StrCat(
        "--lr-schedule must be constant or cosine, not '", options.kind, "'"));
  // A learning rate that is not a positive number trains nothing useful
  // (0), ascends (negative) or fills the weights with NaN.
  if (options.lr && !(std::isfinite(*options.lr) && *options.lr > 0))
    return absl::InvalidArgumentError(absl::StrCat(
        "--lr must be a finite number above 0, not ", *options.lr));
  if (!(std::isfinite(options.minLr) && options.minLr >= 0))
    return absl::InvalidArgumentError(absl::StrCat(
        "--min-lr must be a finite number of at least 0, not ", options.minLr));
  if (options.warmupSteps < 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "--warmup-steps must be at least 0, not ", options.warmupSteps));
  if (options.decaySteps < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("--decay-steps must be at least 0 (0: --steps), not ",
                     options.decaySteps));
  schedule.warmupSteps = options.warmupSteps;
  schedule.min = options.minLr;
  schedule.decaySteps =
      options.decaySteps > 0 ? options.decaySteps : options.steps;
  if (const Argument *lr = step.findArgument(ArgumentRole::LearningRate)) {
    if (options.lr) {
      schedule.base = *options.lr;
    } else if (lr->defaultLearningRate) {
      schedule.base = *lr->defaultLearningRate;
      if (!(std::isfinite(schedule.base) && schedule.base > 0))
        return absl::InvalidArgumentError(absl::StrCat(
            "the learning rate @", step.function, " records (merak.lr) is ",
            schedule.base, ", not a finite number above 0: pass --lr"));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "@", step.function, " takes a learning rate (merak.lr): pass --lr"));
    }
  }
  return schedule;
}

absl::Status checkProcessCount(const CompiledPlan &plan, bool launching,
                               int64_t nproc, int64_t worldSize,
                               const std::string &launcher) {
  const Program &step = plan.step();
  const int64_t processes = step.worldSize() * plan.pipelineRanks();
  std::string meshText =
      step.mesh ? "@" + step.mesh->name + " " + step.mesh->str() : "";
  if (plan.pipelined())
    meshText = absl::StrCat(plan.pipelineRanks(), " pipeline ranks",
                            step.mesh ? " × " + meshText : "");
  auto error = [](const std::string &text) {
    return absl::InvalidArgumentError(text);
  };
  if (launching) {
    if (nproc == processes)
      return absl::OkStatus();
    if (plan.pipelined())
      return error(absl::StrCat("--nproc ", nproc,
                                " does not match the pipeline plan: ", meshText,
                                " make ", processes, " processes"));
    if (processes > 1)
      return error(absl::StrCat("--nproc ", nproc,
                                " does not match the program's mesh ", meshText,
                                " of ", processes, " processes"));
    return error(absl::StrCat("--nproc ", nproc, " given, but @", step.function,
                              " runs on one process (its module has no mesh "
                              "larger than 1)"));
  }
  if (worldSize == processes)
    return absl::OkStatus();
  if (worldSize == 1)
    return error(absl::StrCat(
        "@", step.function, " runs on a mesh of ", processes, " processes (",
        meshText, "): start it with --nproc ", processes, " or with ",
        processes, " ranks of torchrun, srun or mpirun"));
  return error(absl::StrCat("the world size is ", worldSize, " (from ",
                            launcher, "), but the program's mesh ",
                            meshText.empty() ? "(none)" : meshText, " has ",
                            processes, " processes"));
}

absl::Status checkMemoryPlan(const Program &step, int64_t availableBytes) {
  if (availableBytes <= 0 || step.plannedPeakBytes <= availableBytes)
    return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "@", step.function, " plans a peak of ", step.plannedPeakBytes,
      " bytes (", step.plannedPeakBytes / 1e9, " GB) per rank, more than the ",
      availableBytes, " bytes (", availableBytes / 1e9,
      " GB) of memory and swap this machine has; build the step with "
      "smaller input shapes or over more ranks"));
}

absl::StatusOr<std::string>
listRankZero(CompiledPlan &plan, const BindOptions &mode,
             const std::function<std::string(const Program &)> &print) {
  Program &step = plan.step();
  if (!plan.pipelined()) {
    if (absl::Status s = bindToRank(step, 0, mode); !s.ok())
      return s;
    return print(step);
  }
  absl::StatusOr<PipelinePlan> first = plan.pipelinePlan(0);
  if (!first.ok())
    return first.status();
  if (absl::StatusOr<Program> groups =
          bindPipelineToRank(*first, 0, step.worldSize(), mode);
      !groups.ok())
    return groups.status();
  std::string text =
      absl::StrCat("pipeline ", first->kind, ": pp=", first->pp,
                   ", virtual=", first->virtualStages, ", ",
                   first->microbatches, " micro-batches; rank 0 runs:\n");
  for (const PipelineTask &task : first->tasks)
    absl::StrAppend(&text, "  ", task.text, "\n");
  for (const StageFunction &f : first->functions)
    absl::StrAppend(&text, print(f.program));
  return text;
}

} // namespace merak::runtime

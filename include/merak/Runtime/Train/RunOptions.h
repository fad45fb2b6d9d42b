//===- RunOptions.h - a run's data and learning rate from its options -*- C++
//-*-===//
//
// What merak-exec's options mean for a run, checked against the program:
// the processes it needs, where the batches come from, the learning-rate
// schedule, and the listing of `--print-program`.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_TRAIN_RUNOPTIONS_H
#define MERAK_RUNTIME_TRAIN_RUNOPTIONS_H

#include "merak/Runtime/Data.h"
#include "merak/Runtime/LearningRate.h"
#include "merak/Runtime/Program.h"
#include "merak/Runtime/RankProgramFile.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace merak::runtime {

struct DataOptions {
  std::string dataFile;   // --data: batches per step
  std::string tokensFile; // --tokens: windows of a flat token file
  std::string tokenDType = "uint16";
  int64_t seqLen = 0, batchSize = 0; // --seq-len, --batch (0: unchecked)
  int64_t steps = 1;
  uint64_t seed = 0;
  TokenWindows windows = TokenWindows::Random;
};

/// The run's global batches of `inputs`: a batch file, windows sampled
/// from a token file (`--batch` and `--seq-len` checked against the
/// inputs, whose shapes were fixed when the step was built), or synthetic
/// data.
absl::StatusOr<std::unique_ptr<BatchSource>>
openRunBatches(const std::vector<InputSpec> &inputs,
               const DataOptions &options);

struct ScheduleOptions {
  std::string kind = "constant"; // constant or cosine
  std::optional<double> lr;      // --lr; else the IR's
  int64_t warmupSteps = 0;
  double minLr = 0;
  int64_t decaySteps = 0; // 0: `steps`
  int64_t steps = 1;
};

/// The learning-rate schedule of a run of `step`. The peak is `--lr`, else
/// what the IR records; a step that takes a learning rate without either
/// is an error, and so is a peak that is not finite and above 0, a
/// negative or non-finite `--min-lr`, and negative step counts.
absl::StatusOr<LearningRateSchedule>
learningRateSchedule(const ScheduleOptions &options, const Program &step);

/// Checks that a run has the processes `plan` needs (its pipeline ranks
/// times its mesh): `nproc` local ranks when `launching`, else the
/// `worldSize` a launcher (`launcher`: torchrun, srun, ...) reports. The
/// error says how to start it.
absl::Status checkProcessCount(const CompiledPlan &plan, bool launching,
                               int64_t nproc, int64_t worldSize,
                               const std::string &launcher);

/// An error when the memory plan of `step` (its planned peak) exceeds
/// `availableBytes`, all the memory and swap of the machine, so that a step
/// built for shapes far beyond the machine stops before allocating. A
/// non-positive `availableBytes` (unknown) checks nothing.
absl::Status checkMemoryPlan(const Program &step, int64_t availableBytes);

/// Rank 0's programs as `--print-program` lists them: the step bound to
/// rank 0, or for a pipeline rank 0's task list and its stage programs,
/// each program as `print` writes it (`listFusedKernels` for
/// `--print-fused-kernels`). Binds `plan`'s step to rank 0. An error with
/// an empty message had its diagnostics printed already (a module's).
absl::StatusOr<std::string> listRankZero(
    CompiledPlan &plan, const BindOptions &mode,
    const std::function<std::string(const Program &)> &print = printProgram);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_TRAIN_RUNOPTIONS_H

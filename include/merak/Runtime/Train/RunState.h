//===- RunState.h - a run's initial state, checkpoints, pipeline report -*- C++
//-*-===//
//
// What a run reads before its first step (weights from a TorchScript
// archive or safetensors, or a checkpoint to resume) and writes after its
// last (a checkpoint: one file, or one shard per rank and an index), and a
// pipeline's end-of-run report (measured bubble, memory per rank, trace).
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_TRAIN_RUNSTATE_H
#define MERAK_RUNTIME_TRAIN_RUNSTATE_H

#include "merak/Runtime/Checkpoint.h"
#include "merak/Runtime/Comm/Distributed.h"
#include "merak/Runtime/Pipeline.h"
#include "merak/Runtime/Program.h"
#include "merak/Runtime/Train/StepRunner.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace merak::runtime {

/// Where a loaded state left the run.
struct LoadedState {
  int64_t doneSteps = 0, doneUpdates = 0;
  /// The seed a checkpoint was written with.
  std::optional<uint64_t> seed;
  /// The loss scale a checkpoint was written with (`loss_scale`, and
  /// `loss_scale_good_steps`: the steps in a row without an overflow).
  std::optional<double> lossScale;
  int64_t lossScaleGoodSteps = 0;
};

/// The global tensors of `source`: a TorchScript archive (told by its
/// content, unless `resuming`), safetensors weights, or a checkpoint (one
/// file or shards with an index); `resuming` requires one written by
/// merak-exec.
absl::StatusOr<std::unique_ptr<GlobalState>>
openStateSource(const std::string &source, bool resuming);

/// Sets `runner`'s state: from `initFile` (a TorchScript archive, told by
/// its content, or safetensors weights or a checkpoint) or from
/// `resumeFile` (a checkpoint written by a run, optimizer state required),
/// each rank taking its shards of `step`'s state. With neither, a program
/// with parameters or buffers is an error; its optimizer state starts at
/// zero.
absl::StatusOr<LoadedState> loadRunState(StepRunner &runner,
                                         const Program &step,
                                         const std::string &initFile,
                                         const std::string &resumeFile);

/// The counters of a checkpoint's metadata (read from `source`): `step`
/// (0 to 2^53), `optimizer_step` (0 to `step`) and `seed` (0 to 2^31 - 1),
/// each optional and a decimal integer, and the optional loss scale
/// (`loss_scale`, a number above 0; `loss_scale_good_steps`, 0 to 2^53). An
/// error names `source` and the field.
absl::StatusOr<LoadedState>
checkpointCounters(const std::map<std::string, std::string> &metadata,
                   const std::string &source);

/// An error unless `path` (weights or a checkpoint, one file or shards
/// with an index) can be opened.
absl::Status checkStateSource(const std::string &path);

/// True when `path` starts as a zip archive (a TorchScript `.pt`).
bool isTorchScriptArchive(const std::string &path);

/// Writes the checkpoint of a run at `path`. One process writes one file;
/// the ranks of a multi-process run (`job`) each write their blocks, and
/// once all are in place rank 0 writes the index that makes them one
/// checkpoint. `plan` (a pipeline's, or null) says which pipeline rank owns
/// each state tensor.
absl::Status
saveRunCheckpoint(StepRunner &runner, const Program &step,
                  const PipelinePlan *plan, DistributedJob *job,
                  const std::string &path, int64_t steps, int64_t doneUpdates,
                  uint64_t seed,
                  const std::map<std::string, std::string> &extraMetadata = {});

/// After a pipeline run: every rank's events and peak memory reach rank 0
/// (through `job`; null for one process), whose report says the measured
/// bubble (steps after `firstStep`, which warms up) beside the schedule's
/// unit-time figure and the memory per rank, and which writes
/// `traceFile` (Chrome / Perfetto) when it is not empty. Other ranks get
/// an empty report.
struct PipelineReport {
  std::string text;
  int64_t tracedRanks = 0;
};
absl::StatusOr<PipelineReport> reportPipeline(
    const PipelinePlan &plan, const std::vector<PipelineEvent> &events,
    int64_t peakBytes, int64_t stateBytes, int64_t firstStep, int64_t meshSize,
    DistributedJob *job, bool reporter, const std::string &traceFile);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_TRAIN_RUNSTATE_H

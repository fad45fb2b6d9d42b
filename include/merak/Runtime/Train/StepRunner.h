//===- StepRunner.h - one training step on this rank -----------*- C++ -*-===//
//
// The interface the training loop drives, implemented over the
// single-program executor and over the pipeline executor, so that loading
// state, running a step, profiling and saving are written once.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_TRAIN_STEPRUNNER_H
#define MERAK_RUNTIME_TRAIN_STEPRUNNER_H

#include "merak/Runtime/Data.h"
#include "merak/Runtime/Executor.h"
#include "merak/Runtime/Pipeline.h"
#include "merak/Runtime/Program.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace merak::runtime {

/// The model inputs of a run: each input's local type and sharding, and the
/// global batch a data source produces for one step (a pipeline's
/// micro-batches one after another along the first dimension).
struct RunInputs {
  std::vector<ShardedInput> sharded;
  /// One step's global batch.
  std::vector<InputSpec> global;
  /// One micro-batch's global shapes (`global` without a pipeline).
  std::vector<InputSpec> micro;
  int64_t microbatches = 1;
  std::vector<int64_t> meshShape;
  int64_t meshRank = 0;
};

/// The inputs of `step` (bound to its rank) in `microbatches` micro-batches.
/// A scalar input cannot be cut into micro-batches: an error naming it.
absl::StatusOr<RunInputs> runInputs(const Program &step, int64_t microbatches);

class StepRunner {
public:
  virtual ~StepRunner();

  /// Sets this rank's state from `tensors` (its shards, by name), as
  /// `Executor::loadState`.
  virtual absl::Status
  loadState(const std::map<std::string, HostTensor> &tensors,
            const std::string &sourceName, bool requireOptimizerState) = 0;
  /// The source whose batches `runStep` takes, made from a source of global
  /// batches (`RunInputs::global`).
  virtual std::unique_ptr<BatchSource>
  batchesFrom(std::unique_ptr<BatchSource> global) = 0;
  /// Runs one step on a batch of the source `batchesFrom` made.
  virtual absl::StatusOr<StepOutcome>
  runStep(const StepContext &step, const std::vector<HostTensor> &batch,
          bool skipNonFinite) = 0;
  /// This rank's state by name (its shards), for checkpoints.
  virtual absl::StatusOr<std::map<std::string, HostTensor>> stateToHost() = 0;
  /// Accumulates kernel times into `profile` (null: off).
  virtual void setProfile(OpProfile *profile) = 0;
  /// Fails at the first op that produces a NaN or infinity, as
  /// `Executor::setCheckNumerics`.
  virtual void setCheckNumerics(bool on) = 0;
};

/// A runner over one program: batches are cut to this rank's shards.
std::unique_ptr<StepRunner> singleProgramRunner(std::unique_ptr<Executor> exec,
                                                RunInputs inputs);
/// A runner over a pipeline: each global batch is cut into micro-batches,
/// each cut to this rank's shards.
std::unique_ptr<StepRunner>
pipelineRunner(std::unique_ptr<PipelineExecutor> exec, RunInputs inputs);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_TRAIN_STEPRUNNER_H

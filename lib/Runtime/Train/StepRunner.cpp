//===- StepRunner.cpp - the executors behind one interface ----------------===//

#include "merak/Runtime/Train/StepRunner.h"

namespace merak::runtime {

StepRunner::~StepRunner() = default;

absl::StatusOr<RunInputs> runInputs(const Program &step, int64_t microbatches) {
  RunInputs inputs;
  for (const Argument &arg : step.arguments)
    if (arg.role == ArgumentRole::Input)
      inputs.sharded.push_back(
          {{arg.name, step.values[arg.value].type}, arg.sharding});
  inputs.meshShape = step.mesh ? step.mesh->shape : std::vector<int64_t>();
  inputs.meshRank = step.rank;
  inputs.microbatches = microbatches;
  inputs.micro = globalInputs(inputs.sharded, inputs.meshShape);
  inputs.global = inputs.micro;
  // A pipeline step takes its micro-batches one after another along the
  // first dimension (the model was built at the micro-batch's shape).
  if (microbatches > 1)
    for (InputSpec &in : inputs.global) {
      if (in.type.shape.empty())
        return absl::InvalidArgumentError(
            "input '" + in.name +
            "' is a scalar; a pipeline cuts inputs into micro-batches along "
            "their first dimension");
      in.type.shape[0] *= microbatches;
    }
  return inputs;
}

namespace {

/// What both runners forward to their executor as it is.
template <typename Exec> class ExecutorRunner : public StepRunner {
public:
  ExecutorRunner(std::unique_ptr<Exec> exec, RunInputs inputs)
      : exec(std::move(exec)), inputs(std::move(inputs)) {}

  absl::Status loadState(const std::map<std::string, HostTensor> &tensors,
                         const std::string &sourceName,
                         bool requireOptimizerState) override {
    return exec->loadState(tensors, sourceName, requireOptimizerState);
  }
  absl::StatusOr<std::map<std::string, HostTensor>> stateToHost() override {
    return exec->stateToHost();
  }
  void setProfile(OpProfile *profile) override { exec->setProfile(profile); }
  void setCheckNumerics(bool on) override { exec->setCheckNumerics(on); }

protected:
  std::unique_ptr<Exec> exec;
  RunInputs inputs;
};

class SingleProgramRunner final : public ExecutorRunner<Executor> {
public:
  using ExecutorRunner::ExecutorRunner;

  std::unique_ptr<BatchSource>
  batchesFrom(std::unique_ptr<BatchSource> global) override {
    return shardBatches(std::move(global), inputs.sharded, inputs.meshShape,
                        inputs.meshRank);
  }
  absl::StatusOr<StepOutcome> runStep(const StepContext &step,
                                      const std::vector<HostTensor> &batch,
                                      bool skipNonFinite) override {
    return exec->runStep(step, batch, skipNonFinite);
  }
};

class PipelineRunner final : public ExecutorRunner<PipelineExecutor> {
public:
  using ExecutorRunner::ExecutorRunner;

  std::unique_ptr<BatchSource>
  batchesFrom(std::unique_ptr<BatchSource> global) override {
    return global;
  }
  absl::StatusOr<StepOutcome> runStep(const StepContext &step,
                                      const std::vector<HostTensor> &batch,
                                      bool skipNonFinite) override {
    absl::StatusOr<std::vector<std::map<std::string, HostTensor>>> micro =
        microBatches(batch);
    if (!micro.ok())
      return micro.status();
    return exec->runStep(step, *micro, skipNonFinite);
  }

private:
  /// Micro-batch m of a global batch, cut to this rank's shards.
  absl::StatusOr<std::vector<std::map<std::string, HostTensor>>>
  microBatches(const std::vector<HostTensor> &batch) const {
    std::vector<std::map<std::string, HostTensor>> result(
        size_t(inputs.microbatches));
    for (size_t i = 0; i < batch.size() && i < inputs.micro.size(); ++i) {
      const std::vector<int64_t> &micro = inputs.micro[i].type.shape;
      for (int64_t m = 0; m < inputs.microbatches; ++m) {
        TensorBlock block{std::vector<int64_t>(micro.size(), 0), micro};
        if (!micro.empty())
          block.offsets[0] = m * micro[0];
        HostTensor slice = extractBlock(batch[i], block);
        absl::StatusOr<HostTensor> shard =
            cutShard(slice, inputs.sharded[i].sharding, inputs.meshShape,
                     inputs.meshRank);
        if (!shard.ok())
          return shard.status();
        result[size_t(m)][inputs.global[i].name] = *std::move(shard);
      }
    }
    return result;
  }
};

} // namespace

std::unique_ptr<StepRunner> singleProgramRunner(std::unique_ptr<Executor> exec,
                                                RunInputs inputs) {
  return std::make_unique<SingleProgramRunner>(std::move(exec),
                                               std::move(inputs));
}

std::unique_ptr<StepRunner>
pipelineRunner(std::unique_ptr<PipelineExecutor> exec, RunInputs inputs) {
  return std::make_unique<PipelineRunner>(std::move(exec), std::move(inputs));
}

} // namespace merak::runtime

//===- Pipeline.h - runs a pipeline schedule on one rank -------*- C++ -*-===//
//
// A module after `--merak-pipeline-schedule` holds, per stage, a forward, a
// backward-for-inputs, a backward-for-weights and an optimizer function, and
// per pipeline rank a task list (docs/pipeline.md). `PipelinePlan` is what
// one rank needs of it: its stage functions lowered to rank programs, its
// tasks, and which values cross to the neighbouring stages.
// `PipelineExecutor` runs a step of it: the tasks in order (or, for the
// `dynamic` kind, the ready task of highest priority), point-to-point
// transfers through a `PeerLink`, gradients summed over micro-batches and
// tied stages, then the optimizer functions. It records a timeline of every
// task for traces and the measured bubble.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_PIPELINE_H
#define MERAK_RUNTIME_PIPELINE_H

#include "merak/Runtime/Backend.h"
#include "merak/Runtime/Communicator.h"
#include "merak/Runtime/Executor.h"
#include "merak/Runtime/Program.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace merak::runtime {

/// One entry of a rank's task list.
struct PipelineTask {
  enum class Kind : uint8_t {
    Forward,     // F(s,m)
    ForwardKeep, // FK(s,m)
    Recompute,   // R(s,m)
    Backward,    // B(s,m): backward_input (+ backward_weight unless split)
    Weight,      // W(s,m)
    Send,        // send X(s,m) -> peer
    Recv,        // recv X(s,m) <- peer
  };
  Kind kind = Kind::Forward;
  int64_t stage = 0;
  int64_t microbatch = 0;
  /// Send/Recv: whose outputs move (Forward for F/FK, Backward for B) and
  /// the other pipeline rank.
  Kind payload = Kind::Forward;
  int64_t peer = -1;
  /// As the schedule spells it, for messages and traces.
  std::string text;

  bool isCompute() const { return kind != Kind::Send && kind != Kind::Recv; }
};

enum class StagePhase : uint8_t {
  Forward,
  ForwardKeep,
  Recompute,
  BackwardInput,
  BackwardWeight,
  Optimizer,
};
const char *stagePhaseName(StagePhase phase);

struct StageFunction {
  int64_t stage = 0;
  StagePhase phase = StagePhase::Forward;
  Program program;
};

/// The values a stage sends its neighbour per micro-batch, in the order
/// they travel (ascending ids).
struct StageTransfer {
  std::vector<int64_t> values;
  std::vector<TensorType> types;
};

struct PipelinePlan {
  std::string kind; // the schedule kind, as the IR spells it
  int64_t pp = 1, virtualStages = 1, stages = 1, microbatches = 1;
  bool splitBackward = false;
  /// `dynamic`: pick the ready task of highest priority at run time.
  bool dynamic = false;
  /// dynamic: per pipeline rank, the most micro-batches between F and B.
  std::vector<int64_t> inflightLimit;
  /// The schedule's bubble in its unit-time simulation.
  double unitTimeBubble = 0;

  /// The pipeline rank this plan is for, and its task list.
  int64_t rank = 0;
  std::vector<PipelineTask> tasks;
  /// This rank's stage functions (those the module has).
  std::vector<StageFunction> functions;
  /// Per stage: what its forward sends to the next stage and what its
  /// backward sends to the previous one.
  std::vector<StageTransfer> forwardSends, backwardSends;
  /// Parameters held by several stages, with those stages.
  std::map<std::string, std::vector<int64_t>> tied;
  /// Every state tensor of the model (any stage's) and the first stage
  /// holding it: its rank saves it in checkpoints.
  std::map<std::string, int64_t> stateStage;
  /// The stage whose forward returns the loss (the last).
  int64_t lossStage = 0;

  int64_t rankOf(int64_t stage) const { return stage % pp; }
};

/// Point-to-point transfers between the ranks of a run (global ranks).
/// Transfers between one pair of ranks under one tag match in the order
/// they are posted.
class PeerLink {
public:
  virtual ~PeerLink();
  /// Starts sending `tensors` (of `types`) to `peer`. The link keeps what
  /// it sends, so the caller may drop the tensors at once; `finish`
  /// returns no handles.
  virtual absl::StatusOr<std::unique_ptr<PendingCollective>>
  send(int64_t peer, int64_t tag, const std::vector<DeviceTensor *> &tensors,
       const std::vector<TensorType> &types) = 0;
  /// Posts a receive of tensors of `types` from `peer`; `finish` returns
  /// one handle per type.
  virtual absl::StatusOr<std::unique_ptr<PendingCollective>>
  recv(int64_t peer, int64_t tag, const std::vector<TensorType> &types) = 0;
  /// How many transfers of this link have finished so far.
  virtual int64_t finished() = 0;
  /// Blocks until `finished()` differs from `since`, at most `limit`.
  virtual void waitForProgress(int64_t since,
                               std::chrono::microseconds limit) = 0;
};

/// What a run records of each task (steady-clock seconds).
struct PipelineEvent {
  std::string name;     // `F(0,3)`, `send B(2,1) -> 1`, `optimizer`, ...
  std::string category; // forward, backward, weight, recompute, send, recv,
                        // optimizer, collective
  int64_t step = 0;
  double start = 0, end = 0;
  bool compute = false; // counts as busy time for the bubble
};

/// Makes one stage slower at random steps (benchmarks of `dynamic`): after
/// each of its compute tasks the rank sleeps `fraction` of the task's time.
struct InjectedDelay {
  int64_t stage = -1;
  double fraction = 0;
  double probability = 1;
  uint64_t seed = 0;
};

class PipelineExecutor {
public:
  /// `meshRank` is this process's rank within its stage's mesh of
  /// `meshSize`; global rank = pipeline rank × meshSize + meshRank.
  /// `communicator` runs the stage functions' collectives (bound to the
  /// groups of `plan`'s programs); `link` moves the values between
  /// pipeline ranks (may be null when pp = 1).
  static absl::StatusOr<std::unique_ptr<PipelineExecutor>>
  create(const PipelinePlan &plan, Backend &backend, Communicator *communicator,
         PeerLink *link, int64_t meshSize, int64_t meshRank);
  ~PipelineExecutor();

  /// Sets the state arguments of every local stage from `tensors` (local
  /// shards by name), as `Executor::loadState` does.
  absl::Status loadState(const std::map<std::string, HostTensor> &tensors,
                         const std::string &sourceName,
                         bool requireOptimizerState);

  /// Runs one step. `inputs[m]` maps each model input's name to
  /// micro-batch m's local slice. Every rank gets the step's loss (the
  /// mean over micro-batches of the last stage's); a non-finite one skips
  /// the updates on every rank with `skipNonFinite`, else is an error.
  absl::StatusOr<StepOutcome>
  runStep(const StepContext &step,
          const std::vector<std::map<std::string, HostTensor>> &inputs,
          bool skipNonFinite);

  /// This rank's state by name, each tied parameter once.
  absl::StatusOr<std::map<std::string, HostTensor>> stateToHost();

  /// Accumulates the stage functions' kernel times into `profile` (null:
  /// off), as `Executor::setProfile`.
  void setProfile(OpProfile *profile);
  /// Checks every stage function's results, as
  /// `Executor::setCheckNumerics`.
  void setCheckNumerics(bool on);

  /// Events recorded so far (every step's tasks).
  const std::vector<PipelineEvent> &events() const;
  void setInjectedDelay(const InjectedDelay &delay);

private:
  PipelineExecutor() = default;
  struct Impl;
  std::unique_ptr<Impl> impl;
};

/// Binds every stage program of `plan` to `meshRank` (`bindToRank`) and
/// returns a program that holds only the union of their process groups (one
/// per list of mesh axes), members as global ranks (pipeline rank × mesh
/// size + mesh rank); each program's collectives are renumbered into that
/// union. It is what `DistributedJob::createGlooCommunicator` takes.
absl::StatusOr<Program> bindPipelineToRank(PipelinePlan &plan, int64_t meshRank,
                                           int64_t meshSize,
                                           const BindOptions &mode);

/// The tag of a transfer: unique per (payload, stage, micro-batch) within a
/// step, apart from the control tags the executor uses.
int64_t pipelineTransferTag(bool backward, int64_t stage, int64_t microbatch,
                            int64_t microbatches);

/// Chrome / Perfetto trace JSON of `eventsByRank` (one process track per
/// rank, compute and communication as its two threads), times relative to
/// the earliest event.
std::string
pipelineTraceJson(const std::vector<std::vector<PipelineEvent>> &eventsByRank,
                  const std::vector<std::string> &rankNames);

/// The measured bubble: per step, 1 − (busy time summed over ranks) /
/// (ranks × the step's span from the first compute task to the last, over
/// all ranks), averaged over steps `fromStep` and later.
struct BubbleMeasurement {
  double fraction = 0;
  int64_t steps = 0;
};
BubbleMeasurement
measureBubble(const std::vector<std::vector<PipelineEvent>> &eventsByRank,
              int64_t fromStep);

/// A rank's compute task time per step, averaged over steps `fromStep`
/// and later, by kind of task, and the micro-batches of a step (the
/// forward tasks of its first stage): what a pipelined run's profile
/// reports (`merak-exec --profile-json`'s `tasks`).
struct TaskTimesPerStep {
  int64_t microbatches = 0;
  int64_t steps = 0;
  double forwardMs = 0, backwardMs = 0, weightMs = 0, recomputeMs = 0;
};
TaskTimesPerStep taskTimesPerStep(const std::vector<PipelineEvent> &events,
                                  int64_t fromStep);

/// Events as compact text (one per line) and back, for gathering them on
/// one rank.
std::string serializeEvents(const std::vector<PipelineEvent> &events);
absl::StatusOr<std::vector<PipelineEvent>>
deserializeEvents(const std::string &text);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_PIPELINE_H

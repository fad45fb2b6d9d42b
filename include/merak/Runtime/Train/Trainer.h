//===- Trainer.h - the training loop and what it reports -------*- C++ -*-===//
//
// `train` runs steps first..last on a `StepRunner`: it draws each step's
// batch, sets the learning rate from the schedule and the optimizer step
// (skipped steps do not count), times the step, and hands a `StepRecord`
// to an observer. `StepReporter` is the observer merak-exec uses: one line
// per step, a progress bar on a terminal, and JSONL records.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_TRAIN_TRAINER_H
#define MERAK_RUNTIME_TRAIN_TRAINER_H

#include "merak/Runtime/Backend.h"
#include "merak/Runtime/Data.h"
#include "merak/Runtime/Executor.h"
#include "merak/Runtime/LearningRate.h"
#include "merak/Runtime/Train/StepRunner.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace merak::runtime {

struct TaskTimesPerStep;

/// The loss scale of a run that scales its loss (merak.loss_scale): this
/// step's scale and the steps in a row without an overflow since it last
/// changed. Checkpoints keep it, so a resumed run goes on with it.
struct LossScaleState {
  LossScaling scaling;
  double scale = 1;
  int64_t goodSteps = 0;
};

struct TrainOptions {
  /// Steps first..last (1-based, inclusive); nothing runs when first > last.
  int64_t firstStep = 1, lastStep = 1;
  /// Optimizer updates applied before `firstStep` (a resumed run's).
  int64_t doneUpdates = 0;
  uint64_t seed = 0;
  /// Whether the program takes a learning rate (then `schedule` sets it).
  bool trains = false;
  LearningRateSchedule schedule;
  bool skipNonFinite = false;
  /// The loss scale, when the program takes one; `train` updates it after
  /// every step (a periodic save reads it).
  LossScaleState *lossScale = nullptr;
  /// Profile kernels over the steps after the first (which warms up).
  bool profile = false;
  /// Periodic checkpoints: `save(step, doneUpdates)` after every step that
  /// is a multiple of `saveEvery` (> 0), except the last (the caller saves
  /// after the run). An error stops the run.
  int64_t saveEvery = 0;
  std::function<absl::Status(int64_t step, int64_t doneUpdates)> save;
  /// Evaluation: after every step that is a multiple of `evalEvery` (0:
  /// none), and after the last, batches 1..`evalBatches` of `evalSource` (made
  /// by the runner's `batchesFrom`) run as evaluations
  /// (`StepContext::evaluate`) and their mean loss is reported.
  int64_t evalEvery = 0, evalBatches = 0;
  BatchSource *evalSource = nullptr;
};

/// What a data rate is counted in: tokens when an input holds token ids
/// (an integer input of rank 2 or more), else samples (the first input's
/// first dimension).
struct Throughput {
  int64_t perStep = 1;
  std::string unit = "samples/s";
};
Throughput throughputOf(const std::vector<InputSpec> &globalInputs);

struct StepRecord {
  int64_t step = 0, lastStep = 0;
  std::optional<double> loss, gradNorm;
  bool skipped = false;
  /// Under loss scaling: the step's scale; whether a gradient overflowed
  /// (the update was skipped), and the scale the next step uses.
  std::optional<double> lossScale;
  bool overflowed = false;
  double nextLossScale = 0;
  /// This step's learning rate, when the program trains.
  std::optional<double> learningRate;
  double ms = 0;
  double rate = 0; // in `unit`
  std::string unit;
  int64_t peakBytes = 0, maxRssBytes = 0;
};

/// An evaluation after step `step`: the mean loss of its batches.
struct EvalRecord {
  int64_t step = 0, lastStep = 0;
  double loss = 0;
  int64_t batches = 0;
  double ms = 0;
};

/// `step 3/10  loss 4.551037  grad_norm 1.2000  13922.4 tokens/s  2.3 ms
/// peak 0.556 MB`.
std::string stepLine(const StepRecord &record);
/// `eval after step 20/100  val_loss 4.123456  val_ppl 61.80  8 batches
/// 12.3 ms` (the perplexity is exp of the mean loss).
std::string evalLine(const EvalRecord &record);
/// One JSON object: step, val_loss, val_ppl (null when they are not
/// finite), eval_batches, eval_ms.
std::string evalJson(const EvalRecord &record);
/// One JSON object: step, loss (null when non-finite), lr, grad_norm,
/// loss_scale, ms, tokens_per_s or samples_per_s, peak_bytes,
/// max_rss_bytes, skipped, overflow.
std::string stepJson(const StepRecord &record);

class StepObserver {
public:
  virtual ~StepObserver();
  /// Before step `step` draws its batch; an error stops the run.
  virtual absl::Status beforeStep(int64_t step) {
    (void)step;
    return absl::OkStatus();
  }
  virtual void afterStep(const StepRecord &record) { (void)record; }
  virtual void afterEval(const EvalRecord &record) { (void)record; }
  /// Before an error is returned (to clear a progress bar).
  virtual void onError() {}
};

struct TrainResult {
  int64_t doneUpdates = 0;
  /// Kernel time per op kind over the profiled steps, and their wall time.
  OpProfile profile;
  double profiledMs = 0;
  int64_t profiledSteps = 0;
};

absl::StatusOr<TrainResult> train(StepRunner &runner, BatchSource &batches,
                                  const Backend &backend,
                                  const TrainOptions &options,
                                  const Throughput &throughput,
                                  StepObserver &observer);

/// Prints each step's line on stdout, a progress bar on stderr when stdout
/// is a terminal, and appends JSONL records to a file when it has one.
class StepReporter final : public StepObserver {
public:
  /// Opens `jsonlPath` for appending (empty: no log).
  static absl::StatusOr<std::unique_ptr<StepReporter>>
  create(int64_t firstStep, int64_t lastStep, const std::string &jsonlPath,
         bool progressBar);
  void afterStep(const StepRecord &record) override;
  void afterEval(const EvalRecord &record) override;
  void onError() override { clearProgress(); }
  void clearProgress();

private:
  StepReporter() = default;
  void drawProgress(int64_t done);

  bool progressBar = false;
  int64_t first = 1, lastStep = 1;
  /// The latest step's record, for the progress line.
  std::optional<StepRecord> last;
  std::chrono::steady_clock::time_point start;
  std::ofstream jsonl;
};

/// This process's peak resident set in bytes.
int64_t maxRssBytes();

/// Kernel time per op kind, most expensive first, against the steps' time;
/// `libraries` (the backend's notes) is printed after the header.
std::string profileReport(const OpProfile &profile, double stepMs,
                          const std::string &libraries);

/// The same figures per step as JSON (`merak-exec --profile-json`): the
/// kernel time and calls of each op kind (and of the 40 op-and-result-type
/// pairs that take the most, `top_shapes`), and the run's peak memory and the
/// state it held before the first step (parameters, optimizer state), which
/// calibrate the plan model (`--merak-auto-parallel calibration=`).
/// A pipelined run adds `tasks` (TaskTimesPerStep: its compute task time
/// per step by kind, which calibrates the model's forward share, and the
/// profile's gradient sums per step, `gradient_sum_ms`).
std::string profileJson(const OpProfile &profile, double stepMs, int64_t steps,
                        const std::string &program, int64_t peakBytes,
                        int64_t stateBytes,
                        const TaskTimesPerStep *tasks = nullptr);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_TRAIN_TRAINER_H

//===- TrainerTest.cpp - the training loop, its records and runners -------===//

#include "merak/Runtime/Train/Trainer.h"
#include "merak/Runtime/Train/StepRunner.h"

#include "FakeBackend.h"
#include "ScratchDir.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

using namespace merak::runtime;
using merak::testing::ScratchDir;

namespace {

/// Records what the loop asks; step `skipAt` is skipped (a non-finite
/// loss), step `failAt` fails.
class FakeRunner final : public StepRunner {
public:
  absl::Status loadState(const std::map<std::string, HostTensor> &,
                         const std::string &, bool) override {
    return absl::OkStatus();
  }
  std::unique_ptr<BatchSource>
  batchesFrom(std::unique_ptr<BatchSource> global) override {
    return global;
  }
  absl::StatusOr<StepOutcome> runStep(const StepContext &step,
                                      const std::vector<HostTensor> &batch,
                                      bool skipNonFinite) override {
    contexts.push_back(step);
    profiled.push_back(profile != nullptr);
    batchSizes.push_back(batch.size());
    if (step.globalStep == failAt)
      return absl::InternalError("kernel failed");
    StepOutcome outcome;
    outcome.loss = step.globalStep == skipAt
                       ? std::numeric_limits<double>::quiet_NaN()
                       : 10.0 / double(step.globalStep);
    outcome.skipped = step.globalStep == skipAt && skipNonFinite;
    return outcome;
  }
  absl::StatusOr<std::map<std::string, HostTensor>> stateToHost() override {
    return std::map<std::string, HostTensor>();
  }
  void setProfile(OpProfile *p) override { profile = p; }
  void setCheckNumerics(bool) override {}

  std::vector<StepContext> contexts;
  std::vector<bool> profiled;
  std::vector<size_t> batchSizes;
  int64_t skipAt = -1, failAt = -1;
  OpProfile *profile = nullptr;
};

class CountingSource final : public BatchSource {
public:
  absl::StatusOr<std::vector<HostTensor>> batch(int64_t step) override {
    steps.push_back(step);
    return std::vector<HostTensor>{HostTensor::scalar(DType::F32, 1.0)};
  }
  std::string describe() const override { return "counting"; }
  std::vector<int64_t> steps;
};

class Recorder final : public StepObserver {
public:
  absl::Status beforeStep(int64_t step) override {
    before.push_back(step);
    if (step == stopAt)
      return absl::CancelledError("stopped by the observer");
    return absl::OkStatus();
  }
  void afterStep(const StepRecord &record) override {
    records.push_back(record);
  }
  void onError() override { ++errors; }

  std::vector<int64_t> before;
  std::vector<StepRecord> records;
  int errors = 0;
  int64_t stopAt = -1;
};

TEST(TrainerTest, StepsLearningRatesAndOptimizerSteps) {
  FakeRunner runner;
  runner.skipAt = 4;
  CountingSource source;
  FakeBackend backend;
  backend.stats.peakBytes = 2'500'000;
  Recorder observer;
  TrainOptions options;
  options.firstStep = 3; // resumed after two steps, one of them skipped
  options.lastStep = 6;
  options.doneUpdates = 1;
  options.seed = 7;
  options.trains = true;
  options.skipNonFinite = true;
  options.schedule.kind = LearningRateSchedule::Kind::Cosine;
  options.schedule.base = 1.0;
  options.schedule.warmupSteps = 4;
  options.schedule.decaySteps = 6;
  absl::StatusOr<TrainResult> result = train(
      runner, source, backend, options, Throughput{8, "tokens/s"}, observer);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(source.steps, (std::vector<int64_t>{3, 4, 5, 6}));
  EXPECT_EQ(observer.before, (std::vector<int64_t>{3, 4, 5, 6}));
  ASSERT_EQ(runner.contexts.size(), 4u);
  // The optimizer step counts applied updates: step 4 is skipped.
  std::vector<int64_t> optimizerSteps;
  for (const StepContext &c : runner.contexts) {
    optimizerSteps.push_back(c.optimizerStep);
    EXPECT_EQ(c.seed, 7u);
    EXPECT_EQ(c.learningRate, learningRateAt(options.schedule, c.globalStep));
  }
  EXPECT_EQ(optimizerSteps, (std::vector<int64_t>{2, 3, 3, 4}));
  EXPECT_EQ(result->doneUpdates, 4);
  EXPECT_DOUBLE_EQ(runner.contexts[0].learningRate, 0.75); // warm-up 3/4
  ASSERT_EQ(observer.records.size(), 4u);
  const StepRecord &r = observer.records[0];
  EXPECT_EQ(r.step, 3);
  EXPECT_EQ(r.lastStep, 6);
  EXPECT_DOUBLE_EQ(*r.loss, 10.0 / 3);
  EXPECT_DOUBLE_EQ(*r.learningRate, 0.75);
  EXPECT_EQ(r.unit, "tokens/s");
  EXPECT_EQ(r.peakBytes, 2'500'000);
  EXPECT_GT(r.maxRssBytes, 0);
  EXPECT_NEAR(r.rate, 8 / (r.ms / 1000), 1e-6 * r.rate);
  EXPECT_TRUE(observer.records[1].skipped);
  EXPECT_EQ(observer.errors, 0);
  EXPECT_EQ(runner.profile, nullptr);
}

TEST(TrainerTest, ProfilesTheStepsAfterTheFirst) {
  FakeRunner runner;
  CountingSource source;
  FakeBackend backend;
  Recorder observer;
  TrainOptions options;
  options.lastStep = 3;
  options.profile = true;
  absl::StatusOr<TrainResult> result =
      train(runner, source, backend, options, Throughput(), observer);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(runner.profiled, (std::vector<bool>{false, true, true}));
  EXPECT_GT(result->profiledMs, 0);
  // The loop leaves the runner without a profile that outlives it.
  EXPECT_EQ(runner.profile, nullptr);
  // A program without a learning rate reports none.
  EXPECT_FALSE(observer.records[0].learningRate);
  EXPECT_EQ(runner.contexts[0].learningRate, 0);
}

TEST(TrainerTest, ErrorsStopTheRunAndTellTheObserver) {
  FakeRunner runner;
  runner.failAt = 2;
  CountingSource source;
  FakeBackend backend;
  Recorder observer;
  TrainOptions options;
  options.lastStep = 5;
  absl::StatusOr<TrainResult> result =
      train(runner, source, backend, options, Throughput(), observer);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(), "kernel failed");
  EXPECT_EQ(observer.records.size(), 1u);
  EXPECT_EQ(observer.errors, 1);

  FakeRunner quiet;
  Recorder stopping;
  stopping.stopAt = 2;
  result = train(quiet, source, backend, options, Throughput(), stopping);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(quiet.contexts.size(), 1u);
  EXPECT_EQ(stopping.errors, 1);

  // Nothing to run: a resumed run already at its last step.
  FakeRunner idle;
  Recorder none;
  options.firstStep = 6;
  result = train(idle, source, backend, options, Throughput(), none);
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(idle.contexts.empty());
}

TEST(TrainerTest, PeriodicSavesFollowTheirStepsAndStopTheRunOnError) {
  FakeRunner runner;
  runner.skipAt = 4;
  CountingSource source;
  FakeBackend backend;
  Recorder observer;
  TrainOptions options;
  options.firstStep = 3;
  options.lastStep = 10;
  options.doneUpdates = 2;
  options.skipNonFinite = true;
  options.saveEvery = 3;
  std::vector<std::pair<int64_t, int64_t>> saves;
  options.save = [&](int64_t step, int64_t updates) {
    // Saved after the step's record.
    EXPECT_EQ(observer.records.back().step, step);
    saves.emplace_back(step, updates);
    return absl::OkStatus();
  };
  absl::StatusOr<TrainResult> result =
      train(runner, source, backend, options, Throughput(), observer);
  ASSERT_TRUE(result.ok()) << result.status();
  // Steps 3, 6 and 9 (not 10, the last: the caller saves it); step 4's
  // updates were skipped.
  std::vector<std::pair<int64_t, int64_t>> expected = {{3, 3}, {6, 5}, {9, 8}};
  EXPECT_EQ(saves, expected);

  // A save that fails stops the run there.
  FakeRunner second;
  Recorder stopped;
  options.save = [](int64_t step, int64_t) {
    return step == 6 ? absl::UnavailableError("disk full") : absl::OkStatus();
  };
  result = train(second, source, backend, options, Throughput(), stopped);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(), "disk full");
  EXPECT_EQ(second.contexts.size(), 4u);
  EXPECT_EQ(stopped.errors, 1);
}

TEST(TrainerTest, StepLinesAndJsonRecords) {
  StepRecord r;
  r.step = 3;
  r.lastStep = 10;
  r.loss = 4.5510371;
  r.gradNorm = 1.2;
  r.ms = 2.25;
  r.rate = 13922.44;
  r.unit = "tokens/s";
  r.peakBytes = 556000;
  r.maxRssBytes = 1000;
  r.learningRate = 0.001;
  EXPECT_EQ(stepLine(r), "step 3/10  loss 4.551037  grad_norm 1.2000  "
                         "13922.4 tokens/s  2.2 ms  peak 0.556 MB");
  EXPECT_EQ(stepJson(r),
            "{\"step\":3,\"loss\":4.5510371,\"lr\":0.001,\"grad_norm\":1.2,"
            "\"ms\":2.25,\"tokens_per_s\":13922.44,\"peak_bytes\":556000,"
            "\"max_rss_bytes\":1000}");
  r.loss = std::numeric_limits<double>::infinity();
  r.gradNorm.reset();
  r.learningRate.reset();
  r.skipped = true;
  r.unit = "samples/s";
  r.peakBytes = 25'000'000;
  EXPECT_EQ(stepLine(r), "step 3/10  loss inf  (non-finite: updates skipped)  "
                         "13922.4 samples/s  2.2 ms  peak 25.0 MB");
  EXPECT_EQ(stepJson(r),
            "{\"step\":3,\"loss\":null,\"ms\":2.25,\"samples_per_s\":13922.44,"
            "\"peak_bytes\":25000000,\"max_rss_bytes\":1000,\"skipped\":true}");
}

TEST(TrainerTest, ReporterAppendsJsonLines) {
  ScratchDir scratch;
  std::string path = scratch.file("trainer-test.jsonl");
  { std::ofstream(path) << "{\"step\":0}\n"; }
  absl::StatusOr<std::unique_ptr<StepReporter>> reporter =
      StepReporter::create(1, 2, path, /*progressBar=*/false);
  ASSERT_TRUE(reporter.ok());
  StepRecord r;
  r.step = 1;
  r.lastStep = 2;
  r.unit = "samples/s";
  (*reporter)->afterStep(r);
  r.step = 2;
  (*reporter)->afterStep(r);
  reporter->reset();
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str().substr(0, 11), "{\"step\":0}\n");
  EXPECT_NE(text.str().find("{\"step\":1,"), std::string::npos);
  EXPECT_NE(text.str().find("{\"step\":2,"), std::string::npos);

  absl::StatusOr<std::unique_ptr<StepReporter>> bad =
      StepReporter::create(1, 2, "/nonexistent-dir/x.jsonl", false);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "cannot open /nonexistent-dir/x.jsonl for writing");
}

TEST(TrainerTest, ThroughputCountsTokensOrSamples) {
  Throughput tokens = throughputOf(
      {{"idx", {DType::I64, {4, 16}}}, {"targets", {DType::I64, {4, 16}}}});
  EXPECT_EQ(tokens.unit, "tokens/s");
  EXPECT_EQ(tokens.perStep, 64);
  Throughput samples = throughputOf(
      {{"x", {DType::F32, {8, 3, 32, 32}}}, {"y", {DType::I64, {8}}}});
  EXPECT_EQ(samples.unit, "samples/s");
  EXPECT_EQ(samples.perStep, 8);
}

TEST(TrainerTest, RunInputsScaleMicroBatchesAndRefuseScalars) {
  Program p;
  p.function = "train_step";
  p.mesh = MeshLayout{"mesh", {2}, {"dp"}};
  p.values = {ValueInfo{TensorType{DType::I64, {2, 16}}},
              ValueInfo{TensorType{DType::F32, {}}}};
  Argument idx;
  idx.value = 0;
  idx.name = "idx";
  idx.sharding.splitAxes = {{0}};
  p.arguments = {idx};
  absl::StatusOr<RunInputs> inputs = runInputs(p, 4);
  ASSERT_TRUE(inputs.ok());
  // Local [2, 16] split over dp=2: a global micro-batch of [4, 16], four of
  // them in a step.
  EXPECT_EQ(inputs->micro[0].type.shape, (std::vector<int64_t>{4, 16}));
  EXPECT_EQ(inputs->global[0].type.shape, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(inputs->microbatches, 4);

  Argument scalar;
  scalar.value = 1;
  scalar.name = "temperature";
  p.arguments.push_back(scalar);
  absl::StatusOr<RunInputs> refused = runInputs(p, 4);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "input 'temperature' is a scalar; a pipeline cuts inputs into "
            "micro-batches along their first dimension");
  EXPECT_TRUE(runInputs(p, 1).ok());
}

} // namespace

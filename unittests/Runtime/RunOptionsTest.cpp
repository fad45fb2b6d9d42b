//===- RunOptionsTest.cpp - a run's options and a checkpoint's counters ---===//

#include "merak/Runtime/Train/RunOptions.h"
#include "merak/Runtime/Train/RunState.h"

#include "gtest/gtest.h"

#include <cmath>
#include <limits>

using namespace merak::runtime;

namespace {

/// A step that takes a learning rate, recorded in the IR as `recorded`.
Program stepWithLearningRate(std::optional<double> recorded) {
  Program p;
  p.function = "train_step";
  Argument lr;
  lr.value = 0;
  lr.role = ArgumentRole::LearningRate;
  lr.defaultLearningRate = recorded;
  p.values.push_back(ValueInfo{TensorType{DType::F32, {}}});
  p.arguments.push_back(lr);
  return p;
}

std::string scheduleError(ScheduleOptions options,
                          std::optional<double> recorded = 0.1) {
  absl::StatusOr<LearningRateSchedule> schedule =
      learningRateSchedule(options, stepWithLearningRate(recorded));
  return schedule.ok() ? "" : std::string(schedule.status().message());
}

TEST(RunOptionsTest, LearningRatesMustBeFiniteAndPositive) {
  ScheduleOptions options;
  options.lr = 0.5;
  EXPECT_EQ(scheduleError(options), "");
  const double nan = std::nan(""), inf = INFINITY;
  for (double bad : {nan, inf, -inf, -1.0, 0.0}) {
    options.lr = bad;
    EXPECT_NE(scheduleError(options).find("--lr must be a finite number "
                                          "above 0, not "),
              std::string::npos)
        << bad;
  }
  options.lr = nan;
  EXPECT_EQ(scheduleError(options),
            "--lr must be a finite number above 0, not nan");

  // The IR's rate, used without --lr, is held to the same range.
  EXPECT_EQ(scheduleError(ScheduleOptions{}, nan),
            "the learning rate @train_step records (merak.lr) is nan, not a "
            "finite number above 0: pass --lr");
  EXPECT_EQ(scheduleError(ScheduleOptions{}, 1e-3), "");

  options.lr = 0.1;
  options.minLr = -1;
  EXPECT_EQ(scheduleError(options),
            "--min-lr must be a finite number of at least 0, not -1");
  options.minLr = 0;
  options.warmupSteps = -2;
  EXPECT_EQ(scheduleError(options),
            "--warmup-steps must be at least 0, not -2");
  options.warmupSteps = 0;
  options.decaySteps = -1;
  EXPECT_EQ(scheduleError(options),
            "--decay-steps must be at least 0 (0: --steps), not -1");
}

TEST(RunOptionsTest, MemoryPlansBeyondTheMachineAreRefused) {
  Program step = stepWithLearningRate(0.1);
  step.plannedPeakBytes = 9'000'000'000'000;
  EXPECT_TRUE(checkMemoryPlan(step, 0).ok()); // unknown memory
  EXPECT_TRUE(checkMemoryPlan(step, 10'000'000'000'000).ok());
  absl::Status s = checkMemoryPlan(step, 16'000'000'000);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "@train_step plans a peak of 9000000000000 bytes (9000 GB) per "
            "rank, more than the 16000000000 bytes (16 GB) of memory and "
            "swap this machine has; build the step with smaller input shapes "
            "or over more ranks");
}

TEST(RunOptionsTest, CheckpointCountersAreCheckedIntegers) {
  absl::StatusOr<LoadedState> good = checkpointCounters(
      {{"step", "7"}, {"optimizer_step", "6"}, {"seed", "3"}}, "c.st");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->doneSteps, 7);
  EXPECT_EQ(good->doneUpdates, 6);
  EXPECT_EQ(good->seed, 3u);

  absl::StatusOr<LoadedState> none = checkpointCounters({}, "w.st");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->doneSteps, 0);
  EXPECT_EQ(none->seed, std::nullopt);
  // Without optimizer_step, every step updated.
  EXPECT_EQ(checkpointCounters({{"step", "5"}}, "c.st")->doneUpdates, 5);

  struct Case {
    std::map<std::string, std::string> metadata;
    std::string expected;
  } cases[] = {
      {{{"step", "two"}},
       "c.st: checkpoint field 'step' is 'two', not an integer from 0 to "
       "2^53"},
      {{{"step", ""}}, "field 'step' is '', not an integer"},
      {{{"step", "2x"}}, "field 'step' is '2x', not"},
      {{{"step", " 2"}}, "field 'step' is ' 2', not"},
      {{{"step", "-1"}}, "field 'step' is '-1', not"},
      {{{"step", "99999999999999999999"}}, "field 'step' is"},
      {{{"step", "9007199254740993"}}, "from 0 to 2^53"},
      {{{"step", "2"}, {"optimizer_step", "3"}},
       "c.st: checkpoint field 'optimizer_step' is '3', not an integer from "
       "0 to the checkpoint's step (2)"},
      {{{"seed", "2147483648"}},
       "c.st: checkpoint field 'seed' is '2147483648', not an integer from "
       "0 to 2^31 - 1"},
      {{{"seed", "-5"}}, "field 'seed' is '-5'"},
      {{{"seed", "1e3"}}, "field 'seed' is '1e3'"},
  };
  for (const Case &c : cases) {
    absl::StatusOr<LoadedState> bad = checkpointCounters(c.metadata, "c.st");
    ASSERT_FALSE(bad.ok()) << c.expected;
    EXPECT_NE(bad.status().message().find(c.expected), std::string::npos)
        << bad.status();
  }
}

} // namespace

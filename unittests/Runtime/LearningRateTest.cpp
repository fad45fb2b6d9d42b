//===- LearningRateTest.cpp - learning-rate schedules ---------------------===//

#include "merak/Runtime/LearningRate.h"

#include "gtest/gtest.h"

using namespace merak::runtime;

TEST(LearningRateTest, ConstantWithWarmup) {
  LearningRateSchedule s;
  s.base = 0.1;
  EXPECT_DOUBLE_EQ(learningRateAt(s, 1), 0.1);
  EXPECT_DOUBLE_EQ(learningRateAt(s, 100), 0.1);
  s.warmupSteps = 4;
  EXPECT_DOUBLE_EQ(learningRateAt(s, 1), 0.025);
  EXPECT_DOUBLE_EQ(learningRateAt(s, 4), 0.1);
  EXPECT_DOUBLE_EQ(learningRateAt(s, 5), 0.1);
}

TEST(LearningRateTest, CosineDecaysToTheMinimum) {
  LearningRateSchedule s;
  s.kind = LearningRateSchedule::Kind::Cosine;
  s.base = 1.0;
  s.min = 0.1;
  s.warmupSteps = 2;
  s.decaySteps = 12;
  EXPECT_DOUBLE_EQ(learningRateAt(s, 1), 0.5);
  EXPECT_DOUBLE_EQ(learningRateAt(s, 3), 1.0);    // decay starts at the peak
  EXPECT_NEAR(learningRateAt(s, 8), 0.55, 1e-12); // halfway
  EXPECT_DOUBLE_EQ(learningRateAt(s, 13), 0.1);
  EXPECT_DOUBLE_EQ(learningRateAt(s, 50), 0.1); // stays after the decay
  for (int step = 3; step < 13; ++step)
    EXPECT_GT(learningRateAt(s, step), learningRateAt(s, step + 1));
}

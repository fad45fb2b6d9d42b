//===- LearningRate.cpp - learning-rate schedules -------------------------===//

#include "merak/Runtime/LearningRate.h"

#include <algorithm>
#include <cmath>

namespace merak::runtime {

double learningRateAt(const LearningRateSchedule &schedule, int64_t step) {
  int64_t t = step - 1;
  if (t < schedule.warmupSteps)
    return schedule.base * double(t + 1) / double(schedule.warmupSteps);
  if (schedule.kind == LearningRateSchedule::Kind::Constant)
    return schedule.base;
  double span =
      double(std::max<int64_t>(1, schedule.decaySteps - schedule.warmupSteps));
  double progress = std::min(1.0, double(t - schedule.warmupSteps) / span);
  return schedule.min + 0.5 * (1.0 + std::cos(M_PI * progress)) *
                            (schedule.base - schedule.min);
}

} // namespace merak::runtime

//===- LearningRate.h - learning-rate schedules ---------------*- C++ -*-===//
#ifndef MERAK_RUNTIME_LEARNINGRATE_H
#define MERAK_RUNTIME_LEARNINGRATE_H

#include <cstdint>

namespace merak::runtime {

struct LearningRateSchedule {
  enum class Kind { Constant, Cosine };
  Kind kind = Kind::Constant;
  double base = 1e-3;
  double min = 0;          // cosine: the value it decays to
  int64_t warmupSteps = 0; // linear warm-up from base / warmup to base
  int64_t decaySteps = 0;  // cosine: steps from start to the end of decay
};

/// The learning rate of 1-based step `step`. With t = step - 1:
/// t < warmup: base * (t + 1) / warmup; otherwise constant: base, cosine:
/// min + 0.5 * (1 + cos(pi * min(1, (t - warmup) / max(1, decay - warmup))))
/// * (base - min).
double learningRateAt(const LearningRateSchedule &schedule, int64_t step);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_LEARNINGRATE_H

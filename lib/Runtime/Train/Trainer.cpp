//===- Trainer.cpp - the training loop, step lines and JSONL records ------===//

#include "merak/Runtime/Train/Trainer.h"

#include "merak/Runtime/Pipeline.h"

#include "absl/strings/str_format.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sys/resource.h>
#include <unistd.h>

namespace merak::runtime {

StepObserver::~StepObserver() = default;

Throughput throughputOf(const std::vector<InputSpec> &globalInputs) {
  Throughput t;
  for (const InputSpec &in : globalInputs)
    if (isInteger(in.type.dtype) && in.type.shape.size() >= 2) {
      t.perStep = in.type.numElements();
      t.unit = "tokens/s";
      return t;
    }
  if (!globalInputs.empty() && !globalInputs.front().type.shape.empty())
    t.perStep = globalInputs.front().type.shape[0];
  return t;
}

std::string stepLine(const StepRecord &r) {
  std::string line = absl::StrFormat("step %d/%d", r.step, r.lastStep);
  if (r.loss)
    absl::StrAppendFormat(&line, "  loss %.6f", *r.loss);
  if (r.gradNorm)
    absl::StrAppendFormat(&line, "  grad_norm %.4f", *r.gradNorm);
  if (r.lossScale)
    absl::StrAppendFormat(&line, "  loss_scale %g", *r.lossScale);
  if (r.overflowed)
    absl::StrAppendFormat(
        &line, "  (gradients overflowed: update skipped, %s)",
        r.nextLossScale == *r.lossScale
            ? std::string("static scale")
            : absl::StrFormat("scale halves to %g", r.nextLossScale));
  else if (r.skipped)
    line += "  (non-finite: updates skipped)";
  double peakMB = r.peakBytes / 1e6;
  absl::StrAppendFormat(&line, "  %.1f %s  %.1f ms  peak %.*f MB", r.rate,
                        r.unit, r.ms, peakMB < 1 ? 3 : 1, peakMB);
  return line;
}

std::string stepJson(const StepRecord &r) {
  nlohmann::ordered_json record;
  record["step"] = r.step;
  if (r.loss && std::isfinite(*r.loss))
    record["loss"] = *r.loss;
  else if (r.loss)
    record["loss"] = nullptr;
  if (r.learningRate)
    record["lr"] = *r.learningRate;
  if (r.gradNorm)
    record["grad_norm"] = *r.gradNorm;
  if (r.lossScale)
    record["loss_scale"] = *r.lossScale;
  record["ms"] = r.ms;
  record[r.unit == "tokens/s" ? "tokens_per_s" : "samples_per_s"] = r.rate;
  record["peak_bytes"] = r.peakBytes;
  record["max_rss_bytes"] = r.maxRssBytes;
  if (r.skipped)
    record["skipped"] = true;
  if (r.overflowed)
    record["overflow"] = true;
  return record.dump();
}

std::string evalLine(const EvalRecord &r) {
  return absl::StrFormat(
      "eval after step %d/%d  val_loss %.6f  val_ppl %.2f  %d batches  "
      "%.1f ms",
      r.step, r.lastStep, r.loss, std::exp(r.loss), r.batches, r.ms);
}

std::string evalJson(const EvalRecord &r) {
  nlohmann::ordered_json record;
  record["step"] = r.step;
  double ppl = std::exp(r.loss);
  record["val_loss"] = std::isfinite(r.loss) ? nlohmann::ordered_json(r.loss)
                                             : nlohmann::ordered_json(nullptr);
  record["val_ppl"] = std::isfinite(ppl) ? nlohmann::ordered_json(ppl)
                                         : nlohmann::ordered_json(nullptr);
  record["eval_batches"] = r.batches;
  record["eval_ms"] = r.ms;
  return record.dump();
}

namespace {

/// Runs the evaluation after `step`: batches 1..evalBatches of the
/// evaluation source, their mean loss.
absl::StatusOr<EvalRecord> evaluate(StepRunner &runner,
                                    const TrainOptions &options, int64_t step,
                                    int64_t doneUpdates) {
  auto start = std::chrono::steady_clock::now();
  double sum = 0;
  for (int64_t k = 1; k <= options.evalBatches; ++k) {
    absl::StatusOr<std::vector<HostTensor>> batch =
        options.evalSource->batch(k);
    if (!batch.ok())
      return absl::Status(
          batch.status().code(),
          absl::StrCat("evaluation batch ", k, ": ", batch.status().message()));
    StepContext ctx;
    ctx.globalStep = k;
    ctx.optimizerStep = doneUpdates + 1;
    ctx.seed = options.seed;
    ctx.evaluate = true;
    absl::StatusOr<StepOutcome> outcome =
        runner.runStep(ctx, *batch, /*skipNonFinite=*/false);
    if (!outcome.ok())
      return absl::Status(outcome.status().code(),
                          absl::StrCat("evaluation after step ", step,
                                       ", batch ", k, ": ",
                                       outcome.status().message()));
    if (!outcome->loss)
      return absl::FailedPreconditionError(
          "an evaluation needs a program that computes a loss");
    sum += *outcome->loss;
  }
  EvalRecord record;
  record.step = step;
  record.lastStep = options.lastStep;
  record.loss = sum / double(options.evalBatches);
  record.batches = options.evalBatches;
  record.ms = std::chrono::duration<double, std::milli>(
                  std::chrono::steady_clock::now() - start)
                  .count();
  return record;
}

} // namespace

namespace {
/// A dynamic scale that halves below this has met gradients that are not
/// finite at any scale.
constexpr double kMinLossScale = 1.0 / (1 << 24);
} // namespace

absl::StatusOr<TrainResult> train(StepRunner &runner, BatchSource &batches,
                                  const Backend &backend,
                                  const TrainOptions &options,
                                  const Throughput &throughput,
                                  StepObserver &observer) {
  TrainResult result;
  result.doneUpdates = options.doneUpdates;
  auto failed = [&](absl::Status status) {
    observer.onError();
    return status;
  };
  for (int64_t step = options.firstStep; step <= options.lastStep; ++step) {
    if (absl::Status s = observer.beforeStep(step); !s.ok())
      return failed(s);
    // The first step warms caches and allocators; profile the others.
    if (options.profile && step == options.firstStep + 1)
      runner.setProfile(&result.profile);
    auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<HostTensor>> batch = batches.batch(step);
    if (!batch.ok())
      return failed(batch.status());
    StepContext ctx;
    ctx.globalStep = step;
    ctx.optimizerStep = result.doneUpdates + 1;
    ctx.learningRate =
        options.trains ? learningRateAt(options.schedule, step) : 0.0;
    ctx.seed = options.seed;
    if (options.lossScale)
      ctx.lossScale = options.lossScale->scale;
    absl::StatusOr<StepOutcome> outcome =
        runner.runStep(ctx, *batch, options.skipNonFinite);
    if (!outcome.ok())
      return failed(outcome.status());
    if (LossScaleState *ls = options.lossScale) {
      // As PyTorch's GradScaler: halve on an overflow, double after
      // `window` steps in a row without one.
      if (outcome->overflowed) {
        if (ls->scaling.dynamic)
          ls->scale /= 2;
        ls->goodSteps = 0;
        if (ls->scale < kMinLossScale)
          return failed(absl::FailedPreconditionError(absl::StrFormat(
              "step %d: the gradients are not finite even at loss scale %g "
              "(a NaN or inf in the model or the data, not an overflow)",
              step, ls->scale * 2)));
      } else if (!outcome->skipped && ls->scaling.dynamic &&
                 ++ls->goodSteps >= ls->scaling.window) {
        ls->scale *= 2;
        ls->goodSteps = 0;
      }
    }
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - start)
                    .count();
    if (!outcome->skipped)
      ++result.doneUpdates;
    if (options.profile && step > options.firstStep) {
      result.profiledMs += ms;
      ++result.profiledSteps;
    }

    StepRecord record;
    record.step = step;
    record.lastStep = options.lastStep;
    record.loss = outcome->loss;
    record.gradNorm = outcome->gradNorm;
    record.skipped = outcome->skipped;
    if (options.lossScale) {
      record.lossScale = ctx.lossScale;
      record.overflowed = outcome->overflowed;
      record.nextLossScale = options.lossScale->scale;
    }
    if (options.trains)
      record.learningRate = ctx.learningRate;
    record.ms = ms;
    record.rate = throughput.perStep / (ms / 1000.0);
    record.unit = throughput.unit;
    record.peakBytes = backend.memoryStats().peakBytes;
    record.maxRssBytes = maxRssBytes();
    observer.afterStep(record);
    if (options.evalSource && options.evalBatches > 0 &&
        ((options.evalEvery > 0 && step % options.evalEvery == 0) ||
         step == options.lastStep)) {
      // Kernel profiles and step times are the training steps' alone.
      runner.setProfile(nullptr);
      absl::StatusOr<EvalRecord> eval =
          evaluate(runner, options, step, result.doneUpdates);
      if (!eval.ok())
        return failed(eval.status());
      observer.afterEval(*eval);
      if (options.profile && step > options.firstStep)
        runner.setProfile(&result.profile);
    }
    if (options.save && options.saveEvery > 0 &&
        step % options.saveEvery == 0 && step < options.lastStep)
      if (absl::Status s = options.save(step, result.doneUpdates); !s.ok())
        return failed(s);
  }
  runner.setProfile(nullptr);
  return result;
}

absl::StatusOr<std::unique_ptr<StepReporter>>
StepReporter::create(int64_t firstStep, int64_t lastStep,
                     const std::string &jsonlPath, bool progressBar) {
  std::unique_ptr<StepReporter> reporter(new StepReporter());
  reporter->first = firstStep;
  reporter->lastStep = lastStep;
  reporter->progressBar = progressBar;
  reporter->start = std::chrono::steady_clock::now();
  if (!jsonlPath.empty()) {
    reporter->jsonl.open(jsonlPath, std::ios::app);
    if (!reporter->jsonl)
      return absl::UnavailableError("cannot open " + jsonlPath +
                                    " for writing");
  }
  return reporter;
}

void StepReporter::afterStep(const StepRecord &record) {
  clearProgress();
  std::printf("%s\n", stepLine(record).c_str());
  std::fflush(stdout);
  last = record;
  drawProgress(record.step);
  if (jsonl.is_open()) {
    jsonl << stepJson(record) << "\n";
    jsonl.flush();
  }
}

void StepReporter::afterEval(const EvalRecord &record) {
  clearProgress();
  std::printf("%s\n", evalLine(record).c_str());
  std::fflush(stdout);
  drawProgress(record.step);
  if (jsonl.is_open()) {
    jsonl << evalJson(record) << "\n";
    jsonl.flush();
  }
}

void StepReporter::clearProgress() {
  if (progressBar)
    std::fprintf(stderr, "\r\033[K");
}

namespace {

/// `13.4k`, `2.1M`, `950.0`.
std::string compactRate(double rate) {
  if (rate >= 1e6)
    return absl::StrFormat("%.1fM", rate / 1e6);
  if (rate >= 1e3)
    return absl::StrFormat("%.1fk", rate / 1e3);
  return absl::StrFormat("%.1f", rate);
}

/// `42s`, `3m05s`, `1h02m`.
std::string durationText(double seconds) {
  int64_t s = int64_t(seconds + 0.5);
  if (s < 60)
    return absl::StrFormat("%ds", s);
  if (s < 3600)
    return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, s / 60 % 60);
}

} // namespace

void StepReporter::drawProgress(int64_t done) {
  if (!progressBar)
    return;
  int64_t total = lastStep - first + 1, count = done - first + 1;
  constexpr int kWidth = 30;
  int filled = int(kWidth * count / std::max<int64_t>(1, total));
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  double eta = count > 0 ? elapsed / count * (total - count) : 0;
  std::string bar(size_t(filled), '#');
  bar.append(size_t(kWidth - filled), '.');
  std::string line = absl::StrFormat("\r[%s] %d/%d", bar, done, lastStep);
  if (last && last->loss)
    absl::StrAppendFormat(&line, "  loss %.4f", *last->loss);
  if (last)
    absl::StrAppendFormat(&line, "  %s %s", compactRate(last->rate),
                          last->unit);
  absl::StrAppend(&line, "  eta ", durationText(eta));
  if (last)
    absl::StrAppendFormat(&line, "  %.1f MB", last->peakBytes / 1e6);
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

int64_t maxRssBytes() {
  // VmHWM belongs to the address space, so unlike getrusage's ru_maxrss it
  // does not inherit the parent's peak when a large process started this.
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0)
      return std::stoll(line.substr(6)) * 1024;
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;
}

std::string profileReport(const OpProfile &profile, double stepMs,
                          const std::string &libraries) {
  std::vector<std::pair<OpKind, OpProfile::Entry>> rows(profile.byKind.begin(),
                                                        profile.byKind.end());
  std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) {
    return a.second.seconds > b.second.seconds;
  });
  double kernelMs = 0;
  for (const auto &row : rows)
    kernelMs += row.second.seconds * 1e3;
  std::string out = absl::StrFormat(
      "kernel time per op kind over %.1f ms of steps (kernels %.1f ms, "
      "%.0f%%):\n",
      stepMs, kernelMs, stepMs > 0 ? 100.0 * kernelMs / stepMs : 0.0);
  out += libraries;
  absl::StrAppendFormat(&out, "  %-32s %8s %12s %7s\n", "op", "calls", "ms",
                        "share");
  for (const auto &[kind, e] : rows)
    absl::StrAppendFormat(&out, "  %-32s %8d %12.2f %6.1f%%\n",
                          opFullName(kind), e.calls, e.seconds * 1e3,
                          kernelMs > 0 ? 100.0 * e.seconds * 1e3 / kernelMs
                                       : 0.0);
  return out;
}

std::string profileJson(const OpProfile &profile, double stepMs, int64_t steps,
                        const std::string &program, int64_t peakBytes,
                        int64_t stateBytes, const TaskTimesPerStep *tasks) {
  nlohmann::ordered_json doc;
  doc["program"] = program;
  doc["profiled_steps"] = steps;
  doc["step_ms"] = steps > 0 ? stepMs / double(steps) : 0.0;
  doc["peak_bytes"] = peakBytes;
  doc["state_bytes"] = stateBytes;
  nlohmann::ordered_json ops = nlohmann::ordered_json::object();
  for (const auto &[kind, e] : profile.byKind)
    ops[opFullName(kind)] = {
        {"calls_per_step", steps > 0 ? double(e.calls) / double(steps) : 0.0},
        {"ms_per_step", steps > 0 ? e.seconds * 1e3 / double(steps) : 0.0}};
  doc["ops"] = ops;
  // The 40 op-and-shape entries that take the most time, the longest first.
  std::vector<std::pair<std::string, OpProfile::Entry>> shapes(
      profile.byShape.begin(), profile.byShape.end());
  std::stable_sort(shapes.begin(), shapes.end(), [](auto &a, auto &b) {
    return a.second.seconds > b.second.seconds;
  });
  if (shapes.size() > 40)
    shapes.resize(40);
  nlohmann::ordered_json top = nlohmann::ordered_json::array();
  for (const auto &[label, e] : shapes)
    top.push_back(
        {{"op", label},
         {"calls_per_step", steps > 0 ? double(e.calls) / double(steps) : 0.0},
         {"ms_per_step", steps > 0 ? e.seconds * 1e3 / double(steps) : 0.0}});
  doc["top_shapes"] = top;
  if (tasks && tasks->steps > 0)
    doc["tasks"] = {
        {"microbatches", tasks->microbatches},
        {"steps", tasks->steps},
        {"forward_ms", tasks->forwardMs},
        {"backward_ms", tasks->backwardMs},
        {"weight_ms", tasks->weightMs},
        {"recompute_ms", tasks->recomputeMs},
        {"gradient_sum_ms",
         steps > 0 ? profile.gradientSums.seconds * 1e3 / double(steps) : 0.0}};
  return doc.dump(2) + "\n";
}

} // namespace merak::runtime

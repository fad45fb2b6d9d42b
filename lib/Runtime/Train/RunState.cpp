//===- RunState.cpp - initial state, checkpoints, the pipeline report -----===//

#include "merak/Runtime/Train/RunState.h"

#include "merak/Runtime/Checkpoint.h"
#include "merak/Runtime/Safetensors.h"
#include "merak/Runtime/TorchIO.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <unistd.h>

namespace merak::runtime {

namespace {

bool fileExists(const std::string &path) {
  return ::access(path.c_str(), R_OK) == 0;
}

/// The largest step count a checkpoint may record (steps stay exact as
/// doubles in the logs, and the next step does not overflow).
constexpr int64_t kMaxCheckpointStep = int64_t(1) << 53;

/// The integer field `key` of a checkpoint's metadata, which must lie in
/// [min, max] (spelled `range` in the error); nullopt when absent.
absl::StatusOr<std::optional<int64_t>>
metadataInt(const std::map<std::string, std::string> &metadata,
            const std::string &key, int64_t min, int64_t max,
            const std::string &range, const std::string &source) {
  auto it = metadata.find(key);
  if (it == metadata.end())
    return std::nullopt;
  const std::string &text = it->second;
  int64_t value = 0;
  auto [end, error] =
      std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() ||
      end != text.data() + text.size() || value < min || value > max)
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": checkpoint field '", key, "' is '", text,
                     "', not an integer ", range));
  return value;
}

std::string checkpointId() {
  std::random_device device;
  char text[32];
  std::snprintf(text, sizeof(text), "%08x%08x", device(), device());
  return text;
}

} // namespace

absl::Status checkStateSource(const std::string &path) {
  if (!fileExists(path) && !fileExists(shardIndexPath(path)))
    return absl::NotFoundError("cannot open " + path);
  return absl::OkStatus();
}

bool isTorchScriptArchive(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && magic[0] == 'P' && magic[1] == 'K' &&
         magic[2] == 3 && magic[3] == 4;
}

absl::StatusOr<std::unique_ptr<GlobalState>>
openStateSource(const std::string &source, bool resuming) {
  if (absl::Status s = checkStateSource(source); !s.ok())
    return s;
  if (!resuming && isTorchScriptArchive(source)) {
    absl::StatusOr<std::map<std::string, HostTensor>> weights =
        loadTorchScriptState(source);
    if (!weights.ok())
      return weights.status();
    return wholeTensors(*std::move(weights), source);
  }
  absl::StatusOr<std::unique_ptr<GlobalState>> opened = openCheckpoint(source);
  if (!opened.ok())
    return opened.status();
  if (resuming) {
    auto format = (*opened)->metadata().find("format");
    if (format == (*opened)->metadata().end() ||
        format->second != kCheckpointFormat)
      return absl::InvalidArgumentError(
          source + " is not a checkpoint written by merak-exec --save "
                   "(use --init to load its weights)");
  }
  return opened;
}

absl::StatusOr<LoadedState> loadRunState(StepRunner &runner,
                                         const Program &step,
                                         const std::string &initFile,
                                         const std::string &resumeFile) {
  LoadedState loaded;
  const std::string &source = !resumeFile.empty() ? resumeFile : initFile;
  if (source.empty()) {
    for (const Argument &arg : step.arguments)
      if (arg.role == ArgumentRole::Param || arg.role == ArgumentRole::Buffer)
        return absl::InvalidArgumentError(absl::StrCat(
            "@", step.function, " needs initial weights (",
            argumentRoleName(arg.role), " '", arg.name,
            "', ...): pass --init model.pt or --resume ckpt.safetensors"));
    if (absl::Status s = runner.loadState({}, "<nothing>", false); !s.ok())
      return s;
    return loaded;
  }
  // Every rank reads the global tensors and keeps its shard.
  bool resuming = !resumeFile.empty();
  absl::StatusOr<std::unique_ptr<GlobalState>> opened =
      openStateSource(source, resuming);
  if (!opened.ok())
    return opened.status();
  std::unique_ptr<GlobalState> global = *std::move(opened);
  // The counters first: a bad field stops the run before any state loads.
  absl::StatusOr<LoadedState> counters =
      checkpointCounters(global->metadata(), global->name());
  if (!counters.ok())
    return counters.status();
  absl::StatusOr<std::map<std::string, HostTensor>> shards =
      shardState(step, *global);
  if (!shards.ok())
    return shards.status();
  if (absl::Status s = runner.loadState(*shards, global->name(),
                                        /*requireOptimizerState=*/resuming);
      !s.ok())
    return s;
  return *counters;
}

absl::StatusOr<LoadedState>
checkpointCounters(const std::map<std::string, std::string> &metadata,
                   const std::string &source) {
  LoadedState loaded;
  absl::StatusOr<std::optional<int64_t>> step = metadataInt(
      metadata, "step", 0, kMaxCheckpointStep, "from 0 to 2^53", source);
  if (!step.ok())
    return step.status();
  loaded.doneSteps = step->value_or(0);
  absl::StatusOr<std::optional<int64_t>> updates = metadataInt(
      metadata, "optimizer_step", 0, loaded.doneSteps,
      absl::StrCat("from 0 to the checkpoint's step (", loaded.doneSteps, ")"),
      source);
  if (!updates.ok())
    return updates.status();
  loaded.doneUpdates = updates->value_or(loaded.doneSteps);
  absl::StatusOr<std::optional<int64_t>> seed =
      metadataInt(metadata, "seed", 0, (int64_t(1) << 31) - 1,
                  "from 0 to 2^31 - 1", source);
  if (!seed.ok())
    return seed.status();
  if (*seed)
    loaded.seed = uint64_t(**seed);
  if (auto it = metadata.find("loss_scale"); it != metadata.end()) {
    double scale = 0;
    if (!absl::SimpleAtod(it->second, &scale) || !std::isfinite(scale) ||
        scale <= 0)
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": checkpoint field 'loss_scale' is '",
                       it->second, "', not a number above 0"));
    loaded.lossScale = scale;
  }
  absl::StatusOr<std::optional<int64_t>> good =
      metadataInt(metadata, "loss_scale_good_steps", 0, kMaxCheckpointStep,
                  "from 0 to 2^53", source);
  if (!good.ok())
    return good.status();
  loaded.lossScaleGoodSteps = good->value_or(0);
  return loaded;
}

absl::Status
saveRunCheckpoint(StepRunner &runner, const Program &step,
                  const PipelinePlan *plan, DistributedJob *job,
                  const std::string &path, int64_t steps, int64_t doneUpdates,
                  uint64_t seed,
                  const std::map<std::string, std::string> &extraMetadata) {
  absl::StatusOr<std::map<std::string, HostTensor>> state =
      runner.stateToHost();
  if (!state.ok())
    return state.status();
  std::map<std::string, std::string> metadata = {
      {"format", kCheckpointFormat},
      {"function", step.function},
      {"step", std::to_string(steps)},
      {"optimizer_step", std::to_string(doneUpdates)},
      {"seed", std::to_string(seed)}};
  metadata.insert(extraMetadata.begin(), extraMetadata.end());
  if (!job) {
    toStoredShapes(step, *state);
    if (absl::Status s = writeSafetensors(path, *state, metadata); !s.ok())
      return s;
    removeStaleCheckpoint(path, /*sharded=*/false);
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> id =
      job->shareFromRank0("checkpoint_id", checkpointId());
  if (!id.ok())
    return id.status();
  metadata["checkpoint_id"] = *id;
  std::optional<PipelineOwnership> owners;
  if (plan) {
    owners.emplace();
    owners->pipelineRanks = plan->pp;
    owners->pipelineRank = plan->rank;
    for (const auto &[name, stage] : plan->stateStage)
      owners->owner[name] = plan->rankOf(stage);
  }
  if (absl::Status s = writeCheckpointShard(path, step, *state, metadata,
                                            owners ? &*owners : nullptr);
      !s.ok())
    return s;
  if (absl::Status s = job->barrier("save"); !s.ok())
    return s;
  if (job->rank() == 0) {
    if (absl::Status s = writeCheckpointIndex(path, step, metadata,
                                              owners ? &*owners : nullptr);
        !s.ok())
      return s;
    removeStaleCheckpoint(path, /*sharded=*/true);
  }
  return absl::OkStatus();
}

absl::StatusOr<PipelineReport> reportPipeline(
    const PipelinePlan &plan, const std::vector<PipelineEvent> &ownEvents,
    int64_t peakBytes, int64_t stateBytes, int64_t firstStep, int64_t meshSize,
    DistributedJob *job, bool reporter, const std::string &traceFile) {
  std::string payload = absl::StrCat(peakBytes, " ", stateBytes, "\n",
                                     serializeEvents(ownEvents));
  std::vector<std::string> all;
  if (job) {
    absl::StatusOr<std::vector<std::string>> gathered =
        job->gatherToRank0("pipeline-report", payload);
    if (!gathered.ok())
      return gathered.status();
    all = *std::move(gathered);
  } else {
    all.push_back(payload);
  }
  PipelineReport report;
  if (!reporter)
    return report;
  std::vector<std::vector<PipelineEvent>> events;
  std::vector<int64_t> peaks, states;
  std::vector<std::string> names;
  int64_t lastStep = firstStep;
  for (size_t r = 0; r < all.size(); ++r) {
    size_t eol = all[r].find('\n');
    long long peak = 0, state = 0;
    std::sscanf(all[r].substr(0, eol).c_str(), "%lld %lld", &peak, &state);
    peaks.push_back(peak);
    states.push_back(state);
    absl::StatusOr<std::vector<PipelineEvent>> parsed =
        deserializeEvents(all[r].substr(eol + 1));
    if (!parsed.ok())
      return parsed.status();
    for (const PipelineEvent &e : *parsed)
      lastStep = std::max(lastStep, e.step);
    events.push_back(*std::move(parsed));
    int64_t p = int64_t(r) / meshSize;
    std::string stages;
    for (int64_t s = p; s < plan.stages; s += plan.pp)
      absl::StrAppend(&stages, stages.empty() ? "" : ",", s);
    names.push_back(absl::StrCat(
        "rank ", r, " (stage", plan.virtualStages > 1 ? "s " : " ", stages,
        meshSize > 1 ? absl::StrCat(", mesh rank ", int64_t(r) % meshSize)
                     : std::string(),
        ")"));
  }
  int64_t from = lastStep > firstStep ? firstStep + 1 : firstStep;
  BubbleMeasurement bubble = measureBubble(events, from);
  report.text = absl::StrFormat(
      "pipeline %s, pp=%d, virtual=%d, %d micro-batches: bubble %.1f%% "
      "measured over %d step%s (unit-time schedule %.1f%%)\n",
      plan.kind, plan.pp, plan.virtualStages, plan.microbatches,
      100 * bubble.fraction, bubble.steps, bubble.steps == 1 ? "" : "s",
      100 * plan.unitTimeBubble);
  std::string line = "peak memory per rank (MB):";
  std::string activations =
      "peak memory above the state (activations, transfers) per rank (MB):";
  for (size_t r = 0; r < peaks.size(); ++r) {
    absl::StrAppendFormat(&line, " %.3f", peaks[r] / 1e6);
    absl::StrAppendFormat(&activations, " %.3f",
                          std::max<int64_t>(0, peaks[r] - states[r]) / 1e6);
  }
  absl::StrAppend(&report.text, line, "\n", activations, "\n");
  if (!traceFile.empty()) {
    std::string json = pipelineTraceJson(events, names);
    std::string tmp = traceFile + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << json;
      if (!out)
        return absl::UnavailableError("cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), traceFile.c_str()) != 0)
      return absl::UnavailableError("cannot write " + traceFile);
    report.tracedRanks = int64_t(events.size());
  }
  return report;
}

} // namespace merak::runtime

//===- AutoParallel.cpp - plans priced and searched -----------------------===//

#include "merak/Analysis/AutoParallel.h"

#include "merak/Analysis/CostModel.h"
#include "merak/Analysis/Layers.h"
#include "merak/Analysis/PipelineSchedule.h"
#include "merak/Hardware/CollectiveCost.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

using namespace merak;
using namespace merak::autoparallel;
using json = nlohmann::ordered_json;

std::string merak::autoparallel::formatBytes(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return llvm::formatv(u == 0 ? "{0:f0} {1}" : "{0:f2} {1}", bytes, units[u])
      .str();
}

std::string Plan::options() const {
  std::string out = llvm::formatv("dp={0} tp={1}", dp, tp).str();
  if (zero)
    out += llvm::formatv(" zero={0}", zero).str();
  if (!vocabParallel && tp > 1)
    out += " vocab-parallel=false";
  if (!pipelined())
    return out;
  out += llvm::formatv(" pp={0} microbatches={1}", pp, microbatches).str();
  if (!schedule.empty())
    out += " schedule=" + schedule;
  if (virtualStages > 1)
    out += llvm::formatv(" virtual={0}", virtualStages).str();
  if (recompute != "none")
    out += " recompute=" + recompute;
  if (recomputeRatio >= 0)
    out += llvm::formatv(" recompute-ratio={0}", recomputeRatio).str();
  if (!stageStarts.empty()) {
    out += " stages=";
    for (size_t i = 0; i < stageStarts.size(); ++i)
      out += (i ? "," : "") + std::to_string(stageStarts[i]);
  }
  return out;
}

std::string merak::autoparallel::parsePlan(const std::string &text,
                                           Plan &plan) {
  Plan p;
  bool scheduleGiven = false;
  llvm::SmallVector<llvm::StringRef> words;
  llvm::StringRef(text).split(words, ' ', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef word : words) {
    auto [key, value] = word.split('=');
    auto integer = [&](int &out, int least) -> std::string {
      if (value.getAsInteger(10, out) || out < least)
        return (key + "=" + value + ": expected an integer of at least " +
                llvm::Twine(least))
            .str();
      return "";
    };
    std::string error;
    if (key == "dp")
      error = integer(p.dp, 1);
    else if (key == "tp")
      error = integer(p.tp, 1);
    else if (key == "pp")
      error = integer(p.pp, 1);
    else if (key == "virtual")
      error = integer(p.virtualStages, 1);
    else if (key == "microbatches")
      error = integer(p.microbatches, 1);
    else if (key == "zero") {
      error = integer(p.zero, 0);
      if (error.empty() && p.zero > 3)
        error = "zero=" + value.str() + ": expected 0 to 3";
    } else if (key == "schedule") {
      if (!pipeline::parseScheduleKind(value))
        error = "schedule=" + value.str() + ": unknown schedule";
      p.schedule = value.str();
      scheduleGiven = true;
    } else if (key == "recompute") {
      if (value != "none" && value != "full")
        error = "recompute=" + value.str() + ": the model prices none or full";
      p.recompute = value.str();
    } else if (key == "recompute-ratio") {
      if (value.getAsDouble(p.recomputeRatio) || p.recomputeRatio < 0 ||
          p.recomputeRatio > 1)
        error = "recompute-ratio=" + value.str() + ": expected 0 to 1";
    } else if (key == "vocab-parallel") {
      if (value != "true" && value != "false")
        error = "vocab-parallel=" + value.str() + ": expected true or false";
      p.vocabParallel = value == "true";
    } else if (key == "stages") {
      llvm::SmallVector<llvm::StringRef> firsts;
      value.split(firsts, ',');
      for (llvm::StringRef f : firsts) {
        unsigned first = 0;
        if (f.getAsInteger(10, first)) {
          error = "stages=" + value.str() + ": expected layer indices";
          break;
        }
        p.stageStarts.push_back(first);
      }
    } else {
      error = "'" + word.str() + "': not an option the model prices";
    }
    if (!error.empty())
      return error;
  }
  if (p.pipelined() && !scheduleGiven)
    p.schedule = "1f1b";
  plan = std::move(p);
  return "";
}

namespace {

/// Where the ranks of a group sit: tensor parallelism innermost (adjacent
/// devices), data parallelism next, pipeline stages outermost, as Megatron
/// orders them. A group of `size` ranks `stride` apart crosses nodes when
/// it spans more devices than a node has.
bool crossesNodes(const HardwareProfile &hw, int devices, int size,
                  int stride) {
  return devices > hw.devicesPerNode && size > 1 &&
         int64_t(size) * stride > hw.devicesPerNode;
}

double opTime(const HardwareProfile &hw, const std::string &type,
              const OpWork &w, double scale) {
  double flops = w.flops * scale, bytes = w.bytes * scale;
  if (flops <= 0 && bytes <= 0)
    return 0;
  double memory = hw.memoryBandwidth > 0 ? bytes / hw.memoryBandwidth : 0;
  double compute = 0;
  if (w.contraction)
    compute = flops > 0 ? flops / hw.gemmRate(type, flops) : 0;
  else
    compute = flops > 0 ? flops / hw.peak("f32") : 0;
  return std::max(compute, memory) + hw.opOverhead;
}

double opsTime(const ModelProfile &model, const HardwareProfile &hw,
               const std::vector<OpWork> &ops, double scale, int tp) {
  double t = 0;
  for (const OpWork &w : ops)
    t += opTime(hw, model.computeType, w, w.split ? scale / tp : scale) *
         (w.scale > 0     ? w.scale
          : w.contraction ? model.gemmScale
                          : model.otherScale);
  return t;
}

/// Per-layer times of one (tp, batch share) pair.
struct LayerTimes {
  std::vector<double> forward, backward, weight, tpForward, tpBackward;
};

struct Evaluator {
  const ModelProfile &model;
  const HardwareProfile &hw;
  int devices;
  std::map<std::pair<int, int64_t>, LayerTimes> timeCache;
  std::map<std::string, pipeline::Schedule> scheduleCache;
  std::map<std::string, std::string> scheduleErrors;
  /// Stage cuts by (tp, parts, stages, recompute), and pipeline outcomes
  /// by plan shape: plans that differ only in ZeRO stage share both.
  std::map<std::tuple<int, int64_t, int, bool>, std::vector<unsigned>> cutCache;
  struct Outcome {
    double makespan = 0;
    std::vector<double> busy, held;
    std::string error;
  };
  std::map<std::string, Outcome> outcomeCache;

  Evaluator(const ModelProfile &model, const HardwareProfile &hw, int devices)
      : model(model), hw(hw), devices(devices) {}

  /// Times at tensor-parallel degree `tp` of a micro-batch that is
  /// 1 / `parts` of the global batch.
  const LayerTimes &times(int tp, int64_t parts) {
    auto key = std::make_pair(tp, parts);
    auto it = timeCache.find(key);
    if (it != timeCache.end())
      return it->second;
    LayerTimes t;
    double scale = 1.0 / double(parts);
    bool cross = crossesNodes(hw, devices, tp, 1);
    auto collective = [&](double bytes, int count) {
      if (tp <= 1 || count == 0)
        return 0.0;
      double each = bytes * scale / count;
      double sent = collectiveBytes(CollectiveKind::AllReduce, tp, each, each);
      // Each is waited for at once: it pays the stall too.
      return count * (hw.collectiveTime("allreduce", tp, cross, sent) +
                      hw.collectiveStall("allreduce", tp, cross));
    };
    for (const LayerProfile &l : model.layers) {
      t.forward.push_back(opsTime(model, hw, l.forward, scale, tp) *
                          model.forwardScale);
      t.backward.push_back(opsTime(model, hw, l.backward, scale, tp) *
                           model.backwardScale);
      t.weight.push_back(opsTime(model, hw, l.weight, scale, tp) *
                         model.backwardScale);
      t.tpForward.push_back(
          collective(l.tpForwardBytes, l.tpForwardCollectives));
      t.tpBackward.push_back(
          collective(l.tpBackwardBytes, l.tpBackwardCollectives));
    }
    return timeCache.emplace(key, std::move(t)).first->second;
  }

  const pipeline::Schedule *schedule(const Plan &plan,
                                     const std::vector<bool> &recompute,
                                     std::string &error) {
    std::string key = llvm::formatv("{0}/{1}/{2}/{3}/", plan.schedule, plan.pp,
                                    plan.virtualStages, plan.microbatches)
                          .str();
    for (bool r : recompute)
      key += r ? '1' : '0';
    if (auto it = scheduleCache.find(key); it != scheduleCache.end())
      return &it->second;
    if (auto it = scheduleErrors.find(key); it != scheduleErrors.end()) {
      error = it->second;
      return nullptr;
    }
    std::optional<pipeline::ScheduleKind> kind =
        pipeline::parseScheduleKind(plan.schedule);
    if (!kind) {
      error = "unknown schedule '" + plan.schedule + "'";
      return nullptr;
    }
    pipeline::PipelineShape shape;
    shape.pp = plan.pp;
    shape.virtualStages = plan.virtualStages;
    shape.microbatches = plan.microbatches;
    shape.recompute = recompute;
    llvm::Expected<pipeline::Schedule> built =
        pipeline::buildComputeOrder(*kind, shape);
    if (!built) {
      error = llvm::toString(built.takeError());
      scheduleErrors[key] = error;
      return nullptr;
    }
    return &scheduleCache.emplace(key, std::move(*built)).first->second;
  }

  /// Prices `plan`; one whose compute alone takes longer than
  /// `pruneAbove` is rejected without simulating its pipeline.
  Estimate
  evaluate(Plan &plan, double memoryLimit,
           double pruneAbove = std::numeric_limits<double>::infinity());
};

/// A pipelined backward's sum of a micro-batch's gradients of `params`
/// bytes into the step's: both read, one written, one kernel.
double gradientSumTime(const HardwareProfile &hw, double params) {
  return hw.memoryBandwidth > 0
             ? 3 * params / hw.memoryBandwidth + hw.opOverhead
             : 0;
}

/// What a plan needs before its activations: parameters, gradients and
/// optimizer state of `params` bytes under ZeRO stage `zero` over `dp`.
double staticMemory(double params, int zero, int dp, int states) {
  double sharded = dp > 1 ? params / dp : params;
  return (zero >= 3 ? sharded : params) + (zero >= 2 ? sharded : params) +
         states * (zero >= 1 ? sharded : params);
}

Estimate Evaluator::evaluate(Plan &plan, double memoryLimit,
                             double pruneAbove) {
  Estimate e;
  auto reject = [&](std::string why) {
    e.infeasible = std::move(why);
    return e;
  };
  int layers = int(model.layers.size());
  int stages = plan.pp * plan.virtualStages;
  if (plan.dp < 1 || plan.tp < 1 || plan.pp < 1 || plan.microbatches < 1 ||
      plan.virtualStages < 1)
    return reject("degrees must be positive");
  if (model.batch % plan.dp != 0)
    return reject(llvm::formatv("dp={0} does not divide the batch of {1}",
                                plan.dp, model.batch));
  for (int64_t dim : model.tpDims)
    if (plan.tp > 1 && dim % plan.tp != 0)
      return reject(llvm::formatv("tp={0} does not divide a dimension of {1} "
                                  "that tensor parallelism splits",
                                  plan.tp, dim));
  if (plan.tp > 1 && !model.tpRefusal.empty())
    return reject(model.tpRefusal);
  if (stages > layers)
    return reject(
        llvm::formatv("{0} stages but only {1} layers", stages, layers));
  if (plan.pipelined() && model.clipsGradients)
    return reject("the step clips the gradient norm, which pipelines do not "
                  "compute");
  if (plan.pipelined() && plan.zero == 3)
    return reject("zero=3 does not combine with pipelines");

  // A micro-batch is the traced batch split over dp; a step runs
  // `microbatches` of them.
  int64_t parts = plan.dp;
  e.samples = double(model.batch) * plan.microbatches;
  const LayerTimes &lt = times(plan.tp, parts);
  double scale = 1.0 / double(parts);
  if (plan.tp > 1)
    for (const LayerProfile &l : model.layers)
      e.tensorParallelCollectives +=
          l.tpForwardCollectives + l.tpBackwardCollectives;

  // Stage cuts: balanced over forward + backward (+ recomputation) times
  // when the plan does not give them.
  bool recomputeAll = plan.recompute == "full";
  if (plan.stageStarts.empty() && stages > 1) {
    std::vector<double> cost(layers), cut(layers);
    for (int l = 0; l < layers; ++l) {
      cost[l] = lt.forward[l] + lt.backward[l] + lt.tpForward[l] +
                lt.tpBackward[l] + (recomputeAll ? lt.forward[l] : 0);
      cut[l] = model.layers[l].outBytes;
    }
    auto key = std::make_tuple(plan.tp, parts, stages, recomputeAll);
    if (auto it = cutCache.find(key); it != cutCache.end()) {
      plan.stageStarts = it->second;
    } else if (plan.virtualStages > 1 && layers % stages == 0) {
      for (int s = 1; s < stages; ++s)
        plan.stageStarts.push_back(unsigned(s * (layers / stages)));
    } else {
      llvm::SmallVector<unsigned> firsts = balanceStages(cost, cut, stages);
      plan.stageStarts.assign(firsts.begin() + 1, firsts.end());
      cutCache[key] = plan.stageStarts;
    }
  }
  if (stages > 1 && int(plan.stageStarts.size()) != stages - 1)
    return reject("stage cuts do not match the stages");
  std::vector<int> firstLayer = {0};
  for (unsigned s : plan.stageStarts)
    firstLayer.push_back(int(s));
  firstLayer.push_back(layers);
  for (int s = 0; s < stages; ++s)
    if (firstLayer[s] >= firstLayer[s + 1] || firstLayer[s + 1] > layers)
      return reject("stage cuts must be increasing layer indices");

  // Which layers recompute: every one with recompute=full, or the first
  // share of each rank's layers by Merak's stage-aware ratio.
  std::vector<bool> layerRecomputes(layers, false), stageRecomputes(stages);
  for (int s = 0; s < stages; ++s) {
    int n = firstLayer[s + 1] - firstLayer[s];
    double share = recomputeAll ? 1.0 : 0.0;
    if (recomputeAll && plan.recomputeRatio >= 0) {
      int rank = s % plan.pp;
      share = rank == plan.pp - 1
                  ? 0.0
                  : 1.0 - (1.0 - plan.recomputeRatio) * double(plan.pp - 1) /
                              double(plan.pp - rank);
      share = std::clamp(share, 0.0, 1.0);
    }
    int count = int(std::lround(share * n));
    for (int k = 0; k < count; ++k)
      layerRecomputes[firstLayer[s] + k] = true;
    stageRecomputes[s] = count > 0;
  }

  // Per-stage task times and memory per micro-batch.
  pipeline::TaskTimes tt;
  std::vector<double> held(stages), transient(stages), paramsOf(stages),
      splitParamsOf(stages), tpTimeOf(stages);
  bool ppCross = crossesNodes(hw, devices, 2, plan.dp * plan.tp) && plan.pp > 1;
  double maxOut = 0;
  for (int s = 0; s < stages; ++s) {
    double f = 0, b = 0, w = 0, r = 0, tpTime = 0;
    for (int l = firstLayer[s]; l < firstLayer[s + 1]; ++l) {
      const LayerProfile &lp = model.layers[l];
      f += lt.forward[l] + lt.tpForward[l];
      b += lt.backward[l] + lt.tpBackward[l];
      w += lt.weight[l];
      tpTime += lt.tpForward[l] + lt.tpBackward[l];
      double saved =
          (lp.savedBytes - lp.splitSavedBytes + lp.splitSavedBytes / plan.tp) *
          scale;
      double in = l > 0 ? model.layers[l - 1].outBytes * scale : 0;
      if (layerRecomputes[l]) {
        r += lt.forward[l] + lt.tpForward[l];
        held[s] += in;
        transient[s] += saved;
      } else {
        held[s] += saved;
      }
      paramsOf[s] +=
          lp.paramBytes - lp.splitParamBytes + lp.splitParamBytes / plan.tp;
    }
    double out = s + 1 < stages
                     ? model.layers[firstLayer[s + 1] - 1].outBytes * scale
                     : 0;
    maxOut = std::max(maxOut, out);
    tt.forward.push_back(f);
    tt.backward.push_back(b);
    tt.weight.push_back(std::min(w, b));
    tt.recompute.push_back(r);
    tt.transfer.push_back(hw.transferTime(out, ppCross));
    tpTimeOf[s] = tpTime;
  }

  // A pipelined step sums each micro-batch's weight gradients into the
  // step's (the runtime reads both and writes one), after each backward;
  // each of its tasks costs the calibrated overhead of a task besides.
  if (plan.pipelined() && plan.microbatches > 1)
    for (int s = 0; s < stages; ++s)
      tt.backward[s] +=
          gradientSumTime(hw, paramsOf[s]) * model.gradientSumScale;
  // A split backward is two tasks (B, then W: the backward less the
  // weight, and the weight).
  const bool splitBackward = pipeline::parseScheduleKind(plan.schedule) ==
                             pipeline::ScheduleKind::ZeroBubbleH1;
  const double overhead = plan.pipelined() ? model.taskOverhead : 0;
  for (int s = 0; s < stages && overhead > 0; ++s) {
    tt.forward[s] += overhead;
    tt.backward[s] += splitBackward ? 2 * overhead : overhead;
    tt.weight[s] += splitBackward ? overhead : 0;
    if (tt.recompute[s] > 0)
      tt.recompute[s] += overhead;
  }

  // The first stage sends no input gradient back: a split backward runs
  // all of its work as W (one task).
  if (stages > 1)
    tt.weight[0] = tt.backward[0] - (splitBackward ? overhead : 0);
  for (int s = 0; s < stages; ++s)
    e.stages.push_back({tt.forward[s], tt.backward[s], tt.weight[s],
                        tt.recompute[s], tt.transfer[s]});

  // Cheap bounds first: memory before activations, and compute alone.
  {
    std::vector<double> params(plan.pp, 0), work(plan.pp, 0);
    for (int s = 0; s < stages; ++s) {
      params[s % plan.pp] += paramsOf[s];
      work[s % plan.pp] += plan.microbatches *
                           (tt.forward[s] + tt.backward[s] + tt.recompute[s]);
    }
    for (int r = 0; r < plan.pp; ++r) {
      double fixed =
          staticMemory(params[r], plan.zero, plan.dp, model.optimizerStates);
      if (memoryLimit > 0 && fixed > memoryLimit) {
        e.memory = fixed;
        e.fullestRank = r;
        e.bound = "memory";
        return reject("needs " + formatBytes(fixed) +
                      " for parameters, gradients and optimizer state on "
                      "rank " +
                      std::to_string(r) + ", over the " +
                      formatBytes(memoryLimit) + " limit");
      }
      if (work[r] > pruneAbove) {
        e.bound = "slower";
        return reject("slower than a better plan by its compute alone");
      }
    }
  }

  // The pipeline: simulated with these times, or one forward and backward.
  double pipelineTime = 0;
  std::vector<double> heldPerRank(plan.pp, 0);
  std::vector<double> busy(plan.pp, 0);
  if (plan.pipelined()) {
    if (plan.schedule.empty())
      plan.schedule = "1f1b";
    // A schedule's makespan, busy time and held activations grow linearly
    // in the micro-batches once its warm-up is over: long pipelines are
    // simulated at 2 and 3 micro-batches per stage and extrapolated.
    int m1 = plan.microbatches, m2 = plan.microbatches;
    if (plan.microbatches > 3 * stages) {
      m1 = 2 * stages;
      m2 = 3 * stages;
    }
    std::string key =
        llvm::formatv("{0}/{1}/{2}/{3}/{4}/{5}/{6}/", plan.tp, parts,
                      plan.schedule, plan.pp, plan.virtualStages,
                      plan.microbatches, plan.recomputeRatio)
            .str();
    for (unsigned first : plan.stageStarts)
      key += std::to_string(first) + ",";
    key += plan.recompute;
    auto cached = outcomeCache.find(key);
    if (cached == outcomeCache.end()) {
      auto run = [&](int m, Outcome &out) -> bool {
        Plan shaped = plan;
        shaped.microbatches = m;
        const pipeline::Schedule *sched =
            schedule(shaped, stageRecomputes, out.error);
        if (!sched)
          return false;
        llvm::Expected<pipeline::Simulation> sim =
            pipeline::simulate(*sched, &tt);
        if (!sim) {
          out.error = llvm::toString(sim.takeError());
          return false;
        }
        out.makespan = sim->makespan;
        out.busy = sim->busy;
        out.held = pipeline::peakHeld(*sched, held);
        return true;
      };
      Outcome a, b;
      if (run(m1, a) && m2 != m1) {
        if (!run(m2, b)) {
          a.error = b.error;
        } else {
          double k = double(plan.microbatches - m1) / double(m2 - m1);
          auto extend = [&](double x, double y) { return x + k * (y - x); };
          a.makespan = extend(a.makespan, b.makespan);
          for (size_t r = 0; r < a.busy.size(); ++r) {
            a.busy[r] = extend(a.busy[r], b.busy[r]);
            a.held[r] = extend(a.held[r], b.held[r]);
          }
        }
      }
      cached = outcomeCache.emplace(key, std::move(a)).first;
    }
    const Outcome &a = cached->second;
    if (!a.error.empty())
      return reject(a.error);
    pipelineTime = a.makespan;
    busy = a.busy;
    heldPerRank = a.held;
    // Tied parameters whose readers sit on several ranks: each owner sends
    // its gradient to the others and sums them all (zeros, then one
    // accumulation per owner), after the last backward.
    for (const TiedParam &t : model.tied) {
      std::set<int> owners;
      for (int l : t.layers) {
        int s = int(std::upper_bound(firstLayer.begin(), firstLayer.end(), l) -
                    firstLayer.begin()) -
                1;
        owners.insert(s % plan.pp);
      }
      if (owners.size() < 2)
        continue;
      double bytes = t.split ? t.bytes / plan.tp : t.bytes;
      pipelineTime +=
          hw.transferTime(bytes, ppCross) +
          (hw.memoryBandwidth > 0
               ? (3 * double(owners.size()) + 1) * bytes / hw.memoryBandwidth
               : 0);
    }
    double total = 0;
    for (double x : busy)
      total += x;
    e.bubble = pipelineTime > 0
                   ? 1.0 - total / (pipelineTime * double(busy.size()))
                   : 0;
  } else {
    pipelineTime = tt.forward[0] + tt.backward[0];
    busy[0] = pipelineTime;
    heldPerRank[0] = held[0];
  }

  // Data parallelism: the gradients of each rank's parameters reduced over
  // dp (reduce-scatter and all-gather under ZeRO, and ZeRO-3's parameter
  // gathers in forward and backward), after the pipeline, or overlapping
  // backward without one.
  bool dpCross = crossesNodes(hw, devices, plan.dp, plan.tp);
  std::vector<double> rankParams(plan.pp, 0), rankTp(plan.pp, 0),
      rankTransient(plan.pp, 0), rankReaders(plan.pp, 0),
      rankParamBytes(plan.pp, 0), rankGathered(plan.pp, 0);
  for (int s = 0; s < stages; ++s) {
    rankParams[s % plan.pp] += paramsOf[s];
    for (int l = firstLayer[s]; l < firstLayer[s + 1]; ++l) {
      const LayerProfile &lp = model.layers[l];
      rankReaders[s % plan.pp] += lp.paramReaders;
      rankParamBytes[s % plan.pp] += lp.paramBytes;
      rankGathered[s % plan.pp] += std::max(lp.gatheredBytes, lp.paramBytes);
    }
    rankTp[s % plan.pp] += tpTimeOf[s] * plan.microbatches;
    rankTransient[s % plan.pp] =
        std::max(rankTransient[s % plan.pp], transient[s]);
  }
  double states = model.optimizerStates;
  double best = -1;
  for (int r = 0; r < plan.pp; ++r) {
    double p = rankParams[r];
    double dpTime = 0;
    if (plan.dp > 1) {
      double sent = collectiveBytes(CollectiveKind::AllReduce, plan.dp, p, p);
      // The gradients' reduction: an all-reduce, or a reduce-scatter under
      // ZeRO; under ZeRO-1 and -2 the updated shards are gathered after
      // the update (ZeRO-3's stay shards).
      double reduce =
          plan.zero == 0
              ? hw.collectiveTime("allreduce", plan.dp, dpCross, sent)
              : hw.collectiveTime("reducescatter", plan.dp, dpCross, sent / 2);
      double gatherUpdated =
          plan.zero == 1 || plan.zero == 2
              ? hw.collectiveTime("allgather", plan.dp, dpCross, sent / 2)
              : 0;
      if (!plan.pipelined() && plan.zero != 3) {
        // Buckets (25 MB, ZeRO's 2 MB: --merak-grad-buckets' defaults)
        // reduce while backward runs; the last one, or what backward does
        // not hide, is exposed; what it hides slows it by the overlap
        // coefficient's excess.
        double backward = tt.backward[0];
        double bucket = plan.zero == 0 ? 25e6 : 2e6;
        double tail = reduce * std::min(1.0, bucket / std::max(p, 1.0));
        double exposed = std::max(reduce - backward, tail);
        reduce = exposed + (hw.overlapCoefficient - 1) * (reduce - exposed);
      }
      // The step waits for the end of the reduction (and for the gather
      // after the update) from compute: a stall each.
      const char *reduction = plan.zero == 0 ? "allreduce" : "reducescatter";
      dpTime = reduce + hw.collectiveStall(reduction, plan.dp, dpCross);
      if (gatherUpdated > 0)
        dpTime +=
            gatherUpdated + hw.collectiveStall("allgather", plan.dp, dpCross);
      // ZeRO-3 gathers each reader's parameters right before it, in
      // forward (a parameter once per reader) and again in backward, and
      // the reader waits: the bytes, a collective's latency and the stall
      // per reader. Backward's reduce-scatters run on the same group's
      // worker as those gathers, in order, so the gathers wait behind
      // them: the reduction above is exposed whole.
      if (plan.zero == 3) {
        double latency = hw.collectiveTime("allgather", plan.dp, dpCross, 0);
        double perByte =
            hw.collectiveTime("allgather", plan.dp, dpCross, sent / 2) -
            latency;
        double repeated =
            rankParamBytes[r] > 0 ? rankGathered[r] / rankParamBytes[r] : 1.0;
        dpTime +=
            perByte * (1 + repeated) +
            2 * rankReaders[r] *
                (latency + hw.collectiveStall("allgather", plan.dp, dpCross));
      }
    }
    double sharded = plan.dp > 1 ? 1.0 / plan.dp : 1.0;
    double optParams = plan.zero >= 1 ? p * sharded : p;
    double optimizer = hw.memoryBandwidth > 0
                           ? optParams * (3 + 2 * states) / hw.memoryBandwidth
                           : 0;
    double step = pipelineTime + dpTime + optimizer;
    // Memory of this rank.
    double params = plan.zero >= 3 ? p * sharded : p;
    double grads = plan.zero >= 2 ? p * sharded : p;
    double opt =
        staticMemory(p, plan.zero, plan.dp, int(states)) - params - grads;
    // With several micro-batches the step's gradients are summed whole (the
    // reductions wait for the update), and the last micro-batch's own are
    // alive beside them when its backward returns.
    if (plan.pipelined() && plan.microbatches > 1)
      grads = 2 * p;
    double acts = (heldPerRank[r] + rankTransient[r]) * model.activationScale;
    // Transfer buffers; ZeRO-3's gathered layer; under ZeRO-1 and -2 the
    // updated shards gathered into whole parameters, written beside the
    // parameters they replace at the end of the step.
    double buffers =
        2 * maxOut + (plan.zero >= 3 ? p / stages : 0) +
        (plan.dp > 1 && (plan.zero == 1 || plan.zero == 2) ? p : 0);
    double total = params + grads + opt + acts + buffers;
    if (total > e.memory) {
      e.memory = total;
      e.parameters = params;
      e.gradients = grads;
      e.optimizerState = opt;
      e.activations = acts;
      e.buffers = buffers;
      e.fullestRank = r;
    }
    if (step > best) {
      best = step;
      e.stepTime = step;
      e.pipelineTime = pipelineTime;
      e.dataParallelTime = dpTime;
      e.optimizerTime = optimizer;
      e.computeTime = busy[r] - rankTp[r];
      e.tensorParallelTime = rankTp[r];
    }
  }
  // What bounds it most.
  std::vector<std::pair<double, std::string>> parts2 = {
      {e.computeTime, "compute"},
      {e.tensorParallelTime, "tensor-parallel"},
      {e.bubble * e.pipelineTime, "bubble"},
      {e.dataParallelTime, "data-parallel"}};
  e.bound = std::max_element(parts2.begin(), parts2.end())->second;
  if (memoryLimit > 0 && e.memory > memoryLimit) {
    e.infeasible = "needs " + formatBytes(e.memory) + " on rank " +
                   std::to_string(e.fullestRank) + ", over the " +
                   formatBytes(memoryLimit) + " limit";
    e.bound = "memory";
  }
  return e;
}

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0)
      out.push_back(d);
  return out;
}

} // namespace

Estimate merak::autoparallel::evaluatePlan(const ModelProfile &model,
                                           const HardwareProfile &hw,
                                           Plan &plan, double memoryLimit) {
  Evaluator ev(model, hw, plan.dp * plan.tp * plan.pp);
  return ev.evaluate(plan, memoryLimit);
}

SearchResult merak::autoparallel::searchPlans(const ModelProfile &model,
                                              const HardwareProfile &hw,
                                              const SearchOptions &options) {
  auto started = std::chrono::steady_clock::now();
  SearchResult result;
  double limit = options.memory > 0 ? options.memory : hw.memoryCapacity;
  int n = options.devices;
  int maxTp = options.maxTp > 0 ? options.maxTp : hw.devicesPerNode;
  int layers = int(model.layers.size());
  Evaluator ev(model, hw, n);
  std::map<std::string, int> rejected;
  // Every plan runs the global batch as micro-batches of the traced batch.
  int64_t global = options.globalBatch > 0 ? options.globalBatch : model.batch;
  if (global % model.batch != 0) {
    result.error = llvm::formatv("batch={0} is not a multiple of the traced "
                                 "batch of {1} samples (a micro-batch)",
                                 global, model.batch)
                       .str();
    return result;
  }
  int m = int(global / model.batch);
  std::vector<ScoredPlan> feasible;
  result.leastMemory = std::numeric_limits<double>::infinity();

  // Plans whose compute alone is twice the best step so far are not
  // simulated: neither they nor their alternatives would be chosen.
  double bestTime = std::numeric_limits<double>::infinity();
  auto consider = [&](Plan plan) {
    Estimate e = ev.evaluate(plan, limit, 2 * bestTime);
    ++result.evaluated;
    if (!e.infeasible.empty()) {
      // Group reasons by their kind, not their numbers.
      std::string kind = e.infeasible.substr(0, e.infeasible.find('='));
      if (e.bound == "memory")
        kind = "memory over the limit";
      if (e.bound == "slower")
        kind = e.infeasible;
      ++rejected[kind];
      return;
    }
    bestTime = std::min(bestTime, e.stepTime);
    feasible.push_back({std::move(plan), e});
  };

  // Every plan of the search space, in a fixed order.
  auto enumerate = [&](bool count, llvm::function_ref<void(Plan)> visit) {
    for (int tp : divisors(n)) {
      if (tp > maxTp)
        continue;
      if (tp > 1 && !model.tpRefusal.empty()) {
        if (count)
          ++rejected["tensor parallelism: " + model.tpRefusal];
        continue;
      }
      bool tpOk = true;
      for (int64_t dim : model.tpDims)
        tpOk &= dim % tp == 0;
      if (!tpOk) {
        if (count)
          ++rejected["tp does not divide heads, hidden or vocabulary"];
        continue;
      }
      for (int pp : divisors(n / tp)) {
        if (pp > layers)
          continue;
        int dp = n / (tp * pp);
        if (model.batch % dp != 0) {
          if (count)
            ++rejected["dp does not divide the batch"];
          continue;
        }
        {
          std::vector<std::string> schedules;
          if (pp == 1)
            schedules = {m == 1 ? "" : "1f1b"};
          else
            schedules = options.schedules;
          for (const std::string &schedule : schedules) {
            int virtualStages = schedule == "interleaved-1f1b" ? 2 : 1;
            if (pp > 1 && m < pp && schedule != "gpipe") {
              if (count)
                ++rejected["fewer micro-batches than pipeline ranks"];
              continue;
            }
            if (virtualStages > 1 && (layers < pp * virtualStages || m % pp)) {
              if (count)
                ++rejected["interleaving needs micro-batches a multiple of "
                           "pp and two layers per rank"];
              continue;
            }
            for (int zero = 0; zero <= 3; ++zero) {
              for (int rc = 0; rc < 2; ++rc) {
                Plan plan;
                plan.dp = dp;
                plan.tp = tp;
                plan.pp = pp;
                plan.microbatches = m;
                plan.schedule = schedule;
                plan.virtualStages = virtualStages;
                plan.zero = zero;
                plan.vocabParallel = model.vocabParallel;
                plan.recompute = rc ? "full" : "none";
                if (plan.pipelined() && plan.schedule.empty())
                  plan.schedule = "1f1b";
                if (zero == 3 && plan.pipelined())
                  continue;
                if (zero > 0 && dp == 1)
                  continue;
                visit(std::move(plan));
              }
            }
          }
        }
      }
    }
  };
  enumerate(true, consider);
  // No plan fits: the least memory any plan needs, each priced in full.
  if (feasible.empty()) {
    result.leastMemory = std::numeric_limits<double>::infinity();
    enumerate(false, [&](Plan plan) {
      Estimate e = ev.evaluate(plan, 0);
      if (e.infeasible.empty())
        result.leastMemory = std::min(result.leastMemory, e.memory);
    });
  }

  // Fastest first; plans within 0.1% of each other by the least memory.
  std::stable_sort(feasible.begin(), feasible.end(),
                   [](const ScoredPlan &a, const ScoredPlan &b) {
                     double ta = a.estimate.stepTime, tb = b.estimate.stepTime;
                     if (std::fabs(ta - tb) > 1e-3 * std::max(ta, tb))
                       return ta < tb;
                     return a.estimate.memory < b.estimate.memory;
                   });
  // The best, then the best alternatives that differ in their degrees,
  // schedule or ZeRO stage (not only in micro-batches).
  std::vector<ScoredPlan> ranked;
  for (ScoredPlan &s : feasible) {
    if (int(ranked.size()) > options.alternatives)
      break;
    bool similar = false;
    for (const ScoredPlan &r : ranked)
      similar |= r.plan.dp == s.plan.dp && r.plan.tp == s.plan.tp &&
                 r.plan.pp == s.plan.pp && r.plan.zero == s.plan.zero &&
                 r.plan.schedule == s.plan.schedule &&
                 r.plan.recompute == s.plan.recompute;
    if (!similar)
      ranked.push_back(std::move(s));
  }
  result.ranked = std::move(ranked);
  for (auto &[why, count] : rejected)
    result.rejected.push_back({why, count});
  if (result.ranked.empty()) {
    if (std::isfinite(result.leastMemory) && result.leastMemory > limit)
      result.error =
          llvm::formatv("no plan over {0} devices fits in {1} per "
                        "device; the plan that needs least needs "
                        "{2} per device",
                        n, formatBytes(limit), formatBytes(result.leastMemory))
              .str();
    else
      result.error = llvm::formatv("no plan over {0} devices applies to this "
                                   "model",
                                   n)
                         .str();
    for (auto &[why, count] : rejected)
      result.error += llvm::formatv("; {0} plan(s): {1}", count, why).str();
  }
  if (!std::isfinite(result.leastMemory))
    result.leastMemory = 0;
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
          .count();
  return result;
}

double merak::autoparallel::workTime(const HardwareProfile &hw,
                                     const std::string &computeType,
                                     const OpWork &work) {
  return opTime(hw, computeType, work, 1.0);
}

namespace {

/// Whether a profile's op of this name is compute the model prices per
/// layer: not a collective, its wait, nor an optimizer update.
bool pricedPerLayer(llvm::StringRef name) {
  return !name.starts_with("mesh.") && name != "wait" &&
         !name.ends_with("_update");
}

/// Milliseconds per step of a profile's `ops` that the model prices per
/// layer (entries checked by calibrateOne's rules; others count nothing).
double kernelMs(const json &ops) {
  double ms = 0;
  if (!ops.is_object())
    return 0;
  for (auto it = ops.begin(); it != ops.end(); ++it)
    if (pricedPerLayer(it.key()) && it->is_object() &&
        it->contains("ms_per_step") && (*it)["ms_per_step"].is_number())
      ms += std::max((*it)["ms_per_step"].get<double>(), 0.0);
  return ms;
}

/// The forward share of a pipelined run's task time (`tasks` of a
/// `--profile-json` file) against the model's for that run: forward and
/// backward scales that keep the model's total and give its split.
std::string calibrateSplit(ModelProfile &model, const HardwareProfile &hw,
                           const std::string &path, const json &doc) {
  const json &tasks = doc["tasks"];
  auto number = [&](const char *key, double &out) -> std::string {
    if (!tasks.contains(key) || !tasks[key].is_number() ||
        tasks[key].get<double>() < 0)
      return path + ": tasks." + key + ": expected a non-negative number";
    out = tasks[key].get<double>();
    return "";
  };
  double forward = 0, backward = 0, weight = 0;
  for (auto [key, out] :
       {std::pair<const char *, double *>{"forward_ms", &forward},
        {"backward_ms", &backward},
        {"weight_ms", &weight}})
    if (std::string error = number(key, *out); !error.empty())
      return error;
  if (forward <= 0 || backward + weight <= 0)
    return path + ": tasks: no forward or backward task time (profile a "
                  "pipelined plan on one rank)";
  double microbatches = 1;
  if (tasks.contains("microbatches"))
    if (std::string error = number("microbatches", microbatches);
        !error.empty())
      return error;
  microbatches = std::max(microbatches, 1.0);
  // The gradient sums the run timed (outside the kernels), where it did.
  double measuredSums = -1;
  if (tasks.contains("gradient_sum_ms"))
    if (std::string error = number("gradient_sum_ms", measuredSums);
        !error.empty())
      return error;
  // The model's figures for that run: each micro-batch is the traced batch
  // (a pipelined plan runs it `microbatches` times a step), and with
  // several each backward sums its gradients into the step's.
  double predictedForward = 0, predictedBackward = 0, params = 0;
  for (const LayerProfile &l : model.layers) {
    predictedForward += opsTime(model, hw, l.forward, 1.0, 1);
    predictedBackward += opsTime(model, hw, l.backward, 1.0, 1);
    params += l.paramBytes;
  }
  if (predictedForward <= 0 || predictedBackward <= 0)
    return "";
  // Per micro-batch, in seconds: one forward and one backward task each.
  forward /= microbatches * 1e3;
  backward = (backward + weight) / (microbatches * 1e3);
  // The sum of a micro-batch's gradients into the step's, per backward
  // task: as the run timed it, which scales the model's figure for every
  // plan; else the model's figure (a profile's memory bandwidth far from
  // this machine's may price it above the backward it is part of: at
  // most half of it).
  double sum = 0;
  if (measuredSums >= 0) {
    sum = std::min(measuredSums / (microbatches * 1e3), 0.5 * backward);
    double predicted = gradientSumTime(hw, params);
    if (predicted > 0 && sum > 0)
      model.gradientSumScale = sum / predicted;
  } else if (microbatches > 1) {
    sum = std::min(gradientSumTime(hw, params), 0.5 * backward);
  }
  // What a task takes beyond its kernels: the run's task time less the
  // kernel time it measured (the optimizer's and collectives' left out:
  // they run outside the tasks) and less the gradient sums the model
  // prices apart (the runtime adds each backward's gradients into the
  // step's outside the programs' kernels), per task. Without kernel
  // times, what the two tasks took beyond the model's figures, each. At
  // most half the shorter task (a larger gap is noise or the kernels'
  // calibration, not a cost per task).
  double kernels = doc.contains("ops") ? kernelMs(doc["ops"]) / 1e3 : 0;
  double overhead =
      kernels > 0
          ? (microbatches * (forward + backward - sum) - kernels) /
                (microbatches * (weight > 0 ? 3 : 2))
          : (forward + backward - predictedForward - predictedBackward - sum) /
                2;
  model.taskOverhead =
      std::clamp(overhead, 0.0, 0.5 * std::min(forward, backward));
  double f = std::max(forward - model.taskOverhead, 0.0);
  // (A split backward is two tasks, B and W.)
  double b =
      std::max(backward - model.taskOverhead * (weight > 0 ? 2 : 1) - sum, 0.0);
  if (f <= 0 || b <= 0)
    return "";
  double share = f / (f + b);
  double total = predictedForward + predictedBackward;
  model.forwardScale = share * total / predictedForward;
  model.backwardScale = (1 - share) * total / predictedBackward;
  return "";
}

json readProfile(const std::string &path, std::string &error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = path + ": cannot open";
    return {};
  }
  try {
    return json::parse(in);
  } catch (const json::exception &e) {
    error = path + ": not JSON: " + e.what();
    return {};
  }
}

std::string calibrateOne(ModelProfile &model, const HardwareProfile &hw,
                         const std::string &path, const json &doc);

} // namespace

std::string merak::autoparallel::calibrate(ModelProfile &model,
                                           const HardwareProfile &hw,
                                           const std::string &paths) {
  // The unpartitioned step's profiles first (kernel scales, memory), then
  // the pipelined runs' (the forward share, priced with those scales).
  std::vector<std::pair<std::string, json>> steps, pipelined;
  llvm::SmallVector<llvm::StringRef> list;
  llvm::StringRef(paths).split(list, ',');
  for (llvm::StringRef path : list) {
    std::string error;
    json doc = readProfile(path.str(), error);
    if (!error.empty())
      return error;
    if (doc.is_object() && doc.contains("tasks"))
      pipelined.emplace_back(path.str(), std::move(doc));
    else
      steps.emplace_back(path.str(), std::move(doc));
  }
  for (const auto &[path, doc] : steps)
    if (std::string error = calibrateOne(model, hw, path, doc); !error.empty())
      return error;
  for (const auto &[path, doc] : pipelined) {
    if (!doc["tasks"].is_object())
      return path + ": tasks: expected an object";
    if (std::string error = calibrateSplit(model, hw, path, doc);
        !error.empty())
      return error;
  }
  return "";
}

namespace {

/// Scales each op of the model by its own measured time, within its
/// class's: an op and result shape that `top_shapes` lists by the time
/// measured for it, the other shapes of an op name by what is left of the
/// name's time (`ops`), an op the run did not time by its class's scale;
/// then each class's scales by one factor, so that the class's total is
/// what it measured (the time of ops the model does not count, a reshape's
/// copy, spread over the rest as the class scales spread it).
std::string calibrateSignatures(ModelProfile &model, const HardwareProfile &hw,
                                const std::string &path, const json &doc) {
  size_t n = model.signatures.size();
  model.signatureScales.assign(n, 0);
  if (n == 0)
    return "";
  llvm::StringMap<double> measured;
  if (doc.contains("top_shapes")) {
    const json &top = doc["top_shapes"];
    if (!top.is_array())
      return path + ": top_shapes: expected an array";
    for (size_t i = 0; i < top.size(); ++i) {
      const json &e = top[i];
      if (!e.is_object() || !e.contains("op") || !e["op"].is_string() ||
          !e.contains("ms_per_step") || !e["ms_per_step"].is_number() ||
          e["ms_per_step"].get<double>() < 0)
        return llvm::formatv("{0}: top_shapes[{1}]: expected an \"op\" "
                             "string and a non-negative \"ms_per_step\"",
                             path, i)
            .str();
      measured[e["op"].get<std::string>()] += e["ms_per_step"].get<double>();
    }
  }
  auto nameOf = [](llvm::StringRef signature) {
    return signature.split(" ->").first;
  };
  // Predicted milliseconds per signature, for the run the file profiled.
  std::vector<double> predicted(n, 0);
  for (const LayerProfile &l : model.layers)
    for (const std::vector<OpWork> *ops : {&l.forward, &l.backward})
      for (const OpWork &w : *ops) {
        double t = workTime(hw, model.computeType, w) * 1e3;
        for (auto [s, share] : w.parts)
          if (s >= 0 && size_t(s) < n)
            predicted[s] += t * share;
      }
  // What each name measured beyond its listed shapes, and what the model
  // predicts for the shapes not listed.
  llvm::StringMap<double> restMeasured, restPredicted;
  const json &ops = doc["ops"];
  for (size_t s = 0; s < n; ++s) {
    llvm::StringRef name = nameOf(model.signatures[s]);
    if (!restMeasured.count(name))
      restMeasured[name] = ops.contains(name.str())
                               ? ops[name.str()]["ms_per_step"].get<double>()
                               : 0;
    auto it = measured.find(model.signatures[s]);
    if (it != measured.end())
      restMeasured[name] -= it->second;
    else
      restPredicted[name] += predicted[s];
  }
  std::vector<double> &scales = model.signatureScales;
  double classTarget[2] = {0, 0}, classPriced[2] = {0, 0};
  for (size_t s = 0; s < n; ++s) {
    llvm::StringRef name = nameOf(model.signatures[s]);
    bool gemm = isGemmOpName(name);
    double base = gemm ? model.gemmScale : model.otherScale;
    double scale = base;
    auto it = measured.find(model.signatures[s]);
    if (predicted[s] > 0 && it != measured.end() && it->second > 0)
      scale = it->second / predicted[s];
    else if (it == measured.end() && restMeasured[name] > 0 &&
             restPredicted[name] > 0)
      scale = restMeasured[name] / restPredicted[name];
    // A shape far off its class is more likely noise than a kernel that
    // slow or fast.
    scales[s] = std::clamp(scale, base / 4, base * 4);
    classPriced[gemm] += predicted[s] * scales[s];
    classTarget[gemm] += predicted[s] * base;
  }
  for (size_t s = 0; s < n; ++s) {
    bool gemm = isGemmOpName(nameOf(model.signatures[s]));
    if (classPriced[gemm] > 0)
      scales[s] *= classTarget[gemm] / classPriced[gemm];
  }
  auto scaleOf = [&](OpWork &w) {
    double total = 0, weighted = 0;
    for (auto [s, share] : w.parts)
      if (s >= 0 && size_t(s) < n) {
        weighted += share * scales[s];
        total += share;
      }
    w.scale = total > 0 ? weighted / total : 0;
  };
  for (LayerProfile &l : model.layers)
    for (std::vector<OpWork> *ops : {&l.forward, &l.backward, &l.weight})
      for (OpWork &w : *ops)
        scaleOf(w);
  return "";
}

std::string calibrateOne(ModelProfile &model, const HardwareProfile &hw,
                         const std::string &path, const json &doc) {
  if (!doc.is_object() || !doc.contains("ops") || !doc["ops"].is_object())
    return path + ": no \"ops\" object (write it with merak-exec "
                  "--profile-json)";
  double gemm = 0, other = 0;
  for (auto it = doc["ops"].begin(); it != doc["ops"].end(); ++it) {
    const std::string &kind = it.key();
    const json &entry = *it;
    if (!entry.is_object() || !entry.contains("ms_per_step") ||
        !entry["ms_per_step"].is_number() ||
        entry["ms_per_step"].get<double>() < 0)
      return path + ": ops." + kind +
             ".ms_per_step: expected a "
             "non-negative number";
    double ms = entry["ms_per_step"].get<double>();
    llvm::StringRef name(kind);
    if (!pricedPerLayer(name))
      continue;
    if (isGemmOpName(name))
      gemm += ms;
    else
      other += ms;
  }
  // What the model predicts for that run: the step on one device, the
  // traced batch at once.
  double predictedGemm = 0, predictedOther = 0;
  for (const LayerProfile &l : model.layers)
    for (const std::vector<OpWork> *ops : {&l.forward, &l.backward})
      for (const OpWork &w : *ops)
        (w.contraction ? predictedGemm : predictedOther) +=
            opTime(hw, model.computeType, w, 1.0) * 1e3;
  if (gemm <= 0 || predictedGemm <= 0)
    return path + ": no GEMM time to calibrate with (profile the "
                  "unpartitioned step on one device)";
  model.gemmScale = gemm / predictedGemm;
  model.otherScale =
      predictedOther > 0 && other > 0 ? other / predictedOther : 1.0;
  if (std::string error = calibrateSignatures(model, hw, path, doc);
      !error.empty())
    return error;

  // Memory: the run's peak holds the parameters, their gradients and
  // optimizer state (as the model counts them), the activations kept for
  // backward and the kernels' temporaries (the executor's arena and what
  // it allocates beside it); over the activations the model keeps, the
  // rest scales every plan's activations.
  if (!doc.contains("peak_bytes"))
    return "";
  if (!doc["peak_bytes"].is_number() || doc["peak_bytes"].get<double>() < 0)
    return path + ": peak_bytes: expected a non-negative number";
  double params = 0, saved = 0;
  for (const LayerProfile &l : model.layers) {
    params += l.paramBytes;
    saved += l.savedBytes;
  }
  double rest =
      doc["peak_bytes"].get<double>() - params * (2 + model.optimizerStates);
  if (rest > 0 && saved > 0)
    model.activationScale = std::clamp(rest / saved, 1.0, 4.0);
  return "";
}

} // namespace

namespace {

json planJson(const ScoredPlan &s) {
  const Plan &p = s.plan;
  const Estimate &e = s.estimate;
  json stages = json::array();
  for (unsigned first : p.stageStarts)
    stages.push_back(first);
  json tasks = json::array();
  for (const Estimate::StageTimes &t : e.stages)
    tasks.push_back({{"forward_seconds", t.forward},
                     {"backward_seconds", t.backward},
                     {"weight_seconds", t.weight},
                     {"recompute_seconds", t.recompute},
                     {"transfer_seconds", t.transfer}});
  return {{"options", p.options()},
          {"dp", p.dp},
          {"tp", p.tp},
          {"pp", p.pp},
          {"virtual", p.virtualStages},
          {"microbatches", p.microbatches},
          {"schedule", p.schedule},
          {"zero", p.zero},
          {"recompute", p.recompute},
          {"vocab_parallel", p.vocabParallel},
          {"stage_starts", stages},
          {"predicted",
           {{"step_seconds", e.stepTime},
            {"samples_per_step", e.samples},
            {"pipeline_seconds", e.pipelineTime},
            {"compute_seconds", e.computeTime},
            {"tensor_parallel_seconds", e.tensorParallelTime},
            {"tensor_parallel_collectives", e.tensorParallelCollectives},
            {"data_parallel_seconds", e.dataParallelTime},
            {"optimizer_seconds", e.optimizerTime},
            {"bubble", e.bubble},
            {"bound", e.bound},
            {"stages", tasks}}},
          {"memory",
           {{"rank", e.fullestRank},
            {"total_bytes", e.memory},
            {"parameters_bytes", e.parameters},
            {"gradients_bytes", e.gradients},
            {"optimizer_state_bytes", e.optimizerState},
            {"activations_bytes", e.activations},
            {"buffers_bytes", e.buffers}}}};
}

} // namespace

std::string merak::autoparallel::reportJson(const ModelProfile &model,
                                            const HardwareProfile &hw,
                                            const SearchOptions &options,
                                            const SearchResult &result) {
  json doc;
  doc["devices"] = options.devices;
  doc["batch"] = options.globalBatch > 0 ? options.globalBatch : model.batch;
  doc["memory_limit_bytes"] =
      options.memory > 0 ? options.memory : hw.memoryCapacity;
  doc["hardware"] = {{"name", hw.name},
                     {"source", hw.source},
                     {"device", hw.device},
                     {"devices_per_node", hw.devicesPerNode}};
  doc["model"] = {{"gemm_scale", model.gemmScale},
                  {"other_scale", model.otherScale},
                  {"forward_scale", model.forwardScale},
                  {"backward_scale", model.backwardScale},
                  {"activation_scale", model.activationScale},
                  {"task_overhead_seconds", model.taskOverhead},
                  {"gradient_sum_scale", model.gradientSumScale},
                  {"layers", model.layers.size()},
                  {"traced_batch", model.batch},
                  {"optimizer_states", model.optimizerStates},
                  {"compute_type", model.computeType}};
  if (!model.tpRefusal.empty())
    doc["model"]["tensor_parallel_refused"] = model.tpRefusal;
  // Each op's scale, by name and result types (calibrated only).
  json scales = json::object();
  for (size_t s = 0; s < model.signatureScales.size(); ++s)
    if (model.signatureScales[s] > 0)
      scales[model.signatures[s]] = model.signatureScales[s];
  if (!scales.empty())
    doc["model"]["op_scales"] = scales;
  if (!result.ranked.empty()) {
    doc["plan"] = planJson(result.ranked.front());
    json alternatives = json::array();
    for (size_t i = 1; i < result.ranked.size(); ++i)
      alternatives.push_back(planJson(result.ranked[i]));
    doc["alternatives"] = alternatives;
  } else {
    doc["error"] = result.error;
  }
  if (!result.applied.empty())
    doc["applied"] = result.applied;
  if (!result.refused.empty()) {
    json refused = json::array();
    for (auto &[options, error] : result.refused)
      refused.push_back({{"options", options}, {"error", error}});
    doc["refused_by_passes"] = refused;
  }
  if (!result.warnings.empty())
    doc["warnings"] = result.warnings;
  if (!result.compared.empty()) {
    json compared = json::array();
    for (const ScoredPlan &c : result.compared) {
      json entry = planJson(c);
      if (!c.estimate.infeasible.empty())
        entry["infeasible"] = c.estimate.infeasible;
      compared.push_back(entry);
    }
    doc["compared"] = compared;
  }
  json rejected = json::object();
  for (auto &[why, count] : result.rejected)
    rejected[why] = count;
  doc["rejected"] = rejected;
  doc["evaluated"] = result.evaluated;
  doc["least_memory_bytes"] = result.leastMemory;
  doc["search_seconds"] = result.seconds;
  return doc.dump(2) + "\n";
}

std::string merak::autoparallel::reportText(const SearchResult &result,
                                            double memoryLimit) {
  std::string out;
  if (result.ranked.empty())
    return "merak-auto-parallel: " + result.error + "\n";
  auto line = [&](const char *label, const ScoredPlan &s) {
    const Estimate &e = s.estimate;
    return llvm::formatv(
               "{0,-7} {1}\n        step {2:f3} ms (compute {3:f3}, "
               "tp {4:f3}, dp {5:f3}, optimizer {6:f3}; bubble "
               "{7:f1}%), bound by {8}; memory {9} on rank {10} "
               "(params {11}, grads {12}, optimizer {13}, "
               "activations {14})\n",
               label, s.plan.options(), e.stepTime * 1e3, e.computeTime * 1e3,
               e.tensorParallelTime * 1e3, e.dataParallelTime * 1e3,
               e.optimizerTime * 1e3, e.bubble * 100, e.bound,
               formatBytes(e.memory), e.fullestRank, formatBytes(e.parameters),
               formatBytes(e.gradients), formatBytes(e.optimizerState),
               formatBytes(e.activations))
        .str();
  };
  out +=
      llvm::formatv("merak-auto-parallel: {0} plans priced in {1:f3} s, "
                    "memory limit {2}\n",
                    result.evaluated, result.seconds, formatBytes(memoryLimit))
          .str();
  out += line("chosen", result.ranked.front());
  for (size_t i = 1; i < result.ranked.size(); ++i)
    out += line("next", result.ranked[i]);
  for (auto &[why, count] : result.rejected)
    out += llvm::formatv("rejected {0} plan(s): {1}\n", count, why).str();
  for (const ScoredPlan &c : result.compared) {
    out += line("compare", c);
    if (!c.estimate.infeasible.empty())
      out += "        infeasible: " + c.estimate.infeasible + "\n";
  }
  return out;
}

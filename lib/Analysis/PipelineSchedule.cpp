//===- PipelineSchedule.cpp - pipeline schedules and their proof ----------===//
//
// Each schedule kind first orders every rank's compute tasks; a unit-time
// simulation then dates them, and the transfers are placed from the dates
// in one global order (which is what makes blocking transfers safe). The
// verifier re-checks everything from the task lists alone.
//
//===----------------------------------------------------------------------===//

#include "merak/Analysis/PipelineSchedule.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <tuple>

using namespace merak::pipeline;
using llvm::StringRef;

namespace {

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

StringRef taskPrefix(TaskKind kind) {
  switch (kind) {
  case TaskKind::Forward:
    return "F";
  case TaskKind::ForwardKeep:
    return "FK";
  case TaskKind::Recompute:
    return "R";
  case TaskKind::Backward:
    return "B";
  case TaskKind::Weight:
    return "W";
  case TaskKind::Send:
    return "send";
  case TaskKind::Recv:
    return "recv";
  }
  return "?";
}

/// Parses `X(s,m)` with X a compute prefix.
bool parseCompute(StringRef text, TaskKind &kind, int &stage, int &mb) {
  text = text.trim();
  size_t open = text.find('(');
  if (open == StringRef::npos || !text.ends_with(")"))
    return false;
  StringRef prefix = text.take_front(open);
  if (prefix == "F")
    kind = TaskKind::Forward;
  else if (prefix == "FK")
    kind = TaskKind::ForwardKeep;
  else if (prefix == "R")
    kind = TaskKind::Recompute;
  else if (prefix == "B")
    kind = TaskKind::Backward;
  else if (prefix == "W")
    kind = TaskKind::Weight;
  else
    return false;
  auto [s, m] = text.drop_front(open + 1).drop_back().split(',');
  return !s.trim().getAsInteger(10, stage) && !m.trim().getAsInteger(10, mb) &&
         stage >= 0 && mb >= 0;
}

double duration(const Schedule &schedule, TaskKind kind) {
  if (kind == TaskKind::Backward)
    return schedule.splitBackward ? 1 : 2;
  return 1;
}

/// The time of compute task `t`: its stage's figure in `times`, or the unit
/// time of `duration` without them.
double duration(const Schedule &schedule, const TaskTimes *times,
                const Task &t) {
  if (!times)
    return duration(schedule, t.kind);
  auto at = [&](const std::vector<double> &v) {
    return t.stage < int(v.size()) ? v[t.stage] : 0.0;
  };
  switch (t.kind) {
  case TaskKind::Forward:
  case TaskKind::ForwardKeep:
    return at(times->forward);
  case TaskKind::Recompute:
    return at(times->recompute);
  case TaskKind::Backward:
    return schedule.splitBackward ? at(times->backward) - at(times->weight)
                                  : at(times->backward);
  case TaskKind::Weight:
    return at(times->weight);
  default:
    return 0;
  }
}

/// Dates of the compute tasks of a schedule, simulated in unit time.
struct Timeline {
  /// Per rank, its compute tasks and their start and end.
  std::vector<std::vector<Task>> tasks;
  std::vector<std::vector<std::pair<double, double>>> spans;
  /// End of F/FK and B by (stage, micro-batch).
  std::vector<double> forwardEnd, backwardEnd;
  double makespan = 0;
};

llvm::Expected<Timeline> runTimeline(const Schedule &schedule,
                                     const TaskTimes *times = nullptr) {
  const PipelineShape &shape = schedule.shape;
  int stages = shape.stages(), m = shape.microbatches, pp = shape.pp;
  auto idx = [&](int s, int mb) { return size_t(s) * m + mb; };
  Timeline tl;
  tl.tasks.resize(pp);
  tl.spans.resize(pp);
  std::vector<bool> kept(size_t(stages) * m, false);
  if (int(schedule.ranks.size()) != pp)
    return fail(llvm::formatv("the schedule has {0} ranks, not pp={1}",
                              schedule.ranks.size(), pp));
  size_t total = 0;
  for (int r = 0; r < pp; ++r)
    for (const Task &t : schedule.ranks[r]) {
      if (!t.isCompute())
        continue;
      if (t.stage >= stages || t.microbatch >= m)
        return fail(llvm::formatv("{0} is out of range ({1} stages, {2} "
                                  "micro-batches)",
                                  t.str(), stages, m));
      if (shape.rankOf(t.stage) != r)
        return fail(llvm::formatv("{0} is on rank {1} but stage {2} runs on "
                                  "rank {3}",
                                  t.str(), r, t.stage, shape.rankOf(t.stage)));
      if (t.kind == TaskKind::ForwardKeep)
        kept[idx(t.stage, t.microbatch)] = true;
      tl.tasks[r].push_back(t);
      ++total;
    }

  std::vector<double> fEnd(size_t(stages) * m, -1), rEnd = fEnd, bEnd = fEnd;
  auto needsRecompute = [&](int s, int mb) {
    return shape.recomputes(s) && !kept[idx(s, mb)];
  };
  // Time to move stage s's outputs to stage s + 1 (or its input gradients
  // back): nothing on one rank.
  auto transfer = [&](int s) {
    if (!times || s >= int(times->transfer.size()) ||
        shape.rankOf(s) == shape.rankOf(s + 1))
      return 0.0;
    return times->transfer[s];
  };
  // The earliest start of `t` given what has run, or false if a dependency
  // has not run yet.
  auto ready = [&](const Task &t, double &start) {
    auto need = [&](double end, double delay = 0) {
      if (end < 0)
        return false;
      start = std::max(start, end + delay);
      return true;
    };
    int s = t.stage, mb = t.microbatch;
    switch (t.kind) {
    case TaskKind::Forward:
    case TaskKind::ForwardKeep:
      return s == 0 || need(fEnd[idx(s - 1, mb)], transfer(s - 1));
    case TaskKind::Recompute:
      if (!need(fEnd[idx(s, mb)]))
        return false;
      return !schedule.recomputeAfterGradient || s + 1 == stages ||
             need(bEnd[idx(s + 1, mb)], transfer(s));
    case TaskKind::Backward:
      if (!need(fEnd[idx(s, mb)]))
        return false;
      if (s + 1 < stages && !need(bEnd[idx(s + 1, mb)], transfer(s)))
        return false;
      return !needsRecompute(s, mb) || need(rEnd[idx(s, mb)]);
    case TaskKind::Weight:
      return need(bEnd[idx(s, mb)]);
    default:
      return true;
    }
  };

  // Every task starts when its rank is free and what it needs has ended,
  // so the dates do not depend on the order ranks are visited in: sweep
  // the ranks, running each as far as it can, until all are done or a
  // sweep makes no progress (a deadlock).
  std::vector<size_t> pc(pp, 0);
  std::vector<double> freeAt(pp, 0);
  size_t done = 0;
  while (done < total) {
    size_t before = done;
    for (int r = 0; r < pp; ++r) {
      while (pc[r] < tl.tasks[r].size()) {
        const Task &t = tl.tasks[r][pc[r]];
        double start = freeAt[r];
        if (!ready(t, start))
          break;
        double end = start + duration(schedule, times, t);
        tl.spans[r].push_back({start, end});
        freeAt[r] = end;
        tl.makespan = std::max(tl.makespan, end);
        size_t i = idx(t.stage, t.microbatch);
        switch (t.kind) {
        case TaskKind::Forward:
        case TaskKind::ForwardKeep:
          fEnd[i] = end;
          break;
        case TaskKind::Recompute:
          rEnd[i] = end;
          break;
        case TaskKind::Backward:
          bEnd[i] = end;
          break;
        default:
          break;
        }
        ++pc[r];
        ++done;
      }
    }
    if (done == before) {
      std::string waits;
      for (int r = 0; r < pp; ++r)
        if (pc[r] < tl.tasks[r].size())
          waits +=
              llvm::formatv("{0}rank {1} at {2}", waits.empty() ? "" : ", ", r,
                            tl.tasks[r][pc[r]].str());
      return fail("the task order cannot complete: every rank waits for "
                  "another (" +
                  waits + ")");
    }
  }
  tl.forwardEnd = std::move(fEnd);
  tl.backwardEnd = std::move(bEnd);
  return tl;
}

//===----------------------------------------------------------------------===//
// Compute orders of the schedule kinds
//===----------------------------------------------------------------------===//

struct OrderBuilder {
  Schedule &schedule;
  /// kept[s][m]: the forward keeps every activation (FK).
  std::vector<std::vector<bool>> kept;

  explicit OrderBuilder(Schedule &s)
      : schedule(s),
        kept(s.shape.stages(), std::vector<bool>(s.shape.microbatches, false)) {
  }

  std::vector<Task> &rank(int r) { return schedule.ranks[r]; }
  void forward(int s, int m) {
    bool keep = schedule.shape.recomputes(s) && kept[s][m];
    rank(schedule.shape.rankOf(s))
        .push_back({keep ? TaskKind::ForwardKeep : TaskKind::Forward, s, m});
  }
  void backward(int s, int m) {
    auto &list = rank(schedule.shape.rankOf(s));
    if (schedule.shape.recomputes(s) && !kept[s][m])
      list.push_back({TaskKind::Recompute, s, m});
    list.push_back({TaskKind::Backward, s, m});
  }
  void weight(int s, int m) {
    rank(schedule.shape.rankOf(s)).push_back({TaskKind::Weight, s, m});
  }

  /// One forward, one backward after `warmup` forwards, on the single
  /// stage of rank r; with `zeroBubble` the W of micro-batch i follows B(i)
  /// on rank 0 and is deferred by r steady-state steps on rank r (ZB-H1).
  void oneFOneB(int r, int warmup, bool zeroBubble) {
    int m = schedule.shape.microbatches;
    warmup = std::min(warmup, m);
    std::deque<int> pendingW;
    auto popW = [&] {
      weight(r, pendingW.front());
      pendingW.pop_front();
    };
    for (int i = 0; i < warmup; ++i)
      forward(r, i);
    for (int i = 0; i < m - warmup; ++i) {
      forward(r, warmup + i);
      backward(r, i);
      if (zeroBubble) {
        pendingW.push_back(i);
        if (i >= r)
          popW();
      }
    }
    for (int i = m - warmup; i < m; ++i) {
      backward(r, i);
      if (zeroBubble) {
        pendingW.push_back(i);
        popW();
      }
    }
    while (zeroBubble && !pendingW.empty())
      popW();
  }

  /// Megatron's interleaved 1F1B on rank r.
  void interleaved(int r) {
    const PipelineShape &shape = schedule.shape;
    int pp = shape.pp, v = shape.virtualStages, m = shape.microbatches;
    int total = m * v;
    auto microbatch = [&](int k) { return (k / (pp * v)) * pp + k % pp; };
    auto forwardStage = [&](int k) { return ((k % (pp * v)) / pp) * pp + r; };
    auto backwardStage = [&](int k) {
      return (v - 1 - (k % (pp * v)) / pp) * pp + r;
    };
    int warmup =
        m == pp ? total : std::min((pp - r - 1) * 2 + (v - 1) * pp, total);
    for (int k = 0; k < warmup; ++k)
      forward(forwardStage(k), microbatch(k));
    for (int i = 0; i < total - warmup; ++i) {
      int k = warmup + i;
      forward(forwardStage(k), microbatch(k));
      backward(backwardStage(i), microbatch(i));
    }
    for (int i = total - warmup; i < total; ++i)
      backward(backwardStage(i), microbatch(i));
  }

  /// Merak's rule for forwards that keep their activations, as its
  /// LastNoRecompute and FullCriticalPath train schedules have it: the last
  /// stage never recomputes; a stage s < S - 2 keeps the micro-batches
  /// whose backward falls in the cool-down (m - mb + s < S); the second to
  /// last keeps its first micro-batch, and with the shifted critical path
  /// its first two, and stage S - 3 its first as well.
  void merakKeeps(bool shifted) {
    int stages = schedule.shape.stages(), m = schedule.shape.microbatches;
    for (int s = 0; s < stages; ++s)
      for (int mb = 0; mb < m; ++mb) {
        bool keep = s == stages - 1;
        if (s == stages - 2)
          keep = mb == 0 || (shifted && mb == 1);
        else if (s < stages - 2)
          keep = m - mb + s < stages || (shifted && s == stages - 3 && mb == 0);
        kept[s][mb] = keep;
      }
  }

  /// The shifted critical path: on the second-to-last stage the third
  /// forward runs in the slot of the first backward and the first backward
  /// in the slot of the third forward, so the last stage gets its third
  /// micro-batch early.
  void swapFirstBackwardAndThirdForward(int r) {
    std::vector<Task> &list = rank(r);
    auto isF2 = [&](const Task &t) {
      return (t.kind == TaskKind::Forward || t.kind == TaskKind::ForwardKeep) &&
             t.microbatch == 2;
    };
    auto isB0 = [&](const Task &t) {
      return (t.kind == TaskKind::Backward || t.kind == TaskKind::Recompute) &&
             t.microbatch == 0;
    };
    auto b0 = llvm::find_if(list, isB0);
    auto f2 = llvm::find_if(list, isF2);
    if (b0 == list.end() || f2 == list.end() || f2 < b0)
      return;
    Task forward = *f2;
    list.erase(f2);
    list.insert(llvm::find_if(list, isB0), forward);
  }

  /// Dynamic: simulate ranks that each pick, whenever free, the ready task
  /// of highest priority: backward first, then forward while the rank
  /// holds fewer than its limit of unfinished micro-batches; the lowest
  /// micro-batch first, then the highest stage.
  void dynamic() {
    const PipelineShape &shape = schedule.shape;
    int pp = shape.pp, v = shape.virtualStages, m = shape.microbatches;
    int stages = shape.stages();
    for (int r = 0; r < pp; ++r)
      schedule.inflightLimit.push_back(
          v == 1 ? pp - r
                 : std::min(m * v, (pp - r - 1) * 2 + (v - 1) * pp + 1));
    schedule.priority =
        "backward before forward; among ready tasks the lowest micro-batch, "
        "then the highest stage; a forward only while the rank holds fewer "
        "than inflight_limit[rank] micro-batches between forward and backward";
    auto idx = [&](int s, int mb) { return size_t(s) * m + mb; };
    std::vector<double> fEnd(size_t(stages) * m, -1), bEnd = fEnd;
    std::vector<int> nextF(stages, 0), nextB(stages, 0), inflight(pp, 0);
    std::vector<double> freeAt(pp, 0);
    double bwd = 2;
    for (int done = 0; done < 2 * stages * m; ++done) {
      int bestRank = -1;
      double bestStart = std::numeric_limits<double>::infinity();
      Task bestTask;
      for (int r = 0; r < pp; ++r) {
        // Candidates: the next F and the next B of each of r's stages.
        struct Cand {
          Task task;
          double ready;
        };
        std::vector<Cand> cands;
        for (int s = r; s < stages; s += pp) {
          int mb = nextB[s];
          if (mb < m && fEnd[idx(s, mb)] >= 0 &&
              (s + 1 == stages || bEnd[idx(s + 1, mb)] >= 0)) {
            double t = fEnd[idx(s, mb)];
            if (s + 1 < stages)
              t = std::max(t, bEnd[idx(s + 1, mb)]);
            cands.push_back({{TaskKind::Backward, s, mb}, t});
          }
          mb = nextF[s];
          if (mb < m && inflight[r] < schedule.inflightLimit[r] &&
              (s == 0 || fEnd[idx(s - 1, mb)] >= 0))
            cands.push_back({{TaskKind::Forward, s, mb},
                             s == 0 ? 0 : fEnd[idx(s - 1, mb)]});
        }
        if (cands.empty())
          continue;
        double start = std::numeric_limits<double>::infinity();
        for (const Cand &c : cands)
          start = std::min(start, std::max(freeAt[r], c.ready));
        // Among the tasks ready at `start`, the highest priority.
        const Cand *pick = nullptr;
        auto rank = [](const Task &t) {
          return std::make_tuple(t.kind == TaskKind::Backward ? 0 : 1,
                                 t.microbatch, -t.stage);
        };
        for (const Cand &c : cands)
          if (std::max(freeAt[r], c.ready) <= start &&
              (!pick || rank(c.task) < rank(pick->task)))
            pick = &c;
        if (start < bestStart) {
          bestStart = start;
          bestRank = r;
          bestTask = pick->task;
        }
      }
      if (bestRank < 0)
        break; // Cannot happen: some rank always has work.
      int s = bestTask.stage, mb = bestTask.microbatch;
      if (bestTask.kind == TaskKind::Forward) {
        forward(s, mb);
        fEnd[idx(s, mb)] = bestStart + 1;
        freeAt[bestRank] = bestStart + 1;
        ++nextF[s];
        ++inflight[bestRank];
      } else {
        backward(s, mb);
        double end = bestStart + bwd + (shape.recomputes(s) ? 1 : 0);
        bEnd[idx(s, mb)] = end;
        freeAt[bestRank] = end;
        ++nextB[s];
        --inflight[bestRank];
      }
    }
  }
};

} // namespace

std::optional<ScheduleKind> merak::pipeline::parseScheduleKind(StringRef name) {
  return llvm::StringSwitch<std::optional<ScheduleKind>>(name)
      .Case("gpipe", ScheduleKind::GPipe)
      .Case("1f1b", ScheduleKind::OneFOneB)
      .Case("interleaved-1f1b", ScheduleKind::Interleaved1F1B)
      .Case("merak-last-no-recompute", ScheduleKind::MerakLastNoRecompute)
      .Case("merak-shifted-critical-path",
            ScheduleKind::MerakShiftedCriticalPath)
      .Case("zb-h1", ScheduleKind::ZeroBubbleH1)
      .Case("dynamic", ScheduleKind::Dynamic)
      .Default(std::nullopt);
}

StringRef merak::pipeline::stringifyScheduleKind(ScheduleKind kind) {
  switch (kind) {
  case ScheduleKind::GPipe:
    return "gpipe";
  case ScheduleKind::OneFOneB:
    return "1f1b";
  case ScheduleKind::Interleaved1F1B:
    return "interleaved-1f1b";
  case ScheduleKind::MerakLastNoRecompute:
    return "merak-last-no-recompute";
  case ScheduleKind::MerakShiftedCriticalPath:
    return "merak-shifted-critical-path";
  case ScheduleKind::ZeroBubbleH1:
    return "zb-h1";
  case ScheduleKind::Dynamic:
    return "dynamic";
  }
  return "?";
}

std::string Task::str() const {
  std::string body =
      llvm::formatv("{0}({1},{2})", taskPrefix(isCompute() ? kind : payload),
                    stage, microbatch)
          .str();
  if (kind == TaskKind::Send)
    return "send " + body + " -> " + std::to_string(peer);
  if (kind == TaskKind::Recv)
    return "recv " + body + " <- " + std::to_string(peer);
  return body;
}

std::optional<Task> Task::parse(StringRef text) {
  text = text.trim();
  Task task;
  bool send = text.consume_front("send ");
  bool recv = !send && text.consume_front("recv ");
  if (!send && !recv) {
    if (!parseCompute(text, task.kind, task.stage, task.microbatch))
      return std::nullopt;
    return task;
  }
  auto [what, peer] = text.split(send ? "->" : "<-");
  TaskKind payload;
  if (!parseCompute(what, payload, task.stage, task.microbatch) ||
      (payload != TaskKind::Forward && payload != TaskKind::Backward) ||
      peer.trim().getAsInteger(10, task.peer) || task.peer < 0)
    return std::nullopt;
  task.kind = send ? TaskKind::Send : TaskKind::Recv;
  task.payload = payload;
  return task;
}

double Simulation::bubble() const {
  if (makespan <= 0 || busy.empty())
    return 0;
  double sum = 0;
  for (double b : busy)
    sum += b;
  return 1.0 - sum / (makespan * double(busy.size()));
}

llvm::Expected<Simulation> merak::pipeline::simulate(const Schedule &schedule) {
  return simulate(schedule, nullptr);
}

llvm::Expected<Simulation> merak::pipeline::simulate(const Schedule &schedule,
                                                     const TaskTimes *times) {
  llvm::Expected<Timeline> tl = runTimeline(schedule, times);
  if (!tl)
    return tl.takeError();
  Simulation sim;
  sim.makespan = tl->makespan;
  for (auto &spans : tl->spans) {
    double busy = 0;
    for (auto [start, end] : spans)
      busy += end - start;
    sim.busy.push_back(busy);
  }
  sim.tasks = std::move(tl->tasks);
  sim.spans = std::move(tl->spans);
  return sim;
}

std::vector<double>
merak::pipeline::peakHeld(const Schedule &schedule,
                          const std::vector<double> &perStage) {
  std::vector<double> peaks;
  for (const std::vector<Task> &tasks : schedule.ranks) {
    double held = 0, peak = 0;
    for (const Task &t : tasks) {
      double w = t.stage < int(perStage.size()) ? perStage[t.stage] : 0;
      if (t.kind == TaskKind::Forward || t.kind == TaskKind::ForwardKeep)
        held += w;
      else if (t.kind == TaskKind::Backward)
        held -= w;
      peak = std::max(peak, held);
    }
    peaks.push_back(peak);
  }
  return peaks;
}

std::string merak::pipeline::formatComputeOrder(const Schedule &schedule,
                                                int rank) {
  std::string out;
  for (const Task &t : schedule.ranks[rank])
    if (t.isCompute())
      out += (out.empty() ? "" : " ") + t.str();
  return out;
}

llvm::Error merak::pipeline::placeCommunication(Schedule &schedule) {
  llvm::Expected<Timeline> tl = runTimeline(schedule);
  if (!tl)
    return tl.takeError();
  const PipelineShape &shape = schedule.shape;
  int stages = shape.stages(), m = shape.microbatches, pp = shape.pp;
  struct Message {
    double time;
    TaskKind payload;
    int stage, microbatch, from, to;
  };
  std::vector<Message> messages;
  for (int s = 0; s < stages; ++s)
    for (int mb = 0; mb < m; ++mb) {
      size_t i = size_t(s) * m + mb;
      if (s + 1 < stages && shape.rankOf(s) != shape.rankOf(s + 1))
        messages.push_back({tl->forwardEnd[i], TaskKind::Forward, s, mb,
                            shape.rankOf(s), shape.rankOf(s + 1)});
      if (s > 0 && shape.rankOf(s) != shape.rankOf(s - 1))
        messages.push_back({tl->backwardEnd[i], TaskKind::Backward, s, mb,
                            shape.rankOf(s), shape.rankOf(s - 1)});
    }
  // One global order of all transfers; every rank posts its own in it.
  llvm::stable_sort(messages, [](const Message &a, const Message &b) {
    return std::make_tuple(a.time, a.from, int(a.payload), a.stage,
                           a.microbatch) <
           std::make_tuple(b.time, b.from, int(b.payload), b.stage,
                           b.microbatch);
  });
  for (int r = 0; r < pp; ++r) {
    std::vector<Task> program;
    size_t next = 0;
    const auto &tasks = tl->tasks[r];
    const auto &spans = tl->spans[r];
    for (const Message &msg : messages) {
      if (msg.from != r && msg.to != r)
        continue;
      // After every task that starts before the transfer is possible.
      while (next < tasks.size() && spans[next].first < msg.time)
        program.push_back(tasks[next++]);
      Task t;
      t.kind = msg.from == r ? TaskKind::Send : TaskKind::Recv;
      t.payload = msg.payload;
      t.stage = msg.stage;
      t.microbatch = msg.microbatch;
      t.peer = msg.from == r ? msg.to : msg.from;
      program.push_back(t);
    }
    while (next < tasks.size())
      program.push_back(tasks[next++]);
    schedule.ranks[r] = std::move(program);
  }
  return llvm::Error::success();
}

llvm::Error merak::pipeline::verifySchedule(const Schedule &schedule) {
  const PipelineShape &shape = schedule.shape;
  int pp = shape.pp, stages = shape.stages(), m = shape.microbatches;
  if (pp < 1 || shape.virtualStages < 1 || m < 1)
    return fail("pp, virtual and microbatches must be at least 1");
  if (int(schedule.ranks.size()) != pp)
    return fail(llvm::formatv("the schedule has {0} ranks, not pp={1}",
                              schedule.ranks.size(), pp));
  auto idx = [&](int s, int mb) { return size_t(s) * m + mb; };
  size_t n = size_t(stages) * m;
  // Position (index in its rank's program) of each compute task, -1: none.
  std::vector<int> posF(n, -1), posR(n, -1), posB(n, -1), posW(n, -1);
  std::vector<bool> kept(n, false);
  using Key = std::tuple<int, int, int>; // payload, stage, micro-batch
  std::map<Key, std::pair<int, int>> sends, recvs; // -> (rank, position)
  std::map<Key, int> sendPeer, recvPeer;

  for (int r = 0; r < pp; ++r) {
    const auto &program = schedule.ranks[r];
    for (int pos = 0; pos < int(program.size()); ++pos) {
      const Task &t = program[pos];
      if (t.stage < 0 || t.stage >= stages || t.microbatch < 0 ||
          t.microbatch >= m)
        return fail(llvm::formatv("rank {0}: {1} is out of range ({2} "
                                  "stages, {3} micro-batches)",
                                  r, t.str(), stages, m));
      if (!t.isCompute()) {
        if (t.peer < 0 || t.peer >= pp || t.peer == r)
          return fail(
              llvm::formatv("rank {0}: {1} names no other rank", r, t.str()));
        Key key{int(t.payload), t.stage, t.microbatch};
        auto &table = t.kind == TaskKind::Send ? sends : recvs;
        if (!table.insert({key, {r, pos}}).second)
          return fail(llvm::formatv("rank {0}: {1} appears twice", r, t.str()));
        (t.kind == TaskKind::Send ? sendPeer : recvPeer)[key] = t.peer;
        continue;
      }
      if (shape.rankOf(t.stage) != r)
        return fail(llvm::formatv("{0} is on rank {1} but stage {2} runs on "
                                  "rank {3}",
                                  t.str(), r, t.stage, shape.rankOf(t.stage)));
      std::vector<int> *table = nullptr;
      switch (t.kind) {
      case TaskKind::Forward:
      case TaskKind::ForwardKeep:
        table = &posF;
        break;
      case TaskKind::Recompute:
        table = &posR;
        break;
      case TaskKind::Backward:
        table = &posB;
        break;
      case TaskKind::Weight:
        table = &posW;
        break;
      default:
        break;
      }
      size_t i = idx(t.stage, t.microbatch);
      if ((*table)[i] >= 0)
        return fail(llvm::formatv("{0} runs twice on rank {1} (positions {2} "
                                  "and {3})",
                                  t.str(), r, (*table)[i], pos));
      (*table)[i] = pos;
      if (t.kind == TaskKind::ForwardKeep) {
        if (!shape.recomputes(t.stage))
          return fail(llvm::formatv("{0}: stage {1} does not recompute, so its "
                                    "forward is F",
                                    t.str(), t.stage));
        kept[i] = true;
      }
      if (t.kind == TaskKind::Weight && !schedule.splitBackward)
        return fail(llvm::formatv("{0}: this schedule does not split "
                                  "backward into B and W",
                                  t.str()));
    }
  }

  // Every task exactly once, in its local order.
  for (int s = 0; s < stages; ++s)
    for (int mb = 0; mb < m; ++mb) {
      size_t i = idx(s, mb);
      Task f{TaskKind::Forward, s, mb}, b{TaskKind::Backward, s, mb},
          rc{TaskKind::Recompute, s, mb}, w{TaskKind::Weight, s, mb};
      if (posF[i] < 0)
        return fail(f.str() + " never runs");
      if (posB[i] < 0)
        return fail(b.str() + " never runs");
      if (schedule.splitBackward && posW[i] < 0)
        return fail(w.str() + " never runs");
      bool needR = shape.recomputes(s) && !kept[i];
      if (needR && posR[i] < 0)
        return fail(llvm::formatv("{0} never runs, but stage {1} recomputes "
                                  "and {2} kept only its checkpoints",
                                  rc.str(), s, f.str()));
      if (!needR && posR[i] >= 0)
        return fail(rc.str() + (shape.recomputes(s)
                                    ? " after a forward that kept everything"
                                    : " but the stage does not recompute"));
      if (needR && posR[i] < posF[i])
        return fail(rc.str() + " runs before " + f.str());
      if (posB[i] < posF[i] || (needR && posB[i] < posR[i]))
        return fail(b.str() + " runs before its forward" +
                    (needR ? " or recomputation" : ""));
      if (schedule.splitBackward && posW[i] < posB[i])
        return fail(w.str() + " runs before " + b.str());
    }

  // Values crossing stages: local order on one rank, a send and a receive
  // in the right places across ranks.
  std::map<Key, bool> expected;
  auto checkEdge = [&](TaskKind payload, int from, int to, int mb,
                       int producerPos, int consumerPos) -> llvm::Error {
    int rf = shape.rankOf(from), rt = shape.rankOf(to);
    Task producer{payload, from, mb};
    Task consumer{payload, to, mb};
    if (rf == rt) {
      if (consumerPos < producerPos)
        return fail(llvm::formatv("rank {0}: {1} runs before {2}, whose "
                                  "outputs it reads",
                                  rf, consumer.str(), producer.str()));
      return llvm::Error::success();
    }
    Key key{int(payload), from, mb};
    expected[key] = true;
    auto send = sends.find(key);
    auto recv = recvs.find(key);
    if (send == sends.end() || send->second.first != rf || sendPeer[key] != rt)
      return fail(llvm::formatv("rank {0} never sends the outputs of {1} to "
                                "rank {2}",
                                rf, producer.str(), rt));
    if (recv == recvs.end() || recv->second.first != rt || recvPeer[key] != rf)
      return fail(llvm::formatv("rank {0} never receives the outputs of {1} "
                                "from rank {2}",
                                rt, producer.str(), rf));
    if (send->second.second < producerPos)
      return fail(llvm::formatv("rank {0} sends the outputs of {1} before "
                                "computing them",
                                rf, producer.str()));
    if (recv->second.second > consumerPos)
      return fail(llvm::formatv("rank {0} receives the outputs of {1} after "
                                "{2}, which reads them",
                                rt, producer.str(), consumer.str()));
    return llvm::Error::success();
  };
  for (int s = 0; s < stages; ++s)
    for (int mb = 0; mb < m; ++mb) {
      if (s + 1 < stages)
        if (llvm::Error e = checkEdge(TaskKind::Forward, s, s + 1, mb,
                                      posF[idx(s, mb)], posF[idx(s + 1, mb)]))
          return e;
      if (s > 0)
        if (llvm::Error e = checkEdge(TaskKind::Backward, s, s - 1, mb,
                                      posB[idx(s, mb)], posB[idx(s - 1, mb)]))
          return e;
    }
  for (auto *table : {&sends, &recvs})
    for (auto &[key, where] : *table)
      if (!expected.count(key))
        return fail(llvm::formatv(
            "rank {0}: {1} moves nothing any stage "
            "needs across ranks",
            where.first, schedule.ranks[where.first][where.second].str()));

  // Blocking transfers: a send completes only together with its receive.
  std::vector<size_t> pc(pp, 0);
  while (true) {
    bool progress = false;
    for (int r = 0; r < pp; ++r)
      while (pc[r] < schedule.ranks[r].size() &&
             schedule.ranks[r][pc[r]].isCompute()) {
        ++pc[r];
        progress = true;
      }
    for (int r = 0; r < pp; ++r) {
      if (pc[r] >= schedule.ranks[r].size())
        continue;
      const Task &t = schedule.ranks[r][pc[r]];
      if (t.kind != TaskKind::Send)
        continue;
      int q = t.peer;
      if (pc[q] >= schedule.ranks[q].size())
        continue;
      const Task &u = schedule.ranks[q][pc[q]];
      if (u.kind == TaskKind::Recv && u.peer == r && u.payload == t.payload &&
          u.stage == t.stage && u.microbatch == t.microbatch) {
        ++pc[r];
        ++pc[q];
        progress = true;
      }
    }
    bool finished = true;
    for (int r = 0; r < pp; ++r)
      finished &= pc[r] >= schedule.ranks[r].size();
    if (finished)
      break;
    if (!progress) {
      std::string blocked;
      for (int r = 0; r < pp; ++r)
        if (pc[r] < schedule.ranks[r].size())
          blocked += llvm::formatv("{0}rank {1} blocks in '{2}'",
                                   blocked.empty() ? "" : ", ", r,
                                   schedule.ranks[r][pc[r]].str());
      return fail("deadlock with blocking sends and receives: " + blocked);
    }
  }
  return llvm::Error::success();
}

llvm::Expected<Schedule>
merak::pipeline::buildComputeOrder(ScheduleKind kind,
                                   const PipelineShape &shape) {
  int pp = shape.pp, v = shape.virtualStages, m = shape.microbatches;
  StringRef name = stringifyScheduleKind(kind);
  if (pp < 1)
    return fail(llvm::formatv("pp must be at least 1, got {0}", pp));
  if (v < 1)
    return fail(llvm::formatv("virtual must be at least 1, got {0}", v));
  if (m < 1)
    return fail(llvm::formatv("microbatches must be at least 1, got {0}", m));
  if (!shape.recompute.empty() && int(shape.recompute.size()) != shape.stages())
    return fail(llvm::formatv("recompute flags for {0} stages, but the "
                              "pipeline has {1}",
                              shape.recompute.size(), shape.stages()));
  if (v > 1 && kind != ScheduleKind::Interleaved1F1B &&
      kind != ScheduleKind::Dynamic)
    return fail(llvm::formatv("kind={0} runs one model chunk per rank; "
                              "virtual={1} needs kind=interleaved-1f1b or "
                              "kind=dynamic",
                              name, v));
  bool oneFOneBLike = kind == ScheduleKind::OneFOneB ||
                      kind == ScheduleKind::ZeroBubbleH1 ||
                      kind == ScheduleKind::MerakLastNoRecompute ||
                      kind == ScheduleKind::MerakShiftedCriticalPath ||
                      (kind == ScheduleKind::Interleaved1F1B && v == 1);
  if (oneFOneBLike && m < pp)
    return fail(llvm::formatv("kind={0} needs at least as many micro-batches "
                              "as pipeline ranks: microbatches={1} < pp={2}",
                              name, m, pp));
  if (kind == ScheduleKind::Interleaved1F1B && v > 1 && m % pp != 0)
    return fail(llvm::formatv("kind=interleaved-1f1b takes micro-batches in "
                              "groups of pp (Megatron's order): "
                              "microbatches={0} is not a multiple of pp={1}",
                              m, pp));
  if (kind == ScheduleKind::MerakShiftedCriticalPath) {
    if (m < 4)
      return fail(llvm::formatv("kind=merak-shifted-critical-path needs at "
                                "least 4 micro-batches, got {0}",
                                m));
    if (pp < 2)
      return fail("kind=merak-shifted-critical-path needs pp >= 2 (it "
                  "reorders the second-to-last stage)");
  }

  Schedule schedule;
  schedule.kind = kind;
  schedule.shape = shape;
  schedule.shape.recompute.resize(shape.stages(), false);
  schedule.ranks.resize(pp);
  schedule.splitBackward = kind == ScheduleKind::ZeroBubbleH1;
  schedule.recomputeAfterGradient =
      kind != ScheduleKind::MerakShiftedCriticalPath;
  OrderBuilder order(schedule);
  switch (kind) {
  case ScheduleKind::GPipe:
    for (int r = 0; r < pp; ++r) {
      for (int mb = 0; mb < m; ++mb)
        order.forward(r, mb);
      for (int mb = 0; mb < m; ++mb)
        order.backward(r, mb);
    }
    break;
  case ScheduleKind::OneFOneB:
  case ScheduleKind::ZeroBubbleH1:
    for (int r = 0; r < pp; ++r)
      order.oneFOneB(r, pp - r - 1, kind == ScheduleKind::ZeroBubbleH1);
    break;
  case ScheduleKind::Interleaved1F1B:
    for (int r = 0; r < pp; ++r) {
      if (v == 1)
        order.oneFOneB(r, pp - r - 1, false);
      else
        order.interleaved(r);
    }
    break;
  case ScheduleKind::MerakLastNoRecompute:
  case ScheduleKind::MerakShiftedCriticalPath:
    order.merakKeeps(kind == ScheduleKind::MerakShiftedCriticalPath);
    for (int r = 0; r < pp; ++r) {
      order.oneFOneB(r, pp - r - 1, false);
      if (kind == ScheduleKind::MerakShiftedCriticalPath && r == pp - 2)
        order.swapFirstBackwardAndThirdForward(r);
    }
    break;
  case ScheduleKind::Dynamic:
    order.dynamic();
    break;
  }
  return schedule;
}

llvm::Expected<Schedule>
merak::pipeline::buildSchedule(ScheduleKind kind, const PipelineShape &shape) {
  llvm::Expected<Schedule> schedule = buildComputeOrder(kind, shape);
  if (!schedule)
    return schedule.takeError();
  if (llvm::Error e = placeCommunication(*schedule))
    return std::move(e);
  if (llvm::Error e = verifySchedule(*schedule))
    return fail("internal error: the " + stringifyScheduleKind(kind).str() +
                " schedule does not verify: " + llvm::toString(std::move(e)));
  return schedule;
}

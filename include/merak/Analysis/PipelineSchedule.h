//===- PipelineSchedule.h - pipeline schedules and their proof -*- C++ -*-===//
//
// Builds the per-rank task lists of the pipeline schedules Merak knows
// (GPipe, 1F1B, interleaved 1F1B, Merak's last-no-recompute and
// shifted-critical-path, ZB-H1, dynamic), places the sends and receives so
// that blocking point-to-point communication cannot deadlock, and verifies
// a schedule: every (stage, micro-batch, phase) runs exactly once on the
// right rank, after what it needs, and the ranks, simulated with blocking
// (rendezvous) sends and receives, all finish. docs/pipeline.md describes
// each schedule and the task syntax.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_ANALYSIS_PIPELINESCHEDULE_H
#define MERAK_ANALYSIS_PIPELINESCHEDULE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace merak::pipeline {

enum class ScheduleKind {
  GPipe,
  OneFOneB,
  Interleaved1F1B,
  MerakLastNoRecompute,
  MerakShiftedCriticalPath,
  ZeroBubbleH1,
  Dynamic,
};

/// `gpipe`, `1f1b`, `interleaved-1f1b`, `merak-last-no-recompute`,
/// `merak-shifted-critical-path`, `zb-h1`, `dynamic`.
std::optional<ScheduleKind> parseScheduleKind(llvm::StringRef name);
llvm::StringRef stringifyScheduleKind(ScheduleKind kind);

enum class TaskKind {
  /// F(s,m): stage s's forward of micro-batch m (keeps what backward needs,
  /// or only the recomputation's inputs on a stage that recomputes).
  Forward,
  /// FK(s,m): forward that keeps every activation, so no R is needed.
  ForwardKeep,
  /// R(s,m): recompute the forward activations backward needs.
  Recompute,
  /// B(s,m): backward; with a split backward only the input gradients.
  Backward,
  /// W(s,m): weight gradients (split backward only).
  Weight,
  /// send X -> r: send the outputs of task X (an F/FK or a B) to rank r.
  Send,
  /// recv X <- r: receive the outputs of task X from rank r.
  Recv,
};

struct Task {
  TaskKind kind = TaskKind::Forward;
  int stage = 0;
  int microbatch = 0;
  /// Send/Recv: whose outputs move (Forward or Backward), and the other rank.
  TaskKind payload = TaskKind::Forward;
  int peer = -1;

  bool isCompute() const {
    return kind != TaskKind::Send && kind != TaskKind::Recv;
  }
  /// `F(0,3)`, `FK(0,3)`, `R(0,3)`, `B(0,3)`, `W(0,3)`, `send F(0,3) -> 1`,
  /// `recv B(1,3) <- 1`.
  std::string str() const;
  static std::optional<Task> parse(llvm::StringRef text);
  bool operator==(const Task &o) const {
    return kind == o.kind && stage == o.stage && microbatch == o.microbatch &&
           (isCompute() || (payload == o.payload && peer == o.peer));
  }
};

/// The pipeline a schedule runs: `pp` ranks, `virtualStages` model chunks
/// per rank (stage s runs on rank s % pp), `microbatches` per step.
struct PipelineShape {
  int pp = 1;
  int virtualStages = 1;
  int microbatches = 1;
  /// Per stage: true when it recomputes activations (then every B needs an
  /// R first, unless the micro-batch's forward was an FK).
  std::vector<bool> recompute;

  int stages() const { return pp * virtualStages; }
  int rankOf(int stage) const { return stage % pp; }
  bool recomputes(int stage) const {
    return stage < int(recompute.size()) && recompute[stage];
  }
};

struct Schedule {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  PipelineShape shape;
  /// Backward is split into B (input gradients) and W (weight gradients).
  bool splitBackward = false;
  /// R waits for the gradient of its micro-batch (false: shifted before
  /// the receive, to overlap it; Merak's shifted critical path).
  bool recomputeAfterGradient = true;
  /// dynamic: the rule a rank uses to pick its next ready task, and the
  /// most micro-batches each rank may hold between forward and backward.
  std::string priority;
  std::vector<int> inflightLimit;
  /// Per rank, its program in order: compute tasks, sends and receives.
  std::vector<std::vector<Task>> ranks;
};

/// Builds `kind`'s schedule for `shape`, sends and receives included. An
/// invalid combination (too few micro-batches, virtual stages with a
/// schedule that has none, ...) is an error naming the rule.
llvm::Expected<Schedule> buildSchedule(ScheduleKind kind,
                                       const PipelineShape &shape);
/// The compute tasks of `kind`'s schedule alone, unverified and without
/// sends and receives: what a timed simulation needs.
llvm::Expected<Schedule> buildComputeOrder(ScheduleKind kind,
                                           const PipelineShape &shape);

/// Checks `schedule`: tasks on the right ranks, each exactly once, local
/// order (F before R before B before W), one send and one receive per
/// value crossing ranks in the right places, and no deadlock when every
/// send blocks until its receive is posted.
llvm::Error verifySchedule(const Schedule &schedule);

/// Replaces the sends and receives of `schedule` by ones placed from a
/// unit-time simulation (F, FK, R, W: 1; B: 2, or 1 when split): every
/// rank's transfers follow one global order, so blocking transfers cannot
/// deadlock.
llvm::Error placeCommunication(Schedule &schedule);

/// Unit-time simulation of the compute tasks (transfers free).
struct Simulation {
  double makespan = 0;
  /// Time each rank computes.
  std::vector<double> busy;
  /// Per rank, its compute tasks in order and when each starts and ends.
  std::vector<std::vector<Task>> tasks;
  std::vector<std::vector<std::pair<double, double>>> spans;
  /// Fraction of rank-time spent idle: 1 - sum(busy) / (pp * makespan).
  double bubble() const;
};
llvm::Expected<Simulation> simulate(const Schedule &schedule);

/// Per-stage task times for a timed simulation (seconds or any unit):
/// F and FK take `forward`, R `recompute`, B `backward` (less `weight`
/// when the backward is split), W `weight`; a forward's outputs reach the
/// next stage, and a backward's input gradients the previous one,
/// `transfer[s]` after the task ends when the two stages are on different
/// ranks.
struct TaskTimes {
  std::vector<double> forward, backward, weight, recompute, transfer;
};
/// The schedule's makespan and busy times under `times` (unit times when
/// null), the ranks waiting on each other as the task order says.
llvm::Expected<Simulation> simulate(const Schedule &schedule,
                                    const TaskTimes *times);

/// Per rank, the most it holds at once of what a forward keeps until its
/// backward: `perStage[s]` for every micro-batch of stage s that ran F (or
/// FK) and not yet B.
std::vector<double> peakHeld(const Schedule &schedule,
                             const std::vector<double> &perStage);

/// The compute tasks of `rank`, space-separated.
std::string formatComputeOrder(const Schedule &schedule, int rank);

} // namespace merak::pipeline

#endif // MERAK_ANALYSIS_PIPELINESCHEDULE_H

//===- PipelineExecutor.cpp - one rank of a pipeline schedule -------------===//
//
// Runs a rank's task list: stage functions through one `Executor` each,
// values of each micro-batch in a store keyed by (micro-batch, id) and
// dropped after their last local reader, sends posted asynchronously right
// where the schedule puts them, receives posted a little ahead of where they
// are needed. The `dynamic` kind posts every receive at the start of the step
// and runs, whenever the rank is free, the ready task of highest priority;
// the first rank of a stage's mesh chooses and tells its mesh peers, so
// their collectives match. After the tasks: the loss reaches every rank,
// tied gradients are summed among their owners, gradients are averaged over
// micro-batches, and the optimizer functions run.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/Pipeline.h"
#include "merak/Runtime/Random.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <sstream>
#include <thread>

namespace merak::runtime {

const char *stagePhaseName(StagePhase phase) {
  switch (phase) {
  case StagePhase::Forward:
    return "forward";
  case StagePhase::ForwardKeep:
    return "forward_keep";
  case StagePhase::Recompute:
    return "recompute";
  case StagePhase::BackwardInput:
    return "backward_input";
  case StagePhase::BackwardWeight:
    return "backward_weight";
  case StagePhase::Optimizer:
    return "optimizer";
  }
  return "?";
}

PeerLink::~PeerLink() = default;

int64_t pipelineTransferTag(bool backward, int64_t stage, int64_t microbatch,
                            int64_t microbatches) {
  return 64 + (stage * microbatches + microbatch) * 2 + (backward ? 1 : 0);
}

namespace {

using Kind = PipelineTask::Kind;
using Clock = std::chrono::steady_clock;

// Control tags, below every transfer tag.
constexpr int64_t kLossTag = 1;
constexpr int64_t kTiedTagBase = 2;         // + the parameter's index (< 30)
constexpr int64_t kChoiceTagBase = 1 << 24; // + the choice's number

double now() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

const char *category(Kind kind) {
  switch (kind) {
  case Kind::Forward:
  case Kind::ForwardKeep:
    return "forward";
  case Kind::Recompute:
    return "recompute";
  case Kind::Backward:
    return "backward";
  case Kind::Weight:
    return "weight";
  case Kind::Send:
    return "send";
  case Kind::Recv:
    return "recv";
  }
  return "?";
}

bool isForward(Kind kind) {
  return kind == Kind::Forward || kind == Kind::ForwardKeep;
}

} // namespace

struct PipelineExecutor::Impl {
  const PipelinePlan &plan;
  Backend &backend;
  Communicator *communicator;
  PeerLink *link;
  int64_t meshSize, meshRank;

  std::vector<std::unique_ptr<Executor>> executors; // per plan.functions
  /// (stage, name) -> the stage's copy of a parameter, buffer or state.
  std::map<std::pair<int64_t, std::string>, TensorHandle> state;
  std::map<std::pair<int64_t, std::string>, TensorType> stateTypes;
  std::vector<PipelineEvent> events;
  InjectedDelay delay;
  /// Where the gradient sums' time goes (setProfile; null: off).
  OpProfile *profile = nullptr;

  // One step's.
  const StepContext *step = nullptr;
  const std::vector<std::map<std::string, HostTensor>> *inputs = nullptr;
  std::map<std::pair<int64_t, int64_t>, TensorHandle> values;
  std::map<std::pair<int64_t, int64_t>, int> readers;
  std::map<std::string, TensorHandle> grads;
  std::vector<std::optional<double>> losses;
  TensorHandle lrHandle, stepHandle;
  struct InFlight {
    std::unique_ptr<PendingCollective> pending;
    size_t event;
  };
  std::vector<InFlight> sends;
  bool slowStep = false;

  Impl(const PipelinePlan &plan, Backend &backend, Communicator *communicator,
       PeerLink *link, int64_t meshSize, int64_t meshRank)
      : plan(plan), backend(backend), communicator(communicator), link(link),
        meshSize(meshSize), meshRank(meshRank) {}

  int64_t globalRank(int64_t pipelineRank) const {
    return pipelineRank * meshSize + meshRank;
  }

  std::string where() const {
    return absl::StrCat("pipeline rank ", plan.rank);
  }

  /// The functions a compute task runs, in order.
  std::vector<size_t> functionsOf(const PipelineTask &task) const {
    std::vector<StagePhase> phases;
    switch (task.kind) {
    case Kind::Forward:
      phases = {StagePhase::Forward};
      break;
    case Kind::ForwardKeep:
      phases = {StagePhase::ForwardKeep};
      break;
    case Kind::Recompute:
      phases = {StagePhase::Recompute};
      break;
    case Kind::Backward:
      phases = {StagePhase::BackwardInput};
      if (!plan.splitBackward)
        phases.push_back(StagePhase::BackwardWeight);
      break;
    case Kind::Weight:
      phases = {StagePhase::BackwardWeight};
      break;
    default:
      break;
    }
    std::vector<size_t> result;
    for (StagePhase phase : phases)
      for (size_t i = 0; i < plan.functions.size(); ++i)
        if (plan.functions[i].stage == task.stage &&
            plan.functions[i].phase == phase)
          result.push_back(i);
    return result;
  }

  const StageTransfer &transferOf(const PipelineTask &task) const {
    return isForward(task.payload) ? plan.forwardSends[task.stage]
                                   : plan.backwardSends[task.stage];
  }

  int64_t tagOf(const PipelineTask &task) const {
    return pipelineTransferTag(!isForward(task.payload), task.stage,
                               task.microbatch, plan.microbatches);
  }

  size_t record(std::string name, std::string cat, double start, double end,
                bool compute) {
    events.push_back({std::move(name), std::move(cat), step->globalStep, start,
                      end, compute});
    return events.size() - 1;
  }

  void release(int64_t micro, int64_t id) {
    auto key = std::make_pair(micro, id);
    auto it = readers.find(key);
    if (it == readers.end() || --it->second <= 0) {
      values.erase(key);
      if (it != readers.end())
        readers.erase(it);
    }
  }

  void store(int64_t micro, int64_t id, TensorHandle handle) {
    auto key = std::make_pair(micro, id);
    if (readers.count(key))
      values[key] = std::move(handle);
  }

  /// Counts every local reader of every value of the step (compute tasks'
  /// `merak.value` arguments and sends), so values die at their last.
  void countReaders() {
    readers.clear();
    for (const PipelineTask &task : plan.tasks) {
      if (task.kind == Kind::Send) {
        for (int64_t id : transferOf(task).values)
          ++readers[{task.microbatch, id}];
        continue;
      }
      if (!task.isCompute())
        continue;
      for (size_t f : functionsOf(task))
        for (const Argument &arg : plan.functions[f].program.arguments)
          if (arg.role == ArgumentRole::Value)
            ++readers[{task.microbatch, arg.pipelineValue}];
    }
  }

  absl::Status call(size_t index, int64_t micro) {
    const StageFunction &fn = plan.functions[index];
    const Program &program = fn.program;
    std::vector<TensorHandle> args(program.arguments.size());
    for (size_t i = 0; i < program.arguments.size(); ++i) {
      const Argument &arg = program.arguments[i];
      switch (arg.role) {
      case ArgumentRole::Param:
      case ArgumentRole::Buffer:
      case ArgumentRole::OptState: {
        auto it = state.find({fn.stage, arg.name});
        if (it == state.end() || !it->second)
          return absl::FailedPreconditionError(
              absl::StrCat(argumentRoleNoun(arg.role), " '", arg.name,
                           "' of stage ", fn.stage, " has no value"));
        args[i] = it->second;
        break;
      }
      case ArgumentRole::Input: {
        const auto &batch = (*inputs)[size_t(micro)];
        auto it = batch.find(arg.name);
        if (it == batch.end())
          return absl::InvalidArgumentError(
              absl::StrCat("no data for input '", arg.name, "'"));
        const TensorType &type = program.values[arg.value].type;
        if (it->second.type != type)
          return absl::InvalidArgumentError(
              absl::StrCat("input '", arg.name, "' of micro-batch ", micro,
                           " is ", it->second.type.str(), ", but @",
                           program.function, " expects ", type.str()));
        absl::StatusOr<TensorHandle> h = backend.upload(it->second);
        if (!h.ok())
          return h.status();
        args[i] = *std::move(h);
        break;
      }
      case ArgumentRole::LearningRate:
      case ArgumentRole::Step: {
        bool isLr = arg.role == ArgumentRole::LearningRate;
        absl::StatusOr<TensorHandle> h = backend.upload(HostTensor::scalar(
            program.values[arg.value].type.dtype,
            isLr ? step->learningRate : double(step->optimizerStep)));
        if (!h.ok())
          return h.status();
        args[i] = *std::move(h);
        break;
      }
      case ArgumentRole::Value: {
        auto it = values.find({micro, arg.pipelineValue});
        if (it == values.end())
          return absl::FailedPreconditionError(
              absl::StrCat("@", program.function, " needs value ",
                           arg.pipelineValue, " of micro-batch ", micro,
                           ", which no earlier task computed or received"));
        args[i] = it->second;
        break;
      }
      case ArgumentRole::Grad: {
        auto it = grads.find(arg.name);
        if (it == grads.end()) {
          absl::StatusOr<TensorHandle> zeros =
              backend.zeros(program.values[arg.value].type);
          if (!zeros.ok())
            return zeros.status();
          args[i] = *std::move(zeros);
        } else {
          args[i] = it->second;
        }
        break;
      }
      }
    }
    absl::StatusOr<std::vector<TensorHandle>> results =
        executors[index]->call(*step, std::move(args));
    if (!results.ok())
      return absl::Status(results.status().code(),
                          absl::StrCat("@", program.function, " (micro-batch ",
                                       micro,
                                       "): ", results.status().message()));
    for (size_t r = 0; r < program.results.size(); ++r) {
      const ResultInfo &res = program.results[r];
      TensorHandle &h = (*results)[r];
      if (res.pipelineValue >= 0)
        store(micro, res.pipelineValue, h);
      if (!res.gradName.empty()) {
        double sumStart = now();
        TensorHandle &acc = grads[res.gradName];
        if (!acc) {
          absl::StatusOr<TensorHandle> zeros =
              backend.zeros(program.values[res.value].type);
          if (!zeros.ok())
            return zeros.status();
          acc = *std::move(zeros);
        }
        if (absl::Status s = backend.accumulate(*acc, *h); !s.ok())
          return s;
        if (profile) {
          ++profile->gradientSums.calls;
          profile->gradientSums.seconds += now() - sumStart;
        }
      }
      if (res.isLoss) {
        absl::StatusOr<HostTensor> host =
            backend.download(*h, program.values[res.value].type);
        if (!host.ok())
          return host.status();
        losses[size_t(micro)] = host->elementAsDouble(0);
      }
      if (res.updatesArgument >= 0)
        state[{fn.stage, program.arguments[res.updatesArgument].name}] = h;
    }
    for (const Argument &arg : program.arguments)
      if (arg.role == ArgumentRole::Value)
        release(micro, arg.pipelineValue);
    return absl::OkStatus();
  }

  absl::Status compute(const PipelineTask &task) {
    double start = now();
    for (size_t f : functionsOf(task))
      if (absl::Status s = call(f, task.microbatch); !s.ok())
        return s;
    double end = now();
    if (slowStep && task.stage == delay.stage && delay.fraction > 0) {
      std::this_thread::sleep_for(
          std::chrono::duration<double>((end - start) * delay.fraction));
      end = now();
    }
    record(task.text, category(task.kind), start, end, /*compute=*/true);
    return absl::OkStatus();
  }

  absl::Status send(const PipelineTask &task, int64_t toPipelineRank) {
    const StageTransfer &t = transferOf(task);
    if (t.values.empty())
      return absl::OkStatus();
    std::vector<TensorHandle> keep;
    std::vector<DeviceTensor *> tensors;
    for (int64_t id : t.values) {
      auto it = values.find({task.microbatch, id});
      if (it == values.end())
        return absl::FailedPreconditionError(
            absl::StrCat("'", task.text, "': value ", id, " of micro-batch ",
                         task.microbatch, " is not there to send"));
      keep.push_back(it->second);
      tensors.push_back(it->second.get());
    }
    double start = now();
    absl::StatusOr<std::unique_ptr<PendingCollective>> pending =
        link->send(globalRank(toPipelineRank), tagOf(task), tensors, t.types);
    if (!pending.ok())
      return pending.status();
    for (int64_t id : t.values)
      release(task.microbatch, id);
    size_t event = record(task.text, "send", start, now(), false);
    sends.push_back({*std::move(pending), event});
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<PendingCollective>>
  postRecv(const PipelineTask &task) {
    const StageTransfer &t = transferOf(task);
    if (t.values.empty())
      return std::unique_ptr<PendingCollective>();
    return link->recv(globalRank(task.peer), tagOf(task), t.types);
  }

  /// Completes a posted receive and stores what it brought.
  absl::Status finishRecv(const PipelineTask &task,
                          std::unique_ptr<PendingCollective> pending,
                          double waitStart) {
    if (!pending)
      return absl::OkStatus();
    absl::StatusOr<std::vector<TensorHandle>> got = pending->finish();
    if (!got.ok())
      return absl::Status(
          got.status().code(),
          absl::StrCat("'", task.text, "': ", got.status().message()));
    const StageTransfer &t = transferOf(task);
    for (size_t k = 0; k < t.values.size(); ++k)
      store(task.microbatch, t.values[k], (*got)[k]);
    record(task.text, "recv", waitStart, now(), false);
    return absl::OkStatus();
  }

  /// Marks the sends that completed (their trace events end now).
  absl::Status pollSends(bool wait) {
    for (auto it = sends.begin(); it != sends.end();) {
      if (!wait && !it->pending->ready()) {
        ++it;
        continue;
      }
      if (absl::Status s = it->pending->wait(); !s.ok())
        return absl::Status(s.code(), absl::StrCat("'", events[it->event].name,
                                                   "': ", s.message()));
      events[it->event].end = now();
      it = sends.erase(it);
    }
    return absl::OkStatus();
  }

  /// The order the static kind runs its program in: each send right after
  /// the compute task that produces what it carries. Sends are posted, not
  /// waited for, so hoisting one cannot deadlock; left where the schedule's
  /// unit-time simulation placed it, a send can sit behind a receive that
  /// waits on the peer, which waits on the send (a bubble the schedule does
  /// not have).
  std::vector<size_t> staticOrder() const {
    size_t n = plan.tasks.size();
    std::map<std::tuple<bool, int64_t, int64_t>, size_t> producer;
    for (size_t i = 0; i < n; ++i) {
      const PipelineTask &t = plan.tasks[i];
      if (isForward(t.kind) || t.kind == Kind::Backward)
        producer[{t.kind == Kind::Backward, t.stage, t.microbatch}] = i;
    }
    std::vector<std::vector<size_t>> after(n);
    std::vector<bool> moved(n, false);
    for (size_t i = 0; i < n; ++i) {
      const PipelineTask &t = plan.tasks[i];
      if (t.kind != Kind::Send)
        continue;
      auto it =
          producer.find({t.payload == Kind::Backward, t.stage, t.microbatch});
      if (it == producer.end() || it->second > i)
        continue;
      after[it->second].push_back(i);
      moved[i] = true;
    }
    std::vector<size_t> order;
    order.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      if (moved[i])
        continue;
      order.push_back(i);
      order.insert(order.end(), after[i].begin(), after[i].end());
    }
    return order;
  }

  absl::Status runStatic() {
    constexpr size_t kRecvAhead = 2;
    std::vector<size_t> recvTasks;
    for (size_t i = 0; i < plan.tasks.size(); ++i)
      if (plan.tasks[i].kind == Kind::Recv)
        recvTasks.push_back(i);
    std::map<size_t, std::unique_ptr<PendingCollective>> posted;
    size_t nextPost = 0, consumed = 0;
    auto postAhead = [&]() -> absl::Status {
      while (nextPost < recvTasks.size() && nextPost < consumed + kRecvAhead) {
        const PipelineTask &task = plan.tasks[recvTasks[nextPost]];
        absl::StatusOr<std::unique_ptr<PendingCollective>> p = postRecv(task);
        if (!p.ok())
          return p.status();
        posted[recvTasks[nextPost++]] = *std::move(p);
      }
      return absl::OkStatus();
    };
    if (absl::Status s = postAhead(); !s.ok())
      return s;
    for (size_t i : staticOrder()) {
      const PipelineTask &task = plan.tasks[i];
      absl::Status s;
      if (task.isCompute()) {
        s = compute(task);
      } else if (task.kind == Kind::Send) {
        s = send(task, task.peer);
      } else {
        ++consumed;
        s = postAhead();
        if (s.ok()) {
          auto node = posted.extract(i);
          s = finishRecv(task, std::move(node.mapped()), now());
        }
      }
      if (s.ok())
        s = pollSends(/*wait=*/false);
      if (!s.ok())
        return s;
    }
    return absl::OkStatus();
  }

  /// The dynamic kind: every receive posted now; then, whenever free, the
  /// ready compute task of highest priority (backward before forward, the
  /// lowest micro-batch, the highest stage), a forward only while fewer than
  /// the rank's in-flight limit of micro-batches wait for their backward.
  absl::Status runDynamic() {
    std::map<std::tuple<bool, int64_t, int64_t>, size_t> recvOf;
    std::map<size_t, std::unique_ptr<PendingCollective>> posted;
    std::vector<size_t> pendingTasks;
    for (size_t i = 0; i < plan.tasks.size(); ++i) {
      const PipelineTask &task = plan.tasks[i];
      if (task.kind == Kind::Recv) {
        absl::StatusOr<std::unique_ptr<PendingCollective>> p = postRecv(task);
        if (!p.ok())
          return p.status();
        posted[i] = *std::move(p);
        recvOf[{!isForward(task.payload), task.stage, task.microbatch}] = i;
      } else if (task.isCompute() && task.kind != Kind::Recompute) {
        pendingTasks.push_back(i);
      }
    }
    // R runs right before its B.
    std::map<std::pair<int64_t, int64_t>, size_t> recomputeOf;
    for (size_t i = 0; i < plan.tasks.size(); ++i)
      if (plan.tasks[i].kind == Kind::Recompute)
        recomputeOf[{plan.tasks[i].stage, plan.tasks[i].microbatch}] = i;
    std::set<std::pair<int64_t, int64_t>> forwardDone, backwardDone;
    int64_t limit = plan.rank < int64_t(plan.inflightLimit.size())
                        ? plan.inflightLimit[plan.rank]
                        : 0;
    // Whether the transfer a task waits for has arrived (or is local).
    auto arrived = [&](bool backward, int64_t fromStage, int64_t micro,
                       bool block) -> absl::StatusOr<bool> {
      auto it = recvOf.find({backward, fromStage, micro});
      if (it == recvOf.end())
        return true; // local, or nothing crosses
      auto p = posted.find(it->second);
      if (p == posted.end())
        return true; // already completed
      if (!block && p->second && !p->second->ready())
        return false;
      double start = now();
      if (absl::Status s =
              finishRecv(plan.tasks[it->second], std::move(p->second), start);
          !s.ok())
        return s;
      posted.erase(p);
      return true;
    };
    auto isReady = [&](const PipelineTask &task,
                       bool block) -> absl::StatusOr<bool> {
      int64_t s = task.stage, m = task.microbatch;
      switch (task.kind) {
      case Kind::Forward:
      case Kind::ForwardKeep:
        if (s > 0) {
          if (plan.rankOf(s - 1) == plan.rank)
            return forwardDone.count({s - 1, m}) > 0;
          return arrived(false, s - 1, m, block);
        }
        return true;
      case Kind::Backward:
        if (!forwardDone.count({s, m}))
          return false;
        if (s + 1 < plan.stages) {
          if (plan.rankOf(s + 1) == plan.rank)
            return backwardDone.count({s + 1, m}) > 0;
          return arrived(true, s + 1, m, block);
        }
        return true;
      case Kind::Weight:
        return backwardDone.count({s, m}) > 0;
      default:
        return false;
      }
    };
    auto rankOrder = [&](const PipelineTask &t) {
      int group = t.kind == Kind::Backward ? 0 : isForward(t.kind) ? 1 : 2;
      return std::make_tuple(group, t.microbatch, -t.stage);
    };
    int64_t choices = 0;
    while (!pendingTasks.empty()) {
      int64_t chosen = -1;
      if (meshRank == 0) {
        // Pick the best ready task; wait (polling) while none is.
        while (chosen < 0) {
          if (!link)
            return absl::InternalError("no task is ready on a pipeline of "
                                       "one rank");
          int64_t seen = link->finished();
          int64_t inflight =
              int64_t(forwardDone.size()) - int64_t(backwardDone.size());
          std::vector<size_t> order(pendingTasks.size());
          for (size_t k = 0; k < order.size(); ++k)
            order[k] = k;
          std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
            return rankOrder(plan.tasks[pendingTasks[a]]) <
                   rankOrder(plan.tasks[pendingTasks[b]]);
          });
          for (size_t k : order) {
            const PipelineTask &task = plan.tasks[pendingTasks[k]];
            if (isForward(task.kind) && limit > 0 && inflight >= limit)
              continue;
            absl::StatusOr<bool> ready = isReady(task, /*block=*/false);
            if (!ready.ok())
              return ready.status();
            if (*ready) {
              chosen = int64_t(k);
              break;
            }
          }
          if (chosen < 0) {
            if (absl::Status s = pollSends(false); !s.ok())
              return s;
            link->waitForProgress(seen, std::chrono::milliseconds(50));
          }
        }
        // The mesh peers run the same task, so their collectives match.
        for (int64_t peer = 1; peer < meshSize; ++peer) {
          absl::StatusOr<TensorHandle> h = backend.upload(
              HostTensor::scalar(DType::I64, double(pendingTasks[chosen])));
          if (!h.ok())
            return h.status();
          absl::StatusOr<std::unique_ptr<PendingCollective>> p =
              link->send(plan.rank * meshSize + peer, kChoiceTagBase + choices,
                         {h->get()}, {TensorType{DType::I64, {}}});
          if (!p.ok())
            return p.status();
          sends.push_back(
              {*std::move(p), record("choice", "send", now(), now(), false)});
        }
      } else {
        absl::StatusOr<std::unique_ptr<PendingCollective>> p =
            link->recv(plan.rank * meshSize, kChoiceTagBase + choices,
                       {TensorType{DType::I64, {}}});
        if (!p.ok())
          return p.status();
        absl::StatusOr<std::vector<TensorHandle>> got = (*p)->finish();
        if (!got.ok())
          return got.status();
        absl::StatusOr<HostTensor> host =
            backend.download(*(*got)[0], TensorType{DType::I64, {}});
        if (!host.ok())
          return host.status();
        size_t index = size_t(host->elementAsDouble(0));
        auto it = std::find(pendingTasks.begin(), pendingTasks.end(), index);
        if (it == pendingTasks.end())
          return absl::InternalError(
              absl::StrCat("the mesh's first rank chose task #", index,
                           ", which this rank has run or does not have"));
        chosen = int64_t(it - pendingTasks.begin());
        absl::StatusOr<bool> ready = isReady(plan.tasks[index], /*block=*/true);
        if (!ready.ok())
          return ready.status();
        if (!*ready)
          return absl::InternalError(absl::StrCat(
              "the mesh's first rank chose '", plan.tasks[index].text,
              "', which is not ready here"));
      }
      ++choices;
      size_t index = pendingTasks[chosen];
      pendingTasks.erase(pendingTasks.begin() + chosen);
      const PipelineTask &task = plan.tasks[index];
      if (task.kind == Kind::Backward) {
        auto r = recomputeOf.find({task.stage, task.microbatch});
        if (r != recomputeOf.end())
          if (absl::Status s = compute(plan.tasks[r->second]); !s.ok())
            return s;
      }
      if (absl::Status s = compute(task); !s.ok())
        return s;
      int64_t s = task.stage;
      if (isForward(task.kind)) {
        forwardDone.insert({s, task.microbatch});
        if (s + 1 < plan.stages && plan.rankOf(s + 1) != plan.rank) {
          PipelineTask out = task;
          out.kind = Kind::Send;
          out.payload = Kind::Forward;
          out.text = absl::StrCat("send F(", s, ",", task.microbatch, ") -> ",
                                  plan.rankOf(s + 1));
          if (absl::Status st = send(out, plan.rankOf(s + 1)); !st.ok())
            return st;
        }
      } else if (task.kind == Kind::Backward) {
        backwardDone.insert({s, task.microbatch});
        if (s > 0 && plan.rankOf(s - 1) != plan.rank) {
          PipelineTask out = task;
          out.kind = Kind::Send;
          out.payload = Kind::Backward;
          out.text = absl::StrCat("send B(", s, ",", task.microbatch, ") -> ",
                                  plan.rankOf(s - 1));
          if (absl::Status st = send(out, plan.rankOf(s - 1)); !st.ok())
            return st;
        }
      }
      if (absl::Status st = pollSends(false); !st.ok())
        return st;
    }
    return absl::OkStatus();
  }

  /// The mean loss of the step on every rank: the last stage's rank sends
  /// it to the others (the same mesh rank of every pipeline rank).
  absl::StatusOr<std::optional<double>> shareLoss() {
    int64_t owner = plan.rankOf(plan.lossStage);
    std::optional<double> mean;
    if (plan.rank == owner) {
      double sum = 0;
      for (size_t m = 0; m < losses.size(); ++m) {
        if (!losses[m])
          return absl::InternalError(
              absl::StrCat("micro-batch ", m, " has no loss"));
        sum += *losses[m];
      }
      mean = sum / double(losses.size());
    }
    if (plan.pp == 1)
      return mean;
    TensorType type{DType::F64, {}};
    if (plan.rank == owner) {
      absl::StatusOr<TensorHandle> h =
          backend.upload(HostTensor::scalar(DType::F64, *mean));
      if (!h.ok())
        return h.status();
      std::vector<std::unique_ptr<PendingCollective>> out;
      for (int64_t r = 0; r < plan.pp; ++r) {
        if (r == owner)
          continue;
        absl::StatusOr<std::unique_ptr<PendingCollective>> p =
            link->send(globalRank(r), kLossTag, {h->get()}, {type});
        if (!p.ok())
          return p.status();
        out.push_back(*std::move(p));
      }
      for (auto &p : out)
        if (absl::Status s = p->wait(); !s.ok())
          return s;
      return mean;
    }
    absl::StatusOr<std::unique_ptr<PendingCollective>> p =
        link->recv(globalRank(owner), kLossTag, {type});
    if (!p.ok())
      return p.status();
    absl::StatusOr<std::vector<TensorHandle>> got = (*p)->finish();
    if (!got.ok())
      return got.status();
    absl::StatusOr<HostTensor> host = backend.download(*(*got)[0], type);
    if (!host.ok())
      return host.status();
    return std::optional<double>(host->elementAsDouble(0));
  }

  /// Sums each tied parameter's gradient over the pipeline ranks that own
  /// it, in rank order, so every owner's copy gets the same update.
  absl::Status sumTiedGradients() {
    int64_t index = 0;
    for (const auto &[name, stages] : plan.tied) {
      int64_t tag = kTiedTagBase + index++;
      std::set<int64_t> owners;
      for (int64_t s : stages)
        owners.insert(plan.rankOf(s));
      if (owners.size() < 2 || !owners.count(plan.rank))
        continue;
      auto mine = grads.find(name);
      if (mine == grads.end())
        return absl::InternalError(absl::StrCat(
            "no gradient of the tied parameter '", name, "' on ", where()));
      TensorType type;
      for (const StageFunction &f : plan.functions)
        for (const ResultInfo &res : f.program.results)
          if (res.gradName == name)
            type = f.program.values[res.value].type;
      double start = now();
      std::vector<std::unique_ptr<PendingCollective>> out;
      std::map<int64_t, std::unique_ptr<PendingCollective>> in;
      for (int64_t r : owners) {
        if (r == plan.rank)
          continue;
        absl::StatusOr<std::unique_ptr<PendingCollective>> s =
            link->send(globalRank(r), tag, {mine->second.get()}, {type});
        if (!s.ok())
          return s.status();
        out.push_back(*std::move(s));
        absl::StatusOr<std::unique_ptr<PendingCollective>> q =
            link->recv(globalRank(r), tag, {type});
        if (!q.ok())
          return q.status();
        in[r] = *std::move(q);
      }
      absl::StatusOr<TensorHandle> total = backend.zeros(type);
      if (!total.ok())
        return total.status();
      for (int64_t r : owners) {
        TensorHandle part = mine->second;
        if (r != plan.rank) {
          absl::StatusOr<std::vector<TensorHandle>> got = in[r]->finish();
          if (!got.ok())
            return got.status();
          part = (*got)[0];
        }
        if (absl::Status s = backend.accumulate(**total, *part); !s.ok())
          return s;
      }
      for (auto &p : out)
        if (absl::Status s = p->wait(); !s.ok())
          return s;
      mine->second = *std::move(total);
      record(absl::StrCat("tied '", name, "'"), "collective", start, now(),
             false);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<StepOutcome>
  run(const StepContext &ctx,
      const std::vector<std::map<std::string, HostTensor>> &batch,
      bool skipNonFinite) {
    if (int64_t(batch.size()) != plan.microbatches)
      return absl::InvalidArgumentError(absl::StrCat(
          "the step has ", batch.size(),
          " micro-batches of inputs, the schedule ", plan.microbatches));
    step = &ctx;
    inputs = &batch;
    // An evaluation is not traced: its events would join the training
    // steps' (and the bubble measured over them).
    const size_t eventsBefore = events.size();
    values.clear();
    grads.clear();
    sends.clear();
    losses.assign(size_t(plan.microbatches), std::nullopt);
    // The same steps on every rank for a seed.
    slowStep =
        delay.stage >= 0 &&
        double(splitMix64(delay.seed ^ splitMix64(uint64_t(ctx.globalStep))) >>
               11) *
                0x1.0p-53 <
            delay.probability;
    countReaders();
    if (absl::Status s = backend.beginStep(ctx); !s.ok())
      return s;
    absl::Status s = plan.dynamic ? runDynamic() : runStatic();
    if (s.ok())
      s = pollSends(/*wait=*/true);
    if (!s.ok())
      return absl::Status(
          s.code(),
          absl::StrCat(where(), ", step ", ctx.globalStep, ": ", s.message()));
    values.clear();

    absl::StatusOr<std::optional<double>> loss = shareLoss();
    if (!loss.ok())
      return loss.status();
    StepOutcome outcome{*loss, false, std::nullopt};
    if (ctx.evaluate) {
      // Dropout was off and batch norm left its statistics alone; the
      // gradients are dropped and the optimizer does not run.
      grads.clear();
      events.resize(eventsBefore);
      return outcome;
    }
    if (*loss && !std::isfinite(**loss)) {
      if (!skipNonFinite)
        return nonFiniteLoss(ctx.globalStep, **loss);
      outcome.skipped = true;
      grads.clear();
      return outcome;
    }

    if (absl::Status t = sumTiedGradients(); !t.ok())
      return t;
    for (auto &[name, g] : grads)
      if (absl::Status t = backend.scale(*g, 1.0 / double(plan.microbatches));
          !t.ok())
        return t;
    double start = now();
    for (size_t i = 0; i < plan.functions.size(); ++i)
      if (plan.functions[i].phase == StagePhase::Optimizer)
        if (absl::Status t = call(i, 0); !t.ok())
          return t;
    record("optimizer", "optimizer", start, now(), false);
    grads.clear();
    return outcome;
  }
};

absl::StatusOr<std::unique_ptr<PipelineExecutor>>
PipelineExecutor::create(const PipelinePlan &plan, Backend &backend,
                         Communicator *communicator, PeerLink *link,
                         int64_t meshSize, int64_t meshRank) {
  if (plan.pp > 1 && !link)
    return absl::FailedPreconditionError(
        "a pipeline of several ranks needs a point-to-point link");
  std::unique_ptr<PipelineExecutor> executor(new PipelineExecutor());
  executor->impl = std::make_unique<Impl>(plan, backend, communicator, link,
                                          meshSize, meshRank);
  for (const StageFunction &f : plan.functions) {
    absl::StatusOr<std::unique_ptr<Executor>> e =
        Executor::create(f.program, backend, communicator);
    if (!e.ok())
      return e.status();
    executor->impl->executors.push_back(*std::move(e));
  }
  return executor;
}

PipelineExecutor::~PipelineExecutor() = default;

absl::Status
PipelineExecutor::loadState(const std::map<std::string, HostTensor> &tensors,
                            const std::string &sourceName,
                            bool requireOptimizerState) {
  Impl &d = *impl;
  d.state.clear();
  for (const StageFunction &f : d.plan.functions)
    for (const Argument &arg : f.program.arguments) {
      if (!arg.isState() || d.state.count({f.stage, arg.name}))
        continue;
      const TensorType &type = f.program.values[arg.value].type;
      absl::StatusOr<TensorHandle> handle = loadStateArgument(
          d.backend, arg, type, tensors, sourceName, requireOptimizerState);
      if (!handle.ok())
        return handle.status();
      d.state[{f.stage, arg.name}] = *std::move(handle);
      d.stateTypes[{f.stage, arg.name}] = type;
    }
  return absl::OkStatus();
}

absl::StatusOr<StepOutcome> PipelineExecutor::runStep(
    const StepContext &step,
    const std::vector<std::map<std::string, HostTensor>> &inputs,
    bool skipNonFinite) {
  return impl->run(step, inputs, skipNonFinite);
}

absl::StatusOr<std::map<std::string, HostTensor>>
PipelineExecutor::stateToHost() {
  std::map<std::string, HostTensor> result;
  for (const auto &[key, handle] : impl->state) {
    if (result.count(key.second) || !handle)
      continue; // a tied parameter: the lowest local stage's copy
    absl::StatusOr<HostTensor> host =
        impl->backend.download(*handle, impl->stateTypes[key]);
    if (!host.ok())
      return host.status();
    result[key.second] = *std::move(host);
  }
  return result;
}

const std::vector<PipelineEvent> &PipelineExecutor::events() const {
  return impl->events;
}

void PipelineExecutor::setProfile(OpProfile *profile) {
  impl->profile = profile;
  for (auto &executor : impl->executors)
    executor->setProfile(profile);
}

void PipelineExecutor::setCheckNumerics(bool on) {
  for (auto &executor : impl->executors)
    executor->setCheckNumerics(on);
}

void PipelineExecutor::setInjectedDelay(const InjectedDelay &delay) {
  impl->delay = delay;
}

//===----------------------------------------------------------------------===//
// Traces and the bubble
//===----------------------------------------------------------------------===//

std::string
pipelineTraceJson(const std::vector<std::vector<PipelineEvent>> &eventsByRank,
                  const std::vector<std::string> &rankNames) {
  double origin = INFINITY;
  for (const auto &events : eventsByRank)
    for (const PipelineEvent &e : events)
      origin = std::min(origin, e.start);
  nlohmann::json trace = nlohmann::json::array();
  for (size_t r = 0; r < eventsByRank.size(); ++r) {
    trace.push_back({{"name", "process_name"},
                     {"ph", "M"},
                     {"pid", r},
                     {"args", {{"name", rankNames[r]}}}});
    trace.push_back({{"name", "process_sort_index"},
                     {"ph", "M"},
                     {"pid", r},
                     {"args", {{"sort_index", r}}}});
    for (int tid = 0; tid < 2; ++tid)
      trace.push_back(
          {{"name", "thread_name"},
           {"ph", "M"},
           {"pid", r},
           {"tid", tid},
           {"args", {{"name", tid == 0 ? "compute" : "transfers"}}}});
    for (const PipelineEvent &e : eventsByRank[r]) {
      bool comm = e.category == "send" || e.category == "recv" ||
                  e.category == "collective";
      trace.push_back({{"name", e.name},
                       {"cat", e.category},
                       {"ph", "X"},
                       {"pid", r},
                       {"tid", comm ? 1 : 0},
                       {"ts", (e.start - origin) * 1e6},
                       {"dur", std::max(0.0, e.end - e.start) * 1e6},
                       {"args", {{"step", e.step}}}});
    }
  }
  nlohmann::json doc = {{"traceEvents", trace}, {"displayTimeUnit", "ms"}};
  return doc.dump();
}

BubbleMeasurement
measureBubble(const std::vector<std::vector<PipelineEvent>> &eventsByRank,
              int64_t fromStep) {
  struct Span {
    double first = INFINITY, last = -INFINITY, busy = 0;
  };
  std::map<int64_t, Span> bySteps;
  for (const auto &events : eventsByRank)
    for (const PipelineEvent &e : events) {
      if (!e.compute || e.step < fromStep)
        continue;
      Span &s = bySteps[e.step];
      s.first = std::min(s.first, e.start);
      s.last = std::max(s.last, e.end);
      s.busy += e.end - e.start;
    }
  BubbleMeasurement m;
  double sum = 0;
  for (const auto &[step, s] : bySteps) {
    double span = s.last - s.first;
    if (span <= 0)
      continue;
    sum += 1.0 - s.busy / (double(eventsByRank.size()) * span);
    ++m.steps;
  }
  m.fraction = m.steps ? sum / double(m.steps) : 0;
  return m;
}

TaskTimesPerStep taskTimesPerStep(const std::vector<PipelineEvent> &events,
                                  int64_t fromStep) {
  TaskTimesPerStep t;
  std::set<int64_t> steps;
  // Forward tasks per step of the lowest stage this rank runs.
  std::map<int64_t, std::map<std::string, int64_t>> forwardsByStage;
  for (const PipelineEvent &e : events) {
    if (!e.compute || e.step < fromStep)
      continue;
    double ms = (e.end - e.start) * 1e3;
    if (e.category == "forward") {
      t.forwardMs += ms;
      // `F(stage,micro)`: the stage is the text up to the comma.
      std::string stage = e.name.substr(0, e.name.find(','));
      ++forwardsByStage[e.step][stage];
    } else if (e.category == "backward") {
      t.backwardMs += ms;
    } else if (e.category == "weight") {
      t.weightMs += ms;
    } else if (e.category == "recompute") {
      t.recomputeMs += ms;
    } else {
      continue;
    }
    steps.insert(e.step);
  }
  t.steps = int64_t(steps.size());
  if (t.steps == 0)
    return t;
  for (double *x : {&t.forwardMs, &t.backwardMs, &t.weightMs, &t.recomputeMs})
    *x /= double(t.steps);
  const auto &last = forwardsByStage.rbegin()->second;
  t.microbatches = last.empty() ? 0 : last.begin()->second;
  return t;
}

std::string serializeEvents(const std::vector<PipelineEvent> &events) {
  std::ostringstream out;
  out.precision(17);
  for (const PipelineEvent &e : events)
    out << e.step << '\t' << e.start << '\t' << e.end << '\t'
        << (e.compute ? 1 : 0) << '\t' << e.category << '\t' << e.name << '\n';
  return out.str();
}

absl::StatusOr<std::vector<PipelineEvent>>
deserializeEvents(const std::string &text) {
  std::vector<PipelineEvent> events;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<std::string> fields =
        absl::StrSplit(line, absl::MaxSplits('\t', 5));
    if (fields.size() != 6)
      return absl::InvalidArgumentError(
          absl::StrCat("malformed pipeline event '", line, "'"));
    PipelineEvent e;
    try {
      e.step = std::stoll(fields[0]);
      e.start = std::stod(fields[1]);
      e.end = std::stod(fields[2]);
    } catch (...) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed pipeline event '", line, "'"));
    }
    e.compute = fields[3] == "1";
    e.category = fields[4];
    e.name = fields[5];
    events.push_back(std::move(e));
  }
  return events;
}

} // namespace merak::runtime

namespace merak::runtime {

absl::StatusOr<Program> bindPipelineToRank(PipelinePlan &plan, int64_t meshRank,
                                           int64_t meshSize,
                                           const BindOptions &mode) {
  Program groups;
  groups.function = "pipeline";
  groups.rank = plan.rank * meshSize + meshRank;
  for (StageFunction &f : plan.functions) {
    Program &program = f.program;
    if (absl::Status s = bindToRank(program, meshRank, mode); !s.ok())
      return s;
    if (program.mesh && !groups.mesh)
      groups.mesh = program.mesh;
    // Renumber the program's groups into the union (by mesh axes), with
    // global ranks.
    std::vector<int> renumber(program.groups.size(), -1);
    for (size_t g = 0; g < program.groups.size(); ++g) {
      ProcessGroupSpec spec = program.groups[g];
      for (int64_t &r : spec.members.ranks)
        r += plan.rank * meshSize;
      auto it = std::find_if(groups.groups.begin(), groups.groups.end(),
                             [&](const ProcessGroupSpec &u) {
                               return u.meshAxes == spec.meshAxes;
                             });
      if (it == groups.groups.end()) {
        groups.groups.push_back(spec);
        it = groups.groups.end() - 1;
      }
      renumber[g] = int(it - groups.groups.begin());
    }
    for (Instruction &inst : program.instructions)
      if (inst.attrs.group >= 0)
        inst.attrs.group = renumber[size_t(inst.attrs.group)];
    program.groups = groups.groups;
  }
  // Every program indexes the union.
  for (StageFunction &f : plan.functions)
    f.program.groups = groups.groups;
  return groups;
}

} // namespace merak::runtime

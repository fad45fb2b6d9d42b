//===- Executor.cpp - runs a rank program step by step on a backend -------===//

#include "merak/Runtime/Executor.h"
#include "merak/Runtime/Fusion.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>

namespace merak::runtime {

DeviceTensor::~DeviceTensor() = default;
Backend::~Backend() = default;
Communicator::~Communicator() = default;
PendingCollective::~PendingCollective() = default;

absl::Status Communicator::execute(KernelCall &call) {
  absl::StatusOr<std::unique_ptr<PendingCollective>> pending = start(call);
  if (!pending.ok())
    return pending.status();
  absl::StatusOr<std::vector<TensorHandle>> results = (*pending)->finish();
  if (!results.ok())
    return results.status();
  call.results = *std::move(results);
  return absl::OkStatus();
}

namespace {

/// `FILE:LINE:COL: 'mesh.all_reduce' failed: ...`
absl::Status instructionFailed(const Instruction &inst, const absl::Status &s) {
  return absl::Status(
      s.code(), absl::StrCat(inst.location.empty() ? "" : inst.location,
                             inst.location.empty() ? "" : ": ", "'",
                             opFullName(inst.kind), "' failed: ", s.message()));
}

} // namespace

absl::Status nonFiniteLoss(int64_t step, double loss) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.9g", loss);
  return absl::OutOfRangeError(
      absl::StrCat("non-finite loss at step ", step, " (", text, ")"));
}

absl::StatusOr<std::unique_ptr<Executor>>
Executor::create(const Program &program, Backend &backend,
                 Communicator *communicator) {
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction &inst = program.instructions[i];
    if (inst.kind == OpKind::Wait &&
        (inst.completes < 0 || size_t(inst.completes) >= i ||
         program.instructions[inst.completes].waitAt != int(i)))
      return absl::FailedPreconditionError(
          absl::StrCat("wait #", i, " completes no collective"));
    if (isCollective(inst.kind) && !inst.attrs.identity) {
      if (inst.attrs.group < 0)
        return absl::FailedPreconditionError(
            absl::StrCat("'", opFullName(inst.kind),
                         "' has no process group: bind the program to a "
                         "rank first"));
      if (!communicator)
        return absl::FailedPreconditionError(
            absl::StrCat("@", program.function, " communicates between ",
                         program.worldSize(),
                         " processes, but runs without a "
                         "communicator"));
    }
  }
  std::unique_ptr<Executor> executor(
      new Executor(program, backend, communicator));
  executor->constants.resize(program.values.size());
  for (const ProgramConstant &c : program.constants) {
    if (program.values[c.value].lastUse < 0)
      continue;
    absl::StatusOr<TensorHandle> handle = backend.upload(c.data);
    if (!handle.ok())
      return handle.status();
    executor->constants[c.value] = *std::move(handle);
  }
  executor->state.resize(program.arguments.size());
  if (program.arenaBytes > 0) {
    absl::StatusOr<TensorHandle> arena =
        backend.allocateArena(program.arenaBytes);
    if (!arena.ok())
      return arena.status();
    executor->arena = *std::move(arena);
  }
  return executor;
}

absl::StatusOr<TensorHandle>
loadStateArgument(Backend &backend, const Argument &arg, const TensorType &type,
                  const std::map<std::string, HostTensor> &tensors,
                  const std::string &sourceName, bool requireOptimizerState) {
  auto it = tensors.find(arg.name);
  if (it == tensors.end()) {
    if (arg.role == ArgumentRole::OptState && !requireOptimizerState)
      return backend.zeros(type);
    return absl::NotFoundError(absl::StrCat(argumentRoleNoun(arg.role), " '",
                                            arg.name, "' is missing from ",
                                            sourceName));
  }
  const HostTensor &host = it->second;
  bool convertible = host.type.dtype != type.dtype &&
                     isFloat(host.type.dtype) && isFloat(type.dtype);
  if (host.type.shape != type.shape ||
      (host.type.dtype != type.dtype && !convertible))
    return absl::InvalidArgumentError(absl::StrCat(
        argumentRoleNoun(arg.role), " '", arg.name, "' is ", host.type.str(),
        " in ", sourceName, ", but the program expects ", type.str()));
  absl::StatusOr<TensorHandle> handle = backend.upload(host);
  if (handle.ok() && convertible)
    handle = backend.convert(**handle, type.dtype);
  return handle;
}

absl::Status
Executor::loadState(const std::map<std::string, HostTensor> &tensors,
                    const std::string &sourceName, bool requireOptimizerState) {
  std::vector<TensorHandle> loaded(program.arguments.size());
  for (size_t i = 0; i < program.arguments.size(); ++i) {
    const Argument &arg = program.arguments[i];
    if (!arg.isState())
      continue;
    absl::StatusOr<TensorHandle> handle =
        loadStateArgument(backend, arg, program.values[arg.value].type, tensors,
                          sourceName, requireOptimizerState);
    if (!handle.ok())
      return handle.status();
    loaded[i] = *std::move(handle);
  }
  state = std::move(loaded);
  return absl::OkStatus();
}

absl::StatusOr<StepOutcome>
Executor::runStep(const StepContext &step,
                  const std::vector<HostTensor> &inputs, bool skipNonFinite,
                  std::vector<HostTensor> *results) {
  const auto &values = program.values;
  std::vector<TensorHandle> live(values.size());
  if (absl::Status s = backend.beginStep(step); !s.ok())
    return s;

  ValueId lrValue = kNoValue, stepValue = kNoValue;
  size_t nextInput = 0;
  for (size_t i = 0; i < program.arguments.size(); ++i) {
    const Argument &arg = program.arguments[i];
    const TensorType &type = values[arg.value].type;
    TensorHandle handle;
    switch (arg.role) {
    case ArgumentRole::Input: {
      if (nextInput >= inputs.size())
        return absl::InvalidArgumentError(
            absl::StrCat("no data for input '", arg.name, "'"));
      const HostTensor &host = inputs[nextInput++];
      if (host.type != type)
        return absl::InvalidArgumentError(
            absl::StrCat("input '", arg.name, "' is ", host.type.str(),
                         ", but the program expects ", type.str()));
      absl::StatusOr<TensorHandle> h = backend.upload(host);
      if (!h.ok())
        return h.status();
      handle = *std::move(h);
      break;
    }
    case ArgumentRole::LearningRate:
    case ArgumentRole::Step: {
      bool isLr = arg.role == ArgumentRole::LearningRate;
      double v = isLr ? step.learningRate : double(step.optimizerStep);
      (isLr ? lrValue : stepValue) = arg.value;
      absl::StatusOr<TensorHandle> h =
          backend.upload(HostTensor::scalar(type.dtype, v));
      if (!h.ok())
        return h.status();
      handle = *std::move(h);
      break;
    }
    case ArgumentRole::LossScale: {
      absl::StatusOr<TensorHandle> h =
          backend.upload(HostTensor::scalar(type.dtype, step.lossScale));
      if (!h.ok())
        return h.status();
      handle = *std::move(h);
      break;
    }
    default:
      handle = state[i];
      if (!handle)
        return absl::FailedPreconditionError(absl::StrCat(
            argumentRoleNoun(arg.role), " '", arg.name, "' has no value"));
      break;
    }
    if (values[arg.value].lastUse >= 0)
      live[arg.value] = std::move(handle);
  }
  for (const ProgramConstant &c : program.constants)
    live[c.value] = constants[c.value];

  std::optional<double> loss;
  ValueId lossValue = program.lossResult >= 0
                          ? program.results[program.lossResult].value
                          : kNoValue;
  auto readLoss = [&]() -> absl::Status {
    absl::StatusOr<HostTensor> host =
        backend.download(*live[lossValue], values[lossValue].type);
    if (!host.ok())
      return host.status();
    loss = host->elementAsDouble(0);
    return absl::OkStatus();
  };

  // Reads the loss; a non-finite one ends the step: skipped, or an error.
  // Under loss scaling, so does a non-finite gradient: skipped.
  auto readFiniteLoss = [&]() -> std::optional<absl::StatusOr<StepOutcome>> {
    if (absl::Status s = readLoss(); !s.ok())
      return s;
    if (std::isfinite(*loss) && program.nonFiniteGradsResult >= 0) {
      ValueId v = program.results[program.nonFiniteGradsResult].value;
      absl::StatusOr<HostTensor> host =
          backend.download(*live[v], values[v].type);
      if (!host.ok())
        return host.status();
      if (!std::isfinite(host->elementAsDouble(0))) {
        StepOutcome outcome{loss, /*skipped=*/true, std::nullopt};
        outcome.overflowed = true;
        return outcome;
      }
    }
    if (std::isfinite(*loss))
      return std::nullopt;
    if (skipNonFinite)
      return StepOutcome{loss, /*skipped=*/true, std::nullopt};
    return nonFiniteLoss(step.globalStep, *loss);
  };

  if (step.evaluate && lossValue == kNoValue)
    return absl::FailedPreconditionError(
        "an evaluation needs a program that computes a loss; this one has no "
        "merak.loss result");
  std::optional<absl::StatusOr<StepOutcome>> stopped;
  if (absl::Status s = runInstructions(
          step, live, lrValue, stepValue,
          [&]() -> absl::Status {
            if (step.evaluate) {
              // The loss is all an evaluation wants: stop before anything
              // the step replaces is written.
              if (absl::Status s = readLoss(); !s.ok())
                return s;
              stopped = StepOutcome{loss, /*skipped=*/false, std::nullopt};
              return absl::CancelledError("evaluated");
            }
            // Nothing the step replaces has been written yet (the plan
            // reuses state buffers only after the loss), so stopping here
            // drops it.
            stopped = readFiniteLoss();
            if (stopped && stopped->ok())
              return absl::CancelledError("skipped");
            return stopped ? stopped->status() : absl::OkStatus();
          });
      !s.ok()) {
    if (stopped)
      return *stopped;
    return s;
  }
  if (lossValue != kNoValue && !loss)
    if (auto stop = readFiniteLoss())
      return *stop;

  StepOutcome outcome{loss, false, std::nullopt};
  if (program.gradNormResult >= 0) {
    ValueId v = program.results[program.gradNormResult].value;
    absl::StatusOr<HostTensor> host =
        backend.download(*live[v], values[v].type);
    if (!host.ok())
      return host.status();
    outcome.gradNorm = host->elementAsDouble(0);
  }

  // Results stay live to the end (the plan keeps them), so they can be read
  // here, before the commit hands their storage to the state.
  if (results) {
    results->clear();
    for (const ResultInfo &res : program.results) {
      absl::StatusOr<HostTensor> host =
          backend.download(*live[res.value], values[res.value].type);
      if (!host.ok())
        return host.status();
      results->push_back(*std::move(host));
    }
  }

  // Commit: every state argument the step replaces gets its new value.
  for (const ResultInfo &res : program.results)
    if (res.updatesArgument >= 0)
      state[res.updatesArgument] = live[res.value];
  return outcome;
}

absl::Status Executor::runInstructions(
    const StepContext &step, std::vector<TensorHandle> &live, ValueId lrValue,
    ValueId stepValue, const std::function<absl::Status()> &atLoss) {
  // Overlapped collectives in flight, by instruction, and their indices
  // in the order they started.
  std::vector<std::unique_ptr<PendingCollective>> pending(
      program.instructions.size());
  std::vector<int> inFlight;
  // Adds the time from here to the end of its scope to `profile`.
  struct Timed {
    OpProfile *profile;
    OpKind kind;
    const Instruction *inst = nullptr;
    const Program *program = nullptr;
    std::chrono::steady_clock::time_point started =
        std::chrono::steady_clock::now();
    ~Timed() {
      if (!profile)
        return;
      double seconds = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - started)
                           .count();
      OpProfile::Entry &e = profile->byKind[kind];
      ++e.calls;
      e.seconds += seconds;
      if (!inst)
        return;
      // A fused chain by its ops: "fused {silu, mul} -> ...".
      // A wait by the collective it completes: "wait all_gather -> ...".
      std::string label = std::string(opFullName(kind));
      if (kind == OpKind::Wait)
        absl::StrAppend(&label, " ", opFullName(inst->kind));
      if (kind == OpKind::Fused)
        absl::StrAppend(&label, " {",
                        describeFusedKernel(*program, int(inst->attrs.index)),
                        "}");
      label += " ->";
      // A group of optimizer updates has a result per tensor and state:
      // the first few name it.
      const size_t shown = kind == OpKind::Fused ? 3 : inst->results.size();
      for (size_t r = 0; r < inst->results.size() && r < shown; ++r)
        absl::StrAppend(&label, r ? ", " : " ",
                        program->values[inst->results[r]].type.str());
      if (inst->results.size() > shown)
        absl::StrAppend(&label, ", ... (", inst->results.size(), " results)");
      OpProfile::Entry &s = profile->byShape[label];
      ++s.calls;
      s.seconds += seconds;
    }
  };
  // Waits for the transfers of the collectives in flight of `group` that
  // started before `before` (all of them for -1): one Gloo worker per
  // group runs them in that order, so the first that failed is the one
  // reported.
  auto awaitEarlier = [&](int group, int before) -> absl::Status {
    for (int c : inFlight) {
      if (before >= 0 && c >= before)
        break;
      const Instruction &coll = program.instructions[c];
      if (group >= 0 && coll.attrs.group != group)
        continue;
      if (absl::Status s = pending[c]->wait(); !s.ok())
        return instructionFailed(coll, s);
    }
    return absl::OkStatus();
  };
  auto drain = [&]() -> absl::Status { return awaitEarlier(-1, -1); };

  KernelCall call;
  call.program = &program;
  call.step = &step;
  call.arena = arena.get();
  for (size_t index = 0; index < program.instructions.size(); ++index) {
    const Instruction &inst = program.instructions[index];
    if (inst.kind == OpKind::Wait) {
      const Instruction &coll = program.instructions[inst.completes];
      if (!pending[inst.completes])
        return absl::InternalError(
            absl::StrCat("wait #", index, ": '", opFullName(coll.kind), "' #",
                         inst.completes, " is not in flight"));
      absl::StatusOr<std::vector<TensorHandle>> done;
      {
        Timed timed{profile, OpKind::Wait, &coll, &program};
        if (absl::Status s = awaitEarlier(coll.attrs.group, inst.completes);
            !s.ok())
          return s;
        done = pending[inst.completes]->finish();
      }
      if (!done.ok())
        return instructionFailed(coll, done.status());
      if (done->size() != coll.results.size())
        return absl::InternalError(absl::StrCat(
            "'", opFullName(coll.kind), "' returned ", done->size(),
            " results, expected ", coll.results.size()));
      pending[inst.completes].reset();
      inFlight.erase(
          std::find(inFlight.begin(), inFlight.end(), inst.completes));
      for (size_t r = 0; r < coll.results.size(); ++r)
        live[coll.results[r]] = std::move((*done)[r]);
    } else {
      call.instruction = &inst;
      call.operands.assign(inst.operands.size(), nullptr);
      call.hostScalars.assign(inst.operands.size(), std::nullopt);
      for (size_t k = 0; k < inst.operands.size(); ++k) {
        ValueId v = inst.operands[k];
        if (v == kNoValue)
          continue;
        call.operands[k] = live[v].get();
        if (!call.operands[k])
          return absl::InternalError(absl::StrCat(
              "instruction ", index, " reads %", v, ", which is not live"));
        if (v == lrValue)
          call.hostScalars[k] = step.learningRate;
        else if (v == stepValue)
          call.hostScalars[k] = double(step.optimizerStep);
      }
      call.inPlace.assign(inst.results.size(), nullptr);
      for (size_t r = 0; r < inst.storage.size(); ++r)
        if (inst.storage[r].kind == ResultStorage::Kind::InPlace)
          call.inPlace[r] = call.operands[inst.storage[r].operand];
      call.results.clear();
      if (isCollective(inst.kind) && inst.attrs.identity) {
        // A group of this rank alone: the result is the operand (planned
        // as a view of it).
        call.results.push_back(live[inst.operands[0]]);
      } else if (inst.waitAt >= 0) {
        // Overlapped: started here, completed by its wait.
        absl::StatusOr<std::unique_ptr<PendingCollective>> started;
        {
          Timed timed{profile, inst.kind};
          started = communicator->start(call);
        }
        if (!started.ok())
          return instructionFailed(inst, started.status());
        pending[index] = *std::move(started);
        inFlight.push_back(int(index));
      } else {
        absl::Status status;
        {
          Timed timed{profile, inst.kind, &inst, &program};
          if (inst.kind == OpKind::Fused && !backend.supports(OpKind::Fused))
            status =
                runFusedMembers(step, inst, live, lrValue, stepValue, call);
          else
            status = isCollective(inst.kind) ? communicator->execute(call)
                                             : backend.execute(call);
          // A backend that queues its kernels (a GPU stream) has only
          // issued them here: under --profile each op is waited for, so
          // its time is its kernels' (the step runs slower).
          if (profile && status.ok() && !isCollective(inst.kind))
            status = backend.synchronize();
        }
        if (!status.ok())
          return instructionFailed(inst, status);
      }
      if (inst.waitAt < 0)
        for (size_t r = 0; r < inst.results.size(); ++r)
          live[inst.results[r]] = std::move(call.results[r]);
      if (checkNumerics && inst.waitAt < 0)
        if (absl::Status s = checkFinite(inst, live, step); !s.ok())
          return s;
    }

    if (int(index) == program.lossInstruction && atLoss) {
      if (absl::Status s = atLoss(); !s.ok()) {
        // A step that ends early (a skipped step) still lets its
        // collectives finish, as the other ranks run them to the end.
        if (absl::IsCancelled(s))
          if (absl::Status d = drain(); !d.ok())
            return d;
        return s;
      }
    }
    for (ValueId v : inst.release)
      live[v].reset();
  }
  return absl::OkStatus();
}

absl::Status Executor::runFusedMembers(const StepContext &step,
                                       const Instruction &fused,
                                       std::vector<TensorHandle> &live,
                                       ValueId lrValue, ValueId stepValue,
                                       KernelCall &call) {
  const FusedKernel &kernel = program.fusedKernels[fused.attrs.index];
  KernelCall member;
  member.program = &program;
  member.step = &step;
  std::vector<ValueId> internal;
  for (const Instruction &m : kernel.members) {
    member.instruction = &m;
    member.operands.assign(m.operands.size(), nullptr);
    member.hostScalars.assign(m.operands.size(), std::nullopt);
    for (size_t k = 0; k < m.operands.size(); ++k) {
      ValueId v = m.operands[k];
      member.operands[k] = live[v].get();
      if (!member.operands[k])
        return absl::InternalError(absl::StrCat(
            "a member of a fused chain reads %", v, ", which is not live"));
      if (v == lrValue)
        member.hostScalars[k] = step.learningRate;
      else if (v == stepValue)
        member.hostScalars[k] = double(step.optimizerStep);
    }
    member.inPlace.assign(m.results.size(), nullptr);
    member.results.clear();
    if (absl::Status s = backend.execute(member); !s.ok())
      return instructionFailed(m, s);
    for (size_t r = 0; r < m.results.size(); ++r) {
      live[m.results[r]] = std::move(member.results[r]);
      internal.push_back(m.results[r]);
    }
  }
  call.results.clear();
  for (ValueId v : fused.results)
    call.results.push_back(live[v]);
  for (ValueId v : internal)
    live[v].reset();
  return absl::OkStatus();
}

absl::Status Executor::checkFinite(const Instruction &inst,
                                   const std::vector<TensorHandle> &live,
                                   const StepContext &step) {
  for (size_t r = 0; r < inst.results.size(); ++r) {
    const TensorType &type = program.values[inst.results[r]].type;
    const TensorHandle &value = live[inst.results[r]];
    if (!isFloat(type.dtype) || !value)
      continue;
    absl::StatusOr<HostTensor> host = backend.download(*value, type);
    if (!host.ok())
      return instructionFailed(inst, host.status());
    int64_t at = firstNonFinite(*host);
    if (at < 0)
      continue;
    char text[32];
    std::snprintf(text, sizeof(text), "%g", host->elementAsDouble(at));
    return instructionFailed(
        inst, absl::OutOfRangeError(
                  absl::StrCat("result ", r, " (", type.str(), ") is ", text,
                               " at element ", at, " on step ", step.globalStep,
                               ", the first non-finite value of the step "
                               "(--check-numerics)")));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TensorHandle>>
Executor::call(const StepContext &step, std::vector<TensorHandle> arguments) {
  const auto &values = program.values;
  if (arguments.size() != program.arguments.size())
    return absl::InvalidArgumentError(
        absl::StrCat("@", program.function, " takes ", program.arguments.size(),
                     " arguments, got ", arguments.size()));
  std::vector<TensorHandle> live(values.size());
  ValueId lrValue = kNoValue, stepValue = kNoValue;
  for (size_t i = 0; i < program.arguments.size(); ++i) {
    const Argument &arg = program.arguments[i];
    if (arg.role == ArgumentRole::LearningRate)
      lrValue = arg.value;
    if (arg.role == ArgumentRole::Step)
      stepValue = arg.value;
    if (values[arg.value].lastUse < 0)
      continue;
    if (!arguments[i])
      return absl::InvalidArgumentError(
          absl::StrCat("@", program.function, ": ", argumentRoleNoun(arg.role),
                       " '", arg.name, "' has no value"));
    live[arg.value] = std::move(arguments[i]);
  }
  for (const ProgramConstant &c : program.constants)
    live[c.value] = constants[c.value];
  if (absl::Status s = runInstructions(step, live, lrValue, stepValue, nullptr);
      !s.ok())
    return s;
  std::vector<TensorHandle> results;
  for (const ResultInfo &res : program.results)
    results.push_back(live[res.value]);
  return results;
}

absl::StatusOr<std::map<std::string, HostTensor>> Executor::stateToHost() {
  std::map<std::string, HostTensor> result;
  for (size_t i = 0; i < program.arguments.size(); ++i) {
    const Argument &arg = program.arguments[i];
    if (!arg.isState() || !state[i])
      continue;
    absl::StatusOr<HostTensor> host =
        backend.download(*state[i], program.values[arg.value].type);
    if (!host.ok())
      return host.status();
    result[arg.name] = *std::move(host);
  }
  return result;
}

std::vector<const Argument *> Executor::inputArguments() const {
  std::vector<const Argument *> result;
  for (const Argument &arg : program.arguments)
    if (arg.role == ArgumentRole::Input)
      result.push_back(&arg);
  return result;
}

} // namespace merak::runtime

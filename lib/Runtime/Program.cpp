//===- Program.cpp - rank program names, memory plan and listing ----------===//

#include "merak/Runtime/Program.h"
#include "merak/Runtime/Fusion.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <utility>

namespace merak::runtime {

const char *opKindName(OpKind kind) {
  switch (kind) {
#define MERAK_OP_NAME(Name, Mnemonic)                                          \
  case OpKind::Name:                                                           \
    return Mnemonic;
    MERAK_RUNTIME_OPS(MERAK_OP_NAME)
#undef MERAK_OP_NAME
  }
  return "?";
}

bool isCollective(OpKind kind) {
  switch (kind) {
  case OpKind::AllReduce:
  case OpKind::AllGather:
  case OpKind::ReduceScatter:
  case OpKind::AllToAll:
  case OpKind::AllSlice:
  case OpKind::Broadcast:
    return true;
  default:
    return false;
  }
}

std::string opFullName(OpKind kind) {
  if (kind == OpKind::Wait || kind == OpKind::Fused)
    return opKindName(kind);
  return absl::StrCat(isCollective(kind) ? "mesh." : "merak.",
                      opKindName(kind));
}

OpArity opArity(OpKind kind) {
  switch (kind) {
#define MERAK_ARITY(Name, Least, Most, Results)                                \
  case OpKind::Name:                                                           \
    return {Least, Most, Results};
    MERAK_DIALECT_RUNTIME_ARITY(MERAK_ARITY)
#undef MERAK_ARITY
  case OpKind::Wait:
  case OpKind::Fused:
    return {-1, -1, -1};
  default: // the collectives
    return {};
  }
}

std::string arityError(const Instruction &inst) {
  OpArity arity = opArity(inst.kind);
  int64_t n = int64_t(inst.operands.size());
  if (inst.kind == OpKind::Wait)
    arity = {int64_t(inst.results.size()), int64_t(inst.results.size()),
             int64_t(inst.results.size())};
  if (inst.kind == OpKind::Fused) // inputs and outputs of its chain
    arity = {n, n, int64_t(inst.results.size())};
  int64_t least = arity.leastOperands, most = arity.mostOperands;
  if (n < least || (most >= 0 && n > most))
    return absl::StrCat(n, " operand", n == 1 ? "" : "s", ", the op takes ",
                        least == most ? absl::StrCat(least)
                        : most < 0    ? absl::StrCat("at least ", least)
                                      : absl::StrCat(least, " to ", most));
  if (int64_t(inst.results.size()) != arity.results)
    return absl::StrCat(inst.results.size(), " result",
                        inst.results.size() == 1 ? "" : "s", ", the op has ",
                        arity.results);
  return "";
}

const char *collectiveReductionName(CollectiveReduction r) {
  switch (r) {
  case CollectiveReduction::Sum:
    return "sum";
  case CollectiveReduction::Max:
    return "max";
  case CollectiveReduction::Min:
    return "min";
  case CollectiveReduction::Product:
    return "product";
  case CollectiveReduction::Average:
    return "average";
  }
  return "?";
}

const char *argumentRoleName(ArgumentRole role) {
  switch (role) {
  case ArgumentRole::Param:
    return "param";
  case ArgumentRole::Buffer:
    return "buffer";
  case ArgumentRole::OptState:
    return "opt_state";
  case ArgumentRole::Input:
    return "input";
  case ArgumentRole::LearningRate:
    return "lr";
  case ArgumentRole::Step:
    return "step";
  case ArgumentRole::Value:
    return "value";
  case ArgumentRole::Grad:
    return "grad";
  case ArgumentRole::LossScale:
    return "loss_scale";
  case ArgumentRole::Position:
    return "position";
  case ArgumentRole::KvCache:
    return "kv_cache";
  }
  return "?";
}

const char *argumentRoleNoun(ArgumentRole role) {
  switch (role) {
  case ArgumentRole::Param:
    return "parameter";
  case ArgumentRole::Buffer:
    return "buffer";
  case ArgumentRole::OptState:
    return "optimizer state";
  default:
    return argumentRoleName(role);
  }
}

const Argument *Program::findArgument(ArgumentRole role) const {
  for (const Argument &arg : arguments)
    if (arg.role == role)
      return &arg;
  return nullptr;
}

namespace {

/// The operand a result is a view of, or -1. These kernels return views
/// (as PyTorch's eager ops do), or the operand itself for identities; the
/// merak ops declare theirs in MerakOps.td (`runtimeViewOf`).
int viewOperand(const Program &program, const Instruction &inst, size_t r) {
  // A collective within a group of one passes its operand through.
  if (isCollective(inst.kind) && inst.attrs.identity)
    return 0;
  switch (inst.kind) {
#define MERAK_VIEW(Name, Result, Operand, When, Always)                        \
  case OpKind::Name:                                                           \
    return r == Result && (When) ? Operand : -1;
    MERAK_DIALECT_RUNTIME_VIEWS(MERAK_VIEW)
#undef MERAK_VIEW
  case OpKind::Fused: {
    // A group of updates: a member's view (a momentum-free SGD buffer) is
    // the group's, of the same value among the group's operands.
    if (!isOptimizerGroup(program, int(inst.attrs.index)))
      return -1;
    for (const Instruction &m : program.fusedKernels[inst.attrs.index].members)
      for (size_t mr = 0; mr < m.results.size(); ++mr) {
        if (m.results[mr] != inst.results[r])
          continue;
        int mk = viewOperand(program, m, mr);
        if (mk < 0)
          return -1;
        auto k = std::find(inst.operands.begin(), inst.operands.end(),
                           m.operands[mk]);
        return k == inst.operands.end() ? -1 : int(k - inst.operands.begin());
      }
    return -1;
  }
  default:
    return -1;
  }
}

/// (result, operand) pairs where the result may be written into the
/// operand: the kernel has an out= form that tolerates full overlap
/// (`runtimeInPlace` in MerakOps.td; Gloo reduces and broadcasts in place).
std::vector<std::pair<int, int>> inPlaceCandidates(const Program &program,
                                                   const Instruction &inst) {
  switch (inst.kind) {
#define MERAK_IN_PLACE(Name, ...)                                              \
  case OpKind::Name:                                                           \
    return {__VA_ARGS__};
    MERAK_DIALECT_RUNTIME_IN_PLACE(MERAK_IN_PLACE)
#undef MERAK_IN_PLACE
  case OpKind::AllReduce:
  case OpKind::Broadcast:
    return {{0, 0}};
  case OpKind::Fused: {
    std::vector<std::pair<int, int>> pairs;
    if (isOptimizerGroup(program, int(inst.attrs.index))) {
      // Each update into its own operands, as unfused (the tensors are
      // updated side by side).
      for (const Instruction &m :
           program.fusedKernels[inst.attrs.index].members)
        for (auto [mr, mk] : inPlaceCandidates(program, m)) {
          auto r = std::find(inst.results.begin(), inst.results.end(),
                             m.results[mr]);
          auto k = std::find(inst.operands.begin(), inst.operands.end(),
                             m.operands[mk]);
          if (r != inst.results.end() && k != inst.operands.end())
            pairs.push_back({int(r - inst.results.begin()),
                             int(k - inst.operands.begin())});
        }
      return pairs;
    }
    // A chain's kernel reads every input at an element before it writes
    // any output there: any output may take the storage of an input of its
    // type that is not broadcast (the planner checks both).
    for (size_t r = 0; r < inst.results.size(); ++r)
      for (size_t k = 0; k < inst.operands.size(); ++k)
        pairs.push_back({int(r), int(k)});
    return pairs;
  }
  default:
    return {};
  }
}

struct Buffer {
  int64_t bytes = 0;
  int last = -1;          // last use of any value living in it
  int createdBy = -1;     // instruction; -1 for arguments and constants
  bool writable = false;  // a fresh result's buffer
  bool donatable = false; // a state argument the step replaces
};

std::string valueName(ValueId v) {
  return v == kNoValue ? std::string("-") : absl::StrCat("%", v);
}

std::string formatBytes(int64_t bytes) {
  if (bytes < 1024)
    return absl::StrCat(bytes, " B");
  if (bytes < 1024 * 1024)
    return absl::StrFormat("%.1f KiB", bytes / 1024.0);
  return absl::StrFormat("%.1f MiB", bytes / (1024.0 * 1024.0));
}

/// `{sum over mesh axes [0] (dp): ranks 0, 2}` for --print-program.
std::string describeCollective(const Program &program,
                               const Instruction &inst) {
  const OpAttrs &a = inst.attrs;
  std::string text = "{";
  switch (inst.kind) {
  case OpKind::AllReduce:
    absl::StrAppend(&text, collectiveReductionName(a.collectiveReduction));
    break;
  case OpKind::ReduceScatter:
    absl::StrAppend(&text, collectiveReductionName(a.collectiveReduction),
                    ", scatter dim ", a.dim);
    break;
  case OpKind::AllGather:
    absl::StrAppend(&text, "gather dim ", a.dim);
    break;
  case OpKind::AllToAll:
    absl::StrAppend(&text, "split dim ", a.dim, ", concat dim ", a.concatDim);
    break;
  case OpKind::AllSlice:
    absl::StrAppend(&text, "slice dim ", a.dim);
    break;
  case OpKind::Broadcast:
    absl::StrAppend(&text, "root [", absl::StrJoin(a.root, ", "), "]");
    break;
  default:
    break;
  }
  std::vector<std::string> names;
  for (int64_t axis : a.meshAxes)
    names.push_back(program.mesh ? program.mesh->axisName(axis)
                                 : absl::StrCat(axis));
  absl::StrAppend(&text, " over mesh axes [", absl::StrJoin(a.meshAxes, ", "),
                  "]");
  if (program.mesh && !program.mesh->axisNames.empty())
    absl::StrAppend(&text, " (", absl::StrJoin(names, ", "), ")");
  if (a.identity)
    absl::StrAppend(&text, ": this rank alone");
  else if (a.group >= 0 && size_t(a.group) < program.groups.size())
    absl::StrAppend(&text, ": group ", a.group, " = ranks ",
                    absl::StrJoin(program.groups[a.group].members.ranks, ", "));
  return text + "}";
}

/// Views that read no data of their operand (`runtimeViewOf` without a
/// condition): a view of a pending collective's result can wait with it.
bool isPureView(const Instruction &inst) {
  switch (inst.kind) {
#define MERAK_PURE_VIEW(Name, Result, Operand, When, Always)                   \
  case OpKind::Name:                                                           \
    return Always && inst.operands.size() == 1 && inst.results.size() == 1;
    MERAK_DIALECT_RUNTIME_VIEWS(MERAK_PURE_VIEW)
#undef MERAK_PURE_VIEW
  default:
    return false;
  }
}

/// Per instruction: whether the storage of a state argument the step
/// replaces (with its views) is read for the last time there, so the plan
/// may write the new state into it, which it does only once the loss is
/// known.
std::vector<bool> stateDonations(const Program &program,
                                 const std::vector<Instruction> &insts) {
  std::vector<int> root(program.values.size(), -1), last;
  for (const Argument &arg : program.arguments)
    if (arg.isState() && arg.updatedBy >= 0) {
      root[arg.value] = int(last.size());
      last.push_back(-1);
    }
  for (size_t i = 0; i < insts.size(); ++i) {
    for (ValueId v : insts[i].operands)
      if (v != kNoValue && root[v] >= 0)
        last[root[v]] = int(i);
    if (isPureView(insts[i]) && insts[i].operands[0] != kNoValue)
      root[insts[i].results[0]] = root[insts[i].operands[0]];
  }
  for (const ResultInfo &res : program.results)
    if (root[res.value] >= 0)
      last[root[res.value]] = -1; // kept to the end: never reused
  std::vector<bool> donation(insts.size(), false);
  for (int i : last)
    if (i >= 0)
      donation[i] = true;
  return donation;
}

/// Moves the collective that makes the loss (a data-parallel average, say)
/// up to just after its operands are computed. Where the plan put it last,
/// the loss was known only after the optimizer had run, so no update could
/// write new state over old (a non-finite loss must leave the state as it
/// was); issued early, its wait lands before the first update.
void hoistLossCollective(Program &program) {
  if (program.lossResult < 0)
    return;
  ValueId loss = program.results[program.lossResult].value;
  std::vector<Instruction> &insts = program.instructions;
  auto defines = [](const Instruction &inst, ValueId v) {
    return std::find(inst.results.begin(), inst.results.end(), v) !=
           inst.results.end();
  };
  int at = -1;
  for (size_t i = 0; i < insts.size(); ++i)
    if (defines(insts[i], loss))
      at = int(i);
  if (at < 0 || !isCollective(insts[at].kind))
    return;
  int after = -1; // the last instruction an operand comes from
  for (int i = 0; i < at; ++i)
    for (ValueId v : insts[at].operands)
      if (v != kNoValue && defines(insts[i], v))
        after = i;
  if (after + 1 >= at)
    return;
  Instruction coll = std::move(insts[at]);
  insts.erase(insts.begin() + at);
  insts.insert(insts.begin() + after + 1, std::move(coll));
}

/// Inserts the wait of every communicating collective right before the
/// first instruction that reads its result (views of the result, which
/// read no data, move behind the wait), or at the end of the program. The
/// loss is waited for before the first instruction where the plan could
/// write new state into old (see `planProgram`), so overlapping its
/// reduction costs no memory.
void scheduleWaits(Program &program) {
  std::vector<Instruction> in;
  in.reserve(program.instructions.size());
  for (Instruction &inst : program.instructions)
    if (inst.kind != OpKind::Wait) // from an earlier binding
      in.push_back(std::move(inst));
  std::vector<bool> donation = stateDonations(program, in);
  ValueId lossValue = program.lossResult >= 0
                          ? program.results[program.lossResult].value
                          : kNoValue;
  std::vector<Instruction> out;
  out.reserve(in.size() * 2);
  // One slot per collective in flight, in issue order: its index in `out`
  // and the views of its result that wait with it.
  struct Slot {
    int collective;
    std::vector<Instruction> views;
    bool open = true;
  };
  std::vector<Slot> slots;
  std::vector<int> pendingSlot(program.values.size(), -1);
  auto close = [&](int s) {
    Slot &slot = slots[s];
    Instruction &coll = out[slot.collective];
    Instruction wait;
    wait.kind = OpKind::Wait;
    wait.operands = coll.results;
    wait.location = coll.location;
    wait.completes = slot.collective;
    coll.waitAt = int(out.size());
    for (ValueId v : coll.results)
      pendingSlot[v] = -1;
    out.push_back(std::move(wait));
    for (Instruction &view : slot.views) {
      pendingSlot[view.results[0]] = -1;
      out.push_back(std::move(view));
    }
    slot.views.clear();
    slot.open = false;
  };
  for (size_t j = 0; j < in.size(); ++j) {
    Instruction &inst = in[j];
    inst.waitAt = inst.completes = -1;
    if (isPureView(inst) && inst.operands[0] != kNoValue &&
        pendingSlot[inst.operands[0]] >= 0) {
      int s = pendingSlot[inst.operands[0]];
      pendingSlot[inst.results[0]] = s;
      slots[s].views.push_back(std::move(inst));
      continue;
    }
    std::vector<int> needed;
    for (ValueId v : inst.operands)
      if (v != kNoValue && pendingSlot[v] >= 0)
        needed.push_back(pendingSlot[v]);
    if (donation[j] && lossValue != kNoValue && pendingSlot[lossValue] >= 0)
      needed.push_back(pendingSlot[lossValue]);
    std::sort(needed.begin(), needed.end());
    needed.erase(std::unique(needed.begin(), needed.end()), needed.end());
    for (int s : needed)
      close(s);
    bool overlapped = isCollective(inst.kind) && !inst.attrs.identity;
    out.push_back(std::move(inst));
    if (overlapped) {
      slots.push_back({int(out.size()) - 1, {}});
      for (ValueId v : out.back().results)
        pendingSlot[v] = int(slots.size()) - 1;
    }
  }
  for (size_t s = 0; s < slots.size(); ++s)
    if (slots[s].open)
      close(int(s));
  program.instructions = std::move(out);
}

} // namespace

absl::Status bindToRank(Program &program, int64_t rank,
                        const BindOptions &options) {
  const CollectiveMode mode = options.collectives;
  int64_t world = program.worldSize();
  if (rank < 0 || rank >= world)
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is outside the program's ", world, " processes"));
  program.rank = rank;
  program.groups.clear();
  std::vector<int64_t> meshShape =
      program.mesh ? program.mesh->shape : std::vector<int64_t>();
  for (Instruction &inst : program.instructions) {
    if (!isCollective(inst.kind))
      continue;
    OpAttrs &a = inst.attrs;
    if (!program.mesh && !a.meshAxes.empty())
      return absl::InvalidArgumentError(
          absl::StrCat("'", opFullName(inst.kind), "' at ", inst.location,
                       " communicates over mesh axes, but the program has "
                       "no mesh"));
    GroupMembership members = processGroup(meshShape, rank, a.meshAxes);
    int64_t n = int64_t(members.ranks.size());
    if (inst.kind == OpKind::AllSlice) {
      // A local slice: this rank's block along the slice axis.
      const TensorType &out = program.values[inst.results[0]].type;
      int64_t size = out.shape[a.dim];
      inst.kind = OpKind::Slice;
      a.start = members.index * size;
      a.end = a.start + size;
      a.step = 1;
      continue;
    }
    a.identity = n == 1;
    a.group = -1;
    if (a.identity)
      continue;
    for (size_t g = 0; g < program.groups.size(); ++g)
      if (program.groups[g].meshAxes == a.meshAxes)
        a.group = int(g);
    if (a.group < 0) {
      a.group = int(program.groups.size());
      program.groups.push_back({a.meshAxes, std::move(members)});
    }
  }
  hoistLossCollective(program);
  if (mode == CollectiveMode::Overlapped) {
    scheduleWaits(program);
  } else {
    // Blocking: drop the waits of an earlier, overlapped binding.
    std::vector<Instruction> kept;
    for (Instruction &inst : program.instructions)
      if (inst.kind != OpKind::Wait) {
        inst.waitAt = inst.completes = -1;
        kept.push_back(std::move(inst));
      }
    program.instructions = std::move(kept);
  }
  if (options.fuseElementwise) {
    foldCasts(program);
    fuseElementwise(program);
    fuseOptimizerUpdates(program);
  }
  return planProgram(program);
}

/// Gives every fresh buffer that dies within the step an offset in one
/// arena. A kernel may allocate results of equal size in any order, so
/// those of one instruction share the longest of their lifetimes.
template <typename FreshResults>
void placeInArena(Program &program, const std::vector<Buffer> &buffers,
                  const FreshResults &fresh) {
  constexpr int64_t kAlign = 64;
  struct Slot {
    int buffer, instruction, result;
    int first, last;
    int64_t bytes, offset = -1;
  };
  std::vector<Slot> slots;
  for (const auto &f : fresh) {
    const Buffer &b = buffers[f.buffer];
    if (b.last == kKeepAlive || b.bytes <= 0)
      continue;
    slots.push_back({f.buffer, f.instruction, f.result, b.createdBy,
                     std::max(b.last, b.createdBy),
                     (b.bytes + kAlign - 1) / kAlign * kAlign});
  }
  // Equal sizes within one instruction: one lifetime, the longest. A
  // result kept alive among them keeps the others off the arena.
  std::map<std::pair<int, int64_t>, int> longest;
  std::set<std::pair<int, int64_t>> kept;
  for (const auto &f : fresh) {
    const Buffer &b = buffers[f.buffer];
    int64_t bytes = (b.bytes + kAlign - 1) / kAlign * kAlign;
    if (b.last == kKeepAlive)
      kept.insert({f.instruction, bytes});
  }
  for (const Slot &s : slots) {
    int &l = longest[{s.instruction, s.bytes}];
    l = std::max(l, s.last);
  }
  std::vector<Slot> placed;
  std::vector<size_t> order;
  for (size_t k = 0; k < slots.size(); ++k) {
    slots[k].last = longest[{slots[k].instruction, slots[k].bytes}];
    if (!kept.count({slots[k].instruction, slots[k].bytes}))
      order.push_back(k);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (slots[a].bytes != slots[b].bytes)
      return slots[a].bytes > slots[b].bytes;
    return slots[a].first < slots[b].first;
  });
  int64_t arena = 0;
  for (size_t k : order) {
    Slot &s = slots[k];
    // The ranges taken by slots alive at the same time, by offset.
    std::vector<std::pair<int64_t, int64_t>> taken;
    for (const Slot &p : placed)
      if (p.first <= s.last && s.first <= p.last)
        taken.push_back({p.offset, p.offset + p.bytes});
    std::sort(taken.begin(), taken.end());
    int64_t offset = 0;
    for (auto [begin, end] : taken) {
      if (offset + s.bytes <= begin)
        break;
      offset = std::max(offset, end);
    }
    s.offset = offset;
    arena = std::max(arena, offset + s.bytes);
    placed.push_back(s);
    program.instructions[s.instruction].storage[s.result].arenaOffset = offset;
  }
  program.arenaBytes = arena;
}

absl::Status planProgram(Program &program) {
  auto &values = program.values;
  const int numValues = int(values.size());
  std::vector<bool> defined(numValues, false);
  auto checkId = [&](ValueId v) -> absl::Status {
    if (v < 0 || v >= numValues)
      return absl::InternalError(absl::StrCat("value id ", v, " out of range"));
    return absl::OkStatus();
  };
  for (ValueInfo &info : values) {
    info.lastUse = -1;
    info.buffer = -1;
  }
  for (const Argument &arg : program.arguments) {
    if (auto s = checkId(arg.value); !s.ok())
      return s;
    defined[arg.value] = true;
  }
  for (const ProgramConstant &c : program.constants) {
    if (auto s = checkId(c.value); !s.ok())
      return s;
    defined[c.value] = true;
  }
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    Instruction &inst = program.instructions[i];
    inst.release.clear();
    for (ValueId v : inst.operands) {
      if (v == kNoValue)
        continue;
      if (auto s = checkId(v); !s.ok())
        return s;
      if (!defined[v])
        return absl::InternalError(
            absl::StrCat("instruction ", i, " (", opKindName(inst.kind),
                         ") reads ", valueName(v), " before it is defined"));
      values[v].lastUse = int(i);
    }
    for (ValueId v : inst.results) {
      if (auto s = checkId(v); !s.ok())
        return s;
      defined[v] = true;
      values[v].definedBy = int(i);
    }
  }
  for (const ResultInfo &res : program.results) {
    if (auto s = checkId(res.value); !s.ok())
      return s;
    if (!defined[res.value])
      return absl::InternalError("a result is never defined");
    values[res.value].lastUse = kKeepAlive;
  }
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction &inst = program.instructions[i];
    int n = int(program.instructions.size());
    if (inst.waitAt >= 0 &&
        (inst.waitAt <= int(i) || inst.waitAt >= n ||
         program.instructions[inst.waitAt].completes != int(i)))
      return absl::InternalError(absl::StrCat("instruction ", i, " (",
                                              opKindName(inst.kind),
                                              ") has no matching wait"));
    if (inst.kind == OpKind::Wait &&
        (inst.completes < 0 || inst.completes >= int(i) ||
         program.instructions[inst.completes].waitAt != int(i)))
      return absl::InternalError(
          absl::StrCat("wait ", i, " completes no collective"));
  }
  // The loss of an overlapped collective is known at its wait.
  auto knownAt = [&](int result) {
    if (result < 0)
      return -1;
    int at = values[program.results[result].value].definedBy;
    if (at >= 0 && program.instructions[at].waitAt >= 0)
      at = program.instructions[at].waitAt;
    return at;
  };
  program.lossInstruction = std::max(knownAt(program.lossResult),
                                     knownAt(program.nonFiniteGradsResult));

  std::vector<Buffer> buffers;
  std::vector<bool> broadcast(numValues, false);
  struct FreshResult {
    int buffer, instruction, result;
  };
  std::vector<FreshResult> freshResult;
  auto newBuffer = [&](ValueId v, int createdBy) {
    Buffer b;
    b.bytes = values[v].type.byteSize();
    b.last = values[v].lastUse;
    b.createdBy = createdBy;
    b.writable = createdBy >= 0;
    values[v].buffer = int(buffers.size());
    buffers.push_back(b);
  };
  for (const Argument &arg : program.arguments) {
    newBuffer(arg.value, -1);
    buffers.back().donatable = arg.isState() && arg.updatedBy >= 0;
  }
  for (const ProgramConstant &c : program.constants)
    newBuffer(c.value, -1);

  for (size_t i = 0; i < program.instructions.size(); ++i) {
    Instruction &inst = program.instructions[i];
    inst.storage.assign(inst.results.size(), ResultStorage());
    std::vector<int> taken;
    std::vector<std::pair<int, int>> candidates =
        inPlaceCandidates(program, inst);
    // Views first: a view result keeps its operand's storage alive, which
    // the in-place decisions below must see.
    for (size_t r = 0; r < inst.results.size(); ++r) {
      if (int k = viewOperand(program, inst, r); k >= 0) {
        ValueId res = inst.results[r], src = inst.operands[k];
        values[res].buffer = values[src].buffer;
        Buffer &b = buffers[values[src].buffer];
        b.last = std::max(b.last, values[res].lastUse);
        broadcast[res] = broadcast[src] || inst.kind == OpKind::Expand;
        inst.storage[r] = {ResultStorage::Kind::View, k};
      }
    }
    for (size_t r = 0; r < inst.results.size(); ++r) {
      ValueId res = inst.results[r];
      if (inst.storage[r].kind == ResultStorage::Kind::View)
        continue;
      bool placed = false;
      for (auto [cr, k] : candidates) {
        if (cr != int(r) || k >= int(inst.operands.size()))
          continue;
        ValueId src = inst.operands[k];
        if (src == kNoValue || values[src].type != values[res].type ||
            broadcast[src])
          continue;
        int bufferId = values[src].buffer;
        Buffer &b = buffers[bufferId];
        bool owned =
            b.writable || (b.donatable && int(i) > program.lossInstruction);
        if (!owned || b.last != int(i) ||
            std::find(taken.begin(), taken.end(), bufferId) != taken.end())
          continue;
        // Another operand viewing the same storage differently would be
        // overwritten while it is read.
        bool overlaps = false;
        for (size_t j = 0; j < inst.operands.size(); ++j) {
          ValueId other = inst.operands[j];
          if (int(j) != k && other != kNoValue && other != src &&
              values[other].buffer == bufferId)
            overlaps = true;
        }
        if (overlaps)
          continue;
        values[res].buffer = bufferId;
        b.last = std::max(int(i), values[res].lastUse);
        taken.push_back(bufferId);
        inst.storage[r] = {ResultStorage::Kind::InPlace, k};
        placed = true;
        break;
      }
      if (!placed) {
        newBuffer(res, int(i));
        freshResult.push_back({int(values[res].buffer), int(i), int(r)});
      }
    }
    // An overlapped collective reads its operands until its wait (Gloo
    // works on their storage in the background): that storage must be
    // neither written in place nor released before. The operand it reduces
    // into is its result's storage, live through the wait anyway.
    if (inst.waitAt >= 0) {
      for (ValueId v : inst.operands) {
        if (v == kNoValue)
          continue;
        bool shared = false;
        for (ValueId res : inst.results)
          shared |= values[res].buffer == values[v].buffer;
        if (shared)
          continue;
        values[v].lastUse = std::max(values[v].lastUse, inst.waitAt);
        Buffer &b = buffers[values[v].buffer];
        b.last = std::max(b.last, inst.waitAt);
      }
    }
  }

  // Release points: after the last reader, or right after the definition
  // of a value nothing reads.
  for (ValueId v = 0; v < numValues; ++v) {
    int last = values[v].lastUse;
    if (last == kKeepAlive)
      continue;
    if (last < 0)
      last = values[v].definedBy;
    if (last >= 0)
      program.instructions[last].release.push_back(v);
  }

  // Planned peak: arguments and constants stay for the whole step; a fresh
  // buffer lives from its instruction to the last use of its values.
  int64_t live = 0;
  for (const Buffer &b : buffers)
    if (b.createdBy < 0)
      live += b.bytes;
  int64_t peak = live;
  std::vector<std::vector<int>> dying(program.instructions.size());
  for (size_t id = 0; id < buffers.size(); ++id) {
    const Buffer &b = buffers[id];
    if (b.createdBy >= 0 && b.last != kKeepAlive)
      dying[std::max(b.last, b.createdBy)].push_back(int(id));
  }
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    for (const Buffer &b : buffers)
      if (b.createdBy == int(i))
        live += b.bytes;
    peak = std::max(peak, live);
    for (int id : dying[i])
      live -= buffers[id].bytes;
  }
  program.plannedPeakBytes = peak;
  placeInArena(program, buffers, freshResult);
  return absl::OkStatus();
}

std::string printProgram(const Program &program) {
  std::ostringstream os;
  os << "program @" << program.function << ": " << program.values.size()
     << " values, " << program.instructions.size() << " instructions, "
     << program.constants.size() << " constants, planned peak "
     << formatBytes(program.plannedPeakBytes) << ", arena "
     << formatBytes(program.arenaBytes) << "\n";
  for (const Argument &arg : program.arguments) {
    os << "  " << valueName(arg.value) << " = " << argumentRoleName(arg.role);
    if (!arg.name.empty())
      os << " \"" << arg.name << "\"";
    os << " : " << program.values[arg.value].type.str();
    if (arg.updatedBy >= 0)
      os << " (updated by result " << arg.updatedBy << ")";
    os << "\n";
  }
  for (const ProgramConstant &c : program.constants)
    os << "  " << valueName(c.value)
       << " = constant : " << program.values[c.value].type.str() << "\n";
  auto printRelease = [&](const Instruction &inst) {
    if (!inst.release.empty()) {
      os << " release";
      for (size_t k = 0; k < inst.release.size(); ++k)
        os << (k ? ", " : " ") << valueName(inst.release[k]);
    }
    os << "\n";
  };
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction &inst = program.instructions[i];
    os << "  #" << i << " ";
    if (inst.kind == OpKind::Wait) {
      // `#9 wait %12 {all_reduce #4}`: the collective is complete here.
      os << "wait";
      for (size_t k = 0; k < inst.operands.size(); ++k)
        os << (k ? ", " : " ") << valueName(inst.operands[k]);
      os << " {" << opKindName(program.instructions[inst.completes].kind)
         << " #" << inst.completes << "}";
      printRelease(inst);
      continue;
    }
    for (size_t r = 0; r < inst.results.size(); ++r)
      os << (r ? ", " : "") << valueName(inst.results[r]);
    os << " = " << opKindName(inst.kind);
    for (size_t k = 0; k < inst.operands.size(); ++k)
      os << (k ? ", " : " ") << valueName(inst.operands[k]);
    os << " :";
    for (size_t r = 0; r < inst.results.size(); ++r)
      os << (r ? ", " : " ") << program.values[inst.results[r]].type.str();
    if (isCollective(inst.kind))
      os << " " << describeCollective(program, inst);
    if (inst.kind == OpKind::Fused)
      os << " {" << describeFusedKernel(program, int(inst.attrs.index)) << "}";
    for (size_t r = 0; r < inst.storage.size(); ++r) {
      const ResultStorage &s = inst.storage[r];
      if (s.kind == ResultStorage::Kind::Fresh)
        continue;
      os << " {" << valueName(inst.results[r])
         << (s.kind == ResultStorage::Kind::View ? " view of " : " in-place ")
         << valueName(inst.operands[s.operand]) << "}";
    }
    if (inst.waitAt >= 0)
      os << " {wait #" << inst.waitAt << "}";
    printRelease(inst);
  }
  os << "  return";
  for (size_t r = 0; r < program.results.size(); ++r) {
    const ResultInfo &res = program.results[r];
    os << (r ? ", " : " ") << valueName(res.value);
    if (res.isLoss || int(r) == program.lossResult)
      os << " (loss)";
    if (res.updatesArgument >= 0)
      os << " (updates "
         << valueName(program.arguments[res.updatesArgument].value) << ")";
  }
  os << "\n";
  return os.str();
}

} // namespace merak::runtime

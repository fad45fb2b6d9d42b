//===- Program.cpp - rank program names, memory plan and listing ----------===//

#include "merak/Runtime/Program.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <algorithm>
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
  return absl::StrCat(isCollective(kind) ? "mesh." : "merak.",
                      opKindName(kind));
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
  }
  return "?";
}

const Argument *Program::findArgument(ArgumentRole role) const {
  for (const Argument &arg : arguments)
    if (arg.role == role)
      return &arg;
  return nullptr;
}

namespace {

/// The operand a result is a view of, or -1. These kernels return views
/// (as PyTorch's eager ops do), or the operand itself for identities.
int viewOperand(const Program &program, const Instruction &inst, size_t r) {
  // A collective within a group of one passes its operand through.
  if (isCollective(inst.kind) && inst.attrs.identity)
    return 0;
  switch (inst.kind) {
  case OpKind::Reshape:
  case OpKind::Permute:
  case OpKind::Slice:
  case OpKind::Select:
  case OpKind::Expand:
    return 0;
  case OpKind::Cast:
    return program.values[inst.operands[0]].type.dtype ==
                   program.values[inst.results[0]].type.dtype
               ? 0
               : -1;
  case OpKind::Dropout:
    return !inst.attrs.training || inst.attrs.p == 0 ? 0 : -1;
  case OpKind::Clamp:
    return !inst.attrs.min && !inst.attrs.max ? 0 : -1;
  case OpKind::SgdUpdate:
    // Without momentum the buffer passes through unchanged.
    return r == 1 && inst.attrs.momentum == 0 ? 2 : -1;
  default:
    return -1;
  }
}

/// (result, operand) pairs where the result may be written into the
/// operand: the kernel has an out= form that tolerates full overlap.
std::vector<std::pair<int, int>> inPlaceCandidates(const Instruction &inst) {
  switch (inst.kind) {
  case OpKind::Neg:
  case OpKind::Abs:
  case OpKind::Exp:
  case OpKind::Log:
  case OpKind::Sin:
  case OpKind::Cos:
  case OpKind::Sqrt:
  case OpKind::Rsqrt:
  case OpKind::Reciprocal:
  case OpKind::Erf:
  case OpKind::Tanh:
  case OpKind::Sigmoid:
  case OpKind::Silu:
  case OpKind::Relu:
  case OpKind::Not:
  case OpKind::Gelu:
  case OpKind::Clamp:
  case OpKind::Dropout:
  case OpKind::GeluBackward:
    return {{0, 0}};
  case OpKind::Add:
  case OpKind::Sub:
  case OpKind::Mul:
  case OpKind::Div:
  case OpKind::Pow:
  case OpKind::Remainder:
  case OpKind::FloorDivide:
  case OpKind::Minimum:
  case OpKind::Maximum:
  case OpKind::And:
  case OpKind::Or:
    return {{0, 0}, {0, 1}};
  case OpKind::Where:
    return {{0, 1}, {0, 2}};
  case OpKind::SgdUpdate:
    return {{0, 0}, {1, 2}};
  case OpKind::AdamwUpdate:
    return {{0, 0}, {1, 2}, {2, 3}};
  case OpKind::AllReduce: // Gloo reduces in place
  case OpKind::Broadcast:
    return {{0, 0}};
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

} // namespace

absl::Status bindToRank(Program &program, int64_t rank) {
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
  return planProgram(program);
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
  program.lossInstruction =
      program.lossResult >= 0
          ? values[program.results[program.lossResult].value].definedBy
          : -1;

  std::vector<Buffer> buffers;
  std::vector<bool> broadcast(numValues, false);
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
    std::vector<std::pair<int, int>> candidates = inPlaceCandidates(inst);
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
      if (!placed)
        newBuffer(res, int(i));
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
  return absl::OkStatus();
}

std::string printProgram(const Program &program) {
  std::ostringstream os;
  os << "program @" << program.function << ": " << program.values.size()
     << " values, " << program.instructions.size() << " instructions, "
     << program.constants.size() << " constants, planned peak "
     << formatBytes(program.plannedPeakBytes) << "\n";
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
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction &inst = program.instructions[i];
    os << "  #" << i << " ";
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
    for (size_t r = 0; r < inst.storage.size(); ++r) {
      const ResultStorage &s = inst.storage[r];
      if (s.kind == ResultStorage::Kind::Fresh)
        continue;
      os << " {" << valueName(inst.results[r])
         << (s.kind == ResultStorage::Kind::View ? " view of " : " in-place ")
         << valueName(inst.operands[s.operand]) << "}";
    }
    if (!inst.release.empty()) {
      os << " release";
      for (size_t k = 0; k < inst.release.size(); ++k)
        os << (k ? ", " : " ") << valueName(inst.release[k]);
    }
    os << "\n";
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

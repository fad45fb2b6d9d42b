//===- RankProgramFile.cpp - the rank-program file (.mrp) -----------------===//
//
// Writes and reads `RankPrograms`: a fixed header checked first (magic,
// version, sizes, checksums), then a CBOR payload decoded field by field
// and checked for consistency (every id in range, every enum known), so a
// damaged or foreign file is refused with a message and never runs.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/RankProgramFile.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

namespace merak::runtime {

using json = nlohmann::json;

namespace {

// "\x89MRP\r\n\x1a\n": a high byte (not text), the name, and the line
// endings and end-of-file byte that a text-mode copy would change.
constexpr char kMagic[8] = {'\x89', 'M', 'R', 'P', '\r', '\n', '\x1a', '\n'};

std::array<uint32_t, 256> makeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = (c & 1) ? 0x82F63B78u ^ (c >> 1) : c >> 1; // Castagnoli, reflected
    table[i] = c;
  }
  return table;
}

void putU32(std::string &out, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out[at + i] = char((v >> (8 * i)) & 0xFF);
}
void putU64(std::string &out, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out[at + i] = char((v >> (8 * i)) & 0xFF);
}
uint32_t getU32(std::string_view in, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= uint32_t(uint8_t(in[at + i])) << (8 * i);
  return v;
}
uint64_t getU64(std::string_view in, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= uint64_t(uint8_t(in[at + i])) << (8 * i);
  return v;
}

// Header layout (little endian).
constexpr size_t kVersionAt = 8, kFlagsAt = 12, kSizeAt = 16,
                 kPayloadCrcAt = 24, kHeaderCrcAt = 28;

/// A decoding error: the path of the field inside the payload and what is
/// wrong with it. Thrown inside this file only; `parseRankPrograms` turns
/// it into a status.
struct FormatError {
  std::string message;
};

[[noreturn]] void formatError(const std::string &path,
                              const std::string &what) {
  throw FormatError{path + ": " + what};
}

//===----------------------------------------------------------------------===//
// Enumerations: written as integers, checked against their range on read.
//===----------------------------------------------------------------------===//

template <typename E> constexpr int enumCount();
template <> constexpr int enumCount<DType>() { return 7; }
template <> constexpr int enumCount<ArgumentRole>() { return 11; }
template <> constexpr int enumCount<ComparePredicate>() { return 6; }
template <> constexpr int enumCount<LossReduction>() { return 3; }
template <> constexpr int enumCount<CollectiveReduction>() { return 5; }
template <> constexpr int enumCount<ResultStorage::Kind>() { return 3; }
template <> constexpr int enumCount<PipelineTask::Kind>() { return 7; }
template <> constexpr int enumCount<StagePhase>() { return 6; }

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

json toJson(int64_t v) { return v; }
json toJson(int v) { return v; }
json toJson(double v) { return v; }
json toJson(bool v) { return v; }
json toJson(const std::string &v) { return v; }
json toJson(const std::vector<int64_t> &v) { return v; }
template <typename E, typename = std::enable_if_t<std::is_enum_v<E>>>
json toJson(E v) {
  return int(v);
}
template <typename T> json toJson(const std::optional<T> &v) {
  return v ? toJson(*v) : json(nullptr);
}

/// Writes a field only where it differs from its default (NaN always).
template <typename T> bool differs(const T &v, const T &def) {
  return !(v == def);
}
bool differs(double v, double def) { return std::isnan(v) || v != def; }

json attrsToJson(const OpAttrs &a) {
  json j = json::object();
  const OpAttrs defaults;
#define MERAK_WRITE_ATTR(Type, Name, Default)                                  \
  if (differs(a.Name, defaults.Name))                                          \
    j[#Name] = toJson(a.Name);
  MERAK_OP_ATTRS(MERAK_WRITE_ATTR)
#undef MERAK_WRITE_ATTR
  return j;
}

json typeToJson(const TensorType &t) {
  return json::array({toJson(t.dtype), t.shape});
}

json shardingToJson(const Sharding &s) { return s.splitAxes; }

json programToJson(const Program &p) {
  json j;
  j["function"] = p.function;
  json values = json::array();
  for (const ValueInfo &v : p.values)
    values.push_back(json::array({toJson(v.type.dtype), v.type.shape,
                                  v.definedBy, v.lastUse, v.buffer}));
  j["values"] = std::move(values);
  json args = json::array();
  for (const Argument &a : p.arguments) {
    json o = {{"value", a.value}, {"role", toJson(a.role)}};
    if (!a.name.empty())
      o["name"] = a.name;
    if (a.updatedBy >= 0)
      o["updated_by"] = a.updatedBy;
    if (a.defaultLearningRate)
      o["lr"] = *a.defaultLearningRate;
    if (!a.init.empty())
      o["init"] = a.init;
    if (a.role == ArgumentRole::LossScale)
      o["loss_scale"] = {{"dynamic", a.lossScaling.dynamic},
                         {"init", a.lossScaling.init},
                         {"window", a.lossScaling.window}};
    if (!a.sharding.isReplicated())
      o["sharding"] = shardingToJson(a.sharding);
    if (a.pipelineValue >= 0)
      o["pipeline_value"] = a.pipelineValue;
    if (!a.storedShape.empty())
      o["stored_shape"] = a.storedShape;
    args.push_back(std::move(o));
  }
  j["arguments"] = std::move(args);
  json results = json::array();
  for (const ResultInfo &r : p.results) {
    json o = {{"value", r.value}};
    if (r.isLoss)
      o["loss"] = true;
    if (r.updatesArgument >= 0)
      o["updates"] = r.updatesArgument;
    if (!r.sharding.isReplicated())
      o["sharding"] = shardingToJson(r.sharding);
    if (r.pipelineValue >= 0)
      o["pipeline_value"] = r.pipelineValue;
    if (!r.gradName.empty())
      o["grad"] = r.gradName;
    results.push_back(std::move(o));
  }
  j["results"] = std::move(results);
  json constants = json::array();
  for (const ProgramConstant &c : p.constants) {
    const uint8_t *bytes = c.data.bytes();
    constants.push_back({{"value", c.value},
                         {"type", typeToJson(c.data.type)},
                         {"data", json::binary(std::vector<uint8_t>(
                                      bytes, bytes + c.data.byteSize()))}});
  }
  j["constants"] = std::move(constants);
  json insts = json::array();
  for (const Instruction &inst : p.instructions) {
    json o = {{"op", opFullName(inst.kind)},
              {"operands", inst.operands},
              {"results", inst.results}};
    json attrs = attrsToJson(inst.attrs);
    if (!attrs.empty())
      o["attrs"] = std::move(attrs);
    json storage = json::array();
    for (const ResultStorage &s : inst.storage)
      storage.push_back(
          json::array({toJson(s.kind), s.operand, s.arenaOffset}));
    o["storage"] = std::move(storage);
    if (!inst.release.empty())
      o["release"] = inst.release;
    if (!inst.location.empty())
      o["loc"] = inst.location;
    if (inst.waitAt >= 0)
      o["wait_at"] = inst.waitAt;
    if (inst.completes >= 0)
      o["completes"] = inst.completes;
    insts.push_back(std::move(o));
  }
  j["instructions"] = std::move(insts);
  j["loss_result"] = p.lossResult;
  j["grad_norm_result"] = p.gradNormResult;
  if (p.nonFiniteGradsResult >= 0)
    j["nonfinite_grads_result"] = p.nonFiniteGradsResult;
  if (p.mesh) {
    j["mesh"] = {{"name", p.mesh->name},
                 {"shape", p.mesh->shape},
                 {"axis_names", p.mesh->axisNames}};
    if (!p.mesh->allReduceAlgorithm.empty())
      j["mesh"]["all_reduce_algorithm"] = p.mesh->allReduceAlgorithm;
  }
  j["rank"] = p.rank;
  json groups = json::array();
  for (const ProcessGroupSpec &g : p.groups)
    groups.push_back({{"mesh_axes", g.meshAxes},
                      {"ranks", g.members.ranks},
                      {"index", g.members.index}});
  j["groups"] = std::move(groups);
  j["loss_instruction"] = p.lossInstruction;
  j["planned_peak_bytes"] = p.plannedPeakBytes;
  j["arena_bytes"] = p.arenaBytes;
  return j;
}

json transferToJson(const StageTransfer &t) {
  json types = json::array();
  for (const TensorType &type : t.types)
    types.push_back(typeToJson(type));
  return {{"values", t.values}, {"types", std::move(types)}};
}

json pipelineToJson(const PipelinePlan &p) {
  json j = {{"kind", p.kind},
            {"pp", p.pp},
            {"virtual_stages", p.virtualStages},
            {"stages", p.stages},
            {"microbatches", p.microbatches},
            {"split_backward", p.splitBackward},
            {"dynamic", p.dynamic},
            {"inflight_limit", p.inflightLimit},
            {"unit_time_bubble", p.unitTimeBubble},
            {"rank", p.rank},
            {"loss_stage", p.lossStage}};
  json tasks = json::array();
  for (const PipelineTask &t : p.tasks)
    tasks.push_back(json::array({toJson(t.kind), t.stage, t.microbatch,
                                 toJson(t.payload), t.peer, t.text}));
  j["tasks"] = std::move(tasks);
  json functions = json::array();
  for (const StageFunction &f : p.functions)
    functions.push_back({{"stage", f.stage},
                         {"phase", toJson(f.phase)},
                         {"program", programToJson(f.program)}});
  j["functions"] = std::move(functions);
  json forward = json::array(), backward = json::array();
  for (const StageTransfer &t : p.forwardSends)
    forward.push_back(transferToJson(t));
  for (const StageTransfer &t : p.backwardSends)
    backward.push_back(transferToJson(t));
  j["forward_sends"] = std::move(forward);
  j["backward_sends"] = std::move(backward);
  j["tied"] = p.tied;
  j["state_stage"] = p.stateStage;
  return j;
}

//===----------------------------------------------------------------------===//
// Reading: every access checks its type and names its path on failure.
//===----------------------------------------------------------------------===//

std::string member(const std::string &path, const char *key) {
  return path + "." + key;
}
std::string element(const std::string &path, size_t i) {
  return absl::StrCat(path, "[", i, "]");
}

const json &field(const json &j, const std::string &path, const char *key) {
  if (!j.is_object())
    formatError(path, "expected a map");
  auto it = j.find(key);
  if (it == j.end())
    formatError(path, absl::StrCat("missing field '", key, "'"));
  return *it;
}

const json &arrayOf(const json &j, const std::string &path) {
  if (!j.is_array())
    formatError(path, "expected an array");
  return j;
}

void read(const json &j, const std::string &path, int64_t &out) {
  if (!j.is_number_integer())
    formatError(path, "expected an integer");
  if (j.is_number_unsigned() &&
      j.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    formatError(path, "integer out of range");
  out = j.get<int64_t>();
}
void read(const json &j, const std::string &path, int &out) {
  int64_t v;
  read(j, path, v);
  if (v < std::numeric_limits<int>::min() ||
      v > std::numeric_limits<int>::max())
    formatError(path, "integer out of range");
  out = int(v);
}
void read(const json &j, const std::string &path, double &out) {
  if (!j.is_number())
    formatError(path, "expected a number");
  out = j.get<double>();
}
void read(const json &j, const std::string &path, bool &out) {
  if (!j.is_boolean())
    formatError(path, "expected a boolean");
  out = j.get<bool>();
}
void read(const json &j, const std::string &path, std::string &out) {
  if (!j.is_string())
    formatError(path, "expected a string");
  out = j.get<std::string>();
}
template <typename T>
void read(const json &j, const std::string &path, std::vector<T> &out) {
  arrayOf(j, path);
  out.clear();
  out.resize(j.size());
  for (size_t i = 0; i < j.size(); ++i)
    read(j[i], element(path, i), out[i]);
}
template <typename T>
void read(const json &j, const std::string &path, std::optional<T> &out) {
  if (j.is_null()) {
    out.reset();
    return;
  }
  T v;
  read(j, path, v);
  out = v;
}
template <typename E, typename = std::enable_if_t<std::is_enum_v<E>>>
void read(const json &j, const std::string &path, E &out) {
  int64_t v;
  read(j, path, v);
  if (v < 0 || v >= enumCount<E>())
    formatError(path, absl::StrCat("unknown value ", v));
  out = E(v);
}
template <typename T>
void read(const json &j, const std::string &path,
          std::map<std::string, T> &out) {
  if (!j.is_object())
    formatError(path, "expected a map");
  out.clear();
  for (auto it = j.begin(); it != j.end(); ++it)
    read(it.value(), path + "." + it.key(), out[it.key()]);
}

template <typename T>
void readField(const json &j, const std::string &path, const char *key,
               T &out) {
  read(field(j, path, key), member(path, key), out);
}
/// A field that may be absent (then `out` keeps its value).
template <typename T>
void readOptional(const json &j, const std::string &path, const char *key,
                  T &out) {
  if (!j.is_object())
    formatError(path, "expected a map");
  if (auto it = j.find(key); it != j.end())
    read(*it, member(path, key), out);
}

void readType(const json &j, const std::string &path, TensorType &out) {
  if (!j.is_array() || j.size() != 2)
    formatError(path, "expected [dtype, shape]");
  read(j[0], element(path, 0), out.dtype);
  read(j[1], element(path, 1), out.shape);
  for (size_t d = 0; d < out.shape.size(); ++d)
    if (out.shape[d] < 0)
      formatError(element(path, 1),
                  absl::StrCat("negative dimension ", out.shape[d]));
  if (absl::StatusOr<int64_t> bytes = checkedByteSize(out); !bytes.ok())
    formatError(element(path, 1), std::string(bytes.status().message()));
}

void readSharding(const json &j, const std::string &path, Sharding &out) {
  read(j, path, out.splitAxes);
}

std::map<std::string, OpKind> opKindsByName() {
  std::map<std::string, OpKind> kinds;
  // `fused` instructions are made when a program is bound to its rank,
  // never stored: a file naming one is refused as an unknown op.
  for (size_t k = 0; k < kNumOpKinds; ++k)
    if (OpKind(k) != OpKind::Fused)
      kinds[opFullName(OpKind(k))] = OpKind(k);
  return kinds;
}

void readAttrs(const json &j, const std::string &path, OpAttrs &a) {
  if (!j.is_object())
    formatError(path, "expected a map");
  static const std::set<std::string> known = {
#define MERAK_ATTR_NAME(Type, Name, Default) #Name,
      MERAK_OP_ATTRS(MERAK_ATTR_NAME)
#undef MERAK_ATTR_NAME
  };
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!known.count(it.key()))
      formatError(path, absl::StrCat("unknown attribute '", it.key(), "'"));
#define MERAK_READ_ATTR(Type, Name, Default)                                   \
  readOptional(j, path, #Name, a.Name);
  MERAK_OP_ATTRS(MERAK_READ_ATTR)
#undef MERAK_READ_ATTR
}

/// Checks what the executor relies on: ids in range, each value defined
/// once before it is read, constants of their type's size, the plan's
/// indices in range. `path` names the program in messages.
void checkProgram(const Program &p, const std::string &path) {
  const int64_t numValues = int64_t(p.values.size());
  const int64_t numInsts = int64_t(p.instructions.size());
  std::vector<bool> defined(p.values.size(), false);
  auto valueId = [&](ValueId v, const std::string &where, bool optional) {
    if (optional && v == kNoValue)
      return;
    if (v < 0 || v >= numValues)
      formatError(where, absl::StrCat("value %", v, " out of range (",
                                      numValues, " values)"));
  };
  auto define = [&](ValueId v, const std::string &where) {
    valueId(v, where, false);
    if (defined[v])
      formatError(where, absl::StrCat("value %", v, " defined twice"));
    defined[v] = true;
  };
  for (size_t i = 0; i < p.values.size(); ++i) {
    const ValueInfo &v = p.values[i];
    std::string where = element(member(path, "values"), i);
    if (v.definedBy < -1 || v.definedBy >= numInsts)
      formatError(where, "defining instruction out of range");
    if (v.lastUse != kKeepAlive && (v.lastUse < -1 || v.lastUse >= numInsts))
      formatError(where, "last use out of range");
  }
  for (size_t i = 0; i < p.arguments.size(); ++i) {
    const Argument &a = p.arguments[i];
    std::string where = element(member(path, "arguments"), i);
    define(a.value, where);
    if (a.updatedBy < -1 || a.updatedBy >= int64_t(p.results.size()))
      formatError(where, "updating result out of range");
    if (!a.storedShape.empty())
      if (absl::StatusOr<int64_t> bytes =
              checkedByteSize({p.values[a.value].type.dtype, a.storedShape});
          !bytes.ok())
        formatError(member(where, "stored_shape"),
                    std::string(bytes.status().message()));
  }
  for (size_t i = 0; i < p.constants.size(); ++i) {
    const ProgramConstant &c = p.constants[i];
    std::string where = element(member(path, "constants"), i);
    define(c.value, where);
    if (c.data.type != p.values[c.value].type)
      formatError(where, absl::StrCat("data of type ", c.data.type.str(),
                                      " for a value of type ",
                                      p.values[c.value].type.str()));
  }
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    const Instruction &inst = p.instructions[i];
    std::string where = absl::StrCat(element(member(path, "instructions"), i),
                                     " (", opFullName(inst.kind), ")");
    if (std::string wrong = arityError(inst); !wrong.empty())
      formatError(where, wrong);
    for (ValueId v : inst.operands) {
      valueId(v, where, true);
      if (v != kNoValue && !defined[v])
        formatError(where, absl::StrCat("reads %", v, " before it is defined"));
    }
    for (ValueId v : inst.results) {
      define(v, where);
      if (p.values[v].definedBy != int64_t(i))
        formatError(where,
                    absl::StrCat("result %", v, " records another definition"));
    }
    if (!inst.storage.empty() && inst.storage.size() != inst.results.size())
      formatError(where, "storage entries do not match the results");
    for (size_t r = 0; r < inst.storage.size(); ++r) {
      const ResultStorage &s = inst.storage[r];
      if (s.kind != ResultStorage::Kind::Fresh &&
          (s.operand < 0 || s.operand >= int(inst.operands.size()) ||
           inst.operands[s.operand] == kNoValue))
        formatError(where, "storage names an operand out of range");
      // The result's bytes must lie inside the arena.
      if (s.arenaOffset < -1 ||
          (s.arenaOffset >= 0 &&
           s.arenaOffset >
               p.arenaBytes - p.values[inst.results[r]].type.byteSize()))
        formatError(where,
                    absl::StrCat("arena offset ", s.arenaOffset,
                                 " out of range for a result of ",
                                 p.values[inst.results[r]].type.byteSize(),
                                 " bytes in an arena of ", p.arenaBytes));
    }
    for (ValueId v : inst.release)
      valueId(v, where, false);
    if (inst.waitAt < -1 || inst.waitAt >= numInsts || inst.completes < -1 ||
        inst.completes >= numInsts)
      formatError(where, "wait index out of range");
    if (inst.kind == OpKind::Wait && inst.completes < 0)
      formatError(where, "a wait completes no collective");
    if (isCollective(inst.kind) && p.mesh)
      for (int64_t axis : inst.attrs.meshAxes)
        if (axis < 0 || axis >= int64_t(p.mesh->shape.size()))
          formatError(where, absl::StrCat("mesh axis ", axis,
                                          " out of range for a mesh of rank ",
                                          p.mesh->shape.size()));
  }
  for (size_t i = 0; i < p.results.size(); ++i) {
    const ResultInfo &r = p.results[i];
    std::string where = element(member(path, "results"), i);
    valueId(r.value, where, false);
    if (!defined[r.value])
      formatError(
          where, absl::StrCat("returns %", r.value, ", which nothing defines"));
    if (r.updatesArgument < -1 ||
        r.updatesArgument >= int64_t(p.arguments.size()))
      formatError(where, "updated argument out of range");
  }
  auto resultIndex = [&](int64_t r, const char *what) {
    if (r < -1 || r >= int64_t(p.results.size()))
      formatError(member(path, what), "result index out of range");
  };
  resultIndex(p.lossResult, "loss_result");
  resultIndex(p.gradNormResult, "grad_norm_result");
  resultIndex(p.nonFiniteGradsResult, "nonfinite_grads_result");
  if (p.lossInstruction < -1 || p.lossInstruction >= numInsts)
    formatError(member(path, "loss_instruction"), "out of range");
  if (p.arenaBytes < 0 || p.plannedPeakBytes < 0)
    formatError(path, "negative memory plan");
  if (p.mesh) {
    std::optional<int64_t> size = 1;
    for (int64_t n : p.mesh->shape) {
      if (n < 1)
        formatError(member(path, "mesh"), "mesh dimension below 1");
      size = size ? checkedMul(*size, n) : std::nullopt;
    }
    if (!size)
      formatError(member(path, "mesh"), "the mesh's size overflows");
    auto checkSharding = [&](const Sharding &s, const TensorType &type,
                             const std::string &where) {
      if (absl::Status st = verifySharding(s, type.shape.size(), p.mesh->shape);
          !st.ok())
        formatError(where, std::string(st.message()));
    };
    for (size_t i = 0; i < p.arguments.size(); ++i)
      checkSharding(p.arguments[i].sharding,
                    p.values[p.arguments[i].value].type,
                    element(member(path, "arguments"), i));
    for (size_t i = 0; i < p.results.size(); ++i)
      checkSharding(p.results[i].sharding, p.values[p.results[i].value].type,
                    element(member(path, "results"), i));
  } else {
    for (const Argument &a : p.arguments)
      if (!a.sharding.isReplicated())
        formatError(path, "a sharded argument in a program without a mesh");
  }
}

Program readProgram(const json &j, const std::string &path) {
  static const std::map<std::string, OpKind> kinds = opKindsByName();
  Program p;
  readField(j, path, "function", p.function);
  const json &values =
      arrayOf(field(j, path, "values"), member(path, "values"));
  p.values.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    std::string where = element(member(path, "values"), i);
    const json &v = values[i];
    if (!v.is_array() || v.size() != 5)
      formatError(where, "expected [dtype, shape, defined by, last use, "
                         "buffer]");
    ValueInfo &info = p.values[i];
    readType(json::array({v[0], v[1]}), where, info.type);
    read(v[2], element(where, 2), info.definedBy);
    read(v[3], element(where, 3), info.lastUse);
    read(v[4], element(where, 4), info.buffer);
  }
  const json &args =
      arrayOf(field(j, path, "arguments"), member(path, "arguments"));
  for (size_t i = 0; i < args.size(); ++i) {
    std::string where = element(member(path, "arguments"), i);
    Argument a;
    readField(args[i], where, "value", a.value);
    readField(args[i], where, "role", a.role);
    readOptional(args[i], where, "name", a.name);
    readOptional(args[i], where, "updated_by", a.updatedBy);
    readOptional(args[i], where, "lr", a.defaultLearningRate);
    readOptional(args[i], where, "init", a.init);
    if (!a.init.empty() && a.init != "zeros" && a.init != "kaiming_uniform")
      formatError(member(where, "init"),
                  "an init is zeros or kaiming_uniform, not '" + a.init + "'");
    if (args[i].contains("loss_scale")) {
      std::string at = member(where, "loss_scale");
      const json &scaling = args[i]["loss_scale"];
      readField(scaling, at, "dynamic", a.lossScaling.dynamic);
      readField(scaling, at, "init", a.lossScaling.init);
      readField(scaling, at, "window", a.lossScaling.window);
      if (!(std::isfinite(a.lossScaling.init) && a.lossScaling.init > 0) ||
          a.lossScaling.window < 1)
        formatError(at, "a loss scale needs init > 0 and window >= 1");
    }
    if (args[i].contains("sharding"))
      readSharding(args[i]["sharding"], member(where, "sharding"), a.sharding);
    readOptional(args[i], where, "pipeline_value", a.pipelineValue);
    readOptional(args[i], where, "stored_shape", a.storedShape);
    p.arguments.push_back(std::move(a));
  }
  const json &results =
      arrayOf(field(j, path, "results"), member(path, "results"));
  for (size_t i = 0; i < results.size(); ++i) {
    std::string where = element(member(path, "results"), i);
    ResultInfo r;
    readField(results[i], where, "value", r.value);
    readOptional(results[i], where, "loss", r.isLoss);
    readOptional(results[i], where, "updates", r.updatesArgument);
    if (results[i].contains("sharding"))
      readSharding(results[i]["sharding"], member(where, "sharding"),
                   r.sharding);
    readOptional(results[i], where, "pipeline_value", r.pipelineValue);
    readOptional(results[i], where, "grad", r.gradName);
    p.results.push_back(std::move(r));
  }
  const json &constants =
      arrayOf(field(j, path, "constants"), member(path, "constants"));
  for (size_t i = 0; i < constants.size(); ++i) {
    std::string where = element(member(path, "constants"), i);
    ProgramConstant c;
    readField(constants[i], where, "value", c.value);
    TensorType type;
    readType(field(constants[i], where, "type"), member(where, "type"), type);
    const json &data = field(constants[i], where, "data");
    if (!data.is_binary())
      formatError(member(where, "data"), "expected bytes");
    const std::vector<uint8_t> &bytes = data.get_binary();
    if (int64_t(bytes.size()) != type.byteSize())
      formatError(member(where, "data"),
                  absl::StrCat(bytes.size(), " bytes for a tensor of type ",
                               type.str(), " (", type.byteSize(), " bytes)"));
    c.data = HostTensor::allocate(type);
    if (!bytes.empty())
      std::memcpy(c.data.mutableBytes(), bytes.data(), bytes.size());
    p.constants.push_back(std::move(c));
  }
  const json &insts =
      arrayOf(field(j, path, "instructions"), member(path, "instructions"));
  p.instructions.reserve(insts.size());
  for (size_t i = 0; i < insts.size(); ++i) {
    std::string where = element(member(path, "instructions"), i);
    const json &o = insts[i];
    std::string op;
    readField(o, where, "op", op);
    auto kind = kinds.find(op);
    if (kind == kinds.end())
      formatError(where, absl::StrCat("unknown op '", op,
                                      "' (this runtime has no kernel for it)"));
    Instruction inst{kind->second, OpAttrs(), {}, {}, {}, {}, "", -1, -1};
    readField(o, where, "operands", inst.operands);
    readField(o, where, "results", inst.results);
    if (o.contains("attrs"))
      readAttrs(o["attrs"], member(where, "attrs"), inst.attrs);
    const json &storage =
        arrayOf(field(o, where, "storage"), member(where, "storage"));
    for (size_t k = 0; k < storage.size(); ++k) {
      std::string at = element(member(where, "storage"), k);
      if (!storage[k].is_array() || storage[k].size() != 3)
        formatError(at, "expected [kind, operand, arena offset]");
      ResultStorage s;
      read(storage[k][0], element(at, 0), s.kind);
      read(storage[k][1], element(at, 1), s.operand);
      read(storage[k][2], element(at, 2), s.arenaOffset);
      inst.storage.push_back(s);
    }
    readOptional(o, where, "release", inst.release);
    readOptional(o, where, "loc", inst.location);
    readOptional(o, where, "wait_at", inst.waitAt);
    readOptional(o, where, "completes", inst.completes);
    p.instructions.push_back(std::move(inst));
  }
  readField(j, path, "loss_result", p.lossResult);
  readField(j, path, "grad_norm_result", p.gradNormResult);
  readOptional(j, path, "nonfinite_grads_result", p.nonFiniteGradsResult);
  if (j.contains("mesh")) {
    MeshLayout mesh;
    std::string where = member(path, "mesh");
    readField(j["mesh"], where, "name", mesh.name);
    readField(j["mesh"], where, "shape", mesh.shape);
    readField(j["mesh"], where, "axis_names", mesh.axisNames);
    readOptional(j["mesh"], where, "all_reduce_algorithm",
                 mesh.allReduceAlgorithm);
    if (!mesh.allReduceAlgorithm.empty() && mesh.allReduceAlgorithm != "ring" &&
        mesh.allReduceAlgorithm != "tree")
      formatError(member(where, "all_reduce_algorithm"),
                  "must be \"ring\" or \"tree\", not \"" +
                      mesh.allReduceAlgorithm + "\"");
    p.mesh = std::move(mesh);
  }
  readField(j, path, "rank", p.rank);
  const json &groups =
      arrayOf(field(j, path, "groups"), member(path, "groups"));
  for (size_t i = 0; i < groups.size(); ++i) {
    std::string where = element(member(path, "groups"), i);
    ProcessGroupSpec g;
    readField(groups[i], where, "mesh_axes", g.meshAxes);
    readField(groups[i], where, "ranks", g.members.ranks);
    readField(groups[i], where, "index", g.members.index);
    p.groups.push_back(std::move(g));
  }
  readField(j, path, "loss_instruction", p.lossInstruction);
  readField(j, path, "planned_peak_bytes", p.plannedPeakBytes);
  readField(j, path, "arena_bytes", p.arenaBytes);
  checkProgram(p, path);
  return p;
}

StageTransfer readTransfer(const json &j, const std::string &path) {
  StageTransfer t;
  readField(j, path, "values", t.values);
  const json &types = arrayOf(field(j, path, "types"), member(path, "types"));
  for (size_t i = 0; i < types.size(); ++i) {
    TensorType type;
    readType(types[i], element(member(path, "types"), i), type);
    t.types.push_back(std::move(type));
  }
  if (t.types.size() != t.values.size())
    formatError(path, "values and types differ in number");
  return t;
}

PipelinePlan readPipeline(const json &j, const std::string &path) {
  PipelinePlan p;
  readField(j, path, "kind", p.kind);
  readField(j, path, "pp", p.pp);
  readField(j, path, "virtual_stages", p.virtualStages);
  readField(j, path, "stages", p.stages);
  readField(j, path, "microbatches", p.microbatches);
  readField(j, path, "split_backward", p.splitBackward);
  readField(j, path, "dynamic", p.dynamic);
  readField(j, path, "inflight_limit", p.inflightLimit);
  readField(j, path, "unit_time_bubble", p.unitTimeBubble);
  readField(j, path, "rank", p.rank);
  readField(j, path, "loss_stage", p.lossStage);
  if (p.pp < 1 || p.virtualStages < 1 || p.microbatches < 1 ||
      p.stages != p.pp * p.virtualStages)
    formatError(path, absl::StrCat("inconsistent shape: pp=", p.pp, " virtual=",
                                   p.virtualStages, " stages=", p.stages,
                                   " micro-batches=", p.microbatches));
  if (p.lossStage < 0 || p.lossStage >= p.stages)
    formatError(member(path, "loss_stage"), "stage out of range");
  const json &tasks = arrayOf(field(j, path, "tasks"), member(path, "tasks"));
  for (size_t i = 0; i < tasks.size(); ++i) {
    std::string where = element(member(path, "tasks"), i);
    const json &t = tasks[i];
    if (!t.is_array() || t.size() != 6)
      formatError(where, "expected [kind, stage, micro-batch, payload, peer, "
                         "text]");
    PipelineTask task;
    read(t[0], element(where, 0), task.kind);
    read(t[1], element(where, 1), task.stage);
    read(t[2], element(where, 2), task.microbatch);
    read(t[3], element(where, 3), task.payload);
    read(t[4], element(where, 4), task.peer);
    read(t[5], element(where, 5), task.text);
    if (task.stage < 0 || task.stage >= p.stages || task.microbatch < 0 ||
        task.microbatch >= p.microbatches)
      formatError(where, absl::StrCat("task '", task.text,
                                      "' names a stage or micro-batch out of "
                                      "range"));
    if (!task.isCompute() && (task.peer < 0 || task.peer >= p.pp))
      formatError(where, absl::StrCat("task '", task.text,
                                      "' names a peer out of range"));
    p.tasks.push_back(std::move(task));
  }
  const json &functions =
      arrayOf(field(j, path, "functions"), member(path, "functions"));
  for (size_t i = 0; i < functions.size(); ++i) {
    std::string where = element(member(path, "functions"), i);
    StageFunction f;
    readField(functions[i], where, "stage", f.stage);
    readField(functions[i], where, "phase", f.phase);
    if (f.stage < 0 || f.stage >= p.stages)
      formatError(where, "stage out of range");
    f.program = readProgram(field(functions[i], where, "program"),
                            member(where, "program"));
    p.functions.push_back(std::move(f));
  }
  for (auto [key, sends] : {std::pair{"forward_sends", &p.forwardSends},
                            std::pair{"backward_sends", &p.backwardSends}}) {
    const json &list = arrayOf(field(j, path, key), member(path, key));
    if (int64_t(list.size()) != p.stages)
      formatError(member(path, key), "expected one entry per stage");
    for (size_t i = 0; i < list.size(); ++i)
      sends->push_back(readTransfer(list[i], element(member(path, key), i)));
  }
  readField(j, path, "tied", p.tied);
  readField(j, path, "state_stage", p.stateStage);
  for (const auto &[name, stages] : p.tied)
    for (int64_t s : stages)
      if (s < 0 || s >= p.stages)
        formatError(member(path, "tied"),
                    absl::StrCat("stage of '", name, "' out of range"));
  for (const auto &[name, s] : p.stateStage)
    if (s < 0 || s >= p.stages)
      formatError(member(path, "state_stage"),
                  absl::StrCat("stage of '", name, "' out of range"));
  return p;
}

std::string describeBytes(std::string_view bytes) {
  std::string out;
  for (size_t i = 0; i < std::min<size_t>(bytes.size(), 8); ++i)
    absl::StrAppendFormat(&out, "%s%02x", i ? " " : "", uint8_t(bytes[i]));
  return out;
}

} // namespace

uint32_t crc32c(std::string_view bytes, uint32_t crc) {
  static const std::array<uint32_t, 256> table = makeCrcTable();
  crc = ~crc;
  for (char c : bytes)
    crc = table[(crc ^ uint8_t(c)) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

bool isRankProgramFile(std::string_view prefix) {
  return prefix.size() >= sizeof(kMagic) &&
         std::memcmp(prefix.data(), kMagic, sizeof(kMagic)) == 0;
}

absl::StatusOr<std::string>
serializeRankPrograms(const RankPrograms &programs) {
  // Fusion belongs to binding (`BindOptions`): a file holds what every
  // backend runs.
  auto fused = [](const Program &p) {
    for (const Instruction &inst : p.instructions)
      if (inst.kind == OpKind::Fused)
        return true;
    return false;
  };
  if (fused(programs.step) || (programs.decode && fused(*programs.decode)))
    return absl::InvalidArgumentError(
        "a program with fused instructions is not written to a file: chains "
        "are fused when a program is bound to its rank");
  json payload;
  payload["source"] = programs.source;
  payload["step"] = programToJson(programs.step);
  if (programs.decode)
    payload["decode"] = programToJson(*programs.decode);
  std::vector<uint8_t> cbor;
  try {
    // Each pipeline rank's plan is a CBOR document of its own, embedded as
    // bytes: a rank decodes only its own.
    json pipeline = json::array();
    for (const PipelinePlan &plan : programs.pipeline)
      pipeline.push_back(json::binary(json::to_cbor(pipelineToJson(plan))));
    payload["pipeline"] = std::move(pipeline);
    cbor = json::to_cbor(payload);
  } catch (const json::exception &e) {
    return absl::InternalError(
        absl::StrCat("cannot encode the rank programs: ", e.what()));
  }
  std::string out(kRankProgramHeaderBytes, '\0');
  std::memcpy(out.data(), kMagic, sizeof(kMagic));
  putU32(out, kVersionAt, kRankProgramFormatVersion);
  putU32(out, kFlagsAt, 0);
  putU64(out, kSizeAt, cbor.size());
  std::string_view body(reinterpret_cast<const char *>(cbor.data()),
                        cbor.size());
  putU32(out, kPayloadCrcAt, crc32c(body));
  putU32(out, kHeaderCrcAt, crc32c(std::string_view(out.data(), kHeaderCrcAt)));
  out.append(body);
  return out;
}

namespace {

/// Checks the header and the payload's checksum; returns the payload.
absl::StatusOr<std::string_view> checkedPayload(std::string_view bytes,
                                                const std::string &name) {
  auto error = [&](const std::string &what) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", what));
  };
  if (!isRankProgramFile(bytes)) {
    if (!bytes.empty() && bytes.size() < sizeof(kMagic) &&
        bytes == std::string_view(kMagic, bytes.size()))
      return error(absl::StrCat("truncated rank-program file: ", bytes.size(),
                                " bytes, its header has ",
                                kRankProgramHeaderBytes));
    return error(
        absl::StrCat("not a rank-program file (",
                     bytes.empty() ? std::string("it is empty")
                                   : "it starts with " + describeBytes(bytes),
                     "; merak-translate --merak-to-rank-program writes one)"));
  }
  if (bytes.size() < kRankProgramHeaderBytes)
    return error(absl::StrCat("truncated rank-program file: ", bytes.size(),
                              " bytes, its header has ",
                              kRankProgramHeaderBytes));
  uint32_t headerCrc = getU32(bytes, kHeaderCrcAt);
  if (crc32c(bytes.substr(0, kHeaderCrcAt)) != headerCrc)
    return error("corrupted rank-program header (its checksum, at byte 28, "
                 "does not match bytes 0-27)");
  uint32_t version = getU32(bytes, kVersionAt);
  if (version > kRankProgramFormatVersion)
    return error(absl::StrCat(
        "rank-program format version ", version,
        " is newer than this runtime reads (", kRankProgramOldestReadable,
        " to ", kRankProgramFormatVersion,
        "): run it with a newer merak-exec, or compile it again with this "
        "version's merak-translate"));
  if (version < kRankProgramOldestReadable)
    return error(absl::StrCat("rank-program format version ", version,
                              " is older than this runtime reads (",
                              kRankProgramOldestReadable, " to ",
                              kRankProgramFormatVersion,
                              "): compile it again with merak-translate"));
  if (uint32_t flags = getU32(bytes, kFlagsAt); flags != 0)
    return error(absl::StrCat("unknown flags 0x", absl::Hex(flags),
                              " in the rank-program header (byte 12)"));
  uint64_t size = getU64(bytes, kSizeAt);
  uint64_t have = bytes.size() - kRankProgramHeaderBytes;
  if (have < size)
    return error(absl::StrCat("truncated rank-program file: the header "
                              "announces ",
                              size, " bytes of payload at byte ",
                              kRankProgramHeaderBytes, ", the file has ",
                              have));
  if (have > size)
    return error(absl::StrCat(have - size,
                              " unexpected bytes after the "
                              "payload, at byte ",
                              kRankProgramHeaderBytes + size));
  std::string_view body = bytes.substr(kRankProgramHeaderBytes);
  uint32_t expected = getU32(bytes, kPayloadCrcAt);
  if (uint32_t actual = crc32c(body); actual != expected)
    return error(absl::StrFormat(
        "corrupted rank-program file: the payload's checksum is %08x, the "
        "header records %08x",
        actual, expected));
  return body;
}

absl::Status fileError(const std::string &name, const std::string &what) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", what));
}

/// A rank-program file, its pipeline plans decoded on demand.
class FilePlan final : public CompiledPlan {
public:
  static absl::StatusOr<std::unique_ptr<FilePlan>>
  open(std::string_view bytes, const std::string &name) {
    std::unique_ptr<FilePlan> plan(new FilePlan());
    plan->name = name;
    absl::StatusOr<std::string_view> body = checkedPayload(bytes, name);
    if (!body.ok())
      return body.status();
    json payload;
    try {
      payload = json::from_cbor(body->begin(), body->end());
    } catch (const json::parse_error &e) {
      return fileError(name, absl::StrCat("malformed payload at byte ",
                                          kRankProgramHeaderBytes + e.byte,
                                          ": ", e.what()));
    } catch (const json::exception &e) {
      // An array or string announcing more elements than can be held
      // throws out_of_range, not parse_error.
      return fileError(name, absl::StrCat("malformed payload: ", e.what()));
    }
    try {
      read(field(payload, "payload", "source"), "payload.source",
           plan->sourceName);
      plan->stepProgram =
          readProgram(field(payload, "payload", "step"), "step");
      if (payload.contains("decode"))
        plan->decodeProgram = readProgram(payload["decode"], "decode");
      const json &pipeline =
          arrayOf(field(payload, "payload", "pipeline"), "pipeline");
      for (size_t r = 0; r < pipeline.size(); ++r) {
        if (!pipeline[r].is_binary())
          formatError(element("pipeline", r), "expected bytes");
        plan->encoded.push_back(pipeline[r].get_binary());
      }
      plan->ranks = int64_t(plan->encoded.size());
    } catch (const FormatError &e) {
      return fileError(name, "inconsistent rank program: " + e.message);
    } catch (const json::exception &e) {
      return fileError(name, absl::StrCat("malformed payload: ", e.what()));
    }
    return plan;
  }

  absl::StatusOr<PipelinePlan> pipelinePlan(int64_t rank) override {
    if (rank < 0 || rank >= int64_t(encoded.size()))
      return fileError(name,
                       absl::StrCat("no plan for pipeline rank ", rank,
                                    " (the file has ", encoded.size(), ")"));
    std::string path = element("pipeline", size_t(rank));
    try {
      json j = json::from_cbor(encoded[rank].begin(), encoded[rank].end());
      PipelinePlan plan = readPipeline(j, path);
      if (plan.rank != rank || plan.pp != int64_t(encoded.size()))
        formatError(path, absl::StrCat("plan for pipeline rank ", plan.rank,
                                       " of ", plan.pp, " stored at position ",
                                       rank, " of ", encoded.size()));
      return plan;
    } catch (const FormatError &e) {
      return fileError(name, "inconsistent rank program: " + e.message);
    } catch (const json::exception &e) {
      return fileError(name, absl::StrCat("malformed plan of pipeline rank ",
                                          rank, ": ", e.what()));
    }
  }

private:
  FilePlan() = default;
  std::string name;
  std::vector<std::vector<uint8_t>> encoded;
};

class MemoryPlan final : public CompiledPlan {
public:
  explicit MemoryPlan(RankPrograms programs) {
    stepProgram = std::move(programs.step);
    decodeProgram = std::move(programs.decode);
    sourceName = std::move(programs.source);
    plans = std::move(programs.pipeline);
    ranks = int64_t(plans.size());
  }
  absl::StatusOr<PipelinePlan> pipelinePlan(int64_t rank) override {
    if (rank < 0 || rank >= int64_t(plans.size()))
      return absl::InvalidArgumentError(
          absl::StrCat("no plan for pipeline rank ", rank, " (", sourceName,
                       " has ", plans.size(), ")"));
    return plans[rank];
  }

private:
  std::vector<PipelinePlan> plans;
};

} // namespace

CompiledPlan::~CompiledPlan() = default;

std::unique_ptr<CompiledPlan> inMemoryPlan(RankPrograms programs) {
  return std::make_unique<MemoryPlan>(std::move(programs));
}

absl::StatusOr<std::unique_ptr<CompiledPlan>>
openRankPrograms(std::string_view bytes, const std::string &name) {
  absl::StatusOr<std::unique_ptr<FilePlan>> plan = FilePlan::open(bytes, name);
  if (!plan.ok())
    return plan.status();
  return std::unique_ptr<CompiledPlan>(*std::move(plan));
}

absl::StatusOr<RankPrograms> parseRankPrograms(std::string_view bytes,
                                               const std::string &name) {
  absl::StatusOr<std::unique_ptr<CompiledPlan>> plan =
      openRankPrograms(bytes, name);
  if (!plan.ok())
    return plan.status();
  RankPrograms programs;
  programs.step = std::move((*plan)->step());
  if (Program *decode = (*plan)->decode())
    programs.decode = std::move(*decode);
  programs.source = (*plan)->source();
  if ((*plan)->pipelined())
    for (int64_t r = 0; r < (*plan)->pipelineRanks(); ++r) {
      absl::StatusOr<PipelinePlan> p = (*plan)->pipelinePlan(r);
      if (!p.ok())
        return p.status();
      programs.pipeline.push_back(*std::move(p));
    }
  return programs;
}

namespace {

absl::StatusOr<std::string> readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError("cannot open " + path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad())
    return absl::UnavailableError("cannot read " + path);
  return buffer.str();
}

} // namespace

absl::StatusOr<std::unique_ptr<CompiledPlan>>
openRankProgramFile(const std::string &path) {
  absl::StatusOr<std::string> bytes = readBytes(path);
  if (!bytes.ok())
    return bytes.status();
  return openRankPrograms(*bytes, path);
}

} // namespace merak::runtime

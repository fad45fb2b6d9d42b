//===- Fusion.cpp - chains of elementwise ops as single kernels -----------===//

#include "merak/Runtime/Fusion.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <optional>
#include <set>

namespace merak::runtime {
namespace {

bool fusibleType(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16 ||
         t == DType::Bool;
}
bool floatType(DType t) { return fusibleType(t) && t != DType::Bool; }

const TensorType &typeOf(const Program &p, ValueId v) {
  return p.values[v].type;
}

/// The element-type rule of each fusible op: which operand types it takes.
bool operandTypesFit(const Program &p, const Instruction &inst) {
  DType out = typeOf(p, inst.results[0]).dtype;
  auto all = [&](auto pred) {
    return std::all_of(inst.operands.begin(), inst.operands.end(),
                       [&](ValueId v) { return pred(typeOf(p, v).dtype); });
  };
  switch (inst.kind) {
  case OpKind::Not:
  case OpKind::And:
  case OpKind::Or:
    return out == DType::Bool && all([](DType t) { return t == DType::Bool; });
  case OpKind::Compare:
    return out == DType::Bool &&
           typeOf(p, inst.operands[0]).dtype ==
               typeOf(p, inst.operands[1]).dtype &&
           all(floatType);
  case OpKind::Where:
    return floatType(out) && typeOf(p, inst.operands[0]).dtype == DType::Bool &&
           typeOf(p, inst.operands[1]).dtype == out &&
           typeOf(p, inst.operands[2]).dtype == out;
  case OpKind::Cast:
    return fusibleType(out) && all(fusibleType);
  default: // the arithmetic: every operand of the result's float type
    return floatType(out) && all([&](DType t) { return t == out; });
  }
}

/// The members' result values that the chain computes but something after
/// it reads: the kernel writes them.
bool readOutside(const std::vector<std::vector<int>> &readers,
                 const std::set<int> &members, const std::set<ValueId> &results,
                 ValueId v) {
  if (results.count(v))
    return true;
  for (int r : readers[v])
    if (!members.count(r))
      return true;
  return false;
}

/// Makes `slots` (one per instruction: what stands at its place now, or
/// nothing) the program's instructions. Collectives and their waits name
/// each other by index, so they are renumbered.
void rebuildInstructions(Program &program,
                         std::vector<std::optional<Instruction>> slots) {
  std::vector<Instruction> out;
  std::vector<int> newIndex(slots.size(), -1);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!slots[i])
      continue;
    newIndex[i] = int(out.size());
    out.push_back(std::move(*slots[i]));
  }
  for (Instruction &inst : out) {
    if (inst.waitAt >= 0)
      inst.waitAt = newIndex[inst.waitAt];
    if (inst.completes >= 0)
      inst.completes = newIndex[inst.completes];
  }
  program.instructions = std::move(out);
}

/// Replaces each group of instructions (indices in program order, two or
/// more each) with one `fused` instruction at the place of its last
/// member, reading what its members read from outside it and defining what
/// is read after it; `shapes` are the groups' chain shapes.
void replaceWithFused(Program &program,
                      const std::vector<std::vector<int>> &groups,
                      const std::vector<std::vector<int64_t>> &shapes) {
  if (groups.empty())
    return;
  const int n = int(program.instructions.size());
  const int numValues = int(program.values.size());
  std::vector<std::vector<int>> readers(numValues);
  for (int i = 0; i < n; ++i)
    for (ValueId v : program.instructions[i].operands)
      if (v >= 0 && v < numValues)
        readers[v].push_back(i);
  std::set<ValueId> returned;
  for (const ResultInfo &r : program.results)
    returned.insert(r.value);

  std::vector<int> fusedAt(n, -1); // instruction -> index in fusedInsts
  std::vector<bool> dropped(n, false);
  std::vector<Instruction> fusedInsts;
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::vector<int> &group = groups[g];
    std::set<int> members(group.begin(), group.end());
    FusedKernel kernel;
    kernel.shape = shapes[g];
    Instruction fused;
    fused.kind = OpKind::Fused;
    fused.attrs.index = int64_t(program.fusedKernels.size());
    std::set<ValueId> defined;
    for (int m : group) {
      Instruction member = program.instructions[m];
      for (ValueId v : member.operands)
        if (!defined.count(v) &&
            std::find(fused.operands.begin(), fused.operands.end(), v) ==
                fused.operands.end())
          fused.operands.push_back(v);
      for (ValueId v : member.results) {
        defined.insert(v);
        if (readOutside(readers, members, returned, v))
          fused.results.push_back(v);
        else // lives inside the kernel: no instruction defines it now
          program.values[v].definedBy = -1;
      }
      member.storage.assign(member.results.size(), ResultStorage());
      member.release.clear();
      kernel.members.push_back(std::move(member));
      dropped[m] = true;
    }
    fused.location = program.instructions[group.front()].location;
    fusedAt[group.back()] = int(fusedInsts.size());
    fusedInsts.push_back(std::move(fused));
    program.fusedKernels.push_back(std::move(kernel));
  }

  std::vector<std::optional<Instruction>> slots(n);
  for (int i = 0; i < n; ++i) {
    if (fusedAt[i] >= 0)
      slots[i] = std::move(fusedInsts[fusedAt[i]]);
    else if (!dropped[i])
      slots[i] = std::move(program.instructions[i]);
  }
  rebuildInstructions(program, std::move(slots));
}

} // namespace

bool drawsDropoutMask(const Instruction &inst) {
  return inst.kind == OpKind::DropoutMask ||
         (inst.kind == OpKind::Dropout && inst.attrs.training &&
          inst.attrs.p > 0);
}

bool fusible(const Program &program, const Instruction &inst) {
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
  case OpKind::Add:
  case OpKind::Sub:
  case OpKind::Mul:
  case OpKind::Div:
  case OpKind::Pow:
  case OpKind::Minimum:
  case OpKind::Maximum:
  case OpKind::And:
  case OpKind::Or:
  case OpKind::Compare:
  case OpKind::Where:
  case OpKind::GeluBackward:
    break;
  case OpKind::DropoutMask:
    break;
  case OpKind::Dropout: // outside training, or with p = 0, a view
    if (!drawsDropoutMask(inst))
      return false;
    break;
  case OpKind::Clamp: // without bounds a view of its operand
    if (!inst.attrs.min && !inst.attrs.max)
      return false;
    break;
  case OpKind::Cast: // to its own type a view of its operand
    if (inst.operands.size() == 1 && !inst.results.empty() &&
        typeOf(program, inst.operands[0]).dtype ==
            typeOf(program, inst.results[0]).dtype)
      return false;
    break;
  default:
    return false;
  }
  if (!arityError(inst).empty() || inst.results.size() != 1)
    return false;
  for (ValueId v : inst.operands)
    if (v == kNoValue)
      return false;
  const TensorType &out = typeOf(program, inst.results[0]);
  if (out.shape.size() > 8 || out.numElements() < 1)
    return false;
  for (ValueId v : inst.operands)
    if (typeOf(program, v).shape.size() > out.shape.size())
      return false;
  return operandTypesFit(program, inst);
}

CastFolding castFolding(OpKind kind) {
  CastFolding f;
  switch (kind) {
  case OpKind::CrossEntropy: // logits, target -> loss
    f.operands = 1u << 0;
    f.computeResult = 0;
    break;
  case OpKind::CrossEntropyBackward: // grad, logits, target -> grad logits
    f.operands = 1u << 1;
    f.results = 1u << 0;
    f.computeOperand = 0;
    break;
  case OpKind::LayerNorm: // x, weight, bias -> y
  case OpKind::RmsNorm:   // x, weight -> y
    f.results = 1u << 0;
    f.computeOperand = 0;
    break;
  case OpKind::LayerNormBackward: // grad, x, weight, bias -> dx, dw, db
    f.operands = 1u << 0;
    f.computeOperand = 1;
    break;
  default:
    break;
  }
  return f;
}

namespace {

bool foldableType(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16;
}

/// The element type `inst` computes in (its `castFolding` value's), or
/// nullopt when the op folds no cast or that value is absent.
std::optional<DType> computeTypeOf(const Program &p, const Instruction &inst,
                                   const CastFolding &f) {
  if (f.operands == 0 && f.results == 0)
    return std::nullopt;
  ValueId v = kNoValue;
  if (f.computeOperand >= 0 && size_t(f.computeOperand) < inst.operands.size())
    v = inst.operands[f.computeOperand];
  else if (f.computeResult >= 0 &&
           size_t(f.computeResult) < inst.results.size())
    v = inst.results[f.computeResult];
  if (v < 0 || size_t(v) >= p.values.size())
    return std::nullopt;
  return typeOf(p, v).dtype;
}

} // namespace

std::optional<DType> foldedComputeType(const Program &program,
                                       const Instruction &inst) {
  CastFolding f = castFolding(inst.kind);
  std::optional<DType> compute = computeTypeOf(program, inst, f);
  if (!compute)
    return std::nullopt;
  auto differs = [&](const std::vector<ValueId> &values, uint32_t mask) {
    for (size_t i = 0; i < values.size() && i < 32; ++i)
      if ((mask >> i & 1) && values[i] >= 0 &&
          typeOf(program, values[i]).dtype != *compute)
        return true;
    return false;
  };
  if (differs(inst.operands, f.operands) || differs(inst.results, f.results))
    return compute;
  return std::nullopt;
}

void foldCasts(Program &program) {
  const int n = int(program.instructions.size());
  const int numValues = int(program.values.size());
  auto valid = [&](ValueId v) { return v >= 0 && v < numValues; };
  // Who reads each value: (instruction, operand position).
  std::vector<std::vector<std::pair<int, int>>> readers(numValues);
  std::vector<int> producer(numValues, -1);
  for (int i = 0; i < n; ++i) {
    const Instruction &inst = program.instructions[i];
    for (size_t k = 0; k < inst.operands.size(); ++k)
      if (valid(inst.operands[k]))
        readers[inst.operands[k]].push_back({i, int(k)});
    for (ValueId v : inst.results)
      if (valid(v))
        producer[v] = i;
  }
  std::set<ValueId> returned;
  for (const ResultInfo &r : program.results)
    returned.insert(r.value);
  // Whether `inst` computes in f32 and takes operand `k` in any type.
  auto takesAnyOperand = [&](int i, int k) {
    const Instruction &inst = program.instructions[i];
    CastFolding f = castFolding(inst.kind);
    return k < 32 && (f.operands >> k & 1) && arityError(inst).empty() &&
           computeTypeOf(program, inst, f) == DType::F32;
  };

  std::vector<bool> dropped(n, false);
  for (int i = 0; i < n; ++i) {
    Instruction &cast = program.instructions[i];
    if (cast.kind != OpKind::Cast || cast.operands.size() != 1 ||
        cast.results.size() != 1 || !valid(cast.operands[0]) ||
        !valid(cast.results[0]))
      continue;
    ValueId x = cast.operands[0], c = cast.results[0];
    DType from = typeOf(program, x).dtype, to = typeOf(program, c).dtype;
    if (from == to || !foldableType(from) || !foldableType(to) ||
        typeOf(program, x).shape != typeOf(program, c).shape)
      continue;
    if (to == DType::F32) {
      // Widening: every reader takes the narrow operand itself.
      const auto &rs = readers[c];
      if (returned.count(c) || rs.empty() ||
          !std::all_of(rs.begin(), rs.end(), [&](auto r) {
            return takesAnyOperand(r.first, r.second);
          }))
        continue;
      for (auto [r, k] : rs) {
        program.instructions[r].operands[k] = x;
        readers[x].push_back({r, k});
      }
      readers[c].clear();
      program.values[c].definedBy = -1;
    } else {
      // Narrowing an f32 result that nothing else reads: its producer
      // writes the narrow value. (Not a narrow result narrowed again: the
      // op would round once where the casts rounded twice.)
      int p = producer[x];
      if (from != DType::F32 || p < 0 || returned.count(x) ||
          readers[x].size() != 1)
        continue;
      Instruction &inst = program.instructions[p];
      CastFolding f = castFolding(inst.kind);
      auto at = std::find(inst.results.begin(), inst.results.end(), x);
      size_t j = size_t(at - inst.results.begin());
      if (at == inst.results.end() || j >= 32 || !(f.results >> j & 1) ||
          !arityError(inst).empty() ||
          computeTypeOf(program, inst, f) != DType::F32)
        continue;
      *at = c;
      producer[c] = p;
      producer[x] = -1;
      program.values[x].definedBy = -1;
      readers[x].clear();
    }
    // The cast's operand loses it as a reader.
    auto &rx = readers[x];
    rx.erase(std::remove(rx.begin(), rx.end(), std::pair<int, int>{i, 0}),
             rx.end());
    dropped[i] = true;
  }
  if (std::find(dropped.begin(), dropped.end(), true) == dropped.end())
    return;
  std::vector<std::optional<Instruction>> slots(n);
  for (int i = 0; i < n; ++i)
    if (!dropped[i])
      slots[i] = std::move(program.instructions[i]);
  rebuildInstructions(program, std::move(slots));
}

void fuseElementwise(Program &program) {
  const int n = int(program.instructions.size());
  const int numValues = int(program.values.size());
  std::vector<int> producer(numValues, -1);
  for (int i = 0; i < n; ++i)
    for (ValueId v : program.instructions[i].results)
      if (v >= 0 && v < numValues)
        producer[v] = i;

  // Chains grow in program order. `chainOf` maps an instruction to its
  // chain, whose members, shape, inputs and openness are kept by index;
  // merged chains forward to the one that absorbed them.
  struct Chain {
    std::vector<int> members;
    std::vector<int64_t> shape;
    std::set<ValueId> inputs;
    std::set<ValueId> defined;
    int dropouts = 0; // members that draw a dropout mask
    bool open = true;
    int mergedInto = -1;
  };
  std::vector<Chain> chains;
  std::vector<int> chainOf(n, -1);
  auto root = [&](int c) {
    while (c >= 0 && chains[c].mergedInto >= 0)
      c = chains[c].mergedInto;
    return c;
  };
  auto chainOfValue = [&](ValueId v) {
    int at = v >= 0 && v < numValues ? producer[v] : -1;
    return at >= 0 ? root(chainOf[at]) : -1;
  };

  // The chains holding a member that draws a dropout mask. Masks are drawn
  // in program order (the CPU's generator is sequential, the CUDA
  // backend's counters advance mask by mask), and a chain draws its
  // members' masks where it runs, at its last member: so a chain with a
  // mask is closed where any other mask is drawn before it runs.
  std::set<int> drawing;
  for (int i = 0; i < n; ++i) {
    const Instruction &inst = program.instructions[i];
    const bool draws = drawsDropoutMask(inst);
    std::set<int> joined;
    if (fusible(program, inst)) {
      const std::vector<int64_t> &shape =
          typeOf(program, inst.results[0]).shape;
      std::set<int> candidates;
      for (ValueId v : inst.operands) {
        int c = chainOfValue(v);
        if (c >= 0 && chains[c].open && chains[c].shape == shape)
          candidates.insert(c);
      }
      // What the chain would read and how many results it could define.
      std::set<ValueId> inputs, defined;
      size_t members = 1;
      int dropouts = draws ? 1 : 0;
      for (int c : candidates) {
        inputs.insert(chains[c].inputs.begin(), chains[c].inputs.end());
        defined.insert(chains[c].defined.begin(), chains[c].defined.end());
        members += chains[c].members.size();
        dropouts += chains[c].dropouts;
      }
      for (ValueId v : inst.operands)
        inputs.insert(v);
      for (ValueId v : defined)
        inputs.erase(v);
      // Each member may define an output: inputs and members together
      // bound the kernel's operands; its parameters hold so many masks.
      if (inputs.size() + members > size_t(kMaxFusedOperands) ||
          dropouts > kMaxFusedDropouts) {
        candidates.clear();
        inputs = std::set<ValueId>(inst.operands.begin(), inst.operands.end());
        defined.clear();
        dropouts = draws ? 1 : 0;
      }
      int into;
      if (candidates.empty()) {
        into = int(chains.size());
        chains.push_back(Chain());
        chains[into].shape = shape;
      } else {
        into = *candidates.begin();
        for (int c : candidates) {
          if (c == into)
            continue;
          Chain &other = chains[c];
          chains[into].members.insert(chains[into].members.end(),
                                      other.members.begin(),
                                      other.members.end());
          other.members.clear();
          other.mergedInto = into;
          drawing.erase(c);
        }
      }
      Chain &chain = chains[into];
      chain.members.push_back(i);
      // Members run in program order, the order their masks are drawn in.
      std::sort(chain.members.begin(), chain.members.end());
      defined.insert(inst.results[0]);
      chain.inputs = std::move(inputs);
      chain.defined = std::move(defined);
      chain.dropouts = dropouts;
      if (dropouts > 0)
        drawing.insert(into);
      chainOf[i] = into;
      joined.insert(into);
    }
    if (draws)
      for (int c : drawing)
        if (!joined.count(c))
          chains[c].open = false;
    // A chain whose value something outside it reads is closed: a later
    // member would run after that reader.
    for (ValueId v : inst.operands) {
      int c = chainOfValue(v);
      if (c >= 0 && !joined.count(c))
        chains[c].open = false;
    }
  }

  std::vector<std::vector<int>> groups;
  std::vector<std::vector<int64_t>> shapes;
  for (Chain &chain : chains) {
    if (chain.mergedInto >= 0 || chain.members.size() < 2)
      continue;
    groups.push_back(chain.members);
    shapes.push_back(chain.shape);
  }
  size_t first = program.fusedKernels.size();
  replaceWithFused(program, groups, shapes);
  for (size_t k = first; k < program.fusedKernels.size(); ++k)
    for (const Instruction &inst : program.instructions)
      if (inst.kind == OpKind::Fused && inst.attrs.index == int64_t(k))
        program.fusedKernels[k].source =
            fusedKernelSource(program, inst, int(k));
}

namespace {

/// Whether two optimizer updates share what a multi-tensor kernel takes
/// once: the kind, the hyperparameters, the learning rate and step values.
bool sameUpdateScalars(const Instruction &m, const Instruction &inst) {
  if (m.kind != inst.kind)
    return false;
  const OpAttrs &a = m.attrs, &b = inst.attrs;
  if (inst.kind == OpKind::SgdUpdate)
    return a.momentum == b.momentum && a.dampening == b.dampening &&
           a.nesterov == b.nesterov && a.weightDecay == b.weightDecay &&
           m.operands[3] == inst.operands[3] &&
           m.operands[4] == inst.operands[4];
  return a.beta1 == b.beta1 && a.beta2 == b.beta2 && a.eps == b.eps &&
         a.weightDecay == b.weightDecay && m.operands[4] == inst.operands[4] &&
         m.operands[5] == inst.operands[5];
}

} // namespace

void fuseOptimizerUpdates(Program &program) {
  // Groups by what the kernel shares: the hyperparameters, the learning
  // rate and step values, the element type. A group is open until
  // something outside it reads one of its results.
  struct Group {
    std::vector<int> members;
    bool open = true;
  };
  std::vector<Group> groups;
  std::map<ValueId, int> groupOfResult;
  const int n = int(program.instructions.size());
  for (int i = 0; i < n; ++i) {
    const Instruction &inst = program.instructions[i];
    int joined = -1;
    if ((inst.kind == OpKind::AdamwUpdate || inst.kind == OpKind::SgdUpdate) &&
        arityError(inst).empty() &&
        typeOf(program, inst.operands[0]).dtype == DType::F32) {
      for (int g = int(groups.size()) - 1; g >= 0 && joined < 0; --g)
        if (groups[g].open &&
            sameUpdateScalars(program.instructions[groups[g].members[0]], inst))
          joined = g;
      if (joined < 0) {
        joined = int(groups.size());
        groups.push_back(Group());
      }
      groups[joined].members.push_back(i);
      for (ValueId v : inst.results)
        groupOfResult[v] = joined;
    }
    for (ValueId v : inst.operands)
      if (auto it = groupOfResult.find(v);
          it != groupOfResult.end() && it->second != joined)
        groups[it->second].open = false;
  }
  std::vector<std::vector<int>> members;
  for (Group &g : groups)
    if (g.members.size() >= 2)
      members.push_back(g.members);
  replaceWithFused(program, members,
                   std::vector<std::vector<int64_t>>(members.size()));
}

//===----------------------------------------------------------------------===//
// CUDA source
//===----------------------------------------------------------------------===//

namespace {

/// How a value of `t` is loaded and stored: the C type of its elements,
/// the expression that makes it the computing type from an element `e`,
/// and back.
struct Storage {
  const char *element;
  const char *load; // %s: the element
  const char *store;
};
Storage storageOf(DType t) {
  switch (t) {
  case DType::BF16:
    return {"uint16_t", "bf16BitsToFloat(%s)", "floatToBf16Bits(%s)"};
  case DType::F16:
    return {"uint16_t", "f16BitsToFloat(%s)", "floatToF16Bits(%s)"};
  case DType::Bool:
    return {"uint8_t", "(%s != 0)", "uint8_t(%s)"};
  default:
    return {"float", "%s", "%s"};
  }
}
const char *computeType(DType t) { return t == DType::Bool ? "bool" : "float"; }

/// `expr` rounded to the element type of a result of `t`.
std::string rounded(DType t, const std::string &expr) {
  switch (t) {
  case DType::BF16:
    return absl::StrCat("roundToBf16(", expr, ")");
  case DType::F16:
    return absl::StrCat("roundToF16(", expr, ")");
  default:
    return expr;
  }
}

/// A float constant, exactly: its bits, its value in a comment.
std::string floatConstant(double v) {
  float f = float(v);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return absl::StrFormat("floatFromBits(0x%08xu) /* %g */", bits, double(f));
}

const char *comparison(ComparePredicate p) {
  switch (p) {
  case ComparePredicate::Eq:
    return "==";
  case ComparePredicate::Ne:
    return "!=";
  case ComparePredicate::Lt:
    return "<";
  case ComparePredicate::Le:
    return "<=";
  case ComparePredicate::Gt:
    return ">";
  case ComparePredicate::Ge:
    return ">=";
  }
  return "==";
}

/// What `inst` computes from its operands' names, before rounding: the
/// expression the unfused kernel (Elementwise.cu) evaluates in float.
std::string expression(const Program &p, const Instruction &inst,
                       const std::vector<std::string> &x, int dropout) {
  const OpAttrs &a = inst.attrs;
  // Calls of one operand and of two, and infix operators.
  static const std::map<OpKind, const char *> unaryCalls = {
      {OpKind::Abs, "mathAbs"},       {OpKind::Exp, "mathExp"},
      {OpKind::Log, "mathLog"},       {OpKind::Sin, "mathSin"},
      {OpKind::Cos, "mathCos"},       {OpKind::Sqrt, "mathSqrt"},
      {OpKind::Erf, "mathErf"},       {OpKind::Tanh, "mathTanh"},
      {OpKind::Sigmoid, "sigmoidOf"}, {OpKind::Silu, "siluOf"},
      {OpKind::Relu, "reluOf"}};
  static const std::map<OpKind, const char *> binaryCalls = {
      {OpKind::Minimum, "minimumOf"}, {OpKind::Maximum, "maximumOf"}};
  static const std::map<OpKind, const char *> infix = {
      {OpKind::Add, " + "}, {OpKind::Sub, " - "},  {OpKind::Mul, " * "},
      {OpKind::Div, " / "}, {OpKind::And, " && "}, {OpKind::Or, " || "}};
  if (auto it = unaryCalls.find(inst.kind); it != unaryCalls.end())
    return absl::StrCat(it->second, "(", x[0], ")");
  if (auto it = binaryCalls.find(inst.kind); it != binaryCalls.end())
    return absl::StrCat(it->second, "(", x[0], ", ", x[1], ")");
  if (auto it = infix.find(inst.kind); it != infix.end())
    return absl::StrCat(x[0], it->second, x[1]);
  switch (inst.kind) {
  case OpKind::DropoutMask: // the mask alone: its operand gives its shape
    return absl::StrCat("fusedDropoutLane(p, ", dropout, ", r", dropout,
                        ", lane)");
  case OpKind::Dropout:
    return absl::StrCat(x[0], " * fusedDropoutLane(p, ", dropout, ", r",
                        dropout, ", lane)");
  case OpKind::Neg:
    return absl::StrCat("-", x[0]);
  case OpKind::Rsqrt:
    return absl::StrCat("1.0f / mathSqrt(", x[0], ")");
  case OpKind::Reciprocal:
    return absl::StrCat("1.0f / ", x[0]);
  case OpKind::Not:
    return absl::StrCat("!", x[0]);
  case OpKind::Gelu:
    return absl::StrCat(a.tanhApproximation ? "geluTanhOf(" : "geluOf(", x[0],
                        ")");
  case OpKind::GeluBackward:
    return absl::StrCat(a.tanhApproximation ? "geluTanhBackwardOf("
                                            : "geluBackwardOf(",
                        x[0], ", ", x[1], ")");
  case OpKind::Pow: {
    // A rank-0 exponent of a tensor came from a Python number:
    // pow(Tensor, Scalar) and its shortcuts (Elementwise.cpp's rule).
    bool scalarExponent = typeOf(p, inst.operands[1]).shape.empty() &&
                          !typeOf(p, inst.operands[0]).shape.empty();
    return absl::StrCat(scalarExponent ? "powScalarFloat(" : "mathPow(", x[0],
                        ", ", x[1], ")");
  }
  case OpKind::Compare:
    return absl::StrCat(x[0], " ", comparison(a.predicate), " ", x[1]);
  case OpKind::Where:
    return absl::StrCat(x[0], " ? ", x[1], " : ", x[2]);
  case OpKind::Clamp: {
    // NaN stays NaN: neither comparison holds for it.
    std::string v = x[0];
    if (a.min) {
      std::string lo = floatConstant(*a.min);
      v = absl::StrCat("(", v, " < ", lo, " ? ", lo, " : ", v, ")");
    }
    if (a.max) {
      std::string hi = floatConstant(*a.max);
      v = absl::StrCat("(", hi, " < ", v, " ? ", hi, " : ", v, ")");
    }
    return v;
  }
  case OpKind::Cast: {
    DType from = typeOf(p, inst.operands[0]).dtype;
    DType to = typeOf(p, inst.results[0]).dtype;
    if (to == DType::Bool)
      return from == DType::Bool ? x[0] : absl::StrCat(x[0], " != 0.0f");
    if (from == DType::Bool)
      return absl::StrCat(x[0], " ? 1.0f : 0.0f");
    return x[0];
  }
  default:
    return "/* not fusible */";
  }
}

} // namespace

bool isOptimizerGroup(const Program &program, int index) {
  const FusedKernel &k = program.fusedKernels[index];
  return !k.members.empty() && (k.members[0].kind == OpKind::AdamwUpdate ||
                                k.members[0].kind == OpKind::SgdUpdate);
}

std::string describeFusedKernel(const Program &program, int index) {
  if (isOptimizerGroup(program, index))
    return absl::StrCat(
        program.fusedKernels[index].members.size(), " x ",
        opKindName(program.fusedKernels[index].members[0].kind));
  std::vector<std::string> names;
  for (const Instruction &m : program.fusedKernels[index].members)
    names.push_back(opKindName(m.kind));
  return absl::StrJoin(names, ", ");
}

std::string listFusedKernels(const Program &program) {
  // Sources in order of first use, with the instructions running each.
  std::vector<std::string> sources;
  std::map<std::string, std::vector<std::string>> users;
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction &inst = program.instructions[i];
    if (inst.kind != OpKind::Fused)
      continue;
    const std::string &source = program.fusedKernels[inst.attrs.index].source;
    if (source.empty()) // an optimizer group: no generated source
      continue;
    auto [it, inserted] = users.try_emplace(source);
    if (inserted)
      sources.push_back(source);
    it->second.push_back(absl::StrCat("#", i));
  }
  std::string text =
      absl::StrCat("// @", program.function, ": ", sources.size(),
                   " fused kernel", sources.size() == 1 ? "" : "s", "\n");
  for (const std::string &source : sources)
    absl::StrAppend(&text, "// run by ", absl::StrJoin(users[source], ", "),
                    "\n", source);
  return text;
}

std::string fusedKernelSource(const Program &program, const Instruction &fused,
                              int index) {
  const FusedKernel &kernel = program.fusedKernels[index];
  const std::vector<ValueId> &inputs = fused.operands;
  const std::vector<ValueId> &outputs = fused.results;
  const size_t numInputs = inputs.size();
  int masks = 0;
  for (const Instruction &m : kernel.members)
    masks += drawsDropoutMask(m) ? 1 : 0;

  // The body for element `i`: its inputs' offsets, loads, the members,
  // the stores; indented by `in`.
  const std::string in = masks > 0 ? "      " : "    ";
  std::string body;
  absl::StrAppend(&body, in, "int64_t o[", numInputs, "];\n", in,
                  "if (p.dense)\n", in, "  for (int k = 0; k < ", numInputs,
                  "; ++k)\n", in, "    o[k] = i;\n", in,
                  "else if (p.n <= 0xffffffff)\n", in,
                  "  fusedOffsets32(p, uint32_t(i), ", numInputs, ", o);\n", in,
                  "else\n", in, "  fusedOffsets(p, i, ", numInputs, ", o);\n");
  // Names: inputs x0.., member results v0.. (in program order).
  std::map<ValueId, std::string> name;
  for (size_t k = 0; k < numInputs; ++k) {
    DType t = typeOf(program, inputs[k]).dtype;
    Storage st = storageOf(t);
    std::string element = absl::StrCat("static_cast<const ", st.element,
                                       " *>(p.data[", k, "])[o[", k, "]]");
    std::string x = absl::StrCat("x", k);
    absl::StrAppend(&body, in, "const ", computeType(t), " ", x, " = ",
                    absl::StrReplaceAll(st.load, {{"%s", element}}), "; // ",
                    typeOf(program, inputs[k]).str(), "\n");
    name[inputs[k]] = x;
  }
  int next = 0, dropouts = 0;
  for (const Instruction &m : kernel.members) {
    std::vector<std::string> x;
    for (ValueId v : m.operands)
      x.push_back(name.count(v) ? name[v] : "/* missing */");
    DType t = typeOf(program, m.results[0]).dtype;
    std::string v = absl::StrCat("v", next++);
    int dropout = drawsDropoutMask(m) ? dropouts++ : -1;
    absl::StrAppend(&body, in, "const ", computeType(t), " ", v, " = ",
                    rounded(t, expression(program, m, x, dropout)), "; // ",
                    opKindName(m.kind), "\n");
    name[m.results[0]] = v;
  }
  for (size_t r = 0; r < outputs.size(); ++r) {
    DType t = typeOf(program, outputs[r]).dtype;
    Storage st = storageOf(t);
    absl::StrAppend(
        &body, in, "static_cast<", st.element, " *>(p.data[", numInputs + r,
        "])[i] = ", absl::StrReplaceAll(st.store, {{"%s", name[outputs[r]]}}),
        ";\n");
  }

  std::string s;
  absl::StrAppend(&s, "// ", describeFusedKernel(program, index), "\n",
                  "#include \"DeviceMath.h\"\n",
                  "using namespace merak::runtime::cuda;\n",
                  "extern \"C\" __global__ void __launch_bounds__(256)\n",
                  "merak_fused(const FusedParams p) {\n");
  if (masks == 0) {
    absl::StrAppend(&s,
                    "  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + "
                    "threadIdx.x; i < p.n;\n",
                    "       i += int64_t(gridDim.x) * blockDim.x) {\n", body,
                    "  }\n}\n");
    return s;
  }
  // With dropout masks: a thread takes four consecutive elements, which
  // one Philox block of each mask serves (`fusedDropoutWords`).
  absl::StrAppend(&s, "  const int64_t groups = (p.n + 3) / 4;\n",
                  "  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + "
                  "threadIdx.x; g < groups;\n",
                  "       g += int64_t(gridDim.x) * blockDim.x) {\n");
  for (int k = 0; k < masks; ++k)
    absl::StrAppend(&s, "    const Philox4 r", k, " = fusedDropoutWords(p, ", k,
                    ", g);\n");
  absl::StrAppend(&s,
                  "    for (int lane = 0; lane < 4 && g * 4 + lane < p.n; "
                  "++lane) {\n",
                  "      const int64_t i = g * 4 + lane;\n", body,
                  "    }\n  }\n}\n");
  return s;
}

} // namespace merak::runtime

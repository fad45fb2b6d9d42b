//===- MerakAttrVerifier.cpp - the merak.* attributes' contract -----------===//
//
// The training step's contract lives in discardable `merak.*` attributes:
// the role of each argument (parameter, buffer, input, optimizer state,
// learning rate, step), what each result is (loss, gradient, updated
// argument, buffer update), forward op ids, pipeline stages, stage
// functions' ranks and phases, the partition and the schedule. Every pass,
// the rank-program lowering and the runtime read them, so the dialect
// checks each where it is attached: its name is known, it sits where it
// belongs (argument, result, op, function, module), and its value has the
// right kind and range. A misspelt or misplaced attribute in hand-written
// or generated IR is an error at parse or verify time naming it, not a
// silently ignored hint. The schedule's own consistency (tasks, ranks) is
// `--merak-pipeline-verify`'s.
//
//===----------------------------------------------------------------------===//

#include "merak/Analysis/PipelineAttrNames.h"
#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakDialect.h"

#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace merak;

namespace {

/// Where an attribute may be attached.
enum Place : unsigned {
  OnArgument = 1,
  OnResult = 2,
  OnOp = 4,       // an op in a function body
  OnFunction = 8, // a func.func
  OnModule = 16,  // the builtin.module
  OnMeshOp = 32,  // a mesh.mesh
};

enum class Holds {
  Name,       // non-empty string: a parameter's, buffer's, input's name
  Unit,       // a flag
  Index,      // non-negative integer
  IndexArray, // array<i64> of non-negative integers
  Dictionary, // a dictionary (checked further by its reader)
  String,     // any string
  Sharding,   // #mesh.shard
  Phase,      // one of kPhaseNames
  AxisNames,  // array of strings, one per mesh axis
};

struct Rule {
  llvm::StringLiteral name;
  unsigned places;
  Holds value;
};

/// Every `merak.*` attribute, where it goes, and what it holds.
constexpr Rule kRules[] = {
    // Roles of @forward's and @train_step's arguments.
    {kParamAttr, OnArgument, Holds::Name},
    {kBufferAttr, OnArgument, Holds::Name},
    {kInputAttr, OnArgument, Holds::Name},
    {kOptStateAttr, OnArgument, Holds::Name},
    {kLrAttr, OnArgument, Holds::Unit},
    {kStepAttr, OnArgument, Holds::Unit},
    {kLossScaleAttr, OnArgument | OnFunction, Holds::Dictionary},
    {kFrozenAttr, OnArgument, Holds::Unit},
    {kInitAttr, OnArgument, Holds::Name},
    {kStoredShapeAttr, OnArgument | OnResult, Holds::IndexArray},
    {kPositionAttr, OnArgument, Holds::Unit},
    {kKvCacheAttr, OnArgument | OnResult, Holds::Name},
    // Results.
    {kBufferUpdateAttr, OnResult, Holds::Name},
    {kLossAttr, OnResult, Holds::Unit},
    {kGradAttr, OnArgument | OnResult, Holds::Name},
    {kUpdateArgAttr, OnArgument | OnResult, Holds::Index},
    {kGradNormAttr, OnResult, Holds::Unit},
    {kNonFiniteGradsAttr, OnResult, Holds::Unit},
    // Functions and the module.
    {kOptimizerAttr, OnFunction, Holds::Dictionary},
    {kTrainOptionsAttr, OnModule, Holds::String},
    {kAutoPlanAttr, OnModule, Holds::String},
    // Ops.
    {kIdAttr, OnOp, Holds::Index},
    {kGradOfAttr, OnOp, Holds::Index},
    {kMicrobatchAttr, OnOp, Holds::Index},
    {kShardingAttr, OnArgument | OnResult, Holds::Sharding},
    {kMeshAxesAttr, OnMeshOp, Holds::AxisNames},
    {kAllReduceAlgorithmAttr, OnMeshOp, Holds::String},
    {kAllReduceAlgorithmReasonAttr, OnMeshOp, Holds::String},
    // Pipelines.
    {kStageAttr, OnOp | OnFunction, Holds::Index},
    {kRecomputeOfAttr, OnOp, Holds::Index},
    {kTiedSumAttr, OnOp, Holds::Unit},
    {kTiedAttr, OnArgument | OnOp, Holds::IndexArray},
    {kPipelineAttr, OnModule, Holds::Dictionary},
    {kPipelineScheduleAttr, OnModule, Holds::Dictionary},
    {kRankAttr, OnFunction, Holds::Index},
    {kPhaseAttr, OnFunction, Holds::Phase},
    {kValueAttr, OnArgument | OnResult, Holds::Index},
};

/// The argument roles; an argument has at most one.
constexpr llvm::StringLiteral kRoles[] = {
    kParamAttr, kBufferAttr,    kInputAttr,    kOptStateAttr, kLrAttr,
    kStepAttr,  kLossScaleAttr, kPositionAttr, kKvCacheAttr};

const Rule *findRule(StringRef name) {
  for (const Rule &rule : kRules)
    if (rule.name == name)
      return &rule;
  return nullptr;
}

std::string knownNames(unsigned place) {
  SmallVector<StringRef> names;
  for (const Rule &rule : kRules)
    if (rule.places & place)
      names.push_back(rule.name);
  return llvm::join(names, ", ");
}

StringRef placeName(unsigned place) {
  switch (place) {
  case OnArgument:
    return "a function argument";
  case OnResult:
    return "a function result";
  case OnFunction:
    return "a function";
  case OnModule:
    return "the module";
  case OnMeshOp:
    return "a mesh";
  default:
    return "an op";
  }
}

StringRef expected(Holds value) {
  switch (value) {
  case Holds::Name:
    return "a non-empty string";
  case Holds::Unit:
    return "a unit attribute";
  case Holds::Index:
    return "a non-negative integer";
  case Holds::IndexArray:
    return "an array<i64> of non-negative integers";
  case Holds::Dictionary:
    return "a dictionary";
  case Holds::String:
    return "a string";
  case Holds::Sharding:
    return "a #mesh.shard";
  case Holds::Phase:
    return "one of forward, forward_keep, recompute, backward_input, "
           "backward_weight, optimizer";
  case Holds::AxisNames:
    return "an array of distinct axis names, one per mesh axis";
  }
  return "";
}

bool holds(Operation *op, Holds value, Attribute attr) {
  switch (value) {
  case Holds::Name: {
    auto s = dyn_cast<StringAttr>(attr);
    return s && !s.getValue().empty();
  }
  case Holds::Unit:
    return isa<UnitAttr>(attr);
  case Holds::Index: {
    auto i = dyn_cast<IntegerAttr>(attr);
    return i && i.getType().isSignlessInteger(64) && i.getInt() >= 0;
  }
  case Holds::IndexArray: {
    auto a = dyn_cast<DenseI64ArrayAttr>(attr);
    return a && llvm::all_of(a.asArrayRef(), [](int64_t v) { return v >= 0; });
  }
  case Holds::Dictionary:
    return isa<DictionaryAttr>(attr);
  case Holds::String:
    return isa<StringAttr>(attr);
  case Holds::Sharding:
    return isa<mesh::MeshShardingAttr>(attr);
  case Holds::Phase: {
    auto s = dyn_cast<StringAttr>(attr);
    return s && llvm::is_contained(kPhaseNames, s.getValue());
  }
  case Holds::AxisNames: {
    auto names = dyn_cast<ArrayAttr>(attr);
    auto meshOp = dyn_cast<mesh::MeshOp>(op);
    if (!names || !meshOp || int64_t(names.size()) != meshOp.getRank())
      return false;
    llvm::StringSet<> seen;
    for (Attribute a : names) {
      auto s = dyn_cast<StringAttr>(a);
      if (!s || s.getValue().empty() || !seen.insert(s.getValue()).second)
        return false;
    }
    return true;
  }
  }
  return false;
}

/// Checks `attr` attached at `place` (`what` says where, for the message).
LogicalResult check(Operation *op, NamedAttribute attr, unsigned place,
                    const Twine &what) {
  StringRef name = attr.getName().getValue();
  const Rule *rule = findRule(name);
  if (!rule)
    return op->emitOpError()
           << "has unknown attribute '" << name << "' on " << what
           << " (known there: " << knownNames(place) << ")";
  if (!(rule->places & place)) {
    SmallVector<StringRef> where;
    for (unsigned p :
         {OnArgument, OnResult, OnOp, OnFunction, OnModule, OnMeshOp})
      if (rule->places & p)
        where.push_back(placeName(p));
    return op->emitOpError() << "has '" << name << "' on " << what
                             << "; it belongs on " << llvm::join(where, " or ");
  }
  if (!holds(op, rule->value, attr.getValue()))
    return op->emitOpError()
           << "has '" << name << "' = " << attr.getValue() << " on " << what
           << "; expected " << expected(rule->value);
  return success();
}

/// An argument has one role.
LogicalResult checkOneRole(Operation *op, unsigned argIndex,
                           NamedAttribute attr) {
  auto function = dyn_cast<FunctionOpInterface>(op);
  if (!function || !llvm::is_contained(kRoles, attr.getName().getValue()))
    return success();
  for (StringRef other : kRoles)
    if (other != attr.getName().getValue() &&
        function.getArgAttr(argIndex, other))
      return op->emitOpError() << "argument " << argIndex << " has both '"
                               << attr.getName().getValue() << "' and '"
                               << other << "'; an argument has one role";
  return success();
}

} // namespace

LogicalResult MerakDialect::verifyOperationAttribute(Operation *op,
                                                     NamedAttribute attr) {
  unsigned place = isa<ModuleOp>(op)              ? OnModule
                   : isa<FunctionOpInterface>(op) ? OnFunction
                   : isa<mesh::MeshOp>(op)        ? OnMeshOp
                                                  : OnOp;
  return check(op, attr, place, placeName(place));
}

LogicalResult MerakDialect::verifyRegionArgAttribute(Operation *op,
                                                     unsigned /*region*/,
                                                     unsigned argIndex,
                                                     NamedAttribute attr) {
  if (failed(check(op, attr, OnArgument, "argument " + Twine(argIndex))))
    return failure();
  return checkOneRole(op, argIndex, attr);
}

LogicalResult MerakDialect::verifyRegionResultAttribute(Operation *op,
                                                        unsigned /*region*/,
                                                        unsigned resultIndex,
                                                        NamedAttribute attr) {
  return check(op, attr, OnResult, "result " + Twine(resultIndex));
}

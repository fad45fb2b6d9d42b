//===- ProgramLowering.cpp - merak dialect function to rank program -------===//
//
// Numbers the function's values, decodes each op's attributes into
// `OpAttrs` with the ops' typed accessors, reads the training signature
// (argument roles, the loss, state updates) and plans the program.
//
//===----------------------------------------------------------------------===//

#include "merak/Analysis/PipelineAttrNames.h"
#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Runtime/Mesh.h"
#include "merak/Target/RankProgram/RankProgramLowering.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cstring>

using namespace mlir;

namespace merak::runtime {

namespace {

FailureOr<DType> toDType(Type type) {
  if (type.isF16())
    return DType::F16;
  if (type.isBF16())
    return DType::BF16;
  if (type.isF32())
    return DType::F32;
  if (type.isF64())
    return DType::F64;
  if (type.isSignlessInteger(1))
    return DType::Bool;
  if (type.isSignlessInteger(32))
    return DType::I32;
  if (type.isSignlessInteger(64))
    return DType::I64;
  return failure();
}

} // namespace

/// The element type and shape of a static ranked tensor.
FailureOr<TensorType> toTensorType(Type type) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  if (!ranked || !ranked.hasStaticShape())
    return failure();
  FailureOr<DType> dtype = toDType(ranked.getElementType());
  if (failed(dtype))
    return failure();
  return TensorType{*dtype, std::vector<int64_t>(ranked.getShape().begin(),
                                                 ranked.getShape().end())};
}

namespace {

/// `file:line:col` of the first file location inside `loc`.
std::string locationString(Location loc) {
  std::string result;
  loc->walk([&](Location inner) {
    if (auto file = dyn_cast<FileLineColLoc>(inner)) {
      result = (file.getFilename().getValue() + ":" + Twine(file.getLine()) +
                ":" + Twine(file.getColumn()))
                   .str();
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return result;
}

FailureOr<HostTensor> toHostTensor(Attribute value, const TensorType &type) {
  auto dense = dyn_cast<DenseElementsAttr>(value);
  if (!dense)
    return failure();
  HostTensor host = HostTensor::allocate(type);
  int64_t n = type.numElements();
  if (type.dtype == DType::Bool) {
    // i1 raw data is bit-packed; the runtime stores one byte per element.
    int64_t i = 0;
    for (bool b : dense.getValues<bool>())
      host.mutableBytes()[i++] = b;
    return host;
  }
  ArrayRef<char> raw = dense.getRawData();
  size_t width = dtypeSize(type.dtype);
  if (dense.isSplat()) {
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(host.mutableBytes() + i * width, raw.data(), width);
  } else {
    if (raw.size() != size_t(n) * width)
      return failure();
    std::memcpy(host.mutableBytes(), raw.data(), raw.size());
  }
  return host;
}

std::vector<int64_t> vec(ArrayRef<int64_t> values) {
  return std::vector<int64_t>(values.begin(), values.end());
}

double f64(const llvm::APFloat &value) { return value.convertToDouble(); }

LossReduction reduction(merak::LossReduction r) {
  switch (r) {
  case merak::LossReduction::none:
    return LossReduction::None;
  case merak::LossReduction::sum:
    return LossReduction::Sum;
  case merak::LossReduction::mean:
    break;
  }
  return LossReduction::Mean;
}

ComparePredicate predicate(merak::ComparePredicate p) {
  switch (p) {
  case merak::ComparePredicate::eq:
    return ComparePredicate::Eq;
  case merak::ComparePredicate::ne:
    return ComparePredicate::Ne;
  case merak::ComparePredicate::lt:
    return ComparePredicate::Lt;
  case merak::ComparePredicate::le:
    return ComparePredicate::Le;
  case merak::ComparePredicate::gt:
    return ComparePredicate::Gt;
  case merak::ComparePredicate::ge:
    return ComparePredicate::Ge;
  }
  return ComparePredicate::Eq;
}

// `decodeAttr(field, value)`: an ODS attribute's value into its `OpAttrs`
// field. Only exact pairs are declared; any other pair is a compile error in
// the generated decoder (a new attribute kind needs its overload here).
template <typename F, typename V> void decodeAttr(F &, const V &) = delete;
void decodeAttr(int64_t &field, uint64_t value) { field = int64_t(value); }
void decodeAttr(double &field, const llvm::APFloat &value) {
  field = f64(value);
}
void decodeAttr(bool &field, bool value) { field = value; }
void decodeAttr(std::vector<int64_t> &field, ArrayRef<int64_t> value) {
  field = vec(value);
}
void decodeAttr(bool &tanh, merak::GeluApproximation value) {
  tanh = value == merak::GeluApproximation::tanh;
}
void decodeAttr(ComparePredicate &field, merak::ComparePredicate value) {
  field = predicate(value);
}
void decodeAttr(LossReduction &field, merak::LossReduction value) {
  field = reduction(value);
}
template <typename F, typename V>
void decodeAttr(std::optional<F> &field, const std::optional<V> &value) {
  if (!value)
    return;
  F decoded{};
  decodeAttr(decoded, *value);
  field = decoded;
}

CollectiveReduction collectiveReduction(mesh::ReductionKind r, bool &ok) {
  switch (r) {
  case mesh::ReductionKind::Sum:
    return CollectiveReduction::Sum;
  case mesh::ReductionKind::Max:
    return CollectiveReduction::Max;
  case mesh::ReductionKind::Min:
    return CollectiveReduction::Min;
  case mesh::ReductionKind::Product:
    return CollectiveReduction::Product;
  case mesh::ReductionKind::Average:
    return CollectiveReduction::Average;
  default:
    ok = false;
    return CollectiveReduction::Sum;
  }
}

template <typename Op> void collectiveAttrs(Op op, OpAttrs &a) {
  for (mesh::MeshAxis axis : op.getMeshAxes())
    a.meshAxes.push_back(axis);
}

/// Decodes `op` into `inst` (kind, attributes, operands in ODS order with
/// absent optionals as kNoValue). Fails for ops without a kernel.
class Decoder {
public:
  explicit Decoder(llvm::function_ref<ValueId(Value)> id) : id(id) {}

  LogicalResult decode(Operation *op, Instruction &inst) {
    bool known = true;
    OpAttrs &a = inst.attrs;
    auto kind = [&](OpKind k) { inst.kind = k; };
    // Most ops take their operands as they are.
    auto plain = [&]() {
      for (Value v : op->getOperands())
        inst.operands.push_back(id(v));
    };
    // The merak ops: cases generated from MerakOps.td (each attribute to its
    // `OpAttrs` field, operands in ODS order).
    auto operand = [&](Value v) { inst.operands.push_back(id(v)); };
    auto optionalOperand = [&](Value v) {
      inst.operands.push_back(v ? id(v) : kNoValue);
    };
    auto attr = [](auto &field, const auto &value) {
      decodeAttr(field, value);
    };
    llvm::TypeSwitch<Operation *>(op)
#define GET_MERAK_OP_DECODERS
#include "merak/Dialect/Merak/IR/MerakOpFacts.inc"
        // The mesh dialect's collectives.
        .Case([&](mesh::AllReduceOp o) {
          kind(OpKind::AllReduce), plain(), collectiveAttrs(o, a);
          a.collectiveReduction = collectiveReduction(o.getReduction(), known);
        })
        .Case([&](mesh::AllGatherOp o) {
          kind(OpKind::AllGather), plain(), collectiveAttrs(o, a);
          a.dim = o.getGatherAxis().getSExtValue();
        })
        .Case([&](mesh::ReduceScatterOp o) {
          kind(OpKind::ReduceScatter), plain(), collectiveAttrs(o, a);
          a.collectiveReduction = collectiveReduction(o.getReduction(), known);
          a.dim = o.getScatterAxis().getSExtValue();
        })
        .Case([&](mesh::AllToAllOp o) {
          kind(OpKind::AllToAll), plain(), collectiveAttrs(o, a);
          a.dim = o.getSplitAxis().getSExtValue();
          a.concatDim = o.getConcatAxis().getSExtValue();
        })
        .Case([&](mesh::AllSliceOp o) {
          kind(OpKind::AllSlice), plain(), collectiveAttrs(o, a);
          a.dim = o.getSliceAxis().getSExtValue();
        })
        .Case([&](mesh::BroadcastOp o) {
          // A root given by SSA values is not static; it has no kernel.
          if (!o.getRootDynamic().empty()) {
            known = false;
            return;
          }
          kind(OpKind::Broadcast);
          inst.operands.push_back(id(o.getInput()));
          collectiveAttrs(o, a);
          a.root = vec(o.getRoot());
        })
        .Default([&](Operation *) { known = false; });
    return success(known);
  }

private:
  llvm::function_ref<ValueId(Value)> id;
};

/// Reads the role attributes of argument `i`.
LogicalResult readArgument(func::FuncOp func, unsigned i, Argument &arg) {
  auto stringAttr = [&](StringRef name) {
    return func.getArgAttrOfType<StringAttr>(i, name);
  };
  int roles = 0;
  if (auto s = stringAttr(kParamAttr)) {
    arg.role = ArgumentRole::Param, arg.name = s.str(), ++roles;
  }
  if (auto init = stringAttr(kInitAttr)) {
    if (init.getValue() != "zeros" && init.getValue() != "kaiming_uniform")
      return func.emitError()
             << "argument #" << i << ": merak.init is \"" << init.getValue()
             << "\", not \"zeros\" or \"kaiming_uniform\"";
    arg.init = init.str();
  }
  if (auto s = stringAttr(kBufferAttr)) {
    arg.role = ArgumentRole::Buffer, arg.name = s.str(), ++roles;
  }
  if (auto s = stringAttr(kOptStateAttr)) {
    arg.role = ArgumentRole::OptState, arg.name = s.str(), ++roles;
  }
  if (auto s = stringAttr(kInputAttr)) {
    arg.role = ArgumentRole::Input, arg.name = s.str(), ++roles;
  }
  if (Attribute lr = func.getArgAttr(i, kLrAttr)) {
    arg.role = ArgumentRole::LearningRate, arg.name = "lr", ++roles;
    if (auto value = dyn_cast<FloatAttr>(lr))
      arg.defaultLearningRate = value.getValueAsDouble();
  }
  if (func.getArgAttr(i, kStepAttr)) {
    arg.role = ArgumentRole::Step, arg.name = "step", ++roles;
  }
  if (auto scaling = func.getArgAttrOfType<DictionaryAttr>(i, kLossScaleAttr)) {
    arg.role = ArgumentRole::LossScale, arg.name = "loss_scale", ++roles;
    auto dynamic = scaling.getAs<BoolAttr>("dynamic");
    auto init = scaling.getAs<FloatAttr>("init");
    auto window = scaling.getAs<IntegerAttr>("window");
    if (!dynamic || !init || !window || !(init.getValueAsDouble() > 0) ||
        window.getInt() < 1)
      return func.emitError()
             << "argument #" << i
             << ": merak.loss_scale must be {dynamic = <bool>, init = <float "
                "above 0>, window = <integer of at least 1>}, not "
             << scaling;
    arg.lossScaling = {dynamic.getValue(), init.getValueAsDouble(),
                       window.getInt()};
  }
  if (func.getArgAttr(i, kPositionAttr)) {
    arg.role = ArgumentRole::Position, arg.name = "position", ++roles;
  }
  if (auto s = stringAttr(kKvCacheAttr)) {
    arg.role = ArgumentRole::KvCache, arg.name = s.str(), ++roles;
  }
  if (auto n = func.getArgAttrOfType<IntegerAttr>(i, kValueAttr)) {
    arg.role = ArgumentRole::Value, arg.pipelineValue = n.getInt();
    arg.name = "value " + std::to_string(n.getInt()), ++roles;
  }
  if (auto s = stringAttr(kGradAttr)) {
    arg.role = ArgumentRole::Grad, arg.name = s.str(), ++roles;
  }
  if (roles == 1)
    return success();
  return func.emitError() << "argument #" << i
                          << (roles == 0 ? " has none" : " has more than one")
                          << " of the attributes merak.param, merak.buffer, "
                             "merak.opt_state, merak.input, merak.lr, "
                             "merak.step, merak.loss_scale (in a "
                             "pipeline stage function, "
                             "merak.value, merak.grad; in a generation "
                             "step, merak.position, merak.kv_cache)";
}

/// Checks a collective against the mesh: it names the module's mesh, its
/// axes exist, and its shapes fit its group's size.
LogicalResult checkCollective(Operation *op, const Instruction &inst,
                              const Program &program) {
  auto meshName = op->getAttrOfType<FlatSymbolRefAttr>("mesh");
  if (!program.mesh || !meshName || meshName.getValue() != program.mesh->name)
    return op->emitError() << "merak-exec runs collectives on the module's "
                              "one mesh.mesh, which this op does not name";
  const OpAttrs &a = inst.attrs;
  const std::vector<int64_t> &shape = program.mesh->shape;
  std::vector<bool> seen(shape.size(), false);
  for (int64_t axis : a.meshAxes) {
    if (axis < 0 || size_t(axis) >= shape.size() || seen[axis])
      return op->emitError()
             << "mesh axis " << axis << " is not a distinct axis of @"
             << program.mesh->name;
    seen[axis] = true;
  }
  int64_t n = groupSize(shape, a.meshAxes);
  const TensorType &in = program.values[inst.operands[0]].type;
  const TensorType &out = program.values[inst.results[0]].type;
  auto axisOk = [&](int64_t d) {
    return d >= 0 && size_t(d) < in.shape.size();
  };
  auto expect = [&](bool good) -> LogicalResult {
    if (good)
      return success();
    return op->emitError() << "shapes do not fit a group of " << n
                           << " processes: " << in.str() << " -> " << out.str();
  };
  switch (inst.kind) {
  case OpKind::AllReduce:
    if (in.dtype != out.dtype)
      return op->emitError() << "merak-exec reduces in the operand's element "
                                "type; convert with merak.cast first";
    return expect(in.shape == out.shape);
  case OpKind::Broadcast:
    if (a.root.size() != a.meshAxes.size())
      return op->emitError() << "the root must have one coordinate per mesh "
                                "axis";
    for (size_t k = 0; k < a.root.size(); ++k)
      if (a.root[k] < 0 || a.root[k] >= shape[a.meshAxes[k]])
        return op->emitError() << "root coordinate " << a.root[k]
                               << " is outside mesh axis " << a.meshAxes[k];
    return expect(in == out);
  case OpKind::AllGather:
  case OpKind::ReduceScatter:
  case OpKind::AllSlice: {
    if (!axisOk(a.dim))
      return op->emitError() << "tensor axis " << a.dim << " out of range";
    std::vector<int64_t> expected = in.shape;
    if (inst.kind == OpKind::AllGather)
      expected[a.dim] *= n;
    else if (expected[a.dim] % n == 0)
      expected[a.dim] /= n;
    else
      return expect(false);
    return expect(expected == out.shape && in.dtype == out.dtype);
  }
  case OpKind::AllToAll: {
    if (!axisOk(a.dim) || !axisOk(a.concatDim))
      return op->emitError() << "tensor axis out of range";
    std::vector<int64_t> expected = in.shape;
    if (expected[a.dim] % n != 0)
      return expect(false);
    expected[a.dim] /= n;
    expected[a.concatDim] *= n;
    return expect(expected == out.shape && in.dtype == out.dtype);
  }
  default:
    return success();
  }
}

/// Reads a `merak.sharding` attribute (absent: replicated) and checks that
/// it is on `mesh`, not partial, and fits `type`.
LogicalResult readSharding(func::FuncOp func, Attribute attr,
                           const std::string &what, const TensorType &type,
                           const std::optional<MeshLayout> &mesh,
                           Sharding &sharding) {
  if (!attr)
    return success();
  auto shard = dyn_cast<mesh::MeshShardingAttr>(attr);
  if (!shard)
    return func.emitError() << what << " has a " << kShardingAttr
                            << " that is not a #mesh.shard: " << attr;
  if (!mesh || shard.getMesh().getValue() != mesh->name)
    return func.emitError()
           << what << " is sharded on @" << shard.getMesh().getValue()
           << ", which is not the module's mesh";
  if (!shard.getPartialAxes().empty())
    return func.emitError() << what << " is a partial value (" << attr
                            << "); arguments and results must be reduced";
  for (mesh::MeshAxesAttr axes : shard.getSplitAxes())
    sharding.splitAxes.push_back(std::vector<int64_t>(axes.asArrayRef().begin(),
                                                      axes.asArrayRef().end()));
  if (absl::Status s = verifySharding(sharding, type.shape.size(), mesh->shape);
      !s.ok())
    return func.emitError() << what << ": " << std::string(s.message());
  return success();
}

/// The module's mesh, if the function's module has one; more than one is
/// an error (every collective and sharding must name the same mesh).
LogicalResult readMesh(func::FuncOp func, std::optional<MeshLayout> &layout) {
  auto module = func->getParentOfType<ModuleOp>();
  if (!module)
    return success();
  mesh::MeshOp found;
  for (auto meshOp : module.getOps<mesh::MeshOp>()) {
    if (found)
      return meshOp.emitError() << "merak-exec runs programs on one mesh; @"
                                << found.getSymName() << " is already defined";
    found = meshOp;
  }
  if (!found)
    return success();
  MeshLayout mesh;
  mesh.name = found.getSymName().str();
  for (int64_t size : found.getShape()) {
    if (ShapedType::isDynamic(size) || size < 1)
      return found.emitError()
             << "merak-exec needs a mesh of static, positive sizes";
    mesh.shape.push_back(size);
  }
  if (auto names = found->getAttrOfType<ArrayAttr>(kMeshAxesAttr))
    for (Attribute name : names)
      if (auto text = dyn_cast<StringAttr>(name))
        mesh.axisNames.push_back(text.str());
  if (auto algorithm =
          found->getAttrOfType<StringAttr>(kAllReduceAlgorithmAttr)) {
    if (algorithm.getValue() != "ring" && algorithm.getValue() != "tree")
      return found.emitError()
             << kAllReduceAlgorithmAttr << " must be \"ring\" or \"tree\"";
    mesh.allReduceAlgorithm = algorithm.getValue().str();
  }
  layout = std::move(mesh);
  return success();
}

} // namespace

FailureOr<Program> lowerToProgram(func::FuncOp func) {
  Program program;
  program.function = func.getSymName().str();
  if (!func.getBody().hasOneBlock())
    return func.emitError() << "merak-exec runs functions with one block";

  if (failed(readMesh(func, program.mesh)))
    return failure();

  llvm::DenseMap<Value, ValueId> ids;
  bool ok = true;
  auto define = [&](Value v) -> ValueId {
    FailureOr<TensorType> type = toTensorType(v.getType());
    if (failed(type)) {
      emitError(v.getLoc())
          << "merak-exec cannot hold a value of type " << v.getType();
      ok = false;
      type = TensorType{};
    }
    ValueId id = ValueId(program.values.size());
    program.values.push_back(ValueInfo{*type});
    ids[v] = id;
    return id;
  };
  auto lookup = [&](Value v) -> ValueId {
    auto it = ids.find(v);
    return it == ids.end() ? kNoValue : it->second;
  };

  Block &body = func.getBody().front();
  for (BlockArgument barg : body.getArguments()) {
    Argument arg;
    arg.value = define(barg);
    if (failed(readArgument(func, barg.getArgNumber(), arg))) {
      ok = false;
      continue;
    }
    const TensorType &type = program.values[arg.value].type;
    if (arg.role == ArgumentRole::LearningRate &&
        (!type.shape.empty() || !isFloat(type.dtype))) {
      func.emitError() << "the merak.lr argument must be a rank-0 float "
                          "tensor, not "
                       << barg.getType();
      ok = false;
    }
    if (arg.role == ArgumentRole::LossScale &&
        (!type.shape.empty() || type.dtype != DType::F32)) {
      func.emitError() << "the merak.loss_scale argument must be a rank-0 "
                          "f32 tensor, not "
                       << barg.getType();
      ok = false;
    }
    if (arg.role == ArgumentRole::Step &&
        (!type.shape.empty() || type.dtype == DType::Bool)) {
      func.emitError() << "the merak.step argument must be a rank-0 tensor, "
                          "not "
                       << barg.getType();
      ok = false;
    }
    // `--merak-optimizer` records its configuration, the learning rate
    // included, on the function; it is the default of --lr.
    if (arg.role == ArgumentRole::LearningRate && !arg.defaultLearningRate)
      if (auto config = func->getAttrOfType<DictionaryAttr>(kOptimizerAttr))
        if (auto lr = config.getAs<FloatAttr>("lr"))
          arg.defaultLearningRate = lr.getValueAsDouble();
    if (failed(readSharding(func,
                            func.getArgAttr(barg.getArgNumber(), kShardingAttr),
                            "argument #" + std::to_string(barg.getArgNumber()),
                            type, program.mesh, arg.sharding)))
      ok = false;
    if (auto stored = func.getArgAttrOfType<DenseI64ArrayAttr>(
            barg.getArgNumber(), kStoredShapeAttr)) {
      std::vector<int64_t> global = globalShape(
          type.shape, arg.sharding,
          program.mesh ? program.mesh->shape : std::vector<int64_t>());
      arg.storedShape.assign(stored.asArrayRef().begin(),
                             stored.asArrayRef().end());
      auto count = [](const std::vector<int64_t> &shape) {
        int64_t n = 1;
        for (int64_t d : shape)
          n *= d;
        return n;
      };
      if (!arg.isState() ||
          llvm::any_of(arg.storedShape, [](int64_t d) { return d < 0; }) ||
          count(arg.storedShape) != count(global)) {
        func.emitError() << "argument #" << barg.getArgNumber() << " ('"
                         << arg.name << "'): merak.stored_shape " << stored
                         << " must be a parameter's, buffer's or optimizer "
                            "state's, with as many elements as its global "
                         << TensorType{type.dtype, global}.str();
        ok = false;
      }
    }
    program.arguments.push_back(std::move(arg));
  }

  Decoder decoder(lookup);
  for (Operation &op : body.without_terminator()) {
    if (isa<ConstantOp, arith::ConstantOp>(op)) {
      Attribute value = op.getAttr("value");
      ValueId id = define(op.getResult(0));
      FailureOr<HostTensor> host = toHostTensor(value, program.values[id].type);
      if (failed(host)) {
        op.emitError() << "merak-exec cannot read this constant's value";
        ok = false;
        continue;
      }
      program.constants.push_back({id, *std::move(host)});
      continue;
    }
    Instruction inst;
    if (failed(decoder.decode(&op, inst))) {
      op.emitError() << "merak-exec has no kernel for '" << op.getName() << "'";
      ok = false;
      continue;
    }
    // Absent optional operands are `kNoValue`; any other is a value the
    // function does not define.
    OpArity arity = opArity(inst.kind);
    int64_t absent = llvm::count(inst.operands, kNoValue);
    if (absent >
        std::max<int64_t>(0, arity.mostOperands - arity.leastOperands)) {
      op.emitError() << "operand defined outside the function body";
      ok = false;
    }
    for (Value result : op.getResults())
      inst.results.push_back(define(result));
    // The decoder and MerakOps.td agree on the op's operands and results.
    if (std::string wrong = arityError(inst); !wrong.empty()) {
      op.emitError() << "internal error: the rank program's '"
                     << opFullName(inst.kind) << "' has " << wrong;
      ok = false;
    }
    inst.location = locationString(op.getLoc());
    if (isCollective(inst.kind) && failed(checkCollective(&op, inst, program)))
      ok = false;
    program.instructions.push_back(std::move(inst));
  }

  auto ret = dyn_cast<func::ReturnOp>(body.getTerminator());
  if (!ret)
    return func.emitError() << "the function must end in func.return";
  for (auto [index, value] : llvm::enumerate(ret.getOperands())) {
    ResultInfo res;
    res.value = lookup(value);
    if (res.value == kNoValue) {
      ok = false;
      continue;
    }
    res.isLoss = bool(func.getResultAttr(index, kLossAttr));
    if (auto n = func.getResultAttrOfType<IntegerAttr>(index, kValueAttr))
      res.pipelineValue = n.getInt();
    if (auto g = func.getResultAttrOfType<StringAttr>(index, kGradAttr))
      res.gradName = g.str();
    if (failed(readSharding(func, func.getResultAttr(index, kShardingAttr),
                            "result #" + std::to_string(index),
                            program.values[res.value].type, program.mesh,
                            res.sharding)))
      ok = false;
    if (func.getResultAttr(index, kGradNormAttr))
      program.gradNormResult = int(program.results.size());
    if (func.getResultAttr(index, kNonFiniteGradsAttr))
      program.nonFiniteGradsResult = int(program.results.size());
    if (auto update =
            func.getResultAttrOfType<IntegerAttr>(index, kUpdateArgAttr)) {
      int64_t n = update.getInt();
      if (n < 0 || n >= int64_t(program.arguments.size())) {
        func.emitError() << "result #" << index << " updates argument #" << n
                         << ", which does not exist";
        ok = false;
      } else if (program.values[program.arguments[n].value].type !=
                 program.values[res.value].type) {
        func.emitError() << "result #" << index << " updates argument #" << n
                         << " but its type differs: " << value.getType()
                         << " vs " << func.getArgument(n).getType();
        ok = false;
      } else if (!program.arguments[n].isState()) {
        func.emitError() << "result #" << index << " updates argument #" << n
                         << ", which is not a parameter, buffer or "
                            "optimizer state";
        ok = false;
      } else if (program.arguments[n].updatedBy >= 0) {
        func.emitError() << "argument #" << n << " is updated twice";
        ok = false;
      } else {
        res.updatesArgument = int(n);
        program.arguments[n].updatedBy = int(program.results.size());
      }
    }
    if (res.isLoss) {
      const TensorType &type = program.values[res.value].type;
      if (!type.shape.empty() || !isFloat(type.dtype)) {
        func.emitError() << "the merak.loss result must be a rank-0 float "
                            "tensor, not "
                         << value.getType();
        ok = false;
      } else if (program.lossResult >= 0) {
        func.emitError() << "more than one result is marked merak.loss";
        ok = false;
      } else {
        program.lossResult = int(program.results.size());
      }
    }
    program.results.push_back(res);
  }
  // Without a marked loss (an imported @forward), the only rank-0 float
  // result is the loss; a pipeline stage function marks its loss.
  if (program.lossResult < 0 && !func->hasAttr(kPhaseAttr)) {
    int found = -1, count = 0;
    for (size_t r = 0; r < program.results.size(); ++r) {
      const TensorType &type = program.values[program.results[r].value].type;
      if (type.shape.empty() && isFloat(type.dtype))
        found = int(r), ++count;
    }
    if (count == 1)
      program.lossResult = found;
  }
  if (!ok)
    return failure();
  if (absl::Status s = planProgram(program); !s.ok())
    return func.emitError()
           << "cannot plan the program: " << std::string(s.message());
  return program;
}

} // namespace merak::runtime

//===- ImporterImpl.h - the TorchScript importer's state --------*- C++ -*-===//
//
// Private to lib/Conversion/TorchScriptToMerak: the importer's walk state
// (`Importer`, `Slot`) and the helpers the converters share. The walk lives
// in Importer.cpp; the converters, one file per op family, register
// themselves through `Importer::populate*Converters`. The files compile as
// one translation unit (a unity build), so LibTorch's headers are parsed
// once.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_CONVERSION_TORCHSCRIPTTOMERAK_IMPORTERIMPL_H
#define MERAK_CONVERSION_TORCHSCRIPTTOMERAK_IMPORTERIMPL_H

#include "merak/Conversion/TorchScriptToMerak/Importer.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringExtras.h"

#include <ATen/ATen.h>
#include <torch/script.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace merak::torchscript {

using namespace mlir;
namespace jit = torch::jit;

/// What a jit value is known to be during import.
struct Slot {
  enum class Kind { Undef, Tensor, Const, List, Module, Poison };
  Kind kind = Kind::Undef;
  Value value;             // Tensor
  c10::IValue iv;          // Const, Module
  std::vector<Slot> elems; // List (lists and tuples)
  std::string path;        // Module: qualified name prefix
  int argIndex = -1;       // Tensor that is still a function argument
  bool isView = false;     // Tensor that views another non-constant tensor

  static Slot tensor(Value v, bool view = false) {
    Slot s;
    s.kind = Kind::Tensor;
    s.value = v;
    s.isView = view;
    return s;
  }
  static Slot constant(c10::IValue v) {
    Slot s;
    s.kind = Kind::Const;
    s.iv = std::move(v);
    return s;
  }
  static Slot list(std::vector<Slot> elems) {
    Slot s;
    s.kind = Kind::List;
    s.elems = std::move(elems);
    return s;
  }
  static Slot poison() {
    Slot s;
    s.kind = Kind::Poison;
    return s;
  }
  bool isTensor() const { return kind == Kind::Tensor; }
  bool isConst() const { return kind == Kind::Const; }
};

/// The merak element type of a PyTorch scalar type; fails for types the
/// dialect lacks.
FailureOr<Type> elementTypeOf(MLIRContext *ctx, at::ScalarType st);
/// The PyTorch scalar type of a merak element type.
std::optional<at::ScalarType> scalarTypeOf(Type t);

class Importer {
public:
  Importer(MLIRContext *ctx, const TorchScriptImportOptions &options)
      : ctx(ctx), b(ctx), options(options) {}

  OwningOpRef<ModuleOp> run(StringRef bytes);

  using Converter = std::function<LogicalResult(Importer &, jit::Node *)>;
  using ConverterTable = std::unordered_map<std::string, Converter>;
  /// Every aten op kind the importer converts, each family's converters
  /// registered by its populate function (one file per family).
  static const ConverterTable &converters();
  static void populateElementwiseConverters(ConverterTable &table);
  static void populateTensorConverters(ConverterTable &table);
  static void populateLinearAlgebraConverters(ConverterTable &table);
  static void populateNormalizationConverters(ConverterTable &table);
  static void populateIndexingConverters(ConverterTable &table);
  static void populateShapeConverters(ConverterTable &table);
  static void populateReductionConverters(ConverterTable &table);
  static void populateConvolutionConverters(ConverterTable &table);
  static void populateInterpolationConverters(ConverterTable &table);
  static void populateLossConverters(ConverterTable &table);

private:
  // Module loading and the function signature.
  LogicalResult load(StringRef bytes);
  LogicalResult collectParameters();
  LogicalResult resolveInputTypes(SmallVectorImpl<Type> &types,
                                  SmallVectorImpl<std::string> &names);

  // The walk.
  LogicalResult importBlock(jit::Block *block);
  LogicalResult importNode(jit::Node *n);
  LogicalResult evaluate(jit::Node *n);
  LogicalResult getAttr(jit::Node *n);

  // Locations: the user's Python line of a node, else the archive.
  Location locOf(jit::Node *n);
  Location sourceLocOf(jit::Node *n);
  bool debugInfoUnreadable = false;

  // Access to inputs.
  Slot &slot(jit::Value *v) { return slots[v]; }
  Slot &in(jit::Node *n, size_t i) { return slots[n->input(i)]; }
  bool isNone(jit::Node *n, size_t i) {
    Slot &s = in(n, i);
    return s.isConst() && s.iv.isNone();
  }
  FailureOr<c10::IValue> constArg(jit::Node *n, size_t i, StringRef what);
  FailureOr<int64_t> intArg(jit::Node *n, size_t i, StringRef what);
  FailureOr<double> floatArg(jit::Node *n, size_t i, StringRef what);
  FailureOr<bool> boolArg(jit::Node *n, size_t i, StringRef what);
  FailureOr<std::vector<int64_t>> intsArg(jit::Node *n, size_t i,
                                          StringRef what);
  /// The tensor value of input `i`; constants (tensors or numbers) are
  /// materialized, numbers with element type `scalarType` when given.
  Value tensorArg(jit::Node *n, size_t i, Type scalarType = {});
  FailureOr<std::vector<Value>> tensorListArg(jit::Node *n, size_t i);
  Value materialize(const c10::IValue &iv, Location loc, Type scalarType);
  Value constantTensor(const at::Tensor &t, Location loc);

  // Result binding.
  void setOut(jit::Node *n, size_t i, Value v, bool view = false) {
    slots[n->output(i)] = Slot::tensor(v, view);
  }
  /// Binds output 0 of `n` to `v`; a null `v` (a failed build, already
  /// reported) is a failure.
  LogicalResult bind(jit::Node *n, Value v, bool view = false) {
    if (!v)
      return failure();
    setOut(n, 0, v, view);
    return success();
  }
  void setConst(jit::Node *n, size_t i, c10::IValue v) {
    slots[n->output(i)] = Slot::constant(std::move(v));
  }

  // Diagnostics.
  InFlightDiagnostic error(jit::Node *n) {
    return emitError(locOf(n)) << n->kind().toQualString() << ": ";
  }
  LogicalResult unsupported(jit::Node *n, StringRef variant = "") {
    std::string kind = n->kind().toQualString();
    if (!variant.empty())
      kind += " (" + variant.str() + ")";
    unsupportedOps[kind].insert(locString(locOf(n)));
    return failure();
  }
  static std::string locString(Location loc) {
    if (auto f = dyn_cast<FileLineColLoc>(loc))
      return (f.getFilename().str() + ":" + std::to_string(f.getLine()));
    return "unknown location";
  }

public:
  // Op construction with inferred result types; a failed shape rule is
  // reported at the node's Python line and yields a null value.
  template <typename OpTy, typename... Args> Operation *make(Args &&...args) {
    constexpr unsigned numResults = std::is_same_v<OpTy, BatchNormOp> ? 3 : 1;
    SmallVector<Type> placeholders(numResults, b.getNoneType());
    auto op = b.create<OpTy>(curLoc, TypeRange(placeholders),
                             std::forward<Args>(args)...);
    SmallVector<Type> types;
    std::string captured;
    LogicalResult inferred = failure();
    {
      // The shape rule's message is re-emitted with the aten op's name.
      ScopedDiagnosticHandler handler(ctx, [&](Diagnostic &d) {
        captured = d.str();
        return success();
      });
      inferred = OpTy::inferReturnTypes(
          ctx, curLoc, op->getOperands(), op->getAttrDictionary(),
          op->getPropertiesStorage(), op->getRegions(), types);
    }
    if (failed(inferred)) {
      op->erase();
      emitError(curLoc) << curKind << ": " << captured;
      return nullptr;
    }
    for (auto [r, t] : llvm::zip(op->getResults(), types))
      r.setType(t);
    return op;
  }
  template <typename OpTy, typename... Args> Value make1(Args &&...args) {
    Operation *op = make<OpTy>(std::forward<Args>(args)...);
    return op ? op->getResult(0) : Value();
  }

  // Helpers shared by converters.
  Value reshape(Value v, ArrayRef<int64_t> shape) {
    if (llvm::cast<RankedTensorType>(v.getType()).getShape() == shape)
      return v;
    return make1<ReshapeOp>(v, b.getDenseI64ArrayAttr(shape));
  }
  Value cast(Value v, Type elem) {
    auto t = llvm::cast<RankedTensorType>(v.getType());
    if (t.getElementType() == elem)
      return v;
    return b.create<CastOp>(curLoc, RankedTensorType::get(t.getShape(), elem),
                            v);
  }
  Value expandTo(Value v, ArrayRef<int64_t> shape) {
    if (llvm::cast<RankedTensorType>(v.getType()).getShape() == shape)
      return v;
    return make1<ExpandOp>(v, b.getDenseI64ArrayAttr(shape));
  }
  static RankedTensorType typeOf(Value v) {
    return llvm::cast<RankedTensorType>(v.getType());
  }
  FailureOr<Type> promotedType(jit::Node *n, ArrayRef<size_t> idx);
  LogicalResult binary(jit::Node *n,
                       const std::function<Value(Value, Value)> &build,
                       bool floatResult = false, bool swap = false);
  LogicalResult compare(jit::Node *n, ComparePredicate pred);
  template <typename OpTy> LogicalResult unary(jit::Node *n) {
    Value x = tensorArg(n, 0);
    if (!x)
      return failure();
    Value r = make1<OpTy>(x);
    if (!r)
      return failure();
    setOut(n, 0, r);
    return success();
  }
  template <typename OpTy> LogicalResult floatUnary(jit::Node *n) {
    Value x = tensorArg(n, 0);
    if (!x)
      return failure();
    if (!isa<FloatType>(typeOf(x).getElementType()))
      x = cast(x, b.getF32Type());
    Value r = make1<OpTy>(x);
    if (!r)
      return failure();
    setOut(n, 0, r);
    return success();
  }
  LogicalResult reduce(jit::Node *n, StringRef which);
  LogicalResult reshapeLike(jit::Node *n, std::vector<int64_t> shape);
  FailureOr<int64_t> dimArg(jit::Node *n, size_t i, int64_t rank);
  void recordBufferUpdate(jit::Value *target, Value newValue);

  MLIRContext *ctx;
  OpBuilder b;
  const TorchScriptImportOptions &options;
  Location curLoc = UnknownLoc::get(ctx);
  std::string curKind;

  torch::jit::Module module;
  std::string inputsJson;
  std::shared_ptr<jit::Graph> graph;
  func::FuncOp func;

  std::unordered_map<jit::Value *, Slot> slots;
  std::unordered_map<jit::Value *, std::pair<Value, int64_t>> constCache;
  // Parameters and buffers: tensor identity -> argument index.
  std::unordered_map<const c10::TensorImpl *, int> paramArgs;
  std::vector<std::pair<std::string, bool>> paramNames; // name, isBuffer
  std::vector<at::Tensor> paramTensors;
  std::map<int, Value> bufferUpdates;
  std::map<std::string, std::set<std::string>> unsupportedOps;
  std::map<std::pair<const void *, size_t>, Location> locCache;
};

} // namespace merak::torchscript

// In converters: `CONVERT("aten::x") { ... };` registers a converter.
#define CONVERT(KIND)                                                          \
  table[KIND] = [](Importer & im, jit::Node * n) -> LogicalResult
#define TRY(X)                                                                 \
  if (failed(X))                                                               \
    return failure();

#endif // MERAK_CONVERSION_TORCHSCRIPTTOMERAK_IMPORTERIMPL_H

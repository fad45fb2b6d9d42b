//===- MerakOps.td - the merak dialect: tensor ops of imported models ----===//
//
// Ops on builtin ranked tensors with global (single-device) shapes. Every op
// verifies its operands and infers its result type (InferTypeOpInterface), so
// a shape error names the op, the operand and the dimension that disagrees.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_DIALECT_MERAK_IR_MERAKOPS_TD
#define MERAK_DIALECT_MERAK_IR_MERAKOPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "merak/Interfaces/GradientOpInterface.td"

def Merak_Dialect : Dialect {
  let name = "merak";
  let cppNamespace = "::merak";
  let summary = "Tensor ops of models imported from TorchScript";
  let description = [{
    The `merak` dialect holds a model as imported from TorchScript: ops on
    builtin ranked tensors with global shapes and single-device meaning.
    Later levels (training step, sharding, partitioning) build on it.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasConstantMaterializer = 1;
  // The `merak.*` attributes of the training step's contract (roles,
  // results, stages, the schedule) are checked by MerakAttrVerifier.cpp.
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
}

//===----------------------------------------------------------------------===//
// Types and enums
//===----------------------------------------------------------------------===//

def Merak_ElementType : AnyTypeOf<[F16, BF16, F32, F64, I1, I32, I64]>;
// Shapes are global and static: every shape rule computes with concrete
// sizes, so a dynamic dimension (`?`) is rejected by the type constraint.
def Merak_Tensor : StaticShapeTensorOf<[F16, BF16, F32, F64, I1, I32, I64]>;
def Merak_FloatTensor : StaticShapeTensorOf<[F16, BF16, F32, F64]>;
def Merak_IntTensor : StaticShapeTensorOf<[I32, I64]>;
def Merak_BoolTensor : StaticShapeTensorOf<[I1]>;

def Merak_CmpEq : I32EnumAttrCase<"eq", 0>;
def Merak_CmpNe : I32EnumAttrCase<"ne", 1>;
def Merak_CmpLt : I32EnumAttrCase<"lt", 2>;
def Merak_CmpLe : I32EnumAttrCase<"le", 3>;
def Merak_CmpGt : I32EnumAttrCase<"gt", 4>;
def Merak_CmpGe : I32EnumAttrCase<"ge", 5>;
def Merak_ComparePredicate : I32EnumAttr<"ComparePredicate",
    "elementwise comparison", [Merak_CmpEq, Merak_CmpNe, Merak_CmpLt,
                               Merak_CmpLe, Merak_CmpGt, Merak_CmpGe]> {
  let cppNamespace = "::merak";
  let genSpecializedAttr = 0;
}
def Merak_ComparePredicateAttr
    : EnumAttr<Merak_Dialect, Merak_ComparePredicate, "cmp"> {
  let assemblyFormat = "`<` $value `>`";
}

def Merak_GeluNone : I32EnumAttrCase<"none", 0>;
def Merak_GeluTanh : I32EnumAttrCase<"tanh", 1>;
def Merak_GeluApproximation : I32EnumAttr<"GeluApproximation",
    "approximation of gelu", [Merak_GeluNone, Merak_GeluTanh]> {
  let cppNamespace = "::merak";
  let genSpecializedAttr = 0;
}
def Merak_GeluApproximationAttr
    : EnumAttr<Merak_Dialect, Merak_GeluApproximation, "gelu"> {
  let assemblyFormat = "`<` $value `>`";
}

def Merak_ReductionNone : I32EnumAttrCase<"none", 0>;
def Merak_ReductionMean : I32EnumAttrCase<"mean", 1>;
def Merak_ReductionSum : I32EnumAttrCase<"sum", 2>;
def Merak_LossReduction : I32EnumAttr<"LossReduction",
    "reduction of a loss over its batch",
    [Merak_ReductionNone, Merak_ReductionMean, Merak_ReductionSum]> {
  let cppNamespace = "::merak";
  let genSpecializedAttr = 0;
}
def Merak_LossReductionAttr
    : EnumAttr<Merak_Dialect, Merak_LossReduction, "reduction"> {
  let assemblyFormat = "`<` $value `>`";
}

//===----------------------------------------------------------------------===//
// Op classes
//===----------------------------------------------------------------------===//

// What the runtime and the passes need to know of an op beyond its shape
// rule, gradient, sharding rule and kernel is declared here, with the op.
// utils/gen-runtime-ops.py turns the `runtime*` fields into
// include/merak/Runtime/RuntimeOps.inc (the runtime has no MLIR;
// test/Dialect/Merak/IR/runtime-ops.test fails when the two differ) and
// all of them into the build's MerakOpFacts.inc, which the rank-program
// lowering, the cost model and the passes include (docs/dialect.md,
// "Adding an op").
class Merak_Op<string mnemonic, list<Trait> traits = []>
    : Op<Merak_Dialect, mnemonic, traits> {
  // Whether merak-exec runs the op as an instruction (a constant is data).
  bit runtimeInstruction = 1;
  // Result `runtimeViewResult` is a view of operand `runtimeViewOf` (-1:
  // no result is): always, or when the C++ condition `runtimeViewWhen`
  // holds for `inst` (an Instruction) of `program` (its Program).
  int runtimeViewResult = 0;
  int runtimeViewOf = -1;
  code runtimeViewWhen = "";
  // [result, operand] pairs the kernel may write the result into, when the
  // operand dies there (the planner decides).
  list<list<int>> runtimeInPlace = [];
  // How the op's attributes reach the runtime's `OpAttrs`: each attribute
  // `snake_name` goes to the field `snakeName`, except as listed here:
  // "attr=field" names another field, "attr=" none (the runtime reads it
  // from the result type).
  list<string> runtimeAttrFields = [];
  // Operands in which the op is linear when the others are held fixed:
  // f(.., x + y, ..) = f(.., x, ..) + f(.., y, ..). A pending sum over ranks
  // may then be taken after the op instead of before it.
  list<int> linearIn = [];
  // Floating-point operations per result element, for the cost model of an
  // op that has no rule of its own in lib/Analysis/CostModel.cpp.
  int elementFlops = 1;
  // The element type the op computes in under --merak-mixed-precision:
  // "compute" (the low-precision compute type: matrix products), "fp32"
  // (norms, softmax, sums, losses), or "promote" (the widest floating type
  // of its tensor operands; a one-element constant follows the others).
  string precision = "promote";
}

// An op whose result types follow from its operands and attributes. The
// rule lives in MerakOps.cpp as `inferReturnTypes`.
class Merak_InferOp<string mnemonic, list<Trait> traits = []>
    : Merak_Op<mnemonic, !listconcat(traits,
        [Pure, DeclareOpInterfaceMethods<InferTypeOpInterface>,
         DeclareOpInterfaceMethods<GradientOpInterface>])> {
  let assemblyFormat =
      "operands attr-dict `:` functional-type(operands, results)";
}

class Merak_UnaryOp<string mnemonic, string doc, list<Trait> traits = []>
    : Merak_InferOp<mnemonic, !listconcat(traits, [SameOperandsAndResultType])> {
  let summary = doc;
  let runtimeInPlace = [[0, 0]];
  let arguments = (ins Merak_Tensor:$input);
  let results = (outs Merak_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

class Merak_FloatUnaryOp<string mnemonic, string doc>
    : Merak_UnaryOp<mnemonic, doc> {
  let arguments = (ins Merak_FloatTensor:$input);
  let results = (outs Merak_FloatTensor:$result);
}

// Elementwise binary op with NumPy/PyTorch broadcasting. Both operands have
// the same element type (the importer inserts casts for type promotion).
class Merak_BinaryOp<string mnemonic, string doc, list<Trait> traits = []>
    : Merak_InferOp<mnemonic, traits> {
  let summary = doc;
  let runtimeInPlace = [[0, 0], [0, 1]];
  let description = [{
    Elementwise with broadcasting: shapes are aligned from the right, and a
    dimension of size 1 stretches to the other operand's size. Operands have
    the same element type.
  }];
  let arguments = (ins Merak_Tensor:$lhs, Merak_Tensor:$rhs);
  let results = (outs Merak_Tensor:$result);
}

// An optimizer's update of one parameter: operand 0 the parameter, operand
// 1 its gradient, result 0 the updated parameter (TrainStep.h asks it).
def Merak_OptimizerUpdate : NativeOpTrait<"OptimizerUpdate"> {
  let cppNamespace = "::merak::trait";
}

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

def Merak_ConstantOp : Merak_Op<"constant",
    [ConstantLike, Pure, DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "tensor constant";
  let runtimeInstruction = 0;
  let description = [{
    A tensor known at compile time. The importer folds `arange`, `zeros`,
    `ones`, `full`, `tril` of constants and every other computation that
    depends only on constants into this op.
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Merak_Tensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise unary
//===----------------------------------------------------------------------===//

def Merak_NegOp : Merak_UnaryOp<"neg", "negation"> {
  let linearIn = [0];
}
def Merak_AbsOp : Merak_UnaryOp<"abs", "absolute value">;
def Merak_ExpOp : Merak_FloatUnaryOp<"exp", "exponential"> {
  let elementFlops = 4;
}
def Merak_LogOp : Merak_FloatUnaryOp<"log", "natural logarithm"> {
  let elementFlops = 4;
}
def Merak_SinOp : Merak_FloatUnaryOp<"sin", "sine"> {
  let elementFlops = 4;
}
def Merak_CosOp : Merak_FloatUnaryOp<"cos", "cosine"> {
  let elementFlops = 4;
}
def Merak_SqrtOp : Merak_FloatUnaryOp<"sqrt", "square root"> {
  let elementFlops = 4;
}
def Merak_RsqrtOp : Merak_FloatUnaryOp<"rsqrt", "reciprocal square root"> {
  let elementFlops = 4;
}
def Merak_ReciprocalOp : Merak_FloatUnaryOp<"reciprocal", "1 / x"> {
  let elementFlops = 4;
}
def Merak_ErfOp : Merak_FloatUnaryOp<"erf", "error function"> {
  let elementFlops = 4;
}
def Merak_TanhOp : Merak_FloatUnaryOp<"tanh", "hyperbolic tangent"> {
  let elementFlops = 4;
}
def Merak_SigmoidOp : Merak_FloatUnaryOp<"sigmoid", "logistic sigmoid"> {
  let elementFlops = 4;
}
def Merak_SiluOp : Merak_FloatUnaryOp<"silu", "x * sigmoid(x)"> {
  let elementFlops = 5;
}
def Merak_ReluOp : Merak_UnaryOp<"relu", "max(x, 0)">;
def Merak_NotOp : Merak_UnaryOp<"not", "logical not of a boolean tensor"> {
  let arguments = (ins Merak_BoolTensor:$input);
  let results = (outs Merak_BoolTensor:$result);
}

def Merak_GeluOp : Merak_InferOp<"gelu", [SameOperandsAndResultType]> {
  let summary = "Gaussian error linear unit";
  let runtimeInPlace = [[0, 0]];
  let runtimeAttrFields = ["approximate=tanhApproximation"];
  let elementFlops = 8;
  let description = [{
    `approximate = none` is x * Phi(x) with the exact normal CDF;
    `approximate = tanh` is PyTorch's tanh approximation.
  }];
  let arguments = (ins Merak_FloatTensor:$input,
      DefaultValuedAttr<Merak_GeluApproximationAttr,
                        "::merak::GeluApproximation::none">:$approximate);
  let results = (outs Merak_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Merak_ClampOp : Merak_InferOp<"clamp", [SameOperandsAndResultType]> {
  let summary = "clamp to [min, max]; either bound may be absent";
  let runtimeViewOf = 0;
  let runtimeViewWhen = [{ !inst.attrs.min && !inst.attrs.max }];
  let runtimeInPlace = [[0, 0]];
  let arguments = (ins Merak_Tensor:$input, OptionalAttr<F64Attr>:$min,
                   OptionalAttr<F64Attr>:$max);
  let results = (outs Merak_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Merak_CastOp : Merak_Op<"cast",
    [Pure, DeclareOpInterfaceMethods<GradientOpInterface>]> {
  let summary = "element type conversion (PyTorch `.to(dtype)` semantics)";
  let runtimeViewOf = 0;
  let runtimeViewWhen = [{
    program.values[inst.operands[0]].type.dtype ==
        program.values[inst.results[0]].type.dtype
  }];
  let arguments = (ins Merak_Tensor:$input);
  let results = (outs Merak_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Merak_DropoutOp : Merak_InferOp<"dropout", [SameOperandsAndResultType,
    DeclareOpInterfaceMethods<GradientOpInterface,
                              ["expandForDifferentiation"]>]> {
  let summary = "dropout with probability p, active only when training";
  let runtimeViewOf = 0;
  let runtimeViewWhen = [{ !inst.attrs.training || inst.attrs.p == 0 }];
  let runtimeInPlace = [[0, 0]];
  let elementFlops = 2;
  let arguments = (ins Merak_FloatTensor:$input, F64Attr:$p, BoolAttr:$training);
  let results = (outs Merak_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Merak_TrilOp : Merak_InferOp<"tril", [SameOperandsAndResultType]> {
  let summary = "lower triangle of the last two dimensions";
  let arguments = (ins Merak_Tensor:$input, DefaultValuedAttr<I64Attr, "0">:$diagonal);
  let results = (outs Merak_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Merak_TriuOp : Merak_InferOp<"triu", [SameOperandsAndResultType]> {
  let summary = "upper triangle of the last two dimensions";
  let arguments = (ins Merak_Tensor:$input, DefaultValuedAttr<I64Attr, "0">:$diagonal);
  let results = (outs Merak_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise binary and ternary (broadcasting)
//===----------------------------------------------------------------------===//

def Merak_AddOp : Merak_BinaryOp<"add", "addition", [Commutative]>;
def Merak_SubOp : Merak_BinaryOp<"sub", "subtraction">;
def Merak_MulOp : Merak_BinaryOp<"mul", "multiplication", [Commutative]> {
  let linearIn = [0, 1];
}
def Merak_DivOp : Merak_BinaryOp<"div", "true division"> {
  let linearIn = [0];
}
def Merak_PowOp : Merak_BinaryOp<"pow", "power"> {
  let elementFlops = 4;
}
def Merak_RemainderOp : Merak_BinaryOp<"remainder",
    "remainder with the sign of the divisor (Python `%`)">;
def Merak_FloorDivideOp : Merak_BinaryOp<"floor_divide",
    "division rounded toward negative infinity">;
def Merak_MinimumOp : Merak_BinaryOp<"minimum", "elementwise minimum", [Commutative]>;
def Merak_MaximumOp : Merak_BinaryOp<"maximum", "elementwise maximum", [Commutative]>;
def Merak_AndOp : Merak_BinaryOp<"and", "logical and", [Commutative]> {
  let arguments = (ins Merak_BoolTensor:$lhs, Merak_BoolTensor:$rhs);
  let results = (outs Merak_BoolTensor:$result);
}
def Merak_OrOp : Merak_BinaryOp<"or", "logical or", [Commutative]> {
  let arguments = (ins Merak_BoolTensor:$lhs, Merak_BoolTensor:$rhs);
  let results = (outs Merak_BoolTensor:$result);
}

def Merak_CompareOp : Merak_InferOp<"compare"> {
  let summary = "elementwise comparison with broadcasting; result is i1";
  let arguments = (ins Merak_ComparePredicateAttr:$predicate,
                   Merak_Tensor:$lhs, Merak_Tensor:$rhs);
  let results = (outs Merak_BoolTensor:$result);
  let assemblyFormat = "$predicate `,` $lhs `,` $rhs attr-dict `:` "
                       "functional-type(operands, results)";
}

def Merak_WhereOp : Merak_InferOp<"where"> {
  let summary = "select `on_true` where `condition` holds, else `on_false`";
  let runtimeInPlace = [[0, 1], [0, 2]];
  let description = [{
    Broadcasting over all three operands. `masked_fill(x, mask, v)` imports
    as `where(mask, v, x)`.
  }];
  let arguments = (ins Merak_BoolTensor:$condition, Merak_Tensor:$on_true,
                   Merak_Tensor:$on_false);
  let results = (outs Merak_Tensor:$result);
}

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

def Merak_LinearOp : Merak_InferOp<"linear"> {
  let precision = "compute";
  let summary = "y = x W^T + b";
  let description = [{
    `input` is `[..., K]`, `weight` is `[N, K]` (PyTorch layout), the
    optional `bias` is `[N]`; the result is `[..., N]`.
  }];
  let arguments = (ins Merak_FloatTensor:$input, Merak_FloatTensor:$weight,
                   Optional<Merak_FloatTensor>:$bias);
  let results = (outs Merak_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weight (`,` $bias^)? attr-dict `:` "
                       "functional-type(operands, results)";
}

def Merak_MatmulOp : Merak_InferOp<"matmul"> {
  let precision = "compute";
  let summary = "batched matrix product with broadcast batch dimensions";
  let description = [{
    Both operands have rank >= 2: `[..., M, K] x [..., K, N] -> [..., M, N]`
    with the batch dimensions broadcast. `bmm`, `mm` and `matmul` import to
    it; `addmm` and `baddbmm` import to it plus `mul` and `add`.
  }];
  let arguments = (ins Merak_FloatTensor:$lhs, Merak_FloatTensor:$rhs);
  let results = (outs Merak_FloatTensor:$result);
}

def Merak_MaskedAttentionOp : Merak_Op<"masked_attention",
    [Pure, AllTypesMatch<["query", "key"]>,
     DeclareOpInterfaceMethods<GradientOpInterface>]> {
  let precision = "compute";
  let summary = "scaled dot-product attention with a mask";
  let runtimeAttrFields = ["divide=scaleDivides"];
  let description = [{
    `probs = softmax(masked(scaled(query @ key^T)))` over the last
    dimension, and `result = probs @ value`: what a model's masked
    attention computes, in one op. `scaled(s)` is `s * scale`, or
    `s / scale` with `divide`. `mask` broadcasts against the scores: a
    boolean mask (true: attend) gives `where(mask, s, -inf)`
    (`masked_fill`), a float mask of the query's element type `s + mask`
    (an additive mask of zeros and `-inf`). `query` and `key` are
    `[..., T, D]` (the same shape, self-attention), `value` is
    `[..., T, E]`. `saved` is what the backward reads: either `probs`
    itself (`[..., T, T]`, the query's element type), or, in the
    FlashAttention form, each query row's log-sum-exp of its scaled, masked
    scores (`[..., T]`, f32), from which the backward recomputes the
    probabilities: memory linear in the sequence instead of quadratic.
    `--merak-fuse-attention` builds it (`flash=true` for the second form).
    A kernel may skip the blocks of the products a causal mask
    (lower-triangular, or zero on and below the diagonal and `-inf` above)
    removes; a fully masked row gives NaN (and a log-sum-exp of `-inf`), as
    in PyTorch.
  }];
  let arguments = (ins Merak_FloatTensor:$query, Merak_FloatTensor:$key,
                   Merak_FloatTensor:$value,
                   AnyTypeOf<[Merak_BoolTensor, Merak_FloatTensor]>:$mask,
                   F64Attr:$scale, UnitAttr:$divide);
  let results = (outs Merak_FloatTensor:$result, Merak_FloatTensor:$saved);
  let assemblyFormat =
      "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Whether `saved` is the rows' log-sum-exp (the FlashAttention form)
    /// rather than the probabilities.
    bool savesLogSumExp() {
      return ::llvm::cast<::mlir::RankedTensorType>(getSaved().getType())
                 .getRank() <
             ::llvm::cast<::mlir::RankedTensorType>(getQuery().getType())
                 .getRank();
    }
    /// Whether `query`, `key`, `value` and `mask` can be the operands (of
    /// this op or of its backward). On failure, emits the reason on `op`
    /// when it is given.
    static ::llvm::LogicalResult checkOperands(::mlir::Operation *op,
        ::mlir::Value query, ::mlir::Value key, ::mlir::Value value,
        ::mlir::Value mask);
  }];
}

//===----------------------------------------------------------------------===//
// Activations over a dimension, normalization
//===----------------------------------------------------------------------===//

def Merak_SoftmaxOp : Merak_InferOp<"softmax", [SameOperandsAndResultType]> {
  let precision = "fp32";
  let summary = "softmax along `dim`";
  let arguments = (ins Merak_FloatTensor:$input, I64Attr:$dim);
  let results = (outs Merak_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Merak_LogSoftmaxOp : Merak_InferOp<"log_softmax", [SameOperandsAndResultType]> {
  let precision = "fp32";
  let summary = "log of softmax along `dim`";
  let arguments = (ins Merak_FloatTensor:$input, I64Attr:$dim);
  let results = (outs Merak_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Merak_LayerNormOp : Merak_InferOp<"layer_norm", [AttrSizedOperandSegments]> {
  let precision = "fp32";
  let summary = "layer normalization over the last `normalized_rank` dims";
  let description = [{
    Normalizes over the trailing `normalized_rank` dimensions with biased
    variance; optional `weight` and `bias` have those dimensions' shape.
  }];
  let arguments = (ins Merak_FloatTensor:$input,
                   Optional<Merak_FloatTensor>:$weight,
                   Optional<Merak_FloatTensor>:$bias,
                   I64Attr:$normalized_rank, F64Attr:$eps);
  let results = (outs Merak_FloatTensor:$result);
  let assemblyFormat = "$input (`weight` $weight^)? (`bias` $bias^)? attr-dict "
                       "`:` functional-type(operands, results)";
}

def Merak_RmsNormOp : Merak_InferOp<"rms_norm"> {
  let precision = "fp32";
  let summary = "root-mean-square normalization over the last `normalized_rank` dims";
  let description = [{
    `x / sqrt(mean(x^2) + eps) * weight`. A model that writes RMSNorm with
    `pow`, `mean` and `rsqrt` keeps those primitive ops instead.
  }];
  let arguments = (ins Merak_FloatTensor:$input,
                   Optional<Merak_FloatTensor>:$weight,
                   I64Attr:$normalized_rank, F64Attr:$eps);
  let results = (outs Merak_FloatTensor:$result);
  let assemblyFormat = "$input (`weight` $weight^)? attr-dict "
                       "`:` functional-type(operands, results)";
}

def Merak_BatchNormOp : Merak_InferOp<"batch_norm"> {
  let precision = "fp32";
  let summary = "batch normalization over all dimensions but the channel (1)";
  let description = [{
    With `training = true` it normalizes with the batch statistics and
    returns the updated running statistics
    (`(1 - momentum) * running + momentum * batch`, unbiased variance for the
    running value) as its second and third results; the importer makes them
    buffer updates of the function. With `training = false` it normalizes
    with the running statistics and returns them unchanged.
  }];
  let arguments = (ins Merak_FloatTensor:$input, Merak_FloatTensor:$weight,
                   Merak_FloatTensor:$bias, Merak_FloatTensor:$running_mean,
                   Merak_FloatTensor:$running_var, BoolAttr:$training,
                   F64Attr:$momentum, F64Attr:$eps);
  let results = (outs Merak_FloatTensor:$result,
                 Merak_FloatTensor:$new_running_mean,
                 Merak_FloatTensor:$new_running_var);
}

//===----------------------------------------------------------------------===//
// Embedding and indexing
//===----------------------------------------------------------------------===//

def Merak_EmbeddingOp : Merak_InferOp<"embedding"> {
  let summary = "rows of `weight` picked by integer `indices`";
  let description = [{
    `weight` is `[V, D]`, `indices` any shape `S`; the result is `S + [D]`.
    Rows at `padding_idx` receive no gradient.
  }];
  let arguments = (ins Merak_FloatTensor:$weight, Merak_IntTensor:$indices,
                   OptionalAttr<I64Attr>:$padding_idx);
  let results = (outs Merak_FloatTensor:$result);
}

def Merak_IndexOp : Merak_InferOp<"index"> {
  let summary = "advanced indexing along one dimension by an integer tensor";
  let description = [{
    `input[:, ..., indices, ...]` with `indices` at dimension `dim`: the
    result shape is `input.shape[:dim] + indices.shape + input.shape[dim+1:]`.
  }];
  let arguments = (ins Merak_Tensor:$input, Merak_IntTensor:$indices, I64Attr:$dim);
  let results = (outs Merak_Tensor:$result);
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

def Merak_ReshapeOp : Merak_InferOp<"reshape"> {
  let summary = "same elements, new shape (view, flatten, squeeze, unsqueeze)";
  let runtimeViewOf = 0;
  let runtimeAttrFields = ["shape="];
  let linearIn = [0];
  let arguments = (ins Merak_Tensor:$input, DenseI64ArrayAttr:$shape);
  let results = (outs Merak_Tensor:$result);
  let hasFolder = 1;
  let hasCanonicalizer = 1;
  let extraClassDeclaration = [{
    /// For a reshape of an activation `[batch, ..., hidden]` (rank >= 3)
    /// that splits the last dimension into `[heads, head_dim]`: heads.
    std::optional<int64_t> splitHeads();
    /// Whether it merges `[heads, head_dim]` back into the last dimension
    /// of an activation of rank >= 3.
    bool mergesHeads();
    /// For a reshape `[..., B, heads * head_dim] -> [..., B * heads,
    /// head_dim]` (rank >= 2, the leading dimensions kept): heads > 1.
    /// nn.MultiheadAttention lays q, k and v out so, with the batch and the
    /// heads in one dimension.
    std::optional<int64_t> mergesBatchAndHeads();
  }];
}

def Merak_PermuteOp : Merak_InferOp<"permute"> {
  let summary = "dimension permutation (transpose, permute, .T)";
  let runtimeViewOf = 0;
  let linearIn = [0];
  let description = [{ Result dimension `i` is input dimension `permutation[i]`. }];
  let arguments = (ins Merak_Tensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs Merak_Tensor:$result);
  let hasFolder = 1;
}

def Merak_SliceOp : Merak_InferOp<"slice"> {
  let summary = "elements start, start + step, ... < end along `dim`";
  let runtimeViewOf = 0;
  let linearIn = [0];
  let description = [{
    Bounds are normalized: `0 <= start <= end <= size`, `step >= 1`.
  }];
  let arguments = (ins Merak_Tensor:$input, I64Attr:$dim, I64Attr:$start,
                   I64Attr:$end, DefaultValuedAttr<I64Attr, "1">:$step);
  let results = (outs Merak_Tensor:$result);
}

def Merak_SelectOp : Merak_InferOp<"select"> {
  let summary = "one index along `dim`, which is removed";
  let runtimeViewOf = 0;
  let arguments = (ins Merak_Tensor:$input, I64Attr:$dim, I64Attr:$index);
  let results = (outs Merak_Tensor:$result);
}

def Merak_ConcatOp : Merak_InferOp<"concat"> {
  let summary = "concatenation along `dim` (cat, stack after unsqueeze)";
  let arguments = (ins Variadic<Merak_Tensor>:$inputs, I64Attr:$dim);
  let results = (outs Merak_Tensor:$result);
}

def Merak_ExpandOp : Merak_InferOp<"expand"> {
  let summary = "broadcast to `shape` (expand, expand_as, broadcast_to)";
  let runtimeViewOf = 0;
  let runtimeAttrFields = ["shape="];
  let arguments = (ins Merak_Tensor:$input, DenseI64ArrayAttr:$shape);
  let results = (outs Merak_Tensor:$result);
}

def Merak_PadOp : Merak_InferOp<"pad"> {
  let summary = "constant padding before (`low`) and after (`high`) each dim";
  let arguments = (ins Merak_Tensor:$input, DenseI64ArrayAttr:$low,
                   DenseI64ArrayAttr:$high, DefaultValuedAttr<F64Attr, "0.0">:$value);
  let results = (outs Merak_Tensor:$result);
}

def Merak_RollOp : Merak_InferOp<"roll", [SameOperandsAndResultType]> {
  let summary = "circular shift by `shifts[i]` along `dims[i]`";
  let arguments = (ins Merak_Tensor:$input, DenseI64ArrayAttr:$shifts,
                   DenseI64ArrayAttr:$dims);
  let results = (outs Merak_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Merak_UpdateSliceOp : Merak_InferOp<"update_slice"> {
  let summary = "`input` with `update` written at a run-time position";
  let description = [{
    `result` is `input` except that `result[..., p : p + n, ...] = update`
    along `dim`, where `p` is the one element of `position` (an integer
    tensor of one element, known only when the step runs) and `n` is
    `update`'s size along `dim`; every other dimension of `update` is
    `input`'s. A position outside `[0, size - n]` is an error when the op
    runs. `--merak-kv-cache` writes a decode step's keys and values into
    the cache with it.
  }];
  let runtimeInPlace = [[0, 0]];
  let arguments = (ins Merak_Tensor:$input, Merak_Tensor:$update,
                   Merak_IntTensor:$position, I64Attr:$dim);
  let results = (outs Merak_Tensor:$result);
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

class Merak_ReduceOp<string mnemonic, string doc> : Merak_InferOp<mnemonic> {
  let summary = doc;
  let description = [{
    Reduces over `dims` (all dimensions when empty); `keepdim` keeps them as
    size 1.
  }];
  let arguments = (ins Merak_Tensor:$input, DenseI64ArrayAttr:$dims,
                   DefaultValuedAttr<BoolAttr, "false">:$keepdim);
  let results = (outs Merak_Tensor:$result);
}

def Merak_ReduceSumOp : Merak_ReduceOp<"reduce_sum", "sum over dimensions"> {
  let linearIn = [0];
  let precision = "fp32";
}
def Merak_ReduceMeanOp : Merak_ReduceOp<"reduce_mean", "mean over dimensions"> {
  let precision = "fp32";
}
def Merak_ReduceMaxOp : Merak_ReduceOp<"reduce_max", "maximum over dimensions">;

def Merak_CumsumOp : Merak_InferOp<"cumsum", [SameOperandsAndResultType]> {
  let summary = "inclusive cumulative sum along `dim`";
  let description = [{
    `result[..., i, ...]` is the sum of `input[..., j, ...]` for `j <= i`
    along `dim` (for `j >= i` with `reverse`), added in that order;
    floating-point sums accumulate in f32 (or f64), integer ones in their
    own type (the importer widens integers and booleans to i64 first, as
    `torch.cumsum` does). The gradient of a cumulative sum is the reversed
    cumulative sum of the result's gradient, and the other way round.
  }];
  let linearIn = [0];
  let precision = "fp32";
  let arguments = (ins Merak_Tensor:$input, I64Attr:$dim,
                   DefaultValuedAttr<BoolAttr, "false">:$reverse);
  let results = (outs Merak_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Convolution and pooling (NCHW)
//===----------------------------------------------------------------------===//

def Merak_Conv2dOp : Merak_InferOp<"conv2d"> {
  let precision = "compute";
  let summary = "2-D convolution, NCHW input, OIHW weight";
  let arguments = (ins Merak_FloatTensor:$input, Merak_FloatTensor:$weight,
                   Optional<Merak_FloatTensor>:$bias,
                   DenseI64ArrayAttr:$stride, DenseI64ArrayAttr:$padding,
                   DenseI64ArrayAttr:$dilation, I64Attr:$groups);
  let results = (outs Merak_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weight (`,` $bias^)? attr-dict `:` "
                       "functional-type(operands, results)";
}

def Merak_MaxPool2dOp : Merak_InferOp<"max_pool2d"> {
  let summary = "2-D max pooling, NCHW";
  let arguments = (ins Merak_FloatTensor:$input, DenseI64ArrayAttr:$kernel,
                   DenseI64ArrayAttr:$stride, DenseI64ArrayAttr:$padding,
                   DenseI64ArrayAttr:$dilation,
                   DefaultValuedAttr<BoolAttr, "false">:$ceil_mode);
  let results = (outs Merak_FloatTensor:$result);
}

def Merak_AvgPool2dOp : Merak_InferOp<"avg_pool2d"> {
  let summary = "2-D average pooling, NCHW";
  let arguments = (ins Merak_FloatTensor:$input, DenseI64ArrayAttr:$kernel,
                   DenseI64ArrayAttr:$stride, DenseI64ArrayAttr:$padding,
                   DefaultValuedAttr<BoolAttr, "false">:$ceil_mode,
                   DefaultValuedAttr<BoolAttr, "true">:$count_include_pad);
  let results = (outs Merak_FloatTensor:$result);
}

def Merak_AdaptiveAvgPool2dOp : Merak_InferOp<"adaptive_avg_pool2d"> {
  let summary = "2-D average pooling to a fixed output size, NCHW";
  let arguments = (ins Merak_FloatTensor:$input, DenseI64ArrayAttr:$output_size);
  let results = (outs Merak_FloatTensor:$result);
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

def Merak_CrossEntropyOp : Merak_InferOp<"cross_entropy"> {
  let precision = "fp32";
  let summary = "softmax cross-entropy of logits `[N, C]` and class targets `[N]`";
  let description = [{
    Targets equal to `ignore_index` contribute nothing; `mean` divides by the
    number of targets not ignored (PyTorch semantics). The result is rank 0
    for `mean` and `sum`, `[N]` for `none`.
  }];
  let arguments = (ins Merak_FloatTensor:$logits, Merak_IntTensor:$target,
                   DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                   DefaultValuedAttr<Merak_LossReductionAttr,
                                     "::merak::LossReduction::mean">:$reduction,
                   DefaultValuedAttr<F64Attr, "0.0">:$label_smoothing);
  let results = (outs Merak_FloatTensor:$result);
}

//===----------------------------------------------------------------------===//
// Backward ops: vector-Jacobian products that are kernels of their own
//===----------------------------------------------------------------------===//

// Built by --merak-autodiff; result types are given, not inferred.
class Merak_BackwardOp<string mnemonic, list<Trait> traits = []>
    : Merak_Op<mnemonic, !listconcat(traits, [Pure])> {
  let assemblyFormat =
      "operands attr-dict `:` functional-type(operands, results)";
}

def Merak_LinearWeightBackwardOp
    : Merak_BackwardOp<"linear_weight_backward"> {
  let precision = "compute";
  let summary = "gradient of linear with respect to its weight";
  let description = [{
    `grad` is `[..., N]` and `input` `[..., K]` with the same leading
    dimensions; the result is `[N, K]`, the sum over every leading position
    of `grad^T input`. One contraction over all the leading dimensions, in
    no order: whichever of them data or sequence parallelism splits, the
    result is a partial sum, where a product of the flattened operands
    could only be split along the outermost.
  }];
  let arguments = (ins Merak_FloatTensor:$grad, Merak_FloatTensor:$input);
  let results = (outs Merak_FloatTensor:$result);
  let hasVerifier = 1;
}

def Merak_GeluBackwardOp : Merak_BackwardOp<"gelu_backward",
    [AllTypesMatch<["grad", "input", "result"]>]> {
  let summary = "gradient of gelu with respect to its input";
  let runtimeInPlace = [[0, 0]];
  let runtimeAttrFields = ["approximate=tanhApproximation"];
  let arguments = (ins Merak_FloatTensor:$grad, Merak_FloatTensor:$input,
      DefaultValuedAttr<Merak_GeluApproximationAttr,
                        "::merak::GeluApproximation::none">:$approximate);
  let results = (outs Merak_FloatTensor:$result);
}

def Merak_SoftmaxBackwardOp : Merak_BackwardOp<"softmax_backward",
    [AllTypesMatch<["grad", "output", "result"]>]> {
  let summary = "gradient of softmax with respect to its input";
  let description = [{
    `output * (grad - sum(grad * output, dim))`, where `output` is the
    softmax's result: what autograd's `_softmax_backward_data` computes.
  }];
  let arguments = (ins Merak_FloatTensor:$grad, Merak_FloatTensor:$output,
                   I64Attr:$dim);
  let results = (outs Merak_FloatTensor:$result);
  let hasVerifier = 1;
}

def Merak_MaskedAttentionBackwardOp
    : Merak_BackwardOp<"masked_attention_backward",
        [AllTypesMatch<["query", "key", "grad_query", "grad_key"]>,
         AllTypesMatch<["value", "grad_value"]>,
         AllTypesMatch<["grad", "value"]>]> {
  let summary = "gradients of masked_attention: query, key and value";
  let runtimeAttrFields = ["divide=scaleDivides"];
  let description = [{
    From `saved` (the forward's second result): with the probabilities,
    `grad_value = probs^T @ grad`,
    `s = scaled(softmax_backward(grad @ value^T, probs))` (by `scale`,
    divided with `divide`), `grad_query = s @ key`,
    `grad_key = s^T @ query`. With the rows' log-sum-exp (the
    FlashAttention form), `output` (the forward's result) comes too: the
    probabilities are recomputed as `exp(masked(scaled(query @ key^T)) -
    lse)`, and the softmax backward's row sums are `sum(grad * output)`
    over the value's last dimension. `mask` (as the forward's) lets a
    kernel skip the blocks a causal mask removes; it gets no gradient.
  }];
  let arguments = (ins Merak_FloatTensor:$grad, Merak_FloatTensor:$query,
                   Merak_FloatTensor:$key, Merak_FloatTensor:$value,
                   AnyTypeOf<[Merak_BoolTensor, Merak_FloatTensor]>:$mask,
                   Merak_FloatTensor:$saved,
                   Optional<Merak_FloatTensor>:$output, F64Attr:$scale,
                   UnitAttr:$divide);
  let results = (outs Merak_FloatTensor:$grad_query,
                 Merak_FloatTensor:$grad_key, Merak_FloatTensor:$grad_value);
  let hasVerifier = 1;
}

def Merak_LayerNormBackwardOp : Merak_BackwardOp<"layer_norm_backward",
    [AttrSizedOperandSegments,
     AllTypesMatch<["grad", "input", "grad_input"]>]> {
  let summary = "gradients of layer_norm: input, weight and bias";
  let description = [{
    Recomputes the statistics of `input` over its trailing
    `normalized_rank` dimensions. `grad_weight` and `grad_bias` have the
    normalized shape (they are zero-free sums over the leading dims).
  }];
  let arguments = (ins Merak_FloatTensor:$grad, Merak_FloatTensor:$input,
                   Optional<Merak_FloatTensor>:$weight,
                   Optional<Merak_FloatTensor>:$bias,
                   I64Attr:$normalized_rank, F64Attr:$eps);
  let results = (outs Merak_FloatTensor:$grad_input,
                 Merak_FloatTensor:$grad_weight, Merak_FloatTensor:$grad_bias);
  let assemblyFormat = "$grad `,` $input (`weight` $weight^)? (`bias` $bias^)? "
                       "attr-dict `:` functional-type(operands, results)";
}

def Merak_BatchNormBackwardOp : Merak_BackwardOp<"batch_norm_backward",
    [AllTypesMatch<["grad", "input", "grad_input"]>,
     AllTypesMatch<["weight", "grad_weight", "grad_bias"]>]> {
  let summary = "gradients of batch_norm: input, weight and bias";
  let description = [{
    In training mode the batch statistics are recomputed from `input`; in
    evaluation mode the running statistics are used.
  }];
  let arguments = (ins Merak_FloatTensor:$grad, Merak_FloatTensor:$input,
                   Merak_FloatTensor:$weight, Merak_FloatTensor:$running_mean,
                   Merak_FloatTensor:$running_var, BoolAttr:$training,
                   F64Attr:$eps);
  let results = (outs Merak_FloatTensor:$grad_input,
                 Merak_FloatTensor:$grad_weight, Merak_FloatTensor:$grad_bias);
}

def Merak_IndexBackwardOp : Merak_BackwardOp<"index_backward"> {
  let summary = "scatter-add of `grad` back to the rows picked by `indices`";
  let linearIn = [0];
  let description = [{
    Gradient of `merak.index` (and of `merak.embedding`, which is `index`
    along dimension 0 of the weight): the result has the indexed tensor's
    shape, `grad.shape[:dim] + [dim_size] + grad.shape[dim + rank(indices):]`,
    and accumulates every slice of `grad` at its index. Rows at
    `padding_idx` stay zero.
  }];
  let arguments = (ins Merak_FloatTensor:$grad, Merak_IntTensor:$indices,
                   I64Attr:$dim, I64Attr:$dim_size,
                   OptionalAttr<I64Attr>:$padding_idx);
  let results = (outs Merak_FloatTensor:$result);
  let hasVerifier = 1;
}

def Merak_SliceBackwardOp : Merak_BackwardOp<"slice_backward"> {
  let summary = "gradient of slice: `grad` placed back, zeros elsewhere";
  let arguments = (ins Merak_Tensor:$grad, I64Attr:$dim, I64Attr:$start,
                   I64Attr:$end, I64Attr:$step, I64Attr:$dim_size);
  let results = (outs Merak_Tensor:$result);
  let hasVerifier = 1;
}

def Merak_Conv2dBackwardOp : Merak_BackwardOp<"conv2d_backward",
    [AllTypesMatch<["input", "grad_input"]>,
     AllTypesMatch<["weight", "grad_weight"]>]> {
  let summary = "gradients of conv2d: input, weight and bias";
  let arguments = (ins Merak_FloatTensor:$grad, Merak_FloatTensor:$input,
                   Merak_FloatTensor:$weight, DenseI64ArrayAttr:$stride,
                   DenseI64ArrayAttr:$padding, DenseI64ArrayAttr:$dilation,
                   I64Attr:$groups);
  let results = (outs Merak_FloatTensor:$grad_input,
                 Merak_FloatTensor:$grad_weight, Merak_FloatTensor:$grad_bias);
}

def Merak_MaxPool2dBackwardOp : Merak_BackwardOp<"max_pool2d_backward",
    [AllTypesMatch<["input", "result"]>]> {
  let summary = "gradient of max_pool2d (to the first maximum of each window)";
  let arguments = (ins Merak_FloatTensor:$grad, Merak_FloatTensor:$input,
                   DenseI64ArrayAttr:$kernel, DenseI64ArrayAttr:$stride,
                   DenseI64ArrayAttr:$padding, DenseI64ArrayAttr:$dilation,
                   DefaultValuedAttr<BoolAttr, "false">:$ceil_mode);
  let results = (outs Merak_FloatTensor:$result);
}

def Merak_AvgPool2dBackwardOp : Merak_BackwardOp<"avg_pool2d_backward",
    [AllTypesMatch<["input", "result"]>]> {
  let summary = "gradient of avg_pool2d";
  let arguments = (ins Merak_FloatTensor:$grad, Merak_FloatTensor:$input,
                   DenseI64ArrayAttr:$kernel, DenseI64ArrayAttr:$stride,
                   DenseI64ArrayAttr:$padding,
                   DefaultValuedAttr<BoolAttr, "false">:$ceil_mode,
                   DefaultValuedAttr<BoolAttr, "true">:$count_include_pad);
  let results = (outs Merak_FloatTensor:$result);
}

def Merak_AdaptiveAvgPool2dBackwardOp
    : Merak_BackwardOp<"adaptive_avg_pool2d_backward",
                       [AllTypesMatch<["input", "result"]>]> {
  let summary = "gradient of adaptive_avg_pool2d";
  let arguments = (ins Merak_FloatTensor:$grad, Merak_FloatTensor:$input);
  let results = (outs Merak_FloatTensor:$result);
}

def Merak_CrossEntropyBackwardOp : Merak_BackwardOp<"cross_entropy_backward",
    [AllTypesMatch<["logits", "result"]>]> {
  let summary = "gradient of cross_entropy with respect to the logits";
  let arguments = (ins Merak_FloatTensor:$grad, Merak_FloatTensor:$logits,
                   Merak_IntTensor:$target,
                   DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                   DefaultValuedAttr<Merak_LossReductionAttr,
                                     "::merak::LossReduction::mean">:$reduction,
                   DefaultValuedAttr<F64Attr, "0.0">:$label_smoothing);
  let results = (outs Merak_FloatTensor:$result);
}

//===----------------------------------------------------------------------===//
// Training ops: randomness and optimizer updates
//===----------------------------------------------------------------------===//

def Merak_DropoutMaskOp : Merak_Op<"dropout_mask",
    [AllTypesMatch<["input", "result"]>,
     MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>,
     DeclareOpInterfaceMethods<GradientOpInterface>]> {
  let summary = "random keep mask of dropout, scaled by 1 / (1 - p)";
  let elementFlops = 2;
  let description = [{
    Each element is `1 / (1 - p)` with probability `1 - p` and `0`
    otherwise, drawn from the run's random generator (so it is not pure:
    two masks are never merged). `--merak-autodiff` rewrites a training
    `dropout(x)` with `p > 0` into `x * dropout_mask(x)` so that the
    backward pass reuses the same mask. Only `input`'s type is read.
  }];
  let arguments = (ins Merak_FloatTensor:$input, F64Attr:$p);
  let results = (outs Merak_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Merak_Scalar : 0DTensorOf<[F32, F64, I64]>;

def Merak_SgdUpdateOp : Merak_Op<"sgd_update",
    [Pure, Merak_OptimizerUpdate, AllTypesMatch<["param", "grad", "momentum_buffer", "new_param",
                          "new_momentum_buffer"]>]> {
  let summary = "one step of torch.optim.SGD on one parameter";
  // Without momentum the buffer passes through unchanged.
  let runtimeViewResult = 1;
  let runtimeViewOf = 2;
  let runtimeViewWhen = [{ inst.attrs.momentum == 0 }];
  let runtimeInPlace = [[0, 0], [1, 2]];
  let description = [{
    PyTorch's semantics, in its order of operations (`lr` is rank-0 f32,
    `step` rank-0 i64 counting from 1):

        d = grad + weight_decay * param            (if weight_decay != 0)
        if momentum != 0:
          buf = d                                  (step == 1)
          buf = momentum * buf + (1 - dampening) * d   (step > 1)
          d = d + momentum * buf if nesterov else buf
        param = param - lr * d

    With `momentum = 0` the buffer passes through unchanged.
  }];
  let arguments = (ins Merak_FloatTensor:$param, Merak_FloatTensor:$grad,
                   Merak_FloatTensor:$momentum_buffer, Merak_Scalar:$lr,
                   Merak_Scalar:$step, F64Attr:$momentum, F64Attr:$dampening,
                   BoolAttr:$nesterov, F64Attr:$weight_decay);
  let results = (outs Merak_FloatTensor:$new_param,
                 Merak_FloatTensor:$new_momentum_buffer);
  let assemblyFormat =
      "operands attr-dict `:` functional-type(operands, results)";
}

def Merak_AdamwUpdateOp : Merak_Op<"adamw_update",
    [Pure, Merak_OptimizerUpdate, AllTypesMatch<["param", "grad", "exp_avg", "exp_avg_sq",
                          "new_param", "new_exp_avg", "new_exp_avg_sq"]>]> {
  let summary = "one step of torch.optim.AdamW on one parameter";
  let runtimeInPlace = [[0, 0], [1, 2], [2, 3]];
  let description = [{
    PyTorch's semantics and order of operations (`step` counts from 1):

        param = param * (1 - lr * weight_decay)
        exp_avg = exp_avg * beta1 + grad * (1 - beta1)
        exp_avg_sq = exp_avg_sq * beta2 + grad * grad * (1 - beta2)
        bias1 = 1 - beta1 ** step;  bias2 = 1 - beta2 ** step
        denom = sqrt(exp_avg_sq) / sqrt(bias2) + eps
        param = param - (lr / bias1) * exp_avg / denom
  }];
  let arguments = (ins Merak_FloatTensor:$param, Merak_FloatTensor:$grad,
                   Merak_FloatTensor:$exp_avg, Merak_FloatTensor:$exp_avg_sq,
                   Merak_Scalar:$lr, Merak_Scalar:$step, F64Attr:$beta1,
                   F64Attr:$beta2, F64Attr:$eps, F64Attr:$weight_decay);
  let results = (outs Merak_FloatTensor:$new_param,
                 Merak_FloatTensor:$new_exp_avg,
                 Merak_FloatTensor:$new_exp_avg_sq);
  let assemblyFormat =
      "operands attr-dict `:` functional-type(operands, results)";
}

#endif // MERAK_DIALECT_MERAK_IR_MERAKOPS_TD

//===- GradientOpInterface.td - vector-Jacobian products of ops ----------===//

#ifndef MERAK_INTERFACES_GRADIENTOPINTERFACE_TD
#define MERAK_INTERFACES_GRADIENTOPINTERFACE_TD

include "mlir/IR/OpBase.td"

def GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::merak";
  let description = [{
    An op that knows its vector-Jacobian product. `--merak-autodiff` walks
    the forward function backwards and asks each op for the gradients of its
    operands given the gradients of its results. The rule lives with the op
    (MerakGradients.cpp beside the op definitions), not in the pass.
  }];
  let methods = [
    InterfaceMethod<[{
        Builds, at the builder's insertion point, the gradient of every
        operand from `resultGrads` (one per result; a null value means the
        result receives no gradient, i.e. zero). Fills `operandGrads` with
        one value per operand, null where the operand has no gradient
        (integer operands, or operands the result does not depend on
        differentiably). The built ops should carry the forward op's
        location. Returns failure after emitting a diagnostic.
      }],
      "::llvm::LogicalResult", "buildGradients",
      (ins "::mlir::OpBuilder &":$builder,
           "::llvm::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
    InterfaceMethod<[{
        Rewrites the op, before differentiation, into ops whose gradients
        can be built, when its backward needs a value the op itself does not
        return (a training dropout's random mask). Replaces and erases the op
        and returns true, or returns false to keep it as it is.
      }],
      "bool", "expandForDifferentiation",
      (ins "::mlir::OpBuilder &":$builder), /*methodBody=*/"",
      /*defaultImplementation=*/"return false;">
  ];
}

#endif // MERAK_INTERFACES_GRADIENTOPINTERFACE_TD

//===- ProgramLowering.h - a merak function as a rank program -*- C++ -*-===//
#ifndef MERAK_RUNTIME_PROGRAMLOWERING_H
#define MERAK_RUNTIME_PROGRAMLOWERING_H

#include "merak/Runtime/Program.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/LogicalResult.h"

namespace merak::runtime {

/// Lowers `func` to a planned program. Unsupported ops, argument roles and
/// malformed training signatures are reported as diagnostics on the op or
/// function (every unsupported op, not just the first).
mlir::FailureOr<Program> lowerToProgram(mlir::func::FuncOp func);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_PROGRAMLOWERING_H

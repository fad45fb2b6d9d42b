//===- MerakDialect.h - the merak dialect ----------------------*- C++ -*-===//
#ifndef MERAK_DIALECT_MERAK_IR_MERAKDIALECT_H
#define MERAK_DIALECT_MERAK_IR_MERAKDIALECT_H

#include "mlir/IR/Dialect.h"

#include "merak/Dialect/Merak/IR/MerakDialect.h.inc"

namespace mlir {
class DialectRegistry;
}

namespace merak {
/// Registers the merak dialect and every dialect Merak's IR uses beside it
/// (func, arith, and upstream mesh for sharding).
void registerMerakDialects(mlir::DialectRegistry &registry);
} // namespace merak

#endif // MERAK_DIALECT_MERAK_IR_MERAKDIALECT_H

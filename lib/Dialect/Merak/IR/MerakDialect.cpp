//===- MerakDialect.cpp - the merak dialect -------------------------------===//

#include "merak/Dialect/Merak/IR/MerakDialect.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"

#include "MerakSharding.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshDialect.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace merak;

#include "merak/Dialect/Merak/IR/MerakDialect.cpp.inc"
#include "merak/Dialect/Merak/IR/MerakEnums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "merak/Dialect/Merak/IR/MerakAttrs.cpp.inc"

void MerakDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "merak/Dialect/Merak/IR/MerakOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "merak/Dialect/Merak/IR/MerakAttrs.cpp.inc"
      >();
  // Every op implements mesh::ShardingInterface (MerakSharding.cpp).
  attachShardingInterface(getContext());
}

Operation *MerakDialect::materializeConstant(OpBuilder &builder,
                                             Attribute value, Type type,
                                             Location loc) {
  auto elements = llvm::dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return builder.create<ConstantOp>(loc, type, elements);
}

void merak::registerMerakDialects(DialectRegistry &registry) {
  registry.insert<MerakDialect, func::FuncDialect, arith::ArithDialect,
                  mesh::MeshDialect>();
}

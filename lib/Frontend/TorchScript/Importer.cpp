//===- Importer.cpp - TorchScript to merak dialect ------------------------===//
#include "merak/Frontend/TorchScript/Importer.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include <torch/script.h>
#include "mlir/IR/Diagnostics.h"

bool merak::isTorchScriptArchive(llvm::StringRef bytes) {
  return bytes.starts_with(llvm::StringRef("PK\x03\x04", 4));
}

mlir::OwningOpRef<mlir::ModuleOp>
merak::importTorchScript(llvm::StringRef bytes, mlir::MLIRContext *ctx,
                         const TorchScriptImportOptions &options) {
  mlir::emitError(mlir::UnknownLoc::get(ctx)) << "not implemented";
  return nullptr;
}

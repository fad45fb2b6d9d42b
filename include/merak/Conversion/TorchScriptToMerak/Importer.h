//===- Importer.h - TorchScript to merak dialect ---------------*- C++ -*-===//
#ifndef MERAK_CONVERSION_TORCHSCRIPTTOMERAK_IMPORTER_H
#define MERAK_CONVERSION_TORCHSCRIPTTOMERAK_IMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace merak {

struct TorchScriptImportOptions {
  /// Shapes of the model inputs, one entry per input as `name=2x16xi64`
  /// (element types: f16, bf16, f32, f64, i1, i32, i64). Inputs not listed
  /// take the shapes recorded in the archive by `merak_trace.save`.
  std::vector<std::string> inputShapes;
  /// Name shown in locations and messages for the archive.
  std::string archiveName = "<input>";
};

/// True when `bytes` starts like a TorchScript archive (a zip file). Inline:
/// tools that hand archives to merak-import check without linking the
/// importer (and LibTorch).
inline bool isTorchScriptArchive(llvm::StringRef bytes) {
  return bytes.starts_with(llvm::StringRef("PK\x03\x04", 4));
}

/// Imports the `forward` method of a TorchScript archive held in `bytes`
/// into `func.func @forward`. Errors are reported as diagnostics on `ctx`;
/// on any error the result is null.
mlir::OwningOpRef<mlir::ModuleOp>
importTorchScript(llvm::StringRef bytes, mlir::MLIRContext *ctx,
                  const TorchScriptImportOptions &options);

} // namespace merak

#endif // MERAK_CONVERSION_TORCHSCRIPTTOMERAK_IMPORTER_H

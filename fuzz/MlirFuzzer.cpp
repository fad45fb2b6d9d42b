//===- MlirFuzzer.cpp - fuzzing the MLIR parser with the merak dialects ---===//
//
// An input is a `.mlir` file as `merak-opt` reads it: parsed (text or
// bytecode) with the merak dialects registered and verified; a module that
// verifies is then lowered to rank programs (`lowerToRankPrograms`), as
// `merak-translate --merak-to-rank-program` and `merak-exec` do.
//
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/IR/MerakDialect.h"
#include "merak/Target/RankProgram/RankProgramLowering.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/SourceMgr.h"

using namespace mlir;

// LLVM's allocators poison and unpoison their slabs under ASan, but only in
// code built with it: Debian's libMLIR is not, and its allocations from a
// slab our code poisoned would be reported as use-after-poison. Manual
// poisoning is therefore off; ASan's own checks stay on.
extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static DialectRegistry *registry = [] {
    auto *r = new DialectRegistry();
    merak::registerMerakDialects(*r);
    return r;
  }();
  MLIRContext context(*registry);
  context.allowUnregisteredDialects(false);
  // Diagnostics are expected; they are dropped, not printed.
  context.getDiagEngine().registerHandler([](Diagnostic &) {});
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(
          llvm::StringRef(reinterpret_cast<const char *>(data), size),
          "input.mlir"),
      llvm::SMLoc());
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!module || failed(verify(*module)))
    return 0;
  (void)merak::runtime::lowerToRankPrograms(*module, "", "input.mlir");
  return 0;
}

//===- TorchScriptFuzzer.cpp - fuzzing the TorchScript importer -----------===//
//
// An input is a TorchScript archive as `merak-opt model.pt` reads it:
// `isTorchScriptArchive`, then `importTorchScript` and the verifier. The
// archive is opened by LibTorch (`torch::jit::load`), which is not built
// with the sanitizers; docs/fuzzing.md lists the crashes inside it.
//
//===----------------------------------------------------------------------===//

#include "merak/Conversion/TorchScriptToMerak/Importer.h"
#include "merak/Dialect/Merak/IR/MerakDialect.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

using namespace mlir;

// LLVM's allocators poison and unpoison their slabs under ASan, but only in
// code built with it: Debian's libMLIR is not, and its allocations from a
// slab our code poisoned would be reported as use-after-poison. Manual
// poisoning is therefore off; ASan's own checks stay on.
extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0";
}

// LibTorch leaks an allocation of its own when it refuses a zip whose
// central directory is damaged (PyTorchStreamReader); the leak is
// LibTorch's (docs/fuzzing.md), so leaks allocated inside it are ignored.
extern "C" const char *__lsan_default_suppressions() {
  return "leak:libtorch_cpu.so\n";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  if (!merak::isTorchScriptArchive(bytes))
    return 0;
  static DialectRegistry *registry = [] {
    auto *r = new DialectRegistry();
    merak::registerMerakDialects(*r);
    return r;
  }();
  MLIRContext context(*registry);
  context.getDiagEngine().registerHandler([](Diagnostic &) {});
  merak::TorchScriptImportOptions options;
  options.archiveName = "input.pt";
  OwningOpRef<ModuleOp> module =
      merak::importTorchScript(bytes, &context, options);
  if (module)
    (void)verify(*module);
  return 0;
}

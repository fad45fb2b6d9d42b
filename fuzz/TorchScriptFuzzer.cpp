//===- TorchScriptFuzzer.cpp - fuzzing the TorchScript importer -----------===//
//
// An input is a TorchScript archive as `merak-opt model.pt` reads it:
// `isTorchScriptArchive`, then `importTorchScript` and the verifier. The
// archive is opened by LibTorch (`torch::jit::load`), which is not built
// with the sanitizers; docs/fuzzing.md lists the crashes inside it.
//
// The importer refuses an archive whose zip checksums fail before LibTorch
// reads it (ArchiveCheck.h), so most mutations would stop there. Half of
// the mutations are repaired: the stored entries' CRC-32s recomputed and
// written back, so damaged pickles, tensor data and version files reach
// LibTorch and the importer as a tool that rewrites archives would write
// them; the other half test the check itself.
//
//===----------------------------------------------------------------------===//

#include "merak/Conversion/TorchScriptToMerak/ArchiveCheck.h"
#include "merak/Conversion/TorchScriptToMerak/Importer.h"
#include "merak/Dialect/Merak/IR/MerakDialect.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <zlib.h>

#include <algorithm>
#include <string_view>
#include <vector>

using namespace mlir;

// LLVM's allocators poison and unpoison their slabs under ASan, but only in
// code built with it: Debian's libMLIR is not, and its allocations from a
// slab our code poisoned would be reported as use-after-poison. Manual
// poisoning is therefore off; ASan's own checks stay on.
extern "C" const char *__asan_default_options() {
  // A failed allocation returns null, so `operator new` throws bad_alloc
  // as it does outside the sanitizer and the importer turns it into an
  // error: LibTorch's unpickler allocates what a damaged length says.
  return "allow_user_poisoning=0:allocator_may_return_null=1";
}

// LibTorch leaks an allocation of its own when it refuses a zip whose
// central directory is damaged (PyTorchStreamReader); the leak is
// LibTorch's (docs/fuzzing.md), so leaks allocated inside it are ignored.
extern "C" const char *__lsan_default_suppressions() {
  return "leak:libtorch_cpu.so\n";
}

extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize);

namespace {

void putU32(uint8_t *at, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    at[i] = uint8_t(v >> (8 * i));
}

} // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size,
                                          size_t maxSize, unsigned seed) {
  size = LLVMFuzzerMutate(data, size, maxSize);
  if (seed % 2)
    return size;
  std::vector<merak::ArchiveEntry> entries;
  std::string_view bytes(reinterpret_cast<const char *>(data), size);
  if (!merak::checkZipArchive(bytes, &entries, /*verifyCrc=*/false).empty())
    return size;
  for (const merak::ArchiveEntry &e : entries) {
    if (e.method != 0)
      continue;
    uint32_t crc = 0;
    for (uint64_t at = 0; at < e.size;) {
      uInt n = uInt(std::min<uint64_t>(e.size - at, 1u << 30));
      crc = uint32_t(crc32(crc, data + e.dataOffset + at, n));
      at += n;
    }
    putU32(data + e.localHeaderOffset + 14, crc);
    putU32(data + e.directoryOffset + 16, crc);
  }
  return size;
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

//===- merak-opt.cpp - the Merak optimizer driver -------------------------===//
//
// mlir-opt for Merak: reads MLIR (text or bytecode) or a TorchScript archive
// (detected by content), runs passes, prints the result. An archive is
// imported by merak-import, the tool beside this one that loads LibTorch:
// merak-opt itself starts without it.
//
//===----------------------------------------------------------------------===//

#include "merak/Conversion/TorchScriptToMerak/Importer.h"
#include "merak/Dialect/Merak/IR/MerakDialect.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"

#include "mlir/Dialect/Mesh/Transforms/Passes.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;

static llvm::cl::list<std::string>
    inputShapes("merak-input-shapes",
                llvm::cl::desc("Shapes of TorchScript model inputs, e.g. "
                               "idx=2x16xi64,targets=2x16xi64"),
                llvm::cl::CommaSeparated);

/// merak-import's path: beside this executable.
static std::string importerPath(const char *argv0) {
  static int anchor;
  std::string self = llvm::sys::fs::getMainExecutable(argv0, &anchor);
  llvm::SmallString<256> path(llvm::sys::path::parent_path(self));
  llvm::sys::path::append(path, "merak-import");
  return std::string(path);
}

/// The module merak-import makes of the archive `input` (read from
/// `inputFilename`), as bytecode; nothing where it failed (it printed
/// why).
static std::optional<std::unique_ptr<llvm::MemoryBuffer>>
importArchive(const char *argv0, llvm::StringRef inputFilename,
              const llvm::MemoryBuffer &input) {
  std::string importer = importerPath(argv0);
  if (!llvm::sys::fs::can_execute(importer)) {
    llvm::errs() << "merak-opt: " << inputFilename
                 << " is a TorchScript archive, which merak-import imports, "
                    "and there is no "
                 << importer << "\n";
    return std::nullopt;
  }
  // An archive read from stdin goes to merak-import in a file.
  llvm::SmallString<128> archive(inputFilename), module;
  bool fromStdin = inputFilename == "-";
  auto removeFiles = llvm::make_scope_exit([&] {
    if (fromStdin)
      llvm::sys::fs::remove(archive);
    if (!module.empty())
      llvm::sys::fs::remove(module);
  });
  if (fromStdin) {
    int fd;
    if (std::error_code e = llvm::sys::fs::createTemporaryFile(
            "merak-archive", "pt", fd, archive)) {
      llvm::errs() << "merak-opt: cannot write the archive to a file: "
                   << e.message() << "\n";
      return std::nullopt;
    }
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << input.getBuffer();
    os.close();
    if (os.has_error()) {
      llvm::errs() << "merak-opt: cannot write the archive to " << archive
                   << ": " << os.error().message() << "\n";
      os.clear_error();
      return std::nullopt;
    }
  }
  if (std::error_code e = llvm::sys::fs::createTemporaryFile(
          "merak-import", "mlirbc", module)) {
    llvm::errs() << "merak-opt: cannot make a file for the imported module: "
                 << e.message() << "\n";
    return std::nullopt;
  }
  std::string name = fromStdin ? "<stdin>" : inputFilename.str();
  std::string shapes = "--merak-input-shapes=" + llvm::join(inputShapes, ",");
  llvm::SmallVector<llvm::StringRef> args = {importer, archive,          "-o",
                                             module,   "--archive-name", name};
  if (!inputShapes.empty())
    args.push_back(shapes);
  std::string error;
  int status =
      llvm::sys::ExecuteAndWait(importer, args, std::nullopt, {}, 0, 0, &error);
  if (status != 0) {
    if (status < 0)
      llvm::errs() << "merak-opt: " << importer << " "
                   << (error.empty() ? "failed" : error) << " importing "
                   << name << "\n";
    return std::nullopt;
  }
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> bytes =
      llvm::MemoryBuffer::getFile(module);
  if (!bytes) {
    llvm::errs() << "merak-opt: cannot read the module merak-import wrote: "
                 << bytes.getError().message() << "\n";
    return std::nullopt;
  }
  // Named after the archive, as the module's locations are.
  return llvm::MemoryBuffer::getMemBufferCopy((*bytes)->getBuffer(),
                                              inputFilename);
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  DialectRegistry registry;
  merak::registerMerakDialects(registry);
  registerTransformsPasses();
  mesh::registerMeshPasses();
  merak::registerMerakPasses();
  merak::registerMerakPipelines();

  auto [inputFilename, outputFilename] = registerAndParseCLIOptions(
      argc, argv, "Merak optimizer driver\n", registry);
  MlirOptMainConfig config = MlirOptMainConfig::createFromCLOptions();

  std::string errorMessage;
  std::unique_ptr<llvm::MemoryBuffer> input =
      openInputFile(inputFilename, &errorMessage);
  if (!input) {
    llvm::errs() << "merak-opt: " << errorMessage << "\n";
    return 1;
  }

  if (merak::isTorchScriptArchive(input->getBuffer())) {
    // Imported by merak-import as bytecode, which then goes through
    // MlirOptMain so that every usual flag applies and the Python locations
    // are kept.
    std::optional<std::unique_ptr<llvm::MemoryBuffer>> imported =
        importArchive(argv[0], inputFilename, *input);
    if (!imported)
      return 1;
    input = std::move(*imported);
  }

  std::unique_ptr<llvm::ToolOutputFile> output =
      openOutputFile(outputFilename, &errorMessage);
  if (!output) {
    llvm::errs() << "merak-opt: " << errorMessage << "\n";
    return 1;
  }
  if (failed(MlirOptMain(output->os(), std::move(input), registry, config)))
    return 1;
  output->keep();
  return 0;
}

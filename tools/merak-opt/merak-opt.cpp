//===- merak-opt.cpp - the Merak optimizer driver -------------------------===//
//
// mlir-opt for Merak: reads MLIR (text or bytecode) or a TorchScript archive
// (detected by content), runs passes, prints the result.
//
//===----------------------------------------------------------------------===//

#include "merak/Conversion/TorchScriptToMerak/Importer.h"
#include "merak/Dialect/Merak/IR/MerakDialect.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"

#include "mlir/Bytecode/BytecodeWriter.h"
#include "mlir/Dialect/Mesh/Transforms/Passes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;

static llvm::cl::list<std::string>
    inputShapes("merak-input-shapes",
                llvm::cl::desc("Shapes of TorchScript model inputs, e.g. "
                               "idx=2x16xi64,targets=2x16xi64"),
                llvm::cl::CommaSeparated);

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
    // Import first; the module then goes through MlirOptMain as bytecode so
    // that every usual flag applies and the Python locations are kept.
    MLIRContext context(registry);
    // Errors print as `file:line:col: error: ...` like the parser's.
    llvm::SourceMgr sourceMgr;
    SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
    merak::TorchScriptImportOptions options;
    options.inputShapes.assign(inputShapes.begin(), inputShapes.end());
    options.archiveName = inputFilename == "-" ? "<stdin>" : inputFilename;
    OwningOpRef<ModuleOp> module =
        merak::importTorchScript(input->getBuffer(), &context, options);
    if (!module)
      return 1;
    std::string bytes;
    llvm::raw_string_ostream os(bytes);
    if (failed(writeBytecodeToFile(*module, os)))
      return 1;
    os.flush();
    input = llvm::MemoryBuffer::getMemBufferCopy(bytes, inputFilename);
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

//===- merak-import.cpp - TorchScript archive to the merak dialect --------===//
//
// Imports a TorchScript archive (merak_trace.save, torch.jit.save) into the
// merak dialect and writes the module as MLIR bytecode, or as text with
// --emit=mlir. merak-opt runs it for an archive given as its input, so that
// only this tool loads LibTorch; its errors print as
// `archive:line:col: error: ...`, at the Python source line where known.
//
//===----------------------------------------------------------------------===//

#include "merak/Conversion/TorchScriptToMerak/Importer.h"
#include "merak/Dialect/Merak/IR/MerakDialect.h"

#include "mlir/Bytecode/BytecodeWriter.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;

static llvm::cl::opt<std::string> inputFilename(llvm::cl::Positional,
                                                llvm::cl::desc("<archive>"),
                                                llvm::cl::init("-"));
static llvm::cl::opt<std::string>
    outputFilename("o", llvm::cl::desc("Output file (default: stdout)"),
                   llvm::cl::value_desc("filename"), llvm::cl::init("-"));
static llvm::cl::list<std::string>
    inputShapes("merak-input-shapes",
                llvm::cl::desc("Shapes of TorchScript model inputs, e.g. "
                               "idx=2x16xi64,targets=2x16xi64"),
                llvm::cl::CommaSeparated);
static llvm::cl::opt<std::string> archiveName(
    "archive-name",
    llvm::cl::desc("The archive's name in locations and messages (default: "
                   "the input file's)"),
    llvm::cl::init(""));
enum class Emit { Bytecode, Text };
static llvm::cl::opt<Emit> emit(
    "emit", llvm::cl::desc("What to write"), llvm::cl::init(Emit::Bytecode),
    llvm::cl::values(clEnumValN(Emit::Bytecode, "bytecode", "MLIR bytecode"),
                     clEnumValN(Emit::Text, "mlir", "MLIR text")));

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  llvm::cl::ParseCommandLineOptions(
      argc, argv, "imports a TorchScript archive into the merak dialect\n");

  std::string errorMessage;
  std::unique_ptr<llvm::MemoryBuffer> input =
      openInputFile(inputFilename, &errorMessage);
  if (!input) {
    llvm::errs() << "merak-import: " << errorMessage << "\n";
    return 1;
  }
  DialectRegistry registry;
  merak::registerMerakDialects(registry);
  MLIRContext context(registry);
  // Errors print as `file:line:col: error: ...` like the parser's.
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  merak::TorchScriptImportOptions options;
  options.inputShapes.assign(inputShapes.begin(), inputShapes.end());
  options.archiveName = !archiveName.empty()   ? archiveName.getValue()
                        : inputFilename == "-" ? std::string("<stdin>")
                                               : inputFilename.getValue();
  OwningOpRef<ModuleOp> module =
      merak::importTorchScript(input->getBuffer(), &context, options);
  if (!module)
    return 1;

  std::unique_ptr<llvm::ToolOutputFile> output =
      openOutputFile(outputFilename, &errorMessage);
  if (!output) {
    llvm::errs() << "merak-import: " << errorMessage << "\n";
    return 1;
  }
  if (emit == Emit::Text)
    module->print(output->os());
  else if (failed(writeBytecodeToFile(*module, output->os())))
    return 1;
  output->keep();
  return 0;
}

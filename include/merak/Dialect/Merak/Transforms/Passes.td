//===- Passes.td - passes over the merak dialect -------------------------===//

#ifndef MERAK_DIALECT_MERAK_TRANSFORMS_PASSES_TD
#define MERAK_DIALECT_MERAK_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Reports
//===----------------------------------------------------------------------===//

def ModelSummary : Pass<"merak-model-summary", "mlir::ModuleOp"> {
  let summary = "Print parameter counts and an op histogram of each function";
  let description = [{
    For every function: the number of parameter and buffer arguments and
    their element counts (the sum PyTorch's `sum(p.numel())` gives), the
    model inputs with their types, the number of results, and a histogram of
    the ops in its body, most frequent first. The IR is left unchanged. The
    report goes to standard error, or to the file named by `output`.
  }];
  let options = [
    Option<"output", "output", "std::string", /*default=*/"\"-\"",
           "File to write the summary to ('-' for standard error)">
  ];
}

#endif // MERAK_DIALECT_MERAK_TRANSFORMS_PASSES_TD

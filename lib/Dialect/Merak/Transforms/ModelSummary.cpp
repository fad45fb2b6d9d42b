//===- ModelSummary.cpp - parameter counts and op histogram ---------------===//

#include "merak/Dialect/Merak/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

namespace merak {
#define GEN_PASS_DEF_MODELSUMMARY
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;

namespace {

struct ArgStats {
  int64_t count = 0;
  int64_t elements = 0;
  int64_t bytes = 0;
};

void addArg(ArgStats &s, Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t)
    return;
  ++s.count;
  s.elements += t.getNumElements();
  s.bytes +=
      t.getNumElements() * std::max<int64_t>(1, t.getElementTypeBitWidth() / 8);
}

std::string humanBytes(int64_t bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = bytes;
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::format("%.1f ", v) << units[u];
  return os.str();
}

struct ModelSummaryPass
    : public merak::impl::ModelSummaryBase<ModelSummaryPass> {
  using ModelSummaryBase::ModelSummaryBase;

  void runOnOperation() override {
    std::unique_ptr<llvm::ToolOutputFile> file;
    llvm::raw_ostream *os = &llvm::errs();
    if (output != "-") {
      std::string error;
      file = openOutputFile(output, &error);
      if (!file) {
        emitError(getOperation().getLoc(), "cannot write the summary: ")
            << error;
        return signalPassFailure();
      }
      os = &file->os();
    }
    for (auto func : getOperation().getOps<func::FuncOp>())
      summarize(func, *os);
    if (file)
      file->keep();
    markAllAnalysesPreserved();
  }

  void summarize(func::FuncOp func, llvm::raw_ostream &os) {
    ArgStats params, buffers;
    SmallVector<std::string> inputs;
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      Type type = func.getArgument(i).getType();
      if (func.getArgAttr(i, "merak.param"))
        addArg(params, type);
      else if (func.getArgAttr(i, "merak.buffer"))
        addArg(buffers, type);
      else {
        std::string s;
        llvm::raw_string_ostream ss(s);
        if (auto name = func.getArgAttrOfType<StringAttr>(i, "merak.input"))
          ss << name.getValue();
        else
          ss << "%arg" << i;
        ss << " " << type;
        inputs.push_back(ss.str());
      }
    }
    llvm::MapVector<StringRef, int64_t> histogram;
    int64_t total = 0;
    func.walk([&](Operation *op) {
      if (op == func.getOperation())
        return;
      ++histogram[op->getName().getStringRef()];
      ++total;
    });
    auto sorted = histogram.takeVector();
    llvm::stable_sort(sorted, [](auto &a, auto &b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });

    os << "model summary of @" << func.getName() << "\n";
    os << "  parameter elements: " << params.elements << " ("
       << humanBytes(params.bytes) << ")\n";
    os << "  parameters: " << params.count << "\n";
    os << "  buffers: " << buffers.count << " (" << buffers.elements
       << " elements)\n";
    os << "  inputs: " << llvm::join(inputs, ", ") << "\n";
    os << "  results: " << func.getNumResults() << "\n";
    os << "  ops: " << total << "\n";
    for (auto &[name, count] : sorted)
      os << llvm::format("    %-28s %6lld\n", name.str().c_str(),
                         (long long)count);
  }
};

} // namespace

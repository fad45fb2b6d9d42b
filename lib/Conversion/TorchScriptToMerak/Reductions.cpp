//===- Reductions.cpp - reductions ----------------------------------------===//
//
// Reductions over dimensions: sum, mean, max, with keepdim and dtype.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

namespace merak::torchscript {

void Importer::populateReductionConverters(ConverterTable &table) {
  // Reductions.
  table["aten::sum"] = [](Importer &im, jit::Node *n) {
    return im.reduce(n, "sum");
  };
  table["aten::mean"] = [](Importer &im, jit::Node *n) {
    return im.reduce(n, "mean");
  };
}

} // namespace merak::torchscript

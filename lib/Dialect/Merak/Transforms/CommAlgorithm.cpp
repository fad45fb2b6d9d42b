//===- CommAlgorithm.cpp - the plan's all-reduce algorithm ----------------===//
//
// Prices every all-reduce of a partitioned module as a ring and as a tree
// with the hardware profile and records the algorithm on the mesh, with
// the comparison, for the runtime (NCCL_ALGO, Gloo's halving-doubling) and
// for whoever reads the plan.
//
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"
#include "merak/Hardware/CollectiveCost.h"
#include "merak/Hardware/HardwareProfile.h"

#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/FormatVariadic.h"

#include <nlohmann/json.hpp>

#include <fstream>

namespace merak {
#define GEN_PASS_DEF_COMMALGORITHM
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace mlir::mesh;
using namespace merak;

namespace {

std::string milliseconds(double seconds) {
  return llvm::formatv("{0:F3} ms", seconds * 1e3).str();
}

struct CommAlgorithmPass
    : public merak::impl::CommAlgorithmBase<CommAlgorithmPass> {
  using CommAlgorithmBase::CommAlgorithmBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (algorithm != "ring" && algorithm != "tree" && algorithm != "auto") {
      module.emitError() << "--merak-comm-algorithm: algorithm must be ring, "
                            "tree or auto, got '"
                         << algorithm << "'";
      return signalPassFailure();
    }
    HardwareProfile hw;
    if (!hardware.empty()) {
      std::string error = loadHardwareProfile(hardware, hw);
      if (!error.empty()) {
        module.emitError() << "--merak-comm-algorithm: " << error;
        return signalPassFailure();
      }
    }
    for (MeshOp mesh : module.getOps<MeshOp>()) {
      // Every all-reduce over this mesh, priced both ways.
      double ring = 0, tree = 0, largest = 0;
      int64_t count = 0, widest = 0;
      module.walk([&](AllReduceOp op) {
        if (op.getMesh() != mesh.getSymName())
          return;
        auto type = dyn_cast<RankedTensorType>(op.getInput().getType());
        if (!type || !type.hasStaticShape())
          return;
        int64_t n = 1;
        for (int16_t axis : op.getMeshAxes())
          n *= mesh.getShape()[axis];
        if (n <= 1)
          return;
        double bytes = double(type.getNumElements()) *
                       double(type.getElementTypeBitWidth()) / 8;
        bool crossNode = n > hw.devicesPerNode;
        ring += hw.allReduceTime(CollectiveAlgorithm::Ring, int(n), crossNode,
                                 bytes);
        tree += hw.allReduceTime(CollectiveAlgorithm::Tree, int(n), crossNode,
                                 bytes);
        largest = std::max(largest, bytes);
        widest = std::max(widest, n);
        ++count;
      });
      std::string chosen = algorithm;
      if (chosen == "auto")
        chosen = tree < ring ? "tree" : "ring";
      std::string reason =
          count == 0
              ? std::string("no all-reduce over more than one rank")
              : llvm::formatv(
                    "{0}: {1} all-reduce{2} (the largest {3} bytes, groups "
                    "of up to {4} ranks) take {5} as rings and {6} as trees "
                    "on the {7} profile",
                    algorithm == "auto" ? "auto" : "asked for", count,
                    count == 1 ? "" : "s", int64_t(largest), widest,
                    milliseconds(ring), milliseconds(tree), hw.name)
                    .str();
      OpBuilder b(mesh);
      mesh->setAttr(kAllReduceAlgorithmAttr, b.getStringAttr(chosen));
      mesh->setAttr(kAllReduceAlgorithmReasonAttr, b.getStringAttr(reason));
      if (!report.empty() &&
          failed(addToReport(module, chosen, reason, count, ring, tree)))
        return signalPassFailure();
    }
  }

  /// Adds the choice to the plan report at `report`.
  LogicalResult addToReport(ModuleOp module, const std::string &chosen,
                            const std::string &reason, int64_t count,
                            double ring, double tree) {
    std::ifstream in(report);
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (!in || j.is_discarded() || !j.is_object())
      return module.emitError() << "--merak-comm-algorithm: report=" << report
                                << " is not a plan report (a JSON object)";
    in.close();
    j["comm_algorithm"] = {{"all_reduce", chosen},
                           {"reason", reason},
                           {"all_reduces", count},
                           {"ring_seconds", ring},
                           {"tree_seconds", tree}};
    std::ofstream out(report);
    out << j.dump(2) << "\n";
    if (!out)
      return module.emitError()
             << "--merak-comm-algorithm: cannot write report=" << report;
    return success();
  }
};

} // namespace

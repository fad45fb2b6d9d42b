//===- merak-translate.cpp - translations out of the merak dialect --------===//
//
// mlir-translate with Merak's translations: `--merak-to-rank-program`
// writes a partitioned module as the rank-program file merak-exec runs;
// `--merak-to-plan-summary` summarizes it as JSON for `merak report`.
//
//===----------------------------------------------------------------------===//

#include "merak/Target/RankProgram/PlanSummary.h"
#include "merak/Target/RankProgram/RankProgramLowering.h"

#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"

int main(int argc, char **argv) {
  merak::runtime::registerToRankProgramTranslation();
  merak::runtime::registerToPlanSummaryTranslation();
  return mlir::failed(mlir::mlirTranslateMain(
      argc, argv, "merak-translate: translations out of the merak dialect\n"));
}

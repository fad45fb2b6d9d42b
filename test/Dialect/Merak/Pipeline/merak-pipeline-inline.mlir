// Tests --merak-pipeline-inline: the driver's calls replaced by the bodies
// of the stage functions, so that merak-exec can run @pipeline_step (the
// equivalence with @train_step is checked in pipeline-equivalence.test).
// RUN: merak-opt %S/Inputs/mlp8.mlir --merak-train="optimizer=sgd lr=0.1" --merak-pipeline-partition="pp=2" --merak-pipeline-outline --merak-pipeline-inline | FileCheck %s
// RUN: not merak-opt %S/Inputs/mlp8.mlir --merak-pipeline-inline="func=nothing" 2>&1 | FileCheck %s --check-prefix=MISSING

// CHECK-LABEL: func.func @pipeline_step(
// CHECK-NOT: call
// CHECK: merak.linear %arg14, %arg0, %arg7 {merak.id = 0 : i64, merak.stage = 0 : i64}
// CHECK: merak.cross_entropy {{.*}}merak.stage = 1 : i64
// CHECK: merak.cross_entropy_backward
// The tied weight's gradient: the two stages' parts summed, then updated
// once per owner.
// CHECK: %[[SUM:.*]] = merak.add %{{.*}}, %{{.*}} : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
// CHECK: merak.sgd_update %arg0, %[[SUM]], {{.*}}merak.stage = 0 : i64
// CHECK: merak.sgd_update %arg0, %[[SUM]], {{.*}}merak.stage = 1 : i64
// CHECK: return
// CHECK-LABEL: func.func @stage0_forward

// MISSING: error: no @nothing to inline into

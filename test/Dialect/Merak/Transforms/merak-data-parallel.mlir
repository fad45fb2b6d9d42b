// Tests --merak-data-parallel on the training step of a one-layer
// transformer: inputs split along the batch over dp, everything else
// replicated; ZeRO stages split optimizer state (stage 1 and 2) and
// parameters (stage 3) over dp and run the optimizer on the shards.
// RUN: merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-data-parallel="dp=2" | FileCheck %s
// RUN: merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-data-parallel="dp=2 zero=1" | FileCheck %s --check-prefix=ZERO1
// RUN: merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-data-parallel="dp=2 zero=2" | FileCheck %s --check-prefix=ZERO2
// RUN: merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-data-parallel="dp=2 zero=3" | FileCheck %s --check-prefix=ZERO3
// RUN: not merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-data-parallel="dp=4" 2>&1 | FileCheck %s --check-prefix=BATCH
// RUN: not merak-opt %S/Inputs/tiny-transformer.mlir --merak-train="optimizer=adamw lr=0.01" --merak-data-parallel="dp=2 zero=4" 2>&1 | FileCheck %s --check-prefix=STAGE

// CHECK: mesh.mesh @mesh(shape = 2) {merak.axes = ["dp"]}
// CHECK-LABEL: func.func @train_step
// The two inputs (tokens, labels) are split along dimension 0.
// CHECK-DAG: mesh.shard %arg12 to <@mesh, {{\[\[}}0]]> : tensor<2x6xi64>
// CHECK-DAG: mesh.shard %arg13 to <@mesh, {{\[\[}}0]]> : tensor<2x6xi64>
// CHECK-DAG: mesh.shard %arg0 to <@mesh, {{\[\[}}]]> : tensor<8x4xf32>
// CHECK-DAG: mesh.shard %arg14 to <@mesh, {{\[\[}}]]> : tensor<8x4xf32>
// CHECK-NOT: annotate_for_users

// Stage 1: state split along its first divisible dimension; the update's
// gradient is first made whole (all-reduce), then sliced.
// ZERO1-DAG: mesh.shard %arg14 to <@mesh, {{\[\[}}0]]> : tensor<8x4xf32>
// ZERO1-DAG: mesh.shard %arg0 to <@mesh, {{\[\[}}]]> : tensor<8x4xf32>
// ZERO1: %[[G:.*]] = mesh.shard %{{.*}} to <@mesh, {{\[\[}}]]> annotate_for_users : tensor<8x4xf32>
// ZERO1: %[[P:.*]], %[[M:.*]], %[[V:.*]] = merak.adamw_update %{{.*}}, %[[G]],
// ZERO1: mesh.shard %[[V]] to <@mesh, {{\[\[}}0]]> : tensor<8x4xf32>
// ZERO1: mesh.shard %[[M]] to <@mesh, {{\[\[}}0]]> : tensor<8x4xf32>
// ZERO1: mesh.shard %[[P]] to <@mesh, {{\[\[}}0]]> : tensor<8x4xf32>

// Stage 2: no whole gradient; the partitioner reduce-scatters it.
// ZERO2-DAG: mesh.shard %arg14 to <@mesh, {{\[\[}}0]]> : tensor<8x4xf32>
// ZERO2-NOT: annotate_for_users
// ZERO2: %[[P:.*]], %{{.*}}, %{{.*}} = merak.adamw_update
// ZERO2: mesh.shard %[[P]] to <@mesh, {{\[\[}}0]]> : tensor<8x4xf32>

// Stage 3: parameters split too, and every use but the update reads a
// whole (gathered) copy.
// ZERO3-DAG: %[[W:.*]] = mesh.shard %arg0 to <@mesh, {{\[\[}}0]]> : tensor<8x4xf32>
// ZERO3-DAG: %[[WG:.*]] = mesh.shard %[[W]] to <@mesh, {{\[\[}}]]> annotate_for_users : tensor<8x4xf32>
// ZERO3-DAG: merak.embedding %[[WG]]

// BATCH: error: input "tokens" of type 'tensor<2x6xi64>': batch dimension 0 is not divisible by dp=4
// STAGE: error: zero must be 0, 1, 2 or 3, got 4

// Tests --merak-pipeline-outline: one function per stage and phase, values
// between them tagged merak.value, weight gradients as merak.grad results,
// the tied weight updated on both of its stages with the summed gradient,
// the recompute and forward-keep functions, and the one-micro-batch driver.
// RUN: merak-opt %S/Inputs/mlp8.mlir --merak-train="optimizer=sgd lr=0.1" --merak-pipeline-partition="pp=2" --merak-recompute="recompute=full recompute-ratio=0.5" --merak-pipeline-outline | FileCheck %s
// RUN: merak-opt %S/Inputs/shared-bias.mlir --merak-train --merak-pipeline-partition="pp=4" --merak-pipeline-outline="driver=false" | FileCheck %s --check-prefix=RELAY
// RUN: not merak-opt %S/Inputs/mlp8.mlir --merak-train --merak-pipeline-outline 2>&1 | FileCheck %s --check-prefix=NO-PARTITION

// The driver runs one micro-batch: every forward in stage order, then
// recompute, backward-input and backward-weight from the last stage down,
// then the optimizers; the tied weight's two partial gradients are summed
// and both owners update it.
// CHECK-LABEL: func.func @pipeline_step(%arg0: tensor<16x16xf32> {merak.param = "w0", merak.tied = array<i64: 0, 1>}
// CHECK: %[[F0:.*]]:3 = call @stage0_forward(%arg14, %arg0, %arg7,
// CHECK: %[[F1:.*]]:6 = call @stage1_forward(%[[F0]]#0, %arg4,
// CHECK: %[[B1:.*]]:5 = call @stage1_backward_input(%[[F1]]#0, %arg15, %arg0,
// CHECK: %[[W1:.*]]:7 = call @stage1_backward_weight(%[[B1]]#0, %[[F1]]#1,
// CHECK: %[[R0:.*]]:3 = call @stage0_recompute(%[[F0]]#1,
// CHECK: %[[B0:.*]] = call @stage0_backward_input(%[[B1]]#4)
// CHECK: %[[W0:.*]]:8 = call @stage0_backward_weight(%[[F0]]#0, %[[B0]], %arg3, %[[R0]]#0,
// CHECK: %[[TIED:.*]] = merak.add %[[W1]]#0, %[[W0]]#0
// CHECK: %[[O0:.*]]:8 = call @stage0_optimizer(%[[TIED]], %arg0, %arg16, %arg17,
// CHECK: %[[O1:.*]]:7 = call @stage1_optimizer(%[[TIED]], %arg0, %arg16, %arg17,
// CHECK: return %[[F1]]#5, %[[O0]]#0, %[[O0]]#1,

// Stage 0 sends value 0 and keeps two checkpoints for its recomputation.
// CHECK-LABEL: func.func @stage0_forward(%arg0: tensor<4x16xf32> {merak.input = "x"}, %arg1: tensor<16x16xf32> {merak.param = "w0", merak.tied = array<i64: 0, 1>}
// CHECK-SAME: -> (tensor<4x16xf32> {merak.value = 0 : i64}, tensor<4x16xf32> {merak.value = 12 : i64}, tensor<4x16xf32> {merak.value = 14 : i64})
// CHECK-SAME: attributes {merak.phase = "forward", merak.rank = 0 : i64, merak.stage = 0 : i64}
// The same forward, also returning what the recomputation would.
// CHECK-LABEL: func.func @stage0_forward_keep
// CHECK-SAME: -> (tensor<4x16xf32> {merak.value = 0 : i64}, tensor<4x16xf32> {merak.value = 12 : i64}, tensor<4x16xf32> {merak.value = 14 : i64}, tensor<4x16xf32> {merak.value = 13 : i64}, tensor<4x16xf32> {merak.value = 15 : i64}, tensor<4x16xf32> {merak.value = 16 : i64})
// CHECK-SAME: merak.phase = "forward_keep"
// CHECK-LABEL: func.func @stage0_recompute(%arg0: tensor<4x16xf32> {merak.value = 12 : i64}
// CHECK-SAME: -> (tensor<4x16xf32> {merak.value = 13 : i64}, tensor<4x16xf32> {merak.value = 15 : i64}, tensor<4x16xf32> {merak.value = 16 : i64})
// CHECK: merak.linear %arg0, %arg1, %arg2 {merak.recompute_of = 4 : i64, merak.stage = 0 : i64}
// Stage 0 has no earlier stage: its backward-input only hands the gradient
// it receives to its weight gradients.
// CHECK-LABEL: func.func @stage0_backward_input(%arg0: tensor<4x16xf32> {merak.value = 10 : i64}) -> (tensor<4x16xf32> {merak.value = 11 : i64})
// CHECK-LABEL: func.func @stage0_backward_weight
// CHECK-SAME: -> (tensor<16x16xf32> {merak.grad = "w0"}, tensor<16x16xf32> {merak.grad = "w1"}, tensor<16x16xf32> {merak.grad = "w2"}, tensor<16x16xf32> {merak.grad = "w3"}, tensor<16xf32> {merak.grad = "b0"}
// CHECK-LABEL: func.func @stage0_optimizer(%arg0: tensor<16x16xf32> {merak.grad = "w0"}, %arg1: tensor<16x16xf32> {merak.param = "w0", merak.tied = array<i64: 0, 1>}, %arg2: tensor<f32> {merak.lr}, %arg3: tensor<i64> {merak.step}
// CHECK-SAME: -> (tensor<16x16xf32> {merak.update_arg = 1 : i64}
// CHECK: merak.sgd_update %arg1, %arg0, %arg0, %arg2, %arg3 {{.*}}merak.stage = 0 : i64, merak.tied = array<i64: 0, 1>
// CHECK-LABEL: func.func @stage1_forward(%arg0: tensor<4x16xf32> {merak.value = 0 : i64}
// CHECK-SAME: tensor<f32> {merak.loss})
// CHECK: merak.cross_entropy
// CHECK-LABEL: func.func @stage1_backward_input
// CHECK-SAME: tensor<4x16xf32> {merak.value = 10 : i64})
// CHECK: merak.cross_entropy_backward
// CHECK-LABEL: func.func @stage1_backward_weight
// CHECK-SAME: -> (tensor<16x16xf32> {merak.grad = "w0"}, tensor<16x16xf32> {merak.grad = "w4"}
// CHECK-LABEL: func.func @stage1_optimizer(%arg0: tensor<16x16xf32> {merak.grad = "w0"}, %arg1: tensor<16x16xf32> {merak.param = "w0", merak.tied = array<i64: 0, 1>}
// CHECK: merak.sgd_update %arg1, %arg0, %arg0, %arg2, %arg3 {{.*}}merak.stage = 1 : i64, merak.tied = array<i64: 0, 1>

// A bias computed on stage 0 and added on every stage is passed along:
// each stage's forward receives it from the one before and returns it for
// the next (a new id per hop); its gradient comes back the same way.
// RELAY-NOT: @pipeline_step
// RELAY-LABEL: func.func @stage0_forward
// RELAY-SAME: -> (tensor<4x16xf32> {merak.value = 0 : i64}, tensor<4x16xf32> {merak.value = [[BIAS0:[0-9]+]] : i64})
// RELAY-LABEL: func.func @stage0_backward_input
// RELAY-SAME: %arg1: tensor<4x16xf32> {merak.value = [[DBIAS0:[0-9]+]] : i64}
// RELAY: func.func @stage1_forward(%arg0: tensor<4x16xf32> {merak.value = 0 : i64}, %arg1: tensor<16x16xf32> {merak.param = "w1"}, %arg2: tensor<4x16xf32> {merak.value = [[BIAS0]] : i64})
// RELAY-SAME: -> (tensor<4x16xf32> {merak.value = {{[0-9]+}} : i64}, tensor<4x16xf32> {merak.value = [[BIAS1:[0-9]+]] : i64}
// RELAY: func.func @stage1_backward_input
// RELAY-SAME: -> ({{.*}}tensor<4x16xf32> {merak.value = [[DBIAS0]] : i64})
// RELAY: func.func @stage2_forward({{.*}}%arg2: tensor<4x16xf32> {merak.value = [[BIAS1]] : i64})
// RELAY-SAME: -> (tensor<4x16xf32> {merak.value = {{[0-9]+}} : i64}, tensor<4x16xf32> {merak.value = [[BIAS2:[0-9]+]] : i64}
// RELAY: func.func @stage3_forward({{.*}}%arg2: tensor<4x16xf32> {merak.value = [[BIAS2]] : i64}

// NO-PARTITION: error: no merak.pipeline; run --merak-pipeline-partition first

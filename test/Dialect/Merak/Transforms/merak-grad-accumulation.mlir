// Tests --merak-grad-accumulation: inputs grow by the number of
// micro-batches, the body runs once per slice, losses and gradients are
// averaged, buffer updates chain from one micro-batch to the next.
// RUN: merak-opt %s -split-input-file --merak-autodiff --merak-grad-accumulation="microbatches=2" -verify-diagnostics | FileCheck %s
// RUN: merak-opt %s -split-input-file --merak-train="optimizer=sgd lr=0.1 microbatches=2" -verify-diagnostics | FileCheck %s --check-prefix=TRAIN
// RUN: not merak-opt %s -split-input-file --merak-train="optimizer=sgd lr=0.1 microbatches=0" 2>&1 | FileCheck %s --check-prefix=ZERO
// ZERO: error: microbatches must be >= 1, got 0

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[W:.*]]: tensor<3xf32> {merak.param = "w"}, %[[R:.*]]: tensor<3xf32> {merak.buffer = "r"}, %[[X:.*]]: tensor<4x3xf32> {merak.input = "x"})
// CHECK-SAME: -> (tensor<f32> {merak.loss}, tensor<3xf32> {merak.grad = "w"}, tensor<3xf32> {merak.update_arg = 1 : i64})
// CHECK: %[[X0:.*]] = merak.slice %[[X]] {dim = 0 : i64, end = 2 : i64, merak.microbatch = 0 : i64, start = 0 : i64}
// CHECK: merak.mul %[[X0]], %[[W]] {merak.id = 0 : i64, merak.microbatch = 0 : i64}
// CHECK: %[[R0:.*]] = merak.add %[[R]], %{{.*}} {merak.id = {{[0-9]+}} : i64, merak.microbatch = 0 : i64}
// CHECK: %[[X1:.*]] = merak.slice %[[X]] {dim = 0 : i64, end = 4 : i64, merak.microbatch = 1 : i64, start = 2 : i64}
// CHECK: merak.mul %[[X1]], %[[W]] {merak.id = 0 : i64, merak.microbatch = 1 : i64}
// CHECK: %[[R1:.*]] = merak.add %[[R0]], %{{.*}} {merak.id = {{[0-9]+}} : i64, merak.microbatch = 1 : i64}
// CHECK: %[[LS:.*]] = merak.add %[[L0:.*]], %[[L1:.*]] : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK: %[[GS:.*]] = merak.add %{{.*}}, %{{.*}} : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
// CHECK: %[[HALF:.*]] = merak.constant dense<5.000000e-01> : tensor<f32>
// CHECK: %[[L:.*]] = merak.mul %[[LS]], %[[HALF]]
// CHECK: %[[G:.*]] = merak.mul %[[GS]], %{{.*}}
// CHECK: return %[[L]], %[[G]], %[[R1]]

// TRAIN-LABEL: func.func @train_step
// TRAIN-SAME: %{{.*}}: tensor<4x3xf32> {merak.input = "x"}
// TRAIN: merak.sgd_update
func.func @forward(%w: tensor<3xf32> {merak.param = "w"},
                   %r: tensor<3xf32> {merak.buffer = "r"},
                   %x: tensor<2x3xf32> {merak.input = "x"})
    -> (tensor<f32>, tensor<3xf32> {merak.buffer_update = "r"}) {
  %0 = merak.mul %x, %w : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %1 = merak.reduce_mean %0 {dims = array<i64>} : (tensor<2x3xf32>) -> tensor<f32>
  %2 = merak.reduce_mean %x {dims = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<3xf32>
  %3 = merak.add %r, %2 : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return %1, %3 : tensor<f32>, tensor<3xf32>
}

// -----

// expected-error @+1 {{input "s" has rank 0 and cannot be split into micro-batches}}
func.func @forward(%w: tensor<f32> {merak.param = "w"}, %s: tensor<f32> {merak.input = "s"}) -> tensor<f32> {
  %0 = merak.mul %w, %s : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %0 : tensor<f32>
}

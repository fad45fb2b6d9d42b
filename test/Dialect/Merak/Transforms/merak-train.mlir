// Tests the --merak-train pipeline: autodiff then optimizer then clean-ups,
// on a small MLP; @forward stays for evaluation.
// RUN: merak-opt %s --merak-train="optimizer=adamw lr=3e-4 weight-decay=0.1" | FileCheck %s
// RUN: merak-opt %s --merak-train="optimizer=sgd lr=0.1 momentum=0.9 nesterov=true" | FileCheck %s --check-prefix=SGD
// RUN: merak-opt %s --merak-train="optimizer=adamw lr=3e-4 precision=bf16" | FileCheck %s --check-prefix=BF16
// RUN: merak-opt %s --merak-train="optimizer=sgd lr=0.1 precision=fp16" | FileCheck %s --check-prefix=FP16
// RUN: merak-opt %s --merak-train="optimizer=sgd lr=0.1 precision=fp16 loss-scale=none" | FileCheck %s --check-prefix=NOSCALE
// RUN: not merak-opt %s --merak-train="precision=fp8" 2>&1 | FileCheck %s --check-prefix=BADP
// BF16: merak.linear {{.*}}bf16
// BF16: func.func @train_step
// float16 scales the loss dynamically by default: the backward starts from
// the scale argument, the gradients are checked (the sum of g * 0) and
// unscaled (times 1 / scale) before the update.
// FP16-LABEL: func.func @train_step
// FP16-SAME: %[[S:arg[0-9]+]]: tensor<f32> {merak.loss_scale = {dynamic = true, init = 6.553600e+04 : f64, window = 2000 : i64}}
// FP16-SAME: tensor<f32> {merak.nonfinite_grads}
// FP16: merak.linear {{.*}}xf16>
// FP16: merak.cross_entropy_backward %[[S]],
// FP16: %[[ZERO:.*]] = merak.mul %[[G:[0-9]+]], %{{[0-9]+}}
// FP16: merak.reduce_sum %[[ZERO]]
// FP16: %[[INV:[0-9]+]] = merak.div %{{[0-9]+}}, %[[S]]
// FP16: %[[U:[0-9]+]] = merak.mul %[[G]], %[[INV]]
// FP16: merak.sgd_update %arg0, %[[U]]
// NOSCALE-LABEL: func.func @train_step
// NOSCALE-NOT: merak.loss_scale
// NOSCALE-NOT: merak.nonfinite_grads
// NOSCALE: merak.linear {{.*}}xf16>
// BADP: error: --merak-train: precision must be fp32, bf16 or fp16, got 'fp8'

// CHECK-LABEL: func.func @forward
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: {merak.opt_state = "fc1.weight/exp_avg"}
// CHECK-SAME: {merak.opt_state = "fc2.weight/exp_avg_sq"}
// CHECK-SAME: {merak.lr}
// CHECK-SAME: {merak.step}
// CHECK-SAME: merak.optimizer = {beta1 = {{.*}}, name = "adamw", weight_decay = 1.000000e-01 : f64}
// CHECK: merak.linear
// CHECK: merak.relu
// CHECK: merak.linear
// CHECK: merak.cross_entropy
// CHECK: merak.cross_entropy_backward
// CHECK: merak.where
// CHECK-COUNT-2: merak.adamw_update
// CHECK: return

// SGD-LABEL: func.func @train_step
// SGD-SAME: {merak.opt_state = "fc1.weight/momentum_buffer"}
// SGD-COUNT-2: merak.sgd_update {{.*}} {dampening = 0.000000e+00 : f64, momentum = 9.000000e-01 : f64, nesterov = true
func.func @forward(%w1: tensor<16x8xf32> {merak.param = "fc1.weight"},
                   %w2: tensor<4x16xf32> {merak.param = "fc2.weight"},
                   %x: tensor<2x8xf32> {merak.input = "x"},
                   %t: tensor<2xi64> {merak.input = "t"}) -> (tensor<2x4xf32>, tensor<f32>) {
  %0 = merak.linear %x, %w1 : (tensor<2x8xf32>, tensor<16x8xf32>) -> tensor<2x16xf32>
  %1 = merak.relu %0 : tensor<2x16xf32>
  %2 = merak.linear %1, %w2 : (tensor<2x16xf32>, tensor<4x16xf32>) -> tensor<2x4xf32>
  %3 = merak.cross_entropy %2, %t : (tensor<2x4xf32>, tensor<2xi64>) -> tensor<f32>
  return %2, %3 : tensor<2x4xf32>, tensor<f32>
}

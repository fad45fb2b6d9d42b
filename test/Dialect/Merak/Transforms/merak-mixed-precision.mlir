// Tests --merak-mixed-precision: matrix products compute in the low type,
// norms, softmax and losses in float32, other ops in the widest type of
// their tensor operands (a one-element constant following them), results in
// their original types.
// RUN: merak-opt %s --merak-mixed-precision="compute=bf16" | FileCheck %s
// RUN: merak-opt %s --merak-mixed-precision="compute=fp16" | FileCheck %s --check-prefix=FP16
// RUN: merak-opt %s --merak-mixed-precision="compute=fp32" | FileCheck %s --check-prefix=FP32
// RUN: not merak-opt %s --merak-mixed-precision="compute=fp8" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: merak-opt %s --merak-mixed-precision="compute=fp32 loss-scale=512" | FileCheck %s --check-prefix=STATIC
// RUN: merak-opt %s --merak-mixed-precision="compute=bf16 loss-scale=dynamic loss-scale-init=1024 loss-scale-window=10" | FileCheck %s --check-prefix=DYNAMIC
// RUN: not merak-opt %s --merak-mixed-precision="compute=fp16 loss-scale=0" 2>&1 | FileCheck %s --check-prefix=BADSCALE
// RUN: not merak-opt %s --merak-mixed-precision="compute=fp16 loss-scale-window=0" 2>&1 | FileCheck %s --check-prefix=BADWINDOW
// RUN: not merak-opt %s --merak-mixed-precision="compute=fp16 master=bf16" 2>&1 | FileCheck %s --check-prefix=BADMASTER
// RUN: merak-opt %S/Inputs/mixed-precision-attention.mlir --merak-mixed-precision="compute=bf16" | FileCheck %s --check-prefix=ATTENTION

// Masked attention computes in bf16; its FlashAttention form's log-sum-exp
// stays f32, the probabilities of the other form take bf16.
// ATTENTION: merak.masked_attention {{.*}} -> (tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>)
// ATTENTION: merak.masked_attention {{.*}} -> (tensor<2x4x8x16xbf16>, tensor<2x4x8x8xbf16>)
// Loss scaling is recorded on the forward for --merak-autodiff: fp16's
// default is dynamic (FP16 below), bf16's and fp32's none (CHECK, FP32).
// STATIC: func.func @forward{{.*}} attributes {merak.loss_scale = {dynamic = false, init = 5.120000e+02 : f64, window = 2000 : i64}}
// DYNAMIC: func.func @forward{{.*}} attributes {merak.loss_scale = {dynamic = true, init = 1.024000e+03 : f64, window = 10 : i64}}
// BADSCALE: error: --merak-mixed-precision: loss-scale must be dynamic, none or a positive number, got '0'
// BADWINDOW: error: --merak-mixed-precision: loss-scale-window must be at least 1, got 0
// BADMASTER: error: --merak-mixed-precision: master must be fp32

// CHECK-NOT: merak.loss_scale
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[X:.*]]: tensor<2x8xf32> {merak.input = "x"}, %[[W:.*]]: tensor<8x8xf32> {merak.param = "w"}, %[[G:.*]]: tensor<8xf32> {merak.param = "g"}, %[[T:.*]]: tensor<2xi64> {merak.input = "t"})
// CHECK-DAG: %[[XB:.*]] = merak.cast %[[X]] : tensor<2x8xf32> -> tensor<2x8xbf16>
// CHECK-DAG: %[[WB:.*]] = merak.cast %[[W]] : tensor<8x8xf32> -> tensor<8x8xbf16>
// CHECK: %[[H:.*]] = merak.linear %[[XB]], %[[WB]] : (tensor<2x8xbf16>, tensor<8x8xbf16>) -> tensor<2x8xbf16>
//   gelu of a bfloat16 tensor stays bfloat16; so does its product with a number
// CHECK: %[[A:.*]] = merak.gelu %[[H]] : tensor<2x8xbf16>
// CHECK: %[[HALF:.*]] = merak.cast %{{.*}} : tensor<f32> -> tensor<bf16>
// CHECK: %[[S:.*]] = merak.mul %[[A]], %[[HALF]] : (tensor<2x8xbf16>, tensor<bf16>) -> tensor<2x8xbf16>
//   the residual add widens to float32
// CHECK: %[[SF:.*]] = merak.cast %[[S]] : tensor<2x8xbf16> -> tensor<2x8xf32>
// CHECK: %[[R:.*]] = merak.add %[[X]], %[[SF]] : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK: %[[N:.*]] = merak.layer_norm %[[R]] weight %[[G]] {{.*}}-> tensor<2x8xf32>
// CHECK: %[[NB:.*]] = merak.cast %[[N]] : tensor<2x8xf32> -> tensor<2x8xbf16>
// CHECK: %[[L:.*]] = merak.linear %[[NB]], %{{.*}} -> tensor<2x8xbf16>
// CHECK: %[[LF:.*]] = merak.cast %[[L]] : tensor<2x8xbf16> -> tensor<2x8xf32>
// CHECK: %[[LOSS:.*]] = merak.cross_entropy %[[LF]], %[[T]] : (tensor<2x8xf32>, tensor<2xi64>) -> tensor<f32>
//   a float result returns in its original type
// CHECK: %[[OUT:.*]] = merak.cast %[[S]] : tensor<2x8xbf16> -> tensor<2x8xf32>
// CHECK: return %[[LOSS]], %[[OUT]] : tensor<f32>, tensor<2x8xf32>

// FP16: func.func @forward{{.*}} attributes {merak.loss_scale = {dynamic = true, init = 6.553600e+04 : f64, window = 2000 : i64}}
// FP16: merak.linear {{.*}} -> tensor<2x8xf16>
// FP32-NOT: merak.cast
// FP32-NOT: merak.loss_scale
// BAD: error: --merak-mixed-precision: compute must be bf16, fp16 or fp32, got 'fp8'

func.func @forward(%x: tensor<2x8xf32> {merak.input = "x"},
                   %w: tensor<8x8xf32> {merak.param = "w"},
                   %g: tensor<8xf32> {merak.param = "g"},
                   %t: tensor<2xi64> {merak.input = "t"})
    -> (tensor<f32>, tensor<2x8xf32>) {
  %h = merak.linear %x, %w : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  %a = merak.gelu %h : tensor<2x8xf32>
  %half = merak.constant dense<0.5> : tensor<f32>
  %s = merak.mul %a, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %r = merak.add %x, %s : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %n = "merak.layer_norm"(%r, %g) <{eps = 1.0e-5 : f64, normalized_rank = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>}> : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %l = merak.linear %n, %w : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  %loss = merak.cross_entropy %l, %t : (tensor<2x8xf32>, tensor<2xi64>) -> tensor<f32>
  return %loss, %s : tensor<f32>, tensor<2x8xf32>
}

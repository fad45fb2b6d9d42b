// RUN: merak-exec %s --print-program | FileCheck %s

// The rank program of a small step: value numbers, release points after
// each value's last use, views, and results written into dying operands.
// The parameter and its momentum are written in place, after the loss.

// CHECK-LABEL: program @train_step: 14 values, 7 instructions, 1 constants, planned peak
// CHECK-SAME: , arena 128 B
// CHECK-NEXT:    %0 = param "w" : 4x3xf32 (updated by result 1)
// CHECK-NEXT:    %1 = opt_state "w/momentum_buffer" : 4x3xf32 (updated by result 2)
// CHECK-NEXT:    %2 = input "x" : 2x3xf32
// CHECK-NEXT:    %3 = lr "lr" : f32
// CHECK-NEXT:    %4 = step "step" : i64
// CHECK-NEXT:    %8 = constant : f32
// CHECK-NEXT:    #0 %5 = linear %2, %0, - : 2x4xf32
// CHECK-NEXT:    #1 %6 = tanh %5 : 2x4xf32 {%6 in-place %5} release %5
// CHECK-NEXT:    #2 %7 = reduce_sum %6 : f32
// CHECK-NEXT:    #3 %9 = mul %6, %8 : 2x4xf32 {%9 in-place %6} release %6, %8
// CHECK-NEXT:    #4 %10 = permute %9 : 4x2xf32 {%10 view of %9} release %9
// CHECK-NEXT:    #5 %11 = matmul %10, %2 : 4x3xf32 release %2, %10
// CHECK-NEXT:    #6 %12, %13 = sgd_update %0, %11, %1, %3, %4 : 4x3xf32, 4x3xf32 {%12 in-place %0} {%13 in-place %1} release %0, %1, %3, %4, %11
// CHECK-NEXT:    return %7 (loss), %12 (updates %0), %13 (updates %1)

func.func @train_step(%w: tensor<4x3xf32> {merak.param = "w"},
                      %m: tensor<4x3xf32> {merak.opt_state = "w/momentum_buffer"},
                      %x: tensor<2x3xf32> {merak.input = "x"},
                      %lr: tensor<f32> {merak.lr}, %step: tensor<i64> {merak.step})
    -> (tensor<f32> {merak.loss}, tensor<4x3xf32> {merak.update_arg = 0 : i64},
        tensor<4x3xf32> {merak.update_arg = 1 : i64}) {
  %y = merak.linear %x, %w : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>
  %t = merak.tanh %y : tensor<2x4xf32>
  %l = merak.reduce_sum %t {dims = array<i64>} : (tensor<2x4xf32>) -> tensor<f32>
  %c = merak.constant dense<2.0> : tensor<f32>
  %g = merak.mul %t, %c : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  %gt = merak.permute %g {permutation = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %dw = merak.matmul %gt, %x : (tensor<4x2xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  %nw, %nm = merak.sgd_update %w, %dw, %m, %lr, %step {dampening = 0.0 : f64, momentum = 0.9 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>, tensor<i64>) -> (tensor<4x3xf32>, tensor<4x3xf32>)
  return %l, %nw, %nm : tensor<f32>, tensor<4x3xf32>, tensor<4x3xf32>
}

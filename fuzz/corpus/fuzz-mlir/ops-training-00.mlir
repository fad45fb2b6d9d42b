// Round trip of the backward ops and the training ops (dropout mask,
// optimizer updates), and the verifiers of index_backward and slice_backward.
// RUN: merak-opt %s -split-input-file -verify-diagnostics | merak-opt | FileCheck %s

// CHECK-LABEL: func.func @backward
func.func @backward(%g: tensor<2x8xf32>, %x: tensor<2x8xf32>, %w: tensor<8xf32>, %gi: tensor<2x3x8xf32>,
                    %idx: tensor<2x3xi64>, %gc: tensor<1x4x6x6xf32>, %xc: tensor<1x3x8x8xf32>,
                    %wc: tensor<4x3x3x3xf32>, %gp: tensor<1x3x4x4xf32>, %one: tensor<f32>,
                    %logits: tensor<2x5xf32>, %t: tensor<2xi64>, %gs: tensor<2x2xf32>) {
  // CHECK: merak.gelu_backward %{{.*}}, %{{.*}} {approximate = #merak.gelu<tanh>} : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %0 = merak.gelu_backward %g, %x {approximate = #merak.gelu<tanh>} : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  // CHECK: merak.softmax_backward %{{.*}}, %{{.*}} {dim = 1 : i64} : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %sb = merak.softmax_backward %g, %x {dim = 1 : i64} : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  // CHECK: merak.layer_norm_backward %{{.*}}, %{{.*}} weight %{{.*}} bias %{{.*}} {eps = 1.000000e-05 : f64, normalized_rank = 1 : i64}
  %1:3 = merak.layer_norm_backward %g, %x weight %w bias %w {eps = 1.0e-5 : f64, normalized_rank = 1 : i64} : (tensor<2x8xf32>, tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>)
  // CHECK: merak.batch_norm_backward
  %2:3 = merak.batch_norm_backward %g, %x, %w, %w, %w {eps = 1.0e-5 : f64, training = true} : (tensor<2x8xf32>, tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>)
  // CHECK: merak.index_backward %{{.*}}, %{{.*}} {dim = 0 : i64, dim_size = 10 : i64, padding_idx = 0 : i64} : (tensor<2x3x8xf32>, tensor<2x3xi64>) -> tensor<10x8xf32>
  %3 = merak.index_backward %gi, %idx {dim = 0 : i64, dim_size = 10 : i64, padding_idx = 0 : i64} : (tensor<2x3x8xf32>, tensor<2x3xi64>) -> tensor<10x8xf32>
  // CHECK: merak.slice_backward %{{.*}} {dim = 1 : i64, dim_size = 5 : i64, end = 5 : i64, start = 1 : i64, step = 2 : i64} : (tensor<2x2xf32>) -> tensor<2x5xf32>
  %4 = merak.slice_backward %gs {dim = 1 : i64, start = 1 : i64, end = 5 : i64, step = 2 : i64, dim_size = 5 : i64} : (tensor<2x2xf32>) -> tensor<2x5xf32>
  // CHECK: merak.conv2d_backward
  %5:3 = merak.conv2d_backward %gc, %xc, %wc {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x4x6x6xf32>, tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>)
  // CHECK: merak.max_pool2d_backward
  %6 = merak.max_pool2d_backward %gp, %xc {dilation = array<i64: 1, 1>, kernel = array<i64: 2, 2>, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x3x4x4xf32>, tensor<1x3x8x8xf32>) -> tensor<1x3x8x8xf32>
  // CHECK: merak.avg_pool2d_backward
  %7 = merak.avg_pool2d_backward %gp, %xc {kernel = array<i64: 2, 2>, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x3x4x4xf32>, tensor<1x3x8x8xf32>) -> tensor<1x3x8x8xf32>
  // CHECK: merak.adaptive_avg_pool2d_backward
  %8 = merak.adaptive_avg_pool2d_backward %gp, %xc : (tensor<1x3x4x4xf32>, tensor<1x3x8x8xf32>) -> tensor<1x3x8x8xf32>
  // CHECK: merak.cross_entropy_backward %{{.*}}, %{{.*}}, %{{.*}} {label_smoothing = 1.000000e-01 : f64} : (tensor<f32>, tensor<2x5xf32>, tensor<2xi64>) -> tensor<2x5xf32>
  %9 = merak.cross_entropy_backward %one, %logits, %t {label_smoothing = 0.1 : f64} : (tensor<f32>, tensor<2x5xf32>, tensor<2xi64>) -> tensor<2x5xf32>
  return
}


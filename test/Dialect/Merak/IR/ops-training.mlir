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

// -----

// CHECK-LABEL: func.func @training
func.func @training(%p: tensor<4xf32>, %g: tensor<4xf32>, %m: tensor<4xf32>, %v: tensor<4xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // CHECK: merak.dropout_mask %{{.*}} {p = 2.500000e-01 : f64} : tensor<4xf32>
  %0 = merak.dropout_mask %p {p = 0.25 : f64} : tensor<4xf32>
  // CHECK: merak.sgd_update
  %1:2 = merak.sgd_update %p, %g, %m, %lr, %step {dampening = 0.0 : f64, momentum = 0.9 : f64, nesterov = true, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>)
  // CHECK: merak.adamw_update
  %2:3 = merak.adamw_update %p, %g, %m, %v, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @index_backward_shape(%g: tensor<2x3x8xf32>, %idx: tensor<2x3xi64>) {
  // expected-error @+1 {{'merak.index_backward' op result must be 'tensor<10x8xf32>'}}
  %0 = merak.index_backward %g, %idx {dim = 0 : i64, dim_size = 10 : i64} : (tensor<2x3x8xf32>, tensor<2x3xi64>) -> tensor<10x9xf32>
  return
}

// -----

func.func @slice_backward_count(%g: tensor<2x3xf32>) {
  // expected-error @+1 {{'merak.slice_backward' op slice [1, 5) step 2 of size 5 does not give 3 elements}}
  %0 = merak.slice_backward %g {dim = 1 : i64, start = 1 : i64, end = 5 : i64, step = 2 : i64, dim_size = 5 : i64} : (tensor<2x3xf32>) -> tensor<2x5xf32>
  return
}

// -----

func.func @sgd_types(%p: tensor<4xf32>, %g: tensor<3xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // expected-error @+1 {{'merak.sgd_update' op failed to verify that all of {param, grad, momentum_buffer, new_param, new_momentum_buffer} have same type}}
  %0:2 = merak.sgd_update %p, %g, %p, %lr, %step {dampening = 0.0 : f64, momentum = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<3xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

// CHECK-LABEL: func.func @attention
func.func @attention(%q: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x6xf32>, %m: tensor<8x8xi1>, %p: tensor<2x4x8x8xf32>, %fm: tensor<2x1x1x8xf32>) {
  // CHECK: merak.masked_attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {divide, scale = 4.000000e+00 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x6xf32>, tensor<2x1x1x8xf32>)
  %a:2 = merak.masked_attention %q, %q, %v, %fm {divide, scale = 4.0 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x6xf32>, tensor<2x1x1x8xf32>) -> (tensor<2x4x8x6xf32>, tensor<2x4x8x8xf32>)
  // CHECK: %{{.*}}, %{{.*}} = merak.masked_attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {scale = 2.500000e-01 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x6xf32>, tensor<8x8xi1>) -> (tensor<2x4x8x6xf32>, tensor<2x4x8x8xf32>)
  %0:2 = merak.masked_attention %q, %q, %v, %m {scale = 0.25 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x6xf32>, tensor<8x8xi1>) -> (tensor<2x4x8x6xf32>, tensor<2x4x8x8xf32>)
  // CHECK: %{{.*}}, %{{.*}}, %{{.*}} = merak.masked_attention_backward %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {scale = 2.500000e-01 : f64}
  %1:3 = merak.masked_attention_backward %v, %q, %q, %v, %m, %p {scale = 0.25 : f64} : (tensor<2x4x8x6xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x6xf32>, tensor<8x8xi1>, tensor<2x4x8x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x6xf32>)
  // The FlashAttention form: the rows' log-sum-exp, and the output back.
  // CHECK: %{{.*}}, %[[LSE:.*]] = merak.masked_attention {{.*}} -> (tensor<2x4x8x6xf32>, tensor<2x4x8xf32>)
  %f:2 = merak.masked_attention %q, %q, %v, %m {scale = 0.25 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x6xf32>, tensor<8x8xi1>) -> (tensor<2x4x8x6xf32>, tensor<2x4x8xf32>)
  // CHECK: merak.masked_attention_backward %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[LSE]], %{{.*}} {scale = 2.500000e-01 : f64} : ({{.*}}, tensor<2x4x8xf32>, tensor<2x4x8x6xf32>) ->
  %fg:3 = merak.masked_attention_backward %v, %q, %q, %v, %m, %f#1, %f#0 {scale = 0.25 : f64} : (tensor<2x4x8x6xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x6xf32>, tensor<8x8xi1>, tensor<2x4x8xf32>, tensor<2x4x8x6xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x6xf32>)
  return
}

// Round trip of merak linear algebra, softmax, normalization, embedding, convolution, pooling and loss ops.
// RUN: merak-opt %s -split-input-file | merak-opt -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x5x8xf32>, %[[W:[a-z0-9]+]]: tensor<16x8xf32>, %[[B:[a-z0-9]+]]: tensor<16xf32>, %[[V:[a-z0-9]+]]: tensor<8xf32>)
func.func @linear(%x: tensor<2x5x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf32>, %v: tensor<8xf32>) {
  // CHECK: merak.linear %[[X]], %[[W]], %[[B]] : (tensor<2x5x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  %0 = merak.linear %x, %w, %b : (tensor<2x5x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  // CHECK: merak.linear %[[X]], %[[W]] : (tensor<2x5x8xf32>, tensor<16x8xf32>) -> tensor<2x5x16xf32>
  %1 = merak.linear %x, %w : (tensor<2x5x8xf32>, tensor<16x8xf32>) -> tensor<2x5x16xf32>
  // CHECK: merak.linear %[[V]], %[[W]], %[[B]] : (tensor<8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<16xf32>
  %2 = merak.linear %v, %w, %b : (tensor<8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<16xf32>
  return
}

// -----

// CHECK-LABEL: func.func @linear_weight_backward
// CHECK-SAME: (%[[G:[a-z0-9]+]]: tensor<2x5x16xf32>, %[[X:[a-z0-9]+]]: tensor<2x5x8xf32>)
func.func @linear_weight_backward(%g: tensor<2x5x16xf32>, %x: tensor<2x5x8xf32>) -> tensor<16x8xf32> {
  // CHECK: merak.linear_weight_backward %[[G]], %[[X]] : (tensor<2x5x16xf32>, tensor<2x5x8xf32>) -> tensor<16x8xf32>
  %0 = merak.linear_weight_backward %g, %x : (tensor<2x5x16xf32>, tensor<2x5x8xf32>) -> tensor<16x8xf32>
  return %0 : tensor<16x8xf32>
}

// -----

// bmm, mm and matmul import as matmul; batch dimensions broadcast.
// CHECK-LABEL: func.func @matmul
// CHECK-SAME: (%[[A:[a-z0-9]+]]: tensor<3x4xf16>, %[[B:[a-z0-9]+]]: tensor<4x5xf16>, %[[C:[a-z0-9]+]]: tensor<2x3x4xf16>, %[[D:[a-z0-9]+]]: tensor<1x8x3x4xf16>, %[[E:[a-z0-9]+]]: tensor<6x1x4x5xf16>)
func.func @matmul(%a: tensor<3x4xf16>, %b: tensor<4x5xf16>, %c: tensor<2x3x4xf16>, %d: tensor<1x8x3x4xf16>, %e: tensor<6x1x4x5xf16>) {
  // CHECK: merak.matmul %[[A]], %[[B]] : (tensor<3x4xf16>, tensor<4x5xf16>) -> tensor<3x5xf16>
  %0 = merak.matmul %a, %b : (tensor<3x4xf16>, tensor<4x5xf16>) -> tensor<3x5xf16>
  // CHECK: merak.matmul %[[C]], %[[B]] : (tensor<2x3x4xf16>, tensor<4x5xf16>) -> tensor<2x3x5xf16>
  %1 = merak.matmul %c, %b : (tensor<2x3x4xf16>, tensor<4x5xf16>) -> tensor<2x3x5xf16>
  // CHECK: merak.matmul %[[D]], %[[E]] : (tensor<1x8x3x4xf16>, tensor<6x1x4x5xf16>) -> tensor<6x8x3x5xf16>
  %2 = merak.matmul %d, %e : (tensor<1x8x3x4xf16>, tensor<6x1x4x5xf16>) -> tensor<6x8x3x5xf16>
  return
}

// -----

// CHECK-LABEL: func.func @softmax
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x8x16xf32>)
func.func @softmax(%x: tensor<2x8x16xf32>) {
  // CHECK: merak.softmax %[[X]] {dim = -1 : i64} : tensor<2x8x16xf32>
  %0 = merak.softmax %x {dim = -1 : i64} : tensor<2x8x16xf32>
  // CHECK: merak.softmax %[[X]] {dim = 1 : i64} : tensor<2x8x16xf32>
  %1 = merak.softmax %x {dim = 1 : i64} : tensor<2x8x16xf32>
  // CHECK: merak.log_softmax %[[X]] {dim = 2 : i64} : tensor<2x8x16xf32>
  %2 = merak.log_softmax %x {dim = 2 : i64} : tensor<2x8x16xf32>
  // CHECK: merak.log_softmax %[[X]] {dim = -3 : i64} : tensor<2x8x16xf32>
  %3 = merak.log_softmax %x {dim = -3 : i64} : tensor<2x8x16xf32>
  return
}

// -----

// CHECK-LABEL: func.func @layer_norm
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x5x8xf32>, %[[W:[a-z0-9]+]]: tensor<8xf32>, %[[B:[a-z0-9]+]]: tensor<8xf32>, %[[W2:[a-z0-9]+]]: tensor<5x8xf32>)
func.func @layer_norm(%x: tensor<2x5x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>, %w2: tensor<5x8xf32>) {
  // CHECK: merak.layer_norm %[[X]] weight %[[W]] bias %[[B]] {eps = 1.000000e-05 : f64, normalized_rank = 1 : i64} : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  %0 = merak.layer_norm %x weight %w bias %b {normalized_rank = 1 : i64, eps = 1.0e-5 : f64} : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  // CHECK: merak.layer_norm %[[X]] weight %[[W]] {eps = 1.000000e-05 : f64, normalized_rank = 1 : i64} : (tensor<2x5x8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  %1 = merak.layer_norm %x weight %w {normalized_rank = 1 : i64, eps = 1.0e-5 : f64} : (tensor<2x5x8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  // CHECK: merak.layer_norm %[[X]] bias %[[B]] {eps = 1.000000e-05 : f64, normalized_rank = 1 : i64} : (tensor<2x5x8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  %2 = merak.layer_norm %x bias %b {normalized_rank = 1 : i64, eps = 1.0e-5 : f64} : (tensor<2x5x8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  // CHECK: merak.layer_norm %[[X]] {eps = 9.9999999999999995E-7 : f64, normalized_rank = 3 : i64} : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  %3 = merak.layer_norm %x {normalized_rank = 3 : i64, eps = 1.0e-6 : f64} : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  // CHECK: merak.layer_norm %[[X]] weight %[[W2]] {eps = 1.000000e-05 : f64, normalized_rank = 2 : i64} : (tensor<2x5x8xf32>, tensor<5x8xf32>) -> tensor<2x5x8xf32>
  %4 = merak.layer_norm %x weight %w2 {normalized_rank = 2 : i64, eps = 1.0e-5 : f64} : (tensor<2x5x8xf32>, tensor<5x8xf32>) -> tensor<2x5x8xf32>
  return
}

// -----

// CHECK-LABEL: func.func @rms_norm
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x5x8xbf16>, %[[W:[a-z0-9]+]]: tensor<8xbf16>)
func.func @rms_norm(%x: tensor<2x5x8xbf16>, %w: tensor<8xbf16>) {
  // CHECK: merak.rms_norm %[[X]] weight %[[W]] {eps = 1.000000e-05 : f64, normalized_rank = 1 : i64} : (tensor<2x5x8xbf16>, tensor<8xbf16>) -> tensor<2x5x8xbf16>
  %0 = merak.rms_norm %x weight %w {normalized_rank = 1 : i64, eps = 1.0e-5 : f64} : (tensor<2x5x8xbf16>, tensor<8xbf16>) -> tensor<2x5x8xbf16>
  // CHECK: merak.rms_norm %[[X]] {eps = 1.000000e-05 : f64, normalized_rank = 2 : i64} : (tensor<2x5x8xbf16>) -> tensor<2x5x8xbf16>
  %1 = merak.rms_norm %x {normalized_rank = 2 : i64, eps = 1.0e-5 : f64} : (tensor<2x5x8xbf16>) -> tensor<2x5x8xbf16>
  return
}

// -----

// Three results: the normalized input and the new running statistics, printed
// with their names.
// CHECK-LABEL: func.func @batch_norm
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<4x3x8x8xf32>, %[[W:[a-z0-9]+]]: tensor<3xf32>, %[[B:[a-z0-9]+]]: tensor<3xf32>, %[[M:[a-z0-9]+]]: tensor<3xf32>, %[[V:[a-z0-9]+]]: tensor<3xf32>, %[[Y:[a-z0-9]+]]: tensor<4x3xf32>)
func.func @batch_norm(%x: tensor<4x3x8x8xf32>, %w: tensor<3xf32>, %b: tensor<3xf32>, %m: tensor<3xf32>, %v: tensor<3xf32>, %y: tensor<4x3xf32>) {
  // CHECK: %result, %new_running_mean, %new_running_var = merak.batch_norm %[[X]], %[[W]], %[[B]], %[[M]], %[[V]] {eps = 1.000000e-05 : f64, momentum = 1.000000e-01 : f64, training = true} : (tensor<4x3x8x8xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<4x3x8x8xf32>, tensor<3xf32>, tensor<3xf32>)
  %0:3 = merak.batch_norm %x, %w, %b, %m, %v {training = true, momentum = 0.1 : f64, eps = 1.0e-5 : f64} : (tensor<4x3x8x8xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<4x3x8x8xf32>, tensor<3xf32>, tensor<3xf32>)
  // CHECK: %result_0, %new_running_mean_1, %new_running_var_2 = merak.batch_norm %[[Y]], %[[W]], %[[B]], %[[M]], %[[V]] {eps = 1.000000e-05 : f64, momentum = 1.000000e-01 : f64, training = false} : (tensor<4x3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<4x3xf32>, tensor<3xf32>, tensor<3xf32>)
  %1:3 = merak.batch_norm %y, %w, %b, %m, %v {training = false, momentum = 0.1 : f64, eps = 1.0e-5 : f64} : (tensor<4x3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<4x3xf32>, tensor<3xf32>, tensor<3xf32>)
  return
}

// -----

// CHECK-LABEL: func.func @embedding
// CHECK-SAME: (%[[W:[a-z0-9]+]]: tensor<100x16xf32>, %[[I:[a-z0-9]+]]: tensor<2x8xi64>, %[[J:[a-z0-9]+]]: tensor<i32>)
func.func @embedding(%w: tensor<100x16xf32>, %i: tensor<2x8xi64>, %j: tensor<i32>) {
  // CHECK: merak.embedding %[[W]], %[[I]] : (tensor<100x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  %0 = merak.embedding %w, %i : (tensor<100x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  // CHECK: merak.embedding %[[W]], %[[I]] {padding_idx = 0 : i64} : (tensor<100x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  %1 = merak.embedding %w, %i {padding_idx = 0 : i64} : (tensor<100x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  // CHECK: merak.embedding %[[W]], %[[J]] {padding_idx = 99 : i64} : (tensor<100x16xf32>, tensor<i32>) -> tensor<16xf32>
  %2 = merak.embedding %w, %j {padding_idx = 99 : i64} : (tensor<100x16xf32>, tensor<i32>) -> tensor<16xf32>
  return
}

// -----

// out = (in + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1.
// CHECK-LABEL: func.func @conv2d
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<1x3x32x32xf32>, %[[W:[a-z0-9]+]]: tensor<16x3x3x3xf32>, %[[B:[a-z0-9]+]]: tensor<16xf32>, %[[D:[a-z0-9]+]]: tensor<2x8x10x10xf32>, %[[DW:[a-z0-9]+]]: tensor<8x1x3x3xf32>, %[[G:[a-z0-9]+]]: tensor<1x4x5x7xf32>, %[[GW:[a-z0-9]+]]: tensor<6x2x1x3xf32>)
func.func @conv2d(%x: tensor<1x3x32x32xf32>, %w: tensor<16x3x3x3xf32>, %b: tensor<16xf32>, %d: tensor<2x8x10x10xf32>, %dw: tensor<8x1x3x3xf32>, %g: tensor<1x4x5x7xf32>, %gw: tensor<6x2x1x3xf32>) {
  // CHECK: merak.conv2d %[[X]], %[[W]], %[[B]] {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x3x32x32xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>) -> tensor<1x16x32x32xf32>
  %0 = merak.conv2d %x, %w, %b {stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x3x32x32xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>) -> tensor<1x16x32x32xf32>
  // CHECK: merak.conv2d %[[X]], %[[W]] {dilation = array<i64: 1, 1>, groups = 1 : i64, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x3x32x32xf32>, tensor<16x3x3x3xf32>) -> tensor<1x16x15x15xf32>
  %1 = merak.conv2d %x, %w {stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x3x32x32xf32>, tensor<16x3x3x3xf32>) -> tensor<1x16x15x15xf32>
  // Depthwise, dilated.
  // CHECK: merak.conv2d %[[D]], %[[DW]] {dilation = array<i64: 2, 2>, groups = 8 : i64, padding = array<i64: 2, 2>, stride = array<i64: 1, 1>} : (tensor<2x8x10x10xf32>, tensor<8x1x3x3xf32>) -> tensor<2x8x10x10xf32>
  %2 = merak.conv2d %d, %dw {stride = array<i64: 1, 1>, padding = array<i64: 2, 2>, dilation = array<i64: 2, 2>, groups = 8 : i64} : (tensor<2x8x10x10xf32>, tensor<8x1x3x3xf32>) -> tensor<2x8x10x10xf32>
  // Two groups, non-square kernel and stride.
  // CHECK: merak.conv2d %[[G]], %[[GW]] {dilation = array<i64: 1, 1>, groups = 2 : i64, padding = array<i64: 0, 0>, stride = array<i64: 1, 2>} : (tensor<1x4x5x7xf32>, tensor<6x2x1x3xf32>) -> tensor<1x6x5x3xf32>
  %3 = merak.conv2d %g, %gw {stride = array<i64: 1, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, groups = 2 : i64} : (tensor<1x4x5x7xf32>, tensor<6x2x1x3xf32>) -> tensor<1x6x5x3xf32>
  return
}

// -----

// The defaults ceil_mode = false and count_include_pad = true are not printed.
// CHECK-LABEL: func.func @pooling
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<1x16x32x32xf32>, %[[Y:[a-z0-9]+]]: tensor<1x1x5x5xf32>, %[[C:[a-z0-9]+]]: tensor<3x8x8xf32>, %[[Z:[a-z0-9]+]]: tensor<1x3x7x7xf32>)
func.func @pooling(%x: tensor<1x16x32x32xf32>, %y: tensor<1x1x5x5xf32>, %c: tensor<3x8x8xf32>, %z: tensor<1x3x7x7xf32>) {
  // CHECK: merak.max_pool2d %[[X]] {dilation = array<i64: 1, 1>, kernel = array<i64: 2, 2>, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x16x32x32xf32>) -> tensor<1x16x16x16xf32>
  %0 = merak.max_pool2d %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x16x32x32xf32>) -> tensor<1x16x16x16xf32>
  // ceil_mode adds a partial window: 5 -> 3 instead of 2.
  // CHECK: merak.max_pool2d %[[Y]] {ceil_mode = true, dilation = array<i64: 1, 1>, kernel = array<i64: 2, 2>, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x1x5x5xf32>) -> tensor<1x1x3x3xf32>
  %1 = merak.max_pool2d %y {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, ceil_mode = true} : (tensor<1x1x5x5xf32>) -> tensor<1x1x3x3xf32>
  // ceil_mode drops a last window that would start in the right padding: 2, not 3.
  // CHECK: merak.max_pool2d %[[Y]] {ceil_mode = true, dilation = array<i64: 1, 1>, kernel = array<i64: 3, 3>, padding = array<i64: 1, 1>, stride = array<i64: 3, 3>} : (tensor<1x1x5x5xf32>) -> tensor<1x1x2x2xf32>
  %2 = merak.max_pool2d %y {kernel = array<i64: 3, 3>, stride = array<i64: 3, 3>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, ceil_mode = true} : (tensor<1x1x5x5xf32>) -> tensor<1x1x2x2xf32>
  // Unbatched CHW input, dilated window.
  // CHECK: merak.max_pool2d %[[C]] {dilation = array<i64: 2, 1>, kernel = array<i64: 3, 2>, padding = array<i64: 0, 0>, stride = array<i64: 1, 2>} : (tensor<3x8x8xf32>) -> tensor<3x4x4xf32>
  %3 = merak.max_pool2d %c {kernel = array<i64: 3, 2>, stride = array<i64: 1, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 2, 1>} : (tensor<3x8x8xf32>) -> tensor<3x4x4xf32>
  // CHECK: merak.avg_pool2d %[[Z]] {kernel = array<i64: 3, 3>, padding = array<i64: 1, 1>, stride = array<i64: 2, 2>} : (tensor<1x3x7x7xf32>) -> tensor<1x3x4x4xf32>
  %4 = merak.avg_pool2d %z {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>} : (tensor<1x3x7x7xf32>) -> tensor<1x3x4x4xf32>
  // CHECK: merak.avg_pool2d %[[Z]] {ceil_mode = true, count_include_pad = false, kernel = array<i64: 2, 2>, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x3x7x7xf32>) -> tensor<1x3x4x4xf32>
  %5 = merak.avg_pool2d %z {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, ceil_mode = true, count_include_pad = false} : (tensor<1x3x7x7xf32>) -> tensor<1x3x4x4xf32>
  // CHECK: merak.avg_pool2d %[[C]] {kernel = array<i64: 2, 2>, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>} : (tensor<3x8x8xf32>) -> tensor<3x4x4xf32>
  %6 = merak.avg_pool2d %c {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, ceil_mode = false, count_include_pad = true} : (tensor<3x8x8xf32>) -> tensor<3x4x4xf32>
  return
}

// -----

// CHECK-LABEL: func.func @adaptive_avg_pool2d
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x512x7x7xf32>, %[[C:[a-z0-9]+]]: tensor<3x8x8xf16>)
func.func @adaptive_avg_pool2d(%x: tensor<2x512x7x7xf32>, %c: tensor<3x8x8xf16>) {
  // CHECK: merak.adaptive_avg_pool2d %[[X]] {output_size = array<i64: 1, 1>} : (tensor<2x512x7x7xf32>) -> tensor<2x512x1x1xf32>
  %0 = merak.adaptive_avg_pool2d %x {output_size = array<i64: 1, 1>} : (tensor<2x512x7x7xf32>) -> tensor<2x512x1x1xf32>
  // Output may be larger than the input.
  // CHECK: merak.adaptive_avg_pool2d %[[C]] {output_size = array<i64: 3, 10>} : (tensor<3x8x8xf16>) -> tensor<3x3x10xf16>
  %1 = merak.adaptive_avg_pool2d %c {output_size = array<i64: 3, 10>} : (tensor<3x8x8xf16>) -> tensor<3x3x10xf16>
  return
}

// -----

// The defaults ignore_index = -100, reduction = mean and label_smoothing = 0.0
// are not printed. mean and sum give a rank-0 result, none gives [N].
// CHECK-LABEL: func.func @cross_entropy
// CHECK-SAME: (%[[L:[a-z0-9]+]]: tensor<8x10xf32>, %[[T:[a-z0-9]+]]: tensor<8xi64>, %[[T32:[a-z0-9]+]]: tensor<8xi32>)
func.func @cross_entropy(%l: tensor<8x10xf32>, %t: tensor<8xi64>, %t32: tensor<8xi32>) {
  // CHECK: merak.cross_entropy %[[L]], %[[T]] : (tensor<8x10xf32>, tensor<8xi64>) -> tensor<f32>
  %0 = merak.cross_entropy %l, %t : (tensor<8x10xf32>, tensor<8xi64>) -> tensor<f32>
  // CHECK: merak.cross_entropy %[[L]], %[[T]] {reduction = #merak.reduction<none>} : (tensor<8x10xf32>, tensor<8xi64>) -> tensor<8xf32>
  %1 = merak.cross_entropy %l, %t {reduction = #merak.reduction<none>} : (tensor<8x10xf32>, tensor<8xi64>) -> tensor<8xf32>
  // CHECK: merak.cross_entropy %[[L]], %[[T32]] {ignore_index = 0 : i64, label_smoothing = 1.000000e-01 : f64, reduction = #merak.reduction<sum>} : (tensor<8x10xf32>, tensor<8xi32>) -> tensor<f32>
  %2 = merak.cross_entropy %l, %t32 {ignore_index = 0 : i64, reduction = #merak.reduction<sum>, label_smoothing = 0.1 : f64} : (tensor<8x10xf32>, tensor<8xi32>) -> tensor<f32>
  // CHECK: merak.cross_entropy %[[L]], %[[T]] : (tensor<8x10xf32>, tensor<8xi64>) -> tensor<f32>
  %3 = merak.cross_entropy %l, %t {ignore_index = -100 : i64, reduction = #merak.reduction<mean>, label_smoothing = 0.0 : f64} : (tensor<8x10xf32>, tensor<8xi64>) -> tensor<f32>
  return
}


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


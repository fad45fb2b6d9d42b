
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



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


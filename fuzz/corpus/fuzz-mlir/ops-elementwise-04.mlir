
// CHECK-LABEL: func.func @cast
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x3xf32>, %[[B:[a-z0-9]+]]: tensor<4xi1>)
func.func @cast(%x: tensor<2x3xf32>, %b: tensor<4xi1>) {
  // CHECK: merak.cast %[[X]] : tensor<2x3xf32> -> tensor<2x3xbf16>
  %0 = merak.cast %x : tensor<2x3xf32> -> tensor<2x3xbf16>
  // CHECK: merak.cast %[[X]] : tensor<2x3xf32> -> tensor<2x3xi64>
  %1 = merak.cast %x : tensor<2x3xf32> -> tensor<2x3xi64>
  // CHECK: merak.cast %[[B]] : tensor<4xi1> -> tensor<4xf16>
  %2 = merak.cast %b : tensor<4xi1> -> tensor<4xf16>
  // CHECK: merak.cast %[[X]] : tensor<2x3xf32> -> tensor<2x3xf32>
  %3 = merak.cast %x : tensor<2x3xf32> -> tensor<2x3xf32>
  return
}



// The default approximation `none` is not printed.
// CHECK-LABEL: func.func @gelu
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x3xf32>)
func.func @gelu(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  // CHECK: merak.gelu %[[X]] : tensor<2x3xf32>
  %0 = merak.gelu %x : tensor<2x3xf32>
  // CHECK: merak.gelu %[[X]] {approximate = #merak.gelu<tanh>} : tensor<2x3xf32>
  %1 = merak.gelu %x {approximate = #merak.gelu<tanh>} : tensor<2x3xf32>
  // CHECK: merak.gelu %[[X]] : tensor<2x3xf32>
  %2 = merak.gelu %x {approximate = #merak.gelu<none>} : tensor<2x3xf32>
  return %0, %1, %2 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}


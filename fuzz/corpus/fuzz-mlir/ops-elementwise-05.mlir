
// CHECK-LABEL: func.func @dropout
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x3xf32>)
func.func @dropout(%x: tensor<2x3xf32>) {
  // CHECK: merak.dropout %[[X]] {p = 1.000000e-01 : f64, training = true} : tensor<2x3xf32>
  %0 = merak.dropout %x {p = 0.1 : f64, training = true} : tensor<2x3xf32>
  // CHECK: merak.dropout %[[X]] {p = 0.000000e+00 : f64, training = false} : tensor<2x3xf32>
  %1 = merak.dropout %x {p = 0.0 : f64, training = false} : tensor<2x3xf32>
  // CHECK: merak.dropout %[[X]] {p = 1.000000e+00 : f64, training = true} : tensor<2x3xf32>
  %2 = merak.dropout %x {p = 1.0 : f64, training = true} : tensor<2x3xf32>
  return
}


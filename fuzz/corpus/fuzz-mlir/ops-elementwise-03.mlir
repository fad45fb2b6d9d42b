
// CHECK-LABEL: func.func @clamp
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x3xf32>, %[[I:[a-z0-9]+]]: tensor<5xi32>)
func.func @clamp(%x: tensor<2x3xf32>, %i: tensor<5xi32>) {
  // CHECK: merak.clamp %[[X]] {max = 6.000000e+00 : f64, min = 0.000000e+00 : f64} : tensor<2x3xf32>
  %0 = merak.clamp %x {min = 0.0 : f64, max = 6.0 : f64} : tensor<2x3xf32>
  // CHECK: merak.clamp %[[X]] {min = -1.000000e+00 : f64} : tensor<2x3xf32>
  %1 = merak.clamp %x {min = -1.0 : f64} : tensor<2x3xf32>
  // CHECK: merak.clamp %[[I]] {max = 1.000000e+01 : f64} : tensor<5xi32>
  %2 = merak.clamp %i {max = 10.0 : f64} : tensor<5xi32>
  return
}


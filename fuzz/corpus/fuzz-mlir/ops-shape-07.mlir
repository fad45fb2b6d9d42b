
// The default padding value 0.0 is not printed.
// CHECK-LABEL: func.func @pad
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<1x3x4x4xf32>, %[[I:[a-z0-9]+]]: tensor<5xi64>)
func.func @pad(%x: tensor<1x3x4x4xf32>, %i: tensor<5xi64>) {
  // CHECK: merak.pad %[[X]] {high = array<i64: 0, 0, 1, 2>, low = array<i64: 0, 0, 1, 0>} : (tensor<1x3x4x4xf32>) -> tensor<1x3x6x6xf32>
  %0 = merak.pad %x {low = array<i64: 0, 0, 1, 0>, high = array<i64: 0, 0, 1, 2>} : (tensor<1x3x4x4xf32>) -> tensor<1x3x6x6xf32>
  // CHECK: merak.pad %[[I]] {high = array<i64: 0>, low = array<i64: 3>, value = -1.000000e+00 : f64} : (tensor<5xi64>) -> tensor<8xi64>
  %1 = merak.pad %i {low = array<i64: 3>, high = array<i64: 0>, value = -1.0 : f64} : (tensor<5xi64>) -> tensor<8xi64>
  return
}


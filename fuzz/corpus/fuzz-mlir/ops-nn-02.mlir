
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


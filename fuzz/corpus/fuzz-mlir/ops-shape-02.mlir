
// transpose, permute and .t import as permute.
// CHECK-LABEL: func.func @permute
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x3x4xbf16>, %[[M:[a-z0-9]+]]: tensor<5x7xi1>)
func.func @permute(%x: tensor<2x3x4xbf16>, %m: tensor<5x7xi1>) {
  // CHECK: merak.permute %[[X]] {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xbf16>) -> tensor<4x2x3xbf16>
  %0 = merak.permute %x {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xbf16>) -> tensor<4x2x3xbf16>
  // CHECK: merak.permute %[[X]] {permutation = array<i64: 0, 2, 1>} : (tensor<2x3x4xbf16>) -> tensor<2x4x3xbf16>
  %1 = merak.permute %x {permutation = array<i64: 0, 2, 1>} : (tensor<2x3x4xbf16>) -> tensor<2x4x3xbf16>
  // CHECK: merak.permute %[[M]] {permutation = array<i64: 1, 0>} : (tensor<5x7xi1>) -> tensor<7x5xi1>
  %2 = merak.permute %m {permutation = array<i64: 1, 0>} : (tensor<5x7xi1>) -> tensor<7x5xi1>
  return
}


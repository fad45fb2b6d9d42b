
// The default diagonal 0 is not printed.
// CHECK-LABEL: func.func @triangles
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x4x4xf32>, %[[B:[a-z0-9]+]]: tensor<3x5xi1>)
func.func @triangles(%x: tensor<2x4x4xf32>, %b: tensor<3x5xi1>) {
  // CHECK: merak.tril %[[X]] : tensor<2x4x4xf32>
  %0 = merak.tril %x : tensor<2x4x4xf32>
  // CHECK: merak.tril %[[B]] {diagonal = -1 : i64} : tensor<3x5xi1>
  %1 = merak.tril %b {diagonal = -1 : i64} : tensor<3x5xi1>
  // CHECK: merak.triu %[[X]] {diagonal = 1 : i64} : tensor<2x4x4xf32>
  %2 = merak.triu %x {diagonal = 1 : i64} : tensor<2x4x4xf32>
  // CHECK: merak.triu %[[X]] : tensor<2x4x4xf32>
  %3 = merak.triu %x {diagonal = 0 : i64} : tensor<2x4x4xf32>
  return
}


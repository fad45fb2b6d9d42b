
// bmm, mm and matmul import as matmul; batch dimensions broadcast.
// CHECK-LABEL: func.func @matmul
// CHECK-SAME: (%[[A:[a-z0-9]+]]: tensor<3x4xf16>, %[[B:[a-z0-9]+]]: tensor<4x5xf16>, %[[C:[a-z0-9]+]]: tensor<2x3x4xf16>, %[[D:[a-z0-9]+]]: tensor<1x8x3x4xf16>, %[[E:[a-z0-9]+]]: tensor<6x1x4x5xf16>)
func.func @matmul(%a: tensor<3x4xf16>, %b: tensor<4x5xf16>, %c: tensor<2x3x4xf16>, %d: tensor<1x8x3x4xf16>, %e: tensor<6x1x4x5xf16>) {
  // CHECK: merak.matmul %[[A]], %[[B]] : (tensor<3x4xf16>, tensor<4x5xf16>) -> tensor<3x5xf16>
  %0 = merak.matmul %a, %b : (tensor<3x4xf16>, tensor<4x5xf16>) -> tensor<3x5xf16>
  // CHECK: merak.matmul %[[C]], %[[B]] : (tensor<2x3x4xf16>, tensor<4x5xf16>) -> tensor<2x3x5xf16>
  %1 = merak.matmul %c, %b : (tensor<2x3x4xf16>, tensor<4x5xf16>) -> tensor<2x3x5xf16>
  // CHECK: merak.matmul %[[D]], %[[E]] : (tensor<1x8x3x4xf16>, tensor<6x1x4x5xf16>) -> tensor<6x8x3x5xf16>
  %2 = merak.matmul %d, %e : (tensor<1x8x3x4xf16>, tensor<6x1x4x5xf16>) -> tensor<6x8x3x5xf16>
  return
}


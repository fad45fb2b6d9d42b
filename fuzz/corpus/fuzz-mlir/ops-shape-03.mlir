
// split and chunk import as one slice per piece. The default step 1 is not
// printed; a negative dim counts from the end.
// CHECK-LABEL: func.func @slice
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<4x10xf32>)
func.func @slice(%x: tensor<4x10xf32>) {
  // CHECK: merak.slice %[[X]] {dim = 1 : i64, end = 5 : i64, start = 0 : i64} : (tensor<4x10xf32>) -> tensor<4x5xf32>
  %0 = merak.slice %x {dim = 1 : i64, start = 0 : i64, end = 5 : i64} : (tensor<4x10xf32>) -> tensor<4x5xf32>
  // CHECK: merak.slice %[[X]] {dim = -1 : i64, end = 10 : i64, start = 5 : i64} : (tensor<4x10xf32>) -> tensor<4x5xf32>
  %1 = merak.slice %x {dim = -1 : i64, start = 5 : i64, end = 10 : i64, step = 1 : i64} : (tensor<4x10xf32>) -> tensor<4x5xf32>
  // 1, 4, 7: three elements.
  // CHECK: merak.slice %[[X]] {dim = 1 : i64, end = 8 : i64, start = 1 : i64, step = 3 : i64} : (tensor<4x10xf32>) -> tensor<4x3xf32>
  %2 = merak.slice %x {dim = 1 : i64, start = 1 : i64, end = 8 : i64, step = 3 : i64} : (tensor<4x10xf32>) -> tensor<4x3xf32>
  // CHECK: merak.slice %[[X]] {dim = 0 : i64, end = 2 : i64, start = 2 : i64} : (tensor<4x10xf32>) -> tensor<0x10xf32>
  %3 = merak.slice %x {dim = 0 : i64, start = 2 : i64, end = 2 : i64} : (tensor<4x10xf32>) -> tensor<0x10xf32>
  // CHECK: merak.slice %[[X]] {dim = 0 : i64, end = 4 : i64, start = 0 : i64, step = 2 : i64} : (tensor<4x10xf32>) -> tensor<2x10xf32>
  %4 = merak.slice %x {dim = 0 : i64, start = 0 : i64, end = 4 : i64, step = 2 : i64} : (tensor<4x10xf32>) -> tensor<2x10xf32>
  return
}


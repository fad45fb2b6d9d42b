
// Integer-tensor indexing along one dimension: input.shape[:dim] +
// indices.shape + input.shape[dim+1:].
// CHECK-LABEL: func.func @index
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<5x6x7xf32>, %[[I:[a-z0-9]+]]: tensor<2x3xi64>, %[[J:[a-z0-9]+]]: tensor<4xi32>, %[[S:[a-z0-9]+]]: tensor<i64>)
func.func @index(%x: tensor<5x6x7xf32>, %i: tensor<2x3xi64>, %j: tensor<4xi32>, %s: tensor<i64>) {
  // CHECK: merak.index %[[X]], %[[I]] {dim = 1 : i64} : (tensor<5x6x7xf32>, tensor<2x3xi64>) -> tensor<5x2x3x7xf32>
  %0 = merak.index %x, %i {dim = 1 : i64} : (tensor<5x6x7xf32>, tensor<2x3xi64>) -> tensor<5x2x3x7xf32>
  // CHECK: merak.index %[[X]], %[[J]] {dim = -1 : i64} : (tensor<5x6x7xf32>, tensor<4xi32>) -> tensor<5x6x4xf32>
  %1 = merak.index %x, %j {dim = -1 : i64} : (tensor<5x6x7xf32>, tensor<4xi32>) -> tensor<5x6x4xf32>
  // CHECK: merak.index %[[X]], %[[S]] {dim = 0 : i64} : (tensor<5x6x7xf32>, tensor<i64>) -> tensor<6x7xf32>
  %2 = merak.index %x, %s {dim = 0 : i64} : (tensor<5x6x7xf32>, tensor<i64>) -> tensor<6x7xf32>
  return
}



// Empty dims reduce over every dimension; the default keepdim = false is not
// printed.
// CHECK-LABEL: func.func @reductions
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x3x4xf32>, %[[I:[a-z0-9]+]]: tensor<5x6xi64>)
func.func @reductions(%x: tensor<2x3x4xf32>, %i: tensor<5x6xi64>) {
  // CHECK: merak.reduce_sum %[[X]] {dims = array<i64: 1>} : (tensor<2x3x4xf32>) -> tensor<2x4xf32>
  %0 = merak.reduce_sum %x {dims = array<i64: 1>} : (tensor<2x3x4xf32>) -> tensor<2x4xf32>
  // CHECK: merak.reduce_sum %[[X]] {dims = array<i64>} : (tensor<2x3x4xf32>) -> tensor<f32>
  %1 = merak.reduce_sum %x {dims = array<i64>} : (tensor<2x3x4xf32>) -> tensor<f32>
  // CHECK: merak.reduce_sum %[[I]] {dims = array<i64>, keepdim = true} : (tensor<5x6xi64>) -> tensor<1x1xi64>
  %2 = merak.reduce_sum %i {dims = array<i64>, keepdim = true} : (tensor<5x6xi64>) -> tensor<1x1xi64>
  // CHECK: merak.reduce_mean %[[X]] {dims = array<i64: -1>, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<2x3x1xf32>
  %3 = merak.reduce_mean %x {dims = array<i64: -1>, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<2x3x1xf32>
  // CHECK: merak.reduce_mean %[[X]] {dims = array<i64: 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3xf32>
  %4 = merak.reduce_mean %x {dims = array<i64: 0, 2>, keepdim = false} : (tensor<2x3x4xf32>) -> tensor<3xf32>
  // CHECK: merak.reduce_max %[[X]] {dims = array<i64: 2, 0>, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<1x3x1xf32>
  %5 = merak.reduce_max %x {dims = array<i64: 2, 0>, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<1x3x1xf32>
  // CHECK: merak.reduce_max %[[I]] {dims = array<i64: 1>} : (tensor<5x6xi64>) -> tensor<5xi64>
  %6 = merak.reduce_max %i {dims = array<i64: 1>} : (tensor<5x6xi64>) -> tensor<5xi64>
  return
}


// masked_fill(x, mask, v) imports as where(mask, v, x); all three broadcast.
// CHECK-LABEL: func.func @where
// CHECK-SAME: (%[[M:[a-z0-9]+]]: tensor<1x1x4x4xi1>, %[[X:[a-z0-9]+]]: tensor<2x8x4x4xf32>, %[[V:[a-z0-9]+]]: tensor<f32>, %[[C:[a-z0-9]+]]: tensor<3xi1>)
func.func @where(%m: tensor<1x1x4x4xi1>, %x: tensor<2x8x4x4xf32>, %v: tensor<f32>, %c: tensor<3xi1>) {
  // CHECK: merak.where %[[M]], %[[V]], %[[X]] : (tensor<1x1x4x4xi1>, tensor<f32>, tensor<2x8x4x4xf32>) -> tensor<2x8x4x4xf32>
  %0 = merak.where %m, %v, %x : (tensor<1x1x4x4xi1>, tensor<f32>, tensor<2x8x4x4xf32>) -> tensor<2x8x4x4xf32>
  // The condition alone may set the result shape.
  // CHECK: merak.where %[[C]], %[[V]], %[[V]] : (tensor<3xi1>, tensor<f32>, tensor<f32>) -> tensor<3xf32>
  %1 = merak.where %c, %v, %v : (tensor<3xi1>, tensor<f32>, tensor<f32>) -> tensor<3xf32>
  // CHECK: merak.where %[[C]], %[[C]], %[[C]] : (tensor<3xi1>, tensor<3xi1>, tensor<3xi1>) -> tensor<3xi1>
  %2 = merak.where %c, %c, %c : (tensor<3xi1>, tensor<3xi1>, tensor<3xi1>) -> tensor<3xi1>
  return
}

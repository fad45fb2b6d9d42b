
// Broadcasting aligns shapes from the right; size-1 dimensions stretch, and a
// rank-0 operand broadcasts to anything.
// CHECK-LABEL: func.func @broadcast
// CHECK-SAME: (%[[A:[a-z0-9]+]]: tensor<4x1x3xf32>, %[[B:[a-z0-9]+]]: tensor<5x1xf32>, %[[S:[a-z0-9]+]]: tensor<f32>, %[[V:[a-z0-9]+]]: tensor<3xf32>)
func.func @broadcast(%a: tensor<4x1x3xf32>, %b: tensor<5x1xf32>, %s: tensor<f32>, %v: tensor<3xf32>) {
  // CHECK: merak.add %[[A]], %[[B]] : (tensor<4x1x3xf32>, tensor<5x1xf32>) -> tensor<4x5x3xf32>
  %0 = merak.add %a, %b : (tensor<4x1x3xf32>, tensor<5x1xf32>) -> tensor<4x5x3xf32>
  // CHECK: merak.mul %[[S]], %[[A]] : (tensor<f32>, tensor<4x1x3xf32>) -> tensor<4x1x3xf32>
  %1 = merak.mul %s, %a : (tensor<f32>, tensor<4x1x3xf32>) -> tensor<4x1x3xf32>
  // CHECK: merak.sub %[[V]], %[[B]] : (tensor<3xf32>, tensor<5x1xf32>) -> tensor<5x3xf32>
  %2 = merak.sub %v, %b : (tensor<3xf32>, tensor<5x1xf32>) -> tensor<5x3xf32>
  // CHECK: merak.div %[[S]], %[[S]] : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %3 = merak.div %s, %s : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return
}


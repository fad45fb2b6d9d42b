
// CHECK-LABEL: func.func @binary
// CHECK-SAME: (%[[A:[a-z0-9]+]]: tensor<2x3xf32>, %[[B:[a-z0-9]+]]: tensor<2x3xf32>, %[[I:[a-z0-9]+]]: tensor<4xi64>, %[[J:[a-z0-9]+]]: tensor<4xi64>)
func.func @binary(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>, %i: tensor<4xi64>, %j: tensor<4xi64>) {
  // CHECK: merak.add %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %0 = merak.add %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: merak.sub %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = merak.sub %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: merak.mul %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = merak.mul %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: merak.div %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = merak.div %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: merak.pow %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %4 = merak.pow %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: merak.remainder %[[I]], %[[J]] : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  %5 = merak.remainder %i, %j : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  // CHECK: merak.floor_divide %[[I]], %[[J]] : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  %6 = merak.floor_divide %i, %j : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  // CHECK: merak.minimum %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %7 = merak.minimum %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: merak.maximum %[[I]], %[[J]] : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  %8 = merak.maximum %i, %j : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  return
}


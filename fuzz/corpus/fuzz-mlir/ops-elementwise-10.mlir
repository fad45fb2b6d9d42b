
// CHECK-LABEL: func.func @compare
// CHECK-SAME: (%[[A:[a-z0-9]+]]: tensor<2x3xf32>, %[[B:[a-z0-9]+]]: tensor<3xf32>, %[[I:[a-z0-9]+]]: tensor<4x1xi64>, %[[J:[a-z0-9]+]]: tensor<5xi64>)
func.func @compare(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %i: tensor<4x1xi64>, %j: tensor<5xi64>) {
  // CHECK: merak.compare <eq>, %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %0 = merak.compare <eq>, %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // CHECK: merak.compare <ne>, %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %1 = merak.compare <ne>, %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // CHECK: merak.compare <lt>, %[[I]], %[[J]] : (tensor<4x1xi64>, tensor<5xi64>) -> tensor<4x5xi1>
  %2 = merak.compare <lt>, %i, %j : (tensor<4x1xi64>, tensor<5xi64>) -> tensor<4x5xi1>
  // CHECK: merak.compare <le>, %[[A]], %[[A]] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
  %3 = merak.compare <le>, %a, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
  // CHECK: merak.compare <gt>, %[[J]], %[[J]] : (tensor<5xi64>, tensor<5xi64>) -> tensor<5xi1>
  %4 = merak.compare <gt>, %j, %j : (tensor<5xi64>, tensor<5xi64>) -> tensor<5xi1>
  // CHECK: merak.compare <ge>, %[[B]], %[[A]] : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
  %5 = merak.compare <ge>, %b, %a : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
  return
}



// CHECK-LABEL: func.func @logical
// CHECK-SAME: (%[[P:[a-z0-9]+]]: tensor<2x3xi1>, %[[Q:[a-z0-9]+]]: tensor<3xi1>)
func.func @logical(%p: tensor<2x3xi1>, %q: tensor<3xi1>) {
  // CHECK: merak.and %[[P]], %[[Q]] : (tensor<2x3xi1>, tensor<3xi1>) -> tensor<2x3xi1>
  %0 = merak.and %p, %q : (tensor<2x3xi1>, tensor<3xi1>) -> tensor<2x3xi1>
  // CHECK: merak.or %[[P]], %[[P]] : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  %1 = merak.or %p, %p : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  return
}


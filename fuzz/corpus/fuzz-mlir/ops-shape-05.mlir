
// cat imports as concat; stack as unsqueeze (reshape) then concat.
// CHECK-LABEL: func.func @concat
// CHECK-SAME: (%[[A:[a-z0-9]+]]: tensor<2x3xf32>, %[[B:[a-z0-9]+]]: tensor<2x5xf32>, %[[C:[a-z0-9]+]]: tensor<4x3xf32>)
func.func @concat(%a: tensor<2x3xf32>, %b: tensor<2x5xf32>, %c: tensor<4x3xf32>) {
  // CHECK: merak.concat %[[A]], %[[B]], %[[A]] {dim = 1 : i64} : (tensor<2x3xf32>, tensor<2x5xf32>, tensor<2x3xf32>) -> tensor<2x11xf32>
  %0 = merak.concat %a, %b, %a {dim = 1 : i64} : (tensor<2x3xf32>, tensor<2x5xf32>, tensor<2x3xf32>) -> tensor<2x11xf32>
  // CHECK: merak.concat %[[A]], %[[C]] {dim = -2 : i64} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<6x3xf32>
  %1 = merak.concat %a, %c {dim = -2 : i64} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<6x3xf32>
  // CHECK: merak.concat %[[A]] {dim = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = merak.concat %a {dim = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}


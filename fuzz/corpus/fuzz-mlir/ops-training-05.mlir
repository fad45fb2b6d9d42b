
// CHECK-LABEL: func.func @attention
func.func @attention(%q: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x6xf32>, %m: tensor<8x8xi1>, %p: tensor<2x4x8x8xf32>, %fm: tensor<2x1x1x8xf32>) {
  // CHECK: merak.masked_attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {divide, scale = 4.000000e+00 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x6xf32>, tensor<2x1x1x8xf32>)
  %a:2 = merak.masked_attention %q, %q, %v, %fm {divide, scale = 4.0 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x6xf32>, tensor<2x1x1x8xf32>) -> (tensor<2x4x8x6xf32>, tensor<2x4x8x8xf32>)
  // CHECK: %{{.*}}, %{{.*}} = merak.masked_attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {scale = 2.500000e-01 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x6xf32>, tensor<8x8xi1>) -> (tensor<2x4x8x6xf32>, tensor<2x4x8x8xf32>)
  %0:2 = merak.masked_attention %q, %q, %v, %m {scale = 0.25 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x6xf32>, tensor<8x8xi1>) -> (tensor<2x4x8x6xf32>, tensor<2x4x8x8xf32>)
  // CHECK: %{{.*}}, %{{.*}}, %{{.*}} = merak.masked_attention_backward %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {scale = 2.500000e-01 : f64}
  %1:3 = merak.masked_attention_backward %v, %q, %q, %v, %m, %p {scale = 0.25 : f64} : (tensor<2x4x8x6xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x6xf32>, tensor<8x8xi1>, tensor<2x4x8x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x6xf32>)
  return
}

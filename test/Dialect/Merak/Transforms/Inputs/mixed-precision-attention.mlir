// Input of merak-mixed-precision.mlir: masked attention in both forms.
func.func @forward(%x: tensor<2x4x8x16xf32> {merak.input = "x"},
                   %m: tensor<8x8xi1> {merak.buffer = "mask"})
    -> (tensor<f32>) {
  %a:2 = merak.masked_attention %x, %x, %x, %m {scale = 0.25 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<8x8xi1>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
  %b:2 = merak.masked_attention %a#0, %x, %x, %m {scale = 0.25 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<8x8xi1>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x8xf32>)
  %s = merak.reduce_sum %b#0 {dims = array<i64: 0, 1, 2, 3>} : (tensor<2x4x8x16xf32>) -> tensor<f32>
  return %s : tensor<f32>
}

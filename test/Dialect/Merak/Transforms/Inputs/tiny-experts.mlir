// Input of merak-expert-parallel.mlir: the expert part of a capacity-based
// mixture-of-experts layer as the importer makes it. Tokens `x`
// [B=4, E=4, C=3, D=8], already dispatched per batch row, go to the
// experts as [E, B * C, D] through a batched product with each expert's
// weight [E, D, H], and come back as [B, E, C, D]; a router-like linear
// (`gate.weight`) is an ordinary parameter.
module {
  func.func @forward(%arg0: tensor<4x8x16xf32> {merak.param = "experts.up"}, %arg1: tensor<4x16x8xf32> {merak.param = "experts.down"}, %arg2: tensor<8x8xf32> {merak.param = "gate.weight"}, %arg3: tensor<4x4x3x8xf32> {merak.input = "x"}) -> tensor<f32> {
    %0 = merak.linear %arg3, %arg2 : (tensor<4x4x3x8xf32>, tensor<8x8xf32>) -> tensor<4x4x3x8xf32>
    %1 = merak.permute %0 {permutation = array<i64: 1, 0, 2, 3>} : (tensor<4x4x3x8xf32>) -> tensor<4x4x3x8xf32>
    %2 = merak.reshape %1 {shape = array<i64: 4, 12, 8>} : (tensor<4x4x3x8xf32>) -> tensor<4x12x8xf32>
    %3 = merak.matmul %2, %arg0 : (tensor<4x12x8xf32>, tensor<4x8x16xf32>) -> tensor<4x12x16xf32>
    %4 = merak.silu %3 : tensor<4x12x16xf32>
    %5 = merak.matmul %4, %arg1 : (tensor<4x12x16xf32>, tensor<4x16x8xf32>) -> tensor<4x12x8xf32>
    %6 = merak.reshape %5 {shape = array<i64: 4, 4, 3, 8>} : (tensor<4x12x8xf32>) -> tensor<4x4x3x8xf32>
    %7 = merak.permute %6 {permutation = array<i64: 1, 0, 2, 3>} : (tensor<4x4x3x8xf32>) -> tensor<4x4x3x8xf32>
    %8 = merak.mul %7, %7 : (tensor<4x4x3x8xf32>, tensor<4x4x3x8xf32>) -> tensor<4x4x3x8xf32>
    %9 = merak.reduce_mean %8 {dims = array<i64>} : (tensor<4x4x3x8xf32>) -> tensor<f32>
    return %9 : tensor<f32>
  }
}

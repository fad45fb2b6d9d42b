// nn.MultiheadAttention's layout as in fused-qkv-mha.mlir, with the causal
// mask CLIP's text tower passes as attn_mask: an additive [1, T, T] of
// zeros and -inf, broadcast over the merged batch and heads. Used by the
// --merak-split-fused-projections tests.
func.func @forward(%x: tensor<2x4x8xf32> {merak.input = "x"},
                   %w: tensor<24x8xf32> {merak.param = "attn.in_proj_weight"},
                   %b: tensor<24xf32> {merak.param = "attn.in_proj_bias"},
                   %wo: tensor<8x8xf32> {merak.param = "attn.out_proj.weight"},
                   %bo: tensor<8xf32> {merak.param = "attn.out_proj.bias"})
    -> tensor<f32> {
  %mask = merak.constant dense<[[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]]> : tensor<1x4x4xf32>
  %xt = merak.permute %x {permutation = array<i64: 1, 0, 2>} : (tensor<2x4x8xf32>) -> tensor<4x2x8xf32>
  %y = merak.linear %xt, %w, %b : (tensor<4x2x8xf32>, tensor<24x8xf32>, tensor<24xf32>) -> tensor<4x2x24xf32>
  %q = merak.slice %y {dim = 2 : i64, start = 0 : i64, end = 8 : i64} : (tensor<4x2x24xf32>) -> tensor<4x2x8xf32>
  %k = merak.slice %y {dim = 2 : i64, start = 8 : i64, end = 16 : i64} : (tensor<4x2x24xf32>) -> tensor<4x2x8xf32>
  %v = merak.slice %y {dim = 2 : i64, start = 16 : i64, end = 24 : i64} : (tensor<4x2x24xf32>) -> tensor<4x2x8xf32>
  %q3 = merak.reshape %q {shape = array<i64: 4, 4, 4>} : (tensor<4x2x8xf32>) -> tensor<4x4x4xf32>
  %qh = merak.permute %q3 {permutation = array<i64: 1, 0, 2>} : (tensor<4x4x4xf32>) -> tensor<4x4x4xf32>
  %k3 = merak.reshape %k {shape = array<i64: 4, 4, 4>} : (tensor<4x2x8xf32>) -> tensor<4x4x4xf32>
  %kh = merak.permute %k3 {permutation = array<i64: 1, 0, 2>} : (tensor<4x4x4xf32>) -> tensor<4x4x4xf32>
  %v3 = merak.reshape %v {shape = array<i64: 4, 4, 4>} : (tensor<4x2x8xf32>) -> tensor<4x4x4xf32>
  %vh = merak.permute %v3 {permutation = array<i64: 1, 0, 2>} : (tensor<4x4x4xf32>) -> tensor<4x4x4xf32>
  %c = merak.constant dense<2.0> : tensor<f32>
  %qs = merak.div %qh, %c : (tensor<4x4x4xf32>, tensor<f32>) -> tensor<4x4x4xf32>
  %kt = merak.permute %kh {permutation = array<i64: 0, 2, 1>} : (tensor<4x4x4xf32>) -> tensor<4x4x4xf32>
  %s = merak.matmul %qs, %kt : (tensor<4x4x4xf32>, tensor<4x4x4xf32>) -> tensor<4x4x4xf32>
  %sm = merak.add %mask, %s : (tensor<1x4x4xf32>, tensor<4x4x4xf32>) -> tensor<4x4x4xf32>
  %p = merak.softmax %sm {dim = 2 : i64} : tensor<4x4x4xf32>
  %o = merak.matmul %p, %vh : (tensor<4x4x4xf32>, tensor<4x4x4xf32>) -> tensor<4x4x4xf32>
  %ot = merak.permute %o {permutation = array<i64: 1, 0, 2>} : (tensor<4x4x4xf32>) -> tensor<4x4x4xf32>
  %of = merak.reshape %ot {shape = array<i64: 8, 8>} : (tensor<4x4x4xf32>) -> tensor<8x8xf32>
  %a = merak.linear %of, %wo, %bo : (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<8x8xf32>
  %sa = merak.reduce_sum %a {dims = array<i64: 0, 1>} : (tensor<8x8xf32>) -> tensor<f32>
  return %sa : tensor<f32>
}

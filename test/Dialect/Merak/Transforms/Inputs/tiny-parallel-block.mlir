// A one-layer decoder in the shape of GPT-J's, OPT's and BART's code:
// attention and MLP side by side from one layer norm, the query scaled
// before its split into heads, GELU's tanh form written out op by op, and
// a causal LM's shift of the logits (positions 0..4 predict tokens 1..5)
// before the cross-entropy. A second linear pair joined by a residual
// addition is no MLP.
func.func @forward(%wte: tensor<8x4xf32> {merak.param = "wte"},
                   %ln_w: tensor<4xf32> {merak.param = "ln.weight"},
                   %ln_b: tensor<4xf32> {merak.param = "ln.bias"},
                   %wq: tensor<4x4xf32> {merak.param = "attn.q.weight"},
                   %wk: tensor<4x4xf32> {merak.param = "attn.k.weight"},
                   %wv: tensor<4x4xf32> {merak.param = "attn.v.weight"},
                   %wo: tensor<4x4xf32> {merak.param = "attn.o.weight"},
                   %w1: tensor<16x4xf32> {merak.param = "mlp.fc_in.weight"},
                   %w2: tensor<4x16xf32> {merak.param = "mlp.fc_out.weight"},
                   %wa: tensor<4x4xf32> {merak.param = "res.a.weight"},
                   %wb: tensor<4x4xf32> {merak.param = "res.b.weight"},
                   %head: tensor<8x4xf32> {merak.param = "lm_head.weight"},
                   %tokens: tensor<2x6xi64> {merak.input = "tokens"},
                   %labels: tensor<2x6xi64> {merak.input = "labels"})
    -> tensor<f32> {
  %half = merak.constant dense<5.000000e-01> : tensor<f32>
  %one = merak.constant dense<1.000000e+00> : tensor<f32>
  %three = merak.constant dense<3.000000e+00> : tensor<f32>
  %c = merak.constant dense<4.471500e-02> : tensor<f32>
  %k2 = merak.constant dense<0.797884583> : tensor<f32>
  %scale = merak.constant dense<0.707106769> : tensor<f32>
  %x = merak.embedding %wte, %tokens : (tensor<8x4xf32>, tensor<2x6xi64>) -> tensor<2x6x4xf32>
  %h = merak.layer_norm %x weight %ln_w bias %ln_b {eps = 1.0e-05 : f64, normalized_rank = 1 : i64} : (tensor<2x6x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x6x4xf32>
  %q0 = merak.linear %h, %wq : (tensor<2x6x4xf32>, tensor<4x4xf32>) -> tensor<2x6x4xf32>
  %q = merak.mul %q0, %scale : (tensor<2x6x4xf32>, tensor<f32>) -> tensor<2x6x4xf32>
  %k = merak.linear %h, %wk : (tensor<2x6x4xf32>, tensor<4x4xf32>) -> tensor<2x6x4xf32>
  %v = merak.linear %h, %wv : (tensor<2x6x4xf32>, tensor<4x4xf32>) -> tensor<2x6x4xf32>
  %q4 = merak.reshape %q {shape = array<i64: 2, 6, 2, 2>} : (tensor<2x6x4xf32>) -> tensor<2x6x2x2xf32>
  %k4 = merak.reshape %k {shape = array<i64: 2, 6, 2, 2>} : (tensor<2x6x4xf32>) -> tensor<2x6x2x2xf32>
  %v4 = merak.reshape %v {shape = array<i64: 2, 6, 2, 2>} : (tensor<2x6x4xf32>) -> tensor<2x6x2x2xf32>
  %qh = merak.permute %q4 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x6x2x2xf32>) -> tensor<2x2x6x2xf32>
  %kh = merak.permute %k4 {permutation = array<i64: 0, 2, 3, 1>} : (tensor<2x6x2x2xf32>) -> tensor<2x2x2x6xf32>
  %vh = merak.permute %v4 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x6x2x2xf32>) -> tensor<2x2x6x2xf32>
  %s = merak.matmul %qh, %kh : (tensor<2x2x6x2xf32>, tensor<2x2x2x6xf32>) -> tensor<2x2x6x6xf32>
  %p = merak.softmax %s {dim = 3 : i64} : tensor<2x2x6x6xf32>
  %ctx = merak.matmul %p, %vh : (tensor<2x2x6x6xf32>, tensor<2x2x6x2xf32>) -> tensor<2x2x6x2xf32>
  %ct = merak.permute %ctx {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x2x6x2xf32>) -> tensor<2x6x2x2xf32>
  %cm = merak.reshape %ct {shape = array<i64: 2, 6, 4>} : (tensor<2x6x2x2xf32>) -> tensor<2x6x4xf32>
  %o = merak.linear %cm, %wo : (tensor<2x6x4xf32>, tensor<4x4xf32>) -> tensor<2x6x4xf32>
  // 0.5 * f * (1 + tanh(0.79788 * (f + 0.044715 * f^3))), from the same %h.
  %f = merak.linear %h, %w1 : (tensor<2x6x4xf32>, tensor<16x4xf32>) -> tensor<2x6x16xf32>
  %g0 = merak.mul %f, %half : (tensor<2x6x16xf32>, tensor<f32>) -> tensor<2x6x16xf32>
  %g1 = merak.pow %f, %three : (tensor<2x6x16xf32>, tensor<f32>) -> tensor<2x6x16xf32>
  %g2 = merak.mul %g1, %c : (tensor<2x6x16xf32>, tensor<f32>) -> tensor<2x6x16xf32>
  %g3 = merak.add %f, %g2 : (tensor<2x6x16xf32>, tensor<2x6x16xf32>) -> tensor<2x6x16xf32>
  %g4 = merak.mul %g3, %k2 : (tensor<2x6x16xf32>, tensor<f32>) -> tensor<2x6x16xf32>
  %g5 = merak.tanh %g4 : tensor<2x6x16xf32>
  %g6 = merak.add %g5, %one : (tensor<2x6x16xf32>, tensor<f32>) -> tensor<2x6x16xf32>
  %g = merak.mul %g0, %g6 : (tensor<2x6x16xf32>, tensor<2x6x16xf32>) -> tensor<2x6x16xf32>
  %m = merak.linear %g, %w2 : (tensor<2x6x16xf32>, tensor<4x16xf32>) -> tensor<2x6x4xf32>
  %b0 = merak.add %o, %m : (tensor<2x6x4xf32>, tensor<2x6x4xf32>) -> tensor<2x6x4xf32>
  %b = merak.add %b0, %x : (tensor<2x6x4xf32>, tensor<2x6x4xf32>) -> tensor<2x6x4xf32>
  // linear -> residual addition -> linear.
  %ra = merak.linear %b, %wa : (tensor<2x6x4xf32>, tensor<4x4xf32>) -> tensor<2x6x4xf32>
  %rs = merak.add %ra, %b : (tensor<2x6x4xf32>, tensor<2x6x4xf32>) -> tensor<2x6x4xf32>
  %rb = merak.linear %rs, %wb : (tensor<2x6x4xf32>, tensor<4x4xf32>) -> tensor<2x6x4xf32>
  %logits = merak.linear %rb, %head : (tensor<2x6x4xf32>, tensor<8x4xf32>) -> tensor<2x6x8xf32>
  %shifted = merak.slice %logits {dim = 1 : i64, start = 0 : i64, end = 5 : i64} : (tensor<2x6x8xf32>) -> tensor<2x5x8xf32>
  %next = merak.slice %labels {dim = 1 : i64, start = 1 : i64, end = 6 : i64} : (tensor<2x6xi64>) -> tensor<2x5xi64>
  %l2 = merak.reshape %shifted {shape = array<i64: 10, 8>} : (tensor<2x5x8xf32>) -> tensor<10x8xf32>
  %t1 = merak.reshape %next {shape = array<i64: 10>} : (tensor<2x5xi64>) -> tensor<10xi64>
  %loss = merak.cross_entropy %l2, %t1 : (tensor<10x8xf32>, tensor<10xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

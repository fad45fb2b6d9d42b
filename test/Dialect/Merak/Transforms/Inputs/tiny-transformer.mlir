// A one-layer transformer: token embedding, attention with separate q/k/v
// projections split into 2 heads, a GELU MLP, and a language-model head
// whose logits feed the cross-entropy. Shared by the partitioning tests.
func.func @forward(%wte: tensor<8x4xf32> {merak.param = "wte"},
                   %ln_w: tensor<4xf32> {merak.param = "ln.weight"},
                   %ln_b: tensor<4xf32> {merak.param = "ln.bias"},
                   %wq: tensor<4x4xf32> {merak.param = "attn.q.weight"},
                   %wk: tensor<4x4xf32> {merak.param = "attn.k.weight"},
                   %wv: tensor<4x4xf32> {merak.param = "attn.v.weight"},
                   %wo: tensor<4x4xf32> {merak.param = "attn.o.weight"},
                   %w1: tensor<16x4xf32> {merak.param = "mlp.fc1.weight"},
                   %b1: tensor<16xf32> {merak.param = "mlp.fc1.bias"},
                   %w2: tensor<4x16xf32> {merak.param = "mlp.fc2.weight"},
                   %b2: tensor<4xf32> {merak.param = "mlp.fc2.bias"},
                   %head: tensor<8x4xf32> {merak.param = "lm_head.weight"},
                   %tokens: tensor<2x6xi64> {merak.input = "tokens"},
                   %labels: tensor<2x6xi64> {merak.input = "labels"})
    -> tensor<f32> {
  %x = merak.embedding %wte, %tokens : (tensor<8x4xf32>, tensor<2x6xi64>) -> tensor<2x6x4xf32>
  %h = merak.layer_norm %x weight %ln_w bias %ln_b {eps = 1.0e-05 : f64, normalized_rank = 1 : i64} : (tensor<2x6x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x6x4xf32>
  %q = merak.linear %h, %wq : (tensor<2x6x4xf32>, tensor<4x4xf32>) -> tensor<2x6x4xf32>
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
  %c = merak.matmul %p, %vh : (tensor<2x2x6x6xf32>, tensor<2x2x6x2xf32>) -> tensor<2x2x6x2xf32>
  %ct = merak.permute %c {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x2x6x2xf32>) -> tensor<2x6x2x2xf32>
  %cm = merak.reshape %ct {shape = array<i64: 2, 6, 4>} : (tensor<2x6x2x2xf32>) -> tensor<2x6x4xf32>
  %o = merak.linear %cm, %wo : (tensor<2x6x4xf32>, tensor<4x4xf32>) -> tensor<2x6x4xf32>
  %r1 = merak.add %x, %o : (tensor<2x6x4xf32>, tensor<2x6x4xf32>) -> tensor<2x6x4xf32>
  %f1 = merak.linear %r1, %w1, %b1 : (tensor<2x6x4xf32>, tensor<16x4xf32>, tensor<16xf32>) -> tensor<2x6x16xf32>
  %g = merak.gelu %f1 : tensor<2x6x16xf32>
  %f2 = merak.linear %g, %w2, %b2 : (tensor<2x6x16xf32>, tensor<4x16xf32>, tensor<4xf32>) -> tensor<2x6x4xf32>
  %r2 = merak.add %r1, %f2 : (tensor<2x6x4xf32>, tensor<2x6x4xf32>) -> tensor<2x6x4xf32>
  %logits = merak.linear %r2, %head : (tensor<2x6x4xf32>, tensor<8x4xf32>) -> tensor<2x6x8xf32>
  %l2 = merak.reshape %logits {shape = array<i64: 12, 8>} : (tensor<2x6x8xf32>) -> tensor<12x8xf32>
  %t1 = merak.reshape %labels {shape = array<i64: 12>} : (tensor<2x6xi64>) -> tensor<12xi64>
  %loss = merak.cross_entropy %l2, %t1 : (tensor<12x8xf32>, tensor<12xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

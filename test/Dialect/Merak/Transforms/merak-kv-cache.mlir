// Tests --merak-kv-cache on a one-layer, one-head causal language model
// over a window of 4 positions: learned position embeddings, a boolean
// causal mask, the loss on the logits; then two programs it refuses (the
// splits after the first, so the first RUN line expects a failure).
// RUN: not merak-opt %s --split-input-file --merak-kv-cache 2>/dev/null | FileCheck %s
// RUN: not merak-opt %s --split-input-file --merak-kv-cache="input=tokens" 2>&1 | FileCheck %s --check-prefix=INPUT
// RUN: not merak-opt %s --split-input-file --merak-kv-cache="logits=1" 2>&1 | FileCheck %s --check-prefix=LOGITS
// RUN: not merak-opt %s --split-input-file --merak-kv-cache 2>&1 | FileCheck %s --check-prefix=MIX

// The prefill: the forward without the loss and the targets; the logits
// and both caches (the transposed keys [1, 8, 4] and the values [1, 4, 8]).
// CHECK-LABEL: func.func @prefill
// CHECK-SAME: tensor<1x4xi64> {merak.input = "idx"}
// CHECK-NOT: merak.input = "targets"
// CHECK-SAME: -> (tensor<1x4x16xf32>, tensor<1x8x4xf32> {merak.kv_cache = "kv.0"}, tensor<1x4x8xf32> {merak.kv_cache = "kv.1"})
// CHECK-NOT: merak.dropout
// CHECK-NOT: merak.cross_entropy
// CHECK: return
//
// The decode step: one position. The position embedding and the mask are
// read at the position's row; the token's key and value are written into
// the caches and the attention reads them whole.
// CHECK-LABEL: func.func @decode
// CHECK-SAME: %[[TOK:[a-z0-9]+]]: tensor<1x1xi64> {merak.input = "idx"}
// CHECK-SAME: %[[POS:[a-z0-9]+]]: tensor<1xi64> {merak.position}
// CHECK-SAME: %[[K:[a-z0-9]+]]: tensor<1x8x4xf32> {merak.kv_cache = "kv.0"}
// CHECK-SAME: %[[V:[a-z0-9]+]]: tensor<1x4x8xf32> {merak.kv_cache = "kv.1"}
// CHECK-SAME: -> (tensor<1x1x16xf32>, tensor<1x8x4xf32> {merak.kv_cache = "kv.0"}, tensor<1x4x8xf32> {merak.kv_cache = "kv.1"})
// CHECK: %[[PE:.*]] = merak.embedding %{{.*}} : (tensor<4x8xf32>, tensor<4xi64>) -> tensor<4x8xf32>
// CHECK: %[[ROW:.*]] = merak.index %[[PE]], %[[POS]] {dim = 0 : i64} : (tensor<4x8xf32>, tensor<1xi64>) -> tensor<1x8xf32>
// CHECK: merak.add %{{.*}}, %[[ROW]] : (tensor<1x1x8xf32>, tensor<1x8xf32>) -> tensor<1x1x8xf32>
// CHECK: %[[VC:.*]] = merak.update_slice %[[V]], %{{.*}}, %[[POS]] {dim = 1 : i64} : (tensor<1x4x8xf32>, tensor<1x1x8xf32>, tensor<1xi64>) -> tensor<1x4x8xf32>
// CHECK: %[[KT:.*]] = merak.permute %{{.*}} : (tensor<1x1x8xf32>) -> tensor<1x8x1xf32>
// CHECK: %[[KC:.*]] = merak.update_slice %[[K]], %[[KT]], %[[POS]] {dim = 2 : i64} : (tensor<1x8x4xf32>, tensor<1x8x1xf32>, tensor<1xi64>) -> tensor<1x8x4xf32>
// CHECK: %[[S:.*]] = merak.matmul %{{.*}}, %[[KC]] : (tensor<1x1x8xf32>, tensor<1x8x4xf32>) -> tensor<1x1x4xf32>
// CHECK: %[[M:.*]] = merak.index %{{.*}}, %[[POS]] {dim = 0 : i64} : (tensor<4x4xi1>, tensor<1xi64>) -> tensor<1x4xi1>
// CHECK: merak.where %[[M]], %[[S]], %{{.*}} : (tensor<1x4xi1>, tensor<1x1x4xf32>, tensor<f32>) -> tensor<1x1x4xf32>
// CHECK: merak.matmul %{{.*}}, %[[VC]] : (tensor<1x1x4xf32>, tensor<1x4x8xf32>) -> tensor<1x1x8xf32>
// CHECK: return %{{.*}}, %[[KC]], %[[VC]]
// CHECK-NOT: func.func @forward

// INPUT: error: --merak-kv-cache: @forward has no input 'tokens' (its inputs: idx, targets)
// LOGITS: error: --merak-kv-cache: result #1 is 'tensor<f32>', not logits [batch, positions, vocabulary]

func.func @forward(%wte: tensor<16x8xf32> {merak.param = "wte.weight"},
                   %wpe: tensor<4x8xf32> {merak.param = "wpe.weight"},
                   %wq: tensor<8x8xf32> {merak.param = "q.weight"},
                   %wk: tensor<8x8xf32> {merak.param = "k.weight"},
                   %wv: tensor<8x8xf32> {merak.param = "v.weight"},
                   %idx: tensor<1x4xi64> {merak.input = "idx"},
                   %targets: tensor<1x4xi64> {merak.input = "targets"})
    -> (tensor<1x4x16xf32>, tensor<f32> {merak.loss}) {
  %pos = merak.constant dense<[0, 1, 2, 3]> : tensor<4xi64>
  %tok = merak.embedding %wte, %idx : (tensor<16x8xf32>, tensor<1x4xi64>) -> tensor<1x4x8xf32>
  %pe = merak.embedding %wpe, %pos : (tensor<4x8xf32>, tensor<4xi64>) -> tensor<4x8xf32>
  %x0 = merak.add %tok, %pe : (tensor<1x4x8xf32>, tensor<4x8xf32>) -> tensor<1x4x8xf32>
  %x = merak.dropout %x0 {p = 0.1 : f64, training = true} : tensor<1x4x8xf32>
  %q = merak.linear %x, %wq : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
  %k = merak.linear %x, %wk : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
  %v = merak.linear %x, %wv : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
  %kt = merak.permute %k {permutation = array<i64: 0, 2, 1>} : (tensor<1x4x8xf32>) -> tensor<1x8x4xf32>
  %s = merak.matmul %q, %kt : (tensor<1x4x8xf32>, tensor<1x8x4xf32>) -> tensor<1x4x4xf32>
  %mask = merak.constant dense<[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]> : tensor<4x4xi1>
  %ninf = merak.constant dense<0xFF800000> : tensor<f32>
  %sm = merak.where %mask, %s, %ninf : (tensor<4x4xi1>, tensor<1x4x4xf32>, tensor<f32>) -> tensor<1x4x4xf32>
  %p = merak.softmax %sm {dim = 2 : i64} : tensor<1x4x4xf32>
  %y = merak.matmul %p, %v : (tensor<1x4x4xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %logits = merak.linear %y, %wte : (tensor<1x4x8xf32>, tensor<16x8xf32>) -> tensor<1x4x16xf32>
  %flat = merak.reshape %logits {shape = array<i64: 4, 16>} : (tensor<1x4x16xf32>) -> tensor<4x16xf32>
  %t = merak.reshape %targets {shape = array<i64: 4>} : (tensor<1x4xi64>) -> tensor<4xi64>
  %loss = merak.cross_entropy %flat, %t {reduction = #merak.reduction<mean>} : (tensor<4x16xf32>, tensor<4xi64>) -> tensor<f32>
  return %logits, %loss : tensor<1x4x16xf32>, tensor<f32>
}

// -----

// A mean over the positions mixes them: the decode step could not compute
// it from one position.
func.func @forward(%wte: tensor<16x8xf32> {merak.param = "wte.weight"},
                   %idx: tensor<1x4xi64> {merak.input = "idx"})
    -> tensor<1x4x16xf32> {
  %tok = merak.embedding %wte, %idx : (tensor<16x8xf32>, tensor<1x4xi64>) -> tensor<1x4x8xf32>
  // MIX: error: --merak-kv-cache: 'merak.reduce_mean' reduces over the positions it computes
  %m = merak.reduce_mean %tok {dims = array<i64: 1>, keepdim = true} : (tensor<1x4x8xf32>) -> tensor<1x1x8xf32>
  %x = merak.add %tok, %m : (tensor<1x4x8xf32>, tensor<1x1x8xf32>) -> tensor<1x4x8xf32>
  %logits = merak.linear %x, %wte : (tensor<1x4x8xf32>, tensor<16x8xf32>) -> tensor<1x4x16xf32>
  return %logits : tensor<1x4x16xf32>
}

// -----

// No attention: nothing to cache.
func.func @forward(%wte: tensor<16x8xf32> {merak.param = "wte.weight"},
                   %idx: tensor<1x4xi64> {merak.input = "idx"})
    -> tensor<1x4x16xf32> {
  %tok = merak.embedding %wte, %idx : (tensor<16x8xf32>, tensor<1x4xi64>) -> tensor<1x4x8xf32>
  %logits = merak.linear %tok, %wte : (tensor<1x4x8xf32>, tensor<16x8xf32>) -> tensor<1x4x16xf32>
  // MIX: error: --merak-kv-cache: @forward has no attention (no product of queries and keys over the positions): there is nothing to cache
  return %logits : tensor<1x4x16xf32>
}

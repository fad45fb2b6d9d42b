// Round trip of merak constants and elementwise ops (unary, binary, compare, where).
// RUN: merak-opt %s -split-input-file | merak-opt -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @constant
func.func @constant() -> (tensor<2x2xf32>, tensor<3xi64>, tensor<i1>, tensor<2xbf16>, tensor<4xi32>, tensor<f16>, tensor<1xf64>) {
  // CHECK: merak.constant dense<{{\[}}[1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00]]> : tensor<2x2xf32>
  %0 = merak.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>
  // CHECK: merak.constant dense<[0, 1, 2]> : tensor<3xi64>
  %1 = merak.constant dense<[0, 1, 2]> : tensor<3xi64>
  // CHECK: merak.constant dense<true> : tensor<i1>
  %2 = merak.constant dense<true> : tensor<i1>
  // CHECK: merak.constant dense<5.000000e-01> : tensor<2xbf16>
  %3 = merak.constant dense<0.5> : tensor<2xbf16>
  // CHECK: merak.constant dense<-7> : tensor<4xi32>
  %4 = merak.constant dense<-7> : tensor<4xi32>
  // CHECK: merak.constant dense<1.000000e+00> : tensor<f16>
  %5 = merak.constant dense<1.0> : tensor<f16>
  // CHECK: merak.constant dense<2.500000e+00> : tensor<1xf64>
  %6 = merak.constant dense<2.5> : tensor<1xf64>
  return %0, %1, %2, %3, %4, %5, %6 : tensor<2x2xf32>, tensor<3xi64>, tensor<i1>, tensor<2xbf16>, tensor<4xi32>, tensor<f16>, tensor<1xf64>
}

// -----

// CHECK-LABEL: func.func @unary
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x3xf32>, %[[I:[a-z0-9]+]]: tensor<4xi64>, %[[H:[a-z0-9]+]]: tensor<8xbf16>, %[[B:[a-z0-9]+]]: tensor<2x3xi1>, %[[S:[a-z0-9]+]]: tensor<f64>)
func.func @unary(%x: tensor<2x3xf32>, %i: tensor<4xi64>, %h: tensor<8xbf16>, %b: tensor<2x3xi1>, %s: tensor<f64>) {
  // CHECK: merak.neg %[[X]] : tensor<2x3xf32>
  %0 = merak.neg %x : tensor<2x3xf32>
  // CHECK: merak.neg %[[I]] : tensor<4xi64>
  %1 = merak.neg %i : tensor<4xi64>
  // CHECK: merak.abs %[[I]] : tensor<4xi64>
  %2 = merak.abs %i : tensor<4xi64>
  // CHECK: merak.exp %[[X]] : tensor<2x3xf32>
  %3 = merak.exp %x : tensor<2x3xf32>
  // CHECK: merak.log %[[H]] : tensor<8xbf16>
  %4 = merak.log %h : tensor<8xbf16>
  // CHECK: merak.sin %[[X]] : tensor<2x3xf32>
  %5 = merak.sin %x : tensor<2x3xf32>
  // CHECK: merak.cos %[[X]] : tensor<2x3xf32>
  %6 = merak.cos %x : tensor<2x3xf32>
  // CHECK: merak.sqrt %[[S]] : tensor<f64>
  %7 = merak.sqrt %s : tensor<f64>
  // CHECK: merak.rsqrt %[[X]] : tensor<2x3xf32>
  %8 = merak.rsqrt %x : tensor<2x3xf32>
  // CHECK: merak.reciprocal %[[X]] : tensor<2x3xf32>
  %9 = merak.reciprocal %x : tensor<2x3xf32>
  // CHECK: merak.erf %[[X]] : tensor<2x3xf32>
  %10 = merak.erf %x : tensor<2x3xf32>
  // CHECK: merak.tanh %[[H]] : tensor<8xbf16>
  %11 = merak.tanh %h : tensor<8xbf16>
  // CHECK: merak.sigmoid %[[X]] : tensor<2x3xf32>
  %12 = merak.sigmoid %x : tensor<2x3xf32>
  // CHECK: merak.silu %[[X]] : tensor<2x3xf32>
  %13 = merak.silu %x : tensor<2x3xf32>
  // CHECK: merak.relu %[[X]] : tensor<2x3xf32>
  %14 = merak.relu %x : tensor<2x3xf32>
  // CHECK: merak.relu %[[I]] : tensor<4xi64>
  %15 = merak.relu %i : tensor<4xi64>
  // CHECK: merak.not %[[B]] : tensor<2x3xi1>
  %16 = merak.not %b : tensor<2x3xi1>
  return
}

// -----

// The default approximation `none` is not printed.
// CHECK-LABEL: func.func @gelu
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x3xf32>)
func.func @gelu(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  // CHECK: merak.gelu %[[X]] : tensor<2x3xf32>
  %0 = merak.gelu %x : tensor<2x3xf32>
  // CHECK: merak.gelu %[[X]] {approximate = #merak.gelu<tanh>} : tensor<2x3xf32>
  %1 = merak.gelu %x {approximate = #merak.gelu<tanh>} : tensor<2x3xf32>
  // CHECK: merak.gelu %[[X]] : tensor<2x3xf32>
  %2 = merak.gelu %x {approximate = #merak.gelu<none>} : tensor<2x3xf32>
  return %0, %1, %2 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func.func @clamp
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x3xf32>, %[[I:[a-z0-9]+]]: tensor<5xi32>)
func.func @clamp(%x: tensor<2x3xf32>, %i: tensor<5xi32>) {
  // CHECK: merak.clamp %[[X]] {max = 6.000000e+00 : f64, min = 0.000000e+00 : f64} : tensor<2x3xf32>
  %0 = merak.clamp %x {min = 0.0 : f64, max = 6.0 : f64} : tensor<2x3xf32>
  // CHECK: merak.clamp %[[X]] {min = -1.000000e+00 : f64} : tensor<2x3xf32>
  %1 = merak.clamp %x {min = -1.0 : f64} : tensor<2x3xf32>
  // CHECK: merak.clamp %[[I]] {max = 1.000000e+01 : f64} : tensor<5xi32>
  %2 = merak.clamp %i {max = 10.0 : f64} : tensor<5xi32>
  return
}

// -----

// CHECK-LABEL: func.func @cast
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x3xf32>, %[[B:[a-z0-9]+]]: tensor<4xi1>)
func.func @cast(%x: tensor<2x3xf32>, %b: tensor<4xi1>) {
  // CHECK: merak.cast %[[X]] : tensor<2x3xf32> -> tensor<2x3xbf16>
  %0 = merak.cast %x : tensor<2x3xf32> -> tensor<2x3xbf16>
  // CHECK: merak.cast %[[X]] : tensor<2x3xf32> -> tensor<2x3xi64>
  %1 = merak.cast %x : tensor<2x3xf32> -> tensor<2x3xi64>
  // CHECK: merak.cast %[[B]] : tensor<4xi1> -> tensor<4xf16>
  %2 = merak.cast %b : tensor<4xi1> -> tensor<4xf16>
  // CHECK: merak.cast %[[X]] : tensor<2x3xf32> -> tensor<2x3xf32>
  %3 = merak.cast %x : tensor<2x3xf32> -> tensor<2x3xf32>
  return
}

// -----

// CHECK-LABEL: func.func @dropout
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x3xf32>)
func.func @dropout(%x: tensor<2x3xf32>) {
  // CHECK: merak.dropout %[[X]] {p = 1.000000e-01 : f64, training = true} : tensor<2x3xf32>
  %0 = merak.dropout %x {p = 0.1 : f64, training = true} : tensor<2x3xf32>
  // CHECK: merak.dropout %[[X]] {p = 0.000000e+00 : f64, training = false} : tensor<2x3xf32>
  %1 = merak.dropout %x {p = 0.0 : f64, training = false} : tensor<2x3xf32>
  // CHECK: merak.dropout %[[X]] {p = 1.000000e+00 : f64, training = true} : tensor<2x3xf32>
  %2 = merak.dropout %x {p = 1.0 : f64, training = true} : tensor<2x3xf32>
  return
}

// -----

// The default diagonal 0 is not printed.
// CHECK-LABEL: func.func @triangles
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x4x4xf32>, %[[B:[a-z0-9]+]]: tensor<3x5xi1>)
func.func @triangles(%x: tensor<2x4x4xf32>, %b: tensor<3x5xi1>) {
  // CHECK: merak.tril %[[X]] : tensor<2x4x4xf32>
  %0 = merak.tril %x : tensor<2x4x4xf32>
  // CHECK: merak.tril %[[B]] {diagonal = -1 : i64} : tensor<3x5xi1>
  %1 = merak.tril %b {diagonal = -1 : i64} : tensor<3x5xi1>
  // CHECK: merak.triu %[[X]] {diagonal = 1 : i64} : tensor<2x4x4xf32>
  %2 = merak.triu %x {diagonal = 1 : i64} : tensor<2x4x4xf32>
  // CHECK: merak.triu %[[X]] : tensor<2x4x4xf32>
  %3 = merak.triu %x {diagonal = 0 : i64} : tensor<2x4x4xf32>
  return
}

// -----

// CHECK-LABEL: func.func @binary
// CHECK-SAME: (%[[A:[a-z0-9]+]]: tensor<2x3xf32>, %[[B:[a-z0-9]+]]: tensor<2x3xf32>, %[[I:[a-z0-9]+]]: tensor<4xi64>, %[[J:[a-z0-9]+]]: tensor<4xi64>)
func.func @binary(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>, %i: tensor<4xi64>, %j: tensor<4xi64>) {
  // CHECK: merak.add %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %0 = merak.add %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: merak.sub %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = merak.sub %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: merak.mul %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = merak.mul %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: merak.div %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = merak.div %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: merak.pow %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %4 = merak.pow %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: merak.remainder %[[I]], %[[J]] : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  %5 = merak.remainder %i, %j : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  // CHECK: merak.floor_divide %[[I]], %[[J]] : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  %6 = merak.floor_divide %i, %j : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  // CHECK: merak.minimum %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %7 = merak.minimum %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: merak.maximum %[[I]], %[[J]] : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  %8 = merak.maximum %i, %j : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  return
}

// -----

// CHECK-LABEL: func.func @logical
// CHECK-SAME: (%[[P:[a-z0-9]+]]: tensor<2x3xi1>, %[[Q:[a-z0-9]+]]: tensor<3xi1>)
func.func @logical(%p: tensor<2x3xi1>, %q: tensor<3xi1>) {
  // CHECK: merak.and %[[P]], %[[Q]] : (tensor<2x3xi1>, tensor<3xi1>) -> tensor<2x3xi1>
  %0 = merak.and %p, %q : (tensor<2x3xi1>, tensor<3xi1>) -> tensor<2x3xi1>
  // CHECK: merak.or %[[P]], %[[P]] : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  %1 = merak.or %p, %p : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  return
}

// -----

// Broadcasting aligns shapes from the right; size-1 dimensions stretch, and a
// rank-0 operand broadcasts to anything.
// CHECK-LABEL: func.func @broadcast
// CHECK-SAME: (%[[A:[a-z0-9]+]]: tensor<4x1x3xf32>, %[[B:[a-z0-9]+]]: tensor<5x1xf32>, %[[S:[a-z0-9]+]]: tensor<f32>, %[[V:[a-z0-9]+]]: tensor<3xf32>)
func.func @broadcast(%a: tensor<4x1x3xf32>, %b: tensor<5x1xf32>, %s: tensor<f32>, %v: tensor<3xf32>) {
  // CHECK: merak.add %[[A]], %[[B]] : (tensor<4x1x3xf32>, tensor<5x1xf32>) -> tensor<4x5x3xf32>
  %0 = merak.add %a, %b : (tensor<4x1x3xf32>, tensor<5x1xf32>) -> tensor<4x5x3xf32>
  // CHECK: merak.mul %[[S]], %[[A]] : (tensor<f32>, tensor<4x1x3xf32>) -> tensor<4x1x3xf32>
  %1 = merak.mul %s, %a : (tensor<f32>, tensor<4x1x3xf32>) -> tensor<4x1x3xf32>
  // CHECK: merak.sub %[[V]], %[[B]] : (tensor<3xf32>, tensor<5x1xf32>) -> tensor<5x3xf32>
  %2 = merak.sub %v, %b : (tensor<3xf32>, tensor<5x1xf32>) -> tensor<5x3xf32>
  // CHECK: merak.div %[[S]], %[[S]] : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %3 = merak.div %s, %s : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return
}

// -----

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

// -----

// masked_fill(x, mask, v) imports as where(mask, v, x); all three broadcast.
// CHECK-LABEL: func.func @where
// CHECK-SAME: (%[[M:[a-z0-9]+]]: tensor<1x1x4x4xi1>, %[[X:[a-z0-9]+]]: tensor<2x8x4x4xf32>, %[[V:[a-z0-9]+]]: tensor<f32>, %[[C:[a-z0-9]+]]: tensor<3xi1>)
func.func @where(%m: tensor<1x1x4x4xi1>, %x: tensor<2x8x4x4xf32>, %v: tensor<f32>, %c: tensor<3xi1>) {
  // CHECK: merak.where %[[M]], %[[V]], %[[X]] : (tensor<1x1x4x4xi1>, tensor<f32>, tensor<2x8x4x4xf32>) -> tensor<2x8x4x4xf32>
  %0 = merak.where %m, %v, %x : (tensor<1x1x4x4xi1>, tensor<f32>, tensor<2x8x4x4xf32>) -> tensor<2x8x4x4xf32>
  // The condition alone may set the result shape.
  // CHECK: merak.where %[[C]], %[[V]], %[[V]] : (tensor<3xi1>, tensor<f32>, tensor<f32>) -> tensor<3xf32>
  %1 = merak.where %c, %v, %v : (tensor<3xi1>, tensor<f32>, tensor<f32>) -> tensor<3xf32>
  // CHECK: merak.where %[[C]], %[[C]], %[[C]] : (tensor<3xi1>, tensor<3xi1>, tensor<3xi1>) -> tensor<3xi1>
  %2 = merak.where %c, %c, %c : (tensor<3xi1>, tensor<3xi1>, tensor<3xi1>) -> tensor<3xi1>
  return
}

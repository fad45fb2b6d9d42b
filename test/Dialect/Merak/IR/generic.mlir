// Generic-form parsing and printing of merak ops: properties, operand segments, enum attributes, multiple results.
// RUN: merak-opt %s | FileCheck %s
// RUN: merak-opt %s -mlir-print-op-generic | FileCheck %s --check-prefix=GENERIC
// RUN: merak-opt %s -mlir-print-op-generic | merak-opt | FileCheck %s

// CHECK-LABEL: func.func @generic
// CHECK-SAME: (%[[A:[a-z0-9]+]]: tensor<2x3xf32>, %[[B:[a-z0-9]+]]: tensor<3xf32>, %[[W:[a-z0-9]+]]: tensor<3xf32>)
// GENERIC-LABEL: sym_name = "generic"
func.func @generic(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %w: tensor<3xf32>) {
  // CHECK: merak.add %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // GENERIC: "merak.add"(%{{.*}}, %{{.*}}) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %0 = "merak.add"(%a, %b) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>

  // CHECK: merak.gelu %[[A]] {approximate = #merak.gelu<tanh>} : tensor<2x3xf32>
  // GENERIC: "merak.gelu"(%{{.*}}) <{approximate = #merak.gelu<tanh>}> : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = "merak.gelu"(%a) <{approximate = #merak.gelu<tanh>}> : (tensor<2x3xf32>) -> tensor<2x3xf32>

  // operandSegmentSizes picks which optional operand is present.
  // CHECK: merak.layer_norm %[[A]] weight %[[W]] {eps = 1.000000e-05 : f64, normalized_rank = 1 : i64} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // GENERIC: "merak.layer_norm"(%{{.*}}, %{{.*}}) <{eps = 1.000000e-05 : f64, normalized_rank = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>}>
  %2 = "merak.layer_norm"(%a, %w) <{eps = 1.0e-5 : f64, normalized_rank = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>}> : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: merak.layer_norm %[[A]] bias %[[W]] {eps = 1.000000e-05 : f64, normalized_rank = 1 : i64} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // GENERIC: "merak.layer_norm"(%{{.*}}, %{{.*}}) <{eps = 1.000000e-05 : f64, normalized_rank = 1 : i64, operandSegmentSizes = array<i32: 1, 0, 1>}>
  %3 = "merak.layer_norm"(%a, %w) <{eps = 1.0e-5 : f64, normalized_rank = 1 : i64, operandSegmentSizes = array<i32: 1, 0, 1>}> : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>

  // CHECK: merak.compare <lt>, %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // GENERIC: "merak.compare"(%{{.*}}, %{{.*}}) <{predicate = #merak.cmp<lt>}> : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %4 = "merak.compare"(%a, %b) <{predicate = #merak.cmp<lt>}> : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>

  // CHECK: merak.constant dense<1.000000e+00> : tensor<2xf32>
  // GENERIC: "merak.constant"() <{value = dense<1.000000e+00> : tensor<2xf32>}> : () -> tensor<2xf32>
  %5 = "merak.constant"() <{value = dense<1.0> : tensor<2xf32>}> : () -> tensor<2xf32>

  // An attribute dictionary (not properties) is accepted too.
  // CHECK: merak.reshape %[[A]] {shape = array<i64: 6>} : (tensor<2x3xf32>) -> tensor<6xf32>
  // GENERIC: "merak.reshape"(%{{.*}}) <{shape = array<i64: 6>}> : (tensor<2x3xf32>) -> tensor<6xf32>
  %6 = "merak.reshape"(%a) {shape = array<i64: 6>} : (tensor<2x3xf32>) -> tensor<6xf32>

  // The generic form spells out default-valued attributes.
  // CHECK: merak.slice %[[A]] {dim = 1 : i64, end = 2 : i64, start = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x2xf32>
  // GENERIC: "merak.slice"(%{{.*}}) <{dim = 1 : i64, end = 2 : i64, start = 0 : i64, step = 1 : i64}> : (tensor<2x3xf32>) -> tensor<2x2xf32>
  %7 = "merak.slice"(%a) <{dim = 1 : i64, start = 0 : i64, end = 2 : i64}> : (tensor<2x3xf32>) -> tensor<2x2xf32>
  return
}

// CHECK-LABEL: func.func @generic_batch_norm
// GENERIC-LABEL: sym_name = "generic_batch_norm"
func.func @generic_batch_norm(%x: tensor<2x3xf32>, %p: tensor<3xf32>) -> tensor<3xf32> {
  // CHECK: %[[R:[a-z_0-9]+]], %[[M:[a-z_0-9]+]], %[[V:[a-z_0-9]+]] = merak.batch_norm %{{.*}} {eps = 1.000000e-05 : f64, momentum = 1.000000e-01 : f64, training = true} : (tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>)
  // CHECK: return %[[V]] : tensor<3xf32>
  // GENERIC: %[[BN:[0-9]+]]:3 = "merak.batch_norm"
  // GENERIC: "func.return"(%[[BN]]#2)
  %0:3 = "merak.batch_norm"(%x, %p, %p, %p, %p) <{training = true, momentum = 0.1 : f64, eps = 1.0e-5 : f64}> : (tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>)
  return %0#2 : tensor<3xf32>
}

// Diagnostics of merak tensor types, constants and elementwise ops (unary, binary, compare, where).
// RUN: merak-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// Tensor types: static shapes of f16/bf16/f32/f64/i1/i32/i64 only.
//===----------------------------------------------------------------------===//

func.func @dynamic_dim(%x: tensor<?x3xf32>) {
  // expected-error @below {{'merak.neg' op operand #0 must be statically shaped tensor}}
  %0 = merak.neg %x : tensor<?x3xf32>
  return
}

// -----

func.func @dynamic_dim_result(%x: tensor<2x3xf32>) {
  // expected-error @below {{'merak.add' op result #0 must be statically shaped tensor}}
  %0 = merak.add %x, %x : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<?x3xf32>
  return
}

// -----

func.func @unranked(%x: tensor<*xf32>) {
  // expected-error @below {{invalid kind of type specified}}
  %0 = merak.neg %x : tensor<*xf32>
  return
}

// -----

func.func @bad_element_type(%x: tensor<4xi8>) {
  // expected-error @below {{'merak.abs' op operand #0 must be statically shaped tensor of 16-bit float or bfloat16 type or 32-bit float or 64-bit float or 1-bit signless integer or 32-bit signless integer or 64-bit signless integer values, but got 'tensor<4xi8>'}}
  %0 = merak.abs %x : tensor<4xi8>
  return
}

// -----

//===----------------------------------------------------------------------===//
// constant
//===----------------------------------------------------------------------===//

func.func @constant_not_tensor() {
  // expected-error @below {{constant value must be a ranked tensor}}
  %0 = merak.constant dense<1.0> : vector<2xf32>
  return
}

// -----

func.func @constant_not_elements() {
  // expected-error @below {{invalid kind of attribute specified}}
  %0 = merak.constant 1.0 : f32
  return
}

// -----

func.func @constant_bad_element_type() {
  // expected-error @below {{'merak.constant' op result #0 must be statically shaped tensor}}
  %0 = merak.constant dense<1> : tensor<2xi8>
  return
}

// -----

func.func @constant_result_mismatch() {
  // expected-error @below {{'merak.constant' op inferred type(s) 'tensor<2xf32>' are incompatible with return type(s) of operation 'tensor<3xf32>'}}
  // expected-error @below {{'merak.constant' op failed to infer returned types}}
  %0 = "merak.constant"() <{value = dense<1.0> : tensor<2xf32>}> : () -> tensor<3xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Unary ops: the result type is the operand type; transcendental ops take
// float tensors only, `not` takes i1 tensors only.
//===----------------------------------------------------------------------===//

func.func @neg_result_mismatch(%x: tensor<2x3xf32>) {
  // expected-error @below {{'merak.neg' op requires the same type for all operands and results}}
  %0 = "merak.neg"(%x) : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return
}

// -----

func.func @relu_result_mismatch(%x: tensor<4xi32>) {
  // expected-error @below {{'merak.relu' op requires the same type for all operands and results}}
  %0 = "merak.relu"(%x) : (tensor<4xi32>) -> tensor<4xi64>
  return
}

// -----

func.func @exp_int(%x: tensor<4xi64>) {
  // expected-error @below {{'merak.exp' op operand #0 must be statically shaped tensor of 16-bit float or bfloat16 type or 32-bit float or 64-bit float values, but got 'tensor<4xi64>'}}
  %0 = merak.exp %x : tensor<4xi64>
  return
}

// -----

func.func @log_int(%x: tensor<4xi32>) {
  // expected-error @below {{'merak.log' op operand #0 must be statically shaped tensor of 16-bit float}}
  %0 = merak.log %x : tensor<4xi32>
  return
}

// -----

func.func @sin_bool(%x: tensor<4xi1>) {
  // expected-error @below {{'merak.sin' op operand #0 must be statically shaped tensor of 16-bit float}}
  %0 = merak.sin %x : tensor<4xi1>
  return
}

// -----

func.func @cos_int(%x: tensor<4xi64>) {
  // expected-error @below {{'merak.cos' op operand #0 must be statically shaped tensor of 16-bit float}}
  %0 = merak.cos %x : tensor<4xi64>
  return
}

// -----

func.func @sqrt_int(%x: tensor<4xi64>) {
  // expected-error @below {{'merak.sqrt' op operand #0 must be statically shaped tensor of 16-bit float}}
  %0 = merak.sqrt %x : tensor<4xi64>
  return
}

// -----

func.func @rsqrt_int(%x: tensor<4xi64>) {
  // expected-error @below {{'merak.rsqrt' op operand #0 must be statically shaped tensor of 16-bit float}}
  %0 = merak.rsqrt %x : tensor<4xi64>
  return
}

// -----

func.func @reciprocal_int(%x: tensor<4xi64>) {
  // expected-error @below {{'merak.reciprocal' op operand #0 must be statically shaped tensor of 16-bit float}}
  %0 = merak.reciprocal %x : tensor<4xi64>
  return
}

// -----

func.func @erf_int(%x: tensor<4xi64>) {
  // expected-error @below {{'merak.erf' op operand #0 must be statically shaped tensor of 16-bit float}}
  %0 = merak.erf %x : tensor<4xi64>
  return
}

// -----

func.func @tanh_int(%x: tensor<4xi64>) {
  // expected-error @below {{'merak.tanh' op operand #0 must be statically shaped tensor of 16-bit float}}
  %0 = merak.tanh %x : tensor<4xi64>
  return
}

// -----

func.func @sigmoid_int(%x: tensor<4xi64>) {
  // expected-error @below {{'merak.sigmoid' op operand #0 must be statically shaped tensor of 16-bit float}}
  %0 = merak.sigmoid %x : tensor<4xi64>
  return
}

// -----

func.func @silu_int(%x: tensor<4xi64>) {
  // expected-error @below {{'merak.silu' op operand #0 must be statically shaped tensor of 16-bit float}}
  %0 = merak.silu %x : tensor<4xi64>
  return
}

// -----

func.func @sqrt_result_mismatch(%x: tensor<4xf32>) {
  // expected-error @below {{'merak.sqrt' op requires the same type for all operands and results}}
  %0 = "merak.sqrt"(%x) : (tensor<4xf32>) -> tensor<4xf16>
  return
}

// -----

func.func @not_float(%x: tensor<4xf32>) {
  // expected-error @below {{'merak.not' op operand #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<4xf32>'}}
  %0 = merak.not %x : tensor<4xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// gelu, clamp, cast, dropout, tril, triu
//===----------------------------------------------------------------------===//

func.func @gelu_bad_approximation(%x: tensor<4xf32>) {
  // expected-error @below {{expected ::merak::GeluApproximation to be one of: none, tanh}}
  // expected-error @below {{failed to parse Merak_GeluApproximationAttr parameter 'value'}}
  %0 = merak.gelu %x {approximate = #merak.gelu<fast>} : tensor<4xf32>
  return
}

// -----

func.func @gelu_int(%x: tensor<4xi64>) {
  // expected-error @below {{'merak.gelu' op operand #0 must be statically shaped tensor of 16-bit float}}
  %0 = merak.gelu %x : tensor<4xi64>
  return
}

// -----

func.func @gelu_result_mismatch(%x: tensor<4xf32>) {
  // expected-error @below {{'merak.gelu' op requires the same type for all operands and results}}
  %0 = "merak.gelu"(%x) : (tensor<4xf32>) -> tensor<2x2xf32>
  return
}

// -----

func.func @clamp_int_bound(%x: tensor<4xf32>) {
  // expected-error @below {{attribute 'min' failed to satisfy constraint: 64-bit float attribute}}
  %0 = merak.clamp %x {min = 1 : i64} : tensor<4xf32>
  return
}

// -----

func.func @clamp_result_mismatch(%x: tensor<4xf32>) {
  // expected-error @below {{'merak.clamp' op requires the same type for all operands and results}}
  %0 = "merak.clamp"(%x) <{max = 1.0 : f64}> : (tensor<4xf32>) -> tensor<5xf32>
  return
}

// -----

func.func @cast_changes_shape(%x: tensor<2x3xf32>) {
  // expected-error @below {{'merak.cast' op changes the shape from [2, 3] to [3, 2]}}
  %0 = merak.cast %x : tensor<2x3xf32> -> tensor<3x2xf32>
  return
}

// -----

func.func @cast_changes_rank(%x: tensor<6xi64>) {
  // expected-error @below {{'merak.cast' op changes the shape from [6] to [1, 6]}}
  %0 = merak.cast %x : tensor<6xi64> -> tensor<1x6xf32>
  return
}

// -----

func.func @dropout_p_above_one(%x: tensor<4xf32>) {
  // expected-error @below {{'merak.dropout' op probability p = 1.500000e+00 is not in [0, 1]}}
  %0 = merak.dropout %x {p = 1.5 : f64, training = true} : tensor<4xf32>
  return
}

// -----

func.func @dropout_p_negative(%x: tensor<4xf32>) {
  // expected-error @below {{'merak.dropout' op probability p = -1.000000e-01 is not in [0, 1]}}
  %0 = merak.dropout %x {p = -0.1 : f64, training = false} : tensor<4xf32>
  return
}

// -----

func.func @dropout_p_nan(%x: tensor<4xf32>) {
  // expected-error @below {{'merak.dropout' op probability p = nan is not in [0, 1]}}
  %0 = merak.dropout %x {p = 0x7FF8000000000000 : f64, training = true} : tensor<4xf32>
  return
}

// -----

func.func @dropout_no_training(%x: tensor<4xf32>) {
  // expected-error @below {{'merak.dropout' op requires attribute 'training'}}
  %0 = merak.dropout %x {p = 0.5 : f64} : tensor<4xf32>
  return
}

// -----

func.func @dropout_int(%x: tensor<4xi64>) {
  // expected-error @below {{'merak.dropout' op operand #0 must be statically shaped tensor of 16-bit float}}
  %0 = merak.dropout %x {p = 0.5 : f64, training = true} : tensor<4xi64>
  return
}

// -----

func.func @tril_rank1(%x: tensor<3xf32>) {
  // expected-error @below {{'merak.tril' op needs a tensor of rank >= 2}}
  %0 = merak.tril %x : tensor<3xf32>
  return
}

// -----

func.func @triu_rank0(%x: tensor<i1>) {
  // expected-error @below {{'merak.triu' op needs a tensor of rank >= 2}}
  %0 = merak.triu %x {diagonal = 1 : i64} : tensor<i1>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Binary ops: same element type, broadcastable shapes. A shape-rule error is
// followed by the generic "failed to infer returned types".
//===----------------------------------------------------------------------===//

func.func @add_element_types(%a: tensor<2x3xf32>, %b: tensor<2x3xf16>) {
  // expected-error @below {{lhs element type 'f32' differs from rhs element type 'f16'}}
  // expected-error @below {{'merak.add' op failed to infer returned types}}
  %0 = merak.add %a, %b : (tensor<2x3xf32>, tensor<2x3xf16>) -> tensor<2x3xf32>
  return
}

// -----

func.func @add_no_broadcast(%a: tensor<2x3xf32>, %b: tensor<4x3xf32>) {
  // expected-error @below {{operand shapes [2, 3] and [4, 3] do not broadcast: dimension 0 of the broadcast result is 2 vs 4}}
  // expected-error @below {{'merak.add' op failed to infer returned types}}
  %0 = merak.add %a, %b : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Dimensions are numbered in the broadcast result (rank 3 here).
func.func @sub_no_broadcast(%a: tensor<4x3xf32>, %b: tensor<2x4x5xf32>) {
  // expected-error @below {{operand shapes [4, 3] and [2, 4, 5] do not broadcast: dimension 2 of the broadcast result is 3 vs 5}}
  // expected-error @below {{'merak.sub' op failed to infer returned types}}
  %0 = merak.sub %a, %b : (tensor<4x3xf32>, tensor<2x4x5xf32>) -> tensor<2x4x5xf32>
  return
}

// -----

func.func @mul_result_mismatch(%a: tensor<2x1xf32>, %b: tensor<3xf32>) {
  // expected-error @below {{'merak.mul' op inferred type(s) 'tensor<2x3xf32>' are incompatible with return type(s) of operation 'tensor<3xf32>'}}
  // expected-error @below {{'merak.mul' op failed to infer returned types}}
  %0 = merak.mul %a, %b : (tensor<2x1xf32>, tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

func.func @div_element_types(%a: tensor<4xf32>, %b: tensor<4xi64>) {
  // expected-error @below {{lhs element type 'f32' differs from rhs element type 'i64'}}
  // expected-error @below {{'merak.div' op failed to infer returned types}}
  %0 = merak.div %a, %b : (tensor<4xf32>, tensor<4xi64>) -> tensor<4xf32>
  return
}

// -----

func.func @pow_no_broadcast(%a: tensor<5xf32>, %b: tensor<3xf32>) {
  // expected-error @below {{operand shapes [5] and [3] do not broadcast: dimension 0 of the broadcast result is 5 vs 3}}
  // expected-error @below {{'merak.pow' op failed to infer returned types}}
  %0 = merak.pow %a, %b : (tensor<5xf32>, tensor<3xf32>) -> tensor<5xf32>
  return
}

// -----

func.func @remainder_element_types(%a: tensor<4xi32>, %b: tensor<4xi64>) {
  // expected-error @below {{lhs element type 'i32' differs from rhs element type 'i64'}}
  // expected-error @below {{'merak.remainder' op failed to infer returned types}}
  %0 = merak.remainder %a, %b : (tensor<4xi32>, tensor<4xi64>) -> tensor<4xi64>
  return
}

// -----

func.func @floor_divide_no_broadcast(%a: tensor<2x3xi64>, %b: tensor<2xi64>) {
  // expected-error @below {{operand shapes [2, 3] and [2] do not broadcast: dimension 1 of the broadcast result is 3 vs 2}}
  // expected-error @below {{'merak.floor_divide' op failed to infer returned types}}
  %0 = merak.floor_divide %a, %b : (tensor<2x3xi64>, tensor<2xi64>) -> tensor<2x3xi64>
  return
}

// -----

func.func @minimum_result_mismatch(%a: tensor<3xf32>, %b: tensor<3xf32>) {
  // expected-error @below {{'merak.minimum' op inferred type(s) 'tensor<3xf32>' are incompatible with return type(s) of operation 'tensor<1x3xf32>'}}
  // expected-error @below {{'merak.minimum' op failed to infer returned types}}
  %0 = merak.minimum %a, %b : (tensor<3xf32>, tensor<3xf32>) -> tensor<1x3xf32>
  return
}

// -----

func.func @maximum_element_types(%a: tensor<3xbf16>, %b: tensor<3xf16>) {
  // expected-error @below {{lhs element type 'bf16' differs from rhs element type 'f16'}}
  // expected-error @below {{'merak.maximum' op failed to infer returned types}}
  %0 = merak.maximum %a, %b : (tensor<3xbf16>, tensor<3xf16>) -> tensor<3xbf16>
  return
}

// -----

func.func @and_float(%a: tensor<3xf32>, %b: tensor<3xf32>) {
  // expected-error @below {{'merak.and' op operand #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<3xf32>'}}
  %0 = merak.and %a, %b : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

func.func @or_no_broadcast(%a: tensor<2xi1>, %b: tensor<3xi1>) {
  // expected-error @below {{operand shapes [2] and [3] do not broadcast: dimension 0 of the broadcast result is 2 vs 3}}
  // expected-error @below {{'merak.or' op failed to infer returned types}}
  %0 = merak.or %a, %b : (tensor<2xi1>, tensor<3xi1>) -> tensor<3xi1>
  return
}

// -----

//===----------------------------------------------------------------------===//
// compare
//===----------------------------------------------------------------------===//

func.func @compare_bad_predicate(%a: tensor<3xf32>) {
  // expected-error @below {{expected ::merak::ComparePredicate to be one of: eq, ne, lt, le, gt, ge}}
  // expected-error @below {{failed to parse Merak_ComparePredicateAttr parameter 'value'}}
  %0 = merak.compare <lesser>, %a, %a : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xi1>
  return
}

// -----

func.func @compare_element_types(%a: tensor<3xf32>, %b: tensor<3xi64>) {
  // expected-error @below {{lhs element type 'f32' differs from rhs element type 'i64'}}
  // expected-error @below {{'merak.compare' op failed to infer returned types}}
  %0 = merak.compare <eq>, %a, %b : (tensor<3xf32>, tensor<3xi64>) -> tensor<3xi1>
  return
}

// -----

func.func @compare_no_broadcast(%a: tensor<3x2xf32>, %b: tensor<3xf32>) {
  // expected-error @below {{operand shapes [3, 2] and [3] do not broadcast: dimension 1 of the broadcast result is 2 vs 3}}
  // expected-error @below {{'merak.compare' op failed to infer returned types}}
  %0 = merak.compare <ge>, %a, %b : (tensor<3x2xf32>, tensor<3xf32>) -> tensor<3x3xi1>
  return
}

// -----

func.func @compare_float_result(%a: tensor<3xf32>) {
  // expected-error @below {{'merak.compare' op result #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<3xf32>'}}
  %0 = merak.compare <lt>, %a, %a : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// where
//===----------------------------------------------------------------------===//

func.func @where_condition_not_bool(%c: tensor<3xi32>, %a: tensor<3xf32>) {
  // expected-error @below {{'merak.where' op operand #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<3xi32>'}}
  %0 = merak.where %c, %a, %a : (tensor<3xi32>, tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

func.func @where_element_types(%c: tensor<3xi1>, %a: tensor<3xf32>, %b: tensor<f16>) {
  // expected-error @below {{on_true element type 'f32' differs from on_false element type 'f16'}}
  // expected-error @below {{'merak.where' op failed to infer returned types}}
  %0 = merak.where %c, %a, %b : (tensor<3xi1>, tensor<3xf32>, tensor<f16>) -> tensor<3xf32>
  return
}

// -----

func.func @where_values_no_broadcast(%c: tensor<3xi1>, %a: tensor<3xf32>, %b: tensor<4xf32>) {
  // expected-error @below {{operand shapes [3] and [4] do not broadcast: dimension 0 of the broadcast result is 3 vs 4}}
  // expected-error @below {{'merak.where' op failed to infer returned types}}
  %0 = merak.where %c, %a, %b : (tensor<3xi1>, tensor<3xf32>, tensor<4xf32>) -> tensor<3xf32>
  return
}

// -----

func.func @where_condition_no_broadcast(%c: tensor<2x5xi1>, %a: tensor<4xf32>, %b: tensor<f32>) {
  // expected-error @below {{condition shape [2, 5] does not broadcast with value shape [4] at dimension 1}}
  // expected-error @below {{'merak.where' op failed to infer returned types}}
  %0 = merak.where %c, %a, %b : (tensor<2x5xi1>, tensor<4xf32>, tensor<f32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @where_result_mismatch(%c: tensor<2x1xi1>, %a: tensor<4xf32>, %b: tensor<f32>) {
  // expected-error @below {{'merak.where' op inferred type(s) 'tensor<2x4xf32>' are incompatible with return type(s) of operation 'tensor<4xf32>'}}
  // expected-error @below {{'merak.where' op failed to infer returned types}}
  %0 = merak.where %c, %a, %b : (tensor<2x1xi1>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return
}

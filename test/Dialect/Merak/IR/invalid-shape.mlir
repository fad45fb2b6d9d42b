// Diagnostics of merak shape ops (index, reshape, permute, slice, select, concat, expand, pad, roll) and reductions.
// RUN: merak-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// index
//===----------------------------------------------------------------------===//

func.func @index_dim_out_of_range(%x: tensor<5x6x7xf32>, %i: tensor<2xi64>) {
  // expected-error @below {{dim 3 is out of range for a tensor of rank 3}}
  // expected-error @below {{'merak.index' op failed to infer returned types}}
  %0 = merak.index %x, %i {dim = 3 : i64} : (tensor<5x6x7xf32>, tensor<2xi64>) -> tensor<5x6x2xf32>
  return
}

// -----

func.func @index_negative_dim_out_of_range(%x: tensor<5x6xf32>, %i: tensor<2xi64>) {
  // expected-error @below {{dim -3 is out of range for a tensor of rank 2}}
  // expected-error @below {{'merak.index' op failed to infer returned types}}
  %0 = merak.index %x, %i {dim = -3 : i64} : (tensor<5x6xf32>, tensor<2xi64>) -> tensor<2x6xf32>
  return
}

// -----

func.func @index_float_indices(%x: tensor<5x6xf32>, %i: tensor<2xf32>) {
  // expected-error @below {{'merak.index' op operand #1 must be statically shaped tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<2xf32>'}}
  %0 = merak.index %x, %i {dim = 0 : i64} : (tensor<5x6xf32>, tensor<2xf32>) -> tensor<2x6xf32>
  return
}

// -----

func.func @index_result_mismatch(%x: tensor<5x6xf32>, %i: tensor<2x3xi32>) {
  // expected-error @below {{'merak.index' op inferred type(s) 'tensor<5x2x3xf32>' are incompatible with return type(s) of operation 'tensor<5x6xf32>'}}
  // expected-error @below {{'merak.index' op failed to infer returned types}}
  %0 = merak.index %x, %i {dim = 1 : i64} : (tensor<5x6xf32>, tensor<2x3xi32>) -> tensor<5x6xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// reshape
//===----------------------------------------------------------------------===//

// The importer resolves -1 before building the op.
func.func @reshape_negative(%x: tensor<2x3xf32>) {
  // expected-error @below {{target shape [-1, 3] has a negative dimension}}
  // expected-error @below {{'merak.reshape' op failed to infer returned types}}
  %0 = merak.reshape %x {shape = array<i64: -1, 3>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @reshape_element_count(%x: tensor<2x3x4xf32>) {
  // expected-error @below {{cannot reshape [2, 3, 4] (24 elements) to [5, 5] (25 elements)}}
  // expected-error @below {{'merak.reshape' op failed to infer returned types}}
  %0 = merak.reshape %x {shape = array<i64: 5, 5>} : (tensor<2x3x4xf32>) -> tensor<5x5xf32>
  return
}

// -----

func.func @reshape_result_mismatch(%x: tensor<2x3x4xf32>) {
  // expected-error @below {{'merak.reshape' op inferred type(s) 'tensor<6x4xf32>' are incompatible with return type(s) of operation 'tensor<4x6xf32>'}}
  // expected-error @below {{'merak.reshape' op failed to infer returned types}}
  %0 = merak.reshape %x {shape = array<i64: 6, 4>} : (tensor<2x3x4xf32>) -> tensor<4x6xf32>
  return
}

// -----

func.func @reshape_no_shape(%x: tensor<2x3xf32>) {
  // expected-error @below {{'merak.reshape' op requires attribute 'shape'}}
  %0 = merak.reshape %x : (tensor<2x3xf32>) -> tensor<6xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// permute
//===----------------------------------------------------------------------===//

func.func @permute_wrong_size(%x: tensor<2x3x4xf32>) {
  // expected-error @below {{permutation [1, 0] has 2 entries for a tensor of rank 3}}
  // expected-error @below {{'merak.permute' op failed to infer returned types}}
  %0 = merak.permute %x {permutation = array<i64: 1, 0>} : (tensor<2x3x4xf32>) -> tensor<3x2xf32>
  return
}

// -----

func.func @permute_repeated(%x: tensor<2x3x4xf32>) {
  // expected-error @below {{[0, 0, 1] is not a permutation of [0, 3)}}
  // expected-error @below {{'merak.permute' op failed to infer returned types}}
  %0 = merak.permute %x {permutation = array<i64: 0, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<2x2x3xf32>
  return
}

// -----

func.func @permute_out_of_range(%x: tensor<2x3xf32>) {
  // expected-error @below {{[2, 0] is not a permutation of [0, 2)}}
  // expected-error @below {{'merak.permute' op failed to infer returned types}}
  %0 = merak.permute %x {permutation = array<i64: 2, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return
}

// -----

// Permutation entries are not normalized: negative entries are rejected.
func.func @permute_negative(%x: tensor<2x3xf32>) {
  // expected-error @below {{[-1, 0] is not a permutation of [0, 2)}}
  // expected-error @below {{'merak.permute' op failed to infer returned types}}
  %0 = merak.permute %x {permutation = array<i64: -1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return
}

// -----

func.func @permute_result_mismatch(%x: tensor<2x3x4xf32>) {
  // expected-error @below {{'merak.permute' op inferred type(s) 'tensor<4x2x3xf32>' are incompatible with return type(s) of operation 'tensor<3x4x2xf32>'}}
  // expected-error @below {{'merak.permute' op failed to infer returned types}}
  %0 = merak.permute %x {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<3x4x2xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// slice: bounds are normalized, 0 <= start <= end <= size, step >= 1
//===----------------------------------------------------------------------===//

func.func @slice_dim_out_of_range(%x: tensor<4x10xf32>) {
  // expected-error @below {{dim 2 is out of range for a tensor of rank 2}}
  // expected-error @below {{'merak.slice' op failed to infer returned types}}
  %0 = merak.slice %x {dim = 2 : i64, start = 0 : i64, end = 1 : i64} : (tensor<4x10xf32>) -> tensor<4x1xf32>
  return
}

// -----

func.func @slice_step_zero(%x: tensor<4x10xf32>) {
  // expected-error @below {{step must be >= 1, got 0}}
  // expected-error @below {{'merak.slice' op failed to infer returned types}}
  %0 = merak.slice %x {dim = 1 : i64, start = 0 : i64, end = 4 : i64, step = 0 : i64} : (tensor<4x10xf32>) -> tensor<4x4xf32>
  return
}

// -----

func.func @slice_step_negative(%x: tensor<4x10xf32>) {
  // expected-error @below {{step must be >= 1, got -1}}
  // expected-error @below {{'merak.slice' op failed to infer returned types}}
  %0 = merak.slice %x {dim = 1 : i64, start = 0 : i64, end = 4 : i64, step = -1 : i64} : (tensor<4x10xf32>) -> tensor<4x4xf32>
  return
}

// -----

func.func @slice_start_after_end(%x: tensor<4x10xf32>) {
  // expected-error @below {{slice [5, 3) is not within dimension 1 of size 10}}
  // expected-error @below {{'merak.slice' op failed to infer returned types}}
  %0 = merak.slice %x {dim = 1 : i64, start = 5 : i64, end = 3 : i64} : (tensor<4x10xf32>) -> tensor<4x0xf32>
  return
}

// -----

// The dimension in the message is normalized.
func.func @slice_end_past_size(%x: tensor<4x10xf32>) {
  // expected-error @below {{slice [0, 11) is not within dimension 1 of size 10}}
  // expected-error @below {{'merak.slice' op failed to infer returned types}}
  %0 = merak.slice %x {dim = -1 : i64, start = 0 : i64, end = 11 : i64} : (tensor<4x10xf32>) -> tensor<4x10xf32>
  return
}

// -----

func.func @slice_negative_start(%x: tensor<4x10xf32>) {
  // expected-error @below {{slice [-2, 10) is not within dimension 0 of size 4}}
  // expected-error @below {{'merak.slice' op failed to infer returned types}}
  %0 = merak.slice %x {dim = 0 : i64, start = -2 : i64, end = 10 : i64} : (tensor<4x10xf32>) -> tensor<2x10xf32>
  return
}

// -----

func.func @slice_result_mismatch(%x: tensor<4x10xf32>) {
  // expected-error @below {{'merak.slice' op inferred type(s) 'tensor<4x4xf32>' are incompatible with return type(s) of operation 'tensor<4x3xf32>'}}
  // expected-error @below {{'merak.slice' op failed to infer returned types}}
  %0 = merak.slice %x {dim = 1 : i64, start = 0 : i64, end = 10 : i64, step = 3 : i64} : (tensor<4x10xf32>) -> tensor<4x3xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// select
//===----------------------------------------------------------------------===//

func.func @select_dim_out_of_range(%x: tensor<2x3xf32>) {
  // expected-error @below {{dim 2 is out of range for a tensor of rank 2}}
  // expected-error @below {{'merak.select' op failed to infer returned types}}
  %0 = merak.select %x {dim = 2 : i64, index = 0 : i64} : (tensor<2x3xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @select_index_too_large(%x: tensor<2x3xf32>) {
  // expected-error @below {{index 3 is out of range for dimension 1 of size 3}}
  // expected-error @below {{'merak.select' op failed to infer returned types}}
  %0 = merak.select %x {dim = -1 : i64, index = 3 : i64} : (tensor<2x3xf32>) -> tensor<2xf32>
  return
}

// -----

// Indices are normalized: a negative index is rejected.
func.func @select_index_negative(%x: tensor<2x3xf32>) {
  // expected-error @below {{index -1 is out of range for dimension 0 of size 2}}
  // expected-error @below {{'merak.select' op failed to infer returned types}}
  %0 = merak.select %x {dim = 0 : i64, index = -1 : i64} : (tensor<2x3xf32>) -> tensor<3xf32>
  return
}

// -----

func.func @select_rank0(%x: tensor<f32>) {
  // expected-error @below {{dim 0 is out of range for a tensor of rank 0}}
  // expected-error @below {{'merak.select' op failed to infer returned types}}
  %0 = merak.select %x {dim = 0 : i64, index = 0 : i64} : (tensor<f32>) -> tensor<f32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// concat
//===----------------------------------------------------------------------===//

func.func @concat_no_inputs() {
  // expected-error @below {{concat needs at least one input}}
  // expected-error @below {{'merak.concat' op failed to infer returned types}}
  %0 = merak.concat {dim = 0 : i64} : () -> tensor<2xf32>
  return
}

// -----

func.func @concat_dim_out_of_range(%a: tensor<2x3xf32>) {
  // expected-error @below {{dim -3 is out of range for a tensor of rank 2}}
  // expected-error @below {{'merak.concat' op failed to infer returned types}}
  %0 = merak.concat %a, %a {dim = -3 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @concat_element_types(%a: tensor<2x3xf32>, %b: tensor<2x3xf16>) {
  // expected-error @below {{input 1 has element type 'f16', input 0 has 'f32'}}
  // expected-error @below {{'merak.concat' op failed to infer returned types}}
  %0 = merak.concat %a, %b {dim = 0 : i64} : (tensor<2x3xf32>, tensor<2x3xf16>) -> tensor<4x3xf32>
  return
}

// -----

func.func @concat_ranks(%a: tensor<2x3xf32>, %b: tensor<3xf32>) {
  // expected-error @below {{input 1 has rank 1, input 0 has rank 2}}
  // expected-error @below {{'merak.concat' op failed to infer returned types}}
  %0 = merak.concat %a, %b {dim = 1 : i64} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x6xf32>
  return
}

// -----

func.func @concat_other_dim(%a: tensor<2x3xf32>, %b: tensor<2x5xf32>, %c: tensor<3x3xf32>) {
  // expected-error @below {{input 2 dimension 0 is 3, input 0 has 2}}
  // expected-error @below {{'merak.concat' op failed to infer returned types}}
  %0 = merak.concat %a, %b, %c {dim = 1 : i64} : (tensor<2x3xf32>, tensor<2x5xf32>, tensor<3x3xf32>) -> tensor<2x11xf32>
  return
}

// -----

func.func @concat_result_mismatch(%a: tensor<2x3xf32>, %b: tensor<2x5xf32>) {
  // expected-error @below {{'merak.concat' op inferred type(s) 'tensor<2x8xf32>' are incompatible with return type(s) of operation 'tensor<2x7xf32>'}}
  // expected-error @below {{'merak.concat' op failed to infer returned types}}
  %0 = merak.concat %a, %b {dim = 1 : i64} : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x7xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// expand
//===----------------------------------------------------------------------===//

func.func @expand_smaller_rank(%x: tensor<3x1xf32>) {
  // expected-error @below {{cannot expand rank 2 to the smaller rank 1}}
  // expected-error @below {{'merak.expand' op failed to infer returned types}}
  %0 = merak.expand %x {shape = array<i64: 3>} : (tensor<3x1xf32>) -> tensor<3xf32>
  return
}

// -----

func.func @expand_non_unit(%x: tensor<3x1xf32>) {
  // expected-error @below {{cannot expand dimension 0 of size 3 to 4}}
  // expected-error @below {{'merak.expand' op failed to infer returned types}}
  %0 = merak.expand %x {shape = array<i64: 4, 5>} : (tensor<3x1xf32>) -> tensor<4x5xf32>
  return
}

// -----

// The importer resolves -1 (keep the size) before building the op.
func.func @expand_negative(%x: tensor<3x1xf32>) {
  // expected-error @below {{target shape [-1, 4] has a negative dimension}}
  // expected-error @below {{'merak.expand' op failed to infer returned types}}
  %0 = merak.expand %x {shape = array<i64: -1, 4>} : (tensor<3x1xf32>) -> tensor<3x4xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// pad
//===----------------------------------------------------------------------===//

func.func @pad_entries(%x: tensor<4x4xf32>) {
  // expected-error @below {{low and high need 2 entries each}}
  // expected-error @below {{'merak.pad' op failed to infer returned types}}
  %0 = merak.pad %x {low = array<i64: 1>, high = array<i64: 1, 1>} : (tensor<4x4xf32>) -> tensor<6x5xf32>
  return
}

// -----

func.func @pad_negative(%x: tensor<4x4xf32>) {
  // expected-error @below {{negative padding at dimension 1}}
  // expected-error @below {{'merak.pad' op failed to infer returned types}}
  %0 = merak.pad %x {low = array<i64: 0, 0>, high = array<i64: 0, -1>} : (tensor<4x4xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @pad_result_mismatch(%x: tensor<4x4xf32>) {
  // expected-error @below {{'merak.pad' op inferred type(s) 'tensor<5x7xf32>' are incompatible with return type(s) of operation 'tensor<4x4xf32>'}}
  // expected-error @below {{'merak.pad' op failed to infer returned types}}
  %0 = merak.pad %x {low = array<i64: 1, 1>, high = array<i64: 0, 2>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// roll
//===----------------------------------------------------------------------===//

func.func @roll_counts(%x: tensor<4x6xf32>) {
  // expected-error @below {{'merak.roll' op has 2 shifts but 1 dims}}
  %0 = merak.roll %x {shifts = array<i64: 1, 2>, dims = array<i64: 0>} : tensor<4x6xf32>
  return
}

// -----

func.func @roll_dim_out_of_range(%x: tensor<4x6xf32>) {
  // expected-error @below {{'merak.roll' op dim -3 is out of range for a tensor of rank 2}}
  %0 = merak.roll %x {shifts = array<i64: 1>, dims = array<i64: -3>} : tensor<4x6xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

func.func @reduce_sum_dim_out_of_range(%x: tensor<2x3xf32>) {
  // expected-error @below {{dim 2 is out of range for a tensor of rank 2}}
  // expected-error @below {{'merak.reduce_sum' op failed to infer returned types}}
  %0 = merak.reduce_sum %x {dims = array<i64: 2>} : (tensor<2x3xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @reduce_mean_twice(%x: tensor<2x3x4xf32>) {
  // expected-error @below {{dimension -2 is reduced twice}}
  // expected-error @below {{'merak.reduce_mean' op failed to infer returned types}}
  %0 = merak.reduce_mean %x {dims = array<i64: 1, -2>} : (tensor<2x3x4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @reduce_max_keepdim_mismatch(%x: tensor<2x3xf32>) {
  // expected-error @below {{'merak.reduce_max' op inferred type(s) 'tensor<2x1xf32>' are incompatible with return type(s) of operation 'tensor<2xf32>'}}
  // expected-error @below {{'merak.reduce_max' op failed to infer returned types}}
  %0 = merak.reduce_max %x {dims = array<i64: 1>, keepdim = true} : (tensor<2x3xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @reduce_max_dim_out_of_range(%x: tensor<f32>) {
  // expected-error @below {{dim 0 is out of range for a tensor of rank 0}}
  // expected-error @below {{'merak.reduce_max' op failed to infer returned types}}
  %0 = merak.reduce_max %x {dims = array<i64: 0>} : (tensor<f32>) -> tensor<f32>
  return
}

// -----

func.func @reduce_sum_no_dims(%x: tensor<2x3xf32>) {
  // expected-error @below {{'merak.reduce_sum' op requires attribute 'dims'}}
  %0 = merak.reduce_sum %x : (tensor<2x3xf32>) -> tensor<f32>
  return
}

// -----

func.func @update_slice_does_not_fit(%c: tensor<2x4x8xf32>, %u: tensor<2x5x8xf32>, %p: tensor<1xi64>) {
  // expected-error @below {{update [2, 5, 8] does not fit input [2, 4, 8] along dimension 1}}
  // expected-error @below {{'merak.update_slice' op failed to infer returned types}}
  %0 = merak.update_slice %c, %u, %p {dim = 1 : i64} : (tensor<2x4x8xf32>, tensor<2x5x8xf32>, tensor<1xi64>) -> tensor<2x4x8xf32>
  return
}

// -----

func.func @update_slice_other_dims_differ(%c: tensor<2x4x8xf32>, %u: tensor<2x1x7xf32>, %p: tensor<1xi64>) {
  // expected-error @below {{update [2, 1, 7] does not fit input [2, 4, 8] along dimension 1}}
  // expected-error @below {{'merak.update_slice' op failed to infer returned types}}
  %0 = merak.update_slice %c, %u, %p {dim = 1 : i64} : (tensor<2x4x8xf32>, tensor<2x1x7xf32>, tensor<1xi64>) -> tensor<2x4x8xf32>
  return
}

// -----

func.func @update_slice_two_positions(%c: tensor<2x4x8xf32>, %u: tensor<2x1x8xf32>, %p: tensor<2xi64>) {
  // expected-error @below {{position must have one element, got [2]}}
  // expected-error @below {{'merak.update_slice' op failed to infer returned types}}
  %0 = merak.update_slice %c, %u, %p {dim = 1 : i64} : (tensor<2x4x8xf32>, tensor<2x1x8xf32>, tensor<2xi64>) -> tensor<2x4x8xf32>
  return
}

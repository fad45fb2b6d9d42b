// Diagnostics of merak linear algebra, softmax, normalization, embedding, convolution, pooling and loss ops.
// RUN: merak-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// linear: input [..., K], weight [N, K], bias [N]
//===----------------------------------------------------------------------===//

func.func @linear_element_types(%x: tensor<2x8xf32>, %w: tensor<16x8xbf16>) {
  // expected-error @below {{input element type 'f32' differs from weight element type 'bf16'}}
  // expected-error @below {{'merak.linear' op failed to infer returned types}}
  %0 = merak.linear %x, %w : (tensor<2x8xf32>, tensor<16x8xbf16>) -> tensor<2x16xf32>
  return
}

// -----

func.func @linear_weight_rank(%x: tensor<2x8xf32>, %w: tensor<8xf32>) {
  // expected-error @below {{weight must have rank 2 ([out, in]), got [8]}}
  // expected-error @below {{'merak.linear' op failed to infer returned types}}
  %0 = merak.linear %x, %w : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @linear_input_rank0(%x: tensor<f32>, %w: tensor<16x1xf32>) {
  // expected-error @below {{input must have rank >= 1}}
  // expected-error @below {{'merak.linear' op failed to infer returned types}}
  %0 = merak.linear %x, %w : (tensor<f32>, tensor<16x1xf32>) -> tensor<16xf32>
  return
}

// -----

// The weight is [out, in] (PyTorch layout), not [in, out].
func.func @linear_contracting(%x: tensor<2x8xf32>, %w: tensor<8x16xf32>) {
  // expected-error @below {{input's last dimension (8) differs from weight dimension 1 (16)}}
  // expected-error @below {{'merak.linear' op failed to infer returned types}}
  %0 = merak.linear %x, %w : (tensor<2x8xf32>, tensor<8x16xf32>) -> tensor<2x16xf32>
  return
}

// -----

func.func @linear_bias_shape(%x: tensor<2x8xf32>, %w: tensor<16x8xf32>, %b: tensor<8xf32>) {
  // expected-error @below {{bias shape [8] differs from [16]}}
  // expected-error @below {{'merak.linear' op failed to infer returned types}}
  %0 = merak.linear %x, %w, %b : (tensor<2x8xf32>, tensor<16x8xf32>, tensor<8xf32>) -> tensor<2x16xf32>
  return
}

// -----

func.func @linear_bias_rank(%x: tensor<2x8xf32>, %w: tensor<16x8xf32>, %b: tensor<1x16xf32>) {
  // expected-error @below {{bias shape [1, 16] differs from [16]}}
  // expected-error @below {{'merak.linear' op failed to infer returned types}}
  %0 = merak.linear %x, %w, %b : (tensor<2x8xf32>, tensor<16x8xf32>, tensor<1x16xf32>) -> tensor<2x16xf32>
  return
}

// -----

func.func @linear_bias_element_type(%x: tensor<2x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf16>) {
  // expected-error @below {{input element type 'f32' differs from bias element type 'f16'}}
  // expected-error @below {{'merak.linear' op failed to infer returned types}}
  %0 = merak.linear %x, %w, %b : (tensor<2x8xf32>, tensor<16x8xf32>, tensor<16xf16>) -> tensor<2x16xf32>
  return
}

// -----

func.func @linear_int(%x: tensor<2x8xi32>, %w: tensor<16x8xi32>) {
  // expected-error @below {{'merak.linear' op operand #0 must be statically shaped tensor of 16-bit float or bfloat16 type or 32-bit float or 64-bit float values, but got 'tensor<2x8xi32>'}}
  %0 = merak.linear %x, %w : (tensor<2x8xi32>, tensor<16x8xi32>) -> tensor<2x16xi32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// matmul: [..., M, K] x [..., K, N]
//===----------------------------------------------------------------------===//

func.func @matmul_element_types(%a: tensor<3x4xf32>, %b: tensor<4x5xf16>) {
  // expected-error @below {{lhs element type 'f32' differs from rhs element type 'f16'}}
  // expected-error @below {{'merak.matmul' op failed to infer returned types}}
  %0 = merak.matmul %a, %b : (tensor<3x4xf32>, tensor<4x5xf16>) -> tensor<3x5xf32>
  return
}

// -----

// mv and dot import with a reshape to rank 2 first.
func.func @matmul_rank1(%a: tensor<3x4xf32>, %b: tensor<4xf32>) {
  // expected-error @below {{operands must have rank >= 2, got [3, 4] and [4]}}
  // expected-error @below {{'merak.matmul' op failed to infer returned types}}
  %0 = merak.matmul %a, %b : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3xf32>
  return
}

// -----

func.func @matmul_contracting(%a: tensor<2x3x4xf32>, %b: tensor<5x6xf32>) {
  // expected-error @below {{contracting dimensions differ: lhs dimension 2 is 4, rhs dimension 0 is 5}}
  // expected-error @below {{'merak.matmul' op failed to infer returned types}}
  %0 = merak.matmul %a, %b : (tensor<2x3x4xf32>, tensor<5x6xf32>) -> tensor<2x3x6xf32>
  return
}

// -----

func.func @matmul_batch(%a: tensor<2x3x4xf32>, %b: tensor<5x4x6xf32>) {
  // expected-error @below {{batch dimensions [2] and [5] do not broadcast at dimension 0}}
  // expected-error @below {{'merak.matmul' op failed to infer returned types}}
  %0 = merak.matmul %a, %b : (tensor<2x3x4xf32>, tensor<5x4x6xf32>) -> tensor<2x3x6xf32>
  return
}

// -----

func.func @matmul_result_mismatch(%a: tensor<1x3x4xf32>, %b: tensor<7x4x6xf32>) {
  // expected-error @below {{'merak.matmul' op inferred type(s) 'tensor<7x3x6xf32>' are incompatible with return type(s) of operation 'tensor<1x3x6xf32>'}}
  // expected-error @below {{'merak.matmul' op failed to infer returned types}}
  %0 = merak.matmul %a, %b : (tensor<1x3x4xf32>, tensor<7x4x6xf32>) -> tensor<1x3x6xf32>
  return
}

// -----

func.func @linear_weight_backward_leading(%g: tensor<2x3x16xf32>, %x: tensor<3x2x8xf32>) {
  // expected-error @below {{'merak.linear_weight_backward' op grad [2, 3, 16] and input [3, 2, 8] must have the same leading dimensions}}
  %0 = merak.linear_weight_backward %g, %x : (tensor<2x3x16xf32>, tensor<3x2x8xf32>) -> tensor<16x8xf32>
  return
}

// -----

func.func @linear_weight_backward_result(%g: tensor<2x3x16xf32>, %x: tensor<2x3x8xf32>) {
  // expected-error @below {{'merak.linear_weight_backward' op result [8, 16] must be [16, 8]}}
  %0 = merak.linear_weight_backward %g, %x : (tensor<2x3x16xf32>, tensor<2x3x8xf32>) -> tensor<8x16xf32>
  return
}

// -----

func.func @linear_weight_backward_types(%g: tensor<2x3x16xbf16>, %x: tensor<2x3x8xf32>) {
  // expected-error @below {{'merak.linear_weight_backward' op grad, input and result must have one element type, got 'bf16', 'f32' and 'f32'}}
  %0 = merak.linear_weight_backward %g, %x : (tensor<2x3x16xbf16>, tensor<2x3x8xf32>) -> tensor<16x8xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// softmax, log_softmax, softmax_backward
//===----------------------------------------------------------------------===//

func.func @softmax_dim(%x: tensor<2x3xf32>) {
  // expected-error @below {{'merak.softmax' op dim 2 is out of range for a tensor of rank 2}}
  %0 = merak.softmax %x {dim = 2 : i64} : tensor<2x3xf32>
  return
}

// -----

func.func @softmax_int(%x: tensor<2x3xi64>) {
  // expected-error @below {{'merak.softmax' op operand #0 must be statically shaped tensor of 16-bit float}}
  %0 = merak.softmax %x {dim = 1 : i64} : tensor<2x3xi64>
  return
}

// -----

func.func @log_softmax_dim(%x: tensor<2x3xf32>) {
  // expected-error @below {{'merak.log_softmax' op dim -3 is out of range for a tensor of rank 2}}
  %0 = merak.log_softmax %x {dim = -3 : i64} : tensor<2x3xf32>
  return
}

// -----

func.func @log_softmax_result_mismatch(%x: tensor<2x3xf32>) {
  // expected-error @below {{'merak.log_softmax' op requires the same type for all operands and results}}
  %0 = "merak.log_softmax"(%x) <{dim = 1 : i64}> : (tensor<2x3xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @softmax_backward_dim(%g: tensor<2x3xf32>, %y: tensor<2x3xf32>) {
  // expected-error @below {{'merak.softmax_backward' op dim 2 is out of range for a tensor of rank 2}}
  %0 = merak.softmax_backward %g, %y {dim = 2 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @softmax_backward_types(%g: tensor<2x3xf32>, %y: tensor<3x2xf32>) {
  // expected-error @below {{'merak.softmax_backward' op failed to verify that all of {grad, output, result} have same type}}
  %0 = merak.softmax_backward %g, %y {dim = 1 : i64} : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x3xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// layer_norm, rms_norm
//===----------------------------------------------------------------------===//

func.func @layer_norm_rank_zero(%x: tensor<2x8xf32>) {
  // expected-error @below {{normalized_rank 0 is not in [1, 2]}}
  // expected-error @below {{'merak.layer_norm' op failed to infer returned types}}
  %0 = merak.layer_norm %x {normalized_rank = 0 : i64, eps = 1.0e-5 : f64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @layer_norm_rank_too_large(%x: tensor<2x8xf32>, %w: tensor<8xf32>) {
  // expected-error @below {{normalized_rank 3 is not in [1, 2]}}
  // expected-error @below {{'merak.layer_norm' op failed to infer returned types}}
  %0 = merak.layer_norm %x weight %w {normalized_rank = 3 : i64, eps = 1.0e-5 : f64} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @layer_norm_weight_shape(%x: tensor<2x5x8xf32>, %w: tensor<8xf32>) {
  // expected-error @below {{weight shape [8] differs from the normalized shape [5, 8]}}
  // expected-error @below {{'merak.layer_norm' op failed to infer returned types}}
  %0 = merak.layer_norm %x weight %w {normalized_rank = 2 : i64, eps = 1.0e-5 : f64} : (tensor<2x5x8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  return
}

// -----

func.func @layer_norm_bias_shape(%x: tensor<2x5x8xf32>, %w: tensor<8xf32>, %b: tensor<5xf32>) {
  // expected-error @below {{bias shape [5] differs from the normalized shape [8]}}
  // expected-error @below {{'merak.layer_norm' op failed to infer returned types}}
  %0 = merak.layer_norm %x weight %w bias %b {normalized_rank = 1 : i64, eps = 1.0e-5 : f64} : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<5xf32>) -> tensor<2x5x8xf32>
  return
}

// -----

func.func @layer_norm_weight_element_type(%x: tensor<2x8xf32>, %w: tensor<8xf16>) {
  // expected-error @below {{input element type 'f32' differs from weight element type 'f16'}}
  // expected-error @below {{'merak.layer_norm' op failed to infer returned types}}
  %0 = merak.layer_norm %x weight %w {normalized_rank = 1 : i64, eps = 1.0e-5 : f64} : (tensor<2x8xf32>, tensor<8xf16>) -> tensor<2x8xf32>
  return
}

// -----

func.func @layer_norm_bias_element_type(%x: tensor<2x8xf32>, %b: tensor<8xbf16>) {
  // expected-error @below {{input element type 'f32' differs from bias element type 'bf16'}}
  // expected-error @below {{'merak.layer_norm' op failed to infer returned types}}
  %0 = merak.layer_norm %x bias %b {normalized_rank = 1 : i64, eps = 1.0e-5 : f64} : (tensor<2x8xf32>, tensor<8xbf16>) -> tensor<2x8xf32>
  return
}

// -----

func.func @layer_norm_no_eps(%x: tensor<2x8xf32>) {
  // expected-error @below {{'merak.layer_norm' op requires attribute 'eps'}}
  %0 = merak.layer_norm %x {normalized_rank = 1 : i64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @rms_norm_rank(%x: tensor<2x8xf32>) {
  // expected-error @below {{normalized_rank 0 is not in [1, 2]}}
  // expected-error @below {{'merak.rms_norm' op failed to infer returned types}}
  %0 = merak.rms_norm %x {normalized_rank = 0 : i64, eps = 1.0e-5 : f64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @rms_norm_weight_shape(%x: tensor<2x8xf32>, %w: tensor<2x8xf32>) {
  // expected-error @below {{weight shape [2, 8] differs from the normalized shape [8]}}
  // expected-error @below {{'merak.rms_norm' op failed to infer returned types}}
  %0 = merak.rms_norm %x weight %w {normalized_rank = 1 : i64, eps = 1.0e-5 : f64} : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @rms_norm_weight_element_type(%x: tensor<2x8xbf16>, %w: tensor<8xf32>) {
  // expected-error @below {{input element type 'bf16' differs from weight element type 'f32'}}
  // expected-error @below {{'merak.rms_norm' op failed to infer returned types}}
  %0 = merak.rms_norm %x weight %w {normalized_rank = 1 : i64, eps = 1.0e-5 : f64} : (tensor<2x8xbf16>, tensor<8xf32>) -> tensor<2x8xbf16>
  return
}

// -----

//===----------------------------------------------------------------------===//
// batch_norm: input [N, C, ...], every parameter [C]
//===----------------------------------------------------------------------===//

func.func @batch_norm_rank1(%x: tensor<3xf32>, %p: tensor<3xf32>) {
  // expected-error @below {{input must have rank >= 2 (N, C, ...)}}
  // expected-error @below {{'merak.batch_norm' op failed to infer returned types}}
  %0:3 = merak.batch_norm %x, %p, %p, %p, %p {training = true, momentum = 0.1 : f64, eps = 1.0e-5 : f64} : (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)
  return
}

// -----

func.func @batch_norm_weight(%x: tensor<4x3x8x8xf32>, %w: tensor<4xf32>, %p: tensor<3xf32>) {
  // expected-error @below {{weight shape [4] differs from [3] (the input's channel dimension 1)}}
  // expected-error @below {{'merak.batch_norm' op failed to infer returned types}}
  %0:3 = merak.batch_norm %x, %w, %p, %p, %p {training = true, momentum = 0.1 : f64, eps = 1.0e-5 : f64} : (tensor<4x3x8x8xf32>, tensor<4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<4x3x8x8xf32>, tensor<3xf32>, tensor<3xf32>)
  return
}

// -----

func.func @batch_norm_bias(%x: tensor<4x3x8x8xf32>, %b: tensor<3x1xf32>, %p: tensor<3xf32>) {
  // expected-error @below {{bias shape [3, 1] differs from [3] (the input's channel dimension 1)}}
  // expected-error @below {{'merak.batch_norm' op failed to infer returned types}}
  %0:3 = merak.batch_norm %x, %p, %b, %p, %p {training = true, momentum = 0.1 : f64, eps = 1.0e-5 : f64} : (tensor<4x3x8x8xf32>, tensor<3xf32>, tensor<3x1xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<4x3x8x8xf32>, tensor<3xf32>, tensor<3xf32>)
  return
}

// -----

func.func @batch_norm_running_mean(%x: tensor<4x3xf32>, %m: tensor<4xf32>, %p: tensor<3xf32>) {
  // expected-error @below {{running_mean shape [4] differs from [3] (the input's channel dimension 1)}}
  // expected-error @below {{'merak.batch_norm' op failed to infer returned types}}
  %0:3 = merak.batch_norm %x, %p, %p, %m, %p {training = false, momentum = 0.1 : f64, eps = 1.0e-5 : f64} : (tensor<4x3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<4xf32>, tensor<3xf32>) -> (tensor<4x3xf32>, tensor<4xf32>, tensor<3xf32>)
  return
}

// -----

func.func @batch_norm_running_var(%x: tensor<4x3xf32>, %v: tensor<f32>, %p: tensor<3xf32>) {
  // expected-error @below {{running_var shape [] differs from [3] (the input's channel dimension 1)}}
  // expected-error @below {{'merak.batch_norm' op failed to infer returned types}}
  %0:3 = merak.batch_norm %x, %p, %p, %p, %v {training = false, momentum = 0.1 : f64, eps = 1.0e-5 : f64} : (tensor<4x3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<f32>) -> (tensor<4x3xf32>, tensor<3xf32>, tensor<f32>)
  return
}

// -----

func.func @batch_norm_result_count(%x: tensor<4x3xf32>, %p: tensor<3xf32>) {
  // expected-error @below {{'merak.batch_norm' op expected 3 results}}
  %0 = "merak.batch_norm"(%x, %p, %p, %p, %p) <{training = true, momentum = 0.1 : f64, eps = 1.0e-5 : f64}> : (tensor<4x3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  return
}

// -----

// The new running statistics have the types of the old ones.
func.func @batch_norm_result_mismatch(%x: tensor<4x3xf32>, %p: tensor<3xf32>) {
  // expected-error @below {{'merak.batch_norm' op inferred type(s) 'tensor<4x3xf32>', 'tensor<3xf32>', 'tensor<3xf32>' are incompatible with return type(s) of operation 'tensor<4x3xf32>', 'tensor<3xf16>', 'tensor<3xf32>'}}
  // expected-error @below {{'merak.batch_norm' op failed to infer returned types}}
  %0:3 = merak.batch_norm %x, %p, %p, %p, %p {training = true, momentum = 0.1 : f64, eps = 1.0e-5 : f64} : (tensor<4x3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<4x3xf32>, tensor<3xf16>, tensor<3xf32>)
  return
}

// -----

//===----------------------------------------------------------------------===//
// embedding
//===----------------------------------------------------------------------===//

func.func @embedding_weight_rank(%w: tensor<100xf32>, %i: tensor<2xi64>) {
  // expected-error @below {{weight must have rank 2, got [100]}}
  // expected-error @below {{'merak.embedding' op failed to infer returned types}}
  %0 = merak.embedding %w, %i : (tensor<100xf32>, tensor<2xi64>) -> tensor<2xf32>
  return
}

// -----

func.func @embedding_float_indices(%w: tensor<100x16xf32>, %i: tensor<2xf32>) {
  // expected-error @below {{'merak.embedding' op operand #1 must be statically shaped tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<2xf32>'}}
  %0 = merak.embedding %w, %i : (tensor<100x16xf32>, tensor<2xf32>) -> tensor<2x16xf32>
  return
}

// -----

func.func @embedding_padding_idx_too_large(%w: tensor<100x16xf32>, %i: tensor<2xi64>) {
  // expected-error @below {{padding_idx 100 is not a row of weight [100, 16]}}
  // expected-error @below {{'merak.embedding' op failed to infer returned types}}
  %0 = merak.embedding %w, %i {padding_idx = 100 : i64} : (tensor<100x16xf32>, tensor<2xi64>) -> tensor<2x16xf32>
  return
}

// -----

// padding_idx is normalized; aten::embedding's "no padding" -1 is no attribute.
func.func @embedding_padding_idx_negative(%w: tensor<100x16xf32>, %i: tensor<2xi64>) {
  // expected-error @below {{padding_idx -1 is not a row of weight [100, 16]}}
  // expected-error @below {{'merak.embedding' op failed to infer returned types}}
  %0 = merak.embedding %w, %i {padding_idx = -1 : i64} : (tensor<100x16xf32>, tensor<2xi64>) -> tensor<2x16xf32>
  return
}

// -----

func.func @embedding_result_mismatch(%w: tensor<100x16xf32>, %i: tensor<2x3xi32>) {
  // expected-error @below {{'merak.embedding' op inferred type(s) 'tensor<2x3x16xf32>' are incompatible with return type(s) of operation 'tensor<6x16xf32>'}}
  // expected-error @below {{'merak.embedding' op failed to infer returned types}}
  %0 = merak.embedding %w, %i : (tensor<100x16xf32>, tensor<2x3xi32>) -> tensor<6x16xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// conv2d: NCHW input, OIHW weight
//===----------------------------------------------------------------------===//

func.func @conv2d_input_rank(%x: tensor<3x32x32xf32>, %w: tensor<16x3x3x3xf32>) {
  // expected-error @below {{input must be NCHW (rank 4), got [3, 32, 32]}}
  // expected-error @below {{'merak.conv2d' op failed to infer returned types}}
  %0 = merak.conv2d %x, %w {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, groups = 1 : i64} : (tensor<3x32x32xf32>, tensor<16x3x3x3xf32>) -> tensor<16x30x30xf32>
  return
}

// -----

func.func @conv2d_weight_rank(%x: tensor<1x3x32x32xf32>, %w: tensor<16x3x3xf32>) {
  // expected-error @below {{weight must be OIHW (rank 4), got [16, 3, 3]}}
  // expected-error @below {{'merak.conv2d' op failed to infer returned types}}
  %0 = merak.conv2d %x, %w {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x3x32x32xf32>, tensor<16x3x3xf32>) -> tensor<1x16x30x30xf32>
  return
}

// -----

func.func @conv2d_weight_element_type(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf16>) {
  // expected-error @below {{input element type 'f32' differs from weight element type 'f16'}}
  // expected-error @below {{'merak.conv2d' op failed to infer returned types}}
  %0 = merak.conv2d %x, %w {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf16>) -> tensor<1x4x6x6xf32>
  return
}

// -----

func.func @conv2d_stride_entries(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) {
  // expected-error @below {{stride must have 2 entries, got 1}}
  // expected-error @below {{'merak.conv2d' op failed to infer returned types}}
  %0 = merak.conv2d %x, %w {stride = array<i64: 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32>
  return
}

// -----

func.func @conv2d_stride_zero(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) {
  // expected-error @below {{stride entries must be >= 1, got [1, 0]}}
  // expected-error @below {{'merak.conv2d' op failed to infer returned types}}
  %0 = merak.conv2d %x, %w {stride = array<i64: 1, 0>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32>
  return
}

// -----

func.func @conv2d_padding_negative(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) {
  // expected-error @below {{padding entries must be >= 0, got [-1, 0]}}
  // expected-error @below {{'merak.conv2d' op failed to infer returned types}}
  %0 = merak.conv2d %x, %w {stride = array<i64: 1, 1>, padding = array<i64: -1, 0>, dilation = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32>
  return
}

// -----

func.func @conv2d_dilation_entries(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) {
  // expected-error @below {{dilation must have 2 entries, got 3}}
  // expected-error @below {{'merak.conv2d' op failed to infer returned types}}
  %0 = merak.conv2d %x, %w {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1, 1>, groups = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32>
  return
}

// -----

func.func @conv2d_groups_zero(%x: tensor<1x4x8x8xf32>, %w: tensor<4x4x3x3xf32>) {
  // expected-error @below {{groups 0 must divide the input channels (4) and output channels (4)}}
  // expected-error @below {{'merak.conv2d' op failed to infer returned types}}
  %0 = merak.conv2d %x, %w {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, groups = 0 : i64} : (tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32>
  return
}

// -----

func.func @conv2d_groups_divide(%x: tensor<1x4x8x8xf32>, %w: tensor<6x1x3x3xf32>) {
  // expected-error @below {{groups 4 must divide the input channels (4) and output channels (6)}}
  // expected-error @below {{'merak.conv2d' op failed to infer returned types}}
  %0 = merak.conv2d %x, %w {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, groups = 4 : i64} : (tensor<1x4x8x8xf32>, tensor<6x1x3x3xf32>) -> tensor<1x6x6x6xf32>
  return
}

// -----

func.func @conv2d_in_channels(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error @below {{weight dimension 1 (4) times groups (2) differs from the input channels (4)}}
  // expected-error @below {{'merak.conv2d' op failed to infer returned types}}
  %0 = merak.conv2d %x, %w {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, groups = 2 : i64} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
  return
}

// -----

func.func @conv2d_bias_shape(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<3xf32>) {
  // expected-error @below {{bias shape [3] differs from [4]}}
  // expected-error @below {{'merak.conv2d' op failed to infer returned types}}
  %0 = merak.conv2d %x, %w, %b {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<3xf32>) -> tensor<1x4x6x6xf32>
  return
}

// -----

func.func @conv2d_bias_element_type(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<4xf64>) {
  // expected-error @below {{input element type 'f32' differs from bias element type 'f64'}}
  // expected-error @below {{'merak.conv2d' op failed to infer returned types}}
  %0 = merak.conv2d %x, %w, %b {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf64>) -> tensor<1x4x6x6xf32>
  return
}

// -----

// A dilated 3x3 kernel spans 5 rows; the input has 4.
func.func @conv2d_kernel_too_large(%x: tensor<1x3x4x8xf32>, %w: tensor<4x3x3x3xf32>) {
  // expected-error @below {{kernel does not fit spatial dimension 2 of size 4}}
  // expected-error @below {{'merak.conv2d' op failed to infer returned types}}
  %0 = merak.conv2d %x, %w {stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 2, 1>, groups = 1 : i64} : (tensor<1x3x4x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x1x6xf32>
  return
}

// -----

func.func @conv2d_result_mismatch(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) {
  // expected-error @below {{'merak.conv2d' op inferred type(s) 'tensor<1x4x3x3xf32>' are incompatible with return type(s) of operation 'tensor<1x4x4x4xf32>'}}
  // expected-error @below {{'merak.conv2d' op failed to infer returned types}}
  %0 = merak.conv2d %x, %w {stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x4x4xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// max_pool2d, avg_pool2d: NCHW or CHW
//===----------------------------------------------------------------------===//

func.func @max_pool2d_input_rank(%x: tensor<8x8xf32>) {
  // expected-error @below {{input must be NCHW or CHW, got [8, 8]}}
  // expected-error @below {{'merak.max_pool2d' op failed to infer returned types}}
  %0 = merak.max_pool2d %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<8x8xf32>) -> tensor<4x4xf32>
  return
}

// -----

func.func @max_pool2d_kernel_entries(%x: tensor<1x1x8x8xf32>) {
  // expected-error @below {{kernel must have 2 entries, got 1}}
  // expected-error @below {{'merak.max_pool2d' op failed to infer returned types}}
  %0 = merak.max_pool2d %x {kernel = array<i64: 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x1x8x8xf32>) -> tensor<1x1x4x4xf32>
  return
}

// -----

func.func @max_pool2d_kernel_zero(%x: tensor<1x1x8x8xf32>) {
  // expected-error @below {{kernel entries must be >= 1, got [0, 2]}}
  // expected-error @below {{'merak.max_pool2d' op failed to infer returned types}}
  %0 = merak.max_pool2d %x {kernel = array<i64: 0, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x1x8x8xf32>) -> tensor<1x1x4x4xf32>
  return
}

// -----

func.func @max_pool2d_stride_zero(%x: tensor<1x1x8x8xf32>) {
  // expected-error @below {{stride entries must be >= 1, got [0, 0]}}
  // expected-error @below {{'merak.max_pool2d' op failed to infer returned types}}
  %0 = merak.max_pool2d %x {kernel = array<i64: 2, 2>, stride = array<i64: 0, 0>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x1x8x8xf32>) -> tensor<1x1x4x4xf32>
  return
}

// -----

func.func @max_pool2d_padding_negative(%x: tensor<1x1x8x8xf32>) {
  // expected-error @below {{padding entries must be >= 0, got [0, -1]}}
  // expected-error @below {{'merak.max_pool2d' op failed to infer returned types}}
  %0 = merak.max_pool2d %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, -1>, dilation = array<i64: 1, 1>} : (tensor<1x1x8x8xf32>) -> tensor<1x1x4x4xf32>
  return
}

// -----

func.func @max_pool2d_dilation_zero(%x: tensor<1x1x8x8xf32>) {
  // expected-error @below {{dilation entries must be >= 1, got [1, 0]}}
  // expected-error @below {{'merak.max_pool2d' op failed to infer returned types}}
  %0 = merak.max_pool2d %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 0>} : (tensor<1x1x8x8xf32>) -> tensor<1x1x4x4xf32>
  return
}

// -----

func.func @max_pool2d_padding_over_half(%x: tensor<1x1x8x8xf32>) {
  // expected-error @below {{padding 2 exceeds half the kernel size 3}}
  // expected-error @below {{'merak.max_pool2d' op failed to infer returned types}}
  %0 = merak.max_pool2d %x {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 2>, dilation = array<i64: 1, 1>} : (tensor<1x1x8x8xf32>) -> tensor<1x1x8x10xf32>
  return
}

// -----

func.func @max_pool2d_window_too_large(%x: tensor<1x1x8x2xf32>) {
  // expected-error @below {{window does not fit spatial dimension 3 of size 2}}
  // expected-error @below {{'merak.max_pool2d' op failed to infer returned types}}
  %0 = merak.max_pool2d %x {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x1x8x2xf32>) -> tensor<1x1x6x1xf32>
  return
}

// -----

// With a CHW input the spatial dimensions are 1 and 2.
func.func @max_pool2d_window_too_large_chw(%x: tensor<3x2x8xf32>) {
  // expected-error @below {{window does not fit spatial dimension 1 of size 2}}
  // expected-error @below {{'merak.max_pool2d' op failed to infer returned types}}
  %0 = merak.max_pool2d %x {kernel = array<i64: 2, 2>, stride = array<i64: 1, 1>, padding = array<i64: 0, 0>, dilation = array<i64: 2, 1>} : (tensor<3x2x8xf32>) -> tensor<3x1x7xf32>
  return
}

// -----

func.func @max_pool2d_result_mismatch(%x: tensor<1x1x5x5xf32>) {
  // expected-error @below {{'merak.max_pool2d' op inferred type(s) 'tensor<1x1x2x2xf32>' are incompatible with return type(s) of operation 'tensor<1x1x3x3xf32>'}}
  // expected-error @below {{'merak.max_pool2d' op failed to infer returned types}}
  %0 = merak.max_pool2d %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x1x5x5xf32>) -> tensor<1x1x3x3xf32>
  return
}

// -----

func.func @avg_pool2d_input_rank(%x: tensor<1x1x1x8x8xf32>) {
  // expected-error @below {{input must be NCHW or CHW, got [1, 1, 1, 8, 8]}}
  // expected-error @below {{'merak.avg_pool2d' op failed to infer returned types}}
  %0 = merak.avg_pool2d %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>} : (tensor<1x1x1x8x8xf32>) -> tensor<1x1x1x4x4xf32>
  return
}

// -----

func.func @avg_pool2d_stride_entries(%x: tensor<1x1x8x8xf32>) {
  // expected-error @below {{stride must have 2 entries, got 0}}
  // expected-error @below {{'merak.avg_pool2d' op failed to infer returned types}}
  %0 = merak.avg_pool2d %x {kernel = array<i64: 2, 2>, stride = array<i64>, padding = array<i64: 0, 0>} : (tensor<1x1x8x8xf32>) -> tensor<1x1x4x4xf32>
  return
}

// -----

func.func @avg_pool2d_padding_over_half(%x: tensor<1x1x8x8xf32>) {
  // expected-error @below {{padding 2 exceeds half the kernel size 2}}
  // expected-error @below {{'merak.avg_pool2d' op failed to infer returned types}}
  %0 = merak.avg_pool2d %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 2, 0>} : (tensor<1x1x8x8xf32>) -> tensor<1x1x6x4xf32>
  return
}

// -----

func.func @avg_pool2d_window_too_large(%x: tensor<1x1x1x8xf32>) {
  // expected-error @below {{window does not fit spatial dimension 2 of size 1}}
  // expected-error @below {{'merak.avg_pool2d' op failed to infer returned types}}
  %0 = merak.avg_pool2d %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>} : (tensor<1x1x1x8xf32>) -> tensor<1x1x0x4xf32>
  return
}

// -----

// ceil_mode changes the output size: 3, not 2.
func.func @avg_pool2d_result_mismatch(%x: tensor<1x1x5x5xf32>) {
  // expected-error @below {{'merak.avg_pool2d' op inferred type(s) 'tensor<1x1x3x3xf32>' are incompatible with return type(s) of operation 'tensor<1x1x2x2xf32>'}}
  // expected-error @below {{'merak.avg_pool2d' op failed to infer returned types}}
  %0 = merak.avg_pool2d %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>, ceil_mode = true} : (tensor<1x1x5x5xf32>) -> tensor<1x1x2x2xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// adaptive_avg_pool2d
//===----------------------------------------------------------------------===//

func.func @adaptive_avg_pool2d_input_rank(%x: tensor<8x8xf32>) {
  // expected-error @below {{input must be NCHW or CHW, got [8, 8]}}
  // expected-error @below {{'merak.adaptive_avg_pool2d' op failed to infer returned types}}
  %0 = merak.adaptive_avg_pool2d %x {output_size = array<i64: 1, 1>} : (tensor<8x8xf32>) -> tensor<1x1xf32>
  return
}

// -----

func.func @adaptive_avg_pool2d_entries(%x: tensor<1x3x8x8xf32>) {
  // expected-error @below {{output_size must have 2 entries, got 1}}
  // expected-error @below {{'merak.adaptive_avg_pool2d' op failed to infer returned types}}
  %0 = merak.adaptive_avg_pool2d %x {output_size = array<i64: 1>} : (tensor<1x3x8x8xf32>) -> tensor<1x3x1x1xf32>
  return
}

// -----

func.func @adaptive_avg_pool2d_zero(%x: tensor<1x3x8x8xf32>) {
  // expected-error @below {{output_size entries must be >= 1, got [0, 1]}}
  // expected-error @below {{'merak.adaptive_avg_pool2d' op failed to infer returned types}}
  %0 = merak.adaptive_avg_pool2d %x {output_size = array<i64: 0, 1>} : (tensor<1x3x8x8xf32>) -> tensor<1x3x0x1xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// cross_entropy: logits [N, C], target [N]
//===----------------------------------------------------------------------===//

func.func @cross_entropy_logits_rank(%l: tensor<2x8x10xf32>, %t: tensor<2x8xi64>) {
  // expected-error @below {{logits must be [N, C], got [2, 8, 10]}}
  // expected-error @below {{'merak.cross_entropy' op failed to infer returned types}}
  %0 = merak.cross_entropy %l, %t : (tensor<2x8x10xf32>, tensor<2x8xi64>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_target_shape(%l: tensor<8x10xf32>, %t: tensor<10xi64>) {
  // expected-error @below {{target shape [10] differs from [8] (logits dimension 0)}}
  // expected-error @below {{'merak.cross_entropy' op failed to infer returned types}}
  %0 = merak.cross_entropy %l, %t : (tensor<8x10xf32>, tensor<10xi64>) -> tensor<f32>
  return
}

// -----

// Class-probability targets are not supported.
func.func @cross_entropy_float_target(%l: tensor<8x10xf32>, %t: tensor<8x10xf32>) {
  // expected-error @below {{'merak.cross_entropy' op operand #1 must be statically shaped tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<8x10xf32>'}}
  %0 = merak.cross_entropy %l, %t : (tensor<8x10xf32>, tensor<8x10xf32>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_label_smoothing(%l: tensor<8x10xf32>, %t: tensor<8xi64>) {
  // expected-error @below {{label_smoothing 1.500000e+00 is not in [0, 1]}}
  // expected-error @below {{'merak.cross_entropy' op failed to infer returned types}}
  %0 = merak.cross_entropy %l, %t {label_smoothing = 1.5 : f64} : (tensor<8x10xf32>, tensor<8xi64>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_bad_reduction(%l: tensor<8x10xf32>, %t: tensor<8xi64>) {
  // expected-error @below {{expected ::merak::LossReduction to be one of: none, mean, sum}}
  // expected-error @below {{failed to parse Merak_LossReductionAttr parameter 'value'}}
  %0 = merak.cross_entropy %l, %t {reduction = #merak.reduction<max>} : (tensor<8x10xf32>, tensor<8xi64>) -> tensor<f32>
  return
}

// -----

// reduction = none keeps one loss per sample.
func.func @cross_entropy_result_mismatch(%l: tensor<8x10xf32>, %t: tensor<8xi64>) {
  // expected-error @below {{'merak.cross_entropy' op inferred type(s) 'tensor<8xf32>' are incompatible with return type(s) of operation 'tensor<f32>'}}
  // expected-error @below {{'merak.cross_entropy' op failed to infer returned types}}
  %0 = merak.cross_entropy %l, %t {reduction = #merak.reduction<none>} : (tensor<8x10xf32>, tensor<8xi64>) -> tensor<f32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// masked_attention, masked_attention_backward
//===----------------------------------------------------------------------===//

func.func @attention_value_rows(%q: tensor<2x8x16xf32>, %v: tensor<2x7x16xf32>, %m: tensor<8x8xi1>) {
  // expected-error @below {{'merak.masked_attention' op value shape [2, 7, 16] must be [..., 8, E] with the query's leading dimensions [2, 8, 16]}}
  %0:2 = merak.masked_attention %q, %q, %v, %m {scale = 1.0 : f64} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x7x16xf32>, tensor<8x8xi1>) -> (tensor<2x7x16xf32>, tensor<2x8x8xf32>)
  return
}

// -----

func.func @attention_mask(%q: tensor<2x8x16xf32>, %m: tensor<3x8x8xi1>) {
  // expected-error @below {{'merak.masked_attention' op mask shape [3, 8, 8] does not broadcast to the scores' [2, 8, 8]}}
  %0:2 = merak.masked_attention %q, %q, %q, %m {scale = 1.0 : f64} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<3x8x8xi1>) -> (tensor<2x8x16xf32>, tensor<2x8x8xf32>)
  return
}

// -----

func.func @attention_lse_type(%q: tensor<2x8x16xbf16>, %m: tensor<8x8xi1>) {
  // expected-error @below {{'merak.masked_attention' op log-sum-exp type 'tensor<2x8xbf16>' differs from the rows' 'tensor<2x8xf32>'}}
  %0:2 = merak.masked_attention %q, %q, %q, %m {scale = 1.0 : f64} : (tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<8x8xi1>) -> (tensor<2x8x16xbf16>, tensor<2x8xbf16>)
  return
}

// -----

func.func @attention_lse_no_output(%q: tensor<2x8x16xf32>, %m: tensor<8x8xi1>, %l: tensor<2x8xf32>) {
  // expected-error @below {{'merak.masked_attention_backward' op needs the forward's output with a log-sum-exp}}
  %0:3 = merak.masked_attention_backward %q, %q, %q, %q, %m, %l {scale = 1.0 : f64} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<8x8xi1>, tensor<2x8xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>)
  return
}

// -----

func.func @attention_probs_with_output(%q: tensor<2x8x16xf32>, %m: tensor<8x8xi1>, %p: tensor<2x8x8xf32>) {
  // expected-error @below {{'merak.masked_attention_backward' op takes the forward's output only with a log-sum-exp}}
  %0:3 = merak.masked_attention_backward %q, %q, %q, %q, %m, %p, %q {scale = 1.0 : f64} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<8x8xi1>, tensor<2x8x8xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>)
  return
}

// -----

func.func @attention_probs(%q: tensor<2x8x16xf32>, %m: tensor<8x8xi1>) {
  // expected-error @below {{'merak.masked_attention' op probs type 'tensor<2x8x16xf32>' differs from the scores' 'tensor<2x8x8xf32>'}}
  %0:2 = merak.masked_attention %q, %q, %q, %m {scale = 1.0 : f64} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<8x8xi1>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>)
  return
}

// -----

func.func @attention_key(%q: tensor<2x8x16xf32>, %k: tensor<2x8x8xf32>, %m: tensor<8x8xi1>) {
  // expected-error @below {{'merak.masked_attention' op failed to verify that all of {query, key} have same type}}
  %0:2 = merak.masked_attention %q, %k, %q, %m {scale = 1.0 : f64} : (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x16xf32>, tensor<8x8xi1>) -> (tensor<2x8x16xf32>, tensor<2x8x8xf32>)
  return
}

// -----

func.func @attention_scale(%q: tensor<8x16xf32>, %m: tensor<8x8xi1>) {
  // expected-error @below {{'merak.masked_attention' op scale must be finite (and non-zero to divide by)}}
  %0:2 = merak.masked_attention %q, %q, %q, %m {scale = 0x7FF0000000000000 : f64} : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x8xi1>) -> (tensor<8x16xf32>, tensor<8x8xf32>)
  return
}

// -----

func.func @attention_backward_probs(%q: tensor<8x16xf32>, %m: tensor<8x8xi1>, %p: tensor<8x9xf32>) {
  // expected-error @below {{'merak.masked_attention_backward' op probs type 'tensor<8x9xf32>' differs from the scores' 'tensor<8x8xf32>'}}
  %0:3 = merak.masked_attention_backward %q, %q, %q, %q, %m, %p {scale = 1.0 : f64} : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x8xi1>, tensor<8x9xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>)
  return
}

// -----

func.func @attention_additive_mask_type(%q: tensor<8x16xf32>, %m: tensor<8x8xf64>) {
  // expected-error @below {{'merak.masked_attention' op an additive mask must have the query's element type f32, got f64}}
  %0:2 = merak.masked_attention %q, %q, %q, %m {scale = 1.0 : f64} : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x8xf64>) -> (tensor<8x16xf32>, tensor<8x8xf32>)
  return
}

// -----

func.func @attention_divide_by_zero(%q: tensor<8x16xf32>, %m: tensor<8x8xi1>) {
  // expected-error @below {{'merak.masked_attention' op scale must be finite (and non-zero to divide by)}}
  %0:2 = merak.masked_attention %q, %q, %q, %m {divide, scale = 0.0 : f64} : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x8xi1>) -> (tensor<8x16xf32>, tensor<8x8xf32>)
  return
}

// The merak.* attributes of the training step's contract: known names, in
// their place, with values of the right kind (MerakAttrVerifier.cpp).
// RUN: merak-opt %s -split-input-file -verify-diagnostics

// Well-formed: every role, result and op attribute where it belongs.
module attributes {merak.train_options = "optimizer=sgd"} {
  mesh.mesh @mesh(shape = 2x2) {merak.axes = ["dp", "tp"]}
  func.func @train_step(%w: tensor<4xf32> {merak.param = "w"},
                        %m: tensor<4xf32> {merak.opt_state = "w/momentum_buffer"},
                        %x: tensor<4xf32> {merak.input = "x"},
                        %lr: tensor<f32> {merak.lr},
                        %step: tensor<i64> {merak.step})
      -> (tensor<4xf32> {merak.loss}, tensor<4xf32> {merak.update_arg = 0 : i64})
      attributes {merak.optimizer = {kind = "sgd"}} {
    %0 = merak.neg %w {merak.id = 0 : i64, merak.stage = 1 : i64} : tensor<4xf32>
    return %0, %0 : tensor<4xf32>, tensor<4xf32>
  }
  func.func @stage0_forward(%a: tensor<4xf32> {merak.value = 3 : i64})
      attributes {merak.rank = 0 : i64, merak.phase = "forward"} {
    return
  }
}

// -----

// expected-error @below {{'func.func' op has unknown attribute 'merak.parm' on argument 0 (known there: merak.param, merak.buffer}}
func.func @misspelt(%w: tensor<4xf32> {merak.parm = "w"}) {
  return
}

// -----

// expected-error @below {{'func.func' op has 'merak.param' = "" on argument 0; expected a non-empty string}}
func.func @empty_name(%w: tensor<4xf32> {merak.param = ""}) {
  return
}

// -----

// expected-error @below {{'func.func' op argument 0 has both 'merak.input' and 'merak.param'; an argument has one role}}
func.func @two_roles(%w: tensor<4xf32> {merak.param = "w", merak.input = "w"}) {
  return
}

// -----

// expected-error @below {{'func.func' op has 'merak.loss' on argument 0; it belongs on a function result}}
func.func @loss_on_argument(%w: tensor<4xf32> {merak.loss}) {
  return
}

// -----

// expected-error @below {{'func.func' op has 'merak.update_arg' = -1 : i64 on result 0; expected a non-negative integer}}
func.func @negative_update_arg(%w: tensor<4xf32>) -> (tensor<4xf32> {merak.update_arg = -1 : i64}) {
  return %w : tensor<4xf32>
}

// -----

func.func @stage_as_string(%w: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'merak.neg' op has 'merak.stage' = "1" on an op; expected a non-negative integer}}
  %0 = merak.neg %w {merak.stage = "1"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error @below {{'func.func' op has 'merak.phase' = "backward" on a function; expected one of forward, forward_keep, recompute, backward_input, backward_weight, optimizer}}
func.func @unknown_phase() attributes {merak.rank = 0 : i64, merak.phase = "backward"} {
  return
}

// -----

// expected-error @below {{'builtin.module' op has 'merak.pipeline_schedule' = "1f1b" on the module; expected a dictionary}}
module attributes {merak.pipeline_schedule = "1f1b"} {
}

// -----

// expected-error @below {{'mesh.mesh' op has 'merak.axes' = ["dp"] on a mesh; expected an array of distinct axis names, one per mesh axis}}
mesh.mesh @mesh(shape = 2x2) {merak.axes = ["dp"]}

// -----

// expected-error @below {{'func.func' op has 'merak.stored_shape' = array<i64: 2, -1> on argument 0; expected an array<i64> of non-negative integers}}
func.func @stored_shape(%w: tensor<4xf32> {merak.stored_shape = array<i64: 2, -1>}) {
  return
}

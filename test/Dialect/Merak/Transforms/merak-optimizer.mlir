// Tests --merak-optimizer: state arguments, lr and step arguments, update
// ops, results marked with the argument they replace, clipping, and option
// errors.
// RUN: merak-opt %s -split-input-file --merak-optimizer="optimizer=sgd lr=0.1 momentum=0.9 weight-decay=0.01" | FileCheck %s --check-prefix=SGD
// RUN: merak-opt %s -split-input-file --merak-optimizer="optimizer=sgd lr=0.1" | FileCheck %s --check-prefix=PLAIN
// RUN: merak-opt %s -split-input-file --merak-optimizer="optimizer=adamw lr=3e-4 weight-decay=0.1 clip-grad-norm=1.0" | FileCheck %s --check-prefix=ADAMW
// RUN: not merak-opt %s -split-input-file --merak-optimizer="optimizer=lion" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not merak-opt %s -split-input-file --merak-optimizer="optimizer=sgd nesterov=true" 2>&1 | FileCheck %s --check-prefix=NESTEROV
// RUN: not merak-opt %s -split-input-file --merak-optimizer="optimizer=sgd lr=nan" 2>&1 | FileCheck %s --check-prefix=LRNAN
// RUN: not merak-opt %s -split-input-file --merak-optimizer="optimizer=adamw lr=inf" 2>&1 | FileCheck %s --check-prefix=LRINF
// RUN: not merak-opt %s -split-input-file --merak-optimizer="optimizer=adamw lr=1e-3 beta2=nan" 2>&1 | FileCheck %s --check-prefix=BETANAN
// RUN: not merak-opt %s -split-input-file --merak-optimizer="optimizer=sgd lr=-1" 2>&1 | FileCheck %s --check-prefix=LRNEG
// RUN: merak-opt %s -split-input-file --merak-optimizer="optimizer=sgd lr=0.1" | FileCheck %s --check-prefix=SCALE

// SGD-LABEL: func.func @train_step
// SGD-SAME: (%[[W:.*]]: tensor<4xf32> {merak.param = "w"}, %[[X:.*]]: tensor<4xf32> {merak.input = "x"}, %[[BUF:.*]]: tensor<4xf32> {merak.opt_state = "w/momentum_buffer"}, %[[LR:.*]]: tensor<f32> {merak.lr}, %[[STEP:.*]]: tensor<i64> {merak.step})
// SGD-SAME: -> (tensor<f32> {merak.loss}, tensor<4xf32> {merak.update_arg = 0 : i64}, tensor<4xf32> {merak.update_arg = 2 : i64})
// SGD-SAME: merak.optimizer = {dampening = 0.000000e+00 : f64, lr = 1.000000e-01 : f64, momentum = 9.000000e-01 : f64, name = "sgd", nesterov = false, weight_decay = 1.000000e-02 : f64}
// SGD: %[[P:.*]], %[[B:.*]] = merak.sgd_update %[[W]], %[[G:.*]], %[[BUF]], %[[LR]], %[[STEP]] {dampening = 0.000000e+00 : f64, momentum = 9.000000e-01 : f64, nesterov = false, weight_decay = 1.000000e-02 : f64}
// SGD: return %{{.*}}, %[[P]], %[[B]]

// Without momentum there is no state.
// PLAIN-LABEL: func.func @train_step
// PLAIN-SAME: %{{.*}}: tensor<f32> {merak.lr}, %{{.*}}: tensor<i64> {merak.step})
// PLAIN-SAME: -> (tensor<f32> {merak.loss}, tensor<4xf32> {merak.update_arg = 0 : i64})
// PLAIN: merak.sgd_update

// ADAMW-LABEL: func.func @train_step
// ADAMW-SAME: %{{.*}}: tensor<4xf32> {merak.opt_state = "w/exp_avg"}, %{{.*}}: tensor<4xf32> {merak.opt_state = "w/exp_avg_sq"}
// ADAMW-SAME: -> (tensor<f32> {merak.loss}, tensor<4xf32> {merak.update_arg = 0 : i64}, tensor<4xf32> {merak.update_arg = 2 : i64}, tensor<4xf32> {merak.update_arg = 3 : i64}, tensor<f32> {merak.grad_norm})
// Clipping: coef = min(1, max_norm / (norm + 1e-6)).
// ADAMW: %[[SQ:.*]] = merak.mul %[[GRAD:.*]], %[[GRAD]]
// ADAMW: %[[SUM:.*]] = merak.reduce_sum %[[SQ]] {dims = array<i64>}
// ADAMW: %[[NORM:.*]] = merak.sqrt %[[SUM]]
// ADAMW: %[[DEN:.*]] = merak.add %[[NORM]]
// ADAMW: %[[COEF:.*]] = merak.div %{{.*}}, %[[DEN]]
// ADAMW: %[[CL:.*]] = merak.clamp %[[COEF]] {max = 1.000000e+00 : f64}
// ADAMW: %[[CG:.*]] = merak.mul %[[GRAD]], %[[CL]]
// ADAMW: merak.adamw_update %arg0, %[[CG]], %arg2, %arg3, %arg4, %arg5 {beta1 = 9.000000e-01 : f64, beta2 = {{.*}} : f64, eps = 1.000000e-08 : f64, weight_decay = 1.000000e-01 : f64}
// ADAMW: return

// BAD: error: unknown optimizer 'lion': expected sgd or adamw
// NESTEROV: error: nesterov momentum requires momentum > 0 and zero dampening (as in PyTorch)
// LRNAN: error: invalid optimizer option lr=nan: need a finite number > 0
// LRINF: error: invalid optimizer option lr=inf: need a finite number > 0
// BETANAN: error: invalid optimizer option beta2=nan: need in [0, 1)
// LRNEG: error: invalid optimizer option lr=-1: need a finite number > 0
func.func @train_step(%w: tensor<4xf32> {merak.param = "w"}, %x: tensor<4xf32> {merak.input = "x"})
    -> (tensor<f32> {merak.loss}, tensor<4xf32> {merak.grad = "w"}) {
  %0 = merak.mul %w, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = merak.reduce_sum %0 {dims = array<i64>} : (tensor<4xf32>) -> tensor<f32>
  return %1, %x : tensor<f32>, tensor<4xf32>
}

// -----

// A step with a loss scale (--merak-autodiff seeded the backward with it):
// the gradients' check (0, or NaN when one is not finite) is returned as
// merak.nonfinite_grads, and they are unscaled by the reciprocal.
// SCALE-LABEL: func.func @train_step(%arg0: tensor<4xf32> {merak.param = "w"}, %arg1: tensor<4xf32> {merak.input = "x"}, %arg2: tensor<f32> {merak.loss_scale = {dynamic = true, init = 6.553600e+04 : f64, window = 2000 : i64}}
// SCALE-SAME: -> (tensor<f32> {merak.loss}, tensor<4xf32> {merak.update_arg = 0 : i64}, tensor<f32> {merak.nonfinite_grads})
// SCALE: %[[ZERO:.*]] = merak.constant dense<0.000000e+00> : tensor<f32>
// SCALE: %[[Z:.*]] = merak.mul %[[G:.*]], %[[ZERO]]
// SCALE: %[[NF:.*]] = merak.reduce_sum %[[Z]] {dims = array<i64>}
// SCALE: %[[ONE:.*]] = merak.constant dense<1.000000e+00> : tensor<f32>
// SCALE: %[[INV:.*]] = merak.div %[[ONE]], %arg2
// SCALE: %[[U:.*]] = merak.mul %[[G]], %[[INV]]
// SCALE: %[[P:.*]], %{{.*}} = merak.sgd_update %arg0, %[[U]]
// SCALE: return %{{.*}}, %[[P]], %[[NF]]
func.func @train_step(%w: tensor<4xf32> {merak.param = "w"}, %x: tensor<4xf32> {merak.input = "x"},
                      %s: tensor<f32> {merak.loss_scale = {dynamic = true, init = 65536.0 : f64, window = 2000 : i64}})
    -> (tensor<f32> {merak.loss}, tensor<4xf32> {merak.grad = "w"}) {
  %0 = merak.mul %w, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = merak.reduce_sum %0 {dims = array<i64>} : (tensor<4xf32>) -> tensor<f32>
  %2 = merak.mul %x, %s : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %1, %2 : tensor<f32>, tensor<4xf32>
}

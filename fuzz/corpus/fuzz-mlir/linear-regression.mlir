// merak-exec trains the hand-written linear-regression step from the weights
// of a TorchScript module and matches the losses PyTorch computes.
//
// RUN: rm -rf %t && %python %S/Inputs/make_linreg.py %t --steps 4
// RUN: merak-exec %s --init %t/model.pt --data %t/batches.safetensors --steps 4 --lr 0.1 --threads 1 --log-jsonl %t/log.jsonl | FileCheck %s
// RUN: %python %S/Inputs/check_losses.py %t/log.jsonl %t/reference.jsonl --rtol 1e-6 | FileCheck %s --check-prefix=MATCH
// RUN: FileCheck %s --check-prefix=JSON < %t/log.jsonl
//
// CHECK: step 1/4  loss {{[0-9]+\.[0-9]+}}  {{[0-9.]+}} samples/s  {{[0-9.]+}} ms  peak {{[0-9.]+}} MB
// CHECK-NEXT: step 2/4  loss
// CHECK-NEXT: step 3/4  loss
// CHECK-NEXT: step 4/4  loss
// CHECK-NOT: step
//
// MATCH: losses match: 4 steps
//
// JSON: {"step":1,"loss":{{[0-9.e-]+}},"lr":0.1,"ms":{{[0-9.e-]+}},"samples_per_s":{{[0-9.e+-]+}},"peak_bytes":{{[0-9]+}},"max_rss_bytes":{{[0-9]+}}}
// JSON-NEXT: {"step":2,
//
// The log appends, so two runs give eight lines.
// RUN: merak-exec %s --init %t/model.pt --data %t/batches.safetensors --steps 4 --lr 0.1 --log-jsonl %t/log.jsonl > /dev/null
// RUN: grep -c step %t/log.jsonl | FileCheck %s --check-prefix=APPEND
// APPEND: 8
//
// A cosine schedule with warm-up: the lr of each step is in the log.
// RUN: merak-exec %s --init %t/model.pt --data %t/batches.safetensors --steps 4 --lr 0.1 --lr-schedule cosine --warmup-steps 2 --min-lr 0.01 --log-jsonl %t/cosine.jsonl > /dev/null
// RUN: FileCheck %s --check-prefix=COSINE < %t/cosine.jsonl
// COSINE: "step":1,{{.*}}"lr":0.05,
// COSINE: "step":2,{{.*}}"lr":0.1,
// COSINE: "step":3,{{.*}}"lr":0.1,
// COSINE: "step":4,{{.*}}"lr":0.0550000000000000{{[0-9]*}},

// Linear regression, y = x W^T + b with a mean squared error, its gradient
// written out by hand and SGD with momentum 0.9: the smallest complete
// training step the runtime tests run.
func.func @train_step(%w: tensor<1x4xf32> {merak.param = "fc.weight"},
                      %b: tensor<1xf32> {merak.param = "fc.bias"},
                      %mw: tensor<1x4xf32> {merak.opt_state = "fc.weight/momentum_buffer"},
                      %mb: tensor<1xf32> {merak.opt_state = "fc.bias/momentum_buffer"},
                      %x: tensor<8x4xf32> {merak.input = "x"},
                      %y: tensor<8x1xf32> {merak.input = "y"},
                      %lr: tensor<f32> {merak.lr},
                      %step: tensor<i64> {merak.step})
    -> (tensor<f32> {merak.loss}, tensor<1x4xf32> {merak.update_arg = 0 : i64},
        tensor<1xf32> {merak.update_arg = 1 : i64},
        tensor<1x4xf32> {merak.update_arg = 2 : i64},
        tensor<1xf32> {merak.update_arg = 3 : i64}) {
  %pred = merak.linear %x, %w, %b : (tensor<8x4xf32>, tensor<1x4xf32>, tensor<1xf32>) -> tensor<8x1xf32>
  %diff = merak.sub %pred, %y : (tensor<8x1xf32>, tensor<8x1xf32>) -> tensor<8x1xf32>
  %sq = merak.mul %diff, %diff : (tensor<8x1xf32>, tensor<8x1xf32>) -> tensor<8x1xf32>
  %loss = merak.reduce_mean %sq {dims = array<i64>} : (tensor<8x1xf32>) -> tensor<f32>
  %c = merak.constant dense<2.500000e-01> : tensor<f32>
  %g = merak.mul %diff, %c : (tensor<8x1xf32>, tensor<f32>) -> tensor<8x1xf32>
  %gt = merak.permute %g {permutation = array<i64: 1, 0>} : (tensor<8x1xf32>) -> tensor<1x8xf32>
  %dw = merak.matmul %gt, %x : (tensor<1x8xf32>, tensor<8x4xf32>) -> tensor<1x4xf32>
  %db = merak.reduce_sum %g {dims = array<i64: 0>} : (tensor<8x1xf32>) -> tensor<1xf32>
  %nw, %nmw = merak.sgd_update %w, %dw, %mw, %lr, %step {dampening = 0.0 : f64, momentum = 0.9 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x4xf32>, tensor<f32>, tensor<i64>) -> (tensor<1x4xf32>, tensor<1x4xf32>)
  %nb, %nmb = merak.sgd_update %b, %db, %mb, %lr, %step {dampening = 0.0 : f64, momentum = 0.9 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<f32>, tensor<i64>) -> (tensor<1xf32>, tensor<1xf32>)
  return %loss, %nw, %nb, %nmw, %nmb : tensor<f32>, tensor<1x4xf32>, tensor<1xf32>, tensor<1x4xf32>, tensor<1xf32>
}

// RUN: merak-exec %s --steps 2 --seed 3 --log-jsonl %t.jsonl | FileCheck %s
// RUN: %python %S/Inputs/synthetic.py --seed 3 --steps 2 > %t.expected.jsonl
// RUN: %python %S/Inputs/check_losses.py %t.jsonl %t.expected.jsonl --rtol 1e-6 | FileCheck %s --check-prefix=MATCH

// Without --data or --tokens, each step's inputs are drawn from the step's
// data generator in input order: torch.randn for floats, torch.randint(0, 2)
// for integers. The "loss" sum(x) + sum(labels) lets Python check that.

// CHECK: step 1/2  loss {{-?[0-9]+\.[0-9]+}}  {{[0-9.]+}} samples/s
// CHECK-NEXT: step 2/2
// MATCH: losses match: 2 steps

func.func @forward(%x: tensor<4x5xf32> {merak.input = "x"},
                   %labels: tensor<4xi64> {merak.input = "labels"}) -> tensor<f32> {
  %a = merak.reduce_sum %x {dims = array<i64>} : (tensor<4x5xf32>) -> tensor<f32>
  %l = merak.cast %labels : tensor<4xi64> -> tensor<4xf32>
  %b = merak.reduce_sum %l {dims = array<i64>} : (tensor<4xf32>) -> tensor<f32>
  %s = merak.add %a, %b : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %s : tensor<f32>
}

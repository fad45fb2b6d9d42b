// RUN: rm -rf %t && mkdir -p %t
// RUN: %python %S/Inputs/tokens.py write %t/tokens.bin
// RUN: merak-exec %s --tokens %t/tokens.bin --steps 3 --seed 4 --batch 2 --seq-len 8 | FileCheck %s
// RUN: merak-exec %s --tokens %t/tokens.bin --steps 3 --seed 4 --log-jsonl %t/log.jsonl > /dev/null
// RUN: %python %S/Inputs/tokens.py expect %t/tokens.bin --seed 4 --steps 3 > %t/expected.jsonl
// RUN: %python %S/Inputs/check_losses.py %t/log.jsonl %t/expected.jsonl | FileCheck %s --check-prefix=MATCH
// RUN: not merak-exec %s --tokens %t/tokens.bin --seq-len 9 2>&1 | FileCheck %s --check-prefix=SEQLEN
// RUN: not merak-exec %s --tokens %t/tokens.bin --token-dtype int64 2>&1 | FileCheck %s --check-prefix=DTYPE

// --tokens samples windows of seq_len + 1 tokens: the first input gets each
// window's first seq_len tokens, the second the last seq_len. The "loss"
// here, sum(3 * idx + targets), lets Python check both against its own
// sampling (torch.randint from the step's generator).

// CHECK: step 1/3  loss {{[0-9]+}}.000000  {{[0-9.]+}} tokens/s
// CHECK-NEXT: step 2/3
// MATCH: losses match: 3 steps
// SEQLEN: merak-exec: error: --seq-len 9 does not match input 'idx' (2x8xi64); shapes are fixed when the step is built
// DTYPE: merak-exec: error: --token-dtype must be uint16 or int32, not 'int64'

func.func @forward(%idx: tensor<2x8xi64> {merak.input = "idx"},
                   %targets: tensor<2x8xi64> {merak.input = "targets"}) -> tensor<f32> {
  %a = merak.cast %idx : tensor<2x8xi64> -> tensor<2x8xf32>
  %b = merak.cast %targets : tensor<2x8xi64> -> tensor<2x8xf32>
  %c = merak.constant dense<3.0> : tensor<f32>
  %d = merak.mul %a, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %e = merak.add %d, %b : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %s = merak.reduce_sum %e {dims = array<i64>} : (tensor<2x8xf32>) -> tensor<f32>
  return %s : tensor<f32>
}

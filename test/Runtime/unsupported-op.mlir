// RUN: not merak-exec %s 2>&1 | FileCheck %s

// Ops without a kernel are named with the location of their Python line,
// all of them, before anything runs.

// CHECK: model.py:7:5: error: merak-exec has no kernel for 'arith.addf'
// CHECK: model.py:8:5: error: merak-exec has no kernel for 'arith.mulf'
// CHECK-NOT: error

func.func @forward(%x: tensor<2xf32> {merak.input = "x"}) -> tensor<2xf32> {
  %y = arith.addf %x, %x : tensor<2xf32> loc("model.py":7:5)
  %z = arith.mulf %y, %y : tensor<2xf32> loc("model.py":8:5)
  return %z : tensor<2xf32>
}

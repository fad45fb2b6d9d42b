// Tests --merak-mesh: one named axis per degree above one, in the order
// dp, sp, tp; a module with another mesh already is an error.
// RUN: merak-opt %s --merak-mesh="dp=2 tp=4" | FileCheck %s
// RUN: merak-opt %s --merak-mesh="dp=2 sp=2 tp=2" | FileCheck %s --check-prefix=THREE
// RUN: merak-opt %s --merak-mesh | FileCheck %s --check-prefix=ONE
// RUN: merak-opt %s --merak-mesh="tp=2" --merak-mesh="tp=2" | FileCheck %s --check-prefix=SAME
// RUN: not merak-opt %s --merak-mesh="tp=2" --merak-mesh="dp=2" 2>&1 | FileCheck %s --check-prefix=OTHER
// RUN: not merak-opt %s --merak-mesh="dp=0" 2>&1 | FileCheck %s --check-prefix=ZERO

// CHECK: mesh.mesh @mesh(shape = 2x4) {merak.axes = ["dp", "tp"]}
// THREE: mesh.mesh @mesh(shape = 2x2x2) {merak.axes = ["dp", "sp", "tp"]}
// ONE: mesh.mesh @mesh(shape = 1) {merak.axes = ["dp"]}
// SAME-COUNT-1: mesh.mesh
// OTHER: error: the module already has a different mesh
// ZERO: error: mesh degree dp must be >= 1, got 0
func.func @forward(%x: tensor<2xf32> {merak.input = "x"}) -> tensor<2xf32> {
  return %x : tensor<2xf32>
}

// Tests --merak-comm-algorithm: the plan's all-reduces priced as rings
// (2 (n - 1) steps, 2 (n - 1) / n of the tensor sent) and as trees
// (2 ceil(log2 n) steps; the ring's bytes for n a power of two, twice the
// tensor otherwise) with the hardware profile, and the choice recorded on
// the mesh with what was compared.
// RUN: merak-opt %s -split-input-file --merak-comm-algorithm="hardware=%S/Inputs/hw-small-gpus.json" | FileCheck %s --check-prefix=AUTO
// RUN: merak-opt %s -split-input-file --merak-comm-algorithm="algorithm=tree hardware=%S/Inputs/hw-small-gpus.json" | FileCheck %s --check-prefix=TREE
// RUN: merak-opt %s -split-input-file --merak-comm-algorithm="algorithm=ring" | FileCheck %s --check-prefix=RING
// RUN: not merak-opt %s -split-input-file --merak-comm-algorithm="algorithm=butterfly" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not merak-opt %s --merak-comm-algorithm="hardware=%t.missing.json" 2>&1 | FileCheck %s --check-prefix=MISSING

// Small all-reduces over 8 ranks: latency-bound, 6 steps as a tree
// against 14 as a ring.
// AUTO: mesh.mesh @mesh8(shape = 8) {merak.all_reduce_algorithm = "tree", merak.all_reduce_algorithm_reason = "auto: 2 all-reduces (the largest 64 bytes, groups of up to 8 ranks) take 0.028 ms as rings and 0.012 ms as trees on the test-4-gpus profile"}
// TREE: mesh.mesh @mesh8(shape = 8) {merak.all_reduce_algorithm = "tree", merak.all_reduce_algorithm_reason = "asked for: 2 all-reduces
// RING: mesh.mesh @mesh8(shape = 8) {merak.all_reduce_algorithm = "ring", merak.all_reduce_algorithm_reason = "asked for: 2 all-reduces (the largest 64 bytes, groups of up to 8 ranks) take {{.*}} on the default profile"}
// BAD: error: --merak-comm-algorithm: algorithm must be ring, tree or auto, got 'butterfly'
// MISSING: error: --merak-comm-algorithm: {{.*}}missing.json
mesh.mesh @mesh8(shape = 8)
func.func @small(%a: tensor<f32>, %b: tensor<16xf32>) -> (tensor<f32>, tensor<16xf32>) {
  %0 = mesh.all_reduce %a on @mesh8 mesh_axes = [0] : tensor<f32> -> tensor<f32>
  %1 = mesh.all_reduce %b on @mesh8 mesh_axes = [0] : tensor<16xf32> -> tensor<16xf32>
  return %0, %1 : tensor<f32>, tensor<16xf32>
}

// -----

// A large all-reduce over 3 ranks (not a power of two): the tree sends
// twice the tensor, the ring 4/3 of it: bandwidth-bound, the ring wins.
// AUTO: mesh.mesh @mesh3(shape = 3x2) {merak.all_reduce_algorithm = "ring", merak.all_reduce_algorithm_reason = "auto: 1 all-reduce (the largest 1048576 bytes, groups of up to 3 ranks) take 1.402 ms as rings and 2.101 ms as trees on the test-4-gpus profile", merak.axes = ["dp", "tp"]}
// TREE: mesh.mesh @mesh3(shape = 3x2) {merak.all_reduce_algorithm = "tree"
mesh.mesh @mesh3(shape = 3x2) {merak.axes = ["dp", "tp"]}
func.func @large(%a: tensor<512x512xf32>, %b: tensor<4xf32>) -> (tensor<512x512xf32>, tensor<4xf32>) {
  %0 = mesh.all_reduce %a on @mesh3 mesh_axes = [0] : tensor<512x512xf32> -> tensor<512x512xf32>
  // Over the tp axis of size 2: ring and tree alike; over a group of one
  // (none here) nothing is priced.
  %1 = mesh.all_gather %b on @mesh3 mesh_axes = [1] gather_axis = 0 : tensor<4xf32> -> tensor<8xf32>
  return %0, %b : tensor<512x512xf32>, tensor<4xf32>
}

// -----

// Nothing to reduce: the ring, the libraries' default.
// AUTO: mesh.mesh @quiet(shape = 2) {merak.all_reduce_algorithm = "ring", merak.all_reduce_algorithm_reason = "no all-reduce over more than one rank"}
mesh.mesh @quiet(shape = 2)
func.func @none(%a: tensor<4xf32>) -> tensor<4xf32> {
  return %a : tensor<4xf32>
}

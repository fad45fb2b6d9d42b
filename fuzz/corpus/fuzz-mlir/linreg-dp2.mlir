module {
  mesh.mesh @mesh(shape = 2) {merak.axes = ["dp"]}
  func.func @train_step(%arg0: tensor<1x4xf32> {merak.param = "fc.weight"}, %arg1: tensor<1xf32> {merak.param = "fc.bias"}, %arg2: tensor<1x4xf32> {merak.opt_state = "fc.weight/momentum_buffer"}, %arg3: tensor<1xf32> {merak.opt_state = "fc.bias/momentum_buffer"}, %arg4: tensor<4x4xf32> {merak.input = "x", merak.sharding = #mesh.shard<@mesh, [[0]]>}, %arg5: tensor<4x1xf32> {merak.input = "y", merak.sharding = #mesh.shard<@mesh, [[0]]>}, %arg6: tensor<f32> {merak.lr}, %arg7: tensor<i64> {merak.step}) -> (tensor<f32> {merak.loss}, tensor<1x4xf32> {merak.update_arg = 0 : i64}, tensor<1xf32> {merak.update_arg = 1 : i64}, tensor<1x4xf32> {merak.update_arg = 2 : i64}, tensor<1xf32> {merak.update_arg = 3 : i64}) {
    %0 = merak.constant dense<2.500000e-01> : tensor<f32>
    %1 = merak.linear %arg4, %arg0, %arg1 : (tensor<4x4xf32>, tensor<1x4xf32>, tensor<1xf32>) -> tensor<4x1xf32>
    %2 = merak.sub %1, %arg5 : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
    %3 = merak.mul %2, %2 : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
    %4 = merak.reduce_mean %3 {dims = array<i64>} : (tensor<4x1xf32>) -> tensor<f32>
    %5 = merak.mul %2, %0 : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
    %6 = merak.permute %5 {permutation = array<i64: 1, 0>} : (tensor<4x1xf32>) -> tensor<1x4xf32>
    %7 = merak.matmul %6, %arg4 : (tensor<1x4xf32>, tensor<4x4xf32>) -> tensor<1x4xf32>
    %8 = merak.reduce_sum %5 {dims = array<i64: 0>} : (tensor<4x1xf32>) -> tensor<1xf32>
    %all_reduce = mesh.all_reduce %7 on @mesh mesh_axes = [0] : tensor<1x4xf32> -> tensor<1x4xf32>
    %new_param, %new_momentum_buffer = merak.sgd_update %arg0, %all_reduce, %arg2, %arg6, %arg7 {dampening = 0.000000e+00 : f64, momentum = 9.000000e-01 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64} : (tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x4xf32>, tensor<f32>, tensor<i64>) -> (tensor<1x4xf32>, tensor<1x4xf32>)
    %all_reduce_0 = mesh.all_reduce %8 on @mesh mesh_axes = [0] : tensor<1xf32> -> tensor<1xf32>
    %new_param_1, %new_momentum_buffer_2 = merak.sgd_update %arg1, %all_reduce_0, %arg3, %arg6, %arg7 {dampening = 0.000000e+00 : f64, momentum = 9.000000e-01 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64} : (tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<f32>, tensor<i64>) -> (tensor<1xf32>, tensor<1xf32>)
    %all_reduce_3 = mesh.all_reduce %4 on @mesh mesh_axes = [0] reduction = <average> : tensor<f32> -> tensor<f32>
    return %all_reduce_3, %new_param, %new_param_1, %new_momentum_buffer, %new_momentum_buffer_2 : tensor<f32>, tensor<1x4xf32>, tensor<1xf32>, tensor<1x4xf32>, tensor<1xf32>
  }
}


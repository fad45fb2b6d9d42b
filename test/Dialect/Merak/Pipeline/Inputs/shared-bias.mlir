// Four layers that all add a bias computed once from the input (like T5's
// position bias): the bias crosses every stage boundary, so it is passed
// along from stage to stage and its gradient comes back the same way.
func.func @forward(%wb: tensor<16x16xf32> {merak.param = "wb"},
                   %w0: tensor<16x16xf32> {merak.param = "w0"},
                   %w1: tensor<16x16xf32> {merak.param = "w1"},
                   %w2: tensor<16x16xf32> {merak.param = "w2"},
                   %w3: tensor<16x16xf32> {merak.param = "w3"},
                   %x: tensor<4x16xf32> {merak.input = "x"},
                   %labels: tensor<4xi64> {merak.input = "labels"})
    -> tensor<f32> {
  %bias = merak.linear %x, %wb : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %l0 = merak.linear %x, %w0 : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %a0 = merak.add %l0, %bias : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %h0 = merak.tanh %a0 : tensor<4x16xf32>
  %l1 = merak.linear %h0, %w1 : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %a1 = merak.add %l1, %bias : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %h1 = merak.tanh %a1 : tensor<4x16xf32>
  %l2 = merak.linear %h1, %w2 : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %a2 = merak.add %l2, %bias : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %h2 = merak.tanh %a2 : tensor<4x16xf32>
  %l3 = merak.linear %h2, %w3 : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %a3 = merak.add %l3, %bias : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %h3 = merak.tanh %a3 : tensor<4x16xf32>
  %loss = merak.cross_entropy %h3, %labels : (tensor<4x16xf32>, tensor<4xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

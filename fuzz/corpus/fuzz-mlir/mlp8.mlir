// An 8-layer MLP whose first and last linears share a weight (like a tied
// embedding and LM head). Shared by the pipeline tests.
func.func @forward(%w0: tensor<16x16xf32> {merak.param = "w0"},
                   %w1: tensor<16x16xf32> {merak.param = "w1"},
                   %w2: tensor<16x16xf32> {merak.param = "w2"},
                   %w3: tensor<16x16xf32> {merak.param = "w3"},
                   %w4: tensor<16x16xf32> {merak.param = "w4"},
                   %w5: tensor<16x16xf32> {merak.param = "w5"},
                   %w6: tensor<16x16xf32> {merak.param = "w6"},
                   %b0: tensor<16xf32> {merak.param = "b0"},
                   %b1: tensor<16xf32> {merak.param = "b1"},
                   %b2: tensor<16xf32> {merak.param = "b2"},
                   %b3: tensor<16xf32> {merak.param = "b3"},
                   %b4: tensor<16xf32> {merak.param = "b4"},
                   %b5: tensor<16xf32> {merak.param = "b5"},
                   %b6: tensor<16xf32> {merak.param = "b6"},
                   %x: tensor<4x16xf32> {merak.input = "x"},
                   %labels: tensor<4xi64> {merak.input = "labels"})
    -> tensor<f32> {
  %l0 = merak.linear %x, %w0, %b0 : (tensor<4x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %h0 = merak.relu %l0 : tensor<4x16xf32>
  %l1 = merak.linear %h0, %w1, %b1 : (tensor<4x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %h1 = merak.relu %l1 : tensor<4x16xf32>
  %l2 = merak.linear %h1, %w2, %b2 : (tensor<4x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %h2 = merak.relu %l2 : tensor<4x16xf32>
  %l3 = merak.linear %h2, %w3, %b3 : (tensor<4x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %h3 = merak.relu %l3 : tensor<4x16xf32>
  %l4 = merak.linear %h3, %w4, %b4 : (tensor<4x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %h4 = merak.relu %l4 : tensor<4x16xf32>
  %l5 = merak.linear %h4, %w5, %b5 : (tensor<4x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %h5 = merak.relu %l5 : tensor<4x16xf32>
  %l6 = merak.linear %h5, %w6, %b6 : (tensor<4x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %h6 = merak.relu %l6 : tensor<4x16xf32>
  %logits = merak.linear %h6, %w0 : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %loss = merak.cross_entropy %logits, %labels : (tensor<4x16xf32>, tensor<4xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

//===- TorchIO.h - host-side utilities built on LibTorch -----*- C++ -*-===//
//
// Loading a TorchScript archive's weights and drawing random numbers from
// PyTorch's own generator, so Python can reproduce them. The header does
// not include LibTorch; a build without it links IO/NoTorchIO.cpp instead,
// whose functions say what is missing.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_TORCHIO_H
#define MERAK_RUNTIME_TORCHIO_H

#include "merak/Runtime/Tensor.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace merak::runtime {

/// The parameters and buffers of a TorchScript archive by qualified name.
/// A tensor tied under several names appears under each of them.
absl::StatusOr<std::map<std::string, HostTensor>>
loadTorchScriptState(const std::string &path);

/// `torch.randint(high, (count,), generator=g)` with
/// `g = torch.Generator().manual_seed(seed)`.
absl::StatusOr<std::vector<int64_t>> randomIntegers(uint64_t seed, int64_t high,
                                                    int64_t count);

/// Tensors of `types` drawn in order from one generator seeded with `seed`:
/// floats `torch.randn(shape, generator=g)` (then converted), integers and
/// booleans `torch.randint(0, 2, shape, generator=g)`.
absl::StatusOr<std::vector<HostTensor>>
randomTensors(uint64_t seed, const std::vector<TensorType> &types);

/// False in a build without LibTorch (MERAK_CPU_BACKEND=OFF), where the
/// functions above return an error saying so.
bool haveTorchIO();

} // namespace merak::runtime

#endif // MERAK_RUNTIME_TORCHIO_H

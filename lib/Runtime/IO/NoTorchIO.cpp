//===- NoTorchIO.cpp - TorchIO in a build without LibTorch ----------------===//
//
// MERAK_CPU_BACKEND=OFF builds the runtime without LibTorch: reading `.pt`
// weights and drawing from PyTorch's generator are then errors that say
// what to use instead.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/TorchIO.h"

#include "absl/strings/str_cat.h"

namespace merak::runtime {

namespace {
constexpr const char *kBuild =
    "this merak-exec was built without LibTorch (MERAK_CPU_BACKEND=OFF)";
} // namespace

absl::StatusOr<std::map<std::string, HostTensor>>
loadTorchScriptState(const std::string &path) {
  return absl::UnimplementedError(
      absl::StrCat("cannot read the TorchScript archive ", path, ": ", kBuild,
                   "; give the weights as safetensors (merak_trace.save "
                   "writes them beside the archive)"));
}

absl::StatusOr<std::vector<int64_t>> randomIntegers(uint64_t, int64_t,
                                                    int64_t) {
  return absl::UnimplementedError(
      absl::StrCat("sampling token windows draws from PyTorch's generator, "
                   "and ",
                   kBuild, "; give the batches with --data"));
}

absl::StatusOr<std::vector<HostTensor>>
randomTensors(uint64_t, const std::vector<TensorType> &) {
  return absl::UnimplementedError(
      absl::StrCat("synthetic data draws from PyTorch's generator, and ",
                   kBuild, "; give the batches with --data"));
}

bool haveTorchIO() { return false; }

} // namespace merak::runtime

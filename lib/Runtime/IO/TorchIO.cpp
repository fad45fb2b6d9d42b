//===- TorchIO.cpp - host-side utilities implemented with LibTorch --------===//
//
// Reads the weights of a TorchScript archive and draws random numbers from
// PyTorch's CPU generator (mt19937 seeded like torch.manual_seed), so that
// Python can regenerate any step's data.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/TorchIO.h"
#include "../AtenDTypes.h"

#include "absl/strings/str_cat.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <torch/script.h>

#include <cstring>
#include <fstream>

namespace merak::runtime {
namespace {

/// A host tensor that keeps `t` (contiguous, on the CPU) alive.
HostTensor wrap(at::Tensor t, DType dtype) {
  t = t.contiguous();
  HostTensor host;
  host.type.dtype = dtype;
  host.type.shape.assign(t.sizes().begin(), t.sizes().end());
  auto *owner = new at::Tensor(t);
  host.data = owner->data_ptr();
  host.owner =
      std::shared_ptr<const void>(owner, [](const at::Tensor *p) { delete p; });
  return host;
}

std::string firstLine(const std::string &text) {
  return text.substr(0, text.find('\n'));
}

} // namespace

absl::StatusOr<std::map<std::string, HostTensor>>
loadTorchScriptState(const std::string &path) {
  if (!std::ifstream(path).good())
    return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::map<std::string, HostTensor> result;
  try {
    torch::jit::Module module = torch::jit::load(path, c10::Device(c10::kCPU));
    auto add = [&](const std::string &name,
                   const at::Tensor &t) -> absl::Status {
      if (!t.defined())
        return absl::OkStatus();
      std::optional<DType> dtype = fromAten(t.scalar_type());
      if (!dtype)
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": tensor '", name, "' has dtype ",
            c10::toString(t.scalar_type()), ", which Merak does not support"));
      result[name] = wrap(t.detach(), *dtype);
      return absl::OkStatus();
    };
    for (const auto &p : module.named_parameters(/*recurse=*/true))
      if (absl::Status s = add(p.name, p.value); !s.ok())
        return s;
    for (const auto &b : module.named_buffers(/*recurse=*/true))
      if (absl::Status s = add(b.name, b.value); !s.ok())
        return s;
  } catch (const c10::Error &e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a readable TorchScript archive: ",
                     firstLine(e.what_without_backtrace())));
  } catch (const std::exception &e) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a readable TorchScript archive: ", firstLine(e.what())));
  }
  return result;
}

absl::StatusOr<std::vector<int64_t>> randomIntegers(uint64_t seed, int64_t high,
                                                    int64_t count) {
  c10::InferenceMode guard;
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor t = at::randint(high, {count}, g, at::kLong);
  const int64_t *p = t.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + count);
}

absl::StatusOr<std::vector<HostTensor>>
randomTensors(uint64_t seed, const std::vector<TensorType> &types) {
  c10::InferenceMode guard;
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<HostTensor> result;
  for (const TensorType &type : types) {
    at::Tensor t;
    if (isFloat(type.dtype))
      t = at::randn(type.shape, g, at::kFloat).to(toAten(type.dtype));
    else
      t = at::randint(0, 2, type.shape, g, at::kLong).to(toAten(type.dtype));
    result.push_back(wrap(t, type.dtype));
  }
  return result;
}

bool haveTorchIO() { return true; }

} // namespace merak::runtime

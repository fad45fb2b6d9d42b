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
#include "absl/strings/str_join.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <torch/script.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>

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

/// Records the size of every CPU allocation while it is installed, so the
/// bytes behind a storage that the archive's reader allocated for a record
/// are known: the storage itself gives the size the pickle declares, which
/// a damaged archive can make larger than its record.
class RecordingAllocator final : public c10::Allocator {
public:
  RecordingAllocator() : next(c10::GetAllocator(c10::DeviceType::CPU)) {
    c10::SetAllocator(c10::DeviceType::CPU, this);
  }
  ~RecordingAllocator() override {
    c10::SetAllocator(c10::DeviceType::CPU, next);
  }
  c10::DataPtr allocate(size_t n) const override {
    c10::DataPtr data = next->allocate(n);
    std::lock_guard<std::mutex> lock(mutex);
    sizes[data.get()] = n;
    return data;
  }
  c10::DeleterFnPtr raw_deleter() const override { return next->raw_deleter(); }
  /// The bytes allocated at `data` while installed, if it was.
  std::optional<size_t> sizeOf(const void *data) const {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = sizes.find(data);
    if (it == sizes.end())
      return std::nullopt;
    return it->second;
  }

private:
  c10::Allocator *next;
  mutable std::mutex mutex;
  mutable std::map<const void *, size_t> sizes;
};

/// An error unless the storage of `t` holds every element its sizes,
/// strides and offset reach: an archive whose storage record is shorter
/// than its tensor would otherwise be read past its end.
absl::Status checkStorage(const std::string &path, const std::string &name,
                          const at::Tensor &t,
                          const RecordingAllocator &allocations) {
  auto bad = [&](const std::string &what) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": tensor '", name, "' ", what));
  };
  if (t.layout() != at::kStrided || !t.has_storage())
    return bad("is not a dense tensor with storage");
  const int64_t offset = t.storage_offset();
  if (offset < 0)
    return bad(absl::StrCat("has a negative storage offset (", offset, ")"));
  // The last element reached is offset + sum((size - 1) * stride).
  std::optional<int64_t> last = offset;
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t size = t.sizes()[d], stride = t.strides()[d];
    if (size == 0)
      return absl::OkStatus(); // no element to read
    if (stride < 0)
      return bad(absl::StrCat("has a negative stride (", stride,
                              ") in dimension ", d));
    if (last)
      last = checkedAdd(*last, checkedMul(size - 1, stride).value_or(-1));
  }
  std::optional<int64_t> needed =
      last ? checkedMul(checkedAdd(*last, 1).value_or(-1),
                        int64_t(t.element_size()))
           : std::nullopt;
  int64_t held = int64_t(t.storage().nbytes());
  if (std::optional<size_t> read = allocations.sizeOf(t.storage().data()))
    held = std::min(held, int64_t(*read));
  if (!needed)
    return bad("has sizes and strides that reach past any storage");
  if (*needed > held)
    return bad(absl::StrCat(
        "(shape [", absl::StrJoin(t.sizes(), ", "), "], strides [",
        absl::StrJoin(t.strides(), ", "), "], storage offset ", offset, ", ",
        t.element_size(), "-byte elements) needs ", *needed,
        " bytes of storage, but the archive's storage record holds ", held));
  return absl::OkStatus();
}

} // namespace

absl::StatusOr<std::map<std::string, HostTensor>>
loadTorchScriptState(const std::string &path) {
  if (!std::ifstream(path).good())
    return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::map<std::string, HostTensor> result;
  try {
    RecordingAllocator allocations;
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
      if (absl::Status s = checkStorage(path, name, t, allocations); !s.ok())
        return s;
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
  try {
    c10::InferenceMode guard;
    at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed);
    at::Tensor t = at::randint(high, {count}, g, at::kLong);
    const int64_t *p = t.data_ptr<int64_t>();
    return std::vector<int64_t>(p, p + count);
  } catch (const std::exception &e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot draw ", count, " random integers below ", high,
                     ": ", firstLine(e.what())));
  }
}

absl::StatusOr<std::vector<HostTensor>>
randomTensors(uint64_t seed, const std::vector<TensorType> &types) {
  c10::InferenceMode guard;
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<HostTensor> result;
  for (const TensorType &type : types) {
    absl::StatusOr<int64_t> bytes = checkedByteSize(type);
    if (!bytes.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("cannot draw a random ", type.str(),
                       " tensor: ", bytes.status().message()));
    try {
      at::Tensor t;
      if (isFloat(type.dtype))
        t = at::randn(type.shape, g, at::kFloat).to(toAten(type.dtype));
      else
        t = at::randint(0, 2, type.shape, g, at::kLong).to(toAten(type.dtype));
      result.push_back(wrap(t, type.dtype));
    } catch (const std::exception &e) {
      const c10::Error *error = dynamic_cast<const c10::Error *>(&e);
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot allocate ", *bytes, " bytes for a random ", type.str(),
          " tensor: ",
          firstLine(error ? error->what_without_backtrace() : e.what())));
    }
  }
  return result;
}

bool haveTorchIO() { return true; }

} // namespace merak::runtime

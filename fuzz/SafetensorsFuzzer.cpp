//===- SafetensorsFuzzer.cpp - fuzzing the safetensors readers ------------===//
//
// An input is a safetensors file, read as weights (`readSafetensors`, then
// `openCheckpoint` and a block of each tensor) and as a batch file
// (`openBatchFile`, the first and the last step); or, when it starts with
// '{', a sharded checkpoint's index, opened beside two fixed shard files
// (`openCheckpoint` on `X.index.json`) and each tensor read whole.
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"

#include "merak/Runtime/Checkpoint.h"
#include "merak/Runtime/Data.h"
#include "merak/Runtime/Safetensors.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

using namespace merak::runtime;

namespace {

std::string scratchDir;

/// The shard files an index may name: `w` (float32 [2, 3]) split in rows
/// over ck.s.rank0 and ck.s.rank1, and `b` (float32 [3]) in ck.s.rank0,
/// both of save `s`. fuzz/corpus/fuzz-safetensors/index-*.json index them.
void writeShards() {
  std::string pattern =
      (std::filesystem::temp_directory_path() / "merak-fuzz-ckpt-XXXXXX")
          .string();
  if (!mkdtemp(pattern.data()))
    std::abort();
  scratchDir = pattern;
  std::atexit([] {
    std::error_code ignored;
    std::filesystem::remove_all(scratchDir, ignored);
  });
  std::map<std::string, std::string> meta = {{"checkpoint_id", "s"},
                                             {"step", "1"}};
  static const float w[6] = {1, 2, 3, 4, 5, 6};
  static const float b[3] = {7, 8, 9};
  auto tensor = [](const float *data, std::vector<int64_t> shape) {
    HostTensor t;
    t.type = {DType::F32, std::move(shape)};
    t.data = reinterpret_cast<const uint8_t *>(data);
    return t;
  };
  if (!writeSafetensors(scratchDir + "/ck.s.rank0",
                        {{"w", tensor(w, {1, 3})}, {"b", tensor(b, {3})}}, meta)
           .ok() ||
      !writeSafetensors(scratchDir + "/ck.s.rank1",
                        {{"w", tensor(w + 3, {1, 3})}}, meta)
           .ok())
    std::abort();
}

/// Whether a program could ask for a tensor of `shape`: dimensions that are
/// not negative and a small enough element count (a program's types are
/// checked before its state is read).
bool plausible(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > (1 << 20))
      return false;
  return true;
}

/// Reads every named tensor of `state` whole, and its first half along
/// the first dimension.
void readAll(GlobalState &state, const std::vector<std::string> &names) {
  for (const std::string &name : names) {
    std::optional<TensorType> type = state.type(name);
    if (!type || !plausible(type->shape))
      continue;
    TensorBlock whole{std::vector<int64_t>(type->shape.size(), 0), type->shape};
    if (absl::StatusOr<HostTensor> t = state.read(name, whole); t.ok())
      merak::fuzz::touch(t->bytes(), t->byteSize());
    if (!type->shape.empty() && type->shape[0] > 1) {
      TensorBlock half = whole;
      half.sizes[0] /= 2;
      if (absl::StatusOr<HostTensor> t = state.read(name, half); t.ok())
        merak::fuzz::touch(t->bytes(), t->byteSize());
    }
  }
}

void fuzzIndex(const uint8_t *data, size_t size) {
  std::string path = scratchDir + "/ck.index.json";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char *>(data), std::streamsize(size));
  }
  absl::StatusOr<std::unique_ptr<GlobalState>> state = openCheckpoint(path);
  if (!state.ok())
    return;
  readAll(**state, {"w", "b", "a", ""});
}

void fuzzFile(const uint8_t *data, size_t size) {
  std::string path = merak::fuzz::memoryFile(data, size);
  absl::StatusOr<SafetensorsFile> file = readSafetensors(path);
  if (!file.ok())
    return;
  std::vector<std::string> names;
  std::vector<InputSpec> inputs;
  int64_t steps = -1;
  for (const auto &[name, t] : file->tensors) {
    merak::fuzz::touch(t.bytes(), t.byteSize());
    names.push_back(name);
    if (!t.type.shape.empty()) {
      inputs.push_back(
          {name,
           {t.type.dtype, {t.type.shape.begin() + 1, t.type.shape.end()}}});
      steps = steps < 0 ? t.type.shape[0] : std::min(steps, t.type.shape[0]);
    }
  }
  if (absl::StatusOr<std::unique_ptr<GlobalState>> state = openCheckpoint(path);
      state.ok())
    readAll(**state, names);
  if (inputs.empty() || steps < 1)
    return;
  absl::StatusOr<std::unique_ptr<BatchSource>> batches =
      openBatchFile(path, inputs, steps);
  if (!batches.ok())
    return;
  (*batches)->describe();
  for (int64_t step : {int64_t(1), steps, steps + 1})
    if (absl::StatusOr<std::vector<HostTensor>> b = (*batches)->batch(step);
        b.ok())
      for (const HostTensor &t : *b)
        merak::fuzz::touch(t.bytes(), t.byteSize());
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  writeShards();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 0 && data[0] == '{')
    fuzzIndex(data, size);
  else
    fuzzFile(data, size);
  return 0;
}

//===- Data.cpp - batch files, token files and synthetic inputs -----------===//

#include "merak/Runtime/Data.h"
#include "merak/Runtime/Random.h"
#include "merak/Runtime/Safetensors.h"
#include "merak/Runtime/TorchIO.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace merak::runtime {

BatchSource::~BatchSource() = default;

namespace {

std::string shapeString(const std::vector<int64_t> &shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

class BatchFile final : public BatchSource {
public:
  BatchFile(std::string path, std::vector<HostTensor> tensors, int64_t count)
      : path(std::move(path)), tensors(std::move(tensors)), count(count) {}

  absl::StatusOr<std::vector<HostTensor>> batch(int64_t step) override {
    if (step < 1 || step > count)
      return absl::OutOfRangeError(absl::StrCat(
          path, " holds ", count, " batches; step ", step, " has none"));
    std::vector<HostTensor> result;
    for (const HostTensor &all : tensors) {
      HostTensor slice;
      slice.type.dtype = all.type.dtype;
      slice.type.shape.assign(all.type.shape.begin() + 1, all.type.shape.end());
      slice.data = all.bytes() + (step - 1) * slice.byteSize();
      slice.owner = all.owner;
      result.push_back(std::move(slice));
    }
    return result;
  }

  std::string describe() const override {
    return absl::StrCat(path, " (", count, " batches)");
  }

private:
  std::string path;
  std::vector<HostTensor> tensors;
  int64_t count;
};

/// A read-only mapping of a token file.
struct MappedTokens {
  void *base = nullptr;
  size_t size = 0;
  ~MappedTokens() {
    if (base)
      munmap(base, size);
  }
};

class TokenFile final : public BatchSource {
public:
  TokenFile(std::string path, std::shared_ptr<MappedTokens> map,
            TokenDType dtype, std::vector<InputSpec> inputs, int64_t batchSize,
            int64_t seqLen, uint64_t seed, TokenWindows windows)
      : path(std::move(path)), map(std::move(map)), dtype(dtype),
        inputs(std::move(inputs)), batchSize(batchSize), seqLen(seqLen),
        seed(seed), windows(windows) {
    numTokens = int64_t(this->map->size / (dtype == TokenDType::U16 ? 2 : 4));
  }

  absl::StatusOr<std::vector<HostTensor>> batch(int64_t step) override {
    std::vector<int64_t> starts;
    if (windows == TokenWindows::Sequential) {
      // Whole windows of seqLen + 1 tokens starting at multiples of seqLen.
      int64_t count = (numTokens - 1) / seqLen;
      for (int64_t b = 0; b < batchSize; ++b)
        starts.push_back(((step - 1) * batchSize + b) % count * seqLen);
    } else {
      absl::StatusOr<std::vector<int64_t>> drawn =
          randomIntegers(stepSeed(seed, step, RandomStream::Data),
                         numTokens - seqLen, batchSize);
      if (!drawn.ok())
        return drawn.status();
      starts = *std::move(drawn);
    }
    std::vector<HostTensor> result;
    for (size_t k = 0; k < inputs.size(); ++k) {
      absl::StatusOr<HostTensor> allocated = HostTensor::tryAllocate(
          inputs[k].type, absl::StrCat("input '", inputs[k].name, "'"));
      if (!allocated.ok())
        return allocated.status();
      HostTensor t = *std::move(allocated);
      int64_t shift = k == 0 ? 0 : 1;
      for (int64_t b = 0; b < batchSize; ++b)
        for (int64_t j = 0; j < seqLen; ++j) {
          int64_t token = tokenAt(starts[b] + j + shift);
          int64_t index = b * seqLen + j;
          if (inputs[k].type.dtype == DType::I64) {
            std::memcpy(t.mutableBytes() + 8 * index, &token, 8);
          } else {
            int32_t narrow = int32_t(token);
            std::memcpy(t.mutableBytes() + 4 * index, &narrow, 4);
          }
        }
      result.push_back(std::move(t));
    }
    return result;
  }

  std::string describe() const override {
    return absl::StrCat(path, " (", numTokens, " tokens)");
  }

private:
  int64_t tokenAt(int64_t i) const {
    const uint8_t *p = static_cast<const uint8_t *>(map->base);
    if (dtype == TokenDType::U16) {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      return v;
    }
    int32_t v;
    std::memcpy(&v, p + 4 * i, 4);
    return v;
  }

  std::string path;
  std::shared_ptr<MappedTokens> map;
  TokenDType dtype;
  std::vector<InputSpec> inputs;
  int64_t batchSize, seqLen;
  uint64_t seed;
  TokenWindows windows;
  int64_t numTokens = 0;
};

class Synthetic final : public BatchSource {
public:
  Synthetic(std::vector<InputSpec> inputs, uint64_t seed)
      : inputs(std::move(inputs)), seed(seed) {}

  absl::StatusOr<std::vector<HostTensor>> batch(int64_t step) override {
    std::vector<TensorType> types;
    for (const InputSpec &in : inputs)
      types.push_back(in.type);
    absl::StatusOr<std::vector<HostTensor>> drawn =
        randomTensors(stepSeed(seed, step, RandomStream::Data), types);
    if (!drawn.ok())
      return absl::Status(drawn.status().code(),
                          absl::StrCat("synthetic data for step ", step, ": ",
                                       drawn.status().message()));
    return drawn;
  }

  std::string describe() const override { return "synthetic data"; }

private:
  std::vector<InputSpec> inputs;
  uint64_t seed;
};

} // namespace

absl::StatusOr<std::unique_ptr<BatchSource>>
openBatchFile(const std::string &path, const std::vector<InputSpec> &inputs,
              int64_t lastStep) {
  absl::StatusOr<SafetensorsFile> file = readSafetensors(path);
  if (!file.ok())
    return file.status();
  std::vector<HostTensor> tensors;
  int64_t count = -1;
  for (const InputSpec &in : inputs) {
    auto it = file->tensors.find(in.name);
    if (it == file->tensors.end()) {
      std::vector<std::string> names;
      for (const auto &entry : file->tensors)
        names.push_back(entry.first);
      return absl::NotFoundError(absl::StrCat(
          path, " has no tensor for input '", in.name, "' (it has ",
          names.empty() ? "none" : absl::StrJoin(names, ", "), ")"));
    }
    const HostTensor &t = it->second;
    // One batch per step along a new leading dimension.
    bool shapeOk = t.type.shape.size() == in.type.shape.size() + 1 &&
                   std::equal(t.type.shape.begin() + 1, t.type.shape.end(),
                              in.type.shape.begin());
    if (!shapeOk || t.type.dtype != in.type.dtype)
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": input '", in.name, "' is ", shapeString(t.type.shape), " ",
          dtypeName(t.type.dtype), ", but the program expects [steps, ",
          absl::StrJoin(in.type.shape, ", "), "] ", dtypeName(in.type.dtype),
          " (one ", in.type.str(), " batch per step)"));
    int64_t n = t.type.shape[0];
    if (n < lastStep)
      return absl::OutOfRangeError(
          absl::StrCat(path, " holds ", n, " batches of input '", in.name,
                       "', but step ", lastStep, " needs ", lastStep));
    count = count < 0 ? n : std::min(count, n);
    tensors.push_back(t);
  }
  return std::unique_ptr<BatchSource>(
      new BatchFile(path, std::move(tensors), count < 0 ? lastStep : count));
}

absl::StatusOr<std::unique_ptr<BatchSource>>
openTokenFile(const std::string &path, TokenDType dtype,
              const std::vector<InputSpec> &inputs, uint64_t seed,
              TokenWindows windows) {
  if (inputs.empty() || inputs.size() > 2)
    return absl::InvalidArgumentError(absl::StrCat(
        "--tokens needs a program with one or two integer inputs of shape "
        "[batch, seq_len]; this one has ",
        inputs.size(), " inputs"));
  for (const InputSpec &in : inputs)
    if (!isInteger(in.type.dtype) || in.type.shape.size() != 2 ||
        in.type.shape != inputs[0].type.shape)
      return absl::InvalidArgumentError(absl::StrCat(
          "--tokens needs integer inputs of one shape [batch, seq_len]; "
          "input '",
          in.name, "' is ", in.type.str()));
  int64_t batchSize = inputs[0].type.shape[0];
  int64_t seqLen = inputs[0].type.shape[1];

  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::NotFoundError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  struct stat st;
  bool statted = fstat(fd, &st) == 0;
  if (!statted || !S_ISREG(st.st_mode)) {
    std::string why =
        statted ? "not a regular file" : std::string(std::strerror(errno));
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", path, ": ", why));
  }
  auto map = std::make_shared<MappedTokens>();
  map->size = size_t(st.st_size);
  if (map->size > 0) {
    map->base = mmap(nullptr, map->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map->base == MAP_FAILED) {
      map->base = nullptr;
      ::close(fd);
      return absl::InternalError(
          absl::StrCat("cannot map ", path, ": ", std::strerror(errno)));
    }
  }
  ::close(fd);
  size_t width = dtype == TokenDType::U16 ? 2 : 4;
  if (map->size % width != 0)
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is ", map->size, " bytes, not a whole number of ",
                     width == 2 ? "uint16" : "int32", " tokens"));
  int64_t numTokens = int64_t(map->size / width);
  if (numTokens < seqLen + 1)
    return absl::InvalidArgumentError(absl::StrCat(path, " holds ", numTokens,
                                                   " tokens; a window of ",
                                                   seqLen, " + 1 needs more"));
  return std::unique_ptr<BatchSource>(new TokenFile(
      path, std::move(map), dtype, inputs, batchSize, seqLen, seed, windows));
}

std::unique_ptr<BatchSource>
syntheticBatches(const std::vector<InputSpec> &inputs, uint64_t seed) {
  return std::make_unique<Synthetic>(inputs, seed);
}

std::vector<InputSpec> globalInputs(const std::vector<ShardedInput> &inputs,
                                    const std::vector<int64_t> &meshShape) {
  std::vector<InputSpec> result;
  for (const ShardedInput &in : inputs)
    result.push_back(
        {in.local.name,
         {in.local.type.dtype,
          globalShape(in.local.type.shape, in.sharding, meshShape)}});
  return result;
}

namespace {

class ShardedBatches final : public BatchSource {
public:
  ShardedBatches(std::unique_ptr<BatchSource> global,
                 std::vector<ShardedInput> inputs,
                 std::vector<int64_t> meshShape, int64_t rank)
      : global(std::move(global)), inputs(std::move(inputs)),
        meshShape(std::move(meshShape)), rank(rank) {}

  absl::StatusOr<std::vector<HostTensor>> batch(int64_t step) override {
    absl::StatusOr<std::vector<HostTensor>> whole = global->batch(step);
    if (!whole.ok())
      return whole.status();
    std::vector<HostTensor> result;
    for (size_t k = 0; k < inputs.size(); ++k) {
      const HostTensor &all = (*whole)[k];
      const ShardedInput &in = inputs[k];
      absl::StatusOr<HostTensor> shard =
          cutShard(all, in.sharding, meshShape, rank);
      std::string where =
          absl::StrCat("input '", in.local.name, "': the global batch is ",
                       all.type.str(), " and sharding ", in.sharding.str(),
                       " on mesh ", absl::StrJoin(meshShape, "x"));
      if (!shard.ok())
        return absl::InvalidArgumentError(
            absl::StrCat(where, " cannot cut it for rank ", rank, ": ",
                         shard.status().message()));
      if (shard->type != in.local.type)
        return absl::InvalidArgumentError(
            absl::StrCat(where, " gives rank ", rank, " ", shard->type.str(),
                         ", but the program expects ", in.local.type.str()));
      result.push_back(*std::move(shard));
    }
    return result;
  }

  std::string describe() const override {
    return absl::StrCat(global->describe(), ", rank ", rank, "'s shards");
  }

private:
  std::unique_ptr<BatchSource> global;
  std::vector<ShardedInput> inputs;
  std::vector<int64_t> meshShape;
  int64_t rank;
};

} // namespace

std::unique_ptr<BatchSource> shardBatches(std::unique_ptr<BatchSource> global,
                                          std::vector<ShardedInput> inputs,
                                          std::vector<int64_t> meshShape,
                                          int64_t rank) {
  bool replicated = true;
  for (const ShardedInput &in : inputs)
    replicated &= in.sharding.isReplicated();
  if (replicated)
    return global;
  return std::make_unique<ShardedBatches>(std::move(global), std::move(inputs),
                                          std::move(meshShape), rank);
}

} // namespace merak::runtime

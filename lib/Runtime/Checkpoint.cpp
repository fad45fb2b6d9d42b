//===- Checkpoint.cpp - cutting global state and sharded checkpoints ------===//

#include "merak/Runtime/Checkpoint.h"
#include "merak/Runtime/Safetensors.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <dirent.h>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace merak::runtime {

GlobalState::~GlobalState() = default;

namespace {

using json = nlohmann::ordered_json;

std::string directoryOf(const std::string &path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

std::string baseName(const std::string &path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool exists(const std::string &path) {
  return ::access(path.c_str(), F_OK) == 0;
}

class WholeTensors final : public GlobalState {
public:
  WholeTensors(std::map<std::string, HostTensor> tensors, std::string name,
               std::map<std::string, std::string> metadata)
      : tensors(std::move(tensors)), label(std::move(name)),
        meta(std::move(metadata)) {}

  const std::string &name() const override { return label; }
  std::optional<TensorType> type(const std::string &tensor) const override {
    auto it = tensors.find(tensor);
    if (it == tensors.end())
      return std::nullopt;
    return it->second.type;
  }
  absl::StatusOr<HostTensor> read(const std::string &tensor,
                                  const TensorBlock &block) override {
    return extractBlock(tensors.at(tensor), block);
  }
  const std::map<std::string, std::string> &metadata() const override {
    return meta;
  }

private:
  std::map<std::string, HostTensor> tensors;
  std::string label;
  std::map<std::string, std::string> meta;
};

/// A sharded checkpoint: the index and the mapped shard files.
class ShardedCheckpoint final : public GlobalState {
public:
  struct SavedBlock {
    TensorBlock block;
    size_t file; // index into `files`
  };
  struct Entry {
    TensorType type; // as read: the stored shape when the index gives one
    std::vector<int64_t> blockShape; // the shape the blocks are boxes of
    std::vector<SavedBlock> blocks;
  };

  const std::string &name() const override { return label; }
  std::optional<TensorType> type(const std::string &tensor) const override {
    auto it = entries.find(tensor);
    if (it == entries.end())
      return std::nullopt;
    return it->second.type;
  }

  absl::StatusOr<HostTensor> read(const std::string &tensor,
                                  const TensorBlock &block) override {
    const Entry &entry = entries.at(tensor);
    if (entry.blockShape == entry.type.shape)
      return readBlocks(tensor, entry, block);
    // Saved as a reshape of the tensor: assemble it whole in the saved
    // shape, view it as stored, and cut the box.
    absl::StatusOr<HostTensor> whole = readBlocks(
        tensor, entry,
        {std::vector<int64_t>(entry.blockShape.size(), 0), entry.blockShape});
    if (!whole.ok())
      return whole.status();
    whole->type.shape = entry.type.shape;
    return extractBlock(*whole, block);
  }

  /// The box `block` of the tensor in the shape its saved blocks tile.
  absl::StatusOr<HostTensor> readBlocks(const std::string &tensor,
                                        const Entry &entry,
                                        const TensorBlock &block) {
    // The common case, resuming under the plan that saved: one saved block
    // is exactly the one asked for, and its mapped bytes serve as they are.
    for (const SavedBlock &saved : entry.blocks)
      if (saved.block == block)
        return files[saved.file].tensors.at(tensor);
    absl::StatusOr<HostTensor> allocated = HostTensor::tryAllocate(
        {entry.type.dtype, block.sizes},
        absl::StrCat("a block of '", tensor, "' from ", label));
    if (!allocated.ok())
      return allocated.status();
    HostTensor out = *std::move(allocated);
    int64_t covered = 0;
    for (const SavedBlock &saved : entry.blocks) {
      std::optional<TensorBlock> common = intersect(saved.block, block);
      if (!common)
        continue;
      TensorBlock inSaved = *common, inOut = *common;
      for (size_t d = 0; d < common->offsets.size(); ++d) {
        inSaved.offsets[d] -= saved.block.offsets[d];
        inOut.offsets[d] -= block.offsets[d];
      }
      copyRegion(files[saved.file].tensors.at(tensor), inSaved, out,
                 inOut.offsets);
      covered += common->numElements();
    }
    if (covered != block.numElements())
      return absl::DataLossError(absl::StrCat(
          label, ": the blocks of '", tensor, "' do not cover the tensor"));
    return out;
  }

  const std::map<std::string, std::string> &metadata() const override {
    return meta;
  }

  static absl::StatusOr<std::unique_ptr<GlobalState>>
  open(const std::string &indexPath) {
    std::ifstream in(indexPath);
    if (!in)
      return absl::NotFoundError(absl::StrCat("cannot open ", indexPath));
    auto bad = [&](const std::string &what) {
      return absl::InvalidArgumentError(absl::StrCat(indexPath, ": ", what));
    };
    json index;
    try {
      index = json::parse(in);
    } catch (const json::exception &e) {
      return bad(absl::StrCat("not valid JSON: ", e.what()));
    }
    // A list of integers, each within int64_t: a float or a larger number
    // is refused (converting one would be undefined behaviour).
    auto integers = [](const json &v, std::vector<int64_t> &out) {
      if (!v.is_array())
        return false;
      out.clear();
      for (const json &x : v) {
        if (x.is_number_unsigned()) {
          if (x.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
            return false;
        } else if (!x.is_number_integer()) {
          return false;
        }
        out.push_back(x.get<int64_t>());
      }
      return true;
    };
    auto result = std::make_unique<ShardedCheckpoint>();
    result->label = indexPath;
    try {
      if (index.value("format", "") != kShardedCheckpointFormat)
        return bad(absl::StrCat("not a sharded merak checkpoint (format is not "
                                "'",
                                kShardedCheckpointFormat, "')"));
      for (auto &[k, v] : index.at("metadata").items())
        result->meta[k] = v.get<std::string>();
      std::string id = result->meta["checkpoint_id"];
      std::string dir = directoryOf(indexPath);
      std::map<std::string, size_t> fileIndex;
      for (const json &f : index.at("files")) {
        // A save writes its shards beside the index; an index naming
        // another directory is not one of ours.
        std::string name = f.get<std::string>();
        if (name.empty() || name.find('/') != std::string::npos ||
            name == "." || name == "..")
          return absl::InvalidArgumentError(
              absl::StrCat(indexPath, ": shard file '", name,
                           "' is not a file name beside the index"));
        std::string path = dir + name;
        absl::StatusOr<SafetensorsFile> file = readSafetensors(path);
        if (!file.ok())
          return file.status();
        auto saved = file->metadata.find("checkpoint_id");
        if (saved == file->metadata.end() || saved->second != id)
          return absl::FailedPreconditionError(absl::StrCat(
              path, " belongs to another save than ", indexPath,
              " (an interrupted save?); resume from a complete checkpoint"));
        fileIndex[f.get<std::string>()] = result->files.size();
        result->files.push_back(*std::move(file));
      }
      for (auto &[name, t] : index.at("tensors").items()) {
        Entry entry;
        std::optional<DType> dtype =
            parseSafetensorsDType(t.at("dtype").get<std::string>());
        if (!dtype)
          return bad(absl::StrCat("tensor '", name, "' has an unknown dtype"));
        entry.type.dtype = *dtype;
        if (!integers(t.at("shape"), entry.type.shape))
          return bad(absl::StrCat("tensor '", name,
                                  "': shape: expected a list of integers"));
        entry.blockShape = entry.type.shape;
        if (absl::StatusOr<int64_t> bytes = checkedByteSize(entry.type);
            !bytes.ok())
          return bad(absl::StrCat("tensor '", name,
                                  "': shape: ", bytes.status().message()));
        if (t.contains("stored_shape")) {
          if (!integers(t.at("stored_shape"), entry.type.shape))
            return bad(absl::StrCat("tensor '", name,
                                    "': stored_shape: expected a list of "
                                    "integers"));
          if (absl::StatusOr<int64_t> bytes = checkedByteSize(entry.type);
              !bytes.ok())
            return bad(absl::StrCat("tensor '", name, "': stored_shape: ",
                                    bytes.status().message()));
          if (TensorType{*dtype, entry.blockShape}.numElements() !=
              entry.type.numElements())
            return bad(absl::StrCat("tensor '", name,
                                    "': stored_shape and shape have "
                                    "different element counts"));
        }
        for (const json &b : t.at("blocks")) {
          SavedBlock saved;
          if (!integers(b.at("offsets"), saved.block.offsets) ||
              !integers(b.at("shape"), saved.block.sizes))
            return bad(absl::StrCat("a block of '", name,
                                    "': offsets and shape must be lists of "
                                    "integers"));
          auto f = fileIndex.find(b.at("file").get<std::string>());
          if (f == fileIndex.end())
            return bad(absl::StrCat("a block of '", name,
                                    "' is in a file the index does not list"));
          saved.file = f->second;
          auto held = result->files[saved.file].tensors.find(name);
          if (held == result->files[saved.file].tensors.end() ||
              held->second.type !=
                  TensorType{entry.type.dtype, saved.block.sizes})
            return bad(absl::StrCat("'", name, "' in ",
                                    b.at("file").get<std::string>(),
                                    " is not the block the index lists"));
          if (saved.block.offsets.size() != entry.blockShape.size() ||
              saved.block.sizes.size() != entry.blockShape.size())
            return bad(absl::StrCat("a block of '", name,
                                    "' has the wrong "
                                    "rank"));
          for (size_t d = 0; d < saved.block.offsets.size(); ++d) {
            int64_t offset = saved.block.offsets[d];
            int64_t size = saved.block.sizes[d];
            if (offset < 0 || size < 0 || offset > entry.blockShape[d] - size)
              return bad(absl::StrCat(
                  "a block of '", name, "' in ",
                  b.at("file").get<std::string>(), " (offsets [",
                  absl::StrJoin(saved.block.offsets, ", "), "], shape [",
                  absl::StrJoin(saved.block.sizes, ", "),
                  "]) lies outside the tensor's shape [",
                  absl::StrJoin(entry.blockShape, ", "), "]"));
          }
          entry.blocks.push_back(std::move(saved));
        }
        result->entries[name] = std::move(entry);
      }
    } catch (const json::exception &e) {
      return bad(absl::StrCat("malformed index: ", e.what()));
    }
    return std::unique_ptr<GlobalState>(std::move(result));
  }

private:
  std::string label;
  std::map<std::string, std::string> meta;
  std::vector<SafetensorsFile> files;
  std::map<std::string, Entry> entries;
};

/// The state arguments of `program` with values to save.
std::vector<const Argument *> stateArguments(const Program &program) {
  std::vector<const Argument *> result;
  for (const Argument &arg : program.arguments)
    if (arg.isState())
      result.push_back(&arg);
  return result;
}

std::vector<int64_t> meshShapeOf(const Program &program) {
  return program.mesh ? program.mesh->shape : std::vector<int64_t>();
}

/// The shard files (with their directory) an existing index lists; none
/// when it is absent or unreadable.
std::vector<std::string> indexedFiles(const std::string &indexPath) {
  std::vector<std::string> result;
  std::ifstream in(indexPath);
  if (!in)
    return result;
  try {
    json index = json::parse(in);
    for (const json &f : index.at("files")) {
      // Only files beside the index: never a path an edited index names.
      std::string name = f.get<std::string>();
      if (name.find('/') == std::string::npos && name != ".." && name != ".")
        result.push_back(directoryOf(indexPath) + name);
    }
  } catch (const json::exception &) {
    result.clear();
  }
  return result;
}

json shardingJson(const Sharding &sharding) {
  json axes = json::array();
  for (const auto &dim : sharding.splitAxes)
    axes.push_back(dim);
  return axes;
}

} // namespace

std::unique_ptr<GlobalState>
wholeTensors(std::map<std::string, HostTensor> tensors, std::string name,
             std::map<std::string, std::string> metadata) {
  return std::make_unique<WholeTensors>(std::move(tensors), std::move(name),
                                        std::move(metadata));
}

std::string shardIndexPath(const std::string &path) {
  return path + ".index.json";
}

std::string shardFilePath(const std::string &path, const std::string &id,
                          int64_t rank) {
  return absl::StrCat(path, ".", id, ".rank", rank);
}

absl::StatusOr<std::unique_ptr<GlobalState>>
openCheckpoint(const std::string &path) {
  if (endsWith(path, ".index.json"))
    return ShardedCheckpoint::open(path);
  if (!exists(path) && exists(shardIndexPath(path)))
    return ShardedCheckpoint::open(shardIndexPath(path));
  absl::StatusOr<SafetensorsFile> file = readSafetensors(path);
  if (!file.ok())
    return file.status();
  return wholeTensors(std::move(file->tensors), path,
                      std::move(file->metadata));
}

namespace {
/// Parameter `name` (of `type`) as its `merak.init` makes it.
HostTensor initialTensor(const std::string &name, const std::string &init,
                         const TensorType &type) {
  HostTensor t = HostTensor::allocate(TensorType{DType::F32, type.shape});
  auto *data = reinterpret_cast<float *>(t.mutableBytes());
  int64_t n = type.numElements();
  std::fill(data, data + n, 0.0f);
  if (init == "kaiming_uniform" && !type.shape.empty()) {
    // nn.Linear's default (kaiming_uniform_ with a = sqrt(5)): uniform in
    // +-1/sqrt(fan_in), fan_in the product of every dimension but the
    // first. Seeded by the name, so every rank and run draws the same.
    int64_t fanIn = n / std::max<int64_t>(type.shape[0], 1);
    double bound = 1.0 / std::sqrt(double(std::max<int64_t>(fanIn, 1)));
    uint64_t seed = 1469598103934665603ull;
    for (unsigned char c : name)
      seed = (seed ^ c) * 1099511628211ull;
    std::mt19937_64 generator(seed);
    std::uniform_real_distribution<double> uniform(-bound, bound);
    for (int64_t i = 0; i < n; ++i)
      data[i] = float(uniform(generator));
  }
  return t;
}
} // namespace

absl::StatusOr<std::map<std::string, HostTensor>>
shardState(const Program &program, GlobalState &state) {
  std::map<std::string, HostTensor> result;
  std::vector<int64_t> meshShape = meshShapeOf(program);
  for (const Argument *arg : stateArguments(program)) {
    std::optional<TensorType> global = state.type(arg->name);
    if (!global && !arg->init.empty()) {
      // A parameter the weights lack that the program can make (LoRA's
      // adapters): made whole, as the weights would hold it, then cut.
      const TensorType &local = program.values[arg->value].type;
      HostTensor whole = initialTensor(
          arg->name, arg->init,
          TensorType{local.dtype,
                     globalShape(local.shape, arg->sharding, meshShape)});
      absl::StatusOr<HostTensor> shard =
          cutShard(whole, arg->sharding, meshShape, program.rank);
      if (!shard.ok())
        return shard.status();
      result[arg->name] = *std::move(shard);
      continue;
    }
    if (!global)
      continue;
    const TensorType &local = program.values[arg->value].type;
    if (!arg->storedShape.empty()) {
      // The program's value is a reshape of the stored tensor: read it
      // whole, view it in the program's shape, and cut this rank's block.
      std::vector<int64_t> view =
          globalShape(local.shape, arg->sharding, meshShape);
      if (global->shape != arg->storedShape)
        return absl::InvalidArgumentError(absl::StrCat(
            argumentRoleNoun(arg->role), " '", arg->name, "' is ",
            global->str(), " in ", state.name(),
            ", but the program stores it "
            "as ",
            TensorType{global->dtype, arg->storedShape}.str(), " (viewed as ",
            TensorType{local.dtype, view}.str(), ")"));
      if (TensorType{local.dtype, view}.numElements() != global->numElements())
        return absl::InvalidArgumentError(
            absl::StrCat(argumentRoleNoun(arg->role), " '", arg->name,
                         "' is stored as ", global->str(), " but viewed as ",
                         TensorType{local.dtype, view}.str(),
                         ", which has another element count"));
      absl::StatusOr<HostTensor> whole =
          state.read(arg->name, {std::vector<int64_t>(global->shape.size(), 0),
                                 global->shape});
      if (!whole.ok())
        return whole.status();
      whole->type.shape = view;
      absl::StatusOr<HostTensor> shard =
          cutShard(*whole, arg->sharding, meshShape, program.rank);
      if (!shard.ok())
        return shard.status();
      result[arg->name] = *std::move(shard);
      continue;
    }
    if (arg->sharding.isReplicated()) {
      // The whole tensor; Executor::loadState checks its type.
      absl::StatusOr<HostTensor> whole =
          state.read(arg->name, {std::vector<int64_t>(global->shape.size(), 0),
                                 global->shape});
      if (!whole.ok())
        return whole.status();
      result[arg->name] = *std::move(whole);
      continue;
    }
    std::string where = absl::StrCat(
        argumentRoleNoun(arg->role), " '", arg->name, "' is ", global->str(),
        " in ", state.name(), "; sharding ", arg->sharding.str(), " on mesh ",
        program.mesh ? program.mesh->str() : std::string("1"));
    absl::StatusOr<TensorBlock> block =
        shardBlock(global->shape, arg->sharding, meshShape, program.rank);
    if (!block.ok())
      return absl::InvalidArgumentError(
          absl::StrCat(where, " cannot cut it for rank ", program.rank, ": ",
                       block.status().message()));
    if (block->sizes != local.shape)
      return absl::InvalidArgumentError(absl::StrCat(
          where, " gives rank ", program.rank, " a ",
          TensorType{global->dtype, block->sizes}.str(),
          " block, but the program expects ", local.str(), " (a global ",
          TensorType{local.dtype,
                     globalShape(local.shape, arg->sharding, meshShape)}
              .str(),
          ")"));
    absl::StatusOr<HostTensor> shard = state.read(arg->name, *block);
    if (!shard.ok())
      return shard.status();
    result[arg->name] = *std::move(shard);
  }
  return result;
}

/// The global rank of mesh rank `meshRank` of the pipeline rank saving
/// `name` (the mesh rank itself without a pipeline).
static int64_t savingRank(const PipelineOwnership *pipeline,
                          const std::string &name, int64_t meshRank,
                          int64_t meshSize) {
  if (!pipeline)
    return meshRank;
  auto it = pipeline->owner.find(name);
  int64_t owner = it == pipeline->owner.end() ? 0 : it->second;
  return owner * meshSize + meshRank;
}

void toStoredShapes(const Program &program,
                    std::map<std::string, HostTensor> &tensors) {
  for (const Argument *arg : stateArguments(program)) {
    auto it = tensors.find(arg->name);
    if (it != tensors.end() && !arg->storedShape.empty() &&
        TensorType{it->second.type.dtype, arg->storedShape}.numElements() ==
            it->second.type.numElements())
      it->second.type.shape = arg->storedShape;
  }
}

absl::Status
writeCheckpointShard(const std::string &path, const Program &program,
                     const std::map<std::string, HostTensor> &tensors,
                     const std::map<std::string, std::string> &metadata,
                     const PipelineOwnership *pipeline) {
  std::vector<int64_t> meshShape = meshShapeOf(program);
  int64_t meshSize = program.worldSize();
  int64_t fileRank = pipeline ? pipeline->pipelineRank * meshSize + program.rank
                              : program.rank;
  std::map<std::string, HostTensor> owned;
  for (const Argument *arg : stateArguments(program)) {
    auto it = tensors.find(arg->name);
    if (it != tensors.end() &&
        ownsBlock(arg->sharding, meshShape, program.rank) &&
        savingRank(pipeline, arg->name, program.rank, meshSize) == fileRank)
      owned[arg->name] = it->second;
  }
  auto id = metadata.find("checkpoint_id");
  if (id == metadata.end() || id->second.empty())
    return absl::InvalidArgumentError("a sharded save needs a checkpoint_id");
  std::map<std::string, std::string> meta = metadata;
  meta["rank"] = std::to_string(fileRank);
  return writeSafetensors(shardFilePath(path, id->second, fileRank), owned,
                          meta);
}

absl::Status
writeCheckpointIndex(const std::string &path, const Program &program,
                     const std::map<std::string, std::string> &metadata,
                     const PipelineOwnership *pipeline) {
  std::vector<int64_t> meshShape = meshShapeOf(program);
  int64_t meshSize = program.worldSize();
  int64_t world = meshSize * (pipeline ? pipeline->pipelineRanks : 1);
  auto idIt = metadata.find("checkpoint_id");
  if (idIt == metadata.end() || idIt->second.empty())
    return absl::InvalidArgumentError("a sharded save needs a checkpoint_id");
  const std::string &id = idIt->second;
  json index;
  index["format"] = kShardedCheckpointFormat;
  index["metadata"] = metadata;
  index["mesh"] = {{"shape", meshShape},
                   {"axes", program.mesh ? program.mesh->axisNames
                                         : std::vector<std::string>()}};
  json files = json::array();
  for (int64_t r = 0; r < world; ++r)
    files.push_back(baseName(shardFilePath(path, id, r)));
  index["files"] = files;
  json entries = json::object();
  for (const Argument *arg : stateArguments(program)) {
    const TensorType &local = program.values[arg->value].type;
    std::vector<int64_t> shape =
        globalShape(local.shape, arg->sharding, meshShape);
    json blocks = json::array();
    for (int64_t r = 0; r < meshSize; ++r) {
      if (!ownsBlock(arg->sharding, meshShape, r))
        continue;
      absl::StatusOr<TensorBlock> block =
          shardBlock(shape, arg->sharding, meshShape, r);
      if (!block.ok())
        return block.status();
      int64_t file = savingRank(pipeline, arg->name, r, meshSize);
      blocks.push_back({{"file", baseName(shardFilePath(path, id, file))},
                        {"offsets", block->offsets},
                        {"shape", block->sizes}});
    }
    entries[arg->name] = {{"dtype", safetensorsDTypeName(local.dtype)},
                          {"shape", shape},
                          {"sharding", shardingJson(arg->sharding)},
                          {"blocks", blocks}};
    // Blocks are boxes of `shape`; the tensor as PyTorch holds it (and as
    // any other plan reads it) is its reshape to `stored_shape`.
    if (!arg->storedShape.empty())
      entries[arg->name]["stored_shape"] = arg->storedShape;
  }
  // One line per key and per tensor: readable, and diffable between saves.
  std::string text = "{\n";
  for (auto it = index.begin(); it != index.end(); ++it)
    absl::StrAppend(&text, " ", json(it.key()).dump(), ": ", it.value().dump(),
                    ",\n");
  text += " \"tensors\": {";
  bool first = true;
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    absl::StrAppend(&text, first ? "\n" : ",\n", "  ", json(it.key()).dump(),
                    ": ", it.value().dump());
    first = false;
  }
  text += "\n }\n}\n";
  std::vector<std::string> previous = indexedFiles(shardIndexPath(path));
  if (absl::Status s = writeFileAtomically(shardIndexPath(path),
                                           {{text.data(), text.size()}});
      !s.ok())
    return s;
  // The new index is in place: the previous save's files are garbage, and
  // so is what interrupted saves left.
  for (const std::string &file : previous)
    if (std::find(files.begin(), files.end(), baseName(file)) == files.end())
      std::remove(file.c_str());
  std::vector<std::string> keep;
  for (const json &f : files)
    keep.push_back(directoryOf(path) + f.get<std::string>());
  removeStaleTemporaries(path, keep);
  return absl::OkStatus();
}

namespace {

bool allOf(const std::string &s, int (*pred)(int)) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) {
    return pred((unsigned char)c) != 0;
  });
}

/// The save id in `name` when it is the name of a shard file of a sharded
/// save to `path` (`<base>.<id>.rank<R>`, the id hexadecimal), else "".
std::string shardFileId(const std::string &path, const std::string &name) {
  const std::string prefix = baseName(path) + ".";
  if (name.compare(0, prefix.size(), prefix) != 0)
    return "";
  std::string rest = name.substr(prefix.size());
  size_t rank = rest.find(".rank");
  if (rank == std::string::npos)
    return "";
  std::string id = rest.substr(0, rank);
  if (!allOf(id, isxdigit) || !allOf(rest.substr(rank + 5), isdigit))
    return "";
  return id;
}

/// The regular files in the directory of `path`, by name.
std::vector<std::string> filesBeside(const std::string &path) {
  std::vector<std::string> names;
  std::string dir = directoryOf(path);
  DIR *d = ::opendir(dir.empty() ? "." : dir.c_str());
  if (!d)
    return names;
  while (const dirent *e = ::readdir(d)) {
    std::string name = e->d_name;
    struct stat st;
    if (::lstat((dir + name).c_str(), &st) == 0 && S_ISREG(st.st_mode))
      names.push_back(std::move(name));
  }
  ::closedir(d);
  return names;
}

} // namespace

void removeStaleTemporaries(const std::string &path,
                            const std::vector<std::string> &keep) {
  const std::string dir = directoryOf(path);
  for (const std::string &name : filesBeside(path)) {
    bool temporary =
        isAtomicWriteTemporary(path, name) ||
        isAtomicWriteTemporary(shardIndexPath(path), name) ||
        (name.size() > 8 && name[0] == '.' &&
         isAtomicWriteTemporary(dir + name.substr(1, name.size() - 8), name) &&
         !shardFileId(path, name.substr(1, name.size() - 8)).empty());
    if (temporary) {
      std::remove((dir + name).c_str());
      continue;
    }
    // A shard file of a save that never committed its index: only one that
    // says it is ours, of the save its name gives.
    std::string id = shardFileId(path, name);
    if (id.empty() ||
        std::find(keep.begin(), keep.end(), dir + name) != keep.end())
      continue;
    absl::StatusOr<SafetensorsFile> file = readSafetensors(dir + name);
    if (!file.ok())
      continue;
    auto format = file->metadata.find("format");
    auto saved = file->metadata.find("checkpoint_id");
    if (format != file->metadata.end() && format->second == kCheckpointFormat &&
        saved != file->metadata.end() && saved->second == id)
      std::remove((dir + name).c_str());
  }
}

void removeStaleCheckpoint(const std::string &path, bool sharded) {
  std::string stale = sharded ? path : shardIndexPath(path);
  if (!sharded) {
    if (exists(stale)) {
      std::vector<std::string> files = indexedFiles(stale);
      std::remove(stale.c_str());
      for (const std::string &file : files)
        std::remove(file.c_str());
    }
    removeStaleTemporaries(path, {});
    return;
  }
  if (exists(stale)) {
    // Only a checkpoint of ours: never a file someone else put there.
    absl::StatusOr<SafetensorsFile> file = readSafetensors(path);
    if (file.ok()) {
      auto format = file->metadata.find("format");
      if (format != file->metadata.end() && format->second == kCheckpointFormat)
        std::remove(stale.c_str());
    }
  }
}

namespace {

constexpr const char *kStepPrefix = "step-";
constexpr const char *kStepSuffix = ".safetensors";

/// The step of a file of `dir` named as a step checkpoint's target
/// (`step-N.safetensors`) or as one of its files (`step-N.safetensors.*`,
/// a temporary `.step-N.safetensors*`): N, with the target's name; -1 for
/// any other name.
int64_t stepOfName(std::string name, std::string *target) {
  if (!name.empty() && name[0] == '.')
    name.erase(0, 1);
  const std::string prefix = kStepPrefix;
  if (name.compare(0, prefix.size(), prefix) != 0)
    return -1;
  size_t digits = prefix.size();
  size_t end = digits;
  while (end < name.size() && std::isdigit((unsigned char)name[end]))
    ++end;
  // Eight digits or more (a step beyond 10^8 takes more), no sign.
  const std::string suffix = kStepSuffix;
  if (end - digits < 8 || end - digits > 18 ||
      name.compare(end, suffix.size(), suffix) != 0)
    return -1;
  if (target)
    *target = name.substr(0, end + suffix.size());
  return std::stoll(name.substr(digits, end - digits));
}

} // namespace

std::string stepCheckpointPath(const std::string &dir, int64_t step) {
  std::string number = std::to_string(step);
  if (number.size() < 8)
    number.insert(0, 8 - number.size(), '0');
  std::string prefix = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  return absl::StrCat(prefix, kStepPrefix, number, kStepSuffix);
}

std::vector<StepCheckpoint> listStepCheckpoints(const std::string &dir) {
  std::string prefix = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  std::map<int64_t, StepCheckpoint> found;
  // `filesBeside` lists the directory of a path inside `dir`.
  for (const std::string &name : filesBeside(prefix + "x")) {
    if (name.empty() || name[0] == '.')
      continue;
    std::string target;
    int64_t step = stepOfName(name, &target);
    if (step < 0 || (name != target && name != shardIndexPath(target)))
      continue;
    found[step] = StepCheckpoint{step, prefix + target};
  }
  std::vector<StepCheckpoint> result;
  for (auto &[step, checkpoint] : found)
    result.push_back(std::move(checkpoint));
  return result;
}

void removeCheckpoint(const std::string &path) {
  std::string index = shardIndexPath(path);
  if (exists(index)) {
    std::vector<std::string> files = indexedFiles(index);
    std::remove(index.c_str());
    for (const std::string &file : files)
      std::remove(file.c_str());
  }
  if (exists(path))
    std::remove(path.c_str());
}

void pruneStepCheckpoints(const std::string &dir, int64_t keepLast) {
  std::vector<StepCheckpoint> committed = listStepCheckpoints(dir);
  if (keepLast > 0 && int64_t(committed.size()) > keepLast)
    for (size_t i = 0; i + size_t(keepLast) < committed.size(); ++i)
      removeCheckpoint(committed[i].path);
  std::string prefix = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  std::set<std::string> targets;
  for (const std::string &name : filesBeside(prefix + "x")) {
    std::string target;
    if (stepOfName(name, &target) >= 0)
      targets.insert(target);
  }
  for (const std::string &target : targets)
    removeStaleTemporaries(prefix + target,
                           indexedFiles(shardIndexPath(prefix + target)));
}

} // namespace merak::runtime

//===- Checkpoint.h - global state, shards and sharded checkpoints -*- C++ -*-//
//
// Every rank reads the *global* tensors of its state (a TorchScript
// archive, a single-file checkpoint, or a sharded one) and keeps the block
// its program's `merak.sharding` gives it, so a checkpoint saved under one
// plan resumes under any other. Under more than one rank, `--save PATH`
// writes `PATH.<id>.rank<R>` (the blocks rank R owns, each block once; `id`
// names the save) and `PATH.index.json` (rank 0: global shapes, shardings,
// the mesh, and which file holds which block), whose rename commits the
// save. See docs/runtime.md.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_CHECKPOINT_H
#define MERAK_RUNTIME_CHECKPOINT_H

#include "merak/Runtime/Mesh.h"
#include "merak/Runtime/Program.h"
#include "merak/Runtime/Tensor.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace merak::runtime {

/// The `format` of a checkpoint's metadata (single file and sharded).
inline constexpr const char *kCheckpointFormat = "merak-checkpoint-v1";
/// The `format` of a sharded checkpoint's index.
inline constexpr const char *kShardedCheckpointFormat =
    "merak-sharded-checkpoint-v1";

/// Global tensors by name, read a block at a time.
class GlobalState {
public:
  virtual ~GlobalState();
  /// The file(s) it was read from, for messages.
  virtual const std::string &name() const = 0;
  /// The global type of `tensor`, or nullopt when it is absent.
  virtual std::optional<TensorType> type(const std::string &tensor) const = 0;
  /// The box `block` of `tensor` (which must be present).
  virtual absl::StatusOr<HostTensor> read(const std::string &tensor,
                                          const TensorBlock &block) = 0;
  /// The checkpoint's `__metadata__` (step, seed, ...); empty for weights.
  virtual const std::map<std::string, std::string> &metadata() const = 0;
};

/// Whole tensors held in memory (a TorchScript archive's weights).
std::unique_ptr<GlobalState>
wholeTensors(std::map<std::string, HostTensor> tensors, std::string name,
             std::map<std::string, std::string> metadata = {});

/// The index of a sharded checkpoint saved to `path`.
std::string shardIndexPath(const std::string &path);
/// The file rank `rank` writes for the sharded save `id` to `path`.
std::string shardFilePath(const std::string &path, const std::string &id,
                          int64_t rank);

/// Opens the checkpoint `path`: a safetensors file, a sharded checkpoint's
/// index (`X.index.json`), or `X` when only `X.index.json` exists. Shard
/// files are mapped and checked against the index.
absl::StatusOr<std::unique_ptr<GlobalState>>
openCheckpoint(const std::string &path);

/// Gives the whole tensors of a single-process run (`tensors`, by name) the
/// shapes they are stored in (`merak.stored_shape`), as a checkpoint keeps
/// them.
void toStoredShapes(const Program &program,
                    std::map<std::string, HostTensor> &tensors);

/// This rank's block of every state argument (parameter, buffer, optimizer
/// state) of `program` (bound to its rank) that `state` holds; absent ones
/// are left for `Executor::loadState` to report. A replicated argument gets
/// the whole tensor unchanged. A global tensor that the argument's
/// sharding cannot cut into the argument's type is an error naming the
/// argument, the global type, the sharding, the mesh and the rank.
absl::StatusOr<std::map<std::string, HostTensor>>
shardState(const Program &program, GlobalState &state);

/// Writes the sharded checkpoint file of `program`'s rank: `tensors` (the
/// rank's state by name, as `Executor::stateToHost` gives it), keeping the
/// blocks this rank owns, with `metadata`, whose `checkpoint_id` (the same
/// on every rank) names the save. Atomic (written, then renamed).
///
/// `pipeline` (pipeline plans): the file is the global rank's, and only the
/// tensors whose owner is this pipeline rank are kept.
struct PipelineOwnership {
  int64_t pipelineRanks = 1;
  int64_t pipelineRank = 0;
  /// Per state tensor: the pipeline rank that saves it (the rank of the
  /// first stage holding it; a tied parameter is saved once).
  std::map<std::string, int64_t> owner;
};
absl::Status
writeCheckpointShard(const std::string &path, const Program &program,
                     const std::map<std::string, HostTensor> &tensors,
                     const std::map<std::string, std::string> &metadata,
                     const PipelineOwnership *pipeline = nullptr);

/// Writes `shardIndexPath(path)` for `program` run on every rank of its
/// mesh (rank 0 does this once every rank's file is in place). The blocks
/// follow from the shardings, so no other rank's data is needed. The
/// rename of the index commits the save: a crash before it leaves the
/// previous checkpoint whole. Then the previous save's shard files go, and
/// what interrupted saves left (`removeStaleTemporaries`).
absl::Status
writeCheckpointIndex(const std::string &path, const Program &program,
                     const std::map<std::string, std::string> &metadata,
                     const PipelineOwnership *pipeline = nullptr);

/// Removes what an earlier save to `path` in the other layout left, so
/// `openCheckpoint(path)` finds the newest: the single file after a sharded
/// save, the index and its shard files after a single-file save.
/// After a single-file save, also removes what interrupted saves to `path`
/// left (`removeStaleTemporaries`; after a sharded save, the index writer
/// does).
void removeStaleCheckpoint(const std::string &path, bool sharded);

/// Removes, beside `path`, what saves to `path` killed before they finished
/// left: the temporary files of `writeFileAtomically` for the single file,
/// the index and each shard file (`.<name>.XXXXXX`), and the shard files of
/// a sharded save whose index was never written (named
/// `<name>.<id>.rank<R>` and holding a checkpoint of that id) unless
/// `keep` (with their directory) lists them. Called once a save is
/// complete, when no write to `path` is in flight.
void removeStaleTemporaries(const std::string &path,
                            const std::vector<std::string> &keep);

/// Periodic checkpoints in a directory (`merak-exec --save-dir`): the
/// checkpoint after step N is `DIR/step-<N, 8 digits>.safetensors`, one
/// file or a sharded checkpoint (its index and shard files), committed by
/// its rename as any save is.
std::string stepCheckpointPath(const std::string &dir, int64_t step);

struct StepCheckpoint {
  int64_t step = 0;
  /// What `openCheckpoint` opens: the single file, or the name whose
  /// `.index.json` exists.
  std::string path;
};

/// The committed checkpoints of `dir`, oldest first; an empty list when it
/// has none or does not exist. Leftovers of interrupted saves (temporaries,
/// shard files without an index) do not count.
std::vector<StepCheckpoint> listStepCheckpoints(const std::string &dir);

/// Removes a committed checkpoint: a sharded one's index first (so that a
/// crash meanwhile never leaves an index without its shards), then the
/// shard files it lists; or the single file.
void removeCheckpoint(const std::string &path);

/// After a save to `dir` committed: removes the oldest committed
/// checkpoints beyond the newest `keepLast` (0 keeps all), and what saves
/// killed before they finished left beside every checkpoint of `dir`
/// (`removeStaleTemporaries`). Files not named as its checkpoints are left
/// alone.
void pruneStepCheckpoints(const std::string &dir, int64_t keepLast);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_CHECKPOINT_H

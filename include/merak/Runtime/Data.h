//===- Data.h - where each step's inputs come from ------------*- C++ -*-===//
//
// A batch file (safetensors with one tensor per input whose first dimension
// indexes steps), a flat token file sampled in windows, or synthetic data.
// All three are deterministic in (seed, step), so a resumed run sees the
// same inputs as an uninterrupted one.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_DATA_H
#define MERAK_RUNTIME_DATA_H

#include "merak/Runtime/Mesh.h"
#include "merak/Runtime/Tensor.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace merak::runtime {

/// A model input the program expects.
struct InputSpec {
  std::string name;
  TensorType type;
};

class BatchSource {
public:
  virtual ~BatchSource();
  /// The inputs of global step `step` (1-based), one per spec in order.
  virtual absl::StatusOr<std::vector<HostTensor>> batch(int64_t step) = 0;
  /// A short description for the log ("batches.safetensors, 10 steps").
  virtual std::string describe() const = 0;
};

/// Step `s` reads slice `s - 1` of each input's tensor. Checks now that
/// every input is present with shape `[n] + shape` and the same dtype, and
/// that `n >= lastStep`.
absl::StatusOr<std::unique_ptr<BatchSource>>
openBatchFile(const std::string &path, const std::vector<InputSpec> &inputs,
              int64_t lastStep);

enum class TokenDType { U16, I32 };

/// How a token file's windows are chosen: drawn at random per step
/// (training), or taken in order without overlap, wrapping at the end of
/// the file (evaluation: the same windows every time).
enum class TokenWindows { Random, Sequential };

/// Samples `batch` windows of `seqLen + 1` tokens per step (start offsets
/// `torch.randint(n - seqLen, (batch,))` from the step's data generator,
/// seeded with `stepSeed(seed, step, RandomStream::Data)`).
/// With two integer inputs `[batch, seqLen]` the first gets each window's
/// first `seqLen` tokens and the second the last `seqLen`; with one, the
/// first `seqLen`. With `TokenWindows::Sequential`, step `s` takes windows
/// `(s - 1) * batch + b` of those starting at multiples of `seqLen`.
absl::StatusOr<std::unique_ptr<BatchSource>>
openTokenFile(const std::string &path, TokenDType dtype,
              const std::vector<InputSpec> &inputs, uint64_t seed,
              TokenWindows windows = TokenWindows::Random);

/// Random inputs from the step's data generator, in input order: floats
/// `torch.randn`, integers and booleans `torch.randint(0, 2)`.
std::unique_ptr<BatchSource>
syntheticBatches(const std::vector<InputSpec> &inputs, uint64_t seed);

/// An input of an SPMD program: its rank-local spec and how the global
/// batch is split.
struct ShardedInput {
  InputSpec local;
  Sharding sharding;
};

/// The global specs of `inputs` (what a batch source must produce when
/// every rank reads the whole batch and keeps its shard).
std::vector<InputSpec> globalInputs(const std::vector<ShardedInput> &inputs,
                                    const std::vector<int64_t> &meshShape);

/// Batches of `global` (of the global shapes) cut to `rank`'s shards. A
/// shard that does not have the input's local type is an error naming the
/// input, the global shape, the sharding and the rank.
std::unique_ptr<BatchSource> shardBatches(std::unique_ptr<BatchSource> global,
                                          std::vector<ShardedInput> inputs,
                                          std::vector<int64_t> meshShape,
                                          int64_t rank);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_DATA_H

//===- Generate.h - text generation with a key-value cache ------*- C++ -*-===//
//
// Runs the @prefill and @decode programs `--merak-kv-cache` makes from a
// language model: the prompts of a batch through the whole window once,
// then one position at a time against the cached keys and values, picking
// each token greedily or by sampling (docs/generation.md).
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_TRAIN_GENERATE_H
#define MERAK_RUNTIME_TRAIN_GENERATE_H

#include "merak/Runtime/Backend.h"
#include "merak/Runtime/Communicator.h"
#include "merak/Runtime/Executor.h"
#include "merak/Runtime/Program.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace merak::runtime {

struct SamplingOptions {
  double temperature = 0; // 0: greedy
  int64_t topK = 0;       // 0: every token
  double topP = 1;        // 1: every token
};

/// An error unless `o` is usable: a finite temperature of at least 0,
/// top-k of at least 0, top-p in (0, 1].
absl::Status checkSampling(const SamplingOptions &o);

/// The token one row of `vocab` logits gives. Greedy (temperature 0): the
/// first of the largest, as `torch.argmax`. Otherwise the tokens are
/// ranked by logit, cut to the `topK` first and then to the fewest whose
/// probabilities (softmax of logits / temperature) reach `topP`, and the
/// token is drawn from what is left with `uniform` (in [0, 1)).
int64_t pickToken(const float *logits, int64_t vocab, const SamplingOptions &o,
                  double uniform);

struct GenerationRequest {
  std::vector<std::vector<int64_t>> prompts; // each of 1 .. L-1 tokens
  int64_t maxNewTokens = 32;
  std::vector<int64_t> stopTokens;
  SamplingOptions sampling;
  uint64_t seed = 0;
};

struct GenerationResult {
  /// Per prompt: the tokens generated (a stop token included).
  std::vector<std::vector<int64_t>> tokens;
  /// Per prompt: "stop", "length" (--max-new-tokens) or "context" (the
  /// window is full).
  std::vector<std::string> finish;
  double prefillSeconds = 0, decodeSeconds = 0;
  int64_t decodeSteps = 0;
};

class Generator {
public:
  ~Generator();
  /// `prefill` and `decode` planned and bound to this rank; they must
  /// outlive the generator.
  static absl::StatusOr<std::unique_ptr<Generator>>
  create(const Program &prefill, const Program &decode, Backend &backend,
         Communicator *communicator);

  /// Parameters and buffers by name (this rank's shards), shared by both
  /// programs.
  absl::Status loadWeights(const std::map<std::string, HostTensor> &tensors,
                           const std::string &sourceName);

  int64_t batch() const { return batchSize; }
  int64_t window() const { return length; }
  int64_t vocabulary() const { return vocab; }

  absl::StatusOr<GenerationResult> generate(const GenerationRequest &request);

private:
  Generator(const Program &prefill, const Program &decode, Backend &backend)
      : prefill(prefill), decode(decode), backend(backend) {}

  /// One handle per argument of `program`: weights by name, the token
  /// input, the position, the caches by name.
  absl::StatusOr<std::vector<TensorHandle>>
  arguments(const Program &program, const HostTensor &tokens, int64_t position);
  absl::StatusOr<HostTensor> logitsOf(const Program &program,
                                      const std::vector<TensorHandle> &results);

  const Program &prefill, &decode;
  Backend &backend;
  std::unique_ptr<Executor> prefillExec, decodeExec;
  std::map<std::string, TensorHandle> weights, caches;
  int64_t batchSize = 0, length = 0, vocab = 0;
};

} // namespace merak::runtime

#endif // MERAK_RUNTIME_TRAIN_GENERATE_H

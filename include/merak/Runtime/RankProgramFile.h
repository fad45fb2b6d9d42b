//===- RankProgramFile.h - compiled rank programs and their file -*- C++
//-*-===//
//
// What `merak-exec` runs, in one value: the step's SPMD program and, for a
// pipeline, every pipeline rank's plan (schedule, task list, stage
// programs, transfers). The compiler makes it by lowering a module
// (lib/Target/RankProgram); the rank-program file (`.mrp`) stores it, so a
// machine that only trains needs neither MLIR nor the compiler.
//
// The file: a 32-byte header (magic, format version, payload size, CRC-32C
// of the payload and of the header) and a CBOR payload (RFC 8949, through
// nlohmann-json). docs/runtime.md describes the layout.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_RANKPROGRAMFILE_H
#define MERAK_RUNTIME_RANKPROGRAMFILE_H

#include "merak/Runtime/Pipeline.h"
#include "merak/Runtime/Program.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace merak::runtime {

/// A compiled plan: the programs of every rank of a run.
struct RankPrograms {
  /// The step (`@train_step`, `@forward` or the chosen entry), planned but
  /// bound to no rank: the mesh ranks of a stage share it and `bindToRank`
  /// specializes it. A pipeline's `@train_step` tells the state, the inputs
  /// and their shardings.
  Program step;
  /// A pipeline: one plan per pipeline rank, `pipeline[r].rank == r`.
  /// Empty when the step runs without one.
  std::vector<PipelinePlan> pipeline;
  /// Where it was compiled from (the module's file name), for messages.
  std::string source;
  /// A text generator (--merak-kv-cache): `step` is @prefill and this its
  /// @decode, planned but bound to no rank.
  std::optional<Program> decode;
};

/// A compiled plan as a run starts from it: the step, and each pipeline
/// rank's plan on demand, so that a rank decodes (or lowers) only its own.
class CompiledPlan {
public:
  virtual ~CompiledPlan();
  /// The step (see `RankPrograms::step`).
  Program &step() { return stepProgram; }
  const Program &step() const { return stepProgram; }
  const std::string &source() const { return sourceName; }
  bool pipelined() const { return ranks > 0; }
  int64_t pipelineRanks() const { return ranks > 0 ? ranks : 1; }
  /// Pipeline rank `rank`'s plan, `0 <= rank < pipelineRanks()` of a
  /// pipelined plan. An error names the file and the rank; one whose
  /// diagnostics were already printed (a module's) has an empty message.
  virtual absl::StatusOr<PipelinePlan> pipelinePlan(int64_t rank) = 0;
  /// A text generator's @decode (`RankPrograms::decode`), or null.
  Program *decode() { return decodeProgram ? &*decodeProgram : nullptr; }

protected:
  Program stepProgram;
  std::optional<Program> decodeProgram;
  int64_t ranks = 0; // pipeline ranks; 0 without a pipeline
  std::string sourceName;
};

/// `programs`, held in memory.
std::unique_ptr<CompiledPlan> inMemoryPlan(RankPrograms programs);

/// The version this build writes and the oldest it reads.
constexpr uint32_t kRankProgramFormatVersion = 1;
constexpr uint32_t kRankProgramOldestReadable = 1;
constexpr size_t kRankProgramHeaderBytes = 32;

/// True when `prefix` (a file's first bytes) starts with the rank-program
/// magic.
bool isRankProgramFile(std::string_view prefix);

/// The file's bytes. Fails for a program that cannot be written (a value
/// id out of range).
absl::StatusOr<std::string> serializeRankPrograms(const RankPrograms &programs);

/// Opens bytes written by `serializeRankPrograms` (`name` is used in
/// messages): checks the header, the checksums and the step, and keeps
/// each pipeline rank's plan encoded until `pipelinePlan` asks for it.
/// Errors as `parseRankPrograms`'s.
absl::StatusOr<std::unique_ptr<CompiledPlan>>
openRankPrograms(std::string_view bytes, const std::string &name);
absl::StatusOr<std::unique_ptr<CompiledPlan>>
openRankProgramFile(const std::string &path);

/// Reads bytes written by `serializeRankPrograms`, every pipeline plan
/// included; `name` is used in messages. A truncated, corrupted, foreign or
/// newer file, and one whose programs are inconsistent (an id out of range, an
/// unknown op), is an error that names the file and what is wrong; nothing is
/// partly read.
absl::StatusOr<RankPrograms> parseRankPrograms(std::string_view bytes,
                                               const std::string &name);

/// CRC-32C (Castagnoli), the file's checksum.
uint32_t crc32c(std::string_view bytes, uint32_t crc = 0);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_RANKPROGRAMFILE_H

//===- Safetensors.h - reading and writing .safetensors files -*- C++ -*-===//
//
// The format: an 8-byte little-endian header length, a JSON header mapping
// each tensor name to {dtype, shape, data_offsets} (plus an optional
// `__metadata__` string map), then the raw little-endian bytes. Files are
// mapped, so reading one slice of a large batch file touches only its pages.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_SAFETENSORS_H
#define MERAK_RUNTIME_SAFETENSORS_H

#include "merak/Runtime/Tensor.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace merak::runtime {

struct SafetensorsFile {
  /// Tensors by name; their bytes point into the mapped file.
  std::map<std::string, HostTensor> tensors;
  std::map<std::string, std::string> metadata;
};

/// Maps and validates `path`. Errors start with the path and say what is
/// wrong (truncated, bad JSON, unknown dtype, overlapping data, ...).
absl::StatusOr<SafetensorsFile> readSafetensors(const std::string &path);

/// Writes `tensors` (in name order) and `metadata` to `path` atomically: a
/// temporary file in the same directory, flushed, then renamed over `path`.
absl::Status
writeSafetensors(const std::string &path,
                 const std::map<std::string, HostTensor> &tensors,
                 const std::map<std::string, std::string> &metadata);

/// Writes `pieces` one after the other to `path` atomically: a temporary
/// file in the same directory, fsync'ed, then renamed over `path`.
absl::Status
writeFileAtomically(const std::string &path,
                    const std::vector<std::pair<const void *, size_t>> &pieces);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_SAFETENSORS_H

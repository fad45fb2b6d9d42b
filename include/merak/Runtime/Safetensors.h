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

/// Whether `name`, a file in the directory of `path`, is a temporary file
/// of `writeFileAtomically(path)`: `.<base name>.XXXXXX`, the last six
/// characters letters and digits (as mkstemp makes them). A write killed
/// before its rename leaves one behind.
bool isAtomicWriteTemporary(const std::string &path, const std::string &name);

/// Checks, before anything runs, that `path` can be written: it is not a
/// directory, and its directory exists and takes a new file (one is
/// created beside it, named as `writeFileAtomically` names its temporary,
/// and removed). With `appends` (a log opened for appending), an existing
/// `path` must open for writing; it is neither truncated nor changed.
/// The error names `path` and says what is wrong.
absl::Status checkWritable(const std::string &path, bool appends);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_SAFETENSORS_H

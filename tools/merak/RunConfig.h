//===- RunConfig.h - the run configuration of `merak train` ----*- C++ -*-===//
//
// A YAML file of sections (model, data, train, parallel, checkpoint, eval,
// log, run) whose keys are listed in one table; every key can also be given
// on the command line as --SECTION.KEY=VALUE, which wins over the file.
// Unknown keys, wrong types and contradictory settings are errors naming the
// key and where it was set (file:line:column, or the command-line flag).
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_TOOLS_MERAK_RUNCONFIG_H
#define MERAK_TOOLS_MERAK_RUNCONFIG_H

#include "absl/status/statusor.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace merak::driver {

enum class KeyKind { String, Path, Int, Float, Bool, Choice, Map, InputList };

struct KeySpec {
  const char *path; // "train.steps"
  KeyKind kind;
  const char *help;
  std::vector<std::string> choices; // KeyKind::Choice
};

/// Every key a run configuration may hold.
const std::vector<KeySpec> &configKeys();

/// One model input to trace with: `{name, shape, dtype, high}`.
struct TraceInput {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype = "f32"; // f32, f64, bf16, f16, i64, i32, i1
  int64_t high = 2;          // integers are drawn from [0, high)
};

/// A setting as given: its text (scalars) or JSON (maps, input lists), and
/// where it came from.
struct Setting {
  std::string text;
  nlohmann::json value;
  std::string where; // "run.yaml:12:3" or "--train.steps"
  /// Paths: the directory a relative path is resolved against.
  std::string base;
};

class RunConfig {
public:
  /// Reads `path` (YAML); `overrides` are `{key, value}` pairs from the
  /// command line, applied after the file.
  static absl::StatusOr<RunConfig>
  load(const std::string &path,
       const std::vector<std::pair<std::string, std::string>> &overrides);

  bool has(const std::string &key) const { return settings.count(key) != 0; }
  std::string where(const std::string &key) const;
  std::string string(const std::string &key,
                     const std::string &fallback = "") const;
  /// A path key, resolved against the directory of the file that set it.
  std::string path(const std::string &key) const;
  int64_t integer(const std::string &key, int64_t fallback = 0) const;
  double number(const std::string &key, double fallback = 0) const;
  bool boolean(const std::string &key, bool fallback = false) const;
  const nlohmann::json &json(const std::string &key) const;
  std::vector<TraceInput> traceInputs() const;

  /// The file's directory, and its name without directory and extension.
  std::string fileDir, fileStem;

  /// Every setting, key by key, with where it came from.
  std::string describe() const;

private:
  absl::Status check() const;
  std::map<std::string, Setting> settings;
};

} // namespace merak::driver

#endif // MERAK_TOOLS_MERAK_RUNCONFIG_H

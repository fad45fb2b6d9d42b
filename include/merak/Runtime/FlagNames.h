//===- FlagNames.h - flag names spelt with dashes --------------*- C++ -*-===//
//
// Abseil's flags are named with underscores; the tools' help and docs spell
// them with dashes (`--log-jsonl`). Both spellings are accepted by turning
// the dashes of each flag's name (not of its value) into underscores before
// parsing.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_FLAGNAMES_H
#define MERAK_RUNTIME_FLAGNAMES_H

#include <algorithm>
#include <string>
#include <vector>

namespace merak::runtime {

/// `argv` with flag names' dashes turned into underscores, up to `--`.
inline std::vector<std::string> underscoreFlagNames(int argc, char **argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    std::string &arg = args[i];
    if (arg == "--")
      break;
    if (arg.size() > 2 && arg[0] == '-') {
      size_t begin = arg[1] == '-' ? 2 : 1;
      size_t end = std::min(arg.find('='), arg.size());
      std::replace(arg.begin() + begin, arg.begin() + end, '-', '_');
    }
  }
  return args;
}

} // namespace merak::runtime

#endif // MERAK_RUNTIME_FLAGNAMES_H

//===- ScratchDir.h - a private temporary directory for a test --*- C++ -*-===//
//
// Tests run in parallel (ctest -j), several processes at once: a test that
// writes files writes them in a directory of its own, never under a fixed
// name in the shared temporary directory.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_UNITTESTS_SCRATCHDIR_H
#define MERAK_UNITTESTS_SCRATCHDIR_H

#include "gtest/gtest.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <stdlib.h>

namespace merak::testing {

/// A fresh directory under GoogleTest's temporary directory ($TMPDIR or the
/// system's), removed with its files when the object goes.
class ScratchDir {
public:
  explicit ScratchDir(const std::string &prefix = "merak-test") {
    std::string tmpl = ::testing::TempDir() + prefix + "-XXXXXX";
    if (const char *made = mkdtemp(tmpl.data()))
      path = made;
    else
      ADD_FAILURE() << "cannot create a directory like " << tmpl;
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path.empty())
      std::filesystem::remove_all(path, ignored);
  }
  ScratchDir(const ScratchDir &) = delete;
  ScratchDir &operator=(const ScratchDir &) = delete;

  /// The path of `name` inside the directory.
  std::string file(const std::string &name) const { return path + "/" + name; }

  /// Writes `text` as the file `name`; returns its path.
  std::string write(const std::string &name, const std::string &text) const {
    std::string p = file(name);
    std::ofstream(p) << text;
    return p;
  }

  /// The names of the directory's entries, sorted.
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    std::error_code ignored;
    for (const auto &e : std::filesystem::directory_iterator(path, ignored))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string path;
};

} // namespace merak::testing

#endif // MERAK_UNITTESTS_SCRATCHDIR_H

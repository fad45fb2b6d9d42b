//===- KernelCache.h - compiled fused kernels kept between runs -*- C++ -*-===//
//
// NVRTC compiles each distinct fused chain when it first runs, in every
// process: seconds per rank at the start of a run. The machine code is
// kept on disk, one file per kernel, named after a hash of its key (the
// compiler's version, the architecture, the options, the header and the
// source) and holding the whole key, so that a file is used only for the
// very key it was made for. A file that is missing, unreadable, cut short
// or made for another key is a miss; files are written whole and renamed
// into place, so ranks that compile the same kernel at once never read
// half of one. Host code only: tested without a GPU.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_KERNELCACHE_H
#define MERAK_LIB_RUNTIME_CUDA_KERNELCACHE_H

#include <optional>
#include <string>

namespace merak::runtime::cuda {

class KernelDiskCache {
public:
  explicit KernelDiskCache(std::string directory) : dir(std::move(directory)) {}

  /// The cache a run uses: `$MERAK_CACHE_DIR/fused-kernels`, by default
  /// under `$XDG_CACHE_HOME/merak` or `$HOME/.cache/merak`; none where
  /// MERAK_CACHE_DIR is `off` or no directory is known.
  static std::optional<KernelDiskCache> fromEnvironment();

  /// The machine code stored for `key`, or nothing.
  std::optional<std::string> load(const std::string &key) const;
  /// Stores `code` for `key` (the directory made where missing); false
  /// where it cannot be written (the run goes on without).
  bool store(const std::string &key, const std::string &code) const;

  /// The file `key`'s code is kept in.
  std::string pathOf(const std::string &key) const;
  const std::string &directory() const { return dir; }

private:
  std::string dir;
};

} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_KERNELCACHE_H

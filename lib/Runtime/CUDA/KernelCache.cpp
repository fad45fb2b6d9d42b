//===- KernelCache.cpp - compiled fused kernels kept between runs ---------===//

#include "KernelCache.h"
#include "merak/Runtime/Safetensors.h"

#include "absl/strings/str_format.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace merak::runtime::cuda {
namespace {

/// The first bytes of every file, with the format's version.
constexpr char kMagic[8] = {'M', 'E', 'R', 'A', 'K', 'F', 'K', '1'};

/// FNV-1a over `text`: the file's name (the key inside decides).
uint64_t hashOf(const std::string &text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

/// Reads a little-endian 64-bit count at `at`, advancing it.
bool readCount(const std::string &bytes, size_t &at, uint64_t &out) {
  if (bytes.size() - at < sizeof(out))
    return false;
  std::memcpy(&out, bytes.data() + at, sizeof(out));
  at += sizeof(out);
  return true;
}

} // namespace

std::optional<KernelDiskCache> KernelDiskCache::fromEnvironment() {
  std::string base;
  if (const char *dir = std::getenv("MERAK_CACHE_DIR")) {
    if (std::string(dir) == "off" || !*dir)
      return std::nullopt;
    base = dir;
  } else if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    base = std::string(xdg) + "/merak";
  } else if (const char *home = std::getenv("HOME"); home && *home) {
    base = std::string(home) + "/.cache/merak";
  } else {
    return std::nullopt;
  }
  return KernelDiskCache(base + "/fused-kernels");
}

std::string KernelDiskCache::pathOf(const std::string &key) const {
  return absl::StrFormat("%s/%016x.cubin", dir, hashOf(key));
}

std::optional<std::string> KernelDiskCache::load(const std::string &key) const {
  std::ifstream in(pathOf(key), std::ios::binary);
  if (!in)
    return std::nullopt;
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  size_t at = sizeof(kMagic);
  uint64_t keyBytes = 0, codeBytes = 0;
  if (bytes.size() < at || std::memcmp(bytes.data(), kMagic, at) != 0 ||
      !readCount(bytes, at, keyBytes) || bytes.size() - at < keyBytes ||
      bytes.compare(at, keyBytes, key) != 0 || keyBytes != key.size())
    return std::nullopt;
  at += keyBytes;
  if (!readCount(bytes, at, codeBytes) || bytes.size() - at != codeBytes ||
      codeBytes == 0)
    return std::nullopt;
  return bytes.substr(at);
}

bool KernelDiskCache::store(const std::string &key,
                            const std::string &code) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return false;
  const uint64_t keyBytes = key.size(), codeBytes = code.size();
  return writeFileAtomically(pathOf(key), {{kMagic, sizeof(kMagic)},
                                           {&keyBytes, sizeof(keyBytes)},
                                           {key.data(), key.size()},
                                           {&codeBytes, sizeof(codeBytes)},
                                           {code.data(), code.size()}})
      .ok();
}

} // namespace merak::runtime::cuda

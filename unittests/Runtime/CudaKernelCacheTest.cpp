//===- CudaKernelCacheTest.cpp - fused kernels kept between runs ----------===//
//
// KernelCache.h without a GPU: code stored is loaded back for its key
// only; a file cut short, made for another key or not one of the cache's
// is a miss; a directory that cannot be made is no cache; where the cache
// lives.
//
//===----------------------------------------------------------------------===//

#include "../../lib/Runtime/CUDA/FusedKernels.h"
#include "../../lib/Runtime/CUDA/KernelCache.h"

#include "ScratchDir.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

using merak::runtime::cuda::KernelDiskCache;
using merak::testing::ScratchDir;

namespace {

std::string readAll(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

void writeAll(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(CudaKernelCache, KeepsCodeForItsKeyOnly) {
  ScratchDir scratch("merak-kernel-cache");
  KernelDiskCache cache(scratch.file("fused-kernels"));
  const std::string code("\x7f"
                         "ELF\0machine code",
                         17);
  EXPECT_FALSE(cache.load("key a").has_value());
  ASSERT_TRUE(cache.store("key a", code)); // makes the directory
  EXPECT_EQ(cache.load("key a"), code);
  EXPECT_FALSE(cache.load("key b").has_value());
  EXPECT_NE(cache.pathOf("key a"), cache.pathOf("key b"));
  // Another key's file under this key's name (a hash collision): a miss.
  writeAll(cache.pathOf("key b"), readAll(cache.pathOf("key a")));
  EXPECT_FALSE(cache.load("key b").has_value());
  // Stored again, the file is replaced whole.
  ASSERT_TRUE(cache.store("key b", "other"));
  EXPECT_EQ(cache.load("key b"), "other");
  EXPECT_EQ(cache.load("key a"), code);
}

TEST(CudaKernelCache, DamagedFilesAreMisses) {
  ScratchDir scratch("merak-kernel-cache");
  KernelDiskCache cache(scratch.path);
  ASSERT_TRUE(cache.store("k", "0123456789"));
  const std::string whole = readAll(cache.pathOf("k"));
  for (size_t cut :
       {size_t(0), size_t(5), size_t(8), size_t(17), whole.size() - 1}) {
    writeAll(cache.pathOf("k"), whole.substr(0, cut));
    EXPECT_FALSE(cache.load("k").has_value()) << "cut at " << cut;
  }
  writeAll(cache.pathOf("k"), whole + "x"); // trailing bytes
  EXPECT_FALSE(cache.load("k").has_value());
  std::string other = whole;
  other[0] = 'X'; // not the cache's format
  writeAll(cache.pathOf("k"), other);
  EXPECT_FALSE(cache.load("k").has_value());
}

TEST(CudaKernelCache, AnUnwritableDirectoryIsNoCache) {
  ScratchDir scratch("merak-kernel-cache");
  writeAll(scratch.file("file"), "not a directory");
  KernelDiskCache cache(scratch.file("file") + "/fused-kernels");
  EXPECT_FALSE(cache.store("k", "code"));
  EXPECT_FALSE(cache.load("k").has_value());
}

TEST(CudaKernelCache, LivesWhereTheEnvironmentSays) {
  struct Saved {
    std::string name;
    std::optional<std::string> value;
  };
  std::vector<Saved> saved;
  for (const char *name : {"MERAK_CACHE_DIR", "XDG_CACHE_HOME", "HOME"}) {
    const char *v = std::getenv(name);
    saved.push_back({name, v ? std::optional<std::string>(v) : std::nullopt});
    ::unsetenv(name);
  }
  EXPECT_FALSE(KernelDiskCache::fromEnvironment().has_value());
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(KernelDiskCache::fromEnvironment()->directory(),
            "/home/u/.cache/merak/fused-kernels");
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(KernelDiskCache::fromEnvironment()->directory(),
            "/xdg/merak/fused-kernels");
  ::setenv("MERAK_CACHE_DIR", "/c", 1);
  EXPECT_EQ(KernelDiskCache::fromEnvironment()->directory(),
            "/c/fused-kernels");
  ::setenv("MERAK_CACHE_DIR", "off", 1);
  EXPECT_FALSE(KernelDiskCache::fromEnvironment().has_value());
  for (const Saved &s : saved)
    if (s.value)
      ::setenv(s.name.c_str(), s.value->c_str(), 1);
    else
      ::unsetenv(s.name.c_str());
}

TEST(CudaKernelCache, TheKeySaysWhatWasCompiled) {
  using merak::runtime::cuda::fusedKernelKey;
  const std::string k = fusedKernelKey("source", "sm_90");
  EXPECT_EQ(k, fusedKernelKey("source", "sm_90"));
  EXPECT_NE(k, fusedKernelKey("source", "sm_80"));
  EXPECT_NE(k, fusedKernelKey("sources", "sm_90"));
  EXPECT_NE(k.find("--fmad=false"), std::string::npos); // the options
  EXPECT_NE(k.find("roundToBf16"), std::string::npos);  // the header
}

} // namespace

//===- FuzzSupport.h - helpers shared by the fuzz targets -------*- C++ -*-===//
//
// The readers under test take paths and map the file, so each input is
// written to an in-memory file (memfd) that they open through /proc.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_FUZZ_FUZZSUPPORT_H
#define MERAK_FUZZ_FUZZSUPPORT_H

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

namespace merak::fuzz {

/// Replaces the contents of this process's in-memory file with `data` and
/// returns a path that opens it. One file per process, reused by every
/// input, so nothing is left behind.
inline std::string memoryFile(const uint8_t *data, size_t size) {
  static int fd = [] {
    int f = memfd_create("merak-fuzz-input", MFD_CLOEXEC);
    if (f < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    return f;
  }();
  if (ftruncate(fd, 0) != 0 ||
      (size && pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))) {
    std::perror("writing the fuzz input");
    std::abort();
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

/// A checksum of `size` bytes at `p`, kept so that reading them is not
/// optimized away: a tensor's bytes must all be readable.
inline uint64_t touch(const void *p, size_t size) {
  const volatile uint8_t *b = static_cast<const volatile uint8_t *>(p);
  uint64_t sum = 0;
  for (size_t i = 0; i < size; ++i)
    sum = sum * 31 + b[i];
  return sum;
}

} // namespace merak::fuzz

#endif // MERAK_FUZZ_FUZZSUPPORT_H

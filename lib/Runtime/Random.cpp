//===- Random.cpp - seeds of each step's random numbers -------------------===//

#include "merak/Runtime/Random.h"

namespace merak::runtime {

uint64_t splitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t stepSeed(uint64_t seed, int64_t step, RandomStream stream) {
  return splitMix64((seed << 33) | (uint64_t(step - 1) << 1) |
                    uint64_t(stream));
}

} // namespace merak::runtime

//===- Random.h - seeds of each step's random numbers ---------*- C++ -*-===//
//
// Every random number of a run (synthetic inputs, token windows, dropout
// masks) comes from PyTorch's CPU generator seeded per step, so a resumed
// run draws what an uninterrupted one would, and Python can reproduce any
// step with torch.Generator().manual_seed(stepSeed(...)).
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_RANDOM_H
#define MERAK_RUNTIME_RANDOM_H

#include <cstdint>

namespace merak::runtime {

enum class RandomStream : uint64_t { Data = 0, Dropout = 1 };

/// `splitmix64((seed << 33) | ((step - 1) << 1) | stream)` for 1-based
/// `step`. The key is mixed because PyTorch's mt19937 keeps only the low 32
/// bits of a seed.
uint64_t stepSeed(uint64_t seed, int64_t step, RandomStream stream);

/// One round of splitmix64 (what `stepSeed` mixes with).
uint64_t splitMix64(uint64_t x);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_RANDOM_H

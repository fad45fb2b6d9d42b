//===- Allocator.h - the CPU backend's allocation accounting ----*- C++ -*-===//
//
// Private to lib/Runtime/CPU. ATen's CPU allocations go through a counting
// allocator, so the executor can report the peak of everything ATen holds,
// and a kernel's fresh results land in the program's arena where the plan
// gives them an offset.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CPU_ALLOCATOR_H
#define MERAK_LIB_RUNTIME_CPU_ALLOCATOR_H

#include "merak/Runtime/Backend.h"

namespace merak::runtime::cpu {

/// Sets the arena slots of one kernel call and clears them after it.
class ArenaScope {
public:
  ArenaScope(const KernelCall &call, const Instruction &inst);
  ~ArenaScope();
  ArenaScope(const ArenaScope &) = delete;
  ArenaScope &operator=(const ArenaScope &) = delete;
};

/// Makes the counting allocator ATen's CPU allocator; once per process,
/// before the first tensor of the run, so every ATen CPU allocation after
/// this point is counted.
void installCountingAllocator();

/// The bytes ATen holds now and at most since `resetAllocationPeak`, and
/// the results placed in arenas.
MemoryStats allocationStats();
void resetAllocationPeak();

} // namespace merak::runtime::cpu

#endif // MERAK_LIB_RUNTIME_CPU_ALLOCATOR_H

//===- Communicator.h - collectives between the ranks of a run -*- C++ -*-===//
//
// The executor runs a program's `mesh` collectives through a
// `Communicator`, as it runs kernels through a `Backend`: the communicator
// receives the instruction (a program bound to this rank, whose
// `attrs.group` indexes `Program::groups`) and the backend's tensors, and
// returns the results. Implementations pair with a backend (Gloo with the
// CPU backend; NCCL with CUDA).
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_COMMUNICATOR_H
#define MERAK_RUNTIME_COMMUNICATOR_H

#include "merak/Runtime/Backend.h"

#include "absl/status/status.h"

#include <cstdint>

namespace merak::runtime {

class Communicator {
public:
  virtual ~Communicator();

  virtual int64_t rank() const = 0;
  virtual int64_t worldSize() const = 0;

  /// Runs one collective. Operands, in-place targets and results are as in
  /// `Backend::execute`. Errors say which peers failed, where known.
  virtual absl::Status execute(KernelCall &call) = 0;
};

} // namespace merak::runtime

#endif // MERAK_RUNTIME_COMMUNICATOR_H

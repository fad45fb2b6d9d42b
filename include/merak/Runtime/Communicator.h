//===- Communicator.h - collectives between the ranks of a run -*- C++ -*-===//
//
// The executor runs a program's `mesh` collectives through a
// `Communicator`, as it runs kernels through a `Backend`: the communicator
// receives the instruction (a program bound to this rank, whose
// `attrs.group` indexes `Program::groups`) and the backend's tensors, and
// returns the results. A collective is started, runs in the background
// while the executor goes on with other instructions, and is completed
// where the program waits for it. Implementations pair with a backend
// (Gloo with the CPU backend; NCCL with CUDA).
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_COMMUNICATOR_H
#define MERAK_RUNTIME_COMMUNICATOR_H

#include "merak/Runtime/Backend.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace merak::runtime {

/// A collective in flight. It keeps what it reads and writes alive until
/// it is done; destroying it early abandons the results, not the transfer.
class PendingCollective {
public:
  virtual ~PendingCollective();

  /// Whether `wait` would return at once (the data has moved, or the
  /// transfer failed). An implementation that cannot tell says true.
  virtual bool ready() { return true; }

  /// Blocks until the data has moved; returns the same status when called
  /// again. Errors say which peers failed, where known.
  virtual absl::Status wait() = 0;

  /// Waits, then does the local rest (an average's division, a
  /// reduce-scatter's sum of the received blocks, a gather's
  /// concatenation) and returns one handle per result. Called once.
  virtual absl::StatusOr<std::vector<TensorHandle>> finish() = 0;
};

class Communicator {
public:
  virtual ~Communicator();

  virtual int64_t rank() const = 0;
  virtual int64_t worldSize() const = 0;

  /// Starts one collective. Operands and in-place targets are as in
  /// `Backend::execute`; the operands' storage must stay unwritten until
  /// the collective is finished. Collectives of one process group must be
  /// started in the same order on all its ranks.
  virtual absl::StatusOr<std::unique_ptr<PendingCollective>>
  start(KernelCall &call) = 0;

  /// Runs one collective to completion (start, then finish) and fills
  /// `call.results`.
  absl::Status execute(KernelCall &call);
};

} // namespace merak::runtime

#endif // MERAK_RUNTIME_COMMUNICATOR_H

//===- Backend.h - kernels and memory of one device ---------*- C++ -*-===//
//
// The executor drives a `Backend`: it moves host bytes in and out and runs
// one instruction at a time. Tensors are opaque handles whose memory may be
// on a device; the executor never dereferences them.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_BACKEND_H
#define MERAK_RUNTIME_BACKEND_H

#include "merak/Runtime/Program.h"
#include "merak/Runtime/Tensor.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace merak::runtime {

/// A tensor owned by a backend. Handles are shared: the storage is freed
/// when the last handle to it (or to a view of it) goes away.
class DeviceTensor {
public:
  virtual ~DeviceTensor();
};
using TensorHandle = std::shared_ptr<DeviceTensor>;

/// What is fixed for one training step.
struct StepContext {
  int64_t globalStep = 1;    // 1-based; indexes data and seeds randomness
  int64_t optimizerStep = 1; // 1-based count of applied updates (merak.step)
  double learningRate = 0;   // exact value of merak.lr for this step
  double lossScale = 1;      // value of merak.loss_scale for this step
  uint64_t seed = 0;         // the run's --seed
  /// An evaluation: dropout passes its input through, batch norm
  /// normalizes with its running statistics and leaves them alone (PyTorch's
  /// eval mode), and the executors change no state.
  bool evaluate = false;
};

/// One kernel invocation.
struct KernelCall {
  const Instruction *instruction = nullptr;
  /// One per instruction operand; null for an absent optional operand.
  std::vector<DeviceTensor *> operands;
  /// Per operand: the exact host value when the operand is the step's
  /// learning rate or optimizer step, which backends use instead of reading
  /// the (f32) tensor, as PyTorch's optimizers compute with Python floats.
  std::vector<std::optional<double>> hostScalars;
  /// Per result: for `ResultStorage::Kind::InPlace`, the operand the result
  /// must be written into; null otherwise.
  std::vector<DeviceTensor *> inPlace;
  /// Filled by the kernel: one handle per result. An in-place result is
  /// the operand's handle; a view result shares the operand's storage.
  std::vector<TensorHandle> results;
  const StepContext *step = nullptr;
  /// The program the instruction belongs to (for value types and uses).
  const Program *program = nullptr;
  /// The program's arena (`allocateArena`), where fresh results with an
  /// `arenaOffset` go; null without one.
  DeviceTensor *arena = nullptr;
};

struct MemoryStats {
  int64_t liveBytes = 0;
  int64_t peakBytes = 0;
  /// Kernel results placed in a program's arena so far (not counted in the
  /// live bytes again: the arena is).
  int64_t arenaResults = 0;
};

class Backend {
public:
  virtual ~Backend();

  virtual std::string name() const = 0;
  /// Whether the backend has a kernel for `kind` (collectives and waits go
  /// to a communicator and are never asked).
  virtual bool supports(OpKind kind) const = 0;

  /// Copies host bytes into a new tensor of the backend.
  virtual absl::StatusOr<TensorHandle> upload(const HostTensor &host) = 0;
  /// Copies a tensor (of type `type`) back to the host.
  virtual absl::StatusOr<HostTensor> download(const DeviceTensor &tensor,
                                              const TensorType &type) = 0;
  virtual absl::StatusOr<TensorHandle> zeros(const TensorType &type) = 0;
  /// Converts between floating-point element types (loading a checkpoint
  /// saved in another precision).
  virtual absl::StatusOr<TensorHandle> convert(const DeviceTensor &tensor,
                                               DType to) = 0;

  /// Memory for a program's arena (`Program::arenaBytes`), allocated once
  /// and reused by every step; a null handle when the backend places
  /// results itself.
  virtual absl::StatusOr<TensorHandle> allocateArena(int64_t bytes) {
    (void)bytes;
    return TensorHandle();
  }

  /// `into += addend` (same type): sums gradients over micro-batches.
  virtual absl::Status accumulate(DeviceTensor &into,
                                  const DeviceTensor &addend) = 0;
  /// `tensor *= factor` (floating-point tensors).
  virtual absl::Status scale(DeviceTensor &tensor, double factor) = 0;

  /// Returns once every kernel issued so far has finished. A backend whose
  /// kernels are done when `execute` returns (the CPU backend) keeps this
  /// default; one that queues them (a GPU stream) waits for the queue.
  /// Timing code calls it (HardwareProbe.h).
  virtual absl::Status synchronize() { return absl::OkStatus(); }

  /// Called before the first instruction of each step (seeds randomness).
  virtual absl::Status beginStep(const StepContext &step) = 0;
  /// Runs one instruction; errors name the op.
  virtual absl::Status execute(KernelCall &call) = 0;

  /// Bytes of tensors this backend holds now and at most since
  /// `resetPeak` (parameters, state, activations and kernel scratch).
  virtual MemoryStats memoryStats() const = 0;
  virtual void resetPeak() = 0;
};

} // namespace merak::runtime

#endif // MERAK_RUNTIME_BACKEND_H

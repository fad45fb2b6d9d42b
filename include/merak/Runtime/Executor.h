//===- Executor.h - runs a rank program step by step ---------*- C++ -*-===//
//
// The executor owns the training state (parameters, buffers, optimizer
// state, step counters) as backend tensors, feeds each step's inputs, runs
// the instructions in order (an overlapped collective is started at its
// instruction and completed at its `wait`), releases values at their last
// use and, when the step succeeds, replaces every state argument by its
// updated value.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_EXECUTOR_H
#define MERAK_RUNTIME_EXECUTOR_H

#include "merak/Runtime/Backend.h"
#include "merak/Runtime/Communicator.h"
#include "merak/Runtime/Program.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace merak::runtime {

struct StepOutcome {
  std::optional<double> loss;     // when the program has a loss
  bool skipped = false;           // non-finite loss; state left unchanged
  std::optional<double> gradNorm; // when the step clips gradients
  /// A gradient was not finite under loss scaling: the step was skipped
  /// (`skipped` is set too), whatever skipNonFinite says.
  bool overflowed = false;
};

/// Kernel time per op kind, accumulated over the steps run with profiling
/// on. Measured on the host around each kernel call, which is the kernel's
/// time for synchronous backends (the CPU one).
struct OpProfile {
  struct Entry {
    int64_t calls = 0;
    double seconds = 0;
  };
  std::map<OpKind, Entry> byKind;
  /// The same by op and result types (`merak.linear -> 8x1024x768xbf16`):
  /// which instructions of a kind take the time.
  std::map<std::string, Entry> byShape;
  /// A pipeline's sums of each micro-batch's gradients into the step's,
  /// which the runtime adds outside the programs' kernels (one call per
  /// gradient).
  Entry gradientSums;
};

/// The value of state argument `arg` (of `type`) from `tensors`, by name:
/// uploaded (converted between floating-point precisions); zeros for an
/// absent optimizer state unless `requireOptimizerState`; otherwise an error
/// naming the tensor and `sourceName`.
absl::StatusOr<TensorHandle>
loadStateArgument(Backend &backend, const Argument &arg, const TensorType &type,
                  const std::map<std::string, HostTensor> &tensors,
                  const std::string &sourceName, bool requireOptimizerState);

/// The error of a step whose loss is NaN or infinite.
absl::Status nonFiniteLoss(int64_t step, double loss);

class Executor {
public:
  /// Uploads the program's constants. `program` must be planned and must
  /// outlive the executor. A program whose collectives communicate (bound
  /// to a rank of more than one) needs a `communicator` for its groups.
  static absl::StatusOr<std::unique_ptr<Executor>>
  create(const Program &program, Backend &backend,
         Communicator *communicator = nullptr);

  /// Sets the state arguments from `tensors` by name. Parameters and
  /// buffers must be present; optimizer state that is absent starts at
  /// zero unless `requireOptimizerState`. Floating-point tensors of another
  /// precision are converted; any other type difference is an error naming
  /// the tensor and `sourceName`.
  absl::Status loadState(const std::map<std::string, HostTensor> &tensors,
                         const std::string &sourceName,
                         bool requireOptimizerState);

  /// Runs one step. `inputs` holds one tensor per `merak.input` argument in
  /// argument order. A non-finite loss is an error, or with `skipNonFinite`
  /// a skipped step whose updates are dropped. When `results` is not null and
  /// the step is not skipped, it receives every function result in result
  /// order, copied to the host (gradients, logits: what tests inspect).
  absl::StatusOr<StepOutcome>
  runStep(const StepContext &step, const std::vector<HostTensor> &inputs,
          bool skipNonFinite, std::vector<HostTensor> *results = nullptr);

  /// Runs the program once on `arguments` (one handle per argument, in
  /// order, state included; null for an argument nothing reads) and returns
  /// one handle per result. Nothing is committed and the loss is not
  /// checked: the caller owns the state (pipeline stage functions).
  absl::StatusOr<std::vector<TensorHandle>>
  call(const StepContext &step, std::vector<TensorHandle> arguments);

  /// The state arguments by name, copied to the host (for checkpoints).
  absl::StatusOr<std::map<std::string, HostTensor>> stateToHost();

  /// The `merak.input` arguments in order.
  std::vector<const Argument *> inputArguments() const;

  /// Accumulates per-op kernel times into `profile` (null: off).
  void setProfile(OpProfile *p) { profile = p; }

  /// After every kernel and every collective that completes where it is
  /// issued, reads its floating results back and fails at the first NaN or
  /// infinity, naming the op, its source location, the result and the step
  /// (`merak-exec --check-numerics`; slow: a copy per result).
  void setCheckNumerics(bool on) { checkNumerics = on; }

private:
  Executor(const Program &program, Backend &backend, Communicator *communicator)
      : program(program), backend(backend), communicator(communicator) {}

  /// Runs the instructions on `live` (arguments and constants set). At the
  /// instruction after which the loss is known, calls `atLoss` (when set);
  /// an error from it ends the run (a cancelled one after draining the
  /// collectives in flight).
  /// Runs the members of a `fused` instruction one by one, for a backend
  /// without a kernel for it, and sets `call.results` to the chain's
  /// outputs.
  absl::Status runFusedMembers(const StepContext &step,
                               const Instruction &fused,
                               std::vector<TensorHandle> &live, ValueId lrValue,
                               ValueId stepValue, KernelCall &call);
  absl::Status runInstructions(const StepContext &step,
                               std::vector<TensorHandle> &live, ValueId lrValue,
                               ValueId stepValue,
                               const std::function<absl::Status()> &atLoss);

  /// The `--check-numerics` test of `inst`'s results in `live`.
  absl::Status checkFinite(const Instruction &inst,
                           const std::vector<TensorHandle> &live,
                           const StepContext &step);

  const Program &program;
  Backend &backend;
  Communicator *communicator;
  /// Per argument index: the current value of a state argument.
  std::vector<TensorHandle> state;
  /// Per value id: uploaded constants (kept for the whole run).
  std::vector<TensorHandle> constants;
  /// Where the program's arena lives (null: the backend allocates).
  TensorHandle arena;
  OpProfile *profile = nullptr;
  bool checkNumerics = false;
};

} // namespace merak::runtime

#endif // MERAK_RUNTIME_EXECUTOR_H

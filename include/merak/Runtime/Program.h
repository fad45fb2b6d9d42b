//===- Program.h - the rank program: values and instructions -*- C++ -*-===//
//
// A function of the merak dialect lowered for execution: every SSA value has
// a number and a static type, every op is an `Instruction` whose attributes
// were decoded once, and `planProgram` decides when each value is released
// and which results may be written into the storage of a dying operand.
// Nothing here depends on MLIR or on a backend.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_PROGRAM_H
#define MERAK_RUNTIME_PROGRAM_H

#include "merak/Runtime/Mesh.h"
#include "merak/Runtime/RuntimeOps.inc"
#include "merak/Runtime/Tensor.h"

#include "absl/status/status.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace merak::runtime {

/// Every op the executor runs, with its mnemonic in the merak (or mesh)
/// dialect: the merak ops generated from MerakOps.td (RuntimeOps.inc), then
/// the mesh collectives the communicator runs, and `wait`, which completes
/// an overlapped collective and has no op, and `fused`, a chain of
/// elementwise ops run as one kernel (`fuseElementwise`, Fusion.h), which
/// has none either.
#define MERAK_RUNTIME_OPS(X)                                                   \
  MERAK_DIALECT_RUNTIME_OPS(X)                                                 \
  X(AllReduce, "all_reduce")                                                   \
  X(AllGather, "all_gather")                                                   \
  X(ReduceScatter, "reduce_scatter")                                           \
  X(AllToAll, "all_to_all")                                                    \
  X(AllSlice, "all_slice")                                                     \
  X(Broadcast, "broadcast")                                                    \
  X(Wait, "wait")                                                              \
  X(Fused, "fused")

enum class OpKind : uint16_t {
#define MERAK_OP_ENUM(Name, Mnemonic) Name,
  MERAK_RUNTIME_OPS(MERAK_OP_ENUM)
#undef MERAK_OP_ENUM
};
constexpr size_t kNumOpKinds = 0
#define MERAK_OP_COUNT(Name, Mnemonic) +1
    MERAK_RUNTIME_OPS(MERAK_OP_COUNT)
#undef MERAK_OP_COUNT
    ;

/// The mnemonic without the dialect prefix, e.g. "layer_norm".
const char *opKindName(OpKind kind);
/// The `mesh` collectives (all_reduce ... broadcast); the others are
/// `merak` ops, except `wait`, which no dialect has: the executor's point
/// where an overlapped collective must be complete (see `bindToRank`).
bool isCollective(OpKind kind);
/// The op's name with its dialect, e.g. "merak.layer_norm", "mesh.all_reduce"
/// ("wait" for a wait).
std::string opFullName(OpKind kind);

enum class ComparePredicate : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };
enum class LossReduction : uint8_t { None, Mean, Sum };
/// The reduction of a mesh collective (`#mesh.partial`).
enum class CollectiveReduction : uint8_t { Sum, Max, Min, Product, Average };
const char *collectiveReductionName(CollectiveReduction r);

/// The attributes of one op, decoded from MLIR once. Each op reads the
/// fields its definition in MerakOps.td names; the others keep defaults.
/// `X(type, name, default)`: the one list of the fields, which the struct
/// below declares and the rank-program file writes and reads.
#define MERAK_OP_ATTRS(X)                                                      \
  X(int64_t, dim, 0)                                                           \
  X(int64_t, start, 0) /* slice, slice_backward */                             \
  X(int64_t, end, 0)                                                           \
  X(int64_t, step, 1)                                                          \
  X(int64_t, index, 0)          /* select */                                   \
  X(int64_t, dimSize, 0)        /* index_backward, slice_backward */           \
  X(int64_t, diagonal, 0)       /* tril, triu */                               \
  X(int64_t, normalizedRank, 0) /* layer_norm, rms_norm (+ backward) */        \
  X(int64_t, groups, 1)         /* conv2d (+ backward) */                      \
  X(int64_t, ignoreIndex, -100) /* cross_entropy (+ backward) */               \
  /* embedding, index_backward */                                              \
  X(std::optional<int64_t>, paddingIdx, std::nullopt)                          \
  X(double, eps, 0)                                                            \
  X(double, p, 0)                                                              \
  X(double, momentum, 0)                                                       \
  X(double, value, 0)                                                          \
  X(double, labelSmoothing, 0)                                                 \
  X(double, dampening, 0)                                                      \
  X(double, weightDecay, 0)                                                    \
  X(double, beta1, 0)                                                          \
  X(double, beta2, 0)                                                          \
  X(double, scale, 1) /* masked_attention (+ backward) */                      \
  X(std::optional<double>, min, std::nullopt) /* clamp */                      \
  X(std::optional<double>, max, std::nullopt)                                  \
  X(bool, training, false)                                                     \
  X(bool, keepdim, false)                                                      \
  X(bool, ceilMode, false)                                                     \
  X(bool, countIncludePad, true)                                               \
  X(bool, nesterov, false)                                                     \
  X(bool, tanhApproximation, false) /* gelu, gelu_backward */                  \
  X(bool, scaleDivides, false)      /* masked_attention (+ backward) */        \
  X(bool, reverse, false)           /* cumsum */                               \
  X(ComparePredicate, predicate, ComparePredicate::Eq)                         \
  X(LossReduction, reduction, LossReduction::Mean)                             \
  /* reductions, permute, roll */                                              \
  X(std::vector<int64_t>, dims, {})                                            \
  X(std::vector<int64_t>, permutation, {})                                     \
  X(std::vector<int64_t>, shifts, {})                                          \
  X(std::vector<int64_t>, kernel, {})                                          \
  X(std::vector<int64_t>, stride, {})                                          \
  X(std::vector<int64_t>, padding, {})                                         \
  X(std::vector<int64_t>, dilation, {})                                        \
  X(std::vector<int64_t>, outputSize, {})                                      \
  X(std::vector<int64_t>, low, {}) /* pad */                                   \
  X(std::vector<int64_t>, high, {})                                            \
  /* Mesh collectives: the mesh axes of the group; `dim` is the gather, */     \
  /* scatter, slice or split axis, `concatDim` all_to_all's concat axis. */    \
  X(std::vector<int64_t>, meshAxes, {})                                        \
  X(CollectiveReduction, collectiveReduction, CollectiveReduction::Sum)        \
  X(int64_t, concatDim, 0)                                                     \
  X(std::vector<int64_t>, root, {}) /* broadcast: in-group multi-index */      \
  /* Filled by `bindToRank`: index into `Program::groups`, and whether the */  \
  /* group holds this rank alone (the result is then the operand itself). */   \
  X(int, group, -1)                                                            \
  X(bool, identity, false)

struct OpAttrs {
#define MERAK_OP_ATTR_FIELD(Type, Name, Default) Type Name = Default;
  MERAK_OP_ATTRS(MERAK_OP_ATTR_FIELD)
#undef MERAK_OP_ATTR_FIELD
};

using ValueId = int32_t;
constexpr ValueId kNoValue = -1;

/// Where a result's storage comes from.
struct ResultStorage {
  enum class Kind : uint8_t {
    Fresh,   // the kernel allocates it
    View,    // the kernel returns a view of `operand` (reshape, permute, ...)
    InPlace, // the kernel writes into `operand`, which dies here
  };
  Kind kind = Kind::Fresh;
  int operand = -1; // index into Instruction::operands
  /// A fresh result that dies within the step: its place in the program's
  /// arena (`Program::arenaBytes`), else -1.
  int64_t arenaOffset = -1;
};

struct Instruction {
  OpKind kind;
  OpAttrs attrs;
  /// Operands in the op's ODS order; an absent optional operand (a linear
  /// without bias, a layer_norm without weight) is `kNoValue`.
  std::vector<ValueId> operands;
  std::vector<ValueId> results;
  /// Filled by `planProgram`: one entry per result.
  std::vector<ResultStorage> storage;
  /// Filled by `planProgram`: values whose last use is this instruction,
  /// released right after it runs.
  std::vector<ValueId> release;
  /// Source location for messages, `file:line:col` where known (a wait
  /// has its collective's).
  std::string location;
  /// Overlapped collectives (`CollectiveMode::Overlapped`): on a collective
  /// that communicates, the index of the `wait` that completes it (-1: the
  /// collective blocks); on a `wait`, the index of that collective. A
  /// wait's operands are the collective's results.
  int waitAt = -1;
  int completes = -1;
};

/// Elementwise instructions run as one kernel (Fusion.h): `members` in
/// program order, each with its own operands and results; the `fused`
/// instruction that stands for them reads the values they read from
/// outside the chain and defines those of their results that something
/// outside it reads (or the function returns). Every member's result has
/// the chain's `shape`; the inputs broadcast to it.
struct FusedKernel {
  std::vector<Instruction> members;
  std::vector<int64_t> shape;
  /// Its CUDA source (`fusedKernelSource`), written when it is made.
  std::string source;
};

/// How many operands and results an op takes: MerakOps.td's, an absent
/// optional operand counting (as `kNoValue`); `mostOperands` -1 for a
/// variadic op. A collective takes one of each; a wait, which has no op,
/// says -1 everywhere (it takes its collective's results).
struct OpArity {
  int64_t leastOperands = 1, mostOperands = 1, results = 1;
};
OpArity opArity(OpKind kind);

/// Empty when `inst` has as many operands and results as its op takes
/// (MerakOps.td's, with an absent optional operand as `kNoValue`; a
/// collective one of each, a wait one operand per result), else what is
/// wrong, e.g. "2 operands, the op takes 3".
std::string arityError(const Instruction &inst);

enum class ArgumentRole : uint8_t {
  Param,        // merak.param = "name"
  Buffer,       // merak.buffer = "name"
  OptState,     // merak.opt_state = "param/exp_avg"
  Input,        // merak.input = "name": one batch's slice
  LearningRate, // merak.lr: rank-0 float, this step's learning rate
  Step,         // merak.step: rank-0 integer, the 1-based optimizer step
  // Pipeline stage functions (docs/pipeline.md):
  Value, // merak.value = N: value N of the same micro-batch
  Grad,  // merak.grad = "name": a parameter's gradient, summed over the step
  LossScale, // merak.loss_scale: rank-0 float, the step's loss scale
  // Text generation (docs/generation.md):
  Position, // merak.position: the decode step's position, [1] of i64
  KvCache,  // merak.kv_cache = "kv.N": a layer's cached keys or values
};
const char *argumentRoleName(ArgumentRole role);
/// The role as a noun for messages: "parameter", "buffer", "optimizer
/// state", or the role's name.
const char *argumentRoleNoun(ArgumentRole role);

/// How the loss scale argument's value moves (`merak.loss_scale`): a
/// dynamic scale starts at `init`, halves after a step whose gradients
/// overflow and doubles after `window` steps in a row without one; a static
/// one stays `init`.
struct LossScaling {
  bool dynamic = true;
  double init = 65536.0;
  int64_t window = 2000;
};

struct Argument {
  ValueId value = kNoValue;
  ArgumentRole role = ArgumentRole::Input;
  std::string name;
  /// Index into `Program::results` of the result that is this argument's
  /// value for the next step, or -1 when the step leaves it unchanged.
  int updatedBy = -1;
  /// The learning rate the IR records: `merak.lr = 1.0e-3 : f64` on the
  /// argument, or `lr` in the function's `merak.optimizer` configuration.
  std::optional<double> defaultLearningRate;
  /// Role LossScale: the scaling the IR records.
  LossScaling lossScaling;
  /// `merak.init` of a parameter: how to make it when the loaded weights
  /// lack it ("zeros", "kaiming_uniform"); empty: it must be there.
  std::string init;
  /// `merak.sharding`: how the global value is split over the mesh; this
  /// rank holds the block it gives (replicated when absent).
  Sharding sharding;
  /// `merak.value = N` (role Value), else -1.
  int64_t pipelineValue = -1;
  /// `merak.stored_shape`: the shape the tensor is loaded from and saved
  /// as, of which the program's global value is a row-major reshape (the
  /// sections of a fused projection); empty when they are the same.
  std::vector<int64_t> storedShape;

  bool isState() const {
    return role == ArgumentRole::Param || role == ArgumentRole::Buffer ||
           role == ArgumentRole::OptState;
  }
};

struct ResultInfo {
  ValueId value = kNoValue;
  bool isLoss = false;
  /// Index into `Program::arguments` this result replaces, or -1.
  int updatesArgument = -1;
  Sharding sharding; // merak.sharding
  /// Pipeline stage functions: `merak.value = N` (else -1), and the
  /// parameter of a `merak.grad = "name"` result (else empty).
  int64_t pipelineValue = -1;
  std::string gradName;
};

/// A process group this rank belongs to (one per distinct list of mesh
/// axes the program's collectives use).
struct ProcessGroupSpec {
  std::vector<int64_t> meshAxes;
  GroupMembership members; // global ranks in group order, this rank's index
};

struct ValueInfo {
  TensorType type;
  /// Index of the defining instruction; -1 for arguments and constants.
  int definedBy = -1;
  /// Filled by `planProgram`: index of the last instruction reading it, -1
  /// when nothing reads it, `kKeepAlive` for function results.
  int lastUse = -1;
  /// Filled by `planProgram`: the storage buffer the value lives in.
  int buffer = -1;
};
constexpr int kKeepAlive = 1 << 30;

struct ProgramConstant {
  ValueId value = kNoValue;
  HostTensor data;
};

struct Program {
  std::string function;
  std::vector<ValueInfo> values;
  std::vector<Argument> arguments;
  std::vector<ResultInfo> results;
  std::vector<ProgramConstant> constants;
  std::vector<Instruction> instructions;
  /// The chains the `fused` instructions run (`OpAttrs::index` of one is
  /// its chain's index here).
  std::vector<FusedKernel> fusedKernels;
  /// Index into `results` of the loss (merak.loss, else the only rank-0
  /// float result), or -1.
  int lossResult = -1;
  /// Index into `results` of the global gradient norm (merak.grad_norm,
  /// returned when gradients are clipped), or -1.
  int gradNormResult = -1;
  /// Index into `results` of `merak.nonfinite_grads` (0, or NaN when a
  /// gradient overflowed; returned with a loss scale), or -1.
  int nonFiniteGradsResult = -1;

  /// The mesh of an SPMD program (`mesh.mesh`), absent for a program of
  /// one process.
  std::optional<MeshLayout> mesh;
  /// Filled by `bindToRank`: the rank the program runs as and its groups.
  int64_t rank = 0;
  std::vector<ProcessGroupSpec> groups;

  /// Filled by `planProgram`: the instruction after which the loss is
  /// known (its definition, or the wait of the collective that defines it),
  /// and so is `nonFiniteGradsResult`: the step may end there without
  /// changing any state; -1 when none defines them.
  int lossInstruction = -1;
  int64_t plannedPeakBytes = 0;
  /// Filled by `planProgram`: the size of the arena the fresh results that
  /// die within the step are placed in (offsets in `ResultStorage`).
  int64_t arenaBytes = 0;

  const Argument *findArgument(ArgumentRole role) const;
  bool trains() const { return findArgument(ArgumentRole::LearningRate); }
  /// Processes the program runs on: the mesh size, 1 without a mesh.
  int64_t worldSize() const { return mesh ? mesh->size() : 1; }
};

/// Computes last uses, release points, views and in-place reuse, the
/// planned peak of live buffers, and the arena: every fresh buffer that
/// dies within the step gets a fixed offset, buffers live at the same time
/// never overlapping (largest first, each at the lowest offset that fits).
/// In-place reuse is decided for elementwise ops and optimizer updates whose
/// operand has the result's type and dies there with every view of its storage;
/// an argument's storage is reused only when the step replaces that argument
/// and only after the loss is known, so a step dropped for a non-finite loss
/// leaves the state intact. The storage an overlapped collective reads stays
/// live, and unwritten, until its wait.
absl::Status planProgram(Program &program);

/// How the executor runs a program's communicating collectives.
enum class CollectiveMode : uint8_t {
  /// Each collective is started where it stands and completed by a `wait`
  /// right before the first instruction that reads its result, so the
  /// kernels in between overlap the communication.
  Overlapped,
  /// Each collective returns when it is done (`--sync-collectives`).
  Blocking,
};

/// How `bindToRank` prepares a program for its backend.
struct BindOptions {
  CollectiveMode collectives = CollectiveMode::Overlapped;
  /// Fold casts into the ops around them (`foldCasts`), then run chains of
  /// elementwise ops as single kernels (`fuseElementwise`).
  bool fuseElementwise = false;

  BindOptions(CollectiveMode collectives = CollectiveMode::Overlapped,
              bool fuseElementwise = false)
      : collectives(collectives), fuseElementwise(fuseElementwise) {}
};

/// Specializes an SPMD program for `rank`: records its process groups (one
/// per distinct list of mesh axes, in order of first use), turns each
/// `all_slice` into a `slice` of the rank's block, marks collectives over a
/// group of one as identities, and plans the program again. A program
/// without a mesh takes rank 0 only.
///
/// `Overlapped` also schedules the waits: a collective's wait goes right
/// before the first instruction that reads its result, or at the end when
/// nothing does; views of a pending result (reshape, permute, slice,
/// select, expand, which read no data) move behind the wait with it. The
/// collectives keep their order, so every rank issues them in the same
/// order. With `fuseElementwise`, the casts an op can do itself are folded
/// into it and chains of elementwise ops become `fused` instructions
/// (Fusion.h) before the program is planned.
absl::Status bindToRank(Program &program, int64_t rank,
                        const BindOptions &options = BindOptions());

/// A readable listing of the program and its plan (for --print-program and
/// tests).
std::string printProgram(const Program &program);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_PROGRAM_H

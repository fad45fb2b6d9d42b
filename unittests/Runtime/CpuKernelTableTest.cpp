//===- CpuKernelTableTest.cpp - the CPU backend's kernel table ------------===//
//
// The op families (lib/Runtime/CPU/*.cpp) register one kernel for every op
// kind the executor runs as a kernel, none for the collectives and `wait`
// (which go to the communicator), and no kind twice; the backend answers
// `supports` from that table and names an op it has no kernel for.
//
//===----------------------------------------------------------------------===//

#include "../../lib/Runtime/CPU/CpuKernels.h"
#include "merak/Runtime/CPU/CpuBackend.h"

#include "gtest/gtest.h"

#include <stdexcept>
#include <string>
#include <vector>

using namespace merak::runtime;

namespace {

/// Every op kind, from the list `OpKind` is generated from.
std::vector<OpKind> allOpKinds() {
  return {
#define MERAK_OP_KIND(Name, Mnemonic) OpKind::Name,
      MERAK_RUNTIME_OPS(MERAK_OP_KIND)
#undef MERAK_OP_KIND
  };
}

/// The collectives and waits run on the communicator; a `fused` chain, on
/// this backend, as its members one by one (the executor does).
bool runsOnCommunicator(OpKind kind) {
  return isCollective(kind) || kind == OpKind::Wait;
}
bool hasNoCpuKernel(OpKind kind) {
  return runsOnCommunicator(kind) || kind == OpKind::Fused;
}

using RegisterFn = void (*)(cpu::KernelTable &);

const std::vector<std::pair<const char *, RegisterFn>> &families() {
  static const std::vector<std::pair<const char *, RegisterFn>> all = {
      {"elementwise", cpu::registerElementwiseKernels},
      {"linear algebra", cpu::registerLinearAlgebraKernels},
      {"attention", cpu::registerAttentionKernels},
      {"normalization", cpu::registerNormalizationKernels},
      {"shape", cpu::registerShapeKernels},
      {"reductions", cpu::registerReductionKernels},
      {"convolution", cpu::registerConvolutionKernels},
      {"losses", cpu::registerLossKernels},
      {"optimizers", cpu::registerOptimizerKernels},
  };
  return all;
}

TEST(CpuKernelTableTest, EveryOpButTheCollectivesHasAKernel) {
  std::vector<OpKind> kinds = allOpKinds();
  ASSERT_EQ(kinds.size(), kNumOpKinds);
  const cpu::KernelTable &table = cpu::kernelTable();
  for (OpKind kind : kinds) {
    if (hasNoCpuKernel(kind))
      EXPECT_EQ(table.find(kind), nullptr)
          << opFullName(kind) << " runs elsewhere";
    else
      EXPECT_NE(table.find(kind), nullptr)
          << "no CPU kernel for " << opFullName(kind);
  }
}

TEST(CpuKernelTableTest, EachKindIsRegisteredByOneFamily) {
  // Each family into a table of its own: none is empty, and together they
  // register exactly the kinds of the backend's table, each once.
  std::vector<int> owners(kNumOpKinds, 0);
  for (const auto &[name, registerKernels] : families()) {
    cpu::KernelTable own("CPU");
    registerKernels(own);
    int count = 0;
    for (OpKind kind : allOpKinds())
      if (own.find(kind)) {
        ++count;
        ++owners[size_t(kind)];
      }
    EXPECT_GT(count, 0) << "the " << name << " family registers nothing";
  }
  for (OpKind kind : allOpKinds())
    EXPECT_EQ(owners[size_t(kind)], hasNoCpuKernel(kind) ? 0 : 1)
        << opFullName(kind);
}

TEST(CpuKernelTableTest, ASecondKernelForAKindIsRejected) {
  cpu::KernelTable table("CPU");
  cpu::registerReductionKernels(table);
  cpu::Kernel sum = table.find(OpKind::ReduceSum);
  ASSERT_NE(sum, nullptr);
  try {
    table.add(OpKind::ReduceSum, [](cpu::Ctx &) {});
    FAIL() << "a second kernel for reduce_sum was accepted";
  } catch (const std::logic_error &e) {
    EXPECT_NE(std::string(e.what()).find("merak.reduce_sum"), std::string::npos)
        << e.what();
  }
  // The first registration stands.
  EXPECT_EQ(table.find(OpKind::ReduceSum), sum);
  // A family registered twice is rejected at its first kind.
  EXPECT_THROW(cpu::registerReductionKernels(table), std::logic_error);
}

TEST(CpuKernelTableTest, SupportsAnswersFromTheTable) {
  std::unique_ptr<Backend> backend = createCpuBackend({});
  for (OpKind kind : allOpKinds())
    EXPECT_EQ(backend->supports(kind), !hasNoCpuKernel(kind))
        << opFullName(kind);
  for (OpKind kind :
       {OpKind::AllReduce, OpKind::AllGather, OpKind::ReduceScatter,
        OpKind::AllToAll, OpKind::AllSlice, OpKind::Broadcast, OpKind::Wait})
    EXPECT_FALSE(backend->supports(kind)) << opFullName(kind);
}

TEST(CpuKernelTableTest, AnOpWithoutAKernelIsNamed) {
  // The executor sends collectives to the communicator; one that reaches
  // the backend fails with its name rather than running anything.
  std::unique_ptr<Backend> backend = createCpuBackend({});
  Instruction inst;
  inst.kind = OpKind::AllGather;
  KernelCall call;
  call.instruction = &inst;
  absl::Status status = backend->execute(call);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(status.message()).find("mesh.all_gather"),
            std::string::npos)
      << status;
}

} // namespace

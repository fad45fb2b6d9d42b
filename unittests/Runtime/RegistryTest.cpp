//===- RegistryTest.cpp - backends and communicators by name, op support --===//

#include "merak/Runtime/Registry.h"
#include "merak/Runtime/TorchIO.h"

#include "FakeBackend.h"

#include "gtest/gtest.h"

using namespace merak::runtime;

namespace {

Instruction instruction(OpKind kind, std::vector<ValueId> operands,
                        ValueId result, std::string location) {
  Instruction inst;
  inst.kind = kind;
  inst.operands = std::move(operands);
  inst.results = {result};
  inst.location = std::move(location);
  return inst;
}

TEST(RegistryTest, BuiltinComponentsAreThoseOfTheBuild) {
  registerBuiltinComponents();
  registerBuiltinComponents(); // idempotent
  std::vector<std::string> backends;
  if (haveTorchIO())
    backends.push_back("cpu");
  if (MERAK_TEST_HAVE_CUDA)
    backends.push_back("cuda");
  EXPECT_EQ(backendNames(), backends);
  // Gloo with LibTorch, and the device communicator's path on Gloo's own
  // calls beside it; without LibTorch, Gloo's own calls on host copies of
  // the GPU's tensors; NCCL wherever CUDA and NCCL are (the runtime built
  // alone bootstraps it through a directory).
  std::vector<std::string> comms;
  if (haveTorchIO()) {
    comms.push_back("gloo");
    comms.push_back("gloo-device");
  } else if (MERAK_TEST_HAVE_STAGED_GLOO) {
    comms.push_back("gloo");
  }
  if (MERAK_TEST_HAVE_NCCL)
    comms.push_back("nccl");
  EXPECT_EQ(communicatorNames(), comms);
  if (haveTorchIO()) {
    ASSERT_TRUE(findBackend("cpu").ok());
    EXPECT_EQ((*findBackend("cpu"))->name, "cpu");
  }
  absl::StatusOr<const BackendEntry *> missing = findBackend("tpu");
  ASSERT_FALSE(missing.ok());
  std::string has = backends.empty() ? "none" : backends[0];
  if (backends.size() == 2)
    has += ", " + backends[1];
  EXPECT_EQ(missing.status().message(),
            "no backend 'tpu' in this build; it has: " + has);
  absl::StatusOr<const CommunicatorEntry *> comm = findCommunicator("mpi");
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("no communicator 'mpi' in this "
                                         "build; it has: "),
            std::string::npos);
  // NCCL moves the CUDA backend's tensors, where the build has it.
  if (MERAK_TEST_HAVE_NCCL) {
    absl::StatusOr<const CommunicatorEntry *> nccl = findCommunicator("nccl");
    ASSERT_TRUE(nccl.ok());
    EXPECT_EQ((*nccl)->device, "cuda");
    EXPECT_TRUE((*nccl)->create && (*nccl)->available && (*nccl)->createLink);
    if (haveTorchIO())
      EXPECT_EQ((*findCommunicator("gloo"))->device, "");
  }
}

TEST(RegistryTest, RegisteredBackendIsFoundAndCreated) {
  registerBackend(
      {"fake", "a test backend",
       [](const DeviceOptions &) -> absl::StatusOr<std::unique_ptr<Backend>> {
         return std::unique_ptr<Backend>(std::make_unique<FakeBackend>());
       },
       nullptr});
  absl::StatusOr<const BackendEntry *> entry = findBackend("fake");
  ASSERT_TRUE(entry.ok());
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      (*entry)->create(DeviceOptions());
  ASSERT_TRUE(backend.ok());
  EXPECT_EQ((*backend)->name(), "fake");
}

TEST(RegistryTest, MissingKernelsAreNamedWithTheirFirstLocation) {
  Program p;
  p.function = "train_step";
  TensorType t{DType::F32, {2}};
  p.values.assign(6, ValueInfo{t});
  Argument x;
  x.value = 0;
  p.arguments = {x};
  p.instructions = {instruction(OpKind::Add, {0, 0}, 1, "model.py:3:1"),
                    instruction(OpKind::Tanh, {1}, 2, "model.py:4:1"),
                    instruction(OpKind::AllReduce, {2}, 3, ""),
                    instruction(OpKind::Tanh, {3}, 4, "model.py:9:1"),
                    instruction(OpKind::Gelu, {4}, 5, "")};
  FakeBackend backend;
  absl::Status status = checkBackendSupports(p, backend);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  // Each op once, at its first place; collectives go to the communicator.
  EXPECT_EQ(status.message(),
            "the 'fake' backend has no kernel for merak.tanh (at "
            "model.py:4:1), merak.gelu, which @train_step uses");

  p.instructions.resize(1);
  EXPECT_TRUE(checkBackendSupports(p, backend).ok());
}

} // namespace

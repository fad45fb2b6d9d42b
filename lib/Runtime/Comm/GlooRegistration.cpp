//===- GlooRegistration.cpp - Gloo collectives under the name "gloo" ------===//

#include "merak/Runtime/Registry.h"

namespace merak::runtime {

// GlooCollectives.cpp.
absl::StatusOr<std::unique_ptr<Communicator>>
createGlooDeviceCommunicator(DistributedJob &job, const Program &program,
                             Backend &backend,
                             std::chrono::milliseconds timeout);

void registerGlooCommunicator() {
  auto join = [](const RendezvousOptions &options,
                 DistributedJob::FailureHandler onFailure) {
    return DistributedJob::join(options, std::move(onFailure));
  };
  registerCommunicator({"gloo",
                        "Gloo over TCP (c10d), rendezvous through a TCPStore "
                        "at MASTER_ADDR:MASTER_PORT",
                        join});
  // The path GPUs take (NCCL's, and the staged Gloo of the runtime built
  // alone) run by CPU ranks: a test of it, as --p2p=gloo-channels is of
  // the pipeline's.
  CommunicatorEntry device;
  device.name = "gloo-device";
  device.description =
      "the device communicator (NCCL's path) on the CPU backend's tensors "
      "with the Gloo library's own calls; rendezvous as gloo's";
  device.join = join;
  device.create = createGlooDeviceCommunicator;
  registerCommunicator(std::move(device));
}

} // namespace merak::runtime

//===- NcclRegistration.cpp - NCCL collectives under the name "nccl" ------===//

#include "merak/Runtime/CUDA/Nccl.h"
#include "merak/Runtime/Registry.h"

namespace merak::runtime {

void registerNcclCommunicator() {
  CommunicatorEntry entry;
  entry.name = "nccl";
  entry.description =
      ncclDescription() +
      " on the CUDA backend's memory, one GPU per rank; rendezvous through "
      "the TCPStore at MASTER_ADDR:MASTER_PORT, as Gloo's";
  entry.join = [](const RendezvousOptions &options,
                  DistributedJob::FailureHandler onFailure) {
    return DistributedJob::join(options, std::move(onFailure));
  };
  entry.create = createNcclCommunicator;
  entry.createLink = createNcclPeerLink;
  entry.device = "cuda";
  entry.available = ncclUsable;
  registerCommunicator(std::move(entry));
}

} // namespace merak::runtime
